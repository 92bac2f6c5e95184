/* SPDX-License-Identifier: Apache-2.0 */
/* archive.c - copying files in and out of a sandbox's containers: a tar stream between
 * an API connection and the agent's archive ops (docs/reference/api.md "Copying files",
 * docs/protocol.md).
 *
 * get: archive.get opens an agent stream whose STDOUT is the tar. archive_get_read()
 * hands its frames to the reader (an HTTP reply body), returning the credit only once a
 * frame was copied out, so a slow client stalls the helper in the guest and the daemon
 * holds at most one window. put: archive.put opens a stream whose STDIN takes the tar;
 * archive_put_write() sends within the agent's stdin credit and blocks for more, so the
 * request body is pulled from the client only as fast as the guest extracts it. Either
 * way the helper's EXIT says how it went: 0, or the errno with its message on STDERR.
 * An old agent answers "unknown op": that becomes a clear 409 naming `make guest`.
 */
#include "common/proto.h"
#include "daemon/archive.h"
#include "daemon/sandbox.h"
#include "docker/stream.h"

#include <poll.h>
#include <signal.h>
#include <string.h>

#define ARCHIVE_REQ_TIMEOUT_MS 30000    /* the helper resolves the path within 10 s */
#define ARCHIVE_STALL_MS 300000         /* no progress from the guest for this long: fail */
#define ARCHIVE_ERRMSG_MAX 1024         /* of the helper's stderr, kept for the error */

struct archive_xfer {
	struct daemon *d;
	struct sandbox *sb;
	struct stream *s;
	char ctr[13];
	char path[ARCHIVE_PATH_MAX + 1];
	bool put;
	uint64_t bytes, cap;
	struct sframe *cur;             /* get: a STDOUT frame partly handed out */
	size_t cur_off;
	char msg[ARCHIVE_ERRMSG_MAX + 1]; /* the helper's stderr */
	size_t msg_len;
	bool done;                      /* EXIT seen (or the transfer failed) */
	int result;                     /* 0, or a negative errno */
	char why[512];                  /* ... and its message */
	bool audited;
};

