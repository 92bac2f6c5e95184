/* SPDX-License-Identifier: Apache-2.0 */
/* s3.c - an S3 client on libcurl (s3.h).
 *
 * Theory of operation. Every request is one struct s3_req run by s3_do: the URL from the
 * configuration, key and canonical query; the payload's SHA-256 in x-amz-content-sha256
 * (libcurl 7.88 signs the header's value as the payload hash, and signs every header we
 * add, so we add no other); libcurl's SigV4 with "aws:amz:REGION:s3". libcurl 7.88 puts
 * the path and the query into the canonical request as they stand, so both are built
 * canonical here: keys are of a safe alphabet (s3_key_ok), query arguments are sorted by
 * name by each caller and their values encoded by s3_query_enc.
 *
 * s3_do retries what may succeed later (no answer, a cut transfer, 429, 500, 502, 503,
 * 504) after s3_backoff_ms, at most conf->retries times; everything we send is safe to
 * send twice (a PUT of the same bytes, a GET, a HEAD, a DELETE, a part). A download into
 * a file goes on from the bytes it already has (a Range from there). An answer's body is
 * kept in memory only under a cap; an error's body is read for S3's Code and Message by
 * the configured XML reader, and what it says is escaped before it reaches a message. */
#include "store/s3.h"
#include "common/httpretry.h"
#include "common/sha.h"
#include "common/version.h"

#include <ctype.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#define S3_ERRBODY_MAX (64u << 10)
#define S3_EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define S3_LIST_PAGES_MAX 100000

/* ---- pure parts: settings, keys, URLs ---- */

static int s3_bad(struct k8_err *err, const char *what, const char *fmt, const char *v)
{
	char esc[128];

	str_escape_to(esc, sizeof(esc), v);
	return k8_err_set(err, -EINVAL, "bad %s '%s': %s", what, esc, fmt);
}

static bool s3_host_ok(const char *h, size_t n)
{
	if (n == 0 || n > 253)
		return false;
	if (h[0] == '[')                         /* an IPv6 address */
		return h[n - 1] == ']' && strspn(h + 1, "0123456789abcdefABCDEF:.") == n - 2;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)h[i]) && h[i] != '-' && h[i] != '.')
			return false;
	return h[0] != '.' && h[0] != '-';
}

int s3_conf_check(const struct s3_conf *c, struct k8_err *err)
{
	const char *e = c->endpoint, *host, *end, *colon = NULL;
	size_t bn = strlen(c->bucket), rn = strlen(c->region);
	bool https = !strncmp(e, "https://", 8);

	if (!https && strncmp(e, "http://", 7))
		return s3_bad(err, "endpoint", "it must start with http:// or https://", e);
	host = e + (https ? 8 : 7);
	end = host + strlen(host);
	if (end > host && end[-1] == '/')
		end--;
	if (host[0] == '[') {
		const char *rb = memchr(host, ']', (size_t)(end - host));
		if (rb && rb + 1 < end && rb[1] == ':')
			colon = rb + 1;
	} else {
		colon = memchr(host, ':', (size_t)(end - host));
	}
	if (colon) {
		const char *q = colon + 1;
		long port = 0;
		if (q == end || end - q > 5)
			return s3_bad(err, "endpoint", "its port must be 1-65535", e);
		for (; q < end; q++) {
			if (!isdigit((unsigned char)*q))
				return s3_bad(err, "endpoint", "its port must be 1-65535", e);
			port = port * 10 + (*q - '0');
		}
		if (port < 1 || port > 65535)
			return s3_bad(err, "endpoint", "its port must be 1-65535", e);
	}
	if (!s3_host_ok(host, (size_t)((colon ? colon : end) - host)))
		return s3_bad(err, "endpoint", "give http(s)://HOST[:PORT], no user, path or query",
			      e);
	if (bn < 3 || bn > 63 || !isalnum((unsigned char)c->bucket[0]) ||
	    !isalnum((unsigned char)c->bucket[bn - 1]) || strstr(c->bucket, "..") ||
	    strspn(c->bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") != bn)
		return s3_bad(err, "bucket", "3-63 of a-z, 0-9, '.' and '-', starting and ending "
			      "with a letter or digit", c->bucket);
	if (!c->path_style && https && strchr(c->bucket, '.'))
		return s3_bad(err, "bucket", "a name with '.' does not match the server's "
			      "certificate when virtual-hosted: use path-style addressing",
			      c->bucket);
	if (rn < 1 || rn > S3_REGION_MAX ||
	    strspn(c->region, "abcdefghijklmnopqrstuvwxyz0123456789-") != rn)
		return s3_bad(err, "region", "1-32 of a-z, 0-9 and '-' (us-east-1, auto)",
			      c->region);
	if (!c->access_key[0] || !c->secret_key[0])
		return k8_err_set(err, -EINVAL, "an access key id and a secret key are needed");
	return 0;
}

bool s3_key_ok(const char *key)
{
	size_t n = strlen(key), comp = 0;

	if (n > S3_KEY_MAX || (n && (key[0] == '/' || key[n - 1] == '/')))
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || key[i] == '/') {
			if (n && (comp == 0 || (comp == 1 && key[i - 1] == '.') ||
				  (comp == 2 && key[i - 1] == '.' && key[i - 2] == '.')))
				return false;
			comp = 0;
			continue;
		}
		if (!isalnum((unsigned char)key[i]) && !strchr("._-", key[i]))
			return false;
		comp++;
	}
	return true;
}

