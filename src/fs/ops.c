/* SPDX-License-Identifier: Apache-2.0 */
/* ops.c - kosa8-fs FUSE operations on host files, one function per opcode.
 *
 * Rules every op follows (docs/shared-folders.md argues why they suffice):
 *  - a name from the guest is one component: 1..255 bytes, not "." or "..", no '/',
 *    NUL-terminated inside the message;
 *  - host lookups are openat2(parent O_PATH fd, name, O_PATH|O_NOFOLLOW,
 *    RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS); every other *at call
 *    takes (parent O_PATH fd, checked name) and never follows a trailing symlink;
 *  - contents are opened only for S_IFREG / S_IFDIR nodes, by re-opening the node's own
 *    inode through /proc/self/fd/N (fs_reopen);
 *  - read-only mounts and the synthetic root refuse every change with EROFS;
 *  - created files belong to us (the daemon's user), never carry S_ISUID/S_ISGID;
 *    chown requests are ignored;
 *  - xattrs are not supported (ENOSYS, which also stops the guest kernel asking).
 */
#include "fs/fs.h"
#include "common/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fuse.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>

#define RESOLVE_STRICT (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS)
#define OUT_HDR sizeof(struct fuse_out_header)
#define OUT_CAP (K8FS_MAX_MSG - OUT_HDR)
#define MAX_COPY_RANGE (8u << 20)

const void *fs_req_get(const struct fs_req *r, size_t off, size_t n)
{
	if (off > r->blen || n > r->blen - off)
		return NULL;
	return r->body + off;
}

const char *fs_req_str(const struct fs_req *r, size_t *off)
{
	const char *s, *e;

	if (*off >= r->blen)
		return NULL;
	s = (const char *)r->body + *off;
	e = memchr(s, '\0', r->blen - *off);
	if (!e)
		return NULL;
	*off += (size_t)(e - s) + 1;
	return s;
}

static void *reply(struct fs_req *r, size_t n)
{
	r->olen = n;
	memset(r->out + OUT_HDR, 0, n);
	return r->out + OUT_HDR;
}

static int name_check(const char *name)
{
	size_t l = strlen(name);

	if (l == 0 || (l == 1 && name[0] == '.') || (l == 2 && name[0] == '.' && name[1] == '.') ||
	    strchr(name, '/'))
		return -EINVAL;
	if (l > 255)
		return -ENAMETOOLONG;
	return 0;
}

/* The permission bits a guest may ask for: no set-user-ID or set-group-ID. */
static mode_t mode_clean(uint32_t mode)
{
	return (mode_t)(mode & 07777 & ~(uint32_t)(S_ISUID | S_ISGID));
}

static int node_of(struct fs_req *r, uint64_t id, struct fs_node **n)
{
	*n = fs_node_get(r->c, id);
	if (!*n)
		return -ESTALE;
	if ((*n)->fd < 0)
		return -ESTALE;
	return 0;
}

/* A directory node of a mount (not the synthetic root) to create or look up names in. */
static int dir_of(struct fs_req *r, uint64_t id, struct fs_node **n)
{
	int e = node_of(r, id, n);

	if (e)
		return e;
	return (*n)->type == S_IFDIR ? 0 : -ENOTDIR;
}

static void attr_fill(struct fuse_attr *a, const struct stat *st)
{
	a->ino = st->st_ino;
	a->size = (uint64_t)st->st_size;
	a->blocks = (uint64_t)st->st_blocks;
	a->atime = (uint64_t)st->st_atim.tv_sec;
	a->mtime = (uint64_t)st->st_mtim.tv_sec;
	a->ctime = (uint64_t)st->st_ctim.tv_sec;
	a->atimensec = (uint32_t)st->st_atim.tv_nsec;
	a->mtimensec = (uint32_t)st->st_mtim.tv_nsec;
	a->ctimensec = (uint32_t)st->st_ctim.tv_nsec;
	a->mode = st->st_mode;
	a->nlink = (uint32_t)st->st_nlink;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
	a->rdev = (uint32_t)st->st_rdev;
	a->blksize = K8FS_IO_BLKSIZE;
}

static void root_attr(struct fs_ctx *c, struct fuse_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = K8FS_ROOT_ID;
	a->mode = S_IFDIR | 0555;
	a->nlink = 2 + c->nmounts;
	a->uid = geteuid();
	a->gid = getegid();
	a->blksize = K8FS_IO_BLKSIZE;
}

static void entry_fill(struct fuse_entry_out *e, const struct fs_node *n, const struct stat *st)
{
	e->nodeid = n->id;
	e->generation = 0;
	e->entry_valid = K8FS_ENTRY_TIMEOUT;
	e->attr_valid = K8FS_ATTR_TIMEOUT;
	attr_fill(&e->attr, st);
}

/* Look up one checked name under a directory node: node (nlookup + 1) and its stat. */
static int lookup_name(struct fs_ctx *c, struct fs_node *dir, const char *name,
		       struct fs_node **n, struct stat *st)
{
	struct open_how how = { .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
				.resolve = RESOLVE_STRICT };
	long fd;
	int e = name_check(name);

	if (e)
		return e;
	if (dir->type != S_IFDIR)
		return -ENOTDIR;
	do
		fd = syscall(SYS_openat2, dir->fd, name, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN);
	if (fd < 0)
		return -errno;
	return fs_node_found(c, dir, name, (int)fd, st, n);
}

