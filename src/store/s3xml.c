/* SPDX-License-Identifier: Apache-2.0 */
/* s3xml.c - S3's XML answers read as hostile input (s3xml.h).
 *
 * Theory of operation. One walker (xw_run) reads the document once, front to back, with
 * no allocation: it keeps the names of the open elements (at most S3XML_MAX_DEPTH, each
 * at most 63 bytes, a namespace prefix dropped) and the text of the innermost one (at
 * most XW_TEXT_MAX bytes after entities are decoded), and calls its reader back when an
 * element opens and when it closes. Each answer is one reader over that walker: it looks
 * at the path of names (ListBucketResult/Contents/Key) and fills its fixed struct, with
 * every count and length checked as it goes. What the subset refuses: a DOCTYPE (so no
 * entity of the document's own, no external anything), CDATA, processing instructions
 * other than the declaration, control characters, a second root, text outside the root,
 * unbalanced or mismatched tags. */
#include "store/s3xml.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define XW_NAME_MAX 63
#define XW_TEXT_MAX 4096

struct xw {
	const char *p, *end;
	int depth;
	char path[S3XML_MAX_DEPTH][XW_NAME_MAX + 1];
	char text[XW_TEXT_MAX + 1];
	size_t tlen;
	bool root_seen;
	/* the reader: called with the element just opened (path[depth-1]) and as it closes,
	 * with its text; 0 to go on, or a negative errno with err set */
	int (*open)(struct xw *w, void *ctx);
	int (*close)(struct xw *w, void *ctx, const char *text, size_t n);
	void *ctx;
	struct k8_err *err;
};

static int xw_bad(struct xw *w, const char *what)
{
	return k8_err_set(w->err, -EBADMSG, "the server's XML answer is malformed: %s", what);
}

static bool xw_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void xw_skip_space(struct xw *w)
{
	while (w->p < w->end && xw_is_space(*w->p))
		w->p++;
}

static bool xw_starts(const struct xw *w, const char *s)
{
	size_t n = strlen(s);
	return (size_t)(w->end - w->p) >= n && !memcmp(w->p, s, n);
}

/* Past the next `s`, or false when there is none. */
static bool xw_skip_past(struct xw *w, const char *s)
{
	size_t n = strlen(s);
	for (const char *q = w->p; (size_t)(w->end - q) >= n; q++)
		if (!memcmp(q, s, n)) {
			w->p = q + n;
			return true;
		}
	return false;
}

static bool xw_name_char(unsigned char c, bool first)
{
	if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':')
		return true;
	return !first && ((c >= '0' && c <= '9') || c == '-' || c == '.');
}

/* A name into out (its local part: what follows the last ':'). */
static int xw_name(struct xw *w, char out[XW_NAME_MAX + 1])
{
	const char *s = w->p, *local;
	size_t n;

	while (w->p < w->end && xw_name_char((unsigned char)*w->p, w->p == s))
		w->p++;
	if (w->p == s)
		return xw_bad(w, "a tag without a name");
	local = s;
	for (const char *q = s; q < w->p; q++)
		if (*q == ':')
			local = q + 1;
	n = (size_t)(w->p - local);
	if (n == 0 || n > XW_NAME_MAX)
		return xw_bad(w, "a tag name that is empty or too long");
	memcpy(out, local, n);
	out[n] = '\0';
	return 0;
}

static int xw_text_add(struct xw *w, const char *s, size_t n)
{
	if (w->tlen + n > XW_TEXT_MAX)
		return k8_err_set(w->err, -E2BIG, "the server's XML answer has a value over %d bytes",
				  XW_TEXT_MAX);
	memcpy(w->text + w->tlen, s, n);
	w->tlen += n;
	w->text[w->tlen] = '\0';
	return 0;
}

/* One code point as UTF-8. */
static int xw_text_cp(struct xw *w, unsigned long cp)
{
	char b[4];
	size_t n;

	if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff ||
	    (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r'))
		return xw_bad(w, "a character reference to a character XML does not allow");
	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | (cp >> 6));
		b[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | (cp >> 12));
		b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		b[0] = (char)(0xf0 | (cp >> 18));
		b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	return xw_text_add(w, b, n);
}

