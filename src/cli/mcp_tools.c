/* SPDX-License-Identifier: Apache-2.0 */
/* mcp_tools.c - kosa8 mcp's tools (mcp.h, docs/mcp.md).
 *
 * Each tool acts on the server's one sandbox through kosa8d's API, as the CLI does:
 *   run_code     POST .../run with the code on the process's stdin (python3 - or sh -s),
 *                a fresh container each call; output kept within --max-output; killed
 *                at its timeout or when the call is cancelled
 *   run_cell     POST .../contexts/default/run: the sandbox's interpreter, variables kept
 *   read_file, write_file, list_files   the sandbox's shared folders, on the host side,
 *                opened with openat2(RESOLVE_BENEATH) below the folder the daemon pinned:
 *                no path leads out, a :ro folder refuses writes
 *   checkpoint, rewind, egress_status   their API routes
 * A failure of the tool's work is a result with isError (the model reads it); only bad
 * arguments are a JSON-RPC error. Nothing here lets the model name the sandbox, change
 * its egress, its folders or its limits.
 */
#include "cli.h"
#include "cli/mcp.h"
#include "common/proto.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define RUN_CODE_MAX (512u << 10)       /* a program sent to run_code */
#define FILE_READ_DEFAULT (256u << 10)
#define FILE_READ_MAX (4u << 20)
#define FILE_WRITE_MAX (4u << 20)
#define LIST_MAX 1000
#define IMAGES_MAX 4                    /* image results of one run_cell */
#define KILL_WAIT_NS (10ull * 1000000000ull)

json_t *mcp_text_result(const char *text, bool is_error)
{
	char *safe = mcp_utf8(text, strlen(text));
	json_t *r = json_pack("{s:[{s:s,s:s}],s:b}", "content", "type", "text", "text", safe,
			      "isError", is_error);
	free(safe);
	return r;
}

static char *sb_path(struct mcp_server *s, const char *sub)
{
	cleanup_free char *enc = cli_urlenc(mcp_server_sandbox(s));
	return xasprintf("/v1/sandboxes/%s%s", enc, sub);
}

/* The sandbox's summary from the list (GET /v1/sandboxes asks its agent nothing, as
 * GET /v1/sandboxes/NAME does): its object, or NULL with err. */
static json_t *sb_get(struct client *cl, struct mcp_server *s, struct k8_err *err)
{
	json_t *res = NULL, *v, *found = NULL;
	size_t i;

	if (client_call(cl, "GET", "/v1/sandboxes", NULL, NULL, NULL, 60000, &res, err) < 0)
		return NULL;
	json_array_foreach(res, i, v)
		if (!strcmp(json_string_value(json_object_get(v, "name")) ?: "", mcp_server_sandbox(s)))
			found = json_incref(v);
	json_decref(res);
	if (!found)
		k8_err_set(err, -ENOENT, "sandbox '%s' does not exist (any more)", mcp_server_sandbox(s));
	return found;
}

/* The image run_code runs: --image, else the sandbox's only one. */
static int pick_image(struct client *cl, struct mcp_server *s, char *out, size_t len,
		      struct k8_err *err)
{
	json_t *sb, *imgs;

	if (mcp_server_image(s)) {
		snprintf(out, len, "%s", mcp_server_image(s));
		return 0;
	}
	if (!(sb = sb_get(cl, s, err)))
		return err->code;
	imgs = json_object_get(sb, "images");
	if (json_array_size(imgs) != 1) {
		json_decref(sb);
		return k8_err_set(err, -EINVAL, "sandbox %s has %zu images; start kosa8 mcp with "
				  "--image to say which one code runs in", mcp_server_sandbox(s),
				  json_array_size(imgs));
	}
	snprintf(out, len, "%s", json_string_value(json_object_get(json_array_get(imgs, 0), "ref"))
		 ?: "");
	json_decref(sb);
	return 0;
}

/* ---- an exec stream, pumped here (run_code, the container's files) ---- */

/* Where a process's output goes: out(ctx, PROTO_STDOUT or PROTO_STDERR, bytes). */
typedef void (*run_out_fn)(void *ctx, uint16_t type, const void *p, size_t n);

struct run {
	int fd;
	struct proto_reader rd;
	unsigned char *out;             /* frames queued for the daemon */
	size_t out_len, out_off;
	run_out_fn on_out;
	void *ctx;
	uint64_t bytes;                 /* output so far */
	json_t *exit;
	bool eof;
};

static void run_queue(struct run *r, uint16_t type, uint16_t flags, const void *p, size_t n)
{
	size_t flen;
	unsigned char *f = proto_frame_new(type, flags, 1, p, n, &flen);

	if (r->out_off == r->out_len)
		r->out_off = r->out_len = 0;
	r->out = realloc(r->out, r->out_len + flen);
	if (!r->out)
		abort();
	memcpy(r->out + r->out_len, f, flen);
	r->out_len += flen;
	free(f);
}

/* Feed received bytes to the frame reader: output to on_out, EXIT kept. 0 or -EPROTO. */
static int run_feed(struct run *r, const unsigned char *buf, size_t n)
{
	size_t off = 0;

	while (off < n) {
		long used = proto_reader_feed(&r->rd, buf + off, n - off);
		struct proto_hdr h;
		const unsigned char *p;

		if (used < 0)
			return -EPROTO;
		off += (size_t)used;
		if (!proto_reader_frame(&r->rd, &h, &p))
			continue;
		if ((h.type == PROTO_STDOUT || h.type == PROTO_STDERR) && h.len) {
			r->bytes += h.len;
			r->on_out(r->ctx, h.type, p, h.len);
		} else if (h.type == PROTO_EXIT && !r->exit) {
			r->exit = json_loadb((const char *)p, h.len, 0, NULL);
		}
	}
	return 0;
}

