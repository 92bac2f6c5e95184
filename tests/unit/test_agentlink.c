/* SPDX-License-Identifier: Apache-2.0 */
/* test_agentlink.c - the daemon's agent link against a hostile "agent": garbage, floods,
 * window overruns, unparsable answers and silence. The link must fail cleanly, keep its
 * memory bounded and never crash. The fake agent is a thread on a real unix socket. */
#include "common/proto.h"
#include "daemon/agentlink.h"
#include "t.h"

#include <pthread.h>
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

enum { F_GARBAGE, F_FLOOD, F_OVERRUN, F_BADJSON, F_SILENT, F_EVILEXIT };

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
	for (int i = 0; i < 500 && s && !s->exited; i++)
		usleep(10000);
	if (s) {
		CHECK(s->exited);
		CHECK(s->queued <= PROTO_WINDOW + PROTO_DATA_CHUNK);
		CHECK_EQ_INT(json_integer_value(json_object_get(s->exit_info, "code")), 125);
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
	for (int i = 0; i < 500 && s && !s->exited; i++)
		usleep(10000);
	if (s) {
		const char *e = json_string_value(json_object_get(s->exit_info, "error"));
		CHECK(s->exited);
		CHECK_EQ_INT(json_integer_value(json_object_get(s->exit_info, "code")), 125);
		CHECK(json_object_get(s->exit_info, "signal") == NULL);
		CHECK(json_is_false(json_object_get(s->exit_info, "oom")));  /* 1 is not true */
		CHECK(json_object_get(s->exit_info, "extra") == NULL);
		CHECK(json_object_get(s->exit_info, "container") == NULL);
		CHECK(e && !strpbrk(e, "\x1b\n\a"));
		CHECK(e && strstr(e, "\\x1b]0;pwned\\x07\\x0akosa8: fake line\\xc2\\x9b31m") != NULL);
		link_stream_close(&l, s);
	}
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
