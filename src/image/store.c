/* SPDX-License-Identifier: Apache-2.0 */
/* store.c - the content-addressed blob store, refs.json, lookup, list, remove and GC.
 *
 * Theory of operation. A blob reaches blobs/sha256/<hex> only by a rename from a file
 * that was hashed while it was written and fsynced, so every file there has been
 * checked against its name. refs.json is the only root: it is rewritten atomically
 * after the blobs it names have landed (and their directory was fsynced). A crash at any
 * point leaves at worst unreferenced blobs (collected at the next open) and files in
 * tmp/ (wiped at open). One process owns a store at a time (flock on <root>/lock).
 *
 * Threads: st->lock guards refs, busy, gc_pending and building. Long work (loads, disk
 * builds) runs without the lock and is counted in `busy`; a GC deletes nothing while
 * anything is busy, it is done when the last busy user ends instead.
 */
#include "image/image_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- blob writer */

int blobw_open(struct blob_writer *w, int dirfd, uint64_t max, struct k8_err *err)
{
	static unsigned long counter;
	unsigned long c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);

	memset(w, 0, sizeof(*w));
	w->dirfd = dirfd;
	w->max = max;
	snprintf(w->name, sizeof(w->name), "w-%d-%lu", (int)getpid(), c);
	w->fd = openat(dirfd, w->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (w->fd < 0)
		return k8_err_set(err, -errno, "creating a temporary blob: %s", strerror(errno));
	w->md = EVP_MD_CTX_new();
	if (!w->md || !EVP_DigestInit_ex(w->md, EVP_sha256(), NULL)) {
		blobw_abort(w);
		return k8_err_set(err, -ENOMEM, "SHA-256 context: out of memory");
	}
	return 0;
}

int blobw_write(struct blob_writer *w, const void *buf, size_t n, struct k8_err *err)
{
	int r;

	if (w->max && (w->size + n > w->max || w->size + n < w->size))
		return k8_err_set(err, -EFBIG, "blob is larger than %llu bytes",
				  (unsigned long long)w->max);
	if (!EVP_DigestUpdate(w->md, buf, n))
		return k8_err_set(err, -EIO, "SHA-256 update failed");
	r = write_full(w->fd, buf, n);
	if (r)
		return k8_err_set(err, r, "writing a blob: %s", strerror(-r));
	w->size += n;
	return 0;
}

void blobw_abort(struct blob_writer *w)
{
	if (w->fd >= 0) {
		close(w->fd);
		unlinkat(w->dirfd, w->name, 0);
		w->fd = -1;
	}
	EVP_MD_CTX_free(w->md);
	w->md = NULL;
}

int blobw_finish(struct blob_writer *w, const char *expect, const char *what,
		 const char *final, char hex[65], struct k8_err *err)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int r = 0;

	if (!EVP_DigestFinal_ex(w->md, md, &mdlen) || mdlen != 32) {
		blobw_abort(w);
		return k8_err_set(err, -EIO, "SHA-256 final failed");
	}
	k8_hex(md, 32, hex);
	if (expect && strcmp(expect, hex)) {
		blobw_abort(w);
		return k8_err_set(err, -EBADMSG,
				  "%s is corrupt: its content hashes to sha256:%s, not sha256:%s; "
				  "the source is damaged or was tampered with", what, hex, expect);
	}
	if (fsync(w->fd) < 0)
		r = k8_err_set(err, -errno, "fsync of %s: %s", what, strerror(errno));
	if (!r && final && renameat(w->dirfd, w->name, w->dirfd, final) < 0)
		r = k8_err_set(err, -errno, "storing %s: %s", what, strerror(errno));
	if (r) {
		blobw_abort(w);
		return r;
	}
	close(w->fd);
	w->fd = -1;
	EVP_MD_CTX_free(w->md);
	w->md = NULL;
	return 0;
}

/* ---------------------------------------------------------------- JSON blobs */

int store_json_parse(const char *buf, size_t len, const char *what, json_t **out,
		     struct k8_err *err)
{
	json_error_t je;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);

	if (!j)
		return k8_err_set(err, -EINVAL, "%s is not valid JSON: %s (line %d)", what, je.text,
				  je.line);
	if (!json_is_object(j)) {
		json_decref(j);
		return k8_err_set(err, -EINVAL, "%s is not a JSON object", what);
	}
	*out = j;
	return 0;
}

