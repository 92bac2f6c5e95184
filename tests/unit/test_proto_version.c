/* SPDX-License-Identifier: Apache-2.0 */
/* test_proto_version.c - the protocol version handshake (docs/protocol.md, "Versions"):
 * which version two ranges give, what a HELLO may say about its range (hostile ones
 * included), and the daemon's link_negotiate() against fake agents on a real unix
 * socket: a version 1 agent is spoken to in 1 and never asked about versions, a 1..2
 * agent is told 2, and agents out of range, refusing or answering another version are
 * refused with both ranges named. */
#include "common/proto.h"
#include "daemon/agentlink.h"
#include "t.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

static void test_pick(void)
{
	CHECK_EQ_INT(proto_pick(1, 2, 1, 1), 1);          /* an agent from before the handshake */
	CHECK_EQ_INT(proto_pick(1, 2, 1, 2), 2);
	CHECK_EQ_INT(proto_pick(1, 2, 2, 5), 2);          /* a newer agent that still speaks 2 */
	CHECK_EQ_INT(proto_pick(2, 3, 1, 2), 2);          /* a newer daemon, an older agent */
	CHECK_EQ_INT(proto_pick(1, 2, 3, 3), -EPROTONOSUPPORT);
	CHECK_EQ_INT(proto_pick(2, 2, 1, 1), -EPROTONOSUPPORT);
	CHECK_EQ_INT(proto_pick(1, 2, 2, 1), -EPROTONOSUPPORT);   /* empty range */
	CHECK_EQ_INT(proto_pick(1, 2, 0, 0), -EPROTONOSUPPORT);   /* no version 0 */
	CHECK_EQ_INT(proto_pick(1, 2, 0, 9), -EPROTONOSUPPORT);
	CHECK_EQ_INT(proto_pick(1, 2, 1, PROTO_VERSION_LIMIT + 1u), -EPROTONOSUPPORT);
	CHECK_EQ_INT(proto_pick(1, 70000, 1, 2), -EPROTONOSUPPORT);
	CHECK_EQ_INT(proto_pick(PROTO_VERSION_MIN, PROTO_VERSION_MAX, 1, 1), 1);
}

static int range_of(const char *text, unsigned *lo, unsigned *hi)
{
	json_t *h = json_loads(text, 0, NULL);
	int r;

	*lo = *hi = 0;
	r = proto_hello_range(h, lo, hi);
	json_decref(h);
	return r;
}

static void test_hello_range(void)
{
	unsigned lo, hi;
	static const char *const bad[] = {
		"{}", "{\"proto\":0}", "{\"proto\":-1}", "{\"proto\":\"1\"}", "{\"proto\":1.0}",
		"{\"proto\":65536}", "{\"proto\":9223372036854775807}", "{\"proto\":null}",
		"{\"proto\":2,\"proto_min\":1}", "{\"proto\":2,\"proto_max\":2}",
		"{\"proto\":2,\"proto_min\":3,\"proto_max\":2}",
		"{\"proto\":5,\"proto_min\":1,\"proto_max\":2}",
		"{\"proto\":2,\"proto_min\":0,\"proto_max\":2}",
		"{\"proto\":2,\"proto_min\":1,\"proto_max\":70000}",
		"{\"proto\":2,\"proto_min\":\"1\",\"proto_max\":2}",
		"{\"proto\":2,\"proto_min\":1,\"proto_max\":[2]}",
	};

	CHECK_EQ_INT(range_of("{\"proto\":1,\"agent\":\"0.1.0\"}", &lo, &hi), 0);
	CHECK(lo == 1 && hi == 1);
	CHECK_EQ_INT(range_of("{\"proto\":1,\"proto_min\":1,\"proto_max\":2}", &lo, &hi), 0);
	CHECK(lo == 1 && hi == 2);
	CHECK_EQ_INT(range_of("{\"proto\":2,\"proto_min\":1,\"proto_max\":2}", &lo, &hi), 0);
	CHECK(lo == 1 && hi == 2);
	CHECK_EQ_INT(range_of("{\"proto\":3,\"proto_min\":3,\"proto_max\":3}", &lo, &hi), 0);
	CHECK(lo == 3 && hi == 3);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = range_of(bad[i], &lo, &hi);
		if (r != -EPROTO)
			fprintf(stderr, "accepted: %s\n", bad[i]);
		CHECK_EQ_INT(r, -EPROTO);
	}
	CHECK_EQ_INT(proto_hello_range(NULL, &lo, &hi), -EPROTO);
}

