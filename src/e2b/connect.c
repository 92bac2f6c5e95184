/* SPDX-License-Identifier: Apache-2.0 */
/* connect.c - Connect's envelope, end-of-stream message and error codes (connect.h). */
#include "e2b/connect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned http;
} codes[] = {
	[E2BC_CANCELED] = { "canceled", 499 },
	[E2BC_UNKNOWN] = { "unknown", 500 },
	[E2BC_INVALID_ARGUMENT] = { "invalid_argument", 400 },
	[E2BC_DEADLINE_EXCEEDED] = { "deadline_exceeded", 504 },
	[E2BC_NOT_FOUND] = { "not_found", 404 },
	[E2BC_ALREADY_EXISTS] = { "already_exists", 409 },
	[E2BC_PERMISSION_DENIED] = { "permission_denied", 403 },
	[E2BC_RESOURCE_EXHAUSTED] = { "resource_exhausted", 429 },
	[E2BC_FAILED_PRECONDITION] = { "failed_precondition", 400 },
	[E2BC_ABORTED] = { "aborted", 409 },
	[E2BC_OUT_OF_RANGE] = { "out_of_range", 400 },
	[E2BC_UNIMPLEMENTED] = { "unimplemented", 501 },
	[E2BC_INTERNAL] = { "internal", 500 },
	[E2BC_UNAVAILABLE] = { "unavailable", 503 },
	[E2BC_DATA_LOSS] = { "data_loss", 500 },
	[E2BC_UNAUTHENTICATED] = { "unauthenticated", 401 },
};

const char *e2bc_code_name(enum e2bc_code c)
{
	return (unsigned)c < ARRAY_SIZE(codes) ? codes[c].name : "unknown";
}

unsigned e2bc_code_http(enum e2bc_code c)
{
	return (unsigned)c < ARRAY_SIZE(codes) ? codes[c].http : 500;
}

enum e2bc_code e2bc_code_of_errno(int code)
{
	switch (code) {
	case -ENOENT: case -ESRCH:
		return E2BC_NOT_FOUND;
	case -EINVAL: case -ENAMETOOLONG: case -EBADMSG: case -ENOTDIR: case -EISDIR:
	case -ELOOP:
		return E2BC_INVALID_ARGUMENT;
	case -E2BIG: case -EFBIG: case -ENOSPC: case -EMFILE:
		return E2BC_RESOURCE_EXHAUSTED;
	case -EEXIST:
		return E2BC_ALREADY_EXISTS;
	case -EACCES: case -EPERM:
		return E2BC_PERMISSION_DENIED;
	case -EBUSY: case -ENOTTY:
		return E2BC_FAILED_PRECONDITION;
	case -ETIMEDOUT:
		return E2BC_DEADLINE_EXCEEDED;
	case -ECONNRESET: case -ENOTCONN: case -EPIPE: case -EHOSTUNREACH:
	case -EAGAIN:           /* a paused sandbox: E2B's proxy answers 502 */
		return E2BC_UNAVAILABLE;
	case -ENOSYS: case -EOPNOTSUPP:
		return E2BC_UNIMPLEMENTED;
	case -EKEYREJECTED:
		return E2BC_UNAUTHENTICATED;
	default:
		return E2BC_INTERNAL;
	}
}

int e2bc_unwrap(const uint8_t *p, size_t n, size_t max, json_t **msg, struct k8_err *err)
{
	json_error_t je;
	uint32_t len;

	*msg = NULL;
	if (n < E2BC_HDR)
		return k8_err_set(err, -EINVAL, "the request body is not a Connect envelope "
				  "(%zu bytes; the 5-byte header is missing)", n);
	if (p[0] & E2BC_FLAG_COMPRESSED)
		return k8_err_set(err, -EINVAL, "compressed Connect messages are not supported");
	if (p[0])
		return k8_err_set(err, -EINVAL, "the request's Connect envelope has flags 0x%02x, "
				  "not a message", p[0]);
	len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
	if (len > max)
		return k8_err_set(err, -E2BIG, "the request message is %u bytes, more than %zu",
				  len, max);
	if ((size_t)len != n - E2BC_HDR)
		return k8_err_set(err, -EINVAL, "the request's Connect envelope announces %u "
				  "bytes but %zu follow (exactly one message is expected)", len,
				  n - E2BC_HDR);
	*msg = json_loadb((const char *)p + E2BC_HDR, len, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(*msg)) {
		json_decref(*msg);
		*msg = NULL;
		return k8_err_set(err, -EINVAL, "the request message is not a JSON object: %s",
				  je.text[0] ? je.text : "not an object");
	}
	return 0;
}