bool store_blob_exists(struct image_store *st, const char *hex)
{
	struct stat s;

	return fstatat(st->blobfd, hex, &s, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(s.st_mode);
}

int store_blob_json(struct image_store *st, const char *hex, json_t **out, struct k8_err *err)
{
	cleanup_close int fd = openat(st->blobfd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	cleanup_free char *buf = NULL;
	char what[96];
	struct stat s;
	int r;

	snprintf(what, sizeof(what), "blob sha256:%.12s", hex);
	if (fd < 0)
		return k8_err_set(err, errno == ENOENT ? -ENOENT : -errno,
				  "%s is missing from the image store: %s", what, strerror(errno));
	if (fstat(fd, &s) < 0)
		return k8_err_set(err, -errno, "%s: %s", what, strerror(errno));
	if (!S_ISREG(s.st_mode) || (uint64_t)s.st_size > IMAGE_JSON_MAX)
		return k8_err_set(err, -EFBIG, "%s is larger than %u bytes", what, IMAGE_JSON_MAX);
	buf = xmalloc((size_t)s.st_size + 1);
	r = read_full(fd, buf, (size_t)s.st_size);
	if (r)
		return k8_err_set(err, r, "reading %s: %s", what, strerror(-r));
	return store_json_parse(buf, (size_t)s.st_size, what, out, err);
}

/* Check an image manifest's shape; the config's hex and the layers' total size out. */
int store_manifest_check(json_t *m, char cfg_hex[65], uint64_t *size, struct k8_err *err)
{
	json_t *cfg = json_object_get(m, "config"), *layers = json_object_get(m, "layers"), *l;
	size_t i;
	uint64_t total = 0;

	if (!json_is_object(cfg) || !json_is_string(json_object_get(cfg, "digest")) ||
	    !ref_digest_valid(json_string_value(json_object_get(cfg, "digest")), cfg_hex))
		return k8_err_set(err, -EINVAL, "image manifest has no valid config descriptor");
	if (!json_is_array(layers))
		return k8_err_set(err, -EINVAL, "image manifest has no layers array");
	json_array_foreach(layers, i, l) {
		json_t *d = json_object_get(l, "digest"), *sz = json_object_get(l, "size");
		if (!json_is_string(d) || !ref_digest_valid(json_string_value(d), NULL) ||
		    !json_is_integer(sz) || json_integer_value(sz) < 0)
			return k8_err_set(err, -EINVAL, "image manifest layer %zu is malformed", i);
		total += (uint64_t)json_integer_value(sz);
	}
	if (size)
		*size = total;
	return 0;
}

/* ---------------------------------------------------------------- refs.json */

static int store_refs_load(struct image_store *st, struct k8_err *err)
{
	cleanup_free char *path = xasprintf("%s/refs.json", st->root), *buf = NULL;
	const char *k;
	json_t *v, *refs;
	size_t len;
	int r = read_file(path, IMAGE_REFS_MAX, &buf, &len);

	if (r == -ENOENT) {
		st->refs = json_object();
		return 0;
	}
	if (r)
		return k8_err_set(err, r, "reading %s: %s", path, strerror(-r));
	r = store_json_parse(buf, len, path, &refs, err);
	if (r)
		return k8_err_wrap(err, "the image store's index is damaged; move %s away to "
				   "start over", path);
	json_object_foreach(refs, k, v) {
		char norm[512];
		struct k8_err e = { 0 };
		if (!json_is_string(v) || !ref_digest_valid(json_string_value(v), NULL) ||
		    image_ref_normalize(k, norm, sizeof(norm), &e) || strcmp(norm, k)) {
			r = k8_err_set(err, -EINVAL, "%s: entry '%s' is not a normalised reference "
				       "with a sha256 digest; fix or move the file away", path, k);
			json_decref(refs);
			return r;
		}
	}
	st->refs = refs;
	return 0;
}

int store_refs_save_locked(struct image_store *st, struct k8_err *err)
{
	cleanup_free char *path = xasprintf("%s/refs.json", st->root);
	cleanup_free char *s = json_dumps(st->refs, JSON_INDENT(2) | JSON_SORT_KEYS);
	int r;

	if (!s)
		return k8_err_set(err, -ENOMEM, "serialising refs.json: out of memory");
	r = write_file_atomic(path, s, strlen(s), 0600);
	if (r)
		return k8_err_set(err, r, "writing %s: %s", path, strerror(-r));
	return 0;
}

/* ---------------------------------------------------------------- names */

static int store_ref_set_locked(struct image_store *st, const char *name, const char *dg,
				struct k8_err *err);

int store_ref_set(struct image_store *st, const char *name, const char *mhex,
		  struct k8_err *err)
{
	char dg[72];
	int r;

	snprintf(dg, sizeof(dg), "sha256:%s", mhex);
	pthread_mutex_lock(&st->lock);
	r = store_ref_set_locked(st, name, dg, err);
	pthread_mutex_unlock(&st->lock);
	return r;
}

/* store_ref_set with st->lock held; `dg` is "sha256:<hex>". */
static int store_ref_set_locked(struct image_store *st, const char *name, const char *dg,
				struct k8_err *err)
{
	const char *prev;
	json_t *old;
	bool replaced;
	int r;

	prev = json_string_value(json_object_get(st->refs, name));
	replaced = prev && strcmp(prev, dg);
	old = json_deep_copy(st->refs);
	json_object_set_new(st->refs, name, json_string(dg));
	r = store_refs_save_locked(st, err);
	if (r) {
		json_decref(st->refs);
		st->refs = old;
		old = NULL;
		store_gc_locked(st);   /* the blobs that just landed are garbage again */
	} else if (replaced) {
		store_gc_locked(st);
	}
	json_decref(old);
	return r;
}

/* ---------------------------------------------------------------- GC */

/* Delete what `keep` does not name; their sizes are added to *freed. */
static void store_gc_sweep(int dirfd, json_t *keep, const char *suffix, uint64_t *freed)
{
	int fd = dup(dirfd);
	DIR *d;
	struct dirent *de;
	size_t sl = strlen(suffix);

	if (fd < 0)
		return;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		char hex[65];
		if (n != 64 + sl || !ref_hex_valid(de->d_name, 64) || strcmp(de->d_name + 64, suffix))
			continue;
		memcpy(hex, de->d_name, 64);
		hex[64] = '\0';
		if (!json_object_get(keep, hex)) {
			struct stat sb;
			if (!fstatat(dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) &&
			    !unlinkat(dirfd, de->d_name, 0))
				*freed += (uint64_t)sb.st_size;
		}
	}
	closedir(d);
}

/* Delete blobs and disks no ref reaches. Conservative: if any referenced manifest cannot
 * be read, nothing is deleted (we could not tell what it needs). */
static void store_gc_now(struct image_store *st)
{
	json_t *keep = json_object(), *keepdisk = json_object(), *v;
	const char *k;

	st->gc_pending = false;
	json_object_foreach(st->refs, k, v) {
		char mhex[65], chex[65];
		json_t *m = NULL, *l;
		struct k8_err e = { 0 };
		size_t i;

		ref_digest_valid(json_string_value(v), mhex);
		if (store_blob_json(st, mhex, &m, &e) || store_manifest_check(m, chex, NULL, &e)) {
			json_decref(m);
			goto out;
		}
		json_object_set_new(keep, mhex, json_true());
		json_object_set_new(keepdisk, mhex, json_true());
		json_object_set_new(keep, chex, json_true());
		json_array_foreach(json_object_get(m, "layers"), i, l) {
			char lhex[65];
			ref_digest_valid(json_string_value(json_object_get(l, "digest")), lhex);
			json_object_set_new(keep, lhex, json_true());
		}
		json_decref(m);
	}
	store_gc_sweep(st->blobfd, keep, "", &st->freed);
	store_gc_sweep(st->diskfd, keepdisk, ".erofs", &st->freed);
	fsync(st->blobfd);
out:
	json_decref(keep);
	json_decref(keepdisk);
}

void store_gc_locked(struct image_store *st)
{
	if (st->busy)
		st->gc_pending = true;
	else
		store_gc_now(st);
}

void store_busy_begin(struct image_store *st)
{
	pthread_mutex_lock(&st->lock);
	st->busy++;
	pthread_mutex_unlock(&st->lock);
}

void store_busy_end(struct image_store *st)
{
	pthread_mutex_lock(&st->lock);
	if (--st->busy == 0 && st->gc_pending)
		store_gc_now(st);
	pthread_mutex_unlock(&st->lock);
}

void store_tmp_name(struct image_store *st, const char *prefix, char *out, size_t n)
{
	uint64_t s;

	pthread_mutex_lock(&st->lock);
	s = ++st->seq;
	pthread_mutex_unlock(&st->lock);
	snprintf(out, n, "%s-%d-%llu", prefix, (int)getpid(), (unsigned long long)s);
}

/* ---------------------------------------------------------------- open / close */

static int store_mkdirat(int dirfd, const char *name, struct k8_err *err, const char *root)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return k8_err_set(err, -errno, "creating %s/%s: %s", root, name, strerror(errno));
	return 0;
}

