/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_fs.c - envd's filesystem service (filesystem.Filesystem) and /files over shell
 * helpers in the E2B sandbox's container (e2b_fs.h, docs/e2b.md).
 *
 * Theory of operation. Every call is one exec of `/bin/sh -c SCRIPT sh ARGS...` in the
 * box's long-lived container, as the request's user (Basic auth on the RPCs, `username=`
 * on /files; else the image's user), pumped by the agent link's one stream loop
 * (link_stream_run): the container's permissions and its view of the file system hold,
 * and the agent needs no operation of its own. The scripts' exit codes 90..94 say what
 * envd would answer (not found, not a directory, exists, ...); anything else is the
 * helper's stderr. What the helpers print comes from inside the sandbox: listings are
 * GNU find's -printf fields (E2B_FIND_FORMAT), read back by src/e2b/fs.c with every
 * field bounded, at most E2B_LIST_MAX entries and FS_OUT_MAX bytes.
 *
 * The unary calls (Stat, ListDir, MakeDir, Move, Remove) collect the helper's output
 * (e2b_box_run). A download is `cat` in a pump thread writing into a pipe the reply reads
 * as the client takes it; an upload is the other way round: the request's bytes (a
 * multipart part's, read by the streaming parser, or an octet-stream body) go into a
 * pipe whose pump feeds `cat > FILE` within the agent's stdin window. Neither is ever
 * held whole, and a slow side holds back the other, never the daemon. WatchDir is a
 * helper that lists the folder every 250 ms; two listings compared give the events
 * (e2b_watch_update), the first one taken before the start message, so what the client
 * does after watchDir() returns is seen. */
#include "daemon/e2b_fs.h"
#include "daemon/e2b_box.h"
#include "daemon/e2b_ctl.h"
#include "daemon/log.h"
#include "daemon/sandbox.h"
#include "common/proto.h"
#include "e2b/connect.h"
#include "e2b/envd.h"
#include "e2b/fs.h"
#include "e2b/multipart.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define FS_OUT_MAX (16u << 20)          /* a listing's bytes */
#define FS_DEPTH_MAX 64                 /* ListDir's depth, and a recursive watch's */
#define FS_FIRST_MS 60000               /* a download's first byte (the file opened) */
#define FS_STALL_MS 60000               /* an upload's bytes not taken by the sandbox */
#define FS_KEEPALIVE_NS (5ull * 1000000000ull)  /* a watch's keepalive, finds a gone client */
#define FS_ENVD_PORT 49983

/* ---- the scripts ($1 is find's format where a script lists) ---- */

#define FS_EXISTS "[ -e \"$2\" ] || [ -h \"$2\" ] || exit 90; "
#define FS_STAT "exec find \"$2\" -maxdepth 0 -printf \"$1\""
static const char fs_sh_stat[] = FS_EXISTS FS_STAT;
static const char fs_sh_list[] = FS_EXISTS "[ -d \"$2\" ] || exit 91; "
	"exec find -H \"$2\" -mindepth 1 -maxdepth \"$3\" -printf \"$1\"";
static const char fs_sh_mkdir[] = "[ -d \"$2\" ] && exit 92; [ -e \"$2\" ] || [ -h \"$2\" ] && "
	"exit 94; mkdir -p -- \"$2\" && " FS_STAT;
/* $3 the destination, $4 its parent */
static const char fs_sh_move[] = FS_EXISTS "mkdir -p -- \"$4\" && mv -T -- \"$2\" \"$3\" && "
	"exec find \"$3\" -maxdepth 0 -printf \"$1\"";
static const char fs_sh_remove[] = FS_EXISTS "exec rm -rf -- \"$2\"";
/* one listing, then an empty field, every 250 ms */
static const char fs_sh_watch[] = FS_EXISTS "[ -d \"$2\" ] || exit 91; while :; do "
	"find -H \"$2\" -mindepth 1 -maxdepth \"$3\" -printf \"$1\" 2>/dev/null; printf '\\0'; "
	"sleep 0.25; done";
/* "K" once the file is there and no folder, then its bytes */
static const char fs_sh_read[] = FS_EXISTS "[ -d \"$2\" ] && exit 93; printf K; "
	"exec cat -- \"$2\"";
/* $3 the file's parent */
static const char fs_sh_write[] = "mkdir -p -- \"$3\" && exec cat > \"$2\"";

/* The helper's argv: sh -c script sh FORMAT PATH [a3 [a4]] (new reference). */
static json_t *fs_argv(const char *script, const char *path, const char *a3, const char *a4)
{
	json_t *argv = json_pack("[s,s,s,s,s,s]", "/bin/sh", "-c", script, "sh", E2B_FIND_FORMAT,
				 path);

	if (a3)
		json_array_append_new(argv, json_string(a3));
	if (a4)
		json_array_append_new(argv, json_string(a4));
	return argv;
}

/* The parent folder of a clean absolute path ("/" for "/x" and "/"). */
static void fs_parent(const char *path, char *out, size_t n)
{
	const char *slash = strrchr(path, '/');
	size_t len = slash && slash != path ? (size_t)(slash - path) : 1;

	snprintf(out, n, "%.*s", (int)len, path);
}

/* A helper's stderr as one printable line (it comes from the sandbox). */
static const char *fs_why(char *text, size_t len)
{
	while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
		len--;
	text[len] = '\0';
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] >= 0x7f)
			text[i] = '?';
	return len ? text : "(no message)";
}

/* A helper that exited with `code`: envd's answer for the codes the scripts use, else
 * what its stderr says. */
