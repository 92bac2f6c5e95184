/* SPDX-License-Identifier: Apache-2.0 */
/* exec.c - run, start and exec: from an API request to a process in the guest and back.
 *
 * exec_prepare() validates the request, makes sure the VM runs and the image is there,
 * and asks the agent to start the process, with its output stream already open, so an
 * error ("no such command") still becomes a normal HTTP error. exec_bridge() then runs in
 * the API connection's own thread on the upgraded socket: client frames (STDIN, SIGNAL)
 * go to the agent within the stdin window; output frames go to the client with blocking
 * writes, and only after a write completes is the credit returned to the agent. A slow
 * or stalled client therefore stalls its own process in the guest and nothing else, and
 * memory per stream stays under one window.
 */
#include "common/proto.h"
#include "daemon/broker.h"
#include "daemon/exec.h"
#include "daemon/sandbox.h"
#include "daemon/slots.h"
#include "daemon/api_route.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#define ARGV_MAX_ITEMS 4096
#define CMD_MAX_BYTES (56u * 1024u)   /* argv + env must fit one JSON frame */
#define START_TIMEOUT_MS 60000

struct exec_ctx {
	struct daemon *d;
	struct sandbox *sb;
	struct stream *stream;
	char container[13];
	bool is_run;
	json_t *argv;
};

static int check_strings(json_t *arr, const char *what, size_t *total, struct k8_err *err)
{
	size_t i;
	json_t *v;

	if (!arr)
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > ARGV_MAX_ITEMS)
		return k8_err_set(err, -EINVAL, "%s must be a list of at most %d strings", what,
				  ARGV_MAX_ITEMS);
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v))
			return k8_err_set(err, -EINVAL, "%s must contain only strings", what);
		*total += json_string_length(v) + 4;
		if (memchr(json_string_value(v), '\0', json_string_length(v)))
			return k8_err_set(err, -EINVAL, "%s must not contain NUL bytes", what);
	}
	if (*total > CMD_MAX_BYTES)
		return k8_err_set(err, -E2BIG, "the command line and environment are too long "
				  "(at most %u KiB together); pass data through stdin or a file",
				  CMD_MAX_BYTES / 1024);
	return 0;
}

