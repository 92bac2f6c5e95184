/* SPDX-License-Identifier: Apache-2.0 */
/* chunk.c - a snapshot store's objects: ids, sealing and opening (chunk.h). */
#include "store/chunk.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

static const char chunk_magic[4] = { 'K', '8', 'C', '1' };

static int hkdf(const uint8_t *master, const char *info, uint8_t out[CHUNK_KEY_LEN])
{
	EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	size_t n = CHUNK_KEY_LEN;
	int ok = c && EVP_PKEY_derive_init(c) > 0 &&
		 EVP_PKEY_CTX_set_hkdf_md(c, EVP_sha256()) > 0 &&
		 EVP_PKEY_CTX_set1_hkdf_salt(c, (const unsigned char *)"kosa8 store", 11) > 0 &&
		 EVP_PKEY_CTX_set1_hkdf_key(c, master, CHUNK_KEY_LEN) > 0 &&
		 EVP_PKEY_CTX_add1_hkdf_info(c, (const unsigned char *)info, (int)strlen(info)) > 0 &&
		 EVP_PKEY_derive(c, out, &n) > 0 && n == CHUNK_KEY_LEN;
	EVP_PKEY_CTX_free(c);
	return ok ? 0 : -EIO;
}

int chunk_keys_derive(const uint8_t master[CHUNK_KEY_LEN], struct chunk_keys *k)
{
	memset(k, 0, sizeof(*k));
	k->enc = true;
	if (hkdf(master, "kosa8 store ids", k->id_key) || hkdf(master, "kosa8 store aead",
							       k->aead_key)) {
		chunk_keys_wipe(k);
		return -EIO;
	}
	return 0;
}

void chunk_keys_wipe(struct chunk_keys *k)
{
	OPENSSL_cleanse(k, sizeof(*k));
}

void chunk_id(const struct chunk_keys *k, const void *p, size_t n, uint8_t id[CHUNK_ID_LEN])
{
	unsigned int len = CHUNK_ID_LEN;

	if (k->enc)
		HMAC(EVP_sha256(), k->id_key, CHUNK_KEY_LEN, p, n, id, &len);
	else
		SHA256(p, n, id);
}

void chunk_name_id(const struct chunk_keys *k, const char *kind, const char *name,
		   uint8_t id[CHUNK_ID_LEN])
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "manifest%c%s%c%s", 0, kind, 0, name);

	chunk_id(k, buf, n < 0 ? 0 : (size_t)n >= sizeof(buf) ? sizeof(buf) - 1 : (size_t)n, id);
}

void chunk_key_check(const struct chunk_keys *k, char out[33])
{
	static const char what[] = "kosa8 store key check";
	uint8_t id[CHUNK_ID_LEN];

	chunk_id(k, what, sizeof(what) - 1, id);
	k8_hex(id, 16, out);
}

void chunk_hex(const uint8_t id[CHUNK_ID_LEN], char out[2 * CHUNK_ID_LEN + 1])
{
	k8_hex(id, CHUNK_ID_LEN, out);
}

int chunk_unhex(const char *hex, uint8_t id[CHUNK_ID_LEN])
{
	for (int i = 0; i < CHUNK_ID_LEN; i++) {
		int v = 0;
		for (int j = 0; j < 2; j++) {
			char c = hex[2 * i + j];
			int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
			if (d < 0)
				return -EINVAL;
			v = v * 16 + d;
		}
		id[i] = (uint8_t)v;
	}
	return hex[2 * CHUNK_ID_LEN] ? -EINVAL : 0;
}

bool chunk_is_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	if (n == 0)
		return true;
	if (b[0])
		return false;
	/* every byte equals the one before it, and the first is zero */
	return memcmp(b, b + 1, n - 1) == 0;
}

size_t chunk_seal_bound(size_t n)
{
	return CHUNK_HEAD + CHUNK_NONCE + ZSTD_compressBound(n) + CHUNK_TAG;
}

