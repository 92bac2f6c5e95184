/* SPDX-License-Identifier: Apache-2.0 */
/* mounts.c - shared folders: checking `--mount HOST:GUEST[:ro]`, and the kosa8-fs process
 * that serves them to the guest.
 *
 * The guest mounts FUSE in its agent and the FUSE messages travel over the virtio-serial
 * port `kosa8.fs` to kosa8-fs, one per sandbox, which does every file operation with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS ...) below the mount's root and refuses
 * writes to read-only mounts itself (docs/shared-folders.md). Unlike virtio-9p this
 * does not block QEMU's migration, so checkpoints keep working: at a checkpoint the
 * daemon asks kosa8-fs for its node and handle tables (saved beside the memory state),
 * and at a rewind or fork it loads them back before the guest runs again. Host files
 * are never rewound.
 */
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "daemon/mounts.h"
#include "common/jail.h"
#include "daemon/record.h"

/* Guest paths no mount may cover: the kernel's, the agent's own, the scratch disk and
 * the image mounts (the agent refuses the same). */
static const char *const guest_reserved[] = { "/proc", "/sys", "/dev", "/run/kosa8", "/etc",
					      "/scratch", "/images" };

static int guest_path_check(const char *g, char *out, size_t n, struct k8_err *err)
{
	size_t len;

	if (!g || g[0] != '/')
		return k8_err_set(err, -EINVAL, "guest path '%.200s' must be absolute, like /data",
				  g ? g : "");
	len = strlen(g);
	while (len > 1 && g[len - 1] == '/')
		len--;
	if (len >= n || len > 200)
		return k8_err_set(err, -ENAMETOOLONG, "guest path '%.80s...' is too long", g);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)g[i];
		if (c < 0x20 || c == 0x7f || c == ':' || c == '\\')
			return k8_err_set(err, -EINVAL, "guest path '%.200s' has a character that "
					  "is not allowed (control characters, ':' and '\\')", g);
		if (c == '/' && (g[i + 1] == '/' ||
				 (g[i + 1] == '.' && (g[i + 2] == '/' || i + 2 == len)) ||
				 (g[i + 1] == '.' && g[i + 2] == '.' &&
				  (g[i + 3] == '/' || i + 3 == len))))
			return k8_err_set(err, -EINVAL, "guest path '%.200s' must be plain: no '//', "
					  "'.' or '..' parts", g);
	}
	if (len == 1)
		return k8_err_set(err, -EINVAL, "a folder cannot be mounted over the guest's /");
	memcpy(out, g, len);
	out[len] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(guest_reserved); i++) {
		size_t rl = strlen(guest_reserved[i]);
		if (!strncmp(out, guest_reserved[i], rl) && (out[rl] == '\0' || out[rl] == '/'))
			return k8_err_set(err, -EINVAL, "guest path %s is reserved (%s belongs to "
					  "the guest's system); pick another, like /data", out,
					  guest_reserved[i]);
	}
	return 0;
}

static bool path_below(const char *p, const char *root)
{
	size_t rl = strlen(root);

	if (rl == 1 && root[0] == '/')
		return true;
	return !strncmp(p, root, rl) && (p[rl] == '\0' || p[rl] == '/');
}

/* HOST must exist, be a directory, keep kosa8's own state out of reach, and lie below
 * one of the daemon's --allow-mount roots when there are any. out gets its realpath. */
static int host_path_check(struct daemon *d, const char *h, char *out, size_t n,
			   struct k8_err *err)
{
	char real[PATH_MAX], home[PATH_MAX];
	struct stat st;

