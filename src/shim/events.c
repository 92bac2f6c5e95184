/* SPDX-License-Identifier: Apache-2.0 */
/* events.c - the publisher of task events to containerd (see events.h). */
#include "shim/events.h"
#include "shim/log.h"
#include "shim/ttrpc.h"
#include "common/util.h"
#include "events.pb-c.h"

#include <poll.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#define EV_QUEUE_MAX 2048
#define EV_TRIES 6
#define EV_TIMEOUT_MS 5000
#define EV_SERVICE "containerd.services.events.ttrpc.v1.Events"

struct ev_item {
	struct ev_item *next;
	char *topic;
	unsigned char *data;       /* the ForwardRequest, packed */
	size_t len;
};

struct events {
	char path[108];
	char *ns;
	pthread_mutex_t mu;
	pthread_cond_t cond, idle;
	struct ev_item *head, *tail;
	int n;
	bool stop, busy;
	pthread_t thr;
	int fd;
	uint32_t stream;
};

static int ev_connect(struct events *e)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", e->path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* One Forward call on e->fd: 0 when containerd answered OK. */
static int ev_call(struct events *e, const struct ev_item *it)
{
	cleanup_free unsigned char *req = NULL, *frame = NULL;
	struct ttrpc_reader rd;
	size_t len, flen;
	int r = -EIO;

	req = ttrpc_request_encode(EV_SERVICE, "Forward", e->ns, it->data, it->len,
				   (int64_t)EV_TIMEOUT_MS * 1000000, &len);
	if (!req)
		return -EMSGSIZE;
	e->stream += 2;
	frame = ttrpc_frame_new(e->stream, TTRPC_REQUEST, 0, req, len, &flen);
	if (!frame)
		return -EMSGSIZE;
	if ((r = write_full(e->fd, frame, flen)))
		return r;
	ttrpc_reader_init(&rd);
	for (;;) {
		unsigned char buf[4096];
		struct pollfd p = { .fd = e->fd, .events = POLLIN };
		struct ttrpc_hdr h;
		const unsigned char *data;
		ssize_t got;
		long used;
		size_t off = 0;

		if (poll(&p, 1, EV_TIMEOUT_MS) <= 0) {
			r = -ETIMEDOUT;
			break;
		}
		got = read(e->fd, buf, sizeof(buf));
		if (got <= 0) {
			r = got < 0 ? -errno : -ECONNRESET;
			break;
		}
		while (off < (size_t)got) {
			if ((used = ttrpc_reader_feed(&rd, buf + off, (size_t)got - off)) < 0) {
				r = (int)used;
				goto out;
			}
			off += (size_t)used;
			if (!ttrpc_reader_frame(&rd, &h, &data))
				continue;
			if (h.type != TTRPC_RESPONSE || h.stream != e->stream)
				continue;
			int code;
			char msg[256];
			if (ttrpc_response_decode(data, h.len, &code, msg, sizeof(msg)))
				r = -EBADMSG;
			else if (code) {
				shim_log("event %s: containerd answered %d: %s", it->topic, code, msg);
				r = -EIO;
			} else
				r = 0;
			goto out;
		}
	}
out:
	ttrpc_reader_free(&rd);
	return r;
}

static void *ev_thread(void *arg)
{
	struct events *e = arg;

	pthread_mutex_lock(&e->mu);
	for (;;) {
		struct ev_item *it;
		int r = -EIO;

		while (!e->head && !e->stop)
			pthread_cond_wait(&e->cond, &e->mu);
		if (!e->head)
			break;
		it = e->head;
		e->busy = true;
		pthread_mutex_unlock(&e->mu);
		for (int t = 0; t < EV_TRIES; t++) {
			if (t)
				sleep((unsigned)t);
			if (e->fd < 0)
				e->fd = ev_connect(e);
			if (e->fd >= 0 && (r = ev_call(e, it)) == 0)
				break;
			if (e->fd >= 0)
				close(e->fd);
			e->fd = -1;
		}
		if (r)
			shim_log("event %s dropped after %d tries: %s", it->topic, EV_TRIES,
				 strerror(-r));
		pthread_mutex_lock(&e->mu);
		e->head = it->next;
		if (!e->head)
			e->tail = NULL;
		e->n--;
		e->busy = false;
		free(it->topic);
		free(it->data);
		free(it);
		pthread_cond_broadcast(&e->idle);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

struct events *events_open(const char *address, const char *ns)
{
	struct events *e = xcalloc(1, sizeof(*e));

	if (address && !strncmp(address, "unix://", 7))
		address += 7;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cond, NULL);
	pthread_cond_init(&e->idle, NULL);
	e->ns = xstrdup(ns ? ns : "default");
	e->fd = -1;
	e->stream = 1;
	if (!address || !*address || strlen(address) >= sizeof(e->path)) {
		e->path[0] = 0;
		return e;
	}
	snprintf(e->path, sizeof(e->path), "%s", address);
	if (pthread_create(&e->thr, NULL, ev_thread, e)) {
		e->path[0] = 0;
		shim_log("events: no publisher thread; events are dropped");
	}
	return e;
}

void events_publish(struct events *e, const char *topic, const char *type,
		    const ProtobufCMessage *msg)
{
	K8events__ForwardRequest fr = K8EVENTS__FORWARD_REQUEST__INIT;
	K8events__Envelope env = K8EVENTS__ENVELOPE__INIT;
	K8task__Timestamp ts = K8TASK__TIMESTAMP__INIT;
	K8task__Any any = K8TASK__ANY__INIT;
	cleanup_free unsigned char *ev = NULL;
	cleanup_free char *url = NULL;
	struct ev_item *it;
	struct timespec now;
	size_t len;

	if (!e || !e->path[0])
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	ts.seconds = now.tv_sec;
	ts.nanos = (int32_t)now.tv_nsec;
	ev = ttrpc_pack(msg, &len);
	url = xasprintf("containerd.events.%s", type);
	any.type_url = url;
	any.value.data = ev;
	any.value.len = len;
	env.timestamp = &ts;
	env.namespace_ = e->ns;
	env.topic = (char *)topic;
	env.event = &any;
	fr.envelope = &env;
	it = xcalloc(1, sizeof(*it));
	it->topic = xstrdup(topic);
	it->data = ttrpc_pack(&fr.base, &it->len);
	pthread_mutex_lock(&e->mu);
	if (e->n >= EV_QUEUE_MAX || e->stop) {
		pthread_mutex_unlock(&e->mu);
		shim_log("event %s dropped: the queue is full", topic);
		free(it->topic);
		free(it->data);
		free(it);
		return;
	}
	if (e->tail)
		e->tail->next = it;
	else
		e->head = it;
	e->tail = it;
	e->n++;
	pthread_cond_signal(&e->cond);
	pthread_mutex_unlock(&e->mu);
}

void events_close(struct events *e, int timeout_ms)
{
	struct timespec dl;

	if (!e)
		return;
	if (e->path[0]) {
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		pthread_mutex_lock(&e->mu);
		while ((e->head || e->busy) &&
		       pthread_cond_timedwait(&e->idle, &e->mu, &dl) == 0)
			;
		e->stop = true;
		pthread_cond_signal(&e->cond);
		pthread_mutex_unlock(&e->mu);
	}
}