int s3_query_enc(const char *s, char *out, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
			if (o + 1 >= n)
				return -ENAMETOOLONG;
			out[o++] = (char)c;
		} else {
			if (o + 3 >= n)
				return -ENAMETOOLONG;
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	if (o >= n)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return 0;
}

int s3_url(const struct s3_conf *c, const char *key, const char *query, char *out, size_t n)
{
	const char *e = c->endpoint;
	bool https = !strncmp(e, "https://", 8);
	const char *host = e + (https ? 8 : 7);
	size_t hl = strlen(host);
	int k;

	if (hl && host[hl - 1] == '/')
		hl--;
	if (c->path_style)
		k = snprintf(out, n, "%s%.*s/%s%s%s%s%s", https ? "https://" : "http://", (int)hl,
			     host, c->bucket, *key ? "/" : "", key, query ? "?" : "",
			     query ? query : "");
	else
		k = snprintf(out, n, "%s%s.%.*s/%s%s%s", https ? "https://" : "http://",
			     c->bucket, (int)hl, host, key, query ? "?" : "", query ? query : "");
	return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

unsigned s3_backoff_ms(unsigned base_ms, int attempt, unsigned rnd)
{
	uint64_t ms = base_ms ? base_ms : 200;

	for (int i = 1; i < attempt && ms < 8000; i++)
		ms *= 2;
	if (ms > 8000)
		ms = 8000;
	return (unsigned)(ms / 2 + rnd % (ms / 2 + 1));
}

/* ---- one request ---- */

struct s3_req {
	const char *method;              /* GET PUT HEAD DELETE POST */
	const char *key;
	const char *query;               /* canonical, or NULL */
	/* what is sent: bytes in memory, or [off, off + len) of fd */
	const void *data;
	size_t n;
	int fd;
	uint64_t off, len;
	char sha[65];                    /* their SHA-256 */
	bool post;                       /* data as POST fields */
	/* what comes back: into memory under `max`, or into ofd at ooff (exactly olen) */
	size_t max;
	char *body;
	size_t blen;
	int ofd;
	uint64_t ooff, olen, got;
	/* the answer */
	long status;                     /* of the last response (a 100 Continue's is dropped) */
	char etag[S3XML_ETAG_MAX + 1];
	uint64_t clen;
	bool over, werr;
	/* the transfer in flight */
	size_t rpos;
};

static size_t s3_hdr(char *p, size_t sz, size_t nm, void *ud)
{
	struct s3_req *q = ud;
	size_t n = sz * nm;

	if (n >= 5 && !strncmp(p, "HTTP/", 5)) {
		const char *sp = memchr(p, ' ', n);
		long v = 0;
		for (const char *d = sp ? sp + 1 : p + n; d < p + n && d < sp + 4 && isdigit((unsigned char)*d); d++)
			v = v * 10 + (*d - '0');
		q->status = v;
		q->etag[0] = '\0';
		return n;
	}
	if (n > 5 && !strncasecmp(p, "ETag:", 5)) {
		const char *v = p + 5, *e = p + n;
		while (v < e && (*v == ' ' || *v == '\t'))
			v++;
		while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
			e--;
		if ((size_t)(e - v) <= S3XML_ETAG_MAX) {
			memcpy(q->etag, v, (size_t)(e - v));
			q->etag[e - v] = '\0';
		}
	}
	return n;
}

static size_t s3_body(char *p, size_t sz, size_t nm, void *ud)
{
	struct s3_req *q = ud;
	size_t n = sz * nm;

	if (q->status >= 200 && q->status < 300 && q->ofd >= 0) {
		if (q->got + n > q->olen) {
			q->over = true;
			return 0;
		}
		for (size_t done = 0; done < n;) {
			ssize_t w = pwrite(q->ofd, p + done, n - done, (off_t)(q->ooff + q->got + done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				q->werr = true;
				return 0;
			}
			done += (size_t)w;
		}
		q->got += n;
		return n;
	}
	/* into memory: the answer (under max; none kept when max is 0) or an error's body
	 * (under S3_ERRBODY_MAX) */
	size_t cap = q->status >= 200 && q->status < 300 ? q->max : S3_ERRBODY_MAX;
	if (cap == 0)
		return n;
	if (q->blen + n > cap) {
		if (q->status >= 300)
			return n;        /* an error's tail: dropped */
		q->over = true;
		return 0;
	}
	char *b = realloc(q->body, q->blen + n + 1);
	if (!b)
		return 0;
	memcpy(b + q->blen, p, n);
	q->body = b;
	q->blen += n;
	b[q->blen] = '\0';
	return n;
}

static size_t s3_read(char *buf, size_t sz, size_t nm, void *ud)
{
	struct s3_req *q = ud;
	size_t want = sz * nm, left;

	if (q->fd < 0) {
		left = q->n - q->rpos;
		if (want > left)
			want = left;
		memcpy(buf, (const char *)q->data + q->rpos, want);
		q->rpos += want;
		return want;
	}
	left = (size_t)(q->len - q->rpos);
	if (want > left)
		want = left;
	for (;;) {
		ssize_t r = pread(q->fd, buf, want, (off_t)(q->off + q->rpos));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 && want)
			return CURL_READFUNC_ABORT;
		q->rpos += (size_t)r;
		return (size_t)r;
	}
}

static void s3_count(const struct s3_conf *c, uint64_t *field, uint64_t v)
{
	if (c->stats)
		__atomic_add_fetch(field, v, __ATOMIC_RELAXED);
}

static CURL *s3_handle(struct s3 *s)
{
	if (!s->curl)
		s->curl = curl_easy_init();
	else
		curl_easy_reset(s->curl);
	return s->curl;
}

/* One attempt. The curl result; q->status and the body as they came. */
static CURLcode s3_once(struct s3 *s, struct s3_req *q, const char *url, const char *range)
{
	const struct s3_conf *c = s->c;
	CURL *h = s3_handle(s);
	char sigv4[64 + S3_REGION_MAX], shahdr[96];
	struct curl_slist *hdrs = NULL;
	CURLcode cc;

	if (!h)
		return CURLE_OUT_OF_MEMORY;
	q->status = 0;
	q->rpos = 0;
	q->etag[0] = '\0';
	free(q->body);
	q->body = NULL;
	q->blen = 0;
	curl_easy_setopt(h, CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, c->timeout_s > 0 ? c->timeout_s : 600L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "kosa8/" KOSA8_VERSION);
	curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
	if (c->ca_file[0])
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", c->region);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(h, CURLOPT_USERNAME, c->access_key);
	curl_easy_setopt(h, CURLOPT_PASSWORD, c->secret_key);
	snprintf(shahdr, sizeof(shahdr), "x-amz-content-sha256: %s", q->sha[0] ? q->sha : S3_EMPTY_SHA);
	hdrs = curl_slist_append(hdrs, shahdr);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, s3_hdr);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, q);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s3_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, q);
	if (range)
		curl_easy_setopt(h, CURLOPT_RANGE, range);
	if (!strcmp(q->method, "PUT")) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, s3_read);
		curl_easy_setopt(h, CURLOPT_READDATA, q);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)(q->fd >= 0 ? q->len : q->n));
	} else if (!strcmp(q->method, "POST")) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->data ? (const char *)q->data : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->n);
	} else if (!strcmp(q->method, "HEAD")) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(q->method, "GET")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
	}
	cc = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	if (!strcmp(q->method, "HEAD")) {
		curl_off_t cl = -1;
		curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
		q->clen = cl > 0 ? (uint64_t)cl : 0;
	}
	return cc;
}