/* Start the process of `body` at API path `path` (run or exec), give it `in` on stdin
 * (NULL: none), and pump until it exits, the call is cancelled (-ECANCELED: the stream is
 * closed, and kosa8d kills the process) or timeout_s passes (SIGKILL, then *killed).
 * Progress goes to the call once a second. 0 with *exit (EXIT's object, NULL when the
 * stream ended without one), or a negative errno with err. */
static int run_process(struct mcp_server *s, struct mcp_call *call, const char *path,
		       json_t *body, const char *in, size_t in_len, long long timeout_s,
		       run_out_fn on_out, void *ctx, json_t **exit, bool *killed,
		       struct k8_err *err)
{
	struct run r = { .fd = -1, .on_out = on_out, .ctx = ctx };
	unsigned char *extra = NULL;
	size_t extra_len = 0;
	uint64_t t0, deadline, killed_at = 0, next_tick;
	struct client cl;
	int rc;

	*exit = NULL;
	*killed = false;
	if ((rc = client_init(&cl, mcp_server_home(s), err)))
		return rc;
	rc = client_upgrade(&cl, path, body, &r.fd, &extra, &extra_len, err);
	client_free(&cl);
	if (rc) {
		free(extra);
		return rc;
	}
	proto_reader_init(&r.rd);
	for (size_t off = 0; in && off < in_len; off += PROTO_DATA_CHUNK)
		run_queue(&r, PROTO_STDIN, 0, in + off,
			  in_len - off < PROTO_DATA_CHUNK ? in_len - off : PROTO_DATA_CHUNK);
	if (in)
		run_queue(&r, PROTO_STDIN, PROTO_F_EOF, NULL, 0);
	fcntl(r.fd, F_SETFL, fcntl(r.fd, F_GETFL) | O_NONBLOCK);
	if (extra_len)
		rc = run_feed(&r, extra, extra_len);     /* frames that came with the head */
	free(extra);
	t0 = now_mono_ns();
	deadline = t0 + (uint64_t)timeout_s * 1000000000ull;
	next_tick = t0 + 1000000000ull;
	while (!rc && !r.exit && !r.eof) {
		struct pollfd pfd = { .fd = r.fd, .events = POLLIN };
		uint64_t now = now_mono_ns();

		if (mcp_call_cancelled(call)) {
			rc = -ECANCELED;
			break;
		}
		if (now >= deadline && !killed_at) {
			unsigned char sig[4] = { SIGKILL, 0, 0, 0 };
			run_queue(&r, PROTO_SIGNAL, 0, sig, 4);
			killed_at = now;
		}
		if (killed_at && now - killed_at > KILL_WAIT_NS)
			break;
		if (now >= next_tick) {
			mcp_progress(call, (double)(now - t0) / 1e9, "running for %llu s, %llu bytes "
				     "of output", (unsigned long long)((now - t0) / 1000000000ull),
				     (unsigned long long)r.bytes);
			next_tick = now + 1000000000ull;
		}
		if (r.out_off < r.out_len)
			pfd.events |= POLLOUT;
		if (poll(&pfd, 1, 250) < 0 && errno != EINTR) {
			rc = k8_err_set(err, -errno, "poll: %s", strerror(errno));
			break;
		}
		if (pfd.revents & POLLOUT) {
			ssize_t w = write(r.fd, r.out + r.out_off, r.out_len - r.out_off);
			if (w > 0)
				r.out_off += (size_t)w;
		}
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
			unsigned char buf[65536];
			ssize_t n = read(r.fd, buf, sizeof(buf));
			if (n == 0)
				r.eof = true;
			else if (n > 0)
				rc = run_feed(&r, buf, (size_t)n);
			else if (errno != EAGAIN && errno != EINTR)
				rc = -errno;
			if (rc < 0 && rc != -ECANCELED)
				rc = k8_err_set(err, rc, "the process's stream broke: %s", strerror(-rc));
		}
	}
	*exit = r.exit;
	*killed = killed_at != 0;
	proto_reader_free(&r.rd);
	free(r.out);
	close(r.fd);
	return rc;
}

static void to_outbuf(void *ctx, uint16_t type, const void *p, size_t n)
{
	(void)type;
	mcp_outbuf_add(ctx, p, n);
}

static const char *const run_code_args[] = { "code", "language", "timeout_s", NULL };

static int tool_run_code(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
			 struct k8_err *err)
{
	struct mcp_server *s = t->s;
	const char *code = NULL, *lang = "python";
	long long tmo = mcp_server_timeout(s);
	char image[512];
	struct client cl;
	struct mcp_outbuf ob;
	cleanup_free char *path = sb_path(s, "/run");
	json_t *body, *ex = NULL;
	bool killed;
	int rc;

