/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_envd.c - envd's process service (process.Process over Connect with JSON), /health
 * and /envs (e2b_envd.h, docs/e2b.md).
 *
 * Theory of operation. A Start checks its request, makes sure the box runs and asks the
 * agent for an exec in the box's container, with the stream open before the process
 * starts. The process then gets a record (struct e2b_proc) in its box's list and one
 * pump: a thread running link_stream_run (agentlink.h, the one stream loop) until the
 * process exits or the VM goes, which sends each output frame as one Connect message to
 * every subscriber and takes the process's stdin from the queue SendInput fills. A
 * subscriber is the reply of a Start or a Connect: its own thread writes the start event
 * (the SDK insists on it first), joins the list and waits until the pump has written the
 * end, or a write to it failed (a keepalive every 30 s makes one for a client that left).
 * The pump starts once the first subscriber has written its start event, so no output is
 * lost before it. As in envd, a process outlives its clients: only SendSignal, its own
 * end or the VM's ends it.
 *
 * Locks: the table's lock (e2b->lock) guards each box's list and every record's refs;
 * a record's `wmu` serialises writes to its subscribers (a slow client holds back the
 * pump, and so its own process, nothing else); its `mu`, taken after wmu, guards the
 * subscriber list (changed under both, read under either), the stdin queue and the end. */
#include "daemon/e2b_envd.h"
#include "daemon/broker.h"
#include "daemon/e2b_box.h"
#include "daemon/e2b_ctl.h"
#include "daemon/sandbox.h"
#include "common/proto.h"
#include "e2b/connect.h"
#include "e2b/envd.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define ENVD_STREAM_TYPE "application/connect+json"
#define ENVD_BODY_MAX (E2BC_REQ_MAX + E2BC_HDR)
#define PROC_STDIN_MAX (8u << 20)       /* bytes SendInput may queue ahead of the process */
#define PROC_START_MS 60000
#define PROC_MAX 256                    /* processes of one sandbox followed at once */
#define PROC_KEEPALIVE_S 30
#define PROC_STALL_MS 60000             /* a client that reads nothing for this long is let go */

/* A reply following a process (its thread's, on its stack while it is in the list). */
struct proc_sub {
	struct proc_sub *next;
	int fd;
	bool done;                      /* the end was written to it, or a write failed */
};

struct e2b_proc {
	struct e2b_proc *next;          /* in its box's list (the table's lock) */
	int refs;                       /* the table's lock */
	struct daemon *d;
	struct e2b_box *b;              /* a reference */
	struct sandbox *sb;             /* sb_get's, held until the stream is closed */
	struct stream *s;
	uint32_t pid;                   /* the agent's pid: envd's process id */
	char tag[E2B_TAG_MAX + 1];
	char container[13];
	json_t *config;                 /* as List shows it */
	bool pty, in;                   /* a terminal; stdin was asked for */
	pthread_mutex_t mu, wmu;
	pthread_cond_t cond;            /* with mu: a subscriber is done */
	bool pumping;                   /* mu */
	struct proc_sub *subs;
	json_t *end;                    /* the end event, once the process is over (mu) */
	uint64_t timeout_ms;            /* its Start's Connect-Timeout-Ms (0: none) */
	bool timed_out;                 /* mu: killed by it */
	bool end_deadline;              /* with end (wmu and mu): the stream ends deadline_exceeded */
	unsigned char *q;               /* stdin queued (mu) */
	size_t q_len, q_off;
	bool q_close, q_eof_sent;
	int efd;                        /* an eventfd: the queue changed */
};

/* ---- the record ---- */

static void proc_put(struct e2b_proc *p)
{
	struct e2b *e;
	bool last;

	if (!p)
		return;
	e = e2b_of(p->d);
	pthread_mutex_lock(&e->lock);
	last = --p->refs == 0;
	pthread_mutex_unlock(&e->lock);
	if (!last)
		return;
	if (p->s)
		link_stream_close(&p->sb->link, p->s);
	if (p->sb)
		sb_put(p->d, p->sb);
	e2b_box_put(p->d, p->b);
	json_decref(p->config);
	json_decref(p->end);
	free(p->q);
	if (p->efd >= 0)
		close(p->efd);
	pthread_mutex_destroy(&p->mu);
	pthread_mutex_destroy(&p->wmu);
	pthread_cond_destroy(&p->cond);
	free(p);
}

