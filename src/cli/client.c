/* SPDX-License-Identifier: Apache-2.0 */
/* client.c - the CLI's side of docs/reference/api.md: HTTP/1.1 with JSON over the daemon's unix
 * socket.
 *
 * Ordinary requests and NDJSON progress streams go through libcurl
 * (CURLOPT_UNIX_SOCKET_PATH). Exec streams cannot: libcurl does not hand over a
 * connection after "101 Switching Protocols", so client_upgrade() writes that one request
 * itself on a raw socket, reads the answer's head (at most 64 KiB) and, on 101, returns
 * the socket with whatever frame bytes already followed the head.
 *
 * Every function returns 0 or a negative errno with a message in err; the errno of a
 * daemon's error answer comes from cli_api_errno() (see cli.h for the meanings).
 */
#include "cli.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define CLIENT_MAX_BODY (64u << 20)    /* a whole JSON answer (listings) */
#define CLIENT_MAX_LINE (1u << 20)     /* one NDJSON line */
#define CLIENT_MAX_EVENT (8u << 20)    /* one line of an event stream (a cell's, with images) */
#define CLIENT_MAX_HEAD (64u << 10)    /* the head of an upgrade answer */
#define CLIENT_MAX_ERRBODY (1u << 20)  /* the body of an error answer to an upgrade */

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int client_init(struct client *cl, const char *home_flag, struct k8_err *err)
{
	memset(cl, 0, sizeof(*cl));
	cl->home = cli_home_pick(home_flag, getenv("KOSA8_HOME"), getenv("HOME"), is_dir, err);
	if (!cl->home)
		return err->code;
	cl->sock = cli_sock_path(cl->home, err);
	if (!cl->sock) {
		free(cl->home);
		cl->home = NULL;
		return err->code;
	}
	return 0;
}

void client_free(struct client *cl)
{
	if (cl->curl)
		curl_easy_cleanup(cl->curl);
	free(cl->home);
	free(cl->sock);
	memset(cl, 0, sizeof(*cl));
}

int client_not_running(struct client *cl, int absent, struct k8_err *err)
{
	(void)absent;
	return k8_err_set(err, -ECONNREFUSED,
			  "the daemon is not running (no socket at %s); start it with: "
			  "kosa8 daemon start", cl->sock);
}

int client_denied(struct client *cl, struct k8_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), e = 0;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", cl->sock);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		e = errno;
	if (fd >= 0)
		close(fd);
	if (e != EACCES && e != EPERM)
		return 0;
	return k8_err_set(err, -EACCES, "permission denied on %s: kosa8d lets only root and the "
			  "members of its socket group use it (the group kosa8 for the system "
			  "service; being in it is as good as root for sandboxes, as the docker "
			  "group is). Ask an administrator: usermod -aG kosa8 %s, then log in again",
			  cl->sock, getenv("USER") ? getenv("USER") : "USER");
}

/* Connection failed: say whether the socket is there at all, or is not ours to use. */
static int not_running(struct client *cl, struct k8_err *err)
{
	struct stat st;
	int absent = stat(cl->sock, &st) < 0;

	if (client_denied(cl, err))
		return err->code;
	if (!absent && !S_ISSOCK(st.st_mode))
		return k8_err_set(err, -ECONNREFUSED,
				  "%s is not a socket; is KOSA8_HOME (%s) right?", cl->sock,
				  cl->home);
	return client_not_running(cl, absent, err);
}

/* The exit status the daemon suggested with its last error (run/exec: 127 command not
 * found, 126 not executable, 125 otherwise); 0 when it suggested none. */
static int last_exit_hint;

int client_exit_hint(void)
{
	return last_exit_hint;
}

/* Turn an {"error":{"code","message"}} object (or anything else) into errno + message. */
static int api_error(const json_t *body, long status, struct k8_err *err)
{
	const json_t *e = json_object_get(body, "error");
	json_int_t hint = json_integer_value(json_object_get(e, "exit_code"));

	last_exit_hint = (hint >= 1 && hint <= 255) ? (int)hint : 0;
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));

	if (!msg && json_is_string(e))
		msg = json_string_value(e);
	if (msg)
		return k8_err_set(err, cli_api_errno(code, status), "%s", msg);
	return k8_err_set(err, cli_api_errno(code, status),
			  "the daemon answered HTTP %ld without saying why", status);
}

