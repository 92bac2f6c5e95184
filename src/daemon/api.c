/* SPDX-License-Identifier: Apache-2.0 */
/* api.c - the daemon's HTTP/1.1 + JSON API on a unix socket (docs/api.md).
 *
 * libmicrohttpd runs one thread per connection, so handlers may block. Request bodies
 * are capped (1 MiB). Long operations answer a chunked NDJSON stream fed through a pipe
 * by a worker thread; run and exec upgrade the connection to a framed stream
 * (exec.c) that the connection's thread serves until the process exits.
 */
#include "daemon/api.h"
#include "daemon/daemon.h"
#include "daemon/sandbox.h"
#include "daemon/checkpoint.h"
#include "daemon/egress.h"
#include "daemon/exec.h"
#include "daemon/model.h"
#include "daemon/bundle.h"
#include "daemon/audit.h"
#include "daemon/secret.h"
#include "daemon/accel.h"
#include "image/image.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define BODY_MAX (1u << 20)

struct req {
	char *body;
	size_t len;
	bool too_big;
	struct exec_ctx *exec;          /* set when answering with an upgrade */
};

/* ---- responses ---- */

static const char *err_code_name(int code, unsigned *http)
{
	switch (code) {
	case -EINVAL: case -E2BIG: case -ENAMETOOLONG: case -ENOTSUP: case -EBADMSG:
	case -EPERM: case -EFBIG: case -ELOOP: case -ENOTDIR:   /* --mount HOST */
		*http = 400;
		return "bad_request";
	case -ENOENT:
		*http = 404;
		return "not_found";
	case -EEXIST: case -EBUSY: case -ENOSPC:
	case -ESTALE:           /* a shared folder is no longer the one pinned (mounts.c) */
	case -EPROTONOSUPPORT:  /* an agent (guest image, checkpoint) of another protocol */
		*http = 409;
		return "conflict";
	case -ETIMEDOUT: case -ECONNRESET: case -ENOTCONN: case -EPIPE:
	case -EHOSTUNREACH: case -ENETUNREACH: case -EPROTO:   /* registries */
		*http = 503;
		return "unavailable";
	default:
		*http = 500;
		return "internal";
	}
}

static json_t *err_json(const struct k8_err *err)
{
	unsigned http;
	const char *code = err_code_name(err->code, &http);
	return json_pack("{s:{s:s,s:s,s:i}}", "error", "code", code, "message",
			 err->msg[0] ? err->msg : strerror(-err->code), "errno", -err->code);
}

static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, json_t *v)
{
	char *text = json_dumps(v, JSON_COMPACT);
	struct MHD_Response *resp;
	enum MHD_Result r;
	size_t n;

	json_decref(v);
	if (!text)
		text = xstrdup("{}");
	n = strlen(text);
	text = realloc(text, n + 2);
	text[n++] = '\n';
	text[n] = '\0';
	resp = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	r = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result reply_err(struct MHD_Connection *c, struct k8_err *err)
{
	unsigned http;
	err_code_name(err->code, &http);
	return reply_json(c, http, err_json(err));
}

/* run/exec errors also carry the exit status the CLI should end with. */
static enum MHD_Result reply_exec_err(struct MHD_Connection *c, struct k8_err *err, int code)
{
	unsigned http;
	json_t *v = err_json(err);

	err_code_name(err->code, &http);
	json_object_set_new(json_object_get(v, "error"), "exit_code", json_integer(code));
	return reply_json(c, http, v);
}

static enum MHD_Result reply_msg(struct MHD_Connection *c, int code, const char *fmt, ...)
	K8_PRINTF(3, 4);
static enum MHD_Result reply_msg(struct MHD_Connection *c, int code, const char *fmt, ...)
{
	struct k8_err err = { .code = code };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
	va_end(ap);
	return reply_err(c, &err);
}

/* ---- NDJSON progress streams ---- */

struct job;
typedef int (*job_fn)(struct job *j, json_t **result, struct k8_err *err);

struct job {
	struct daemon *d;
	int wfd, rfd;
	json_t *body;
	char arg[512];
	job_fn fn;
	pthread_mutex_t wlock;
	int refs;                       /* the worker and the HTTP response: last one frees */
};

static void job_unref(struct job *j)
{
	if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_SEQ_CST) == 0) {
		pthread_mutex_destroy(&j->wlock);
		free(j);
	}
}