/* The process of b a selector names (a reference), NULL when there is none. */
static struct e2b_proc *proc_find(struct daemon *d, struct e2b_box *b,
				  const struct e2b_sel *sel)
{
	struct e2b *e = e2b_of(d);
	struct e2b_proc *p;

	pthread_mutex_lock(&e->lock);
	for (p = b->procs; p; p = p->next)
		if (sel->tag[0] ? !strcmp(p->tag, sel->tag) : p->pid == sel->pid) {
			p->refs++;
			break;
		}
	pthread_mutex_unlock(&e->lock);
	return p;
}

/* Out of its box's list (the list's reference goes): List no longer shows it and every
 * call naming it is not_found. */
static void proc_unlist(struct e2b_proc *p)
{
	struct e2b *e = e2b_of(p->d);
	struct e2b_proc **pp;

	pthread_mutex_lock(&e->lock);
	for (pp = &p->b->procs; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			p->refs--;
			break;
		}
	pthread_mutex_unlock(&e->lock);
}

/* ---- writing to subscribers ---- */

/* n bytes to a subscriber's fd (non-blocking): -ETIMEDOUT when it takes nothing for
 * PROC_STALL_MS, so that a client that stopped reading holds the pump (and the sandbox's
 * removal, which waits for it) a minute at most. */
static int proc_put_bytes(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w == 0 || errno != EAGAIN)
			return w < 0 ? -errno : -EIO;
		w = poll(&pfd, 1, PROC_STALL_MS);
		if (w == 0)
			return -ETIMEDOUT;
		if (w < 0 && errno != EINTR)
			return -errno;
	}
	return 0;
}

/* ev as one Connect message on fd, followed by the end of the stream when `ended` (the
 * process, whose end it is): {}, or deadline_exceeded for one its timeout killed, as
 * envd's stream ends then. */
static int proc_write(int fd, const json_t *ev, const struct e2b_proc *ended)
{
	size_t n = 0, en = 0;
	uint8_t *m = e2bc_wrap(ev, 0, &n), *end = NULL;
	bool last = ended != NULL;
	int r = -ENOMEM;

	if (last && ended->end_deadline)
		end = e2bc_end(E2BC_DEADLINE_EXCEEDED, "the command's timeout (Connect-Timeout-Ms, "
			       "the SDK's timeoutMs) ran out and it was killed; 0 means none", &en);
	else if (last)
		end = e2bc_end(-1, NULL, &en);
	if (m && (!last || end)) {
		r = proc_put_bytes(fd, m, n);
		if (r >= 0 && end)
			r = proc_put_bytes(fd, end, en);
	}
	free(m);
	free(end);
	return r < 0 ? r : 0;
}

/* Let subscriber *pp go (its thread returns). Caller holds wmu. */
static void proc_drop_sub(struct e2b_proc *p, struct proc_sub **pp)
{
	struct proc_sub *s = *pp;

	pthread_mutex_lock(&p->mu);
	*pp = s->next;
	s->done = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
}

/* ev to every subscriber (and the end of their streams when `last`); one whose write
 * fails is let go. Caller holds wmu. */
static void proc_send_all(struct e2b_proc *p, const json_t *ev, bool last)
{
	struct proc_sub **pp = &p->subs;

	while (*pp) {
		if (proc_write((*pp)->fd, ev, last ? p : NULL) == 0 && !last)
			pp = &(*pp)->next;
		else
			proc_drop_sub(p, pp);
	}
}

/* ---- the pump ---- */

static int proc_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *data,
		       size_t n)
{
	struct e2b_proc *p = ctx;
	json_t *ev;

	(void)flags;
	if (!n)
		return 0;
	ev = e2b_ev_data(p->pty ? "pty" : type == PROTO_STDERR ? "stderr" : "stdout", data, n);
	pthread_mutex_lock(&p->wmu);
	proc_send_all(p, ev, false);
	pthread_mutex_unlock(&p->wmu);
	json_decref(ev);
	return 0;       /* nobody listening is no reason to stop: the process goes on */
}