	if (!h || !h[0])
		return k8_err_set(err, -EINVAL, "a mount needs a host folder");
	if (h[0] != '/')
		return k8_err_set(err, -EINVAL, "host folder '%.200s' must be an absolute path "
				  "(the CLI makes relative ones absolute)", h);
	if (!realpath(h, real) || stat(real, &st) < 0)
		return k8_err_set(err, -ENOENT, "host folder %.200s does not exist; create it "
				  "first (mkdir -p %.200s)", h, h);
	if (!S_ISDIR(st.st_mode))
		return k8_err_set(err, -ENOTDIR, "host path %.200s is not a folder; --mount "
				  "shares folders", h);
	if (!strcmp(real, "/"))
		return k8_err_set(err, -EPERM, "the host's / cannot be shared; share a folder "
				  "below it");
	if (realpath(d->home, home) &&
	    (path_below(real, home) || path_below(home, real)))
		return k8_err_set(err, -EPERM, "host folder %s would expose kosa8's own state "
				  "(%s) to the sandbox; share another folder", real, home);
	if (d->nallow_mounts) {
		bool ok = false;
		char roots[1024] = "";
		for (int i = 0; i < d->nallow_mounts; i++) {
			if (path_below(real, d->allow_mounts[i]))
				ok = true;
			size_t l = strlen(roots);
			snprintf(roots + l, sizeof(roots) - l, "%s%s", i ? ", " : "",
				 d->allow_mounts[i]);
		}
		if (!ok)
			return k8_err_set(err, -EPERM, "host folder %s is not below the folders this "
					  "daemon allows to mount (%s); mount one of those, or "
					  "restart the daemon with --allow-mount %s", real, roots, real);
	}
	if (strlen(real) >= n)
		return k8_err_set(err, -ENAMETOOLONG, "host path too long");
	snprintf(out, n, "%s", real);
	return 0;
}

/* ---- pinning: a shared folder is a directory inode, not a path ----
 *
 * At create the folder is opened from / one component at a time without following any
 * symlink (openat2 RESOLVE_NO_SYMLINKS: the kernel walks each component and refuses a
 * symlink anywhere, also one put there after realpath ran), and its device, inode and
 * birth time are kept in sandbox.json. Every start opens it the same way and compares:
 * a folder swapped, moved or replaced by a symlink refuses the start. kosa8-fs then gets
 * a clone of that very directory (an fd), never a path. */

/* Pseudo file systems no share may live on: their "files" are the kernel's. */
static const long pseudo_fs[] = {
	PROC_SUPER_MAGIC, SYSFS_MAGIC, CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, DEBUGFS_MAGIC,
	TRACEFS_MAGIC, SECURITYFS_MAGIC, BPF_FS_MAGIC, PSTOREFS_MAGIC, EFIVARFS_MAGIC,
	DEVPTS_SUPER_MAGIC, NSFS_MAGIC, SELINUX_MAGIC, SMACK_MAGIC, BINFMTFS_MAGIC,
	0x62656570 /* configfs */, 0x65735543 /* fusectl */, 0x19800202 /* mqueue */,
	0x958458f6 /* hugetlbfs */,
};

/* The type name /proc/self/mountinfo gives the mount `mnt_id` (devtmpfs reports
 * TMPFS_MAGIC in statfs, so the name is the only way to tell). "" when not found. */
static void mount_fstype(unsigned long long mnt_id, char *out, size_t n)
{
	cleanup_free char *text = NULL;
	size_t len;

	out[0] = '\0';
	if (read_file("/proc/self/mountinfo", 4 << 20, &text, &len) < 0)
		return;
	for (char *line = text, *nl; line && *line; line = nl) {
		unsigned long long id;
		char *dash;
		nl = strchr(line, '\n');
		if (nl)
			*nl++ = '\0';
		if (sscanf(line, "%llu", &id) != 1 || id != mnt_id || !(dash = strstr(line, " - ")))
			continue;
		sscanf(dash + 3, "%63s", out);
		(void)n;
		return;
	}
}

/* Open the folder at absolute `path` without following any symlink on the way. fd
 * (O_PATH|O_DIRECTORY) or a negative errno with err set. Checks it is a directory on a
 * real file system (not /proc, /sys, /dev and the like). */
