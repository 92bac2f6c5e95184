/* SPDX-License-Identifier: Apache-2.0 */
/* copy.c - COPY and ADD of the classic builder: a layer from the build context, and the
 * image's symlinks its destination resolves through (copy.h). Moved out of the daemon's
 * docker_build.c, which touches the image store only to open the layers (a callback now).
 */
#include "docker/copy.h"
#include "common/sha.h"
#include "common/uarchive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- the layer: entries written to a tar as the context is walked ---- */

struct dcopy {
	const struct dcopy_in *in;
	struct archive *a;          /* the layer being written */
	struct df_copy_file *files;
	size_t n, cap;
	bool chown;
	uint32_t uid, gid;
	bool add;                   /* ADD: a local tar archive is extracted */
	struct k8_err *err;
};

static void dcopy_free(struct dcopy *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free((char *)c->files[i].path);
		free((char *)c->files[i].link_target);
		free((char *)c->files[i].sha256);
	}
	free(c->files);
	if (c->a)
		archive_write_free(c->a);
}

static int dcopy_note(struct dcopy *c, const char *path, const struct stat *s,
			 const char *link, const char *sha)
{
	struct df_copy_file *f;

	if (c->n >= DCOPY_FILES_MAX)
		return k8_err_set(c->err, -E2BIG, "COPY takes more than %u files (kosa8's limit)",
				  DCOPY_FILES_MAX);
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 64;
		c->files = realloc(c->files, c->cap * sizeof(*c->files));
		if (!c->files)
			abort();
	}
	f = &c->files[c->n++];
	memset(f, 0, sizeof(*f));
	f->path = xstrdup(path);
	f->mode = s->st_mode;
	f->uid = c->chown ? c->uid : 0;
	f->gid = c->chown ? c->gid : 0;
	f->size = S_ISREG(s->st_mode) ? (uint64_t)s->st_size : 0;
	f->link_target = link ? xstrdup(link) : NULL;
	f->sha256 = sha ? xstrdup(sha) : NULL;
	return 0;
}

static int dcopy_ar_err(struct dcopy *c, const char *what)
{
	return k8_err_set(c->err, -EIO, "writing the layer (%s): %s", what,
			  archive_error_string(c->a) ?: "error");
}

/* One entry of the layer: `dst` relative to / (no leading '/'), from an open fd (a
 * regular file, read whole and hashed) or a link target. */
static int dcopy_entry(struct dcopy *c, const char *dst, const struct stat *s, int fd,
			  const char *link)
{
	struct archive_entry *e = archive_entry_new();
	char sha[65] = "", buf[65536];
	sha256_ctx h = NULL;
	uint64_t left = (uint64_t)s->st_size;
	int r = 0;

	archive_entry_set_pathname(e, dst);
	archive_entry_set_mode(e, s->st_mode & (S_IFMT | 07777));
	archive_entry_set_uid(e, c->chown ? c->uid : 0);
	archive_entry_set_gid(e, c->chown ? c->gid : 0);
	archive_entry_set_mtime(e, s->st_mtim.tv_sec, s->st_mtim.tv_nsec);
	if (S_ISLNK(s->st_mode))
		archive_entry_set_symlink(e, link);
	archive_entry_set_size(e, S_ISREG(s->st_mode) ? s->st_size : 0);
	if (archive_write_header(c->a, e) != ARCHIVE_OK) {
		archive_entry_free(e);
		return dcopy_ar_err(c, dst);
	}
	archive_entry_free(e);
	if (S_ISREG(s->st_mode)) {
		h = sha256_begin();
		while (left > 0) {
			ssize_t n = read(fd, buf, left < sizeof(buf) ? left : sizeof(buf));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {   /* it shrank under us: the tar entry must stay whole */
				r = k8_err_set(c->err, -EIO, "reading %s from the context failed",
					       dst);
				break;
			}
			sha256_add(h, buf, (size_t)n);
			if (archive_write_data(c->a, buf, (size_t)n) != n) {
				r = dcopy_ar_err(c, dst);
				break;
			}
			left -= (uint64_t)n;
		}
		sha256_end(h, sha);
		if (r)
			return r;
	}
	return dcopy_note(c, dst, s, link, sha[0] ? sha : NULL);
}