static void job_line(struct job *j, json_t *v)
{
	char *t = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	if (!t)
		return;
	pthread_mutex_lock(&j->wlock);
	if (j->wfd >= 0 && (write_full(j->wfd, t, strlen(t)) < 0 || write_full(j->wfd, "\n", 1) < 0)) {
		close(j->wfd);   /* the client left: the work goes on, quietly */
		j->wfd = -1;
	}
	pthread_mutex_unlock(&j->wlock);
	free(t);
}

static void job_progress(void *ctx, json_t *p)
{
	job_line(ctx, json_pack("{s:o}", "progress", p));
}

static void *job_thread(void *arg)
{
	struct job *j = arg;
	struct k8_err err = { 0 };
	json_t *result = NULL;

	if (j->fn(j, &result, &err) == 0)
		job_line(j, json_pack("{s:o}", "result", result ? result : json_object()));
	else
		job_line(j, err_json(&err));
	pthread_mutex_lock(&j->wlock);
	if (j->wfd >= 0)
		close(j->wfd);
	j->wfd = -1;
	pthread_mutex_unlock(&j->wlock);
	json_decref(j->body);
	job_unref(j);
	return NULL;
}

static ssize_t job_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct job *j = cls;
	ssize_t n;

	(void)pos;
	for (;;) {
		n = read(j->rfd, buf, max);
		if (n < 0 && errno == EINTR)
			continue;
		break;
	}
	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (n < 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	return n;
}

static void job_free(void *cls)
{
	struct job *j = cls;
	close(j->rfd);
	job_unref(j);   /* the worker may still run (client left early) */
}

static enum MHD_Result reply_job(struct MHD_Connection *c, struct daemon *d, job_fn fn,
				 json_t *body, const char *arg)
{
	struct job *j = xcalloc(1, sizeof(*j));
	struct MHD_Response *resp;
	pthread_t t;
	pthread_attr_t attr;
	int p[2];
	enum MHD_Result r;

	if (pipe2(p, O_CLOEXEC) < 0) {
		free(j);
		return reply_msg(c, -errno, "pipe: %s", strerror(errno));
	}
	j->d = d;
	j->rfd = p[0];
	j->wfd = p[1];
	j->body = json_incref(body);
	j->fn = fn;
	j->refs = 2;
	snprintf(j->arg, sizeof(j->arg), "%s", arg ? arg : "");
	pthread_mutex_init(&j->wlock, NULL);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, job_thread, j) != 0) {
		close(p[0]);
		close(p[1]);
		json_decref(j->body);
		free(j);
		return reply_msg(c, -EAGAIN, "cannot start a worker thread");
	}
	pthread_attr_destroy(&attr);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, job_read, j, job_free);
	MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
	r = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return r;
}

/* ---- the jobs ---- */

static void img_progress(void *ctx, const char *phase, const char *what, uint64_t done,
			 uint64_t total)
{
	job_progress(ctx, json_pack("{s:s,s:s,s:I,s:I}", "phase", phase, "what", what ? what : "",
				    "done", (json_int_t)done, "total", (json_int_t)total));
}

static int job_image_load(struct job *j, json_t **result, struct k8_err *err)
{
	const char *path = json_string_value(json_object_get(j->body, "path"));
	const char *tag = json_string_value(json_object_get(j->body, "tag"));
	json_t *loaded = NULL;
	int r;

	if (!path || path[0] != '/')
		return k8_err_set(err, -EINVAL, "path must be an absolute path to an OCI layout, an "
				  "OCI archive or a docker save tarball");
	r = image_load(j->d->images, path, tag, img_progress, j, &loaded, err);
	if (r)
		return r;
	size_t i;
	json_t *v;
	json_array_foreach(loaded, i, v)
		daemon_audit(j->d, "image.load", NULL,
			     json_pack("{s:O,s:O,s:s}", "ref", json_object_get(v, "ref"), "digest",
				       json_object_get(v, "digest"), "source", path));
	*result = json_pack("{s:o}", "loaded", loaded);
	return 0;
}

static int job_image_pull(struct job *j, json_t **result, struct k8_err *err)
{
	const char *image = json_string_value(json_object_get(j->body, "image"));

	if (!image || !*image)
		return k8_err_set(err, -EINVAL, "an image is required, e.g. python:3.12-slim");
	return sb_image_pull(j->d, image, job_progress, j, result, err);
}

