/* SPDX-License-Identifier: Apache-2.0 */
/* api.c - the daemon's HTTP/1.1 + JSON API on a unix socket (docs/reference/api.md).
 *
 * libmicrohttpd runs one thread per connection, so handlers may block. Request bodies
 * are capped (1 MiB). A request is matched against the route table below (api_match,
 * api_route.c); its handler lives in the module that owns the resource and sees only
 * the libmicrohttpd-free contract of api.h. Long operations answer a chunked NDJSON
 * stream fed through a pipe by a worker thread; run and exec upgrade the connection to
 * a framed stream (exec.c) that the connection's thread serves until the process exits.
 */
#include "daemon/api.h"
#include "daemon/api_route.h"
#include "daemon/daemon.h"
#include "daemon/containers.h"
#include "daemon/images.h"
#include "daemon/sandbox.h"
#include "daemon/slots.h"
#include "daemon/checkpoint.h"
#include "daemon/broker.h"
#include "daemon/egress.h"
#include "daemon/ports.h"
#include "daemon/exec.h"
#include "daemon/interp.h"
#include "daemon/archive.h"
#include "daemon/model.h"
#include "daemon/bundle.h"
#include "daemon/guestfetch.h"
#include "daemon/audit.h"
#include "daemon/secret_api.h"
#include "daemon/store.h"
#include "daemon/accel.h"
#include "daemon/idle.h"
#include "daemon/docker_api.h"
#include "daemon/e2b_box.h"
#include "daemon/e2b_keys.h"
#include "image/image.h"
#include "common/version.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define BODY_MAX (1u << 20)

static const struct api_dialect kosa8_dialect;
static size_t nlisteners;
static bool api_serves(const struct api_dialect *dl);

/* One listening socket and how it speaks: kosa8d.sock, docker.sock (docker_api.c). */
struct api_listener {
	struct daemon *d;
	const struct api_dialect *dl;
	struct MHD_Daemon *mhd;
};

struct req {
	char *body;
	size_t len;
	bool too_big;
	struct exec_ctx *exec;          /* set when answering with an upgrade */
	struct api_call *scall;         /* a route that takes its body as a stream */
	int sink_rc;                    /* its sink's first failure */
	uint64_t dropped;               /* body bytes read and dropped after that */
	struct api_raw raw;             /* set when a handler writes the body (api_reply_raw) */
};

/* After a streamed body's sink failed, this much more of the body is read and dropped
 * so the client can read the error; beyond it the connection is closed. */
#define SINK_DROP_MAX (64ull << 20)

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
	case -EBADRQC:          /* a known path asked with another method (api_match) */
		*http = 405;
		return "method_not_allowed";
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

/* Reply `v` (taken) with `status`, and a header when `hname` is not NULL. */
static json_t *kosa8_error(const struct k8_err *err, unsigned *http)
{
	err_code_name(err->code, http);
	return err_json(err);
}

static void add_headers(struct MHD_Response *resp, const struct api_dialect *dl)
{
	for (const char *const *h = dl->headers; h && h[0] && h[1]; h += 2)
		MHD_add_response_header(resp, h[0], h[1]);
}

/* Reply `v` (taken) with `status`, and a header when `hname` is not NULL. */
static enum MHD_Result reply_status(struct MHD_Connection *c, const struct api_dialect *dl,
				    unsigned status, json_t *v, const char *hname,
				    const char *hval)
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
	add_headers(resp, dl);
	if (hname)
		MHD_add_response_header(resp, hname, hval);
	r = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, const struct api_dialect *dl,
				  unsigned status, json_t *v)
{
	return reply_status(c, dl, status, v, NULL, NULL);
}

