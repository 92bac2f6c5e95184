/* SPDX-License-Identifier: Apache-2.0 */
/* mcp.c - kosa8 mcp: a Model Context Protocol server for one sandbox (docs/mcp.md).
 *
 * Theory of operation. The server speaks JSON-RPC 2.0 to one client (an agent): over
 * stdio, newline-delimited, or over streamable HTTP (mcp_http.c). It offers tools that
 * act on one sandbox the operator named on the command line, through kosa8d's API, as
 * any CLI command does; the model picks tools and their arguments, never the sandbox,
 * its egress, its mounts or its limits (no tool touches them). Each request is a
 * `struct mcp_call` registered in its session before it runs, so a
 * notifications/cancelled that arrives while it runs finds it; a tool checks its call
 * between steps and stops its process (run_code: the container's process is killed;
 * run_cell: the cell is interrupted). On stdio every request runs on a thread of its own
 * and the reader goes on reading; responses and notifications leave through one locked
 * writer. Every tool call is written to kosa8d's audit log (POST /v1/audit, action
 * mcp.tool).
 *
 * A sandbox that does not exist is the server's own: made from the flags (and the image
 * pulled, and --rewind-to's checkpoint taken) on a thread at start, which the first tool
 * call waits for, and removed at the end unless --keep.
 */
#include "cli.h"
#include "cli/mcp.h"
#include "common/sha.h"

#include <poll.h>
#include <sys/random.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

struct mcp_server {
	const char *home;               /* the --home given, or NULL */
	const char *sandbox, *image, *rewind_to;
	const char *files_root;         /* --files DIR: a container path for the file tools */
	bool keep, owned;
	bool *tool_on;                  /* indexed like mcp_tools[] */
	int timeout, timeout_max;
	size_t max_output;
	/* a sandbox of the server's own */
	int cpus, memory, disk;
	json_t *mounts;
	/* readiness: 0 pending, 1 ready, < 0 failed (ready_err) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int ready;
	struct k8_err ready_err;
	pthread_mutex_t touch;          /* with --rewind-to: one call and its rewind at a time */
	int active;                     /* stdio's running calls */
};

static volatile int stop_flag;

const char *mcp_server_home(struct mcp_server *s) { return s->home; }
const char *mcp_server_sandbox(struct mcp_server *s) { return s->sandbox; }
const char *mcp_server_image(struct mcp_server *s) { return s->image; }
int mcp_server_timeout(struct mcp_server *s) { return s->timeout; }
int mcp_server_timeout_max(struct mcp_server *s) { return s->timeout_max; }
size_t mcp_server_max_output(struct mcp_server *s) { return s->max_output; }
const char *mcp_server_files_root(struct mcp_server *s) { return s->files_root; }

int mcp_server_ready(struct mcp_server *s, struct k8_err *err)
{
	int r;

	pthread_mutex_lock(&s->lock);
	while (!s->ready)
		pthread_cond_wait(&s->cond, &s->lock);
	r = s->ready;
	if (r < 0)
		k8_err_set(err, r, "%s", s->ready_err.msg);
	pthread_mutex_unlock(&s->lock);
	return r < 0 ? r : 0;
}

