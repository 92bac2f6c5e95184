/* SPDX-License-Identifier: Apache-2.0 */
/* test_interp_event.c - the interpreter's wire (src/daemon/interp_event.c): bounded lines,
 * events checked and rebuilt, the cell request, environments and context ids; and the
 * embedded Python, which must fit one exec frame. */
#include "common/proto.h"
#include "daemon/interp.h"
#include "daemon/interp_event.h"
#include "t.h"

#include <stdlib.h>
#include <string.h>

struct got {
	int n;
	char last[64];
	size_t last_len;
};

static int on_line(void *ctx, const char *p, size_t n)
{
	struct got *g = ctx;
	g->n++;
	g->last_len = n;
	snprintf(g->last, sizeof(g->last), "%.*s", (int)(n < 63 ? n : 63), p);
	return 0;
}

static int stop_line(void *ctx, const char *p, size_t n)
{
	(void)ctx;
	(void)p;
	(void)n;
	return -ECANCELED;
}

static void test_lines(void)
{
	struct interp_lines lr;
	struct got g = { 0 };
	char big[100];

	interp_lines_init(&lr, 16);
	/* split across feeds */
	CHECK_EQ_INT(interp_lines_feed(&lr, "ab", 2, on_line, &g), 0);
	CHECK_EQ_INT(g.n, 0);
	CHECK_EQ_INT(interp_lines_feed(&lr, "c\nde\n", 5, on_line, &g), 0);
	CHECK_EQ_INT(g.n, 2);
	CHECK_STR(g.last, "de");
	/* 15 bytes and its newline fit; 16 do not: dropped whole, counted, the next one kept */
	memset(big, 'x', sizeof(big));
	big[15] = '\n';
	CHECK_EQ_INT(interp_lines_feed(&lr, big, 16, on_line, &g), 0);
	CHECK_EQ_INT(g.n, 3);
	CHECK_EQ_INT(g.last_len, 15);
	big[15] = 'x';
	big[16] = '\n';
	CHECK_EQ_INT(interp_lines_feed(&lr, big, 17, on_line, &g), 0);
	CHECK_EQ_INT(g.n, 3);
	CHECK_EQ_INT(lr.dropped, 1);
	/* a long line over many feeds, without newline, then its end and a good line */
	big[16] = 'x';
	for (int i = 0; i < 10; i++)
		CHECK_EQ_INT(interp_lines_feed(&lr, big, 15, on_line, &g), 0);
	CHECK_EQ_INT(interp_lines_feed(&lr, "tail\nok\n", 8, on_line, &g), 0);
	CHECK_EQ_INT(g.n, 4);
	CHECK_STR(g.last, "ok");
	CHECK_EQ_INT(lr.dropped, 2);
	/* the callback's failure stops the feed and is returned */
	CHECK_EQ_INT(interp_lines_feed(&lr, "a\nb\n", 4, stop_line, NULL), -ECANCELED);
	interp_lines_free(&lr);
}

static int check(const char *line, json_t **ev)
{
	return interp_event_check(line, strlen(line), ev);
}

static void test_events(void)
{
	json_t *ev;
	char *big;

	CHECK_EQ_INT(check("{\"type\":\"connected\"}", &ev), INTERP_EV_CONNECTED);
	json_decref(ev);
	CHECK_EQ_INT(check("{\"type\":\"start\",\"execution_count\":3,\"x\":1}", &ev),
		     INTERP_EV_START);
	CHECK(json_object_size(ev) == 2);    /* the unknown field is gone */
	json_decref(ev);
	CHECK_EQ_INT(check("{\"type\":\"stdout\",\"text\":\"hi\\n\"}\r", &ev), INTERP_EV_STDOUT);
	CHECK_STR(json_string_value(json_object_get(ev, "text")), "hi\n");
	json_decref(ev);
	CHECK_EQ_INT(check("{\"type\":\"stderr\",\"text\":\"e\"}", &ev), INTERP_EV_STDERR);
	json_decref(ev);
	/* result: only MIME-shaped keys with string values, is_main_result a boolean */
	CHECK_EQ_INT(check("{\"type\":\"result\",\"is_main_result\":true,\"data\":{"
			   "\"text/plain\":\"2\",\"image/png\":\"iVBO\",\"BAD KEY\":\"x\","
			   "\"text/html\":5,\"a/b/c\":\"x\",\"x\":\"y\"}}", &ev), INTERP_EV_RESULT);
	CHECK(json_is_true(json_object_get(ev, "is_main_result")));
	CHECK(json_object_size(json_object_get(ev, "data")) == 2);
	json_decref(ev);
	CHECK_EQ_INT(check("{\"type\":\"result\",\"is_main_result\":1,\"data\":{}}", &ev), -EINVAL);
	CHECK_EQ_INT(check("{\"type\":\"result\",\"data\":[]}", &ev), -EINVAL);
	/* error: name required, the rest cut to their bounds */
	CHECK_EQ_INT(check("{\"type\":\"error\",\"name\":\"ZeroDivisionError\",\"value\":\"x\"}",
			   &ev), INTERP_EV_ERROR);
	CHECK_STR(json_string_value(json_object_get(ev, "traceback")), "");
	json_decref(ev);
	big = xmalloc(INTERP_VALUE_MAX + 200);
	strcpy(big, "{\"type\":\"error\",\"name\":\"E\",\"value\":\"");
	size_t o = strlen(big);
	memset(big + o, 'v', INTERP_VALUE_MAX + 10);
	strcpy(big + o + INTERP_VALUE_MAX + 10, "\"}");
	CHECK_EQ_INT(check(big, &ev), INTERP_EV_ERROR);
	CHECK(json_string_length(json_object_get(ev, "value")) < INTERP_VALUE_MAX + 100);
	CHECK(strstr(json_string_value(json_object_get(ev, "value")), "[kosa8: cut at") != NULL);
	json_decref(ev);
	free(big);
	CHECK_EQ_INT(check("{\"type\":\"error\",\"value\":\"x\"}", &ev), -EINVAL);
	/* end needs its count and ok */
	CHECK_EQ_INT(check("{\"type\":\"end\",\"execution_count\":1,\"ok\":false}", &ev),
		     INTERP_EV_END);
	json_decref(ev);
	CHECK_EQ_INT(check("{\"type\":\"end\",\"execution_count\":-1,\"ok\":true}", &ev), -EINVAL);
	CHECK_EQ_INT(check("{\"type\":\"end\",\"execution_count\":1}", &ev), -EINVAL);
	/* garbage of every kind */
	CHECK_EQ_INT(check("", &ev), -EINVAL);
	CHECK_EQ_INT(check("not json", &ev), -EINVAL);
	CHECK_EQ_INT(check("[1,2]", &ev), -EINVAL);
	CHECK_EQ_INT(check("{\"type\":\"exec\",\"argv\":[\"rm\"]}", &ev), -EINVAL);
	CHECK_EQ_INT(check("{\"type\":5}", &ev), -EINVAL);
	CHECK_EQ_INT(check("{\"type\":\"stdout\",\"text\":\"a\",\"type\":\"stderr\"}", &ev), -EINVAL);
	CHECK_EQ_INT(check("{\"type\":\"stdout\",\"text\":\"\\udc00\"}", &ev), -EINVAL);
	CHECK(ev == NULL);
	/* deep nesting is refused by the parser, not a stack overflow */
	big = xmalloc(200001);
	memset(big, '[', 200000);
	big[200000] = 0;
	CHECK_EQ_INT(check(big, &ev), -EINVAL);
	free(big);
}

