/* SPDX-License-Identifier: Apache-2.0 */
/* agentlink.c - the daemon's end of the agent protocol: one connection per running VM.
 *
 * Theory of operation. A reader thread owns the receive side: it feeds bytes into a
 * proto_reader (which validates every header), and dispatches complete frames:
 * RESP to the pending request with that id, output and EXIT to the open stream with that
 * id, stdin CREDIT to the stream, EVENTs to a callback, PING answered. Everything the
 * guest sends is hostile: frames for unknown ids are counted and dropped, a stream that
 * sends more output than its window allows is cut off, JSON is parsed with size caps,
 * and a header that breaks the framing ends the connection (marked `broken`); nothing
 * the guest sends can make the daemon allocate more than one window per open stream.
 * Writers (API threads) serialize on `wlock` and have a send timeout, so a guest that
 * stops reading its port stalls only requests to that sandbox.
 *
 * Versions. The agent's HELLO names the protocol versions it speaks; link_negotiate()
 * picks the highest one this daemon speaks too and, from version 2 on, tells the agent
 * with a first REQ {"op":"proto"}. An agent restored from a checkpoint is the agent of
 * that day: it is spoken to in its own version, or refused (docs/protocol.md).
 */
#include "common/proto.h"
#include "daemon/agentlink.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

/* The versions this kosa8d speaks. A test build may widen them (`make proto-variants`
 * builds a kosa8d that also speaks 3, to take checkpoints of an agent of the future). */
#ifndef K8D_PROTO_MIN
#define K8D_PROTO_MIN PROTO_VERSION_MIN
#endif
#ifndef K8D_PROTO_MAX
#define K8D_PROTO_MAX PROTO_VERSION_MAX
#endif
#define PROTO_REQ_TIMEOUT_MS 10000

struct stream {
	struct stream *next;
	uint32_t id;
	int efd;                        /* eventfd: readable when there is something to do */
	/* output from the agent, queued for the consumer */
	struct sframe *head, *tail;
	size_t queued;                  /* output bytes queued, <= PROTO_WINDOW + slack */
	uint32_t stdin_credit;          /* stdin bytes we may still send */
	bool exited;
	json_t *exit_info;
	bool closed_by_agent;
};

struct pending {
	struct pending *next;
	uint32_t id;
	bool done;
	json_t *resp;
};

static void stream_wake(struct stream *s)
{
	uint64_t one = 1;
	(void)!write(s->efd, &one, sizeof(one));
}

static struct stream *find_stream(struct agentlink *l, uint32_t id)
{
	for (struct stream *s = l->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static json_t *parse_json(const unsigned char *p, size_t n)
{
	json_t *v = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, NULL);
	if (v && !json_is_object(v)) {
		json_decref(v);
		v = NULL;
	}
	return v;
}

static void link_mark_broken(struct agentlink *l, const char *why)
{
	pthread_mutex_lock(&l->lock);
	if (!l->broken) {
		l->broken = true;
		snprintf(l->broken_why, sizeof(l->broken_why), "%s", why);
	}
	for (struct stream *s = l->streams; s; s = s->next)
		stream_wake(s);
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
}


/* The agent's EXIT frame ({"code","signal","oom"}) as the daemon passes it on: only
 * those keys, of the right types and ranges; a guest-chosen "error" string is escaped
 * and cut. Anything else the guest put there is dropped, so the audit record and the
 * client see a number, not the guest's JSON. Borrows `v` (may be NULL). */
static json_t *exit_info_clean(const json_t *v)
{
	json_t *o = json_object(), *x;
	char why[256];

	x = json_object_get(v, "code");
	if (json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) <= 255)
		json_object_set(o, "code", x);
	else
		json_object_set_new(o, "code", json_integer(125));
	x = json_object_get(v, "signal");
	if (json_is_integer(x) && json_integer_value(x) > 0 && json_integer_value(x) <= 64)
		json_object_set(o, "signal", x);
	json_object_set_new(o, "oom", json_boolean(json_is_true(json_object_get(v, "oom"))));
	x = json_object_get(v, "error");
	if (json_is_string(x)) {
		str_escape_to(why, sizeof(why), json_string_value(x));
		json_object_set_new(o, "error", json_string(why));
	}
	return o;
}