static int job_model_pull(struct job *j, json_t **result, struct k8_err *err)
{
	return model_pull(j->d, j->body, job_progress, j, result, err);
}

static int job_model_import(struct job *j, json_t **result, struct k8_err *err)
{
	return model_import(j->d, j->body, job_progress, j, result, err);
}

static int job_bundle_export(struct job *j, json_t **result, struct k8_err *err)
{
	return bundle_export(j->d, j->body, job_progress, j, result, err);
}

static int job_bundle_import(struct job *j, json_t **result, struct k8_err *err)
{
	return bundle_import(j->d, j->body, job_progress, j, result, err);
}

static int job_sandbox_create(struct job *j, json_t **result, struct k8_err *err)
{
	return sb_create(j->d, j->body, job_progress, j, result, err);
}

static int job_sandbox_pull(struct job *j, json_t **result, struct k8_err *err)
{
	const char *image = json_string_value(json_object_get(j->body, "image"));
	struct sandbox *sb;
	int r;

	if (!image)
		return k8_err_set(err, -EINVAL, "an image is required, e.g. python:3.12-slim");
	sb = sb_get(j->d, j->arg, err);
	if (!sb)
		return -ENOENT;
	r = sb_pull(j->d, sb, image, job_progress, j, result, err);
	sb_put(j->d, sb);
	return r;
}

/* ---- upgrade for run/exec ---- */

static void upgrade_cb(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra,
		       size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct req *rq = con_cls;
	(void)cls;
	(void)c;
	exec_bridge(rq->exec, sock, extra, extra_len);
	exec_free(rq->exec);
	rq->exec = NULL;
	MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

static enum MHD_Result reply_upgrade(struct MHD_Connection *c, struct req *rq)
{
	struct MHD_Response *resp = MHD_create_response_for_upgrade(upgrade_cb, NULL);
	enum MHD_Result r;

	MHD_add_response_header(resp, "Upgrade", "kosa8-stream");
	MHD_add_response_header(resp, "Connection", "Upgrade");
	r = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	return r;
}

/* ---- routing ---- */

static int split_path(const char *url, char parts[8][512])
{
	int n = 0;
	const char *p = url;

	while (*p == '/')
		p++;
	while (*p && n < 8) {
		const char *e = strchr(p, '/');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len >= 512)
			return -1;
		memcpy(parts[n], p, len);
		parts[n][len] = '\0';
		MHD_http_unescape(parts[n]);
		n++;
		p += len;
		while (*p == '/')
			p++;
	}
	return *p ? -1 : n;
}

static json_t *status_json(struct daemon *d)
{
	int n = 0;

	pthread_mutex_lock(&d->lock);
	for (struct sandbox *sb = d->sandboxes; sb; sb = sb->next)
		n++;
	pthread_mutex_unlock(&d->lock);
	int kfd = -1, ifd = -1;
	struct k8_err gerr = { 0 };
	bool verified = guest_verify_open(&d->guest, &kfd, &ifd, &gerr) == 0;
	if (verified) {
		close(kfd);
		close(ifd);
	}
	bool offline = daemon_offline(d, NULL);
	return json_pack("{s:s,s:i,s:s,s:s,s:s,s:I,s:i,s:b,s:{s:i,s:b,s:s},s:{s:s,s:s,s:s,s:s,s:b,s:s}}",
			 "version", "0.1.0", "pid", (int)getpid(), "home", d->home, "accel", d->accel,
			 "accel_reason", d->accel_reason, "uptime_s",
			 (json_int_t)((now_mono_ns() - d->started_mono) / 1000000000ull), "sandboxes", n,
			 "offline", offline,
			 "cgroup", "version", d->cg.version, "usable", d->cg.version != 0, "note",
			 d->cg.note, "guest", "dir", d->guest.dir, "kernel", d->guest.kernel,
			 "initramfs", d->guest.initramfs, "source", d->guest.source, "verified",
			 verified, "error", gerr.msg);
}

/* What guards the host from QEMU: the jail, and the plain word on TCG. */
static json_t *status_security(struct daemon *d)
{
	bool tcg = !strcmp(d->accel, "tcg");

	return json_pack("{s:b,s:s?,s:b,s:s?}", "jail", !d->jail_off, "jail_warning",
			 d->jail_off ? d->jail_why : NULL, "tcg", tcg, "tcg_note",
			 tcg ? ACCEL_TCG_NOTE : NULL);
}