static void set_ready(struct mcp_server *s, int r, const struct k8_err *err)
{
	pthread_mutex_lock(&s->lock);
	s->ready = r < 0 ? r : 1;
	if (err)
		s->ready_err = *err;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* ---- the sandbox ---- */

static int prepare(struct mcp_server *s, struct k8_err *err)
{
	struct client cl;
	cleanup_free char *enc = cli_urlenc(s->sandbox), *path = NULL;
	json_t *res = NULL, *body;
	int r;

	if ((r = client_init(&cl, s->home, err)))
		return r;
	path = xasprintf("/v1/sandboxes/%s", enc);
	r = client_call(&cl, "GET", path, NULL, NULL, NULL, 30000, &res, err);
	json_decref(res);
	res = NULL;
	if (r != -ENOENT) {
		/* an existing sandbox: --rewind-to's checkpoint must exist */
		if (!r && s->rewind_to) {
			cleanup_free char *cp = xasprintf("%s/checkpoints", path);
			json_t *v;
			size_t i;
			bool found = false;
			r = client_call(&cl, "GET", cp, NULL, NULL, NULL, 30000, &res, err);
			json_array_foreach(r ? NULL : res, i, v)
				found |= !strcmp(json_string_value(json_object_get(v, "label")) ?: "",
						 s->rewind_to);
			json_decref(res);
			if (!r && !found)
				r = k8_err_set(err, -ENOENT, "sandbox '%s' has no checkpoint '%s' "
					       "(--rewind-to); take it with kosa8 checkpoint %s --label %s",
					       s->sandbox, s->rewind_to, s->sandbox, s->rewind_to);
		}
		client_free(&cl);
		return r;
	}
	k8_err_clear(err);
	if (!s->image) {
		client_free(&cl);
		return k8_err_set(err, -ENOENT, "sandbox '%s' does not exist; give --image to let "
				  "kosa8 mcp create it", s->sandbox);
	}
	body = json_pack("{s:s,s:i,s:i,s:i,s:s,s:O}", "name", s->sandbox, "cpus", s->cpus,
			 "memory_mib", s->memory, "disk_gb", s->disk, "egress", "deny", "mounts",
			 s->mounts);
	r = client_call(&cl, "POST", "/v1/sandboxes", body, NULL, NULL, 0, &res, err);
	json_decref(body);
	json_decref(res);
	res = NULL;
	if (!r)
		s->owned = true;
	if (!r) {
		cleanup_free char *p = xasprintf("%s/pull", path);
		body = json_pack("{s:s}", "image", s->image);
		r = client_call(&cl, "POST", p, body, NULL, NULL, 0, &res, err);
		json_decref(body);
		json_decref(res);
		res = NULL;
	}
	if (!r && s->rewind_to) {
		cleanup_free char *p = xasprintf("%s/checkpoints", path);
		body = json_pack("{s:s}", "label", s->rewind_to);
		r = client_call(&cl, "POST", p, body, NULL, NULL, 0, &res, err);
		json_decref(body);
		json_decref(res);
	}
	client_free(&cl);
	return r;
}

static void *prepare_thread(void *arg)
{
	struct mcp_server *s = arg;
	struct k8_err err = { 0 };
	int r = prepare(s, &err);

	if (r < 0)
		fprintf(stderr, "kosa8 mcp: %s\n", err.msg);
	set_ready(s, r, &err);
	return NULL;
}

/* ---- calls and sessions ---- */

void mcp_session_init(struct mcp_session *ss, const char *transport)
{
	memset(ss, 0, sizeof(*ss));
	pthread_mutex_init(&ss->lock, NULL);
	snprintf(ss->proto, sizeof(ss->proto), "%s", MCP_PROTO_DEFAULT);
	ss->transport = transport;
	ss->last_use_ns = now_mono_ns();
}

bool mcp_call_cancelled(struct mcp_call *c)
{
	return __atomic_load_n(&c->cancelled, __ATOMIC_SEQ_CST) != 0;
}

void mcp_call_cancel(struct mcp_call *c)
{
	__atomic_store_n(&c->cancelled, 1, __ATOMIC_SEQ_CST);
}

void mcp_session_cancel_all(struct mcp_session *ss)
{
	pthread_mutex_lock(&ss->lock);
	for (struct mcp_call *c = ss->calls; c; c = c->next)
		mcp_call_cancel(c);
	pthread_mutex_unlock(&ss->lock);
}

struct mcp_call *mcp_call_begin(struct mcp_session *ss, const struct mcp_msg *m,
				struct mcp_out *out)
{
	struct mcp_call *c = xcalloc(1, sizeof(*c));
	json_t *meta = json_object_get(m->params, "_meta");
	json_t *tok = json_object_get(meta, "progressToken");

	c->id = json_incref(m->id);
	if (json_is_string(tok) || json_is_integer(tok))
		c->progress_token = json_incref(tok);
	c->out = out;
	pthread_mutex_lock(&ss->lock);
	c->next = ss->calls;
	ss->calls = c;
	pthread_mutex_unlock(&ss->lock);
	return c;
}

static void call_end(struct mcp_session *ss, struct mcp_call *c)
{
	pthread_mutex_lock(&ss->lock);
	for (struct mcp_call **p = &ss->calls; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	pthread_mutex_unlock(&ss->lock);
	json_decref(c->id);
	json_decref(c->progress_token);
	free(c);
}

/* notifications/cancelled: the request with that id, if it is still running. */
static void cancel_request(struct mcp_session *ss, json_t *params)
{
	json_t *rid = json_object_get(params, "requestId");

	if (!rid)
		return;
	pthread_mutex_lock(&ss->lock);
	for (struct mcp_call *c = ss->calls; c; c = c->next)
		if (json_equal(c->id, rid))
			mcp_call_cancel(c);
	pthread_mutex_unlock(&ss->lock);
}

void mcp_progress(struct mcp_call *c, double progress, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	json_t *p;

	if (!c->progress_token || progress <= c->progress)
		return;
	c->progress = progress;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	p = json_pack("{s:O,s:f,s:s}", "progressToken", c->progress_token, "progress", progress,
		      "message", msg);
	if (c->out->send(c->out, mcp_notification("notifications/progress", p)) < 0)
		mcp_call_cancel(c);
}

/* ---- audit: one record per tool call, in kosa8d's log ---- */

static void audit_call(struct mcp_server *s, struct mcp_session *ss, const char *tool,
		       const json_t *args, bool ok, bool cancelled, uint64_t ms, const char *why)
{
	struct client cl;
	struct k8_err err = { 0 };
	char sha[65];
	char *text = json_dumps(args, JSON_COMPACT | JSON_SORT_KEYS);
	json_t *body, *res = NULL;

	sha256_hex(text ? text : "", text ? strlen(text) : 0, sha);
	body = json_pack("{s:s,s:s,s:{s:s,s:s,s:b,s:b,s:I,s:s,s:I}}", "action", "mcp.tool",
			 "sandbox", s->sandbox, "details", "tool", tool, "args_sha256", sha,
			 "ok", ok, "cancelled", cancelled, "ms", (json_int_t)ms, "transport",
			 ss->transport, "args_bytes", (json_int_t)(text ? strlen(text) : 0));
	free(text);
	if (why) {
		char *w = mcp_utf8(why, strlen(why) < 300 ? strlen(why) : 300);
		json_object_set_new(json_object_get(body, "details"), "error", json_string(w));
		free(w);
	}
	if (ss->id[0])
		json_object_set_new(json_object_get(body, "details"), "session",
				    json_string(ss->id));
	if (client_init(&cl, s->home, &err) == 0) {
		if (client_call(&cl, "POST", "/v1/audit", body, NULL, NULL, 10000, &res, &err) < 0)
			fprintf(stderr, "kosa8 mcp: audit: %s\n", err.msg);
		client_free(&cl);
	}
	json_decref(res);
	json_decref(body);
}

static void rewind_after(struct mcp_server *s)
{
	struct client cl;
	struct k8_err err = { 0 };
	cleanup_free char *enc = cli_urlenc(s->sandbox);
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/rewind", enc);
	json_t *body = json_pack("{s:s}", "to", s->rewind_to), *res = NULL;

	if (client_init(&cl, s->home, &err) == 0) {
		if (client_call(&cl, "POST", path, body, NULL, NULL, 0, &res, &err) < 0)
			fprintf(stderr, "kosa8 mcp: rewind to %s: %s\n", s->rewind_to, err.msg);
		client_free(&cl);
	}
	json_decref(res);
	json_decref(body);
}

/* ---- the methods ---- */

static json_t *tools_list(struct mcp_server *s)
{
	json_t *arr = json_array();

	for (int i = 0; mcp_tools[i].name; i++) {
		json_error_t je;
		json_t *schema;
		if (!s->tool_on[i])
			continue;
		schema = json_loads(mcp_tools[i].schema, 0, &je);
		if (!schema)
			abort();        /* our own text: a unit test parses each */
		json_array_append_new(arr, json_pack("{s:s,s:s,s:o}", "name", mcp_tools[i].name,
						     "description", mcp_tools[i].description,
						     "inputSchema", schema));
	}
	return json_pack("{s:o}", "tools", arr);
}

/* What one tool call leaves to record once its response is sent. */
struct audit_rec {
	char tool[128];
	json_t *args;
	bool ok, cancelled, set;
	uint64_t ms;
	char why[300];
};

static void audit_set(struct audit_rec *a, const char *tool, const json_t *args, bool ok,
		      bool cancelled, uint64_t ms, const char *why)
{
	snprintf(a->tool, sizeof(a->tool), "%s", tool);
	a->args = args ? json_deep_copy(args) : json_object();
	a->ok = ok;
	a->cancelled = cancelled;
	a->ms = ms;
	snprintf(a->why, sizeof(a->why), "%s", why ? why : "");
	a->set = true;
}

static json_t *tools_call(struct mcp_server *s, struct mcp_session *ss, struct mcp_call *c,
			  json_t *params, struct audit_rec *rec)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments"), *result = NULL;
	const struct mcp_tool *t = name ? mcp_tool_find(name) : NULL;
	struct mcp_tool_ctx tc = { s, ss, c };
	struct k8_err err = { 0 };
	uint64_t t0 = now_mono_ns();
	int r;

	if (!name)
		return mcp_error(c->id, MCP_INVALID_PARAMS, "tools/call needs params.name");
	if (!t || !s->tool_on[t - mcp_tools]) {
		char *safe = mcp_utf8(name, strlen(name) < 100 ? strlen(name) : 100);
		json_t *e = mcp_error(c->id, MCP_INVALID_PARAMS, "Unknown tool: %s", safe);
		audit_set(rec, safe, json_is_object(args) ? args : NULL, false, false, 0,
			  "no such tool (or not offered: --tools)");
		free(safe);
		return e;
	}
	if (args && !json_is_object(args) && !json_is_null(args))
		return mcp_error(c->id, MCP_INVALID_PARAMS, "arguments must be an object");
	args = json_is_object(args) ? json_incref(args) : json_object();
	if ((r = mcp_server_ready(s, &err)) == 0) {
		if (t->touches && s->rewind_to)
			pthread_mutex_lock(&s->touch);
		r = t->fn(&tc, args, &result, &err);
		if (t->touches && s->rewind_to) {
			if (r != -EINVAL)
				rewind_after(s);
			pthread_mutex_unlock(&s->touch);
		}
	}
	bool cancelled = mcp_call_cancelled(c);
	if (r == -EINVAL && !result) {
		audit_set(rec, t->name, args, false, cancelled, (now_mono_ns() - t0) / 1000000,
			  err.msg);
		json_decref(args);
		return mcp_error(c->id, MCP_INVALID_PARAMS, "%s", err.msg);
	}
	if (r < 0 && !result)
		result = mcp_text_result(err.msg[0] ? err.msg : strerror(-r), true);
	bool ok = !json_is_true(json_object_get(result, "isError"));
	audit_set(rec, t->name, args, ok, cancelled, (now_mono_ns() - t0) / 1000000,
		  ok ? NULL : (err.msg[0] ? err.msg : NULL));
	json_decref(args);
	return mcp_result(c->id, result);
}

static json_t *initialize(struct mcp_session *ss, json_t *id, json_t *params)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));

	snprintf(ss->proto, sizeof(ss->proto), "%s", mcp_proto_pick(asked));
	return mcp_result(id, json_pack("{s:s,s:{s:{s:b}},s:{s:s,s:s,s:s},s:s}",
					"protocolVersion", ss->proto, "capabilities", "tools",
					"listChanged", 0, "serverInfo", "name", "kosa8", "title",
					"kosa8 sandbox", "version", KOSA8_VERSION, "instructions",
					"Tools run code in a sealed kosa8 sandbox (a virtual machine with "
					"no network unless its owner allowed it). run_code starts a fresh "
					"process each call; run_cell keeps Python variables between calls. "
					"Output is trimmed; files are reachable in the sandbox's shared "
					"folders (and in the folder the operator named with --files)."));
}