static int mount_open_nofollow(const char *path, struct statx *stx, struct k8_err *err)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	struct statfs sf;
	char fstype[64];
	int fd;

	if (path[0] != '/' || strstr(path, "/../") || strstr(path, "/./") ||
	    (strlen(path) >= 3 && !strcmp(path + strlen(path) - 3, "/..")))
		return k8_err_set(err, -EINVAL, "host folder %s is not a plain absolute path", path);
	/* The kernel's trees, whatever file system a host mounted there (a tmpfs holding
	 * cgroup v1 hierarchies at /sys/fs/cgroup, a tmpfs /dev in a container). */
	if (path_below(path, "/proc") || path_below(path, "/sys") || path_below(path, "/dev"))
		return k8_err_set(err, -EPERM, "host folder %s is in the kernel's pseudo file "
				  "systems (/proc, /sys, /dev); only folders on real file systems "
				  "can be shared", path);
	do
		fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
	while (fd < 0 && (errno == EAGAIN || errno == EINTR));
	if (fd < 0) {
		int e = errno;
		if (e == ELOOP)
			return k8_err_set(err, -ELOOP, "host folder %s is reached through a symbolic "
					  "link (or is one); kosa8 never follows links to a shared "
					  "folder: give the path without links", path);
		return k8_err_set(err, -e, "host folder %s: %s", path, strerror(e));
	}
	if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW,
		  STATX_TYPE | STATX_INO | STATX_BTIME | STATX_MNT_ID, stx) < 0 ||
	    fstatfs(fd, &sf) < 0) {
		int e = errno;
		close(fd);
		return k8_err_set(err, -e, "host folder %s: %s", path, strerror(e));
	}
	if (!S_ISDIR(stx->stx_mode)) {
		close(fd);
		return k8_err_set(err, -ENOTDIR, "host path %s is not a folder", path);
	}
	for (size_t i = 0; i < ARRAY_SIZE(pseudo_fs); i++)
		if ((long)sf.f_type == pseudo_fs[i]) {
			close(fd);
			return k8_err_set(err, -EPERM, "host folder %s is on a kernel pseudo file "
					  "system (type 0x%lx); only folders on real file systems "
					  "can be shared", path, (long)sf.f_type);
		}
	mount_fstype(stx->stx_mnt_id, fstype, sizeof(fstype));
	if (!strcmp(fstype, "devtmpfs")) {
		close(fd);
		return k8_err_set(err, -EPERM, "host folder %s is on devtmpfs (device nodes); only "
				  "folders on real file systems can be shared", path);
	}
	return fd;
}

static long long stx_btime(const struct statx *stx)
{
	if (!(stx->stx_mask & STATX_BTIME))
		return 0;
	return (long long)stx->stx_btime.tv_sec * 1000000000LL + stx->stx_btime.tv_nsec;
}

/* Record the identity of m->host (at create). */
static int mount_pin(struct sb_mount *m, struct k8_err *err)
{
	struct statx stx;
	int fd = mount_open_nofollow(m->host, &stx, err);

	if (fd < 0)
		return fd;
	close(fd);
	m->dev = ((unsigned long long)stx.stx_dev_major << 32) | stx.stx_dev_minor;
	m->ino = stx.stx_ino;
	m->btime = stx_btime(&stx);
	m->pinned = true;
	return 0;
}

/* Open m->host again and check it is still the folder pinned at create. fd, or a
 * negative errno (-ESTALE: another folder now has that name) with err set. */
static int mount_open_pinned(const struct sb_mount *m, struct k8_err *err)
{
	struct statx stx = { 0 };
	struct k8_err e2 = { 0 };
	int fd = mount_open_nofollow(m->host, &stx, &e2);
	unsigned long long dev = ((unsigned long long)stx.stx_dev_major << 32) | stx.stx_dev_minor;

	if (fd >= 0 && (!m->pinned ||
			(dev == m->dev && stx.stx_ino == m->ino &&
			 (!m->btime || !stx_btime(&stx) || stx_btime(&stx) == m->btime))))
		return fd;
	if (fd >= 0)
		close(fd);
	else if (fd != -ELOOP && fd != -ENOENT && fd != -ENOTDIR)
		return k8_err_set(err, fd, "%s", e2.msg);
	return k8_err_set(err, -ESTALE, "host folder %s is no longer the folder this sandbox was "
			  "created with (%s); kosa8 will not share what the name now leads to. "
			  "Restore the folder, or recreate the sandbox to share what is there now",
			  m->host, fd == -ELOOP ? "a symbolic link is now on its path"
			  : fd == -ENOENT ? "it is gone" : fd == -ENOTDIR ? "it is not a folder"
			  : "another folder has its name");
}

int mounts_from_body(struct daemon *d, json_t *list, struct sb_mount *out, int *n,
		     struct k8_err *err)
{
	size_t i;
	json_t *m;
	int r;