/* http_transient, but for 501: S3's NotImplemented says what a server will never do. */
static bool s3_retryable(CURLcode cc, long status)
{
	return status != 501 && http_transient((int)cc, status);
}

/* What S3 said in an error's body: " (Code: Message)", escaped; "" when nothing readable. */
static void s3_err_detail(struct s3 *s, const struct s3_req *q, char *out, size_t n)
{
	struct s3xml_error e;
	struct k8_err perr = { 0 };
	char code[80], msg[300];
	int r;

	out[0] = '\0';
	if (!q->body || !q->blen)
		return;
	if (s->c->xml)
		r = s->c->xml(s->c->xml_ctx, S3XML_ERROR, q->body, q->blen, &e, &perr);
	else
		r = s3xml_error(q->body, q->blen, &e, &perr);
	if (r || s3xml_check(S3XML_ERROR, &e) || !e.code[0])
		return;
	str_escape_to(code, sizeof(code), e.code);
	str_escape_to(msg, sizeof(msg), e.message);
	snprintf(out, n, " (%s%s%s)", code, msg[0] ? ": " : "", msg);
}

/* Run q with retries. 0 for a 2xx; else a negative errno with a message. Downloads into a
 * file continue from q->got with a Range. */
static int s3_do(struct s3 *s, struct s3_req *q, struct k8_err *err)
{
	const struct s3_conf *c = s->c;
	char url[S3_ENDPOINT_MAX + S3_BUCKET_MAX + S3_KEY_MAX + 2200], range[64], detail[400];
	int tries = c->retries < 0 ? S3_RETRIES : c->retries;
	CURLcode cc = CURLE_OK;

	if (!s3_key_ok(q->key))
		return k8_err_set(err, -EINVAL, "refusing the S3 key '%.80s'", q->key);
	if (s3_url(c, q->key, q->query, url, sizeof(url)))
		return k8_err_set(err, -ENAMETOOLONG, "the S3 URL for '%.80s' is too long", q->key);
	for (int attempt = 0;; attempt++) {
		const char *rg = NULL;
		if (q->ofd >= 0) {
			snprintf(range, sizeof(range), "%llu-%llu",
				 (unsigned long long)(q->off + q->got),
				 (unsigned long long)(q->off + q->olen - 1));
			rg = range;
		}
		uint64_t before = q->got;
		cc = s3_once(s, q, url, rg);
		s3_count(c, c->stats ? &c->stats->requests : NULL, 1);
		if (q->ofd >= 0)
			s3_count(c, c->stats ? &c->stats->bytes_down : NULL, q->got - before);
		else if (q->status >= 200 && q->status < 300)
			s3_count(c, c->stats ? &c->stats->bytes_down : NULL, q->blen);
		if (cc == CURLE_OK && q->status >= 200 && q->status < 300 &&
		    !strcmp(q->method, "PUT"))
			s3_count(c, c->stats ? &c->stats->bytes_up : NULL, q->fd >= 0 ? q->len : q->n);
		if (q->over)
			return k8_err_set(err, q->ofd >= 0 ? -EIO : -EFBIG, "S3 %s %s: %s", q->method,
					  q->key, q->ofd >= 0 ? "the server sent more bytes than "
					  "asked for" : "the answer is larger than expected");
		if (q->werr)
			return k8_err_set(err, -EIO, "S3 %s %s: writing what came failed", q->method,
					  q->key);
		if (cc == CURLE_OK && q->status >= 200 && q->status < 300) {
			if (q->ofd >= 0 && q->got < q->olen) {
				/* a body cut short with a clean end: go on from there */
				if (attempt >= tries)
					return k8_err_set(err, -EIO, "S3 GET %s: the server sent %llu of "
							  "%llu bytes", q->key,
							  (unsigned long long)q->got,
							  (unsigned long long)q->olen);
			} else {
				return 0;
			}
		} else if (!s3_retryable(cc, q->status) || attempt >= tries) {
			break;
		}
		unsigned rnd = 0;
		(void)!getrandom(&rnd, sizeof(rnd), 0);
		unsigned ms = s3_backoff_ms(c->backoff_ms, attempt + 1, rnd);
		struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
		s3_count(c, c->stats ? &c->stats->retries : NULL, 1);
		nanosleep(&ts, NULL);
	}
	if (cc != CURLE_OK)
		return k8_err_set(err, -EHOSTUNREACH, "S3 %s %s: %s (after %d tries)", q->method,
				  q->key[0] ? q->key : c->bucket, curl_easy_strerror(cc), tries + 1);
	s3_err_detail(s, q, detail, sizeof(detail));
	if (q->status == 404)
		return k8_err_set(err, -ENOENT, "S3 %s %s: not found%s", q->method,
				  q->key[0] ? q->key : c->bucket, detail);
	if (q->status == 403)
		return k8_err_set(err, -EACCES, "S3 %s %s: access denied%s", q->method,
				  q->key[0] ? q->key : c->bucket, detail);
	return k8_err_set(err, -EPROTO, "S3 %s %s: HTTP %ld%s", q->method,
			  q->key[0] ? q->key : c->bucket, q->status, detail);
}

