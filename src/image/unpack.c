/* SPDX-License-Identifier: Apache-2.0 */
/* unpack.c - unpack one image layer (tar; gzip, zstd, xz, bzip2 or none) safely into a tree.
 *
 * Theory of operation. A layer is hostile input and the tree it lands in is a private
 * staging directory (mode 0700, owned by the daemon) that only this code changes while
 * it runs. Soundness rests on one rule: no path from the layer is ever handed to the
 * kernel whole. Every entry's path is cleaned first (absolute paths and ".." refused,
 * except "/" alone, which like "./" names the root and changes nothing,
 * "." and empty components dropped, at most UNPACK_MAX_PATH bytes and UNPACK_MAX_DEPTH
 * components); its parent is then reached one component at a time with
 * openat(dirfd, name, O_DIRECTORY | O_NOFOLLOW) from the root's fd, so a symlink met on
 * the way is refused (ELOOP), never followed; the last component is created with
 * O_CREAT | O_EXCL | O_NOFOLLOW, mkdirat, symlinkat or linkat relative to that parent,
 * each of which creates a new name and follows nothing. Existing names are unlinked
 * first, so data is never written through an old inode (a hard link of a lower layer
 * stays untouched). Removal (whiteouts, replacement) walks by fd with O_NOFOLLOW too.
 * Since no step resolves a symlink and no ".." is ever looked up, nothing outside the
 * root can be named; no concurrent writer exists to race with.
 *
 * Hard links must name an entry already in the tree (looked up the same way). Device
 * nodes, FIFOs and sockets are never created: the entry only removes what was at its
 * path (the 0:0 character device is overlayfs' whiteout, so that is the right meaning
 * for it, and a harmless one for the rest). Modes are kept, setuid bits included: the
 * tree is only mkfs.erofs' input inside a 0700 directory. Owners are kept when asked
 * (UNPACK_OWNERS: kosa8d's worker, root of its user namespace, unpack_jail.c; fchown,
 * AT_SYMLINK_NOFOLLOW for links); otherwise files stay ours, and unless UNPACK_MODES,
 * with u+r on files and u+rwx on directories so that later layers and mkfs.erofs can
 * use them.
 *
 * Whiteouts (OCI): ".wh.NAME" removes NAME of lower layers; ".wh..wh..opq" empties its
 * directory of lower layers' entries. Entries of the same layer survive both: every path
 * this layer names (and each of its ancestors) is remembered as a 64-bit hash, and
 * removal spares remembered paths. (A hash collision could only keep a lower layer's
 * file of the same image; it cannot reach outside the tree.)
 *
 * Limits: the sum of regular files' declared sizes may not pass max_bytes (checked
 * before a byte is written; sparse files count at full size since mkfs.erofs writes
 * them whole), at most UNPACK_MAX_ENTRIES entries per layer.
 */
#include "image/image_int.h"
#include "common/uarchive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define UNPACK_SET_MAX (8u << 20)          /* remembered paths per layer */
#define UNPACK_DEFER_MAX_BYTES (64u << 20) /* directory times kept for the end */
#define UNPACK_NAME_MAX 255u

struct unpack_dirtime {
	char *path;
	struct timespec ts[2];
};

struct unpack {
	int rootfd;
	struct archive *a;
	const char *layer;       /* for messages */
	uint64_t max, *used;
	unsigned entries;
	bool owners;             /* keep uid/gid (UNPACK_OWNERS) */
	bool modes;              /* modes as they are, else u+r files, u+rwx directories */
	struct k8_err *err;
	uint64_t *set;           /* open addressing, 0 = empty */
	size_t set_cap, set_n;
	struct unpack_dirtime *dt;
	size_t dt_n, dt_cap, dt_bytes;
};

/* ---------------------------------------------------------------- path set */

static uint64_t unpack_hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	h ^= h >> 29;
	return h ? h : 1;
}

static bool unpack_set_has(struct unpack *u, const char *s, size_t n)
{
	uint64_t h;
	size_t i;

	if (!u->set_cap)
		return false;
	h = unpack_hash(s, n);
	for (i = h & (u->set_cap - 1); u->set[i]; i = (i + 1) & (u->set_cap - 1))
		if (u->set[i] == h)
			return true;
	return false;
}

