/* SPDX-License-Identifier: Apache-2.0 */
/* archive.c - copying files in and out of a container: the archive.stat, archive.get
 * and archive.put ops (docs/protocol.md, docs/agent.md "Archives").
 *
 * Theory of operation. All file work happens in a forked helper, never in the loop:
 *
 *   1. The helper enters the container's root. A running container: setns() into its
 *      init's mount namespace (which also makes its root the helper's root). A stopped
 *      one (its namespace is gone): a private mount namespace, the overlay of its image
 *      and writable layer mounted again (nodev, nosuid) and chroot()ed into. Either
 *      way, `/` is now the container's root and nothing of the VM's tree is reachable
 *      by a path.
 *   2. It resolves the path with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): a
 *      symlink to `/` or `..` in the container stays inside its root, as does every
 *      `..`. The last component is not followed (Docker's rule) unless the path ends
 *      in `/` or `/.`.
 *   3. It writes one JSON status (the path's stat, or {errno, error}) on fd 3 and the
 *      agent answers the REQ with it: a missing path is an ordinary error, no stream.
 *   4. get: the tar goes to stdout; put: the tar comes from stdin and is extracted
 *      below the directory, each entry's parent resolved with RESOLVE_BENEATH from that
 *      directory (so neither a `..` nor a symlink in the archive or the container leads
 *      out of it). The agent treats the helper like an exec'd process (proc.c): the same
 *      windows, CREDIT and EXIT; a failure is a non-zero exit code (the errno) with the
 *      message on stderr.
 *
 * The helper runs as root in the VM with the agent's capabilities, in no container
 * cgroup; what bounds it is the scratch disk (put), the host's window (get) and the
 * daemon's size cap. A helper whose host went away is killed (proc_orphan_all).
 */
#include "agent.h"
#include "agent/tar.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <sys/sysmacros.h>
#include <time.h>

#define AR_STATUS_MAX (64u << 10)      /* the helper's status JSON */
#define AR_STATUS_WAIT_MS 10000        /* resolving may wait on a shared folder */
#define AR_IOBUF (64u << 10)
#define AR_HARDLINKS_MAX 65536         /* files remembered to write hard links (get) */
#define AR_DIRTIMES_MAX 100000         /* directories whose mtime is set at the end (put) */

/* ---- the helper (a forked child; it may block, print to stderr and exit) ---- */

struct ar_ctx {
	int rootfd;                /* the container's root */
	int procfd;                /* the VM's /proc, opened before entering */
	int out;                   /* get: the tar goes here */
	int layer;                 /* layer: overlay whiteouts become OCI ones */
	unsigned char *buf;        /* get: output buffer */
	size_t blen;
	struct { dev_t dev; ino_t ino; char *name; } *links;
	size_t nlinks;
	/* put */
	int destfd;
	int no_overwrite;
	int fd;                    /* the regular file being written, -1 */
	struct tar_entry cur;
	char **dirs;               /* directories created, for their mtimes */
	struct timespec *dirtimes;
	size_t ndirs;
	struct k8_err err;
};

static long ar_openat2(int dirfd, const char *path, int flags, uint64_t resolve)
{
	struct open_how how = { .flags = (uint64_t)flags | O_CLOEXEC, .resolve = resolve };

	return syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

/* Step 1: enter the container's root; 0 or a negative errno with a message. */
static int ar_enter(struct agent *a, struct ctr *c, struct k8_err *err)
{
	char p[PATH_MAX], opts[PATH_MAX * 2];
	int fd;

	if (c->running && c->pid > 0) {
		snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)c->pid);
		fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNS) < 0)
			return k8_err_set(err, -errno, "entering container %s: %s", c->id, strerror(errno));
		close(fd);
		if (chdir("/") < 0)
			return k8_err_set(err, -errno, "chdir /: %s", strerror(errno));
		return 0;
	}
	(void)a;
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return k8_err_set(err, -errno, "a mount namespace: %s", strerror(errno));
	snprintf(opts, sizeof(opts), "lowerdir=%s/%s,upperdir=%s/%s/upper,workdir=%s/%s/work",
		 AGENT_IMAGES_DIR, c->image_hex, AGENT_CTR_DIR, c->id, AGENT_CTR_DIR, c->id);
	snprintf(p, sizeof(p), "%s/%s/rootfs", AGENT_CTR_DIR, c->id);
	if (mount("overlay", p, "overlay", MS_NODEV | MS_NOSUID, opts) < 0)
		return k8_err_set(err, errno == EBUSY ? -EBUSY : -EIO,
				  "mounting the stopped container's files: %s%s", strerror(errno),
				  errno == EBUSY ? " (another copy to or from it is running; retry)" : "");
	if (chdir(p) < 0 || chroot(".") < 0 || chdir("/") < 0)
		return k8_err_set(err, -errno, "chroot: %s", strerror(errno));
	return 0;
}