static int store_opendir(int dirfd, const char *name, struct k8_err *err, const char *root)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return k8_err_set(err, -errno, "opening %s/%s: %s", root, name, strerror(errno));
	return fd;
}

/* Remove what write_file_atomic leaves behind when a crash interrupts it. */
static void store_clean_root(struct image_store *st)
{
	int fd = dup(st->rootfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, "refs.json.tmp.", 14))
			unlinkat(st->rootfd, de->d_name, 0);
	closedir(d);
}

int image_store_open(const char *root, struct image_store **out, struct k8_err *err)
{
	struct image_store *st;
	cleanup_free char *tmp = NULL;
	int r;

	st = xcalloc(1, sizeof(*st));
	st->rootfd = st->lockfd = st->tmpfd = st->blobfd = st->diskfd = st->unpack_ns = -1;
	st->unpack_first = IMAGE_UNPACK_IDS_FIRST;
	st->unpack_count = IMAGE_UNPACK_IDS_COUNT;
	st->root = xstrdup(root);
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	st->building = json_object();

	r = mkdir_p(root, 0700);
	if (r) {
		k8_err_set(err, r, "creating the image store %s: %s", root, strerror(-r));
		goto fail;
	}
	st->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->rootfd < 0) {
		r = k8_err_set(err, -errno, "opening the image store %s: %s", root, strerror(errno));
		goto fail;
	}
	st->lockfd = openat(st->rootfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (st->lockfd < 0) {
		r = k8_err_set(err, -errno, "opening %s/lock: %s", root, strerror(errno));
		goto fail;
	}
	if (flock(st->lockfd, LOCK_EX | LOCK_NB) < 0) {
		r = k8_err_set(err, errno == EWOULDBLOCK ? -EBUSY : -errno,
			       "the image store %s is in use by another process (another kosa8d?)",
			       root);
		goto fail;
	}
	if ((r = store_mkdirat(st->rootfd, "blobs", err, root)) ||
	    (r = store_mkdirat(st->rootfd, "blobs/sha256", err, root)) ||
	    (r = store_mkdirat(st->rootfd, "disks", err, root)))
		goto fail;
	/* Work in progress of an earlier run is never trusted. */
	tmp = xasprintf("%s/tmp", root);
	r = rm_rf(tmp);
	if (r) {
		k8_err_set(err, r, "clearing %s: %s", tmp, strerror(-r));
		goto fail;
	}
	if ((r = store_mkdirat(st->rootfd, "tmp", err, root)))
		goto fail;
	store_clean_root(st);
	if ((st->blobfd = r = store_opendir(st->rootfd, "blobs/sha256", err, root)) < 0 ||
	    (st->diskfd = r = store_opendir(st->rootfd, "disks", err, root)) < 0 ||
	    (st->tmpfd = r = store_opendir(st->rootfd, "tmp", err, root)) < 0)
		goto fail;
	r = store_refs_load(st, err);
	if (r)
		goto fail;
	store_gc_now(st);   /* blobs a crash left unreferenced */
	*out = st;
	return 0;
fail:
	image_store_close(st);
	return r;
}

