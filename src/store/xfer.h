/* SPDX-License-Identifier: Apache-2.0 */
/* xfer.h - moving snapshots in and out of a bucket (docs/stores.md): files cut in fixed-size
 * chunks, the chunks the bucket lacks uploaded (compressed, sealed when the store is
 * encrypted), a manifest naming them; back again with every chunk checked against its id
 * before it is written; the list of manifests; garbage collection of chunks no manifest
 * names. Mechanism only: the caller decides which files make a snapshot and where they
 * go (descriptors in, descriptors out); kosa8d's store.c does that for checkpoints and
 * paused sandboxes.
 *
 * Bucket layout: "kosa8-store" (the marker: format, encryption, a check of the key),
 * "chunks/<id>", "manifests/<name id>" (chunk.h: ids are keyed when encrypted, so
 * neither a chunk's content nor a snapshot's name shows in a key). */
#ifndef K8_STORE_XFER_H
#define K8_STORE_XFER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/util.h"
#include "store/chunk.h"
#include "store/manifest.h"
#include "store/s3.h"

#define XFER_THREADS_MAX 16
#define XFER_MARKER "kosa8-store"

struct xfer {
	struct s3_conf conf;            /* with conf.xml set to a jailed reader (kosa8d) */
	struct chunk_keys keys;
	uint32_t chunk_size;            /* for pushes */
	int threads;                    /* transfers at once: 1..XFER_THREADS_MAX */
	int level;                      /* zstd level */
	/* progress: a phase ("pushing", "pulling", "listing", "collecting"), what, bytes done
	 * and in all; called from one thread at a time, at most every 250 ms */
	void (*progress)(void *ctx, const char *phase, const char *what, uint64_t done,
			 uint64_t total);
	void *pctx;
	const char *what;               /* named in progress and errors ("interp/clean") */
	int userns;                     /* the workers' user namespace, or -1 (jobs.h) */
	struct s3_stats stats;
};

struct xfer_result {
	uint64_t files, bytes;          /* the files' sizes, holes included */
	uint64_t data;                  /* bytes in chunks (not holes) */
	uint64_t chunks;                /* chunks of data */
	uint64_t chunks_sent, sent;     /* chunks this transfer uploaded or fetched; bytes on
					 * the wire (compressed, sealed) */
	uint64_t requests, retries;
	uint64_t ms;
	char manifest[2 * CHUNK_ID_LEN + 1];    /* the manifest's name id */
};

/* The bucket's marker: checked (create: written when there is none). A bucket whose
 * marker says another key, or encryption when this store has none (or the other way),
 * is refused saying which. */
int xfer_marker(struct xfer *x, bool create, struct k8_err *err);

/* Push: m's header filled by the caller (kind, sandbox, label, config...; chunk_size is
 * set here), its files added with manifest_file (path, size, mode) and their descriptors
 * in fds[] (read with pread: offsets left alone). Chunks are cut, holes skipped, the ones
 * the bucket lacks uploaded, then the manifest. */
int xfer_push(struct xfer *x, struct manifest *m, const int *fds, struct xfer_result *res,
	      struct k8_err *err);
/* The manifest of kind ("checkpoint", "paused") and name ("SANDBOX/LABEL", "SANDBOX"):
 * fetched, opened, read in a worker. -ENOENT when the bucket has none. manifest_free(m)
 * after. */
int xfer_manifest_get(struct xfer *x, const char *kind, const char *name, struct manifest *m,
		      struct k8_err *err);
int xfer_manifest_delete(struct xfer *x, const char *kind, const char *name,
			 struct k8_err *err);
/* Pull: every chunk of m into fds[i] (one per file of m, written with pwrite; each is
 * first truncated to its file's size, so what no chunk covers is a hole of zeros). A
 * chunk whose bytes are not its id's is refused naming the chunk and its file; nothing
 * is trusted before its id matched. */
int xfer_pull(struct xfer *x, const struct manifest *m, const int *fds,
	      struct xfer_result *res, struct k8_err *err);
/* Every manifest of the bucket: fn(ctx, m) for each that reads back (the others are
 * counted in *bad, which may be NULL). */
int xfer_list(struct xfer *x, int (*fn)(void *ctx, const struct manifest *m), void *ctx,
	      uint64_t *bad, struct k8_err *err);
/* Remove the chunks no manifest names and that are older than grace_s (a push under way
 * has uploaded chunks its manifest does not name yet). A manifest that does not read
 * back stops the collection (its chunks would be taken for garbage). */
struct xfer_gc {
	uint64_t manifests, live, removed, removed_bytes, kept_young;
};
int xfer_gc(struct xfer *x, uint64_t grace_s, struct xfer_gc *res, struct k8_err *err);

#endif