static int fs_failed(int code, char *errtext, size_t errlen, const char *path,
		     struct k8_err *err)
{
	const char *why;

	switch (code) {
	case 90:
		return k8_err_set(err, -ENOENT, "no such file or directory: %s", path);
	case 91:
		return k8_err_set(err, -ENOTDIR, "not a directory: %s", path);
	case 92:
		return k8_err_set(err, -EEXIST, "directory already exists: %s", path);
	case 93:
		return k8_err_set(err, -EISDIR, "%s is a directory", path);
	case 94:
		return k8_err_set(err, -EINVAL, "path already exists but it is not a directory: %s",
				  path);
	}
	why = fs_why(errtext, errlen);
	if (strstr(why, "ermission denied"))
		return k8_err_set(err, -EACCES, "%s", why);
	if (strstr(why, "o space left"))
		return k8_err_set(err, -ENOSPC, "%s", why);
	if (strstr(why, "s a directory"))
		return k8_err_set(err, -EISDIR, "%s", why);
	return k8_err_set(err, -EIO, "%s (exit %d)", why, code);
}

/* ---- the door: token, box, user ---- */

struct fs_call {
	struct e2b_box *b;
	char user[E2B_USER_MAX + 1];
	char home[E2B_PATH_MAX + 1];
};

/* The box of the request (its token checked, made ready) and the user it names: in
 * Basic auth (the RPCs), or in `username=` (/files). fc->b is a reference. */
static int fs_door(struct api_call *call, bool query_user, struct fs_call *fc)
{
	char ubuf[E2B_USER_MAX + 2];
	const char *u = NULL, *authz;
	int r;

	memset(fc, 0, sizeof(*fc));
	if ((r = e2b_data_auth(call, FS_ENVD_PORT, &fc->b)))
		return r;
	if ((r = e2b_box_ready(call->d, fc->b, &call->err)))
		goto fail;
	if (query_user) {
		if ((r = api_query_str(call, "username", ubuf, sizeof(ubuf), &u)))
			goto fail;
		if (u && (r = e2b_user_check(u, &call->err)))
			goto fail;
		snprintf(fc->user, sizeof(fc->user), "%s", u ? u : "");
	} else if ((authz = call->header(call->query_ctx, "Authorization")) &&
		   (r = e2b_basic_user(authz, fc->user, &call->err))) {
		goto fail;
	}
	e2b_home(fc->user[0] ? fc->user : fc->b->user, fc->home, sizeof(fc->home));
	return 0;
fail:
	e2b_box_put(call->d, fc->b);
	fc->b = NULL;
	return r;
}

static void fs_call_end(struct api_call *call, struct fs_call *fc)
{
	if (fc->b)
		e2b_box_put(call->d, fc->b);
	fc->b = NULL;
}

/* A path field of a request's message (its JSON name; the proto name is the same),
 * resolved as envd does (e2b_path: "~" and relative paths below the user's home). */
static int fs_body_path(struct api_call *call, const struct fs_call *fc, json_t *msg,
			const char *field, char *out)
{
	json_t *v = e2b_field(msg, field, field);

	if (!json_is_string(v))
		return k8_err_set(&call->err, -EINVAL, "field '%s' must be a path", field);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return k8_err_set(&call->err, -EINVAL, "field '%s' holds a NUL byte", field);
	return e2b_path(json_string_value(v), fc->home, out, E2B_PATH_MAX + 1, &call->err);
}

/* ---- the unary calls ---- */

/* The door and the call's path field (fc->b NULL when it fails). */
static int fs_begin(struct api_call *call, struct fs_call *fc, const char *field, char *path)
{
	int r = fs_door(call, false, fc);

	if (!r && (r = fs_body_path(call, fc, call->body, field, path)))
		fs_call_end(call, fc);
	return r;
}

/* Run a script that lists (or only answers) for path: 0 when it exited 0. */
static int fs_run(struct api_call *call, struct fs_call *fc, const char *script,
		  const char *path, const char *a3, const char *a4, struct e2b_run *res)
{
	int r = e2b_box_run(call->d, fc->b, fc->user, fs_argv(script, path, a3, a4), FS_OUT_MAX,
			    res, &call->err);

	if (r == -E2BIG) {
		k8_err_clear(&call->err);
		return k8_err_set(&call->err, -E2BIG, "the listing of %s is larger than %u MiB",
				  path, FS_OUT_MAX >> 20);
	}
	if (!r && res->code != 0)
		r = fs_failed(res->code, res->err, res->errlen, path, &call->err);
	return r;
}

/* The listing a helper printed, parsed: what the sandbox's find printed is not trusted. */
static int fs_parse(struct api_call *call, const struct e2b_run *res, size_t max,
		    struct e2b_entry **e, size_t *n)
{
	struct k8_err perr = { 0 };
	int r = e2b_listing_parse(res->out, res->len, max, e, n, &perr);

	if (r == -E2BIG && max > 1)
		return k8_err_set(&call->err, -E2BIG, "%s", perr.msg);
	if (r < 0)
		return k8_err_set(&call->err, -EIO, "the sandbox's find printed what it does not "
				  "print: %s", perr.msg);
	if (max == 1 && *n != 1) {
		e2b_entries_free(*e, *n);
		return k8_err_set(&call->err, -EIO, "the sandbox's find printed %zu entries for "
				  "one path", *n);
	}
	return 0;
}