static void s3_req_init(struct s3_req *q, const char *method, const char *key)
{
	memset(q, 0, sizeof(*q));
	q->method = method;
	q->key = key;
	q->fd = -1;
	q->ofd = -1;
}

/* ---- the verbs ---- */

void s3_init(struct s3 *s, const struct s3_conf *c)
{
	s->c = c;
	s->curl = NULL;
}

void s3_fini(struct s3 *s)
{
	if (s->curl)
		curl_easy_cleanup(s->curl);
	s->curl = NULL;
}

int s3_put(struct s3 *s, const char *key, const void *data, size_t n, struct k8_err *err)
{
	struct s3_req q;
	int r;

	s3_req_init(&q, "PUT", key);
	q.data = data;
	q.n = n;
	sha256_hex(data, n, q.sha);
	r = s3_do(s, &q, err);
	free(q.body);
	return r;
}

int s3_get(struct s3 *s, const char *key, size_t max, char **out, size_t *n,
	   struct k8_err *err)
{
	struct s3_req q;
	int r;

	s3_req_init(&q, "GET", key);
	q.max = max;
	r = s3_do(s, &q, err);
	if (r) {
		free(q.body);
		return r;
	}
	if (!q.body)
		q.body = xstrdup("");
	*out = q.body;
	*n = q.blen;
	return 0;
}

