/* SPDX-License-Identifier: Apache-2.0 */
/* ttrpc.h - ttRPC framing (containerd's RPC between containerd and its shims) and the
 * envelope of its requests and answers. Pure code over caller buffers and protobuf-c: no
 * sockets here (server.c and events.c do the I/O), so the unit tests and the fuzzers
 * reach all of it.
 *
 * A frame is a 10-byte big-endian header, then `len` bytes of data:
 *
 *   u32 len     data length, at most TTRPC_MAX_DATA (4 MiB, ttRPC's own cap)
 *   u32 stream  odd: opened by the client; even: by the server (never used)
 *   u8  type    1 request, 2 response, 3 data
 *   u8  flags   request: 1 remote closed, 2 remote open; data: 1 remote closed, 4 no data
 *
 * Every header goes through ttrpc_hdr_check() before its length is believed; every
 * message is decoded by protobuf-c through ttrpc_alloc, which refuses to hand out more
 * than TTRPC_DECODE_MAX bytes for one message, so a hostile frame costs at most that.
 */
#ifndef K8_SHIM_TTRPC_H
#define K8_SHIM_TTRPC_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#define TTRPC_HDR_LEN 10
#define TTRPC_MAX_DATA (4u << 20)
#define TTRPC_DECODE_MAX (16u << 20)      /* protobuf-c's allocations for one message */
#define TTRPC_MAX_METADATA 64             /* key/value pairs in one request */

enum ttrpc_type { TTRPC_REQUEST = 1, TTRPC_RESPONSE = 2, TTRPC_DATA = 3 };

#define TTRPC_F_REMOTE_CLOSED 0x1
#define TTRPC_F_REMOTE_OPEN 0x2
#define TTRPC_F_NO_DATA 0x4

/* gRPC status codes (what containerd's errdefs maps errors to and from). */
enum ttrpc_code {
	TTRPC_OK = 0,
	TTRPC_CANCELLED = 1,
	TTRPC_UNKNOWN = 2,
	TTRPC_INVALID_ARGUMENT = 3,
	TTRPC_DEADLINE_EXCEEDED = 4,
	TTRPC_NOT_FOUND = 5,
	TTRPC_ALREADY_EXISTS = 6,
	TTRPC_FAILED_PRECONDITION = 9,
	TTRPC_RESOURCE_EXHAUSTED = 8,
	TTRPC_UNIMPLEMENTED = 12,
	TTRPC_INTERNAL = 13,
	TTRPC_UNAVAILABLE = 14,
};

struct ttrpc_hdr {
	uint32_t len;
	uint32_t stream;
	uint8_t type;
	uint8_t flags;
};

void ttrpc_hdr_encode(const struct ttrpc_hdr *h, unsigned char out[TTRPC_HDR_LEN]);
void ttrpc_hdr_decode(const unsigned char in[TTRPC_HDR_LEN], struct ttrpc_hdr *h);
/* 0 when the header may be read on: a known type, len <= TTRPC_MAX_DATA. -EPROTO for an
 * unknown type, -EMSGSIZE for a longer frame (the connection cannot go on after either). */
int ttrpc_hdr_check(const struct ttrpc_hdr *h);

/* Incremental reader over a byte stream, as proto_reader: feed bytes, take whole frames.
 * The data buffer grows to the largest frame seen (at most TTRPC_MAX_DATA). */
struct ttrpc_reader {
	unsigned char hdr[TTRPC_HDR_LEN];
	size_t hdr_have;
	struct ttrpc_hdr cur;
	unsigned char *data;
	size_t cap, have;
	int broken;      /* the negative errno of the bad header; every later call fails */
};

void ttrpc_reader_init(struct ttrpc_reader *r);
void ttrpc_reader_free(struct ttrpc_reader *r);
/* Consume up to n bytes; returns how many (fewer when a frame completed: take it with
 * ttrpc_reader_frame, then feed the rest), or a negative errno for a bad header. */
long ttrpc_reader_feed(struct ttrpc_reader *r, const void *buf, size_t n);
/* 1 with *h and *data (valid until the next feed) when a whole frame is there, else 0.
 * Taking it makes room for the next one. */
int ttrpc_reader_frame(struct ttrpc_reader *r, struct ttrpc_hdr *h, const unsigned char **data);

/* One frame (header + data) into a malloc'd buffer of *out_len bytes; NULL when len is
 * over TTRPC_MAX_DATA. */
unsigned char *ttrpc_frame_new(uint32_t stream, uint8_t type, uint8_t flags, const void *data,
			       size_t len, size_t *out_len);

/* protobuf-c allocator with a budget: ttrpc_budget_init(&b), then pass &b.alloc to any
 * __unpack() and the matching __free_unpacked(). */
struct ttrpc_budget {
	ProtobufCAllocator alloc;
	size_t used, max;
};
void ttrpc_budget_init(struct ttrpc_budget *b, size_t max);

/* A decoded request: the service and method by name, the payload (pointing into msg),
 * the value of metadata key "containerd-namespace-ttrpc" if any. */
struct ttrpc_request {
	void *msg;                   /* K8ttrpc__Request, freed by ttrpc_request_free */
	const char *service, *method, *ns;
	const uint8_t *payload;
	size_t payload_len;
	int64_t timeout_ns;
	struct ttrpc_budget budget;
};
/* 0, or -EBADMSG when `data` is not a Request (or names no method, or has more than
 * TTRPC_MAX_METADATA metadata pairs), -ENOMEM when it would cost more than the budget. */
int ttrpc_request_decode(const unsigned char *data, size_t len, struct ttrpc_request *req);
void ttrpc_request_free(struct ttrpc_request *req);

/* The data of a Response: a status and a payload (the payload only when code is OK).
 * malloc'd, *len bytes; NULL when it would be over TTRPC_MAX_DATA. */
unsigned char *ttrpc_response_encode(int code, const char *message, const void *payload,
				     size_t payload_len, size_t *len);
/* The data of a Request (the client side, events.c). */
unsigned char *ttrpc_request_encode(const char *service, const char *method, const char *ns,
				    const void *payload, size_t payload_len, int64_t timeout_ns,
				    size_t *len);
/* Read a Response's status: 0 with *code (and up to msglen-1 bytes of its message) or
 * -EBADMSG. */
int ttrpc_response_decode(const unsigned char *data, size_t len, int *code, char *msg,
			  size_t msglen);

/* A protobuf-c message packed into a fresh malloc'd buffer; *len its size. */
unsigned char *ttrpc_pack(const ProtobufCMessage *m, size_t *len);

#endif
