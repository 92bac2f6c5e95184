/* SPDX-License-Identifier: Apache-2.0 */
/* multipart.h - a streaming reader of multipart/form-data (RFC 7578), for envd's
 * POST /files: each part's file name and its bytes go to callbacks as they arrive, so an
 * upload of any size is never held whole. Pure; fed by the daemon, fuzzed.
 *
 * Memory is one buffer of MP_BUF bytes whatever the input: a part's head is at most
 * MP_HEAD_MAX bytes, body bytes are passed on as soon as they cannot be the start of the
 * next delimiter. */
#ifndef K8_E2B_MULTIPART_H
#define K8_E2B_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define MP_BOUNDARY_MAX 70              /* RFC 2046 */
#define MP_HEAD_MAX 8192
#define MP_BUF (MP_HEAD_MAX + 2 * (MP_BOUNDARY_MAX + 8))
#define MP_FILENAME_MAX 4095

struct e2b_mp_ops {
	/* A part begins: its form field name and file name ("" when it has none). */
	int (*begin)(void *ctx, const char *field, const char *filename);
	int (*data)(void *ctx, const uint8_t *p, size_t n);
	int (*end)(void *ctx);
};

enum e2b_mp_state { MP_PREAMBLE, MP_AFTER, MP_HEAD, MP_BODY, MP_DONE, MP_FAILED };

struct e2b_mp {
	char delim[MP_BOUNDARY_MAX + 5];        /* "\r\n--" boundary */
	size_t dlen;
	enum e2b_mp_state state;
	uint8_t buf[MP_BUF];
	size_t have;
	unsigned parts;
};

/* The boundary from a Content-Type header ("multipart/form-data; boundary=..."). 0, or
 * -EINVAL with a message. */
int e2b_mp_init(struct e2b_mp *m, const char *content_type, struct k8_err *err);
/* Consume n bytes; the callbacks run as parts begin, carry data and end. 0, -EBADMSG
 * with a message for a malformed body (the reader then refuses all input), or a
 * callback's negative return. */
int e2b_mp_feed(struct e2b_mp *m, const uint8_t *p, size_t n, const struct e2b_mp_ops *ops,
		void *ctx, struct k8_err *err);
/* The body is over: 0 when the closing delimiter was seen, else -EBADMSG. */
int e2b_mp_finish(struct e2b_mp *m, struct k8_err *err);

#endif
