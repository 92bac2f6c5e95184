/* SPDX-License-Identifier: Apache-2.0 */
/* proto.c - frame encoding, validation and the incremental reader (see proto.h). */
#include "proto.h"
#include "util.h"

#include <endian.h>
#include <jansson.h>
#include <string.h>
#include <sys/uio.h>

/* The header's fields are little-endian (docs/protocol.md), at any alignment. */
static void put16(unsigned char *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, sizeof(v));
}

static void put32(unsigned char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static uint16_t get16(const unsigned char *p)
{
	uint16_t v;
	memcpy(&v, p, sizeof(v));
	return le16toh(v);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

void proto_hdr_encode(const struct proto_hdr *h, unsigned char out[PROTO_HDR_LEN])
{
	put32(out, h->len);
	put16(out + 4, h->type);
	put16(out + 6, h->flags);
	put32(out + 8, h->id);
}

void proto_hdr_decode(const unsigned char in[PROTO_HDR_LEN], struct proto_hdr *h)
{
	h->len = get32(in);
	h->type = get16(in + 4);
	h->flags = get16(in + 6);
	h->id = get32(in + 8);
}

static int type_is_json(uint16_t t)
{
	return t == PROTO_HELLO || t == PROTO_REQ || t == PROTO_RESP || t == PROTO_EXIT ||
	       t == PROTO_EVENT;
}

int proto_hdr_check(const struct proto_hdr *h)
{
	if (h->type == 0 || h->type >= PROTO_TYPE_MAX)
		return -EPROTO;
	if (h->flags & ~PROTO_F_EOF)
		return -EPROTO;
	if (h->len > PROTO_MAX_PAYLOAD)
		return -EPROTO;
	if (type_is_json(h->type) && h->len > PROTO_MAX_JSON)
		return -EPROTO;
	if ((h->type == PROTO_CREDIT || h->type == PROTO_SIGNAL) && h->len != 4)
		return -EPROTO;
	if (h->type == PROTO_PING || h->type == PROTO_PONG) {
		if (h->len > 64)
			return -EPROTO;
	}
	return 0;
}

const char *proto_type_name(uint16_t type)
{
	static const char *const names[PROTO_TYPE_MAX] = {
		[PROTO_HELLO] = "HELLO", [PROTO_REQ] = "REQ", [PROTO_RESP] = "RESP",
		[PROTO_STDIN] = "STDIN", [PROTO_STDOUT] = "STDOUT", [PROTO_STDERR] = "STDERR",
		[PROTO_CREDIT] = "CREDIT", [PROTO_EXIT] = "EXIT", [PROTO_EVENT] = "EVENT",
		[PROTO_PING] = "PING", [PROTO_PONG] = "PONG", [PROTO_SIGNAL] = "SIGNAL",
	};
	if (type >= PROTO_TYPE_MAX || !names[type])
		return "?";
	return names[type];
}

int proto_pick(unsigned our_min, unsigned our_max, unsigned their_min, unsigned their_max)
{
	unsigned lo = our_min > their_min ? our_min : their_min;
	unsigned hi = our_max < their_max ? our_max : their_max;

	if (our_min < 1 || their_min < 1 || our_min > our_max || their_min > their_max ||
	    our_max > PROTO_VERSION_LIMIT || their_max > PROTO_VERSION_LIMIT || lo > hi)
		return -EPROTONOSUPPORT;
	return (int)hi;
}

static int hello_int(const json_t *o, const char *key, unsigned *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > PROTO_VERSION_LIMIT)
		return -EPROTO;
	*out = (unsigned)json_integer_value(v);
	return 0;
}

int proto_hello_range(const json_t *hello, unsigned *min, unsigned *max)
{
	unsigned cur, lo, hi;

	if (hello_int(hello, "proto", &cur))
		return -EPROTO;
	if (!json_object_get(hello, "proto_min") && !json_object_get(hello, "proto_max")) {
		*min = *max = cur;      /* version 1's HELLO */
		return 0;
	}
	if (hello_int(hello, "proto_min", &lo) || hello_int(hello, "proto_max", &hi) ||
	    lo > hi || cur < lo || cur > hi)
		return -EPROTO;
	*min = lo;
	*max = hi;
	return 0;
}

void proto_reader_init(struct proto_reader *r)
{
	memset(r, 0, sizeof(*r));
	r->payload = xmalloc(PROTO_MAX_PAYLOAD + 1);
}

void proto_reader_free(struct proto_reader *r)
{
	free(r->payload);
	r->payload = NULL;
}

long proto_reader_feed(struct proto_reader *r, const void *buf, size_t n)
{
	const unsigned char *p = buf;
	size_t used = 0;

	if (r->broken)
		return -EPROTO;
	while (used < n) {
		if (r->hdr_have < PROTO_HDR_LEN) {
			size_t take = PROTO_HDR_LEN - r->hdr_have;
			if (take > n - used)
				take = n - used;
			memcpy(r->hdr + r->hdr_have, p + used, take);
			r->hdr_have += take;
			used += take;
			if (r->hdr_have < PROTO_HDR_LEN)
				break;
			proto_hdr_decode(r->hdr, &r->cur);
			if (proto_hdr_check(&r->cur) < 0) {
				r->broken = 1;
				return -EPROTO;
			}
			r->payload_have = 0;
		}
		if (r->payload_have < r->cur.len) {
			size_t take = r->cur.len - r->payload_have;
			if (take > n - used)
				take = n - used;
			memcpy(r->payload + r->payload_have, p + used, take);
			r->payload_have += take;
			used += take;
		}
		if (r->payload_have == r->cur.len)
			break; /* a frame is complete: the caller takes it first */
	}
	return (long)used;
}

int proto_reader_frame(struct proto_reader *r, struct proto_hdr *h, const unsigned char **payload)
{
	if (r->broken || r->hdr_have < PROTO_HDR_LEN || r->payload_have < r->cur.len)
		return 0;
	*h = r->cur;
	r->payload[r->cur.len] = '\0';
	*payload = r->payload;
	r->hdr_have = 0;
	r->payload_have = 0;
	return 1;
}

unsigned char *proto_frame_new(uint16_t type, uint16_t flags, uint32_t id,
			       const void *payload, size_t len, size_t *out_len)
{
	struct proto_hdr h = { .len = (uint32_t)len, .type = type, .flags = flags, .id = id };
	unsigned char *buf = xmalloc(PROTO_HDR_LEN + len);

	proto_hdr_encode(&h, buf);
	if (len)
		memcpy(buf + PROTO_HDR_LEN, payload, len);
	*out_len = PROTO_HDR_LEN + len;
	return buf;
}

int proto_write(int fd, uint16_t type, uint16_t flags, uint32_t id, const void *payload, size_t len)
{
	struct proto_hdr h = { .len = (uint32_t)len, .type = type, .flags = flags, .id = id };
	unsigned char hdr[PROTO_HDR_LEN];
	struct iovec iov[2];
	size_t total, done = 0;

	if (len > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	proto_hdr_encode(&h, hdr);
	total = PROTO_HDR_LEN + len;
	while (done < total) {
		int cnt = 0;
		if (done < PROTO_HDR_LEN) {
			iov[cnt].iov_base = hdr + done;
			iov[cnt++].iov_len = PROTO_HDR_LEN - done;
			if (len) {
				iov[cnt].iov_base = (void *)payload;
				iov[cnt++].iov_len = len;
			}
		} else {
			iov[cnt].iov_base = (char *)payload + (done - PROTO_HDR_LEN);
			iov[cnt++].iov_len = total - done;
		}
		ssize_t w = writev(fd, iov, cnt);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)w;
	}
	return 0;
}