/* At '&': one entity or character reference. */
static int xw_entity(struct xw *w)
{
	static const struct { const char *name; char c; } known[] = {
		{ "&lt;", '<' }, { "&gt;", '>' }, { "&amp;", '&' }, { "&quot;", '"' }, { "&apos;", '\'' },
	};
	unsigned long cp = 0;
	int digits = 0;
	bool hex;

	for (size_t i = 0; i < ARRAY_SIZE(known); i++)
		if (xw_starts(w, known[i].name)) {
			w->p += strlen(known[i].name);
			return xw_text_add(w, &known[i].c, 1);
		}
	if (!xw_starts(w, "&#"))
		return xw_bad(w, "an entity other than the five XML defines");
	w->p += 2;
	hex = w->p < w->end && *w->p == 'x';
	if (hex)
		w->p++;
	for (; w->p < w->end && *w->p != ';'; w->p++, digits++) {
		char c = *w->p;
		int v = c >= '0' && c <= '9' ? c - '0' :
			hex && c >= 'a' && c <= 'f' ? c - 'a' + 10 :
			hex && c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (v < 0 || digits >= 8)
			return xw_bad(w, "a malformed character reference");
		cp = cp * (hex ? 16 : 10) + (unsigned long)v;
	}
	if (w->p >= w->end || digits == 0)
		return xw_bad(w, "an unterminated character reference");
	w->p++;
	return xw_text_cp(w, cp);
}

/* Text up to the next '<'. Outside the root only white space may stand. */
static int xw_text(struct xw *w)
{
	int r;

	while (w->p < w->end && *w->p != '<') {
		unsigned char c = (unsigned char)*w->p;
		if (c < 0x20 && !xw_is_space((char)c))
			return xw_bad(w, "a control character");
		if (w->depth == 0) {
			if (!xw_is_space((char)c))
				return xw_bad(w, "text outside the root element");
			w->p++;
			continue;
		}
		if (c == '&') {
			if ((r = xw_entity(w)))
				return r;
			continue;
		}
		const char *s = w->p;
		while (w->p < w->end && *w->p != '<' && *w->p != '&' &&
		       ((unsigned char)*w->p >= 0x20 || xw_is_space(*w->p)))
			w->p++;
		if ((r = xw_text_add(w, s, (size_t)(w->p - s))))
			return r;
	}
	return 0;
}

/* Attributes are read past, never used: name="..." or name='...', no '<' inside. */
static int xw_attrs(struct xw *w)
{
	char name[XW_NAME_MAX + 1];
	int r;

	for (;;) {
		xw_skip_space(w);
		if (w->p >= w->end)
			return xw_bad(w, "an unterminated tag");
		if (*w->p == '>' || *w->p == '/')
			return 0;
		if ((r = xw_name(w, name)))
			return r;
		xw_skip_space(w);
		if (w->p >= w->end || *w->p != '=')
			return xw_bad(w, "an attribute without a value");
		w->p++;
		xw_skip_space(w);
		if (w->p >= w->end || (*w->p != '"' && *w->p != '\''))
			return xw_bad(w, "an attribute value without quotes");
		char q = *w->p++;
		while (w->p < w->end && *w->p != q && *w->p != '<')
			w->p++;
		if (w->p >= w->end || *w->p != q)
			return xw_bad(w, "an unterminated attribute value");
		w->p++;
	}
}

static int xw_open(struct xw *w)
{
	char name[XW_NAME_MAX + 1];
	bool empty = false;
	int r;

	if ((r = xw_name(w, name)) || (r = xw_attrs(w)))
		return r;
	if (*w->p == '/') {
		w->p++;
		if (w->p >= w->end || *w->p != '>')
			return xw_bad(w, "'/' inside a tag");
		empty = true;
	}
	w->p++;                                  /* '>' */
	if (w->depth == 0 && w->root_seen)
		return xw_bad(w, "a second root element");
	if (w->depth >= S3XML_MAX_DEPTH)
		return k8_err_set(w->err, -E2BIG, "the server's XML answer nests deeper than %d",
				  S3XML_MAX_DEPTH);
	memcpy(w->path[w->depth++], name, sizeof(name));
	w->root_seen = true;
	w->tlen = 0;
	w->text[0] = '\0';
	if (w->open && (r = w->open(w, w->ctx)))
		return r;
	if (empty) {
		r = w->close ? w->close(w, w->ctx, "", 0) : 0;
		w->depth--;
		w->tlen = 0;
		return r;
	}
	return 0;
}