/* The one entry a stat-like helper printed for path, as EntryInfo. */
static int fs_entry(struct api_call *call, const struct e2b_run *res, const char *path,
		    json_t **out)
{
	struct e2b_entry *e;
	size_t n;
	int r = fs_parse(call, res, 1, &e, &n);

	if (r)
		return r;
	*out = e2b_entry_json(&e[0], path);
	e2b_entries_free(e, n);
	return 0;
}

/* A unary call's end: its failure in Connect's shape, the box's reference dropped. */
static int fs_unary_end(struct api_call *call, struct fs_call *fc, int r)
{
	fs_call_end(call, fc);
	return r < 0 ? e2b_connect_fail(call, r) : 0;
}

/* A call whose helper prints the one entry of its path (Stat, MakeDir): {"entry"}.
 * fc->b is NULL when it failed at the door. */
static int fs_entry_call(struct api_call *call, struct fs_call *fc, const char *script,
			 char *path)
{
	struct e2b_run res = { 0 };
	json_t *entry = NULL;
	int r;

	if ((r = fs_begin(call, fc, "path", path)))
		return r;
	r = fs_run(call, fc, script, path, NULL, NULL, &res);
	if (!r && !(r = fs_entry(call, &res, path, &entry)))
		call->out = json_pack("{s:o}", "entry", entry);
	e2b_run_free(&res);
	return r;
}

int e2b_fs_api_stat(struct api_call *call)
{
	char path[E2B_PATH_MAX + 1];
	struct fs_call fc;

	return fs_unary_end(call, &fc, fs_entry_call(call, &fc, fs_sh_stat, path));
}

int e2b_fs_api_list(struct api_call *call)
{
	char path[E2B_PATH_MAX + 1], depth[16];
	struct e2b_run res = { 0 };
	struct e2b_entry *e = NULL;
	struct fs_call fc;
	uint32_t d = 1;
	size_t n = 0;
	int r;

	if ((r = fs_begin(call, &fc, "path", path)))
		return fs_unary_end(call, &fc, r);
	r = e2b_json_u32(e2b_field(call->body, "depth", "depth"), &d);
	if (r == -EINVAL)
		return fs_unary_end(call, &fc, k8_err_set(&call->err, -EINVAL, "field 'depth' "
							  "must be a number"));
	snprintf(depth, sizeof(depth), "%u", d < 1 ? 1 : d > FS_DEPTH_MAX ? FS_DEPTH_MAX : d);
	r = fs_run(call, &fc, fs_sh_list, path, depth, NULL, &res);
	if (!r && !(r = fs_parse(call, &res, E2B_LIST_MAX, &e, &n))) {
		json_t *arr = json_array();
		for (size_t i = 0; i < n; i++)
			json_array_append_new(arr, e2b_entry_json(&e[i], path));
		call->out = json_pack("{s:o}", "entries", arr);
		e2b_entries_free(e, n);
	}
	e2b_run_free(&res);
	return fs_unary_end(call, &fc, r);
}

/* The audit record of a change (e2b.fs.mkdir, .move, .remove). */
static void fs_audit(struct api_call *call, struct fs_call *fc, const char *action,
		     const char *path, const char *to, int r)
{
	json_t *det = json_pack("{s:s,s:s,s:b}", "path", path, "user",
				fc->user[0] ? fc->user : fc->b->user, "ok", r == 0);

	if (!det)
		return;         /* not UTF-8: a query's path; the request failed before this */
	if (to)
		json_object_set_new(det, "destination", json_string(to));
	if (r)
		json_object_set_new(det, "error", json_string(call->err.msg));
	e2b_audit(call->d, fc->b, action, det);
}

int e2b_fs_api_mkdir(struct api_call *call)
{
	char path[E2B_PATH_MAX + 1];
	struct fs_call fc;
	int r = fs_entry_call(call, &fc, fs_sh_mkdir, path);

	if (fc.b && r != -EEXIST)
		fs_audit(call, &fc, "e2b.fs.mkdir", path, NULL, r);
	return fs_unary_end(call, &fc, r);
}

int e2b_fs_api_move(struct api_call *call)
{
	char src[E2B_PATH_MAX + 1], dst[E2B_PATH_MAX + 1], parent[E2B_PATH_MAX + 1];
	struct e2b_run res = { 0 };
	struct fs_call fc;
	json_t *entry = NULL;
	int r;

	if ((r = fs_begin(call, &fc, "source", src)) ||
	    (r = fs_body_path(call, &fc, call->body, "destination", dst)))
		return fs_unary_end(call, &fc, r);
	fs_parent(dst, parent, sizeof(parent));
	r = fs_run(call, &fc, fs_sh_move, src, dst, parent, &res);
	if (!r && !(r = fs_entry(call, &res, dst, &entry)))
		call->out = json_pack("{s:o}", "entry", entry);
	e2b_run_free(&res);
	fs_audit(call, &fc, "e2b.fs.move", src, dst, r);
	return fs_unary_end(call, &fc, r);
}

int e2b_fs_api_remove(struct api_call *call)
{
	char path[E2B_PATH_MAX + 1];
	struct e2b_run res = { 0 };
	struct fs_call fc;
	int r;

	if ((r = fs_begin(call, &fc, "path", path)))
		return fs_unary_end(call, &fc, r);
	r = fs_run(call, &fc, fs_sh_remove, path, NULL, NULL, &res);
	e2b_run_free(&res);
	fs_audit(call, &fc, "e2b.fs.remove", path, NULL, r);
	return fs_unary_end(call, &fc, r);
}