/* A static body of another type (docker.sock's "OK" for /_ping; "" for its 201, 204). */
static enum MHD_Result reply_text(struct MHD_Connection *c, const struct api_dialect *dl,
				  unsigned status, const char *text, const char *type)
{
	struct MHD_Response *resp;
	enum MHD_Result r;

	resp = MHD_create_response_from_buffer(strlen(text), (void *)text,
					       MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(resp, "Content-Type", type);
	add_headers(resp, dl);
	r = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result reply_err(struct MHD_Connection *c, const struct api_dialect *dl,
				 struct k8_err *err)
{
	unsigned http;
	json_t *v = dl->error(err, &http);
	return reply_json(c, dl, http, v);
}

/* run/exec errors also carry the exit status the CLI should end with. */
static enum MHD_Result reply_exec_err(struct MHD_Connection *c, const struct api_dialect *dl,
				      struct k8_err *err, int code)
{
	unsigned http;
	json_t *v = dl->error(err, &http);

	json_object_set_new(json_object_get(v, "error"), "exit_code", json_integer(code));
	return reply_json(c, dl, http, v);
}

static enum MHD_Result reply_msg(struct MHD_Connection *c, const struct api_dialect *dl,
				 int code, const char *fmt, ...) K8_PRINTF(4, 5);
static enum MHD_Result reply_msg(struct MHD_Connection *c, const struct api_dialect *dl,
				 int code, const char *fmt, ...)
{
	struct k8_err err = { .code = code };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
	va_end(ap);
	return reply_err(c, dl, &err);
}

/* ---- NDJSON progress streams ---- */

struct job {
	struct api_job pub;             /* what the worker sees; first, so api_job_progress can cast */
	int wfd, rfd;
	api_job_fn fn;
	const struct api_dialect *dl;   /* the lines' shapes */
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
	char *t = v ? json_dumps(v, JSON_COMPACT) : NULL;
	size_t n;

	json_decref(v);
	if (!t)
		return;
	/* the line and its newline in one write: a client reading the newline alone after
	 * the last object (docker-py's json_stream) fails to decode it */
	n = strlen(t);
	t = realloc(t, n + 2);
	if (!t)
		abort();
	t[n++] = '\n';
	t[n] = '\0';
	pthread_mutex_lock(&j->wlock);
	if (j->wfd >= 0 && write_full(j->wfd, t, n) < 0) {
		close(j->wfd);   /* the client left: the work goes on, quietly */
		j->wfd = -1;
	}
	pthread_mutex_unlock(&j->wlock);
	free(t);
}

void api_job_progress(void *job, json_t *p)
{
	struct job *j = job;
	job_line(j, j->dl->progress(p));
}

static json_t *kosa8_progress(json_t *p)
{
	return json_pack("{s:o}", "progress", p);
}

static json_t *kosa8_done(json_t *result)
{
	return json_pack("{s:o}", "result", result);
}

static void *job_thread(void *arg)
{
	struct job *j = arg;
	struct k8_err err = { 0 };
	json_t *result = NULL;

	if (j->fn(&j->pub, &result, &err) == 0)
		job_line(j, j->dl->done(result ? result : json_object()));
	else
		job_line(j, j->dl->failed(&err));
	pthread_mutex_lock(&j->wlock);
	if (j->wfd >= 0)
		close(j->wfd);
	j->wfd = -1;
	pthread_mutex_unlock(&j->wlock);
	json_decref(j->pub.body);
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

static enum MHD_Result reply_job(struct MHD_Connection *c, struct daemon *d,
				 const struct api_dialect *dl, api_job_fn fn, json_t *body,
				 const char *arg)
{
	struct job *j = xcalloc(1, sizeof(*j));
	struct MHD_Response *resp;
	pthread_t t;
	pthread_attr_t attr;
	int p[2];
	enum MHD_Result r;

	if (pipe2(p, O_CLOEXEC) < 0) {
		free(j);
		return reply_msg(c, dl, -errno, "pipe: %s", strerror(errno));
	}
	j->pub.d = d;
	j->rfd = p[0];
	j->wfd = p[1];
	j->pub.body = json_incref(body);
	j->fn = fn;
	j->dl = dl;
	j->refs = 2;
	snprintf(j->pub.arg, sizeof(j->pub.arg), "%s", arg ? arg : "");
	pthread_mutex_init(&j->wlock, NULL);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, job_thread, j) != 0) {
		close(p[0]);
		close(p[1]);
		json_decref(j->pub.body);
		free(j);
		return reply_msg(c, dl, -EAGAIN, "cannot start a worker thread");
	}
	pthread_attr_destroy(&attr);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, job_read, j, job_free);
	MHD_add_response_header(resp, "Content-Type", dl->stream_type);
	add_headers(resp, dl);
	r = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return r;
}

/* ---- upgrade for run/exec ---- */

static void upgrade_cb(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra,
		       size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct req *rq = con_cls;
	(void)cls;
	(void)c;
	if (rq->raw.fn) {
		struct api_conn conn = { .fd = sock, .duplex = true, .extra = extra,
					 .extra_len = extra_len };
		rq->raw.fn(rq->raw.ctx, &conn);
		if (rq->raw.free)
			rq->raw.free(rq->raw.ctx);
		rq->raw.fn = NULL;
	} else {
		exec_bridge(rq->exec, sock, extra, extra_len);
		exec_free(rq->exec);
		rq->exec = NULL;
	}
	MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

/* A hijacked connection the client asked to upgrade (docker.sock's attach, exec start):
 * 101, then raw bytes both ways. libmicrohttpd writes `Connection: Upgrade` itself (one
 * more from us made it "Upgrade, Upgrade"). */
static enum MHD_Result reply_hijack(struct MHD_Connection *c, const struct api_dialect *dl,
				    struct req *rq, const struct api_raw *raw)
{
	struct MHD_Response *resp = MHD_create_response_for_upgrade(upgrade_cb, NULL);
	enum MHD_Result r;

	rq->raw = *raw;
	MHD_add_response_header(resp, "Upgrade", "tcp");
	MHD_add_response_header(resp, "Content-Type", raw->type);
	add_headers(resp, dl);
	r = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	return r;
}

/* A body written by a handler's function in a thread of its own, through a pipe. */
struct raw_body {
	struct api_raw raw;
	int rfd, wfd;
	int refs;
};

static void raw_unref(struct raw_body *b)
{
	if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_SEQ_CST) == 0)
		free(b);
}

