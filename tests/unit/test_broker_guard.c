/* SPDX-License-Identifier: Apache-2.0 */
/* test_broker_guard.c - the broker's reflected-key guard (src/broker/guard.c) fed a body
 * the way proxy.c feeds it: in pieces of every size, the held bytes kept in front of the
 * next piece. A key cut by any boundary is caught, and none of it (not its first half)
 * is passed on before; a body without the key passes whole, in order; a tail that only
 * looks like the key's start is held until the body ends, then passed. Also the chunked
 * decoder the guard reads chunked bodies through, and the Content-Encoding check. */
#include "broker/broker.h"
#include "t.h"

#include <stdlib.h>

static const char KEY[] = "sk-REAL-guard-0123456789";

/* Feed `body` in pieces of `step` bytes; out gets what was passed on. Returns 1 when the
 * guard cut the body off, 0 when it passed to the end. */
static int feed(const char *body, size_t step, char *out, size_t *outn)
{
	char buf[4096];
	size_t held = 0, len = strlen(body), off = 0;

	*outn = 0;
	while (off < len || held) {
		size_t n = len - off < step ? len - off : step;
		memcpy(buf + held, body + off, n);
		off += n;
		ssize_t pass = guard_pass(KEY, strlen(KEY), buf, held + n, off == len);
		if (pass < 0)
			return 1;
		memcpy(out + *outn, buf, (size_t)pass);
		*outn += (size_t)pass;
		held = held + n - (size_t)pass;
		memmove(buf, buf + pass, held);
		if (off == len && held == 0)
			break;
		CHECK(held < strlen(KEY));
	}
	return 0;
}

static void test_every_cut(void)
{
	char body[512], out[512];
	size_t outn, klen = strlen(KEY);

	snprintf(body, sizeof(body), "{\"headers\": {\"X-Api-Key\": \"%s\", \"a\": 1}}", KEY);
	size_t at = (size_t)(strstr(body, KEY) - body);
	for (size_t step = 1; step <= strlen(body); step++) {
		int cut = feed(body, step, out, &outn);
		CHECK(cut);
		/* nothing of the key went out: at most the bytes before it */
		CHECK(outn <= at);
		CHECK(memmem(out, outn, KEY, 1) == NULL || outn < at + 1);
		CHECK(memcmp(out, body, outn) == 0);
	}
	/* the key ending exactly at the body's end, and starting it */
	snprintf(body, sizeof(body), "xx%s", KEY);
	for (size_t step = 1; step <= strlen(body); step++)
		CHECK(feed(body, step, out, &outn) && outn <= 2);
	for (size_t step = 1; step <= klen; step++)
		CHECK(feed(KEY, step, out, &outn) && outn == 0);
}

static void test_no_key_passes_whole(void)
{
	char body[512], out[512];
	size_t outn, klen = strlen(KEY);

	/* a body holding only starts of the key (longer and longer), then ending in one */
	size_t bl = 0;
	for (size_t l = 1; l < klen; l++) {
		memcpy(body + bl, KEY, l);
		bl += l;
		body[bl++] = '|';
	}
	memcpy(body + bl, KEY, klen - 1);
	body[bl + klen - 1] = '\0';
	for (size_t step = 1; step <= strlen(body); step++) {
		CHECK(feed(body, step, out, &outn) == 0);
		CHECK(outn == strlen(body) && memcmp(out, body, outn) == 0);
	}
	/* no key (klen 0): everything, nothing held */
	CHECK_EQ_INT(guard_pass("", 0, "sk-", 3, false), 3);
	/* the held tail is only the part that could still be the key */
	CHECK_EQ_INT(guard_pass(KEY, klen, "data: sk-RE", 11, false), 6);
	CHECK_EQ_INT(guard_pass(KEY, klen, "data: sk-RE", 11, true), 11);
	CHECK_EQ_INT(guard_pass(KEY, klen, "data: x\n\n", 9, false), 9);
	CHECK_EQ_INT(guard_pass(KEY, klen, "s", 1, false), 0);
}

static void test_chunked_decode(void)
{
	struct http_chunked ch;
	const char *why = NULL;
	char b[] = "5;ext=1\r\nsk-RE\r\n13\r\nAL-guard-0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
	size_t dn = 0;

	http_chunked_init(&ch, true);
	ssize_t t = http_chunked_decode(&ch, b, strlen(b), &dn, &why);
	CHECK(ch.done);
	CHECK_EQ_INT(t, (long)strlen(b) - 4);
	CHECK(dn == strlen(KEY) && !memcmp(b, KEY, dn));
	/* byte by byte, in place */
	char c[] = "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
	char data[16];
	size_t total = 0;
	http_chunked_init(&ch, true);
	for (size_t i = 0; i < strlen(c) && !ch.done; i++) {
		char one = c[i];
		CHECK_EQ_INT(http_chunked_decode(&ch, &one, 1, &dn, &why), 1);
		if (dn)
			data[total++] = one;
	}
	CHECK(ch.done && total == 5 && !memcmp(data, "abcde", 5));
}

static void test_content_encoding(void)
{
	static const struct { const char *head; int encoded; } cases[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", -1 },
		{ "HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\nContent-Length: 1\r\n\r\n", -1 },
		{ "HTTP/1.1 200 OK\r\nContent-Encoding: IDENTITY , identity\r\n\r\n", -1 },
		{ "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 1\r\n\r\n", 0 },
		{ "HTTP/1.1 200 OK\r\nA: b\r\nContent-Encoding: identity, br\r\n\r\n", 1 },
		{ "HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\nContent-Encoding: x\r\n\r\n", 1 },
		{ "HTTP/1.1 200 OK\r\nContent-Encoding: identityx\r\n\r\n", 0 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct http_msg m;
		const char *why = NULL;
		CHECK(http_parse_response(cases[i].head, strlen(cases[i].head), "GET", 3, &m, &why) > 0);
		CHECK_EQ_INT(http_encoded(&m), cases[i].encoded);
	}
}

int main(void)
{
	test_every_cut();
	test_no_key_passes_whole();
	test_chunked_decode();
	test_content_encoding();
	return T_DONE();
}