int e2b_fs_api_watcher(struct api_call *call)
{
	return e2b_connect_fail(call, k8_err_set(&call->err, -ENOSYS, "polled watchers "
						 "(CreateWatcher, GetWatcherEvents, RemoveWatcher) are "
						 "not supported by kosa8: use WatchDir (the JS SDK's "
						 "watchDir, the Python async SDK's watch_dir)"));
}

/* ---- a helper pumped in a thread of its own (downloads, uploads) ---- */

struct fs_pump {
	struct daemon *d;
	struct e2b_box *b;              /* a reference */
	struct sandbox *sb;             /* e2b_box_exec's reference */
	struct stream *s;
	int rd, wr;                     /* the pipe between the request and the pump */
	bool upload;                    /* wr is the request's (stdin), else the pump's (stdout) */
	pthread_t t;
	bool joined;                    /* the thread is over and joined */
	int rc;                         /* link_stream_run's */
	json_t *exit_info;
	char err[512];
	size_t errlen;
	uint64_t bytes;
	char path[E2B_PATH_MAX + 1];
	char user[E2B_USER_MAX + 1];
};

static int pump_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
		       size_t n)
{
	struct fs_pump *f = ctx;

	(void)flags;
	if (!n)
		return 0;       /* an end of stream */
	if (type == PROTO_STDERR) {
		e2b_keep_start(f->err, sizeof(f->err), &f->errlen, p, n);
		return 0;
	}
	if (f->upload)
		return 0;       /* cat > FILE prints nothing worth reading */
	return write_full(f->wr, p, n) < 0 ? -1 : 0;   /* the reader left: EPIPE */
}

/* An upload's stdin: what the request wrote into the pipe; its close is the file's end. */
static ssize_t pump_input(void *ctx, unsigned char *buf, size_t max, unsigned *flags)
{
	struct fs_pump *f = ctx;
	ssize_t n = read(f->rd, buf, max);

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (n == 0)
		*flags |= STREAM_IN_EOF;
	return n;
}

static void *pump_thread(void *arg)
{
	struct fs_pump *f = arg;
	struct stream_ops ops = { .output = pump_output, .input_fd = -1, .gone_fd = -1 };

	if (f->upload) {
		ops.input = pump_input;
		ops.input_fd = f->rd;
	}
	f->rc = link_stream_run(&f->sb->link, f->s, &ops, f, &f->exit_info);
	/* the other side learns it is over: EOF for a download's reader, EPIPE for an
	 * upload's writer */
	close(f->upload ? f->rd : f->wr);
	return NULL;
}


/* Start script for path (a3: its third argument) in a pump thread; f takes fc's
 * reference to the box. */
static int pump_start(struct daemon *d, struct fs_call *fc, const char *script,
		      const char *path, const char *a3, bool upload, struct fs_pump **fp,
		      struct k8_err *err)
{
	struct fs_pump *f = xcalloc(1, sizeof(*f));
	int p[2], r;

	*fp = NULL;
	f->d = d;
	f->upload = upload;
	snprintf(f->path, sizeof(f->path), "%s", path);
	snprintf(f->user, sizeof(f->user), "%s", fc->user[0] ? fc->user : fc->b->user);
	if (pipe2(p, O_CLOEXEC) < 0) {
		free(f);
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	}
	f->rd = p[0];
	f->wr = p[1];
	/* An upload's writes wait in poll, with a limit; its pump reads stdin when poll
	 * says so and must not block on the first call (link_stream_run's input()). */
	if (upload) {
		fcntl(f->wr, F_SETFL, O_NONBLOCK);
		fcntl(f->rd, F_SETFL, O_NONBLOCK);
	}
	r = e2b_box_exec(d, fc->b, fc->user, fs_argv(script, path, a3, NULL), upload, &f->sb,
			 &f->s, err);
	if (!r && pthread_create(&f->t, NULL, pump_thread, f) != 0) {
		link_stream_signal(&f->sb->link, f->s, SIGKILL);
		link_stream_close(&f->sb->link, f->s);
		sb_put(d, f->sb);
		r = k8_err_set(err, -EAGAIN, "cannot start a thread");
	}
	if (r) {
		close(p[0]);
		close(p[1]);
		free(f);
		return r;
	}
	f->b = fc->b;
	fc->b = NULL;
	*fp = f;
	return 0;
}

/* Wait for f's thread (once). */
static void pump_join(struct fs_pump *f)
{
	if (!f->joined)
		pthread_join(f->t, NULL);
	f->joined = true;
}

/* f's helper exited 0 (its thread joined)? Else why not, in err. */
static int pump_result(struct fs_pump *f, struct k8_err *err)
{
	json_t *c = json_object_get(f->exit_info, "code");
	int code = json_is_integer(c) ? (int)json_integer_value(c) : -1;

	if (f->rc == -ECONNRESET)
		return k8_err_set(err, -ECONNRESET, "%s", LINK_LOST_WHY);
	if (f->rc < 0 || code != 0)
		return fs_failed(code, f->err, f->errlen, f->path, err);
	return 0;
}

/* End f: killed unless `ok` (then an upload's stdin ends and its exit is waited for; a
 * download's reader saw its end), the sandbox.container.cp record written, freed. 0
 * when the helper exited 0, else why not (err). */