int s3_head(struct s3 *s, const char *key, uint64_t *size, struct k8_err *err)
{
	struct s3_req q;
	int r;

	s3_req_init(&q, "HEAD", key);
	r = s3_do(s, &q, err);
	free(q.body);
	if (!r && size)
		*size = q.clen;
	return r;
}

int s3_delete(struct s3 *s, const char *key, struct k8_err *err)
{
	struct s3_req q;
	int r;

	s3_req_init(&q, "DELETE", key);
	r = s3_do(s, &q, err);
	free(q.body);
	return r;
}

/* An XML answer read by the configured reader, checked as it comes back. */
static int s3_xml(struct s3 *s, enum s3xml_kind kind, const char *p, size_t n, void *out,
		  struct k8_err *err)
{
	int r = s->c->xml ? s->c->xml(s->c->xml_ctx, kind, p, n, out, err) :
		s3xml_parse(kind, p, n, out, err);
	if (!r && s3xml_check(kind, out))
		r = k8_err_set(err, -EBADMSG, "the reader of the server's XML answer sent a "
			       "malformed result");
	return r;
}

int s3_list(struct s3 *s, const char *prefix,
	    int (*fn)(void *ctx, const struct s3xml_obj *o), void *ctx, struct k8_err *err)
{
	char query[3 * S3XML_TOKEN_MAX + 3 * S3_KEY_MAX + 128], pre[3 * S3_KEY_MAX + 1],
	     tok[3 * S3XML_TOKEN_MAX + 1], last[S3XML_TOKEN_MAX + 1] = "";
	struct s3xml_list *l = xmalloc(sizeof(*l));
	int r = 0;

	if (s3_query_enc(prefix, pre, sizeof(pre)))
		goto toolong;
	for (int page = 0;; page++) {
		struct s3_req q;
		if (page >= S3_LIST_PAGES_MAX) {
			r = k8_err_set(err, -E2BIG, "S3 list %s: more than %d pages", prefix,
				       S3_LIST_PAGES_MAX);
			break;
		}
		if (page == 0) {
			snprintf(query, sizeof(query), "list-type=2&prefix=%s", pre);
		} else {
			if (s3_query_enc(last, tok, sizeof(tok)))
				goto toolong;
			snprintf(query, sizeof(query), "continuation-token=%s&list-type=2&prefix=%s",
				 tok, pre);
		}
		s3_req_init(&q, "GET", "");
		q.query = query;
		q.max = S3XML_MAX_BYTES;
		r = s3_do(s, &q, err);
		if (!r)
			r = s3_xml(s, S3XML_LIST, q.body ? q.body : "", q.blen, l, err);
		free(q.body);
		if (r)
			break;
		for (uint32_t i = 0; i < l->n && !r; i++)
			r = fn(ctx, &l->o[i]);
		if (r || !l->truncated)
			break;
		if (!strcmp(last, l->next)) {
			r = k8_err_set(err, -EBADMSG, "S3 list %s: the server gave the same "
				       "continuation token twice", prefix);
			break;
		}
		snprintf(last, sizeof(last), "%s", l->next);
	}
	free(l);
	return r;
toolong:
	free(l);
	return k8_err_set(err, -ENAMETOOLONG, "S3 list %s: the query is too long", prefix);
}

int s3_get_range(struct s3 *s, const char *key, uint64_t off, uint64_t len, int fd,
		 uint64_t fd_off, struct k8_err *err)
{
	struct s3_req q;
	int r;

	if (len == 0)
		return 0;
	s3_req_init(&q, "GET", key);
	q.off = off;
	q.ofd = fd;
	q.ooff = fd_off;
	q.olen = len;
	r = s3_do(s, &q, err);
	free(q.body);
	if (!r && q.got != len)
		r = k8_err_set(err, -EIO, "S3 GET %s: %llu bytes came of %llu", key,
			       (unsigned long long)q.got, (unsigned long long)len);
	return r;
}

