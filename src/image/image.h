/* SPDX-License-Identifier: Apache-2.0 */
/* image.h - the host's image store: content-addressed blobs shared by all sandboxes,
 * references (names) to manifests, safe layer unpacking and one read-only disk image
 * (EROFS) per image. Used by kosa8d only.
 *
 * Layout under <root> (normally $KOSA8_HOME/images):
 *   blobs/sha256/<hex>        every blob, checked against its digest before it lands
 *   refs.json                 { "docker.io/library/python:3.12-slim": "sha256:<manifest>" }
 *   disks/<manifest-hex>.erofs  the image's root file system, built once, read-only
 *   tmp/                      work in progress; anything here is discarded at open
 *
 * Thread safety: one struct image_store per daemon; every function takes its lock.
 */
#ifndef K8_IMAGE_H
#define K8_IMAGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/util.h"

struct image_store;

/* What a sandbox needs to run an image (from the image's config blob). */
struct image_info {
	char ref[512];          /* normalised reference, e.g. docker.io/library/python:3.12-slim */
	char digest[80];        /* manifest digest, "sha256:<hex>" */
	char config_digest[80];
	uint64_t size;          /* sum of compressed layer sizes */
	json_t *env;            /* array of "K=V" strings (may be empty, never NULL) */
	json_t *entrypoint;     /* array of strings or NULL */
	json_t *cmd;            /* array of strings or NULL */
	char workdir[4096];     /* "" means "/" */
	char user[256];         /* "" means root */
};
void image_info_clear(struct image_info *info);

/* Progress callback for long work: `phase` is e.g. "unpack" or "disk", done/total in
 * bytes (total 0 when unknown). May be NULL. */
typedef void (*image_progress_fn)(void *ctx, const char *phase, const char *what,
				  uint64_t done, uint64_t total);

int image_store_open(const char *root, struct image_store **out, struct k8_err *err);
void image_store_close(struct image_store *st);

/* Normalise a reference the way Docker does: "python:3.12-slim" ->
 * "docker.io/library/python:3.12-slim", "python" -> "...:latest", keeps "@sha256:...".
 * Returns 0 or -EINVAL with a message naming what is wrong. */
int image_ref_normalize(const char *in, char *out, size_t outlen, struct k8_err *err);

/* Load images from a local source: an OCI image layout directory, an OCI archive (tar of
 * a layout) or a `docker save` tarball. Every blob is verified. `tag` (may be NULL)
 * names the image when the source carries no name. On success *loaded is a JSON array
 * of {"ref": "...", "digest": "sha256:..."}. */
int image_load(struct image_store *st, const char *path, const char *tag,
	       image_progress_fn progress, void *ctx, json_t **loaded, struct k8_err *err);

/* Pull an image from a registry (OCI distribution API): manifest (linux/amd64 from an
 * index), config and layers, every blob verified against its digest; blobs the store has
 * are not fetched again. A blob lands once verified; the manifest and the name land only
 * when every blob is there (a failed pull's blobs are collected as garbage). On success
 * *result is {"ref": normalised name, "digest": "sha256:<manifest>", "registry": host}. */
struct pull_opts {
	bool offline;                 /* KOSA8_OFFLINE: never touch the network */
	const char *auth_file;        /* kosa8 credentials JSON ({"auths": ...}), may be NULL */
	const char *docker_config;    /* ~/.docker/config.json path, may be NULL */
	const char *const *insecure;  /* registries allowed over plain http besides loopback */
	const char *const *mirrors;   /* for docker.io: "http(s)://host:port", tried first */
	const char *basic;            /* "user:password" given with this pull (Docker's
				       * X-Registry-Auth); before the files when set */
};
int image_pull(struct image_store *st, const char *ref, const struct pull_opts *opts,
	       image_progress_fn progress, void *ctx, json_t **result, struct k8_err *err);

/* JSON array of {"ref","digest","size","created"} for every reference, with
 * "config_digest" and the config's "labels" (an object) when the image has them. */
int image_list(struct image_store *st, json_t **out, struct k8_err *err);

/* Resolve a reference (any form image_ref_normalize accepts, or a digest or a unique
 * digest prefix) to its info. -ENOENT with "image X is not loaded; run kosa8 image
 * load or kosa8 image pull" when absent. */
int image_resolve(struct image_store *st, const char *ref, struct image_info *info,
		  struct k8_err *err);

/* Path of the read-only EROFS disk of the image with manifest `digest`, building it
 * first (unpack all layers safely into a temporary tree, mkfs.erofs, rename into place)
 * if it does not exist yet. Caller frees *path. */
int image_disk(struct image_store *st, const char *digest, image_progress_fn progress,
	       void *ctx, char **path, struct k8_err *err);

/* Name the image `src` resolves to (any form image_resolve takes) also `dst` (a name
 * with a tag, no digest), replacing what `dst` named before. -ENOENT when src is absent. */
int image_tag(struct image_store *st, const char *src, const char *dst, struct k8_err *err);