/* Step 2: the entry a path names, as (directory fd, name in it). The name is "." when
 * the last component is followed. `arcname` gets Docker's name for it in an archive. */
static int ar_resolve(struct ar_ctx *x, const char *path, int *dirfd, char *name,
		      char *arcname, struct k8_err *err)
{
	size_t n = strlen(path);
	const char *last;
	char parent[REQ_MAX_PATH + 2];
	int follow = 0;
	long fd;

	while (n > 1 && path[n - 1] == '/') {
		n--;
		follow = 1;
	}
	memcpy(parent, path, n);
	parent[n] = '\0';
	last = strrchr(parent, '/');
	last = last ? last + 1 : parent;
	if (!*last || !strcmp(last, ".") || !strcmp(last, ".."))
		follow = 1;
	snprintf(arcname, TAR_NAME_MAX + 1, "%s", (!*last || !strcmp(last, "..")) ? "." : last);
	if (follow) {
		fd = ar_openat2(x->rootfd, parent, O_PATH | O_DIRECTORY,
				RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
		if (fd < 0)
			return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
		*dirfd = (int)fd;
		strcpy(name, ".");
		return 0;
	}
	snprintf(name, TAR_NAME_MAX + 1, "%s", last);
	if (last == parent)
		strcpy(parent, "/");
	else
		((char *)last)[-1] = '\0';
	fd = ar_openat2(x->rootfd, parent[0] ? parent : "/", O_PATH | O_DIRECTORY,
			RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	*dirfd = (int)fd;
	return 0;
}

/* The status line: the stat of (dirfd, name), with linkTarget resolved in the root. */
static json_t *ar_stat_json(struct ar_ctx *x, const char *path, int dirfd, const char *name,
			    const char *arcname, struct k8_err *err)
{
	struct stat st;
	char target[PATH_MAX + 1] = "";

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (S_ISLNK(st.st_mode)) {
		long fd = ar_openat2(x->rootfd, path, O_PATH, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
		ssize_t n = -1;
		if (fd >= 0) {
			char fdp[32];
			snprintf(fdp, sizeof(fdp), "self/fd/%ld", fd);
			n = readlinkat(x->procfd, fdp, target, PATH_MAX);
			close((int)fd);
		}
		if (n < 0)
			n = readlinkat(dirfd, name, target, PATH_MAX);
		target[n > 0 ? n : 0] = '\0';
	}
	return json_pack("{s:s,s:I,s:I,s:I,s:I,s:s}", "name", arcname, "size", (json_int_t)st.st_size,
			 "mode", (json_int_t)st.st_mode, "mtime", (json_int_t)st.st_mtim.tv_sec,
			 "mtime_nsec", (json_int_t)st.st_mtim.tv_nsec, "link", target);
}

/* ---- get: the tar writer ---- */

static int ar_flush(struct ar_ctx *x)
{
	int r = x->blen ? write_full(x->out, x->buf, x->blen) : 0;

	x->blen = 0;
	return r;
}

static int ar_write(struct ar_ctx *x, const void *p, size_t n)
{
	while (n) {
		size_t take = AR_IOBUF - x->blen;
		if (take > n)
			take = n;
		memcpy(x->buf + x->blen, p, take);
		x->blen += take;
		p = (const char *)p + take;
		n -= take;
		if (x->blen == AR_IOBUF && ar_flush(x) < 0)
			return -EPIPE;
	}
	return 0;
}

static int ar_put_header(struct ar_ctx *x, const struct tar_entry *e)
{
	static unsigned char h[TAR_HDR_MAX];

	return ar_write(x, h, tar_header(e, h));
}

/* File data: exactly e->size bytes (zeros if the file shrank, cut if it grew, so the
 * archive stays well-formed), then the padding. */
static int ar_put_data(struct ar_ctx *x, int fd, uint64_t size)
{
	static unsigned char chunk[AR_IOBUF];
	uint64_t done = 0;

	while (done < size) {
		size_t want = size - done < AR_IOBUF ? (size_t)(size - done) : AR_IOBUF;
		ssize_t n = fd >= 0 ? read(fd, chunk, want) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			memset(chunk, 0, want);
			n = (ssize_t)want;
			fd = -1;
		}
		if (ar_write(x, chunk, (size_t)n) < 0)
			return -EPIPE;
		done += (uint64_t)n;
	}
	memset(chunk, 0, TAR_BLOCK);
	return ar_write(x, chunk, (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK);
}

static const char *ar_hardlink(struct ar_ctx *x, const struct stat *st, const char *arcname)
{
	for (size_t i = 0; i < x->nlinks; i++)
		if (x->links[i].dev == st->st_dev && x->links[i].ino == st->st_ino)
			return x->links[i].name;
	if (x->nlinks < AR_HARDLINKS_MAX) {
		if (!x->links)
			x->links = xcalloc(AR_HARDLINKS_MAX, sizeof(*x->links));
		x->links[x->nlinks].dev = st->st_dev;
		x->links[x->nlinks].ino = st->st_ino;
		x->links[x->nlinks].name = strdup(arcname);
		if (x->links[x->nlinks].name)
			x->nlinks++;
	}
	return NULL;
}

/* layer: an overlay whiteout (a 0/0 character device) becomes an empty regular file
 * `.wh.<name>` beside it; an opaque directory (xattr trusted.overlay.opaque "y") gets
 * `<dir>/.wh..wh..opq` (`inner` = ".wh..opq"), as the OCI image spec has them. */
static int ar_whiteout(struct ar_ctx *x, const char *arcname, const char *inner)
{
	struct tar_entry *e = xcalloc(1, sizeof(*e));
	const char *slash = strrchr(arcname, '/');
	int n, r;

	if (inner)
		n = snprintf(e->name, sizeof(e->name), "%s/.wh.%s", arcname, inner);
	else
		n = snprintf(e->name, sizeof(e->name), "%.*s%s.wh.%s",
			     slash ? (int)(slash - arcname) : 0, arcname, slash ? "/" : "",
			     slash ? slash + 1 : arcname);
	if (n < 0 || n >= TAR_NAME_MAX) {
		free(e);
		fprintf(stderr, "left out (name too long): a whiteout of %s\n", arcname);
		return 0;
	}
	e->type = TAR_REG;
	e->mode = 0644;
	r = ar_put_header(x, e);
	free(e);
	return r;
}

static int ar_opaque(int dfd)
{
	char v[4];
	ssize_t n = fgetxattr(dfd, "trusted.overlay.opaque", v, sizeof(v));

	return n == 1 && v[0] == 'y';
}

/* One entry and, for a directory, everything below it. Symlinks are stored, never
 * followed: every name is one component opened with O_NOFOLLOW below a directory fd. An
 * entry that vanished meanwhile is left out; only a failed write to the host stops. */
static int ar_walk(struct ar_ctx *x, int dfd, const char *name, const char *arcname)
{
	struct tar_entry *e = xcalloc(1, sizeof(*e));
	struct stat st;
	const char *first;
	int r = 0, fd = -1;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || strlen(arcname) > TAR_NAME_MAX - 1)
		goto out;
	if (x->layer && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
		r = ar_whiteout(x, arcname, NULL);
		goto out;
	}
	if (S_ISREG(st.st_mode)) {
		fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
			goto out;
	}
	snprintf(e->name, sizeof(e->name), "%s", arcname);
	e->mode = st.st_mode & 07777;
	e->uid = st.st_uid;
	e->gid = st.st_gid;
	e->mtime = st.st_mtim.tv_sec;
	if (S_ISREG(st.st_mode)) {
		if (st.st_nlink > 1 && (first = ar_hardlink(x, &st, arcname))) {
			e->type = TAR_LINK;
			snprintf(e->link, sizeof(e->link), "%s", first);
			r = ar_put_header(x, e);
			goto out;
		}
		e->type = TAR_REG;
		e->size = (uint64_t)st.st_size;
		if ((r = ar_put_header(x, e)) == 0)
			r = ar_put_data(x, fd, e->size);
	} else if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlinkat(dfd, name, e->link, TAR_NAME_MAX);
		if (n <= 0)
			goto out;
		e->link[n] = '\0';
		e->type = TAR_SYMLINK;
		r = ar_put_header(x, e);
	} else if (S_ISDIR(st.st_mode)) {
		DIR *d;
		struct dirent *de;
		char *child;

		e->type = TAR_DIR;
		if ((r = ar_put_header(x, e)) < 0)
			goto out;
		fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || !(d = fdopendir(fd)))
			goto out;
		fd = -1; /* the DIR owns it */
		if (x->layer && ar_opaque(dirfd(d)) && (r = ar_whiteout(x, arcname, ".wh..opq")) < 0) {
			closedir(d);
			goto out;
		}
		child = xmalloc(TAR_NAME_MAX + 2);
		while (r == 0 && (de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			if ((size_t)snprintf(child, TAR_NAME_MAX + 2, "%s/%s", arcname, de->d_name) >
			    TAR_NAME_MAX) {
				fprintf(stderr, "left out (name too long): %s/%s\n", arcname, de->d_name);
				continue;
			}
			r = ar_walk(x, dirfd(d), de->d_name, child);
		}
		free(child);
		closedir(d);
	} else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
		e->type = S_ISFIFO(st.st_mode) ? TAR_FIFO : S_ISCHR(st.st_mode) ? TAR_CHR : TAR_BLK;
		e->devmajor = major(st.st_rdev);
		e->devminor = minor(st.st_rdev);
		r = ar_put_header(x, e);
	} /* sockets are left out, as Docker does */
out:
	if (fd >= 0)
		close(fd);
	free(e);
	return r;
}

