/* SPDX-License-Identifier: Apache-2.0 */
/* test_e2b_wire.c - Connect's envelope (both ways, every split), its errors, and envd's
 * process requests and events as E2B's JS client writes and reads them. */
#include "e2b/connect.h"
#include "e2b/envd.h"
#include "t.h"

#include <signal.h>
#include <stdlib.h>

static json_t *J(const char *s)
{
	json_error_t e;
	json_t *v = json_loads(s, JSON_ALLOW_NUL, &e);
	if (!v)
		fprintf(stderr, "bad test JSON: %s\n", s);
	return v;
}

struct got {
	int msgs, ends;
	char last[256];
};

static int on_msg(void *ctx, uint8_t flags, const uint8_t *p, size_t n)
{
	struct got *g = ctx;
	g->msgs++;
	g->ends += !!(flags & E2BC_END);
	snprintf(g->last, sizeof(g->last), "%.*s", (int)n, (const char *)p);
	return 0;
}

static void test_envelope(void)
{
	json_t *m = J("{\"event\":{\"start\":{\"pid\":7}}}"), *back;
	size_t n1, n2, i;
	uint8_t *a = e2bc_wrap(m, 0, &n1), *b = e2bc_end(-1, NULL, &n2), both[256];
	struct k8_err err = { 0 };

	CHECK(a && a[0] == 0 && a[4] == n1 - 5);
	CHECK(b && b[0] == E2BC_END && n2 == 7 && !memcmp(b + 5, "{}", 2));
	/* the request direction: exactly one message */
	CHECK_EQ_INT(e2bc_unwrap(a, n1, 1024, &back, &err), 0);
	CHECK(json_equal(back, m));
	json_decref(back);
	memcpy(both, a, n1);
	memcpy(both + n1, b, n2);
	CHECK_EQ_INT(e2bc_unwrap(both, n1 + n2, 1024, &back, &err), -EINVAL);  /* two */
	CHECK_EQ_INT(e2bc_unwrap(a, n1 - 1, 1024, &back, &err), -EINVAL);      /* short */
	CHECK_EQ_INT(e2bc_unwrap(a, 4, 1024, &back, &err), -EINVAL);
	CHECK_EQ_INT(e2bc_unwrap(a, n1, 8, &back, &err), -E2BIG);
	a[0] = 1;
	k8_err_clear(&err);
	CHECK_EQ_INT(e2bc_unwrap(a, n1, 1024, &back, &err), -EINVAL);         /* compressed */
	CHECK(strstr(err.msg, "compressed") != NULL);
	a[0] = 0;
	/* the response direction: any split reads the same */
	for (size_t step = 1; step <= n1 + n2; step++) {
		struct e2bc_reader r;
		struct got g = { 0 };
		int rc = 0;
		e2bc_reader_init(&r, 1024);
		for (i = 0; i < n1 + n2 && !rc; i += step)
			rc = e2bc_reader_feed(&r, both + i, i + step > n1 + n2 ? n1 + n2 - i : step,
					      on_msg, &g, &err);
		CHECK_EQ_INT(rc, 0);
		CHECK(g.msgs == 2 && g.ends == 1 && !strcmp(g.last, "{}"));
		/* nothing may follow the end */
		CHECK_EQ_INT(e2bc_reader_feed(&r, a, n1, on_msg, &g, &err), -EBADMSG);
		e2bc_reader_free(&r);
	}
	free(a);
	free(b);
	json_decref(m);

	b = e2bc_end(E2BC_NOT_FOUND, "process 7 not found", &n2);
	back = json_loadb((const char *)b + 5, n2 - 5, 0, NULL);
	CHECK_STR(json_string_value(json_object_get(json_object_get(back, "error"), "code")),
		  "not_found");
	json_decref(back);
	free(b);
	CHECK_EQ_INT(e2bc_code_http(E2BC_NOT_FOUND), 404);
	CHECK_EQ_INT(e2bc_code_http(E2BC_UNAUTHENTICATED), 401);
	CHECK_STR(e2bc_code_name(e2bc_code_of_errno(-EEXIST)), "already_exists");
	CHECK_STR(e2bc_code_name(e2bc_code_of_errno(-ENOENT)), "not_found");
}