	if (mcp_args_only(args, run_code_args, err) ||
	    mcp_arg_str(args, "code", true, RUN_CODE_MAX, &code, err) ||
	    mcp_arg_str(args, "language", false, 16, &lang, err) ||
	    mcp_arg_int(args, "timeout_s", 1, mcp_server_timeout_max(s), &tmo, err))
		return -EINVAL;
	if (strcmp(lang, "python") && strcmp(lang, "shell"))
		return k8_err_set(err, -EINVAL, "argument 'language' must be python or shell");
	if ((rc = client_init(&cl, mcp_server_home(s), err)))
		return rc;
	rc = pick_image(&cl, s, image, sizeof(image), err);
	client_free(&cl);
	if (rc)
		return rc;
	body = json_pack("{s:s,s:[s,s],s:b}", "image", image, "argv",
			 !strcmp(lang, "python") ? "python3" : "sh",
			 !strcmp(lang, "python") ? "-" : "-s", "stdin", 1);
	mcp_outbuf_init(&ob, mcp_server_max_output(s));
	rc = run_process(s, t->call, path, body, code, strlen(code), tmo, to_outbuf, &ob, &ex,
			 &killed, err);
	json_decref(body);
	if (rc == -ECANCELED) {
		*result = mcp_text_result("cancelled: the process was killed", true);
		rc = 0;
	} else if (!rc) {
		cleanup_free char *text = mcp_outbuf_text(&ob);
		long long code_ = json_integer_value(json_object_get(ex, "code"));
		char tail[200];
		bool bad;

		if (killed)
			snprintf(tail, sizeof(tail), "[kosa8: timed out after %lld s; the process was "
				 "killed]", tmo);
		else if (!ex)
			snprintf(tail, sizeof(tail), "[kosa8: the run ended without an exit status]");
		else if (json_is_true(json_object_get(ex, "oom")))
			snprintf(tail, sizeof(tail), "[exit code %lld: out of memory]", code_);
		else if (json_string_value(json_object_get(ex, "error")))
			snprintf(tail, sizeof(tail), "[kosa8: %s]",
				 json_string_value(json_object_get(ex, "error")));
		else
			snprintf(tail, sizeof(tail), "[exit code %lld]", code_);
		bad = killed || !ex || code_ != 0;
		cleanup_free char *all = xasprintf("%s%s%s", text, *text && text[strlen(text) - 1] !=
						   '\n' ? "\n" : "", tail);
		*result = mcp_text_result(all, bad);
	}
	json_decref(ex);
	mcp_outbuf_free(&ob);
	return rc;
}

/* ---- run_cell: a cell of the sandbox's default context ---- */

struct cell {
	struct mcp_call *call;
	struct mcp_outbuf ob;
	json_t *images;
	char *main;                     /* the main result's text/plain */
	bool ended, ok;
	uint64_t t0, next_tick;
};

static int cell_tick(void *ctx)
{
	struct cell *c = ctx;
	uint64_t now = now_mono_ns();

	if (now >= c->next_tick) {
		mcp_progress(c->call, (double)(now - c->t0) / 1e9, "running for %llu s",
			     (unsigned long long)((now - c->t0) / 1000000000ull));
		c->next_tick = now + 1000000000ull;
	}
	return mcp_call_cancelled(c->call);
}

static int cell_line(void *ctx, json_t *ev)
{
	struct cell *c = ctx;
	const char *type = json_string_value(json_object_get(ev, "type")) ?: "";
	const char *s;

	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		s = json_string_value(json_object_get(ev, "text")) ?: "";
		mcp_outbuf_add(&c->ob, s, strlen(s));
	} else if (!strcmp(type, "result")) {
		json_t *d = json_object_get(ev, "data");
		const char *mimes[] = { "image/png", "image/jpeg" };
		for (size_t i = 0; i < ARRAY_SIZE(mimes); i++) {
			s = json_string_value(json_object_get(d, mimes[i]));
			if (s && json_array_size(c->images) < IMAGES_MAX) {
				json_array_append_new(c->images, json_pack("{s:s,s:s,s:s}", "type",
									   "image", "data", s,
									   "mimeType", mimes[i]));
				break;
			}
		}
		s = json_string_value(json_object_get(d, "text/plain"));
		if (json_is_true(json_object_get(ev, "is_main_result")) && s) {
			free(c->main);
			c->main = xstrdup(s);
		} else if (s && !json_object_get(d, "image/png")) {
			mcp_outbuf_add(&c->ob, s, strlen(s));
			mcp_outbuf_add(&c->ob, "\n", 1);
		}
	} else if (!strcmp(type, "error")) {
		s = json_string_value(json_object_get(ev, "traceback"));
		if (!s || !*s) {
			cleanup_free char *e = xasprintf("%s: %s\n",
							 json_string_value(json_object_get(ev, "name")) ?: "",
							 json_string_value(json_object_get(ev, "value")) ?: "");
			mcp_outbuf_add(&c->ob, e, strlen(e));
		} else {
			mcp_outbuf_add(&c->ob, s, strlen(s));
		}
	} else if (!strcmp(type, "end")) {
		c->ended = true;
		c->ok = json_is_true(json_object_get(ev, "ok"));
	}
	return 0;
}

static const char *const run_cell_args[] = { "code", "timeout_s", NULL };

static int tool_run_cell(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
			 struct k8_err *err)
{
	struct mcp_server *s = t->s;
	const char *code = NULL;
	long long tmo = mcp_server_timeout(s);
	struct cell c = { .call = t->call };
	struct client cl;
	json_t *body;
	int rc;

	if (mcp_args_only(args, run_cell_args, err) ||
	    mcp_arg_str(args, "code", true, RUN_CODE_MAX, &code, err) ||
	    mcp_arg_int(args, "timeout_s", 1, mcp_server_timeout_max(s), &tmo, err))
		return -EINVAL;
	if ((rc = client_init(&cl, mcp_server_home(s), err)))
		return rc;
	body = json_pack("{s:s,s:I}", "code", code, "timeout_s", (json_int_t)tmo);
	if (mcp_server_image(s))
		json_object_set_new(body, "image", json_string(mcp_server_image(s)));
	mcp_outbuf_init(&c.ob, mcp_server_max_output(s));
	c.images = json_array();
	c.t0 = now_mono_ns();
	c.next_tick = c.t0 + 1000000000ull;
	cleanup_free char *path = sb_path(s, "/contexts/default/run");
	rc = client_stream(&cl, "POST", path, body, cell_line, cell_tick, &c, err);
	json_decref(body);
	if (rc == -ECANCELED) {
		*result = mcp_text_result("cancelled: the cell was interrupted (its variables "
					  "stay)", true);
		rc = 0;
	} else if (!rc) {
		cleanup_free char *text = mcp_outbuf_text(&c.ob);
		cleanup_free char *main_s = c.main ? mcp_utf8(c.main, strlen(c.main)) : NULL;
		cleanup_free char *all = xasprintf("%s%s%s%s", text,
						   *text && main_s && text[strlen(text) - 1] != '\n' ?
						   "\n" : "", main_s ? main_s : "",
						   !*text && !main_s ? "(no output)" : "");
		if (!c.ended) {
			free(all);
			all = xstrdup("[kosa8: the cell's stream ended without its end]");
		}
		*result = mcp_text_result(all, !c.ended || !c.ok);
		json_array_extend(json_object_get(*result, "content"), c.images);
	}
	free(c.main);
	json_decref(c.images);
	mcp_outbuf_free(&c.ob);
	client_free(&cl);
	return rc;
}