static bool archive_ctr_valid(const char *id)
{
	if (strlen(id) != 12)
		return false;
	for (int i = 0; i < 12; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

/* Shape the agent's refusal: an agent without the ops, and the usual 404 wording. */
static int archive_req_err(struct sandbox *sb, const char *ctr, const char *path, int r,
			   struct k8_err *err)
{
	char msg[sizeof(err->msg)];

	if (r == -EOPNOTSUPP && strstr(err->msg, "unknown op")) {
		k8_err_clear(err);
		return k8_err_set(err, -EPROTONOSUPPORT, "the guest agent of sandbox '%s' cannot copy "
				  "files (it predates the archive ops); rebuild the guest image (make "
				  "guest) and restart the sandbox (kosa8 sandbox stop %s)", sb->name,
				  sb->name);
	}
	if (r == -ENOENT) {
		snprintf(msg, sizeof(msg), "%s", err->msg);
		k8_err_clear(err);
		if (strstr(msg, "no such container"))
			return k8_err_set(err, -ENOENT, "no container '%s' in sandbox '%s'; list them "
					  "with `kosa8 sandbox ps %s`", ctr, sb->name, sb->name);
		return k8_err_set(err, -ENOENT, "no such file or directory in container %s: %s (%s)",
				  ctr, path, msg);
	}
	return r;
}

static int archive_check(struct sandbox *sb, const char *ctr, const char *path,
			 struct k8_err *err)
{
	if (!archive_ctr_valid(ctr))
		return k8_err_set(err, -ENOENT, "no container '%.40s' in sandbox '%s'; list them with "
				  "`kosa8 sandbox ps %s`", ctr, sb->name, sb->name);
	if (!path || path[0] != '/')
		return k8_err_set(err, -EINVAL, "the path in the container must be absolute (start "
				  "with /)");
	if (strlen(path) > ARCHIVE_PATH_MAX)
		return k8_err_set(err, -ENAMETOOLONG, "the path is longer than %d bytes",
				  ARCHIVE_PATH_MAX);
	if (sb->paused)
		return k8_err_set(err, -EBUSY, "sandbox '%s' is paused; resume it with `kosa8 sandbox "
				  "resume %s`", sb->name, sb->name);
	return 0;
}

int archive_stat(struct sandbox *sb, const char *ctr, const char *path, json_t **stat,
		 struct k8_err *err)
{
	json_t *resp = NULL;
	int r;

	*stat = NULL;
	if ((r = archive_check(sb, ctr, path, err)) < 0)
		return r;
	r = sb_agent_request(sb, json_pack("{s:s,s:s,s:s}", "op", "archive.stat", "container", ctr,
					   "path", path),
			     ARCHIVE_REQ_TIMEOUT_MS, &resp, NULL, err);
	if (r < 0)
		return archive_req_err(sb, ctr, path, r, err);
	*stat = json_incref(json_object_get(resp, "stat"));
	json_decref(resp);
	if (!json_is_object(*stat)) {
		json_decref(*stat);
		*stat = NULL;
		return k8_err_set(err, -EIO, "the guest agent's answer has no stat");
	}
	return 0;
}

char *archive_stat_header(json_t *stat)
{
	struct ds_path_stat st = { 0 };
	const char *name = json_string_value(json_object_get(stat, "name"));
	const char *link = json_string_value(json_object_get(stat, "link"));

	st.name = (char *)(name ? name : "");
	st.link_target = (char *)(link ? link : "");
	st.size = json_integer_value(json_object_get(stat, "size"));
	st.mode = ds_gomode_from_posix((mode_t)json_integer_value(json_object_get(stat, "mode")));
	st.mtime_sec = json_integer_value(json_object_get(stat, "mtime"));
	st.mtime_nsec = (int32_t)json_integer_value(json_object_get(stat, "mtime_nsec"));
	return ds_path_stat_encode(&st);
}

static uint64_t archive_cap(struct daemon *d)
{
	json_t *cfg = daemon_config(d), *v = json_object_get(cfg, "cp_max_mib");
	uint64_t mib = ARCHIVE_MAX_MIB_DEFAULT;

	if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= (1 << 24))
		mib = (uint64_t)json_integer_value(v);
	json_decref(cfg);
	return mib << 20;
}

static int archive_open(struct daemon *d, struct sandbox *sb, const char *ctr, const char *path,
			bool put, bool no_overwrite, bool layer, json_t **stat,
			struct archive_xfer **out, struct k8_err *err)
{
	struct archive_xfer *x;
	json_t *req, *resp = NULL;
	int r;

	*out = NULL;
	if (stat)
		*stat = NULL;
	if ((r = archive_check(sb, ctr, path, err)) < 0)
		return r;
	x = xcalloc(1, sizeof(*x));
	x->d = d;
	x->sb = sb;
	x->put = put;
	x->cap = put ? archive_cap(d) : 0;
	snprintf(x->ctr, sizeof(x->ctr), "%s", ctr);
	snprintf(x->path, sizeof(x->path), "%s", path);
	req = json_pack("{s:s,s:s,s:s}", "op", put ? "archive.put" : layer ? "archive.layer"
			: "archive.get", "container", ctr, "path", path);
	if (put)
		json_object_set_new(req, "noOverwriteDirNonDir", json_boolean(no_overwrite));
	r = sb_agent_request(sb, req, ARCHIVE_REQ_TIMEOUT_MS, &resp, &x->s, err);
	if (r < 0) {
		r = archive_req_err(sb, ctr, path, r, err);
		free(x);
		return r;
	}
	if (stat)
		*stat = json_incref(json_object_get(resp, "stat"));
	json_decref(resp);
	*out = x;
	return 0;
}

int archive_get_open(struct daemon *d, struct sandbox *sb, const char *ctr, const char *path,
		     json_t **stat, struct archive_xfer **out, struct k8_err *err)
{
	return archive_open(d, sb, ctr, path, false, false, false, stat, out, err);
}

int archive_layer_open(struct daemon *d, struct sandbox *sb, const char *ctr,
		       struct archive_xfer **out, struct k8_err *err)
{
	return archive_open(d, sb, ctr, "/", false, false, true, NULL, out, err);
}

int archive_put_open(struct daemon *d, struct sandbox *sb, const char *ctr, const char *path,
		     bool no_overwrite_dir_nondir, struct archive_xfer **out, struct k8_err *err)
{
	return archive_open(d, sb, ctr, path, true, no_overwrite_dir_nondir, false, NULL, out, err);
}

uint64_t archive_bytes(const struct archive_xfer *x)
{
	return x->bytes;
}

/* The transfer ended with r (and the message in x->why). */
static int archive_end(struct archive_xfer *x, int r, struct k8_err *err)
{
	if (!x->done) {
		x->done = true;
		x->result = r;
		snprintf(x->why, sizeof(x->why), "%s", err && err->code ? err->msg : "");
	}
	if (x->result < 0 && err && !err->code)
		k8_err_set(err, x->result, "%s", x->why[0] ? x->why : strerror(-x->result));
	return x->result;
}

/* The helper's exit: 0, or its errno with what it printed on stderr. */
static int archive_exit(struct archive_xfer *x, json_t *info, struct k8_err *err)
{
	json_int_t code = json_integer_value(json_object_get(info, "code"));
	char safe[ARCHIVE_ERRMSG_MAX + 1];

	if (code == 0 && !json_integer_value(json_object_get(info, "signal")))
		return archive_end(x, 0, NULL);
	while (x->msg_len && (x->msg[x->msg_len - 1] == '\n'))
		x->msg[--x->msg_len] = '\0';
	str_escape_to(safe, sizeof(safe), x->msg_len ? x->msg : "the copy failed in the guest");
	k8_err_set(err, code > 0 && code < 128 ? -(int)code : -EIO, "%s %s %s: %s",
		   x->put ? "copying into" : "copying out of", x->ctr, x->path, safe);
	return archive_end(x, err->code, err);
}

/* Keep STDERR bytes (bounded) for the error message. */
static void archive_keep_err(struct archive_xfer *x, const struct sframe *f)
{
	size_t n = f->len;

	if (n > ARCHIVE_ERRMSG_MAX - x->msg_len)
		n = ARCHIVE_ERRMSG_MAX - x->msg_len;
	memcpy(x->msg + x->msg_len, f->data, n);
	x->msg_len += n;
	x->msg[x->msg_len] = '\0';
}

/* The VM or the agent went away under the transfer. */
static int archive_lost(struct archive_xfer *x, struct k8_err *err)
{
	k8_err_set(err, -ECONNRESET, "%s during the copy", LINK_LOST_WHY);
	return archive_end(x, -ECONNRESET, err);
}

/* A stall: nothing moved for ARCHIVE_STALL_MS. */
static bool archive_stalled(uint64_t idle_since)
{
	return now_mono_ns() - idle_since > ARCHIVE_STALL_MS * 1000000ull;
}

/* A frame that is not the tar (get) or not expected at all (put): STDERR is kept for the
 * message, the rest dropped; its credit goes back. */
static void archive_skip(struct archive_xfer *x, struct sframe *f)
{
	if (f->type == PROTO_STDERR)
		archive_keep_err(x, f);
	if (f->len)
		link_stream_consumed(&x->sb->link, x->s, f->len);
	free(f);
}

ssize_t archive_get_read(struct archive_xfer *x, void *buf, size_t max, struct k8_err *err)
{
	struct agentlink *l = &x->sb->link;
	uint64_t idle_since = now_mono_ns();

	if (x->done)
		return x->result < 0 ? archive_end(x, x->result, err) : 0;
	for (;;) {
		struct sframe *f = x->cur;
		json_t *info = NULL;
		enum link_next w = LINK_NEXT_FRAME;
		int r;

		if (!f) {
			w = link_stream_next(l, x->s, 1000, &f, &info);
			x->cur_off = 0;
		}
		switch (w) {
		case LINK_NEXT_FRAME: {
			size_t n = f->len > x->cur_off ? f->len - x->cur_off : 0;

			if (f->type != PROTO_STDOUT || !n) {
				x->cur = NULL;
				archive_skip(x, f);
				idle_since = now_mono_ns();
				continue;
			}
			if (n > max)
				n = max;
			memcpy(buf, f->data + x->cur_off, n);
			x->cur_off += n;
			x->bytes += n;
			x->cur = x->cur_off < f->len ? f : NULL;
			if (!x->cur) {
				link_stream_consumed(l, x->s, f->len);
				free(f);
			}
			return (ssize_t)n;
		}
		case LINK_NEXT_EXIT:
			r = archive_exit(x, info, err);
			json_decref(info);
			return r < 0 ? r : 0;
		case LINK_NEXT_LOST:
			json_decref(info);
			return archive_lost(x, err);
		case LINK_NEXT_WOKE:
			idle_since = now_mono_ns();
			continue;
		case LINK_NEXT_TIMEOUT:
			if (archive_stalled(idle_since)) {
				k8_err_set(err, -ETIMEDOUT, "the guest sent nothing for %d s",
					   ARCHIVE_STALL_MS / 1000);
				return archive_end(x, -ETIMEDOUT, err);
			}
			continue;
		}
	}
}

/* put: wait up to ms for the helper: 0 when something moved (a frame taken, credit back),
 * 1 when nothing did, else its end (archive_end's: its exit, a lost link). `ended` tells
 * the caller the helper exited (*r is then archive_exit's). */
static int archive_put_wait(struct archive_xfer *x, int ms, bool *ended, int *r,
			    struct k8_err *err)
{
	struct sframe *f;
	json_t *info = NULL;

	*ended = false;
	switch (link_stream_next(&x->sb->link, x->s, ms, &f, &info)) {
	case LINK_NEXT_FRAME:
		archive_skip(x, f);
		return 0;
	case LINK_NEXT_EXIT:
		*ended = true;
		*r = archive_exit(x, info, err);
		json_decref(info);
		return -1;
	case LINK_NEXT_LOST:
		json_decref(info);
		*r = archive_lost(x, err);
		return -1;
	case LINK_NEXT_WOKE:
		return 0;
	default:
		return 1;
	}
}

int archive_put_write(struct archive_xfer *x, const void *p, size_t n, struct k8_err *err)
{
	struct agentlink *l = &x->sb->link;
	uint64_t idle_since = now_mono_ns();

	if (x->done)
		return x->result < 0 ? archive_end(x, x->result, err)
				     : k8_err_set(err, -EPIPE, "the extraction already ended");
	if (x->bytes + n > x->cap) {
		k8_err_set(err, -EFBIG, "the archive is larger than %llu MiB, the limit for copying "
			   "into a container (config.json \"cp_max_mib\")",
			   (unsigned long long)(x->cap >> 20));
		return archive_end(x, -EFBIG, err);
	}
	while (n) {
		size_t take;
		bool ended;
		int w, r = 0;

		if (link_stdin_send(l, x->s, p, n, &take) < 0)
			return archive_lost(x, err);
		if (take) {
			p = (const char *)p + take;
			n -= take;
			x->bytes += take;
			idle_since = now_mono_ns();
			continue;
		}
		w = archive_put_wait(x, 1000, &ended, &r, err);
		if (w < 0) {
			if (ended && r == 0) {  /* the helper ended before the archive did */
				k8_err_set(err, -EPIPE, "the extraction ended before the archive");
				return archive_end(x, -EPIPE, err);
			}
			return r;
		}
		if (w == 0)
			idle_since = now_mono_ns();
		else if (archive_stalled(idle_since)) {
			k8_err_set(err, -ETIMEDOUT, "the guest took nothing for %d s", ARCHIVE_STALL_MS / 1000);
			return archive_end(x, -ETIMEDOUT, err);
		}
	}
	return 0;
}

int archive_put_finish(struct archive_xfer *x, struct k8_err *err)
{
	uint64_t idle_since = now_mono_ns();

	if (x->done)
		return archive_end(x, x->result, err);
	link_stream_eof(&x->sb->link, x->s);
	for (;;) {
		bool ended;
		int r = 0, w = archive_put_wait(x, 1000, &ended, &r, err);

		if (w < 0)
			return r;
		if (w == 0)
			idle_since = now_mono_ns();
		else if (archive_stalled(idle_since)) {
			k8_err_set(err, -ETIMEDOUT, "the extraction did not end within %d s",
				   ARCHIVE_STALL_MS / 1000);
			return archive_end(x, -ETIMEDOUT, err);
		}
	}
}

void archive_close(struct archive_xfer *x)
{
	struct agentlink *l;
	json_t *det;

	if (!x)
		return;
	l = &x->sb->link;
	if (!x->done) {
		link_stream_signal(l, x->s, SIGKILL);
		x->result = -ECONNABORTED;
		snprintf(x->why, sizeof(x->why), "the client went away");
	}
	if (x->cur) {
		link_stream_consumed(l, x->s, x->cur->len);
		free(x->cur);
	}
	link_stream_close(l, x->s);
	det = json_pack("{s:s,s:s,s:s,s:I,s:b}", "container", x->ctr, "direction",
			x->put ? "in" : "out", "path", x->path, "bytes", (json_int_t)x->bytes, "ok",
			x->result == 0);
	if (x->result < 0)
		json_object_set_new(det, "error", json_string(x->why));
	daemon_audit(x->d, "sandbox.container.cp", x->sb->name, det);
	free(x);
}

/* ---- API: /v1/sandboxes/{name}/containers/{id}/archive[/stat]?path= ---- */

/* The sandbox the path names, running; NULL with call->err filled. */
static struct sandbox *archive_sandbox(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);

	if (sb && sb_ensure_running(call->d, sb, &call->err)) {
		sb_put(call->d, sb);
		return NULL;
	}
	return sb;
}

