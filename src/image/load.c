/* SPDX-License-Identifier: Apache-2.0 */
/* load.c - `image load`: OCI image layouts, OCI archives and `docker save` tarballs.
 *
 * Theory of operation. Everything a source holds is untrusted. Blobs are copied into a
 * staging directory under tmp/, hashed while they stream, and kept only when the hash is
 * the digest they are named by (or, for docker save's layer.tar and <id>.json members,
 * stored under the digest computed); manifests, indexes and configs are parsed only
 * from such verified copies, at most IMAGE_JSON_MAX bytes each, and every size a
 * descriptor declares is checked. Only when all the selected images are complete do the
 * blobs they need move (rename) into blobs/sha256/, and only after that are the names
 * written to refs.json. A failed load leaves nothing in the store.
 *
 * Archives are read with libarchive in at most two passes and member names are never
 * used as file names: pass 1 takes index.json, oci-layout and manifest.json (and blobs
 * small enough to be manifests or configs); pass 2 takes the layers the images need.
 * Members other than blobs/sha256/<hex>, those three and the names a docker save's
 * manifest.json lists are skipped unread.
 *
 * Names: an OCI descriptor is named by io.containerd.image.name or by
 * org.opencontainers.image.ref.name, which is a full reference or just a tag (then the
 * repository comes from the `tag` argument; without one the load fails and says so).
 * docker save names by RepoTags. The `tag` argument adds a name: NAME:TAG names the one
 * image of the source; a bare NAME only names images that would otherwise have none
 * (NAME:latest) and gives bare tags their repository.
 */
#include "image/image_int.h"
#include "common/uarchive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define MT_OCI_INDEX    "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_OCI_CONFIG   "application/vnd.oci.image.config.v1+json"
#define MT_OCI_LAYER    "application/vnd.oci.image.layer.v1.tar"
#define MT_DKR_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DKR_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define LOAD_MEMBER_MAX 1024     /* bytes in a docker save member name */
#define LOAD_IMAGES_MAX 4096     /* images in one source */

struct load {
	struct image_store *st;
	const char *src;
	image_progress_fn progress;
	void *ctx;
	struct k8_err *err;
	bool archive;
	int dirfd;               /* layout directory, or -1 */
	int stagefd;
	char stagename[96];
	json_t *staged;          /* hex -> size: verified blobs in staging */
	json_t *need;            /* hex -> size: blobs the selected images need */
	json_t *want;            /* archive: hex -> size of blobs pass 2 must stage */
	json_t *members;         /* docker save: member name -> {"hex","size"} or null */
	json_t *images;          /* [{"hex", "names": [...], "tags": [...]}] */
	json_t *index, *docker;  /* index.json, manifest.json */
	bool oci_layout;
	json_t *skipped;         /* platforms seen but not linux/amd64 */
	/* The tag argument. */
	bool has_tag, tag_explicit;
	struct ref_parts tagp;
};

static void load_progress(struct load *l, const char *what, uint64_t done, uint64_t total)
{
	if (l->progress)
		l->progress(l->ctx, "load", what, done, total);
}

/* ---------------------------------------------------------------- staging */

static int64_t load_staged_size(struct load *l, const char *hex)
{
	json_t *v = json_object_get(l->staged, hex);

	return v ? (int64_t)json_integer_value(v) : -1;
}

/* Size of a blob already in the store, or -1. */
static int64_t load_stored_size(struct load *l, const char *hex)
{
	struct stat s;

	if (fstatat(l->st->blobfd, hex, &s, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(s.st_mode))
		return -1;
	return (int64_t)s.st_size;
}

/* Stream fd (a layout's blob) or the archive's current member into staging. `expect`
 * is the hex it must hash to, or NULL (then *hex_out names it). */
static int load_stage(struct load *l, int fd, struct archive *a, const char *expect,
		      int64_t declared, char hex_out[65])
{
	struct blob_writer w;
	char what[128], hex[65];
	static const size_t bufsz = 1 << 16;
	cleanup_free char *buf = xmalloc(bufsz);
	uint64_t done = 0, next = 0, max = declared >= 0 ? (uint64_t)declared : 0;
	int r;

	if (expect)
		snprintf(what, sizeof(what), "blob sha256:%s in %s", expect, l->src);
	else
		snprintf(what, sizeof(what), "a member of %s", l->src);
	r = blobw_open(&w, l->stagefd, max, l->err);
	if (r)
		return r;
	for (;;) {
		ssize_t n;
		if (a) {
			n = archive_read_data(a, buf, bufsz);
			if (n < 0) {
				blobw_abort(&w);
				return k8_err_set(l->err, -EINVAL, "reading %s: %s", what,
						  archive_error_string(a) ? archive_error_string(a) : "?");
			}
		} else {
			n = read(fd, buf, bufsz);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				blobw_abort(&w);
				return k8_err_set(l->err, -errno, "reading %s: %s", what, strerror(errno));
			}
		}
		if (n == 0)
			break;
		r = blobw_write(&w, buf, (size_t)n, l->err);
		if (r) {
			blobw_abort(&w);
			return r == -EFBIG ? k8_err_wrap(l->err, "%s is larger than its descriptor "
							 "says (%lld bytes)", what,
							 (long long)declared) : r;
		}
		done += (uint64_t)n;
		if (done >= next) {
			load_progress(l, expect ? expect : "member", done, max);
			next = done + (8u << 20);
		}
	}
	if (declared >= 0 && done != (uint64_t)declared) {
		blobw_abort(&w);
		return k8_err_set(l->err, -EBADMSG, "%s is %llu bytes, but its descriptor says %lld",
				  what, (unsigned long long)done, (long long)declared);
	}
	r = blobw_finish(&w, expect, what, NULL, hex, l->err);
	if (r)
		return r;
	if (renameat(l->stagefd, w.name, l->stagefd, hex) < 0) {
		r = -errno;
		unlinkat(l->stagefd, w.name, 0);
		return k8_err_set(l->err, r, "staging %s: %s", what, strerror(-r));
	}
	json_object_set_new(l->staged, hex, json_integer((json_int_t)done));
	load_progress(l, hex, done, done);
	if (hex_out)
		memcpy(hex_out, hex, 65);
	return 0;
}