uint8_t *e2bc_wrap(const json_t *v, uint8_t flags, size_t *len)
{
	char *t = json_dumps(v, JSON_COMPACT);
	size_t n;
	uint8_t *out;

	if (!t)
		return NULL;
	n = strlen(t);
	if (n > UINT32_MAX) {
		free(t);
		return NULL;
	}
	out = xmalloc(n + E2BC_HDR);
	out[0] = flags;
	out[1] = (uint8_t)(n >> 24);
	out[2] = (uint8_t)(n >> 16);
	out[3] = (uint8_t)(n >> 8);
	out[4] = (uint8_t)n;
	memcpy(out + E2BC_HDR, t, n);
	free(t);
	*len = n + E2BC_HDR;
	return out;
}

json_t *e2bc_error(enum e2bc_code c, const char *message)
{
	json_t *v = json_pack("{s:s,s:s}", "code", e2bc_code_name(c), "message", message);

	/* a message that is not UTF-8 (it may echo a client's path) is replaced */
	return v ? v : json_pack("{s:s,s:s}", "code", e2bc_code_name(c), "message",
				 "(the error message is not valid UTF-8)");
}

uint8_t *e2bc_end(int code, const char *message, size_t *len)
{
	json_t *v = code < 0 ? json_object()
			     : json_pack("{s:o}", "error", e2bc_error((enum e2bc_code)code,
								     message ? message : ""));
	uint8_t *out = e2bc_wrap(v, E2BC_END, len);

	json_decref(v);
	return out;
}

void e2bc_reader_init(struct e2bc_reader *r, size_t max)
{
	memset(r, 0, sizeof(*r));
	r->max = max;
}

void e2bc_reader_free(struct e2bc_reader *r)
{
	free(r->buf);
	r->buf = NULL;
}

int e2bc_reader_feed(struct e2bc_reader *r, const uint8_t *p, size_t n, e2bc_msg_fn fn,
		     void *ctx, struct k8_err *err)
{
	while (n) {
		size_t take;
		int rc;

		if (r->failed)
			return k8_err_set(err, -EBADMSG, "the stream failed earlier");
		if (r->have < E2BC_HDR) {
			if (r->ended) {
				r->failed = true;
				return k8_err_set(err, -EBADMSG, "a message after the end of the stream");
			}
			take = E2BC_HDR - r->have < n ? E2BC_HDR - r->have : n;
			memcpy(r->hdr + r->have, p, take);
			r->have += take;
			p += take;
			n -= take;
			if (r->have < E2BC_HDR)
				break;
			r->len = (uint32_t)r->hdr[1] << 24 | (uint32_t)r->hdr[2] << 16 |
				 (uint32_t)r->hdr[3] << 8 | r->hdr[4];
			if ((r->hdr[0] & E2BC_FLAG_COMPRESSED) || (r->hdr[0] & ~0x03u) ||
			    r->len > r->max) {
				r->failed = true;
				return k8_err_set(err, -EBADMSG, "bad envelope: flags 0x%02x, %u bytes",
						  r->hdr[0], r->len);
			}
			free(r->buf);
			r->buf = xmalloc(r->len ? r->len : 1);
		}
		take = r->len - (r->have - E2BC_HDR);
		if (take > n)
			take = n;
		memcpy(r->buf + (r->have - E2BC_HDR), p, take);
		r->have += take;
		p += take;
		n -= take;
		if (r->have - E2BC_HDR < r->len)
			break;
		r->have = 0;
		r->ended = r->hdr[0] & E2BC_END;
		rc = fn(ctx, r->hdr[0], r->buf, r->len);
		if (rc < 0) {
			r->failed = true;
			return rc;
		}
	}
	return 0;
}