/* The build cache's names (IMAGE_CACHE_REPO:<key>), as {"ref","digest"}. */
int image_cache_names(struct image_store *st, json_t **out);
/* Bytes of blobs and disks the store's GC has deleted since it was opened (a prune
 * reports the difference as Docker's SpaceReclaimed). */
uint64_t image_store_freed(struct image_store *st);

/* Remove a reference; blobs and disks no longer referenced are deleted. */
int image_remove(struct image_store *st, const char *ref, struct k8_err *err);

/* ---- Unpacking in a jail (unpack_jail.c; docs/images.md "The unpacker's jail") ----
 *
 * Every layer kosa8d unpacks (an image's, for its disk; a build's context) is read by a
 * worker (src/common/worker.h): a child process that is root of a user namespace of the
 * store's own, whose ids 0..count-1 are the host's FIRST..FIRST+count-1 (config.json
 * "unpack_uids", default below), with only CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER and
 * CAP_FSETID there (CAP_DAC_OVERRIDE alone when owners are not kept), writing through
 * an idmapped clone of the tree (so a file of image uid u is uid u on disk), Landlock to
 * that tree and /usr read-only, seccomp. A daemon that is not root has no namespace: its worker runs
 * as the daemon's user with no capability and keeps no owners. */
#define IMAGE_UNPACK_IDS_FIRST 851072u     /* just above the jail_uids default */
#define IMAGE_UNPACK_IDS_COUNT 65536u
#define IMAGE_UNPACK_IDS_DEFAULT "851072-916607"
/* Set the unpacker's host ids from "FIRST-LAST" (at least 65536); before the first
 * unpack. 0 or -EINVAL with a message. */
int image_store_unpack_ids(struct image_store *st, const char *spec, struct k8_err *err);
/* The ids it holds (for the daemon's checks that ranges do not overlap). */
void image_store_unpack_range(struct image_store *st, uint32_t *first, uint32_t *count);
/* The store's user namespace for workers (made at the first call; the store keeps it)
 * in *ns: an fd, or -1 when the daemon is not root (no namespace). 0 or a negative errno
 * with a message. */
int image_store_userns(struct image_store *st, int *ns, struct k8_err *err);
/* Unpack the layer open at `fd` (read from where it stands) into the directory `rootfd`
 * in a worker: image_unpack_layer's checks and results, `name` in messages, owners kept
 * when `owners`, *used added to (bytes the layer declared). A worker that dies is an
 * error like any other. */
int image_unpack_jailed(struct image_store *st, int rootfd, int fd, const char *name,
			bool owners, uint64_t max_bytes, uint64_t *used, struct k8_err *err);

/* Unpack one layer tar stream (gzip, zstd or uncompressed; detected) into the directory
 * `rootfd` refers to, applying OCI whiteouts. Hostile input is refused with -EPERM or
 * -EINVAL and a message: absolute or `..` paths, paths through symlinks, hard links to
 * outside the root; -EFBIG when the files' declared sizes pass `max_bytes` in total
 * (checked before writing). Device nodes, FIFOs and sockets are never created (the
 * entry only removes what was at its path). On error the tree may hold part of the
 * layer: callers discard it. In this process, as whoever calls it: for unit tests and
 * fuzzing (kosa8d uses image_unpack_jailed). */
int image_unpack_layer(int rootfd, const char *layer_path, uint64_t max_bytes,
		       struct k8_err *err);

/* ---- Images made here (commit.c): docker build ----
 *
 * A builder holds the store (image_hold .. image_release) from its first blob to its
 * last name, so a GC in between never takes what it added. */
void image_hold(struct image_store *st);
void image_release(struct image_store *st);
/* Add a blob (at most 4 MiB from memory; a layer from an open file, read from its
 * start); its sha256 hex out. A blob already stored is kept as it is. */
int image_blob_add(struct image_store *st, const void *buf, size_t n, char hex[65],
		   struct k8_err *err);
int image_blob_add_fd(struct image_store *st, int fd, char hex[65], uint64_t *size,
		      struct k8_err *err);
/* The manifest and config of the image `ref` resolves to; its manifest digest out. */
int image_read(struct image_store *st, const char *ref, char mdigest[80], json_t **manifest,
	       json_t **config, struct k8_err *err);
/* An open read-only fd of the stored blob `digest` ("sha256:<hex>"); negative errno. */
int image_blob_open(struct image_store *st, const char *digest, struct k8_err *err);
/* Store `manifest` (whose config and layers must be stored) and, when `name` is not
 * NULL, name it (normalised; a tag, never a digest). The manifest digest out. */
int image_commit(struct image_store *st, json_t *manifest, const char *name, char mdigest[80],
		 struct k8_err *err);
/* Names under this repository are the build cache's (one per step key): they keep the
 * step images alive and are left out of image_list. */
#define IMAGE_CACHE_REPO "localhost/kosa8-build-cache"

#endif