static int gcm(bool seal, const struct chunk_keys *k, const uint8_t nonce[CHUNK_NONCE],
	       const char *aad, const uint8_t *in, size_t n, uint8_t *out, uint8_t tag[CHUNK_TAG])
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int len = 0, fin = 0, ok;

	if (!c || n > INT32_MAX)
		goto bad;
	ok = (seal ? EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) :
		     EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL)) > 0 &&
	     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, CHUNK_NONCE, NULL) > 0 &&
	     (seal ? EVP_EncryptInit_ex(c, NULL, NULL, k->aead_key, nonce) :
		     EVP_DecryptInit_ex(c, NULL, NULL, k->aead_key, nonce)) > 0;
	if (!ok)
		goto bad;
	if (seal) {
		ok = EVP_EncryptUpdate(c, NULL, &len, (const uint8_t *)aad, (int)strlen(aad)) > 0 &&
		     EVP_EncryptUpdate(c, out, &len, in, (int)n) > 0 &&
		     EVP_EncryptFinal_ex(c, out + len, &fin) > 0 &&
		     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, CHUNK_TAG, tag) > 0;
	} else {
		ok = EVP_DecryptUpdate(c, NULL, &len, (const uint8_t *)aad, (int)strlen(aad)) > 0 &&
		     EVP_DecryptUpdate(c, out, &len, in, (int)n) > 0 &&
		     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, CHUNK_TAG, tag) > 0 &&
		     EVP_DecryptFinal_ex(c, out + len, &fin) > 0;
	}
	EVP_CIPHER_CTX_free(c);
	return ok ? 0 : -EBADMSG;
bad:
	EVP_CIPHER_CTX_free(c);
	return -EIO;
}

int chunk_seal(const struct chunk_keys *k, const char *key, const void *plain, size_t n,
	       int level, void *zctx, uint8_t *out, size_t cap, size_t *outlen,
	       struct k8_err *err)
{
	size_t zoff = CHUNK_HEAD + (k->enc ? CHUNK_NONCE : 0), z;
	uint8_t *zbuf;

	if (cap < chunk_seal_bound(n))
		return k8_err_set(err, -ENOBUFS, "no room to seal %zu bytes", n);
	memcpy(out, chunk_magic, 4);
	out[4] = k->enc ? 1 : 0;
	/* encrypted: compressed beside, then sealed into place */
	zbuf = k->enc ? xmalloc(ZSTD_compressBound(n)) : out + zoff;
	z = ZSTD_compressCCtx(zctx, zbuf, ZSTD_compressBound(n), plain, n, level);
	if (ZSTD_isError(z)) {
		if (k->enc)
			free(zbuf);
		return k8_err_set(err, -EIO, "zstd: %s", ZSTD_getErrorName(z));
	}
	if (k->enc) {
		int r;
		if (RAND_bytes(out + CHUNK_HEAD, CHUNK_NONCE) != 1) {
			free(zbuf);
			return k8_err_set(err, -EIO, "no random nonce");
		}
		r = gcm(true, k, out + CHUNK_HEAD, key, zbuf, z, out + zoff, out + zoff + z);
		free(zbuf);
		if (r)
			return k8_err_set(err, r, "sealing %s failed", key);
		*outlen = zoff + z + CHUNK_TAG;
	} else {
		*outlen = zoff + z;
	}
	return 0;
}

