/* SPDX-License-Identifier: Apache-2.0 */
/* test_fs_ops.c - kosa8-fs request dispatch against a temp share: name checks, symlink
 * and ".." escapes, read-only mounts, special files, cross-mount links, mode bits,
 * hostile request bytes, the resync scanner, save/load. */
#include "fs/fs.h"
#include "common/util.h"
#include "t.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

static char top[64], rw_dir[128], ro_dir[128], out_dir[128];
static uint8_t *rep;        /* last reply */
static size_t rep_len;
static uint64_t uniq = 1;

/* Build and dispatch one request; returns the reply's error (0 or -errno), or 1 when no
 * reply was produced. The payload is at rep + 16. */
static int req(struct fs_ctx *c, uint32_t op, uint64_t nodeid, const void *a, size_t al,
	       const void *b, size_t bl)
{
	static uint8_t msg[K8FS_MAX_MSG];
	struct fuse_in_header h = { .opcode = op, .unique = uniq++, .nodeid = nodeid };
	struct fuse_out_header oh;

	h.len = (uint32_t)(sizeof(h) + al + bl);
	memcpy(msg, &h, sizeof(h));
	if (al)
		memcpy(msg + sizeof(h), a, al);
	if (bl)
		memcpy(msg + sizeof(h) + al, b, bl);
	rep_len = fs_dispatch(c, msg, h.len, rep);
	if (!rep_len)
		return 1;
	memcpy(&oh, rep, sizeof(oh));
	if (oh.len != rep_len || oh.unique != h.unique)
		return -999;
	return oh.error;
}

#define NAME(s) s, sizeof(s)

static uint64_t lookup(struct fs_ctx *c, uint64_t dir, const char *name, int *err)
{
	int e = req(c, FUSE_LOOKUP, dir, name, strlen(name) + 1, NULL, 0);
	struct fuse_entry_out eo;

	if (err)
		*err = e;
	if (e)
		return 0;
	memcpy(&eo, rep + 16, sizeof(eo));
	return eo.nodeid;
}

static uint32_t lookup_mode(struct fs_ctx *c, uint64_t dir, const char *name)
{
	struct fuse_entry_out eo;

	if (req(c, FUSE_LOOKUP, dir, name, strlen(name) + 1, NULL, 0))
		return 0;
	memcpy(&eo, rep + 16, sizeof(eo));
	return eo.attr.mode;
}

static int do_open(struct fs_ctx *c, uint64_t node, uint32_t flags, uint64_t *fh)
{
	struct fuse_open_in in = { .flags = flags };
	struct fuse_open_out oo;
	int e = req(c, FUSE_OPEN, node, &in, sizeof(in), NULL, 0);

	if (!e) {
		memcpy(&oo, rep + 16, sizeof(oo));
		*fh = oo.fh;
	}
	return e;
}

static int do_create(struct fs_ctx *c, uint64_t dir, const char *name, uint32_t flags,
		     uint32_t mode, uint64_t *node, uint64_t *fh)
{
	struct fuse_create_in in = { .flags = flags, .mode = mode };
	struct fuse_entry_out eo;
	struct fuse_open_out oo;
	int e = req(c, FUSE_CREATE, dir, &in, sizeof(in), name, strlen(name) + 1);

	if (!e) {
		memcpy(&eo, rep + 16, sizeof(eo));
		memcpy(&oo, rep + 16 + sizeof(eo), sizeof(oo));
		*node = eo.nodeid;
		*fh = oo.fh;
	}
	return e;
}

static void write_host(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		write_full(fd, text, strlen(text));
		close(fd);
	}
}

static void setup_tree(void)
{
	char p[256];

	strcpy(top, "/tmp/k8fs-unit-XXXXXX");
	if (!mkdtemp(top))
		abort();
	snprintf(rw_dir, sizeof(rw_dir), "%s/rw", top);
	snprintf(ro_dir, sizeof(ro_dir), "%s/ro", top);
	snprintf(out_dir, sizeof(out_dir), "%s/outside", top);
	mkdir(rw_dir, 0755);
	mkdir(ro_dir, 0755);
	mkdir(out_dir, 0755);
	snprintf(p, sizeof(p), "%s/secret", out_dir);
	write_host(p, "SECRET");
	snprintf(p, sizeof(p), "%s/abs", rw_dir);
	symlink(out_dir, p);                       /* absolute, to outside */
	snprintf(p, sizeof(p), "%s/rel", rw_dir);
	symlink("../outside/secret", p);           /* relative, to outside */
	snprintf(p, sizeof(p), "%s/fifo", rw_dir);
	mkfifo(p, 0666);
	snprintf(p, sizeof(p), "%s/d", rw_dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/d/inner", rw_dir);
	write_host(p, "inner");
	snprintf(p, sizeof(p), "%s/ro-file", ro_dir);
	write_host(p, "read only");
	snprintf(p, sizeof(p), "%s/sub", ro_dir);
	mkdir(p, 0755);
}

static void ctx_open(struct fs_ctx *c)
{
	memset(c, 0, sizeof(*c));
	c->proc_fd = -1;
	CHECK_EQ_INT(fs_mount_add(c, rw_dir, false), 0);
	CHECK_EQ_INT(fs_mount_add(c, ro_dir, true), 0);
	CHECK_EQ_INT(fs_ctx_init(c), 0);
}

static void test_init_and_root(struct fs_ctx *c)
{
	struct fuse_init_in in = { .major = 7, .minor = 37, .max_readahead = 131072,
				   .flags = 0xffffffffu };
	struct fuse_init_out o;
	int e;

	CHECK_EQ_INT(req(c, FUSE_INIT, 0, &in, sizeof(in), NULL, 0), 0);
	memcpy(&o, rep + 16, sizeof(o));
	CHECK_EQ_INT(o.major, 7);
	CHECK(o.max_write >= 256 * 1024);
	CHECK(o.flags & FUSE_MAX_PAGES);
	CHECK(!(o.flags & FUSE_WRITEBACK_CACHE));
	CHECK(!(o.flags & FUSE_POSIX_LOCKS));
	CHECK_EQ_INT(lookup(c, 1, "0", NULL), 2);
	CHECK_EQ_INT(lookup(c, 1, "1", NULL), 3);
	lookup(c, 1, "2", &e);
	CHECK_EQ_INT(e, -ENOENT);
	lookup(c, 1, "00", &e);
	CHECK_EQ_INT(e, -ENOENT);
	lookup(c, 1, "..", &e);
	CHECK_EQ_INT(e, -ENOENT);
	/* the synthetic root is read-only */
	struct fuse_mkdir_in mi = { .mode = 0755 };
	CHECK_EQ_INT(req(c, FUSE_MKDIR, 1, &mi, sizeof(mi), NAME("x")), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_GETATTR, 1, &(struct fuse_getattr_in){ 0 },
			 sizeof(struct fuse_getattr_in), NULL, 0), 0);
	/* timeouts: names and attributes cached for a second (the agent drops a file's
	 * attributes on each OPEN; docs/shared-folders.md), never a negative entry */
	{
		struct fuse_entry_out eo;
		struct fuse_attr_out ao;

		CHECK_EQ_INT(req(c, FUSE_LOOKUP, 2, NAME("d"), NULL, 0), 0);
		memcpy(&eo, rep + 16, sizeof(eo));
		CHECK_EQ_INT(eo.entry_valid, K8FS_ENTRY_TIMEOUT);
		CHECK_EQ_INT(eo.attr_valid, K8FS_ATTR_TIMEOUT);
		CHECK(K8FS_ATTR_TIMEOUT <= 1);
		CHECK_EQ_INT(req(c, FUSE_GETATTR, eo.nodeid, &(struct fuse_getattr_in){ 0 },
				 sizeof(struct fuse_getattr_in), NULL, 0), 0);
		memcpy(&ao, rep + 16, sizeof(ao));
		CHECK_EQ_INT(ao.attr_valid, K8FS_ATTR_TIMEOUT);
		CHECK_EQ_INT(req(c, FUSE_FORGET, eo.nodeid, &(struct fuse_forget_in){ .nlookup = 1 },
				 sizeof(struct fuse_forget_in), NULL, 0), 1);
		lookup(c, 2, "absent", &e);
		CHECK_EQ_INT(e, -ENOENT);
	}
}