static int pump_end(struct fs_pump *f, bool ok, struct k8_err *err)
{
	json_t *det;
	int r;

	if (!f)
		return 0;
	if (!ok && !f->joined)
		link_stream_signal(&f->sb->link, f->s, SIGKILL);
	close(f->upload ? f->wr : f->rd);       /* the request's end of the pipe */
	pump_join(f);
	if (!ok)
		r = err->code ? err->code : k8_err_set(err, -ECONNABORTED, "the transfer was cut");
	else
		r = pump_result(f, err);
	det = json_pack("{s:s,s:s,s:s,s:I,s:s,s:b}", "container", f->b->container, "direction",
			f->upload ? "in" : "out", "path", f->path, "bytes", (json_int_t)f->bytes,
			"user", f->user, "ok", r == 0);
	if (det && r)
		json_object_set_new(det, "error", json_string(err->msg));
	if (det)        /* NULL: a path that is not UTF-8 (from a query) */
		e2b_audit(f->d, f->b, "sandbox.container.cp", det);
	link_stream_close(&f->sb->link, f->s);
	sb_put(f->d, f->sb);
	json_decref(f->exit_info);
	e2b_box_put(f->d, f->b);
	free(f);
	return r;
}

/* ---- GET /files ---- */

/* The path of a /files request (path=), resolved below the user's home; "" when absent
 * and `optional`. */
static int fs_query_path(struct api_call *call, const struct fs_call *fc, bool optional,
			 char *out)
{
	char buf[E2B_PATH_MAX + 2];
	const char *p = NULL;

	out[0] = '\0';
	if (api_query_str(call, "path", buf, sizeof(buf), &p))
		return call->err.code;
	if (!p)
		return optional ? 0 : k8_err_set(&call->err, -EINVAL, "the query argument 'path' "
						 "is required");
	return e2b_path(p, fc->home, out, E2B_PATH_MAX + 1, &call->err);
}

static ssize_t read_body(void *ctx, char *buf, size_t max)
{
	struct fs_pump *f = ctx;
	struct k8_err err = { 0 };
	ssize_t n;

	do
		n = read(f->rd, buf, max);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		f->bytes += (uint64_t)n;
		return n;
	}
	if (n < 0)
		return -1;
	/* the pump is over: a download that did not end well is cut, not passed as whole */
	pump_join(f);
	return pump_result(f, &err) ? -1 : 0;
}

static void read_free(void *ctx)
{
	struct fs_pump *f = ctx;
	struct k8_err err = { 0 };

	/* whole when read_body saw the end and the helper exited 0; else killed */
	pump_end(f, f->joined, &err);
}

/* The helper's first byte: "K" when the file opened (read_body takes the rest). */
static int read_first(struct api_call *call, struct fs_pump *f)
{
	struct pollfd pfd = { .fd = f->rd, .events = POLLIN };
	char c = 0;
	ssize_t n;
	int pr;

	do
		pr = poll(&pfd, 1, FS_FIRST_MS);
	while (pr < 0 && errno == EINTR);
	if (pr == 0)
		return k8_err_set(&call->err, -ETIMEDOUT, "the sandbox did not open %s within %d s",
				  f->path, FS_FIRST_MS / 1000);
	do
		n = read(f->rd, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n == 1 && c == 'K')
		return 0;
	if (n == 1)
		return k8_err_set(&call->err, -EIO, "the sandbox's shell printed what the helper "
				  "does not");
	pump_join(f);           /* EOF: the helper is over */
	return pump_result(f, &call->err) ?: k8_err_set(&call->err, -EIO, "the helper ended "
							"without the file");
}

int e2b_fs_api_read(struct api_call *call)
{
	struct api_reader rd = { .read = read_body, .free = read_free,
				 .type = "application/octet-stream" };
	char path[E2B_PATH_MAX + 1];
	struct fs_pump *f;
	struct fs_call fc;
	int r;

	if ((r = fs_door(call, true, &fc)))
		return r;
	if ((r = fs_query_path(call, &fc, false, path)) ||
	    (r = pump_start(call->d, &fc, fs_sh_read, path, NULL, false, &f, &call->err))) {
		fs_call_end(call, &fc);
		return r;
	}
	if ((r = read_first(call, f))) {
		pump_end(f, f->joined, &call->err);
		return r;
	}
	rd.ctx = f;
	return api_reply_reader(call, &rd);
}

/* ---- POST /files ---- */

/* One upload request: its files one after the other, each a pump of `cat > FILE`. */
struct fs_up {
	struct daemon *d;
	struct fs_call fc;              /* its box reference goes to each file's pump */
	char *id;                       /* the box's id, for a fresh reference per file */
	char qpath[E2B_PATH_MAX + 1];   /* path=, "" when absent */
	bool multipart, skip;           /* skip: a part that is not a file, dropped */
	struct e2b_mp mp;
	struct fs_pump *cur;            /* the file being written */
	uint64_t total, max;
	json_t *files;                  /* the answer: [{"name","type","path"}] */
	struct k8_err err;              /* a part callback's error */
};

/* The file at path begins: a pump of its own, with a fresh reference to the box. */
static int up_open(struct fs_up *u, const char *path)
{
	char parent[E2B_PATH_MAX + 1];
	size_t i;
	json_t *v;

	json_array_foreach(u->files, i, v)
		if (!strcmp(json_string_value(json_object_get(v, "path")), path))
			return k8_err_set(&u->err, -EINVAL, "two files of one upload name %s", path);
	if (!u->fc.b && !(u->fc.b = e2b_box_get(u->d, u->id, false)))
		return k8_err_set(&u->err, -EHOSTUNREACH, "sandbox %s is gone", u->id);
	fs_parent(path, parent, sizeof(parent));
	return pump_start(u->d, &u->fc, fs_sh_write, path, parent, true, &u->cur, &u->err);
}