static void *raw_thread(void *arg)
{
	struct raw_body *b = arg;
	struct api_conn conn = { .fd = b->wfd };

	b->raw.fn(b->raw.ctx, &conn);
	close(b->wfd);
	if (b->raw.free)
		b->raw.free(b->raw.ctx);
	raw_unref(b);
	return NULL;
}

static ssize_t raw_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct raw_body *b = cls;
	ssize_t n;

	(void)pos;
	do
		n = read(b->rfd, buf, max);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (n < 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	return n;
}

static void raw_free(void *cls)
{
	struct raw_body *b = cls;
	close(b->rfd);
	raw_unref(b);
}

static enum MHD_Result reply_raw_body(struct MHD_Connection *c, const struct api_dialect *dl,
				      const struct api_raw *raw)
{
	struct raw_body *b = xcalloc(1, sizeof(*b));
	struct MHD_Response *resp;
	pthread_attr_t attr;
	pthread_t t;
	enum MHD_Result r;
	int p[2];

	b->raw = *raw;
	if (pipe2(p, O_CLOEXEC) < 0) {
		if (raw->free)
			raw->free(raw->ctx);
		free(b);
		return reply_msg(c, dl, -errno, "pipe: %s", strerror(errno));
	}
	b->rfd = p[0];
	b->wfd = p[1];
	b->refs = 2;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, raw_thread, b) != 0) {
		pthread_attr_destroy(&attr);
		close(p[0]);
		close(p[1]);
		if (raw->free)
			raw->free(raw->ctx);
		free(b);
		return reply_msg(c, dl, -EAGAIN, "cannot start a worker thread");
	}
	pthread_attr_destroy(&attr);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, raw_read, b, raw_free);
	MHD_add_response_header(resp, "Content-Type", raw->type);
	/* A client may drop such a body half read (docker-py's logs(follow) in run): the
	 * connection is not reused, so it never carries stale bytes or a late close. */
	MHD_add_response_header(resp, "Connection", "close");
	/* A hijacked stream the client did not ask to upgrade: moby's 200 and the bytes as
	 * they are until the close, not chunks (HTTP/1.1 in the status line all the same) */
	if (raw->kind == API_RAW_HIJACK)
		MHD_set_response_options(resp, MHD_RF_HTTP_1_0_COMPATIBLE_STRICT, MHD_RO_END);
	add_headers(resp, dl);
	r = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result reply_upgrade(struct MHD_Connection *c, struct req *rq)
{
	struct MHD_Response *resp = MHD_create_response_for_upgrade(upgrade_cb, NULL);
	enum MHD_Result r;

	MHD_add_response_header(resp, "Upgrade", "kosa8-stream");     /* Connection: MHD's */
	r = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	return r;
}

/* ---- a body produced while the client reads it (api_reply_reader) ---- */

static ssize_t reader_cb(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct api_reader *rd = cls;
	ssize_t n;

	(void)pos;
	n = rd->read(rd->ctx, buf, max);
	if (n > 0)
		return n;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void reader_free(void *cls)
{
	struct api_reader *rd = cls;

	if (rd->free)
		rd->free(rd->ctx);
	free(rd);
}

static enum MHD_Result reply_reader(struct MHD_Connection *c, const struct api_dialect *dl,
				    struct api_call *call)
{
	struct api_reader *rd = xmalloc(sizeof(*rd));
	struct MHD_Response *resp;
	enum MHD_Result r;

	*rd = call->reader;
	rd->hvalue = NULL;
	if (call->method && !strcmp(call->method, "HEAD")) {
		/* libmicrohttpd 0.9.75 ends a chunked answer to HEAD with "0\r\n\r\n" all the
		 * same; Go's client takes those bytes on its idle connection for an unsolicited
		 * answer and closes it under the next request (docker cp failed so) */
		reader_free(rd);
		rd = NULL;
		resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	} else {
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, reader_cb,
							 rd, reader_free);
	}
	if (!resp) {
		if (rd)
			reader_free(rd);
		free(call->reader.hvalue);
		return reply_msg(c, dl, -ENOMEM, "cannot create a response");
	}
	MHD_add_response_header(resp, "Content-Type",
				call->reader.type ? call->reader.type : "application/octet-stream");
	if (call->reader.hname && call->reader.hvalue)
		MHD_add_response_header(resp, call->reader.hname, call->reader.hvalue);
	add_headers(resp, dl);
	r = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	free(call->reader.hvalue);
	return r;
}

