/* SPDX-License-Identifier: Apache-2.0 */
/* interp.c - the stateful interpreter: contexts and cells (interp.h, docs/interpreter.md).
 *
 * Theory of operation. Every operation is an exec of a helper in a container of the
 * sandbox, over the agent's ordinary exec stream (no new agent protocol):
 *   create/restart/rm/ls   python3 -c driver.py kosa8-ctx MODE ...: the driver of a
 *                          context runs in the background of the container afterwards
 *   a cell                 python3 -I -S -c cell.py kosa8-ctx cell ID, the request on
 *                          its stdin; it relays the driver's event lines on its stdout
 * A context lives in a container the caller names, or in the sandbox's interpreter
 * container for an image: one started by kosa8 whose init (a python3 that reaps
 * orphans) carries the argument "kosa8-interp", found again by `ps` after a rewind or a
 * daemon restart. No context state is on the host.
 *
 * What comes back is hostile: the helper's stdout is cut into bounded lines
 * (interp_lines), each line checked and rebuilt (interp_event_check), stderr kept to a
 * few KiB for messages, exit codes read as numbers and nothing more. The cell's events
 * go to a sink (the API's NDJSON reply) one at a time, so the agent's window is the
 * only buffer: a client that stops reading stalls its cell in the guest.
 */
#include "common/proto.h"
#include "common/sha.h"
#include "daemon/exec.h"
#include "daemon/interp.h"
#include "daemon/interp_event.h"
#include "daemon/log.h"
#include "daemon/sandbox.h"
#include "image/image.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define HELPER_START_MS 60000   /* the agent starting a helper */
#define HELPER_CTL_MS 120000    /* create, restart, rm, ls: the whole helper */
#define CONNECT_MS 60000        /* a cell's client reaching its driver */
#define KILL_WAIT_MS 10000      /* a killed helper's EXIT */
#define KEEPALIVE_MS 5000       /* quiet before a keepalive (interp_reply with a map) */
#define HELPER_ERR_MAX 2048     /* a helper's stderr kept for messages */
#define LS_MAX 1024             /* contexts listed per container */
#define RUN_TIMEOUT_MAX 86400
#define KEEPER_MARK "kosa8-interp"

/* The interpreter container's init: reaps the contexts' drivers when they end (they are
 * orphans of the helper that started them), and ends on SIGTERM (`sandbox stop`). */
static const char keeper_py[] =
	"import os, signal\n"
	"S = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}\n"
	"signal.pthread_sigmask(signal.SIG_BLOCK, S)\n"
	"while True:\n"
	"    try:\n"
	"        while os.waitpid(-1, os.WNOHANG)[0] > 0:\n"
	"            pass\n"
	"    except ChildProcessError:\n"
	"        pass\n"
	"    if signal.sigwaitinfo(S).si_signo != signal.SIGCHLD:\n"
	"        break\n";

/* One container, one interpreter container at a time per daemon: two first cells of a
 * sandbox at once must not start two. */
static pthread_mutex_t keeper_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- helpers: one exec in a container ---- */

struct helper {
	struct sandbox *sb;
	struct stream *s;
	const char *in;                 /* stdin, sent within the agent's window; NULL: none */
	size_t in_len, in_off;
	bool in_eof;
	struct interp_lines lines;
	int (*line)(void *ctx, const char *p, size_t n);
	void *ctx;
	char err[HELPER_ERR_MAX];       /* the start of its stderr */
	size_t errlen;
	json_t *exit_info;
};

/* Start argv in container ctr with env (array of "K=V"; both taken). An agent error
 * keeps the agent's message; a missing python3 says what a context needs. */
static int helper_start(struct sandbox *sb, const char *ctr, json_t *argv, json_t *env,
			const char *in, size_t in_len, struct helper *h, struct k8_err *err)
{
	json_t *req, *resp = NULL;
	int r;

	memset(h, 0, sizeof(*h));
	h->sb = sb;
	h->in = in;
	h->in_len = in_len;
	interp_lines_init(&h->lines, INTERP_LINE_MAX);
	req = json_pack("{s:s,s:s,s:o,s:o,s:s,s:s,s:b}", "op", "exec", "container", ctr, "argv",
			argv, "env", env, "cwd", "/", "user", "0", "stdin", in != NULL);
	r = sb_agent_request(sb, req, HELPER_START_MS, &resp, &h->s, err);
	json_decref(resp);
	if (r == 0)
		return 0;
	interp_lines_free(&h->lines);
	if (strstr(err->msg, "exec python3")) {
		k8_err_clear(err);
		return k8_err_set(err, -ENOTSUP, "container %s has no python3: a context needs an "
				  "image with python3 (only python3; kosa8 brings its driver)", ctr);
	}
	if (r == -ESRCH) {
		k8_err_clear(err);
		return k8_err_set(err, -EBUSY, "container %s of sandbox '%s' is not running", ctr,
				  sb->name);
	}
	return r;
}

static void helper_kill(struct helper *h)
{
	link_stream_signal(&h->sb->link, h->s, SIGKILL);
}