/* Mount i as entry "i" of the synthetic root: canonical decimal only. */
static int root_index(struct fs_ctx *c, const char *name)
{
	unsigned long v = 0;

	if (!name[0] || (name[0] == '0' && name[1]) || strlen(name) > 3)
		return -ENOENT;
	for (const char *p = name; *p; p++) {
		if (*p < '0' || *p > '9')
			return -ENOENT;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	return v < c->nmounts ? (int)v : -ENOENT;
}

static int entry_reply(struct fs_req *r, struct fs_node *n, const struct stat *st)
{
	entry_fill(reply(r, sizeof(struct fuse_entry_out)), n, st);
	return 0;
}

static int mount_root_lookup(struct fs_req *r, int i, struct fs_node **np, struct stat *st)
{
	struct fs_node *n = fs_node_get(r->c, 2 + (uint64_t)i);

	if (!n || fstatat(n->fd, "", st, AT_EMPTY_PATH) < 0)
		return -EIO;
	n->nlookup++;
	*np = n;
	return 0;
}

static int op_lookup(struct fs_req *r)
{
	size_t off = 0;
	const char *name = fs_req_str(r, &off);
	struct fs_node *dir, *n;
	struct stat st;
	int e;

	if (!name)
		return -EINVAL;
	if (r->nodeid == K8FS_ROOT_ID) {
		int i = root_index(r->c, name);
		if (i < 0)
			return i;
		e = mount_root_lookup(r, i, &n, &st);
		return e ? e : entry_reply(r, n, &st);
	}
	if ((e = dir_of(r, r->nodeid, &dir)))
		return e;
	if ((e = lookup_name(r->c, dir, name, &n, &st)))
		return e;
	return entry_reply(r, n, &st);
}

static int op_forget(struct fs_req *r)
{
	const struct fuse_forget_in *in = fs_req_get(r, 0, sizeof(*in));

	if (in)
		fs_node_forget(r->c, r->nodeid, in->nlookup);
	return K8FS_NOREPLY;
}

static int op_batch_forget(struct fs_req *r)
{
	const struct fuse_batch_forget_in *in = fs_req_get(r, 0, sizeof(*in));

	if (!in)
		return K8FS_NOREPLY;
	for (uint32_t i = 0; i < in->count; i++) {
		const struct fuse_forget_one *f =
			fs_req_get(r, sizeof(*in) + (size_t)i * sizeof(*f), sizeof(*f));
		if (!f)
			break;
		fs_node_forget(r->c, f->nodeid, f->nlookup);
	}
	return K8FS_NOREPLY;
}

static int attr_reply(struct fs_req *r, struct fs_node *n)
{
	struct fuse_attr_out *o;
	struct stat st;

	if (fstatat(n->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	o = reply(r, sizeof(*o));
	o->attr_valid = K8FS_ATTR_TIMEOUT;
	attr_fill(&o->attr, &st);
	return 0;
}

static int op_getattr(struct fs_req *r)
{
	struct fs_node *n;
	int e;

	if (r->nodeid == K8FS_ROOT_ID) {
		struct fuse_attr_out *o = reply(r, sizeof(*o));
		o->attr_valid = K8FS_ATTR_TIMEOUT;
		root_attr(r->c, &o->attr);
		return 0;
	}
	if ((e = node_of(r, r->nodeid, &n)))
		return e;
	return attr_reply(r, n);
}

static int proc_name(char buf[16], int fd)
{
	snprintf(buf, 16, "%d", fd);
	return 0;
}

static int op_setattr(struct fs_req *r)
{
	const struct fuse_setattr_in *in = fs_req_get(r, 0, sizeof(*in));
	struct fs_node *n;
	char num[16];
	int e;

	if (!in)
		return -EINVAL;
	if ((e = node_of(r, r->nodeid, &n)))
		return e;
	proc_name(num, n->fd);
	/* chmod and utimes go through /proc/self/fd/N, which names exactly this inode;
	 * for anything but a file or directory that could mean following a symlink, so
	 * those are refused (mode) or skipped (times: a symlink's times do not matter). */
	if (in->valid & FATTR_MODE) {
		if (n->type != S_IFREG && n->type != S_IFDIR)
			return -EPERM;
		if (fchmodat(r->c->proc_fd, num, mode_clean(in->mode), 0) < 0)
			return -errno;
	}
	/* FATTR_UID / FATTR_GID: ignored. Host files belong to the daemon's user. */
	if (in->valid & FATTR_SIZE) {
		struct fs_handle *h = (in->valid & FATTR_FH) ? fs_handle_get(r->c, in->fh) : NULL;

		if (n->type == S_IFDIR)
			return -EISDIR;
		if (n->type != S_IFREG)
			return -EINVAL;
		if (in->size > INT64_MAX)
			return -EFBIG;
		if (h && !h->dir && h->fd >= 0 && (h->flags & O_ACCMODE) != O_RDONLY &&
		    h->mount == n->mount) {
			if (ftruncate(h->fd, (off_t)in->size) < 0)
				return -errno;
		} else {
			int fd = fs_reopen(r->c, n->fd, n->type, O_WRONLY);
			if (fd < 0)
				return fd;
			e = ftruncate(fd, (off_t)in->size) < 0 ? -errno : 0;
			close(fd);
			if (e)
				return e;
		}
	}
	if (in->valid & (FATTR_ATIME | FATTR_MTIME)) {
		struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } };

		if (in->valid & FATTR_ATIME) {
			ts[0].tv_sec = (time_t)in->atime;
			ts[0].tv_nsec = (in->valid & FATTR_ATIME_NOW) ? UTIME_NOW
				       : (long)(in->atimensec % 1000000000u);
		}
		if (in->valid & FATTR_MTIME) {
			ts[1].tv_sec = (time_t)in->mtime;
			ts[1].tv_nsec = (in->valid & FATTR_MTIME_NOW) ? UTIME_NOW
				       : (long)(in->mtimensec % 1000000000u);
		}
		if ((n->type == S_IFREG || n->type == S_IFDIR) &&
		    utimensat(r->c->proc_fd, num, ts, 0) < 0)
			return -errno;
	}
	return attr_reply(r, n);
}

static int op_readlink(struct fs_req *r)
{
	struct fs_node *n;
	ssize_t l;
	int e;

	if ((e = node_of(r, r->nodeid, &n)))
		return e;
	if (n->type != S_IFLNK)
		return -EINVAL;
	/* the text goes to the guest; the host never resolves it */
	l = readlinkat(n->fd, "", (char *)r->out + OUT_HDR, 4096);
	if (l < 0)
		return -errno;
	r->olen = (size_t)l;
	return 0;
}

/* After creating `name` in dir: look it up and answer with its entry. */
static int created(struct fs_req *r, struct fs_node *dir, const char *name)
{
	struct fs_node *n;
	struct stat st;
	int e = lookup_name(r->c, dir, name, &n, &st);

	return e ? e : entry_reply(r, n, &st);
}

/* ---- the host disk reserve ---- */

int fs_reserve_parse(const char *spec, uint64_t *bytes, unsigned *pct)
{
	*bytes = 0;
	*pct = 0;
	for (const char *p = spec; p && *p;) {
		char *e;
		unsigned long long v;

		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = strtoull(p, &e, 10);
		if (*e == '%') {
			if (v > 90)
				return -EINVAL;
			*pct = (unsigned)v;
			e++;
		} else {
			unsigned shift = 0;
			switch (*e) {
			case 'T': case 't': shift = 40; e++; break;
			case 'G': case 'g': shift = 30; e++; break;
			case 'M': case 'm': shift = 20; e++; break;
			case 'K': case 'k': shift = 10; e++; break;
			default: break;
			}
			if (v > (UINT64_MAX >> shift))
				return -EINVAL;
			*bytes = (uint64_t)v << shift;
		}
		if (*e == ',')
			e++;
		else if (*e)
			return -EINVAL;
		p = e;
	}
	return 0;
}

/* Slack for what the host file system spends besides the data (extents, directory
 * blocks, journal): a write is refused unless the reserve stays whole after it. */
#define RESERVE_SLACK (256u * 1024)

int fs_space_check(struct fs_ctx *c, uint32_t m, uint64_t need)
{
	struct statfs sf;
	uint64_t avail, total, reserve;

	if ((!c->reserve_bytes && !c->reserve_pct) || m >= c->nmounts)
		return 0;
	if (fstatfs(c->mounts[m].fd, &sf) < 0)
		return -errno;
	avail = (uint64_t)sf.f_bavail * (uint64_t)sf.f_frsize;
	total = (uint64_t)sf.f_blocks * (uint64_t)sf.f_frsize;
	reserve = total / 100 * c->reserve_pct;
	if (reserve < c->reserve_bytes)
		reserve = c->reserve_bytes;
	if (avail < reserve || avail - reserve < need + RESERVE_SLACK) {
		c->st.enospc++;
		return -ENOSPC;
	}
	return 0;
}

static int op_symlink(struct fs_req *r)
{
	size_t off = 0;
	const char *name = fs_req_str(r, &off), *target = fs_req_str(r, &off);
	struct fs_node *dir;
	int e;

	if (!name || !target)
		return -EINVAL;
	if ((e = name_check(name)))
		return e;
	if (!target[0] || strlen(target) >= 4096)
		return -ENAMETOOLONG;
	if ((e = dir_of(r, r->nodeid, &dir)) || (e = fs_space_check(r->c, dir->mount, 0)))
		return e;
	/* the target is stored as text; only the guest kernel ever interprets it */
	if (symlinkat(target, dir->fd, name) < 0)
		return -errno;
	return created(r, dir, name);
}

static int op_mknod(struct fs_req *r)
{
	const struct fuse_mknod_in *in = fs_req_get(r, 0, sizeof(*in));
	size_t off = sizeof(*in);
	const char *name = fs_req_str(r, &off);
	struct fs_node *dir;
	int e;

	if (!in || !name)
		return -EINVAL;
	if ((in->mode & S_IFMT) != S_IFREG && (in->mode & S_IFMT) != 0)
		return -EPERM;           /* no devices, FIFOs or sockets on the host */
	if ((e = name_check(name)) || (e = dir_of(r, r->nodeid, &dir)) ||
	    (e = fs_space_check(r->c, dir->mount, 0)))
		return e;
	if (mknodat(dir->fd, name, S_IFREG | mode_clean(in->mode), 0) < 0)
		return -errno;
	return created(r, dir, name);
}

static int op_mkdir(struct fs_req *r)
{
	const struct fuse_mkdir_in *in = fs_req_get(r, 0, sizeof(*in));
	size_t off = sizeof(*in);
	const char *name = fs_req_str(r, &off);
	struct fs_node *dir;
	int e;

	if (!in || !name)
		return -EINVAL;
	if ((e = name_check(name)) || (e = dir_of(r, r->nodeid, &dir)) ||
	    (e = fs_space_check(r->c, dir->mount, 0)))
		return e;
	if (mkdirat(dir->fd, name, mode_clean(in->mode)) < 0)
		return -errno;
	return created(r, dir, name);
}

static int op_unlink(struct fs_req *r, int flags)
{
	size_t off = 0;
	const char *name = fs_req_str(r, &off);
	struct fs_node *dir;
	int e;

	if (!name)
		return -EINVAL;
	if ((e = name_check(name)) || (e = dir_of(r, r->nodeid, &dir)))
		return e;
	if (unlinkat(dir->fd, name, flags) < 0)
		return -errno;
	return 0;
}

static int op_rename(struct fs_req *r, uint64_t newdir, uint32_t flags, size_t off)
{
	const char *from = fs_req_str(r, &off), *to = fs_req_str(r, &off);
	struct fs_node *od, *nd;
	cleanup_free char *fp = NULL, *tp = NULL;
	int e;

	if (!from || !to)
		return -EINVAL;
	if (flags & ~(uint32_t)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;          /* RENAME_WHITEOUT and unknown flags: never */
	if ((e = name_check(from)) || (e = name_check(to)))
		return e;
	if (newdir == K8FS_ROOT_ID)
		return -EROFS;
	if ((e = dir_of(r, r->nodeid, &od)) || (e = dir_of(r, newdir, &nd)))
		return e;
	if (od->mount != nd->mount)
		return -EXDEV;
	if (renameat2(od->fd, from, nd->fd, to, flags) < 0)
		return -errno;
	fp = fs_path_join(od->path, from);
	tp = fs_path_join(nd->path, to);
	fs_node_renamed(r->c, od->mount, fp, tp, flags & RENAME_EXCHANGE);
	return 0;
}

static int op_link(struct fs_req *r)
{
	const struct fuse_link_in *in = fs_req_get(r, 0, sizeof(*in));
	size_t off = sizeof(*in);
	const char *name = fs_req_str(r, &off);
	struct fs_node *dir, *old;
	int e;

	if (!in || !name)
		return -EINVAL;
	if ((e = name_check(name)))
		return e;
	if (in->oldnodeid == K8FS_ROOT_ID || r->nodeid == K8FS_ROOT_ID)
		return -EXDEV;
	if ((e = dir_of(r, r->nodeid, &dir)) || (e = node_of(r, in->oldnodeid, &old)))
		return e;
	if (old->mount != dir->mount)
		return -EXDEV;           /* a link would carry a read-only file into a rw mount */
	if (old->type == S_IFDIR)
		return -EPERM;
	/* AT_EMPTY_PATH links the O_PATH fd's own inode and never follows anything */
	if (linkat(old->fd, "", dir->fd, name, AT_EMPTY_PATH) < 0) {
		char num[16];
		if (errno != ENOENT || old->type != S_IFREG)
			return -errno;
		/* without CAP_DAC_READ_SEARCH: the same inode through /proc/self/fd/N */
		proc_name(num, old->fd);
		if (linkat(r->c->proc_fd, num, dir->fd, name, AT_SYMLINK_FOLLOW) < 0)
			return -errno;
	}
	return created(r, dir, name);
}

#define OPEN_FLAGS (O_ACCMODE | O_APPEND | O_SYNC | O_DSYNC)

/* FOPEN_* for an open with these flags. Never FOPEN_KEEP_CACHE: each open drops the
 * guest's cached pages ("a host change is seen on the next open"). A write-only open
 * gets FOPEN_DIRECT_IO: its WRITEs carry the caller's own pages, so the guest kernel
 * neither allocates page cache for them nor copies into it, which under TCG costs more
 * than the transfer itself (docs/shared-folders.md "Speed"). Nothing else changes
 * for the caller: such an fd can neither read nor be mmap'd, and every write() already
 * went to the host at once (no writeback cache). */
static uint32_t open_out_flags(uint32_t flags)
{
	return (flags & O_ACCMODE) == O_WRONLY ? FOPEN_DIRECT_IO : 0;
}

static int op_open(struct fs_req *r)
{
	const struct fuse_open_in *in = fs_req_get(r, 0, sizeof(*in));
	struct fs_node *n;
	struct fs_handle *h;
	struct fuse_open_out *o;
	uint64_t fh;
	int e, fd, fl;

	if (!in)
		return -EINVAL;
	if (r->nodeid == K8FS_ROOT_ID)
		return -EISDIR;
	if ((e = node_of(r, r->nodeid, &n)))
		return e;
	if (n->type == S_IFDIR)
		return -EISDIR;
	if (n->type != S_IFREG)
		return -EACCES;
	if ((in->flags & O_ACCMODE) == O_ACCMODE)
		return -EINVAL;
	if (r->c->mounts[n->mount].ro &&
	    ((in->flags & O_ACCMODE) != O_RDONLY || (in->flags & O_TRUNC)))
		return -EROFS;
	/* The guest caches names for K8FS_ENTRY_TIMEOUT. A name the host removed or moved
	 * since must not open the old file: ESTALE makes the guest kernel walk the path
	 * again with fresh LOOKUPs, which see the host's change. */
	if (!fs_node_still_named(r->c, n))
		return -ESTALE;
	fl = (int)(in->flags & (OPEN_FLAGS | O_TRUNC));
	if ((e = fs_handle_new(r->c, &fh)))
		return e;
	fd = fs_reopen(r->c, n->fd, n->type, fl);
	if (fd < 0) {
		fs_handle_close(r->c, fh);
		return fd;
	}
	h = fs_handle_get(r->c, fh);
	h->fd = fd;
	h->nodeid = n->id;
	h->mount = n->mount;
	h->flags = in->flags & ~(uint32_t)O_TRUNC;
	o = reply(r, sizeof(*o));
	o->fh = fh;
	o->open_flags = open_out_flags(in->flags);
	return 0;
}

static int op_create(struct fs_req *r)
{
	const struct fuse_create_in *in = fs_req_get(r, 0, sizeof(*in));
	size_t off = sizeof(*in);
	const char *name = fs_req_str(r, &off);
	struct open_how how = { .resolve = RESOLVE_STRICT };
	struct fs_node *dir, *n;
	struct fs_handle *h;
	struct stat st;
	char num[16];
	uint64_t fh;
	long fd;
	int e, pfd;

	if (!in || !name)
		return -EINVAL;
	if ((e = name_check(name)) || (e = dir_of(r, r->nodeid, &dir)) ||
	    (e = fs_space_check(r->c, dir->mount, 0)))
		return e;
	if ((in->flags & O_ACCMODE) == O_ACCMODE)
		return -EINVAL;
	if ((e = fs_handle_new(r->c, &fh)))
		return e;
	how.flags = O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY |
		    (in->flags & OPEN_FLAGS);
	how.mode = mode_clean(in->mode);
	do
		fd = syscall(SYS_openat2, dir->fd, name, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN);
	if (fd < 0 && errno == EEXIST && !(in->flags & O_EXCL)) {
		/* a CREATE replayed after a rewind, or a file the host made meanwhile:
		 * open what is there, if it is a regular file */
		struct fs_node *ex;
		e = lookup_name(r->c, dir, name, &ex, &st);
		if (e)
			goto fail;
		fd = fs_reopen(r->c, ex->fd, ex->type, (int)(in->flags & (OPEN_FLAGS | O_TRUNC)));
		fs_node_forget(r->c, ex->id, 1);
		if (fd < 0) {
			e = (int)fd;
			goto fail;
		}
	} else if (fd < 0) {
		e = -errno;
		goto fail;
	}
	/* the node's O_PATH fd is taken from the opened file itself: same inode, no race */
	proc_name(num, (int)fd);
	pfd = openat(r->c->proc_fd, num, O_PATH | O_CLOEXEC);
	if (pfd < 0) {
		e = -errno;
		close((int)fd);
		goto fail;
	}
	if ((e = fs_node_found(r->c, dir, name, pfd, &st, &n))) {
		close((int)fd);
		goto fail;
	}
	h = fs_handle_get(r->c, fh);
	h->fd = (int)fd;
	h->nodeid = n->id;
	h->mount = n->mount;
	h->flags = in->flags & ~(uint32_t)(O_TRUNC | O_CREAT | O_EXCL);
	struct fuse_entry_out *eo = reply(r, sizeof(*eo) + sizeof(struct fuse_open_out));
	struct fuse_open_out *oo = (struct fuse_open_out *)(eo + 1);
	entry_fill(eo, n, &st);
	oo->fh = fh;
	oo->open_flags = open_out_flags(in->flags);
	return 0;
fail:
	fs_handle_close(r->c, fh);
	return e;
}

static struct fs_handle *file_handle(struct fs_req *r, uint64_t fh, int *e)
{
	struct fs_handle *h = fs_handle_get(r->c, fh);

	*e = 0;
	if (!h || h->dir)
		*e = -EBADF;
	else if (h->fd < 0)
		*e = -ESTALE;
	return *e ? NULL : h;
}

static int op_read(struct fs_req *r)
{
	const struct fuse_read_in *in = fs_req_get(r, 0, sizeof(*in));
	struct fs_handle *h;
	uint32_t size;
	ssize_t n;
	int e;

	if (!in)
		return -EINVAL;
	if (!(h = file_handle(r, in->fh, &e)))
		return e;
	if (in->offset > INT64_MAX)
		return -EINVAL;
	size = in->size < K8FS_MAX_WRITE ? in->size : K8FS_MAX_WRITE;
	n = pread(h->fd, r->out + OUT_HDR, size, (off_t)in->offset);
	if (n < 0)
		return -errno;
	r->olen = (size_t)n;
	r->c->st.bytes_read += (uint64_t)n;
	return 0;
}

static int op_write(struct fs_req *r)
{
	const struct fuse_write_in *in = fs_req_get(r, 0, sizeof(*in));
	const void *data;
	struct fs_handle *h;
	struct fuse_write_out *o;
	ssize_t n;
	int e;

	if (!in)
		return -EINVAL;
	data = fs_req_get(r, sizeof(*in), in->size);
	if (!data || in->offset > INT64_MAX)
		return -EINVAL;
	if (!(h = file_handle(r, in->fh, &e)))
		return e;
	if (r->c->mounts[h->mount].ro)
		return -EROFS;
	if ((e = fs_space_check(r->c, h->mount, in->size)))
		return e;
	n = pwrite(h->fd, data, in->size, (off_t)in->offset);
	if (n < 0)
		return -errno;
	r->c->st.bytes_written += (uint64_t)n;
	o = reply(r, sizeof(*o));
	o->size = (uint32_t)n;
	return 0;
}

/* K8FS_OP_WRITEREF: a WRITE whose payload stays in guest RAM (fs/proto.h). The segments
 * are checked against the RAM's size and read into ram_buf behind a copy of the
 * fuse_write_in; that is then an ordinary WRITE, with every check op_write makes. */
static int op_write_ref(struct fs_req *r)
{
	const struct fuse_write_in *in = fs_req_get(r, 0, sizeof(*in));
	const struct k8fs_ref *ref = fs_req_get(r, sizeof(*in), sizeof(*ref));
	const struct k8fs_seg *seg;
	struct fs_req w;
	int e;

	if (!in || !ref || ref->version != K8FS_WIRE_VERSION || !ref->nseg ||
	    ref->nseg > K8FS_MAX_SEGS || in->size > K8FS_MAX_WRITE)
		return -EINVAL;
	seg = fs_req_get(r, sizeof(*in) + sizeof(*ref), ref->nseg * sizeof(*seg));
	if (!seg)
		return -EINVAL;
	memcpy(r->c->ram_buf, in, sizeof(*in));
	e = fs_ram_gather(r->c, seg, ref->nseg, r->c->ram_buf + sizeof(*in), in->size);
	if (e) {
		r->c->st.ram_errors++;
		return e;
	}
	r->c->st.ram_writes++;
	w = *r;
	w.opcode = FUSE_WRITE;
	w.body = r->c->ram_buf;
	w.blen = sizeof(*in) + in->size;
	e = op_write(&w);
	r->olen = w.olen;
	return e;
}

/* K8FS_OP_HELLO: what this host serves beyond FUSE (fs/proto.h). */
static int op_hello(struct fs_req *r)
{
	const struct k8fs_hello_in *in = fs_req_get(r, 0, sizeof(*in));
	struct k8fs_hello_out *o;

	if (!in)
		return -EINVAL;
	o = reply(r, sizeof(*o));
	o->version = K8FS_WIRE_VERSION;
	o->caps = r->c->ram_fd >= 0 ? K8FS_CAP_RAM : 0;
	o->ram_size = r->c->ram_fd >= 0 ? r->c->ram_size : 0;
	return 0;
}

static int op_statfs(struct fs_req *r)
{
	struct fuse_statfs_out *o;
	struct statfs sf;
	struct fs_node *n = NULL;
	int fd;

	if (r->nodeid == K8FS_ROOT_ID) {
		fd = r->c->nmounts ? r->c->mounts[0].fd : -1;
	} else {
		int e = node_of(r, r->nodeid, &n);
		if (e)
			return e;
		fd = n->fd;
	}
	o = reply(r, sizeof(*o));
	if (fd < 0) {
		o->st.namelen = 255;
		o->st.bsize = o->st.frsize = 4096;
		return 0;
	}
	if (fstatfs(fd, &sf) < 0)
		return -errno;
	o->st.blocks = sf.f_blocks;
	o->st.bfree = sf.f_bfree;
	o->st.bavail = sf.f_bavail;
	o->st.files = sf.f_files;
	o->st.ffree = sf.f_ffree;
	o->st.bsize = (uint32_t)sf.f_bsize;
	o->st.namelen = 255;
	o->st.frsize = (uint32_t)sf.f_frsize;
	return 0;
}

static int op_release(struct fs_req *r)
{
	const struct fuse_release_in *in = fs_req_get(r, 0, sizeof(*in));

	if (!in)
		return -EINVAL;
	if (!fs_handle_get(r->c, in->fh))
		return -EBADF;
	fs_handle_close(r->c, in->fh);
	return 0;
}

static int op_fsync(struct fs_req *r)
{
	const struct fuse_fsync_in *in = fs_req_get(r, 0, sizeof(*in));
	struct fs_handle *h;

	if (!in)
		return -EINVAL;
	if (!(h = fs_handle_get(r->c, in->fh)))
		return -EBADF;
	if (h->fd < 0)
		return h->mount == UINT32_MAX ? 0 : -ESTALE;
	if (((in->fsync_flags & 1) ? fdatasync(h->fd) : fsync(h->fd)) < 0)
		return -errno;
	return 0;
}

static int op_flush(struct fs_req *r)
{
	const struct fuse_flush_in *in = fs_req_get(r, 0, sizeof(*in));

	if (!in)
		return -EINVAL;
	return fs_handle_get(r->c, in->fh) ? 0 : -EBADF;
}

static int op_init(struct fs_req *r)
{
	const struct fuse_init_in *in = fs_req_get(r, 0, 16);   /* major..flags: 7.6+ */
	struct fuse_init_out *o;
	uint32_t want = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_MAX_PAGES |
			FUSE_PARALLEL_DIROPS | FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO |
			FUSE_ASYNC_DIO;

	if (!in)
		return -EINVAL;
	o = reply(r, sizeof(*o));
	o->major = FUSE_KERNEL_VERSION;
	o->minor = FUSE_KERNEL_MINOR_VERSION;
	if (in->major > 7)
		return 0;                /* the kernel retries with 7 */
	if (in->major < 7 || in->minor < 23)
		return -EPROTO;
	r->c->proto_minor = in->minor < FUSE_KERNEL_MINOR_VERSION ? in->minor
			    : FUSE_KERNEL_MINOR_VERSION;
	o->max_readahead = in->max_readahead < K8FS_MAX_WRITE ? in->max_readahead
			   : K8FS_MAX_WRITE;
	o->flags = in->flags & want;
	o->max_background = 64;
	o->congestion_threshold = 48;
	o->max_write = K8FS_MAX_WRITE;
	o->time_gran = 1;
	o->max_pages = K8FS_MAX_PAGES;
	return 0;
}

static int op_opendir(struct fs_req *r)
{
	struct fs_node *n;
	struct fs_handle *h;
	struct fuse_open_out *o;
	uint64_t fh;
	int e, fd = -1;
	uint32_t mount = UINT32_MAX;

	if (r->nodeid != K8FS_ROOT_ID) {
		if ((e = dir_of(r, r->nodeid, &n)))
			return e;
		fd = fs_reopen(r->c, n->fd, n->type, O_RDONLY | O_DIRECTORY);
		if (fd < 0)
			return fd;
		mount = n->mount;
	}
	if ((e = fs_handle_new(r->c, &fh))) {
		if (fd >= 0)
			close(fd);
		return e;
	}
	h = fs_handle_get(r->c, fh);
	h->dir = true;
	h->fd = fd;
	h->mount = mount;
	h->nodeid = r->nodeid;
	o = reply(r, sizeof(*o));
	o->fh = fh;
	return 0;
}

/* Append one entry to a READDIR(PLUS) reply if it fits; 0 = did not fit. */
static size_t dirent_put(uint8_t *buf, size_t used, size_t cap, bool plus, uint64_t ino,
			 uint64_t off, uint32_t type, const char *name, size_t nl,
			 const struct fuse_entry_out *eo)
{
	size_t sz = plus ? FUSE_DIRENTPLUS_SIZE(&(struct fuse_direntplus){
				   .dirent = { .namelen = (uint32_t)nl } })
			 : FUSE_DIRENT_SIZE(&(struct fuse_dirent){ .namelen = (uint32_t)nl });
	struct fuse_dirent *d;

	if (sz > cap - used)
		return 0;
	memset(buf + used, 0, sz);
	if (plus) {
		struct fuse_direntplus *dp = (struct fuse_direntplus *)(buf + used);
		if (eo)
			dp->entry_out = *eo;
		d = &dp->dirent;
	} else {
		d = (struct fuse_dirent *)(buf + used);
	}
	d->ino = ino;
	d->off = off;
	d->namelen = (uint32_t)nl;
	d->type = type;
	memcpy(d->name, name, nl);
	return sz;
}

static bool dot_or_dotdot(const char *n)
{
	return n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'));
}

/* How much room a name needs; the dirent size is computed before any lookup so that a
 * node is only counted when its entry is actually sent. */
static size_t dirent_size(bool plus, size_t nl)
{
	return plus ? FUSE_DIRENTPLUS_SIZE(&(struct fuse_direntplus){
			      .dirent = { .namelen = (uint32_t)nl } })
		    : FUSE_DIRENT_SIZE(&(struct fuse_dirent){ .namelen = (uint32_t)nl });
}

static int readdir_root(struct fs_req *r, uint64_t off, size_t cap, bool plus)
{
	uint8_t *buf = r->out + OUT_HDR;
	size_t used = 0;

	for (uint64_t i = off; i < 2 + (uint64_t)r->c->nmounts; i++) {
		char name[16];
		struct fuse_entry_out eo;
		struct fs_node *n = NULL;
		struct stat st;
		size_t sz;

		if (i == 0)
			strcpy(name, ".");
		else if (i == 1)
			strcpy(name, "..");
		else
			snprintf(name, sizeof(name), "%u", (unsigned)(i - 2));
		if (dirent_size(plus, strlen(name)) > cap - used)
			break;
		memset(&eo, 0, sizeof(eo));
		if (plus && i >= 2 && mount_root_lookup(r, (int)(i - 2), &n, &st) == 0)
			entry_fill(&eo, n, &st);
		sz = dirent_put(buf, used, cap, plus, i >= 2 ? i : K8FS_ROOT_ID, i + 1, DT_DIR, name,
				strlen(name), &eo);
		used += sz;
	}
	r->olen = used;
	return 0;
}

static int op_readdir(struct fs_req *r, bool plus)
{
	const struct fuse_read_in *in = fs_req_get(r, 0, sizeof(*in));
	struct fs_handle *h;
	struct fs_node *dir;
	uint8_t *buf = r->out + OUT_HDR;
	size_t cap, used = 0;

	if (!in)
		return -EINVAL;
	h = fs_handle_get(r->c, in->fh);
	if (!h || !h->dir)
		return -EBADF;
	cap = in->size < K8FS_MAX_READDIR ? in->size : K8FS_MAX_READDIR;
	if (h->mount == UINT32_MAX)
		return readdir_root(r, in->offset, cap, plus);
	if (h->fd < 0)
		return -ESTALE;
	/* READDIRPLUS needs the directory's node to look names up in */
	dir = fs_node_get(r->c, h->nodeid);
	if (!dir || dir->fd < 0 || dir->mount != h->mount || dir->type != S_IFDIR)
		dir = NULL;
	if (in->offset > INT64_MAX)
		return -EINVAL;
	if (lseek(h->fd, (off_t)in->offset, SEEK_SET) < 0)
		return -errno;
	for (;;) {
		long got = syscall(SYS_getdents64, h->fd, r->c->dents, 32768);
		size_t pos = 0;

		if (got < 0)
			return used ? (r->olen = used, 0) : -errno;
		if (got == 0)
			break;
		while (pos + 19 < (size_t)got) {
			struct { uint64_t ino; int64_t off; uint16_t reclen; uint8_t type; } de;
			const char *name;
			struct fuse_entry_out eo;
			struct fs_node *n;
			struct stat st;
			size_t nl;

			memcpy(&de, r->c->dents + pos, 19);
			name = (const char *)r->c->dents + pos + 19;
			if (de.reclen < 20 || pos + de.reclen > (size_t)got)
				return -EIO;
			nl = strnlen(name, de.reclen - 19);
			if (dirent_size(plus && dir, nl) > cap - used) {
				r->olen = used;
				return 0;
			}
			memset(&eo, 0, sizeof(eo));
			if (plus && dir && !dot_or_dotdot(name) &&
			    lookup_name(r->c, dir, name, &n, &st) == 0)
				entry_fill(&eo, n, &st);
			used += dirent_put(buf, used, cap, plus && dir, de.ino, (uint64_t)de.off,
					   de.type, name, nl, &eo);
			pos += de.reclen;
		}
	}
	r->olen = used;
	return 0;
}

static int op_fallocate(struct fs_req *r)
{
	const struct fuse_fallocate_in *in = fs_req_get(r, 0, sizeof(*in));
	struct fs_handle *h;
	int e;

	if (!in)
		return -EINVAL;
	if (!(h = file_handle(r, in->fh, &e)))
		return e;
	if (r->c->mounts[h->mount].ro)
		return -EROFS;
	if (in->offset > INT64_MAX || in->length > INT64_MAX)
		return -EINVAL;
	if ((e = fs_space_check(r->c, h->mount,
				(in->mode & FALLOC_FL_PUNCH_HOLE) ? 0 : in->length)))
		return e;
	if (fallocate(h->fd, (int)in->mode, (off_t)in->offset, (off_t)in->length) < 0)
		return -errno;
	return 0;
}

static int op_lseek(struct fs_req *r)
{
	const struct fuse_lseek_in *in = fs_req_get(r, 0, sizeof(*in));
	struct fs_handle *h;
	struct fuse_lseek_out *o;
	off_t off;
	int e;

	if (!in)
		return -EINVAL;
	if (!(h = file_handle(r, in->fh, &e)))
		return e;
	if (in->whence != SEEK_DATA && in->whence != SEEK_HOLE)
		return -EINVAL;
	off = lseek(h->fd, (off_t)in->offset, (int)in->whence);
	if (off < 0)
		return -errno;
	o = reply(r, sizeof(*o));
	o->offset = (uint64_t)off;
	return 0;
}

static int op_copy_file_range(struct fs_req *r)
{
	const struct fuse_copy_file_range_in *in = fs_req_get(r, 0, sizeof(*in));
	struct fs_handle *hi, *ho;
	struct fuse_write_out *o;
	loff_t oi, oo;
	ssize_t n;
	int e;

	if (!in)
		return -EINVAL;
	if (!(hi = file_handle(r, in->fh_in, &e)) || !(ho = file_handle(r, in->fh_out, &e)))
		return e;
	if (r->c->mounts[ho->mount].ro)
		return -EROFS;
	if (in->off_in > INT64_MAX || in->off_out > INT64_MAX)
		return -EINVAL;
	if ((e = fs_space_check(r->c, ho->mount,
				in->len < MAX_COPY_RANGE ? in->len : MAX_COPY_RANGE)))
		return e;
	oi = (loff_t)in->off_in;
	oo = (loff_t)in->off_out;
	n = copy_file_range(hi->fd, &oi, ho->fd, &oo,
			    in->len < MAX_COPY_RANGE ? in->len : MAX_COPY_RANGE, 0);
	if (n < 0)
		return -errno;
	r->c->st.bytes_written += (uint64_t)n;
	o = reply(r, sizeof(*o));
	o->size = (uint32_t)n;
	return 0;
}

bool fs_op_modifies(uint32_t opcode)
{
	switch (opcode) {
	case FUSE_SETATTR: case FUSE_WRITE: case FUSE_CREATE: case FUSE_MKNOD:
	case FUSE_MKDIR: case FUSE_UNLINK: case FUSE_RMDIR: case FUSE_RENAME:
	case FUSE_RENAME2: case FUSE_LINK: case FUSE_SYMLINK: case FUSE_SETXATTR:
	case FUSE_REMOVEXATTR: case FUSE_FALLOCATE: case K8FS_OP_WRITEREF:
		return true;
	default:
		return false;
	}
}

int fs_op(struct fs_req *r)
{
	r->olen = 0;
	if (fs_op_modifies(r->opcode)) {
		/* read-only is decided here, before any op looks at the request */
		struct fs_node *n = fs_node_get(r->c, r->nodeid);
		if (r->nodeid == K8FS_ROOT_ID || (n && r->c->mounts[n->mount].ro))
			return -EROFS;
	}
	switch (r->opcode) {
	case FUSE_LOOKUP: return op_lookup(r);
	case FUSE_FORGET: return op_forget(r);
	case FUSE_BATCH_FORGET: return op_batch_forget(r);
	case FUSE_GETATTR: return op_getattr(r);
	case FUSE_SETATTR: return op_setattr(r);
	case FUSE_READLINK: return op_readlink(r);
	case FUSE_SYMLINK: return op_symlink(r);
	case FUSE_MKNOD: return op_mknod(r);
	case FUSE_MKDIR: return op_mkdir(r);
	case FUSE_UNLINK: return op_unlink(r, 0);
	case FUSE_RMDIR: return op_unlink(r, AT_REMOVEDIR);
	case FUSE_RENAME: {
		const struct fuse_rename_in *in = fs_req_get(r, 0, sizeof(*in));
		return in ? op_rename(r, in->newdir, 0, sizeof(*in)) : -EINVAL;
	}
	case FUSE_RENAME2: {
		const struct fuse_rename2_in *in = fs_req_get(r, 0, sizeof(*in));
		return in ? op_rename(r, in->newdir, in->flags, sizeof(*in)) : -EINVAL;
	}
	case FUSE_LINK: return op_link(r);
	case FUSE_OPEN: return op_open(r);
	case FUSE_READ: return op_read(r);
	case FUSE_WRITE: return op_write(r);
	case K8FS_OP_WRITEREF: return op_write_ref(r);
	case K8FS_OP_HELLO: return op_hello(r);
	case FUSE_STATFS: return op_statfs(r);
	case FUSE_RELEASE: case FUSE_RELEASEDIR: return op_release(r);
	case FUSE_FSYNC: case FUSE_FSYNCDIR: return op_fsync(r);
	case FUSE_FLUSH: return op_flush(r);
	case FUSE_INIT: return op_init(r);
	case FUSE_OPENDIR: return op_opendir(r);
	case FUSE_READDIR: return op_readdir(r, false);
	case FUSE_READDIRPLUS: return op_readdir(r, true);
	case FUSE_CREATE: return op_create(r);
	case FUSE_FALLOCATE: return op_fallocate(r);
	case FUSE_LSEEK: return op_lseek(r);
	case FUSE_COPY_FILE_RANGE: return op_copy_file_range(r);
	case FUSE_DESTROY: return 0;
	case FUSE_INTERRUPT: case FUSE_NOTIFY_REPLY: return K8FS_NOREPLY;
	/* xattrs are refused outright: ENOSYS makes the guest kernel stop asking (it asks
	 * for security.capability before every write otherwise) */
	default: return -ENOSYS;
	}
}
