/* SPDX-License-Identifier: Apache-2.0 */
/* test_proto.c - the wire protocol (src/common/proto.c): header encoding, header checks,
 * the incremental reader over every way a stream can be split, frame building, writing. */
#include "common/proto.h"
#include "common/util.h"
#include "t.h"

#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>

/* ---- helpers ---- */

struct frame {
	uint16_t type, flags;
	uint32_t id;
	const char *data;
	size_t len;
};

/* A stream of frames covering the interesting shapes: JSON, raw data with NUL bytes,
 * zero-length payloads (with and without EOF), fixed-size CREDIT and SIGNAL, PING. */
static const unsigned char credit[4] = { 0x00, 0x00, 0x04, 0x00 };   /* 262144 */
static const unsigned char sig[4] = { 15, 0, 0, 0 };
static const struct frame frames[] = {
	{ PROTO_HELLO, 0, 0, "{\"proto\":1,\"agent\":\"0.1\"}", 25 },
	{ PROTO_REQ, 0, 7, "{\"op\":\"stat\"}", 13 },
	{ PROTO_STDOUT, 0, 7, "a\0b\nc", 5 },
	{ PROTO_STDIN, PROTO_F_EOF, 7, "", 0 },
	{ PROTO_CREDIT, 0, 7, (const char *)credit, 4 },
	{ PROTO_STDERR, PROTO_F_EOF, 0xffffffffu, "", 0 },
	{ PROTO_PING, 0, 1, "12345678", 8 },
	{ PROTO_SIGNAL, 0, 7, (const char *)sig, 4 },
	{ PROTO_EXIT, 0, 7, "{\"code\":0}", 10 },
};
#define NFRAMES ARRAY_SIZE(frames)

static unsigned char *build_stream(size_t *n)
{
	unsigned char *buf = NULL;
	size_t len = 0;

	for (size_t i = 0; i < NFRAMES; i++) {
		size_t fl;
		unsigned char *f = proto_frame_new(frames[i].type, frames[i].flags, frames[i].id,
						   frames[i].data, frames[i].len, &fl);
		buf = realloc(buf, len + fl);
		memcpy(buf + len, f, fl);
		len += fl;
		free(f);
	}
	*n = len;
	return buf;
}

struct got {
	size_t n;               /* frames taken */
	bool mismatch;
	bool err;
};

static void take_frames(struct proto_reader *r, struct got *g)
{
	struct proto_hdr h;
	const unsigned char *p;

	while (proto_reader_frame(r, &h, &p)) {
		if (g->n >= NFRAMES) {
			g->mismatch = true;
			continue;
		}
		const struct frame *f = &frames[g->n++];
		if (h.type != f->type || h.flags != f->flags || h.id != f->id || h.len != f->len ||
		    memcmp(p, f->data, f->len) || p[h.len] != '\0')
			g->mismatch = true;
	}
}

/* Feed buf[0..n) the way a read() loop does: the reader may stop after each frame. */
static void feed_all(struct proto_reader *r, const unsigned char *buf, size_t n, struct got *g)
{
	size_t off = 0;
	int stuck = 0;

	while (off < n) {
		long used = proto_reader_feed(r, buf + off, n - off);
		if (used < 0) {
			g->err = true;
			return;
		}
		off += (size_t)used;
		take_frames(r, g);
		if (used == 0 && ++stuck > 2) {  /* no progress even after taking frames */
			g->err = true;
			return;
		}
		if (used)
			stuck = 0;
	}
	take_frames(r, g);
}

/* ---- tests ---- */

static void test_hdr_roundtrip(void)
{
	struct proto_hdr h = { .len = 0x01020304, .type = 0x0506, .flags = 0x0708, .id = 0x090a0b0c };
	struct proto_hdr d;
	unsigned char b[PROTO_HDR_LEN];
	static const unsigned char want[PROTO_HDR_LEN] = {
		0x04, 0x03, 0x02, 0x01, 0x06, 0x05, 0x08, 0x07, 0x0c, 0x0b, 0x0a, 0x09,
	};

	proto_hdr_encode(&h, b);
	CHECK(!memcmp(b, want, sizeof(want)));          /* little endian, field order */
	proto_hdr_decode(b, &d);
	CHECK(d.len == h.len && d.type == h.type && d.flags == h.flags && d.id == h.id);

	struct proto_hdr m = { .len = 0xffffffffu, .type = 0xffff, .flags = 0xffff, .id = 0xffffffffu };
	proto_hdr_encode(&m, b);
	proto_hdr_decode(b, &d);
	CHECK(d.len == m.len && d.type == m.type && d.flags == m.flags && d.id == m.id);
	struct proto_hdr z = { 0 };
	proto_hdr_encode(&z, b);
	proto_hdr_decode(b, &d);
	CHECK(d.len == 0 && d.type == 0 && d.flags == 0 && d.id == 0);
}

