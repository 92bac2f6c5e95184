/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_mcp.c - libFuzzer target: what an MCP client (an agent, steered by whatever it
 * read) may send kosa8 mcp (src/cli/mcp_rpc.c): one JSON-RPC message through the parser,
 * its params through the argument getters, the same bytes as a file tool's path and as
 * output text.
 *
 * Any abort() below is a broken invariant: a message accepted with the wrong shape, an
 * error reply that is not JSON-RPC's, an argument getter that accepted a value outside
 * its bounds, a path accepted with a ".." component or outside its root, text that is
 * not valid UTF-8 for jansson. */
#include "cli/mcp.h"

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_reply(json_t *r)
{
	json_t *e = json_object_get(r, "error");
	long long code = json_integer_value(json_object_get(e, "code"));

	if (!json_is_object(e) || !json_is_string(json_object_get(e, "message")) ||
	    (code != MCP_PARSE_ERROR && code != MCP_INVALID_REQUEST))
		abort();
	json_t *id = json_object_get(r, "id");
	if (!json_is_null(id) && !json_is_string(id) && !json_is_integer(id))
		abort();
	char *t = json_dumps(r, JSON_COMPACT);
	if (!t)
		abort();
	free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_msg m;
	json_t *reply = NULL;
	const char *in = (const char *)data;

	if (mcp_rpc_parse(in, size, &m, &reply) < 0) {
		if (!reply)
			abort();
		check_reply(reply);
		json_decref(reply);
	} else {
		if (reply || !json_is_object(m.msg))
			abort();
		if (m.kind != MCP_RESPONSE && (!m.method || !*m.method || strlen(m.method) > 256))
			abort();
		if (m.kind == MCP_REQUEST && !json_is_string(m.id) && !json_is_integer(m.id))
			abort();
		if (m.params && !json_is_object(m.params))
			abort();
		/* the arguments of a tools/call, through every getter */
		json_t *args = json_object_get(m.params, "arguments");
		struct k8_err err = { 0 };
		const char *s = NULL;
		long long n = 0;
		bool b = false;
		static const char *const known[] = { "code", "path", "timeout_s", NULL };
		if (mcp_arg_str(args, "code", true, 100, &s, &err) == 0 &&
		    (!s || strlen(s) > 100 || !*s))
			abort();
		if (mcp_arg_int(args, "timeout_s", 1, 600, &n, &err) == 0 && n && (n < 1 || n > 600))
			abort();
		mcp_arg_bool(args, "append", &b, &err);
		mcp_args_only(args, known, &err);
		mcp_msg_free(&m);
	}
	/* the bytes as a path below /data */
	char path[4200];
	const char *rel;
	snprintf(path, sizeof(path), "%.*s", (int)(size < 4199 ? size : 4199), in);
	if (mcp_path_under(path, "/data", &rel) == 0) {
		if (strncmp(path, "/data", 5) || strstr(path, "/../") || strstr(path, "/./") ||
		    (strlen(path) >= 3 && !strcmp(path + strlen(path) - 3, "/..")) || strstr(path, "//"))
			abort();
	}
	/* the bytes as output */
	char *u = mcp_utf8(in, size);
	json_t *j = json_string(u);
	if (!j)
		abort();
	json_decref(j);
	free(u);
	struct mcp_outbuf o;
	mcp_outbuf_init(&o, 300);
	mcp_outbuf_add(&o, in, size);
	mcp_outbuf_add(&o, in, size);
	u = mcp_outbuf_text(&o);
	j = json_string(u);
	if (!j)
		abort();
	json_decref(j);
	free(u);
	mcp_outbuf_free(&o);
	return 0;
}