/* ---- the daemon's own routes ---- */

static json_t *status_json(struct daemon *d)
{
	json_t *owned = json_array(), *st;
	int n = 0;

	pthread_mutex_lock(&d->lock);
	for (struct sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		n++;
		if (sb->owner)      /* set under this lock at create (record.h) */
			json_array_append_new(owned, json_pack("{s:s,s:O}", "name", sb->name,
							       "owner", sb->owner));
	}
	pthread_mutex_unlock(&d->lock);
	struct k8_err gerr = { 0 };
	bool verified = guest_verified(&d->guest, &gerr);
	bool offline = daemon_offline(d, NULL);
	st = json_pack("{s:s,s:i,s:s,s:s,s:s,s:I,s:i,s:b,s:{s:i,s:b,s:s},s:{s:s,s:s,s:s,s:s,s:b,s:s,s:s,s:s?,s:s?}}",
			 "version", KOSA8_VERSION, "pid", (int)getpid(), "home", d->home, "accel", d->accel,
			 "accel_reason", d->accel_reason, "uptime_s",
			 (json_int_t)((now_mono_ns() - d->started_mono) / 1000000000ull), "sandboxes", n,
			 "offline", offline,
			 "cgroup", "version", d->cg.version, "usable", d->cg.version != 0, "note",
			 d->cg.note, "guest", "dir", d->guest.dir, "kernel", d->guest.kernel,
			 "initramfs", d->guest.initramfs, "source", d->guest.source, "verified",
			 verified, "error", gerr.msg, "digest", d->guest.digest, "release_digest",
			 d->guest_release, "fetched_from",
			 d->guest_fetched_from[0] ? d->guest_fetched_from : NULL);
	json_object_set_new(st, "owned_sandboxes", owned);
	return st;
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
static int api_auth(struct api_call *call)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	struct daemon *d = call->d;
	struct k8_err *err = &call->err;
	const char *reg = NULL, *user = NULL, *pass = NULL;
	cleanup_free char *path = xasprintf("%s/auth.json", d->home);
	cleanup_free char *text = NULL, *pair = NULL;
	unsigned char *b64;
	json_t *cfg = NULL, *auths;
	char *out;
	int r, n;

	if (api_body_str(call, "registry", API_REQUIRED, 255, &reg) ||
	    api_body_str(call, "username", API_REQUIRED, 255, &user) ||
	    api_body_str(call, "password", API_OPTIONAL, 4096, &pass))   /* "" is a password */
		return call->err.code;
	if (strpbrk(reg, " \t\r\n\"") || strchr(user, ':') || !pass)
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

static int api_status(struct api_call *call)
{
	call->out = status_json(call->d);
	json_object_update_new(call->out, status_security(call->d));
	json_object_set_new(call->out, "idle", idle_status_json(call->d));
	if (api_serves(&docker_api_dialect))
		json_object_set_new(call->out, "docker_socket",
				    json_sprintf("%s/docker.sock", call->d->home));
	if (e2b_of(call->d)->port)
		json_object_set_new(call->out, "e2b_api",
				    json_sprintf("http://%s", e2b_of(call->d)->listen));
	return 0;
}

/* The main loop stops the daemon once this is written: after the reply is queued. */
static void shutdown_now(struct api_call *call)
{
	(void)!write(call->d->stop_pipe[1], "x", 1);
}

static int api_shutdown(struct api_call *call)
{
	bool stop_vms = true;

	if (api_body_bool(call, "stop_vms", API_OPTIONAL, &stop_vms))
		return call->err.code;
	call->d->stop_vms = stop_vms;
	call->after_reply = shutdown_now;
	return 0;
}

/* GET /v1/audit?sandbox=&action=&since_seq=&limit= and /v1/audit/verify: the log is the
 * daemon's own (audit.c reads it); the most one query returns when it asks for a limit
 * is the CLI's --limit bound. */
#define API_AUDIT_LIMIT_MAX 1000000

static int api_audit_query(struct api_call *call)
{
	char sbuf[256], abuf[256];
	const char *sandbox = NULL, *action = NULL;
	uint64_t since = 0, limit = 0;

	if (api_query_str(call, "sandbox", sbuf, sizeof(sbuf), &sandbox) ||
	    api_query_str(call, "action", abuf, sizeof(abuf), &action) ||
	    api_query_u64(call, "since_seq", 0, UINT64_MAX, &since) ||
	    api_query_u64(call, "limit", 0, API_AUDIT_LIMIT_MAX, &limit))
		return call->err.code;
	return audit_query(call->d->home, sandbox, action, since, (size_t)limit, &call->out,
			   &call->err);
}

/* POST /v1/audit: a record a client of the API writes about its own work (kosa8 mcp's
 * tool calls, docs/mcp.md). Only actions "mcp.*", so no client can write one that reads
 * as the daemon's own; details an object of at most 8 KiB; sandbox, when given, a valid
 * name. The record says it came from a client ("by":"client"). */
#define API_AUDIT_CLIENT_MAX 8192

static int api_audit_append(struct api_call *call)
{
	const char *action = NULL, *sandbox = NULL;
	json_t *details = json_object_get(call->body, "details");
	char *text;
	size_t n;

	if (api_body_str(call, "action", API_REQUIRED, 64, &action) ||
	    api_body_str(call, "sandbox", API_OPTIONAL, K8_NAME_MAX, &sandbox))
		return call->err.code;
	if (strncmp(action, "mcp.", 4) || strlen(action) < 5 ||
	    strspn(action, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(action))
		return k8_err_set(&call->err, -EINVAL, "field 'action' must be mcp.NAME ([a-z0-9._-]): "
				  "clients write only their own records");
	if (sandbox && !sb_name_valid(sandbox))
		return k8_err_set(&call->err, -EINVAL, "field 'sandbox' is not a sandbox name");
	if (details && !json_is_object(details))
		return k8_err_set(&call->err, -EINVAL, "field 'details' must be an object");
	text = details ? json_dumps(details, JSON_COMPACT) : NULL;
	n = text ? strlen(text) : 0;
	free(text);
	if (n > API_AUDIT_CLIENT_MAX)
		return k8_err_set(&call->err, -E2BIG, "field 'details' is larger than %d bytes",
				  API_AUDIT_CLIENT_MAX);
	details = details ? json_deep_copy(details) : json_object();
	json_object_set_new(details, "by", json_string("client"));
	daemon_audit(call->d, action, sandbox, details);
	return 0;
}

static int api_audit_verify(struct api_call *call)
{
	return audit_verify(call->d->home, &call->out, &call->err);
}

/* ---- the route table: every endpoint, in docs/reference/api.md's order ---- */

static const struct api_route routes[] = {
	{ "GET",    "/v1/status", api_status },
	{ "POST",   "/v1/shutdown", api_shutdown },
	{ "GET",    "/v1/images", images_api_list },
	{ "POST",   "/v1/images/load", images_api_load },
	{ "POST",   "/v1/images/pull", images_api_pull },
	{ "DELETE", "/v1/images/{ref}", images_api_rm },
	{ "GET",    "/v1/models", model_api_list },
	{ "POST",   "/v1/models/pull", model_api_pull },
	{ "POST",   "/v1/models/import", model_api_import },
	{ "DELETE", "/v1/models/{name}", model_api_rm },
	{ "POST",   "/v1/models/{name}/serve", model_api_serve },
	{ "GET",    "/v1/model-servers", model_api_servers },
	{ "DELETE", "/v1/model-servers/{name}", model_api_server_stop },
	{ "POST",   "/v1/bundle/export", bundle_api_export },
	{ "POST",   "/v1/bundle/import", bundle_api_import },
	{ "GET",    "/v1/guest", guest_api_get },
	{ "POST",   "/v1/guest/fetch", guest_api_fetch },
	{ "GET",    "/v1/sandboxes", sb_api_list },
	{ "POST",   "/v1/sandboxes", sb_api_create },
	{ "GET",    "/v1/sandboxes/{name}", sb_api_get },
	{ "DELETE", "/v1/sandboxes/{name}", sb_api_rm },
	{ "POST",   "/v1/sandboxes/{name}/pull", slot_api_pull },
	{ "POST",   "/v1/sandboxes/{name}/run", exec_api_run },
	{ "GET",    "/v1/sandboxes/{name}/containers", ctr_api_list },
	{ "POST",   "/v1/sandboxes/{name}/containers/{id}/exec", exec_api_exec },
	{ "POST",   "/v1/sandboxes/{name}/containers/{id}/stop", ctr_api_stop },
	{ "DELETE", "/v1/sandboxes/{name}/containers/{id}", ctr_api_rm },
	{ "POST",   "/v1/sandboxes/{name}/containers/{id}/resize", ctr_api_resize },
	{ "GET",    "/v1/sandboxes/{name}/containers/{id}/archive/stat", archive_api_stat },
	{ "GET",    "/v1/sandboxes/{name}/containers/{id}/archive", archive_api_get },
	{ "PUT",    "/v1/sandboxes/{name}/containers/{id}/archive", archive_api_put },
	{ "POST",   "/v1/sandboxes/{name}/contexts", interp_api_ctx_create },
	{ "GET",    "/v1/sandboxes/{name}/contexts", interp_api_ctx_list },
	{ "DELETE", "/v1/sandboxes/{name}/contexts/{id}", interp_api_ctx_rm },
	{ "POST",   "/v1/sandboxes/{name}/contexts/{id}/restart", interp_api_ctx_restart },
	{ "POST",   "/v1/sandboxes/{name}/contexts/{id}/run", interp_api_run },
	{ "POST",   "/v1/sandboxes/{name}/checkpoints", ckpt_api_create },
	{ "GET",    "/v1/sandboxes/{name}/checkpoints", ckpt_api_list },
	{ "DELETE", "/v1/sandboxes/{name}/checkpoints/{label}", ckpt_api_rm },
	{ "POST",   "/v1/sandboxes/{name}/rewind", ckpt_api_rewind },
	{ "POST",   "/v1/sandboxes/{name}/fork", ckpt_api_fork },
	{ "POST",   "/v1/sandboxes/{name}/checkpoints/{label}/push", store_api_push },
	{ "POST",   "/v1/sandboxes/{name}/pause", store_api_pause },
	{ "POST",   "/v1/sandboxes/{name}/resume", store_api_resume },
	{ "GET",    "/v1/sandboxes/{name}/egress", egress_api_status },
	{ "POST",   "/v1/sandboxes/{name}/egress", egress_api_update },
	{ "GET",    "/v1/sandboxes/{name}/broker", broker_api_status },
	{ "GET",    "/v1/sandboxes/{name}/ports", ports_api_list },
	{ "POST",   "/v1/sandboxes/{name}/ports", ports_api_publish },
	{ "DELETE", "/v1/sandboxes/{name}/ports/{port}", ports_api_unpublish },
	{ "GET",    "/v1/stores", store_api_list },
	{ "POST",   "/v1/stores", store_api_add },
	{ "DELETE", "/v1/stores/{store}", store_api_rm },
	{ "GET",    "/v1/stores/{store}/key", store_api_key },
	{ "GET",    "/v1/stores/{store}/snapshots", store_api_snapshots },
	{ "DELETE", "/v1/stores/{store}/snapshots/{sandbox}", store_api_snapshot_rm },
	{ "DELETE", "/v1/stores/{store}/snapshots/{sandbox}/{label}", store_api_snapshot_rm },
	{ "POST",   "/v1/stores/{store}/gc", store_api_gc },
	{ "POST",   "/v1/stores/{store}/fork", store_api_fork },
	{ "GET",    "/v1/secrets", secret_api_list },
	{ "POST",   "/v1/secrets/{name}", secret_api_set },
	{ "DELETE", "/v1/secrets/{name}", secret_api_rm },
	{ "POST",   "/v1/auth", api_auth },
	{ "GET",    "/v1/e2b/keys", e2b_keys_api_list },
	{ "POST",   "/v1/e2b/keys", e2b_keys_api_create },
	{ "DELETE", "/v1/e2b/keys/{id}", e2b_keys_api_rm },
	{ "GET",    "/v1/audit", api_audit_query },
	{ "POST",   "/v1/audit", api_audit_append },
	{ "GET",    "/v1/audit/verify", api_audit_verify },
};

/* Handlers that take their request body as a stream (api_take_body). */
static const api_handler streamed[] = { archive_api_put, NULL };

static const struct api_dialect kosa8_dialect = {
	.routes = routes,
	.nroutes = ARRAY_SIZE(routes),
	.streamed = streamed,
	.error = kosa8_error,
	.progress = kosa8_progress,
	.done = kosa8_done,
	.failed = err_json,
	.stream_type = "application/x-ndjson",
};

const struct api_route *api_routes(size_t *n)
{
	*n = ARRAY_SIZE(routes);
	return routes;
}

static const char *query_lookup(void *ctx, const char *key)
{
	return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, key);
}

static const char *header_lookup(void *ctx, const char *key)
{
	return MHD_lookup_connection_value(ctx, MHD_HEADER_KIND, key);
}

/* Fill the call's request part, split the path and match it: 0 or a negative errno
 * (-ENOENT, -EBADRQC with `allow`, or the split's error in call->err). */
static int call_match(struct api_listener *l, struct MHD_Connection *c, struct api_call *call,
		      const char *method, const char *url, char *allow, size_t allowlen)
{
	const struct api_dialect *dl = l->dl;
	int rc;

	call->d = l->d;
	call->method = method;
	call->url = url;
	call->exit_code = -1;
	call->query = query_lookup;
	call->query_ctx = c;
	call->header = header_lookup;
	rc = dl->split ? dl->split(url, &call->path, &call->err)
		       : api_path_split(url, &call->path, &call->err);
	if (rc == 0)
		rc = api_match(dl->routes, dl->nroutes, method, &call->path, &call->match,
			       allow, allowlen);
	return rc;
}

/* Split the path and match it. 0, or a negative errno with the reply queued in *r. */
static int route_match(struct api_listener *l, struct MHD_Connection *c, struct api_call *call,
		       const char *method, const char *url, enum MHD_Result *r)
{
	const struct api_dialect *dl = l->dl;
	char allow[64];
	int rc = call_match(l, c, call, method, url, allow, sizeof(allow));

	if (rc == -ENOENT && dl->unmatched) {
		k8_err_clear(&call->err);
		dl->unmatched(call);
		*r = reply_err(c, dl, &call->err);
	} else if (rc == -ENOENT) {
		*r = reply_msg(c, dl, -ENOENT, "no such endpoint: %s %s; see docs/reference/api.md", method,
			       url);
	} else if (rc == -EBADRQC) {
		k8_err_set(&call->err, -EBADRQC, "%s is not allowed on %s; it takes %s (see "
			   "docs/reference/api.md)", method, url, allow);
		unsigned http;
		json_t *v = dl->error(&call->err, &http);
		*r = reply_status(c, dl, 405, v, "Allow", allow);
	} else if (rc < 0) {
		*r = reply_err(c, dl, &call->err);
	}
	return rc;
}

/* Turn what the handler (returning rc) left in the call into a reply. */
static enum MHD_Result answer(struct api_listener *l, struct MHD_Connection *c, struct req *rq,
			      struct api_call *call, int rc)
{
	const struct api_dialect *dl = l->dl;
	enum MHD_Result r;

	if (rc < 0) {
		if (!call->err.code)
			k8_err_set(&call->err, rc, "%s", strerror(-rc));
		json_decref(call->out);
		r = call->exit_code >= 0 ? reply_exec_err(c, dl, &call->err, call->exit_code)
					 : reply_err(c, dl, &call->err);
	} else if (call->job.fn) {
		r = reply_job(c, l->d, dl, call->job.fn, call->body, call->job.arg);
	} else if (call->exec) {
		rq->exec = call->exec;
		r = reply_upgrade(c, rq);
	} else if (call->reader.read) {
		r = reply_reader(c, dl, call);
	} else if (call->raw.fn) {
		/* moby answers 101 only to a client that asked to upgrade: Node's client
		 * (dockerode) takes an unasked-for 101 for an informational answer and waits
		 * for the real one forever */
		bool upgrade = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade") != NULL;
		r = call->raw.kind == API_RAW_HIJACK && upgrade ? reply_hijack(c, dl, rq, &call->raw)
							       : reply_raw_body(c, dl, &call->raw);
	} else if (call->text) {
		r = reply_text(c, dl, call->status ? call->status : 200, call->text,
			       call->text_type ? call->text_type : "text/plain; charset=utf-8");
	} else if ((call->status == 201 && !call->out) || call->status == 204 ||
		   call->status == 304) {
		json_decref(call->out);
		r = reply_text(c, dl, call->status, "", "application/json");
	} else {
		r = reply_status(c, dl, call->status ? call->status : 200,
				 call->out ? call->out : json_object(), call->reply_hname,
				 call->reply_hvalue);
	}
	free(call->reply_hvalue);
	call->reply_hvalue = NULL;
	if (call->after_reply)
		call->after_reply(call);
	return r;
}

/* Match, parse the body, call the handler and turn what it left in the call into a reply. */
static enum MHD_Result route(struct api_listener *l, struct MHD_Connection *c, struct req *rq,
			     const char *method, const char *url)
{
	const struct api_dialect *dl = l->dl;
	struct api_call *call = xcalloc(1, sizeof(*call));     /* ~6 KiB: not on the stack */
	enum MHD_Result r;
	int rc;

	if (route_match(l, c, call, method, url, &r) < 0)
		goto out;
	if (rq->len) {
		json_error_t je;
		call->body = json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, &je);
		if (!json_is_object(call->body)) {
			r = reply_msg(c, dl, -EINVAL, "the request body is not a JSON object: %s",
				      je.text);
			goto out;
		}
	} else {
		call->body = json_object();
	}
	rc = call->match.route->fn(call);
	r = answer(l, c, rq, call, rc);
out:
	json_decref(call->body);
	free(call);
	return r;
}

