/* SPDX-License-Identifier: Apache-2.0 */
/* http.c - strict HTTP/1.1 head parser and chunked framer (see http.h).
 *
 * Theory of operation: the head is parsed only once it is complete (the blank line was
 * seen within HTTP_MAX_HEAD bytes), line by line, each line ending in CRLF and holding
 * no other control byte but HTAB inside values. Framing follows RFC 9112 section 6.3 with
 * the ambiguous cases refused rather than resolved: a message that two parsers could
 * frame differently never reaches the upstream. */
#include "broker/http.h"

#include <string.h>
#include <strings.h>

static bool http_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool http_vchar(unsigned char c)
{
	return c >= 0x21 && c != 0x7f;  /* visible ASCII and obs-text */
}

bool http_name_is(const struct http_hdr *h, const char *name)
{
	return strlen(name) == h->nlen && strncasecmp(h->name, name, h->nlen) == 0;
}

int http_find(const struct http_msg *m, const char *name)
{
	for (int i = 0; i < m->nh; i++)
		if (http_name_is(&m->h[i], name))
			return i;
	return -1;
}

/* Does a comma-separated header value list contain `tok` (case-insensitive)? */
static bool http_list_has(const char *v, size_t n, const char *tok)
{
	size_t tl = strlen(tok), i = 0;

	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t s = i;
		while (i < n && v[i] != ',')
			i++;
		size_t e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - s == tl && strncasecmp(v + s, tok, tl) == 0)
			return true;
	}
	return false;
}

/* Length of the head (through CRLFCRLF) or 0 if not complete yet; -1 on a bare CR/LF. */
static long http_head_end(const char *b, size_t len)
{
	size_t lim = len < HTTP_MAX_HEAD ? len : HTTP_MAX_HEAD;

	for (size_t i = 0; i < lim; i++) {
		if (b[i] == '\n')
			return -1;              /* LF without CR */
		if (b[i] != '\r')
			continue;
		if (i + 1 >= lim)
			return 0;
		if (b[i + 1] != '\n')
			return -1;              /* CR without LF */
		if (i + 3 < lim && b[i + 2] == '\r' && b[i + 3] == '\n')
			return (long)(i + 4);
		if (i + 3 >= lim && i + 2 < lim && b[i + 2] == '\r')
			return 0;
		i++;
	}
	return 0;
}

/* Header lines from `p` to the blank line at `end`. */
static int http_parse_fields(const char *p, const char *end, struct http_msg *m,
			     int bad, const char **why)
{
	while (p < end) {
		const char *eol = memchr(p, '\r', (size_t)(end - p));
		if (!eol)
			return *why = "header line without CRLF", bad;
		if (eol == p)
			break;                  /* the blank line */
		if (*p == ' ' || *p == '\t')
			return *why = "obsolete line folding (a header line starting with whitespace)", bad;
		const char *c = p;
		while (c < eol && http_tchar((unsigned char)*c))
			c++;
		if (c == p || c == eol || *c != ':')
			return *why = "malformed header name (expected token followed by ':')", bad;
		if (m->nh >= HTTP_MAX_HEADERS)
			return *why = "too many header fields (at most 100)", -431;
		const char *v = c + 1, *ve = eol;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		for (const char *q = v; q < ve; q++)
			if (!http_vchar((unsigned char)*q) && *q != ' ' && *q != '\t')
				return *why = "control character in a header value", bad;
		m->h[m->nh++] = (struct http_hdr){ .name = p, .nlen = (size_t)(c - p),
						   .value = v, .vlen = (size_t)(ve - v) };
		p = eol + 2;
	}
	return 0;
}

/* Framing and connection headers, common to requests and responses. */
static int http_framing(struct http_msg *m, int bad, const char **why)
{
	int ncl = 0, nte = 0, cl = -1, te = -1;
	bool close = false, keep = false;

	for (int i = 0; i < m->nh; i++) {
		struct http_hdr *h = &m->h[i];
		if (http_name_is(h, "content-length"))
			ncl++, cl = i;
		else if (http_name_is(h, "transfer-encoding"))
			nte++, te = i;
		else if (http_name_is(h, "connection")) {
			close |= http_list_has(h->value, h->vlen, "close");
			keep |= http_list_has(h->value, h->vlen, "keep-alive");
		}
	}
	if (ncl && nte)
		return *why = "both Content-Length and Transfer-Encoding", bad;
	if (ncl > 1 || nte > 1)
		return *why = "repeated Content-Length or Transfer-Encoding", bad;
	if (nte) {
		struct http_hdr *h = &m->h[te];
		if (m->minor == 0)
			return *why = "Transfer-Encoding in an HTTP/1.0 message", bad;
		if (h->vlen != 7 || strncasecmp(h->value, "chunked", 7) != 0)
			return *why = "Transfer-Encoding other than \"chunked\"", m->status ? bad : -501;
		m->body = HTTP_BODY_CHUNKED;
	} else if (ncl) {
		struct http_hdr *h = &m->h[cl];
		uint64_t v = 0;
		if (h->vlen == 0 || h->vlen > 18)
			return *why = "malformed Content-Length", bad;
		for (size_t i = 0; i < h->vlen; i++) {
			if (h->value[i] < '0' || h->value[i] > '9')
				return *why = "malformed Content-Length", bad;
			v = v * 10 + (uint64_t)(h->value[i] - '0');
		}
		m->clen = v;
		m->body = v ? HTTP_BODY_LENGTH : HTTP_BODY_NONE;
	}
	m->keep_alive = m->minor == 1 ? !close : (keep && !close);
	return 0;
}