/* Stdin from the queue SendInput fills; its EOF once CloseStdin came and the queue is
 * empty. */
static ssize_t proc_input(void *ctx, unsigned char *buf, size_t max, unsigned *flags)
{
	struct e2b_proc *p = ctx;
	uint64_t v;
	size_t n;

	if (read(p->efd, &v, sizeof(v)) < 0 && errno != EAGAIN && errno != EINTR)
		return -1;
	pthread_mutex_lock(&p->mu);
	n = p->q_len - p->q_off < max ? p->q_len - p->q_off : max;
	if (n)
		memcpy(buf, p->q + p->q_off, n);
	p->q_off += n;
	if (p->q_off < p->q_len) {
		*flags |= STREAM_IN_MORE;
	} else {
		p->q_off = p->q_len = 0;
		if (p->q_close && !p->q_eof_sent) {
			*flags |= STREAM_IN_EOF;
			p->q_eof_sent = true;
		}
	}
	pthread_mutex_unlock(&p->mu);
	return (ssize_t)n;
}

/* The process's one loop, until it exits or the VM goes; then its end to every
 * subscriber. Holds a reference. */
static void *proc_pump(void *arg)
{
	struct e2b_proc *p = arg;
	struct agentlink *l = &p->sb->link;
	bool in = p->in || p->pty;
	struct stream_ops ops = { .output = proc_output, .input = in ? proc_input : NULL,
				  .input_fd = in ? p->efd : -1, .gone_fd = -1 };
	json_t *exit_info = NULL, *end;

	/* without stdin the process's stdin ends at once; a terminal stays open */
	if (!in)
		link_stream_eof(l, p->s);
	link_stream_run(l, p->s, &ops, p, &exit_info);
	if (!exit_info)         /* never: output() does not give up; for safety */
		exit_info = json_pack("{s:i,s:s}", "code", LINK_LOST_EXIT, "error", LINK_LOST_WHY);
	e2b_audit(p->d, p->b, "sandbox.exit", json_pack("{s:s,s:I,s:O?,s:O?}", "container",
							 p->container, "pid", (json_int_t)p->pid,
							 "code", json_object_get(exit_info, "code"),
							 "signal", json_object_get(exit_info, "signal")));
	proc_unlist(p);
	end = e2b_ev_end(exit_info);
	json_decref(exit_info);
	pthread_mutex_lock(&p->wmu);
	pthread_mutex_lock(&p->mu);
	p->end = end;
	p->end_deadline = p->timed_out;
	pthread_cond_broadcast(&p->cond);       /* the timer's wait */
	pthread_mutex_unlock(&p->mu);
	proc_send_all(p, end, true);
	pthread_mutex_unlock(&p->wmu);
	proc_put(p);
	return NULL;
}

/* fn(p) on a detached thread of its own, holding a reference of p's it drops. 0, or the
 * error of pthread_create (then no thread, no reference). */
static int proc_thread(struct e2b_proc *p, void *(*fn)(void *))
{
	struct e2b *e = e2b_of(p->d);
	pthread_attr_t attr;
	pthread_t t;
	int r;

	pthread_mutex_lock(&e->lock);
	p->refs++;
	pthread_mutex_unlock(&e->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, fn, p);
	pthread_attr_destroy(&attr);
	if (r)
		proc_put(p);
	return r;
}

/* Start p's pump, once. Without a thread it runs in the caller's (a subscriber's, whose
 * wait then finds its end at once). */
static void proc_pump_start(struct e2b_proc *p)
{
	struct e2b *e = e2b_of(p->d);
	bool first;

	pthread_mutex_lock(&p->mu);
	first = !p->pumping;
	p->pumping = true;
	pthread_mutex_unlock(&p->mu);
	if (!first || proc_thread(p, proc_pump) == 0)
		return;
	pthread_mutex_lock(&e->lock);
	p->refs++;              /* the pump's, which proc_pump drops */
	pthread_mutex_unlock(&e->lock);
	proc_pump(p);
}

