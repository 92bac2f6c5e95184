/* SPDX-License-Identifier: Apache-2.0 */
/* connect.h - the Connect protocol as E2B's envd clients speak it (connect-web, JSON
 * codec, HTTP/1.1): the 5-byte envelope of a streaming call, its end-of-stream message,
 * and Connect's error codes with their HTTP statuses (docs/e2b.md). Pure functions over
 * buffers; the daemon does the I/O.
 *
 * A streaming request's body is one enveloped message: [flags:1][len:u32 BE][JSON].
 * The reply is a sequence of such messages (flags 0) and one last message with
 * flags E2BC_END whose JSON is {} or {"error":{"code","message"}}. Compressed messages
 * (flag 1) are refused: no client sends them without a Connect-Content-Encoding header,
 * and we announce none. */
#ifndef K8_E2B_CONNECT_H
#define K8_E2B_CONNECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define E2BC_HDR 5
#define E2BC_FLAG_COMPRESSED 0x01u
#define E2BC_END 0x02u
/* The largest request message: a Start's command, arguments and environment, or a
 * SendInput's bytes (base64) fit with room to spare. */
#define E2BC_REQ_MAX (1u << 20)

/* Connect's codes (connectrpc.com/docs/protocol#error-codes) in kosa8's use. */
enum e2bc_code {
	E2BC_CANCELED, E2BC_UNKNOWN, E2BC_INVALID_ARGUMENT, E2BC_DEADLINE_EXCEEDED,
	E2BC_NOT_FOUND, E2BC_ALREADY_EXISTS, E2BC_PERMISSION_DENIED, E2BC_RESOURCE_EXHAUSTED,
	E2BC_FAILED_PRECONDITION, E2BC_ABORTED, E2BC_OUT_OF_RANGE, E2BC_UNIMPLEMENTED,
	E2BC_INTERNAL, E2BC_UNAVAILABLE, E2BC_DATA_LOSS, E2BC_UNAUTHENTICATED,
};

/* "not_found", ... and the HTTP status a unary call answers with (Connect's table). */
const char *e2bc_code_name(enum e2bc_code c);
unsigned e2bc_code_http(enum e2bc_code c);
/* The code for a daemon error (-ENOENT: not_found, -EINVAL: invalid_argument, ...). */
enum e2bc_code e2bc_code_of_errno(int code);

/* The one message of a streaming request body of n bytes: exactly one envelope, flags 0,
 * its length the rest of the body, at most max bytes, a JSON object. 0 with *msg (the
 * caller's), or -EINVAL / -E2BIG with a message naming what is wrong. */
int e2bc_unwrap(const uint8_t *p, size_t n, size_t max, json_t **msg, struct k8_err *err);

/* A message `v` (not taken) as one envelope with `flags`: malloc'd, *len its size. NULL
 * only when v cannot be encoded. */
uint8_t *e2bc_wrap(const json_t *v, uint8_t flags, size_t *len);
/* The end-of-stream envelope: {} when code is negative, else its error. */
uint8_t *e2bc_end(int code, const char *message, size_t *len);
/* A unary error body {"code":"not_found","message":...}. */
json_t *e2bc_error(enum e2bc_code c, const char *message);

/* Incremental reader of a stream of envelopes (a response, as a client reads one: the
 * unit tests and the fuzzer check the writer against it). Bytes come in pieces of any
 * size; each complete message goes to fn. At most max bytes per message. */
struct e2bc_reader {
	uint8_t hdr[E2BC_HDR];
	size_t have;            /* header bytes, then payload bytes collected */
	uint8_t *buf;           /* the payload so far */
	uint32_t len;           /* of the current message */
	size_t max;
	bool ended, failed;     /* an END message came; an error stopped the reader */
};
typedef int (*e2bc_msg_fn)(void *ctx, uint8_t flags, const uint8_t *p, size_t n);
void e2bc_reader_init(struct e2bc_reader *r, size_t max);
/* 0, or -EBADMSG (compressed, too long, a message after the end) / fn's error. */
int e2bc_reader_feed(struct e2bc_reader *r, const uint8_t *p, size_t n, e2bc_msg_fn fn,
		     void *ctx, struct k8_err *err);
void e2bc_reader_free(struct e2bc_reader *r);

#endif