static int error_from_text(const char *text, size_t len, long status, struct k8_err *err)
{
	json_error_t je;
	json_t *j = json_loadb(text, len, 0, &je);
	int r;

	if (!j)
		return k8_err_set(err, cli_api_errno(NULL, status),
				  "the daemon answered HTTP %ld: %.200s", status,
				  len ? text : "(no body)");
	r = api_error(j, status, err);
	json_decref(j);
	return r;
}

/* ---- libcurl requests ---- */

struct call {
	CURL *curl;
	client_progress_fn progress;
	void *pctx;
	int mode;               /* 0 undecided, 1 NDJSON lines, 2 whole body */
	long status;
	char *buf;
	size_t len, cap;
	json_t *result;         /* final "result" line, or the whole 2xx body */
	json_t *error;          /* final "error" line */
	int rc;                 /* set when the write callback gave up */
	struct k8_err *err;
	client_line_fn line;    /* an event stream: every line of a 2xx answer goes here */
	void *lctx;
	client_tick_fn tick;    /* called about once a second: non-zero cancels */
};

static int call_append(struct call *c, const char *data, size_t n, size_t max)
{
	if (c->len + n > max)
		return -EMSGSIZE;
	if (c->len + n + 1 > c->cap) {
		size_t ncap = c->cap ? c->cap : 4096;
		while (ncap < c->len + n + 1)
			ncap *= 2;
		char *nb = realloc(c->buf, ncap);
		if (!nb)
			return -ENOMEM;
		c->buf = nb;
		c->cap = ncap;
	}
	memcpy(c->buf + c->len, data, n);
	c->len += n;
	c->buf[c->len] = '\0';
	return 0;
}

/* One NDJSON line of a progress stream. */
static int call_line(struct call *c, const char *line, size_t n)
{
	json_error_t je;
	json_t *j, *v;

	while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
		n--;
	if (c->line && n) {
		int r;
		j = json_loadb(line, n, 0, &je);
		if (!j)
			return k8_err_set(c->err, -EPROTO, "the daemon sent a line that is not JSON: "
					  "%.100s", line);
		r = c->line(c->lctx, j);
		json_decref(j);
		return r;
	}
	if (!n || c->result || c->error)
		return 0; /* blank, or after the final line */
	j = json_loadb(line, n, 0, &je);
	if (!j)
		return k8_err_set(c->err, -EPROTO, "the daemon sent a progress line that is not "
				  "JSON: %.100s", line);
	if ((v = json_object_get(j, "progress"))) {
		if (c->progress)
			c->progress(c->pctx, v);
	} else if ((v = json_object_get(j, "result"))) {
		c->result = json_incref(v);
	} else if (json_object_get(j, "error")) {
		c->error = json_incref(j);
	}
	json_decref(j);
	return 0;
}

static int call_lines(struct call *c)
{
	size_t start = 0;
	char *nl;

	while ((nl = memchr(c->buf + start, '\n', c->len - start))) {
		int r = call_line(c, c->buf + start, (size_t)(nl - (c->buf + start)));
		if (r < 0)
			return r;
		start = (size_t)(nl - c->buf) + 1;
	}
	memmove(c->buf, c->buf + start, c->len - start);
	c->len -= start;
	return 0;
}

static size_t call_write(char *data, size_t size, size_t nmemb, void *user)
{
	struct call *c = user;
	size_t n = size * nmemb;
	int r;

	if (!c->mode) {
		char *ct = NULL;
		curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->status);
		curl_easy_getinfo(c->curl, CURLINFO_CONTENT_TYPE, &ct);
		c->mode = c->status / 100 == 2 && ct &&
				  !strncasecmp(ct, "application/x-ndjson", 20) ? 1 : 2;
	}
	size_t max = c->mode != 1 ? CLIENT_MAX_BODY : c->line ? CLIENT_MAX_EVENT : CLIENT_MAX_LINE;
	r = call_append(c, data, n, max);
	if (r < 0) {
		c->rc = k8_err_set(c->err, r, "the daemon's answer is larger than %zu MiB", max >> 20);
		return 0;
	}
	if (c->mode == 1 && (r = call_lines(c)) < 0) {
		c->rc = r;
		return 0;
	}
	return n;
}