/* ---- link_negotiate against a fake agent ---- */

enum answer { A_ACCEPT, A_UNKNOWN_OP, A_REFUSE, A_OTHER };

struct fake {
	int lfd;
	char path[108];
	const char *hello;
	enum answer answer;
	int proto_reqs;          /* {"op":"proto"} requests seen */
	int version;             /* the last one's "version" */
	char first_op[32];
	bool hold;               /* answer "proto" only once more input came (or 2 s passed) */
	bool more_before_answer; /* the host sent its next request before our answer */
	bool fail_init;          /* answer "init" with an error */
	int inits;
};

static void *fake_agent(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);
	static unsigned char buf[PROTO_MAX_PAYLOAD + 1];
	unsigned char hdr[PROTO_HDR_LEN];
	struct proto_hdr h;

	if (fd < 0)
		return NULL;
	proto_write(fd, PROTO_HELLO, 0, 0, f->hello, strlen(f->hello));
	for (;;) {
		json_t *req, *ans;
		const char *op;
		char *text;

		if (read_full(fd, hdr, sizeof(hdr)))
			break;
		proto_hdr_decode(hdr, &h);
		if (h.len > PROTO_MAX_PAYLOAD || (h.len && read_full(fd, buf, h.len)))
			break;
		if (h.type != PROTO_REQ)
			continue;
		req = json_loadb((const char *)buf, h.len, 0, NULL);
		op = json_string_value(json_object_get(req, "op"));
		if (!f->first_op[0])
			snprintf(f->first_op, sizeof(f->first_op), "%s", op ? op : "?");
		if (op && !strcmp(op, "proto")) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			f->proto_reqs++;
			f->version = (int)json_integer_value(json_object_get(req, "version"));
			if (f->hold)
				f->more_before_answer = poll(&pfd, 1, 2000) == 1;
		}
		if (op && !strcmp(op, "init"))
			f->inits++;
		if (op && !strcmp(op, "proto") && f->answer == A_ACCEPT)
			ans = json_pack("{s:b,s:i}", "ok", 1, "proto", f->version);
		else if (op && !strcmp(op, "proto") && f->answer == A_OTHER)
			ans = json_pack("{s:b,s:i}", "ok", 1, "proto", f->version + 1);
		else if (op && !strcmp(op, "proto") && f->answer == A_REFUSE)
			ans = json_pack("{s:b,s:s,s:i}", "ok", 0, "error",
					"this agent speaks protocol 7..9, not 2", "errno",
					EPROTONOSUPPORT);
		else if (op && !strcmp(op, "proto"))   /* a version 1 agent */
			ans = json_pack("{s:b,s:s,s:i}", "ok", 0, "error", "unknown op 'proto'",
					"errno", EOPNOTSUPP);
		else if (op && !strcmp(op, "init") && f->fail_init)
			ans = json_pack("{s:b,s:s,s:i}", "ok", 0, "error", "field 'seed' is not hex",
					"errno", EINVAL);
		else
			ans = json_pack("{s:b}", "ok", 1);
		text = json_dumps(ans, JSON_COMPACT);
		proto_write(fd, PROTO_RESP, 0, h.id, text, strlen(text));
		free(text);
		json_decref(ans);
		json_decref(req);
	}
	close(fd);
	return NULL;
}

/* Connect a link to a fake agent that says `hello` and answers as told; negotiate.
 * Returns link_negotiate's result, fills *l_proto and the message. */
