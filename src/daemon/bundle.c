/* SPDX-License-Identifier: Apache-2.0 */
/* bundle.c - one file that carries a machine's offline needs: the guest image, images and
 * models (kosa8 bundle export / import; docs/model.md "Bundles").
 *
 * Format: a POSIX tar whose first member is manifest.json:
 *   {"kosa8_bundle": 1, "created": T, "parts": [{"path", "sha256", "size", "kind",
 *    "name"?}], "models": [{name, sha256, size, source}], "images": [ref...]}
 * then every part, exactly once: guest/<file> (kernel, initramfs, manifest.json),
 * images/... (one OCI layout holding every image, named by ref annotations) and
 * models/sha256-<hex>. Import reads the manifest, streams each member into a staging
 * directory under $KOSA8_HOME while hashing it, refuses a member that is not listed, is
 * listed twice, has another size or digest, or a bundle that ends before every part came;
 * refuses a guest image whose manifest is not the one this build was released with (or
 * the one the user trusts by digest: check_guest); only then installs: images (through
 * the store's own loader), models, the guest image.
 * A refused bundle leaves nothing behind but the staging directory, which is removed.
 */
#include "daemon/bundle.h"
#include "daemon/bundle_read.h"
#include "daemon/daemon.h"
#include "daemon/guest.h"
#include "daemon/model.h"
#include "daemon/api_route.h"
#include "image/image.h"
#include "common/sha.h"
#include "common/uarchive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef void (*progress_fn)(void *, json_t *);

static int sha256_file(const char *path, char out[65], uint64_t *size)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	return fd < 0 ? -errno : sha256_fd(fd, out, size);
}

/* ---- export ---- */

struct part {
	char *src;           /* file on this machine */
	char path[300];      /* in the bundle */
	char sha[65];
	uint64_t size;
	const char *kind;
};

struct parts {
	struct part *v;
	int n;
};

static int add_part(struct parts *ps, const char *src, const char *kind, struct k8_err *err,
		    const char *fmt, ...) K8_PRINTF(5, 6);
static int add_part(struct parts *ps, const char *src, const char *kind, struct k8_err *err,
		    const char *fmt, ...)
{
	for (int i = 0; i < ps->n; i++)   /* a blob shared by two images goes once */
		if (!strcmp(ps->v[i].src, src))
			return 0;
	struct part *v = realloc(ps->v, (size_t)(ps->n + 1) * sizeof(*v));
	if (!v)
		return k8_err_set(err, -ENOMEM, "out of memory");
	ps->v = v;
	struct part *p = &v[ps->n];
	memset(p, 0, sizeof(*p));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->path, sizeof(p->path), fmt, ap);
	va_end(ap);
	int r = sha256_file(src, p->sha, &p->size);
	if (r)
		return k8_err_set(err, r, "%s: %s", src, strerror(-r));
	p->src = xstrdup(src);
	p->kind = kind;
	ps->n++;
	return 0;
}

static void parts_free(struct parts *ps)
{
	for (int i = 0; i < ps->n; i++)
		free(ps->v[i].src);
	free(ps->v);
}

static int read_json_file(const char *path, json_t **out, struct k8_err *err)
{
	cleanup_free char *t = NULL;
	size_t n;
	int r = read_file(path, BUNDLE_MANIFEST_MAX, &t, &n);
	if (r)
		return k8_err_set(err, r, "%s: %s", path, strerror(-r));
	*out = json_loadb(t, n, 0, NULL);
	return *out ? 0 : k8_err_set(err, -EINVAL, "%s is not JSON", path);
}