	*n = 0;
	if (!json_is_array(list))
		return k8_err_set(err, -EINVAL, "mounts must be a list");
	if (json_array_size(list) > K8_MAX_MOUNTS)
		return k8_err_set(err, -E2BIG, "at most %d --mount per sandbox", K8_MAX_MOUNTS);
	json_array_foreach(list, i, m) {
		struct sb_mount *mm = &out[*n];
		json_t *ro = json_object_get(m, "ro");
		if (!json_is_object(m))
			return k8_err_set(err, -EINVAL, "each mount must be an object "
					  "{host, guest, ro}");
		if ((r = host_path_check(d, json_string_value(json_object_get(m, "host")),
					 mm->host, sizeof(mm->host), err)) ||
		    (r = guest_path_check(json_string_value(json_object_get(m, "guest")),
					  mm->guest, sizeof(mm->guest), err)))
			return k8_err_wrap(err, "--mount %d", (int)i + 1);
		if ((r = mount_pin(mm, err)))
			return k8_err_wrap(err, "--mount %d", (int)i + 1);
		if (ro && !json_is_boolean(ro))
			return k8_err_set(err, -EINVAL, "mount 'ro' must be true or false");
		mm->ro = json_is_true(ro);
		for (int j = 0; j < *n; j++)
			if (path_below(mm->guest, out[j].guest) || path_below(out[j].guest, mm->guest))
				return k8_err_set(err, -EINVAL, "guest paths %s and %s overlap; give "
						  "each mount its own folder", out[j].guest,
						  mm->guest);
		(*n)++;
	}
	return 0;
}

/* The daemon's rules (its home, --allow-mount roots) on the pinned path, as a string:
 * the path is never resolved again, only walked without links by mount_open_pinned. */
static int mount_rules_check(struct daemon *d, const struct sb_mount *m, struct k8_err *err)
{
	char home[PATH_MAX];
	bool ok = !d->nallow_mounts;

	if (realpath(d->home, home) && (path_below(m->host, home) || path_below(home, m->host)))
		return k8_err_set(err, -EPERM, "host folder %s would expose kosa8's own state (%s)",
				  m->host, home);
	for (int i = 0; i < d->nallow_mounts; i++)
		ok = ok || path_below(m->host, d->allow_mounts[i]);
	if (!ok)
		return k8_err_set(err, -EPERM, "host folder %s is not below the folders this daemon "
				  "allows to mount; restart the daemon with --allow-mount", m->host);
	return 0;
}

int mounts_recheck(struct daemon *d, const struct sb_mount *m, int n, struct k8_err *err)
{
	for (int i = 0; i < n; i++) {
		int fd;
		if (mount_rules_check(d, &m[i], err) || (fd = mount_open_pinned(&m[i], err)) < 0)
			return k8_err_wrap(err, "shared folder %s", m[i].guest);
		close(fd);
	}
	return 0;
}

/* A kosa8-fs that died is started again from a thread of its own (the reader thread that
 * saw it go cannot join itself). The folders' roots keep their node ids (2 + index), so
 * the guest's mounts work again at once; files and directories it held open get ESTALE.
 * Backoff: the first restart after a quiet minute waits 100 ms, each quick death after
 * it doubles the wait, up to 30 s, so a guest that kills kosa8-fs at will cannot make
 * the daemon spin. */
struct fs_restart_arg {
	struct daemon *d;
	char name[K8_NAME_MAX + 1];     /* looked up again: the sandbox may be gone by then */
};