static int load_stage_mem(struct load *l, const char *data, size_t n, char hex_out[65])
{
	struct blob_writer w;
	char hex[65];
	int r = blobw_open(&w, l->stagefd, 0, l->err);

	if (r)
		return r;
	if ((r = blobw_write(&w, data, n, l->err)) ||
	    (r = blobw_finish(&w, NULL, "a synthesised manifest", NULL, hex, l->err))) {
		blobw_abort(&w);
		return r;
	}
	if (renameat(l->stagefd, w.name, l->stagefd, hex) < 0) {
		r = -errno;
		unlinkat(l->stagefd, w.name, 0);
		return k8_err_set(l->err, r, "staging a manifest: %s", strerror(-r));
	}
	json_object_set_new(l->staged, hex, json_integer((json_int_t)n));
	memcpy(hex_out, hex, 65);
	return 0;
}

/* Open blobs/sha256/<hex> of a layout directory: regular file, no symlink. */
static int load_layout_blob(struct load *l, const char *hex, struct stat *s)
{
	cleanup_close int b = openat(l->dirfd, "blobs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	cleanup_close int d = b < 0 ? -1 :
		openat(b, "sha256", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int fd = d < 0 ? -1 : openat(d, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return k8_err_set(l->err, errno == ENOENT ? -ENOENT : -errno,
				  "blob sha256:%s is missing from %s (%s)", hex, l->src, strerror(errno));
	if (fstat(fd, s) < 0 || !S_ISREG(s->st_mode)) {
		close(fd);
		return k8_err_set(l->err, -EINVAL, "blob sha256:%s in %s is not a regular file",
				  hex, l->src);
	}
	return fd;
}

/* Make sure blob `hex` (of `declared` bytes, -1 when unknown) is staged or stored. For
 * an archive it may only be noted for pass 2 (when `defer`). */
static int load_get_blob(struct load *l, const char *hex, int64_t declared, bool defer)
{
	int64_t have = load_staged_size(l, hex);
	struct stat s;
	int fd, r;

	if (have < 0)
		have = load_stored_size(l, hex);
	if (have >= 0) {
		if (declared >= 0 && have != declared)
			return k8_err_set(l->err, -EBADMSG, "blob sha256:%s is %lld bytes, but its "
					  "descriptor in %s says %lld", hex, (long long)have, l->src,
					  (long long)declared);
		return 0;
	}
	if (l->archive) {
		if (defer) {
			json_object_set_new(l->want, hex, json_integer(declared));
			return 0;
		}
		return k8_err_set(l->err, -ENOENT, "blob sha256:%s is missing from %s", hex, l->src);
	}
	fd = load_layout_blob(l, hex, &s);
	if (fd < 0)
		return fd;
	r = load_stage(l, fd, NULL, hex, declared >= 0 ? declared : (int64_t)s.st_size, NULL);
	close(fd);
	return r;
}

/* Read a verified JSON blob (manifest, index, config) from staging or the store. */
static int load_json(struct load *l, const char *hex, int64_t declared, const char *what,
		     json_t **out)
{
	cleanup_free char *buf = NULL;
	cleanup_close int fd = -1;
	char desc[160];
	struct stat s;
	int r;

	if (declared > (int64_t)IMAGE_JSON_MAX)
		return k8_err_set(l->err, -EFBIG, "the %s sha256:%.12s in %s is larger than %u bytes",
				  what, hex, l->src, IMAGE_JSON_MAX);
	r = load_get_blob(l, hex, declared, false);
	if (r)
		return r;
	if (load_staged_size(l, hex) >= 0)
		fd = openat(l->stagefd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	else
		fd = openat(l->st->blobfd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &s) < 0)
		return k8_err_set(l->err, -errno, "reading the %s sha256:%.12s: %s", what, hex,
				  strerror(errno));
	if ((uint64_t)s.st_size > IMAGE_JSON_MAX)
		return k8_err_set(l->err, -EFBIG, "the %s sha256:%.12s in %s is larger than %u bytes",
				  what, hex, l->src, IMAGE_JSON_MAX);
	buf = xmalloc((size_t)s.st_size + 1);
	r = read_full(fd, buf, (size_t)s.st_size);
	if (r)
		return k8_err_set(l->err, r, "reading the %s sha256:%.12s: %s", what, hex, strerror(-r));
	snprintf(desc, sizeof(desc), "the %s sha256:%.12s in %s", what, hex, l->src);
	return store_json_parse(buf, (size_t)s.st_size, desc, out, l->err);
}

/* ---------------------------------------------------------------- archives */

static const char *load_member_name(struct archive_entry *ae)
{
	const char *n = archive_entry_pathname(ae);

	if (!n)
		n = archive_entry_pathname_utf8(ae);
	if (!n)
		return NULL;
	while (n[0] == '.' && n[1] == '/')
		n += 2;
	while (*n == '/' && n[1] == '/')
		n++;
	return n;
}

static bool load_blob_member(const char *name, char hex[65])
{
	if (strncmp(name, "blobs/sha256/", 13) || strlen(name + 13) != 64 ||
	    !ref_hex_valid(name + 13, 64))
		return false;
	memcpy(hex, name + 13, 65);
	return true;
}

static int load_read_member(struct load *l, struct archive *a, struct archive_entry *ae,
			    const char *name, json_t **out)
{
	int64_t size = archive_entry_size(ae);
	cleanup_free char *buf = NULL;
	char what[160];
	ssize_t n;

	if (*out)
		return k8_err_set(l->err, -EINVAL, "%s holds '%s' twice", l->src, name);
	if (size < 0 || size > (int64_t)IMAGE_JSON_MAX)
		return k8_err_set(l->err, -EFBIG, "'%s' in %s is larger than %u bytes", name, l->src,
				  IMAGE_JSON_MAX);
	buf = xmalloc((size_t)size + 1);
	n = archive_read_data(a, buf, (size_t)size + 1);
	if (n < 0 || n != size)
		return k8_err_set(l->err, -EINVAL, "reading '%s' in %s: %s", name, l->src,
				  n < 0 && archive_error_string(a) ? archive_error_string(a) :
				  "short read");
	snprintf(what, sizeof(what), "'%s' in %s", name, l->src);
	if (!strcmp(name, "manifest.json")) {   /* docker save's is a list */
		json_error_t je;
		*out = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &je);
		if (!*out)
			return k8_err_set(l->err, -EINVAL, "%s is not valid JSON: %s (line %d)", what,
					  je.text, je.line);
		return 0;
	}
	return store_json_parse(buf, (size_t)n, what, out, l->err);
}

/* One member of pass 2 named in a docker save's manifest.json. */
static int load_docker_member(struct load *l, struct archive *a, const char *name)
{
	json_t *slot = json_object_get(l->members, name);
	char hex[65];
	int r;

	if (!slot)
		return 0;
	if (!json_is_null(slot))
		return k8_err_set(l->err, -EINVAL, "%s holds '%s' twice", l->src, name);
	if (load_blob_member(name, hex)) {
		if (load_staged_size(l, hex) < 0 && load_stored_size(l, hex) < 0 &&
		    (r = load_stage(l, -1, a, hex, -1, NULL)))
			return r;
	} else if ((r = load_stage(l, -1, a, NULL, -1, hex))) {
		return r;
	}
	json_object_set_new(l->members, name, json_string(hex));
	return 0;
}

static int load_scan(struct load *l, int pass)
{
	struct archive *a = uarchive_reader(UARCHIVE_COMPRESSED, l->err);
	struct archive_entry *ae;
	int r = 0;

	if (!a)
		return l->err->code;
	if (archive_read_open_filename(a, l->src, 1 << 16) != ARCHIVE_OK) {
		r = k8_err_set(l->err, -EINVAL, "%s is not a tar archive: %s", l->src,
			       archive_error_string(a) ? archive_error_string(a) : "?");
		goto out;
	}
	for (;;) {
		const char *name;
		char hex[65];
		int ar = archive_read_next_header(a, &ae);

		if (ar == ARCHIVE_EOF)
			break;
		if (ar < ARCHIVE_WARN) {
			r = k8_err_set(l->err, -EINVAL, "%s is damaged: %s", l->src,
				       archive_error_string(a) ? archive_error_string(a) : "?");
			break;
		}
		name = load_member_name(ae);
		if (!name || archive_entry_filetype(ae) != AE_IFREG || archive_entry_hardlink(ae))
			continue;
		if (pass == 1) {
			if (!strcmp(name, "index.json"))
				r = load_read_member(l, a, ae, name, &l->index);
			else if (!strcmp(name, "manifest.json"))
				r = load_read_member(l, a, ae, name, &l->docker);
			else if (!strcmp(name, "oci-layout")) {
				json_t *ol = NULL;
				r = load_read_member(l, a, ae, name, &ol);
				l->oci_layout = !r;
				json_decref(ol);
			} else if (load_blob_member(name, hex) &&
				   archive_entry_size(ae) <= (int64_t)IMAGE_JSON_MAX &&
				   load_staged_size(l, hex) < 0)
				r = load_stage(l, -1, a, hex, archive_entry_size(ae), NULL);
		} else {
			if (load_blob_member(name, hex) && json_object_get(l->want, hex) &&
			    load_staged_size(l, hex) < 0)
				r = load_stage(l, -1, a, hex, archive_entry_size(ae), NULL);
			else if (l->members)
				r = load_docker_member(l, a, name);
		}
		if (r)
			break;
	}
out:
	archive_read_free(a);
	return r;
}

/* ---------------------------------------------------------------- names */

/* Add the name `n` (a full reference or, when `maybe_tag`, possibly a bare tag) to img. */
static int load_add_name(struct load *l, json_t *img, const char *n, bool maybe_tag)
{
	char norm[512];
	int r;

	if (maybe_tag && !strpbrk(n, "/:@") && ref_tag_valid(n)) {
		json_array_append_new(json_object_get(img, "tags"), json_string(n));
		return 0;
	}
	r = image_ref_normalize(n, norm, sizeof(norm), l->err);
	if (r)
		return k8_err_wrap(l->err, "%s names an image", l->src);
	json_array_append_new(json_object_get(img, "names"), json_string(norm));
	return 0;
}

static json_t *load_image(struct load *l, const char *hex)
{
	size_t i;
	json_t *img;

	json_array_foreach(l->images, i, img)
		if (!strcmp(json_string_value(json_object_get(img, "hex")), hex))
			return img;
	img = json_pack("{s:s, s:[], s:[]}", "hex", hex, "names", "tags");
	json_array_append_new(l->images, img);
	return img;
}

/* Final names of every image: bare tags get the tag argument's repository, the tag
 * argument is added, and an image left without a name is an error. */
static int load_names(struct load *l)
{
	size_t i, j, n = json_array_size(l->images);
	json_t *img, *t;
	struct ref_parts p;
	char norm[512];
	int r;

	if (l->has_tag && l->tag_explicit && n > 1)
		return k8_err_set(l->err, -EINVAL, "%s holds %zu images; --tag %s:%s can name only "
				  "one (use a bare NAME to give their tags a repository)", l->src, n,
				  l->tagp.path, l->tagp.tag);
	json_array_foreach(l->images, i, img) {
		json_t *names = json_object_get(img, "names");
		json_array_foreach(json_object_get(img, "tags"), j, t) {
			if (!l->has_tag)
				return k8_err_set(l->err, -EINVAL, "the image in %s is named only by the "
						  "tag '%s'; say which repository it belongs to: "
						  "kosa8 image load %s --tag NAME:%s", l->src,
						  json_string_value(t), l->src, json_string_value(t));
			p = l->tagp;
			p.digest[0] = '\0';
			snprintf(p.tag, sizeof(p.tag), "%s", json_string_value(t));
			if ((r = ref_format(&p, norm, sizeof(norm), l->err)))
				return r;
			json_array_append_new(names, json_string(norm));
		}
		if (l->has_tag && (l->tag_explicit || !json_array_size(names))) {
			if ((r = ref_format(&l->tagp, norm, sizeof(norm), l->err)))
				return r;
			json_array_append_new(names, json_string(norm));
		}
		if (!json_array_size(names))
			return k8_err_set(l->err, -EINVAL, "the image sha256:%.12s in %s has no name; "
					  "give it one: kosa8 image load %s --tag NAME[:TAG]",
					  json_string_value(json_object_get(img, "hex")), l->src, l->src);
	}
	/* One name, one image. */
	json_t *seen = json_object();
	json_array_foreach(l->images, i, img) {
		const char *hex = json_string_value(json_object_get(img, "hex"));
		json_array_foreach(json_object_get(img, "names"), j, t) {
			json_t *o = json_object_get(seen, json_string_value(t));
			if (o && strcmp(json_string_value(o), hex)) {
				r = k8_err_set(l->err, -EINVAL, "%s gives the name %s to two different "
					       "images", l->src, json_string_value(t));
				json_decref(seen);
				return r;
			}
			json_object_set_new(seen, json_string_value(t), json_string(hex));
		}
	}
	json_decref(seen);
	return 0;
}

/* ---------------------------------------------------------------- OCI */

static bool load_mt_is(json_t *o, const char *a, const char *b)
{
	const char *mt = json_string_value(json_object_get(o, "mediaType"));

	return mt && (!strcmp(mt, a) || (b && !strcmp(mt, b)));
}

/* A descriptor's digest (hex out) and size; both are required (OCI image spec). */
static int load_desc(struct load *l, json_t *d, char hex[65], int64_t *size, const char *what)
{
	json_t *dg = json_object_get(d, "digest"), *sz = json_object_get(d, "size");

	if (!json_is_object(d) || !json_is_string(dg))
		return k8_err_set(l->err, -EINVAL, "%s: a %s descriptor has no digest", l->src, what);
	if (!ref_digest_valid(json_string_value(dg), hex))
		return k8_err_set(l->err, -EINVAL, "%s: %s digest '%s' is not sha256:<64 hex> (the "
				  "only algorithm kosa8 supports)", l->src, what,
				  json_string_value(dg));
	if (!json_is_integer(sz) || json_integer_value(sz) < 0)
		return k8_err_set(l->err, -EINVAL, "%s: %s sha256:%.12s has no valid size", l->src,
				  what, hex);
	*size = (int64_t)json_integer_value(sz);
	return 0;
}

static bool load_layer_type_ok(const char *mt)
{
	static const char *const ok[] = {
		MT_OCI_LAYER, MT_OCI_LAYER "+gzip", MT_OCI_LAYER "+zstd",
		"application/vnd.docker.image.rootfs.diff.tar.gzip",
		"application/vnd.docker.image.rootfs.diff.tar",
	};

	if (!mt)
		return true;   /* docker save synthesised or sloppy writers: content decides */
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++)
		if (!strcmp(mt, ok[i]))
			return true;
	return false;
}

/* An image manifest: verify its config and layers, note what must be committed. */
static int load_manifest(struct load *l, const char *mhex, json_t *m)
{
	json_t *cfgd = json_object_get(m, "config"), *layers = json_object_get(m, "layers"), *ld;
	json_t *cfg = NULL;
	json_t *sv = json_object_get(m, "schemaVersion");
	char hex[65];
	int64_t size;
	size_t i;
	int r;

	if (!json_is_integer(sv) || json_integer_value(sv) != 2)
		return k8_err_set(l->err, -EINVAL, "%s: manifest sha256:%.12s is not schema 2 (old "
				  "docker schema 1 images are not supported)", l->src, mhex);
	if ((r = load_desc(l, cfgd, hex, &size, "config")))
		return r;
	if ((r = load_json(l, hex, size, "image config", &cfg)))
		return r;
	json_decref(cfg);
	json_object_set_new(l->need, hex, json_true());
	if (!json_is_array(layers))
		return k8_err_set(l->err, -EINVAL, "%s: manifest sha256:%.12s has no layers", l->src,
				  mhex);
	json_array_foreach(layers, i, ld) {
		const char *mt = json_string_value(json_object_get(ld, "mediaType"));
		if ((r = load_desc(l, ld, hex, &size, "layer")))
			return r;
		if (!load_layer_type_ok(mt))
			return k8_err_set(l->err, -EINVAL, "%s: layer sha256:%.12s has media type %s; "
					  "kosa8 unpacks tar layers (plain, gzip or zstd) only%s",
					  l->src, hex, mt, strstr(mt, "encrypted") ?
					  " (encrypted layers are not supported)" : "");
		if ((r = load_get_blob(l, hex, size, true)))
			return r;
		json_object_set_new(l->need, hex, json_true());
	}
	if ((r = store_manifest_check(m, hex, NULL, l->err)))
		return k8_err_wrap(l->err, "%s: manifest sha256:%.12s", l->src, mhex);
	json_object_set_new(l->need, mhex, json_true());
	return 0;
}

static bool load_platform_ok(struct load *l, json_t *d)
{
	json_t *p = json_object_get(d, "platform");
	const char *os, *arch, *var;
	char desc[200];

	if (!json_is_object(p))
		return true;
	os = json_string_value(json_object_get(p, "os"));
	arch = json_string_value(json_object_get(p, "architecture"));
	if (os && arch && !strcmp(os, "linux") && !strcmp(arch, "amd64"))
		return true;
	var = json_string_value(json_object_get(p, "variant"));
	snprintf(desc, sizeof(desc), "%s/%s%s%s", os ? os : "?", arch ? arch : "?",
		 var ? "/" : "", var ? var : "");
	json_array_append_new(l->skipped, json_string(desc));
	return false;
}

static int load_no_platform(struct load *l, const char *where)
{
	cleanup_free char *list = NULL;
	size_t i;
	json_t *s;
	size_t len = 0;

	list = xstrdup("");
	json_array_foreach(l->skipped, i, s) {
		char *nl = xasprintf("%s%s%s", list, i ? ", " : "", json_string_value(s));
		free(list);
		list = nl;
		len = strlen(list);
		if (len > 400)
			break;
	}
	return k8_err_set(l->err, -ENOENT, "%s: no linux/amd64 image in %s%s%s%s; kosa8 runs "
			  "linux/amd64 images only", l->src, where, *list ? " (it has " : "", list,
			  *list ? ")" : "");
}

/* A descriptor from index.json (or a nested index): the image manifest it leads to. */
static int load_oci_desc(struct load *l, json_t *d, int depth, json_t *img_names)
{
	char hex[65];
	int64_t size;
	json_t *b = NULL, *m;
	size_t i;
	int r;

	if ((r = load_desc(l, d, hex, &size, "manifest")))
		return r;
	if ((r = load_json(l, hex, size, "manifest", &b)))
		return r;
	if (load_mt_is(d, MT_OCI_INDEX, MT_DKR_LIST) || load_mt_is(b, MT_OCI_INDEX, MT_DKR_LIST) ||
	    (!json_object_get(b, "layers") && json_is_array(json_object_get(b, "manifests")))) {
		json_t *ms = json_object_get(b, "manifests"), *c, *pick = NULL;
		char where[100];
		if (depth >= 2 || !json_is_array(ms)) {
			json_decref(b);
			return k8_err_set(l->err, -EINVAL, "%s: index sha256:%.12s is malformed or "
					  "nested too deep", l->src, hex);
		}
		json_array_foreach(ms, i, c)
			if (load_platform_ok(l, c) && json_is_object(json_object_get(c, "platform"))) {
				pick = c;
				break;
			}
		if (!pick) {
			snprintf(where, sizeof(where), "index sha256:%.12s", hex);
			r = load_no_platform(l, where);
			json_decref(b);
			return r;
		}
		r = load_oci_desc(l, pick, depth + 1, img_names);
		json_decref(b);
		return r;
	}
	if (!load_mt_is(b, MT_OCI_MANIFEST, MT_DKR_MANIFEST) && json_object_get(b, "mediaType")) {
		r = k8_err_set(l->err, -EINVAL, "%s: sha256:%.12s has media type %s, which is not "
			       "an image manifest", l->src, hex,
			       json_string_value(json_object_get(b, "mediaType")));
		json_decref(b);
		return r;
	}
	r = load_manifest(l, hex, b);
	json_decref(b);
	if (r)
		return r;
	m = load_image(l, hex);
	json_array_foreach(img_names, i, d) {
		json_t *nm = json_object_get(d, "name");
		if ((r = load_add_name(l, m, json_string_value(nm),
				       json_is_true(json_object_get(d, "maybe_tag")))))
			return r;
	}
	return 0;
}

static int load_oci(struct load *l)
{
	json_t *ms = json_object_get(l->index, "manifests"), *d;
	size_t i;
	int r;

	if (!json_is_array(ms))
		return k8_err_set(l->err, -EINVAL, "%s: index.json has no manifests list", l->src);
	if (json_array_size(ms) > LOAD_IMAGES_MAX)
		return k8_err_set(l->err, -E2BIG, "%s: index.json lists more than %d manifests",
				  l->src, LOAD_IMAGES_MAX);
	json_array_foreach(ms, i, d) {
		json_t *ann = json_object_get(d, "annotations"), *names = json_array();
		const char *cn = json_string_value(json_object_get(ann, "io.containerd.image.name"));
		const char *rn = json_string_value(json_object_get(ann,
								  "org.opencontainers.image.ref.name"));
		if (!load_platform_ok(l, d)) {
			json_decref(names);
			continue;
		}
		if (cn)
			json_array_append_new(names, json_pack("{s:s, s:b}", "name", cn, "maybe_tag", 0));
		else if (rn)
			json_array_append_new(names, json_pack("{s:s, s:b}", "name", rn, "maybe_tag", 1));
		r = load_oci_desc(l, d, 0, names);
		json_decref(names);
		if (r)
			return r;
	}
	if (!json_array_size(l->images))
		return json_array_size(l->skipped) ? load_no_platform(l, "index.json") :
		       k8_err_set(l->err, -EINVAL, "%s: index.json lists no images", l->src);
	return 0;
}

/* ---------------------------------------------------------------- docker save */

static bool load_member_ok(const char *n)
{
	size_t len = strlen(n);

	if (!len || len > LOAD_MEMBER_MAX || n[0] == '/')
		return false;
	for (const char *p = n; *p;) {
		const char *e = strchr(p, '/');
		size_t cn = e ? (size_t)(e - p) : strlen(p);
		if (cn == 2 && p[0] == '.' && p[1] == '.')
			return false;
		if (!e)
			break;
		p = e + 1;
	}
	return true;
}

static int load_docker_plan(struct load *l)
{
	json_t *e, *x;
	size_t i, j;

	if (!json_is_array(l->docker))
		return k8_err_set(l->err, -EINVAL, "%s: manifest.json is not a list", l->src);
	if (json_array_size(l->docker) > LOAD_IMAGES_MAX)
		return k8_err_set(l->err, -E2BIG, "%s: manifest.json lists too many images", l->src);
	l->members = json_object();
	json_array_foreach(l->docker, i, e) {
		json_t *cfg = json_object_get(e, "Config"), *layers = json_object_get(e, "Layers");
		if (!json_is_string(cfg) || !load_member_ok(json_string_value(cfg)) ||
		    !json_is_array(layers))
			return k8_err_set(l->err, -EINVAL, "%s: manifest.json entry %zu needs Config "
					  "(a relative member name) and Layers", l->src, i);
		json_object_set_new(l->members, json_string_value(cfg), json_null());
		json_array_foreach(layers, j, x) {
			if (!json_is_string(x) || !load_member_ok(json_string_value(x)))
				return k8_err_set(l->err, -EINVAL, "%s: manifest.json entry %zu: layer "
						  "%zu is not a relative member name", l->src, i, j);
			json_object_set_new(l->members, json_string_value(x), json_null());
		}
	}
	return 0;
}

/* The stored digest of docker save member `name` (staged in pass 2, or earlier). */
static int load_docker_hex(struct load *l, const char *name, char hex[65])
{
	json_t *v = json_object_get(l->members, name);

	if (json_is_string(v)) {
		memcpy(hex, json_string_value(v), 65);
		return 0;
	}
	if (load_blob_member(name, hex) && (load_staged_size(l, hex) >= 0 ||
					    load_stored_size(l, hex) >= 0))
		return 0;
	return k8_err_set(l->err, -ENOENT, "%s: '%s', named in manifest.json, is missing", l->src,
			  name);
}

/* Media type of a stored or staged layer from its first bytes. */
static const char *load_layer_type(struct load *l, const char *hex)
{
	unsigned char m[4] = { 0 };
	int fd = openat(l->stagefd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		fd = openat(l->st->blobfd, hex, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, m, sizeof(m)) < 0)
			m[0] = 0;
		close(fd);
	}
	if (m[0] == 0x1f && m[1] == 0x8b)
		return MT_OCI_LAYER "+gzip";
	if (m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd)
		return MT_OCI_LAYER "+zstd";
	return MT_OCI_LAYER;
}