static int xw_close(struct xw *w)
{
	char name[XW_NAME_MAX + 1];
	int r;

	if ((r = xw_name(w, name)))
		return r;
	xw_skip_space(w);
	if (w->p >= w->end || *w->p != '>')
		return xw_bad(w, "an unterminated end tag");
	w->p++;
	if (w->depth == 0 || strcmp(name, w->path[w->depth - 1]))
		return xw_bad(w, "an end tag that matches no open element");
	r = w->close ? w->close(w, w->ctx, w->text, w->tlen) : 0;
	w->depth--;
	w->tlen = 0;
	w->text[0] = '\0';
	return r;
}

static int xw_run(struct xw *w, const char *p, size_t n)
{
	int r;

	if (n > S3XML_MAX_BYTES)
		return k8_err_set(w->err, -E2BIG, "the server's XML answer is over %u bytes",
				  S3XML_MAX_BYTES);
	w->p = p;
	w->end = p + n;
	if (xw_starts(w, "\xef\xbb\xbf"))
		w->p += 3;
	xw_skip_space(w);
	if (xw_starts(w, "<?xml") && !xw_skip_past(w, "?>"))
		return xw_bad(w, "an unterminated declaration");
	while (w->p < w->end) {
		if (*w->p != '<') {
			if ((r = xw_text(w)))
				return r;
			continue;
		}
		if (xw_starts(w, "<!--")) {
			w->p += 4;
			if (!xw_skip_past(w, "-->"))
				return xw_bad(w, "an unterminated comment");
		} else if (xw_starts(w, "<!") || xw_starts(w, "<?")) {
			return xw_bad(w, "a DOCTYPE, CDATA or processing instruction");
		} else if (xw_starts(w, "</")) {
			w->p += 2;
			if ((r = xw_close(w)))
				return r;
		} else {
			w->p++;
			if ((r = xw_open(w)))
				return r;
		}
	}
	if (w->depth || !w->root_seen)
		return xw_bad(w, w->root_seen ? "an element left open" : "no element");
	return 0;
}

/* ---- helpers for the readers ---- */

static bool xw_at(const struct xw *w, int depth, const char *a, const char *b, const char *c)
{
	if (w->depth != depth)
		return false;
	const char *want[3] = { a, b, c };
	for (int i = 0; i < depth && i < 3; i++)
		if (want[i] && strcmp(w->path[i], want[i]))
			return false;
	return true;
}

/* The root must be `want`: checked when it opens. */
static int xw_root(struct xw *w, const char *want)
{
	if (w->depth == 1 && strcmp(w->path[0], want))
		return k8_err_set(w->err, -EBADMSG, "the server answered <%.63s> where <%s> was "
				  "expected", w->path[0], want);
	return 0;
}

static int xw_copy(struct xw *w, char *out, size_t cap, const char *text, size_t n,
		   const char *what)
{
	if (n >= cap)
		return k8_err_set(w->err, -E2BIG, "the server's %s is over %zu bytes", what, cap - 1);
	if (memchr(text, '\0', n))
		return xw_bad(w, "a NUL in a value");
	memcpy(out, text, n);
	out[n] = '\0';
	return 0;
}

static int xw_u64(struct xw *w, const char *text, size_t n, uint64_t max, uint64_t *out,
		  const char *what)
{
	uint64_t v = 0;

	while (n && xw_is_space(*text))
		text++, n--;
	while (n && xw_is_space(text[n - 1]))
		n--;
	if (n == 0 || n > 19)
		return k8_err_set(w->err, -EBADMSG, "the server's %s is not a number", what);
	for (size_t i = 0; i < n; i++) {
		if (text[i] < '0' || text[i] > '9')
			return k8_err_set(w->err, -EBADMSG, "the server's %s is not a number", what);
		v = v * 10 + (uint64_t)(text[i] - '0');
	}
	if (v > max)
		return k8_err_set(w->err, -E2BIG, "the server's %s is out of range", what);
	*out = v;
	return 0;
}

