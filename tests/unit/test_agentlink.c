/* SPDX-License-Identifier: Apache-2.0 */
/* test_agentlink.c - the daemon's agent link against a hostile "agent": garbage, floods,
 * window overruns, unparsable answers and silence. The link must fail cleanly, keep its
 * memory bounded and never crash. The fake agent is a thread on a real unix socket. */
#include "common/proto.h"
#include "daemon/agentlink.h"
#include "t.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Generous, named bounds: what they prove is the order of events, not speed. */
#define GARBAGE_FAILS_BEFORE_NS 9000000000ull   /* < the 10 s request timeout */
#define SILENT_TIMEOUT_BOUND_NS 8000000000ull   /* 0.7 s timeout + slack */

struct fake {
	int lfd;
	char path[108];
	int mode;
	int done;
};

enum { F_GARBAGE, F_FLOOD, F_OVERRUN, F_BADJSON, F_SILENT, F_EVILEXIT, F_ECHO, F_LOST,
       F_GONE };

/* What the fake agent saw of a stream (F_ECHO, F_GONE). */
static struct {
	size_t credit;                  /* CREDIT the daemon gave back */
	int signal;                     /* the last SIGNAL's number */
	bool eof;                       /* STDIN EOF */
} seen;

static void wr(int fd, uint16_t type, uint16_t flags, uint32_t id, const void *p, size_t n)
{
	proto_write(fd, type, flags, id, p, n);
}

/* Read one REQ from the daemon, return its id. */
static uint32_t read_req(int fd)
{
	unsigned char hdr[PROTO_HDR_LEN];
	struct proto_hdr h;
	static unsigned char buf[PROTO_MAX_PAYLOAD];

	for (;;) {
		if (read_full(fd, hdr, sizeof(hdr)))
			return 0;
		proto_hdr_decode(hdr, &h);
		if (h.len > sizeof(buf) || (h.len && read_full(fd, buf, h.len)))
			return 0;
		if (h.type == PROTO_REQ)
			return h.id;
	}
}

