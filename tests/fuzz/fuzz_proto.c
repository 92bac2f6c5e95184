/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_proto.c - libFuzzer target: arbitrary bytes through the frame reader in chunk sizes
 * drawn from the input, each whole frame checked against the bytes it came from, and each
 * JSON frame parsed with json_loadb(JSON_REJECT_DUPLICATES) as kosa8d parses it, a HELLO's
 * protocol range read and a version picked from it.
 *
 * Input: 4 bytes that seed the chunking, then the byte stream. Any abort() below is a
 * reader bug (a frame that the header check should have refused, a payload that is not
 * the bytes on the wire, a feed that makes no progress), not just a sanitizer report. */
#include "common/proto.h"
#include "common/util.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t rnd(uint32_t *s)
{
	uint32_t x = *s;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *s = x;
}

static size_t chunk_size(uint32_t *s, unsigned mode, size_t left)
{
	size_t n;

	switch (mode) {
	case 0: n = 1 + rnd(s) % 16; break;               /* tiny reads: headers split */
	case 1: n = 1 + rnd(s) % 300; break;
	case 2: n = 1 + rnd(s) % 70000; break;            /* about what read() returns */
	default: n = left; break;                         /* everything at once */
	}
	return n < left ? n : left;
}

static int type_is_json(uint16_t t)
{
	return t == PROTO_HELLO || t == PROTO_REQ || t == PROTO_RESP || t == PROTO_EXIT ||
	       t == PROTO_EVENT;
}

/* A HELLO's version range, as kosa8d reads it: a range it accepts is well formed, and
 * the version picked from it lies in both ranges. */
static void check_hello(const json_t *j)
{
	unsigned lo = 0, hi = 0;
	int v;

	if (proto_hello_range(j, &lo, &hi) != 0)
		return;
	if (lo < 1 || lo > hi || hi > PROTO_VERSION_LIMIT)
		abort();
	v = proto_pick(PROTO_VERSION_MIN, PROTO_VERSION_MAX, lo, hi);
	if (v >= 0 && ((unsigned)v < lo || (unsigned)v > hi || v < PROTO_VERSION_MIN ||
		       v > PROTO_VERSION_MAX))
		abort();
	if (v < 0 && v != -EPROTONOSUPPORT)
		abort();
}

/* A frame completed when the reader had consumed `pos` bytes of `data`. */
static void check_frame(const struct proto_hdr *h, const unsigned char *p, const uint8_t *data,
			size_t pos)
{
	struct proto_hdr d;
	unsigned char enc[PROTO_HDR_LEN];

	if (proto_hdr_check(h) != 0 || h->len > PROTO_MAX_PAYLOAD)
		abort();
	if (pos < PROTO_HDR_LEN + (size_t)h->len)
		abort();
	/* the frame is exactly the last header + len bytes of the stream */
	proto_hdr_encode(h, enc);
	if (memcmp(enc, data + pos - h->len - PROTO_HDR_LEN, PROTO_HDR_LEN))
		abort();
	proto_hdr_decode(enc, &d);
	if (d.len != h->len || d.type != h->type || d.flags != h->flags || d.id != h->id)
		abort();
	if (h->len && memcmp(p, data + pos - h->len, h->len))
		abort();
	if (p[h->len] != '\0')
		abort();
	if (type_is_json(h->type)) {
		json_error_t e;
		json_t *j = json_loadb((const char *)p, h->len, JSON_REJECT_DUPLICATES, &e);
		if (j) {
			/* what the daemon does next: look a few fields up */
			(void)json_string_value(json_object_get(j, "op"));
			(void)json_integer_value(json_object_get(j, "code"));
			if (h->type == PROTO_HELLO)
				check_hello(j);
			json_decref(j);
		}
	} else if (h->type == PROTO_CREDIT || h->type == PROTO_SIGNAL) {
		if (h->len != 4)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_reader r;
	struct proto_hdr h;
	const unsigned char *p;
	uint32_t seed;
	unsigned mode;
	size_t pos = 0;

	if (size < 4)
		return 0;
	memcpy(&seed, data, 4);
	data += 4;
	size -= 4;
	mode = seed & 3;
	seed |= 1;
	proto_reader_init(&r);
	while (pos < size) {
		size_t n = chunk_size(&seed, mode, size - pos), fed = 0;

		/* the caller's loop: feed, take every whole frame, feed the rest */
		while (fed < n) {
			long u = proto_reader_feed(&r, data + pos, n - fed);
			int got = 0;

			if (u < 0) {
				if (u != -EPROTO || !r.broken)
					abort();
				goto broken;
			}
			if ((size_t)u > n - fed)
				abort();
			fed += (size_t)u;
			pos += (size_t)u;
			while (proto_reader_frame(&r, &h, &p)) {
				check_frame(&h, p, data, pos);
				got = 1;
			}
			if (u == 0 && !got)
				abort();        /* no progress: a caller would spin */
		}
	}
	if (r.broken)
		abort();
	proto_reader_free(&r);
	return 0;
broken:
	/* broken for good */
	if (proto_reader_frame(&r, &h, &p) != 0 || proto_reader_feed(&r, data, size) != -EPROTO)
		abort();
	proto_reader_free(&r);
	return 0;
}
