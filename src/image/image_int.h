/* SPDX-License-Identifier: Apache-2.0 */
/* image_int.h - what the image store's files share: the store itself, limits, reference
 * parts, the blob writer (streaming SHA-256) and the unpacker's entry point. Not for use
 * outside src/image/. */
#ifndef K8_IMAGE_INT_H
#define K8_IMAGE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "image/image.h"

/* Limits on what a source or a registry may make us hold or write. */
#define IMAGE_JSON_MAX        (4u << 20)      /* one manifest, index or config blob */
#define IMAGE_REFS_MAX        (16u << 20)     /* refs.json */
#define IMAGE_UNPACK_MAX      (64ull << 30)   /* bytes one image may unpack to */
#define IMAGE_PULL_MAX        (32ull << 30)   /* bytes one pull may download */
#define UNPACK_MAX_ENTRIES    1000000u        /* entries in one layer */
#define UNPACK_MAX_PATH       4096u           /* bytes in one entry's path */
#define UNPACK_MAX_DEPTH      256u            /* components in one path */

struct image_store {
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* broadcast when a disk build ends */
	char *root;                /* for messages and the disk paths handed out */
	int rootfd, lockfd, tmpfd, blobfd, diskfd;  /* root, root/lock, tmp, blobs/sha256, disks */
	json_t *refs;              /* ref -> "sha256:<hex>"; guarded by lock */
	unsigned busy;             /* loads and disk builds running: GC waits for 0 */
	bool gc_pending;           /* a GC was skipped because busy was not 0 */
	json_t *building;          /* object: manifest hex -> true while its disk is built */
	uint64_t seq;              /* unique names in tmp/ */
	uint64_t freed;            /* bytes the GC deleted since the store was opened */
	/* unpack_jail.c: the unpacker's ids and its user namespace (made at first use;
	 * guarded by lock) */
	uint32_t unpack_first, unpack_count;
	int unpack_ns;
};

/* reference.c */
struct ref_parts {
	char domain[256];          /* "docker.io", "127.0.0.1:5000", "localhost" */
	char path[256];            /* "library/python" */
	char tag[129];             /* "" when the input had none */
	char digest[72];           /* "" or "sha256:<64 hex>" */
};
int ref_parse(const char *in, struct ref_parts *p, struct k8_err *err);
/* "domain/path[:tag][@digest]", with ":latest" when there is neither tag nor digest. */
int ref_format(const struct ref_parts *p, char *out, size_t outlen, struct k8_err *err);
/* A bare tag (what org.opencontainers.image.ref.name may hold instead of a full name). */
bool ref_tag_valid(const char *s);
/* "sha256:<64 lowercase hex>": copies the hex into hex[65] (may be NULL). */
bool ref_digest_valid(const char *s, char *hex);
bool ref_hex_valid(const char *s, size_t n);

/* store.c: blobs. A writer streams into a new file under a directory (tmp/ or a load's
 * staging directory), hashing as it goes; finish fsyncs and checks the digest. */
struct blob_writer {
	int dirfd;
	int fd;
	char name[64];
	void *md;                  /* EVP_MD_CTX */
	uint64_t size;
	uint64_t max;              /* refuse more than this many bytes (0: no limit) */
};
int blobw_open(struct blob_writer *w, int dirfd, uint64_t max, struct k8_err *err);
int blobw_write(struct blob_writer *w, const void *buf, size_t n, struct k8_err *err);
/* Finish: fsync, compute the digest into hex[65]; when `expect` (64 hex) is given and
 * differs, the file is removed and -EBADMSG returned with a message naming `what`.
 * On success the file is renamed to `final` in the same directory (when not NULL). */
int blobw_finish(struct blob_writer *w, const char *expect, const char *what,
		 const char *final, char hex[65], struct k8_err *err);
void blobw_abort(struct blob_writer *w);