/* "2026-12-06T07:48:06.000Z" (fractions and the Z optional) as seconds since 1970. */
static int xw_time(struct xw *w, const char *t, size_t n, int64_t *out)
{
	static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int v[6] = { 0 }, widths[6] = { 4, 2, 2, 2, 2, 2 };
	const char seps[6] = { '-', '-', 'T', ':', ':', 0 };
	size_t i = 0;
	int64_t days = 0;

	for (int f = 0; f < 6; f++) {
		for (int k = 0; k < widths[f]; k++, i++) {
			if (i >= n || t[i] < '0' || t[i] > '9')
				return xw_bad(w, "a LastModified that is not a time");
			v[f] = v[f] * 10 + (t[i] - '0');
		}
		if (seps[f]) {
			if (i >= n || t[i] != seps[f])
				return xw_bad(w, "a LastModified that is not a time");
			i++;
		}
	}
	if (v[0] < 1970 || v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > 31 || v[3] > 23 ||
	    v[4] > 59 || v[5] > 60)
		return xw_bad(w, "a LastModified out of range");
	for (int y = 1970; y < v[0]; y++)
		days += 365 + ((y % 4 == 0 && y % 100) || y % 400 == 0);
	for (int m = 0; m < v[1] - 1; m++)
		days += mdays[m] + (m == 1 && ((v[0] % 4 == 0 && v[0] % 100) || v[0] % 400 == 0));
	days += v[2] - 1;
	*out = ((days * 24 + v[3]) * 60 + v[4]) * 60 + v[5];
	return 0;
}

static int xw_bool(struct xw *w, const char *text, size_t n, bool *out)
{
	if (n == 4 && !memcmp(text, "true", 4))
		*out = true;
	else if (n == 5 && !memcmp(text, "false", 5))
		*out = false;
	else
		return xw_bad(w, "a truth value other than true or false");
	return 0;
}

/* ---- the answers ---- */

static int rd_error_open(struct xw *w, void *ctx)
{
	return xw_root(w, "Error");
}

static int rd_error_fill(struct xw *w, struct s3xml_error *e, const char *t, size_t n, int base)
{
	/* messages are for people: cut rather than refused */
	if (w->depth == base + 1 && !strcmp(w->path[base], "Code"))
		return xw_copy(w, e->code, sizeof(e->code), t, n, "error code");
	if (w->depth == base + 1 && !strcmp(w->path[base], "Message")) {
		size_t k = n < sizeof(e->message) - 1 ? n : sizeof(e->message) - 1;
		return xw_copy(w, e->message, sizeof(e->message), t, k, "error message");
	}
	return 0;
}

static int rd_error_close(struct xw *w, void *ctx, const char *t, size_t n)
{
	return rd_error_fill(w, ctx, t, n, 1);
}

int s3xml_error(const char *p, size_t n, struct s3xml_error *out, struct k8_err *err)
{
	struct xw w = { .open = rd_error_open, .close = rd_error_close, .ctx = out, .err = err };

	memset(out, 0, sizeof(*out));
	return xw_run(&w, p, n);
}

static int rd_list_open(struct xw *w, void *ctx)
{
	struct s3xml_list *l = ctx;
	int r = xw_root(w, "ListBucketResult");

	if (r || !xw_at(w, 2, "ListBucketResult", "Contents", NULL))
		return r;
	if (l->n >= S3XML_LIST_MAX)
		return k8_err_set(w->err, -E2BIG, "the server listed more than %d keys in one page",
				  S3XML_LIST_MAX);
	l->n++;
	return 0;
}

