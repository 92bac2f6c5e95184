/* SPDX-License-Identifier: Apache-2.0 */
/* test_model_gguf.c - the GGUF reader accepts a well-formed file and refuses malformed ones
 * (truncation anywhere, bad counts, lengths, types, dims, offsets, alignment) with a message. */
#include <stdlib.h>

#include "model/gguf.h"
#include "model/quant.h"
#include "t.h"

struct buf {
	uint8_t b[4096];
	size_t n;
};

static void put(struct buf *b, const void *p, size_t n) { memcpy(b->b + b->n, p, n); b->n += n; }
static void u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void str(struct buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }

/* A file with 3 kv (u32 alignment 32, a string, a 2-string array) and 2 tensors. */
static void build(struct buf *b, uint32_t ttype, uint64_t ne0, uint64_t off2)
{
	b->n = 0;
	put(b, "GGUF", 4);
	u32(b, 3);
	u64(b, 2);
	u64(b, 3);
	str(b, "general.alignment"); u32(b, GGUF_U32); u32(b, 32);
	str(b, "general.architecture"); u32(b, GGUF_STR); str(b, "llama");
	str(b, "tokenizer.ggml.tokens"); u32(b, GGUF_ARR); u32(b, GGUF_STR); u64(b, 2);
	str(b, "a"); str(b, "bc");
	str(b, "t0"); u32(b, 2); u64(b, ne0); u64(b, 2); u32(b, ttype); u64(b, 0);
	str(b, "t1"); u32(b, 1); u64(b, 4); u32(b, GT_F32); u64(b, off2);
	while (b->n % 32)
		b->b[b->n++] = 0;
	memset(b->b + b->n, 0x11, 512);
	b->n += 512;
}

static int parse(const struct buf *b, size_t n, struct k8_err *e)
{
	struct gguf g;
	memset(e, 0, sizeof(*e));
	int rc = gguf_parse(&g, b->b, n, e);
	gguf_close(&g);
	return rc;
}

int main(void)
{
	struct buf b;
	struct k8_err e;
	struct gguf g;
	build(&b, GT_F32, 32, 256);
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(gguf_parse(&g, b.b, b.n, &e), 0);
	CHECK_EQ_INT(g.n_tensors, 2);
	const struct gguf_tensor *t = gguf_tensor(&g, "t0");
	CHECK(t && t->nbytes == 32 * 2 * 4 && t->ne[1] == 2 && t->ne[2] == 1);
	struct gguf_str s;
	CHECK(!gguf_get_str(&g, "general.architecture", &s) && gguf_str_eq(s, "llama"));
	uint32_t a;
	CHECK(!gguf_get_u32(&g, "general.alignment", &a) && a == 32);
	CHECK_EQ_INT(gguf_get_u32(&g, "general.architecture", &a), -EINVAL);
	CHECK_EQ_INT(gguf_get_u32(&g, "nope", &a), -ENOENT);
	const struct gguf_kv *kv;
	CHECK(!gguf_get_arr(&g, "tokenizer.ggml.tokens", GGUF_STR, &kv) && kv->arr_n == 2);
	struct gguf_str v[2];
	gguf_arr_strs(kv, v);
	CHECK(gguf_str_eq(v[0], "a") && gguf_str_eq(v[1], "bc"));
	gguf_close(&g);

	/* Every truncation of the header is refused, none crashes. */
	size_t hdr = b.n - 512, bad = 0;
	for (size_t n = 0; n < hdr; n++)
		bad += parse(&b, n, &e) != 0;
	CHECK_EQ_INT(bad, hdr);
	CHECK(e.msg[0] != 0);

	/* A tensor whose data runs past the end. */
	build(&b, GT_F32, 32, 4096);
	CHECK(parse(&b, b.n, &e) != 0 && strstr(e.msg, "past the end"));
	/* An unaligned offset. */
	build(&b, GT_F32, 32, 260);
	CHECK(parse(&b, b.n, &e) != 0 && strstr(e.msg, "aligned"));
	/* A row that is not whole blocks, an unknown type, an unsupported one. */
	build(&b, GT_Q4_K, 32, 256);
	CHECK(parse(&b, b.n, &e) != 0 && strstr(e.msg, "multiple"));
	build(&b, 99, 32, 256);
	CHECK(parse(&b, b.n, &e) == -ENOTSUP);
	/* A huge dimension. */
	build(&b, GT_F32, 1ull << 62, 256);
	CHECK(parse(&b, b.n, &e) != 0);
	/* Bad version, magic, and counts larger than the file. */
	build(&b, GT_F32, 32, 256);
	b.b[4] = 1;
	CHECK(parse(&b, b.n, &e) == -ENOTSUP);
	build(&b, GT_F32, 32, 256);
	b.b[0] = 'X';
	CHECK(parse(&b, b.n, &e) != 0 && strstr(e.msg, "magic"));
	build(&b, GT_F32, 32, 256);
	memset(b.b + 16, 0xff, 8);   /* kv count */
	CHECK(parse(&b, b.n, &e) != 0);
	/* A string array claiming more strings than fit. */
	build(&b, GT_F32, 32, 256);
	uint8_t *cnt = memmem(b.b, b.n, "tokenizer.ggml.tokens", 21);
	CHECK(cnt != NULL);
	memset(cnt + 21 + 4 + 4, 0xff, 7);
	CHECK(parse(&b, b.n, &e) != 0);
	/* A duplicated key. */
	build(&b, GT_F32, 32, 256);
	uint8_t *k = memmem(b.b, b.n, "general.architecture", 20);
	memcpy(k, "general.alignmentxxx", 20);
	k[-8] = 17;   /* shorten to "general.alignment": the rest becomes garbage -> refused */
	CHECK(parse(&b, b.n, &e) != 0);
	return T_DONE();
}