/* Is the context path excluded by .dockerignore? */
static bool dcopy_ignored(const struct dcopy_in *in, const char *rel)
{
	return in->ig && in->ig->n && dignore_excluded(in->ig, rel);
}

/* Copy the directory dirfd (context path `rel`) into `dst`, never following a symlink. */
static int dcopy_dir(struct dcopy *c, int dirfd, const char *rel, const char *dst,
			unsigned depth)
{
	int fd2 = dup(dirfd), r = 0;
	DIR *d;
	struct dirent *de;

	if (depth > DCOPY_DEPTH_MAX)
		return k8_err_set(c->err, -E2BIG, "%s: directories nest deeper than %u", rel,
				  DCOPY_DEPTH_MAX);
	if (fd2 < 0 || !(d = fdopendir(fd2))) {
		if (fd2 >= 0)
			close(fd2);
		return k8_err_set(c->err, -errno, "%s: %s", rel, strerror(errno));
	}
	rewinddir(d);
	while (!r && (de = readdir(d))) {
		struct stat s;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		cleanup_free char *crel = !strcmp(rel, ".") ? xstrdup(de->d_name)
							     : xasprintf("%s/%s", rel, de->d_name);
		cleanup_free char *cdst = dst[0] ? xasprintf("%s/%s", dst, de->d_name)
						 : xstrdup(de->d_name);
		if (dcopy_ignored(c->in, crel))
			continue;
		if (fstatat(dirfd, de->d_name, &s, AT_SYMLINK_NOFOLLOW) < 0) {
			r = k8_err_set(c->err, -errno, "%s: %s", crel, strerror(errno));
			break;
		}
		if (S_ISDIR(s.st_mode)) {
			cleanup_close int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY |
						       O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				r = k8_err_set(c->err, -errno, "%s: %s", crel, strerror(errno));
				break;
			}
			r = dcopy_entry(c, cdst, &s, -1, NULL);
			if (!r)
				r = dcopy_dir(c, sub, crel, cdst, depth + 1);
		} else if (S_ISREG(s.st_mode)) {
			cleanup_close int f = openat(dirfd, de->d_name, O_RDONLY | O_NOFOLLOW |
						     O_CLOEXEC);
			if (f < 0)
				r = k8_err_set(c->err, -errno, "%s: %s", crel, strerror(errno));
			else
				r = dcopy_entry(c, cdst, &s, f, NULL);
		} else if (S_ISLNK(s.st_mode)) {
			char t[4097];
			ssize_t n = readlinkat(dirfd, de->d_name, t, sizeof(t) - 1);
			if (n < 0) {
				r = k8_err_set(c->err, -errno, "%s: %s", crel, strerror(errno));
				break;
			}
			t[n] = '\0';
			r = dcopy_entry(c, cdst, &s, -1, t);
		}       /* the unpacker never made anything else */
	}
	closedir(d);
	return r;
}