void mcp_call_run(struct mcp_server *s, struct mcp_session *ss, struct mcp_msg *m,
		  struct mcp_call *c)
{
	json_t *resp;
	const char *meth = m->method;
	struct audit_rec rec = { .set = false };

	if (!strcmp(meth, "initialize"))
		resp = initialize(ss, c->id, m->params);
	else if (!strcmp(meth, "ping"))
		resp = mcp_result(c->id, json_object());
	else if (!strcmp(meth, "tools/list"))
		resp = mcp_result(c->id, tools_list(s));
	else if (!strcmp(meth, "tools/call"))
		resp = tools_call(s, ss, c, m->params, &rec);
	else {
		char *safe = mcp_utf8(meth, strlen(meth));
		resp = mcp_error(c->id, MCP_METHOD_NOT_FOUND, "Method not found: %s", safe);
		free(safe);
	}
	/* a cancelled request gets no response (the client has forgotten it) */
	if (mcp_call_cancelled(c))
		json_decref(resp);
	else
		c->out->send(c->out, resp);
	if (rec.set) {  /* after the response: the record costs the agent no time */
		audit_call(s, ss, rec.tool, rec.args, rec.ok, rec.cancelled || mcp_call_cancelled(c),
			   rec.ms, rec.why[0] ? rec.why : NULL);
		json_decref(rec.args);
	}
	call_end(ss, c);
	mcp_msg_free(m);
}