static void helper_end(struct helper *h)
{
	if (h->s)
		link_stream_close(&h->sb->link, h->s);
	h->s = NULL;
	interp_lines_free(&h->lines);
	json_decref(h->exit_info);
	h->exit_info = NULL;
}

/* Its exit code, -1 when it has not exited (or the EXIT said none). */
static int helper_code(const struct helper *h)
{
	json_t *c = json_object_get(h->exit_info, "code");
	return json_is_integer(c) ? (int)json_integer_value(c) : -1;
}

/* The helper's stderr as one short line for a message. */
static const char *helper_why(struct helper *h)
{
	h->err[h->errlen] = '\0';
	while (h->errlen && (h->err[h->errlen - 1] == '\n' || h->err[h->errlen - 1] == ' '))
		h->err[--h->errlen] = '\0';
	for (char *c = h->err; *c; c++)
		if ((unsigned char)*c < 0x20)
			*c = ' ';
	return h->errlen ? h->err : "(no message)";
}

/* Pump h: its stdin out as the window allows, its stdout into h->line, its stderr into
 * h->err, until it exits (0), `stop(sctx)` is true after a frame (1), the deadline (ns of
 * CLOCK_MONOTONIC; 0: none) passes (-ETIMEDOUT), the VM or agent went away
 * (-ECONNRESET), or h->line failed (its return). stop is also asked after a second
 * without frames. A puller of the link's one stream
 * machinery (link_stream_next), as an archive's reads are: it stops between frames,
 * which link_stream_run's consumers do not. */
static int helper_pump(struct helper *h, uint64_t deadline, bool (*stop)(void *), void *sctx)
{
	struct agentlink *l = &h->sb->link;

	for (;;) {
		struct sframe *f = NULL;
		json_t *exit_info = NULL;
		int wait = 1000;

		while (h->in && !h->in_eof && h->in_off < h->in_len) {
			size_t take = 0;
			if (link_stdin_send(l, h->s, h->in + h->in_off, h->in_len - h->in_off,
					    &take) < 0 || !take)
				break;
			h->in_off += take;
		}
		if (h->in && !h->in_eof && h->in_off == h->in_len) {
			link_stream_eof(l, h->s);
			h->in_eof = true;
		}
		if (deadline) {
			uint64_t now = now_mono_ns();
			if (now >= deadline)
				return -ETIMEDOUT;
			if (deadline - now < 1000000000ull)
				wait = (int)((deadline - now) / 1000000) + 1;
		}
		switch (link_stream_next(l, h->s, wait, &f, &exit_info)) {
		case LINK_NEXT_FRAME: {
			size_t len = f->len;
			int r = 0;

			if (f->type == PROTO_STDOUT && len && h->line) {
				r = interp_lines_feed(&h->lines, f->data, len, h->line, h->ctx);
			} else if (f->type == PROTO_STDERR && len) {
				size_t room = sizeof(h->err) - 1 - h->errlen;
				memcpy(h->err + h->errlen, f->data, len < room ? len : room);
				h->errlen += len < room ? len : room;
			}
			free(f);
			if (len)
				link_stream_consumed(l, h->s, len);
			if (r < 0)
				return r;
			if (stop && stop(sctx))
				return 1;
			break;
		}
		case LINK_NEXT_EXIT:
			if (!h->exit_info)
				h->exit_info = exit_info;
			else
				json_decref(exit_info);
			return 0;
		case LINK_NEXT_LOST:
			json_decref(exit_info);
			return -ECONNRESET;
		default:                /* nothing for a while: stop may look at the clock */
			if (stop && stop(sctx))
				return 1;
			break;
		}
	}
}

/* Run a control helper (create, restart, rm, ls) to its end; each stdout line goes to
 * line(ctx). 0 with *code its exit code, or the pump's error. */
static int helper_run(struct sandbox *sb, const char *ctr, json_t *argv, json_t *env,
		      int (*line)(void *, const char *, size_t), void *ctx, int *code,
		      char *why, size_t whylen, struct k8_err *err)
{
	struct helper h;
	int r = helper_start(sb, ctr, argv, env, NULL, 0, &h, err);

	if (r)
		return r;
	h.line = line;
	h.ctx = ctx;
	r = helper_pump(&h, now_mono_ns() + HELPER_CTL_MS * 1000000ull, NULL, NULL);
	if (r == -ETIMEDOUT) {
		helper_kill(&h);
		r = k8_err_set(err, -ETIMEDOUT, "the interpreter's helper in container %s did not "
			       "finish in %d s", ctr, HELPER_CTL_MS / 1000);
	} else if (r == -ECONNRESET) {
		r = k8_err_set(err, -ECONNRESET, "the sandbox's VM or agent went away");
	}
	*code = helper_code(&h);
	if (why)
		snprintf(why, whylen, "%s", helper_why(&h));
	helper_end(&h);
	return r;
}