/* POST /v1/auth: keep registry credentials in $KOSA8_HOME/auth.json (0600, the Docker
 * config format), read by image pulls. The secret never reaches the audit log. */
static int auth_store(struct daemon *d, json_t *body, struct k8_err *err)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	const char *reg = json_string_value(json_object_get(body, "registry"));
	const char *user = json_string_value(json_object_get(body, "username"));
	const char *pass = json_string_value(json_object_get(body, "password"));
	cleanup_free char *path = xasprintf("%s/auth.json", d->home);
	cleanup_free char *text = NULL, *pair = NULL;
	unsigned char *b64;
	json_t *cfg = NULL, *auths;
	char *out;
	int r, n;

	if (!reg || !*reg || strlen(reg) > 255 || strpbrk(reg, " \t\r\n\"") ||
	    !user || !*user || strlen(user) > 255 || strchr(user, ':') || !pass ||
	    strlen(pass) > 4096)
		return k8_err_set(err, -EINVAL, "registry, username (no ':') and password are "
				  "required");
	pair = xasprintf("%s:%s", user, pass);
	b64 = xmalloc(4 * ((strlen(pair) + 2) / 3) + 1);
	n = EVP_EncodeBlock(b64, (const unsigned char *)pair, (int)strlen(pair));
	b64[n] = '\0';
	pthread_mutex_lock(&lock);
	if (read_file(path, 1 << 20, &text, NULL) == 0)
		cfg = json_loads(text, 0, NULL);
	if (!json_is_object(cfg)) {
		json_decref(cfg);
		cfg = json_object();
	}
	auths = json_object_get(cfg, "auths");
	if (!json_is_object(auths)) {
		auths = json_object();
		json_object_set_new(cfg, "auths", auths);
	}
	json_object_set_new(auths, reg, json_pack("{s:s}", "auth", (char *)b64));
	out = json_dumps(cfg, JSON_INDENT(2));
	r = write_file_atomic(path, out, strlen(out), 0600);
	pthread_mutex_unlock(&lock);
	explicit_bzero(b64, (size_t)n);
	explicit_bzero(out, strlen(out));
	explicit_bzero(pair, strlen(pair));
	free(b64);
	free(out);
	json_decref(cfg);
	if (r)
		return k8_err_set(err, r, "cannot write %s: %s", path, strerror(-r));
	daemon_audit(d, "registry.login", NULL, json_pack("{s:s,s:s}", "registry", reg,
							  "username", user));
	return 0;
}

/* /v1/sandboxes/{name}/checkpoints[/{label}], /rewind, /fork, /pause, /resume, /egress */
static enum MHD_Result route_checkpoints(struct daemon *d, struct MHD_Connection *c,
					 const char *method, char p[8][512], int n, json_t *body)
{
	struct k8_err err = { 0 };
	struct sandbox *sb = sb_get(d, p[2], &err);
	json_t *out = NULL;
	int r;

	if (!sb)
		return reply_err(c, &err);
	if (n == 4 && !strcmp(p[3], "checkpoints") && !strcmp(method, "POST"))
		r = ckpt_create(d, sb, json_string_value(json_object_get(body, "label")), &out, &err);
	else if (n == 4 && !strcmp(p[3], "checkpoints") && !strcmp(method, "GET"))
		r = ckpt_list(d, sb, &out, &err);
	else if (n == 5 && !strcmp(p[3], "checkpoints") && !strcmp(method, "DELETE"))
		r = ckpt_remove(d, sb, p[4], &err);
	else if (n == 4 && !strcmp(p[3], "rewind") && !strcmp(method, "POST"))
		r = ckpt_rewind(d, sb, json_string_value(json_object_get(body, "to")), &out, &err);
	else if (n == 4 && !strcmp(p[3], "fork") && !strcmp(method, "POST"))
		r = ckpt_fork(d, sb, json_string_value(json_object_get(body, "from")),
			      json_string_value(json_object_get(body, "name")), &out, &err);
	else if (n == 4 && (!strcmp(p[3], "pause") || !strcmp(p[3], "resume")) &&
		 !strcmp(method, "POST"))
		r = sb_pause(d, sb, !strcmp(p[3], "pause"),
			     json_is_true(json_object_get(body, "in_memory")), &out, &err);
	else if (n == 4 && !strcmp(p[3], "egress") && !strcmp(method, "GET"))
		r = egress_status(d, sb, &out, &err);
	else if (n == 4 && !strcmp(p[3], "egress") && !strcmp(method, "POST"))
		r = egress_update(d, sb, body, &out, &err);
	else
		r = k8_err_set(&err, -ENOENT, "no such endpoint: %s /v1/sandboxes/%s/%s; see docs/api.md",
			       method, p[2], p[3]);
	sb_put(d, sb);
	if (r)
		return reply_err(c, &err);
	return reply_json(c, 200, out ? out : json_object());
}

