/* SPDX-License-Identifier: Apache-2.0 */
/* fetch.h - HTTP(S) GETs for kosa8d's downloads (the model hub, the release's guest
 * image): one libcurl setup, answers kept in memory under a cap or streamed into a file
 * under a cap while hashed. Mechanism: no daemon state. */
#ifndef K8_DAEMON_FETCH_H
#define K8_DAEMON_FETCH_H

#include "common/util.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

/* A GET's body in memory: at most `max` bytes (set it), NUL-terminated; `over` when the
 * answer was longer (the transfer stopped there). */
struct fetch_buf {
	char *p;
	size_t n, max;
	bool over;
};
/* libcurl's write callback for a struct fetch_buf. */
size_t fetch_buf_write(char *ptr, size_t sz, size_t nm, void *ud);

/* The status of a response's first line as libcurl's header callback hands it over (not
 * NUL-terminated: read within n only): "HTTP/1.1 200 OK\r\n" gives 200; -1 for any
 * other header line, 0 for a status line without a number. */
long fetch_status_line(const char *p, size_t n);

/* An easy handle for url: http and https only (redirects too, at most 5), connect
 * timeout 30 s, aborted below 1 byte/s for 60 s, kosa8's user agent, `hdrs` (may be NULL).
 * NULL when libcurl is out of memory. */
CURL *fetch_curl(const char *url, struct curl_slist *hdrs);

/* GET url into b (b->max set by the caller; b->p is the caller's to free). The HTTP status,
 * or -errno with a message: -EFBIG past b->max, -EHOSTUNREACH when no answer came. */
long fetch_mem(const char *url, struct curl_slist *hdrs, long timeout_s, struct fetch_buf *b,
	       struct k8_err *err);

/* GET url into fd (from its current offset) and hash it: at most `max` bytes, refused
 * past that. On success (HTTP 200) 0 with the SHA-256 in sha_hex and the length in *bytes;
 * else -errno with a message naming `what`: -ENOENT (404), -EPROTO (another status),
 * -EFBIG (past max), -EHOSTUNREACH (no answer or cut off), -EIO (a write failed). */
int fetch_file(const char *url, const char *what, int fd, uint64_t max, char sha_hex[65],
	       uint64_t *bytes, struct k8_err *err);

#endif