static bool container_id_valid(const char *id)
{
	if (!id || strlen(id) != 12)
		return false;
	for (int i = 0; i < 12; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

static void new_container_id(char out[13])
{
	unsigned char r[6];
	if (getrandom(r, sizeof(r), 0) != sizeof(r))
		memset(r, 0x42, sizeof(r));
	k8_hex(r, sizeof(r), out);
}

/* env from the image, overridden key by key by the request's. */
static json_t *merge_env(json_t *image_env, json_t *req_env)
{
	json_t *out = json_array(), *v;
	size_t i, j;

	json_array_foreach(image_env, i, v) {
		const char *s = json_string_value(v), *eq;
		bool overridden = false;
		if (!s || !(eq = strchr(s, '=')))
			continue;
		json_t *w;
		json_array_foreach(req_env, j, w) {
			const char *t = json_string_value(w);
			if (t && !strncmp(t, s, (size_t)(eq - s + 1)))
				overridden = true;
		}
		if (!overridden)
			json_array_append(out, v);
	}
	json_array_foreach(req_env, i, v)
		json_array_append(out, v);
	return out;
}

/* Build the agent request for run/start/exec. */
static int build_req(struct exec_ctx *x, json_t *body, json_t *cfg, bool detach,
		     json_t **reqp, struct k8_err *err)
{
	json_t *argv = json_object_get(body, "argv"), *env = json_object_get(body, "env");
	const char *cwd = json_string_value(json_object_get(body, "cwd"));
	const char *user = json_string_value(json_object_get(body, "user"));
	size_t total = 0;
	json_t *full, *req;
	size_t i;
	json_t *v;
	int r;

	if ((r = check_strings(argv, "argv", &total, err)) ||
	    (r = check_strings(env, "env", &total, err)))
		return r;
	json_array_foreach(env, i, v) {
		const char *s = json_string_value(v);
		if (!strchr(s, '=') || s[0] == '=')
			return k8_err_set(err, -EINVAL, "environment entries must look like KEY=VALUE, "
					  "not '%.60s'", s);
	}
	if (cwd && (cwd[0] != '/' || strlen(cwd) > 4095))
		return k8_err_set(err, -EINVAL, "the working directory must be an absolute path");
	if (user && strlen(user) > 64)
		return k8_err_set(err, -EINVAL, "user is too long");
	{
		json_t *tty = json_object_get(body, "tty"), *sz = json_object_get(body, "tty_size");
		if (tty && !json_is_boolean(tty))
			return k8_err_set(err, -EINVAL, "field 'tty' must be true or false");
		if (sz && !(json_array_size(sz) == 2 &&
			    json_is_integer(json_array_get(sz, 0)) &&
			    json_is_integer(json_array_get(sz, 1)) &&
			    json_integer_value(json_array_get(sz, 0)) >= 0 &&
			    json_integer_value(json_array_get(sz, 0)) <= 65535 &&
			    json_integer_value(json_array_get(sz, 1)) >= 0 &&
			    json_integer_value(json_array_get(sz, 1)) <= 65535))
			return k8_err_set(err, -EINVAL, "field 'tty_size' must be [rows, cols], "
					  "each 0..65535");
	}

	full = json_array();
	if (cfg) {
		json_t *ep = json_object_get(cfg, "entrypoint"), *cmd = json_object_get(cfg, "cmd");
		if (json_is_array(ep))
			json_array_extend(full, ep);
		if (json_array_size(argv))
			json_array_extend(full, argv);
		else if (json_is_array(cmd))
			json_array_extend(full, cmd);
		if (!cwd || !*cwd)
			cwd = json_string_value(json_object_get(cfg, "workdir"));
		if (!user || !*user)
			user = json_string_value(json_object_get(cfg, "user"));
		env = merge_env(json_object_get(cfg, "env"), env ? env : json_array());
	} else {
		if (json_array_size(argv))
			json_array_extend(full, argv);
		env = env ? json_incref(env) : json_array();
	}
	{
		/* The broker's variables (broker.c), under the image's and the request's. */
		json_t *benv = broker_env(x->sb), *all = merge_env(benv, env);
		json_decref(benv);
		json_decref(env);
		env = all;
	}
	if (!json_array_size(full)) {
		json_decref(full);
		json_decref(env);
		return k8_err_set(err, -EINVAL, "no command given and the image has no default command");
	}
	req = json_pack("{s:s,s:s,s:O,s:o,s:s,s:s,s:b}", "op", x->is_run ? "run" : "exec",
			"container", x->container, "argv", full, "env", env, "cwd",
			(cwd && *cwd) ? cwd : "/", "user", (user && *user) ? user : "0", "stdin",
			json_is_true(json_object_get(body, "stdin")));
	if (json_is_true(json_object_get(body, "tty"))) {
		/* a pty in the guest (docs/agent.md "Terminals"): stdin, stdout and stderr */
		json_t *sz = json_object_get(body, "tty_size");
		json_object_set_new(req, "stdin", json_string("tty"));
		if (json_array_size(sz) == 2)
			json_object_set(req, "tty_size", sz);
	}
	if (x->is_run) {
		json_object_set_new(req, "image", json_string(json_string_value(json_object_get(cfg, "digest"))));
		json_object_set_new(req, "rm", json_boolean(!detach));
		json_object_set_new(req, "detach", json_boolean(detach));
	}
	x->argv = full;
	*reqp = req;
	return 0;
}

/* The agent's run or exec, sent; a run's with its image held in its slot (slot_use). */
struct exec_send {
	struct exec_ctx *x;
	json_t *body;
	bool detach;
};

static int exec_send(void *ctx, const struct vm_image *img, const json_t *config,
		     struct k8_err *err)
{
	struct exec_send *es = ctx;
	struct exec_ctx *x = es->x;
	json_t *cfg = NULL, *req = NULL, *resp = NULL;
	int r;

	if (img) {
		cfg = json_deep_copy(config);
		json_object_set_new(cfg, "digest", json_string(img->digest));
	}
	r = build_req(x, es->body, cfg, es->detach, &req, err);
	json_decref(cfg);
	if (r)
		return r;
	r = sb_agent_request(x->sb, req, START_TIMEOUT_MS, &resp, es->detach ? NULL : &x->stream,
			     err);
	json_decref(resp);
	return r;
}

static int exec_start(struct daemon *d, const char *sbname, const char *container,
		      json_t *body, bool is_run, bool detach, struct exec_ctx **out,
		      int *exit_code, struct k8_err *err)
{
	struct exec_ctx *x = xcalloc(1, sizeof(*x));
	struct exec_send es = { .x = x, .body = body, .detach = detach };
	const char *image = json_string_value(json_object_get(body, "image"));
	int r;

	x->d = d;
	x->is_run = is_run;
	if (!json_is_object(body)) {
		r = k8_err_set(err, -EINVAL, "the request body must be a JSON object");
		goto fail;
	}
	x->sb = sb_get(d, sbname, err);
	if (!x->sb) {
		r = -ENOENT;
		goto fail;
	}
	if (is_run) {
		if (!image || !*image) {
			r = k8_err_set(err, -EINVAL, "an image is required, e.g. python:3.12-slim");
			goto fail;
		}
		new_container_id(x->container);
	} else {
		if (!container_id_valid(container)) {
			r = k8_err_set(err, -ENOENT, "no container '%.40s' in sandbox '%s'; list them "
				       "with `kosa8 sandbox ps %s`", container ? container : "",
				       sbname, sbname);
			goto fail;
		}
		snprintf(x->container, sizeof(x->container), "%s", container);
	}
	r = sb_ensure_running(d, x->sb, err);
	if (r)
		goto fail;
	if (x->sb->paused) {
		r = k8_err_set(err, -EBUSY, "sandbox '%s' is paused; resume it with `kosa8 sandbox "
			       "resume %s`", sbname, sbname);
		goto fail;
	}
	/* a run holds its image's slot until the agent answered: in the Docker engine an
	 * eviction waits for it, as for a Docker container's (docs/docker.md, "Limit") */
	r = is_run ? slot_use(d, x->sb, image, false, NULL, exec_send, &es, err)
		   : exec_send(&es, NULL, NULL, err);
	if (r) {
		/* The agent says which step failed: starting the command itself maps to
		 * the shell's 127/126, like `docker run`. */
		if (strstr(err->msg, "exec ") == err->msg || strstr(err->msg, ": exec ")) {
			if (r == -ENOENT)
				*exit_code = 127;
			else if (r == -EACCES || r == -ENOEXEC || r == -EPERM)
				*exit_code = 126;
		}
		goto fail;
	}
	json_t *det = json_pack("{s:s,s:O}", "container", x->container, "argv", x->argv);
	if (image)
		json_object_set_new(det, "image", json_string(image));
	daemon_audit(d, is_run ? (detach ? "sandbox.start" : "sandbox.run") : "sandbox.exec",
		     x->sb->name, det);
	*out = x;
	return 0;
fail:
	exec_free(x);
	return r;
}

int exec_prepare(struct daemon *d, const char *sbname, const char *container, json_t *body,
		 bool is_run, struct exec_ctx **out, int *exit_code, struct k8_err *err)
{
	*exit_code = 125;
	return exec_start(d, sbname, container, body, is_run, false, out, exit_code, err);
}

json_t *exec_detached(struct daemon *d, const char *sbname, json_t *body, int *exit_code,
		      struct k8_err *err)
{
	struct exec_ctx *x = NULL;
	json_t *res;

	*exit_code = 125;
	if (exec_start(d, sbname, NULL, body, true, true, &x, exit_code, err))
		return NULL;
	res = json_pack("{s:s}", "id", x->container);
	exec_free(x);
	return res;
}

void exec_free(struct exec_ctx *x)
{
	if (!x)
		return;
	if (x->stream)
		link_stream_close(&x->sb->link, x->stream);
	json_decref(x->argv);
	sb_put(x->d, x->sb);
	free(x);
}

static int send_client(int sock, uint16_t type, uint16_t flags, const void *p, size_t n)
{
	return proto_write(sock, type, flags, 1, p, n);
}

static void send_exit(int sock, json_t *info)
{
	char *t = json_dumps(info, JSON_COMPACT);
	if (t && strlen(t) <= PROTO_MAX_JSON)
		send_client(sock, PROTO_EXIT, 0, t, strlen(t));
	free(t);
}

/* The bridge's client: the upgraded socket, speaking the agent protocol's framing. */
struct bridge {
	struct exec_ctx *x;
	int sock;
	struct proto_reader rd;
	unsigned char *raw;             /* client bytes read, not yet framed */
	size_t raw_have, raw_off;
	unsigned char *pend;            /* a STDIN frame's payload, not yet handed on */
	size_t pend_len, pend_off;
	bool pend_eof;
	bool got_eof;                   /* the client's STDIN EOF frame came */
};

static int bridge_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
			 size_t n)
{
	struct bridge *b = ctx;

	return send_client(b->sock, type, flags, p, n) < 0 ? -1 : 0;
}

/* Client frames to stdin: STDIN payloads (one frame at a time, what does not fit kept
 * for the next call), SIGNAL forwarded at once, before and after stdin's EOF (the
 * loop's `control`: the containerd shim's kill is a SIGNAL frame on a stream whose stdin
 * ended at once); bytes already read first. A close before the client's stdin EOF frame
 * means it is gone, after it only that the client sends no more; a bad frame: gone. */
static ssize_t bridge_input(void *ctx, unsigned char *buf, size_t max, unsigned *flags)
{
	struct bridge *b = ctx;
	bool did_read = false;

	while (!b->pend) {
		struct proto_hdr h;
		const unsigned char *p;
		long used;

		if (b->raw_off == b->raw_have) {
			/* one read a call: the loop polls for the next (a SIGNAL alone must not
			 * leave it blocked in read while the process's output waits) */
			if (did_read)
				return 0;
			did_read = true;
			ssize_t got = b->raw ? read(b->sock, b->raw, 65536) : 0;
			if (!b->raw) {          /* the first call: only what came with the request */
				b->raw = xmalloc(65536);
				return 0;
			}
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				return 0;
			if (got <= 0) {
				if (got < 0 || !b->got_eof)
					return -1;
				*flags |= STREAM_IN_SHUT;       /* a half-close after stdin's EOF */
				return 0;
			}
			b->raw_have = (size_t)got;
			b->raw_off = 0;
		}
		used = proto_reader_feed(&b->rd, b->raw + b->raw_off, b->raw_have - b->raw_off);
		if (used < 0)
			return -1;
		b->raw_off += (size_t)used;
		if (!proto_reader_frame(&b->rd, &h, &p))
			continue;
		if (h.type == PROTO_STDIN) {
			b->pend = xmalloc(h.len ? h.len : 1);
			memcpy(b->pend, p, h.len);
			b->pend_len = h.len;
			b->pend_off = 0;
			b->pend_eof = h.flags & PROTO_F_EOF;
		} else if (h.type == PROTO_SIGNAL && h.len == 4) {
			link_stream_signal(&b->x->sb->link, b->x->stream, p[0]);
		}
	}
	size_t n = b->pend_len - b->pend_off < max ? b->pend_len - b->pend_off : max;
	memcpy(buf, b->pend + b->pend_off, n);
	b->pend_off += n;
	if (b->pend_off == b->pend_len) {
		if (b->pend_eof) {
			*flags |= STREAM_IN_EOF;
			b->got_eof = true;
		}
		free(b->pend);
		b->pend = NULL;
	}
	if (b->pend || b->raw_off < b->raw_have)
		*flags |= STREAM_IN_MORE;
	return (ssize_t)n;
}

/* The client's frames and the process's stream through link_stream_run; the EXIT frame
 * (or the lost link's) goes to the client last. A client that vanishes gets its process
 * killed (link_stream_run): nobody would read its output. */
void exec_bridge(struct exec_ctx *x, int sock, const char *extra, size_t extra_len)
{
	struct bridge b = { .x = x, .sock = sock };
	struct stream_ops ops = { .output = bridge_output, .input = bridge_input,
				  .input_fd = sock, .control = true, .gone_fd = sock };
	json_t *exit_info = NULL;
	char started[96];
	int fl, r = -EPIPE;

	proto_reader_init(&b.rd);
	fl = fcntl(sock, F_GETFL);
	if (fl >= 0)
		fcntl(sock, F_SETFL, fl & ~O_NONBLOCK);
	if (extra_len) {
		/* Bytes the HTTP layer had already read past the request head. */
		b.raw = xmalloc(65536);
		b.raw_have = extra_len < 65536 ? extra_len : 65536;
		memcpy(b.raw, extra, b.raw_have);
	}
	snprintf(started, sizeof(started), "{\"event\":\"started\",\"id\":\"%s\",\"stream\":%u}",
		 x->container, (unsigned)link_stream_id(x->stream));
	if (send_client(sock, PROTO_EVENT, 0, started, strlen(started)) == 0)
		r = link_stream_run(&x->sb->link, x->stream, &ops, &b, &exit_info);
	else
		link_stream_signal(&x->sb->link, x->stream, SIGKILL);
	if (r != -EPIPE) {      /* exited, or the link's loss: 125 with its error */
		send_exit(sock, exit_info);
		daemon_audit(x->d, "sandbox.exit", x->sb->name,
			     json_pack("{s:s,s:O?,s:O?}", "container", x->container, "code",
				       json_object_get(exit_info, "code"), "oom",
				       json_object_get(exit_info, "oom")));
		json_decref(exit_info);
	} else {
		daemon_audit(x->d, "sandbox.exit", x->sb->name,
			     json_pack("{s:s,s:s}", "container", x->container, "note",
				       "client disconnected; process killed"));
	}
	shutdown(sock, SHUT_WR);
	free(b.pend);
	free(b.raw);
	proto_reader_free(&b.rd);
}

/* ---- API: POST /v1/sandboxes/{name}/run and .../containers/{id}/exec (api.h; the table
 * is in api.c). exec_start checks the rest of the body. An error before the process
 * starts carries the exit code the CLI should end with (125 unless the agent said). ---- */

int exec_api_run(struct api_call *call)
{
	const char *name = api_param(call, "name");
	struct exec_ctx *x = NULL;
	bool detach = false;

	call->exit_code = 125;
	if (api_body_bool(call, "detach", API_OPTIONAL, &detach))
		return call->err.code;
	if (detach) {
		call->out = exec_detached(call->d, name, call->body, &call->exit_code, &call->err);
		if (!call->out)
			return call->err.code ? call->err.code : -EIO;
		call->exit_code = -1;
		return 0;
	}
	if (exec_prepare(call->d, name, NULL, call->body, true, &x, &call->exit_code, &call->err))
		return call->err.code ? call->err.code : -EIO;
	call->exit_code = -1;
	return api_reply_upgrade(call, x);
}

int exec_api_exec(struct api_call *call)
{
	struct exec_ctx *x = NULL;

	call->exit_code = 125;
	if (exec_prepare(call->d, api_param(call, "name"), api_param(call, "id"), call->body,
			 false, &x, &call->exit_code, &call->err))
		return call->err.code ? call->err.code : -EIO;
	call->exit_code = -1;
	return api_reply_upgrade(call, x);
}
