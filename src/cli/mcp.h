/* SPDX-License-Identifier: Apache-2.0 */
/* mcp.h - kosa8 mcp, a Model Context Protocol server over one sandbox (docs/mcp.md).
 *
 *   mcp_rpc.c    JSON-RPC messages and tool arguments: parsed and checked, pure (unit
 *                tested, fuzzed: fuzz_mcp)
 *   mcp.c        the verb: options, the sandbox it serves, the dispatch of messages, stdio
 *   mcp_tools.c  the tools: run_code, run_cell, files, checkpoint, rewind, egress_status
 *   mcp_http.c   the streamable HTTP transport (libmicrohttpd)
 */
#ifndef K8_CLI_MCP_H
#define K8_CLI_MCP_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

/* ---- mcp_rpc.c: the wire, pure ---- */

#define MCP_MSG_MAX (4u << 20)          /* one JSON-RPC message */
#define MCP_PROTO_DEFAULT "2025-06-18"

/* JSON-RPC 2.0 error codes */
enum {
	MCP_PARSE_ERROR = -32700,
	MCP_INVALID_REQUEST = -32600,
	MCP_METHOD_NOT_FOUND = -32601,
	MCP_INVALID_PARAMS = -32602,
	MCP_INTERNAL_ERROR = -32603,
};

enum mcp_kind { MCP_REQUEST, MCP_NOTIFICATION, MCP_RESPONSE };

/* A parsed message: pointers into msg (held). */
struct mcp_msg {
	json_t *msg;
	enum mcp_kind kind;
	const char *method;             /* requests and notifications */
	json_t *id;                     /* requests and responses: a string or an integer */
	json_t *params;                 /* an object, or NULL */
};

/* Parse one message (buf[0..n), not NUL-terminated). 0 with *m filled (mcp_msg_free it);
 * or a negative errno with *reply the JSON-RPC error to send (id null when the id could
 * not be read): parse error, invalid request (not an object, jsonrpc not "2.0", an id
 * that is not a string or integer, a method that is not a string, params that are not
 * an object, a batch). */
int mcp_rpc_parse(const char *buf, size_t n, struct mcp_msg *m, json_t **reply);
void mcp_msg_free(struct mcp_msg *m);

json_t *mcp_result(json_t *id, json_t *result);             /* takes result */
json_t *mcp_error(json_t *id, int code, const char *fmt, ...) K8_PRINTF(3, 4);
json_t *mcp_notification(const char *method, json_t *params);    /* takes params */

/* The protocol version to answer an initialize with: the client's when we speak it,
 * else ours (MCP_PROTO_DEFAULT). */
const char *mcp_proto_pick(const char *asked);
bool mcp_proto_known(const char *v);

/* Tool arguments, checked: 0 (absent and optional leaves *out), or -EINVAL with a
 * message naming the argument (it becomes a -32602 error). */
int mcp_arg_str(const json_t *args, const char *name, bool required, size_t max,
		const char **out, struct k8_err *err);
int mcp_arg_int(const json_t *args, const char *name, long long min, long long max,
		long long *out, struct k8_err *err);
int mcp_arg_bool(const json_t *args, const char *name, bool *out, struct k8_err *err);
/* Arguments not in `known` (NULL-terminated): -EINVAL naming the first. */
int mcp_args_only(const json_t *args, const char *const *known, struct k8_err *err);

/* A guest path for the file tools: absolute, at most 4095 bytes, no "." or ".." or
 * empty component, no NUL or control bytes. On 0, *rel is the part below `root` (a
 * mount's guest path) when path is that folder or inside it ("" for the folder itself);
 * -ENOENT when it is not under root; -EINVAL when it is no such path. */
int mcp_path_under(const char *path, const char *root, const char **rel);

/* Text for a JSON string: valid UTF-8 kept, every other byte replaced by U+FFFD. Fresh. */
char *mcp_utf8(const char *p, size_t n);

/* Output kept within a limit: the first part and the last, and how much was left out
 * between them (the guide's run_code kept the last 10000 characters). */
struct mcp_outbuf {
	char *head;                     /* limit / 4 */
	char *tail;                     /* a ring of limit - limit / 4 */
	size_t limit, hlen, tcap, tpos, tlen;
	uint64_t total;
};
void mcp_outbuf_init(struct mcp_outbuf *o, size_t limit);
void mcp_outbuf_add(struct mcp_outbuf *o, const void *p, size_t n);
/* The text (UTF-8 checked), with "[kosa8: N bytes of output left out here ...]" where
 * it was cut. Fresh. */
