/* SPDX-License-Identifier: Apache-2.0 */
/* server.c - the shim's ttRPC server (shim.h).
 *
 * One thread accepts; each connection gets a reader thread; each request a thread of its
 * own (Wait blocks until its process exits, and containerd sends every call of a task on
 * one connection), at most SERVER_MAX_CALLS at once per connection: beyond that the
 * reader stops reading until one ends. Answers are written whole under the connection's
 * write lock. A frame that fails ttrpc_hdr_check, a request that is not a Request, or a
 * data frame (no method here streams) ends the connection; containerd then treats the
 * shim as gone, which is the honest answer to a peer that speaks something else.
 */
#include "shim/shim.h"
#include "shim/log.h"
#include "shim/ttrpc.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#define SERVER_MAX_CALLS 64
#define TASK_SERVICE "containerd.task.v2.Task"

struct conn {
	struct shim *s;
	int fd;
	pthread_mutex_t wmu;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int calls;                  /* request threads running */
	bool closed;
};

struct req_arg {
	struct conn *c;
	uint32_t stream;
	unsigned char *data;
	size_t len;
};

static void conn_put(struct conn *c)
{
	bool last;

	pthread_mutex_lock(&c->mu);
	c->calls--;
	last = c->closed && c->calls == 0;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
	if (last) {
		close(c->fd);
		free(c);
	}
}

static void conn_answer(struct conn *c, uint32_t stream, struct call *call)
{
	cleanup_free unsigned char *data = NULL, *frame = NULL;
	size_t len = 0, flen = 0;

	data = ttrpc_response_encode(call->code, call->msg, call->out, call->out_len, &len);
	if (!data)
		data = ttrpc_response_encode(TTRPC_RESOURCE_EXHAUSTED, "the answer is over 4 MiB",
					     NULL, 0, &len);
	frame = ttrpc_frame_new(stream, TTRPC_RESPONSE, 0, data, len, &flen);
	if (!frame)
		return;
	pthread_mutex_lock(&c->wmu);
	if (!c->closed)
		(void)write_full(c->fd, frame, flen);
	pthread_mutex_unlock(&c->wmu);
}

static void *req_thread(void *arg)
{
	struct req_arg *a = arg;
	struct shim *s = a->c->s;
	struct ttrpc_request req;
	struct call call = { 0 };
	int r;

	r = ttrpc_request_decode(a->data, a->len, &req);
	if (r) {
		call_fail(&call, TTRPC_INVALID_ARGUMENT, "malformed ttRPC request");
	} else {
		if (req.ns && *req.ns && strcmp(req.ns, s->ns))
			call_fail(&call, TTRPC_FAILED_PRECONDITION, "this shim serves namespace %s, "
				  "not %.100s", s->ns, req.ns);
		else if (strcmp(req.service, TASK_SERVICE))
			call_fail(&call, TTRPC_UNIMPLEMENTED, "no service %.100s", req.service);
		else {
			call.in = req.payload;
			call.in_len = req.payload_len;
			task_dispatch(s, req.method, &call);
			if (call.code)
				shim_log("%s: %s", req.method, call.msg);
		}
	}
	conn_answer(a->c, a->stream, &call);
	free(call.out);
	if (!r)
		ttrpc_request_free(&req);
	free(a->data);
	conn_put(a->c);
	free(a);
	pthread_mutex_lock(&s->mu);
	if (s->shutdown) {
		s->exit_now = true;     /* its answer is out */
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	struct ttrpc_reader rd;
	unsigned char buf[65536];
	bool bad = false;

	ttrpc_reader_init(&rd);
	while (!bad) {
		ssize_t got = read(c->fd, buf, sizeof(buf));
		size_t off = 0;

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		while (off < (size_t)got && !bad) {
			struct ttrpc_hdr h;
			const unsigned char *data;
			long used = ttrpc_reader_feed(&rd, buf + off, (size_t)got - off);

			if (used < 0) {
				shim_log("ttRPC: a bad frame header (%s); closing the connection",
					 strerror((int)-used));
				bad = true;
				break;
			}
			off += (size_t)used;
			if (!ttrpc_reader_frame(&rd, &h, &data))
				continue;
			if (h.type != TTRPC_REQUEST || !(h.stream & 1)) {
				shim_log("ttRPC: a %s frame on stream %u; closing the connection",
					 h.type == TTRPC_DATA ? "data" : "response", h.stream);
				bad = true;
				break;
			}
			struct req_arg *a = xcalloc(1, sizeof(*a));
			pthread_t t;
			a->c = c;
			a->stream = h.stream;
			a->len = h.len;
			a->data = xmalloc(h.len ? h.len : 1);
			memcpy(a->data, data, h.len);
			pthread_mutex_lock(&c->mu);
			while (c->calls >= SERVER_MAX_CALLS + 1)
				pthread_cond_wait(&c->cond, &c->mu);
			c->calls++;
			pthread_mutex_unlock(&c->mu);
			if (pthread_create(&t, NULL, req_thread, a)) {
				struct call call = { 0 };
				call_fail(&call, TTRPC_RESOURCE_EXHAUSTED, "no thread for the call");
				conn_answer(c, a->stream, &call);
				free(a->data);
				free(a);
				conn_put(c);
				continue;
			}
			pthread_detach(t);
		}
	}
	ttrpc_reader_free(&rd);
	pthread_mutex_lock(&c->wmu);
	pthread_mutex_lock(&c->mu);
	c->closed = true;
	pthread_mutex_unlock(&c->mu);
	shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&c->wmu);
	conn_put(c);            /* the reader's own reference */
	return NULL;
}

static void *accept_thread(void *arg)
{
	struct shim *s = ((void **)arg)[0];
	int lfd = (int)(intptr_t)((void **)arg)[1];

	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		struct conn *c;
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
			    errno == ENFILE) {
				if (errno == EMFILE || errno == ENFILE)
					usleep(100000);
				continue;
			}
			shim_log("accept: %s", strerror(errno));
			break;
		}
		c = xcalloc(1, sizeof(*c));
		c->s = s;
		c->fd = fd;
		c->calls = 1;
		pthread_mutex_init(&c->wmu, NULL);
		pthread_mutex_init(&c->mu, NULL);
		pthread_cond_init(&c->cond, NULL);
		if (pthread_create(&t, NULL, conn_thread, c)) {
			close(fd);
			free(c);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

int server_run(struct shim *s, int listen_fd)
{
	void *arg[2] = { s, (void *)(intptr_t)listen_fd };
	pthread_t t;

	if (pthread_create(&t, NULL, accept_thread, arg))
		return -EAGAIN;
	pthread_detach(t);
	pthread_mutex_lock(&s->mu);
	while (!s->exit_now)
		pthread_cond_wait(&s->cond, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return 0;
}