static void test_names(struct fs_ctx *c)
{
	char longname[300];
	int e;

	lookup(c, 2, "", &e);
	CHECK_EQ_INT(e, -EINVAL);
	lookup(c, 2, ".", &e);
	CHECK_EQ_INT(e, -EINVAL);
	lookup(c, 2, "..", &e);
	CHECK_EQ_INT(e, -EINVAL);
	lookup(c, 2, "d/inner", &e);
	CHECK_EQ_INT(e, -EINVAL);
	lookup(c, 2, "/etc", &e);
	CHECK_EQ_INT(e, -EINVAL);
	memset(longname, 'a', 256);
	longname[256] = 0;
	lookup(c, 2, longname, &e);
	CHECK_EQ_INT(e, -ENAMETOOLONG);
	/* a name without its NUL inside the message */
	CHECK_EQ_INT(req(c, FUSE_LOOKUP, 2, "d", 1, NULL, 0), -EINVAL);
	/* ".." under a mount root through a real directory is refused too */
	uint64_t d = lookup(c, 2, "d", &e);
	CHECK_EQ_INT(e, 0);
	lookup(c, d, "..", &e);
	CHECK_EQ_INT(e, -EINVAL);
	CHECK(lookup(c, d, "inner", &e) > 0);
}

static void test_symlinks_and_special(struct fs_ctx *c)
{
	uint64_t n, fh;
	int e;

	/* host-made symlinks are symlink nodes; their text goes to the guest */
	n = lookup(c, 2, "abs", &e);
	CHECK_EQ_INT(e, 0);
	CHECK_EQ_INT(lookup_mode(c, 2, "abs") & S_IFMT, S_IFLNK);
	CHECK_EQ_INT(req(c, FUSE_READLINK, n, NULL, 0, NULL, 0), 0);
	CHECK(rep_len - 16 == strlen(out_dir) && !memcmp(rep + 16, out_dir, strlen(out_dir)));
	CHECK_EQ_INT(do_open(c, n, O_RDONLY, &fh), -EACCES);
	lookup(c, n, "secret", &e);              /* never walked through on the host */
	CHECK_EQ_INT(e, -ENOTDIR);
	n = lookup(c, 2, "rel", &e);
	CHECK_EQ_INT(e, 0);
	CHECK_EQ_INT(do_open(c, n, O_RDONLY, &fh), -EACCES);
	CHECK_EQ_INT(do_open(c, n, O_WRONLY, &fh), -EACCES);
	/* a guest-made symlink is stored as text and never followed either */
	CHECK_EQ_INT(req(c, FUSE_SYMLINK, 2, NAME("etc"), NAME("/etc")), 0);
	n = lookup(c, 2, "etc", &e);
	lookup(c, n, "passwd", &e);
	CHECK_EQ_INT(e, -ENOTDIR);
	{
		char buf[64], p[256];
		snprintf(p, sizeof(p), "%s/etc", rw_dir);
		ssize_t l = readlink(p, buf, sizeof(buf));
		CHECK(l == 4 && !memcmp(buf, "/etc", 4));
	}
	/* creating over a symlink opens nothing: it exists, and it is not a regular file */
	CHECK_EQ_INT(do_create(c, 2, "rel", O_WRONLY, 0644, &n, &fh), -EACCES);
	CHECK_EQ_INT(do_create(c, 2, "rel", O_WRONLY | O_EXCL, 0644, &n, &fh), -EEXIST);
	/* a host-made FIFO is never opened (that could block) */
	n = lookup(c, 2, "fifo", &e);
	CHECK_EQ_INT(e, 0);
	CHECK_EQ_INT(do_open(c, n, O_RDONLY, &fh), -EACCES);
	CHECK_EQ_INT(do_create(c, 2, "fifo", O_WRONLY, 0644, &n, &fh), -EACCES);
	/* mknod: regular files only */
	struct fuse_mknod_in mk = { .mode = S_IFIFO | 0644 };
	CHECK_EQ_INT(req(c, FUSE_MKNOD, 2, &mk, sizeof(mk), NAME("p")), -EPERM);
	mk.mode = S_IFCHR | 0644;
	mk.rdev = makedev(1, 3);
	CHECK_EQ_INT(req(c, FUSE_MKNOD, 2, &mk, sizeof(mk), NAME("null")), -EPERM);
	mk.mode = S_IFBLK | 0644;
	CHECK_EQ_INT(req(c, FUSE_MKNOD, 2, &mk, sizeof(mk), NAME("blk")), -EPERM);
	mk.mode = S_IFSOCK | 0644;
	CHECK_EQ_INT(req(c, FUSE_MKNOD, 2, &mk, sizeof(mk), NAME("sock")), -EPERM);
	mk.mode = S_IFREG | 04755;
	CHECK_EQ_INT(req(c, FUSE_MKNOD, 2, &mk, sizeof(mk), NAME("plain")), 0);
	{
		struct stat st;
		char p[256];
		snprintf(p, sizeof(p), "%s/plain", rw_dir);
		CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0755);
		snprintf(p, sizeof(p), "%s/p", rw_dir);
		CHECK(lstat(p, &st) < 0);
	}
}