/* The request head is in: a route whose handler takes its body as a stream runs now
 * (api_take_body). Anything else, or a path that matches nothing, waits for its body
 * and goes through route() as before. */
static enum MHD_Result stream_begin(struct api_listener *l, struct MHD_Connection *c,
				    struct req *rq, const char *method, const char *url)
{
	struct api_call *call = xcalloc(1, sizeof(*call));
	const api_handler *h;
	enum MHD_Result r;
	char allow[64];
	int rc;

	if (call_match(l, c, call, method, url, allow, sizeof(allow)) < 0) {
		free(call); /* route() answers it once the body is in, as before */
		return MHD_YES;
	}
	for (h = l->dl->streamed; *h && *h != call->match.route->fn; h++)
		;
	if (!*h) {
		free(call);
		return MHD_YES;
	}
	call->body = json_object();
	rc = call->match.route->fn(call);
	if (rc >= 0 && !call->sink.write)
		rc = k8_err_set(&call->err, -EIO, "the handler took no body");
	if (rc < 0) {
		const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
		if (call->sink.free)
			call->sink.free(call->sink.ctx);
		memset(&call->sink, 0, sizeof(call->sink));
		if (expect && strcasestr(expect, "100-continue")) {
			/* refused before the client sent the body: answer now, never read it */
			r = answer(l, c, rq, call, rc);
			json_decref(call->body);
			free(call);
			return r;
		}
		/* the body is on its way: read and drop it, then answer (a client that is
		 * still writing would miss an early answer) */
		rq->sink_rc = rc;
	}
	rq->scall = call;
	return MHD_YES;
}

