/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_http.c - libFuzzer target: arbitrary bytes as what a guest sends kosa8-broker (a
 * request head, then a chunked body) and as what an upstream answers (a response head,
 * then a chunked body with trailers), the body fed in pieces whose sizes the input picks.
 *
 * Any abort() below is a broken invariant: a head length past the input, headers beyond
 * the array or outside the buffer, a framer that consumed more than it was given or
 * returned different results for the same bytes split differently, a decoder whose data
 * differs between the two. */
#include "broker/http.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_msg(const struct http_msg *m, const char *buf, size_t len, int rc)
{
	if (rc <= 0)
		return;
	if ((size_t)rc > len || m->head_len != (size_t)rc || m->nh < 0 || m->nh > HTTP_MAX_HEADERS)
		abort();
	for (int i = 0; i < m->nh; i++) {
		const struct http_hdr *h = &m->h[i];
		if (h->name < buf || h->name + h->nlen > buf + rc || h->value < buf ||
		    h->value + h->vlen > buf + rc || h->nlen == 0)
			abort();
		if (memchr(h->value, '\r', h->vlen) || memchr(h->value, '\n', h->vlen))
			abort();
	}
}

/* The decoder (in place) consumes what the framer does and yields the same data bytes,
 * whole and in pieces, never more than it consumed. */
static void check_decode(const char *p, size_t n, bool trailers, const uint8_t *steps,
			 size_t ns, ssize_t framed)
{
	struct http_chunked a, b;
	const char *why;
	char *x = malloc(n + 1), *y = malloc(n + 1);
	size_t xn = 0, yn = 0, off = 0, k = 0;
	memcpy(x, p, n);
	memcpy(y, p, n);
	http_chunked_init(&a, trailers);
	ssize_t whole = http_chunked_decode(&a, x, n, &xn, &why);
	if (whole != framed || (whole >= 0 && xn > (size_t)whole))
		abort();
	http_chunked_init(&b, trailers);
	while (whole >= 0 && off < n && !b.done) {
		size_t step = ns ? (size_t)steps[k++ % ns] % 17 + 1 : 1, dn = 0;
		if (step > n - off)
			step = n - off;
		char *piece = malloc(step);
		memcpy(piece, p + off, step);
		ssize_t t = http_chunked_decode(&b, piece, step, &dn, &why);
		if (t < 0 || dn > (size_t)t) {
			free(piece);
			break;
		}
		memcpy(y + yn, piece, dn);
		yn += dn;
		off += (size_t)t;
		free(piece);
	}
	if (whole >= 0 && a.done && (!b.done || xn != yn || memcmp(x, y, xn)))
		abort();
	free(x);
	free(y);
}

/* The framer over the body, whole and in pieces of sizes taken from `steps`. */
static void check_chunked(const char *p, size_t n, bool trailers, const uint8_t *steps, size_t ns)
{
	struct http_chunked a, b;
	const char *why;
	http_chunked_init(&a, trailers);
	ssize_t whole = http_chunked_feed(&a, p, n, &why);
	if (whole > (ssize_t)n)
		abort();
	http_chunked_init(&b, trailers);
	size_t off = 0, k = 0;
	ssize_t err = 0;
	while (off < n && !b.done) {
		size_t step = ns ? (size_t)steps[k++ % ns] % 17 + 1 : 1;
		if (step > n - off)
			step = n - off;
		ssize_t t = http_chunked_feed(&b, p + off, step, &why);
		if (t < 0) {
			err = -1;
			break;
		}
		if ((size_t)t > step || (!b.done && (size_t)t != step))
			abort();
		off += (size_t)t;
	}
	if ((whole < 0) != (err < 0))
		abort();
	if (whole >= 0 && (a.done != b.done || (a.done && (size_t)whole != off)))
		abort();
	check_decode(p, n, trailers, steps, ns, whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t ns = data[0] % 8;
	if (ns + 1 > size)
		return 0;
	const uint8_t *steps = data + 1;
	const char *buf = (const char *)data + 1 + ns;
	size_t len = size - 1 - ns;
	struct http_msg *m = malloc(sizeof(*m));
	const char *why = NULL;

	int rc = http_parse_request(buf, len, m, &why);
	if (rc < 0 && !why)
		abort();
	check_msg(m, buf, len, rc);
	if (rc > 0) {
		if (m->host < 0 || m->host >= m->nh)
			abort();
		check_chunked(buf + rc, len - (size_t)rc, false, steps, ns);
	}
	rc = http_parse_response(buf, len, "GET", 3, m, &why);
	check_msg(m, buf, len, rc);
	if (rc > 0 && (http_encoded(m) < -1 || http_encoded(m) >= m->nh))
		abort();
	if (rc > 0)
		check_chunked(buf + rc, len - (size_t)rc, true, steps, ns);
	check_chunked(buf, len, false, steps, ns);
	free(m);
	return 0;
}