static void *fs_restart(void *arg)
{
	struct fs_restart_arg *a = arg;
	struct daemon *d = a->d;
	struct k8_err err = { 0 };
	struct sandbox *sb = sb_get(d, a->name, &err);

	if (sb) {
		uint64_t now = now_mono_ns(), wait_ms;
		if (now - sb->fs.restart_ns > 60000000000ull)
			sb->fs.restarts = 0;
		wait_ms = sb->fs.restarts >= 9 ? 30000 : 100ull << sb->fs.restarts;
		if (wait_ms > 30000)
			wait_ms = 30000;
		sb->fs.restarts++;
		if (sb->fs.restarts > 1)
			daemon_log("sandbox %s: kosa8-fs died %u times in a row; waiting %llu ms",
				   sb->name, sb->fs.restarts, (unsigned long long)wait_ms);
		usleep((useconds_t)(wait_ms * 1000));
		sb->fs.restart_ns = now_mono_ns();
		sb_busy_enter(sb);
		if (sb->state == SB_RUNNING && !sidecar_alive(&sb->fs)) {
			int r = fs_up(d, sb, &err);
			daemon_audit(d, r ? "sandbox.fs.restart.failed" : "sandbox.fs.restart", sb->name,
				     r ? json_pack("{s:s}", "error", err.msg) : NULL);
			pthread_mutex_lock(&sb->lock);
			sb_save(sb);
			pthread_mutex_unlock(&sb->lock);
		}
		sb_busy_leave(sb);
		sb_put(d, sb);
	}
	free(a);
	return NULL;
}

static void fs_event(void *ctx, json_t *ev)
{
	struct sandbox *sb = ctx;
	const char *name = json_string_value(json_object_get(ev, "event"));
	pthread_t t;

	if (!name)
		return;
	if (!strcmp(name, "down") && !sb->fs.closing) {
		daemon_log("sandbox %s: kosa8-fs is gone (%s); starting it again", sb->name,
			   json_string_value(json_object_get(ev, "why")));
		/* a guest that can crash kosa8-fs can repeat it: within its audit budget */
		daemon_audit_guest(sb->d, sb, "sandbox.fs.down",
				   json_pack("{s:s?}", "why",
					     json_string_value(json_object_get(ev, "why"))), 1);
		struct fs_restart_arg *a = xcalloc(1, sizeof(*a));
		a->d = sb->d;
		snprintf(a->name, sizeof(a->name), "%s", sb->name);
		if (pthread_create(&t, NULL, fs_restart, a) == 0)
			pthread_detach(t);
		else
			free(a);
	}
}

/* The detached mount kosa8-fs serves: a non-recursive clone of the pinned folder (mounts
 * below it are not in it, so a share never crosses into another file system), idmapped
 * so the folder owner's files are kosa8-fs's own (uid `fsuid`) and what it creates is
 * the owner's on disk, nosuid, nodev, noexec, nosymfollow, read-only for :ro. fd or a
 * negative errno. */
static int mount_clone(int dirfd, const struct sb_mount *m, uid_t fsuid, struct k8_err *err)
{
	struct stat st;
	struct jail_idmap u = { .outside = fsuid, .count = 1 }, g = u;
	int tree, ns;

	if (fstat(dirfd, &st) < 0)
		return k8_err_set(err, -errno, "host folder %s: %s", m->host, strerror(errno));
	u.inside = st.st_uid;
	g.inside = st.st_gid;
	ns = jail_userns(&u, &g, err);
	if (ns < 0)
		return k8_err_wrap(err, "host folder %s: the idmapped share", m->host);
	tree = jail_idmapped_clone(dirfd, ns, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
				   MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSYMFOLLOW |
				   (m->ro ? MOUNT_ATTR_RDONLY : 0), err);
	close(ns);
	if (tree < 0)
		return k8_err_wrap(err, "host folder %s (kosa8-fs runs without root and needs an "
				   "idmapped mount)", m->host);
	return tree;
}

/* The RAM data path (docs/shared-folders.md): kosa8-fs reads WRITE payloads in guest
 * RAM through a read-only /proc/<qemu>/mem opened here (it cannot open it jailed),
 * bounded to guest-physical [0, FS_RAM_MAX) (on microvm one range from 0; above
 * 2 GiB it may be split). Without it ({"op":"ram"} with no fd) the agent sends
 * payloads through the port. Always sent before the port, so the guest's HELLO on the
 * new connection finds the RAM of that QEMU and never an older one's. */
#define FS_RAM_MAX (2ull << 30)