static int negotiate(const char *hello, enum answer answer, struct fake *f, unsigned *l_proto,
		     char *msg, size_t msglen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct agentlink l;
	struct k8_err err = { 0 };
	json_t *resp = NULL;
	pthread_t t;
	int r;

	memset(f, 0, sizeof(*f));
	f->hello = hello;
	f->answer = answer;
	snprintf(f->path, sizeof(f->path), "/tmp/k8-proto-%d.sock", (int)getpid());
	unlink(f->path);
	strcpy(sa.sun_path, f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(f->lfd, 1))
		return -EIO;
	pthread_create(&t, NULL, fake_agent, f);
	memset(&l, 0, sizeof(l));
	r = link_connect(&l, f->path, NULL, NULL, &err);
	if (!r)
		r = link_wait_hello(&l, 5000, &err);
	if (!r)
		r = link_negotiate(&l, &err);
	*l_proto = l.proto;
	snprintf(msg, msglen, "%s", err.msg);
	/* The link still carries requests afterwards (or was refused before any). */
	if (!r && link_request(&l, json_pack("{s:s}", "op", "stat"), 5000, &resp, NULL, &err))
		r = -EIO;
	json_decref(resp);
	link_close(&l);
	pthread_join(t, NULL);
	close(f->lfd);
	unlink(f->path);
	return r;
}

/* link_negotiate_then against a fake agent that holds its answer to "proto" until the
 * host sent more: the init must come without waiting for that answer. */
static int negotiate_then(const char *hello, enum answer answer, bool fail_init,
			  struct fake *f, unsigned *l_proto, char *msg, size_t msglen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct agentlink l;
	struct k8_err err = { 0 };
	pthread_t t;
	int r;

	memset(f, 0, sizeof(*f));
	f->hello = hello;
	f->answer = answer;
	f->hold = true;
	f->fail_init = fail_init;
	snprintf(f->path, sizeof(f->path), "/tmp/k8-proto-%d.sock", (int)getpid());
	unlink(f->path);
	strcpy(sa.sun_path, f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(f->lfd, 1))
		return -EIO;
	pthread_create(&t, NULL, fake_agent, f);
	memset(&l, 0, sizeof(l));
	r = link_connect(&l, f->path, NULL, NULL, &err);
	if (!r)
		r = link_wait_hello(&l, 5000, &err);
	if (!r)
		r = link_negotiate_then(&l, json_pack("{s:s}", "op", "init"), 5000, NULL, &err);
	*l_proto = l.proto;
	snprintf(msg, msglen, "%s", err.msg);
	link_close(&l);
	pthread_join(t, NULL);
	close(f->lfd);
	unlink(f->path);
	return r;
}