static enum MHD_Result route(struct daemon *d, struct MHD_Connection *c, struct req *rq,
			     const char *method, const char *url)
{
	char p[8][512];
	int n = split_path(url, p);
	struct k8_err err = { 0 };
	json_t *body = NULL;
	bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST"),
	     del = !strcmp(method, "DELETE");
	enum MHD_Result r;

	if (n < 1 || strcmp(p[0], "v1"))
		return reply_msg(c, -ENOENT, "no such endpoint %s; see docs/api.md", url);
	if (rq->len) {
		json_error_t je;
		body = json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, &je);
		if (!body || !json_is_object(body)) {
			json_decref(body);
			return reply_msg(c, -EINVAL, "the request body is not a JSON object: %s", je.text);
		}
	} else {
		body = json_object();
	}

	if (n == 2 && !strcmp(p[1], "status") && get) {
		json_t *st = status_json(d);
		json_object_update_new(st, status_security(d));
		r = reply_json(c, 200, st);
	} else if (n == 2 && !strcmp(p[1], "shutdown") && post) {
		d->stop_vms = !json_is_false(json_object_get(body, "stop_vms"));
		r = reply_json(c, 200, json_object());
		(void)!write(d->stop_pipe[1], "x", 1);
	} else if (n == 2 && !strcmp(p[1], "images") && get) {
		json_t *out = NULL;
		r = image_list(d->images, &out, &err) ? reply_err(c, &err) : reply_json(c, 200, out);
	} else if (n == 3 && !strcmp(p[1], "images") && !strcmp(p[2], "load") && post) {
		r = reply_job(c, d, job_image_load, body, NULL);
	} else if (n == 3 && !strcmp(p[1], "images") && !strcmp(p[2], "pull") && post) {
		r = reply_job(c, d, job_image_pull, body, NULL);
	} else if (n == 3 && !strcmp(p[1], "images") && del) {
		const char *user = NULL;
		struct image_info info = { 0 };
		if (image_resolve(d->images, p[2], &info, &err) == 0) {
			pthread_mutex_lock(&d->lock);
			for (struct sandbox *sb = d->sandboxes; sb && !user; sb = sb->next)
				for (int i = 0; i < sb->nimages; i++)
					if (!strcmp(sb->images[i].digest, info.digest))
						user = sb->name;
			if (user)
				k8_err_set(&err, -EBUSY, "image %s is attached to sandbox '%s'; remove "
					   "the sandbox first (kosa8 sandbox rm %s)", info.ref, user, user);
			pthread_mutex_unlock(&d->lock);
			image_info_clear(&info);
		}
		if (user || image_remove(d->images, p[2], &err))
			r = reply_err(c, &err);
		else {
			daemon_audit(d, "image.rm", NULL, json_pack("{s:s}", "ref", p[2]));
			r = reply_json(c, 200, json_object());
		}
	} else if (n == 3 && !strcmp(p[1], "bundle") && post &&
		   (!strcmp(p[2], "export") || !strcmp(p[2], "import"))) {
		r = reply_job(c, d, strcmp(p[2], "export") ? job_bundle_import : job_bundle_export,
			      body, NULL);
	} else if (n >= 2 && (!strcmp(p[1], "models") || !strcmp(p[1], "model-servers"))) {
		bool servers = !strcmp(p[1], "model-servers");
		json_t *res = NULL;
		if (n == 2 && get)
			r = reply_json(c, 200, servers ? model_ps_json(d) : model_list_json(d));
		else if (n == 3 && !servers && post && !strcmp(p[2], "pull"))
			r = reply_job(c, d, job_model_pull, body, NULL);
		else if (n == 3 && !servers && post && !strcmp(p[2], "import"))
			r = reply_job(c, d, job_model_import, body, NULL);
		else if (n == 3 && del)
			r = (servers ? model_stop(d, p[2], &err) : model_remove(d, p[2], &err)) ?
			    reply_err(c, &err) : reply_json(c, 200, json_object());
		else if (n == 4 && !servers && post && !strcmp(p[3], "serve"))
			r = model_serve(d, p[2], body, &res, &err) ? reply_err(c, &err) : reply_json(c, 200, res);
		else
			r = reply_msg(c, -ENOENT, "no such endpoint %s; see docs/api.md", url);
	} else if (n == 2 && !strcmp(p[1], "sandboxes") && get) {
		r = reply_json(c, 200, sb_list_json(d));
	} else if (n == 2 && !strcmp(p[1], "sandboxes") && post) {
		r = reply_job(c, d, job_sandbox_create, body, NULL);
	} else if (n == 3 && !strcmp(p[1], "sandboxes") && (get || del)) {
		if (del) {
			const char *w = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "wipe");
			bool wipe = w && strcmp(w, "0") && strcmp(w, "false");
			r = sb_remove(d, p[2], wipe, &err) ? reply_err(c, &err)
							    : reply_json(c, 200, json_object());
		} else {
			struct sandbox *sb = sb_get(d, p[2], &err);
			if (!sb)
				r = reply_err(c, &err);
			else {
				r = reply_json(c, 200, sb_to_json(sb, true));
				sb_put(d, sb);
			}
		}
	} else if (n == 4 && !strcmp(p[1], "sandboxes") && !strcmp(p[3], "pull") && post) {
		if (!sb_name_valid(p[2]))
			r = reply_msg(c, -ENOENT, "sandbox '%s' does not exist", p[2]);
		else {
			struct sandbox *sb = sb_get(d, p[2], &err);
			if (!sb)
				r = reply_err(c, &err);
			else {
				sb_put(d, sb);
				r = reply_job(c, d, job_sandbox_pull, body, p[2]);
			}
		}
	} else if (n == 4 && !strcmp(p[1], "sandboxes") && !strcmp(p[3], "run") && post) {
		int code = 125;
		if (json_is_true(json_object_get(body, "detach"))) {
			json_t *res = exec_detached(d, p[2], body, &code, &err);
			r = res ? reply_json(c, 200, res) : reply_exec_err(c, &err, code);
		} else if (exec_prepare(d, p[2], NULL, body, true, &rq->exec, &code, &err)) {
			r = reply_exec_err(c, &err, code);
		} else {
			r = reply_upgrade(c, rq);
		}
	} else if (n == 4 && !strcmp(p[1], "sandboxes") && !strcmp(p[3], "containers") && get) {
		struct sandbox *sb = sb_get(d, p[2], &err);
		json_t *resp = NULL;
		if (!sb)
			r = reply_err(c, &err);
		else {
			if (sb_ensure_running(d, sb, &err) ||
			    sb_agent_request(sb, json_pack("{s:s}", "op", "ps"), 10000, &resp, NULL, &err))
				r = reply_err(c, &err);
			else
				r = reply_json(c, 200, sb_containers_json(sb, json_object_get(resp,
											"containers")));
			json_decref(resp);
			sb_put(d, sb);
		}
	} else if (n == 6 && !strcmp(p[1], "sandboxes") && !strcmp(p[3], "containers") &&
		   !strcmp(p[5], "exec") && post) {
		int code = 125;
		if (exec_prepare(d, p[2], p[4], body, false, &rq->exec, &code, &err))
			r = reply_exec_err(c, &err, code);
		else
			r = reply_upgrade(c, rq);
	} else if (((n == 6 && !strcmp(p[5], "stop") && post) || (n == 5 && del)) &&
		   !strcmp(p[1], "sandboxes") && !strcmp(p[3], "containers")) {
		struct sandbox *sb = sb_get(d, p[2], &err);
		json_t *resp = NULL;
		json_int_t t = json_integer_value(json_object_get(body, "timeout_s"));
		if (t <= 0 || t > 600)
			t = 10;
		if (!sb)
			r = reply_err(c, &err);
		else {
			int e = sb_ensure_running(d, sb, &err);
			if (!e)
				e = sb_agent_request(sb, json_pack("{s:s,s:s,s:i,s:I}", "op", "stop",
						     "container", p[4], "signal", 15, "timeout_ms",
						     t * 1000), (int)(t * 1000) + 10000, &resp, NULL, &err);
			json_decref(resp);
			resp = NULL;
			if (!e && del)
				e = sb_agent_request(sb, json_pack("{s:s,s:s}", "op", "rm", "container",
						     p[4]), 30000, &resp, NULL, &err);
			json_decref(resp);
			if (!e)
				daemon_audit(d, del ? "sandbox.container.rm" : "sandbox.container.stop",
					     sb->name, json_pack("{s:s}", "container", p[4]));
			r = e ? reply_err(c, &err) : reply_json(c, 200, json_object());
			sb_put(d, sb);
		}
	} else if (n >= 4 && !strcmp(p[1], "sandboxes") &&
		   (!strcmp(p[3], "checkpoints") || !strcmp(p[3], "rewind") ||
		    !strcmp(p[3], "pause") || !strcmp(p[3], "resume") || !strcmp(p[3], "fork") ||
		    !strcmp(p[3], "egress"))) {
		r = route_checkpoints(d, c, method, p, n, body);
	} else if ((n == 2 || n == 3) && !strcmp(p[1], "secrets")) {
		json_t *out = NULL;
		r = secret_route(d, method, n == 3 ? p[2] : NULL, body, &out, &err)
			? reply_err(c, &err) : reply_json(c, 200, out);
	} else if (n == 2 && !strcmp(p[1], "auth") && post) {
		r = auth_store(d, body, &err) ? reply_err(c, &err) : reply_json(c, 200, json_object());
	} else if (n == 2 && !strcmp(p[1], "audit") && get) {
		const char *sbn = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "sandbox");
		const char *act = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action");
		const char *since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since_seq");
		const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
		json_t *out = NULL;
		if (audit_query(d->home, sbn && *sbn ? sbn : NULL, act && *act ? act : NULL,
				since ? strtoull(since, NULL, 10) : 0,
				lim ? (size_t)strtoull(lim, NULL, 10) : 0, &out, &err))
			r = reply_err(c, &err);
		else
			r = reply_json(c, 200, out);
	} else if (n == 3 && !strcmp(p[1], "audit") && !strcmp(p[2], "verify") && get) {
		json_t *out = NULL;
		r = audit_verify(d->home, &out, &err) ? reply_err(c, &err) : reply_json(c, 200, out);
	} else {
		r = reply_msg(c, -ENOENT, "no such endpoint: %s %s; see docs/api.md", method, url);
	}
	json_decref(body);
	return r;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload,
			       size_t *upload_size, void **con_cls)
{
	struct daemon *d = cls;
	struct req *rq = *con_cls;

	(void)version;
	if (!rq) {
		rq = xcalloc(1, sizeof(*rq));
		*con_cls = rq;
		return MHD_YES;
	}
	if (*upload_size) {
		if (rq->len + *upload_size > BODY_MAX) {
			rq->too_big = true;
		} else {
			rq->body = realloc(rq->body, rq->len + *upload_size + 1);
			if (!rq->body)
				abort();
			memcpy(rq->body + rq->len, upload, *upload_size);
			rq->len += *upload_size;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (rq->too_big)
		return reply_msg(c, -E2BIG, "request body larger than %u bytes", BODY_MAX);
	if (d->stopping)
		return reply_msg(c, -ECONNRESET, "the daemon is shutting down");
	return route(d, c, rq, method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct req *rq = *con_cls;
	(void)cls;
	(void)c;
	(void)toe;
	if (!rq)
		return;
	if (rq->exec)
		exec_free(rq->exec);   /* upgrade never happened */
	if (rq->body)
		explicit_bzero(rq->body, rq->len);      /* may hold a secret (POST /v1/secrets) */
	free(rq->body);
	free(rq);
	*con_cls = NULL;
}

/* Leave the URL as sent: split_path() decodes each segment on its own, so an image
 * reference with an encoded '/' stays one segment. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

int api_start(struct daemon *d, int listen_fd, struct k8_err *err)
{
	d->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
				  MHD_ALLOW_UPGRADE | MHD_USE_ITC,
				  0, NULL, NULL, handler, d, MHD_OPTION_LISTEN_SOCKET, listen_fd,
				  MHD_OPTION_NOTIFY_COMPLETED, completed, d,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
				  MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, NULL, MHD_OPTION_END);
	if (!d->mhd)
		return k8_err_set(err, -EIO, "cannot start the HTTP server (libmicrohttpd)");
	return 0;
}

void api_stop(struct daemon *d)
{
	if (d->mhd)
		MHD_stop_daemon(d->mhd);
	d->mhd = NULL;
}