void image_store_close(struct image_store *st)
{
	if (!st)
		return;
	k8_closep(&st->blobfd);
	k8_closep(&st->diskfd);
	k8_closep(&st->tmpfd);
	k8_closep(&st->lockfd);   /* releases the flock */
	k8_closep(&st->rootfd);
	k8_closep(&st->unpack_ns);
	json_decref(st->refs);
	json_decref(st->building);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cond);
	free(st->root);
	free(st);
}

/* ---------------------------------------------------------------- lookup */

static int store_not_loaded(const char *ref, struct k8_err *err)
{
	return k8_err_set(err, -ENOENT,
			  "image '%s' is not loaded; run `kosa8 image load DIR` or "
			  "`kosa8 image pull %s`", ref, ref);
}

/* Smallest ref name pointing at manifest `hex` (refs are few; a scan is fine). */
static const char *store_first_ref(struct image_store *st, const char *hex)
{
	const char *k, *best = NULL;
	json_t *v;

	json_object_foreach(st->refs, k, v)
		if (!strcmp(json_string_value(v) + 7, hex) && (!best || strcmp(k, best) < 0))
			best = k;
	return best;
}

int store_lookup_locked(struct image_store *st, const char *ref, char hex[65],
			char *refout, size_t reflen, struct k8_err *err)
{
	char norm[512], prefix[65] = "";
	const char *k, *found = NULL, *p;
	struct k8_err e = { 0 };
	size_t plen;
	json_t *v;
	bool ambiguous = false;

	if (!ref || !*ref)
		return k8_err_set(err, -EINVAL, "no image named");
	/* A full digest. */
	if (ref_digest_valid(ref, hex) && (found = store_first_ref(st, hex))) {
		snprintf(refout, reflen, "%s", found);
		return 0;
	}   /* else it may be a config digest: the prefix search below matches those */
	/* A name, possibly pinned by digest. */
	if (!image_ref_normalize(ref, norm, sizeof(norm), &e)) {
		v = json_object_get(st->refs, norm);
		if (v) {
			ref_digest_valid(json_string_value(v), hex);
			snprintf(refout, reflen, "%s", norm);
			return 0;
		}
		p = strchr(norm, '@');
		if (p && ref_digest_valid(p + 1, hex) && store_first_ref(st, hex)) {
			snprintf(refout, reflen, "%s", norm);
			return 0;
		}
	}
	/* A digest prefix: "sha256:<12+ hex>" or bare hex. */
	p = !strncmp(ref, "sha256:", 7) ? ref + 7 : ref;
	plen = strlen(p);
	if (plen < 12 || plen > 64 || !ref_hex_valid(p, plen)) {
		if (e.code && p == ref)
			return k8_err_set(err, e.code, "%s", e.msg);
		if (p != ref)
			return k8_err_set(err, -EINVAL, "'%s': give at least 12 hex digits of the "
					  "digest", ref);
		return store_not_loaded(ref, err);
	}
	json_object_foreach(st->refs, k, v) {
		const char *mh = json_string_value(v) + 7;
		bool hit = !strncmp(mh, p, plen);
		if (!hit) {
			/* Docker calls the config digest the image ID: accept it too. */
			json_t *m = NULL;
			char ch[65];
			struct k8_err e2 = { 0 };
			if (!store_blob_json(st, mh, &m, &e2) && !store_manifest_check(m, ch, NULL, &e2))
				hit = !strncmp(ch, p, plen);
			json_decref(m);
		}
		if (!hit)
			continue;
		if (!prefix[0])
			memcpy(prefix, mh, 65);
		else if (strcmp(prefix, mh))
			ambiguous = true;
	}
	if (ambiguous)
		return k8_err_set(err, -EINVAL, "'%s' matches more than one image; give more digits",
				  ref);
	if (!prefix[0])
		return store_not_loaded(ref, err);
	memcpy(hex, prefix, 65);
	snprintf(refout, reflen, "%s", store_first_ref(st, hex));
	return 0;
}