/* ---- a container path (--files DIR): the interpreter container's files ---- */

/* Run in the interpreter container by run_process: the file operations below DIR,
 * confined there in the container (realpath); python3 -I -S, standard library only.
 * Exit 3: outside DIR, 4: no such file, 5: wrong kind, 6: another error (stderr). */
static const char files_py[] =
	"import os, stat, sys\n"
	"op, root, path = sys.argv[1:4]\n"
	"def fail(code, msg):\n"
	"    sys.stderr.write(msg)\n"
	"    sys.exit(code)\n"
	"rr = os.path.realpath(root)\n"
	"real = os.path.realpath(path if op != 'write' else os.path.dirname(path))\n"
	"if real != rr and not real.startswith(rr.rstrip('/') + '/'):\n"
	"    fail(3, 'outside')\n"
	"try:\n"
	"    if op == 'read':\n"
	"        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)\n"
	"        st = os.fstat(fd)\n"
	"        if not stat.S_ISREG(st.st_mode):\n"
	"            fail(5, 'not a regular file')\n"
	"        os.write(1, b'%d\\n' % st.st_size)\n"
	"        left = int(sys.argv[4])\n"
	"        while left > 0:\n"
	"            b = os.read(fd, min(left, 65536))\n"
	"            if not b:\n"
	"                break\n"
	"            while b:\n"
	"                n = os.write(1, b)\n"
	"                left -= n\n"
	"                b = b[n:]\n"
	"    elif op == 'write':\n"
	"        target = os.path.join(real, os.path.basename(path))\n"
	"        if os.path.islink(target) or (os.path.exists(target) and not os.path.isfile(target)):\n"
	"            fail(5, 'not a regular file')\n"
	"        data = sys.stdin.buffer.read()\n"
	"        with open(target, 'ab' if sys.argv[4] == 'append' else 'wb') as f:\n"
	"            f.write(data)\n"
	"        print(len(data))\n"
	"    elif op == 'list':\n"
	"        names = sorted(os.listdir(real))\n"
	"        print(len(names))\n"
	"        for n in names[:1000]:\n"
	"            st = os.lstat(os.path.join(real, n))\n"
	"            k = 'd' if stat.S_ISDIR(st.st_mode) else 'f' if stat.S_ISREG(st.st_mode) else "
	"'l' if stat.S_ISLNK(st.st_mode) else 's'\n"
	"            print(k, st.st_size, os.fsencode(n).hex())\n"
	"except FileNotFoundError:\n"
	"    fail(4, 'no such file or folder')\n"
	"except NotADirectoryError:\n"
	"    fail(5, 'not a folder')\n"
	"except IsADirectoryError:\n"
	"    fail(5, 'a folder')\n"
	"except OSError as e:\n"
	"    fail(6, e.strerror or str(e))\n";

struct collect_out {
	char *buf;
	size_t len, cap;                /* stdout kept up to cap (the rest counted, dropped) */
	uint64_t total;
	char err[256];
	size_t errlen;
};

static void to_collect(void *ctx, uint16_t type, const void *p, size_t n)
{
	struct collect_out *c = ctx;

	if (type == PROTO_STDERR) {
		size_t room = sizeof(c->err) - 1 - c->errlen;
		memcpy(c->err + c->errlen, p, n < room ? n : room);
		c->errlen += n < room ? n : room;
		return;
	}
	c->total += n;
	if (c->len < c->cap) {
		size_t take = c->cap - c->len < n ? c->cap - c->len : n;
		memcpy(c->buf + c->len, p, take);
		c->len += take;
	}
}

static int ctx_start_line(void *ctx, json_t *ev)
{
	const char *id = json_string_value(json_object_get(ev, "context"));
	if (id && strlen(id) > 12 && id[12] == '-')
		snprintf(ctx, 13, "%.12s", id);
	return 0;
}

/* The interpreter container: the sandbox's default context's (an empty cell makes it). */
static int files_container(struct mcp_server *s, char ctr[13], struct k8_err *err)
{
	struct client cl;
	cleanup_free char *p = sb_path(s, "/contexts");
	json_t *res = NULL, *c, *body;
	size_t i;
	int rc;

	ctr[0] = '\0';
	if ((rc = client_init(&cl, mcp_server_home(s), err)))
		return rc;
	rc = client_call(&cl, "GET", p, NULL, NULL, NULL, 60000, &res, err);
	json_array_foreach(rc ? NULL : res, i, c) {
		const char *id = json_string_value(json_object_get(c, "id"));
		if (id && strlen(id) == 20 && !strcmp(id + 12, "-default") && !ctr[0])
			snprintf(ctr, 13, "%.12s", id);
	}
	json_decref(res);
	if (!rc && !ctr[0]) {
		cleanup_free char *run = sb_path(s, "/contexts/default/run");
		body = json_pack("{s:s}", "code", "");
		if (mcp_server_image(s))
			json_object_set_new(body, "image", json_string(mcp_server_image(s)));
		rc = client_stream(&cl, "POST", run, body, ctx_start_line, NULL, ctr, err);
		json_decref(body);
		if (!rc && !ctr[0])
			rc = k8_err_set(err, -EIO, "the interpreter's container did not start");
	}
	client_free(&cl);
	return rc;
}

/* One file operation in the interpreter container: 0 with the helper's exit code in
 * *code and its output in *c (c->cap set by the caller), or a failure to run it. */
