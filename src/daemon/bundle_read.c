/* SPDX-License-Identifier: Apache-2.0 */
/* bundle_read.c - the bundle importer's reader: manifest.json first, then every member
 * streamed into the staging directory while it is hashed (bundle.h has the contract). */
#include "daemon/bundle_read.h"
#include "common/sha.h"

#include <archive_entry.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool bundle_member_ok(const char *p)
{
	size_t l = strlen(p);
	if (l == 0 || l >= BUNDLE_PATH_MAX || strstr(p, "..") || strstr(p, "//") || p[l - 1] == '/' ||
	    (strncmp(p, "guest/", 6) && strncmp(p, "images/", 7) && strncmp(p, "models/", 7)))
		return false;
	for (size_t i = 0; i < l; i++)
		if (!isalnum((unsigned char)p[i]) && !strchr("._-/", p[i]))
			return false;
	if (!strncmp(p, "guest/", 6) && strchr(p + 6, '/'))
		return false;
	return true;
}

static int mkparents(const char *root, const char *rel)
{
	char buf[4400];
	if ((size_t)snprintf(buf, sizeof(buf), "%s/%s", root, rel) >= sizeof(buf))
		return -ENAMETOOLONG;
	char *s = strrchr(buf, '/');
	if (!s)
		return 0;
	*s = 0;
	return mkdir_p(buf, 0700);
}

/* manifest.json: read whole (archive_read_data may return less than asked), parsed, and
 * its parts indexed by path into br->seen's sibling `parts`. */
static int read_manifest(struct archive *a, const char *what, int64_t size, struct bundle_read *br,
			 json_t *parts, struct k8_err *err)
{
	char *t = xmalloc((size_t)size + 1);
	int64_t got = 0;
	la_ssize_t k = 1;

	while (got < size && (k = archive_read_data(a, t + got, (size_t)(size - got))) > 0)
		got += k;
	br->manifest = got == size ? json_loadb(t, (size_t)size, JSON_REJECT_DUPLICATES, NULL) : NULL;
	free(t);
	json_t *pl = json_object_get(br->manifest, "parts");
	if (!json_is_integer(json_object_get(br->manifest, "kosa8_bundle")) ||
	    json_integer_value(json_object_get(br->manifest, "kosa8_bundle")) != 1 ||
	    !json_is_array(pl) || json_array_size(pl) > BUNDLE_MAX_PARTS)
		return k8_err_set(err, -EBADMSG, "%s: manifest.json is not a version 1 bundle manifest",
				  what);
	size_t i;
	json_t *p;
	json_array_foreach(pl, i, p) {
		const char *pp = json_string_value(json_object_get(p, "path"));
		const char *sh = json_string_value(json_object_get(p, "sha256"));
		json_t *sz = json_object_get(p, "size");
		if (!pp || !bundle_member_ok(pp) || !sh || strlen(sh) != 64 || !json_is_integer(sz) ||
		    json_integer_value(sz) < 0 || json_object_get(parts, pp))
			return k8_err_set(err, -EBADMSG, "%s: manifest.json part %zu is not valid", what, i);
		json_object_set(parts, pp, p);
	}
	br->nparts = (int)json_object_size(parts);
	return 0;
}

/* One listed member: into stage/NAME (a new file), hashed on the way, checked. */
static int read_member(struct archive *a, const char *what, const char *stage, const char *name,
		       int64_t size, json_t *p, struct k8_err *err)
{
	int r;
	if ((r = mkparents(stage, name)))
		return k8_err_set(err, r, "staging %s: %s", name, strerror(-r));
	cleanup_free char *dst = xasprintf("%s/%s", stage, name);
	cleanup_close int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", dst, strerror(errno));
	sha256_ctx md = sha256_begin();
	char b[1 << 16];
	la_ssize_t k;
	int64_t done = 0;
	while ((k = archive_read_data(a, b, sizeof(b))) > 0) {
		sha256_add(md, b, (size_t)k);
		if (write_full(fd, b, (size_t)k) < 0) {
			r = k8_err_set(err, -EIO, "%s: %s", dst, strerror(errno));
			break;
		}
		done += k;
	}
	char hex[65];
	sha256_end(md, hex);
	if (r)
		return r;
	if (k < 0 || done != size)
		return k8_err_set(err, -EBADMSG, "%s is cut short in %s", what, name);
	const char *want = json_string_value(json_object_get(p, "sha256"));
	if (strcmp(hex, want))
		return k8_err_set(err, -EBADMSG, "%s: %s has SHA-256 %s; the manifest says %s. "
				  "Nothing was installed", what, name, hex, want);
	return 0;
}

int bundle_read(struct archive *a, const char *what, const char *stage,
		void (*progress)(void *, json_t *), void *pctx, struct bundle_read *br,
		struct k8_err *err)
{
	json_t *parts = json_object();
	struct archive_entry *e;
	int r = 0;

	br->manifest = NULL;
	br->seen = json_object();
	br->nparts = 0;
	for (;;) {
		int ar = archive_read_next_header(a, &e);
		if (ar == ARCHIVE_EOF)
			break;
		if (ar != ARCHIVE_OK) {
			r = k8_err_set(err, -EBADMSG, "%s is not a whole kosa8 bundle: %s", what,
				       archive_error_string(a));
			goto out;
		}
		const char *name = archive_entry_pathname(e);
		la_int64_t size = archive_entry_size(e);
		if (!name || archive_entry_filetype(e) != AE_IFREG || size < 0) {
			r = k8_err_set(err, -EBADMSG, "%s: a member that is not a plain file", what);
			goto out;
		}
		if (!br->manifest) {
			if (strcmp(name, "manifest.json") || size > (la_int64_t)BUNDLE_MANIFEST_MAX) {
				r = k8_err_set(err, -EBADMSG, "%s is not a kosa8 bundle (manifest.json "
					       "must come first)", what);
				goto out;
			}
			if ((r = read_manifest(a, what, size, br, parts, err)))
				goto out;
			continue;
		}
		json_t *p = json_object_get(parts, name);
		if (!p || json_object_get(br->seen, name)) {
			r = k8_err_set(err, -EBADMSG, "%s: member %.200s is %s", what, name,
				       p ? "there twice" : "not in its manifest");
			goto out;
		}
		if (size != json_integer_value(json_object_get(p, "size"))) {
			r = k8_err_set(err, -EBADMSG, "%s: %s is %lld bytes; the manifest says %lld", what,
				       name, (long long)size,
				       (long long)json_integer_value(json_object_get(p, "size")));
			goto out;
		}
		if ((r = read_member(a, what, stage, name, size, p, err)))
			goto out;
		json_object_set_new(br->seen, name, json_true());
		if (progress)
			progress(pctx, json_pack("{s:s,s:s,s:I,s:I}", "phase", "verify", "what", name,
						 "done", (json_int_t)json_object_size(br->seen), "total",
						 (json_int_t)br->nparts));
	}
	if (!br->manifest || (int)json_object_size(br->seen) != br->nparts)
		r = k8_err_set(err, -EBADMSG, "%s ends before all of its %d parts (%zu came); nothing "
			       "was installed", what, br->nparts, json_object_size(br->seen));
out:
	json_decref(parts);
	return r;
}

void bundle_read_free(struct bundle_read *br)
{
	json_decref(br->manifest);
	json_decref(br->seen);
	br->manifest = br->seen = NULL;
}
