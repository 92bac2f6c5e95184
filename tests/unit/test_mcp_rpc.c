/* SPDX-License-Identifier: Apache-2.0 */
/* test_mcp_rpc.c - kosa8 mcp's wire (src/cli/mcp_rpc.c): JSON-RPC messages parsed and
 * checked, errors shaped as JSON-RPC says, tool arguments, the file tools' paths, UTF-8
 * repair and output kept within a limit. src/cli is not in the unit tests' library, so
 * the I/O-free file is included directly (as test_cli_args.c does). */
#include "../../src/cli/mcp_rpc.c"
#include "t.h"

static int parse(const char *s, struct mcp_msg *m, json_t **reply)
{
	return mcp_rpc_parse(s, strlen(s), m, reply);
}

static long long err_code(json_t *reply)
{
	return json_integer_value(json_object_get(json_object_get(reply, "error"), "code"));
}

static void test_messages(void)
{
	struct mcp_msg m;
	json_t *r;

	CHECK_EQ_INT(parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\","
			   "\"params\":{\"name\":\"x\"}}", &m, &r), 0);
	CHECK(m.kind == MCP_REQUEST && !strcmp(m.method, "tools/call"));
	CHECK(json_integer_value(m.id) == 7 && json_is_object(m.params));
	mcp_msg_free(&m);
	CHECK_EQ_INT(parse("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"}", &m, &r), 0);
	CHECK(m.kind == MCP_REQUEST && m.params == NULL);
	mcp_msg_free(&m);
	CHECK_EQ_INT(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
			   "\"params\":{\"requestId\":7}}", &m, &r), 0);
	CHECK(m.kind == MCP_NOTIFICATION && m.id == NULL);
	mcp_msg_free(&m);
	CHECK_EQ_INT(parse("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", &m, &r), 0);
	CHECK(m.kind == MCP_RESPONSE);
	mcp_msg_free(&m);

	/* each malformed message: its JSON-RPC error, with the id when it could be read */
	static const struct { const char *in; int code; bool id; } bad[] = {
		{ "{nope", MCP_PARSE_ERROR, false },
		{ "", MCP_PARSE_ERROR, false },
		{ "{\"a\":1,\"a\":2}", MCP_PARSE_ERROR, false },
		{ "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", MCP_INVALID_REQUEST, false },
		{ "5", MCP_INVALID_REQUEST, false },
		{ "\"str\"", MCP_INVALID_REQUEST, false },
		{ "{\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, true },
		{ "{\"jsonrpc\":2,\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, true },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", MCP_INVALID_REQUEST, false },
		{ "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", MCP_INVALID_REQUEST, false },
		{ "{\"jsonrpc\":\"2.0\",\"id\":[],\"method\":\"ping\"}", MCP_INVALID_REQUEST, false },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", MCP_INVALID_REQUEST, true },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", MCP_INVALID_REQUEST, true },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":[1]}", MCP_INVALID_REQUEST,
		  true },
		{ "{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_INVALID_REQUEST, true },
		{ "{\"jsonrpc\":\"2.0\"}", MCP_INVALID_REQUEST, false },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int rc = parse(bad[i].in, &m, &r);
		CHECK(rc < 0);
		CHECK(r != NULL && m.msg == NULL);
		if (err_code(r) != bad[i].code)
			fprintf(stderr, "case %zu: %s -> %lld\n", i, bad[i].in, err_code(r));
		CHECK_EQ_INT(err_code(r), bad[i].code);
		CHECK(!json_is_null(json_object_get(r, "id")) == bad[i].id);
		CHECK_STR(json_string_value(json_object_get(r, "jsonrpc")), "2.0");
		json_decref(r);
	}
	/* a message over the cap is refused before it is parsed */
	char *big = xmalloc(MCP_MSG_MAX + 2);
	memset(big, ' ', MCP_MSG_MAX + 1);
	CHECK_EQ_INT(mcp_rpc_parse(big, MCP_MSG_MAX + 1, &m, &r), -E2BIG);
	json_decref(r);
	free(big);
}

static void test_versions(void)
{
	CHECK_STR(mcp_proto_pick("2025-03-26"), "2025-03-26");
	CHECK_STR(mcp_proto_pick("2025-11-25"), MCP_PROTO_DEFAULT);
	CHECK_STR(mcp_proto_pick(NULL), MCP_PROTO_DEFAULT);
	CHECK(mcp_proto_known("2025-06-18") && !mcp_proto_known("2099-01-01"));
}