/* The request's bytes into the current file, waiting while the sandbox is slow (at most
 * FS_STALL_MS without progress). */
static int up_write(struct fs_up *u, const uint8_t *p, size_t n)
{
	struct fs_pump *f = u->cur;

	while (n) {
		struct pollfd pfd = { .fd = f->wr, .events = POLLOUT };
		ssize_t w;
		int pr = poll(&pfd, 1, FS_STALL_MS);

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr == 0)
			return k8_err_set(&u->err, -ETIMEDOUT, "the sandbox took no bytes of %s for "
					  "%d s", f->path, FS_STALL_MS / 1000);
		w = write(f->wr, p, n);
		if (w < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (w < 0) {    /* EPIPE: the helper ended early; its exit says why */
			char path[E2B_PATH_MAX + 1];
			int r;

			snprintf(path, sizeof(path), "%s", f->path);
			r = pump_end(f, true, &u->err);
			u->cur = NULL;
			return r ? r : k8_err_set(&u->err, -EIO, "the helper writing %s ended "
						  "before the file did", path);
		}
		f->bytes += (uint64_t)w;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The current file is complete: its helper's exit decides, and the answer lists it. */
static int up_close(struct fs_up *u)
{
	char path[E2B_PATH_MAX + 1];
	const char *slash;
	int r;

	if (!u->cur)
		return 0;
	snprintf(path, sizeof(path), "%s", u->cur->path);
	r = pump_end(u->cur, true, &u->err);
	u->cur = NULL;
	if (r)
		return r;
	slash = strrchr(path, '/');
	json_array_append_new(u->files, json_pack("{s:s,s:s,s:s}", "name", slash[1] ? slash + 1
						  : path, "type", "file", "path", path));
	return 0;
}

static int mp_begin(void *ctx, const char *field, const char *filename)
{
	struct fs_up *u = ctx;
	char path[E2B_PATH_MAX + 1];

	u->skip = strcmp(field, "file") != 0;   /* envd reads the "file" parts only */
	if (u->skip)
		return 0;
	if (u->qpath[0])
		snprintf(path, sizeof(path), "%s", u->qpath);
	else if (!filename[0])
		return k8_err_set(&u->err, -EINVAL, "a file part has no file name and the request "
				  "no path= argument");
	else if (e2b_path(filename, u->fc.home, path, sizeof(path), &u->err))
		return u->err.code;
	return up_open(u, path);
}

static int mp_data(void *ctx, const uint8_t *p, size_t n)
{
	struct fs_up *u = ctx;

	return u->skip ? 0 : up_write(u, p, n);
}

static int mp_end(void *ctx)
{
	struct fs_up *u = ctx;

	return u->skip ? 0 : up_close(u);
}

static const struct e2b_mp_ops up_mp_ops = { .begin = mp_begin, .data = mp_data,
					     .end = mp_end };

static int up_sink_write(void *ctx, const void *p, size_t n, struct k8_err *err)
{
	struct fs_up *u = ctx;
	int r;

	u->total += n;
	if (u->total > u->max)
		return k8_err_set(err, -EFBIG, "the upload is larger than config.json "
				  "e2b.upload_max_mib (%llu MiB)", (unsigned long long)(u->max >> 20));
	k8_err_clear(&u->err);
	if (u->multipart) {
		r = e2b_mp_feed(&u->mp, p, n, &up_mp_ops, u, err);
		if (r < 0 && u->err.code)
			*err = u->err;  /* a callback's, with its message */
		return r;
	}
	if ((r = up_write(u, p, n)) < 0)
		*err = u->err;
	return r;
}

static int up_sink_done(struct api_call *call, void *ctx)
{
	struct fs_up *u = ctx;
	int r;

	k8_err_clear(&u->err);
	if (u->multipart && (r = e2b_mp_finish(&u->mp, &call->err)))
		return r;
	if ((r = up_close(u))) {
		call->err = u->err;
		return r;
	}
	if (!json_array_size(u->files))
		return k8_err_set(&call->err, -EINVAL, "the upload holds no \"file\" part");
	call->out = json_incref(u->files);
	return 0;
}

static void up_sink_free(void *ctx)
{
	struct fs_up *u = ctx;
	struct k8_err err = { 0 };

	if (u->cur)
		pump_end(u->cur, false, &err);
	if (u->fc.b)
		e2b_box_put(u->d, u->fc.b);
	json_decref(u->files);
	free(u->id);
	free(u);
}

/* The body's kind from its headers, and a size announced past the cap refused at once. */
static int up_kind(struct api_call *call, struct fs_up *u)
{
	const char *ct = call->header(call->query_ctx, "Content-Type");
	const char *ce = call->header(call->query_ctx, "Content-Encoding");
	const char *cl = call->header(call->query_ctx, "Content-Length");

	if (ce && *ce && strcasecmp(ce, "identity"))
		return k8_err_set(&call->err, -EINVAL, "Content-Encoding %.40s: gzip and other "
				  "encoded uploads are not supported by kosa8; upload the bytes "
				  "plain", ce);
	if (cl && strtoull(cl, NULL, 10) > u->max)
		return k8_err_set(&call->err, -EFBIG, "the upload (%.20s bytes) is larger than "
				  "config.json e2b.upload_max_mib (%llu MiB)", cl,
				  (unsigned long long)(u->max >> 20));
	if (ct && !strncasecmp(ct, "multipart/form-data", 19)) {
		u->multipart = true;
		return e2b_mp_init(&u->mp, ct, &call->err);
	}
	if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
		if (!u->qpath[0])
			return k8_err_set(&call->err, -EINVAL, "an octet-stream upload needs the "
					  "query argument 'path'");
		return 0;
	}
	return k8_err_set(&call->err, -EINVAL, "Content-Type must be multipart/form-data or "
			  "application/octet-stream");
}

int e2b_fs_api_write(struct api_call *call)
{
	struct api_sink sink = { .write = up_sink_write, .done = up_sink_done,
				 .free = up_sink_free };
	struct fs_up *u = xcalloc(1, sizeof(*u));
	int r;

	u->d = call->d;
	u->max = e2b_upload_max(call->d);
	u->files = json_array();
	if ((r = fs_door(call, true, &u->fc))) {
		up_sink_free(u);
		return r;
	}
	u->id = xstrdup(u->fc.b->id);
	if (!(r = fs_query_path(call, &u->fc, true, u->qpath)) && !(r = up_kind(call, u)) &&
	    !u->multipart && (r = up_open(u, u->qpath)))
		call->err = u->err;
	if (r) {
		up_sink_free(u);
		return r;
	}
	sink.ctx = u;
	return api_take_body(call, &sink);
}

/* ---- WatchDir ---- */

/* A streaming call's body: one envelope, collected (bounded). */
struct fs_body {
	uint8_t *p;
	size_t n;
};

static int body_write(void *ctx, const void *p, size_t n, struct k8_err *err)
{
	struct fs_body *b = ctx;

	if (!n)
		return 0;
	if (b->n + n > E2BC_REQ_MAX + E2BC_HDR)
		return k8_err_set(err, -E2BIG, "the request is larger than %u bytes",
				  E2BC_REQ_MAX + E2BC_HDR);
	b->p = realloc(b->p, b->n + n);
	if (!b->p)
		abort();
	memcpy(b->p + b->n, p, n);
	b->n += n;
	return 0;
}

static void body_free(void *ctx)
{
	struct fs_body *b = ctx;

	free(b->p);
	free(b);
}

struct fs_watch {
	struct daemon *d;
	struct fs_call fc;
	char path[E2B_PATH_MAX + 1];
	char depth[16];
	int out;                        /* the reply (api_reply_raw's fd) */
	struct e2b_watch w;             /* the last listing */
	uint8_t *buf;                   /* output not yet read into entries */
	size_t have, cap;
	struct e2b_entry *ents;         /* the listing being read */
	size_t n, ecap;
	bool started;                   /* the start message went out */
	uint64_t last_ns;               /* the last message written */
	uint64_t deadline_ns;           /* Connect-Timeout-Ms; 0: none */
	struct k8_err err;              /* why the watch failed (the end message says it) */
	char errtext[256];
	size_t errlen;
};

static void watch_free(void *ctx)
{
	struct fs_watch *w = ctx;

	e2b_watch_free(&w->w);
	e2b_entries_free(w->ents, w->n);
	free(w->buf);
	if (w->fc.b)
		e2b_box_put(w->d, w->fc.b);
	free(w);
}

/* One message to the client (v taken); < 0 when it is gone. */
static int watch_send(struct fs_watch *w, json_t *v)
{
	size_t len;
	uint8_t *frame = e2bc_wrap(v, 0, &len);
	int r = frame ? write_full(w->out, frame, len) : 0;

	json_decref(v);
	free(frame);
	w->last_ns = now_mono_ns();
	return r < 0 ? -1 : 0;
}

static int watch_event(void *ctx, const char *type, const struct e2b_entry *e)
{
	struct fs_watch *w = ctx;
	json_t *v = json_pack("{s:{s:s,s:s}}", "filesystem", "name", e->rel, "type", type);

	return v ? watch_send(w, v) : 0;        /* a name that is not UTF-8: not told */
}

/* A whole listing came: compared with the last one; the first is the start. */
static int watch_listing(struct fs_watch *w)
{
	struct e2b_entry *next = w->ents;
	size_t n = w->n;

	w->ents = NULL;
	w->n = w->ecap = 0;
	if (e2b_watch_update(&w->w, next, n, watch_event, w) < 0)
		return -1;
	if (w->started)
		return 0;
	w->started = true;
	return watch_send(w, json_pack("{s:{}}", "start"));
}

/* Read what the helper printed into entries, each listing as it completes. */
static int watch_read(struct fs_watch *w)
{
	struct k8_err perr = { 0 };
	size_t off = 0, used;
	int r = 0;

	while (off < w->have) {
		struct e2b_entry e;
		r = e2b_entry_next(w->buf + off, w->have - off, &e, &used, &perr);
		if (r == 0)
			break;
		if (r < 0) {
			k8_err_set(&w->err, -EIO, "the sandbox's find printed what it does not "
				   "print: %s", perr.msg);
			break;
		}
		off += used;
		if (r == 2) {
			if ((r = watch_listing(w)) < 0)
				break;
			continue;
		}
		if (w->n == E2B_LIST_MAX) {
			e2b_entry_clear(&e);
			r = k8_err_set(&w->err, -E2BIG, "the listing of %s has more than %d entries",
				       w->path, E2B_LIST_MAX);
			break;
		}
		if (w->n == w->ecap) {
			w->ecap = w->ecap ? 2 * w->ecap : 64;
			w->ents = realloc(w->ents, w->ecap * sizeof(*w->ents));
			if (!w->ents)
				abort();
		}
		w->ents[w->n++] = e;
	}
	memmove(w->buf, w->buf + off, w->have - off);
	w->have -= off;
	return r < 0 ? -1 : 0;
}

static int watch_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
			size_t n)
{
	struct fs_watch *w = ctx;
	uint64_t now = now_mono_ns();

	(void)flags;
	if (!n)
		return 0;       /* an end of stream */
	if (type == PROTO_STDERR) {
		e2b_keep_start(w->errtext, sizeof(w->errtext), &w->errlen, p, n);
		return 0;
	}
	if (w->deadline_ns && now >= w->deadline_ns) {
		k8_err_set(&w->err, -ETIMEDOUT, "the watch's time (Connect-Timeout-Ms) is over");
		return -1;
	}
	if (w->have + n > FS_OUT_MAX) {
		k8_err_set(&w->err, -E2BIG, "a listing of %s is larger than %u MiB", w->path,
			   FS_OUT_MAX >> 20);
		return -1;
	}
	if (w->have + n > w->cap) {
		w->cap = w->have + n > 2 * w->cap ? w->have + n : 2 * w->cap;
		w->buf = realloc(w->buf, w->cap);
		if (!w->buf)
			abort();
	}
	memcpy(w->buf + w->have, p, n);
	w->have += n;
	if (watch_read(w) < 0)
		return -1;
	/* a keepalive now and then: the client's, and a write that fails once it left */
	if (w->started && now - w->last_ns >= FS_KEEPALIVE_NS &&
	    watch_send(w, json_pack("{s:{}}", "keepalive")) < 0)
		return -1;
	return 0;
}