static json_t *driver_argv(const char *mode, const char *id, const char *cwd)
{
	json_t *a = json_pack("[s,s,s,s,s]", "python3", "-c", interp_driver_py, "kosa8-ctx", mode);
	if (id)
		json_array_append_new(a, json_string(id));
	if (cwd)
		json_array_append_new(a, json_string(cwd));
	return a;
}

/* ---- contexts ---- */

/* A context line of the driver (create, restart, ls), rebuilt: only an id of this
 * container, bounded strings, numbers. NULL when the line is not one. */
static json_t *ctx_from_line(const char *line, size_t n, const char *ctr)
{
	json_t *o = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL), *out = NULL;
	const char *id = json_string_value(json_object_get(o, "id"));
	const char *cwd = json_string_value(json_object_get(o, "cwd"));
	json_t *pid = json_object_get(o, "pid"), *created = json_object_get(o, "created");
	char c[13], ts[K8_TIME_LEN];

	if (!json_is_object(o) || !id || interp_id_parse(id, c) || strcmp(c, ctr) || !cwd ||
	    strlen(cwd) > 4096 || !json_is_integer(pid) || !json_is_number(created))
		goto out;
	double t = json_number_value(created);
	if (t < 0 || t > 1e11)
		t = 0;
	out = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:b}", "id", id, "container", ctr, "pid",
			json_integer_value(pid), "cwd", cwd, "created",
			k8_time_fmt(ts, (int64_t)t, (int)((t - (double)(int64_t)t) * 1000)),
			"language", "python", "alive", json_is_true(json_object_get(o, "alive")));
out:
	json_decref(o);
	return out;
}

struct ctx_lines {
	const char *ctr;
	json_t *list;
};

static int ctx_line(void *ctx, const char *p, size_t n)
{
	struct ctx_lines *cl = ctx;
	json_t *c;

	if (json_array_size(cl->list) >= LS_MAX)
		return 0;
	c = ctx_from_line(p, n, cl->ctr);
	if (c)
		json_array_append_new(cl->list, c);
	return 0;
}

/* The sandbox, running and not paused, with a user reference; NULL with err. */
static struct sandbox *interp_sandbox(struct daemon *d, const char *sbname, struct k8_err *err)
{
	struct sandbox *sb = sb_get(d, sbname, err);

	if (!sb)
		return NULL;
	if (sb_ensure_running(d, sb, err)) {
		sb_put(d, sb);
		return NULL;
	}
	if (sb->paused) {
		k8_err_set(err, -EBUSY, "sandbox '%s' is paused; resume it with `kosa8 sandbox "
			   "resume %s`", sbname, sbname);
		sb_put(d, sb);
		return NULL;
	}
	return sb;
}

static bool is_hex12(const char *s)
{
	char c[13];
	char id[32];

	if (!s || strlen(s) != 12)
		return false;
	snprintf(id, sizeof(id), "%s-x", s);
	return interp_id_parse(id, c) == 0;
}

/* The sandbox's interpreter container for image (NULL: the sandbox's only image),
 * started when there is none: 0 with its id in ctr. */
static int keeper_find(struct daemon *d, struct sandbox *sb, const char *image, char ctr[13],
		       struct k8_err *err)
{
	char ref[sizeof(sb->images[0].ref)] = "", digest[sizeof(sb->images[0].digest)] = "";
	json_t *resp = NULL, *c, *body, *res;
	size_t i;
	int r, code;

	pthread_mutex_lock(&sb->lock);
	int nimages = sb->nimages;
	if (!image && nimages == 1) {
		snprintf(ref, sizeof(ref), "%s", sb->images[0].ref);
		snprintf(digest, sizeof(digest), "%s", sb->images[0].digest);
	}
	pthread_mutex_unlock(&sb->lock);
	if (image) {
		struct image_info info = { 0 };
		r = image_resolve(d->images, image, &info, err);
		snprintf(ref, sizeof(ref), "%s", info.ref);
		snprintf(digest, sizeof(digest), "%s", info.digest);
		image_info_clear(&info);
		if (r)
			return r;
	}
	if (!ref[0])
		return k8_err_set(err, -EINVAL, nimages ? "sandbox '%s' has %d images: say which "
				  "one the interpreter runs in (\"image\")" : "sandbox '%s' has no "
				  "image yet: pull one with python3 in it (kosa8 sandbox pull)",
				  sb->name, nimages);
	pthread_mutex_lock(&keeper_mu);
	r = sb_agent_request(sb, json_pack("{s:s}", "op", "ps"), 30000, &resp, NULL, err);
	json_array_foreach(r ? NULL : json_object_get(resp, "containers"), i, c) {
		json_t *argv = json_object_get(c, "argv");
		const char *id = json_string_value(json_object_get(c, "id"));
		const char *img = json_string_value(json_object_get(c, "image"));
		const char *last = json_string_value(json_array_get(argv, json_array_size(argv) - 1));
		if (json_is_true(json_object_get(c, "running")) && is_hex12(id) && last &&
		    !strcmp(last, KEEPER_MARK) && img && digest[0] && !strcmp(img, digest)) {
			snprintf(ctr, 13, "%s", id);
			json_decref(resp);
			pthread_mutex_unlock(&keeper_mu);
			return 0;
		}
	}
	json_decref(resp);
	if (r) {
		pthread_mutex_unlock(&keeper_mu);
		return r;
	}
	body = json_pack("{s:s,s:[s,s,s,s,s,s]}", "image", ref, "argv", "python3", "-I", "-S",
			 "-c", keeper_py, KEEPER_MARK);
	res = exec_detached(d, sb->name, body, &code, err);
	json_decref(body);
	pthread_mutex_unlock(&keeper_mu);
	if (!res)
		return err->code ? err->code : -EIO;
	snprintf(ctr, 13, "%s", json_string_value(json_object_get(res, "id")) ?: "");
	json_decref(res);
	return 0;
}