static int archive_query_path(struct api_call *call, char *buf, const char **path)
{
	*path = NULL;
	if (api_query_str(call, "path", buf, ARCHIVE_PATH_MAX + 1, path))
		return call->err.code;
	if (!*path)
		return k8_err_set(&call->err, -EINVAL, "the query argument 'path' is required (the "
				  "absolute path in the container)");
	return 0;
}

/* ---- replies for a sandbox the caller holds: kosa8's routes and the Docker layer's ---- */

int archive_reply_stat(struct api_call *call, struct sandbox *sb, const char *ctr)
{
	char buf[ARCHIVE_PATH_MAX + 1];
	const char *path;
	int r;

	if (!archive_query_path(call, buf, &path))
		archive_stat(sb, ctr, path, &call->out, &call->err);
	r = call->err.code;
	sb_put(call->d, sb);
	return r;
}

static ssize_t archive_read_nothing(void *ctx, char *buf, size_t max)
{
	(void)ctx, (void)buf, (void)max;
	return 0;
}

int archive_reply_head(struct api_call *call, struct sandbox *sb, const char *ctr)
{
	struct api_reader rd = { .read = archive_read_nothing, .type = "application/x-tar",
				 .hname = "X-Docker-Container-Path-Stat" };
	char buf[ARCHIVE_PATH_MAX + 1];
	json_t *stat = NULL;
	const char *path;

	if (!archive_query_path(call, buf, &path))
		archive_stat(sb, ctr, path, &stat, &call->err);
	sb_put(call->d, sb);
	if (call->err.code)
		return call->err.code;
	rd.hvalue = archive_stat_header(stat);
	json_decref(stat);
	return api_reply_reader(call, &rd);
}