/* Every blob of image `ref` as a part, and its descriptor for the bundle's index.json. */
static int export_image(struct daemon *d, const char *ref, struct parts *ps, json_t *index,
			struct k8_err *err)
{
	struct image_info info = { 0 };
	int r = image_resolve(d->images, ref, &info, err);
	if (r)
		return r;
	const char *hex = info.digest + 7;
	cleanup_free char *mp = xasprintf("%s/images/blobs/sha256/%s", d->home, hex);
	json_t *m = NULL;
	if ((r = read_json_file(mp, &m, err)))
		goto out;
	if (!json_is_object(json_object_get(m, "config")) || !json_is_array(json_object_get(m, "layers"))) {
		r = k8_err_set(err, -ENOTSUP, "%s: only single-platform image manifests can be bundled",
			       info.ref);
		goto out;
	}
	if ((r = add_part(ps, mp, "image", err, "images/blobs/sha256/%s", hex)))
		goto out;
	json_t *descs = json_array();
	json_array_append(descs, json_object_get(m, "config"));
	size_t i;
	json_t *l;
	json_array_foreach(json_object_get(m, "layers"), i, l)
		json_array_append(descs, l);
	json_array_foreach(descs, i, l) {
		const char *dg = json_string_value(json_object_get(l, "digest"));
		if (!dg || strncmp(dg, "sha256:", 7) || strlen(dg) != 71 || strchr(dg + 7, '/')) {
			r = k8_err_set(err, -EINVAL, "%s: a descriptor without a sha256 digest", info.ref);
			break;
		}
		cleanup_free char *bp = xasprintf("%s/images/blobs/sha256/%s", d->home, dg + 7);
		if ((r = add_part(ps, bp, "image", err, "images/blobs/sha256/%s", dg + 7)))
			break;
	}
	json_decref(descs);
	if (r)
		goto out;
	const char *mt = json_string_value(json_object_get(m, "mediaType"));
	struct stat mst;
	uint64_t msize = stat(mp, &mst) == 0 ? (uint64_t)mst.st_size : 0;
	json_array_append_new(json_object_get(index, "manifests"), json_pack(
		"{s:s,s:s,s:I,s:{s:s}}", "mediaType", mt ? mt : "application/vnd.oci.image.manifest.v1+json",
		"digest", info.digest, "size", (json_int_t)msize, "annotations",
		"org.opencontainers.image.ref.name", info.ref));
out:
	json_decref(m);
	image_info_clear(&info);
	return r;
}

static int write_member(struct archive *a, const char *path, const void *data, size_t n, const char *src,
			uint64_t size, const char *want_sha, progress_fn progress, void *pctx,
			struct k8_err *err)
{
	cleanup_close int fd = -1;
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, path);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, (la_int64_t)(data ? n : size));
	archive_entry_set_mtime(e, time(NULL), 0);
	int r = 0;
	if (archive_write_header(a, e) != ARCHIVE_OK) {
		r = k8_err_set(err, -EIO, "writing the bundle: %s", archive_error_string(a));
		goto out;
	}
	if (data) {
		if (archive_write_data(a, data, n) != (la_ssize_t)n)
			r = k8_err_set(err, -EIO, "writing the bundle: %s", archive_error_string(a));
		goto out;
	}
	/* Hash again while copying: a file that changed since the manifest was made would
	 * make a bundle that import refuses; refuse it here instead. */
	fd = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		r = k8_err_set(err, -errno, "%s: %s", src, strerror(errno));
		goto out;
	}
	sha256_ctx md = sha256_begin();
	char b[1 << 16];
	ssize_t k;
	uint64_t done = 0;
	while (done < size && (k = read(fd, b, sizeof(b) < size - done ? sizeof(b) : (size_t)(size - done))) > 0) {
		sha256_add(md, b, (size_t)k);
		if (archive_write_data(a, b, (size_t)k) != k) {
			r = k8_err_set(err, -EIO, "writing the bundle: %s", archive_error_string(a));
			break;
		}
		done += (uint64_t)k;
	}
	char hex[65];
	sha256_end(md, hex);
	if (!r && (done != size || strcmp(hex, want_sha)))
		r = k8_err_set(err, -EBADMSG, "%s changed while it was being bundled", src);
	if (progress)
		progress(pctx, json_pack("{s:s,s:s,s:I,s:I}", "phase", "export", "what", path,
					 "done", (json_int_t)done, "total", (json_int_t)size));
out:
	archive_entry_free(e);
	return r;
}

/* The daemon's guest image (its manifest, kernel and initramfs) as parts, checked against
 * the manifest it was found with. */
static int export_guest(struct daemon *d, struct parts *ps, struct k8_err *err)
{
	int r;

	if (!d->guest.dir[0])
		return k8_err_set(err, -ENOENT, "this daemon has no guest image to bundle (--no-guest)");
	cleanup_free char *gm = xasprintf("%s/manifest.json", d->guest.dir);
	const char *kb = strrchr(d->guest.kernel, '/') + 1, *ib = strrchr(d->guest.initramfs, '/') + 1;
	if ((r = add_part(ps, gm, "guest", err, "guest/manifest.json")) ||
	    (r = add_part(ps, d->guest.kernel, "guest", err, "guest/%s", kb)) ||
	    (r = add_part(ps, d->guest.initramfs, "guest", err, "guest/%s", ib)))
		return r;
	if (strcmp(ps->v[ps->n - 2].sha, d->guest.kernel_sha) ||
	    strcmp(ps->v[ps->n - 1].sha, d->guest.initramfs_sha))
		return k8_err_set(err, -EBADMSG, "the guest image in %s does not match its manifest",
				  d->guest.dir);
	return 0;
}