static void test_files(struct fs_ctx *c)
{
	uint64_t n, n2, fh, fh2;
	struct stat st;
	char p[256];
	int e;

	CHECK_EQ_INT(do_create(c, 2, "new", O_RDWR, S_IFREG | 06777, &n, &fh), 0);
	snprintf(p, sizeof(p), "%s/new", rw_dir);
	CHECK(lstat(p, &st) == 0);
	CHECK_EQ_INT(st.st_mode & 07777, 0777);           /* no set-user/group-ID */
	CHECK_EQ_INT(st.st_uid, geteuid());
	struct fuse_write_in wi = { .fh = fh, .offset = 0, .size = 5 };
	CHECK_EQ_INT(req(c, FUSE_WRITE, n, &wi, sizeof(wi), "hello", 5), 0);
	CHECK_EQ_INT(((struct fuse_write_out *)(rep + 16))->size, 5);
	/* a WRITE whose size claims more bytes than the message has */
	wi.size = 1000;
	CHECK_EQ_INT(req(c, FUSE_WRITE, n, &wi, sizeof(wi), "hello", 5), -EINVAL);
	struct fuse_read_in ri = { .fh = fh, .offset = 1, .size = 100 };
	CHECK_EQ_INT(req(c, FUSE_READ, n, &ri, sizeof(ri), NULL, 0), 0);
	CHECK(rep_len == 16 + 4 && !memcmp(rep + 16, "ello", 4));
	ri.size = 0xffffffffu;                            /* capped at max_read */
	CHECK_EQ_INT(req(c, FUSE_READ, n, &ri, sizeof(ri), NULL, 0), 0);
	ri.fh = 9999;
	CHECK_EQ_INT(req(c, FUSE_READ, n, &ri, sizeof(ri), NULL, 0), -EBADF);
	/* a replayed CREATE without O_EXCL opens the existing file */
	CHECK_EQ_INT(do_create(c, 2, "new", O_RDWR, 0644, &n2, &fh2), 0);
	CHECK_EQ_INT(n2, n);
	CHECK(fh2 != fh);
	CHECK_EQ_INT(do_create(c, 2, "new", O_RDWR | O_EXCL, 0644, &n2, &fh2), -EEXIST);
	/* the host changes the file: the next read sees it */
	write_host(p, "HOST!");
	ri = (struct fuse_read_in){ .fh = fh, .size = 100 };
	CHECK_EQ_INT(req(c, FUSE_READ, n, &ri, sizeof(ri), NULL, 0), 0);
	CHECK(rep_len == 21 && !memcmp(rep + 16, "HOST!", 5));
	/* setattr: set-ID bits dropped, chown ignored, truncate */
	struct fuse_setattr_in sa = { .valid = FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_SIZE,
				      .mode = S_IFREG | 06755, .uid = 1234, .gid = 1234,
				      .size = 2 };
	CHECK_EQ_INT(req(c, FUSE_SETATTR, n, &sa, sizeof(sa), NULL, 0), 0);
	CHECK(lstat(p, &st) == 0);
	CHECK_EQ_INT(st.st_mode & 07777, 0755);
	CHECK_EQ_INT(st.st_uid, geteuid());
	CHECK_EQ_INT(st.st_size, 2);
	struct fuse_release_in rl = { .fh = fh };
	CHECK_EQ_INT(req(c, FUSE_RELEASE, n, &rl, sizeof(rl), NULL, 0), 0);
	CHECK_EQ_INT(req(c, FUSE_RELEASE, n, &rl, sizeof(rl), NULL, 0), -EBADF);
	rl.fh = fh2;
	req(c, FUSE_RELEASE, n, &rl, sizeof(rl), NULL, 0);
	/* mkdir keeps the sticky bit, drops set-group-ID */
	struct fuse_mkdir_in mi = { .mode = 03777 };
	CHECK_EQ_INT(req(c, FUSE_MKDIR, 2, &mi, sizeof(mi), NAME("dd")), 0);
	snprintf(p, sizeof(p), "%s/dd", rw_dir);
	CHECK(lstat(p, &st) == 0 && S_ISDIR(st.st_mode));
	CHECK_EQ_INT(st.st_mode & 07777, 01777);
	/* rename within the mount, then flags: whiteout never */
	CHECK_EQ_INT(req(c, FUSE_RENAME, 2, &(struct fuse_rename_in){ .newdir = 2 },
			 sizeof(struct fuse_rename_in), "dd\0ee", 6), 0);
	struct fuse_rename2_in r2 = { .newdir = 2, .flags = RENAME_WHITEOUT };
	CHECK_EQ_INT(req(c, FUSE_RENAME2, 2, &r2, sizeof(r2), "ee\0ff", 6), -EINVAL);
	r2.flags = RENAME_NOREPLACE;
	CHECK_EQ_INT(req(c, FUSE_RENAME2, 2, &r2, sizeof(r2), "ee\0new", 7), -EEXIST);
	r2.flags = RENAME_EXCHANGE;
	CHECK_EQ_INT(req(c, FUSE_RENAME2, 2, &r2, sizeof(r2), "ee\0new", 7), 0);
	r2.flags = 0;
	CHECK_EQ_INT(req(c, FUSE_RENAME2, 2, &r2, sizeof(r2), "ee\0..", 6), -EINVAL);
	CHECK_EQ_INT(req(c, FUSE_UNLINK, 2, NAME("ee"), NULL, 0), 0);
	CHECK_EQ_INT(req(c, FUSE_RMDIR, 2, NAME("new"), NULL, 0), 0);
	CHECK_EQ_INT(req(c, FUSE_UNLINK, 2, NAME(".."), NULL, 0), -EINVAL);
	/* hard link within the mount */
	n = lookup(c, 2, "plain", &e);
	CHECK_EQ_INT(req(c, FUSE_LINK, 2, &(struct fuse_link_in){ .oldnodeid = n },
			 sizeof(struct fuse_link_in), NAME("plain2")), 0);
	CHECK_EQ_INT(((struct fuse_entry_out *)(rep + 16))->nodeid, n);
	/* xattrs: none */
	CHECK_EQ_INT(req(c, FUSE_GETXATTR, n, &(struct fuse_getxattr_in){ .size = 64 },
			 sizeof(struct fuse_getxattr_in), NAME("user.x")), -ENOSYS);
}

