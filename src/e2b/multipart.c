/* SPDX-License-Identifier: Apache-2.0 */
/* multipart.c - streaming multipart/form-data reader (multipart.h).
 *
 * The body is read as if it began with CRLF, so the first "--boundary" is a delimiter
 * like the others. Between delimiters the buffer holds at most the bytes that may still
 * be the start of a delimiter; everything before them is the part's data. */
#include "e2b/multipart.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* A parameter's value (token or quoted-string) of a header value like
 * `form-data; name="file"; filename="a.txt"`, into out; false when absent or bad. */
static bool mp_param(const char *v, const char *key, char *out, size_t n)
{
	size_t kl = strlen(key);
	const char *p = v;

	while ((p = strchr(p, ';'))) {
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		if (strncasecmp(p, key, kl) || p[kl] != '=')
			continue;
		p += kl + 1;
		size_t o = 0;
		if (*p == '"') {
			for (p++; *p && *p != '"'; p++) {
				if (*p == '\\' && p[1])
					p++;
				if (o + 1 >= n)
					return false;
				out[o++] = *p;
			}
			if (*p != '"')
				return false;
		} else {
			for (; *p && *p != ';' && *p != ' ' && *p != '\t'; p++) {
				if (o + 1 >= n)
					return false;
				out[o++] = *p;
			}
		}
		out[o] = '\0';
		return true;
	}
	return false;
}