/* The model named `v` as a part (its file, checked against its SHA-256), its metadata
 * into mmeta. */
static int export_model(struct daemon *d, json_t *v, struct parts *ps, json_t *mmeta,
			struct k8_err *err)
{
	json_t *all = model_list_json(d), *m, *found = NULL;
	size_t k;
	int r;

	json_array_foreach(all, k, m)
		if (json_is_string(v) && !strcmp(json_string_value(json_object_get(m, "name")),
						 json_string_value(v)))
			found = json_incref(m);
	json_decref(all);
	if (!found)
		return k8_err_set(err, -ENOENT, "no model '%s'; see kosa8 model ls",
				  json_is_string(v) ? json_string_value(v) : "?");
	const char *sha = json_string_value(json_object_get(found, "sha256"));
	cleanup_free char *src = xasprintf("%s/models/blobs/sha256-%s", d->home, sha);
	json_array_append_new(mmeta, found);
	if ((r = add_part(ps, src, "model", err, "models/sha256-%s", sha)))
		return r;
	if (strcmp(ps->v[ps->n - 1].sha, sha))
		return k8_err_set(err, -EBADMSG, "model %s: its file does not match its SHA-256",
				  json_string_value(v));
	return 0;
}

int bundle_export(struct daemon *d, json_t *body, progress_fn progress, void *pctx, json_t **out,
		  struct k8_err *err)
{
	const char *path = json_string_value(json_object_get(body, "path"));
	json_t *images = json_object_get(body, "images"), *models = json_object_get(body, "models");
	bool guest = !json_is_false(json_object_get(body, "guest"));
	if (!path || path[0] != '/')
		return k8_err_set(err, -EINVAL, "path must be an absolute path for the bundle");
	struct parts ps = { 0 };
	json_t *index = json_pack("{s:i,s:[]}", "schemaVersion", 2, "manifests");
	json_t *mmeta = json_array(), *refs = json_array();
	struct archive *a = NULL;
	char *index_text = NULL, *mtext = NULL;
	cleanup_free char *tmp = xasprintf("%s.tmp", path);
	int r = 0;
	if (guest && (r = export_guest(d, &ps, err)))
		goto out;
	size_t i;
	json_t *v;
	json_array_foreach(images, i, v) {
		if (!json_is_string(v) || (r = export_image(d, json_string_value(v), &ps, index, err)))
			goto out;
		json_array_append(refs, v);
	}
	json_array_foreach(models, i, v)
		if ((r = export_model(d, v, &ps, mmeta, err)))
			goto out;
	index_text = json_dumps(index, JSON_COMPACT);
	static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
	json_t *plist = json_array();
	for (int k = 0; k < ps.n; k++)
		json_array_append_new(plist, json_pack("{s:s,s:s,s:I,s:s}", "path", ps.v[k].path, "sha256",
					ps.v[k].sha, "size", (json_int_t)ps.v[k].size, "kind", ps.v[k].kind));
	char ish[65], lsh[65];
	sha256_hex(index_text, strlen(index_text), ish);
	sha256_hex(layout, strlen(layout), lsh);
	if (json_array_size(refs)) {
		json_array_append_new(plist, json_pack("{s:s,s:s,s:I,s:s}", "path", "images/index.json",
					"sha256", ish, "size", (json_int_t)strlen(index_text), "kind", "image"));
		json_array_append_new(plist, json_pack("{s:s,s:s,s:I,s:s}", "path", "images/oci-layout",
					"sha256", lsh, "size", (json_int_t)strlen(layout), "kind", "image"));
	}
	json_t *manifest = json_pack("{s:i,s:I,s:o,s:O,s:O}", "kosa8_bundle", 1, "created",
				     (json_int_t)time(NULL), "parts", plist, "models", mmeta, "images", refs);
	mtext = json_dumps(manifest, JSON_INDENT(1));
	json_decref(manifest);
	a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	if (archive_write_open_filename(a, tmp) != ARCHIVE_OK) {
		r = k8_err_set(err, -EIO, "%s: %s", tmp, archive_error_string(a));
		goto out;
	}
	if ((r = write_member(a, "manifest.json", mtext, strlen(mtext), NULL, 0, NULL, NULL, NULL, err)))
		goto out;
	if (json_array_size(refs) &&
	    ((r = write_member(a, "images/oci-layout", layout, strlen(layout), NULL, 0, NULL, NULL, NULL, err)) ||
	     (r = write_member(a, "images/index.json", index_text, strlen(index_text), NULL, 0, NULL, NULL,
			       NULL, err))))
		goto out;
	for (int k = 0; k < ps.n && !r; k++)
		r = write_member(a, ps.v[k].path, NULL, 0, ps.v[k].src, ps.v[k].size, ps.v[k].sha,
				 progress, pctx, err);
	if (!r && archive_write_close(a) != ARCHIVE_OK)
		r = k8_err_set(err, -EIO, "%s: %s", tmp, archive_error_string(a));
	if (!r && rename(tmp, path))
		r = k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (!r) {
		struct stat st;
		stat(path, &st);
		*out = json_pack("{s:s,s:I,s:i,s:O,s:i}", "path", path, "size", (json_int_t)st.st_size,
				 "parts", ps.n, "images", refs, "models", (int)json_array_size(mmeta));
		daemon_audit(d, "bundle.export", NULL, json_pack("{s:s,s:i}", "path", path, "parts", ps.n));
	}
out:
	if (a)
		archive_write_free(a);
	if (r)
		unlink(tmp);
	parts_free(&ps);
	free(index_text);
	free(mtext);
	json_decref(index);
	json_decref(mmeta);
	json_decref(refs);
	return r;
}