int chunk_unseal(const struct chunk_keys *k, const char *key, const uint8_t *obj, size_t n,
		 uint8_t *out, size_t cap, size_t *zlen, const char *what, struct k8_err *err)
{
	size_t body;

	if (n < CHUNK_HEAD || memcmp(obj, chunk_magic, 4) || obj[4] > 1)
		return k8_err_set(err, -EBADMSG, "%s is not a kosa8 store object", what);
	if (obj[4] != (k->enc ? 1 : 0))
		return k8_err_set(err, -EBADMSG, "%s is %s, and this store is %s", what,
				  obj[4] ? "encrypted" : "not encrypted",
				  k->enc ? "encrypted" : "not encrypted");
	if (!k->enc) {
		body = n - CHUNK_HEAD;
		if (body > cap)
			return k8_err_set(err, -EBADMSG, "%s is larger than its chunk can be", what);
		memcpy(out, obj + CHUNK_HEAD, body);
		*zlen = body;
		return 0;
	}
	if (n < CHUNK_HEAD + CHUNK_NONCE + CHUNK_TAG)
		return k8_err_set(err, -EBADMSG, "%s is too short to be sealed", what);
	body = n - CHUNK_HEAD - CHUNK_NONCE - CHUNK_TAG;
	if (body > cap)
		return k8_err_set(err, -EBADMSG, "%s is larger than its chunk can be", what);
	uint8_t tag[CHUNK_TAG];
	memcpy(tag, obj + n - CHUNK_TAG, CHUNK_TAG);
	if (gcm(false, k, obj + CHUNK_HEAD, key, obj + CHUNK_HEAD + CHUNK_NONCE, body, out, tag)) {
		OPENSSL_cleanse(out, body);
		return k8_err_set(err, -EBADMSG, "%s does not open with this store's key (changed "
				  "in the bucket, or another key)", what);
	}
	*zlen = body;
	return 0;
}

void *chunk_dctx(void)
{
	ZSTD_DCtx *d = ZSTD_createDCtx();

	/* a frame may not ask for a window larger than a chunk can be */
	if (d && ZSTD_isError(ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, 24))) {
		ZSTD_freeDCtx(d);
		return NULL;
	}
	return d;
}

void chunk_dctx_free(void *dctx)
{
	ZSTD_freeDCtx(dctx);
}

int chunk_inflate(const uint8_t *z, size_t zn, uint8_t *out, size_t want, void *dctx,
		  struct k8_err *err)
{
	ZSTD_inBuffer in = { z, zn, 0 };
	ZSTD_outBuffer o = { out, want, 0 };
	size_t r;

	ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
	do {
		r = ZSTD_decompressStream(dctx, &o, &in);
		if (ZSTD_isError(r))
			return k8_err_set(err, -EBADMSG, "not a zstd frame of this chunk: %s",
					  ZSTD_getErrorName(r));
		if (o.pos == o.size && in.pos < in.size) {
			/* room is full: anything more the frame makes is too much */
			uint8_t extra;
			ZSTD_outBuffer x = { &extra, 1, 0 };
			r = ZSTD_decompressStream(dctx, &x, &in);
			if (ZSTD_isError(r) || x.pos)
				return k8_err_set(err, -EBADMSG, "the chunk decompresses to more than "
						  "its %zu bytes", want);
		}
	} while (in.pos < in.size && o.pos < o.size);
	if (r != 0 || o.pos != want || in.pos != in.size)
		return k8_err_set(err, -EBADMSG, "the chunk decompresses to %zu bytes, not %zu%s",
				  o.pos, want, r ? " (a frame cut short)" : "");
	return 0;
}

int chunk_inflate_max(const uint8_t *z, size_t zn, uint8_t *out, size_t cap, size_t *n,
		      void *dctx, struct k8_err *err)
{
	ZSTD_inBuffer in = { z, zn, 0 };
	ZSTD_outBuffer o = { out, cap, 0 };
	size_t r = 1;

	ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
	while (in.pos < in.size) {
		size_t before = in.pos + o.pos;
		r = ZSTD_decompressStream(dctx, &o, &in);
		if (ZSTD_isError(r))
			return k8_err_set(err, -EBADMSG, "not a zstd frame: %s", ZSTD_getErrorName(r));
		if (o.pos == o.size && (in.pos < in.size || r != 0))
			return k8_err_set(err, -E2BIG, "it decompresses to more than %zu bytes", cap);
		if (in.pos + o.pos == before)
			break;
	}
	if (r != 0 || in.pos != in.size)
		return k8_err_set(err, -EBADMSG, "a zstd frame cut short");
	*n = o.pos;
	return 0;
}