int e2b_mp_init(struct e2b_mp *m, const char *content_type, struct k8_err *err)
{
	char b[MP_BOUNDARY_MAX + 2];

	memset(m, 0, sizeof(*m));
	if (!content_type || strncasecmp(content_type, "multipart/form-data", 19))
		return k8_err_set(err, -EINVAL, "the body is not multipart/form-data");
	if (!mp_param(content_type + 19, "boundary", b, sizeof(b)) || !b[0] ||
	    strlen(b) > MP_BOUNDARY_MAX)
		return k8_err_set(err, -EINVAL, "multipart/form-data without a valid boundary "
				  "(1 to %d characters)", MP_BOUNDARY_MAX);
	for (const char *c = b; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			return k8_err_set(err, -EINVAL, "the multipart boundary has a control or "
					  "non-ASCII character");
	m->dlen = (size_t)snprintf(m->delim, sizeof(m->delim), "\r\n--%s", b);
	m->buf[0] = '\r';
	m->buf[1] = '\n';
	m->have = 2;
	m->state = MP_PREAMBLE;
	return 0;
}

static int mp_fail(struct e2b_mp *m, struct k8_err *err, const char *why)
{
	m->state = MP_FAILED;
	return k8_err_set(err, -EBADMSG, "malformed multipart body: %s", why);
}

/* The part's head (without its closing blank line): Content-Disposition's name and
 * filename. */
static int mp_head(struct e2b_mp *m, const char *head, const struct e2b_mp_ops *ops, void *ctx,
		   struct k8_err *err)
{
	char field[256] = "", file[MP_FILENAME_MAX + 1] = "";
	bool disp = false;
	const char *line = head;

	while (*line) {
		const char *eol = strstr(line, "\r\n");
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		if (len > 20 && !strncasecmp(line, "Content-Disposition:", 20)) {
			char v[MP_HEAD_MAX];
			snprintf(v, sizeof(v), "%.*s", (int)len - 20, line + 20);
			const char *t = v;
			while (*t == ' ' || *t == '\t')
				t++;
			if (strncasecmp(t, "form-data", 9))
				return mp_fail(m, err, "a part is not form-data");
			if (disp)
				return mp_fail(m, err, "two Content-Disposition headers in a part");
			disp = true;
			if (!mp_param(t, "name", field, sizeof(field)))
				return mp_fail(m, err, "a part has no form field name");
			if (strstr(t, "filename=") && !mp_param(t, "filename", file, sizeof(file)))
				return mp_fail(m, err, "a part's file name is malformed or too long");
		}
		line += len;
		if (*line)
			line += 2;
	}
	if (!disp)
		return mp_fail(m, err, "a part has no Content-Disposition header");
	m->parts++;
	return ops->begin(ctx, field, file);
}

/* Find the delimiter in buf[from..have): its offset, or -1. */
static ssize_t mp_find(const struct e2b_mp *m, size_t from)
{
	if (m->have < m->dlen)
		return -1;
	for (size_t i = from; i + m->dlen <= m->have; i++)
		if (m->buf[i] == '\r' && !memcmp(m->buf + i, m->delim, m->dlen))
			return (ssize_t)i;
	return -1;
}

static void mp_drop(struct e2b_mp *m, size_t n)
{
	memmove(m->buf, m->buf + n, m->have - n);
	m->have -= n;
}

/* Work on what the buffer holds; 0 when it needs more bytes. */
static int mp_step(struct e2b_mp *m, const struct e2b_mp_ops *ops, void *ctx,
		   struct k8_err *err)
{
	for (;;) {
		ssize_t at;
		int r;

		switch (m->state) {
		case MP_PREAMBLE:
			at = mp_find(m, 0);
			if (at < 0) {
				/* keep only what may still begin a delimiter */
				if (m->have >= m->dlen)
					mp_drop(m, m->have - (m->dlen - 1));
				return 0;
			}
			mp_drop(m, (size_t)at + m->dlen);
			m->state = MP_AFTER;
			break;
		case MP_AFTER: {
			size_t i = 0;
			if (m->have >= 2 && m->buf[0] == '-' && m->buf[1] == '-') {
				m->have = 0;
				m->state = MP_DONE;
				return 0;
			}
			while (i < m->have && (m->buf[i] == ' ' || m->buf[i] == '\t'))
				i++;
			if (i > 64)
				return mp_fail(m, err, "padding after a delimiter");
			if (i + 2 > m->have)
				return 0;
			if (m->buf[i] != '\r' || m->buf[i + 1] != '\n')
				return mp_fail(m, err, "no line end after a delimiter");
			mp_drop(m, i + 2);
			m->state = MP_HEAD;
			break;
		}
		case MP_HEAD: {
			uint8_t *end = NULL;
			if (m->have >= 2 && m->buf[0] == '\r' && m->buf[1] == '\n') {
				end = m->buf;   /* an empty head */
			} else {
				for (size_t i = 0; i + 4 <= m->have; i++)
					if (!memcmp(m->buf + i, "\r\n\r\n", 4)) {
						end = m->buf + i + 2;
						break;
					}
			}
			if (!end) {
				if (m->have >= MP_HEAD_MAX)
					return mp_fail(m, err, "a part's head is too long");
				return 0;
			}
			size_t hl = (size_t)(end - m->buf);
			char head[MP_HEAD_MAX + 1];
			if (hl > MP_HEAD_MAX)
				return mp_fail(m, err, "a part's head is too long");
			memcpy(head, m->buf, hl);
			head[hl] = '\0';
			if (memchr(head, 0, hl))
				return mp_fail(m, err, "a NUL byte in a part's head");
			mp_drop(m, hl + 2);
			m->state = MP_BODY;
			if ((r = mp_head(m, head, ops, ctx, err)) < 0) {
				m->state = MP_FAILED;
				return r;
			}
			break;
		}
		case MP_BODY:
			at = mp_find(m, 0);
			if (at < 0) {
				size_t keep = m->dlen - 1, give = m->have > keep ? m->have - keep : 0;
				if (give) {
					if ((r = ops->data(ctx, m->buf, give)) < 0) {
						m->state = MP_FAILED;
						return r;
					}
					mp_drop(m, give);
				}
				return 0;
			}
			if (at && (r = ops->data(ctx, m->buf, (size_t)at)) < 0) {
				m->state = MP_FAILED;
				return r;
			}
			mp_drop(m, (size_t)at + m->dlen);
			m->state = MP_AFTER;
			if ((r = ops->end(ctx)) < 0) {
				m->state = MP_FAILED;
				return r;
			}
			break;
		case MP_DONE:
			m->have = 0;
			return 0;
		case MP_FAILED:
			return k8_err_set(err, -EBADMSG, "malformed multipart body");
		}
	}
}

int e2b_mp_feed(struct e2b_mp *m, const uint8_t *p, size_t n, const struct e2b_mp_ops *ops,
		void *ctx, struct k8_err *err)
{
	if (m->state == MP_FAILED)
		return k8_err_set(err, -EBADMSG, "malformed multipart body");
	while (n) {
		size_t room = sizeof(m->buf) - m->have, take = n < room ? n : room;
		int r;

		if (m->state == MP_DONE)
			return 0;       /* the epilogue is ignored */
		memcpy(m->buf + m->have, p, take);
		m->have += take;
		p += take;
		n -= take;
		if ((r = mp_step(m, ops, ctx, err)) < 0)
			return r;
		if (m->have == sizeof(m->buf))
			return mp_fail(m, err, "no progress");  /* cannot happen: see mp_step */
	}
	return 0;
}

int e2b_mp_finish(struct e2b_mp *m, struct k8_err *err)
{
	if (m->state == MP_DONE)
		return 0;
	if (m->state == MP_FAILED)
		return k8_err_set(err, -EBADMSG, "malformed multipart body");
	m->state = MP_FAILED;
	return k8_err_set(err, -EBADMSG, "the multipart body ends before its closing delimiter");
}