static int files_op(struct mcp_tool_ctx *t, const char *op, const char *path,
		    const char *extra, const char *in, size_t in_len, struct collect_out *c,
		    int *code, struct k8_err *err)
{
	char ctr[13];
	json_t *body, *ex = NULL;
	bool killed;
	int rc;

	if ((rc = files_container(t->s, ctr, err)))
		return rc;
	cleanup_free char *p = xasprintf("/containers/%s/exec", ctr);
	cleanup_free char *full = sb_path(t->s, p);
	body = json_pack("{s:[s,s,s,s,s,s,s,s,s],s:b}", "argv", "python3", "-I", "-S", "-c",
			 files_py, op, mcp_server_files_root(t->s), path, extra ? extra : "",
			 "stdin", in != NULL);
	c->buf = xmalloc(c->cap + 1);
	rc = run_process(t->s, t->call, full, body, in, in_len, 60, to_collect, c, &ex, &killed,
			 err);
	json_decref(body);
	*code = json_is_integer(json_object_get(ex, "code")) ?
		(int)json_integer_value(json_object_get(ex, "code")) : -1;
	json_decref(ex);
	c->buf[c->len] = '\0';
	c->err[c->errlen] = '\0';
	for (char *q = c->err; *q; q++)
		if ((unsigned char)*q < 0x20)
			*q = ' ';
	return rc;
}

/* The helper's exit code as a tool error; 0 when it succeeded. */
static int files_fail(int code, const char *path, const struct collect_out *c,
		      struct k8_err *err)
{
	switch (code) {
	case 0:
		return 0;
	case 3:
		return k8_err_set(err, -EPERM, "%s leads out of %s", path, "the files' folder");
	case 4:
		return k8_err_set(err, -ENOENT, "%s: no such file or folder", path);
	case 5:
		return k8_err_set(err, -EINVAL, "%s: %s", path, c->err);
	default:
		return k8_err_set(err, -EIO, "%s: %s (exit %d)", path, c->err[0] ? c->err :
				  "the helper failed", code);
	}
}

/* Is path for the container (--files DIR, and path below it)? */
static bool in_container(struct mcp_server *s, const char *path)
{
	const char *rel;
	return mcp_server_files_root(s) && mcp_path_under(path, mcp_server_files_root(s), &rel) == 0;
}

/* ---- the shared folders ---- */

struct folder {
	int fd;                         /* the host folder, O_PATH */
	bool ro;
	const char *rel;                /* the path below it */
};

/* The shared folder that holds guest path `path` (the deepest): opened, or a tool error
 * naming the folders there are. */
static int folder_open(struct mcp_server *s, const char *path, struct folder *f, json_t **sbp,
		       struct k8_err *err)
{
	struct client cl;
	json_t *sb, *mounts, *m, *best = NULL;
	const char *best_rel = NULL;
	size_t i, best_len = 0;
	cleanup_free char *list = xstrdup("");
	int rc;

	f->fd = -1;
	if ((rc = client_init(&cl, mcp_server_home(s), err)))
		return rc;
	sb = sb_get(&cl, s, err);
	client_free(&cl);
	if (!sb)
		return err->code;
	mounts = json_object_get(sb, "mounts");
	json_array_foreach(mounts, i, m) {
		const char *g = json_string_value(json_object_get(m, "guest")), *rel;
		if (!g || !json_string_value(json_object_get(m, "host")))
			continue;
		char *nl = xasprintf("%s%s%s", list, *list ? ", " : "", g);
		free(list);
		list = nl;
		if (mcp_path_under(path, g, &rel) == -EINVAL) {
			json_decref(sb);
			return k8_err_set(err, -EINVAL, "argument 'path' must be an absolute path "
					  "without '.', '..' or empty components");
		}
		if (mcp_path_under(path, g, &rel) == 0 && strlen(g) >= best_len) {
			best = m;
			best_rel = rel;
			best_len = strlen(g);
		}
	}
	if (!best) {
		rc = k8_err_set(err, -ENOENT, "%s is not in a shared folder of the sandbox; %s%s%s%s",
				path, *list ? "its folders are " : "it has none", list,
				mcp_server_files_root(s) ? "; files in its container are under " : "",
				mcp_server_files_root(s) ? mcp_server_files_root(s) : "");
		json_decref(sb);
		return rc;
	}
	f->fd = open(json_string_value(json_object_get(best, "host")),
		     O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (f->fd < 0) {
		rc = k8_err_set(err, -errno, "the shared folder of %s cannot be opened on the host: "
				"%s", path, strerror(errno));
		json_decref(sb);
		return rc;
	}
	f->ro = json_is_true(json_object_get(best, "ro"));
	f->rel = best_rel;
	*sbp = sb;      /* holds the strings f points into */
	return 0;
}

static int beneath(int dirfd, const char *rel, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW), .mode = mode,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
	};
	long fd = syscall(SYS_openat2, dirfd, *rel ? rel : ".", &how, sizeof(how));
	return fd < 0 ? -errno : (int)fd;
}

/* Open path below its shared folder (folder_open, then beneath): the fd, or a negative
 * errno with err. For a write, a :ro folder and the folder itself are refused. */
static int folder_fd(struct mcp_server *s, const char *path, int flags, mode_t mode, bool write,
		     struct stat *root, struct k8_err *err)
{
	struct folder f = { .fd = -1, .rel = "" };
	json_t *sb = NULL;
	int fd = folder_open(s, path, &f, &sb, err);

	if (fd)
		return fd;
	if (write && (f.ro || !*f.rel))
		fd = k8_err_set(err, -EROFS, "%s: %s", path, f.ro ? "the shared folder is read-only"
				: "that is the shared folder itself");
	else if ((fd = beneath(f.fd, f.rel, flags, mode)) < 0)
		k8_err_set(err, fd, "%s: %s", path, fd == -EXDEV ? "a link leads out of the shared "
			   "folder" : strerror(-fd));
	if (root && fstat(f.fd, root) < 0)
		memset(root, 0, sizeof(*root));
	close(f.fd);
	json_decref(sb);
	return fd;
}