static int rd_list_close(struct xw *w, void *ctx, const char *t, size_t n)
{
	struct s3xml_list *l = ctx;
	struct s3xml_obj *o = l->n ? &l->o[l->n - 1] : NULL;

	if (xw_at(w, 2, "ListBucketResult", "IsTruncated", NULL))
		return xw_bool(w, t, n, &l->truncated);
	if (xw_at(w, 2, "ListBucketResult", "NextContinuationToken", NULL))
		return xw_copy(w, l->next, sizeof(l->next), t, n, "continuation token");
	if (!o || !xw_at(w, 3, "ListBucketResult", "Contents", NULL))
		return 0;
	if (!strcmp(w->path[2], "Key")) {
		if (n == 0)
			return xw_bad(w, "an empty key");
		return xw_copy(w, o->key, sizeof(o->key), t, n, "key");
	}
	if (!strcmp(w->path[2], "Size"))
		return xw_u64(w, t, n, INT64_MAX, &o->size, "object size");
	if (!strcmp(w->path[2], "ETag"))
		return xw_copy(w, o->etag, sizeof(o->etag), t, n, "ETag");
	if (!strcmp(w->path[2], "LastModified"))
		return xw_time(w, t, n, &o->mtime);
	return 0;
}

int s3xml_list(const char *p, size_t n, struct s3xml_list *out, struct k8_err *err)
{
	struct xw w = { .open = rd_list_open, .close = rd_list_close, .ctx = out, .err = err };
	int r;

	memset(out, 0, sizeof(*out));
	if ((r = xw_run(&w, p, n)))
		return r;
	for (uint32_t i = 0; i < out->n; i++)
		if (!out->o[i].key[0])
			return k8_err_set(err, -EBADMSG, "the server listed an object without a key");
	if (out->truncated && !out->next[0])
		return k8_err_set(err, -EBADMSG, "the server's list is cut short and gives no "
				  "continuation token");
	return 0;
}

static int rd_upload_open(struct xw *w, void *ctx)
{
	return xw_root(w, "InitiateMultipartUploadResult");
}

static int rd_upload_close(struct xw *w, void *ctx, const char *t, size_t n)
{
	struct s3xml_upload *u = ctx;

	if (xw_at(w, 2, "InitiateMultipartUploadResult", "UploadId", NULL))
		return xw_copy(w, u->id, sizeof(u->id), t, n, "upload id");
	return 0;
}

int s3xml_upload_id(const char *p, size_t n, struct s3xml_upload *out, struct k8_err *err)
{
	struct xw w = { .open = rd_upload_open, .close = rd_upload_close, .ctx = out, .err = err };
	int r;

	memset(out, 0, sizeof(*out));
	if ((r = xw_run(&w, p, n)))
		return r;
	if (!out->id[0])
		return k8_err_set(err, -EBADMSG, "the server gave no upload id");
	return 0;
}

static int rd_parts_open(struct xw *w, void *ctx)
{
	struct s3xml_parts *l = ctx;
	int r = xw_root(w, "ListPartsResult");

	if (r || !xw_at(w, 2, "ListPartsResult", "Part", NULL))
		return r;
	if (l->n >= S3XML_PARTS_MAX)
		return k8_err_set(w->err, -E2BIG, "the server listed more than %d parts in one "
				  "page", S3XML_PARTS_MAX);
	l->n++;
	return 0;
}

static int rd_parts_close(struct xw *w, void *ctx, const char *t, size_t n)
{
	struct s3xml_parts *l = ctx;
	struct s3xml_part *pt = l->n ? &l->p[l->n - 1] : NULL;
	uint64_t v;
	int r;

	if (xw_at(w, 2, "ListPartsResult", "IsTruncated", NULL))
		return xw_bool(w, t, n, &l->truncated);
	if (xw_at(w, 2, "ListPartsResult", "NextPartNumberMarker", NULL)) {
		if ((r = xw_u64(w, t, n, 10000, &v, "part number marker")))
			return r;
		l->next_marker = (uint32_t)v;
		return 0;
	}
	if (!pt || !xw_at(w, 3, "ListPartsResult", "Part", NULL))
		return 0;
	if (!strcmp(w->path[2], "PartNumber")) {
		if ((r = xw_u64(w, t, n, 10000, &v, "part number")))
			return r;
		pt->number = (uint32_t)v;
		return 0;
	}
	if (!strcmp(w->path[2], "Size"))
		return xw_u64(w, t, n, 5ull << 30, &pt->size, "part size");
	if (!strcmp(w->path[2], "ETag"))
		return xw_copy(w, pt->etag, sizeof(pt->etag), t, n, "ETag");
	return 0;
}