static void test_negotiate_then(void)
{
	struct fake f;
	unsigned v;
	char msg[1024];

	/* 1..2: the choice, and the init right behind it, answered together. */
	CHECK_EQ_INT(negotiate_then("{\"proto\":1,\"proto_min\":1,\"proto_max\":2}", A_ACCEPT,
				    false, &f, &v, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(v, 2);
	CHECK_STR(f.first_op, "proto");
	CHECK(f.more_before_answer);
	CHECK_EQ_INT(f.inits, 1);

	/* Version 1: no choice to make, the init alone. */
	CHECK_EQ_INT(negotiate_then("{\"proto\":1}", A_UNKNOWN_OP, false, &f, &v, msg,
				    sizeof(msg)), 0);
	CHECK_EQ_INT(v, 1);
	CHECK_EQ_INT(f.proto_reqs, 0);
	CHECK_EQ_INT(f.inits, 1);

	/* The init's own error comes back as such, the version still chosen. */
	CHECK_EQ_INT(negotiate_then("{\"proto\":1,\"proto_min\":1,\"proto_max\":2}", A_ACCEPT,
				    true, &f, &v, msg, sizeof(msg)), -EINVAL);
	CHECK_EQ_INT(v, 2);
	CHECK(strstr(msg, "not hex") != NULL);

	/* A refused choice wins over whatever the init got. */
	CHECK_EQ_INT(negotiate_then("{\"proto\":2,\"proto_min\":1,\"proto_max\":2}", A_REFUSE,
				    false, &f, &v, msg, sizeof(msg)), -EPROTONOSUPPORT);
	CHECK_EQ_INT(v, 0);
	CHECK(strstr(msg, "7..9") != NULL);

	/* Nothing in common: nothing sent, not even the init. */
	CHECK_EQ_INT(negotiate_then("{\"proto\":3,\"proto_min\":3,\"proto_max\":3}", A_ACCEPT,
				    false, &f, &v, msg, sizeof(msg)), -EPROTONOSUPPORT);
	CHECK_EQ_INT(f.inits, 0);
}

static void test_negotiate(void)
{
	struct fake f;
	unsigned v;
	char msg[1024];

	/* Version 1 (today's checkpoints): spoken to in 1, never asked about versions. */
	CHECK_EQ_INT(negotiate("{\"proto\":1,\"agent\":\"0.1.0\"}", A_UNKNOWN_OP, &f, &v, msg,
			       sizeof(msg)), 0);
	CHECK_EQ_INT(v, 1);
	CHECK_EQ_INT(f.proto_reqs, 0);
	CHECK_STR(f.first_op, "stat");

	/* 1..2: told 2, first of all requests. */
	CHECK_EQ_INT(negotiate("{\"proto\":1,\"proto_min\":1,\"proto_max\":2}", A_ACCEPT, &f, &v,
			       msg, sizeof(msg)), 0);
	CHECK_EQ_INT(v, 2);
	CHECK_EQ_INT(f.proto_reqs, 1);
	CHECK_EQ_INT(f.version, 2);
	CHECK_STR(f.first_op, "proto");

	/* An agent of the future, with nothing in common: refused, both ranges named. */
	CHECK_EQ_INT(negotiate("{\"proto\":3,\"proto_min\":3,\"proto_max\":3}", A_ACCEPT, &f, &v,
			       msg, sizeof(msg)), -EPROTONOSUPPORT);
	CHECK_EQ_INT(v, 0);
	CHECK_EQ_INT(f.proto_reqs, 0);
	CHECK(strstr(msg, "speaks protocol 3;") != NULL);
	CHECK(strstr(msg, "kosa8d speaks 1..2") != NULL);

	/* A wider agent that still speaks 2: told 2. */
	CHECK_EQ_INT(negotiate("{\"proto\":5,\"proto_min\":2,\"proto_max\":5}", A_ACCEPT, &f, &v,
			       msg, sizeof(msg)), 0);
	CHECK_EQ_INT(v, 2);
	CHECK_EQ_INT(f.version, 2);

	/* One that claims 1..2 but does not know the request, or refuses it, or answers
	 * another version: refused, its own words kept. */
	CHECK_EQ_INT(negotiate("{\"proto\":2,\"proto_min\":1,\"proto_max\":2}", A_UNKNOWN_OP, &f,
			       &v, msg, sizeof(msg)), -EPROTONOSUPPORT);
	CHECK(strstr(msg, "refused protocol 2") != NULL && strstr(msg, "unknown op") != NULL);
	CHECK_EQ_INT(negotiate("{\"proto\":2,\"proto_min\":1,\"proto_max\":2}", A_REFUSE, &f, &v,
			       msg, sizeof(msg)), -EPROTONOSUPPORT);
	CHECK(strstr(msg, "7..9") != NULL);
	CHECK_EQ_INT(negotiate("{\"proto\":2,\"proto_min\":1,\"proto_max\":2}", A_OTHER, &f, &v,
			       msg, sizeof(msg)), -EPROTONOSUPPORT);
	CHECK_EQ_INT(v, 0);

	/* A HELLO that names no version at all. */
	CHECK_EQ_INT(negotiate("{\"agent\":\"x\"}", A_ACCEPT, &f, &v, msg, sizeof(msg)),
		     -EPROTONOSUPPORT);
	CHECK(strstr(msg, "no valid protocol version") != NULL);
	CHECK_EQ_INT(negotiate("[1,2]", A_ACCEPT, &f, &v, msg, sizeof(msg)), -EPROTONOSUPPORT);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_pick();
	test_hello_range();
	test_negotiate();
	test_negotiate_then();
	return T_DONE();
}