/* issue 30: what the guest's speed rests on. A write-only open bypasses the guest's page
 * cache (FOPEN_DIRECT_IO), nothing else does; attributes carry st_blksize = max_write;
 * a RELEASE the agent already answered (unique 0) closes the handle and gets no reply. */
static void test_fast_path(struct fs_ctx *c)
{
	struct fuse_open_out oo;
	struct fuse_entry_out eo;
	uint64_t n, fh, fh2;
	uint8_t msg[64];

	CHECK_EQ_INT(do_create(c, 2, "wo", O_WRONLY, 0644, &n, &fh), 0);
	memcpy(&eo, rep + 16, sizeof(eo));
	memcpy(&oo, rep + 16 + sizeof(eo), sizeof(oo));
	CHECK_EQ_INT(oo.open_flags, FOPEN_DIRECT_IO);
	CHECK_EQ_INT(eo.attr.blksize, K8FS_IO_BLKSIZE);
	CHECK_EQ_INT(do_create(c, 2, "rw", O_RDWR, 0644, &n, &fh2), 0);
	memcpy(&oo, rep + 16 + sizeof(eo), sizeof(oo));
	CHECK_EQ_INT(oo.open_flags, 0);
	CHECK_EQ_INT(do_open(c, n, O_RDONLY, &fh2), 0);
	CHECK_EQ_INT(((struct fuse_open_out *)(rep + 16))->open_flags, 0);
	CHECK_EQ_INT(do_open(c, n, O_WRONLY | O_APPEND, &fh2), 0);
	CHECK_EQ_INT(((struct fuse_open_out *)(rep + 16))->open_flags, FOPEN_DIRECT_IO);
	CHECK_EQ_INT(req(c, FUSE_GETATTR, n, &(struct fuse_getattr_in){ 0 },
			 sizeof(struct fuse_getattr_in), NULL, 0), 0);
	CHECK_EQ_INT(((struct fuse_attr_out *)(rep + 16))->attr.blksize, K8FS_IO_BLKSIZE);
	/* RELEASE with unique 0: carried out, never answered */
	struct fuse_in_header h = { .len = sizeof(h) + sizeof(struct fuse_release_in),
				    .opcode = FUSE_RELEASE, .unique = 0, .nodeid = n };
	struct fuse_release_in rl = { .fh = fh2 };
	memcpy(msg, &h, sizeof(h));
	memcpy(msg + sizeof(h), &rl, sizeof(rl));
	CHECK_EQ_INT(fs_dispatch(c, msg, h.len, rep), 0);
	CHECK_EQ_INT(req(c, FUSE_RELEASE, n, &rl, sizeof(rl), NULL, 0), -EBADF);
	rl.fh = fh;
	CHECK_EQ_INT(req(c, FUSE_RELEASE, n, &rl, sizeof(rl), NULL, 0), 0);
}

/* A WRITEREF (fs/proto.h) of the given segments: the WRITE's fuse_write_in, then the
 * reference header and the list. */
static int write_ref(struct fs_ctx *c, uint64_t node, uint64_t fh, uint64_t off, uint32_t size,
		     uint32_t version, uint32_t nseg, const struct k8fs_seg *seg, size_t segbytes)
{
	static uint8_t body[sizeof(struct k8fs_ref) + 2 * K8FS_MAX_SEGS * sizeof(struct k8fs_seg)];
	struct fuse_write_in wi = { .fh = fh, .offset = off, .size = size };
	struct k8fs_ref ref = { .version = version, .nseg = nseg };

	memcpy(body, &ref, sizeof(ref));
	memcpy(body + sizeof(ref), seg, segbytes);
	return req(c, K8FS_OP_WRITEREF, node, &wi, sizeof(wi), body, sizeof(ref) + segbytes);
}

static off_t host_size(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -1 : st.st_size;
}

/* issue 30: the RAM data path. "Guest RAM" is two pages of this process (read through
 * our own /proc/self/mem, as kosa8-fs reads QEMU's), between a guard page and a canary
 * page; no segment list, however hostile, reaches either, and the checks come before
 * any byte is read or written. */
