/* SPDX-License-Identifier: Apache-2.0 */
/* http.h - a strict, bounded HTTP/1.1 message-head parser and an incremental chunked-body
 * framer for kosa8-broker. Pure functions over caller buffers: no allocation, no I/O.
 *
 * Every byte comes from a hostile guest (requests) or a remote server (responses). The
 * parser refuses what a lenient peer might read differently (request smuggling): bare CR
 * or LF, obs-fold, whitespace before a colon, both Content-Length and Transfer-Encoding,
 * repeated framing headers, a Transfer-Encoding other than "chunked", bad chunk sizes. */
#ifndef K8_BROKER_HTTP_H
#define K8_BROKER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HTTP_MAX_HEAD (64 << 10)        /* request or response line plus headers */
#define HTTP_MAX_HEADERS 100

enum http_body { HTTP_BODY_NONE, HTTP_BODY_LENGTH, HTTP_BODY_CHUNKED, HTTP_BODY_CLOSE };

struct http_hdr {
	const char *name, *value;       /* into the caller's buffer, not NUL-terminated */
	size_t nlen, vlen;              /* value without leading/trailing whitespace */
};

struct http_msg {
	/* request: method and target; response: status and reason */
	const char *method, *target;
	size_t mlen, tlen;
	int status;
	int minor;                      /* HTTP/1.<minor>: 0 or 1 */
	struct http_hdr h[HTTP_MAX_HEADERS];
	int nh;
	size_t head_len;                /* bytes up to and including the blank line */
	enum http_body body;
	uint64_t clen;                  /* HTTP_BODY_LENGTH */
	bool keep_alive;                /* after this message (Connection, version) */
	bool expect_continue;           /* request: "Expect: 100-continue" */
	int host;                       /* request: index of the one Host header */
};

/* Parse a request head at the start of buf[0..len). Returns the head's length (> 0), 0 when
 * more bytes are needed (and len < HTTP_MAX_HEAD), or the negative HTTP status to answer
 * with (-400, -417, -431, -501, -505), with *why a static message saying what is wrong. */
int http_parse_request(const char *buf, size_t len, struct http_msg *m, const char **why);

/* Parse a response head to a request with method `method` (HEAD has no body). Same
 * returns; a malformed response is -502. */
int http_parse_response(const char *buf, size_t len, const char *method, size_t mlen,
			struct http_msg *m, const char **why);

/* Case-insensitive header lookup: index of the first header named `name`, or -1. */
int http_find(const struct http_msg *m, const char *name);
bool http_name_is(const struct http_hdr *h, const char *name);

/* Chunked body framing, fed with the bytes as they arrive. The bytes themselves pass
 * through untouched; this only finds where the body ends and checks its syntax. */
struct http_chunked {
	int st;
	uint64_t left;                  /* data bytes left in the current chunk */
	unsigned ndig;                  /* hex digits of the current size */
	size_t linelen;                 /* bytes of the current size or trailer line */
	bool allow_trailers;            /* responses: trailer fields are skipped over */
	bool done;
};

void http_chunked_init(struct http_chunked *c, bool allow_trailers);
/* Consume up to n bytes. Returns how many belong to the body (n, or fewer when the body
 * ended inside p; then c->done is set), or -1 on a syntax error with *why set. */
ssize_t http_chunked_feed(struct http_chunked *c, const char *p, size_t n, const char **why);
/* The same, and the chunks' data bytes are moved to the front of p (in place: framing,
 * extensions and trailers dropped), *dlen of them. */
ssize_t http_chunked_decode(struct http_chunked *c, char *p, size_t n, size_t *dlen,
			    const char **why);

/* A message whose body is encoded (Content-Encoding other than "identity"): the index of
 * that header, else -1. */
int http_encoded(const struct http_msg *m);

#endif