/* ---------------------------------------------------------------- resolve / list */

void image_info_clear(struct image_info *info)
{
	if (!info)
		return;
	json_decref(info->env);
	json_decref(info->entrypoint);
	json_decref(info->cmd);
	memset(info, 0, sizeof(*info));
}

static bool store_strings(json_t *a)
{
	size_t i;
	json_t *s;

	if (!json_is_array(a))
		return false;
	json_array_foreach(a, i, s)
		if (!json_is_string(s))
			return false;
	return true;
}

static int store_fill_info(struct image_store *st, const char *hex, struct image_info *info,
			   struct k8_err *err)
{
	json_t *m = NULL, *c = NULL, *cc, *x;
	char chex[65];
	int r;

	r = store_blob_json(st, hex, &m, err);
	if (r)
		return r;
	r = store_manifest_check(m, chex, &info->size, err);
	if (!r)
		r = store_blob_json(st, chex, &c, err);
	if (r)
		goto out;
	snprintf(info->digest, sizeof(info->digest), "sha256:%s", hex);
	snprintf(info->config_digest, sizeof(info->config_digest), "sha256:%s", chex);
	cc = json_object_get(c, "config");
	if (cc && !json_is_object(cc) && !json_is_null(cc)) {
		r = k8_err_set(err, -EINVAL, "image config sha256:%.12s: \"config\" is not an object",
			       chex);
		goto out;
	}
	x = json_object_get(cc, "Env");
	if (x && !json_is_null(x) && !store_strings(x)) {
		r = k8_err_set(err, -EINVAL, "image config sha256:%.12s: Env is not a list of strings",
			       chex);
		goto out;
	}
	info->env = store_strings(x) ? json_deep_copy(x) : json_array();
	x = json_object_get(cc, "Entrypoint");
	if (x && !json_is_null(x) && !store_strings(x)) {
		r = k8_err_set(err, -EINVAL, "image config sha256:%.12s: Entrypoint is not a list "
			       "of strings", chex);
		goto out;
	}
	info->entrypoint = store_strings(x) ? json_deep_copy(x) : NULL;
	x = json_object_get(cc, "Cmd");
	if (x && !json_is_null(x) && !store_strings(x)) {
		r = k8_err_set(err, -EINVAL, "image config sha256:%.12s: Cmd is not a list of strings",
			       chex);
		goto out;
	}
	info->cmd = store_strings(x) ? json_deep_copy(x) : NULL;
	x = json_object_get(cc, "WorkingDir");
	if (json_is_string(x)) {
		if (json_string_length(x) >= sizeof(info->workdir)) {
			r = k8_err_set(err, -EINVAL, "image config sha256:%.12s: WorkingDir too long", chex);
			goto out;
		}
		snprintf(info->workdir, sizeof(info->workdir), "%s", json_string_value(x));
	}
	x = json_object_get(cc, "User");
	if (json_is_string(x)) {
		if (json_string_length(x) >= sizeof(info->user)) {
			r = k8_err_set(err, -EINVAL, "image config sha256:%.12s: User too long", chex);
			goto out;
		}
		snprintf(info->user, sizeof(info->user), "%s", json_string_value(x));
	}
out:
	json_decref(m);
	json_decref(c);
	return r;
}