static void fs_attach_ram(struct sandbox *sb)
{
	uint64_t hva = 0, size = (uint64_t)sb->memory_mib << 20;
	struct k8_err e = { 0 };
	char path[64];
	json_t *req;
	int fd = -1;

	if (size > FS_RAM_MAX)
		size = FS_RAM_MAX;
	if (!vm_ram_hva(&sb->qmp, &hva, &e)) {
		snprintf(path, sizeof(path), "/proc/%d/mem", (int)sb->pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		/* the fd is that QEMU's only if it was still alive after the open */
		if (fd >= 0 && !vm_alive(sb->pid, sb->pid_start)) {
			close(fd);
			fd = -1;
		}
	}
	if (fd >= 0)
		req = json_pack("{s:s,s:I,s:I}", "op", "ram", "hva", (json_int_t)hva, "size",
				(json_int_t)size);
	else
		req = json_pack("{s:s}", "op", "ram");
	k8_err_clear(&e);
	if (sidecar_request_fd(&sb->fs, req, fd, 10000, NULL, &e))
		daemon_log("sandbox %s: shared folders without the RAM data path: %s", sb->name,
			   e.msg);
	if (fd >= 0)
		close(fd);
}

/* Hand kosa8-fs a fresh connection to QEMU's kosa8.fs chardev: kosa8-fs runs where no
 * path leads anywhere and may not connect, so the daemon connects and passes the fd
 * (after every QEMU start: boot, rewind, fork). 0, or a negative errno (no QEMU yet). */
int fs_attach_port(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char port[4200];
	int fd, r;

	if (!sb->nmounts || !sidecar_connected(&sb->fs))
		return 0;
	sb_sock_path(d, sb, "fs", port, sizeof(port));
	if (strlen(port) >= sizeof(sa.sun_path))
		return k8_err_set(err, -ENAMETOOLONG, "socket path too long: %s", port);
	strcpy(sa.sun_path, port);
	fs_attach_ram(sb);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		close(fd);
		return k8_err_set(err, r, "QEMU's shared-folder port %s: %s", port, strerror(-r));
	}
	r = sidecar_request_fd(&sb->fs, json_pack("{s:s}", "op", "port"), fd, 10000, NULL, err);
	close(fd);
	return r ? k8_err_wrap(err, "handing kosa8-fs its port") : 0;
}