/* ---- multipart upload, resumed from a journal ---- */

/* SHA-256 of [off, off + len) of fd. */
static int s3_sha_range(int fd, uint64_t off, uint64_t len, char out[65])
{
	sha256_ctx md = sha256_begin();
	char buf[1 << 16];

	while (len) {
		size_t want = len < sizeof(buf) ? (size_t)len : sizeof(buf);
		ssize_t r = pread(fd, buf, want, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? -errno : -EIO;
			sha256_end(md, NULL);
			return e;
		}
		sha256_add(md, buf, (size_t)r);
		off += (uint64_t)r;
		len -= (uint64_t)r;
	}
	sha256_end(md, out);
	return 0;
}

static int s3_put_range(struct s3 *s, const char *key, const char *query, int fd,
			uint64_t off, uint64_t len, char etag[S3XML_ETAG_MAX + 1],
			struct k8_err *err)
{
	struct s3_req q;
	int r;

	s3_req_init(&q, "PUT", key);
	q.query = query;
	q.fd = fd;
	q.off = off;
	q.len = len;
	if ((r = s3_sha_range(fd, off, len, q.sha)))
		return k8_err_set(err, r, "reading what to upload to %s: %s", key, strerror(-r));
	r = s3_do(s, &q, err);
	free(q.body);
	if (!r && etag)
		snprintf(etag, S3XML_ETAG_MAX + 1, "%s", q.etag);
	return r;
}

struct s3_journal {
	char upload_id[S3XML_TOKEN_MAX + 1];
	char (*etag)[S3XML_ETAG_MAX + 1];       /* [nparts], "" while not sent */
	uint32_t nparts;
};

static int s3_journal_save(const char *path, const char *key, uint64_t size, uint64_t psize,
			   const struct s3_journal *j)
{
	json_t *parts = json_object(), *o;
	char num[16];
	char *text;
	int r;

	for (uint32_t i = 0; i < j->nparts; i++)
		if (j->etag[i][0]) {
			snprintf(num, sizeof(num), "%u", i + 1);
			json_object_set_new(parts, num, json_string(j->etag[i]));
		}
	o = json_pack("{s:s,s:I,s:I,s:s,s:o}", "key", key, "size", (json_int_t)size, "part_size",
		      (json_int_t)psize, "upload_id", j->upload_id, "parts", parts);
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!text)
		return -ENOMEM;
	r = write_file_atomic(path, text, strlen(text), 0600);
	free(text);
	return r;
}

/* The journal of an earlier try at this very upload: 0 with j filled, or -ENOENT. */
static int s3_journal_load(const char *path, const char *key, uint64_t size, uint64_t psize,
			   struct s3_journal *j)
{
	cleanup_free char *text = NULL;
	size_t n;
	json_t *o, *parts, *v;
	const char *k, *id, *jkey;
	json_int_t js, jp;

	if (read_file(path, 4u << 20, &text, &n) < 0 || !(o = json_loads(text, 0, NULL)))
		return -ENOENT;
	if (json_unpack(o, "{s:s,s:I,s:I,s:s,s:o}", "key", &jkey, "size", &js, "part_size", &jp,
			"upload_id", &id, "parts", &parts) < 0 || strcmp(jkey, key) ||
	    (uint64_t)js != size || (uint64_t)jp != psize || strlen(id) > S3XML_TOKEN_MAX ||
	    !json_is_object(parts)) {
		json_decref(o);
		return -ENOENT;
	}
	snprintf(j->upload_id, sizeof(j->upload_id), "%s", id);
	json_object_foreach(parts, k, v) {
		unsigned long num = strtoul(k, NULL, 10);
		if (num >= 1 && num <= j->nparts && json_is_string(v) &&
		    json_string_length(v) <= S3XML_ETAG_MAX)
			snprintf(j->etag[num - 1], S3XML_ETAG_MAX + 1, "%s", json_string_value(v));
	}
	json_decref(o);
	return 0;
}

static int s3_mpu_begin(struct s3 *s, const char *key, struct s3_journal *j,
			struct k8_err *err)
{
	struct s3_req q;
	struct s3xml_upload u;
	int r;

	s3_req_init(&q, "POST", key);
	q.query = "uploads=";
	q.max = 1u << 16;
	r = s3_do(s, &q, err);
	if (!r)
		r = s3_xml(s, S3XML_UPLOAD_ID, q.body ? q.body : "", q.blen, &u, err);
	free(q.body);
	if (r)
		return r;
	snprintf(j->upload_id, sizeof(j->upload_id), "%s", u.id);
	for (uint32_t i = 0; i < j->nparts; i++)
		j->etag[i][0] = '\0';
	return 0;
}