static char *b64(const unsigned char *p, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);
	int w = EVP_EncodeBlock((unsigned char *)out, p, (int)n);
	out[w < 0 ? 0 : w] = '\0';
	return out;
}

static bool is_text(const unsigned char *p, size_t n)
{
	cleanup_free char *u = mcp_utf8((const char *)p, n);
	return strlen(u) == n && !memchr(p, 0, n);
}

/* What read_file answers: text, or base64 for other bytes, and the cut said. */
static json_t *file_result(const char *path, const unsigned char *buf, size_t n, uint64_t size)
{
	cleanup_free char *note = size > n ?
		xasprintf("\n[kosa8: the file is %llu bytes; the first %zu are shown (max_bytes)]",
			  (unsigned long long)size, n) : xstrdup("");
	if (is_text(buf, n)) {
		cleanup_free char *text = xasprintf("%.*s%s", (int)n, (const char *)buf, note);
		return mcp_text_result(text, false);
	}
	cleanup_free char *enc = b64(buf, n);
	cleanup_free char *text = xasprintf("[kosa8: %s is not text; its bytes in base64 "
					    "follow]\n%s%s", path, enc, note);
	return mcp_text_result(text, false);
}

/* read_file in the container. */
static int container_read(struct mcp_tool_ctx *t, const char *path, long long max,
			  json_t **result, struct k8_err *err)
{
	struct collect_out c = { .cap = (size_t)max + 32 };
	char extra[32];
	int code, rc;

	snprintf(extra, sizeof(extra), "%lld", max);
	rc = files_op(t, "read", path, extra, NULL, 0, &c, &code, err);
	if (!rc)
		rc = files_fail(code, path, &c, err);
	char *nl = rc ? NULL : memchr(c.buf, '\n', c.len < 24 ? c.len : 24);
	if (!rc && !nl)
		rc = k8_err_set(err, -EPROTO, "%s: the helper's answer is not one", path);
	if (!rc) {
		unsigned long long size = strtoull(c.buf, NULL, 10);
		size_t n = c.len - (size_t)(nl + 1 - c.buf);
		if (n > (size_t)max)
			n = (size_t)max;
		*result = file_result(path, (unsigned char *)nl + 1, n, size);
	}
	free(c.buf);
	return rc;
}

static const char *const read_args[] = { "path", "max_bytes", NULL };

static int tool_read_file(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
			  struct k8_err *err)
{
	const char *path = NULL;
	long long max = FILE_READ_DEFAULT;
	struct stat st;
	unsigned char *buf;
	ssize_t n;
	int fd;

	if (mcp_args_only(args, read_args, err) ||
	    mcp_arg_str(args, "path", true, 4095, &path, err) ||
	    mcp_arg_int(args, "max_bytes", 1, FILE_READ_MAX, &max, err))
		return -EINVAL;
	if (in_container(t->s, path))
		return container_read(t, path, max, result, err);
	if ((fd = folder_fd(t->s, path, O_RDONLY | O_NONBLOCK, 0, false, NULL, err)) < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return k8_err_set(err, -EINVAL, "%s is not a regular file", path);
	}
	buf = xmalloc((size_t)max);
	n = 0;
	while (n < max) {
		ssize_t k = read(fd, buf + n, (size_t)(max - n));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += k;
	}
	close(fd);
	*result = file_result(path, buf, (size_t)n, (uint64_t)st.st_size);
	free(buf);
	return 0;
}

static const char *const write_args[] = { "path", "content", "append", NULL };

static int tool_write_file(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
			   struct k8_err *err)
{
	const char *path = NULL, *content = NULL;
	bool append = false;
	struct stat root, st;
	cleanup_free char *msg = NULL;
	int fd, rc;

	if (mcp_args_only(args, write_args, err) ||
	    mcp_arg_str(args, "path", true, 4095, &path, err) ||
	    mcp_arg_str(args, "content", false, FILE_WRITE_MAX, &content, err) ||
	    mcp_arg_bool(args, "append", &append, err))
		return -EINVAL;
	if (!content)
		return k8_err_set(err, -EINVAL, "argument 'content' (a string) is required");
	if (in_container(t->s, path)) {
		struct collect_out c = { .cap = 64 };
		int code;
		rc = files_op(t, "write", path, append ? "append" : "replace", content,
			      strlen(content), &c, &code, err);
		if (!rc)
			rc = files_fail(code, path, &c, err);
		if (!rc) {
			msg = xasprintf("%s %zu bytes to %s", append ? "appended" : "wrote",
					strlen(content), path);
			*result = mcp_text_result(msg, false);
		}
		free(c.buf);
		return rc;
	}
	fd = folder_fd(t->s, path, O_WRONLY | O_CREAT | O_NONBLOCK | (append ? O_APPEND : O_TRUNC),
		       0644, true, &root, err);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return k8_err_set(err, -EINVAL, "%s is not a regular file", path);
	}
	/* the folder's owner owns what is written there, as kosa8-fs does for the guest */
	if (geteuid() == 0 && st.st_nlink == 1 && st.st_uid == 0 && root.st_uid != 0)
		(void)!fchown(fd, root.st_uid, root.st_gid);
	rc = write_full(fd, content, strlen(content));
	close(fd);
	if (rc < 0)
		return k8_err_set(err, rc, "%s: %s", path, strerror(-rc));
	msg = xasprintf("%s %zu bytes to %s", append ? "appended" : "wrote", strlen(content), path);
	*result = mcp_text_result(msg, false);
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* list_files in the container: the helper's lines "KIND SIZE HEXNAME", each checked. */
static int container_list(struct mcp_tool_ctx *t, const char *path, json_t **result,
			  struct k8_err *err)
{
	struct collect_out c = { .cap = 1u << 20 };
	size_t n = 0, cap = 4096, len = 0;
	char *text = xmalloc(cap), *save = NULL;
	unsigned long long count = 0;
	int code, rc;

