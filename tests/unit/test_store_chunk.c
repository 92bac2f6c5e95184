/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_chunk.c - a snapshot store's objects (src/store/chunk.c): ids with and without
 * a key, objects sealed and opened, and every way a bucket can hand back other bytes:
 * a flipped byte, an object copied under another key, another store's key, a plain object
 * in an encrypted store, a frame that makes more or fewer bytes than its chunk. */
#include "store/chunk.h"
#include "t.h"

#include <stdlib.h>
#include <zstd.h>

static void test_ids(void)
{
	struct chunk_keys plain = { 0 }, k1, k2;
	uint8_t m1[CHUNK_KEY_LEN], m2[CHUNK_KEY_LEN], a[CHUNK_ID_LEN], b[CHUNK_ID_LEN];
	char hex[65], chk1[33], chk2[33];

	memset(m1, 1, sizeof(m1));
	memset(m2, 2, sizeof(m2));
	CHECK_EQ_INT(chunk_keys_derive(m1, &k1), 0);
	CHECK_EQ_INT(chunk_keys_derive(m2, &k2), 0);
	CHECK(memcmp(k1.id_key, k1.aead_key, CHUNK_KEY_LEN) != 0);
	/* plain: the SHA-256 everyone can compute */
	chunk_id(&plain, "abc", 3, a);
	chunk_hex(a, hex);
	CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	/* keyed: neither the SHA-256 nor another key's id */
	chunk_id(&k1, "abc", 3, b);
	CHECK(memcmp(a, b, CHUNK_ID_LEN) != 0);
	chunk_id(&k2, "abc", 3, a);
	CHECK(memcmp(a, b, CHUNK_ID_LEN) != 0);
	chunk_id(&k1, "abc", 3, a);
	CHECK(memcmp(a, b, CHUNK_ID_LEN) == 0);
	/* manifest names */
	chunk_name_id(&k1, "checkpoint", "interp/clean", a);
	chunk_name_id(&k1, "paused", "interp/clean", b);
	CHECK(memcmp(a, b, CHUNK_ID_LEN) != 0);
	chunk_key_check(&k1, chk1);
	chunk_key_check(&k2, chk2);
	CHECK(strcmp(chk1, chk2) != 0);
	CHECK_EQ_INT(strlen(chk1), 32);
	/* hex */
	CHECK_EQ_INT(chunk_unhex(hex, a), 0);
	{
		char again[65];
		chunk_hex(a, again);
		CHECK_STR(again, hex);
	}
	CHECK_EQ_INT(chunk_unhex("BA7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", a),
		     -EINVAL);
	CHECK_EQ_INT(chunk_unhex("ba78", a), -EINVAL);
	CHECK(chunk_is_zero("\0\0\0\0", 4));
	CHECK(!chunk_is_zero("\0\0\0\1", 4));
	CHECK(!chunk_is_zero("\1\0\0\0", 4));
	chunk_keys_wipe(&k1);
	CHECK(!k1.enc);
}

/* Seal n bytes and open them again; the whole round trip. */
static void roundtrip(const struct chunk_keys *k, const uint8_t *data, size_t n)
{
	void *z = ZSTD_createCCtx(), *d = chunk_dctx();
	size_t cap = chunk_seal_bound(n), on = 0, zn = 0;
	uint8_t *obj = malloc(cap), *zb = malloc(cap), *back = malloc(n + 1);
	struct k8_err err = { 0 };

	CHECK_EQ_INT(chunk_seal(k, "chunks/x", data, n, 3, z, obj, cap, &on, &err), 0);
	CHECK_EQ_INT(chunk_unseal(k, "chunks/x", obj, on, zb, cap, &zn, "chunk x", &err), 0);
	CHECK_EQ_INT(chunk_inflate(zb, zn, back, n, d, &err), 0);
	CHECK(memcmp(back, data, n) == 0);
	if (k->enc)     /* nothing of the plain bytes shows in an encrypted object */
		CHECK(memmem(obj, on, "kosa8kosa8kosa8", 15) == NULL);
	free(obj);
	free(zb);
	free(back);
	ZSTD_freeCCtx(z);
	chunk_dctx_free(d);
}