/* What the server holds of upload j: parts of the right size keep (or get) their ETag,
 * the others are sent again. -ENOENT: the server no longer knows the upload; 1: the
 * server has no ListParts (the journal is taken as it is). */
static int s3_mpu_known(struct s3 *s, const char *key, uint64_t size, uint64_t psize,
			struct s3_journal *j, struct k8_err *err)
{
	char query[S3XML_TOKEN_MAX * 3 + 64], id[S3XML_TOKEN_MAX * 3 + 1];
	struct s3xml_parts *pl = xmalloc(sizeof(*pl));
	uint32_t marker = 0;
	bool *seen = xcalloc(j->nparts, sizeof(*seen));
	int r = 0;

	if (s3_query_enc(j->upload_id, id, sizeof(id))) {
		r = k8_err_set(err, -ENAMETOOLONG, "upload id too long");
		goto out;
	}
	for (int page = 0; page < S3_PARTS_MAX; page++) {
		struct s3_req q;
		if (marker)
			snprintf(query, sizeof(query), "part-number-marker=%u&uploadId=%s", marker, id);
		else
			snprintf(query, sizeof(query), "uploadId=%s", id);
		s3_req_init(&q, "GET", key);
		q.query = query;
		q.max = S3XML_MAX_BYTES;
		r = s3_do(s, &q, err);
		if (r == -EPROTO && (q.status == 405 || q.status == 501 || q.status == 400)) {
			free(q.body);
			k8_err_clear(err);
			r = 1;                  /* no ListParts here (s3rver): the journal holds */
			goto out;
		}
		if (!r)
			r = s3_xml(s, S3XML_PARTS, q.body ? q.body : "", q.blen, pl, err);
		free(q.body);
		if (r)
			goto out;
		for (uint32_t i = 0; i < pl->n; i++) {
			uint32_t num = pl->p[i].number;
			uint64_t want = num == j->nparts ? size - psize * (j->nparts - 1) : psize;
			if (num < 1 || num > j->nparts || pl->p[i].size != want)
				continue;
			snprintf(j->etag[num - 1], S3XML_ETAG_MAX + 1, "%s", pl->p[i].etag);
			seen[num - 1] = true;
		}
		if (!pl->truncated)
			break;
		if (pl->next_marker <= marker) {
			r = k8_err_set(err, -EBADMSG, "S3 list parts of %s: the marker does not move",
				       key);
			goto out;
		}
		marker = pl->next_marker;
	}
	for (uint32_t i = 0; i < j->nparts; i++)
		if (!seen[i])
			j->etag[i][0] = '\0';   /* the server does not hold it: send again */
out:
	free(seen);
	free(pl);
	return r;
}

static int s3_mpu_complete(struct s3 *s, const char *key, const struct s3_journal *j,
			   struct k8_err *err)
{
	size_t cap = 128 + (size_t)j->nparts * (64 + S3XML_ETAG_MAX), n = 0;
	char *xml = xmalloc(cap), query[S3XML_TOKEN_MAX * 3 + 16], id[S3XML_TOKEN_MAX * 3 + 1];
	struct s3xml_complete res;
	struct s3_req q;
	int r;

	n += (size_t)snprintf(xml + n, cap - n, "<CompleteMultipartUpload>");
	for (uint32_t i = 0; i < j->nparts; i++) {
		char etag[S3XML_ETAG_MAX * 6 + 1], *o = etag;
		for (const char *e = j->etag[i]; *e; e++)   /* the ETag as XML text */
			o += *e == '"' ? sprintf(o, "&quot;") : *e == '&' ? sprintf(o, "&amp;") :
			     *e == '<' ? sprintf(o, "&lt;") : sprintf(o, "%c", *e);
		n += (size_t)snprintf(xml + n, cap - n, "<Part><PartNumber>%u</PartNumber>"
				      "<ETag>%s</ETag></Part>", i + 1, etag);
	}
	n += (size_t)snprintf(xml + n, cap - n, "</CompleteMultipartUpload>");
	if (s3_query_enc(j->upload_id, id, sizeof(id))) {
		free(xml);
		return k8_err_set(err, -ENAMETOOLONG, "upload id too long");
	}
	snprintf(query, sizeof(query), "uploadId=%s", id);
	s3_req_init(&q, "POST", key);
	q.query = query;
	q.data = xml;
	q.n = n;
	q.max = 1u << 16;
	sha256_hex(xml, n, q.sha);
	r = s3_do(s, &q, err);
	if (!r)
		r = s3_xml(s, S3XML_COMPLETE, q.body ? q.body : "", q.blen, &res, err);
	free(q.body);
	free(xml);
	if (!r && res.failed) {
		char code[80], msg[300];
		str_escape_to(code, sizeof(code), res.error.code);
		str_escape_to(msg, sizeof(msg), res.error.message);
		r = k8_err_set(err, -EPROTO, "S3 completing the upload of %s: %s: %s", key, code,
			       msg);
	}
	return r;
}

