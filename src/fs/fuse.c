/* SPDX-License-Identifier: Apache-2.0 */
/* fuse.c - kosa8-fs connection: resync after (re)connect, request framing, dispatch.
 *
 * The byte stream from the guest is untrusted. Before the guest's SYNC (carrying our
 * nonce) arrives, everything is discarded: stale halves of messages from before a
 * checkpoint, bytes QEMU buffered, garbage. After it, each request's fuse_in_header.len
 * must be within [sizeof(fuse_in_header), K8FS_MAX_MSG]; anything else is a protocol
 * error and the caller drops the link (and so resyncs). Within a request every field is
 * read through fs_req_get()/fs_req_str(), which check bounds against that length.
 */
#include "fs/fs.h"
#include "common/util.h"

#include <linux/fuse.h>
#include <string.h>

#define IN_HDR sizeof(struct fuse_in_header)
#define OUT_HDR sizeof(struct fuse_out_header)
#define SYNC_LEN (IN_HDR + K8FS_NONCE_LEN)

void fs_conn_reset(struct fs_ctx *c, const uint8_t nonce[K8FS_NONCE_LEN])
{
	struct fuse_out_header h = {
		.len = (uint32_t)(OUT_HDR + K8FS_NONCE_LEN),
		.error = K8FS_NOTIFY_RESYNC,
		.unique = 0,
	};

	memcpy(c->nonce, nonce, K8FS_NONCE_LEN);
	c->in_start = c->in_len = 0;
	memcpy(c->out, &h, OUT_HDR);
	memcpy(c->out + OUT_HDR, nonce, K8FS_NONCE_LEN);
	c->out_off = 0;
	c->out_len = OUT_HDR + K8FS_NONCE_LEN;
	c->synced = false;
	c->connected = true;
	c->st.connects++;
}

void fs_conn_drop(struct fs_ctx *c)
{
	c->in_start = c->in_len = 0;
	c->out_off = c->out_len = 0;
	c->synced = false;
	c->connected = false;
}

uint8_t *fs_conn_room(struct fs_ctx *c, size_t *room)
{
	if (c->in_start) {
		memmove(c->in, c->in + c->in_start, c->in_len);
		c->in_start = 0;
	}
	*room = K8FS_MAX_MSG - c->in_len;
	return c->in + c->in_len;
}

void fs_conn_added(struct fs_ctx *c, size_t n)
{
	c->in_len += n;
}

static bool sync_header_ok(const uint8_t *p)
{
	struct fuse_in_header h;
	static const uint8_t zero[IN_HDR];

	memcpy(&h, p, IN_HDR);
	if (h.len != SYNC_LEN || h.opcode != K8FS_OP_SYNC || h.unique != 0 || h.nodeid != 0)
		return false;
	return !memcmp(p + 24, zero, IN_HDR - 24);   /* uid, gid, pid, padding */
}

/* Scan for header + nonce; consume through it when found. 1 found, 0 need more. */
static int conn_resync(struct fs_ctx *c)
{
	uint8_t *base = c->in + c->in_start;
	size_t len = c->in_len, from = IN_HDR;

	while (from + K8FS_NONCE_LEN <= len) {
		uint8_t *p = memmem(base + from, len - from, c->nonce, K8FS_NONCE_LEN);
		size_t at;

		if (!p)
			break;
		at = (size_t)(p - base);
		if (sync_header_ok(p - IN_HDR)) {
			c->in_start += at + K8FS_NONCE_LEN;
			c->in_len -= at + K8FS_NONCE_LEN;
			c->synced = true;
			return 1;
		}
		from = at + 1;
	}
	/* keep only what could still be the start of a SYNC */
	if (len > SYNC_LEN - 1) {
		c->in_start += len - (SYNC_LEN - 1);
		c->in_len = SYNC_LEN - 1;
		return 1;
	}
	return 0;
}

int fs_conn_step(struct fs_ctx *c)
{
	struct fuse_in_header h;
	size_t n;

	if (c->out_len > c->out_off)
		return 0;
	if (!c->synced) {
		int r = conn_resync(c);
		/* having discarded garbage is progress only if a SYNC could now be found */
		return r && c->synced ? 1 : 0;
	}
	if (c->in_len < IN_HDR)
		return 0;
	memcpy(&h, c->in + c->in_start, IN_HDR);
	if (h.len < IN_HDR || h.len > K8FS_MAX_MSG) {
		c->st.protocol_errors++;
		return -EPROTO;
	}
	if (c->in_len < h.len)
		return 0;
	/* request structs are read in place, so they must be aligned: a message that follows
	 * an odd-sized one (names make most lengths odd) is copied out first */
	if ((uintptr_t)(c->in + c->in_start) % 8) {
		memcpy(c->scratch, c->in + c->in_start, h.len);
		n = fs_dispatch(c, c->scratch, h.len, c->out);
	} else {
		n = fs_dispatch(c, c->in + c->in_start, h.len, c->out);
	}
	c->in_start += h.len;
	c->in_len -= h.len;
	c->out_off = 0;
	c->out_len = n;
	return 1;
}

size_t fs_dispatch(struct fs_ctx *c, const uint8_t *msg, size_t len, uint8_t *out)
{
	struct fuse_in_header h;
	struct fuse_out_header oh;
	struct fs_req r;
	int e;

	if (len < IN_HDR || len > K8FS_MAX_MSG)
		return 0;
	memcpy(&h, msg, IN_HDR);
	if (h.opcode == K8FS_OP_SYNC && h.unique == 0)
		return 0;                /* a repeated SYNC while in sync: nothing to do */
	c->st.requests++;
	r = (struct fs_req){
		.c = c, .unique = h.unique, .nodeid = h.nodeid, .opcode = h.opcode,
		.body = msg + IN_HDR, .blen = len - IN_HDR, .out = out,
	};
	e = fs_op(&r);
	if (e == K8FS_NOREPLY || h.unique == 0)
		return 0;                /* unique 0 is a notification id: never answer it */
	if (e < 0) {
		c->st.errors++;
		r.olen = 0;
	}
	oh.len = (uint32_t)(OUT_HDR + r.olen);
	oh.error = e < 0 ? e : 0;
	oh.unique = h.unique;
	memcpy(out, &oh, OUT_HDR);
	return OUT_HDR + r.olen;
}