static int check(uint32_t len, uint16_t type, uint16_t flags)
{
	struct proto_hdr h = { .len = len, .type = type, .flags = flags, .id = 1 };
	return proto_hdr_check(&h);
}

static void test_hdr_check(void)
{
	/* every known type with a plausible length is accepted */
	CHECK_EQ_INT(check(10, PROTO_HELLO, 0), 0);
	CHECK_EQ_INT(check(10, PROTO_REQ, 0), 0);
	CHECK_EQ_INT(check(10, PROTO_RESP, 0), 0);
	CHECK_EQ_INT(check(10, PROTO_STDIN, PROTO_F_EOF), 0);
	CHECK_EQ_INT(check(10, PROTO_STDOUT, 0), 0);
	CHECK_EQ_INT(check(10, PROTO_STDERR, PROTO_F_EOF), 0);
	CHECK_EQ_INT(check(4, PROTO_CREDIT, 0), 0);
	CHECK_EQ_INT(check(10, PROTO_EXIT, 0), 0);
	CHECK_EQ_INT(check(10, PROTO_EVENT, 0), 0);
	CHECK_EQ_INT(check(10, PROTO_PING, 0), 0);
	CHECK_EQ_INT(check(10, PROTO_PONG, 0), 0);
	CHECK_EQ_INT(check(4, PROTO_SIGNAL, 0), 0);
	/* zero-length payloads */
	CHECK_EQ_INT(check(0, PROTO_STDIN, PROTO_F_EOF), 0);
	CHECK_EQ_INT(check(0, PROTO_PING, 0), 0);
	CHECK_EQ_INT(check(0, PROTO_REQ, 0), 0);
	/* unknown types */
	CHECK_EQ_INT(check(0, 0, 0), -EPROTO);
	CHECK_EQ_INT(check(0, PROTO_TYPE_MAX, 0), -EPROTO);
	CHECK_EQ_INT(check(0, 0x100 | PROTO_REQ, 0), -EPROTO);
	CHECK_EQ_INT(check(0, 0xffff, 0), -EPROTO);
	/* unknown flags */
	CHECK_EQ_INT(check(1, PROTO_STDOUT, 0x0002), -EPROTO);
	CHECK_EQ_INT(check(1, PROTO_STDOUT, 0x8000), -EPROTO);
	CHECK_EQ_INT(check(1, PROTO_STDOUT, 0xffff), -EPROTO);
	/* oversize */
	CHECK_EQ_INT(check(PROTO_MAX_PAYLOAD, PROTO_STDOUT, 0), 0);
	CHECK_EQ_INT(check(PROTO_MAX_PAYLOAD + 1, PROTO_STDOUT, 0), -EPROTO);
	CHECK_EQ_INT(check(PROTO_MAX_PAYLOAD + 1, PROTO_STDIN, 0), -EPROTO);
	CHECK_EQ_INT(check(0xffffffffu, PROTO_STDERR, 0), -EPROTO);
	/* JSON frames have the smaller cap, data frames do not */
	CHECK_EQ_INT(check(PROTO_MAX_JSON, PROTO_REQ, 0), 0);
	CHECK_EQ_INT(check(PROTO_MAX_JSON + 1, PROTO_REQ, 0), -EPROTO);
	CHECK_EQ_INT(check(PROTO_MAX_JSON + 1, PROTO_RESP, 0), -EPROTO);
	CHECK_EQ_INT(check(PROTO_MAX_JSON + 1, PROTO_HELLO, 0), -EPROTO);
	CHECK_EQ_INT(check(PROTO_MAX_JSON + 1, PROTO_EXIT, 0), -EPROTO);
	CHECK_EQ_INT(check(PROTO_MAX_JSON + 1, PROTO_EVENT, 0), -EPROTO);
	CHECK_EQ_INT(check(PROTO_MAX_JSON + 1, PROTO_STDOUT, 0), 0);
	/* CREDIT and SIGNAL carry exactly a u32 */
	CHECK_EQ_INT(check(0, PROTO_CREDIT, 0), -EPROTO);
	CHECK_EQ_INT(check(3, PROTO_CREDIT, 0), -EPROTO);
	CHECK_EQ_INT(check(5, PROTO_CREDIT, 0), -EPROTO);
	CHECK_EQ_INT(check(8, PROTO_CREDIT, 0), -EPROTO);
	CHECK_EQ_INT(check(0, PROTO_SIGNAL, 0), -EPROTO);
	CHECK_EQ_INT(check(5, PROTO_SIGNAL, 0), -EPROTO);
	/* PING/PONG at most 64 bytes */
	CHECK_EQ_INT(check(64, PROTO_PING, 0), 0);
	CHECK_EQ_INT(check(65, PROTO_PING, 0), -EPROTO);
	CHECK_EQ_INT(check(65, PROTO_PONG, 0), -EPROTO);

	CHECK_STR(proto_type_name(PROTO_REQ), "REQ");
	CHECK_STR(proto_type_name(PROTO_SIGNAL), "SIGNAL");
	CHECK_STR(proto_type_name(0), "?");
	CHECK_STR(proto_type_name(PROTO_TYPE_MAX), "?");
	CHECK_STR(proto_type_name(0xffff), "?");
}