static void *fake_agent(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);
	static const char hello[] = "{\"proto\":1,\"agent\":\"evil\"}";
	unsigned char junk[4096];
	uint32_t id;

	if (fd < 0)
		return NULL;
	wr(fd, PROTO_HELLO, 0, 0, hello, sizeof(hello) - 1);
	switch (f->mode) {
	case F_GARBAGE:
		id = read_req(fd);
		memset(junk, 0xff, sizeof(junk)); /* type 0xffff, len 0xffffffff */
		(void)!write(fd, junk, sizeof(junk));
		break;
	case F_FLOOD:
		/* 20000 frames for streams that do not exist, events, pings, then an answer */
		id = read_req(fd);
		memset(junk, 'x', sizeof(junk));
		for (int i = 0; i < 20000; i++)
			wr(fd, PROTO_STDOUT, 0, 999 + (uint32_t)i, junk, sizeof(junk));
		for (int i = 0; i < 2000; i++)
			wr(fd, PROTO_EVENT, 0, 0, "{\"event\":\"noise\"}", 17);
		wr(fd, PROTO_RESP, 0, id + 12345, "{\"ok\":true}", 11); /* wrong id */
		wr(fd, PROTO_RESP, 0, id, "{\"ok\":true,\"v\":7}", 17);
		break;
	case F_OVERRUN:
		/* answer, then 4 MiB of output with no credit */
		id = read_req(fd);
		wr(fd, PROTO_RESP, 0, id, "{\"ok\":true}", 11);
		memset(junk, 'y', sizeof(junk));
		for (int i = 0; i < 1024; i++)
			wr(fd, PROTO_STDOUT, 0, id, junk, sizeof(junk));
		break;
	case F_BADJSON:
		id = read_req(fd);
		wr(fd, PROTO_RESP, 0, id, "{\"ok\":tru", 9);
		id = read_req(fd);
		wr(fd, PROTO_RESP, 0, id, "[1,2,3]", 7);
		id = read_req(fd);
		wr(fd, PROTO_RESP, 0, id, "{\"ok\":false,\"error\":\"bad\\u0007\\nthing\",\"errno\":99999}", 52);
		break;
	case F_SILENT:
		read_req(fd);
		break;
	case F_ECHO: {
		/* output, then each STDIN frame echoed back as STDOUT until EOF, then exit 3 */
		unsigned char hdr[PROTO_HDR_LEN];
		static unsigned char buf[PROTO_MAX_PAYLOAD];
		struct proto_hdr h;

		id = read_req(fd);
		wr(fd, PROTO_RESP, 0, id, "{\"ok\":true,\"pid\":7}", 19);
		wr(fd, PROTO_STDOUT, 0, id, "hello ", 6);
		while (!read_full(fd, hdr, sizeof(hdr))) {
			proto_hdr_decode(hdr, &h);
			if (h.len > sizeof(buf) || (h.len && read_full(fd, buf, h.len)))
				break;
			if (h.type == PROTO_CREDIT && h.len == 4)
				seen.credit += buf[0] | buf[1] << 8 | buf[2] << 16 | (size_t)buf[3] << 24;
			if (h.type == PROTO_STDIN && h.len)
				wr(fd, PROTO_STDOUT, 0, id, buf, h.len);
			if (h.type == PROTO_STDIN && (h.flags & PROTO_F_EOF)) {
				seen.eof = true;
				wr(fd, PROTO_EXIT, 0, id, "{\"code\":3}", 10);
			}
		}
		break;
	}
	case F_LOST:
		/* output, then the VM goes away: the connection closes under the stream */
		id = read_req(fd);
		wr(fd, PROTO_RESP, 0, id, "{\"ok\":true}", 11);
		wr(fd, PROTO_STDOUT, 0, id, "last words", 10);
		usleep(100000);
		shutdown(fd, SHUT_RDWR);
		break;
	case F_GONE: {
		/* output, then wait for a SIGNAL */
		unsigned char hdr[PROTO_HDR_LEN];
		static unsigned char buf[PROTO_MAX_PAYLOAD];
		struct proto_hdr h;

		id = read_req(fd);
		wr(fd, PROTO_RESP, 0, id, "{\"ok\":true}", 11);
		wr(fd, PROTO_STDOUT, 0, id, "for nobody", 10);
		while (!read_full(fd, hdr, sizeof(hdr))) {
			proto_hdr_decode(hdr, &h);
			if (h.len > sizeof(buf) || (h.len && read_full(fd, buf, h.len)))
				break;
			if (h.type == PROTO_SIGNAL && h.len == 4) {
				seen.signal = buf[0];
				wr(fd, PROTO_EXIT, 0, id, "{\"code\":137,\"signal\":9}", 23);
			}
		}
		break;
	}
	case F_EVILEXIT: {
		/* an EXIT whose fields try to reach the terminal, the audit log and the JSON */
		static const char ex[] = "{\"code\":\"\\u001b[2J0\",\"signal\":999,\"oom\":1,"
			"\"error\":\"\\u001b]0;pwned\\u0007\\nkosa8: fake line\\u009b31m\","
			"\"container\":{\"x\":1},\"extra\":\"injected\"}";
		id = read_req(fd);
		wr(fd, PROTO_RESP, 0, id, "{\"ok\":true}", 11);
		wr(fd, PROTO_EXIT, 0, id, ex, sizeof(ex) - 1);
		break;
	}
	}
	while (!__atomic_load_n(&f->done, __ATOMIC_SEQ_CST))
		usleep(10000);
	close(fd);
	return NULL;
}

static void fake_start(struct fake *f, pthread_t *t, int mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(f, 0, sizeof(*f));
	f->mode = mode;
	snprintf(f->path, sizeof(f->path), "/tmp/k8-link-%d-%d.sock", (int)getpid(), mode);
	unlink(f->path);
	strcpy(sa.sun_path, f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa));
	listen(f->lfd, 1);
	pthread_create(t, NULL, fake_agent, f);
}

static void fake_stop(struct fake *f, pthread_t t, struct agentlink *l)
{
	__atomic_store_n(&f->done, 1, __ATOMIC_SEQ_CST);
	link_close(l);
	pthread_join(t, NULL);
	close(f->lfd);
	unlink(f->path);
}

/* The stream's exit, waited for up to 5 s (its output dropped and credited): the EXIT's
 * info, or NULL. */
static json_t *wait_exit(struct agentlink *l, struct stream *s)
{
	for (int i = 0; i < 50; i++) {
		struct sframe *f;
		json_t *info = NULL;
		enum link_next w = link_stream_next(l, s, 100, &f, &info);

		if (w == LINK_NEXT_FRAME) {
			link_stream_consumed(l, s, f->len);
			free(f);
			i--;
		} else if (w == LINK_NEXT_EXIT || w == LINK_NEXT_LOST) {
			return info;
		}
	}
	return NULL;
}