/* ---- import ---- */

static bool digest_ok(const char *s)
{
	if (strncmp(s, "sha256:", 7) || strlen(s) != 71)
		return false;
	for (const char *c = s + 7; *c; c++)
		if (!strchr("0123456789abcdef", *c))
			return false;
	return true;
}

/* The bundle's guest image, staged in `gdir`, before anything is installed: its kernel
 * and initramfs must match its own manifest.json, and that manifest must be the one this
 * build was released with (d->guest_release), or the one the user named with
 * --trust-guest (`trust`; *trusted says so). A guest image runs in every later sandbox,
 * so a bundle is never its own judge. */
static int check_guest(struct daemon *d, const char *gdir, const char *bundle, const char *trust,
		       char digest[72], bool *trusted, struct k8_err *err)
{
	struct guest_image g;
	int kfd = -1, ifd = -1, r;

	*trusted = false;
	if ((r = guest_find_dir(&g, gdir, err)) || (r = guest_verify_open(&g, &kfd, &ifd, err))) {
		k8_err_wrap(err, "%s: its guest image (nothing was installed)", bundle);
		return r;
	}
	close(kfd);
	close(ifd);
	snprintf(digest, 72, "%s", g.digest);
	if (d->guest_release && !strcmp(g.digest, d->guest_release))
		return 0;
	if (trust && !strcmp(trust, g.digest)) {
		*trusted = true;
		return 0;
	}
	daemon_audit(d, "bundle.guest.refused", NULL, json_pack("{s:s,s:s,s:s?,s:s?}", "path", bundle,
		     "guest", g.digest, "release", d->guest_release, "trust_guest", trust));
	if (trust)
		return k8_err_set(err, -EPERM, "%s: its guest image is %s, not the %s named by "
				  "--trust-guest. Nothing was installed", bundle, g.digest, trust);
	return k8_err_set(err, -EPERM,
			  "%s: its guest image (%s) is not the one this kosa8 was released with "
			  "(%s); refusing it: a guest image runs in every sandbox. Nothing was "
			  "installed. Import it only if that digest is the published checksum of a "
			  "guest image you trust: kosa8 bundle import FILE --trust-guest DIGEST",
			  bundle, g.digest, d->guest_release ? d->guest_release : "none");
}

