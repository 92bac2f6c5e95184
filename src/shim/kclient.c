/* SPDX-License-Identifier: Apache-2.0 */
/* kclient.c - requests to kosa8d over its unix socket (see kclient.h). */
#include "shim/kclient.h"
#include "broker/http.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

int kc_init(struct kc *k, const char *home, struct k8_err *err)
{
	memset(k, 0, sizeof(*k));
	if (snprintf(k->sock, sizeof(k->sock), "%s/kosa8d.sock", home) >= (int)sizeof(k->sock))
		return k8_err_set(err, -ENAMETOOLONG, "kosa8 home %s: its socket path is longer than "
				  "a unix socket allows", home);
	return 0;
}

int kc_escape(const char *s, char *out, size_t outlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || strchr("-._~", c);
		if (o + (plain ? 1 : 3) >= outlen)
			return -ENAMETOOLONG;
		if (plain) {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	if (o >= outlen)
		return -ENAMETOOLONG;
	out[o] = 0;
	return 0;
}

int kc_error(const json_t *body, int status, struct k8_err *err)
{
	const json_t *e = json_object_get(body, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	int r;

	if (code && !strcmp(code, "bad_request"))
		r = -EINVAL;
	else if (code && !strcmp(code, "not_found"))
		r = -ENOENT;
	else if (code && !strcmp(code, "conflict"))
		r = -EBUSY;
	else if (code && !strcmp(code, "unavailable"))
		r = -EAGAIN;
	else if (code)
		r = -EIO;
	else
		r = status == 400 ? -EINVAL : status == 404 ? -ENOENT : status == 409 ? -EBUSY :
		    status == 503 ? -EAGAIN : -EIO;
	/* The message may carry bytes a sandbox chose: escaped before it reaches a log. */
	cleanup_free char *safe = str_escape(msg ? msg : "");
	if (msg)
		return k8_err_set(err, r, "kosa8d: %s", safe);
	return k8_err_set(err, r, "kosa8d answered HTTP %d without saying why", status);
}

/* The last non-empty line of an NDJSON body: the final {"result"} or {"error"}. */
static int kc_ndjson_last(char *body, size_t len, int *status, json_t **json,
			  struct k8_err *err)
{
	size_t end = len, start;
	json_error_t je;
	json_t *line, *v;

	while (end && (body[end - 1] == '\n' || body[end - 1] == '\r'))
		end--;
	start = end;
	while (start && body[start - 1] != '\n')
		start--;
	if (start == end)
		return k8_err_set(err, -EPROTO, "kosa8d's progress stream ended without a result");
	line = json_loadb(body + start, end - start, 0, &je);
	if (!json_is_object(line)) {
		json_decref(line);
		return k8_err_set(err, -EPROTO, "kosa8d's progress stream ended with a line that "
				  "is not a JSON object");
	}
	if ((v = json_object_get(line, "result"))) {
		*json = json_incref(v);
		*status = 200;
	} else if ((v = json_object_get(line, "error"))) {
		*json = json_pack("{s:O}", "error", v);
		const char *c = json_string_value(json_object_get(v, "code"));
		*status = !c ? 500 : !strcmp(c, "bad_request") ? 400 : !strcmp(c, "not_found") ? 404 :
			  !strcmp(c, "conflict") ? 409 : !strcmp(c, "unavailable") ? 503 : 500;
	} else {
		json_decref(line);
		return k8_err_set(err, -EPROTO, "kosa8d's progress stream ended without a result");
	}
	json_decref(line);
	return 0;
}

int kc_answer_parse(const char *buf, size_t len, int *status, json_t **json, struct k8_err *err)
{
	struct http_msg m;
	const char *why = "";
	cleanup_free char *body = NULL;
	size_t blen = 0;
	int hl, ct;

	*json = NULL;
	*status = 0;
	hl = http_parse_response(buf, len, "POST", 4, &m, &why);
	if (hl <= 0)
		return k8_err_set(err, -EPROTO, "kosa8d's answer is malformed: %s",
				  hl == 0 ? "it ended inside its head" : why);
	*status = m.status;
	if (m.status < 200)
		return k8_err_set(err, -EPROTO, "kosa8d answered HTTP %d where a final answer was "
				  "due", m.status);
	switch (m.body) {
	case HTTP_BODY_NONE:
		break;
	case HTTP_BODY_LENGTH:
		if (m.clen > len - (size_t)hl)
			return k8_err_set(err, -EPROTO, "kosa8d's answer is shorter than its "
					  "Content-Length");
		blen = (size_t)m.clen;
		body = xmalloc(blen + 1);
		memcpy(body, buf + hl, blen);
		break;
	case HTTP_BODY_CLOSE:
		blen = len - (size_t)hl;
		body = xmalloc(blen + 1);
		memcpy(body, buf + hl, blen);
		break;
	case HTTP_BODY_CHUNKED: {
		struct http_chunked c;
		size_t dlen = 0;
		ssize_t used;

		blen = len - (size_t)hl;
		body = xmalloc(blen + 1);
		memcpy(body, buf + hl, blen);
		http_chunked_init(&c, true);
		used = http_chunked_decode(&c, body, blen, &dlen, &why);
		if (used < 0)
			return k8_err_set(err, -EPROTO, "kosa8d's chunked answer is malformed: %s", why);
		if (!c.done)
			return k8_err_set(err, -EPROTO, "kosa8d's chunked answer ended early");
		blen = dlen;
		break;
	}
	}
	if (!blen)
		return 0;
	body[blen] = 0;
	ct = http_find(&m, "content-type");
	if (ct >= 0 && m.h[ct].vlen >= 20 &&
	    !strncasecmp(m.h[ct].value, "application/x-ndjson", 20))
		return kc_ndjson_last(body, blen, status, json, err);
	json_error_t je;
	*json = json_loadb(body, blen, 0, &je);
	if (!*json)
		return k8_err_set(err, -EPROTO, "kosa8d's answer is not JSON: %s", je.text);
	return 0;
}

/* ---- I/O ---- */

static int kc_connect(const struct kc *k, struct k8_err *err)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", k->sock);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;
		close(fd);
		if (e == ENOENT || e == ECONNREFUSED)
			return k8_err_set(err, -ECONNREFUSED, "kosa8d is not running (nothing answers "
					  "at %s); start it with: kosa8 daemon start", k->sock);
		return k8_err_set(err, -e, "connecting to kosa8d at %s: %s", k->sock, strerror(e));
	}
	return fd;
}