/* The Start's timeout: envd starts the process under a context with the request's
 * Connect-Timeout-Ms (the SDKs send 60000 unless told timeoutMs, 0 for none), and the
 * process is killed when it runs out, whoever still follows it. A thread per such
 * process, waiting for its end or the deadline. Holds a reference. */
static void *proc_timer(void *arg)
{
	struct e2b_proc *p = arg;
	struct timespec dl;
	bool over = false;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += (time_t)(p->timeout_ms / 1000);
	dl.tv_nsec += (long)(p->timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&p->mu);
	while (!p->end && !over)
		over = pthread_cond_timedwait(&p->cond, &p->mu, &dl) == ETIMEDOUT && !p->end;
	p->timed_out = over;
	pthread_mutex_unlock(&p->mu);
	if (over) {
		e2b_audit(p->d, p->b, "sandbox.signal", json_pack("{s:s,s:I,s:i,s:s}", "container",
								   p->container, "pid",
								   (json_int_t)p->pid, "signal",
								   SIGKILL, "why", "timeout"));
		link_stream_signal(&p->sb->link, p->s, SIGKILL);
	}
	proc_put(p);
	return NULL;
}

/* Arm p's timer when its Start asked for one. 0, or -errno (no thread: no process
 * left without its deadline, the caller kills it). */
static int proc_timer_start(struct e2b_proc *p)
{
	return p->timeout_ms ? -proc_thread(p, proc_timer) : 0;
}

/* ---- a reply following a process ---- */

/* Unlink sub if it is still in the list (its keepalive failed). Caller holds wmu. */
static void proc_leave(struct e2b_proc *p, struct proc_sub *sub)
{
	for (struct proc_sub **pp = &p->subs; *pp; pp = &(*pp)->next)
		if (*pp == sub) {
			proc_drop_sub(p, pp);
			return;
		}
}

/* Write the start event on fd, follow p until its end (or until fd fails), keepalives
 * every PROC_KEEPALIVE_S meanwhile. */