static int unpack_set_add(struct unpack *u, const char *s, size_t n)
{
	uint64_t h = unpack_hash(s, n);
	size_t i;

	if (u->set_n + 1 > u->set_cap / 2) {
		size_t ncap = u->set_cap ? u->set_cap * 2 : 1024;
		uint64_t *ns;
		if (u->set_n >= UNPACK_SET_MAX)
			return k8_err_set(u->err, -E2BIG, "layer %s names more than %u paths", u->layer,
					  UNPACK_SET_MAX);
		ns = xcalloc(ncap, sizeof(*ns));
		for (size_t j = 0; j < u->set_cap; j++) {
			if (!u->set[j])
				continue;
			for (i = u->set[j] & (ncap - 1); ns[i]; i = (i + 1) & (ncap - 1))
				;
			ns[i] = u->set[j];
		}
		free(u->set);
		u->set = ns;
		u->set_cap = ncap;
	}
	for (i = h & (u->set_cap - 1); u->set[i]; i = (i + 1) & (u->set_cap - 1))
		if (u->set[i] == h)
			return 0;
	u->set[i] = h;
	u->set_n++;
	return 0;
}

/* Remember `path` and each of its ancestors as named by this layer. */
static int unpack_mark(struct unpack *u, const char *path)
{
	size_t n = strlen(path);
	int r;

	for (size_t i = 0; i < n; i++)
		if (path[i] == '/' && (r = unpack_set_add(u, path, i)))
			return r;
	return n ? unpack_set_add(u, path, n) : 0;
}

/* ---------------------------------------------------------------- paths */

/* Clean an entry path into out[UNPACK_MAX_PATH + 1]: components joined by '/', no "."
 * or empty ones. Absolute paths and ".." are refused; "" means the root itself. */
static int unpack_clean(struct unpack *u, const char *in, char *out, const char *what)
{
	size_t n, o = 0;
	unsigned depth = 0;
	const char *p;

	if (!in)
		return k8_err_set(u->err, -EINVAL, "layer %s: %s without a name (or one that is "
				  "not valid text)", u->layer, what);
	n = strlen(in);
	if (n > UNPACK_MAX_PATH)
		return k8_err_set(u->err, -EINVAL, "layer %s: %s '%.64s...' is longer than %u bytes",
				  u->layer, what, in, UNPACK_MAX_PATH);
	for (p = in; *p;) {
		const char *e = strchr(p, '/');
		size_t cn = e ? (size_t)(e - p) : strlen(p);
		if (cn == 2 && p[0] == '.' && p[1] == '.')
			return k8_err_set(u->err, -EPERM, "layer %s: %s '%s' contains '..'; refused",
					  u->layer, what, in);
		if (cn > UNPACK_NAME_MAX)
			return k8_err_set(u->err, -EINVAL, "layer %s: %s '%.64s...' has a component "
					  "longer than %u bytes", u->layer, what, in, UNPACK_NAME_MAX);
		if (cn && !(cn == 1 && p[0] == '.')) {
			if (++depth > UNPACK_MAX_DEPTH)
				return k8_err_set(u->err, -EINVAL, "layer %s: %s '%.64s...' is deeper "
						  "than %u components", u->layer, what, in,
						  UNPACK_MAX_DEPTH);
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, cn);
			o += cn;
		}
		if (!e)
			break;
		p = e + 1;
	}
	out[o] = '\0';
	/* "/" alone names the root (umoci writes such an entry); any other absolute path
	 * is refused rather than reinterpreted. */
	if (in[0] == '/' && o)
		return k8_err_set(u->err, -EPERM, "layer %s: %s '%s' is an absolute path; refused",
				  u->layer, what, in);
	return 0;
}

/* Open the parent directory of `path` (a cleaned path), one component at a time and
 * never through a symlink; missing directories are created (mode 0755, ours) when
 * `create`. Returns a new fd, or a negative errno (-ENOENT only when !create) with a
 * message. *base points at the last component of path. */