static void test_args(void)
{
	struct k8_err err = { 0 };
	json_t *a = json_pack("{s:s,s:i,s:f,s:b,s:s}", "code", "x", "n", 5, "f", 30.0, "b", 1,
			      "big", "0123456789");
	const char *s = NULL;
	long long n = -1;
	bool b = false;
	static const char *const known[] = { "code", "n", "f", "b", "big", NULL };
	static const char *const few[] = { "code", NULL };

	CHECK_EQ_INT(mcp_arg_str(a, "code", true, 10, &s, &err), 0);
	CHECK_STR(s, "x");
	CHECK_EQ_INT(mcp_arg_str(a, "big", true, 5, &s, &err), -EINVAL);
	CHECK(strstr(err.msg, "'big'") != NULL);
	k8_err_clear(&err);
	CHECK_EQ_INT(mcp_arg_str(a, "absent", true, 5, &s, &err), -EINVAL);
	k8_err_clear(&err);
	CHECK_EQ_INT(mcp_arg_str(a, "n", false, 5, &s, &err), -EINVAL);
	k8_err_clear(&err);
	CHECK_EQ_INT(mcp_arg_int(a, "n", 1, 10, &n, &err), 0);
	CHECK_EQ_INT(n, 5);
	CHECK_EQ_INT(mcp_arg_int(a, "f", 1, 100, &n, &err), 0);    /* 30.0 is 30 */
	CHECK_EQ_INT(n, 30);
	CHECK_EQ_INT(mcp_arg_int(a, "n", 6, 10, &n, &err), -EINVAL);
	k8_err_clear(&err);
	CHECK_EQ_INT(mcp_arg_int(a, "code", 0, 10, &n, &err), -EINVAL);
	k8_err_clear(&err);
	CHECK_EQ_INT(mcp_arg_bool(a, "b", &b, &err), 0);
	CHECK(b);
	CHECK_EQ_INT(mcp_args_only(a, known, &err), 0);
	CHECK_EQ_INT(mcp_args_only(a, few, &err), -EINVAL);
	CHECK(strstr(err.msg, "unknown argument") != NULL);
	json_decref(a);
}

static void test_paths(void)
{
	const char *rel = NULL;

	CHECK_EQ_INT(mcp_path_under("/data/a/b.txt", "/data", &rel), 0);
	CHECK_STR(rel, "a/b.txt");
	CHECK_EQ_INT(mcp_path_under("/data", "/data", &rel), 0);
	CHECK_STR(rel, "");
	CHECK_EQ_INT(mcp_path_under("/data/", "/data/", &rel), 0);
	CHECK_EQ_INT(mcp_path_under("/database/x", "/data", &rel), -ENOENT);
	CHECK_EQ_INT(mcp_path_under("/etc/passwd", "/data", &rel), -ENOENT);
	CHECK_EQ_INT(mcp_path_under("/data/../etc/passwd", "/data", &rel), -EINVAL);
	CHECK_EQ_INT(mcp_path_under("/data/./x", "/data", &rel), -EINVAL);
	CHECK_EQ_INT(mcp_path_under("/data//x", "/data", &rel), -EINVAL);
	CHECK_EQ_INT(mcp_path_under("data/x", "/data", &rel), -EINVAL);
	CHECK_EQ_INT(mcp_path_under("/data/a\nb", "/data", &rel), -EINVAL);
	CHECK_EQ_INT(mcp_path_under("/data/..", "/data", &rel), -EINVAL);
	CHECK_EQ_INT(mcp_path_under("/x/y", "/", &rel), 0);
	CHECK_STR(rel, "x/y");
}

static void test_text(void)
{
	char *u = mcp_utf8("a\xff" "b\xc3\xa9" "\xed\xa0\x80" "c", 9);   /* a surrogate too */
	CHECK_STR(u, "a\xef\xbf\xbd" "b\xc3\xa9" "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "c");
	free(u);
	u = mcp_utf8("a\0b", 3);
	CHECK_STR(u, "a\xef\xbf\xbd" "b");
	free(u);

	struct mcp_outbuf o;
	char *t;
	mcp_outbuf_init(&o, 100);
	mcp_outbuf_add(&o, "short", 5);
	t = mcp_outbuf_text(&o);
	CHECK_STR(t, "short");
	free(t);
	for (int i = 0; i < 1000; i++)
		mcp_outbuf_add(&o, i == 999 ? "END" : "x", i == 999 ? 3 : 1);
	t = mcp_outbuf_text(&o);
	CHECK(strncmp(t, "shortxxxx", 9) == 0);
	CHECK(strstr(t, "left out here") != NULL && strstr(t, "was 1007 bytes") != NULL);
	CHECK(strlen(t) > 3 && !strcmp(t + strlen(t) - 3, "END"));
	free(t);
	mcp_outbuf_free(&o);
}

int main(void)
{
	test_messages();
	test_versions();
	test_args();
	test_paths();
	test_text();
	return T_DONE();
}
