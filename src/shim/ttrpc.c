/* SPDX-License-Identifier: Apache-2.0 */
/* ttrpc.c - ttRPC frames and envelopes (see ttrpc.h). */
#include "shim/ttrpc.h"
#include "common/util.h"
#include "ttrpc.pb-c.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>

#define NS_KEY "containerd-namespace-ttrpc"

static void put32be(unsigned char *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

static uint32_t get32be(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

void ttrpc_hdr_encode(const struct ttrpc_hdr *h, unsigned char out[TTRPC_HDR_LEN])
{
	put32be(out, h->len);
	put32be(out + 4, h->stream);
	out[8] = h->type;
	out[9] = h->flags;
}

void ttrpc_hdr_decode(const unsigned char in[TTRPC_HDR_LEN], struct ttrpc_hdr *h)
{
	h->len = get32be(in);
	h->stream = get32be(in + 4);
	h->type = in[8];
	h->flags = in[9];
}

int ttrpc_hdr_check(const struct ttrpc_hdr *h)
{
	if (h->type < TTRPC_REQUEST || h->type > TTRPC_DATA)
		return -EPROTO;
	if (h->len > TTRPC_MAX_DATA)
		return -EMSGSIZE;
	return 0;
}

void ttrpc_reader_init(struct ttrpc_reader *r)
{
	memset(r, 0, sizeof(*r));
}

void ttrpc_reader_free(struct ttrpc_reader *r)
{
	free(r->data);
	memset(r, 0, sizeof(*r));
}

long ttrpc_reader_feed(struct ttrpc_reader *r, const void *buf, size_t n)
{
	const unsigned char *p = buf;
	size_t used = 0;
	int rc;

	if (r->broken)
		return r->broken;
	/* A frame taken by ttrpc_reader_frame left hdr_have at 0. */
	while (used < n) {
		if (r->hdr_have < TTRPC_HDR_LEN) {
			size_t take = TTRPC_HDR_LEN - r->hdr_have;

			if (take > n - used)
				take = n - used;
			memcpy(r->hdr + r->hdr_have, p + used, take);
			r->hdr_have += take;
			used += take;
			if (r->hdr_have < TTRPC_HDR_LEN)
				break;
			ttrpc_hdr_decode(r->hdr, &r->cur);
			if ((rc = ttrpc_hdr_check(&r->cur)) < 0) {
				r->broken = rc;
				return rc;
			}
			r->have = 0;
			if (r->cur.len > r->cap) {
				/* Grows only to a length the header check allowed. */
				unsigned char *nb = realloc(r->data, r->cur.len);

				if (!nb) {
					r->broken = -ENOMEM;
					return -ENOMEM;
				}
				r->data = nb;
				r->cap = r->cur.len;
			}
		}
		if (r->have < r->cur.len) {
			size_t take = r->cur.len - r->have;

			if (take > n - used)
				take = n - used;
			memcpy(r->data + r->have, p + used, take);
			r->have += take;
			used += take;
		}
		if (r->have == r->cur.len)
			break;
	}
	return (long)used;
}

int ttrpc_reader_frame(struct ttrpc_reader *r, struct ttrpc_hdr *h, const unsigned char **data)
{
	static const unsigned char empty[1];

	if (r->broken || r->hdr_have < TTRPC_HDR_LEN || r->have < r->cur.len)
		return 0;
	*h = r->cur;
	*data = r->cur.len ? r->data : empty;
	r->hdr_have = 0;
	r->have = 0;
	return 1;
}

unsigned char *ttrpc_frame_new(uint32_t stream, uint8_t type, uint8_t flags, const void *data,
			       size_t len, size_t *out_len)
{
	struct ttrpc_hdr h = { .len = (uint32_t)len, .stream = stream, .type = type,
			       .flags = flags };
	unsigned char *f;

	if (len > TTRPC_MAX_DATA)
		return NULL;
	f = xmalloc(TTRPC_HDR_LEN + len);
	ttrpc_hdr_encode(&h, f);
	if (len)
		memcpy(f + TTRPC_HDR_LEN, data, len);
	*out_len = TTRPC_HDR_LEN + len;
	return f;
}

/* ---- protobuf-c with a budget ---- */

/* Each block carries its size in front, so a free gives the budget back. */
static void *budget_alloc(void *data, size_t size)
{
	struct ttrpc_budget *b = data;
	size_t *blk;

	if (size > b->max || b->used > b->max - size)
		return NULL;
	blk = malloc(sizeof(size_t) * 2 + size);
	if (!blk)
		return NULL;
	b->used += size;
	blk[0] = size;
	return blk + 2;
}

static void budget_free(void *data, void *ptr)
{
	struct ttrpc_budget *b = data;
	size_t *blk;

	if (!ptr)
		return;
	blk = (size_t *)ptr - 2;
	b->used -= blk[0];
	free(blk);
}

void ttrpc_budget_init(struct ttrpc_budget *b, size_t max)
{
	b->alloc.alloc = budget_alloc;
	b->alloc.free = budget_free;
	b->alloc.allocator_data = b;
	b->used = 0;
	b->max = max;
}

int ttrpc_request_decode(const unsigned char *data, size_t len, struct ttrpc_request *req)
{
	K8ttrpc__Request *m;

	memset(req, 0, sizeof(*req));
	ttrpc_budget_init(&req->budget, TTRPC_DECODE_MAX);
	m = k8ttrpc__request__unpack(&req->budget.alloc, len, data);
	if (!m)
		return req->budget.used + len > TTRPC_DECODE_MAX ? -ENOMEM : -EBADMSG;
	req->msg = m;
	if (!m->method || !*m->method || !m->service || !*m->service ||
	    m->n_metadata > TTRPC_MAX_METADATA) {
		ttrpc_request_free(req);
		return -EBADMSG;
	}
	req->service = m->service;
	req->method = m->method;
	req->payload = m->payload.data;
	req->payload_len = m->payload.len;
	req->timeout_ns = m->timeout_nano;
	for (size_t i = 0; i < m->n_metadata; i++)
		if (m->metadata[i] && m->metadata[i]->key && !strcmp(m->metadata[i]->key, NS_KEY))
			req->ns = m->metadata[i]->value;
	return 0;
}

void ttrpc_request_free(struct ttrpc_request *req)
{
	if (req->msg)
		k8ttrpc__request__free_unpacked(req->msg, &req->budget.alloc);
	req->msg = NULL;
}

unsigned char *ttrpc_pack(const ProtobufCMessage *m, size_t *len)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	unsigned char *buf = xmalloc(n ? n : 1);

	*len = protobuf_c_message_pack(m, buf);
	return buf;
}

unsigned char *ttrpc_response_encode(int code, const char *message, const void *payload,
				     size_t payload_len, size_t *len)
{
	K8ttrpc__Response resp = K8TTRPC__RESPONSE__INIT;
	K8ttrpc__Status st = K8TTRPC__STATUS__INIT;
	unsigned char *out;

	if (code != TTRPC_OK) {
		st.code = code;
		st.message = (char *)(message ? message : "");
		resp.status = &st;
	} else if (payload_len) {
		resp.payload.data = (uint8_t *)payload;
		resp.payload.len = payload_len;
	}
	out = ttrpc_pack(&resp.base, len);
	if (*len > TTRPC_MAX_DATA) {
		free(out);
		return NULL;
	}
	return out;
}

unsigned char *ttrpc_request_encode(const char *service, const char *method, const char *ns,
				    const void *payload, size_t payload_len, int64_t timeout_ns,
				    size_t *len)
{
	K8ttrpc__Request req = K8TTRPC__REQUEST__INIT;
	K8ttrpc__KeyValue kv = K8TTRPC__KEY_VALUE__INIT, *kvs[1] = { &kv };
	unsigned char *out;

	req.service = (char *)service;
	req.method = (char *)method;
	req.payload.data = (uint8_t *)payload;
	req.payload.len = payload_len;
	req.timeout_nano = timeout_ns;
	if (ns) {
		kv.key = (char *)NS_KEY;
		kv.value = (char *)ns;
		req.metadata = kvs;
		req.n_metadata = 1;
	}
	out = ttrpc_pack(&req.base, len);
	if (*len > TTRPC_MAX_DATA) {
		free(out);
		return NULL;
	}
	return out;
}

int ttrpc_response_decode(const unsigned char *data, size_t len, int *code, char *msg,
			  size_t msglen)
{
	struct ttrpc_budget b;
	K8ttrpc__Response *r;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	r = k8ttrpc__response__unpack(&b.alloc, len, data);
	if (!r)
		return -EBADMSG;
	*code = r->status ? r->status->code : 0;
	if (msglen)
		snprintf(msg, msglen, "%s", r->status && r->status->message ? r->status->message : "");
	k8ttrpc__response__free_unpacked(r, &b.alloc);
	return 0;
}