void link_proto_range(unsigned *min, unsigned *max)
{
	*min = K8D_PROTO_MIN;
	*max = K8D_PROTO_MAX;
}

/* A HELLO after the version was chosen (none chosen yet: nothing to do): the agent
 * started a new session (it saw the port close and open), in which nothing is chosen.
 * Choose the same version again, without waiting for the answer (this is the reader
 * thread); an agent whose range no longer holds that version is not the one we spoke to. */
static void hello_again(struct agentlink *l)
{
	unsigned lo = 0, hi = 0, v;
	uint32_t id = 0;
	bool holds;
	char req[64];

	pthread_mutex_lock(&l->lock);
	v = l->proto;
	if (!v) {
		pthread_mutex_unlock(&l->lock);
		return;
	}
	holds = proto_hello_range(l->hello_info, &lo, &hi) == 0 && lo <= v && v <= hi;
	if (holds && v >= 2) {
		do
			id = l->next_id++;
		while (id == 0);
		l->proto_resend_id = id;
	}
	pthread_mutex_unlock(&l->lock);
	if (!holds) {
		link_mark_broken(l, "the guest agent said HELLO again without the protocol "
				    "version chosen for it");
		return;
	}
	if (id) {
		snprintf(req, sizeof(req), "{\"op\":\"proto\",\"version\":%u}", v);
		link_send(l, PROTO_REQ, 0, id, req, strlen(req));
	}
}

static void dispatch(struct agentlink *l, const struct proto_hdr *h, const unsigned char *p)
{
	json_t *v = NULL;
	struct stream *s;

	switch (h->type) {
	case PROTO_HELLO:
		v = parse_json(p, h->len);
		pthread_mutex_lock(&l->lock);
		json_decref(l->hello_info);
		l->hello_info = v ? v : json_object();
		l->hello = true;
		pthread_cond_broadcast(&l->cond);
		pthread_mutex_unlock(&l->lock);
		hello_again(l);
		return;
	case PROTO_RESP:
		v = parse_json(p, h->len);
		pthread_mutex_lock(&l->lock);
		if (l->proto_resend_id && h->id == l->proto_resend_id) {
			/* The answer to hello_again()'s choice: nothing waits for it. */
			l->proto_resend_id = 0;
			pthread_mutex_unlock(&l->lock);
			if (!json_is_true(json_object_get(v, "ok")))
				link_mark_broken(l, "the guest agent refused the protocol version "
						    "it had accepted");
			json_decref(v);
			return;
		}
		for (struct pending *pd = l->pending; pd; pd = pd->next) {
			if (pd->id == h->id && !pd->done) {
				pd->done = true;
				pd->resp = v ? v : json_pack("{s:b,s:s}", "ok", 0, "error",
							     "the agent sent an unparsable answer");
				v = NULL;
				pthread_cond_broadcast(&l->cond);
				break;
			}
		}
		if (v)
			l->dropped_frames++;
		pthread_mutex_unlock(&l->lock);
		json_decref(v);
		return;
	case PROTO_STDOUT:
	case PROTO_STDERR:
		pthread_mutex_lock(&l->lock);
		s = find_stream(l, h->id);
		if (!s || s->exited || s->closed_by_agent) {
			l->dropped_frames++;
		} else if (s->queued + h->len > PROTO_WINDOW + PROTO_DATA_CHUNK) {
			/* The agent ignored its window: cut the stream off. */
			s->closed_by_agent = true;
			s->exit_info = json_pack("{s:i,s:s}", "code", 125, "error",
						 "the guest agent overran the output window");
			s->exited = true;
			stream_wake(s);
		} else {
			struct sframe *f = xmalloc(sizeof(*f) + h->len);
			f->next = NULL;
			f->type = h->type;
			f->flags = h->flags;
			f->len = h->len;
			memcpy(f->data, p, h->len);
			if (s->tail)
				s->tail->next = f;
			else
				s->head = f;
			s->tail = f;
			s->queued += h->len;
			stream_wake(s);
		}
		pthread_mutex_unlock(&l->lock);
		return;
	case PROTO_EXIT:
		v = parse_json(p, h->len);
		pthread_mutex_lock(&l->lock);
		s = find_stream(l, h->id);
		if (s && !s->exited) {
			s->exit_info = exit_info_clean(v);
			s->exited = true;
			stream_wake(s);
		} else {
			l->dropped_frames++;
		}
		pthread_mutex_unlock(&l->lock);
		json_decref(v);
		return;
	case PROTO_CREDIT: {
		uint32_t n = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			     (uint32_t)p[3] << 24;
		pthread_mutex_lock(&l->lock);
		s = find_stream(l, h->id);
		if (s) {
			uint64_t c = (uint64_t)s->stdin_credit + n;
			s->stdin_credit = c > PROTO_WINDOW ? PROTO_WINDOW : (uint32_t)c;
			stream_wake(s);
		}
		pthread_mutex_unlock(&l->lock);
		return;
	}
	case PROTO_EVENT:
		v = parse_json(p, h->len);
		if (v && l->on_event)
			l->on_event(l->ctx, v);
		json_decref(v);
		return;
	case PROTO_PING:
		link_send(l, PROTO_PONG, 0, h->id, p, h->len);
		return;
	case PROTO_PONG:
		return;
	default:
		/* REQ, STDIN, SIGNAL from the guest: not its to send. */
		pthread_mutex_lock(&l->lock);
		l->dropped_frames++;
		pthread_mutex_unlock(&l->lock);
		return;
	}
}