/* "K=V" strings of an env object (checked by interp_env_check), with a PATH: python3
 * finds itself (sys.executable) through the PATH it starts with, and an exec has only
 * the environment it is given (the driver adds the container's own under it). */
static json_t *env_list(const json_t *env)
{
	json_t *a = json_array(), *v;
	const char *k;

	if (!json_object_get(env, "PATH"))
		json_array_append_new(a, json_string("PATH=/usr/local/sbin:/usr/local/bin:"
						     "/usr/sbin:/usr/bin:/sbin:/bin"));
	json_object_foreach((json_t *)env, k, v)
		json_array_append_new(a, json_sprintf("%s=%s", k, json_string_value(v)));
	return a;
}

/* Create context `name` in container ctr: the driver's exit code says what happened. */
static int ctx_create_in(struct sandbox *sb, const char *ctr, const char *name,
			 const char *cwd, const json_t *env, json_t **out, struct k8_err *err)
{
	char id[INTERP_ID_LEN + 1], why[512];
	struct ctx_lines cl = { ctr, json_array() };
	int r, code = -1;

	snprintf(id, sizeof(id), "%s-%s", ctr, name);
	r = helper_run(sb, ctr, driver_argv("create", id, cwd), env_list(env), ctx_line, &cl,
		       &code, why, sizeof(why), err);
	if (!r && code == 5)
		r = k8_err_set(err, -EEXIST, "context %s exists", id);
	else if (!r && code == 2)
		r = k8_err_set(err, -EINVAL, "the interpreter refused: %s", why);
	else if (!r && (code != 0 || !json_array_size(cl.list)))
		r = k8_err_set(err, -EIO, "the interpreter's driver did not start in container %s "
			       "(exit %d): %s", ctr, code, why);
	if (!r)
		*out = json_incref(json_array_get(cl.list, 0));
	json_decref(cl.list);
	return r;
}

int interp_ctx_create(struct daemon *d, const char *sbname, json_t *body, json_t **out,
		      struct k8_err *err)
{
	const char *container = json_string_value(json_object_get(body, "container"));
	const char *image = json_string_value(json_object_get(body, "image"));
	const char *cwd = json_string_value(json_object_get(body, "cwd"));
	json_t *env = json_object_get(body, "env");
	unsigned char rnd[4];
	char ctr[13], name[9];
	struct sandbox *sb;
	int r;

	if ((json_object_get(body, "container") && !json_is_null(json_object_get(body, "container")) &&
	     !is_hex12(container)) ||
	    (json_object_get(body, "image") && !json_is_null(json_object_get(body, "image")) &&
	     (!image || !*image || strlen(image) > 511)))
		return k8_err_set(err, -EINVAL, "field 'container' must be a container id (12 hex "
				  "digits) and 'image' an image reference");
	if (container && image)
		return k8_err_set(err, -EINVAL, "give 'container' or 'image', not both");
	if (cwd && (cwd[0] != '/' || strlen(cwd) > 4095 || strchr(cwd, '\n')))
		return k8_err_set(err, -EINVAL, "field 'cwd' must be an absolute path");
	if (interp_env_check(env, "env", err))
		return err->code;
	sb = interp_sandbox(d, sbname, err);
	if (!sb)
		return err->code;
	if (container)
		snprintf(ctr, sizeof(ctr), "%s", container);
	else if ((r = keeper_find(d, sb, image, ctr, err)))
		goto out;
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		memset(rnd, 0x5a, sizeof(rnd));
	k8_hex(rnd, sizeof(rnd), name);
	r = ctx_create_in(sb, ctr, name, cwd ? cwd : "/", env, out, err);
	if (!r)
		daemon_audit(d, "sandbox.context.create", sb->name,
			     json_pack("{s:s,s:s,s:s,s:s?}", "context",
				       json_string_value(json_object_get(*out, "id")), "container",
				       ctr, "cwd", cwd ? cwd : "/", "image", image));
out:
	sb_put(d, sb);
	return r;
}