static int call_finish(struct call *c, json_t **result, struct k8_err *err)
{
	json_error_t je;
	json_t *j;

	if (c->status / 100 != 2)
		return error_from_text(c->buf ? c->buf : "", c->len, c->status, err);
	if (c->mode == 1) {
		int r = call_line(c, c->buf ? c->buf : "", c->len); /* a last line without \n */
		if (r < 0)
			return r;
		if (c->line)
			return 0;
		if (c->error)
			return api_error(c->error, 500, err);
		if (!c->result)
			return k8_err_set(err, -ECONNRESET, "lost the connection to the daemon "
					  "before it finished (no result line)");
		*result = c->result;
		c->result = NULL;
		return 0;
	}
	if (!c->len) {
		*result = json_object();
		return 0;
	}
	j = json_loadb(c->buf, c->len, 0, &je);
	if (!j)
		return k8_err_set(err, -EPROTO, "the daemon's answer is not JSON: %s", je.text);
	*result = j;
	return 0;
}

static int xfer_cancel(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct call *c = p;
	(void)dt; (void)dn; (void)ut; (void)un;
	return c->tick && c->tick(c->lctx);
}

/* client_call, and client_stream when c->line is set. */
static int do_call(struct client *cl, struct call c, const char *method, const char *path,
		   const json_t *body, long timeout_ms, json_t **result, struct k8_err *err)
{
	struct curl_slist *hdrs = NULL;
	char curl_msg[CURL_ERROR_SIZE] = "";
	cleanup_free char *url = xasprintf("http://kosa8%s", path);
	cleanup_free char *text = NULL;
	CURLcode res;
	int r;

	*result = NULL;
	if (!cl->curl) {
		curl_global_init(CURL_GLOBAL_NOTHING);
		cl->curl = curl_easy_init();
		if (!cl->curl)
			return k8_err_set(err, -ENOMEM, "cannot initialise libcurl");
	}
	c.curl = cl->curl;
	curl_easy_reset(c.curl);
	curl_easy_setopt(c.curl, CURLOPT_UNIX_SOCKET_PATH, cl->sock);
	curl_easy_setopt(c.curl, CURLOPT_URL, url);
	curl_easy_setopt(c.curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c.curl, CURLOPT_WRITEFUNCTION, call_write);
	curl_easy_setopt(c.curl, CURLOPT_WRITEDATA, &c);
	curl_easy_setopt(c.curl, CURLOPT_ERRORBUFFER, curl_msg);
	curl_easy_setopt(c.curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c.curl, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	if (c.tick) {
		curl_easy_setopt(c.curl, CURLOPT_XFERINFOFUNCTION, xfer_cancel);
		curl_easy_setopt(c.curl, CURLOPT_XFERINFODATA, &c);
		curl_easy_setopt(c.curl, CURLOPT_NOPROGRESS, 0L);
	}
	if (timeout_ms)
		curl_easy_setopt(c.curl, CURLOPT_TIMEOUT_MS, timeout_ms);
	hdrs = curl_slist_append(hdrs, "Accept: application/json, application/x-ndjson");
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text)
			return k8_err_set(err, -ENOMEM, "cannot encode the request");
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
		curl_easy_setopt(c.curl, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(c.curl, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
	} else if (!strcmp(method, "POST")) {
		curl_easy_setopt(c.curl, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(c.curl, CURLOPT_POSTFIELDSIZE, 0L);
	}
	curl_easy_setopt(c.curl, CURLOPT_HTTPHEADER, hdrs);

	res = curl_easy_perform(c.curl);
	curl_slist_free_all(hdrs);
	if (c.rc) {
		r = c.rc;
	} else if (res == CURLE_ABORTED_BY_CALLBACK) {
		r = k8_err_set(err, -ECANCELED, "cancelled");
	} else if (res == CURLE_COULDNT_CONNECT) {
		r = not_running(cl, err);
	} else if (res == CURLE_OPERATION_TIMEDOUT) {
		r = k8_err_set(err, -ETIMEDOUT, "the daemon did not answer within %ld s",
			       timeout_ms / 1000);
	} else if (res != CURLE_OK) {
		r = k8_err_set(err, -ECONNRESET, "lost the connection to the daemon (%s)",
			       curl_msg[0] ? curl_msg : curl_easy_strerror(res));
	} else {
		if (!c.mode)
			curl_easy_getinfo(c.curl, CURLINFO_RESPONSE_CODE, &c.status);
		r = call_finish(&c, result, err);
	}
	json_decref(c.result);
	json_decref(c.error);
	free(c.buf);
	return r;
}

int client_call(struct client *cl, const char *method, const char *path, const json_t *body,
		client_progress_fn progress, void *ctx, long timeout_ms, json_t **result,
		struct k8_err *err)
{
	struct call c = { .progress = progress, .pctx = ctx, .err = err };

	return do_call(cl, c, method, path, body, timeout_ms, result, err);
}

int client_stream(struct client *cl, const char *method, const char *path, const json_t *body,
		  client_line_fn line, client_tick_fn tick, void *ctx, struct k8_err *err)
{
	struct call c = { .line = line, .lctx = ctx, .tick = tick, .err = err };
	json_t *res = NULL;
	int r = do_call(cl, c, method, path, body, 0, &res, err);

	json_decref(res);
	return r;
}

int client_ping(struct client *cl, long timeout_ms, json_t **status)
{
	struct k8_err err = { 0 };
	json_t *st = NULL;

	if (client_call(cl, "GET", "/v1/status", NULL, NULL, NULL, timeout_ms, &st, &err) < 0)
		return 0;
	if (status)
		*status = st;
	else
		json_decref(st);
	return 1;
}

/* ---- the upgrade to an exec stream, on a raw socket ---- */

/* Read more bytes into buf (capacity cap); -ECONNRESET on EOF. */
static int sock_read_more(int fd, char *buf, size_t *have, size_t cap)
{
	for (;;) {
		ssize_t n = read(fd, buf + *have, cap - *have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		*have += (size_t)n;
		return 0;
	}
}

/* Value of header `name` in a head (lines after the status line), or NULL.
 * Copies it into val (trimmed). */
static const char *head_get(const char *head, const char *name, char *val, size_t len)
{
	size_t nl = strlen(name);
	const char *p = strstr(head, "\r\n");

	while (p && p[2] && !(p[2] == '\r' && p[3] == '\n')) {
		const char *line = p + 2, *end = strstr(line, "\r\n");
		if (!end)
			break;
		if ((size_t)(end - line) > nl && !strncasecmp(line, name, nl) && line[nl] == ':') {
			const char *v = line + nl + 1;
			while (v < end && (*v == ' ' || *v == '\t'))
				v++;
			size_t vl = (size_t)(end - v);
			while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
				vl--;
			snprintf(val, len, "%.*s", (int)vl, v);
			return val;
		}
		p = end;
	}
	return NULL;
}

/* Decode a chunked body held in in[0..n). 1 when complete (*out, *outlen filled),
 * 0 when more bytes are needed, -EPROTO when malformed. */
static int chunked_decode(const char *in, size_t n, char **out, size_t *outlen)
{
	size_t pos = 0, olen = 0;
	char *o = xmalloc(n + 1);

	for (;;) {
		const char *crlf = memmem(in + pos, n - pos, "\r\n", 2);
		unsigned long sz = 0;
		const char *p;

		if (!crlf)
			goto more;
		for (p = in + pos; p < crlf; p++) {
			int d;
			if (*p >= '0' && *p <= '9')
				d = *p - '0';
			else if (*p >= 'a' && *p <= 'f')
				d = *p - 'a' + 10;
			else if (*p >= 'A' && *p <= 'F')
				d = *p - 'A' + 10;
			else if (*p == ';' || *p == ' ')
				break;
			else
				goto bad;
			if (sz > CLIENT_MAX_ERRBODY)
				goto bad;
			sz = sz * 16 + (unsigned long)d;
		}
		if (p == in + pos)
			goto bad;
		pos = (size_t)(crlf - in) + 2;
		if (sz == 0) {
			o[olen] = '\0';
			*out = o;
			*outlen = olen;
			return 1; /* trailers, if any, do not matter */
		}
		if (n - pos < sz + 2)
			goto more;
		memcpy(o + olen, in + pos, sz);
		olen += sz;
		pos += sz + 2;
	}
more:
	free(o);
	return 0;
bad:
	free(o);
	return -EPROTO;
}

/* Read the body of a non-101 answer and turn it into errno + message. */
static int upgrade_error(int fd, const char *head, char *rest, size_t rest_len, long status,
			 struct k8_err *err)
{
	char val[64];
	size_t cap = CLIENT_MAX_ERRBODY, have = rest_len;
	cleanup_free char *buf = xmalloc(cap + 1);
	int chunked = head_get(head, "Transfer-Encoding", val, sizeof(val)) &&
		      strcasestr(val, "chunked");
	long clen = head_get(head, "Content-Length", val, sizeof(val)) ? atol(val) : -1;

	memcpy(buf, rest, rest_len);
	for (;;) {
		if (chunked) {
			char *body;
			size_t blen;
			int c = chunked_decode(buf, have, &body, &blen);
			if (c < 0)
				return k8_err_set(err, cli_api_errno(NULL, status),
						  "the daemon answered HTTP %ld (malformed body)",
						  status);
			if (c > 0) {
				int r = error_from_text(body, blen, status, err);
				free(body);
				return r;
			}
		} else if (clen >= 0 && have >= (size_t)clen) {
			return error_from_text(buf, (size_t)clen, status, err);
		}
		if (have >= cap)
			return k8_err_set(err, cli_api_errno(NULL, status),
					  "the daemon answered HTTP %ld with a body over 1 MiB",
					  status);
		int r = sock_read_more(fd, buf, &have, cap);
		if (r == -ECONNRESET && !chunked && clen < 0)
			return error_from_text(buf, have, status, err); /* body ends at close */
		if (r < 0)
			return k8_err_set(err, cli_api_errno(NULL, status),
					  "the daemon answered HTTP %ld and then closed the "
					  "connection", status);
	}
}

int client_upgrade(struct client *cl, const char *path, const json_t *body, int *fd_out,
		   unsigned char **extra, size_t *extra_len, struct k8_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	cleanup_close int fd = -1;
	cleanup_free char *text = NULL, *req = NULL, *buf = NULL;
	size_t have = 0;
	int r;

	*fd_out = -1;
	*extra = NULL;
	*extra_len = 0;
	text = json_dumps(body, JSON_COMPACT);
	if (!text)
		return k8_err_set(err, -ENOMEM, "cannot encode the request");
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", cl->sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno == ENOENT || errno == ECONNREFUSED || errno == ENOTSOCK)
			return not_running(cl, err);
		return k8_err_set(err, -errno, "cannot connect to %s: %s", cl->sock,
				  strerror(errno));
	}
	req = xasprintf("POST %s HTTP/1.1\r\nHost: kosa8\r\nContent-Type: application/json\r\n"
			"Content-Length: %zu\r\nConnection: Upgrade\r\nUpgrade: kosa8-stream\r\n"
			"\r\n%s", path, strlen(text), text);
	r = write_full(fd, req, strlen(req));
	if (r < 0)
		return k8_err_set(err, -ECONNRESET, "lost the connection to the daemon while "
				  "sending the request (%s)", strerror(-r));

	buf = xmalloc(CLIENT_MAX_HEAD + 1);
	for (;;) {
		char *end, *sp;
		long status;

		buf[have] = '\0';
		end = memmem(buf, have, "\r\n\r\n", 4);
		if (!end) {
			if (have >= CLIENT_MAX_HEAD)
				return k8_err_set(err, -EPROTO, "the head of the daemon's answer is "
						  "larger than 64 KiB");
			r = sock_read_more(fd, buf, &have, CLIENT_MAX_HEAD);
			if (r < 0)
				return k8_err_set(err, -ECONNRESET, "lost the connection to the "
						  "daemon before it answered");
			continue;
		}
		end += 4;
		if (strncmp(buf, "HTTP/1.", 7) || !(sp = strchr(buf, ' ')))
			return k8_err_set(err, -EPROTO, "the daemon's answer is not HTTP: %.40s",
					  buf);
		status = strtol(sp + 1, NULL, 10);
		size_t rest = have - (size_t)(end - buf);
		if (status == 101) {
			*extra_len = rest;
			if (rest) {
				*extra = xmalloc(rest);
				memcpy(*extra, end, rest);
			}
			*fd_out = steal_fd(&fd);
			return 0;
		}
		if (status >= 100 && status < 200) {
			/* An interim answer (100 Continue): the real one follows. */
			memmove(buf, end, rest);
			have = rest;
			continue;
		}
		end[-2] = '\0'; /* the head, keeping the last header's \r\n */
		return upgrade_error(fd, buf, end, rest, status, err);
	}
}