static void test_frame_new(void)
{
	size_t n;
	unsigned char *f = proto_frame_new(PROTO_REQ, 0, 42, "{}", 2, &n);
	struct proto_hdr h;

	CHECK_EQ_INT(n, PROTO_HDR_LEN + 2);
	proto_hdr_decode(f, &h);
	CHECK(h.len == 2 && h.type == PROTO_REQ && h.flags == 0 && h.id == 42);
	CHECK(!memcmp(f + PROTO_HDR_LEN, "{}", 2));
	free(f);
	f = proto_frame_new(PROTO_STDIN, PROTO_F_EOF, 3, NULL, 0, &n);
	CHECK_EQ_INT(n, PROTO_HDR_LEN);
	proto_hdr_decode(f, &h);
	CHECK(h.len == 0 && h.type == PROTO_STDIN && h.flags == PROTO_F_EOF && h.id == 3);
	free(f);
}

static void test_reader_whole(void)
{
	struct proto_reader r;
	struct got g = { 0 };
	size_t n;
	cleanup_free unsigned char *s = build_stream(&n);

	/* all frames in one buffer: the reader stops after each one, the caller loops */
	proto_reader_init(&r);
	long used = proto_reader_feed(&r, s, n);
	CHECK(used > 0 && (size_t)used == PROTO_HDR_LEN + frames[0].len);
	/* a completed frame that was not taken yet: nothing more is consumed */
	CHECK_EQ_INT(proto_reader_feed(&r, s + used, n - (size_t)used), 0);
	feed_all(&r, s + used, n - (size_t)used, &g);
	CHECK(!g.err && !g.mismatch);
	CHECK_EQ_INT(g.n, NFRAMES);     /* frame 0, left in the reader, is taken first */
	proto_reader_free(&r);

	memset(&g, 0, sizeof(g));
	proto_reader_init(&r);
	feed_all(&r, s, n, &g);
	CHECK(!g.err && !g.mismatch);
	CHECK_EQ_INT(g.n, NFRAMES);
	/* nothing pending afterwards; feeding nothing is a no-op */
	struct proto_hdr h;
	const unsigned char *p;
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 0);
	CHECK_EQ_INT(proto_reader_feed(&r, s, 0), 0);
	/* and the reader is reusable for a second copy of the stream */
	g.n = 0;
	feed_all(&r, s, n, &g);
	CHECK(!g.err && !g.mismatch && g.n == NFRAMES);
	proto_reader_free(&r);
	proto_reader_free(&r);                  /* twice is harmless */
}