static void test_request(void)
{
	json_t *env = json_pack("{s:s,s:s}", "A", "1", "B", "x=y\n");
	size_t n;
	char *r = interp_request("print(1)\n", 9, env, &n);
	const char *want = "K8CELL1\ncode 9\nprint(1)\nenv 3\nA=1env 6\nB=x=y\nEND\n";

	CHECK_EQ_INT(n, strlen(want));
	CHECK(r && memcmp(r, want, n) == 0);
	free(r);
	r = interp_request("", 0, NULL, &n);
	CHECK(r && n == strlen("K8CELL1\ncode 0\nEND\n"));
	free(r);
	json_decref(env);
}

static void test_env(void)
{
	struct k8_err err = { 0 };
	json_t *e;

	CHECK_EQ_INT(interp_env_check(NULL, "env", &err), 0);
	e = json_pack("{s:s}", "GOOD_1", "v");
	CHECK_EQ_INT(interp_env_check(e, "env", &err), 0);
	json_decref(e);
	e = json_pack("{s:s}", "1BAD", "v");
	CHECK_EQ_INT(interp_env_check(e, "env", &err), -EINVAL);
	json_decref(e);
	k8_err_clear(&err);
	e = json_pack("{s:s}", "A=B", "v");
	CHECK_EQ_INT(interp_env_check(e, "env", &err), -EINVAL);
	json_decref(e);
	k8_err_clear(&err);
	e = json_pack("{s:i}", "A", 1);
	CHECK_EQ_INT(interp_env_check(e, "env", &err), -EINVAL);
	json_decref(e);
	k8_err_clear(&err);
	e = json_pack("[s]", "A=1");
	CHECK_EQ_INT(interp_env_check(e, "env", &err), -EINVAL);
	CHECK(strstr(err.msg, "'env'") != NULL);
	json_decref(e);
}

static void test_ids(void)
{
	char c[13];

	CHECK_EQ_INT(interp_id_parse("0123456789ab-default", c), 0);
	CHECK_STR(c, "0123456789ab");
	CHECK_EQ_INT(interp_id_parse("0123456789ab-1a2b3c4d", c), 0);
	CHECK_EQ_INT(interp_id_parse("0123456789ab-", c), -EINVAL);
	CHECK_EQ_INT(interp_id_parse("0123456789AB-x", c), -EINVAL);
	CHECK_EQ_INT(interp_id_parse("0123456789ag-x", c), -EINVAL);
	CHECK_EQ_INT(interp_id_parse("0123456789ab-../x", c), -EINVAL);
	CHECK_EQ_INT(interp_id_parse("0123456789ab-x-y", c), -EINVAL);
	CHECK_EQ_INT(interp_id_parse("0123456789ab-abcdefghijklmnopq", c), -EINVAL);  /* 17 */
	CHECK_EQ_INT(interp_id_parse("default", c), -EINVAL);
}

/* The driver travels in an exec's argv, JSON-escaped in one control frame. */
static void test_sources(void)
{
	json_t *a = json_pack("[s,s,s]", "python3", "-c", interp_driver_py);
	char *t = json_dumps(a, JSON_COMPACT);

	CHECK(strlen(interp_driver_py) > 1000 && strlen(interp_cell_py) > 200);
	CHECK(t && strlen(t) + 2048 < PROTO_MAX_JSON);
	CHECK(strstr(interp_driver_py, "def main(") != NULL);
	free(t);
	json_decref(a);
}

int main(void)
{
	test_lines();
	test_events();
	test_request();
	test_env();
	test_ids();
	test_sources();
	return T_DONE();
}