static int kc_wait(const struct kc *k, int fd, short ev, struct k8_err *err)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r;

	if (!k->timeout_ms)
		return 0;
	do
		r = poll(&p, 1, k->timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return k8_err_set(err, -ETIMEDOUT, "kosa8d did not answer within %d s",
				  k->timeout_ms / 1000);
	return 0;
}

static int kc_send(const struct kc *k, int fd, const char *method, const char *path,
		   json_t *body, bool upgrade, struct k8_err *err)
{
	cleanup_free char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	cleanup_free char *head = NULL;
	size_t blen = text ? strlen(text) : 0;
	int r;

	head = xasprintf("%s %s HTTP/1.1\r\nHost: kosa8\r\nUser-Agent: containerd-shim-kosa8-v2\r\n"
			 "%s%s"
			 "Content-Length: %zu\r\n\r\n", method, path,
			 body ? "Content-Type: application/json\r\n" : "",
			 upgrade ? "Connection: Upgrade\r\nUpgrade: kosa8-stream\r\n"
				 : "Connection: close\r\n", blen);
	if ((r = kc_wait(k, fd, POLLOUT, err)))
		return r;
	if ((r = write_full(fd, head, strlen(head))) || (blen && (r = write_full(fd, text, blen))))
		return k8_err_set(err, r, "sending to kosa8d: %s", strerror(-r));
	return 0;
}

/* Read until the connection ends (or, with head_only, until the head is complete);
 * at most KC_MAX_ANSWER bytes. */
static int kc_read(const struct kc *k, int fd, bool head_only, char **out, size_t *len,
		   struct k8_err *err)
{
	size_t cap = 16384, n = 0;
	char *b = xmalloc(cap + 1);
	int r;