int image_resolve(struct image_store *st, const char *ref, struct image_info *info,
		  struct k8_err *err)
{
	char hex[65];
	int r;

	memset(info, 0, sizeof(*info));
	pthread_mutex_lock(&st->lock);
	r = store_lookup_locked(st, ref, hex, info->ref, sizeof(info->ref), err);
	if (!r)
		r = store_fill_info(st, hex, info, err);
	pthread_mutex_unlock(&st->lock);
	if (r)
		image_info_clear(info);
	return r;
}

static int store_cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

uint64_t image_store_freed(struct image_store *st)
{
	uint64_t n;

	pthread_mutex_lock(&st->lock);
	n = st->freed;
	pthread_mutex_unlock(&st->lock);
	return n;
}

int image_cache_names(struct image_store *st, json_t **out)
{
	json_t *arr = json_array(), *v;
	const char *k;

	pthread_mutex_lock(&st->lock);
	json_object_foreach(st->refs, k, v)
		if (!strncmp(k, IMAGE_CACHE_REPO ":", sizeof(IMAGE_CACHE_REPO)))
			json_array_append_new(arr, json_pack("{s:s,s:O}", "ref", k, "digest", v));
	pthread_mutex_unlock(&st->lock);
	*out = arr;
	return 0;
}

int image_list(struct image_store *st, json_t **out, struct k8_err *err)
{
	json_t *arr = json_array(), *v;
	const char **keys;
	const char *k;
	size_t n = 0;

	pthread_mutex_lock(&st->lock);
	keys = xcalloc(json_object_size(st->refs) + 1, sizeof(*keys));
	json_object_foreach(st->refs, k, v)
		if (strncmp(k, IMAGE_CACHE_REPO ":", sizeof(IMAGE_CACHE_REPO)))
			keys[n++] = k;
	qsort(keys, n, sizeof(*keys), store_cmp_str);
	for (size_t i = 0; i < n; i++) {
		const char *d = json_string_value(json_object_get(st->refs, keys[i]));
		json_t *m = NULL, *c = NULL, *created, *labels;
		struct k8_err e = { 0 };
		char chex[65] = "";
		uint64_t size = 0;

		if (!store_blob_json(st, d + 7, &m, &e) && !store_manifest_check(m, chex, &size, &e))
			store_blob_json(st, chex, &c, &e);
		created = json_object_get(c, "created");
		labels = json_object_get(json_object_get(c, "config"), "Labels");
		json_array_append_new(arr, json_pack("{s:s, s:s, s:I, s:O, s:s?}",
						     "ref", keys[i], "digest", d, "size",
						     (json_int_t)size, "created",
						     json_is_string(created) ? created : json_null(),
						     "error", e.code ? e.msg : NULL));
		/* What Docker's image list shows: the config digest (its image ID), labels. */
		if (chex[0])
			json_object_set_new(json_array_get(arr, i), "config_digest",
					    json_sprintf("sha256:%s", chex));
		if (json_is_object(labels))
			json_object_set(json_array_get(arr, i), "labels", labels);
		json_decref(m);
		json_decref(c);
	}
	free(keys);
	pthread_mutex_unlock(&st->lock);
	(void)err;
	*out = arr;
	return 0;
}