static bool dcopy_is_glob(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

/* ADD of a local archive: its entries under `dst`, each path checked and cleaned. */
static int dcopy_add_archive(struct dcopy *c, int fd, const char *dst, bool *was)
{
	struct archive *in;
	struct archive_entry *e;
	int r = 0, ar;

	*was = false;
	/* what libarchive decodes by a program (lrzip, lzop...) is not an archive here: the
	 * file is copied as it is, as Docker copies a compression it does not know */
	if (!(in = uarchive_reader(UARCHIVE_COMPRESSED, c->err)))
		return c->err->code;
	if (archive_read_open_fd(in, fd, 65536) != ARCHIVE_OK) {
		archive_read_free(in);
		lseek(fd, 0, SEEK_SET);
		return 0;       /* not an archive: copied as a file */
	}
	while ((ar = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
		const char *p = archive_entry_pathname(e);
		mode_t t = archive_entry_filetype(e);
		char clean[4200], buf[65536];
		sha256_ctx h;
		char sha[65];
		struct archive_entry *o;
		ssize_t n;

		*was = true;
		if (!p || strlen(p) >= 4096) {
			r = k8_err_set(c->err, -EINVAL, "ADD: an entry of the archive has no "
				       "usable name");
			archive_read_free(in);
			return r;
		}
		snprintf(clean, sizeof(clean), "%s", p[0] == '/' ? p + 1 : p);
		dignore_clean(clean);
		if (!strncmp(clean, "../", 3) || !strcmp(clean, "..")) {
			/* the message first: p is the reader's, gone once it is freed */
			r = k8_err_set(c->err, -EPERM, "ADD: the archive's entry '%.200s' leaves "
				       "its directory", p);
			archive_read_free(in);
			return r;
		}
		if (t != AE_IFREG && t != AE_IFDIR && t != AE_IFLNK)
			continue;       /* no devices, FIFOs, sockets; hard links not kept */
		cleanup_free char *path = !strcmp(clean, ".") ? xstrdup(dst)
				: dst[0] ? xasprintf("%s/%s", dst, clean) : xstrdup(clean);
		o = archive_entry_clone(e);
		archive_entry_set_pathname(o, path);
		archive_entry_set_uid(o, c->chown ? c->uid : archive_entry_uid(e));
		archive_entry_set_gid(o, c->chown ? c->gid : archive_entry_gid(e));
		archive_entry_set_uname(o, NULL);
		archive_entry_set_gname(o, NULL);
		archive_entry_set_hardlink(o, NULL);
		if (t != AE_IFREG)
			archive_entry_set_size(o, 0);
		if (archive_write_header(c->a, o) != ARCHIVE_OK) {
			archive_entry_free(o);
			archive_read_free(in);
			return dcopy_ar_err(c, path);
		}
		h = sha256_begin();
		while (t == AE_IFREG && (n = archive_read_data(in, buf, sizeof(buf))) > 0) {
			sha256_add(h, buf, (size_t)n);
			if (archive_write_data(c->a, buf, (size_t)n) != n) {
				sha256_end(h, NULL);
				archive_entry_free(o);
				archive_read_free(in);
				return dcopy_ar_err(c, path);
			}
		}
		sha256_end(h, sha);
		struct stat s = { .st_mode = archive_entry_mode(o),
				  .st_size = archive_entry_size(o) };
		r = dcopy_note(c, path, &s, t == AE_IFLNK ? archive_entry_symlink(e) : NULL,
				  t == AE_IFREG ? sha : NULL);
		archive_entry_free(o);
		if (r)
			break;
	}
	if (!r && ar != ARCHIVE_EOF && *was)
		r = k8_err_set(c->err, -EINVAL, "ADD: the archive is damaged: %s",
			       archive_error_string(in) ?: "error");
	archive_read_free(in);
	if (!*was)
		lseek(fd, 0, SEEK_SET);
	return r;
}

/* One source (context path, cleaned) to `dst` (a directory when dst_dir). */
static int dcopy_src(struct dcopy *c, const char *src, const char *dst, bool dst_dir)
{
	struct open_how how = { .flags = O_PATH | O_CLOEXEC,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	cleanup_close int pfd = (int)syscall(SYS_openat2, c->in->ctxfd, src, &how, sizeof(how));
	const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
	struct stat s;

	if (pfd < 0)
		return k8_err_set(c->err, -ENOENT, "COPY failed: file not found in build context "
				  "or excluded by .dockerignore: stat %s: %s", src, strerror(errno));
	if (fstat(pfd, &s) < 0)
		return k8_err_set(c->err, -errno, "%s: %s", src, strerror(errno));
	if (S_ISDIR(s.st_mode)) {
		how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
		cleanup_close int dfd = (int)syscall(SYS_openat2, c->in->ctxfd, src, &how,
						     sizeof(how));
		if (dfd < 0)
			return k8_err_set(c->err, -errno, "%s: %s", src, strerror(errno));
		if (dst[0]) {
			struct stat ds = s;     /* the destination directory: root's, 0755 */
			ds.st_mode = S_IFDIR | 0755;
			int r = dcopy_entry(c, dst, &ds, -1, NULL);
			if (r)
				return r;
		}
		return dcopy_dir(c, dfd, src, dst, 0);
	}
	if (!S_ISREG(s.st_mode))
		return k8_err_set(c->err, -EINVAL, "COPY failed: %s is not a file or a directory",
				  src);
	if (dcopy_ignored(c->in, src))
		return k8_err_set(c->err, -ENOENT, "COPY failed: file not found in build context "
				  "or excluded by .dockerignore: stat %s: file does not exist", src);
	how.flags = O_RDONLY | O_CLOEXEC;
	cleanup_close int fd = (int)syscall(SYS_openat2, c->in->ctxfd, src, &how, sizeof(how));
	if (fd < 0)
		return k8_err_set(c->err, -errno, "%s: %s", src, strerror(errno));
	if (c->add) {
		bool was;
		int r = dcopy_add_archive(c, fd, dst, &was);
		if (r || was)
			return r;
	}
	cleanup_free char *to = !dst_dir ? xstrdup(dst) : dst[0] ? xasprintf("%s/%s", dst, base)
								 : xstrdup(base);
	return dcopy_entry(c, to, &s, fd, NULL);
}

/* Context paths matching a glob, at any depth, not below an earlier match. */
static int dcopy_glob(struct dcopy *c, int dirfd, const char *rel, const char *pat,
		    struct df_strv *out, unsigned depth)
{
	int fd2 = dup(dirfd), r = 0;
	DIR *d;
	struct dirent *de;

	if (depth > DCOPY_DEPTH_MAX || fd2 < 0 || !(d = fdopendir(fd2))) {
		if (fd2 >= 0)
			close(fd2);
		return 0;
	}
	while (!r && (de = readdir(d))) {
		struct stat s;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		cleanup_free char *crel = rel[0] ? xasprintf("%s/%s", rel, de->d_name)
						 : xstrdup(de->d_name);
		if (dignore_glob(pat, crel) == 1) {
			if (out->n >= DCOPY_FILES_MAX)
				r = k8_err_set(c->err, -E2BIG, "%s matches too many files", pat);
			else
				out->v = realloc(out->v, (out->n + 1) * sizeof(char *)),
				out->v[out->n++] = xstrdup(crel);
			continue;
		}
		if (fstatat(dirfd, de->d_name, &s, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(s.st_mode)) {
			cleanup_close int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY |
						       O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				r = dcopy_glob(c, sub, crel, pat, out, depth + 1);
		}
	}
	closedir(d);
	return r;
}

/* --chown=UID[:GID] (numbers, or root). */
static int dcopy_chown(const char *spec, uint32_t *uid, uint32_t *gid, struct k8_err *err)
{
	char u[64] = "", g[64] = "";
	const char *colon = strchr(spec, ':');
	char *end;
	unsigned long v;

	snprintf(u, sizeof(u), "%.*s", colon ? (int)(colon - spec) : (int)strlen(spec), spec);
	snprintf(g, sizeof(g), "%s", colon ? colon + 1 : u);
	for (int i = 0; i < 2; i++) {
		const char *s = i ? g : u;
		if (!strcmp(s, "root")) {
			v = 0;
		} else {
			errno = 0;
			v = strtoul(s, &end, 10);
			if (!*s || *end || errno || v > 0xfffffffful)
				return k8_err_set(err, -ENOTSUP, "--chown=%.64s: kosa8 takes numeric "
						  "ids (or root) only; user and group names are "
						  "not looked up in the image", spec);
		}
		*(i ? gid : uid) = (uint32_t)v;
	}
	return 0;
}

/* ---- COPY's destination, resolved in the image's root ----
 *
 * Docker follows the image's own symlinks in a COPY destination, inside the image's
 * root (`RUN ln -s /usr/lib /l` then `COPY f /l/` writes /usr/lib/f; a link to `/../..`
 * stays at /). The layer is made on the host, so the builder keeps the image's symlinks
 * as a map (path -> target) read from its layers' tar headers, and rewrites the
 * destination to the resolved path before any entry is written; the store's unpacker
 * still refuses any entry that goes through a symlink. */

#define DCOPY_LINK_HOPS 40        /* as the kernel's */
#define DCOPY_PATH_BUF 16384

/* Remove `p` (when `self`) and every link below it from the map. `below` names each
 * directory that ever had a link below it, so the scan runs only where one may be. */
static void dcopy_links_drop(json_t *links, json_t *below, const char *p, bool self)
{
	size_t n = strlen(p);
	const char *k;
	json_t *v;
	void *tmp;

	if (self)
		json_object_del(links, p);
	if (n && !json_object_get(below, p))
		return;
	json_object_foreach_safe(links, tmp, k, v)
		if (!n || (!strncmp(k, p, n) && k[n] == '/'))
			json_object_del(links, k);
}

/* Note every directory above the link `p` in `below`. */
static void dcopy_links_below(json_t *below, const char *p)
{
	char d[4200];

	snprintf(d, sizeof(d), "%s", p);
	for (char *sl = strrchr(d, '/'); sl; sl = strrchr(d, '/')) {
		*sl = '\0';
		if (json_object_get(below, d))
			break;          /* and so are its parents */
		json_object_set_new(below, d, json_true());
	}
}

int dcopy_links_entry(struct dcopy_links *lk, int type, const char *name, const char *tg,
		      struct k8_err *err)
{
	json_t *links = lk->links, *below = lk->below;
	const char *base;
	char p[4200], par[4200];

	if (strlen(name) >= sizeof(p) - 1)
		return 0;       /* kept out of the map, as the unpacker refuses it */
	memcpy(p, name, strlen(name) + 1);
	dignore_clean(p);
	if (p[0] == '/' || !strcmp(p, ".") || !strncmp(p, "../", 3) || !strcmp(p, ".."))
		return 0;       /* the unpacker refuses those anyway */
	base = strrchr(p, '/');
	snprintf(par, sizeof(par), "%.*s", base ? (int)(base - p) : 0, p);
	base = base ? base + 1 : p;
	if (!strcmp(base, ".wh..wh..opq")) {
		dcopy_links_drop(links, below, par, false);
	} else if (!strncmp(base, ".wh.", 4)) {
		char t[4200];
		snprintf(t, sizeof(t), "%s%s%s", par, par[0] ? "/" : "", base + 4);
		dcopy_links_drop(links, below, t, true);
	} else if (type == DCOPY_L_LINK) {
		if (json_object_size(links) >= DCOPY_LINKS_MAX)
			return k8_err_set(err, -E2BIG, "the image has more than %d symlinks "
					  "(kosa8's limit for COPY's resolution)", DCOPY_LINKS_MAX);
		dcopy_links_drop(links, below, p, true);
		/* a name that is not UTF-8 is not kept (the unpacker refuses going through it) */
		if (tg && strlen(tg) < 4096 && !json_object_set_new(links, p, json_string(tg)))
			dcopy_links_below(below, p);
	} else if (type == DCOPY_L_DIR) {
		json_object_del(links, p);      /* a directory keeps what is below it */
	} else {
		dcopy_links_drop(links, below, p, true);
	}
	return 0;
}

bool dcopy_links_prefix(const json_t *pre, const json_t *layers)
{
	size_t i;
	json_t *v;

	if (!pre || json_array_size(pre) > json_array_size(layers))
		return false;
	json_array_foreach((json_t *)pre, i, v)
		if (!json_equal(v, json_object_get(json_array_get(layers, i), "digest")))
			return false;
	return true;
}

void dcopy_links_clear(struct dcopy_links *lk)
{
	json_decref(lk->links);
	json_decref(lk->layers);
	json_decref(lk->below);
	lk->links = lk->layers = lk->below = NULL;
}

int dcopy_links_update(struct dcopy_links *lk, const json_t *layers, dcopy_layer_read read,
		       void *ctx, bool *added, struct k8_err *err)
{
	size_t have = json_array_size(lk->layers), i;
	json_t *l;
	int r;

	*added = false;
	if (!lk->links || !dcopy_links_prefix(lk->layers, layers)) {
		dcopy_links_clear(lk);
		lk->links = json_object();
		lk->layers = json_array();
		lk->below = json_object();
		have = 0;
	}
	json_array_foreach((json_t *)layers, i, l) {
		json_t *dg = json_object_get(l, "digest");

		if (i < have)
			continue;
		if (!json_is_string(dg)) {
			dcopy_links_clear(lk);
			return k8_err_set(err, -EINVAL, "the image's layer %zu has no digest", i);
		}
		if ((r = read(ctx, lk, json_string_value(dg), err))) {
			dcopy_links_clear(lk);
			return r;
		}
		json_array_append(lk->layers, dg);
		*added = true;
	}
	return 0;
}

/* `path` (relative to /, cleaned) with its directory components resolved through the
 * image's symlinks in the image's root (an absolute target starts again at the root,
 * `..` stops there), and its last component too when `last`. */
int dcopy_resolve(const json_t *links, const char *path, bool last, char *out, size_t n,
		  struct k8_err *err)
{
	char *rest = xmalloc(DCOPY_PATH_BUF), *cur = xmalloc(DCOPY_PATH_BUF);
	char *cand = xmalloc(DCOPY_PATH_BUF), *nrest = xmalloc(DCOPY_PATH_BUF);
	int hops = 0, r = 0;

	snprintf(rest, DCOPY_PATH_BUF, "%s", path);
	cur[0] = '\0';
	while (rest[0]) {
		char *slash = strchr(rest, '/');
		size_t cl = slash ? (size_t)(slash - rest) : strlen(rest);
		const char *t = NULL;
		bool is_last;
		int m;

		if (!cl || (cl == 1 && rest[0] == '.')) {
			memmove(rest, rest + cl + (slash != NULL), strlen(rest + cl + (slash != NULL)) + 1);
			continue;
		}
		if (cl == 2 && rest[0] == '.' && rest[1] == '.') {
			char *up = strrchr(cur, '/');
			if (up)
				*up = '\0';
			else
				cur[0] = '\0';
			memmove(rest, rest + 2 + (slash != NULL), strlen(rest + 2 + (slash != NULL)) + 1);
			continue;
		}
		m = snprintf(cand, DCOPY_PATH_BUF, "%s%s%.*s", cur, cur[0] ? "/" : "", (int)cl, rest);
		if (m < 0 || m >= DCOPY_PATH_BUF)
			goto toolong;
		is_last = !slash || !slash[1];
		if (!is_last || last)
			t = json_string_value(json_object_get(links, cand));
		if (!t) {
			memcpy(cur, cand, (size_t)m + 1);
			memmove(rest, rest + cl + (slash != NULL), strlen(rest + cl + (slash != NULL)) + 1);
			continue;
		}
		if (++hops > DCOPY_LINK_HOPS) {
			r = k8_err_set(err, -ELOOP, "COPY: too many levels of symbolic links in the "
				       "destination %s", path);
			goto out;
		}
		m = snprintf(nrest, DCOPY_PATH_BUF, "%s%s%s", t, slash ? "/" : "", slash ? slash + 1 : "");
		if (m < 0 || m >= DCOPY_PATH_BUF)
			goto toolong;
		if (t[0] == '/')
			cur[0] = '\0';
		memcpy(rest, nrest, (size_t)m + 1);
	}
	if (strlen(cur) >= n)
		goto toolong;
	memcpy(out, cur, strlen(cur) + 1);
	goto out;
toolong:
	r = k8_err_set(err, -ENAMETOOLONG, "COPY: the destination %s is too long once its "
		       "symlinks are resolved", path);
out:
	free(rest);
	free(cur);
	free(cand);
	free(nrest);
	return r;
}

/* ---- the step ---- */

int dcopy_layer(const struct dcopy_in *in, const struct df_step *s, int fd, char digest[65],
		struct k8_err *err)
{
	struct dcopy c = { .in = in, .err = err, .add = s->kind == DF_ADD };
	const json_t *links;
	const char *dest = s->argv.v[s->argv.n - 1];
	char dst[8192];
	size_t nsrc = s->argv.n - 1;
	bool dst_dir;
	int r = 0;

	if (s->chown && (r = dcopy_chown(s->chown, &c.uid, &c.gid, err)))
		return r;
	c.chown = s->chown != NULL;
	/* The destination: absolute, or below the WORKDIR; cleaned; without its '/'. */
	if (dest[0] == '/')
		snprintf(dst, sizeof(dst), "%s", dest + 1);
	else
		snprintf(dst, sizeof(dst), "%s/%s", in->workdir ? in->workdir + 1 : "", dest);
	dst_dir = nsrc > 1 || dest[strlen(dest) - 1] == '/' || !strcmp(dest, ".");
	dignore_clean(dst);
	while (!strncmp(dst, "../", 3))         /* nothing climbs above / */
		memmove(dst, dst + 3, strlen(dst + 3) + 1);
	if (!strcmp(dst, ".") || !strcmp(dst, ".."))
		dst[0] = '\0';
	/* through the image's symlinks, inside its root; a file's own name is not followed
	 * (COPY onto a link replaces it) */
	if (dst[0] && in->links) {
		links = in->links(in->links_ctx, err);
		if (!links && err->code)
			return err->code;
		if (links && (r = dcopy_resolve(links, dst, dst_dir, dst, sizeof(dst), err)))
			return r;
	}
	c.a = archive_write_new();
	archive_write_set_format_pax_restricted(c.a);
	if (archive_write_open_fd(c.a, fd) != ARCHIVE_OK) {
		r = dcopy_ar_err(&c, "open");
		goto out;
	}
	for (size_t i = 0; i < nsrc && !r; i++) {
		char src[4200];
		snprintf(src, sizeof(src), "%s", s->argv.v[i][0] == '/' ? s->argv.v[i] + 1
									  : s->argv.v[i]);
		dignore_clean(src);
		if (!strcmp(src, "..") || !strncmp(src, "../", 3)) {
			r = k8_err_set(err, -EPERM, "COPY failed: forbidden path outside the build "
				       "context: %s", s->argv.v[i]);
			break;
		}
		if (dcopy_is_glob(src)) {
			struct df_strv m = { 0 };
			r = dcopy_glob(&c, in->ctxfd, "", src, &m, 0);
			if (!r && !m.n)
				r = k8_err_set(err, -ENOENT, "COPY failed: no source files were "
					       "specified (%s matches nothing)", src);
			for (size_t k = 0; k < m.n; k++) {
				if (!r)
					r = dcopy_src(&c, m.v[k], dst, dst_dir || m.n > 1);
				free(m.v[k]);
			}
			free(m.v);
		} else {
			r = dcopy_src(&c, src, dst, dst_dir);
		}
	}
	if (!r && archive_write_close(c.a) != ARCHIVE_OK)
		r = dcopy_ar_err(&c, "close");
	if (!r && df_content_digest(c.files, c.n, digest))
		r = k8_err_set(err, -EINVAL, "COPY: a path in the context is not text");
out:
	dcopy_free(&c);
	return r;
}