/* The watch's stream: the helper pumped until it fails or the client leaves; a failure
 * is the end message's error (no end message for a client that left). */
static void watch_body(void *ctx, const struct api_conn *conn)
{
	struct fs_watch *w = ctx;
	struct stream_ops ops = { .output = watch_output, .input_fd = -1, .gone_fd = -1 };
	json_t *exit_info = NULL, *c;
	struct sandbox *sb;
	struct stream *s;
	uint8_t *end;
	size_t len;
	int r;

	w->out = conn->fd;
	w->last_ns = now_mono_ns();
	r = e2b_box_exec(w->d, w->fc.b, w->fc.user, fs_argv(fs_sh_watch, w->path, w->depth, NULL),
			 false, &sb, &s, &w->err);
	if (!r) {
		r = link_stream_run(&sb->link, s, &ops, w, &exit_info);
		link_stream_close(&sb->link, s);
		sb_put(w->d, sb);
		c = json_object_get(exit_info, "code");
		if (r == 0 && !w->err.code)     /* the helper ended by itself */
			fs_failed(json_is_integer(c) ? (int)json_integer_value(c) : -1, w->errtext,
				  w->errlen, w->path, &w->err);
		else if (r == -ECONNRESET)
			k8_err_set(&w->err, -ECONNRESET, "%s", LINK_LOST_WHY);
		json_decref(exit_info);
	}
	if (!w->err.code)
		return;         /* the client left */
	end = e2bc_end(e2bc_code_of_errno(w->err.code), w->err.msg, &len);
	if (end && write_full(w->out, end, len) < 0)
		daemon_log("e2b: sandbox %s: a watch's end was not delivered", w->fc.b->id);
	free(end);
}