/* ---------------------------------------------------------------- remove */

int image_remove(struct image_store *st, const char *ref, struct k8_err *err)
{
	char hex[65], found[512], norm[512];
	struct k8_err e = { 0 };
	const char *k;
	json_t *v, *old;
	int r, names = 0;

	pthread_mutex_lock(&st->lock);
	r = store_lookup_locked(st, ref, hex, found, sizeof(found), err);
	if (r)
		goto out;
	if (image_ref_normalize(ref, norm, sizeof(norm), &e) || !json_object_get(st->refs, norm)) {
		/* Named by digest: remove it only if that is not ambiguous. */
		json_object_foreach(st->refs, k, v)
			if (!strcmp(json_string_value(v) + 7, hex))
				names++;
		if (names > 1) {
			r = k8_err_set(err, -EBUSY, "image sha256:%.12s has %d names (one is %s); "
				       "remove them by name", hex, names, found);
			goto out;
		}
		snprintf(norm, sizeof(norm), "%s", found);
	}
	old = json_deep_copy(st->refs);
	json_object_del(st->refs, norm);
	r = store_refs_save_locked(st, err);
	if (r) {
		json_decref(st->refs);
		st->refs = old;
		goto out;
	}
	json_decref(old);
	store_gc_locked(st);
out:
	pthread_mutex_unlock(&st->lock);
	return r;
}

int image_tag(struct image_store *st, const char *src, const char *dst, struct k8_err *err)
{
	char hex[65], found[512], norm[512], dg[72];
	int r;

	r = image_ref_normalize(dst, norm, sizeof(norm), err);
	if (r)
		return r;
	if (strchr(norm, '@'))
		return k8_err_set(err, -EINVAL, "'%s': a tag cannot hold a digest", dst);
	pthread_mutex_lock(&st->lock);
	r = store_lookup_locked(st, src, hex, found, sizeof(found), err);
	if (!r) {
		snprintf(dg, sizeof(dg), "sha256:%s", hex);
		r = store_ref_set_locked(st, norm, dg, err);
	}
	pthread_mutex_unlock(&st->lock);
	return r;
}