struct archive_api {
	struct daemon *d;
	struct sandbox *sb;
	struct archive_xfer *x;
};

static void archive_api_free(void *ctx)
{
	struct archive_api *a = ctx;

	archive_close(a->x);
	sb_put(a->d, a->sb);
	free(a);
}

static ssize_t archive_api_read(void *ctx, char *buf, size_t max)
{
	struct archive_api *a = ctx;
	struct k8_err err = { 0 };

	return archive_get_read(a->x, buf, max, &err);
}

int archive_reply_get(struct api_call *call, struct sandbox *sb, const char *ctr)
{
	char buf[ARCHIVE_PATH_MAX + 1];
	struct api_reader rd = { 0 };
	struct archive_api *a;
	const char *path;
	json_t *stat = NULL;

	if (archive_query_path(call, buf, &path)) {
		sb_put(call->d, sb);
		return call->err.code;
	}
	a = xcalloc(1, sizeof(*a));
	a->d = call->d;
	a->sb = sb;
	if (archive_get_open(call->d, sb, ctr, path, &stat, &a->x, &call->err)) {
		sb_put(call->d, sb);
		free(a);
		return call->err.code;
	}
	rd.read = archive_api_read;
	rd.free = archive_api_free;
	rd.ctx = a;
	rd.type = "application/x-tar";
	rd.hname = "X-Docker-Container-Path-Stat";
	rd.hvalue = archive_stat_header(stat);
	json_decref(stat);
	return api_reply_reader(call, &rd);
}

