/* SPDX-License-Identifier: Apache-2.0 */
/* proto.h - the host <-> guest-agent wire protocol (versions 1 and 2), also used on the
 * daemon's upgraded exec streams. Full description: docs/protocol.md.
 *
 * A channel is a byte stream of frames. Each frame is a 12-byte little-endian header
 * followed by `len` payload bytes:
 *
 *   u32 len    payload length, at most PROTO_MAX_PAYLOAD
 *   u16 type   enum proto_type
 *   u16 flags  PROTO_F_*
 *   u32 id     request id, or the process (stream) id; 0 for the channel itself
 *
 * Control payloads (HELLO, REQ, RESP, EXIT, EVENT) are one JSON object each. Data
 * payloads (STDIN, STDOUT, STDERR) are raw bytes. CREDIT carries a u32 LE byte count.
 * Every received header goes through proto_hdr_check(): a reader never trusts `len` or
 * `type` beyond what it returns.
 */
#ifndef K8_PROTO_H
#define K8_PROTO_H

#include <stddef.h>
#include <stdint.h>

/* Protocol versions (docs/protocol.md, "Versions"). 1: the frames and ops below.
 * 2: version 1 plus the handshake: the agent's HELLO names the range it speaks
 * ("proto_min", "proto_max") and the host's first REQ, {"op":"proto","version":N},
 * says which one it chose. Each side speaks a range; a version never changes meaning. */
#define PROTO_VERSION_MIN 1
#define PROTO_VERSION_MAX 2
#define PROTO_VERSION PROTO_VERSION_MAX    /* the newest */
#define PROTO_VERSION_LIMIT 65535          /* a larger version number is malformed */
#define PROTO_HDR_LEN 12
#define PROTO_MAX_PAYLOAD (256u * 1024u)   /* hard cap for any frame */
#define PROTO_MAX_JSON (64u * 1024u)       /* cap for a control (JSON) frame */
#define PROTO_DATA_CHUNK (32u * 1024u)     /* what a sender puts in one data frame */
#define PROTO_WINDOW (256u * 1024u)        /* output bytes in flight per stream before CREDIT */

enum proto_type {
	PROTO_HELLO = 1,   /* agent -> host, id 0: {"proto":A,"proto_min":A,"proto_max":B,
	                    * "agent":"...","kernel":"...",...}; host -> agent: {"proto":1} */
	PROTO_REQ = 2,     /* host -> agent: {"op":"...",...}; id chosen by the host */
	PROTO_RESP = 3,    /* agent -> host, same id: {"ok":true,...} or {"error":"...","errno":N} */
	PROTO_STDIN = 4,   /* host -> agent, id = stream; F_EOF closes the process's stdin */
	PROTO_STDOUT = 5,  /* agent -> host, id = stream; F_EOF: the process closed stdout */
	PROTO_STDERR = 6,  /* agent -> host, id = stream */
	PROTO_CREDIT = 7,  /* either way, id = stream: u32 more bytes may be sent; from the
	                    * receiver of the stream's bytes: the host for output, the agent
	                    * for stdin */
	PROTO_EXIT = 8,    /* agent -> host, id = stream: {"code":N,"signal":S,"oom":bool} */
	PROTO_EVENT = 9,   /* agent -> host, id 0: {"event":"...",...} (limit hits, notices) */
	PROTO_PING = 10,   /* either way; answered by PONG with the same id and payload */
	PROTO_PONG = 11,
	PROTO_SIGNAL = 12, /* host -> agent, id = stream: u32 signal number for the process */
	PROTO_TYPE_MAX
};

#define PROTO_F_EOF 0x0001u

struct proto_hdr {
	uint32_t len;
	uint16_t type;
	uint16_t flags;
	uint32_t id;
};

/* Encode `h` into 12 bytes at `out`. */
void proto_hdr_encode(const struct proto_hdr *h, unsigned char out[PROTO_HDR_LEN]);
/* Decode 12 bytes; does not validate (use proto_hdr_check). */
void proto_hdr_decode(const unsigned char in[PROTO_HDR_LEN], struct proto_hdr *h);
/* 0 when the header is acceptable: known type, len within the cap for that type,
 * only known flags. -EPROTO otherwise (the channel cannot be resynchronised). */
int proto_hdr_check(const struct proto_hdr *h);
const char *proto_type_name(uint16_t type);

/* The version two sides speak together: the highest version in both [our_min, our_max]
 * and [their_min, their_max]. Returns it, or -EPROTONOSUPPORT when the ranges do not
 * meet or one is empty or out of 1..PROTO_VERSION_LIMIT. */
int proto_pick(unsigned our_min, unsigned our_max, unsigned their_min, unsigned their_max);
/* The range an agent's HELLO (a parsed JSON object, hostile) names: "proto_min" ..
 * "proto_max", or "proto".."proto" when it has neither (version 1's HELLO). 0, or
 * -EPROTO when it names no version, only one bound, or a range without "proto" in it. */
struct json_t;
int proto_hello_range(const struct json_t *hello, unsigned *min, unsigned *max);

/* Incremental frame reader over a byte stream. Feed what read() returned; take frames
 * out one by one. Memory is bounded by PROTO_HDR_LEN + PROTO_MAX_PAYLOAD. */
struct proto_reader {
	unsigned char hdr[PROTO_HDR_LEN];
	size_t hdr_have;
	struct proto_hdr cur;
	unsigned char *payload;     /* PROTO_MAX_PAYLOAD + 1 bytes, allocated once */
	size_t payload_have;
	int broken;                 /* set after a bad header: every later call fails */
};

void proto_reader_init(struct proto_reader *r);
void proto_reader_free(struct proto_reader *r);
/* Consume up to `n` bytes from `buf`. Returns the number of bytes consumed (may be less
 * than n when a frame completed: call proto_reader_frame, then feed the rest), or
 * -EPROTO when a header is invalid. */
long proto_reader_feed(struct proto_reader *r, const void *buf, size_t n);
/* 1 and fills *h / *payload when a whole frame is ready (payload NUL-terminated and
 * valid until the next feed), 0 otherwise. */
int proto_reader_frame(struct proto_reader *r, struct proto_hdr *h, const unsigned char **payload);

/* Build one frame (header + payload) into a fresh malloc'd buffer of *out_len bytes. */
unsigned char *proto_frame_new(uint16_t type, uint16_t flags, uint32_t id,
			       const void *payload, size_t len, size_t *out_len);
/* Write one frame to a blocking fd. Return 0 or a negative errno. */
int proto_write(int fd, uint16_t type, uint16_t flags, uint32_t id, const void *payload, size_t len);

#endif