static void proc_follow(struct e2b_proc *p, int fd)
{
	struct proc_sub sub = { .fd = fd };
	json_t *ev = e2b_ev_start(p->pid);
	int r;

	pthread_mutex_lock(&p->wmu);
	r = proc_write(fd, ev, NULL);
	json_decref(ev);
	pthread_mutex_lock(&p->mu);
	if (r == 0 && p->end) {                 /* it ended meanwhile */
		proc_write(fd, p->end, p);
		sub.done = true;
	} else if (r == 0) {
		sub.next = p->subs;
		p->subs = &sub;
	} else {
		sub.done = true;
	}
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_unlock(&p->wmu);
	proc_pump_start(p);
	pthread_mutex_lock(&p->mu);
	while (!sub.done) {
		struct timespec dl;

		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += PROC_KEEPALIVE_S;
		if (pthread_cond_timedwait(&p->cond, &p->mu, &dl) != ETIMEDOUT)
			continue;
		pthread_mutex_unlock(&p->mu);
		pthread_mutex_lock(&p->wmu);
		ev = e2b_ev_keepalive();
		if (!sub.done && proc_write(fd, ev, NULL) < 0)
			proc_leave(p, &sub);
		json_decref(ev);
		pthread_mutex_unlock(&p->wmu);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
}

static void proc_reply(void *ctx, const struct api_conn *conn)
{
	int fl = fcntl(conn->fd, F_GETFL);

	if (fl >= 0)
		fcntl(conn->fd, F_SETFL, fl | O_NONBLOCK);
	proc_follow(ctx, conn->fd);
}

/* After the reply, or instead of it (the client left first): the process goes on. */
static void proc_reply_free(void *ctx)
{
	proc_pump_start(ctx);
	proc_put(ctx);
}

/* ---- answers ---- */

/* A unary call's end: r >= 0 as it is; an error as Connect's {"code","message"} with
 * Connect's status for it (e2b_box.c). */
static int envd_unary_end(struct api_call *call, int r)
{
	return r < 0 ? e2b_connect_fail(call, r) : 0;
}

/* The request's box, its token checked, usable (a reference). */
static int envd_box(struct api_call *call, struct e2b_box **bp)
{
	int r = e2b_data_auth(call, E2B_ENVD_PORT, bp);

	if (!r && (r = e2b_box_ready(call->d, *bp, &call->err))) {
		e2b_box_put(call->d, *bp);
		*bp = NULL;
	}
	return r;
}

/* ---- Start and Connect: the body, one Connect envelope ---- */

struct envd_body {
	int (*fn)(struct api_call *call, struct e2b_box *b, json_t *msg);
	uint8_t *p;
	size_t n;
};

static int envd_body_write(void *ctx, const void *p, size_t n, struct k8_err *err)
{
	struct envd_body *eb = ctx;

	if (n > ENVD_BODY_MAX - eb->n)
		return k8_err_set(err, -E2BIG, "the request body is larger than %u bytes",
				  (unsigned)ENVD_BODY_MAX);
	eb->p = realloc(eb->p, eb->n + n);
	if (!eb->p)
		abort();
	memcpy(eb->p + eb->n, p, n);
	eb->n += n;
	return 0;
}

/* The body is in: the box and its token, the codec, the envelope; then the call. */
static int envd_body_done(struct api_call *call, void *ctx)
{
	struct envd_body *eb = ctx;
	const char *ct = call->header(call->query_ctx, "Content-Type");
	size_t tl = strlen(ENVD_STREAM_TYPE);
	struct e2b_box *b = NULL;
	json_t *msg = NULL;
	int r = envd_box(call, &b);

	if (!r && (!ct || strncasecmp(ct, ENVD_STREAM_TYPE, tl) || (ct[tl] && ct[tl] != ';')))
		r = k8_err_set(&call->err, -EINVAL, "kosa8's envd speaks Connect with JSON: the "
			       "Content-Type must be " ENVD_STREAM_TYPE ", not %.60s",
			       ct ? ct : "(none)");
	if (!r)
		r = e2bc_unwrap(eb->p, eb->n, E2BC_REQ_MAX, &msg, &call->err);
	if (!r)
		r = eb->fn(call, b, msg);
	json_decref(msg);
	e2b_box_put(call->d, b);
	return r < 0 ? e2b_connect_stream_fail(call, r) : 0;
}

static void envd_body_free(void *ctx)
{
	struct envd_body *eb = ctx;

	free(eb->p);
	free(eb);
}

static int envd_take(struct api_call *call,
		     int (*fn)(struct api_call *call, struct e2b_box *b, json_t *msg))
{
	struct envd_body *eb = xcalloc(1, sizeof(*eb));
	struct api_sink sink = { .write = envd_body_write, .done = envd_body_done,
				 .free = envd_body_free, .ctx = eb };

	eb->fn = fn;
	return api_take_body(call, &sink);
}

/* ---- Start ---- */

/* The agent's exec for st in b's container, as `user`: the broker's variables and HOME
 * under the image's, envVars and the call's; in cwd, else the image's working directory
 * when it sets one (not "/"), else the user's home, as envd does. Caller holds the table's
 * lock (b's fields). */
static json_t *proc_request(struct e2b_box *b, struct sandbox *sb, const struct e2b_start *st,
			    const char *user)
{
	char home[128];
	json_t *base = broker_env(sb), *req;
	bool wd = b->workdir[0] && strcmp(b->workdir, "/");

	e2b_home(user, home, sizeof(home));
	json_array_append_new(base, json_sprintf("HOME=%s", home));
	req = json_pack("{s:s,s:s,s:O,s:o,s:s,s:s}", "op", "exec", "container", b->container,
			"argv", st->argv, "env", e2b_box_env(b, base, st->env), "cwd",
			st->cwd[0] ? st->cwd : wd ? b->workdir : home, "user",
			user[0] ? user : "0");
	json_decref(base);
	if (st->pty) {
		json_object_set_new(req, "stdin", json_string("tty"));
		json_object_set_new(req, "tty_size", json_pack("[i,i]", (int)st->rows,
							       (int)st->cols));
	} else {
		json_object_set_new(req, "stdin", json_boolean(st->stdin));
	}
	return req;
}

/* The user of the call: its Authorization header's, else the image's. */
static int proc_user(struct api_call *call, struct e2b_box *b, char user[E2B_USER_MAX + 1])
{
	const char *auth = call->header(call->query_ctx, "Authorization");
	struct e2b *e = e2b_of(call->d);

	if (auth)
		return e2b_basic_user(auth, user, &call->err);
	pthread_mutex_lock(&e->lock);
	snprintf(user, E2B_USER_MAX + 1, "%s", b->user);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

static struct e2b_proc *proc_new(struct daemon *d, struct e2b_box *b,
				 const struct e2b_start *st)
{
	struct e2b_proc *p = xcalloc(1, sizeof(*p));
	struct e2b *e = e2b_of(d);

	p->d = d;
	p->refs = 1;
	p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&p->mu, NULL);
	pthread_mutex_init(&p->wmu, NULL);
	pthread_cond_init(&p->cond, NULL);
	pthread_mutex_lock(&e->lock);
	b->refs++;
	pthread_mutex_unlock(&e->lock);
	p->b = b;
	p->pty = st->pty;
	p->in = st->stdin;
	p->config = json_incref(st->config);
	snprintf(p->tag, sizeof(p->tag), "%s", st->tag);
	return p;
}

/* Processes of b still listed (the table's lock). */
static size_t proc_count(struct e2b_box *b)
{
	size_t n = 0;

	for (struct e2b_proc *p = b->procs; p; p = p->next)
		n++;
	return n;
}

/* The process started in b's container and listed (*out: the caller's reference). Each
 * costs the daemon a thread while it runs, so a sandbox has at most PROC_MAX. */
static int proc_launch(struct api_call *call, struct e2b_box *b, const struct e2b_start *st,
		       struct e2b_proc **out)
{
	struct e2b *e = e2b_of(call->d);
	char user[E2B_USER_MAX + 1];
	struct e2b_proc *p;
	json_t *req, *resp = NULL;
	int r;

	if ((r = proc_user(call, b, user)))
		return r;
	pthread_mutex_lock(&e->lock);
	size_t running = proc_count(b);
	pthread_mutex_unlock(&e->lock);
	if (running >= PROC_MAX)
		return k8_err_set(&call->err, -E2BIG, "sandbox %s runs %zu processes started "
				  "through envd, the most kosa8 follows at once: end some first",
				  b->id, running);
	p = proc_new(call->d, b, st);
	if (p->efd < 0) {
		r = k8_err_set(&call->err, -errno, "eventfd: %s", strerror(errno));
		goto fail;
	}
	p->sb = sb_get(call->d, b->sandbox, &call->err);
	if (!p->sb) {
		r = call->err.code ? call->err.code : -ENOENT;
		goto fail;
	}
	pthread_mutex_lock(&e->lock);
	req = proc_request(b, p->sb, st, user);
	snprintf(p->container, sizeof(p->container), "%s", b->container);
	pthread_mutex_unlock(&e->lock);
	r = sb_agent_request(p->sb, json_incref(req), PROC_START_MS, &resp, &p->s, &call->err);
	if (r) {
		json_decref(req);
		goto fail;
	}
	p->pid = (uint32_t)json_integer_value(json_object_get(resp, "pid"));
	json_decref(resp);
	e2b_audit(call->d, b, "sandbox.exec", json_pack("{s:s,s:O,s:I,s:b}", "container",
							 p->container, "argv",
							 json_object_get(req, "argv"), "pid",
							 (json_int_t)p->pid, "pty", p->pty));
	json_decref(req);
	pthread_mutex_lock(&e->lock);
	p->refs++;              /* the list's */
	p->next = b->procs;
	b->procs = p;
	pthread_mutex_unlock(&e->lock);
	*out = p;
	return 0;
fail:
	proc_put(p);
	return r;
}

static int proc_start(struct api_call *call, struct e2b_box *b, json_t *msg)
{
	struct e2b_start st;
	struct e2b_proc *p = NULL;
	uint64_t timeout_ms;
	int r;

	if ((r = e2b_timeout_parse(call->header(call->query_ctx, "Connect-Timeout-Ms"),
				   &timeout_ms, &call->err)))
		return r;
	if ((r = e2b_start_parse(msg, &st, &call->err)))
		return r;
	r = proc_launch(call, b, &st, &p);
	e2b_start_clear(&st);
	if (r)
		return r;
	p->timeout_ms = timeout_ms;
	if ((r = proc_timer_start(p))) {
		link_stream_signal(&p->sb->link, p->s, SIGKILL);
		proc_pump_start(p);
		proc_put(p);
		return k8_err_set(&call->err, r, "no thread for the command's timeout: %s",
				  strerror(-r));
	}
	return api_reply_raw(call, API_RAW_BODY, ENVD_STREAM_TYPE, proc_reply, proc_reply_free,
			     p);
}

int e2b_api_proc_start(struct api_call *call)
{
	return envd_take(call, proc_start);
}

/* ---- Connect ---- */

static int proc_not_found(struct api_call *call, const struct e2b_sel *sel)
{
	if (sel->tag[0])
		return k8_err_set(&call->err, -ENOENT, "no process with tag '%s'", sel->tag);
	return k8_err_set(&call->err, -ENOENT, "process with pid %u not found", sel->pid);
}

static int proc_connect(struct api_call *call, struct e2b_box *b, json_t *msg)
{
	struct e2b_sel sel;
	struct e2b_proc *p;
	int r;

	if ((r = e2b_sel_parse(msg, &sel, &call->err)))
		return r;
	p = proc_find(call->d, b, &sel);
	if (!p)
		return proc_not_found(call, &sel);
	return api_reply_raw(call, API_RAW_BODY, ENVD_STREAM_TYPE, proc_reply, proc_reply_free,
			     p);
}

int e2b_api_proc_connect(struct api_call *call)
{
	return envd_take(call, proc_connect);
}

/* ---- unary calls ---- */

int e2b_api_proc_list(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	struct e2b_box *b;
	struct e2b_proc *p;
	json_t *list;
	int r = envd_box(call, &b);

	if (r)
		return envd_unary_end(call, r);
	list = json_array();
	pthread_mutex_lock(&e->lock);
	for (p = b->procs; p; p = p->next)
		json_array_append_new(list, e2b_proc_info(p->config, p->pid, p->tag));
	pthread_mutex_unlock(&e->lock);
	e2b_box_put(call->d, b);
	call->out = json_pack("{s:o}", "processes", list);
	return 0;
}

/* A unary call on the process the body's selector names: fn(call, p). */
static int envd_proc_call(struct api_call *call, int (*fn)(struct api_call *call,
							    struct e2b_proc *p))
{
	struct e2b_box *b = NULL;
	struct e2b_proc *p = NULL;
	struct e2b_sel sel;
	int r = envd_box(call, &b);

	if (!r)
		r = e2b_sel_parse(call->body, &sel, &call->err);
	if (!r) {
		p = proc_find(call->d, b, &sel);
		r = p ? fn(call, p) : proc_not_found(call, &sel);
	}
	proc_put(p);
	e2b_box_put(call->d, b);
	return envd_unary_end(call, r);
}

/* SendInput: the bytes queued for the process's stdin (or terminal), at most
 * PROC_STDIN_MAX ahead of it. */
static int proc_input_call(struct api_call *call, struct e2b_proc *p)
{
	uint8_t *data;
	size_t n;
	bool pty;
	int r;

	if ((r = e2b_input_parse(call->body, &data, &n, &pty, &call->err)))
		return r;
	if (pty && !p->pty)
		r = k8_err_set(&call->err, -EINVAL, "process %u has no terminal: send stdin", p->pid);
	else if (!p->pty && !p->in)
		r = k8_err_set(&call->err, -EBUSY, "process %u was started without stdin", p->pid);
	pthread_mutex_lock(&p->mu);
	if (!r && (p->q_close || p->end))
		r = k8_err_set(&call->err, -EBUSY, "the stdin of process %u is closed", p->pid);
	else if (!r && n > PROC_STDIN_MAX - (p->q_len - p->q_off))
		r = k8_err_set(&call->err, -E2BIG, "process %u has %zu bytes of input waiting; "
			       "at most %u may wait", p->pid, p->q_len - p->q_off, PROC_STDIN_MAX);
	if (!r && n) {
		if (p->q_off) {
			memmove(p->q, p->q + p->q_off, p->q_len - p->q_off);
			p->q_len -= p->q_off;
			p->q_off = 0;
		}
		p->q = realloc(p->q, p->q_len + n);
		if (!p->q)
			abort();
		memcpy(p->q + p->q_len, data, n);
		p->q_len += n;
	}
	pthread_mutex_unlock(&p->mu);
	free(data);
	if (!r && n && eventfd_write(p->efd, 1) < 0)
		r = k8_err_set(&call->err, -errno, "eventfd: %s", strerror(errno));
	return r;
}

int e2b_api_proc_input(struct api_call *call)
{
	return envd_proc_call(call, proc_input_call);
}

static int proc_signal_call(struct api_call *call, struct e2b_proc *p)
{
	int sig, r;

	if ((r = e2b_signal_parse(call->body, &sig, &call->err)))
		return r;
	return link_stream_signal(&p->sb->link, p->s, sig) < 0 ?
	       k8_err_set(&call->err, -ECONNRESET, "the sandbox's agent is gone") : 0;
}

int e2b_api_proc_signal(struct api_call *call)
{
	return envd_proc_call(call, proc_signal_call);
}

/* CloseStdin: stdin ends once what is queued is in. */
static int proc_close_call(struct api_call *call, struct e2b_proc *p)
{
	(void)call;
	pthread_mutex_lock(&p->mu);
	p->q_close = true;
	pthread_mutex_unlock(&p->mu);
	eventfd_write(p->efd, 1);
	return 0;
}

int e2b_api_proc_close_stdin(struct api_call *call)
{
	return envd_proc_call(call, proc_close_call);
}

/* Update: a terminal's size (the process gets SIGWINCH). */
static int proc_update_call(struct api_call *call, struct e2b_proc *p)
{
	unsigned cols, rows;
	json_t *req, *resp = NULL;
	int r = e2b_update_parse(call->body, &cols, &rows, &call->err);

	if (r == -ENOENT)
		return 0;               /* nothing to change */
	if (r)
		return r;
	if (!p->pty)
		return k8_err_set(&call->err, -EINVAL, "process %u has no terminal to resize",
				  p->pid);
	req = json_pack("{s:s,s:I,s:i,s:i}", "op", "resize", "stream",
			(json_int_t)link_stream_id(p->s), "rows", (int)rows, "cols", (int)cols);
	r = sb_agent_request(p->sb, req, 10000, &resp, NULL, &call->err);
	json_decref(resp);
	if (r == -ESRCH) {      /* it exited meanwhile */
		k8_err_clear(&call->err);
		r = k8_err_set(&call->err, -ENOENT, "process %u has exited", p->pid);
	}
	return r;
}

int e2b_api_proc_update(struct api_call *call)
{
	return envd_proc_call(call, proc_update_call);
}

/* ---- /health, /envs: plain HTTP, E2B's error shape ---- */

int e2b_api_health(struct api_call *call)
{
	struct e2b_box *b;
	int r = envd_box(call, &b);

	e2b_box_put(call->d, b);
	if (!r)
		call->status = 204;
	return r;
}

int e2b_api_envs(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	struct e2b_box *b;
	int r = envd_box(call, &b);

	if (r)
		return r;
	pthread_mutex_lock(&e->lock);
	call->out = json_deep_copy(b->env_vars);
	pthread_mutex_unlock(&e->lock);
	e2b_box_put(call->d, b);
	return 0;
}