int interp_ctx_list(struct daemon *d, const char *sbname, const char *container,
		    json_t **out, struct k8_err *err)
{
	struct sandbox *sb;
	json_t *resp = NULL, *c, *list = json_array(), *ctrs = json_array();
	size_t i;
	int r = 0;

	if (container && !is_hex12(container)) {
		json_decref(list);
		json_decref(ctrs);
		return k8_err_set(err, -EINVAL, "query argument 'container' must be a container id");
	}
	sb = interp_sandbox(d, sbname, err);
	if (!sb) {
		json_decref(list);
		json_decref(ctrs);
		return err->code;
	}
	if (container) {
		json_array_append_new(ctrs, json_string(container));
	} else {
		r = sb_agent_request(sb, json_pack("{s:s}", "op", "ps"), 30000, &resp, NULL, err);
		json_array_foreach(r ? NULL : json_object_get(resp, "containers"), i, c) {
			const char *id = json_string_value(json_object_get(c, "id"));
			if (json_is_true(json_object_get(c, "running")) && is_hex12(id))
				json_array_append_new(ctrs, json_string(id));
		}
		json_decref(resp);
	}
	json_array_foreach(r ? NULL : ctrs, i, c) {
		struct ctx_lines cl = { json_string_value(c), list };
		struct k8_err e2 = { 0 };
		int code;
		/* a container without python3 (or stopped meanwhile) has no contexts */
		int r2 = helper_run(sb, cl.ctr, driver_argv("ls", NULL, NULL), env_list(NULL),
				    ctx_line, &cl, &code, NULL, 0, &e2);
		if (r2 && container) {
			r = k8_err_set(err, e2.code, "%s", e2.msg);
			break;
		}
	}
	json_decref(ctrs);
	sb_put(d, sb);
	if (r) {
		json_decref(list);
		return r;
	}
	*out = list;
	return 0;
}

/* Run the driver's restart or rm for context id. */
static int ctx_ctl(struct daemon *d, const char *sbname, const char *id, const char *mode,
		   json_t **out, struct k8_err *err)
{
	struct ctx_lines cl;
	struct sandbox *sb;
	char ctr[13], why[512];
	int r, code = -1;

	if (interp_id_parse(id, ctr))
		return k8_err_set(err, -ENOENT, "no context '%.60s' in sandbox '%s' (an id looks "
				  "like CONTAINER-NAME; list them with kosa8 sandbox context %s)",
				  id, sbname, sbname);
	sb = interp_sandbox(d, sbname, err);
	if (!sb)
		return err->code;
	cl = (struct ctx_lines){ ctr, json_array() };
	r = helper_run(sb, ctr, driver_argv(mode, id, NULL), env_list(NULL), ctx_line, &cl, &code,
		       why, sizeof(why), err);
	if (r == -ENOENT || (!r && code == 3)) {
		k8_err_clear(err);      /* the agent's "no such container" says less */
		r = k8_err_set(err, -ENOENT, "no context '%s' in sandbox '%s'", id, sbname);
	}
	else if (!r && code != 0)
		r = k8_err_set(err, -EIO, "the interpreter's %s of %s failed (exit %d): %s", mode, id,
			       code, why);
	else if (!r && out && !json_array_size(cl.list))
		r = k8_err_set(err, -EIO, "the interpreter's driver did not start again: %s", why);
	if (!r) {
		if (out)
			*out = json_incref(json_array_get(cl.list, 0));
		daemon_audit(d, !strcmp(mode, "rm") ? "sandbox.context.rm" : "sandbox.context.restart",
			     sb->name, json_pack("{s:s}", "context", id));
	}
	json_decref(cl.list);
	sb_put(d, sb);
	return r;
}

int interp_ctx_rm(struct daemon *d, const char *sbname, const char *id, struct k8_err *err)
{
	return ctx_ctl(d, sbname, id, "rm", NULL, err);
}

int interp_ctx_restart(struct daemon *d, const char *sbname, const char *id, json_t **out,
		       struct k8_err *err)
{
	return ctx_ctl(d, sbname, id, "restart", out, err);
}

/* ---- cells ---- */

struct interp_run {
	struct daemon *d;
	struct sandbox *sb;
	struct helper h;
	char id[INTERP_ID_LEN + 1];
	char *req;                      /* the request, sent as the client's stdin */
	size_t req_len;
	bool connected, driver_end, driver_ok, gone;
	json_int_t count;
	unsigned long bad;              /* lines that were no event */
	json_t *early;                  /* events that came with "connected" */
	interp_sink sink;
	void *sink_ctx;
	interp_map map;                 /* interp_reply's */
	bool keepalive;                 /* a keepalive event after KEEPALIVE_MS of quiet */
	uint64_t last_sent;             /* CLOCK_MONOTONIC ns of the last event to the sink */
	uint64_t t0, deadline;
	int timeout_s;
	const char *error_name;         /* the cell's first error, for the audit record */
	char error_buf[INTERP_NAME_MAX + 1];
	const char *via;                /* the API it came through, for the audit ("e2b"), or NULL */
};

const char *interp_run_context(const struct interp_run *r)
{
	return r->id;
}

/* Hand one checked event on (or keep it until there is a sink). */
static void run_deliver(struct interp_run *r, json_t *ev)
{
	if (r->gone) {
		json_decref(ev);
		return;
	}
	if (!r->sink) {
		json_array_append_new(r->early, ev);
		return;
	}
	r->last_sent = now_mono_ns();
	if (r->sink(r->sink_ctx, ev) < 0)
		r->gone = true;
}