/* ---- put: the extractor (tar_ops callbacks) ---- */

/* The directory `rel` below dest (created with 0755 when missing), O_PATH. Each
 * component is resolved with RESOLVE_BENEATH from the one before it, starting at dest:
 * a symlink that leads out of it, absolute or by `..`, fails with EXDEV. */
static int ar_dir(struct ar_ctx *x, const char *rel)
{
	const uint64_t res = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
	char *p, *s, *slash;
	long fd;
	int prev, e;

	if (*rel) {
		fd = ar_openat2(x->destfd, rel, O_PATH | O_DIRECTORY, res);
		if (fd >= 0 || errno != ENOENT)
			return fd >= 0 ? (int)fd : -errno;
	}
	prev = fcntl(x->destfd, F_DUPFD_CLOEXEC, 0);
	if (prev < 0 || !*rel)
		return prev < 0 ? -errno : prev;
	p = strdup(rel);
	if (!p) {
		close(prev);
		return -ENOMEM;
	}
	for (s = p;; s = slash + 1) {
		slash = strchr(s, '/');
		if (slash)
			*slash = '\0';
		fd = ar_openat2(prev, s, O_PATH | O_DIRECTORY, res);
		if (fd < 0 && errno == ENOENT) {
			if (mkdirat(prev, s, 0755) < 0 && errno != EEXIST)
				fd = -1;
			else
				fd = ar_openat2(prev, s, O_PATH | O_DIRECTORY, res);
		}
		e = errno;
		close(prev);
		if (fd < 0) {
			free(p);
			return -e;
		}
		prev = (int)fd;
		if (!slash)
			break;
	}
	free(p);
	return prev;
}