static int unpack_open_parent(struct unpack *u, const char *path, bool create,
			      const char **base)
{
	char comp[UNPACK_NAME_MAX + 1];
	const char *p = path, *slash;
	int fd = openat(u->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return k8_err_set(u->err, -errno, "opening the unpack root: %s", strerror(errno));
	while ((slash = strchr(p, '/'))) {
		size_t cn = (size_t)(slash - p);
		int nfd;

		memcpy(comp, p, cn);
		comp[cn] = '\0';
		nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
				int e = errno;
				close(fd);
				return k8_err_set(u->err, -e, "layer %s: creating '%.*s': %s", u->layer,
						  (int)(slash - path), path, strerror(e));
			}
			nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (nfd < 0) {
			int e = errno;
			struct stat s;
			bool link = fstatat(fd, comp, &s, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(s.st_mode);
			close(fd);
			if (link || e == ELOOP)
				return k8_err_set(u->err, -EPERM, "layer %s: '%s' goes through the "
						  "symlink '%.*s'; refused", u->layer, path,
						  (int)(slash - path), path);
			if ((e == ENOENT || e == ENOTDIR) && !create)
				return -ENOENT;   /* nothing there: callers treat it as absent */
			return k8_err_set(u->err, e == ENOTDIR ? -ENOTDIR : -e,
					  "layer %s: '%s': '%.*s' is not a directory (%s)", u->layer,
					  path, (int)(slash - path), path, strerror(e));
		}
		close(fd);
		fd = nfd;
		p = slash + 1;
	}
	*base = p;
	return fd;
}

/* ---------------------------------------------------------------- removal */

struct unpack_names {
	char **v;
	size_t n, cap;
};

static void unpack_names_free(struct unpack_names *nm)
{
	for (size_t i = 0; i < nm->n; i++)
		free(nm->v[i]);
	free(nm->v);
	nm->v = NULL;
	nm->n = nm->cap = 0;
}

/* The names in directory fd (not "." and ".."); the directory is closed again before
 * the caller recurses, so a walk holds one fd per level. */
static int unpack_list(int fd, struct unpack_names *nm)
{
	int dfd = dup(fd);
	DIR *d;
	struct dirent *de;

	memset(nm, 0, sizeof(*nm));
	if (dfd < 0)
		return -errno;
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (nm->n == nm->cap) {
			nm->cap = nm->cap ? nm->cap * 2 : 32;
			nm->v = realloc(nm->v, nm->cap * sizeof(*nm->v));
			if (!nm->v)
				abort();
		}
		nm->v[nm->n++] = xstrdup(de->d_name);
	}
	closedir(d);
	return 0;
}