static int load_docker_image(struct load *l, json_t *e)
{
	json_t *cfg = NULL, *layers = json_array(), *diff, *x, *man;
	char chex[65], hex[65], mhex[65];
	int64_t csize;
	cleanup_free char *text = NULL;
	size_t i;
	int r;

	if ((r = load_docker_hex(l, json_string_value(json_object_get(e, "Config")), chex)))
		goto out;
	csize = load_staged_size(l, chex) >= 0 ? load_staged_size(l, chex) :
		load_stored_size(l, chex);
	if ((r = load_json(l, chex, csize, "image config", &cfg)))
		goto out;
	diff = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
	if (diff && (!json_is_array(diff) ||
		     json_array_size(diff) != json_array_size(json_object_get(e, "Layers")))) {
		r = k8_err_set(l->err, -EINVAL, "%s: image config sha256:%.12s lists %zu layers "
			       "(rootfs.diff_ids), manifest.json %zu", l->src, chex,
			       json_array_size(diff), json_array_size(json_object_get(e, "Layers")));
		goto out;
	}
	json_array_foreach(json_object_get(e, "Layers"), i, x) {
		const char *mt;
		int64_t size;
		if ((r = load_docker_hex(l, json_string_value(x), hex)))
			goto out;
		size = load_staged_size(l, hex) >= 0 ? load_staged_size(l, hex) :
		       load_stored_size(l, hex);
		mt = load_layer_type(l, hex);
		if (diff && !strcmp(mt, MT_OCI_LAYER)) {
			const char *want = json_string_value(json_array_get(diff, i));
			if (!want || strncmp(want, "sha256:", 7) || strcmp(want + 7, hex)) {
				r = k8_err_set(l->err, -EBADMSG, "%s: layer '%s' hashes to sha256:%s, but "
					       "the image config says %s; the tarball is damaged",
					       l->src, json_string_value(x), hex, want ? want : "?");
				goto out;
			}
		}
		json_array_append_new(layers, json_pack("{s:s, s:s+, s:I}", "mediaType", mt,
							"digest", "sha256:", hex,
							"size", (json_int_t)size));
		json_object_set_new(l->need, hex, json_true());
	}
	man = json_pack("{s:i, s:s, s:{s:s, s:s+, s:I}, s:O}", "schemaVersion", 2,
			"mediaType", MT_OCI_MANIFEST, "config", "mediaType", MT_OCI_CONFIG,
			"digest", "sha256:", chex, "size", (json_int_t)csize, "layers", layers);
	text = json_dumps(man, JSON_COMPACT);
	json_decref(man);
	if (!text) {
		r = k8_err_set(l->err, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = load_stage_mem(l, text, strlen(text), mhex)))
		goto out;
	json_object_set_new(l->need, chex, json_true());
	json_object_set_new(l->need, mhex, json_true());
	{
		json_t *img = load_image(l, mhex), *tags = json_object_get(e, "RepoTags");
		json_array_foreach(tags, i, x)
			if (json_is_string(x) && (r = load_add_name(l, img, json_string_value(x), false)))
				goto out;
	}
out:
	json_decref(cfg);
	json_decref(layers);
	return r;
}