static int run_line(void *ctx, const char *p, size_t n)
{
	struct interp_run *r = ctx;
	json_t *ev;
	int kind = interp_event_check(p, n, &ev);

	if (kind < 0 || (kind == INTERP_EV_CONNECTED) == r->connected || r->driver_end) {
		/* garbage, a second "connected", anything before it or after the end */
		json_decref(ev);
		r->bad++;
		return 0;
	}
	switch (kind) {
	case INTERP_EV_CONNECTED:
		r->connected = true;
		json_decref(ev);
		return 0;
	case INTERP_EV_START:
		r->count = json_integer_value(json_object_get(ev, "execution_count"));
		json_object_set_new(ev, "context", json_string(r->id));
		break;
	case INTERP_EV_END:
		r->driver_end = true;
		r->driver_ok = json_is_true(json_object_get(ev, "ok"));
		json_decref(ev);  /* kosa8d writes the end */
		return 0;
	case INTERP_EV_ERROR:
		if (!r->error_name) {
			snprintf(r->error_buf, sizeof(r->error_buf), "%s",
				 json_string_value(json_object_get(ev, "name")));
			r->error_name = r->error_buf;
		}
		break;
	default:
		break;
	}
	run_deliver(r, ev);
	return 0;
}

static bool run_connected(void *ctx)
{
	return ((struct interp_run *)ctx)->connected;
}

/* Has the client left? With keepalives on, a quiet cell sends one now and then, so a
 * client that left is found by its failed write (and the cell interrupted) while the
 * cell prints nothing. */
static bool run_gone(void *ctx)
{
	struct interp_run *r = ctx;

	if (r->keepalive && !r->gone && now_mono_ns() - r->last_sent >= KEEPALIVE_MS * 1000000ull)
		run_deliver(r, json_pack("{s:s}", "type", "keepalive"));
	return r->gone;
}

static void run_free(struct interp_run *r)
{
	helper_end(&r->h);
	json_decref(r->early);
	free(r->req);
	if (r->sb)
		sb_put(r->d, r->sb);
	free(r);
}

void interp_run_free(struct interp_run *r)
{
	if (r)
		run_free(r);
}

/* Start the cell client for r->id and pump until it reached the driver: 0; -ENOENT (no
 * such context: exit 3), -ESRCH (its driver is not running: exit 4), or another error. */
static int run_connect(struct interp_run *r, struct k8_err *err)
{
	char ctr[13];
	int rc;

	interp_id_parse(r->id, ctr);
	rc = helper_start(r->sb, ctr, json_pack("[s,s,s,s,s,s,s,s]", "python3", "-I", "-S", "-c",
						 interp_cell_py, "kosa8-ctx", "cell", r->id),
			  env_list(NULL), r->req, r->req_len, &r->h, err);
	if (rc)
		return rc;
	r->h.line = run_line;
	r->h.ctx = r;
	rc = helper_pump(&r->h, now_mono_ns() + CONNECT_MS * 1000000ull, run_connected, r);
	if (rc == 1)
		return 0;
	if (rc == -ETIMEDOUT)
		helper_kill(&r->h);
	if (rc == 0 && helper_code(&r->h) == 3)
		rc = -ENOENT;   /* the caller says it, or makes the default context */
	else if (rc == 0 && helper_code(&r->h) == 4)
		rc = k8_err_set(err, -EBUSY, "context %s of sandbox '%s' is not running (its "
				"interpreter exited); restart it: kosa8 sandbox context %s --restart "
				"%s", r->id, r->sb->name, r->sb->name, r->id);
	else if (rc == 0)
		rc = k8_err_set(err, -EPROTO, "the interpreter's cell client in container %s "
				"exited %d without reaching its context: %s", ctr,
				helper_code(&r->h), helper_why(&r->h));
	else if (rc == -ETIMEDOUT)
		rc = k8_err_set(err, -ETIMEDOUT, "the cell client did not reach context %s in %d s",
				r->id, CONNECT_MS / 1000);
	else if (rc == -ECONNRESET)
		rc = k8_err_set(err, -ECONNRESET, "the sandbox's VM or agent went away");
	helper_end(&r->h);
	return rc;
}