int s3_upload_abort(struct s3 *s, const char *key, const char *upload_id, struct k8_err *err)
{
	char query[S3XML_TOKEN_MAX * 3 + 16], id[S3XML_TOKEN_MAX * 3 + 1];
	struct s3_req q;
	int r;

	if (s3_query_enc(upload_id, id, sizeof(id)))
		return k8_err_set(err, -ENAMETOOLONG, "upload id too long");
	snprintf(query, sizeof(query), "uploadId=%s", id);
	s3_req_init(&q, "DELETE", key);
	q.query = query;
	r = s3_do(s, &q, err);
	free(q.body);
	return r;
}

int s3_upload_file(struct s3 *s, const char *key, int fd, uint64_t size, uint64_t part_size,
		   const char *journal, void (*progress)(void *ctx, uint64_t done), void *ctx,
		   uint64_t *sent, struct k8_err *err)
{
	struct s3_journal j = { 0 };
	uint64_t done = 0;
	int r;

	*sent = 0;
	if (part_size < S3_PART_MIN)
		part_size = S3_PART_MIN;
	if (size <= part_size) {
		r = s3_put_range(s, key, NULL, fd, 0, size, NULL, err);
		if (!r)
			*sent = size;
		if (!r && progress)
			progress(ctx, size);
		return r;
	}
	if ((size + part_size - 1) / part_size > S3_PARTS_MAX)
		return k8_err_set(err, -EFBIG, "%s: %llu bytes in parts of %llu are more than %d "
				  "parts", key, (unsigned long long)size,
				  (unsigned long long)part_size, S3_PARTS_MAX);
	j.nparts = (uint32_t)((size + part_size - 1) / part_size);
	j.etag = xcalloc(j.nparts, sizeof(*j.etag));
	if (journal && s3_journal_load(journal, key, size, part_size, &j) == 0) {
		r = s3_mpu_known(s, key, size, part_size, &j, err);
		if (r == -ENOENT) {             /* forgotten by the server: start again */
			k8_err_clear(err);
			r = s3_mpu_begin(s, key, &j, err);
		}
	} else {
		r = s3_mpu_begin(s, key, &j, err);
	}
	if (r < 0)
		goto out;
	if (journal && (r = s3_journal_save(journal, key, size, part_size, &j))) {
		k8_err_set(err, r, "writing the upload's journal %s: %s", journal, strerror(-r));
		goto out;
	}
	for (uint32_t i = 0; i < j.nparts; i++) {
		uint64_t off = (uint64_t)i * part_size;
		uint64_t len = i + 1 == j.nparts ? size - off : part_size;
		char query[S3XML_TOKEN_MAX * 3 + 48], id[S3XML_TOKEN_MAX * 3 + 1];
		if (j.etag[i][0]) {
			done += len;
			continue;
		}
		if (s3_query_enc(j.upload_id, id, sizeof(id))) {
			r = k8_err_set(err, -ENAMETOOLONG, "upload id too long");
			goto out;
		}
		snprintf(query, sizeof(query), "partNumber=%u&uploadId=%s", i + 1, id);
		if ((r = s3_put_range(s, key, query, fd, off, len, j.etag[i], err)))
			goto out;
		if (!j.etag[i][0]) {
			r = k8_err_set(err, -EPROTO, "S3 PUT %s part %u: the server gave no ETag", key,
				       i + 1);
			goto out;
		}
		*sent += len;
		done += len;
		if (journal && (r = s3_journal_save(journal, key, size, part_size, &j))) {
			k8_err_set(err, r, "writing the upload's journal %s: %s", journal,
				   strerror(-r));
			goto out;
		}
		if (progress)
			progress(ctx, done);
	}
	if ((r = s3_mpu_complete(s, key, &j, err)) == -ENOENT) {
		/* a retried completion whose first try went through (its answer was lost):
		 * the upload is gone because the object is there */
		uint64_t have = 0;
		struct k8_err e2 = { 0 };
		if (s3_head(s, key, &have, &e2) == 0 && have == size) {
			k8_err_clear(err);
			r = 0;
		}
	}
	if (r)
		goto out;
	if (journal)
		unlink(journal);
out:
	free(j.etag);
	return r < 0 ? r : 0;
}