struct sink {
	char out[256];
	size_t n;
	bool gone;                      /* the consumer leaves at its first output */
	int in_fd;
	struct agentlink *l;            /* ctl_input's signals go to this stream */
	struct stream *s;
	int calls_after_eof;            /* ctl_input calls once stdin was over */
	bool eof;
};

static int sink_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
		       size_t n)
{
	struct sink *k = ctx;

	(void)flags;
	if (k->gone)
		return -1;
	if (type == PROTO_STDOUT && k->n + n < sizeof(k->out)) {
		memcpy(k->out + k->n, p, n);
		k->n += n;
	}
	return 0;
}

static ssize_t sink_input(void *ctx, unsigned char *buf, size_t max, unsigned *flags)
{
	struct sink *k = ctx;
	ssize_t got = read(k->in_fd, buf, max);

	if (got <= 0) {
		*flags |= STREAM_IN_EOF;
		return 0;
	}
	return got;
}

/* A client whose fd carries more than stdin (as kosa8's exec socket does): 'E' ends
 * stdin, 'S' is a SIGTERM for the process, its close is STREAM_IN_SHUT. */
static ssize_t ctl_input(void *ctx, unsigned char *buf, size_t max, unsigned *flags)
{
	struct sink *k = ctx;
	char c;
	ssize_t got = read(k->in_fd, &c, 1);

	(void)max;
	if (k->eof)
		k->calls_after_eof++;
	if (got <= 0) {
		*flags |= STREAM_IN_EOF | STREAM_IN_SHUT;
		return 0;
	}
	if (c == 'E') {
		k->eof = true;
		*flags |= STREAM_IN_EOF;
		return 0;
	}
	if (c == 'S') {
		link_stream_signal(k->l, k->s, SIGTERM);
		return 0;
	}
	buf[0] = (unsigned char)c;
	return 1;
}

/* Writes 'S' into fd after 200 ms; SIGKILLs the stream itself at 3 s if the loop never
 * read it (so a loop that stopped reading fails the test rather than hanging it). */
struct late {
	int fd;
	struct agentlink *l;
	struct stream *s;
};

static void *late_signal(void *arg)
{
	struct late *lt = arg;

	usleep(200000);
	(void)!write(lt->fd, "S", 1);
	for (int i = 0; i < 280 && !__atomic_load_n(&seen.signal, __ATOMIC_SEQ_CST); i++)
		usleep(10000);
	if (!__atomic_load_n(&seen.signal, __ATOMIC_SEQ_CST))
		link_stream_signal(lt->l, lt->s, SIGKILL);
	return NULL;
}

static int connect_link(struct agentlink *l, struct fake *f)
{
	struct k8_err err = { 0 };
	memset(l, 0, sizeof(*l));
	if (link_connect(l, f->path, NULL, NULL, &err))
		return -1;
	return link_wait_hello(l, 5000, &err);
}