int interp_run_start(struct daemon *d, const char *sbname, const char *id, json_t *body,
		     const char *via, struct interp_run **out, struct k8_err *err)
{
	json_t *code = json_object_get(body, "code"), *env = json_object_get(body, "env");
	const char *image = json_string_value(json_object_get(body, "image"));
	const char *container = json_string_value(json_object_get(body, "container"));
	const char *cwd = json_string_value(json_object_get(body, "cwd"));
	json_t *timeout = json_object_get(body, "timeout_s");
	struct interp_run *r;
	char ctr[13], sha[65];
	bool dflt = !strcmp(id, "default");
	int rc;

	if (!json_is_string(code) || json_string_length(code) > INTERP_CODE_MAX)
		return k8_err_set(err, -EINVAL, "field 'code' must be a string of at most %u bytes",
				  INTERP_CODE_MAX);
	if (timeout && !json_is_null(timeout) &&
	    (!json_is_integer(timeout) || json_integer_value(timeout) < 0 ||
	     json_integer_value(timeout) > RUN_TIMEOUT_MAX))
		return k8_err_set(err, -EINVAL, "field 'timeout_s' must be an integer 0..%d (0: "
				  "none)", RUN_TIMEOUT_MAX);
	if (json_object_get(body, "image") && !json_is_null(json_object_get(body, "image")) &&
	    (!image || !*image || strlen(image) > 511))
		return k8_err_set(err, -EINVAL, "field 'image' must be an image reference");
	if (json_object_get(body, "container") && !json_is_null(json_object_get(body, "container"))
	    && !is_hex12(container))
		return k8_err_set(err, -EINVAL, "field 'container' must be a container id");
	if (json_object_get(body, "cwd") && !json_is_null(json_object_get(body, "cwd")) &&
	    (!cwd || cwd[0] != '/' || strlen(cwd) > 4095 || strchr(cwd, '\n')))
		return k8_err_set(err, -EINVAL, "field 'cwd' must be an absolute path");
	if ((image || container || cwd) && !dflt)
		return k8_err_set(err, -EINVAL, "fields 'image', 'container' and 'cwd' are for the "
				  "context 'default' only");
	if (image && container)
		return k8_err_set(err, -EINVAL, "give 'container' or 'image', not both");
	if (interp_env_check(env, "env", err))
		return err->code;
	if (!dflt && interp_id_parse(id, ctr))
		return k8_err_set(err, -ENOENT, "no context '%.60s' in sandbox '%s' (an id looks "
				  "like CONTAINER-NAME; list them with kosa8 sandbox context %s)",
				  id, sbname, sbname);
	r = xcalloc(1, sizeof(*r));
	r->d = d;
	r->via = via;
	r->early = json_array();
	r->timeout_s = json_is_integer(timeout) ? (int)json_integer_value(timeout) : 0;
	r->req = interp_request(json_string_value(code), json_string_length(code), env,
				&r->req_len);
	r->sb = interp_sandbox(d, sbname, err);
	if (!r->sb) {
		rc = err->code;
		goto fail;
	}
	if (dflt && container) {
		snprintf(ctr, sizeof(ctr), "%s", container);
		snprintf(r->id, sizeof(r->id), "%s-default", ctr);
	} else if (dflt) {
		if ((rc = keeper_find(d, r->sb, image, ctr, err)))
			goto fail;
		snprintf(r->id, sizeof(r->id), "%s-default", ctr);
	} else {
		snprintf(r->id, sizeof(r->id), "%s", id);
	}
	rc = run_connect(r, err);
	if (rc == -ENOENT && dflt) {
		json_t *c = NULL;
		rc = ctx_create_in(r->sb, ctr, "default", cwd ? cwd : "/", NULL, &c, err);
		if (rc == -EEXIST) {    /* made by another first cell meanwhile */
			k8_err_clear(err);
			rc = 0;
		}
		if (!rc)
			daemon_audit(d, "sandbox.context.create", r->sb->name,
				     json_pack("{s:s,s:s,s:s,s:s?,s:s?}", "context", r->id, "container",
					       ctr, "cwd", cwd ? cwd : "/", "image", image, "via", via));
		json_decref(c);
		if (!rc)
			rc = run_connect(r, err);
	}
	if (rc == -ENOENT) {
		k8_err_clear(err);
		rc = k8_err_set(err, -ENOENT, "no context '%s' in sandbox '%s'; list them with "
				"kosa8 sandbox context %s", r->id, sbname, sbname);
	}
	if (rc)
		goto fail;
	sha256_hex(json_string_value(code), json_string_length(code), sha);
	daemon_audit(d, "sandbox.cell", r->sb->name,
		     json_pack("{s:s,s:I,s:s,s:s?}", "context", r->id, "code_bytes",
			       (json_int_t)json_string_length(code), "code_sha256", sha, "via", via));
	r->t0 = now_mono_ns();
	if (r->timeout_s)
		r->deadline = r->t0 + (uint64_t)r->timeout_s * 1000000000ull;
	*out = r;
	return 0;
fail:
	run_free(r);
	return rc;
}

/* An error event of kosa8's own (not the cell's). */
static void run_error(struct interp_run *r, const char *name, const char *fmt, ...)
	K8_PRINTF(3, 4);
static void run_error(struct interp_run *r, const char *name, const char *fmt, ...)
{
	char value[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(value, sizeof(value), fmt, ap);
	va_end(ap);
	if (!r->error_name)
		r->error_name = name;
	run_deliver(r, json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "error", "name", name,
				 "value", value, "traceback", "", "source", "kosa8"));
}

