/* SPDX-License-Identifier: Apache-2.0 */
/* commit.c - images made on this host (docker build): blobs added from the builder,
 * a manifest written over them, a name given (image.h, "Images made here").
 *
 * The same rules as a load or a pull: a blob lands in blobs/sha256 only by rename from a
 * file hashed while it was written; the name goes into refs.json last. The builder holds
 * the store busy (image_hold) from its first blob to its last name, so a GC running in
 * between (another client removing an image) never takes what it added.
 */
#include "image/image_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define COMMIT_LAYER_MAX (16ull << 30)  /* bytes of one layer made here */

void image_hold(struct image_store *st)
{
	store_busy_begin(st);
}

void image_release(struct image_store *st)
{
	store_busy_end(st);
}

/* A finished writer in tmp/ moves into blobs/sha256/<hex> (or is dropped: already there). */
static int commit_land(struct image_store *st, struct blob_writer *w, char hex[65],
		       struct k8_err *err)
{
	int r = blobw_finish(w, NULL, "a new blob", NULL, hex, err);

	if (r)
		return r;
	if (store_blob_exists(st, hex)) {
		unlinkat(st->tmpfd, w->name, 0);
		return 0;
	}
	if (renameat(st->tmpfd, w->name, st->blobfd, hex) < 0) {
		r = -errno;
		unlinkat(st->tmpfd, w->name, 0);
		return k8_err_set(err, r, "storing blob sha256:%.12s: %s", hex, strerror(-r));
	}
	fsync(st->blobfd);
	return 0;
}

int image_blob_add(struct image_store *st, const void *buf, size_t n, char hex[65],
		   struct k8_err *err)
{
	struct blob_writer w;
	int r = blobw_open(&w, st->tmpfd, IMAGE_JSON_MAX, err);

	if (r)
		return r;
	r = blobw_write(&w, buf, n, err);
	if (r) {
		blobw_abort(&w);
		return r;
	}
	return commit_land(st, &w, hex, err);
}

int image_blob_add_fd(struct image_store *st, int fd, char hex[65], uint64_t *size,
		      struct k8_err *err)
{
	struct blob_writer w;
	char buf[65536];
	ssize_t n;
	int r = blobw_open(&w, st->tmpfd, COMMIT_LAYER_MAX, err);

	if (r)
		return r;
	if (lseek(fd, 0, SEEK_SET) < 0) {
		blobw_abort(&w);
		return k8_err_set(err, -errno, "reading a new layer: %s", strerror(errno));
	}
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = k8_err_set(err, -errno, "reading a new layer: %s", strerror(errno));
			break;
		}
		if ((r = blobw_write(&w, buf, (size_t)n, err)))
			break;
	}
	if (r) {
		blobw_abort(&w);
		return r;
	}
	*size = w.size;
	return commit_land(st, &w, hex, err);
}

int image_read(struct image_store *st, const char *ref, char mdigest[80], json_t **manifest,
	       json_t **config, struct k8_err *err)
{
	char hex[65], chex[65], found[512];
	int r;

	*manifest = *config = NULL;
	pthread_mutex_lock(&st->lock);
	r = store_lookup_locked(st, ref, hex, found, sizeof(found), err);
	if (!r)
		r = store_blob_json(st, hex, manifest, err);
	if (!r)
		r = store_manifest_check(*manifest, chex, NULL, err);
	if (!r)
		r = store_blob_json(st, chex, config, err);
	pthread_mutex_unlock(&st->lock);
	if (r) {
		json_decref(*manifest);
		*manifest = NULL;
		return r;
	}
	snprintf(mdigest, 80, "sha256:%s", hex);
	return 0;
}

int image_blob_open(struct image_store *st, const char *digest, struct k8_err *err)
{
	char hex[65];
	int fd;

	if (!ref_digest_valid(digest, hex))
		return k8_err_set(err, -EINVAL, "not a digest: %.80s", digest);
	fd = openat(st->blobfd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return k8_err_set(err, -errno, "blob %s: %s", digest, strerror(errno));
	return fd;
}

int image_commit(struct image_store *st, json_t *manifest, const char *name, char mdigest[80],
		 struct k8_err *err)
{
	cleanup_free char *text = json_dumps(manifest, JSON_COMPACT);
	char hex[65], chex[65], norm[512];
	json_t *l;
	size_t i;
	int r;

	if (!text)
		return k8_err_set(err, -ENOMEM, "the new image's manifest: out of memory");
	r = store_manifest_check(manifest, chex, NULL, err);
	if (r)
		return r;
	if (!store_blob_exists(st, chex))
		return k8_err_set(err, -EINVAL, "the new image's config is not stored");
	json_array_foreach(json_object_get(manifest, "layers"), i, l) {
		char lhex[65];
		ref_digest_valid(json_string_value(json_object_get(l, "digest")), lhex);
		if (!store_blob_exists(st, lhex))
			return k8_err_set(err, -EINVAL, "layer sha256:%.12s of the new image is "
					  "not stored", lhex);
	}
	r = image_blob_add(st, text, strlen(text), hex, err);
	if (r)
		return r;
	snprintf(mdigest, 80, "sha256:%s", hex);
	if (!name)
		return 0;
	r = image_ref_normalize(name, norm, sizeof(norm), err);
	if (r)
		return r;
	if (strchr(norm, '@'))
		return k8_err_set(err, -EINVAL, "'%s': a built image is named with a tag, not a "
				  "digest", name);
	return store_ref_set(st, norm, hex, err);
}