bool store_blob_exists(struct image_store *st, const char *hex);
/* Read a stored JSON blob (<= IMAGE_JSON_MAX) and parse it. */
int store_blob_json(struct image_store *st, const char *hex, json_t **out, struct k8_err *err);
/* Check an image manifest's shape (config and layer descriptors); the config's hex and
 * the layers' total size out (size may be NULL). */
int store_manifest_check(json_t *m, char cfg_hex[65], uint64_t *size, struct k8_err *err);
/* Parse a JSON document from memory with the store's rules (duplicate keys refused). */
int store_json_parse(const char *buf, size_t len, const char *what, json_t **out,
		     struct k8_err *err);
/* Start and end long work that reads blobs (loads, disk builds): GC waits for it. */
void store_busy_begin(struct image_store *st);
void store_busy_end(struct image_store *st);
/* Under the lock: set the refs and write refs.json atomically. */
int store_refs_save_locked(struct image_store *st, struct k8_err *err);
/* Under the lock: resolve a name/digest/prefix to a manifest hex and the ref found. */
int store_lookup_locked(struct image_store *st, const char *ref, char hex[65],
			char *refout, size_t reflen, struct k8_err *err);
/* Under the lock: GC now if nothing is busy, else mark it pending. */
void store_gc_locked(struct image_store *st);
/* Name `name` (normalised) the manifest `mhex`, whose blobs are all stored: sets the ref
 * under the lock, writes refs.json (rolled back on failure) and collects the image the
 * name pointed at before, if nothing else names it. */
int store_ref_set(struct image_store *st, const char *name, const char *mhex,
		  struct k8_err *err);
/* Create a unique name for tmp/: "<prefix>-<pid>-<seq>". */
void store_tmp_name(struct image_store *st, const char *prefix, char *out, size_t n);

/* unpack.c: image_unpack_layer on an open layer (read from where it stands), `name` in
 * messages, with a running byte count (*used is added to). UNPACK_OWNERS: owners kept
 * (needs CAP_CHOWN), else files stay ours; UNPACK_MODES: modes as they are (needs
 * CAP_DAC_OVERRIDE to fill a directory without u+w), else u+r on files and u+rwx on
 * directories. In this process: kosa8d calls it only in a jailed worker
 * (image_unpack_jailed). */
#define UNPACK_OWNERS 1u
#define UNPACK_MODES  2u
int unpack_layer_fd(int rootfd, int fd, const char *name, unsigned flags, uint64_t max_bytes,
		    uint64_t *used, struct k8_err *err);
/* rm -rf of dirfd/name that never follows a symlink. */
int unpack_remove_at(int dirfd, const char *name, unsigned depth);

/* registry.c: pure helpers, exposed for unit tests. */
struct registry_challenge {
	char scheme[16];           /* "bearer" or "basic" (lower case) */
	char realm[1024];
	char service[256];
	char scope[512];
};
/* Parse a WWW-Authenticate value: 0, -EINVAL (malformed; Bearer needs a realm) or
 * -ENOTSUP (another scheme). */
int registry_parse_challenge(const char *hdr, struct registry_challenge *c);
/* From an OCI index or Docker manifest list, the linux/amd64 manifest's hex and size:
 * 0, -ENOENT (none; `avail` lists the platforms there are, "linux/arm64/v8, ...") or
 * -EINVAL (its descriptor is malformed). */
int registry_pick_platform(json_t *index, char hex[65], int64_t *size, char *avail,
			   size_t availlen);
/* May registry `domain` ("host[:port]") be reached over plain http? Loopback
 * (127.0.0.0/8, localhost, [::1]) and the hosts or host:ports in `insecure`. */
bool registry_plain_http_ok(const char *domain, const char *const *insecure);
/* Do URLs `a` and `b` ("scheme://[user@]host[:port][/...]") name the same origin: scheme,
 * host (case-insensitive) and port, the default port filled in for http and https?
 * False when either does not parse. Credentials go only to the registry's own origin. */
bool registry_same_origin(const char *a, const char *b);

#endif