void mcp_handle(struct mcp_server *s, struct mcp_session *ss, struct mcp_msg *m,
		struct mcp_out *out)
{
	ss->last_use_ns = now_mono_ns();
	if (m->kind == MCP_REQUEST) {
		struct mcp_call *c = mcp_call_begin(ss, m, out);
		mcp_call_run(s, ss, m, c);
		return;
	}
	if (m->kind == MCP_NOTIFICATION) {
		if (!strcmp(m->method, "notifications/initialized"))
			ss->initialized = true;
		else if (!strcmp(m->method, "notifications/cancelled"))
			cancel_request(ss, m->params);
	}
	mcp_msg_free(m);        /* responses to nothing we asked, other notifications */
}

/* ---- stdio ---- */

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static int stdio_send(struct mcp_out *o, json_t *msg)
{
	char *t = json_dumps(msg, JSON_COMPACT);
	int r = -ENOMEM;

	(void)o;
	json_decref(msg);
	if (t) {
		pthread_mutex_lock(&out_lock);
		r = out_write_all(1, t, strlen(t));
		if (!r)
			r = out_write_all(1, "\n", 1);
		pthread_mutex_unlock(&out_lock);
		free(t);
	}
	return r;
}

static struct mcp_out stdio_out = { stdio_send, NULL };