static void test_start(void)
{
	/* what commands.run('echo hi', {envs, cwd}) sends */
	json_t *m = J("{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hi\"],"
		      "\"envs\":{\"B\":\"2\",\"A\":\"1\"},\"cwd\":\"/tmp\"},\"stdin\":false}");
	struct e2b_start s;
	struct k8_err err = { 0 };

	CHECK_EQ_INT(e2b_start_parse(m, &s, &err), 0);
	CHECK_EQ_INT(json_array_size(s.argv), 4);
	CHECK_STR(json_string_value(json_array_get(s.argv, 3)), "echo hi");
	CHECK_STR(json_string_value(json_array_get(s.env, 0)), "A=1");   /* sorted */
	CHECK_STR(s.cwd, "/tmp");
	CHECK(!s.pty && !s.stdin);
	CHECK_STR(json_string_value(json_object_get(s.config, "cwd")), "/tmp");
	CHECK(json_is_object(json_object_get(s.config, "envs")));
	e2b_start_clear(&s);
	json_decref(m);

	/* pty: args -i -l, a size, no stdin field */
	m = J("{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-i\",\"-l\"]},"
	      "\"pty\":{\"size\":{\"cols\":80,\"rows\":\"24\"}},\"tag\":\"t1\"}");
	CHECK_EQ_INT(e2b_start_parse(m, &s, &err), 0);
	CHECK(s.pty && s.cols == 80 && s.rows == 24);
	CHECK_STR(s.tag, "t1");
	CHECK(json_is_array(json_object_get(s.config, "args")));
	e2b_start_clear(&s);
	json_decref(m);

	const char *bad[] = {
		"{}", "{\"process\":{}}", "{\"process\":{\"cmd\":\"\"}}",
		"{\"process\":{\"cmd\":\"x\",\"args\":[1]}}",
		"{\"process\":{\"cmd\":\"x\",\"envs\":{\"A=B\":\"1\"}}}",
		"{\"process\":{\"cmd\":\"x\",\"envs\":{\"A\":1}}}",
		"{\"process\":{\"cmd\":\"x\",\"args\":[\"a\\u0000b\"]}}",
		"{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"cols\":70000}}}",
		"{\"process\":{\"cmd\":\"x\"},\"stdin\":\"yes\"}",
		"{\"process\":{\"cmd\":\"x\",\"cwd\":5}}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		m = J(bad[i]);
		int rc = e2b_start_parse(m, &s, &err);
		CHECK(rc < 0);
		if (rc >= 0) {
			fprintf(stderr, "  accepted: %s\n", bad[i]);
			e2b_start_clear(&s);
		}
		json_decref(m);
	}
	/* too long together */
	m = J("{\"process\":{\"cmd\":\"x\",\"args\":[]}}");
	json_t *args = json_object_get(json_object_get(m, "process"), "args");
	char *big = xmalloc(40000);
	memset(big, 'a', 39999);
	big[39999] = 0;
	json_array_append_new(args, json_string(big));
	json_array_append_new(args, json_string(big));
	CHECK_EQ_INT(e2b_start_parse(m, &s, &err), -E2BIG);
	free(big);
	json_decref(m);
}

static void test_requests(void)
{
	struct k8_err err = { 0 };
	struct e2b_sel sel;
	json_t *m;
	uint8_t *data;
	size_t n;
	bool pty;
	int sig;
	unsigned c, r;

	m = J("{\"process\":{\"pid\":42}}");
	CHECK(e2b_sel_parse(m, &sel, &err) == 0 && sel.pid == 42 && !sel.tag[0]);
	json_decref(m);
	m = J("{\"process\":{\"tag\":\"web\"}}");
	CHECK(e2b_sel_parse(m, &sel, &err) == 0 && sel.pid == 0 && !strcmp(sel.tag, "web"));
	json_decref(m);
	m = J("{\"process\":{\"pid\":-1}}");
	CHECK(e2b_sel_parse(m, &sel, &err) == -EINVAL);
	json_decref(m);
	m = J("{\"process\":{}}");
	CHECK(e2b_sel_parse(m, &sel, &err) == -EINVAL);
	json_decref(m);

	m = J("{\"process\":{\"pid\":1},\"input\":{\"stdin\":\"aGk=\"}}");
	CHECK(e2b_input_parse(m, &data, &n, &pty, &err) == 0 && n == 2 && !memcmp(data, "hi", 2)
	      && !pty);
	free(data);
	json_decref(m);
	m = J("{\"input\":{\"pty\":\"aGk\"}}");          /* unpadded: proto3 JSON allows it */
	CHECK(e2b_input_parse(m, &data, &n, &pty, &err) == 0 && n == 2 && pty);
	free(data);
	json_decref(m);
	m = J("{\"input\":{\"stdin\":\"!!!!\"}}");
	CHECK(e2b_input_parse(m, &data, &n, &pty, &err) == -EINVAL && !data);
	json_decref(m);

	m = J("{\"signal\":\"SIGNAL_SIGKILL\"}");
	CHECK(e2b_signal_parse(m, &sig, &err) == 0 && sig == SIGKILL);
	json_decref(m);
	m = J("{\"signal\":15}");
	CHECK(e2b_signal_parse(m, &sig, &err) == 0 && sig == SIGTERM);
	json_decref(m);
	m = J("{\"signal\":\"SIGNAL_UNSPECIFIED\"}");
	CHECK(e2b_signal_parse(m, &sig, &err) == -EINVAL);
	{
		uint64_t ms = 7;

		CHECK(e2b_timeout_parse(NULL, &ms, &err) == 0 && ms == 0);
		CHECK(e2b_timeout_parse("", &ms, &err) == 0 && ms == 0);
		CHECK(e2b_timeout_parse("60000", &ms, &err) == 0 && ms == 60000);
		CHECK(e2b_timeout_parse("9999999999", &ms, &err) == 0 && ms == 9999999999ull);
		CHECK(e2b_timeout_parse("10000000000", &ms, &err) == -EINVAL);
		CHECK(e2b_timeout_parse("-1", &ms, &err) == -EINVAL);
		CHECK(e2b_timeout_parse("1e3", &ms, &err) == -EINVAL);
		CHECK(e2b_timeout_parse(" 5", &ms, &err) == -EINVAL);
	}
	json_decref(m);

	m = J("{\"process\":{\"pid\":3},\"pty\":{\"size\":{\"cols\":120,\"rows\":40}}}");
	CHECK(e2b_update_parse(m, &c, &r, &err) == 0 && c == 120 && r == 40);
	json_decref(m);
	m = J("{\"process\":{\"pid\":3}}");
	CHECK(e2b_update_parse(m, &c, &r, &err) == -ENOENT);
	json_decref(m);
}