static void test_ram_path(struct fs_ctx *c)
{
	uint8_t *map = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			    -1, 0), *ram = map + 4096;
	struct k8fs_hello_in hi = { .version = K8FS_WIRE_VERSION };
	struct k8fs_hello_out ho;
	uint64_t n, fh, ron, rofh;
	char p[256], got[512];
	int fd, e;

	CHECK(map != MAP_FAILED);
	memset(map, 'G', 4096);
	memset(map + 3 * 4096, 'X', 4096);
	for (int i = 0; i < 8192; i++)
		ram[i] = (uint8_t)('a' + i % 23);
	CHECK_EQ_INT(do_create(c, 2, "refd", O_WRONLY, 0644, &n, &fh), 0);
	snprintf(p, sizeof(p), "%s/refd", rw_dir);
	struct k8fs_seg one = { .gpa = 0, .len = 10 };

	/* no RAM: HELLO says so, a WRITEREF is refused with ENXIO (the agent then resends) */
	CHECK_EQ_INT(req(c, K8FS_OP_HELLO, 0, &hi, sizeof(hi), NULL, 0), 0);
	memcpy(&ho, rep + 16, sizeof(ho));
	CHECK_EQ_INT(ho.version, K8FS_WIRE_VERSION);
	CHECK_EQ_INT(ho.caps, 0);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 10, 1, 1, &one, sizeof(one)), -ENXIO);
	CHECK_EQ_INT(req(c, K8FS_OP_HELLO, 0, NULL, 0, NULL, 0), -EINVAL);
	/* the window must be page-aligned and not wrap */
	fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK_EQ_INT(fs_ram_set(c, dup(fd), (uint64_t)(uintptr_t)ram + 1, 8192), -EINVAL);
	CHECK_EQ_INT(fs_ram_set(c, dup(fd), UINT64_MAX - 4095, 8192), -EINVAL);
	CHECK_EQ_INT(c->ram_fd, -1);
	CHECK_EQ_INT(fs_ram_set(c, fd, (uint64_t)(uintptr_t)ram, 8192), 0);
	CHECK_EQ_INT(req(c, K8FS_OP_HELLO, 0, &hi, sizeof(hi), NULL, 0), 0);
	memcpy(&ho, rep + 16, sizeof(ho));
	CHECK_EQ_INT(ho.caps, K8FS_CAP_RAM);
	CHECK_EQ_INT(ho.ram_size, 8192);

	/* two segments, the second across the page boundary: the file gets them in order */
	struct k8fs_seg two[2] = { { .gpa = 100, .len = 50 }, { .gpa = 4000, .len = 200 } };
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 250, 1, 2, two, sizeof(two)), 0);
	CHECK_EQ_INT(((struct fuse_write_out *)(rep + 16))->size, 250);
	int hf = open(p, O_RDONLY);
	CHECK(hf >= 0 && read(hf, got, sizeof(got)) == 250);
	CHECK(!memcmp(got, ram + 100, 50) && !memcmp(got + 50, ram + 4000, 200));
	close(hf);
	/* a list may repeat or overlap itself: it only names the guest's own bytes */
	struct k8fs_seg ov[2] = { { .gpa = 8182, .len = 10 }, { .gpa = 8182, .len = 10 } };
	CHECK_EQ_INT(write_ref(c, n, fh, 250, 20, 1, 2, ov, sizeof(ov)), 0);
	CHECK_EQ_INT(host_size(p), 270);

	/* hostile lists: refused (EFAULT) before a byte is read, the file unchanged */
	const struct k8fs_seg bad[] = {
		{ .gpa = 8192, .len = 1 },              /* just past the end */
		{ .gpa = 8191, .len = 2 },              /* across the end */
		{ .gpa = UINT64_MAX, .len = 1 },        /* gpa + len wraps */
		{ .gpa = UINT64_MAX - 4095, .len = 4096 },
		{ .gpa = 1, .len = UINT32_MAX },        /* huge length */
		{ .gpa = 0, .len = 0 },                 /* empty */
		{ .gpa = 0, .len = 10, .pad = 1 },
		{ .gpa = (uint64_t)(uintptr_t)ram, .len = 10 },   /* a host address */
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		if (bad[i].len != UINT32_MAX)
			CHECK_EQ_INT(write_ref(c, n, fh, 0, bad[i].len ? bad[i].len : 10, 1, 1,
					       &bad[i], sizeof(bad[i])), -EFAULT);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, K8FS_MAX_WRITE, 1, 1, &bad[4], sizeof(bad[4])),
		     -EFAULT);
	/* a size over max_write is refused before the list is looked at */
	CHECK_EQ_INT(write_ref(c, n, fh, 0, UINT32_MAX, 1, 1, &bad[4], sizeof(bad[4])), -EINVAL);
	/* lengths that do not add up to the WRITE's size, either way */
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 11, 1, 1, &one, sizeof(one)), -EFAULT);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 9, 1, 1, &one, sizeof(one)), -EFAULT);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 20, 1, 2, two, sizeof(two)), -EFAULT);
	/* a list longer than the message, no list, too many segments, another version */
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 10, 1, 100, &one, sizeof(one)), -EINVAL);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 10, 1, 0, &one, sizeof(one)), -EINVAL);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 10, 1, K8FS_MAX_SEGS + 1, &one, sizeof(one)), -EINVAL);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 10, 2, 1, &one, sizeof(one)), -EINVAL);
	struct fuse_write_in wi = { .fh = fh, .size = 10 };
	CHECK_EQ_INT(req(c, K8FS_OP_WRITEREF, n, &wi, sizeof(wi), NULL, 0), -EINVAL);
	CHECK_EQ_INT(host_size(p), 270);
	hf = open(p, O_RDONLY);
	CHECK(hf >= 0 && read(hf, got, sizeof(got)) == 270);
	CHECK(!memchr(got, 'G', 270) && !memchr(got, 'X', 270));
	close(hf);
	CHECK_EQ_INT(c->st.ram_errors, 12);   /* one ENXIO, 11 EFAULT; EINVAL is not counted */
	CHECK_EQ_INT(c->st.ram_writes, 2);
	/* the pure check on its own: exact end, one past, wrap */
	CHECK_EQ_INT(fs_ram_check(8192, &(struct k8fs_seg){ .gpa = 8191, .len = 1 }, 1, 1), 0);
	CHECK_EQ_INT(fs_ram_check(8192, &(struct k8fs_seg){ .gpa = 0, .len = 8192 }, 1, 8192), 0);
	CHECK_EQ_INT(fs_ram_check(8192, &(struct k8fs_seg){ .gpa = 0, .len = 8193 }, 1, 8193),
		     -EFAULT);
	CHECK_EQ_INT(fs_ram_check(0, &one, 1, 10), -EFAULT);

	/* read-only: refused before the list is looked at, as a WRITE is */
	ron = lookup(c, 3, "ro-file", &e);
	CHECK_EQ_INT(do_open(c, ron, O_RDONLY, &rofh), 0);
	CHECK_EQ_INT(write_ref(c, ron, rofh, 0, 10, 1, 1, &one, sizeof(one)), -EROFS);
	/* a handle of a read-only mount under a writable node: the handle's mount decides */
	CHECK_EQ_INT(write_ref(c, n, rofh, 0, 10, 1, 1, &one, sizeof(one)), -EROFS);
	/* the RAM went (the VM stopped): ENXIO again */
	munmap(map, 4 * 4096);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 10, 1, 1, &one, sizeof(one)), -ENXIO);
	fs_ram_set(c, -1, 0, 0);
	CHECK_EQ_INT(write_ref(c, n, fh, 0, 10, 1, 1, &one, sizeof(one)), -ENXIO);
	struct fuse_release_in rl = { .fh = fh };
	req(c, FUSE_RELEASE, n, &rl, sizeof(rl), NULL, 0);
	rl.fh = rofh;
	req(c, FUSE_RELEASE, ron, &rl, sizeof(rl), NULL, 0);
}