int unpack_remove_at(int dirfd, const char *name, unsigned depth)
{
	struct unpack_names nm;
	struct stat s;
	int fd, r = 0;

	if (depth > 2 * UNPACK_MAX_DEPTH)
		return -ELOOP;
	if (fstatat(dirfd, name, &s, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(s.st_mode))
		return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = unpack_list(fd, &nm);
	for (size_t i = 0; !r && i < nm.n; i++)
		r = unpack_remove_at(fd, nm.v[i], depth + 1);
	unpack_names_free(&nm);
	close(fd);
	if (!r && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		r = -errno;
	return r;
}

/* Opaque whiteout: remove from directory fd (whose cleaned path is `dir`) every entry
 * this layer did not name, descending into the directories it did name. */
static int unpack_prune(struct unpack *u, int fd, const char *dir, unsigned depth)
{
	struct unpack_names nm;
	/* On the heap: this recurses up to UNPACK_MAX_DEPTH levels on a daemon thread. */
	const size_t psize = UNPACK_MAX_PATH + UNPACK_NAME_MAX + 2;
	cleanup_free char *path = xmalloc(psize);
	int r;

	if (depth > UNPACK_MAX_DEPTH)
		return 0;   /* nothing this layer named is deeper */
	r = unpack_list(fd, &nm);
	for (size_t i = 0; !r && i < nm.n; i++) {
		struct stat s;
		int n = snprintf(path, psize, "%s%s%s", dir, *dir ? "/" : "", nm.v[i]);

		if (n < 0 || (size_t)n > UNPACK_MAX_PATH || !unpack_set_has(u, path, (size_t)n)) {
			r = unpack_remove_at(fd, nm.v[i], 0);
			continue;
		}
		if (fstatat(fd, nm.v[i], &s, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(s.st_mode)) {
			int cfd = openat(fd, nm.v[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cfd < 0) {
				r = -errno;
				break;
			}
			r = unpack_prune(u, cfd, path, depth + 1);
			close(cfd);
		}
	}
	unpack_names_free(&nm);
	if (r)
		return k8_err_set(u->err, r, "layer %s: opaque whiteout in '%s': %s", u->layer,
				  *dir ? dir : "/", strerror(-r));
	return 0;
}

/* Make room for a new entry at parentfd/base: anything there goes (a directory with
 * all it holds). */
static int unpack_replace(struct unpack *u, int parentfd, const char *base, const char *path)
{
	int r = unpack_remove_at(parentfd, base, 0);

	if (r)
		return k8_err_set(u->err, r, "layer %s: replacing '%s': %s", u->layer, path,
				  strerror(-r));
	return 0;
}

/* ---------------------------------------------------------------- entries */

static int unpack_ids(struct unpack *u, struct archive_entry *ae, const char *path,
		      uid_t *uid, gid_t *gid)
{
	int64_t a = archive_entry_uid(ae), b = archive_entry_gid(ae);

	if (a < 0 || a >= 0xffffffffll || b < 0 || b >= 0xffffffffll)
		return k8_err_set(u->err, -EINVAL, "layer %s: '%s' has an invalid owner %lld:%lld",
				  u->layer, path, (long long)a, (long long)b);
	*uid = (uid_t)a;
	*gid = (gid_t)b;
	return 0;
}

static void unpack_times(struct archive_entry *ae, struct timespec ts[2])
{
	if (archive_entry_mtime_is_set(ae)) {
		ts[1].tv_sec = archive_entry_mtime(ae);
		ts[1].tv_nsec = archive_entry_mtime_nsec(ae);
		if (ts[1].tv_nsec < 0 || ts[1].tv_nsec > 999999999)
			ts[1].tv_nsec = 0;
	} else {
		ts[1].tv_sec = 0;
		ts[1].tv_nsec = UTIME_OMIT;
	}
	ts[0] = ts[1];
}

static int unpack_sys_err(struct unpack *u, const char *op, const char *path)
{
	int e = errno;

	return k8_err_set(u->err, -e, "layer %s: %s '%s': %s", u->layer, op, path, strerror(e));
}

/* fchown's EINVAL: an id the unpacker's user namespace does not map (image.h). */
static int unpack_chown_err(struct unpack *u, const char *path, uid_t uid, gid_t gid)
{
	if (errno != EINVAL)
		return unpack_sys_err(u, "chown", path);
	return k8_err_set(u->err, -EOVERFLOW, "layer %s: '%s' is owned by %u:%u; kosa8 keeps "
			  "owners up to the size of its unpacker's id range (config.json "
			  "\"unpack_uids\", docs/images.md)", u->layer, path, (unsigned)uid,
			  (unsigned)gid);
}

static int unpack_file(struct unpack *u, struct archive_entry *ae, const char *path)
{
	const char *base;
	cleanup_close int pfd = -1, fd = -1;
	int64_t size = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : -1;
	uint64_t got = 0;
	struct timespec ts[2];
	uid_t uid;
	gid_t gid;
	mode_t mode = archive_entry_perm(ae) & 07777;
	int r;

	if ((r = unpack_ids(u, ae, path, &uid, &gid)))
		return r;
	if (size >= 0 && ((uint64_t)size > u->max || *u->used > u->max - (uint64_t)size))
		return k8_err_set(u->err, -EFBIG, "layer %s: '%s' declares %lld bytes, more than "
				  "the %llu the image may unpack to (%llu used); refused", u->layer,
				  path, (long long)size, (unsigned long long)u->max,
				  (unsigned long long)*u->used);
	pfd = unpack_open_parent(u, path, true, &base);
	if (pfd < 0)
		return pfd;
	if ((r = unpack_replace(u, pfd, base, path)))
		return r;
	fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return unpack_sys_err(u, "creating", path);
	for (;;) {
		const void *buf;
		size_t len;
		la_int64_t off;
		int ar = archive_read_data_block(u->a, &buf, &len, &off);

		if (ar == ARCHIVE_EOF)
			break;
		if (ar < ARCHIVE_WARN)
			return k8_err_set(u->err, -EINVAL, "layer %s: reading '%s': %s", u->layer, path,
					  archive_error_string(u->a) ? archive_error_string(u->a) :
					  "damaged data");
		if (off < 0 || (size >= 0 && ((uint64_t)off > (uint64_t)size ||
					      len > (uint64_t)size - (uint64_t)off)))
			return k8_err_set(u->err, -EINVAL, "layer %s: '%s' has data past its size",
					  u->layer, path);
		if (size < 0) {
			if (len > u->max - *u->used - got || (uint64_t)off > u->max)
				return k8_err_set(u->err, -EFBIG, "layer %s: '%s' makes the image larger "
						  "than %llu bytes; refused", u->layer, path,
						  (unsigned long long)u->max);
			got += len;
		}
		for (size_t done = 0; done < len;) {
			ssize_t w = pwrite(fd, (const char *)buf + done, len - done, off + (off_t)done);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				return unpack_sys_err(u, "writing", path);
			}
			done += (size_t)w;
		}
	}
	if (size >= 0 && ftruncate(fd, size) < 0)
		return unpack_sys_err(u, "sizing", path);
	*u->used += size >= 0 ? (uint64_t)size : got;
	if (u->owners && fchown(fd, uid, gid) < 0)
		return unpack_chown_err(u, path, uid, gid);
	if (!u->modes)
		mode |= 0400;
	if (fchmod(fd, mode) < 0)
		return unpack_sys_err(u, "chmod", path);
	unpack_times(ae, ts);
	if (futimens(fd, ts) < 0)
		return unpack_sys_err(u, "setting times of", path);
	return 0;
}

static void unpack_defer_time(struct unpack *u, const char *path, const struct timespec ts[2])
{
	size_t n = strlen(path) + 1;

	if (ts[1].tv_nsec == UTIME_OMIT || u->dt_bytes + n > UNPACK_DEFER_MAX_BYTES)
		return;
	if (u->dt_n == u->dt_cap) {
		u->dt_cap = u->dt_cap ? u->dt_cap * 2 : 64;
		u->dt = realloc(u->dt, u->dt_cap * sizeof(*u->dt));
		if (!u->dt)
			abort();
	}
	u->dt[u->dt_n].path = xstrdup(path);
	u->dt[u->dt_n].ts[0] = ts[0];
	u->dt[u->dt_n].ts[1] = ts[1];
	u->dt_n++;
	u->dt_bytes += n;
}

static int unpack_dir(struct unpack *u, struct archive_entry *ae, const char *path)
{
	const char *base;
	cleanup_close int pfd = -1, fd = -1;
	struct timespec ts[2];
	struct stat s;
	uid_t uid;
	gid_t gid;
	mode_t mode = archive_entry_perm(ae) & 07777;
	int r;

	if ((r = unpack_ids(u, ae, path, &uid, &gid)))
		return r;
	pfd = unpack_open_parent(u, path, true, &base);
	if (pfd < 0)
		return pfd;
	if (fstatat(pfd, base, &s, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(s.st_mode) &&
	    (r = unpack_replace(u, pfd, base, path)))
		return r;
	if (mkdirat(pfd, base, 0700) < 0 && errno != EEXIST)
		return unpack_sys_err(u, "creating", path);
	fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return unpack_sys_err(u, "opening", path);
	if (u->owners && fchown(fd, uid, gid) < 0)
		return unpack_chown_err(u, path, uid, gid);
	if (!u->modes)
		mode |= 0700;
	if (fchmod(fd, mode) < 0)
		return unpack_sys_err(u, "chmod", path);
	unpack_times(ae, ts);
	unpack_defer_time(u, path, ts);
	return 0;
}

static int unpack_symlink(struct unpack *u, struct archive_entry *ae, const char *path)
{
	const char *base, *target = archive_entry_symlink(ae);
	cleanup_close int pfd = -1;
	struct timespec ts[2];
	uid_t uid;
	gid_t gid;
	int r;

	if (!target)
		target = archive_entry_symlink_utf8(ae);
	if (!target || !*target || strlen(target) > UNPACK_MAX_PATH)
		return k8_err_set(u->err, -EINVAL, "layer %s: symlink '%s' has no valid target",
				  u->layer, path);
	if ((r = unpack_ids(u, ae, path, &uid, &gid)))
		return r;
	pfd = unpack_open_parent(u, path, true, &base);
	if (pfd < 0)
		return pfd;
	if ((r = unpack_replace(u, pfd, base, path)))
		return r;
	if (symlinkat(target, pfd, base) < 0)
		return unpack_sys_err(u, "creating symlink", path);
	if (u->owners && fchownat(pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return unpack_chown_err(u, path, uid, gid);
	unpack_times(ae, ts);
	if (ts[1].tv_nsec != UTIME_OMIT && utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return unpack_sys_err(u, "setting times of", path);
	return 0;
}

static int unpack_hardlink(struct unpack *u, const char *link, const char *path)
{
	char target[UNPACK_MAX_PATH + 1];
	const char *base, *tbase;
	cleanup_close int pfd = -1, tfd = -1;
	struct stat s;
	int r;

	if ((r = unpack_clean(u, link, target, "hard link target")))
		return r;
	if (!target[0])
		return k8_err_set(u->err, -EPERM, "layer %s: hard link '%s' to the root; refused",
				  u->layer, path);
	if (!strcmp(target, path))
		return 0;
	tfd = unpack_open_parent(u, target, false, &tbase);
	if (tfd == -ENOENT || (tfd >= 0 && fstatat(tfd, tbase, &s, AT_SYMLINK_NOFOLLOW) < 0))
		return k8_err_set(u->err, -EINVAL, "layer %s: hard link '%s' to '%s', which is not "
				  "in the image; refused", u->layer, path, target);
	if (tfd < 0)
		return tfd;
	if (S_ISDIR(s.st_mode))
		return k8_err_set(u->err, -EPERM, "layer %s: hard link '%s' to the directory '%s'; "
				  "refused", u->layer, path, target);
	pfd = unpack_open_parent(u, path, true, &base);
	if (pfd < 0)
		return pfd;
	if ((r = unpack_replace(u, pfd, base, path)))
		return r;
	if (linkat(tfd, tbase, pfd, base, 0) < 0)
		return unpack_sys_err(u, "creating hard link", path);
	return 0;
}

/* ".wh.NAME" and ".wh..wh..opq" in directory `dir` (cleaned path, "" for the root). */
static int unpack_whiteout(struct unpack *u, const char *path, const char *base)
{
	const char *name = base + 4, *pbase;
	char dir[UNPACK_MAX_PATH + 1], victim[UNPACK_MAX_PATH + 1];
	cleanup_close int pfd = -1;
	int r;

	snprintf(dir, sizeof(dir), "%.*s", (int)(base == path ? 0 : base - path - 1), path);
	if ((r = unpack_mark(u, dir)))
		return r;
	if (!strcmp(base, ".wh..wh..opq")) {
		pfd = unpack_open_parent(u, path, true, &pbase);
		if (pfd < 0)
			return pfd;
		return unpack_prune(u, pfd, dir, 0);
	}
	if (!strncmp(base, ".wh..wh.", 8))
		return 0;   /* aufs bookkeeping (.wh..wh.plnk and the like): nothing to do */
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return k8_err_set(u->err, -EINVAL, "layer %s: bad whiteout '%s'", u->layer, path);
	if (snprintf(victim, sizeof(victim), "%s%s%s", dir, *dir ? "/" : "", name) >=
	    (int)sizeof(victim))
		return k8_err_set(u->err, -EINVAL, "layer %s: bad whiteout '%s'", u->layer, path);
	if (unpack_set_has(u, victim, strlen(victim)))
		return 0;   /* this layer's own entry: whiteouts hide lower layers only */
	pfd = unpack_open_parent(u, path, false, &pbase);
	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	r = unpack_remove_at(pfd, name, 0);
	if (r)
		return k8_err_set(u->err, r, "layer %s: whiteout of '%s': %s", u->layer, victim,
				  strerror(-r));
	return 0;
}

/* A node we do not create: what was at its path goes, nothing replaces it. */
static int unpack_skip_node(struct unpack *u, const char *path)
{
	const char *base;
	cleanup_close int pfd = unpack_open_parent(u, path, false, &base);

	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return pfd;
	return unpack_replace(u, pfd, base, path);
}

static const char *unpack_name(const char *mbs, const char *utf8)
{
	return mbs ? mbs : utf8;
}

static int unpack_entry(struct unpack *u, struct archive_entry *ae)
{
	char path[UNPACK_MAX_PATH + 1];
	const char *base, *link;
	mode_t type = archive_entry_filetype(ae);
	int r;

	r = unpack_clean(u, unpack_name(archive_entry_pathname(ae),
					archive_entry_pathname_utf8(ae)), path, "entry");
	if (r)
		return r;
	if (!path[0])
		return 0;   /* "./": the root's own metadata stays the caller's */
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (!strncmp(base, ".wh.", 4))
		return unpack_whiteout(u, path, base);
	if ((r = unpack_mark(u, path)))
		return r;
	link = unpack_name(archive_entry_hardlink(ae), archive_entry_hardlink_utf8(ae));
	if (link)
		return unpack_hardlink(u, link, path);
	switch (type) {
	case AE_IFREG:
		return unpack_file(u, ae, path);
	case AE_IFDIR:
		return unpack_dir(u, ae, path);
	case AE_IFLNK:
		return unpack_symlink(u, ae, path);
	case AE_IFCHR:
	case AE_IFBLK:
	case AE_IFIFO:
	case AE_IFSOCK:
		return unpack_skip_node(u, path);
	default:
		return k8_err_set(u->err, -EINVAL, "layer %s: '%s' has an unsupported type (0%o)",
				  u->layer, path, (unsigned)type);
	}
}

static void unpack_apply_times(struct unpack *u)
{
	for (size_t i = u->dt_n; i-- > 0;) {
		const char *base;
		struct k8_err e = { 0 };
		struct k8_err *keep = u->err;
		int pfd;

		u->err = &e;   /* best effort: a later whiteout may have removed it */
		pfd = unpack_open_parent(u, u->dt[i].path, false, &base);
		u->err = keep;
		if (pfd >= 0) {
			utimensat(pfd, base, u->dt[i].ts, AT_SYMLINK_NOFOLLOW);
			close(pfd);
		}
	}
}

int unpack_layer_fd(int rootfd, int fd, const char *name, unsigned flags, uint64_t max_bytes,
		    uint64_t *used, struct k8_err *err)
{
	struct unpack u = {
		.rootfd = rootfd, .layer = name, .max = max_bytes, .used = used,
		.owners = flags & UNPACK_OWNERS, .modes = flags & UNPACK_MODES, .err = err,
	};
	struct archive_entry *ae;
	int r = 0;

	u.a = uarchive_reader(UARCHIVE_COMPRESSED | UARCHIVE_EMPTY, err);
	if (!u.a)
		return err->code;
	if (archive_read_open_fd(u.a, fd, 1 << 16) != ARCHIVE_OK) {
		r = k8_err_set(err, -EINVAL, "layer %s is not a tar archive (plain, gzip, zstd, xz "
			       "or bzip2): %s",
			       u.layer, archive_error_string(u.a) ? archive_error_string(u.a) : "?");
		goto out;
	}
	for (;;) {
		int ar = archive_read_next_header(u.a, &ae);

		if (ar == ARCHIVE_EOF)
			break;
		if (ar < ARCHIVE_WARN) {
			r = k8_err_set(err, -EINVAL, "layer %s is damaged: %s", u.layer,
				       archive_error_string(u.a) ? archive_error_string(u.a) : "?");
			break;
		}
		if (++u.entries > UNPACK_MAX_ENTRIES) {
			r = k8_err_set(err, -E2BIG, "layer %s has more than %u entries; refused",
				       u.layer, UNPACK_MAX_ENTRIES);
			break;
		}
		r = unpack_entry(&u, ae);
		if (r)
			break;
	}
	if (!r)
		unpack_apply_times(&u);
out:
	archive_read_free(u.a);
	free(u.set);
	for (size_t i = 0; i < u.dt_n; i++)
		free(u.dt[i].path);
	free(u.dt);
	return r;
}

int image_unpack_layer(int rootfd, const char *layer_path, uint64_t max_bytes,
		       struct k8_err *err)
{
	cleanup_close int fd = open(layer_path, O_RDONLY | O_CLOEXEC);
	const char *slash = strrchr(layer_path, '/');
	uint64_t used = 0;

	if (fd < 0)
		return k8_err_set(err, -errno, "opening layer %s: %s", layer_path, strerror(errno));
	/* Messages name the blob, not the whole store path. */
	return unpack_layer_fd(rootfd, fd, slash && strlen(slash + 1) == 64 ? slash + 1
						: layer_path, geteuid() == 0 ? UNPACK_OWNERS | UNPACK_MODES : 0,
			       max_bytes, &used, err);
}