/* ---------------------------------------------------------------- commit */

static int load_commit(struct load *l, json_t **loaded)
{
	struct image_store *st = l->st;
	const char *hex;
	json_t *v, *old = NULL, *img, *nm;
	size_t i, j;
	bool replaced = false;
	int r = 0;

	/* Every needed blob is staged or stored, at the size it was declared with. */
	json_object_foreach(l->need, hex, v) {
		if (load_staged_size(l, hex) < 0 && load_stored_size(l, hex) < 0)
			return k8_err_set(l->err, -ENOENT, "blob sha256:%s is missing from %s", hex,
					  l->src);
	}
	json_object_foreach(l->need, hex, v) {
		if (load_staged_size(l, hex) < 0)
			continue;
		if (renameat(l->stagefd, hex, st->blobfd, hex) < 0)
			return k8_err_set(l->err, -errno, "storing blob sha256:%s: %s", hex,
					  strerror(errno));
	}
	if (fsync(st->blobfd) < 0)
		return k8_err_set(l->err, -errno, "fsync of the blob directory: %s", strerror(errno));

	*loaded = json_array();
	pthread_mutex_lock(&st->lock);
	old = json_deep_copy(st->refs);
	json_array_foreach(l->images, i, img) {
		const char *mhex = json_string_value(json_object_get(img, "hex"));
		json_array_foreach(json_object_get(img, "names"), j, nm) {
			const char *name = json_string_value(nm);
			const char *prev = json_string_value(json_object_get(st->refs, name));
			char dg[72];
			snprintf(dg, sizeof(dg), "sha256:%s", mhex);
			if (prev && strcmp(prev, dg))
				replaced = true;
			json_object_set_new(st->refs, name, json_string(dg));
			bool dup = false;
			size_t k;
			json_t *seen;
			json_array_foreach(*loaded, k, seen)
				if (!strcmp(json_string_value(json_object_get(seen, "ref")), name))
					dup = true;
			if (!dup)
				json_array_append_new(*loaded, json_pack("{s:s, s:s}", "ref", name,
									 "digest", dg));
		}
	}
	r = store_refs_save_locked(st, l->err);
	if (r) {
		json_decref(st->refs);
		st->refs = old;
		old = NULL;
		json_decref(*loaded);
		*loaded = NULL;
		store_gc_locked(st);   /* the blobs that just landed are garbage again */
	} else if (replaced) {
		store_gc_locked(st);
	}
	pthread_mutex_unlock(&st->lock);
	json_decref(old);
	return r;
}