int fs_up(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	char ctl[4200], uid[16], cgv[2][512];
	cleanup_free char *exe = k8_beside_self("kosa8-fs");
	cleanup_free char *log = xasprintf("%s/fs.log", sb->dir);
	const char *argv[16 + 2 * K8_MAX_MOUNTS + 1];
	char specs[K8_MAX_MOUNTS][32];
	int fds[K8_MAX_MOUNTS], nfds = 0, argc = 0, r = 0;
	uid_t fsuid;
	json_t *cfg;
	const char *reserve;
	char max_nodes[24];
	json_int_t cap;

	if (!sb->nmounts)
		return 0;
	sb_sock_path(d, sb, "fsctl", ctl, sizeof(ctl));
	if (sidecar_alive(&sb->fs))
		return sidecar_connected(&sb->fs) ? 0
						  : sidecar_connect(&sb->fs, ctl, fs_event, sb, err);
	if (access(exe, X_OK) < 0)
		return k8_err_set(err, -ENOENT, "%s is missing (it serves shared folders); build "
				  "it with `make`", exe);
	if (sb->jail_index < 0 && geteuid() == 0)
		return k8_err_set(err, -EINVAL, "sandbox %s has no host uids (jail) claimed", sb->name);
	fsuid = jail_uid(&d->jail, sb->jail_index, JAIL_FS);
	for (int i = 0; i < sb->nmounts; i++) {
		struct sb_mount *m = &sb->mounts[i];
		int dir;

		if ((r = mount_rules_check(d, m, err)) < 0) {
			k8_err_wrap(err, "shared folder %s", m->guest);
			break;
		}
		if (!m->pinned && (r = mount_pin(m, err)) < 0)   /* made before pinning existed */
			break;
		if ((dir = mount_open_pinned(m, err)) < 0) {
			r = dir;
			k8_err_wrap(err, "shared folder %s", m->guest);
			daemon_audit(d, "sandbox.mount.changed", sb->name,
				     json_pack("{s:s,s:s,s:s}", "host", m->host, "guest", m->guest,
					       "error", err->msg));
			break;
		}
		/* Not root: no idmapped clone, no jail; kosa8-fs runs as the daemon's user on
		 * the pinned fd itself (mounts below the root are then crossed). */
		if (geteuid() != 0) {
			fds[nfds] = dir;
		} else {
			fds[nfds] = mount_clone(dir, m, fsuid, err);
			close(dir);
		}
		if (fds[nfds] < 0) {
			r = fds[nfds];
			k8_err_wrap(err, "shared folder %s", m->guest);
			break;
		}
		snprintf(specs[nfds], sizeof(specs[nfds]), "%d:%s", 3 + nfds, m->ro ? "ro" : "rw");
		nfds++;
	}
	if (r)
		goto out;
	snprintf(uid, sizeof(uid), "%u", (unsigned)fsuid);
	cfg = daemon_config(d);
	reserve = json_string_value(json_object_get(cfg, "fs_reserve"));
	if (d->fs_reserve)
		reserve = d->fs_reserve;
	argv[argc++] = exe;
	argv[argc++] = "--id";
	argv[argc++] = sb->id;
	argv[argc++] = "--control";
	argv[argc++] = ctl;
	if (geteuid() == 0) {
		argv[argc++] = "--uid";
		argv[argc++] = uid;
		for (int i = 0, n = cgroup_procs_paths(&d->cg, sb->name, cgv, 2); i < n; i++) {
			argv[argc++] = "--cgroup";
			argv[argc++] = cgv[i];
		}
	}
	argv[argc++] = "--reserve";
	argv[argc++] = reserve ? reserve : K8FS_DEFAULT_RESERVE;
	/* a lower node cap (kosa8-fs checks the range; it refuses to start on a bad one) */
	if ((cap = json_integer_value(json_object_get(cfg, "fs_max_nodes"))) > 0) {
		snprintf(max_nodes, sizeof(max_nodes), "%lld", (long long)cap);
		argv[argc++] = "--max-nodes";
		argv[argc++] = max_nodes;
	}
	for (int i = 0; i < nfds; i++) {
		argv[argc++] = "--mount-fd";
		argv[argc++] = specs[i];
	}
	argv[argc] = NULL;
	r = sidecar_start_fds(&sb->fs, argv, log, fds, nfds, ctl, fs_event, sb, err);
	json_decref(cfg);
	if (r)
		goto out;
	daemon_log("sandbox %s: kosa8-fs running (pid %d, uid %u, %d shared folders)", sb->name,
		   (int)sb->fs.pid, (unsigned)fsuid, sb->nmounts);
	/* A restart while the VM runs: give it the port now (a boot does it once QEMU is up). */
	if (sb->pid > 0 && vm_alive(sb->pid, sb->pid_start)) {
		struct k8_err e2 = { 0 };
		if (fs_attach_port(d, sb, &e2))
			daemon_log("sandbox %s: %s", sb->name, e2.msg);
	}
out:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return r;
}

void fs_adopt(struct daemon *d, struct sandbox *sb)
{
	struct k8_err err = { 0 };

	if (!sb->nmounts)
		return;
	/* A kosa8-fs that died while no daemon watched is started again: it reconnects to
	 * the guest's port, and the guest resends what it was waiting for. */
	if (fs_up(d, sb, &err))
		daemon_log("sandbox %s: shared folders are down: %s", sb->name, err.msg);
}

/* kosa8-fs cannot open paths: the daemon opens the table file and passes the fd. */
int fs_save(struct sandbox *sb, const char *path, struct k8_err *err)
{
	cleanup_free char *tmp = xasprintf("%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), r;

	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", tmp, strerror(errno));
	r = sidecar_request_fd(&sb->fs, json_pack("{s:s}", "op", "save"), fd, 30000, NULL, err);
	if (!r && fsync(fd) < 0)
		r = k8_err_set(err, -errno, "%s: %s", tmp, strerror(errno));
	close(fd);
	if (!r && rename(tmp, path) < 0)
		r = k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (r)
		unlink(tmp);
	return r ? k8_err_wrap(err, "saving the shared folders' state") : 0;
}

int fs_load(struct sandbox *sb, const char *path, struct k8_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;

	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	r = sidecar_request_fd(&sb->fs, json_pack("{s:s}", "op", "load"), fd, 30000, NULL, err);
	close(fd);
	return r ? k8_err_wrap(err, "restoring the shared folders' state") : 0;
}