int s3xml_parts(const char *p, size_t n, struct s3xml_parts *out, struct k8_err *err)
{
	struct xw w = { .open = rd_parts_open, .close = rd_parts_close, .ctx = out, .err = err };
	int r;

	memset(out, 0, sizeof(*out));
	if ((r = xw_run(&w, p, n)))
		return r;
	for (uint32_t i = 0; i < out->n; i++)
		if (!out->p[i].number || !out->p[i].etag[0])
			return k8_err_set(err, -EBADMSG, "the server listed a part without a number "
					  "or an ETag");
	return 0;
}

static int rd_complete_open(struct xw *w, void *ctx)
{
	struct s3xml_complete *c = ctx;

	if (w->depth != 1)
		return 0;
	if (!strcmp(w->path[0], "Error")) {
		c->failed = true;
		return 0;
	}
	return xw_root(w, "CompleteMultipartUploadResult");
}

static int rd_complete_close(struct xw *w, void *ctx, const char *t, size_t n)
{
	struct s3xml_complete *c = ctx;

	if (c->failed)
		return rd_error_fill(w, &c->error, t, n, 1);
	if (xw_at(w, 2, "CompleteMultipartUploadResult", "ETag", NULL))
		return xw_copy(w, c->etag, sizeof(c->etag), t, n, "ETag");
	return 0;
}

int s3xml_complete(const char *p, size_t n, struct s3xml_complete *out, struct k8_err *err)
{
	struct xw w = { .open = rd_complete_open, .close = rd_complete_close, .ctx = out,
			.err = err };

	memset(out, 0, sizeof(*out));
	return xw_run(&w, p, n);
}

size_t s3xml_size(enum s3xml_kind kind)
{
	switch (kind) {
	case S3XML_ERROR: return sizeof(struct s3xml_error);
	case S3XML_LIST: return sizeof(struct s3xml_list);
	case S3XML_UPLOAD_ID: return sizeof(struct s3xml_upload);
	case S3XML_PARTS: return sizeof(struct s3xml_parts);
	case S3XML_COMPLETE: return sizeof(struct s3xml_complete);
	}
	return 0;
}

int s3xml_parse(enum s3xml_kind kind, const char *p, size_t n, void *out, struct k8_err *err)
{
	switch (kind) {
	case S3XML_ERROR: return s3xml_error(p, n, out, err);
	case S3XML_LIST: return s3xml_list(p, n, out, err);
	case S3XML_UPLOAD_ID: return s3xml_upload_id(p, n, out, err);
	case S3XML_PARTS: return s3xml_parts(p, n, out, err);
	case S3XML_COMPLETE: return s3xml_complete(p, n, out, err);
	}
	return k8_err_set(err, -EINVAL, "no reader for XML answers of kind %d", (int)kind);
}

/* Every string terminated within its array (the last byte is made a NUL: a string that
 * filled the array is cut, never read past). */
#define TERM(s) ((s)[sizeof(s) - 1] = '\0')

static void check_error(struct s3xml_error *e)
{
	TERM(e->code);
	TERM(e->message);
}

int s3xml_check(enum s3xml_kind kind, void *res)
{
	switch (kind) {
	case S3XML_ERROR:
		check_error(res);
		return 0;
	case S3XML_LIST: {
		struct s3xml_list *l = res;
		if (l->n > S3XML_LIST_MAX)
			return -EBADMSG;
		TERM(l->next);
		for (uint32_t i = 0; i < l->n; i++) {
			TERM(l->o[i].key);
			TERM(l->o[i].etag);
		}
		return 0;
	}
	case S3XML_UPLOAD_ID:
		TERM(((struct s3xml_upload *)res)->id);
		return 0;
	case S3XML_PARTS: {
		struct s3xml_parts *l = res;
		if (l->n > S3XML_PARTS_MAX)
			return -EBADMSG;
		for (uint32_t i = 0; i < l->n; i++)
			TERM(l->p[i].etag);
		return 0;
	}
	case S3XML_COMPLETE: {
		struct s3xml_complete *c = res;
		TERM(c->etag);
		check_error(&c->error);
		return 0;
	}
	}
	return -EBADMSG;
}