int bundle_import(struct daemon *d, json_t *body, progress_fn progress, void *pctx, json_t **out,
		  struct k8_err *err)
{
	const char *path = json_string_value(json_object_get(body, "path"));
	json_t *tj = json_object_get(body, "trust_guest");
	const char *trust = json_string_value(tj);
	char digest[72] = "";
	bool trusted = false;
	if (!path || path[0] != '/')
		return k8_err_set(err, -EINVAL, "path must be an absolute path to a bundle");
	if ((tj && !json_is_null(tj) && !trust) || (trust && !digest_ok(trust)))
		return k8_err_set(err, -EINVAL, "trust_guest must be sha256: and 64 lowercase hex digits");
	char stage[4200];
	snprintf(stage, sizeof(stage), "%s/tmp/bundle-%d-%ld", d->home, (int)getpid(), (long)time(NULL));
	struct archive *a = uarchive_reader(0, err);
	struct bundle_read br = { 0 };
	json_t *manifest, *seen, *loaded = NULL;
	int r = 0, nparts;
	if (!a)
		return err->code;
	rm_rf(stage);
	if ((r = mkdir_p(stage, 0700))) {
		r = k8_err_set(err, r, "%s: %s", stage, strerror(-r));
		goto out;
	}
	if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
		r = k8_err_set(err, -EINVAL, "%s: %s", path, archive_error_string(a));
		goto out;
	}
	if ((r = bundle_read(a, path, stage, progress, pctx, &br, err)))
		goto out;
	manifest = br.manifest;
	seen = br.seen;
	nparts = br.nparts;
	bool guest = json_object_get(seen, "guest/manifest.json") != NULL;
	if (guest) {
		cleanup_free char *gdir = xasprintf("%s/guest", stage);
		if ((r = check_guest(d, gdir, path, trust, digest, &trusted, err)))
			goto out;
	}
	/* Everything verified: install. Images first (the store's loader checks them again),
	 * then models, then the guest image. */
	json_t *refs = json_object_get(manifest, "images");
	if (json_array_size(refs)) {
		cleanup_free char *lay = xasprintf("%s/images", stage);
		if ((r = image_load(d->images, lay, NULL, NULL, NULL, &loaded, err)))
			goto out;
	}
	size_t i;
	json_t *m;
	int nmodels = 0;
	json_array_foreach(json_object_get(manifest, "models"), i, m) {
		const char *sha = json_string_value(json_object_get(m, "sha256"));
		const char *name = json_string_value(json_object_get(m, "name"));
		char pp[100];
		snprintf(pp, sizeof(pp), "models/sha256-%s", sha ? sha : "");
		if (!sha || !name || !json_object_get(seen, pp)) {
			r = k8_err_set(err, -EBADMSG, "%s: model %zu has no part in the bundle", path, i);
			goto out;
		}
		cleanup_free char *src = xasprintf("%s/%s", stage, pp);
		json_t *body2 = json_pack("{s:s,s:s}", "path", src, "name", name);
		json_t *res = NULL;
		r = model_import(d, body2, NULL, NULL, &res, err);
		json_decref(body2);
		json_decref(res);
		if (r)
			goto out;
		nmodels++;
	}
	if (guest) {
		cleanup_free char *gsrc = xasprintf("%s/guest", stage);
		struct guest_image g;
		if ((r = guest_find_dir(&g, gsrc, err)) || (r = guest_install(&g, d->home, err)))
			goto out;
		if (guest_find_home(&g, d->home, err) == 0)   /* KOSA8_GUEST_DIR still wins */
			d->guest = g;
		k8_err_clear(err);
	}
	/* A guest the user vouched for (--trust-guest) is named in the record, and says so. */
	daemon_audit(d, "bundle.import", NULL, json_pack("{s:s,s:i,s:s?,s:b}", "path", path, "parts",
		     nparts, "guest", guest ? digest : NULL, "trusted_guest", trusted));
	*out = json_pack("{s:s,s:i,s:O,s:i,s:b,s:s?,s:b}", "path", path, "parts", nparts, "images",
			 loaded ? loaded : refs, "models", nmodels, "guest", guest, "guest_digest",
			 guest ? digest : NULL, "trusted_guest", trusted);
out:
	archive_read_free(a);
	rm_rf(stage);
	bundle_read_free(&br);
	json_decref(loaded);
	return r;
}

/* ---- API: POST /v1/bundle/export and /import, progress streams (api.h). ---- */

static int bundle_export_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	return bundle_export(j->d, j->body, api_job_progress, j, result, err);
}

int bundle_api_export(struct api_call *call)
{
	return api_reply_job(call, bundle_export_job, NULL);
}

static int bundle_import_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	return bundle_import(j->d, j->body, api_job_progress, j, result, err);
}

int bundle_api_import(struct api_call *call)
{
	return api_reply_job(call, bundle_import_job, NULL);
}