	for (;;) {
		if (head_only && n >= 4 && memmem(b, n, "\r\n\r\n", 4))
			break;
		if (head_only && n >= KC_MAX_HEAD) {
			free(b);
			return k8_err_set(err, -EPROTO, "kosa8d's answer head is over 64 KiB");
		}
		if (n == cap) {
			if (cap >= KC_MAX_ANSWER) {
				free(b);
				return k8_err_set(err, -EFBIG, "kosa8d's answer is over %u MiB",
						  KC_MAX_ANSWER >> 20);
			}
			cap *= 2;
			b = realloc(b, cap + 1);
			if (!b)
				return k8_err_set(err, -ENOMEM, "out of memory reading kosa8d's answer");
		}
		if ((r = kc_wait(k, fd, POLLIN, err))) {
			free(b);
			return r;
		}
		/* With head_only, frame bytes that came in the same read as the end of the
		 * head are kept: kc_upgrade hands them back as extra. */
		ssize_t got = read(fd, b + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int e = errno;
			free(b);
			return k8_err_set(err, -e, "reading kosa8d's answer: %s", strerror(e));
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	b[n] = 0;
	*out = b;
	*len = n;
	return 0;
}

int kc_call(const struct kc *k, const char *method, const char *path, json_t *body,
	    json_t **out, struct k8_err *err)
{
	cleanup_close int fd = -1;
	cleanup_free char *ans = NULL;
	json_t *j = NULL;
	size_t n;
	int status, r;

	if (out)
		*out = NULL;
	if ((fd = kc_connect(k, err)) < 0)
		return fd;
	if ((r = kc_send(k, fd, method, path, body, false, err)) ||
	    (r = kc_read(k, fd, false, &ans, &n, err)))
		return r;
	if ((r = kc_answer_parse(ans, n, &status, &j, err)))
		return r;
	if (status < 200 || status > 299) {
		r = kc_error(j, status, err);
		json_decref(j);
		return r;
	}
	if (out)
		*out = j ? j : json_object();
	else
		json_decref(j);
	return 0;
}

int kc_upgrade(const struct kc *k, const char *path, json_t *body, int *fdp,
	       unsigned char **extra, size_t *nextra, int *exit_hint, struct k8_err *err)
{
	cleanup_close int fd = -1;
	cleanup_free char *ans = NULL;
	struct http_msg m;
	const char *why = "";
	size_t n;
	int hl, r;

	*fdp = -1;
	*extra = NULL;
	*nextra = 0;
	*exit_hint = 0;
	if ((fd = kc_connect(k, err)) < 0)
		return fd;
	if ((r = kc_send(k, fd, "POST", path, body, true, err)) ||
	    (r = kc_read(k, fd, true, &ans, &n, err)))
		return r;
	hl = http_parse_response(ans, n, "POST", 4, &m, &why);
	if (hl <= 0)
		return k8_err_set(err, -EPROTO, "kosa8d's answer is malformed: %s",
				  hl == 0 ? "it ended inside its head" : why);
	if (m.status == 101) {
		if ((size_t)hl < n) {
			*nextra = n - (size_t)hl;
			*extra = xmalloc(*nextra);
			memcpy(*extra, ans + hl, *nextra);
		}
		*fdp = steal_fd(&fd);
		return 0;
	}
	/* A refusal: the rest of its body, then its error. */
	{
		cleanup_free char *rest = NULL, *all = NULL;
		size_t rn = 0;
		json_t *j = NULL;
		int status;

		if ((r = kc_read(k, fd, false, &rest, &rn, err)))
			return r;
		if (n > KC_MAX_ANSWER || rn > KC_MAX_ANSWER - n)
			return k8_err_set(err, -EFBIG, "kosa8d's answer is too large");
		all = xmalloc(n + rn + 1);
		memcpy(all, ans, n);
		memcpy(all + n, rest, rn);
		if ((r = kc_answer_parse(all, n + rn, &status, &j, err)))
			return r;
		json_int_t hint = json_integer_value(json_object_get(json_object_get(j, "error"),
								     "exit_code"));
		*exit_hint = (hint >= 1 && hint <= 255) ? (int)hint : 0;
		r = kc_error(j, status, err);
		json_decref(j);
		return r < 0 ? r : -EIO;
	}
}