static int http_version(const char *p, size_t n, struct http_msg *m)
{
	if (n != 8 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1'))
		return -1;
	m->minor = p[7] - '0';
	return 0;
}

int http_parse_request(const char *buf, size_t len, struct http_msg *m, const char **why)
{
	memset(m, 0, sizeof(*m));
	m->host = -1;
	long hl = http_head_end(buf, len);
	if (hl < 0)
		return *why = "bare CR or LF in the request head", -400;
	if (hl == 0) {
		if (len >= HTTP_MAX_HEAD)
			return *why = "request head larger than 64 KiB", -431;
		return 0;
	}
	const char *end = buf + hl - 2, *eol = memchr(buf, '\r', (size_t)hl);
	const char *p = buf, *sp1, *sp2;

	/* method SP request-target SP HTTP-version, single spaces */
	for (sp1 = p; sp1 < eol && http_tchar((unsigned char)*sp1); sp1++)
		;
	if (sp1 == p || sp1 >= eol || *sp1 != ' ')
		return *why = "malformed request line (method)", -400;
	for (sp2 = sp1 + 1; sp2 < eol && http_vchar((unsigned char)*sp2) &&
	     (unsigned char)*sp2 < 0x7f; sp2++)
		;
	if (sp2 == sp1 + 1 || sp2 >= eol || *sp2 != ' ')
		return *why = "malformed request line (target)", -400;
	if (http_version(sp2 + 1, (size_t)(eol - sp2 - 1), m) < 0)
		return *why = "unsupported HTTP version (HTTP/1.0 and HTTP/1.1 only)", -505;
	m->method = p;
	m->mlen = (size_t)(sp1 - p);
	m->target = sp1 + 1;
	m->tlen = (size_t)(sp2 - sp1 - 1);
	if (m->target[0] != '/')
		return *why = "request target must be a path (origin form, starting with '/')", -400;

	int rc = http_parse_fields(eol + 2, end + 2, m, -400, why);
	if (rc < 0)
		return rc;
	rc = http_framing(m, -400, why);
	if (rc < 0)
		return rc;
	for (int i = 0; i < m->nh; i++) {
		struct http_hdr *h = &m->h[i];
		if (http_name_is(h, "host")) {
			if (m->host >= 0)
				return *why = "more than one Host header", -400;
			m->host = i;
		} else if (http_name_is(h, "expect")) {
			if (h->vlen != 12 || strncasecmp(h->value, "100-continue", 12) != 0)
				return *why = "unsupported Expect (only 100-continue)", -417;
			m->expect_continue = true;
		}
	}
	if (m->host < 0 || m->h[m->host].vlen == 0)
		return *why = "missing Host header", -400;
	m->head_len = (size_t)hl;
	return (int)hl;
}

int http_parse_response(const char *buf, size_t len, const char *method, size_t mlen,
			struct http_msg *m, const char **why)
{
	memset(m, 0, sizeof(*m));
	m->host = -1;
	long hl = http_head_end(buf, len);
	if (hl < 0)
		return *why = "bare CR or LF in the response head", -502;
	if (hl == 0) {
		if (len >= HTTP_MAX_HEAD)
			return *why = "response head larger than 64 KiB", -502;
		return 0;
	}
	const char *eol = memchr(buf, '\r', (size_t)hl);
	/* HTTP-version SP 3DIGIT SP reason */
	if (eol - buf < 12 || http_version(buf, 8, m) < 0 || buf[8] != ' ' ||
	    buf[9] < '1' || buf[9] > '5' || buf[10] < '0' || buf[10] > '9' ||
	    buf[11] < '0' || buf[11] > '9' || (eol - buf > 12 && buf[12] != ' '))
		return *why = "malformed status line", -502;
	m->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	for (const char *q = buf + 12; q < eol; q++)
		if (!http_vchar((unsigned char)*q) && *q != ' ' && *q != '\t')
			return *why = "control character in the status line", -502;
	int rc = http_parse_fields(eol + 2, buf + hl, m, -502, why);
	if (rc < 0)
		return rc;
	rc = http_framing(m, -502, why);
	if (rc < 0)
		return rc;
	bool head = mlen == 4 && memcmp(method, "HEAD", 4) == 0;
	if (head || m->status < 200 || m->status == 204 || m->status == 304) {
		m->body = HTTP_BODY_NONE;
	} else if (m->body == HTTP_BODY_NONE && http_find(m, "content-length") < 0) {
		m->body = HTTP_BODY_CLOSE;      /* delimited by the end of the connection */
		m->keep_alive = false;
	}
	m->head_len = (size_t)hl;
	return (int)hl;
}

enum {
	CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF,
	CH_TRAILER, CH_TRAILER_LF, CH_END_LF,
};

#define CH_MAX_LINE 4096                /* a size line with extensions, or a trailer line */

void http_chunked_init(struct http_chunked *c, bool allow_trailers)
{
	memset(c, 0, sizeof(*c));
	c->allow_trailers = allow_trailers;
}

static int http_hex(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* The framer; with `data`, the chunks' data bytes are also copied there (*dlen of them).
 * Writing never overtakes reading, so data may be p itself. */
static ssize_t http_chunked_run(struct http_chunked *c, const char *p, size_t n, char *data,
				size_t *dlen, const char **why)
{
	size_t i = 0;

	while (i < n && !c->done) {
		char ch = p[i];
		switch (c->st) {
		case CH_SIZE: {
			int d = http_hex(ch);
			if (d >= 0) {
				if (++c->ndig > 15)
					return *why = "chunk size too large", -1;
				c->left = c->left << 4 | (uint64_t)d;
				i++;
				break;
			}
			if (c->ndig == 0)
				return *why = "malformed chunk size", -1;
			if (ch == ';') {
				c->st = CH_EXT;
				c->linelen = c->ndig;
			} else if (ch == '\r') {
				c->st = CH_SIZE_LF;
			} else {
				return *why = "malformed chunk size", -1;
			}
			i++;
			break;
		}
		case CH_EXT:
			/* chunk extensions: passed through, visible characters only, bounded */
			if (++c->linelen > CH_MAX_LINE)
				return *why = "chunk extension too long", -1;
			if (ch == '\r')
				c->st = CH_SIZE_LF;
			else if (!http_vchar((unsigned char)ch) && ch != ' ' && ch != '\t')
				return *why = "control character in a chunk extension", -1;
			i++;
			break;
		case CH_SIZE_LF:
			if (ch != '\n')
				return *why = "chunk size line without CRLF", -1;
			i++;
			c->ndig = 0;
			c->linelen = 0;
			c->st = c->left ? CH_DATA : CH_TRAILER;
			break;
		case CH_DATA: {
			size_t take = n - i;
			if (take > c->left)
				take = (size_t)c->left;
			c->left -= take;
			if (data) {
				memmove(data + *dlen, p + i, take);
				*dlen += take;
			}
			i += take;
			if (!c->left)
				c->st = CH_DATA_CR;
			break;
		}
		case CH_DATA_CR:
			if (ch != '\r')
				return *why = "chunk data longer than its size", -1;
			c->st = CH_DATA_LF;
			i++;
			break;
		case CH_DATA_LF:
			if (ch != '\n')
				return *why = "chunk data without CRLF", -1;
			c->st = CH_SIZE;
			i++;
			break;
		case CH_TRAILER:
			/* after the last chunk: the blank line, or (responses only) trailer lines */
			if (ch == '\r') {
				c->st = c->linelen ? CH_TRAILER_LF : CH_END_LF;
			} else if (!c->allow_trailers) {
				return *why = "trailer fields after a chunked request body", -1;
			} else if (++c->linelen > CH_MAX_LINE) {
				return *why = "trailer line too long", -1;
			} else if (ch == '\n' || (!http_vchar((unsigned char)ch) && ch != ' ' && ch != '\t')) {
				return *why = "control character in a trailer", -1;
			}
			i++;
			break;
		case CH_TRAILER_LF:
			if (ch != '\n')
				return *why = "trailer line without CRLF", -1;
			c->linelen = 0;
			c->st = CH_TRAILER;
			i++;
			break;
		case CH_END_LF:
			if (ch != '\n')
				return *why = "chunked body without final CRLF", -1;
			c->done = true;
			i++;
			break;
		}
	}
	return (ssize_t)i;
}

ssize_t http_chunked_feed(struct http_chunked *c, const char *p, size_t n, const char **why)
{
	return http_chunked_run(c, p, n, NULL, NULL, why);
}

ssize_t http_chunked_decode(struct http_chunked *c, char *p, size_t n, size_t *dlen,
			    const char **why)
{
	*dlen = 0;
	return http_chunked_run(c, p, n, p, dlen, why);
}

int http_encoded(const struct http_msg *m)
{
	for (int i = 0; i < m->nh; i++) {
		const struct http_hdr *h = &m->h[i];
		if (!http_name_is(h, "content-encoding"))
			continue;
		/* a list of codings: only "identity" (or nothing) leaves the bytes as they are */
		for (size_t a = 0; a < h->vlen;) {
			size_t b = a;
			while (b < h->vlen && h->value[b] != ',')
				b++;
			size_t s = a, e = b;
			while (s < e && (h->value[s] == ' ' || h->value[s] == '\t'))
				s++;
			while (e > s && (h->value[e - 1] == ' ' || h->value[e - 1] == '\t'))
				e--;
			if (e > s && (e - s != 8 || strncasecmp(h->value + s, "identity", 8)))
				return i;
			a = b + 1;
		}
	}
	return -1;
}