	text[0] = '\0';
	rc = files_op(t, "list", path, NULL, NULL, 0, &c, &code, err);
	if (!rc)
		rc = files_fail(code, path, &c, err);
	for (char *ln = rc ? NULL : strtok_r(c.buf, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
		char kind, hex[1100], name[550];
		unsigned long long size;
		size_t hl;
		if (n == 0 && !strchr(ln, ' ')) {
			count = strtoull(ln, NULL, 10);
			n++;
			continue;
		}
		if (sscanf(ln, "%c %llu %1099s", &kind, &size, hex) != 3 || !strchr("dfls", kind) ||
		    (hl = strlen(hex)) % 2 || hl / 2 >= sizeof(name))
			continue;
		for (size_t i = 0; i < hl / 2; i++) {
			unsigned v;
			if (sscanf(hex + 2 * i, "%2x", &v) != 1)
				v = '?';
			name[i] = (char)v;
		}
		name[hl / 2] = '\0';
		cleanup_free char *safe = mcp_utf8(name, hl / 2);
		cleanup_free char *row = kind == 'd' ? xasprintf("%s/\n", safe) :
			kind == 'f' ? xasprintf("%s  %llu bytes\n", safe, size) :
			xasprintf("%s  (%s)\n", safe, kind == 'l' ? "symbolic link" : "special file");
		while (len + strlen(row) + 1 > cap)
			text = realloc(text, cap *= 2);
		if (!text)
			abort();
		memcpy(text + len, row, strlen(row) + 1);
		len += strlen(row);
		n++;
	}
	if (!rc) {
		cleanup_free char *all = count > 1000 ?
			xasprintf("%s[kosa8: %llu more entries not listed]\n", text, count - 1000) :
			xstrdup(len ? text : "(empty folder)\n");
		*result = mcp_text_result(all, false);
	}
	free(text);
	free(c.buf);
	return rc;
}

static const char *const list_args[] = { "path", NULL };

static int tool_list_files(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
			   struct k8_err *err)
{
	const char *path = NULL;
	struct dirent *de;
	char **lines = NULL;
	size_t n = 0, more = 0;
	DIR *dir;
	int fd;

	if (mcp_args_only(args, list_args, err) ||
	    mcp_arg_str(args, "path", true, 4095, &path, err))
		return -EINVAL;
	if (in_container(t->s, path))
		return container_list(t, path, result, err);
	if ((fd = folder_fd(t->s, path, O_RDONLY | O_DIRECTORY, 0, false, NULL, err)) < 0)
		return fd;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	}
	while ((de = readdir(dir))) {
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == LIST_MAX) {
			more++;
			continue;
		}
		if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		lines = realloc(lines, (n + 1) * sizeof(*lines));
		if (!lines)
			abort();
		lines[n++] = S_ISDIR(st.st_mode) ? xasprintf("%s/", de->d_name) :
			     S_ISREG(st.st_mode) ? xasprintf("%s  %lld bytes", de->d_name,
							     (long long)st.st_size) :
			     S_ISLNK(st.st_mode) ? xasprintf("%s  (symbolic link)", de->d_name) :
			     xasprintf("%s  (special file)", de->d_name);
	}
	closedir(dir);
	qsort(lines, n, sizeof(*lines), entry_cmp);
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += strlen(lines[i]) + 1;
	char *text = xmalloc(len + 128), *o = text;
	*o = '\0';
	for (size_t i = 0; i < n; i++) {
		o += sprintf(o, "%s\n", lines[i]);
		free(lines[i]);
	}
	free(lines);
	if (more)
		sprintf(o, "[kosa8: %zu more entries not listed]\n", more);
	else if (!n)
		sprintf(o, "(empty folder)\n");
	*result = mcp_text_result(text, false);
	free(text);
	return 0;
}

/* ---- checkpoint, rewind, egress_status ---- */

static int simple_post(struct mcp_server *s, const char *sub, json_t *body, json_t **res,
		       struct k8_err *err)
{
	struct client cl;
	cleanup_free char *p = sb_path(s, sub);
	int rc;

	if ((rc = client_init(&cl, mcp_server_home(s), err)) == 0) {
		rc = client_call(&cl, body ? "POST" : "GET", p, body, NULL, NULL, 0, res, err);
		client_free(&cl);
	}
	json_decref(body);
	return rc;
}

static const char *const label_args[] = { "label", NULL };

/* checkpoint and rewind: the one argument label, POSTed to sub as field. */
static int label_call(struct mcp_tool_ctx *t, const json_t *args, const char *sub,
		      const char *field, json_t **res, const char **label, struct k8_err *err)
{
	if (mcp_args_only(args, label_args, err) ||
	    mcp_arg_str(args, "label", true, 64, label, err))
		return -EINVAL;
	return simple_post(t->s, sub, json_pack("{s:s}", field, *label), res, err);
}

static int tool_checkpoint(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
			   struct k8_err *err)
{
	const char *label = NULL;
	json_t *res = NULL;
	int rc = label_call(t, args, "/checkpoints", "label", &res, &label, err);

	if (!rc) {
		cleanup_free char *m = xasprintf("checkpoint %s taken (%lld ms)%s%s", label,
						 json_integer_value(json_object_get(res, "ms")),
						 json_object_get(res, "removed") ? "; removed the oldest, "
						 : "", json_string_value(json_object_get(res, "removed")) ?: "");
		*result = mcp_text_result(m, false);
	}
	json_decref(res);
	return rc;
}

static int tool_rewind(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
		       struct k8_err *err)
{
	const char *label = NULL;
	json_t *res = NULL;
	int rc = label_call(t, args, "/rewind", "to", &res, &label, err);