char *mcp_outbuf_text(const struct mcp_outbuf *o);
void mcp_outbuf_free(struct mcp_outbuf *o);

/* ---- mcp.c: the server ---- */

struct mcp_server;
struct mcp_session;

/* Where a request's messages go: its notifications (progress) and its response. send
 * takes msg; a negative return: the peer left (the call is then cancelled). */
struct mcp_out {
	int (*send)(struct mcp_out *o, json_t *msg);
	void *ctx;
};

/* One request being handled: cancellable from another thread (notifications/cancelled,
 * a closed HTTP stream). */
struct mcp_call {
	struct mcp_call *next;
	json_t *id;
	json_t *progress_token;         /* NULL: the client asked for no progress */
	struct mcp_out *out;
	int cancelled;                  /* __atomic */
	double progress;                /* the last sent (it must increase) */
};

/* A session: stdio has one; HTTP one per Mcp-Session-Id. */
struct mcp_session {
	pthread_mutex_t lock;
	struct mcp_call *calls;
	char proto[16];                 /* the version agreed at initialize */
	bool initialized;
	char id[33];                    /* HTTP: its Mcp-Session-Id */
	const char *transport;          /* "stdio", "http" */
	uint64_t last_use_ns;
};

void mcp_session_init(struct mcp_session *ss, const char *transport);
void mcp_session_cancel_all(struct mcp_session *ss);

/* Handle one parsed message (taken). A request's response (and its notifications) go to
 * out; a request is registered in the session first, so a cancellation finds it. May
 * block for as long as the tool runs. */
void mcp_handle(struct mcp_server *s, struct mcp_session *ss, struct mcp_msg *m,
		struct mcp_out *out);
/* For HTTP: register the call before handling it on another thread. */
struct mcp_call *mcp_call_begin(struct mcp_session *ss, const struct mcp_msg *m,
				struct mcp_out *out);
void mcp_call_run(struct mcp_server *s, struct mcp_session *ss, struct mcp_msg *m,
		  struct mcp_call *c);
bool mcp_call_cancelled(struct mcp_call *c);
void mcp_call_cancel(struct mcp_call *c);

/* ---- mcp_tools.c ---- */

struct mcp_tool_ctx {
	struct mcp_server *s;
	struct mcp_session *ss;
	struct mcp_call *call;
};
/* The tools this build has, in the order tools/list shows them. */
struct mcp_tool {
	const char *name;
	const char *description;
	const char *schema;             /* its inputSchema, as JSON text */
	bool touches;                   /* changes the sandbox: --rewind-to rewinds after it */
	/* 0 with *result (a CallToolResult); -EINVAL with err: invalid arguments (-32602);
	 * any other failure is the tool's own and comes back as a result with isError */
	int (*fn)(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
		  struct k8_err *err);
};
extern const struct mcp_tool mcp_tools[];
const struct mcp_tool *mcp_tool_find(const char *name);
/* A CallToolResult of one text, isError as given. */
json_t *mcp_text_result(const char *text, bool is_error);
/* Send a progress notification for the call when the client asked for them. */
void mcp_progress(struct mcp_call *c, double progress, const char *fmt, ...) K8_PRINTF(3, 4);

/* What the tools need of the server (mcp.c) */
const char *mcp_server_home(struct mcp_server *s);
const char *mcp_server_sandbox(struct mcp_server *s);
const char *mcp_server_image(struct mcp_server *s);      /* NULL: the sandbox's only one */
int mcp_server_timeout(struct mcp_server *s);            /* run_code's default, seconds */
int mcp_server_timeout_max(struct mcp_server *s);
size_t mcp_server_max_output(struct mcp_server *s);
/* --files DIR: the file tools' folder in the interpreter container (NULL: none). */
const char *mcp_server_files_root(struct mcp_server *s);
/* Wait until the sandbox is ready (created, pulled, checkpointed when the server owns
 * it): 0, or its failure. */
int mcp_server_ready(struct mcp_server *s, struct k8_err *err);

/* ---- mcp_http.c ---- */

/* Serve the streamable HTTP transport on addr ("127.0.0.1:PORT") until *stop; token:
 * every request must carry "Authorization: Bearer TOKEN" (NULL: none). Prints the URL on
 * stderr once listening. */
int mcp_http_serve(struct mcp_server *s, const char *addr, const char *token,
		   volatile int *stop, struct k8_err *err);

#endif