struct stdio_job {
	struct mcp_server *s;
	struct mcp_session *ss;
	struct mcp_msg m;
	struct mcp_call *c;
};

static void *stdio_job(void *arg)
{
	struct stdio_job *j = arg;
	struct mcp_server *s = j->s;

	mcp_call_run(j->s, j->ss, &j->m, j->c);
	free(j);
	pthread_mutex_lock(&s->lock);
	s->active--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static void stdio_line(struct mcp_server *s, struct mcp_session *ss, const char *p, size_t n)
{
	struct mcp_msg m;
	json_t *reply = NULL;

	while (n && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	if (!n)
		return;
	if (mcp_rpc_parse(p, n, &m, &reply) < 0) {
		stdio_send(&stdio_out, reply);
		return;
	}
	if (m.kind != MCP_REQUEST) {
		mcp_handle(s, ss, &m, &stdio_out);
		return;
	}
	struct stdio_job *j = xcalloc(1, sizeof(*j));
	pthread_attr_t attr;
	pthread_t t;

	j->s = s;
	j->ss = ss;
	j->m = m;
	j->c = mcp_call_begin(ss, &m, &stdio_out);
	pthread_mutex_lock(&s->lock);
	s->active++;
	pthread_mutex_unlock(&s->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, stdio_job, j) != 0)
		stdio_job(j);   /* no thread: run it here */
	pthread_attr_destroy(&attr);
}

/* Read messages from stdin until EOF or a signal; an overlong line is answered with a
 * parse error and skipped to its end. */
static void serve_stdio(struct mcp_server *s)
{
	struct mcp_session ss;
	char *buf = xmalloc(MCP_MSG_MAX + 1);
	size_t len = 0;
	bool skipping = false;

	mcp_session_init(&ss, "stdio");
	while (!stop_flag) {
		struct pollfd pfd = { .fd = 0, .events = POLLIN };
		ssize_t got;
		char *nl;

		if (poll(&pfd, 1, 500) <= 0)
			continue;
		got = read(0, buf + len, MCP_MSG_MAX + 1 - len);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			break;
		len += (size_t)got;
		while ((nl = memchr(buf, '\n', len))) {
			size_t ll = (size_t)(nl - buf);
			if (!skipping)
				stdio_line(s, &ss, buf, ll);
			skipping = false;
			memmove(buf, nl + 1, len - ll - 1);
			len -= ll + 1;
		}
		if (len > MCP_MSG_MAX) {
			if (!skipping)
				stdio_send(&stdio_out, mcp_error(NULL, MCP_PARSE_ERROR, "Parse error: a "
								 "message longer than %u bytes",
								 MCP_MSG_MAX));
			skipping = true;
			len = 0;
		}
	}
	free(buf);
	mcp_session_cancel_all(&ss);
	pthread_mutex_lock(&s->lock);
	while (s->active)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

/* ---- the verb ---- */

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

enum {
	OPT_SANDBOX = 1, OPT_IMAGE, OPT_REWIND, OPT_KEEP, OPT_TOOLS, OPT_TIMEOUT, OPT_TIMEOUT_MAX,
	OPT_MAX_OUTPUT, OPT_LISTEN, OPT_TOKEN_FILE, OPT_NO_TOKEN, OPT_CPUS, OPT_MEMORY, OPT_DISK,
	OPT_MOUNT, OPT_FILES,
};

/* --tools a,b,c: which tools are offered (unknown names are a usage error). */
static int pick_tools(struct mcp_server *s, const char *list, struct k8_err *err)
{
	int n = 0;

	while (mcp_tools[n].name)
		n++;
	s->tool_on = xcalloc((size_t)n, sizeof(bool));
	if (!list) {
		for (int i = 0; i < n; i++)
			s->tool_on[i] = true;
		return 0;
	}
	cleanup_free char *copy = xstrdup(list);
	for (char *save = NULL, *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		const struct mcp_tool *tl = mcp_tool_find(t);
		if (!tl)
			return k8_err_set(err, -EINVAL, "--tools: no tool '%s' (there are run_code, "
					  "run_cell, read_file, write_file, list_files, checkpoint, "
					  "rewind, egress_status)", t);
		s->tool_on[tl - mcp_tools] = true;
	}
	return 0;
}

/* The bearer token of --listen: --token-file's (made 0600 when missing), or a random one
 * printed once. */
static char *http_token(const char *file, struct k8_err *err)
{
	unsigned char rnd[24];
	char hex[49], *text = NULL;

	if (file && read_file(file, 4096, &text, NULL) == 0) {
		text[strcspn(text, "\r\n")] = '\0';
		if (strlen(text) < 16) {
			free(text);
			k8_err_set(err, -EINVAL, "%s holds a token shorter than 16 bytes", file);
			return NULL;
		}
		return text;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		k8_err_set(err, -EIO, "getrandom failed");
		return NULL;
	}
	k8_hex(rnd, sizeof(rnd), hex);
	if (file) {
		int r = write_file_atomic(file, hex, strlen(hex), 0600);
		if (r) {
			k8_err_set(err, r, "cannot write %s: %s", file, strerror(-r));
			return NULL;
		}
	}
	return xstrdup(hex);
}

static int cleanup_owned(struct mcp_server *s)
{
	struct client cl;
	struct k8_err err = { 0 };
	cleanup_free char *enc = cli_urlenc(s->sandbox);
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s", enc);
	json_t *res = NULL;

	if (!s->owned || s->keep)
		return 0;
	if (client_init(&cl, s->home, &err) == 0) {
		if (client_call(&cl, "DELETE", path, NULL, NULL, NULL, 0, &res, &err) < 0)
			fprintf(stderr, "kosa8 mcp: removing sandbox %s: %s\n", s->sandbox, err.msg);
		client_free(&cl);
	}
	json_decref(res);
	return 0;
}

int cli_cmd_mcp(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "sandbox", 0, 1, OPT_SANDBOX }, { "image", 0, 1, OPT_IMAGE },
		{ "rewind-to", 0, 1, OPT_REWIND }, { "keep", 0, 0, OPT_KEEP },
		{ "tools", 0, 1, OPT_TOOLS }, { "timeout", 0, 1, OPT_TIMEOUT },
		{ "max-timeout", 0, 1, OPT_TIMEOUT_MAX }, { "max-output", 0, 1, OPT_MAX_OUTPUT },
		{ "listen", 0, 1, OPT_LISTEN }, { "token-file", 0, 1, OPT_TOKEN_FILE },
		{ "no-token", 0, 0, OPT_NO_TOKEN }, { "cpus", 0, 1, OPT_CPUS },
		{ "memory", 0, 1, OPT_MEMORY }, { "disk", 0, 1, OPT_DISK },
		{ "mount", 0, 1, OPT_MOUNT }, { "files", 0, 1, OPT_FILES }, { NULL, 0, 0, 0 },
	};
	struct mcp_server s = { 0 };
	struct sigaction sa = { .sa_handler = on_signal };
	struct k8_err err = { 0 };
	struct cli_args a;
	const char *listen_addr;
	pthread_t prep;
	long v;
	int rc = CLI_EXIT_OK;

	if (!cli_begin(self, argc, argv, opts, 0, 0, 0, home, &a, NULL, &rc))
		return rc;
	s.home = cli_home(&a, home);
	s.sandbox = cli_opt_last(&a, OPT_SANDBOX);
	s.image = cli_opt_last(&a, OPT_IMAGE);
	s.rewind_to = cli_opt_last(&a, OPT_REWIND);
	s.files_root = cli_opt_last(&a, OPT_FILES);
	s.keep = cli_has_opt(&a, OPT_KEEP);
	s.timeout = 30;
	s.timeout_max = 600;
	s.max_output = 10000;
	s.cpus = 1;
	s.memory = 1024;
	s.disk = 4;
	s.mounts = json_array();
	listen_addr = cli_opt_last(&a, OPT_LISTEN);
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.cond, NULL);
	pthread_mutex_init(&s.touch, NULL);
	if (!s.sandbox || cli_check_name(s.sandbox, &err) < 0) {
		rc = cli_usage(self->name, "%s", s.sandbox ? err.msg : "--sandbox NAME is required");
		goto out;
	}
	for (int i = 0; i < a.nopts; i++) {
		const char *val = a.opts[i].arg;
		switch (a.opts[i].id) {
		case OPT_TIMEOUT:
		case OPT_TIMEOUT_MAX:
			if (cli_parse_range(a.opts[i].id == OPT_TIMEOUT ? "--timeout" : "--max-timeout",
					    val, 1, 86400, &v, &err) < 0)
				goto usage;
			*(a.opts[i].id == OPT_TIMEOUT ? &s.timeout : &s.timeout_max) = (int)v;
			break;
		case OPT_MAX_OUTPUT:
			if (cli_parse_range("--max-output", val, 256, 16 << 20, &v, &err) < 0)
				goto usage;
			s.max_output = (size_t)v;
			break;
		case OPT_CPUS:
			if (cli_parse_range("--cpus", val, 1, 64, &v, &err) < 0)
				goto usage;
			s.cpus = (int)v;
			break;
		case OPT_MEMORY:
			if (cli_parse_range("--memory", val, 128, 1 << 20, &v, &err) < 0)
				goto usage;
			s.memory = (int)v;
			break;
		case OPT_DISK:
			if (cli_parse_range("--disk", val, 1, 4096, &v, &err) < 0)
				goto usage;
			s.disk = (int)v;
			break;
		case OPT_MOUNT: {
			struct cli_mount m;
			char *abs;
			if (cli_parse_mount(val, &m, &err) < 0)
				goto usage;
			abs = realpath(m.host, NULL);
			if (!abs) {
				k8_err_set(&err, -EINVAL, "--mount %s: %s: %s", val, m.host, strerror(errno));
				cli_mount_free(&m);
				goto usage;
			}
			json_array_append_new(s.mounts, json_pack("{s:s,s:s,s:b}", "host", abs,
								  "guest", m.guest, "ro", m.ro));
			free(abs);
			cli_mount_free(&m);
			break;
		}
		default:
			break;
		}
	}
	if (s.files_root) {
		const char *rel;
		if (mcp_path_under(s.files_root, "/", &rel) < 0) {
			k8_err_set(&err, -EINVAL, "--files %s: an absolute path without '.', '..' or "
				   "empty components", s.files_root);
			goto usage;
		}
	}
	if (s.timeout > s.timeout_max)
		s.timeout_max = s.timeout;
	if (pick_tools(&s, cli_opt_last(&a, OPT_TOOLS), &err) < 0)
		goto usage;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (pthread_create(&prep, NULL, prepare_thread, &s) != 0) {
		rc = cli_die(CLI_EXIT_ERROR, "cannot start a thread");
		goto out;
	}
	pthread_detach(prep);
	if (listen_addr) {
		cleanup_free char *token = NULL;
		if (!cli_has_opt(&a, OPT_NO_TOKEN)) {
			token = http_token(cli_opt_last(&a, OPT_TOKEN_FILE), &err);
			if (!token) {
				rc = cli_fail(&err);
				goto done;
			}
			if (!cli_opt_last(&a, OPT_TOKEN_FILE))
				fprintf(stderr, "kosa8 mcp: token %s (send Authorization: Bearer TOKEN)\n",
					token);
		}
		if (mcp_http_serve(&s, listen_addr, token, &stop_flag, &err) < 0)
			rc = cli_fail(&err);
	} else {
		serve_stdio(&s);
	}