void interp_run_pump(struct interp_run *r, interp_sink sink, void *ctx)
{
	json_t *ev;
	size_t i;
	bool timed_out = false, lost = false;
	int rc = 0;

	r->sink = sink;
	r->sink_ctx = ctx;
	r->last_sent = now_mono_ns();
	json_array_foreach(r->early, i, ev)
		run_deliver(r, json_incref(ev));
	json_array_clear(r->early);
	if (!r->gone) {
		/* the sink's failure shows as r->gone after the frame; the pump goes on to the
		 * EXIT unless it is stopped */
		rc = helper_pump(&r->h, r->deadline, run_gone, r);
		timed_out = rc == -ETIMEDOUT;
	}
	if (r->gone || timed_out) {
		/* the client is killed: its socket closes and the driver interrupts the cell */
		helper_kill(&r->h);
		rc = helper_pump(&r->h, now_mono_ns() + KILL_WAIT_MS * 1000000ull, NULL, NULL);
	}
	if (timed_out)
		run_error(r, "TimeoutError", "the cell ran longer than %d s and was interrupted",
			  r->timeout_s);
	else if (rc == -ECONNRESET)
		run_error(r, "SandboxError", "the sandbox's VM or agent went away during the cell");
	else if (!r->gone && !r->driver_end) {
		lost = true;
		run_error(r, "ContextLost", "the context's interpreter ended during the cell (its "
			  "process exited or was killed); restart the context to go on");
	}
	if (r->h.lines.dropped || r->bad)
		daemon_log("sandbox %s: context %s: %lu lines over %u bytes and %lu that were no "
			   "event dropped", r->sb->name, r->id, r->h.lines.dropped, INTERP_LINE_MAX,
			   r->bad);
	uint64_t ms = (now_mono_ns() - r->t0) / 1000000;
	bool ok = r->driver_end && r->driver_ok && !timed_out && !r->gone;
	json_t *end = json_pack("{s:s,s:s,s:I,s:b,s:I}", "type", "end", "context", r->id,
				"execution_count", r->count, "ok", ok, "ms", (json_int_t)ms);
	if (r->h.lines.dropped || r->bad)
		json_object_set_new(end, "dropped_lines",
				    json_integer((json_int_t)(r->h.lines.dropped + r->bad)));
	run_deliver(r, end);
	daemon_audit(r->d, "sandbox.cell.end", r->sb->name,
		     json_pack("{s:s,s:b,s:I,s:s?,s:b,s:b,s:b,s:s?}", "context", r->id, "ok", ok,
			       "ms", (json_int_t)ms, "error", r->error_name, "timeout", timed_out,
			       "cancelled", r->gone, "lost", lost, "via", r->via));
}

/* ---- API (api_route.h; the table is in api.c) ---- */

int interp_api_ctx_create(struct api_call *call)
{
	return interp_ctx_create(call->d, api_param(call, "name"), call->body, &call->out,
				 &call->err);
}

int interp_api_ctx_list(struct api_call *call)
{
	char buf[32];
	const char *ctr = NULL;

	if (api_query_str(call, "container", buf, sizeof(buf), &ctr))
		return call->err.code;
	return interp_ctx_list(call->d, api_param(call, "name"), ctr, &call->out, &call->err);
}

int interp_api_ctx_rm(struct api_call *call)
{
	return interp_ctx_rm(call->d, api_param(call, "name"), api_param(call, "id"), &call->err);
}

int interp_api_ctx_restart(struct api_call *call)
{
	return interp_ctx_restart(call->d, api_param(call, "name"), api_param(call, "id"),
				  &call->out, &call->err);
}

/* Where a reply's events go: the pipe, each through map first (NULL: as they are). */
struct ndjson {
	int fd;
	interp_map map;
};

/* Each event one NDJSON line on the reply's pipe; a failed write: the client left. */
static int ndjson_sink(void *ctx, json_t *ev)
{
	struct ndjson *o = ctx;
	char *t;
	int r = -ENOMEM;

	if (o->map) {
		json_t *m = o->map(ev);
		json_decref(ev);
		if (!m)
			return 0;
		ev = m;
	}
	t = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (t) {
		size_t n = strlen(t);
		t = realloc(t, n + 2);
		if (!t)
			abort();
		t[n] = '\n';
		r = write_full(o->fd, t, n + 1);
		free(t);
	}
	return r < 0 ? r : 0;
}

static void run_reply(void *ctx, const struct api_conn *conn)
{
	struct interp_run *r = ctx;
	struct ndjson o = { conn->fd, r->map };

	interp_run_pump(r, ndjson_sink, &o);
}

static void run_reply_free(void *ctx)
{
	interp_run_free(ctx);
}

int interp_reply(struct api_call *call, struct interp_run *r, interp_map map)
{
	r->map = map;
	r->keepalive = map != NULL;
	return api_reply_raw(call, API_RAW_BODY, "application/x-ndjson", run_reply, run_reply_free, r);
}

int interp_api_run(struct api_call *call)
{
	struct interp_run *r = NULL;

	if (interp_run_start(call->d, api_param(call, "name"), api_param(call, "id"), call->body,
			     NULL, &r, &call->err))
		return call->err.code ? call->err.code : -EIO;
	return interp_reply(call, r, NULL);
}
