/* SPDX-License-Identifier: Apache-2.0 */
/* test_e2b_code.c - the code interpreter's wire (src/e2b/code.c): /execute's and
 * /contexts' bodies as @e2b/code-interpreter 2.8.0 sends them, and kosa8's interpreter
 * events as the lines its client reads (parseOutput in its dist/index.js). */
#include "e2b/code.h"
#include "t.h"

#include <stdlib.h>

static json_t *J(const char *s)
{
	json_t *v = json_loads(s, 0, NULL);
	if (!v)
		fprintf(stderr, "bad test JSON: %s\n", s);
	return v;
}

/* the line e2b_code_event makes of event text, compact, or "(none)" */
static char *line(const char *text)
{
	json_t *ev = J(text), *out = e2b_code_event(ev, 1700000000123456789LL);
	char *s = out ? json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS) : strdup("(none)");

	json_decref(ev);
	json_decref(out);
	return s;
}

#define CHECK_LINE(ev, want) do { char *_s = line(ev); CHECK_STR(_s, want); free(_s); } while (0)

static void test_exec_parse(void)
{
	struct k8_err err = { 0 };
	const char *ctx;
	json_t *req, *cell;

	/* what runCode('x') sends: undefined fields are dropped by JSON.stringify */
	req = J("{\"code\":\"x\"}");
	CHECK_EQ_INT(e2b_code_exec_parse(req, &ctx, &cell, &err), 0);
	json_t *want = J("{\"code\":\"x\"}");
	CHECK(ctx == NULL && json_equal(cell, want));
	json_decref(want);
	json_decref(cell);
	json_decref(req);
	/* a context, the cell's env, and what E2B's server ignores */
	req = J("{\"code\":\"y\",\"context_id\":\"0123456789ab-1a2b3c4d\",\"env_vars\":{\"A\":\"1\"},"
		"\"language\":\"python\",\"other\":1}");
	CHECK_EQ_INT(e2b_code_exec_parse(req, &ctx, &cell, &err), 0);
	CHECK_STR(ctx, "0123456789ab-1a2b3c4d");
	CHECK_STR(json_string_value(json_object_get(json_object_get(cell, "env"), "A")), "1");
	CHECK(json_object_size(cell) == 2);
	json_decref(cell);
	json_decref(req);
	/* another language: said, 400 */
	req = J("{\"code\":\"1\",\"language\":\"r\"}");
	CHECK_EQ_INT(e2b_code_exec_parse(req, &ctx, &cell, &err), -ENOTSUP);
	CHECK(strstr(err.msg, "'r'") && strstr(err.msg, "Python") && cell == NULL);
	k8_err_clear(&err);
	json_decref(req);
	/* fields of the wrong type */
	static const char *const bad[] = {
		"{}", "{\"code\":1}", "{\"code\":\"x\",\"context_id\":5}",
		"{\"code\":\"x\",\"context_id\":\"\"}", "{\"code\":\"x\",\"env_vars\":[\"A=1\"]}",
		"{\"code\":\"x\",\"language\":true}",
		"{\"code\":\"x\",\"context_id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		req = J(bad[i]);
		CHECK_EQ_INT(e2b_code_exec_parse(req, &ctx, &cell, &err), -EINVAL);
		CHECK(cell == NULL && err.msg[0]);
		k8_err_clear(&err);
		json_decref(req);
	}
}

static void test_ctx_parse(void)
{
	struct k8_err err = { 0 };
	const char *cwd;
	json_t *req;

	req = J("{\"cwd\":\"/tmp\"}");
	CHECK_EQ_INT(e2b_code_ctx_parse(req, &cwd, &err), 0);
	CHECK_STR(cwd, "/tmp");
	json_decref(req);
	req = J("{\"language\":\"python\"}");
	CHECK_EQ_INT(e2b_code_ctx_parse(req, &cwd, &err), 0);
	CHECK(cwd == NULL);
	json_decref(req);
	req = J("{\"language\":\"javascript\",\"cwd\":\"/\"}");
	CHECK_EQ_INT(e2b_code_ctx_parse(req, &cwd, &err), -ENOTSUP);
	k8_err_clear(&err);
	json_decref(req);
	req = J("{\"cwd\":[]}");
	CHECK_EQ_INT(e2b_code_ctx_parse(req, &cwd, &err), -EINVAL);
	k8_err_clear(&err);
	json_decref(req);
}

