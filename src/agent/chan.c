/* SPDX-License-Identifier: Apache-2.0 */
/* chan.c - the control channel: the virtio-serial port "kosa8.agent", its framing,
 * the bounded outgoing queue, and the host connecting, leaving and coming back.
 *
 * How the guest driver (drivers/char/virtio_console.c) reports the host end:
 *   - host not connected: poll() says POLLHUP (and POLLIN), read() returns 0, write()
 *     would block (EAGAIN for us: the fd is nonblocking);
 *   - every change of the host's state wakes the port's wait queue.
 * The port is in the epoll set edge-triggered, so each wake-up is one event whose
 * mask tells the current state: POLLHUP = gone, no POLLHUP = there. On a new
 * connection the reader is reset and HELLO goes out first; when the host leaves, the
 * queue is dropped (QEMU discards what the old host did not read, so the next host
 * starts on a frame boundary) and the running streams are orphaned (proc.c).
 *
 * The driver only reports the current state: a host that closes and reconnects within
 * one turn of our loop goes unnoticed. So a host may open its session with a HELLO of
 * its own, which we answer with ours (chan_session).
 *
 * Writes: the driver takes at most 32 KiB per write() as one buffer; we gather queued
 * frames up to that size per write. Above CHAN_HIGH queued bytes, pipes and the port are
 * no longer read (backpressure), until the queue drains below CHAN_LOW.
 */
#include "agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <time.h>

#define CHAN_PORT_NAME "kosa8.agent"
#define CHAN_WRITE_MAX 32768u

int chan_find_port(const char *want, char *dev, size_t len)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	struct dirent *de;
	int r = -ENOENT;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char path[300], *name = NULL;
		size_t n;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
		if (read_file(path, 4096, &name, &n) < 0) /* sysfs says 4096 bytes */
			continue;
		while (n && (name[n - 1] == '\n' || name[n - 1] == ' '))
			name[--n] = '\0';
		if (!strcmp(name, want)) {
			snprintf(dev, len, "/dev/%.40s", de->d_name);
			r = 0;
		}
		free(name);
		if (!r)
			break;
	}
	closedir(d);
	return r;
}

/* Find and open the port. It appears when the device's control queue has been
 * processed, which can be a little after init starts: poll for it. Without a port the
 * agent is useless, but it must not exit (PID 1), so it keeps looking. */
int chan_open(struct agent *a)
{
	struct chan *c = &a->chan;
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	unsigned tries = 0;
	int fd;

	for (;;) {
		if (chan_find_port(CHAN_PORT_NAME, c->dev, sizeof(c->dev)) == 0) {
			fd = open(c->dev, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
			if (fd >= 0)
				break;
			agent_log("open %s: %s", c->dev, strerror(errno));
		}
		if (++tries == 500)
			agent_log("no virtio-serial port named %s yet; still looking", CHAN_PORT_NAME);
		if (tries > 300)
			ts.tv_nsec = 200 * 1000 * 1000;
		nanosleep(&ts, NULL);
	}
	proto_reader_init(&c->rd);
	c->w.kind = W_CHAN;
	c->w.fd = fd;
	c->w.owner = NULL;
	if (agent_watch(a, &c->w, EPOLLIN | EPOLLOUT | EPOLLET) < 0)
		agent_fatal("epoll_ctl %s: %s", c->dev, strerror(errno));
	return 0;
}

int chan_congested(const struct agent *a)
{
	return a->chan.congested;
}

static void chan_drop_queue(struct chan *c)
{
	struct outbuf *ob, *next;

	for (ob = c->head; ob; ob = next) {
		next = ob->next;
		free(ob);
	}
	c->head = c->tail = NULL;
	c->queued = 0;
}

static void chan_read(struct agent *a);

static void chan_flush(struct agent *a)
{
	struct chan *c = &a->chan;

	while (c->head && c->connected) {
		struct iovec iov[64];
		struct outbuf *ob;
		size_t total = 0;
		int cnt = 0;
		ssize_t w;

		for (ob = c->head; ob && cnt < (int)ARRAY_SIZE(iov); ob = ob->next) {
			size_t left = ob->len - ob->off;

			if (total + left > CHAN_WRITE_MAX) {
				if (cnt)
					break;
				left = CHAN_WRITE_MAX;
			}
			iov[cnt].iov_base = ob->data + ob->off;
			iov[cnt++].iov_len = left;
			total += left;
		}
		w = writev(c->w.fd, iov, cnt);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				agent_log("write %s: %s", c->dev, strerror(errno));
			break;
		}
		c->queued -= (size_t)w;
		while (w > 0) {
			ob = c->head;
			size_t left = ob->len - ob->off;

			if ((size_t)w < left) {
				ob->off += (size_t)w;
				break;
			}
			w -= (ssize_t)left;
			c->head = ob->next;
			if (!c->head)
				c->tail = NULL;
			free(ob);
		}
	}
	if (c->congested && c->queued < CHAN_LOW) {
		c->congested = 0;
		proc_resume_all(a);
		if (c->in_pending)
			chan_read(a);
	}
}