/* ---------------------------------------------------------------- entry point */

static int load_run(struct load *l, json_t **loaded)
{
	struct stat s;
	char hex[65];
	int r;

	if (stat(l->src, &s) < 0)
		return k8_err_set(l->err, -errno, "cannot read %s: %s", l->src, strerror(errno));
	if (S_ISDIR(s.st_mode)) {
		cleanup_free char *ipath = NULL, *buf = NULL;
		size_t len;
		struct stat os;
		l->dirfd = open(l->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (l->dirfd < 0)
			return k8_err_set(l->err, -errno, "opening %s: %s", l->src, strerror(errno));
		if (fstatat(l->dirfd, "oci-layout", &os, AT_SYMLINK_NOFOLLOW) < 0)
			return k8_err_set(l->err, -EINVAL, "%s is not an OCI image layout (it has no "
					  "oci-layout file); kosa8 loads OCI layouts, OCI archives "
					  "and docker save tarballs", l->src);
		ipath = xasprintf("%s/index.json", l->src);
		r = read_file(ipath, IMAGE_JSON_MAX, &buf, &len);
		if (r)
			return k8_err_set(l->err, r, "reading %s: %s", ipath,
					  r == -EFBIG ? "larger than 4 MiB" : strerror(-r));
		if ((r = store_json_parse(buf, len, ipath, &l->index, l->err)))
			return r;
		return load_oci(l) ?: load_names(l) ?: load_commit(l, loaded);
	}
	if (!S_ISREG(s.st_mode))
		return k8_err_set(l->err, -EINVAL, "%s is neither a directory nor a file", l->src);
	l->archive = true;
	if ((r = load_scan(l, 1)))
		return r;
	if (l->index) {
		if ((r = load_oci(l)))
			return r;
		if (json_object_size(l->want) && (r = load_scan(l, 2)))
			return r;
		/* Layers deferred to pass 2 must now be there, at their declared size. */
		const char *k;
		json_t *v;
		json_object_foreach(l->want, k, v) {
			memcpy(hex, k, 65);
			if ((r = load_get_blob(l, hex, json_integer_value(v), false)))
				return r;
		}
		return load_names(l) ?: load_commit(l, loaded);
	}
	if (l->docker) {
		json_t *e;
		size_t i;
		if ((r = load_docker_plan(l)) || (r = load_scan(l, 2)))
			return r;
		json_array_foreach(l->docker, i, e)
			if ((r = load_docker_image(l, e)))
				return r;
		return load_names(l) ?: load_commit(l, loaded);
	}
	return k8_err_set(l->err, -EINVAL, "%s is neither an OCI archive (no index.json) nor a "
			  "docker save tarball (no manifest.json)", l->src);
}

int image_load(struct image_store *st, const char *path, const char *tag,
	       image_progress_fn progress, void *ctx, json_t **loaded, struct k8_err *err)
{
	struct load l = {
		.st = st, .src = path, .progress = progress, .ctx = ctx, .err = err,
		.dirfd = -1, .stagefd = -1,
	};
	int r;

	*loaded = NULL;
	if (!path || !*path)
		return k8_err_set(err, -EINVAL, "image load: no path given");
	if (tag && *tag) {
		r = ref_parse(tag, &l.tagp, err);
		if (r)
			return r;
		if (l.tagp.digest[0])
			return k8_err_set(err, -EINVAL, "--tag takes NAME[:TAG], not a digest ('%s')", tag);
		l.has_tag = true;
		l.tag_explicit = l.tagp.tag[0] != '\0';
	}
	l.staged = json_object();
	l.need = json_object();
	l.want = json_object();
	l.images = json_array();
	l.skipped = json_array();
	store_busy_begin(st);
	store_tmp_name(st, "load", l.stagename, sizeof(l.stagename));
	if (mkdirat(st->tmpfd, l.stagename, 0700) < 0 ||
	    (l.stagefd = openat(st->tmpfd, l.stagename, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
				O_CLOEXEC)) < 0) {
		r = k8_err_set(err, -errno, "creating a staging directory in %s/tmp: %s", st->root,
			       strerror(errno));
	} else {
		r = load_run(&l, loaded);
	}
	if (r && *loaded) {
		json_decref(*loaded);
		*loaded = NULL;
	}
	k8_closep(&l.stagefd);
	k8_closep(&l.dirfd);
	unpack_remove_at(st->tmpfd, l.stagename, 0);
	store_busy_end(st);
	json_decref(l.staged);
	json_decref(l.need);
	json_decref(l.want);
	json_decref(l.members);
	json_decref(l.images);
	json_decref(l.index);
	json_decref(l.docker);
	json_decref(l.skipped);
	return r;
}