done:
	/* the sandbox may still be in the making: wait, then remove it when it is ours */
	mcp_server_ready(&s, &err);
	cleanup_owned(&s);
	goto out;
usage:
	rc = cli_usage(self->name, "%s", err.msg);
out:
	json_decref(s.mounts);
	free(s.tool_on);
	cli_args_free(&a);
	return rc;
}

const struct cli_cmd cli_mcp_cmd = {
	"mcp", cli_cmd_mcp, "serve a sandbox's tools to an agent (Model Context Protocol)",
	"Usage: kosa8 mcp --sandbox NAME [--image REF] [--rewind-to LABEL] [--keep]\n"
	"                 [--tools LIST] [--timeout S] [--max-timeout S] [--max-output BYTES]\n"
	"                 [--files DIR]\n"
	"                 [--listen 127.0.0.1:PORT [--token-file FILE | --no-token]]\n"
	"                 [--cpus N] [--memory MIB] [--disk GB] [--mount HOST:GUEST[:ro]]...\n"
	"\n"
	"A Model Context Protocol server (2025-06-18; 2025-03-26 spoken too) whose tools act\n"
	"on sandbox NAME: run_code (python or shell, a fresh container each call), run_cell\n"
	"(Python whose variables persist), read_file, write_file, list_files (the sandbox's\n"
	"shared folders, and --files DIR), checkpoint, rewind, egress_status. The agent\n"
	"chooses tools and their arguments, never the sandbox, its network, its folders or\n"
	"its limits. Over stdio by default (for Claude Desktop, Cursor and other agents that\n"
	"start it), or streamable HTTP on a loopback address with --listen. Long calls send\n"
	"progress; a cancelled call kills its process (or interrupts its cell). Every call\n"
	"is audited (mcp.tool).\n"
	"\n"
	"A sandbox NAME that does not exist is made for the server (egress deny, the flags\n"
	"below, --image pulled, --rewind-to's checkpoint taken) and removed when it ends,\n"
	"unless --keep.\n"
	"\n"
	"Options:\n"
	"  --sandbox NAME     the sandbox the tools act on (required)\n"
	"  --image REF        the image code runs in (default: the sandbox's only one)\n"
	"  --rewind-to LABEL  rewind to this checkpoint after every call that ran code\n"
	"  --keep             keep a sandbox the server made\n"
	"  --tools LIST       offer only these tools, comma-separated (default: all)\n"
	"  --timeout S        a call's time limit when the agent names none (default 30)\n"
	"  --max-timeout S    the most an agent may ask for (default 600)\n"
	"  --max-output N     output kept per call, the rest cut in the middle (default 10000)\n"
	"  --files DIR        the file tools also reach DIR in the sandbox's interpreter\n"
	"                     container (run_cell's; default: the shared folders only)\n"
	"  --listen ADDR      serve streamable HTTP at http://ADDR/mcp (loopback only)\n"
	"  --token-file FILE  the bearer token HTTP clients must send (made, 0600, when\n"
	"                     missing); without it a random one is printed on stderr\n"
	"  --no-token         no token (any local user may then drive the sandbox)\n"
	"  --cpus, --memory, --disk, --mount   for a sandbox the server makes\n"
	"\n"
	"Examples:\n"
	"  kosa8 mcp --sandbox interp --rewind-to clean\n"
	"  kosa8 mcp --sandbox scratch --image python:3.12-slim --listen 127.0.0.1:8765\n"
	"  claude mcp add kosa8 -- kosa8 mcp --sandbox interp\n",
};