int chan_send(struct agent *a, uint16_t type, uint16_t flags, uint32_t id, const void *p, size_t n)
{
	struct chan *c = &a->chan;
	struct proto_hdr h = { .len = (uint32_t)n, .type = type, .flags = flags, .id = id };
	struct outbuf *ob;

	if (!c->connected)
		return -ENOTCONN;
	if (n > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	ob = xmalloc(sizeof(*ob) + PROTO_HDR_LEN + n);
	ob->next = NULL;
	ob->len = PROTO_HDR_LEN + n;
	ob->off = 0;
	proto_hdr_encode(&h, ob->data);
	if (n)
		memcpy(ob->data + PROTO_HDR_LEN, p, n);
	if (c->tail)
		c->tail->next = ob;
	else
		c->head = ob;
	c->tail = ob;
	c->queued += ob->len;
	if (c->queued > CHAN_HIGH)
		c->congested = 1;
	chan_flush(a);
	return 0;
}

int chan_send_json(struct agent *a, uint16_t type, uint32_t id, json_t *obj)
{
	char *s;
	int r;

	if (!obj)
		return -ENOMEM;
	s = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!s)
		return -ENOMEM;
	if (strlen(s) > PROTO_MAX_JSON) {
		agent_log("dropping a %zu-byte %s frame (cap %u)", strlen(s), proto_type_name(type),
			  PROTO_MAX_JSON);
		free(s);
		return -EMSGSIZE;
	}
	r = chan_send(a, type, 0, id, s, strlen(s));
	free(s);
	return r;
}

int chan_resp_ok(struct agent *a, uint32_t id, json_t *obj)
{
	if (!obj)
		obj = json_object();
	json_object_set_new(obj, "ok", json_true());
	return chan_send_json(a, PROTO_RESP, id, obj);
}

int chan_resp_err(struct agent *a, uint32_t id, const struct k8_err *err)
{
	int code = err->code ? -err->code : EIO;

	return chan_send_json(a, PROTO_RESP, id,
			      json_pack("{s:b,s:s,s:i}", "ok", 0, "error",
					err->msg[0] ? err->msg : strerror(code), "errno", code));
}

int chan_event_json(struct agent *a, json_t *obj)
{
	return chan_send_json(a, PROTO_EVENT, 0, obj);
}

/* Every HELLO starts a host session, whose version the host has not chosen yet. Its
 * "proto" is the version the session starts in, our lowest: 1 for every agent that
 * speaks 1, which is what a host of version 1 (which never chooses) expects. */
static void chan_hello(struct agent *a)
{
	json_t *h = json_pack("{s:i,s:s,s:s,s:I,s:I,s:i}", "proto", AGENT_PROTO_MIN, "agent",
			      AGENT_VERSION, "kernel", a->kernel, "boot_ms", (json_int_t)a->boot_ms,
			      "uptime_ms", (json_int_t)agent_boottime_ms(), "containers",
			      ctr_count(a));

	a->proto = 0;
#if AGENT_PROTO_MAX >= 2
	/* Version 1's HELLO named one version; from 2 on it names the range. */
	json_object_set_new(h, "proto_min", json_integer(AGENT_PROTO_MIN));
	json_object_set_new(h, "proto_max", json_integer(AGENT_PROTO_MAX));
#endif
	chan_send_json(a, PROTO_HELLO, 0, h);
}