	if (!rc) {
		cleanup_free char *m = xasprintf("rewound to %s: memory, processes and disk are as "
						 "they were then", label);
		*result = mcp_text_result(m, false);
	}
	json_decref(res);
	return rc;
}

static const char *const no_args[] = { NULL };

static int tool_egress_status(struct mcp_tool_ctx *t, const json_t *args, json_t **result,
			      struct k8_err *err)
{
	json_t *res = NULL, *out;
	int rc;

	if (mcp_args_only(args, no_args, err))
		return -EINVAL;
	rc = simple_post(t->s, "/egress", NULL, &res, err);
	if (!rc) {
		out = json_pack("{s:O?,s:O?,s:O?,s:O?}", "mode", json_object_get(res, "mode"),
				"rules", json_object_get(res, "rules"), "network",
				json_object_get(res, "network"), "destinations",
				json_object_get(res, "destinations"));
		char *t2 = json_dumps(out, JSON_INDENT(1));
		cleanup_free char *m = xasprintf("%s\n(read only: the sandbox's owner sets its "
						 "network policy)", t2 ? t2 : "{}");
		free(t2);
		json_decref(out);
		*result = mcp_text_result(m, false);
	}
	json_decref(res);
	return rc;
}

/* ---- the table ---- */

const struct mcp_tool mcp_tools[] = {
	{ "run_code",
	  "Run a program in a fresh container of a sealed sandbox (a virtual machine; no "
	  "network unless its owner allowed it). Nothing persists between calls: use run_cell "
	  "to keep Python variables. Returns stdout and stderr as they interleaved, then the "
	  "exit code; long output is trimmed in the middle and says so; the process is killed "
	  "at its time limit.",
	  "{\"type\":\"object\",\"properties\":{"
	  "\"code\":{\"type\":\"string\",\"description\":\"the program's source\"},"
	  "\"language\":{\"type\":\"string\",\"enum\":[\"python\",\"shell\"],"
	  "\"description\":\"python (python3) or shell (sh); default python\"},"
	  "\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,"
	  "\"description\":\"kill the process after this many seconds\"}},"
	  "\"required\":[\"code\"],\"additionalProperties\":false}",
	  true, tool_run_code },
	{ "run_cell",
	  "Run Python in a persistent interpreter inside the sandbox, like a notebook cell: "
	  "variables, imports and functions stay from call to call. Returns what the cell "
	  "printed and the value of its last expression; an exception comes back with its "
	  "traceback; matplotlib figures come back as images. A cell that runs past its time "
	  "limit is interrupted (KeyboardInterrupt) and the variables stay.",
	  "{\"type\":\"object\",\"properties\":{"
	  "\"code\":{\"type\":\"string\",\"description\":\"Python statements\"},"
	  "\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,"
	  "\"description\":\"interrupt the cell after this many seconds\"}},"
	  "\"required\":[\"code\"],\"additionalProperties\":false}",
	  true, tool_run_cell },
	{ "read_file",
	  "Read a file from one of the sandbox's shared folders (the paths are the sandbox's, "
	  "e.g. /out/result.csv). Text comes back as text, other files as base64.",
	  "{\"type\":\"object\",\"properties\":{"
	  "\"path\":{\"type\":\"string\",\"description\":\"absolute path inside the sandbox\"},"
	  "\"max_bytes\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":4194304,"
	  "\"description\":\"read at most this much (default 262144)\"}},"
	  "\"required\":[\"path\"],\"additionalProperties\":false}",
	  false, tool_read_file },
	{ "write_file",
	  "Write a text file into one of the sandbox's writable shared folders (e.g. "
	  "/in/data.csv); the folder must exist. Code in the sandbox sees it at once.",
	  "{\"type\":\"object\",\"properties\":{"
	  "\"path\":{\"type\":\"string\",\"description\":\"absolute path inside the sandbox\"},"
	  "\"content\":{\"type\":\"string\",\"description\":\"the file's text\"},"
	  "\"append\":{\"type\":\"boolean\",\"description\":\"append instead of replacing\"}},"
	  "\"required\":[\"path\",\"content\"],\"additionalProperties\":false}",
	  false, tool_write_file },
	{ "list_files",
	  "List a folder of one of the sandbox's shared folders: names, sizes, subfolders.",
	  "{\"type\":\"object\",\"properties\":{"
	  "\"path\":{\"type\":\"string\",\"description\":\"absolute path inside the sandbox\"}},"
	  "\"required\":[\"path\"],\"additionalProperties\":false}",
	  false, tool_list_files },
	{ "checkpoint",
	  "Save the whole sandbox (memory, processes, disk, interpreter variables) under a "
	  "label, to rewind to later. At most ten are kept; the oldest goes.",
	  "{\"type\":\"object\",\"properties\":{"
	  "\"label\":{\"type\":\"string\",\"description\":\"a name: letters, digits, . _ -\"}},"
	  "\"required\":[\"label\"],\"additionalProperties\":false}",
	  false, tool_checkpoint },
	{ "rewind",
	  "Put the whole sandbox back to a checkpoint: memory, processes, disk and interpreter "
	  "variables as they were when it was taken. Shared folders are not rewound.",
	  "{\"type\":\"object\",\"properties\":{"
	  "\"label\":{\"type\":\"string\",\"description\":\"a checkpoint's label\"}},"
	  "\"required\":[\"label\"],\"additionalProperties\":false}",
	  false, tool_rewind },
	{ "egress_status",
	  "Show the sandbox's network policy (deny, an allow-list, or allow-all) and what it "
	  "passed and refused. Read only.",
	  "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}",
	  false, tool_egress_status },
	{ NULL, NULL, NULL, false, NULL },
};

const struct mcp_tool *mcp_tool_find(const char *name)
{
	for (int i = 0; mcp_tools[i].name; i++)
		if (!strcmp(mcp_tools[i].name, name))
			return &mcp_tools[i];
	return NULL;
}