static void test_seal(void)
{
	struct chunk_keys plain = { 0 }, k1, k2;
	uint8_t m1[CHUNK_KEY_LEN], m2[CHUNK_KEY_LEN];
	size_t n = 300000, cap = chunk_seal_bound(n), on = 0, zn = 0;
	uint8_t *data = malloc(n), *obj = malloc(cap), *zb = malloc(cap), *back = malloc(n);
	void *z = ZSTD_createCCtx(), *d = chunk_dctx();
	struct k8_err err = { 0 };

	memset(m1, 7, sizeof(m1));
	memset(m2, 8, sizeof(m2));
	chunk_keys_derive(m1, &k1);
	chunk_keys_derive(m2, &k2);
	for (size_t i = 0; i < n; i++)
		data[i] = i % 15 < 5 ? (uint8_t)"kosa8"[i % 5] : (uint8_t)(i * 7);
	roundtrip(&plain, data, n);
	roundtrip(&k1, data, n);
	roundtrip(&k1, data, 0);

	/* encrypted: one flipped byte anywhere, another key, another object's name: refused */
	CHECK_EQ_INT(chunk_seal(&k1, "chunks/a", data, n, 3, z, obj, cap, &on, &err), 0);
	for (size_t at = 0; at < on; at += on / 7 + 1) {
		obj[at] ^= 0x40;
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(chunk_unseal(&k1, "chunks/a", obj, on, zb, cap, &zn, "chunk a", &err),
			     -EBADMSG);
		CHECK(strstr(err.msg, "chunk a") != NULL);
		obj[at] ^= 0x40;
	}
	CHECK_EQ_INT(chunk_unseal(&k2, "chunks/a", obj, on, zb, cap, &zn, "chunk a", &err), -EBADMSG);
	CHECK_EQ_INT(chunk_unseal(&k1, "chunks/b", obj, on, zb, cap, &zn, "chunk b", &err), -EBADMSG);
	CHECK_EQ_INT(chunk_unseal(&plain, "chunks/a", obj, on, zb, cap, &zn, "chunk a", &err),
		     -EBADMSG);
	CHECK_EQ_INT(chunk_unseal(&k1, "chunks/a", obj, 20, zb, cap, &zn, "chunk a", &err), -EBADMSG);
	CHECK_EQ_INT(chunk_unseal(&k1, "chunks/a", obj, on, zb, 10, &zn, "chunk a", &err), -EBADMSG);

	/* a plain object in an encrypted store is refused, not read */
	CHECK_EQ_INT(chunk_seal(&plain, "chunks/a", data, n, 3, z, obj, cap, &on, &err), 0);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(chunk_unseal(&k1, "chunks/a", obj, on, zb, cap, &zn, "chunk a", &err), -EBADMSG);
	CHECK(strstr(err.msg, "not encrypted") != NULL);
	CHECK_EQ_INT(chunk_unseal(&plain, "chunks/a", (const uint8_t *)"K8C2\0", 5, zb, cap, &zn,
				  "chunk a", &err), -EBADMSG);

	/* frames that make other than the chunk's size */
	CHECK_EQ_INT(chunk_unseal(&plain, "chunks/a", obj, on, zb, cap, &zn, "chunk a", &err), 0);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(chunk_inflate(zb, zn, back, n - 1, d, &err), -EBADMSG);
	CHECK(err.msg[0] != '\0');
	CHECK_EQ_INT(chunk_inflate(zb, zn, back, n, d, &err), 0);
	{
		uint8_t *big = malloc(n + 1);
		CHECK_EQ_INT(chunk_inflate(zb, zn, big, n + 1, d, &err), -EBADMSG);
		free(big);
	}
	CHECK_EQ_INT(chunk_inflate(zb, zn - 3, back, n, d, &err), -EBADMSG);     /* cut short */
	CHECK_EQ_INT(chunk_inflate((const uint8_t *)"garbage!", 8, back, 8, d, &err), -EBADMSG);
	/* a bomb: 64 MiB of zeros in a few KiB, for a chunk of 1 MiB */
	{
		size_t bn = 64u << 20, bz = ZSTD_compressBound(bn);
		uint8_t *zeros = calloc(1, bn), *bf = malloc(bz), *out = malloc(1u << 20);
		size_t zl = ZSTD_compress(bf, bz, zeros, bn, 3);
		CHECK(!ZSTD_isError(zl) && zl < 64 * 1024);
		CHECK_EQ_INT(chunk_inflate(bf, zl, out, 1u << 20, d, &err), -EBADMSG);
		free(zeros);
		free(bf);
		free(out);
	}
	free(data);
	free(obj);
	free(zb);
	free(back);
	ZSTD_freeCCtx(z);
	chunk_dctx_free(d);
}

int main(void)
{
	test_ids();
	test_seal();
	return T_DONE();
}