int main(void)
{
	struct agentlink l;
	struct fake f;
	pthread_t t;
	struct k8_err err;
	json_t *resp;
	struct stream *s;
	uint64_t t0;

	/* As in kosa8d: a peer that went away is an error return, not a signal. */
	signal(SIGPIPE, SIG_IGN);

	/* garbage: the link breaks, the request fails at once, no crash */
	fake_start(&f, &t, F_GARBAGE);
	CHECK(connect_link(&l, &f) == 0);
	memset(&err, 0, sizeof(err));
	t0 = now_mono_ns();
	CHECK(link_request(&l, json_pack("{s:s}", "op", "stat"), 10000, &resp, NULL, &err) < 0);
	/* It failed on the garbage, not by running out the request's 10 s: generous bound. */
	CHECK(now_mono_ns() - t0 < GARBAGE_FAILS_BEFORE_NS);
	CHECK(l.broken);
	CHECK(strstr(l.broken_why, "protocol") != NULL);
	fake_stop(&f, t, &l);

	/* flood: frames for unknown streams are dropped and counted; the real answer still
	 * arrives */
	fake_start(&f, &t, F_FLOOD);
	CHECK(connect_link(&l, &f) == 0);
	memset(&err, 0, sizeof(err));
	resp = NULL;
	CHECK(link_request(&l, json_pack("{s:s}", "op", "stat"), 60000, &resp, NULL, &err) == 0);
	CHECK_EQ_INT(json_integer_value(json_object_get(resp, "v")), 7);
	json_decref(resp);
	CHECK(l.dropped_frames >= 20000);
	CHECK(!l.broken);
	fake_stop(&f, t, &l);

	/* overrun: an agent ignoring its window is cut off; the queue stays bounded */
	fake_start(&f, &t, F_OVERRUN);
	CHECK(connect_link(&l, &f) == 0);
	memset(&err, 0, sizeof(err));
	s = NULL;
	CHECK(link_request(&l, json_pack("{s:s}", "op", "run"), 10000, NULL, &s, &err) == 0);
	CHECK(s != NULL);
	if (s) {
		CHECK(link_stream_queued(&l, s) <= PROTO_WINDOW + PROTO_DATA_CHUNK);
		json_t *info = wait_exit(&l, s);
		CHECK_EQ_INT(json_integer_value(json_object_get(info, "code")), 125);
		json_decref(info);
		link_stream_close(&l, s);
	}
	fake_stop(&f, t, &l);

	/* unparsable or wrong-shaped answers become errors with safe messages */
	fake_start(&f, &t, F_BADJSON);
	CHECK(connect_link(&l, &f) == 0);
	memset(&err, 0, sizeof(err));
	CHECK(link_request(&l, json_pack("{s:s}", "op", "a"), 5000, NULL, NULL, &err) < 0);
	CHECK(strstr(err.msg, "unparsable") != NULL);
	memset(&err, 0, sizeof(err));
	CHECK(link_request(&l, json_pack("{s:s}", "op", "b"), 5000, NULL, NULL, &err) < 0);
	memset(&err, 0, sizeof(err));
	CHECK(link_request(&l, json_pack("{s:s}", "op", "c"), 5000, NULL, NULL, &err) == -EIO);
	CHECK(strchr(err.msg, '\n') == NULL && strchr(err.msg, '\a') == NULL);
	fake_stop(&f, t, &l);

	/* a hostile EXIT: only code/signal/oom/error pass, checked, the error escaped */
	fake_start(&f, &t, F_EVILEXIT);
	CHECK(connect_link(&l, &f) == 0);
	memset(&err, 0, sizeof(err));
	s = NULL;
	CHECK(link_request(&l, json_pack("{s:s}", "op", "run"), 10000, NULL, &s, &err) == 0);
	if (s) {
		json_t *info = wait_exit(&l, s);
		const char *e = json_string_value(json_object_get(info, "error"));
		CHECK(info != NULL);
		CHECK_EQ_INT(json_integer_value(json_object_get(info, "code")), 125);
		CHECK(json_object_get(info, "signal") == NULL);
		CHECK(json_is_false(json_object_get(info, "oom")));  /* 1 is not true */
		CHECK(json_object_get(info, "extra") == NULL);
		CHECK(json_object_get(info, "container") == NULL);
		CHECK(e && !strpbrk(e, "\x1b\n\a"));
		CHECK(e && strstr(e, "\\x1b]0;pwned\\x07\\x0akosa8: fake line\\xc2\\x9b31m") != NULL);
		json_decref(info);
		link_stream_close(&l, s);
	}
	fake_stop(&f, t, &l);

	/* link_stream_run, the one loop: output to the sink with its credit back, stdin
	 * from an fd to EOF, the process's exit code */
	struct sink k = { 0 };
	int pfd[2];
	json_t *info = NULL;
	struct stream_ops ops = { .output = sink_output, .input = sink_input, .gone_fd = -1 };

	memset(&seen, 0, sizeof(seen));
	fake_start(&f, &t, F_ECHO);
	CHECK(connect_link(&l, &f) == 0);
	s = NULL;
	CHECK(link_request(&l, json_pack("{s:s}", "op", "run"), 10000, NULL, &s, &err) == 0);
	CHECK(pipe(pfd) == 0);
	CHECK(write(pfd[1], "from stdin", 10) == 10);
	close(pfd[1]);
	k.in_fd = ops.input_fd = pfd[0];
	CHECK_EQ_INT(link_stream_run(&l, s, &ops, &k, &info), 0);
	CHECK_EQ_INT(json_integer_value(json_object_get(info, "code")), 3);
	CHECK(k.n == 16 && !memcmp(k.out, "hello from stdin", 16));
	json_decref(info);
	link_stream_close(&l, s);
	close(pfd[0]);
	usleep(100000);
	CHECK(seen.eof);
	CHECK_EQ_INT(seen.credit, 16);          /* every byte's credit went back */
	fake_stop(&f, t, &l);

	/* the link lost under a running stream: LINK_LOST_EXIT and its words, for everyone */
	fake_start(&f, &t, F_LOST);
	CHECK(connect_link(&l, &f) == 0);
	s = NULL;
	CHECK(link_request(&l, json_pack("{s:s}", "op", "run"), 10000, NULL, &s, &err) == 0);
	memset(&k, 0, sizeof(k));
	struct stream_ops ops2 = { .output = sink_output, .input_fd = -1, .gone_fd = -1 };
	CHECK_EQ_INT(link_stream_run(&l, s, &ops2, &k, &info), -ECONNRESET);
	CHECK_EQ_INT(json_integer_value(json_object_get(info, "code")), LINK_LOST_EXIT);
	CHECK_EQ_INT(LINK_LOST_EXIT, 125);
	CHECK_STR(json_string_value(json_object_get(info, "error")), LINK_LOST_WHY);
	CHECK(k.n == 10 && !memcmp(k.out, "last words", 10));   /* what came before the loss */
	json_decref(info);
	link_stream_close(&l, s);
	fake_stop(&f, t, &l);

	/* the consumer gone: its process gets SIGKILL, nobody reads it */
	memset(&seen, 0, sizeof(seen));
	fake_start(&f, &t, F_GONE);
	CHECK(connect_link(&l, &f) == 0);
	s = NULL;
	CHECK(link_request(&l, json_pack("{s:s}", "op", "run"), 10000, NULL, &s, &err) == 0);
	memset(&k, 0, sizeof(k));
	k.gone = true;
	CHECK_EQ_INT(link_stream_run(&l, s, &ops2, &k, &info), -EPIPE);
	CHECK(info == NULL);
	for (int i = 0; i < 100 && !__atomic_load_n(&seen.signal, __ATOMIC_SEQ_CST); i++)
		usleep(10000);
	CHECK_EQ_INT(seen.signal, 9);
	link_stream_close(&l, s);
	fake_stop(&f, t, &l);

	/* control after stdin's EOF: a client whose stdin ended at once (the containerd
	 * shim's task) still has its SIGNAL read and sent; before, the loop stopped reading
	 * its fd with stdin and the signal was lost */
	memset(&seen, 0, sizeof(seen));
	fake_start(&f, &t, F_GONE);
	CHECK(connect_link(&l, &f) == 0);
	s = NULL;
	CHECK(link_request(&l, json_pack("{s:s}", "op", "run"), 10000, NULL, &s, &err) == 0);
	{
		struct stream_ops ops3 = { .output = sink_output, .input = ctl_input,
					   .control = true, .gone_fd = -1 };
		struct late lt = { .l = &l, .s = s };
		pthread_t lth;
		int cfd[2];

		memset(&k, 0, sizeof(k));
		CHECK(pipe(cfd) == 0);
		CHECK(write(cfd[1], "E", 1) == 1);
		k.in_fd = ops3.input_fd = cfd[0];
		k.l = &l;
		k.s = s;
		lt.fd = cfd[1];
		lt.s = s;
		pthread_create(&lth, NULL, late_signal, &lt);
		CHECK_EQ_INT(link_stream_run(&l, s, &ops3, &k, &info), 0);
		pthread_join(lth, NULL);
		CHECK_EQ_INT(seen.signal, SIGTERM);     /* the client's, not the watchdog's */
		CHECK(k.calls_after_eof >= 1);
		json_decref(info);
		close(cfd[0]);
		close(cfd[1]);
	}
	link_stream_close(&l, s);
	fake_stop(&f, t, &l);

	/* silence: the request times out when asked to */
	fake_start(&f, &t, F_SILENT);
	CHECK(connect_link(&l, &f) == 0);
	memset(&err, 0, sizeof(err));
	t0 = now_mono_ns();
	CHECK(link_request(&l, json_pack("{s:s}", "op", "stat"), 700, NULL, NULL, &err) == -ETIMEDOUT);
	/* It waited for its own timeout (not less), and a silent agent did not hold it long
	 * past it: a generous bound for a loaded machine or a sanitizer build. */
	CHECK(now_mono_ns() - t0 >= 700000000ull);
	CHECK(now_mono_ns() - t0 < SILENT_TIMEOUT_BOUND_NS);
	CHECK(strstr(err.msg, "did not answer") != NULL);
	fake_stop(&f, t, &l);

	return T_DONE();
}