static void test_reader_splits(void)
{
	size_t n;
	cleanup_free unsigned char *s = build_stream(&n);
	int bad2 = 0, bad3 = 0;

	/* split once at every byte boundary */
	for (size_t k = 0; k <= n; k++) {
		struct proto_reader r;
		struct got g = { 0 };
		proto_reader_init(&r);
		feed_all(&r, s, k, &g);
		feed_all(&r, s + k, n - k, &g);
		if (g.err || g.mismatch || g.n != NFRAMES)
			bad2++;
		proto_reader_free(&r);
	}
	CHECK_EQ_INT(bad2, 0);
	/* split twice, at every pair of boundaries */
	for (size_t a = 0; a <= n; a += 1)
		for (size_t b = a; b <= n; b += 3) {
			struct proto_reader r;
			struct got g = { 0 };
			proto_reader_init(&r);
			feed_all(&r, s, a, &g);
			feed_all(&r, s + a, b - a, &g);
			feed_all(&r, s + b, n - b, &g);
			if (g.err || g.mismatch || g.n != NFRAMES)
				bad3++;
			proto_reader_free(&r);
		}
	CHECK_EQ_INT(bad3, 0);
	/* one byte at a time */
	struct proto_reader r;
	struct got g = { 0 };
	proto_reader_init(&r);
	for (size_t i = 0; i < n; i++)
		feed_all(&r, s + i, 1, &g);
	CHECK(!g.err && !g.mismatch);
	CHECK_EQ_INT(g.n, NFRAMES);
	proto_reader_free(&r);
}

static void test_reader_broken(void)
{
	struct proto_reader r;
	struct got g = { 0 };
	unsigned char bad[PROTO_HDR_LEN];
	struct proto_hdr h = { .len = 4, .type = PROTO_CREDIT, .flags = 0x4, .id = 7 };
	size_t n;
	cleanup_free unsigned char *s = build_stream(&n);
	cleanup_free unsigned char *buf = xmalloc(n + 2 * PROTO_HDR_LEN);
	size_t first = PROTO_HDR_LEN + frames[0].len;
	const unsigned char *p;
	struct proto_hdr out;

	/* a good frame, then a header with an unknown flag, then more good frames */
	proto_hdr_encode(&h, bad);
	memcpy(buf, s, first);
	memcpy(buf + first, bad, PROTO_HDR_LEN);
	memcpy(buf + first + PROTO_HDR_LEN, s + first, n - first);
	proto_reader_init(&r);
	feed_all(&r, buf, n + PROTO_HDR_LEN, &g);
	CHECK(g.err);
	CHECK_EQ_INT(g.n, 1);
	CHECK(r.broken);
	/* broken for good: no frame, every feed fails, also of good bytes */
	CHECK_EQ_INT(proto_reader_frame(&r, &out, &p), 0);
	CHECK_EQ_INT(proto_reader_feed(&r, s, n), -EPROTO);
	CHECK_EQ_INT(proto_reader_feed(&r, s, 0), -EPROTO);
	proto_reader_free(&r);

	/* the bad header split across feeds is detected when its last byte arrives */
	proto_reader_init(&r);
	CHECK_EQ_INT(proto_reader_feed(&r, bad, 5), 5);
	CHECK(!r.broken);
	CHECK_EQ_INT(proto_reader_feed(&r, bad + 5, PROTO_HDR_LEN - 5), -EPROTO);
	proto_reader_free(&r);

	/* oversized len: rejected before any payload byte is taken */
	h = (struct proto_hdr){ .len = PROTO_MAX_PAYLOAD + 1, .type = PROTO_STDOUT, .id = 1 };
	proto_hdr_encode(&h, bad);
	proto_reader_init(&r);
	CHECK_EQ_INT(proto_reader_feed(&r, bad, PROTO_HDR_LEN), -EPROTO);
	proto_reader_free(&r);
	/* JSON frame over the JSON cap */
	h = (struct proto_hdr){ .len = PROTO_MAX_JSON + 1, .type = PROTO_RESP, .id = 1 };
	proto_hdr_encode(&h, bad);
	proto_reader_init(&r);
	CHECK_EQ_INT(proto_reader_feed(&r, bad, PROTO_HDR_LEN), -EPROTO);
	proto_reader_free(&r);
	/* CREDIT with 8 bytes */
	h = (struct proto_hdr){ .len = 8, .type = PROTO_CREDIT, .id = 1 };
	proto_hdr_encode(&h, bad);
	proto_reader_init(&r);
	CHECK_EQ_INT(proto_reader_feed(&r, bad, PROTO_HDR_LEN), -EPROTO);
	proto_reader_free(&r);
	/* unknown type */
	h = (struct proto_hdr){ .len = 0, .type = 0, .id = 1 };
	proto_hdr_encode(&h, bad);
	proto_reader_init(&r);
	CHECK_EQ_INT(proto_reader_feed(&r, bad, PROTO_HDR_LEN), -EPROTO);
	proto_reader_free(&r);
}