static void ar_split(const char *name, char *parent, const char **base)
{
	const char *slash = strrchr(name, '/');

	if (!slash) {
		parent[0] = '\0';
		*base = name;
		return;
	}
	memcpy(parent, name, (size_t)(slash - name));
	parent[slash - name] = '\0';
	*base = slash + 1;
}

static int ar_fail(struct ar_ctx *x, int code, const char *what, const char *name)
{
	return k8_err_set(&x->err, code, "%s '%s': %s", what, name, strerror(-code));
}

/* Make room for a new entry at (pfd, base): Docker's rules for what may replace what. */
static int ar_clear(struct ar_ctx *x, int pfd, const char *base, const struct tar_entry *e)
{
	struct stat st;

	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : ar_fail(x, -errno, "stat", e->name);
	if (S_ISDIR(st.st_mode) && e->type == TAR_DIR)
		return 1; /* kept, its metadata set again */
	if (x->no_overwrite && (S_ISDIR(st.st_mode) || e->type == TAR_DIR))
		return k8_err_set(&x->err, -EEXIST, "cannot overwrite %s '%s' with %s",
				  S_ISDIR(st.st_mode) ? "directory" : "non-directory", e->name,
				  e->type == TAR_DIR ? "a directory" : "a non-directory");
	if (unlinkat(pfd, base, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0)
		return ar_fail(x, -errno, "replacing", e->name);
	return 0;
}

static int ar_meta_fd(int fd, const struct tar_entry *e, int times)
{
	struct timespec ts[2] = { { e->mtime, e->nsec }, { e->mtime, e->nsec } };

	if (fchown(fd, (uid_t)e->uid, (gid_t)e->gid) < 0 || fchmod(fd, e->mode) < 0)
		return -errno;
	if (times && futimens(fd, ts) < 0)
		return -errno;
	return 0;
}

static int ar_entry(void *ctx, const struct tar_entry *e)
{
	struct ar_ctx *x = ctx;
	char *parent = xmalloc(TAR_NAME_MAX + 1);
	const char *base;
	struct timespec ts[2] = { { e->mtime, e->nsec }, { e->mtime, e->nsec } };
	int pfd = -1, r, fd;

	x->cur = *e;
	x->fd = -1;
	if (!e->name[0]) {
		r = 0; /* "." itself: the destination exists already */
		goto out;
	}
	ar_split(e->name, parent, &base);
	pfd = ar_dir(x, parent);
	if (pfd < 0) {
		r = pfd == -EXDEV ? k8_err_set(&x->err, -EPERM, "'%s' would be written outside the "
					       "destination (through a symlink); refused", e->name)
				  : ar_fail(x, pfd, "the directory of", e->name);
		goto out;
	}
	r = ar_clear(x, pfd, base, e);
	if (r < 0)
		goto out;
	switch (e->type) {
	case TAR_DIR:
		if (r == 0 && mkdirat(pfd, base, 0700) < 0) {
			r = ar_fail(x, -errno, "mkdir", e->name);
			break;
		}
		fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || ar_meta_fd(fd, e, 0) < 0) {
			r = ar_fail(x, -errno, "setting up", e->name);
			if (fd >= 0)
				close(fd);
			break;
		}
		close(fd);
		if (x->ndirs < AR_DIRTIMES_MAX) {
			if (!x->dirs) {
				x->dirs = xcalloc(AR_DIRTIMES_MAX, sizeof(*x->dirs));
				x->dirtimes = xcalloc(AR_DIRTIMES_MAX, sizeof(*x->dirtimes));
			}
			x->dirs[x->ndirs] = strdup(e->name);
			x->dirtimes[x->ndirs] = ts[0];
			if (x->dirs[x->ndirs])
				x->ndirs++;
		}
		r = 0;
		break;
	case TAR_REG:
		x->fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		r = x->fd < 0 ? ar_fail(x, -errno, "creating", e->name) : 0;
		break;
	case TAR_SYMLINK:
		if (symlinkat(e->link, pfd, base) < 0 ||
		    fchownat(pfd, base, (uid_t)e->uid, (gid_t)e->gid, AT_SYMLINK_NOFOLLOW) < 0 ||
		    utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
			r = ar_fail(x, -errno, "symlink", e->name);
		else
			r = 0;
		break;
	case TAR_LINK: {
		char *tparent = xmalloc(TAR_NAME_MAX + 1);
		const char *tbase;
		int tpfd;

		ar_split(e->link, tparent, &tbase);
		tpfd = ar_dir(x, tparent);
		if (tpfd < 0 || linkat(tpfd, tbase, pfd, base, 0) < 0)
			r = k8_err_set(&x->err, tpfd < 0 ? tpfd : -errno, "hard link '%s' to '%s': %s",
				       e->name, e->link, strerror(tpfd < 0 ? -tpfd : errno));
		else
			r = 0;
		if (tpfd >= 0)
			close(tpfd);
		free(tparent);
		break;
	}
	default: { /* fifo, char, block: the container's file systems are nodev */
		mode_t t = e->type == TAR_FIFO ? S_IFIFO : e->type == TAR_CHR ? S_IFCHR : S_IFBLK;
		if (mknodat(pfd, base, t | e->mode, makedev(e->devmajor, e->devminor)) < 0 ||
		    fchownat(pfd, base, (uid_t)e->uid, (gid_t)e->gid, AT_SYMLINK_NOFOLLOW) < 0 ||
		    utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
			r = ar_fail(x, -errno, "mknod", e->name);
		else
			r = 0;
		break;
	}
	}
out:
	if (pfd >= 0)
		close(pfd);
	free(parent);
	return r;
}

static int ar_data(void *ctx, const unsigned char *p, size_t n)
{
	struct ar_ctx *x = ctx;
	int r;

	if (x->fd < 0)
		return 0;
	if ((r = write_full(x->fd, p, n)) < 0)
		return ar_fail(x, r, "writing", x->cur.name);
	return 0;
}

static int ar_end(void *ctx)
{
	struct ar_ctx *x = ctx;
	int r = 0;

	if (x->fd < 0)
		return 0;
	if ((r = ar_meta_fd(x->fd, &x->cur, 1)) < 0)
		r = ar_fail(x, r, "setting owner, mode and time of", x->cur.name);
	close(x->fd);
	x->fd = -1;
	return r;
}

/* Directory mtimes last (writing into a directory changes its mtime), deepest first. */
static void ar_dirtimes(struct ar_ctx *x)
{
	char *parent = xmalloc(TAR_NAME_MAX + 1);
	const char *base;

	while (x->ndirs) {
		size_t i = --x->ndirs;
		struct timespec ts[2] = { x->dirtimes[i], x->dirtimes[i] };
		int pfd;

		ar_split(x->dirs[i], parent, &base);
		pfd = ar_dir(x, parent);
		if (pfd >= 0) {
			utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW);
			close(pfd);
		}
		free(x->dirs[i]);
	}
	free(parent);
}

static int ar_extract(struct ar_ctx *x)
{
	static const struct tar_ops ops = { ar_entry, ar_data, ar_end };
	struct tar_reader rd;
	unsigned char *buf = xmalloc(AR_IOBUF);
	int r = 0;

	tar_reader_init(&rd);
	x->fd = -1;
	for (;;) {
		ssize_t n = read(0, buf, AR_IOBUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = k8_err_set(&x->err, -errno, "reading the archive: %s", strerror(errno));
			break;
		}
		if (n == 0) {
			r = tar_finish(&rd, &x->err);
			break;
		}
		if ((r = tar_feed(&rd, buf, (size_t)n, &ops, x, &x->err)) < 0)
			break;
	}
	if (x->fd >= 0)
		close(x->fd);
	ar_dirtimes(x);
	tar_reader_free(&rd);
	free(buf);
	return r;
}

static void ar_status(int fd, json_t *st, const struct k8_err *err)
{
	json_t *o = st ? json_pack("{s:o}", "stat", st)
		       : json_pack("{s:i,s:s}", "errno", -err->code, "error", err->msg);
	char *t = json_dumps(o, JSON_COMPACT);

	if (t)
		write_full(fd, t, strlen(t));
	free(t);
	json_decref(o);
	close(fd);
}

/* archive.layer: the stopped container's upper directory (on the VM's scratch disk; the
 * helper stays in the VM's root and never follows a symlink of it) as a layer tar:
 * entries relative to the container's root, OCI whiteouts. The host checks every entry
 * again (docker_build.c): the container wrote this tree. */
static int ar_layer(struct ar_ctx *x, struct ctr *c)
{
	char dir[PATH_MAX];
	unsigned char z[2 * TAR_BLOCK] = { 0 };
	struct dirent *de;
	DIR *d;
	int fd, r = 0;

	snprintf(dir, sizeof(dir), "%s/%s/upper", AGENT_CTR_DIR, c->id);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		r = k8_err_set(&x->err, -errno, "%s: %s", dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		ar_status(3, NULL, &x->err);
		return -r > 0 && -r < 256 ? -r : EIO;
	}
	ar_status(3, json_object(), NULL);
	x->out = 1;
	x->layer = 1;
	x->buf = xmalloc(AR_IOBUF);
	while (r == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		r = ar_walk(x, dirfd(d), de->d_name, de->d_name);
	}
	closedir(d);
	if (r == 0)
		r = ar_write(x, z, sizeof(z));
	if (r == 0)
		r = ar_flush(x);
	if (r < 0) {
		fprintf(stderr, "writing the layer: %s\n", strerror(-r));
		return EPIPE;
	}
	return 0;
}

/* The helper's body; returns its exit code (0, or the errno of the failure). */
static int ar_child(struct agent *a, struct ctr *c, enum archive_op op, const char *path,
		    int no_overwrite)
{
	struct ar_ctx x = { .rootfd = -1, .fd = -1, .destfd = -1, .no_overwrite = no_overwrite };
	char name[TAR_NAME_MAX + 1], arcname[TAR_NAME_MAX + 1];
	json_t *st = NULL;
	int dirfd = -1, r;

	x.procfd = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (op == ARCHIVE_LAYER)
		return ar_layer(&x, c);
	if ((r = ar_enter(a, c, &x.err)) < 0)
		goto fail;
	x.rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (x.rootfd < 0) {
		r = k8_err_set(&x.err, -errno, "the container's root: %s", strerror(errno));
		goto fail;
	}
	if (op == ARCHIVE_PUT) {
		long fd = ar_openat2(x.rootfd, path, O_PATH | O_DIRECTORY,
				     RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
		if (fd < 0) {
			r = k8_err_set(&x.err, -errno, errno == ENOTDIR ? "%s is not a directory: "
				       "an archive is extracted into a directory" : "%s: %s", path,
				       strerror(errno));
			goto fail;
		}
		x.destfd = (int)fd;
		ar_status(3, json_object(), NULL);
		umask(0);
		r = ar_extract(&x);
		if (r < 0)
			goto fail_late;
		return 0;
	}
	if ((r = ar_resolve(&x, path, &dirfd, name, arcname, &x.err)) < 0)
		goto fail;
	st = ar_stat_json(&x, path, dirfd, name, arcname, &x.err);
	if (!st) {
		r = x.err.code;
		goto fail;
	}
	ar_status(3, st, NULL);
	if (op == ARCHIVE_STAT)
		return 0;
	x.out = 1;
	x.buf = xmalloc(AR_IOBUF);
	r = ar_walk(&x, dirfd, name, arcname);
	if (r == 0) {
		unsigned char z[2 * TAR_BLOCK] = { 0 };
		r = ar_write(&x, z, sizeof(z));
	}
	if (r == 0)
		r = ar_flush(&x);
	if (r < 0) {
		k8_err_set(&x.err, r, "writing the archive: %s", strerror(-r));
		goto fail_late;
	}
	return 0;
fail:
	ar_status(3, NULL, &x.err);
	return -r > 0 && -r < 256 ? -r : EIO;
fail_late:
	fprintf(stderr, "%s\n", x.err.msg);
	return -r > 0 && -r < 256 ? -r : EIO;
}

/* ---- the agent's side ---- */

/* Read the helper's status (until it closes fd 3), at most AR_STATUS_WAIT_MS. */
static json_t *ar_read_status(int fd, struct k8_err *err)
{
	char *buf = xmalloc(AR_STATUS_MAX + 1);
	size_t have = 0;
	uint64_t deadline = now_mono_ns() + AR_STATUS_WAIT_MS * 1000000ull;
	json_t *o = NULL;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = now_mono_ns();
		ssize_t n;

		if (now >= deadline) {
			k8_err_set(err, -ETIMEDOUT, "resolving the path took longer than %d s",
				   AR_STATUS_WAIT_MS / 1000);
			goto out;
		}
		if (poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1) < 0 && errno != EINTR) {
			k8_err_set(err, -errno, "poll: %s", strerror(errno));
			goto out;
		}
		n = read(fd, buf + have, AR_STATUS_MAX - have);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		if (have == AR_STATUS_MAX)
			break;
	}
	o = json_loadb(buf, have, 0, NULL);
	if (!json_is_object(o)) {
		json_decref(o);
		o = NULL;
		k8_err_set(err, -EIO, "the archive helper died before it answered");
	}
out:
	free(buf);
	return o;
}

