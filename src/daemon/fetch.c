/* SPDX-License-Identifier: Apache-2.0 */
/* fetch.c - HTTP(S) GETs for kosa8d's downloads: one libcurl setup (fetch_curl), an
 * answer in memory under a cap (fetch_mem), or streamed into a file under a cap while its
 * SHA-256 is taken (fetch_file). What is fetched is hostile until its digest is checked by
 * the caller; nothing here parses it. */
#include "daemon/fetch.h"
#include "common/sha.h"
#include "common/version.h"

#include <string.h>

size_t fetch_buf_write(char *ptr, size_t sz, size_t nm, void *ud)
{
	struct fetch_buf *b = ud;
	size_t n = sz * nm;
	if (b->n + n > b->max) {
		b->over = true;
		return 0;
	}
	char *q = realloc(b->p, b->n + n + 1);
	if (!q)
		return 0;
	memcpy(q + b->n, ptr, n);
	b->p = q;
	b->n += n;
	b->p[b->n] = 0;
	return n;
}

long fetch_status_line(const char *p, size_t n)
{
	const char *sp;
	long v = 0;

	if (n < 5 || strncmp(p, "HTTP/", 5))
		return -1;
	sp = memchr(p, ' ', n);
	if (!sp)
		return 0;
	for (const char *q = sp + 1; q < p + n && q < sp + 4 && *q >= '0' && *q <= '9'; q++)
		v = v * 10 + (*q - '0');
	return v;
}

CURL *fetch_curl(const char *url, struct curl_slist *hdrs)
{
	CURL *c = curl_easy_init();
	if (!c)
		return NULL;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "kosa8/" KOSA8_VERSION);
	if (hdrs)
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	return c;
}

long fetch_mem(const char *url, struct curl_slist *hdrs, long timeout_s, struct fetch_buf *b,
	       struct k8_err *err)
{
	CURL *c = fetch_curl(url, hdrs);
	if (!c)
		return k8_err_set(err, -ENOMEM, "curl_easy_init failed");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fetch_buf_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
	CURLcode cc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	if (b->over)
		return k8_err_set(err, -EFBIG, "%s: the answer is over %zu bytes", url, b->max);
	if (cc != CURLE_OK)
		return k8_err_set(err, -EHOSTUNREACH, "%s: %s", url, curl_easy_strerror(cc));
	return status;
}

struct fetch_sink {
	int fd;
	uint64_t max, done;
	sha256_ctx md;
	long status;            /* of the answer being received (a redirect's is dropped) */
	bool over;
	int werr;               /* errno of a failed write */
};

static size_t sink_header(char *p, size_t sz, size_t nm, void *ud)
{
	struct fetch_sink *s = ud;
	size_t n = sz * nm;
	long st = fetch_status_line(p, n);
	if (st >= 0)
		s->status = st;   /* each response's, a redirect's too: the last one counts */
	return n;
}

static size_t sink_write(char *p, size_t sz, size_t nm, void *ud)
{
	struct fetch_sink *s = ud;
	size_t n = sz * nm;
	if (s->status != 200)
		return n;       /* an error page: read and dropped */
	if (s->done + n > s->max) {
		s->over = true;
		return 0;
	}
	if (write_full(s->fd, p, n) < 0) {
		s->werr = errno ? errno : EIO;
		return 0;
	}
	sha256_add(s->md, p, n);
	s->done += n;
	return n;
}

int fetch_file(const char *url, const char *what, int fd, uint64_t max, char sha_hex[65],
	       uint64_t *bytes, struct k8_err *err)
{
	struct fetch_sink s = { .fd = fd, .max = max };
	CURL *c = fetch_curl(url, NULL);
	if (!c)
		return k8_err_set(err, -ENOMEM, "curl_easy_init failed");
	s.md = sha256_begin();
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, sink_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	CURLcode cc = curl_easy_perform(c);
	curl_easy_cleanup(c);
	sha256_end(s.md, sha_hex);
	*bytes = s.done;
	if (s.over)
		return k8_err_set(err, -EFBIG, "%s (%s): more than %llu bytes; refused", what, url,
				  (unsigned long long)max);
	if (s.werr)
		return k8_err_set(err, -s.werr, "%s: writing it failed: %s", what, strerror(s.werr));
	if (s.status == 404)
		return k8_err_set(err, -ENOENT, "%s: %s answered 404 (not found)", what, url);
	if (s.status != 200 && s.status)
		return k8_err_set(err, -EPROTO, "%s: %s answered HTTP %ld", what, url, s.status);
	if (cc != CURLE_OK)
		return k8_err_set(err, -EHOSTUNREACH, "%s: %s: %s", what, url, curl_easy_strerror(cc));
	return 0;
}