static enum MHD_Result stream_feed(struct api_listener *l, struct MHD_Connection *c,
				   struct req *rq, const char *upload, size_t *upload_size)
{
	struct api_call *call = rq->scall;
	int rc;

	if (*upload_size) {
		if (!rq->sink_rc) {
			rc = call->sink.write(call->sink.ctx, upload, *upload_size, &call->err);
			rq->sink_rc = rc < 0 ? rc : 0;
		} else if ((rq->dropped += *upload_size) > SINK_DROP_MAX) {
			return MHD_NO; /* the client keeps sending after the error: cut it */
		}
		*upload_size = 0;
		return MHD_YES;
	}
	rc = rq->sink_rc < 0 ? rq->sink_rc : call->sink.done(call, call->sink.ctx);
	return answer(l, c, rq, call, rc);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload,
			       size_t *upload_size, void **con_cls)
{
	struct api_listener *l = cls;
	struct req *rq = *con_cls;

	(void)version;
	if (!rq) {
		rq = xcalloc(1, sizeof(*rq));
		*con_cls = rq;
		if (l->dl->streamed && !l->d->stopping)
			return stream_begin(l, c, rq, method, url);
		return MHD_YES;
	}
	if (rq->scall)
		return stream_feed(l, c, rq, upload, upload_size);
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
		return reply_msg(c, l->dl, -E2BIG, "request body larger than %u bytes", BODY_MAX);
	if (l->d->stopping)
		return reply_msg(c, l->dl, -ECONNRESET, "the daemon is shutting down");
	return route(l, c, rq, method, url);
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
	if (rq->scall) {
		if (rq->scall->sink.free)
			rq->scall->sink.free(rq->scall->sink.ctx);
		json_decref(rq->scall->body);
		free(rq->scall);
	}
	if (rq->raw.fn && rq->raw.free)
		rq->raw.free(rq->raw.ctx);      /* likewise */
	if (rq->body)
		explicit_bzero(rq->body, rq->len);      /* may hold a secret (POST /v1/secrets) */
	free(rq->body);
	free(rq);
	*con_cls = NULL;
}