int archive_start(struct agent *a, uint32_t id, struct ctr *c, enum archive_op op,
		  const char *path, int no_overwrite, struct k8_err *err)
{
	int st[2] = { -1, -1 }, out[2] = { -1, -1 }, er[2] = { -1, -1 }, in[2] = { -1, -1 };
	json_t *status, *v;
	struct proc *p;
	pid_t pid;
	int r;

	if (op == ARCHIVE_LAYER && c->running)
		return k8_err_set(err, -EBUSY, "container %s is running: its layer is taken once "
				  "it has exited", c->id);
	if (!c->running && op != ARCHIVE_LAYER) {
		struct stat sb;
		char dir[PATH_MAX];
		int mounted = 0;

		for (int i = 0; i < AGENT_SLOTS; i++)
			mounted |= !strcmp(a->slot_image[i], c->image_hex);
		snprintf(dir, sizeof(dir), "%s/%s/upper", AGENT_CTR_DIR, c->id);
		if (!mounted || stat(dir, &sb) < 0)
			return k8_err_set(err, -ENOENT, "the files of stopped container %s are not "
					  "available (its image is no longer attached)", c->id);
	}
	if (pipe2(st, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0 ||
	    (op == ARCHIVE_PUT && pipe2(in, O_CLOEXEC) < 0)) {
		r = k8_err_set(err, -errno, "pipe: %s", strerror(errno));
		goto close_all;
	}
	pid = fork();
	if (pid < 0) {
		r = k8_err_set(err, -errno, "fork: %s", strerror(errno));
		goto close_all;
	}
	if (pid == 0) {
		sigset_t none;
		int fd;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			(void)!write(fd, "0", 1);
			close(fd);
		}
		fd = in[0] >= 0 ? in[0] : open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (dup2(fd, 0) < 0 || dup2(out[1], 1) < 0 || dup2(er[1], 2) < 0 || dup2(st[1], 3) < 0)
			_exit(EIO);
		syscall(SYS_close_range, 4u, ~0u, 0u);
		_exit(ar_child(a, c, op, path, no_overwrite));
	}
	close(st[1]);
	close(out[1]);
	close(er[1]);
	st[1] = out[1] = er[1] = -1;
	if (in[0] >= 0) {
		close(in[0]);
		in[0] = -1;
	}
	status = ar_read_status(st[0], err);
	v = json_object_get(status, "stat");
	if (!status || !json_is_object(v)) {
		if (status) {
			json_int_t e = json_integer_value(json_object_get(status, "errno"));
			const char *m = json_string_value(json_object_get(status, "error"));
			k8_err_set(err, e > 0 && e < 4096 ? -(int)e : -EIO, "%s", m ? m : "failed");
		}
		json_decref(status);
		kill(pid, SIGKILL); /* reaped by the loop, unknown there, dropped */
		r = err->code;
		goto close_all;
	}
	close(st[0]);
	st[0] = -1;
	if (op == ARCHIVE_STAT) {
		chan_resp_ok(a, id, json_pack("{s:O}", "stat", v));
		json_decref(status);
		r = 0;
		goto close_all;
	}
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	fcntl(er[0], F_SETFL, O_NONBLOCK);
	if (in[1] >= 0)
		fcntl(in[1], F_SETFL, O_NONBLOCK);
	p = proc_new(a, pid, id, NULL, in[1], out[0], er[0]);
	p->helper = 1;
	chan_resp_ok(a, id, json_pack("{s:i,s:O}", "pid", (int)pid, "stat", v));
	json_decref(status);
	return 0;
close_all:
	for (int *f = st; f < st + 2; f++)
		if (*f >= 0)
			close(*f);
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (er[i] >= 0)
			close(er[i]);
		if (in[i] >= 0)
			close(in[i]);
	}
	return r;
}