static void test_readonly_and_xdev(struct fs_ctx *c)
{
	uint64_t rofile, rosub, rwfile, fh, fhw, n;
	int e;

	rofile = lookup(c, 3, "ro-file", &e);
	CHECK_EQ_INT(e, 0);
	rosub = lookup(c, 3, "sub", &e);
	CHECK_EQ_INT(e, 0);
	CHECK_EQ_INT(do_open(c, rofile, O_WRONLY, &fh), -EROFS);
	CHECK_EQ_INT(do_open(c, rofile, O_RDWR, &fh), -EROFS);
	CHECK_EQ_INT(do_open(c, rofile, O_RDONLY | O_TRUNC, &fh), -EROFS);
	CHECK_EQ_INT(do_open(c, rofile, O_RDONLY, &fh), 0);
	CHECK_EQ_INT(do_create(c, 3, "x", O_WRONLY, 0644, &n, &fhw), -EROFS);
	struct fuse_write_in wi = { .fh = fh, .size = 1 };
	CHECK_EQ_INT(req(c, FUSE_WRITE, rofile, &wi, sizeof(wi), "x", 1), -EROFS);
	/* even with a rw nodeid in the header, the handle's mount decides */
	CHECK_EQ_INT(req(c, FUSE_WRITE, 2, &wi, sizeof(wi), "x", 1), -EROFS);
	struct fuse_setattr_in sa = { .valid = FATTR_SIZE, .size = 0 };
	CHECK_EQ_INT(req(c, FUSE_SETATTR, rofile, &sa, sizeof(sa), NULL, 0), -EROFS);
	sa.valid = FATTR_MODE;
	sa.mode = 0777;
	CHECK_EQ_INT(req(c, FUSE_SETATTR, rofile, &sa, sizeof(sa), NULL, 0), -EROFS);
	struct fuse_mkdir_in mi = { .mode = 0755 };
	CHECK_EQ_INT(req(c, FUSE_MKDIR, 3, &mi, sizeof(mi), NAME("x")), -EROFS);
	struct fuse_mknod_in mk = { .mode = S_IFREG | 0644 };
	CHECK_EQ_INT(req(c, FUSE_MKNOD, 3, &mk, sizeof(mk), NAME("x")), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_UNLINK, 3, NAME("ro-file"), NULL, 0), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_RMDIR, 3, NAME("sub"), NULL, 0), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_SYMLINK, 3, NAME("x"), NAME("y")), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_RENAME, 3, &(struct fuse_rename_in){ .newdir = 3 },
			 sizeof(struct fuse_rename_in), "ro-file\0y", 10), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_RENAME2, 3, &(struct fuse_rename2_in){ .newdir = 3 },
			 sizeof(struct fuse_rename2_in), "ro-file\0y", 10), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_LINK, 3, &(struct fuse_link_in){ .oldnodeid = rofile },
			 sizeof(struct fuse_link_in), NAME("y")), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_SETXATTR, rofile, &(struct fuse_setxattr_in){ .size = 1 },
			 sizeof(struct fuse_setxattr_in), "user.a\0v", 8), -EROFS);
	CHECK_EQ_INT(req(c, FUSE_REMOVEXATTR, rofile, NAME("user.a"), NULL, 0), -EROFS);
	struct fuse_fallocate_in fa = { .fh = fh, .length = 10 };
	CHECK_EQ_INT(req(c, FUSE_FALLOCATE, rofile, &fa, sizeof(fa), NULL, 0), -EROFS);
	/* copy_file_range into a read-only file */
	CHECK_EQ_INT(do_create(c, 2, "src", O_RDWR, 0644, &rwfile, &fhw), 0);
	struct fuse_copy_file_range_in cr = { .fh_in = fhw, .nodeid_out = rofile, .fh_out = fh,
					      .len = 10 };
	CHECK_EQ_INT(req(c, FUSE_COPY_FILE_RANGE, rwfile, &cr, sizeof(cr), NULL, 0), -EROFS);
	/* ...but out of one is fine */
	cr = (struct fuse_copy_file_range_in){ .fh_in = fh, .nodeid_out = rwfile, .fh_out = fhw,
					       .len = 100 };
	CHECK_EQ_INT(req(c, FUSE_COPY_FILE_RANGE, rofile, &cr, sizeof(cr), NULL, 0), 0);
	CHECK_EQ_INT(((struct fuse_write_out *)(rep + 16))->size, 9);
	/* the host file is untouched */
	{
		char buf[32] = { 0 }, p[256];
		snprintf(p, sizeof(p), "%s/ro-file", ro_dir);
		int fd = open(p, O_RDONLY);
		CHECK(fd >= 0 && read(fd, buf, sizeof(buf)) == 9 && !strcmp(buf, "read only"));
		close(fd);
	}
	/* across mounts: EXDEV */
	CHECK_EQ_INT(req(c, FUSE_LINK, 2, &(struct fuse_link_in){ .oldnodeid = rofile },
			 sizeof(struct fuse_link_in), NAME("stolen")), -EXDEV);
	CHECK_EQ_INT(req(c, FUSE_RENAME, 2, &(struct fuse_rename_in){ .newdir = rosub },
			 sizeof(struct fuse_rename_in), "src\0moved", 10), -EXDEV);
	CHECK_EQ_INT(req(c, FUSE_RENAME2, 2, &(struct fuse_rename2_in){ .newdir = 1 },
			 sizeof(struct fuse_rename2_in), "src\0moved", 10), -EROFS);
}

static void test_readdir(struct fs_ctx *c)
{
	uint64_t fh;
	struct fuse_open_out oo;
	struct fuse_read_in ri = { .size = 4096 };
	size_t off;
	int names = 0, found_inner = 0;

	CHECK_EQ_INT(req(c, FUSE_OPENDIR, 1, &(struct fuse_open_in){ 0 },
			 sizeof(struct fuse_open_in), NULL, 0), 0);
	memcpy(&oo, rep + 16, sizeof(oo));
	ri.fh = oo.fh;
	CHECK_EQ_INT(req(c, FUSE_READDIR, 1, &ri, sizeof(ri), NULL, 0), 0);
	for (off = 16; off + FUSE_NAME_OFFSET <= rep_len;) {
		struct fuse_dirent *d = (struct fuse_dirent *)(rep + off);
		names++;
		off += FUSE_DIRENT_SIZE(d);
	}
	CHECK_EQ_INT(names, 4);                    /* ".", "..", "0", "1" */
	CHECK_EQ_INT(req(c, FUSE_RELEASEDIR, 1, &(struct fuse_release_in){ .fh = oo.fh },
			 sizeof(struct fuse_release_in), NULL, 0), 0);

	uint64_t d = lookup(c, 2, "d", NULL);
	CHECK_EQ_INT(req(c, FUSE_OPENDIR, d, &(struct fuse_open_in){ 0 },
			 sizeof(struct fuse_open_in), NULL, 0), 0);
	memcpy(&oo, rep + 16, sizeof(oo));
	fh = oo.fh;
	ri = (struct fuse_read_in){ .fh = fh, .size = 4096 };
	CHECK_EQ_INT(req(c, FUSE_READDIRPLUS, d, &ri, sizeof(ri), NULL, 0), 0);
	for (off = 16; off + FUSE_NAME_OFFSET_DIRENTPLUS <= rep_len;) {
		struct fuse_direntplus *dp = (struct fuse_direntplus *)(rep + off);
		if (dp->dirent.namelen == 5 && !memcmp(dp->dirent.name, "inner", 5)) {
			found_inner = 1;
			CHECK(dp->entry_out.nodeid > 3);
			CHECK_EQ_INT(dp->entry_out.attr.size, 5);
		} else {
			CHECK_EQ_INT(dp->entry_out.nodeid, 0);  /* "." and ".." */
		}
		off += FUSE_DIRENTPLUS_SIZE(dp);
	}
	CHECK(found_inner);
	/* a buffer too small for anything: an empty answer, no node counted */
	ri.size = 10;
	CHECK_EQ_INT(req(c, FUSE_READDIRPLUS, d, &ri, sizeof(ri), NULL, 0), 0);
	CHECK_EQ_INT(rep_len, 16);
	CHECK_EQ_INT(req(c, FUSE_READ, d, &ri, sizeof(ri), NULL, 0), -EBADF);
}