/* Leave the URL as sent: api_path_split() decodes each segment on its own, so an image
 * reference with an encoded '/' stays one segment. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

/* Every listener kosa8d has (kosa8d.sock, docker.sock, the E2B API's TCP socket): started
 * once, never freed. */
static struct api_listener listeners[3];

/* Is a listener of this dialect served (docker.sock may have failed to bind)? */
static bool api_serves(const struct api_dialect *dl)
{
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i].dl == dl)
			return true;
	return false;
}

int api_listen(struct daemon *d, int listen_fd, const struct api_dialect *dl,
	       struct k8_err *err)
{
	struct api_listener *l;

	if (nlisteners == ARRAY_SIZE(listeners))
		return k8_err_set(err, -ENOSPC, "too many API listeners");
	l = &listeners[nlisteners];
	l->d = d;
	l->dl = dl;
	/* poll(), not select(): a daemon holding hundreds of sandboxes has descriptors past
	 * FD_SETSIZE, and select() would refuse every connection on one of them. */
	l->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
				  MHD_USE_POLL | MHD_ALLOW_UPGRADE | MHD_USE_ITC,
				  0, NULL, NULL, handler, l, MHD_OPTION_LISTEN_SOCKET, listen_fd,
				  MHD_OPTION_NOTIFY_COMPLETED, completed, d,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
				  MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, NULL, MHD_OPTION_END);
	if (!l->mhd)
		return k8_err_set(err, -EIO, "cannot start the HTTP server (libmicrohttpd)");
	if (!nlisteners)
		d->mhd = l->mhd;
	nlisteners++;
	return 0;
}

int api_start(struct daemon *d, int listen_fd, struct k8_err *err)
{
	return api_listen(d, listen_fd, &kosa8_dialect, err);
}

void api_stop(struct daemon *d)
{
	for (size_t i = 0; i < nlisteners; i++) {
		MHD_stop_daemon(listeners[i].mhd);
		listeners[i].mhd = NULL;
	}
	nlisteners = 0;
	d->mhd = NULL;
}