static void test_events(void)
{
	json_t *v = e2b_ev_data("stdout", (const uint8_t *)"hi\n", 3), *x;
	char *t = json_dumps(v, JSON_COMPACT);

	CHECK_STR(t, "{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}}");
	free(t);
	json_decref(v);
	v = e2b_ev_start(99);
	t = json_dumps(v, JSON_COMPACT);
	CHECK_STR(t, "{\"event\":{\"start\":{\"pid\":99}}}");
	free(t);
	json_decref(v);

	x = J("{\"code\":3,\"signal\":0}");
	v = e2b_ev_end(x);
	json_t *end = json_object_get(json_object_get(v, "event"), "end");
	CHECK_EQ_INT(json_integer_value(json_object_get(end, "exitCode")), 3);
	CHECK(json_is_true(json_object_get(end, "exited")));
	CHECK_STR(json_string_value(json_object_get(end, "status")), "exit status 3");
	json_decref(v);
	json_decref(x);
	x = J("{\"code\":137,\"signal\":9}");
	v = e2b_ev_end(x);
	end = json_object_get(json_object_get(v, "event"), "end");
	CHECK_EQ_INT(json_integer_value(json_object_get(end, "exitCode")), -1);
	CHECK(json_is_false(json_object_get(end, "exited")));
	CHECK_STR(json_string_value(json_object_get(end, "status")), "signal: killed");
	json_decref(v);
	json_decref(x);
	x = J("{\"code\":125,\"error\":\"the sandbox's VM or agent went away\"}");
	v = e2b_ev_end(x);
	end = json_object_get(json_object_get(v, "event"), "end");
	CHECK_STR(json_string_value(json_object_get(end, "error")),
		  "the sandbox's VM or agent went away");
	json_decref(v);
	json_decref(x);
}

/* The user of a call, from its Authorization header as the SDKs write it. */
static void test_basic_user(void)
{
	struct k8_err err = { 0 };
	char u[E2B_USER_MAX + 1];
	static const char *const bad[] = {
		NULL, "", "Basic ", "Bearer dXNlcjo=", "Basic Og==",   /* ":" */
		"Basic LXVzZXI6",                                       /* "-user:" */
		"Basic dS91Og==",                                       /* "u/u:" */
		"Basic dXNlcjo",                                        /* unpadded */
		"Basic !!!!",
		"Basic YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhOg==", /* 33 bytes */
	};

	CHECK_EQ_INT(e2b_basic_user("Basic dXNlcjo=", u, &err), 0);        /* "user:" */
	CHECK_STR(u, "user");
	CHECK_EQ_INT(e2b_basic_user("basic cm9vdDpwdw==", u, &err), 0);    /* "root:pw" */
	CHECK_STR(u, "root");
	CHECK_EQ_INT(e2b_basic_user("Basic cm9vdA==", u, &err), 0);        /* no colon */
	CHECK_STR(u, "root");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		k8_err_clear(&err);
		CHECK_EQ_INT(e2b_basic_user(bad[i], u, &err), -EINVAL);
		CHECK(strstr(err.msg, "Authorization") != NULL);
	}
}

int main(void)
{
	test_envelope();
	test_start();
	test_requests();
	test_events();
	test_basic_user();
	return T_DONE();
}