/* Every opcode with every body length up to 200 of pseudo-random bytes, against real
 * node ids: no crash, every reply well formed. */
static void test_garbage(struct fs_ctx *c)
{
	uint8_t body[256];
	uint32_t s = 12345;
	int bad = 0;

	for (uint32_t op = 0; op < 64; op++) {
		if (op == FUSE_INIT)
			continue;
		for (size_t len = 0; len <= 200; len += 7) {
			for (size_t i = 0; i < len; i++) {
				s ^= s << 13; s ^= s >> 17; s ^= s << 5;
				body[i] = (uint8_t)s;
			}
			/* keep handles and offsets small so that some of them hit */
			if (len >= 8)
				body[1] = body[2] = body[3] = body[4] = body[5] = body[6] = body[7] = 0;
			int e = req(c, op, 2 + (s % 12), body, len, NULL, 0);
			if (e == -999)
				bad++;
			if (op == 1000)
				break;
		}
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(req(c, 4000, 2, NULL, 0, NULL, 0), -ENOSYS);
	CHECK_EQ_INT(req(c, FUSE_INTERRUPT, 2, "12345678", 8, NULL, 0), 1);
}

static void test_stream(void)
{
	struct fs_ctx c;
	uint8_t nonce[K8FS_NONCE_LEN], *p;
	size_t room;
	struct fuse_in_header sync = { .len = 56, .opcode = K8FS_OP_SYNC };
	struct fuse_in_header bad = { .len = 8, .opcode = FUSE_GETATTR, .unique = 5 };
	struct fuse_in_header big = { .len = K8FS_MAX_MSG + 1, .opcode = FUSE_WRITE, .unique = 6 };
	struct fuse_in_header ok = { .len = 40 + 16, .opcode = FUSE_GETATTR, .unique = 7,
				     .nodeid = 1 };
	struct fuse_out_header oh;

	ctx_open(&c);
	for (int i = 0; i < K8FS_NONCE_LEN; i++)
		nonce[i] = (uint8_t)(i * 7 + 1);
	fs_conn_reset(&c, nonce);
	memcpy(&oh, c.out, 16);
	CHECK_EQ_INT(oh.len, 32);
	CHECK_EQ_INT(oh.error, K8FS_NOTIFY_RESYNC);
	CHECK(!memcmp(c.out + 16, nonce, 16));
	c.out_len = 0;
	/* garbage, a SYNC with the wrong nonce, a request: all discarded before the SYNC */
	p = fs_conn_room(&c, &room);
	memset(p, 0xab, 1000);
	memcpy(p + 1000, &sync, 40);
	memset(p + 1040, 0x11, 16);
	memcpy(p + 1056, &ok, 40);
	memset(p + 1096, 0, 16);
	fs_conn_added(&c, 1112);
	CHECK_EQ_INT(fs_conn_step(&c), 0);
	CHECK(!c.synced);
	/* the real SYNC split in two reads, then a request */
	p = fs_conn_room(&c, &room);
	memcpy(p, &sync, 20);
	fs_conn_added(&c, 20);
	CHECK_EQ_INT(fs_conn_step(&c), 0);
	p = fs_conn_room(&c, &room);
	memcpy(p, (uint8_t *)&sync + 20, 20);
	memcpy(p + 20, nonce, 16);
	memcpy(p + 36, &ok, 40);
	memset(p + 76, 0, 16);
	fs_conn_added(&c, 92);
	CHECK_EQ_INT(fs_conn_step(&c), 1);
	CHECK(c.synced);
	CHECK_EQ_INT(fs_conn_step(&c), 1);
	memcpy(&oh, c.out, 16);
	CHECK_EQ_INT(oh.unique, 7);
	CHECK_EQ_INT(oh.error, 0);
	c.out_len = 0;
	CHECK_EQ_INT(fs_conn_step(&c), 0);
	/* too short, then too long: protocol errors */
	p = fs_conn_room(&c, &room);
	memcpy(p, &bad, 40);
	fs_conn_added(&c, 40);
	CHECK_EQ_INT(fs_conn_step(&c), -EPROTO);
	fs_conn_reset(&c, nonce);
	c.out_len = 0;
	c.synced = true;
	p = fs_conn_room(&c, &room);
	memcpy(p, &big, 40);
	fs_conn_added(&c, 40);
	CHECK_EQ_INT(fs_conn_step(&c), -EPROTO);
	CHECK_EQ_INT(c.st.protocol_errors, 2);
	fs_ctx_free(&c);
}

static void test_save_load(void)
{
	struct fs_ctx a, b;
	struct k8_err err = { 0 };
	char path[256], p[256];
	uint64_t d, inner, gone, fh, nn, nfh;
	struct fuse_read_in ri;
	int e;

	ctx_open(&a);
	d = lookup(&a, 2, "d", &e);
	inner = lookup(&a, d, "inner", &e);
	CHECK(inner > 0);
	snprintf(p, sizeof(p), "%s/gone", rw_dir);
	write_host(p, "x");
	gone = lookup(&a, 2, "gone", &e);
	CHECK_EQ_INT(do_open(&a, inner, O_RDONLY, &fh), 0);
	/* a directory renamed from inside: its children follow */
	CHECK_EQ_INT(req(&a, FUSE_RENAME, 2, &(struct fuse_rename_in){ .newdir = 2 },
			 sizeof(struct fuse_rename_in), "d\0d2", 5), 0);
	snprintf(path, sizeof(path), "%s/tables.json", top);
	CHECK_EQ_INT(fs_tables_save(&a, path, &err), 0);
	unlink(p);                                       /* gone before the rewind */

	ctx_open(&b);
	CHECK_EQ_INT(fs_tables_load(&b, path, &err), 0);
	CHECK(fs_node_get(&b, inner) && fs_node_get(&b, inner)->fd >= 0);
	CHECK_STR(fs_node_get(&b, inner)->path, "d2/inner");
	CHECK_EQ_INT(req(&b, FUSE_GETATTR, gone, &(struct fuse_getattr_in){ 0 },
			 sizeof(struct fuse_getattr_in), NULL, 0), -ESTALE);
	ri = (struct fuse_read_in){ .fh = fh, .size = 100 };
	CHECK_EQ_INT(req(&b, FUSE_READ, inner, &ri, sizeof(ri), NULL, 0), 0);
	CHECK(rep_len == 21 && !memcmp(rep + 16, "inner", 5));
	/* new ids never collide with loaded ones; a new handle is not a loaded fh */
	CHECK_EQ_INT(do_create(&b, 2, "after", O_RDWR, 0644, &nn, &nfh), 0);
	CHECK(nn >= a.next_id);
	CHECK(nfh != fh);
	/* lookups of a loaded node's inode find the same node */
	CHECK_EQ_INT(lookup(&b, d, "inner", &e), inner);
	CHECK_EQ_INT(fs_node_get(&b, inner)->nlookup, 2);
	/* FORGET frees it */
	struct fuse_forget_in fi = { .nlookup = 2 };
	CHECK_EQ_INT(req(&b, FUSE_FORGET, inner, &fi, sizeof(fi), NULL, 0), 1);
	CHECK(fs_node_get(&b, inner) == NULL);
	/* a broken file is refused, tables unchanged */
	write_host(path, "{\"nodes\":5}");
	CHECK(fs_tables_load(&b, path, &err) < 0);
	CHECK(fs_node_get(&b, d) != NULL);
	/* a hostile table: paths with "..", absolute, symlinks inside; all stale */
	write_host(path, "{\"version\":1,\"next_nodeid\":100,\"handles\":[],\"nodes\":["
		   "{\"nodeid\":50,\"mount\":0,\"path\":\"../outside/secret\",\"nlookup\":1},"
		   "{\"nodeid\":51,\"mount\":0,\"path\":\"/etc/passwd\",\"nlookup\":1},"
		   "{\"nodeid\":52,\"mount\":0,\"path\":\"abs/secret\",\"nlookup\":1},"
		   "{\"nodeid\":53,\"mount\":7,\"path\":\"x\",\"nlookup\":1},"
		   "{\"nodeid\":54,\"mount\":0,\"path\":\"d2/inner\",\"nlookup\":1}]}");
	CHECK_EQ_INT(fs_tables_load(&b, path, &err), 0);
	for (uint64_t id = 50; id <= 53; id++)
		CHECK(fs_node_get(&b, id) && fs_node_get(&b, id)->fd < 0);
	CHECK(fs_node_get(&b, 54) && fs_node_get(&b, 54)->fd >= 0);
	/* a handle whose node is gone is stale, never the synthetic root's listing */
	write_host(path, "{\"version\":1,\"next_nodeid\":100,\"nodes\":[],\"handles\":["
		   "{\"fh\":3,\"nodeid\":77,\"flags\":0,\"dir\":true},"
		   "{\"fh\":4,\"nodeid\":78,\"flags\":2,\"dir\":false}]}");
	CHECK_EQ_INT(fs_tables_load(&b, path, &err), 0);
	ri = (struct fuse_read_in){ .fh = 3, .size = 4096 };
	CHECK_EQ_INT(req(&b, FUSE_READDIR, 77, &ri, sizeof(ri), NULL, 0), -ESTALE);
	ri.fh = 4;
	CHECK_EQ_INT(req(&b, FUSE_READ, 78, &ri, sizeof(ri), NULL, 0), -ESTALE);
	struct fuse_write_in wi = { .fh = 4, .size = 1 };
	CHECK_EQ_INT(req(&b, FUSE_WRITE, 78, &wi, sizeof(wi), "x", 1), -ESTALE);
	CHECK(b.next_id >= 100);
	fs_ctx_free(&a);
	fs_ctx_free(&b);
}

/* The host disk reserve: the spec, and a reserve no file system can meet refusing
 * writes with ENOSPC while one of 0 lets them through. */
static void test_reserve(void)
{
	struct fs_ctx c;
	uint64_t b;
	unsigned pct;

	CHECK_EQ_INT(fs_reserve_parse("1G,5%", &b, &pct), 0);
	CHECK(b == 1ull << 30 && pct == 5);
	CHECK_EQ_INT(fs_reserve_parse("16M", &b, &pct), 0);
	CHECK(b == 16ull << 20 && pct == 0);
	CHECK_EQ_INT(fs_reserve_parse("10%", &b, &pct), 0);
	CHECK(b == 0 && pct == 10);
	CHECK_EQ_INT(fs_reserve_parse("", &b, &pct), 0);
	CHECK(fs_reserve_parse("x", &b, &pct) < 0);
	CHECK(fs_reserve_parse("95%", &b, &pct) < 0);
	CHECK(fs_reserve_parse("1Q", &b, &pct) < 0);
	CHECK(fs_reserve_parse("99999999999T", &b, &pct) < 0);
	CHECK(fs_reserve_parse("-1", &b, &pct) < 0);

	ctx_open(&c);
	CHECK_EQ_INT(fs_space_check(&c, 0, 1 << 20), 0);      /* no reserve */
	c.reserve_bytes = UINT64_MAX / 2;
	CHECK_EQ_INT(fs_space_check(&c, 0, 0), -ENOSPC);
	CHECK_EQ_INT(fs_space_check(&c, 1, 1), -ENOSPC);
	CHECK(c.st.enospc == 2);
	c.reserve_bytes = 0;
	c.reserve_pct = 0;
	CHECK_EQ_INT(fs_space_check(&c, 0, 1 << 20), 0);
	fs_ctx_free(&c);
}

int main(void)
{
	struct fs_ctx c;
	char cmd[128];

	rep = xmalloc(K8FS_MAX_MSG);
	umask(0);                 /* as kosa8-fs's main() does */
	setup_tree();
	ctx_open(&c);
	test_init_and_root(&c);
	test_names(&c);
	test_symlinks_and_special(&c);
	test_files(&c);
	test_fast_path(&c);
	test_ram_path(&c);
	test_readonly_and_xdev(&c);
	test_readdir(&c);
	test_garbage(&c);
	fs_ctx_free(&c);
	test_stream();
	test_save_load();
	test_reserve();
	/* nothing was ever written outside the share */
	{
		char p[256], buf[16] = { 0 };
		snprintf(p, sizeof(p), "%s/secret", out_dir);
		int fd = open(p, O_RDONLY);
		CHECK(fd >= 0 && read(fd, buf, sizeof(buf)) == 6 && !strcmp(buf, "SECRET"));
		close(fd);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", top);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", top);
	free(rep);
	return T_DONE();
}