static void test_events(void)
{
	CHECK_LINE("{\"type\":\"start\",\"execution_count\":3,\"context\":\"c\"}",
		   "{\"execution_count\":3,\"type\":\"number_of_executions\"}");
	CHECK_LINE("{\"type\":\"stdout\",\"text\":\"hi\\n\"}",
		   "{\"text\":\"hi\\n\",\"timestamp\":\"2023-11-14T22:13:20.123Z\",\"type\":\"stdout\"}");
	CHECK_LINE("{\"type\":\"stderr\",\"text\":\"e\"}",
		   "{\"text\":\"e\",\"timestamp\":\"2023-11-14T22:13:20.123Z\",\"type\":\"stderr\"}");
	CHECK_LINE("{\"type\":\"error\",\"name\":\"ZeroDivisionError\",\"value\":\"division by "
		   "zero\",\"traceback\":\"tb\"}",
		   "{\"name\":\"ZeroDivisionError\",\"traceback\":\"tb\",\"type\":\"error\","
		   "\"value\":\"division by zero\"}");
	CHECK_LINE("{\"type\":\"end\",\"context\":\"c\",\"execution_count\":3,\"ok\":true,\"ms\":5}",
		   "{\"type\":\"end_of_execution\"}");
	CHECK_LINE("{\"type\":\"keepalive\"}", "{\"type\":\"keepalive\"}");
	CHECK_LINE("{\"type\":\"connected\"}", "(none)");
	CHECK_LINE("{}", "(none)");
	/* the main result: Jupyter's MIME bundle as E2B's fields */
	CHECK_LINE("{\"type\":\"result\",\"is_main_result\":true,\"data\":{\"text/plain\":\"42\"}}",
		   "{\"is_main_result\":true,\"text\":\"42\",\"type\":\"result\"}");
	/* a repr'd str loses its quotes (E2B's server does it); a double-quoted one not */
	CHECK_LINE("{\"type\":\"result\",\"is_main_result\":true,\"data\":{\"text/plain\":\"'a "
		   "string'\"}}", "{\"is_main_result\":true,\"text\":\"a string\",\"type\":\"result\"}");
	CHECK_LINE("{\"type\":\"result\",\"is_main_result\":true,\"data\":{\"text/plain\":\"'\"}}",
		   "{\"is_main_result\":true,\"text\":\"'\",\"type\":\"result\"}");
	CHECK_LINE("{\"type\":\"result\",\"is_main_result\":false,\"data\":{\"text/plain\":\"\\\"q\\\"\"}}",
		   "{\"is_main_result\":false,\"text\":\"\\\"q\\\"\",\"type\":\"result\"}");
	/* rich: html and png as they are, JSON parsed, the rest in extra */
	CHECK_LINE("{\"type\":\"result\",\"is_main_result\":false,\"data\":{\"text/html\":\"<b>hi</b>\","
		   "\"image/png\":\"iVBO\",\"application/json\":\"{\\\"a\\\": [1]}\",\"text/x-odd\":\"o\"}}",
		   "{\"extra\":{\"text/x-odd\":\"o\"},\"html\":\"<b>hi</b>\",\"is_main_result\":false,"
		   "\"json\":{\"a\":[1]},\"png\":\"iVBO\",\"type\":\"result\"}");
	/* JSON that is not: kept as the string it was */
	CHECK_LINE("{\"type\":\"result\",\"is_main_result\":false,\"data\":{\"application/json\":\"{\"}}",
		   "{\"is_main_result\":false,\"json\":\"{\",\"type\":\"result\"}");
}

static void test_ctx(void)
{
	json_t *c = J("{\"id\":\"0123456789ab-1a2b3c4d\",\"container\":\"0123456789ab\",\"pid\":7,"
		      "\"cwd\":\"/tmp\",\"created\":\"x\",\"language\":\"python\",\"alive\":true}");
	json_t *e = e2b_code_ctx(c);
	char *s = json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS);

	CHECK_STR(s, "{\"cwd\":\"/tmp\",\"id\":\"0123456789ab-1a2b3c4d\",\"language\":\"python\"}");
	free(s);
	json_decref(e);
	json_decref(c);
}

int main(void)
{
	test_exec_parse();
	test_ctx_parse();
	test_events();
	test_ctx();
	return T_DONE();
}