/* A host HELLO starts a new host session on a connection we may not have seen open
 * (a close and reopen faster than our loop turns looks like nothing to us): the
 * previous host's streams are orphaned, and the host gets our HELLO. */
static void chan_session(struct agent *a)
{
	proc_orphan_all(a);
	ctr_drop_waiters(a);
	req_drop_waiters(a);
	proc_resume_all(a);
	chan_hello(a);
}

static void chan_frame(struct agent *a, const struct proto_hdr *h, const unsigned char *p)
{
	uint32_t v = 0;

	if (h->len == 4)
		v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	switch (h->type) {
	case PROTO_REQ:
		req_handle(a, h->id, p, h->len);
		break;
	case PROTO_STDIN:
		proc_stdin(a, h->id, p, h->len, h->flags & PROTO_F_EOF);
		break;
	case PROTO_CREDIT:
		proc_credit(a, h->id, v);
		break;
	case PROTO_SIGNAL:
		proc_signal(a, h->id, v);
		break;
	case PROTO_PING:
		chan_send(a, PROTO_PONG, 0, h->id, p, h->len);
		break;
	case PROTO_HELLO:
		chan_session(a);
		break;
	case PROTO_PONG:
		break;
	default:
		agent_log("ignoring a %s frame from the host", proto_type_name(h->type));
		break;
	}
}

static void chan_feed(struct agent *a, const unsigned char *buf, size_t n)
{
	struct chan *c = &a->chan;
	size_t off = 0;

	while (off < n && !c->broken) {
		struct proto_hdr h;
		const unsigned char *p;
		long used = proto_reader_feed(&c->rd, buf + off, n - off);

		if (used < 0) {
			/* The stream cannot be resynchronised: ignore the host until it
			 * reconnects (docs/protocol.md). */
			agent_log("bad frame header from the host: input ignored until it reconnects");
			c->broken = 1;
			break;
		}
		off += (size_t)used;
		while (proto_reader_frame(&c->rd, &h, &p))
			chan_frame(a, &h, p);
	}
}

static void chan_lost(struct agent *a)
{
	struct chan *c = &a->chan;

	if (c->connected)
		agent_log("host disconnected; containers keep running");
	c->connected = 0;
	c->congested = 0;
	c->in_pending = 0;
	chan_drop_queue(c);
	proto_reader_free(&c->rd);
	proto_reader_init(&c->rd);
	c->broken = 0;
	proc_orphan_all(a);
	ctr_drop_waiters(a);
	req_drop_waiters(a);
	proc_resume_all(a);
}

static void chan_read(struct agent *a)
{
	struct chan *c = &a->chan;

	for (;;) {
		ssize_t n;

		if (c->congested) {
			c->in_pending = 1;
			return;
		}
		n = read(c->w.fd, a->iobuf, sizeof(a->iobuf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				agent_log("read %s: %s", c->dev, strerror(errno));
			c->in_pending = 0;
			return;
		}
		if (n == 0) { /* no data and no host */
			chan_lost(a);
			return;
		}
		if (c->connected)
			chan_feed(a, a->iobuf, (size_t)n);
	}
}

void chan_event(struct agent *a, uint32_t events)
{
	struct chan *c = &a->chan;

	if (events & (EPOLLHUP | EPOLLERR)) {
		/* Host gone: whatever it left unread is stale; drop it. */
		ssize_t n;

		while ((n = read(c->w.fd, a->iobuf, sizeof(a->iobuf))) > 0 || (n < 0 && errno == EINTR))
			;
		chan_lost(a);
		return;
	}
	if (!c->connected) {
		c->connected = 1;
		c->connects++;
		c->broken = 0;
		proto_reader_free(&c->rd);
		proto_reader_init(&c->rd);
		chan_drop_queue(c);
		if (c->connects > 1)
			agent_log("host connected again");
		chan_hello(a);
	}
	if (events & EPOLLIN)
		chan_read(a);
	if (events & EPOLLOUT)
		chan_flush(a);
}