static void test_reader_zero_and_max(void)
{
	struct proto_reader r;
	struct proto_hdr h;
	const unsigned char *p;
	size_t n;
	unsigned char *f;

	/* a zero-length frame completes on its header alone */
	f = proto_frame_new(PROTO_STDOUT, PROTO_F_EOF, 9, NULL, 0, &n);
	proto_reader_init(&r);
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 0);
	CHECK_EQ_INT(proto_reader_feed(&r, f, n), PROTO_HDR_LEN);
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 1);
	CHECK(h.len == 0 && h.type == PROTO_STDOUT && h.flags == PROTO_F_EOF && h.id == 9);
	CHECK(p && p[0] == '\0');
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 0);       /* taken once only */
	/* two zero-length frames back to back */
	unsigned char two[2 * PROTO_HDR_LEN];
	memcpy(two, f, PROTO_HDR_LEN);
	memcpy(two + PROTO_HDR_LEN, f, PROTO_HDR_LEN);
	CHECK_EQ_INT(proto_reader_feed(&r, two, sizeof(two)), PROTO_HDR_LEN);
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 1);
	CHECK_EQ_INT(proto_reader_feed(&r, two + PROTO_HDR_LEN, PROTO_HDR_LEN), PROTO_HDR_LEN);
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 1);
	free(f);

	/* the largest frame, payload NUL-terminated after it */
	unsigned char *big = xmalloc(PROTO_MAX_PAYLOAD);
	for (size_t i = 0; i < PROTO_MAX_PAYLOAD; i++)
		big[i] = (unsigned char)(i * 7 + 1);
	f = proto_frame_new(PROTO_STDERR, 0, 5, big, PROTO_MAX_PAYLOAD, &n);
	CHECK_EQ_INT(proto_reader_feed(&r, f, 100), 100);
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 0);       /* not complete yet */
	CHECK_EQ_INT(proto_reader_feed(&r, f + 100, n - 100), (long)(n - 100));
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 1);
	CHECK(h.len == PROTO_MAX_PAYLOAD && !memcmp(p, big, PROTO_MAX_PAYLOAD) &&
	      p[PROTO_MAX_PAYLOAD] == '\0');
	free(f);
	free(big);
	proto_reader_free(&r);
}

static void test_write(void)
{
	int sv[2];
	struct proto_reader r;
	struct proto_hdr h;
	const unsigned char *p;
	unsigned char buf[4096];
	size_t off = 0;
	ssize_t n;

	CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	CHECK_EQ_INT(proto_write(sv[0], PROTO_RESP, 0, 11, "{\"ok\":true}", 11), 0);
	CHECK_EQ_INT(proto_write(sv[0], PROTO_STDIN, PROTO_F_EOF, 11, NULL, 0), 0);
	CHECK_EQ_INT(proto_write(sv[0], PROTO_STDOUT, 0, 11, "x", PROTO_MAX_PAYLOAD + 1),
		     -EMSGSIZE);
	close(sv[0]);
	while ((n = read(sv[1], buf + off, sizeof(buf) - off)) > 0)
		off += (size_t)n;
	close(sv[1]);
	CHECK_EQ_INT(off, 2 * PROTO_HDR_LEN + 11);
	proto_reader_init(&r);
	CHECK_EQ_INT(proto_reader_feed(&r, buf, off), PROTO_HDR_LEN + 11);
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 1);
	CHECK(h.type == PROTO_RESP && h.id == 11 && h.len == 11 && !strcmp((const char *)p,
	      "{\"ok\":true}"));
	CHECK_EQ_INT(proto_reader_feed(&r, buf + PROTO_HDR_LEN + 11, PROTO_HDR_LEN), PROTO_HDR_LEN);
	CHECK_EQ_INT(proto_reader_frame(&r, &h, &p), 1);
	CHECK(h.type == PROTO_STDIN && h.flags == PROTO_F_EOF && h.len == 0);
	proto_reader_free(&r);
	/* a write error is reported */
	CHECK_EQ_INT(proto_write(-1, PROTO_PING, 0, 1, "", 0), -EBADF);
}

int main(void)
{
	test_hdr_roundtrip();
	test_hdr_check();
	test_frame_new();
	test_reader_whole();
	test_reader_splits();
	test_reader_broken();
	test_reader_zero_and_max();
	test_write();
	return T_DONE();
}