static void *link_reader(void *arg)
{
	struct agentlink *l = arg;
	struct proto_reader rd;
	unsigned char *buf = xmalloc(65536);
	const char *why = "the agent channel closed";

	proto_reader_init(&rd);
	for (;;) {
		ssize_t n = read(l->fd, buf, 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		size_t off = 0;
		while (off < (size_t)n) {
			long used = proto_reader_feed(&rd, buf + off, (size_t)n - off);
			if (used < 0) {
				why = "the guest agent broke the protocol (bad frame header)";
				goto out;
			}
			off += (size_t)used;
			struct proto_hdr h;
			const unsigned char *p;
			while (proto_reader_frame(&rd, &h, &p))
				dispatch(l, &h, p);
		}
	}
out:
	proto_reader_free(&rd);
	free(buf);
	link_mark_broken(l, why);
	return NULL;
}

int link_connect(struct agentlink *l, const char *path, void (*on_event)(void *, json_t *),
		 void *ctx, struct k8_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	int fd;

	pthread_condattr_t ca;

	pthread_mutex_init(&l->lock, NULL);
	pthread_mutex_init(&l->wlock, NULL);
	/* Timeouts on the monotonic clock: a step of the host's wall clock (NTP, a VM host
	 * setting it) must neither cut a wait short nor stretch it. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cond, &ca);
	pthread_condattr_destroy(&ca);
	l->fd = -1;
	l->hello = l->broken = false;
	l->hello_info = NULL;
	l->proto = l->proto_min = l->proto_max = 0;
	l->proto_resend_id = 0;
	l->pending = NULL;
	l->streams = NULL;
	l->on_event = on_event;
	l->ctx = ctx;
	l->reader_running = false;
	if (!l->next_id)
		l->next_id = (uint32_t)(now_real_ns() / 1000) | 1u;
	if (strlen(path) >= sizeof(sa.sun_path))
		return k8_err_set(err, -ENAMETOOLONG, "socket path too long: %s", path);
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(fd);
		return k8_err_set(err, e, "cannot connect to the agent channel %s: %s", path,
				  strerror(-e));
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	l->fd = fd;
	if (pthread_create(&l->reader, NULL, link_reader, l) != 0) {
		close(fd);
		l->fd = -1;
		return k8_err_set(err, -EAGAIN, "cannot start the agent reader thread");
	}
	l->reader_running = true;
	return 0;
}

void link_close(struct agentlink *l)
{
	if (l->fd >= 0)
		shutdown(l->fd, SHUT_RDWR);
	if (l->reader_running) {
		pthread_join(l->reader, NULL);
		l->reader_running = false;
	}
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	pthread_mutex_lock(&l->lock);
	json_decref(l->hello_info);
	l->hello_info = NULL;
	/* Streams and pending requests belong to their API threads, which see `broken`. */
	pthread_mutex_unlock(&l->lock);
}

/* A deadline for l->cond (CLOCK_MONOTONIC, link_connect). */
static struct timespec deadline_ts(int timeout_ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

int link_wait_hello(struct agentlink *l, int timeout_ms, struct k8_err *err)
{
	static const char host_hello[] = "{\"proto\":1}";
	uint64_t deadline = now_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
	int r = 0;

	/* The agent says HELLO when it sees the port open. A reconnect faster than its
	 * loop turns is invisible to it, so after a second of silence we greet it
	 * (docs/protocol.md, "host HELLO"), and again every second. */
	pthread_mutex_lock(&l->lock);
	while (!l->hello && !l->broken) {
		struct timespec ts = deadline_ts(1000);
		if (pthread_cond_timedwait(&l->cond, &l->lock, &ts) != ETIMEDOUT)
			continue;
		if (now_mono_ns() >= deadline) {
			r = k8_err_set(err, -ETIMEDOUT,
				       "the guest agent did not say hello within %d s", timeout_ms / 1000);
			break;
		}
		pthread_mutex_unlock(&l->lock);
		link_send(l, PROTO_HELLO, 0, 0, host_hello, sizeof(host_hello) - 1);
		pthread_mutex_lock(&l->lock);
	}
	if (!r && !l->hello)
		r = k8_err_set(err, -ECONNRESET, "%s", l->broken_why);
	pthread_mutex_unlock(&l->lock);
	return r;
}

static struct stream *stream_open(struct agentlink *l, uint32_t id);
static int link_req_send(struct agentlink *l, struct pending *pd, json_t *req,
			 struct stream **stream, struct k8_err *err);
static int link_req_wait(struct agentlink *l, struct pending *pd, int r,
			 const struct timespec *ts, int timeout_ms, json_t **resp,
			 struct k8_err *err);

static void range_text(char *out, size_t n, unsigned lo, unsigned hi)
{
	if (lo == hi)
		snprintf(out, n, "%u", lo);
	else
		snprintf(out, n, "%u..%u", lo, hi);
}

int link_negotiate_then(struct agentlink *l, json_t *then, int then_timeout_ms,
			json_t **then_resp, struct k8_err *err)
{
	struct timespec ts = deadline_ts(PROTO_REQ_TIMEOUT_MS);
	struct timespec tt = deadline_ts(then_timeout_ms);
	struct pending pv = { 0 }, pt = { 0 };
	unsigned lo = 0, hi = 0;
	json_t *hello, *resp = NULL;
	char theirs[32];
	int v, r, rt = 0;

	pthread_mutex_lock(&l->lock);
	hello = json_incref(l->hello_info);
	pthread_mutex_unlock(&l->lock);
	r = proto_hello_range(hello, &lo, &hi);
	json_decref(hello);
	if (r) {
		json_decref(then);
		return k8_err_set(err, -EPROTONOSUPPORT,
				  "the guest agent's HELLO names no valid protocol version; this "
				  "kosa8d speaks protocol %u..%u", K8D_PROTO_MIN, K8D_PROTO_MAX);
	}
	range_text(theirs, sizeof(theirs), lo, hi);
	v = proto_pick(K8D_PROTO_MIN, K8D_PROTO_MAX, lo, hi);
	if (v < 0) {
		json_decref(then);
		return k8_err_set(err, -EPROTONOSUPPORT,
				  "the guest agent speaks protocol %s; this kosa8d speaks %u..%u",
				  theirs, K8D_PROTO_MIN, K8D_PROTO_MAX);
	}
	if (v >= 2) {
		/* Version 1 has no such request: its agent knows it by default. `then` goes
		 * right behind it: the agent handles frames in order, so it has its version
		 * before it reads `then`, and both are answered in one turn of the guest. */
		struct k8_err terr = { 0 };
		r = link_req_send(l, &pv, json_pack("{s:s,s:i}", "op", "proto", "version", v),
				  NULL, err);
		if (!r && then)
			rt = link_req_send(l, &pt, then, NULL, &terr);
		else
			json_decref(then);
		r = link_req_wait(l, &pv, r, &ts, PROTO_REQ_TIMEOUT_MS, &resp, err);
		if (!r && json_integer_value(json_object_get(resp, "proto")) != v)
			r = k8_err_set(err, -EPROTONOSUPPORT, "it answered another version");
		json_decref(resp);
		if (then) {      /* its answer, or only off the list when the choice failed */
			rt = link_req_wait(l, &pt, r ? -ECANCELED : rt, &tt, then_timeout_ms,
					   then_resp, &terr);
			then = NULL;
		}
		if (r == -ETIMEDOUT || r == -ECONNRESET || r == -ENOTCONN)
			return r;
		if (r) {
			k8_err_wrap(err, "the guest agent (protocol %s) refused protocol %d", theirs, v);
			err->code = -EPROTONOSUPPORT;
			return -EPROTONOSUPPORT;
		}
		if (rt)
			*err = terr;
	}
	pthread_mutex_lock(&l->lock);
	l->proto = (unsigned)v;
	l->proto_min = lo;
	l->proto_max = hi;
	pthread_mutex_unlock(&l->lock);
	if (then)
		rt = link_request(l, then, then_timeout_ms, then_resp, NULL, err);
	return rt;
}

int link_negotiate(struct agentlink *l, struct k8_err *err)
{
	return link_negotiate_then(l, NULL, 0, NULL, err);
}

int link_stdin_send(struct agentlink *l, struct stream *s, const void *p, size_t n,
		    size_t *sent)
{
	size_t take;

	pthread_mutex_lock(&l->lock);
	take = n < s->stdin_credit ? n : s->stdin_credit;
	if (take > PROTO_DATA_CHUNK)
		take = PROTO_DATA_CHUNK;
	s->stdin_credit -= (uint32_t)take;
	pthread_mutex_unlock(&l->lock);
	*sent = take;
	return take ? link_send(l, PROTO_STDIN, 0, s->id, p, take) : 0;
}

int link_send(struct agentlink *l, uint16_t type, uint16_t flags, uint32_t id,
	      const void *data, size_t len)
{
	int r;

	if (l->fd < 0 || l->broken)
		return -ENOTCONN;
	pthread_mutex_lock(&l->wlock);
	r = proto_write(l->fd, type, flags, id, data, len);
	pthread_mutex_unlock(&l->wlock);
	if (r == -EAGAIN || r == -EWOULDBLOCK)
		link_mark_broken(l, "the guest agent stopped reading its channel");
	return r;
}

static struct stream *stream_open(struct agentlink *l, uint32_t id)
{
	struct stream *s = xcalloc(1, sizeof(*s));

	s->id = id;
	s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->stdin_credit = PROTO_WINDOW;
	pthread_mutex_lock(&l->lock);
	s->next = l->streams;
	l->streams = s;
	pthread_mutex_unlock(&l->lock);
	return s;
}

void link_stream_close(struct agentlink *l, struct stream *s)
{
	struct stream **pp;
	struct sframe *f, *n;

	if (!s)
		return;
	pthread_mutex_lock(&l->lock);
	for (pp = &l->streams; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	pthread_mutex_unlock(&l->lock);
	for (f = s->head; f; f = n) {
		n = f->next;
		free(f);
	}
	json_decref(s->exit_info);
	if (s->efd >= 0)
		close(s->efd);
	free(s);
}

struct sframe *link_stream_pop(struct agentlink *l, struct stream *s)
{
	struct sframe *f;

	pthread_mutex_lock(&l->lock);
	f = s->head;
	if (f) {
		s->head = f->next;
		if (!s->head)
			s->tail = NULL;
	}
	pthread_mutex_unlock(&l->lock);
	return f;
}

void link_stream_consumed(struct agentlink *l, struct stream *s, size_t n)
{
	unsigned char c[4];

	pthread_mutex_lock(&l->lock);
	s->queued = s->queued > n ? s->queued - n : 0;
	pthread_mutex_unlock(&l->lock);
	c[0] = (unsigned char)n;
	c[1] = (unsigned char)(n >> 8);
	c[2] = (unsigned char)(n >> 16);
	c[3] = (unsigned char)(n >> 24);
	link_send(l, PROTO_CREDIT, 0, s->id, c, 4);
}

uint32_t link_stream_id(const struct stream *s)
{
	return s->id;
}

size_t link_stream_queued(struct agentlink *l, struct stream *s)
{
	size_t n;

	pthread_mutex_lock(&l->lock);
	n = s->queued;
	pthread_mutex_unlock(&l->lock);
	return n;
}

int link_stream_eof(struct agentlink *l, struct stream *s)
{
	return link_send(l, PROTO_STDIN, PROTO_F_EOF, s->id, NULL, 0);
}

int link_stream_signal(struct agentlink *l, struct stream *s, int sig)
{
	unsigned char le[4] = { (unsigned char)sig, 0, 0, 0 };

	return link_send(l, PROTO_SIGNAL, 0, s->id, le, 4);
}

/* The stream's state now: its exit (output drained), the link lost, or neither (0). */
static enum link_next stream_state(struct agentlink *l, struct stream *s, json_t **exit_info)
{
	enum link_next r = LINK_NEXT_TIMEOUT;

	pthread_mutex_lock(&l->lock);
	if (s->exited && !s->head) {
		*exit_info = json_incref(s->exit_info);
		r = LINK_NEXT_EXIT;
	} else if (l->broken && !s->exited) {
		*exit_info = json_pack("{s:i,s:s}", "code", LINK_LOST_EXIT, "error", LINK_LOST_WHY);
		r = LINK_NEXT_LOST;
	}
	pthread_mutex_unlock(&l->lock);
	return r;
}

/* Take the stream's wake-up (its eventfd); whether there was one. */
static bool stream_woken(struct stream *s)
{
	uint64_t v;

	return read(s->efd, &v, sizeof(v)) == (ssize_t)sizeof(v);
}

enum link_next link_stream_next(struct agentlink *l, struct stream *s, int ms,
				struct sframe **f, json_t **exit_info)
{
	struct pollfd pfd = { .fd = s->efd, .events = POLLIN };
	enum link_next r;

	*f = NULL;
	*exit_info = NULL;
	for (;;) {
		if ((*f = link_stream_pop(l, s)))
			return LINK_NEXT_FRAME;
		if ((r = stream_state(l, s, exit_info)) != LINK_NEXT_TIMEOUT)
			return r;
		if (!ms)
			return LINK_NEXT_TIMEOUT;
		if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
			return LINK_NEXT_TIMEOUT;
		if (!(pfd.revents & POLLIN) || !stream_woken(s))
			return LINK_NEXT_TIMEOUT;
		/* woken: a frame, the exit, or credit; the first two are seen above */
		if ((*f = link_stream_pop(l, s)))
			return LINK_NEXT_FRAME;
		if ((r = stream_state(l, s, exit_info)) != LINK_NEXT_TIMEOUT)
			return r;
		return LINK_NEXT_WOKE;
	}
}

/* link_stream_run's stdin: what input() gave and what of it went out. */
struct stream_in {
	unsigned char *buf;
	size_t have, off;
	bool eof, eof_sent;
};

/* Send what the window allows of the pending stdin, then EOF when it is all out. */
static void stream_in_flush(struct agentlink *l, struct stream *s, struct stream_in *in)
{
	size_t take;

	if (in->off < in->have && link_stdin_send(l, s, in->buf + in->off, in->have - in->off,
						   &take) == 0)
		in->off += take;
	if (in->eof && in->off == in->have && !in->eof_sent) {
		link_stream_eof(l, s);
		in->eof_sent = true;
	}
}

/* Give every queued output frame to the consumer: -1 when it is gone. */
static int stream_out_drain(struct agentlink *l, struct stream *s, const struct stream_ops *ops,
			    void *ctx)
{
	struct sframe *f;

	while ((f = link_stream_pop(l, s))) {
		size_t len = f->len;
		int r = ops->output(ctx, f->type, f->flags, f->data, f->len);

		free(f);
		if (len)
			link_stream_consumed(l, s, len);
		if (r < 0)
			return -1;
	}
	return 0;
}

int link_stream_run(struct agentlink *l, struct stream *s, const struct stream_ops *ops,
		    void *ctx, json_t **exit_info)
{
	struct stream_in in = { .buf = xmalloc(65536), .eof = !ops->input };
	bool ask = ops->input != NULL;  /* input()'s first call: before any wait */
	bool reading = ops->input != NULL;      /* input_fd is read (no STREAM_IN_SHUT yet) */
	enum link_next st;
	int r = -EPIPE;

	*exit_info = NULL;
	in.eof_sent = in.eof;           /* no stdin: the consumer says whether it ends */
	for (;;) {
		struct pollfd pfd[2] = { { .fd = s->efd, .events = POLLIN }, { .fd = -1 } };
		bool listen;

		stream_in_flush(l, s, &in);
		/* stdin wanted, or (control) what else the client sends once stdin is over;
		 * nothing more is read while stdin bytes wait for the agent's window */
		listen = reading && in.off == in.have && (!in.eof || (ops->control && in.eof_sent));
		if (listen && ask) {
			unsigned flags = 0;
			ssize_t got = ops->input(ctx, in.buf, 65536, &flags);
			if (got < 0)
				break;
			if (!in.eof) {          /* after stdin's EOF, stdin bytes are dropped */
				in.have = (size_t)got;
				in.off = 0;
				in.eof = flags & STREAM_IN_EOF;
			}
			if (flags & STREAM_IN_SHUT)
				reading = false;
			ask = flags & STREAM_IN_MORE;
			continue;
		}
		if (stream_out_drain(l, s, ops, ctx) < 0)
			break;
		if ((st = stream_state(l, s, exit_info)) != LINK_NEXT_TIMEOUT) {
			r = st == LINK_NEXT_EXIT ? 0 : -ECONNRESET;
			break;
		}
		pfd[1].fd = listen ? ops->input_fd : ops->gone_fd;
		pfd[1].events = listen ? POLLIN : 0;
		if (poll(pfd, 2, 1000) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN)
			stream_woken(s);
		if (listen && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
			ask = true;
		else if (!listen && pfd[1].fd >= 0 && (pfd[1].revents & (POLLHUP | POLLERR)))
			break;          /* the client hung up after its stdin: gone */
	}
	if (r == -EPIPE)        /* nobody reads it any more: end the process */
		link_stream_signal(l, s, SIGKILL);
	free(in.buf);
	return r;
}

/* A request on its way: link_req_send puts it on the pending list and sends it;
 * link_req_wait waits for its answer and takes it off. Several may be sent before the
 * first is waited for: the agent answers them in order, in one turn of the guest. */
static int link_req_send(struct agentlink *l, struct pending *pd, json_t *req,
			 struct stream **stream, struct k8_err *err)
{
	char *text;
	int r;

	pthread_mutex_lock(&l->lock);
	if (l->broken || l->fd < 0) {
		pthread_mutex_unlock(&l->lock);
		json_decref(req);
		return k8_err_set(err, -ENOTCONN, "the guest agent is not connected: %s",
				  l->broken_why[0] ? l->broken_why : "not started");
	}
	do
		pd->id = l->next_id++;
	while (pd->id == 0);
	pd->next = l->pending;
	l->pending = pd;
	pthread_mutex_unlock(&l->lock);

	if (stream)
		*stream = stream_open(l, pd->id);
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!text || strlen(text) > PROTO_MAX_JSON) {
		free(text);
		return k8_err_set(err, -E2BIG, "request too large for the agent protocol");
	}
	r = link_send(l, PROTO_REQ, 0, pd->id, text, strlen(text));
	free(text);
	if (r)
		return k8_err_set(err, r, "cannot send to the guest agent: %s", strerror(-r));
	return 0;
}

/* Wait for pd's answer unless `r` (link_req_send's result) says it was not sent, take
 * pd off the pending list, and turn the answer into 0 or an error. */
static int link_req_wait(struct agentlink *l, struct pending *pd, int r,
			 const struct timespec *ts, int timeout_ms, json_t **resp,
			 struct k8_err *err)
{
	struct pending **pp;

	pthread_mutex_lock(&l->lock);
	while (!r && !pd->done && !l->broken) {
		if (pthread_cond_timedwait(&l->cond, &l->lock, ts) == ETIMEDOUT)
			break;
	}
	for (pp = &l->pending; *pp; pp = &(*pp)->next) {
		if (*pp == pd) {
			*pp = pd->next;
			break;
		}
	}
	pthread_mutex_unlock(&l->lock);
	if (r)
		goto out;
	if (!pd->done) {
		r = l->broken ? k8_err_set(err, -ECONNRESET, "the guest agent went away: %s",
					   l->broken_why)
			      : k8_err_set(err, -ETIMEDOUT,
					   "the guest agent did not answer within %d s",
					   timeout_ms / 1000);
		goto out;
	}
	if (!json_is_true(json_object_get(pd->resp, "ok"))) {
		json_int_t e = json_integer_value(json_object_get(pd->resp, "errno"));
		const char *msg = json_string_value(json_object_get(pd->resp, "error"));
		char safe[512];
		/* The message comes from the guest: keep it short and printable. */
		str_escape_to(safe, sizeof(safe), msg ? msg : "the agent refused the request");
		r = k8_err_set(err, (e > 0 && e < 4096) ? -(int)e : -EIO, "%s", safe);
		goto out;
	}
	if (resp) {
		*resp = pd->resp;
		pd->resp = NULL;
	}
out:
	json_decref(pd->resp);
	pd->resp = NULL;
	return r;
}

int link_request(struct agentlink *l, json_t *req, int timeout_ms, json_t **resp,
		 struct stream **stream, struct k8_err *err)
{
	struct timespec ts = deadline_ts(timeout_ms);
	struct pending pd = { 0 };
	struct stream *s = NULL;
	int r;

	r = link_req_send(l, &pd, req, stream ? &s : NULL, err);
	r = link_req_wait(l, &pd, r, &ts, timeout_ms, resp, err);
	if (r) {
		link_stream_close(l, s);
		s = NULL;
	}
	if (stream)
		*stream = s;
	return r;
}