/* The request's message: path, recursive (includeEntry and allowNetworkMounts are envd
 * 0.6's, which the SDKs refuse by themselves before asking kosa8). */
static int watch_parse(struct api_call *call, struct fs_watch *w, const struct fs_body *body)
{
	const char *ct = call->header(call->query_ctx, "Content-Type");
	const char *tmo = call->header(call->query_ctx, "Connect-Timeout-Ms");
	json_t *msg = NULL;
	int r;

	if (ct && strncasecmp(ct, "application/connect+json", 24))
		return k8_err_set(&call->err, -EINVAL, "Content-Type %.60s: kosa8 speaks Connect "
				  "with JSON only (application/connect+json)", ct);
	if ((r = fs_door(call, false, &w->fc)))
		return r;
	if ((r = e2bc_unwrap(body->p, body->n, E2BC_REQ_MAX, &msg, &call->err)))
		return r;
	r = fs_body_path(call, &w->fc, msg, "path", w->path);
	snprintf(w->depth, sizeof(w->depth), "%d", json_is_true(e2b_field(msg, "recursive",
						"recursive")) ? FS_DEPTH_MAX : 1);
	json_decref(msg);
	if (tmo && strspn(tmo, "0123456789") == strlen(tmo) && strlen(tmo) <= 10 && atol(tmo))
		w->deadline_ns = now_mono_ns() + (uint64_t)atol(tmo) * 1000000ull;
	return r;
}

static int watch_done(struct api_call *call, void *ctx)
{
	struct fs_watch *w = xcalloc(1, sizeof(*w));
	int r;

	w->d = call->d;
	if ((r = watch_parse(call, w, ctx))) {
		watch_free(w);
		return e2b_connect_stream_fail(call, r);
	}
	e2b_audit(call->d, w->fc.b, "e2b.fs.watch", json_pack("{s:s,s:b}", "path", w->path,
							      "recursive", atoi(w->depth) > 1));
	return api_reply_raw(call, API_RAW_BODY, "application/connect+json", watch_body,
			     watch_free, w);
}

int e2b_fs_api_watch(struct api_call *call)
{
	struct api_sink sink = { .write = body_write, .done = watch_done, .free = body_free,
				 .ctx = xcalloc(1, sizeof(struct fs_body)) };

	return api_take_body(call, &sink);
}
