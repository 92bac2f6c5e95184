/* SPDX-License-Identifier: Apache-2.0 */
/* chunk.h - the objects of a snapshot store (docs/stores.md): what a chunk's id is, and
 * how a chunk or a manifest becomes the bytes the bucket holds and back.
 *
 * Ids. Without encryption a chunk's id is the SHA-256 of its bytes. With encryption it is
 * HMAC-SHA256 under a key derived from the store's key (HKDF-SHA256, info "kosa8 store
 * ids"): the bucket's operator cannot hash a block he knows (a zero page, a library) and
 * look for it. A manifest's name is the same function over "manifest\0KIND\0NAME".
 *
 * Objects. "K8C1", a flags byte (1: encrypted), then the zstd frame of the bytes; when
 * encrypted, the frame is sealed with AES-256-GCM under a second derived key ("kosa8
 * store aead"), a random 96-bit nonce after the flags byte and the 16-byte tag at the
 * end, the object's key ("chunks/<id>") as associated data, so an object copied under
 * another key does not open. Reading back: chunk_unseal (the header and the tag: no
 * parsing) in kosa8d, chunk_inflate (zstd, bounded to the size the manifest gives) in a
 * jailed worker (store/jobs.c), then the id of what came out is compared in kosa8d. */
#ifndef K8_STORE_CHUNK_H
#define K8_STORE_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define CHUNK_ID_LEN 32
#define CHUNK_KEY_LEN 32
#define CHUNK_SIZE_MIN (64u << 10)
#define CHUNK_SIZE_MAX (16u << 20)
#define CHUNK_SIZE_DEFAULT (1u << 20)
#define CHUNK_HEAD 5                    /* "K8C1" and the flags byte */
#define CHUNK_NONCE 12
#define CHUNK_TAG 16

struct chunk_keys {
	bool enc;
	uint8_t id_key[CHUNK_KEY_LEN];
	uint8_t aead_key[CHUNK_KEY_LEN];
};

/* Keys of an encrypted store from its 32-byte key; 0 or -EIO. */
int chunk_keys_derive(const uint8_t master[CHUNK_KEY_LEN], struct chunk_keys *k);
/* Wipe them. */
void chunk_keys_wipe(struct chunk_keys *k);

/* The id of n bytes at p. */
void chunk_id(const struct chunk_keys *k, const void *p, size_t n, uint8_t id[CHUNK_ID_LEN]);
/* The id of a manifest: kind "checkpoint" or "paused", name "SANDBOX/LABEL" or "SANDBOX". */
void chunk_name_id(const struct chunk_keys *k, const char *kind, const char *name,
		   uint8_t id[CHUNK_ID_LEN]);
/* A fixed string under the id key, which the bucket's marker object holds so that a
 * store opened with another key (or none) is refused before anything is read: 32 hex. */
void chunk_key_check(const struct chunk_keys *k, char out[33]);
void chunk_hex(const uint8_t id[CHUNK_ID_LEN], char out[2 * CHUNK_ID_LEN + 1]);
/* 64 lower-case hex digits to an id: 0 or -EINVAL. */
int chunk_unhex(const char *hex, uint8_t id[CHUNK_ID_LEN]);
/* All n bytes zero (such a chunk is a hole: never stored). */
bool chunk_is_zero(const void *p, size_t n);

/* The largest object n bytes make. */
size_t chunk_seal_bound(size_t n);
/* n bytes at plain as the object for `key` ("chunks/<hex>"): compressed at `level` with
 * zctx (a ZSTD_CCtx of the caller's), sealed when k->enc. 0 with *outlen, or -errno. */
int chunk_seal(const struct chunk_keys *k, const char *key, const void *plain, size_t n,
	       int level, void *zctx, uint8_t *out, size_t cap, size_t *outlen,
	       struct k8_err *err);
/* An object from the bucket (hostile): its header checked and, when the store is
 * encrypted, its tag; the zstd frame it holds copied to out (at most cap bytes) with *zlen.
 * -EBADMSG naming `what` for anything else. No decompression here. */
int chunk_unseal(const struct chunk_keys *k, const char *key, const uint8_t *obj, size_t n,
		 uint8_t *out, size_t cap, size_t *zlen, const char *what, struct k8_err *err);
/* A zstd frame (hostile) to exactly `want` bytes at out, with dctx (a ZSTD_DCtx whose
 * window is bounded: chunk_dctx). -EBADMSG when it is not a frame, makes more or fewer
 * bytes, or asks for a larger window. */
int chunk_inflate(const uint8_t *z, size_t zn, uint8_t *out, size_t want, void *dctx,
		  struct k8_err *err);
/* A zstd frame (hostile) of a size not known ahead (a manifest): at most cap bytes into
 * out, *n of them. -E2BIG past cap, -EBADMSG when it is not a whole frame. */
int chunk_inflate_max(const uint8_t *z, size_t zn, uint8_t *out, size_t cap, size_t *n,
		      void *dctx, struct k8_err *err);
/* A ZSTD_DCtx for chunk_inflate (a window of at most CHUNK_SIZE_MAX), or NULL. */
void *chunk_dctx(void);
void chunk_dctx_free(void *dctx);

#endif