static int archive_api_write(void *ctx, const void *p, size_t n, struct k8_err *err)
{
	struct archive_api *a = ctx;

	return archive_put_write(a->x, p, n, err);
}

static int archive_api_done(struct api_call *call, void *ctx)
{
	struct archive_api *a = ctx;
	int r = archive_put_finish(a->x, &call->err);

	if (r == 0)
		call->out = json_pack("{s:I}", "bytes", (json_int_t)archive_bytes(a->x));
	return r;
}

int archive_reply_put(struct api_call *call, struct sandbox *sb, const char *ctr)
{
	char buf[ARCHIVE_PATH_MAX + 1];
	struct api_sink sink = { 0 };
	struct archive_api *a;
	const char *path;
	bool no_over = false;

	if (archive_query_path(call, buf, &path) ||
	    api_query_bool(call, "noOverwriteDirNonDir", &no_over)) {
		sb_put(call->d, sb);
		return call->err.code;
	}
	a = xcalloc(1, sizeof(*a));
	a->d = call->d;
	a->sb = sb;
	if (archive_put_open(call->d, sb, ctr, path, no_over, &a->x, &call->err)) {
		sb_put(call->d, sb);
		free(a);
		return call->err.code;
	}
	sink.write = archive_api_write;
	sink.done = archive_api_done;
	sink.free = archive_api_free;
	sink.ctx = a;
	return api_take_body(call, &sink);
}

/* ---- kosa8's routes ---- */

int archive_api_stat(struct api_call *call)
{
	struct sandbox *sb = archive_sandbox(call);

	return sb ? archive_reply_stat(call, sb, api_param(call, "id")) : call->err.code;
}

int archive_api_get(struct api_call *call)
{
	struct sandbox *sb = archive_sandbox(call);

	return sb ? archive_reply_get(call, sb, api_param(call, "id")) : call->err.code;
}

int archive_api_put(struct api_call *call)
{
	struct sandbox *sb = archive_sandbox(call);

	return sb ? archive_reply_put(call, sb, api_param(call, "id")) : call->err.code;
}
