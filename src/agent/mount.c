/* SPDX-License-Identifier: Apache-2.0 */
/* mount.c - guest mounts: the boot file systems, disks found by virtio-blk serial, the
 * read-only EROFS image slots and, in a new container's child, its root file system.
 *
 * Disks: /sys/block/vdX/serial holds the serial= QEMU was given ("scratch", "slot0"...
 * "slot7"); device order on the command line does not matter.
 */
#include "agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

static void mnt_must(const char *src, const char *dst, const char *type, unsigned long flags,
		     const char *data)
{
	if (mkdir(dst, 0755) < 0 && errno != EEXIST)
		agent_fatal("mkdir %s: %s", dst, strerror(errno));
	if (mount(src, dst, type, flags, data) < 0)
		agent_fatal("mount %s on %s: %s", type, dst, strerror(errno));
}

/* The initramfs root cannot be pivot_root'ed away from (it has no parent mount), and
 * containers need pivot_root: put a tmpfs over "/" (what switch_root does) first. */
static void mnt_leave_initramfs(void)
{
	if (mkdir("/.root", 0755) < 0 && errno != EEXIST)
		agent_fatal("mkdir /.root: %s", strerror(errno));
	if (mount("tmpfs", "/.root", "tmpfs", 0, "mode=0755,size=4m,nr_inodes=4096") < 0)
		agent_fatal("mount tmpfs root: %s", strerror(errno));
	if (chdir("/.root") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 ||
	    chdir("/") < 0)
		agent_fatal("moving to the tmpfs root: %s", strerror(errno));
}

void mnt_boot(struct agent *a)
{
	static const char *const links[][2] = {
		{ "/proc/self/fd", "/dev/fd" },
		{ "/proc/self/fd/0", "/dev/stdin" },
		{ "/proc/self/fd/1", "/dev/stdout" },
		{ "/proc/self/fd/2", "/dev/stderr" },
	};
	int fd;

	mnt_leave_initramfs();
	mnt_must("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mnt_must("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mnt_must("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	fd = open("/dev/console", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
	}
	mnt_must("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,mode=0620,gid=5");
	mnt_must("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mnt_must("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mnt_must("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m");
	for (size_t i = 0; i < ARRAY_SIZE(links); i++)
		symlink(links[i][0], links[i][1]);
	mkdir(AGENT_SCRATCH, 0755);
	mkdir(AGENT_IMAGES_DIR, 0755);
	(void)a;
}

int mnt_find_disk(const char *serial, char *dev, size_t devlen)
{
	DIR *d = opendir("/sys/block");
	struct dirent *de;
	int r = -ENODEV;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char path[300], *s = NULL;
		size_t n;

		if (strncmp(de->d_name, "vd", 2))
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/serial", de->d_name);
		if (read_file(path, 4096, &s, &n) < 0) /* sysfs says 4096 bytes */
			continue;
		while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
			s[--n] = '\0';
		if (!strcmp(s, serial)) {
			snprintf(dev, devlen, "/dev/%s", de->d_name);
			r = 0;
		}
		free(s);
		if (!r)
			break;
	}
	closedir(d);
	return r;
}

int mnt_scratch(struct agent *a)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	char dev[64];
	int r, i;

	for (i = 0; (r = mnt_find_disk("scratch", dev, sizeof(dev))) < 0 && i < 50; i++)
		nanosleep(&ts, NULL);
	if (r < 0) {
		agent_log("no disk with serial \"scratch\": containers cannot start");
		return r;
	}
	/* discard: the host attaches the disk with discard=unmap, so a removed writable
	 * layer gives its space back to the host's qcow2 file. */
	if (mount(dev, AGENT_SCRATCH, "ext4", MS_NOATIME | MS_NODEV, "discard") < 0) {
		r = -errno;
		agent_log("mount %s (ext4) on %s: %s: containers cannot start", dev, AGENT_SCRATCH,
			  strerror(errno));
		return r;
	}
	a->scratch_ok = 1;
	return 0;
}

int mnt_image_drop(struct agent *a, int slot, struct k8_err *err)
{
	char path[128];

	if (!a->slot_image[slot][0])
		return 0;
	snprintf(path, sizeof(path), "%s/%s", AGENT_IMAGES_DIR, a->slot_image[slot]);
	if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL)
		return k8_err_set(err, -errno, "umount %s: %s", path, strerror(errno));
	rmdir(path);
	a->slot_image[slot][0] = '\0';
	return 0;
}

int mnt_image(struct agent *a, int slot, const char *hex, struct k8_err *err)
{
	char dev[64], path[128], serial[16];
	int fd, i, r;

	for (i = 0; i < AGENT_SLOTS; i++)
		if (!strcmp(a->slot_image[i], hex))
			return 0; /* already mounted (from this or another slot) */
	if (a->slot_image[slot][0]) {
		/* The host swapped this slot's backing file: drop the old image's mount.
		 * A running container would now read garbage from it: refuse. */
		if (ctr_image_in_use(a, a->slot_image[slot]))
			return k8_err_set(err, -EBUSY, "slot %d holds sha256:%s, used by a running container",
					  slot, a->slot_image[slot]);
		if ((r = mnt_image_drop(a, slot, err)) < 0)
			return r;
	}
	snprintf(serial, sizeof(serial), "slot%d", slot);
	if (mnt_find_disk(serial, dev, sizeof(dev)) < 0)
		return k8_err_set(err, -ENODEV, "no disk with serial %s", serial);
	/* The host switched the backing file under the running VM: whatever the guest
	 * cached of the device is stale. */
	fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return k8_err_set(err, -errno, "open %s: %s", dev, strerror(errno));
	if (ioctl(fd, BLKFLSBUF, 0) < 0) {
		int e = errno;
		close(fd);
		return k8_err_set(err, -e, "BLKFLSBUF %s: %s", dev, strerror(e));
	}
	close(fd);
	snprintf(path, sizeof(path), "%s/%s", AGENT_IMAGES_DIR, hex);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return k8_err_set(err, -errno, "mkdir %s: %s", path, strerror(errno));
	if (mount(dev, path, "erofs", MS_RDONLY | MS_NODEV, NULL) < 0) {
		int e = errno;
		rmdir(path);
		return k8_err_set(err, -e, "mount %s (erofs) on %s: %s", dev, path, strerror(e));
	}
	snprintf(a->slot_image[slot], sizeof(a->slot_image[slot]), "%s", hex);
	return 0;
}

/* ---- in the child of a new container (own mount namespace already) ---- */

static int mnt_fail(char *msg, size_t msglen, const char *fmt, ...) K8_PRINTF(3, 4);
static int mnt_fail(char *msg, size_t msglen, const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, msglen, fmt, ap);
	va_end(ap);
	return e ? -e : -EIO;
}

#define MNT_FAIL(...) mnt_fail(msg, msglen, __VA_ARGS__)

static int mnt_at(const char *root, const char *rel, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/%s", root, rel);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Hide (files: /dev/null over them; dirs: an empty read-only tmpfs) or make read-only
 * the parts of /proc that reach the whole VM (Docker's lists). */
static void mnt_proc_guard(const char *root)
{
	static const char *const masked[] = { "proc/kcore", "proc/keys", "proc/timer_list",
					      "proc/sched_debug", "proc/latency_stats", "proc/acpi",
					      "proc/scsi", "proc/asound" };
	static const char *const ro[] = { "proc/bus", "proc/fs", "proc/irq", "proc/sys",
					  "proc/sysrq-trigger" };
	char p[512];
	struct stat st;

	for (size_t i = 0; i < ARRAY_SIZE(masked); i++) {
		if (mnt_at(root, masked[i], p, sizeof(p)) < 0 || stat(p, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode))
			mount("tmpfs", p, "tmpfs", MS_RDONLY, "size=0");
		else
			mount("/dev/null", p, NULL, MS_BIND, NULL);
	}
	for (size_t i = 0; i < ARRAY_SIZE(ro); i++) {
		if (mnt_at(root, ro[i], p, sizeof(p)) < 0 || stat(p, &st) < 0)
			continue;
		if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) == 0)
			mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			      NULL);
	}
}

static int mnt_ctr_dev(const char *root, char *msg, size_t msglen)
{
	static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
	static const char *const links[][2] = {
		{ "/proc/self/fd", "fd" },         { "/proc/self/fd/0", "stdin" },
		{ "/proc/self/fd/1", "stdout" },   { "/proc/self/fd/2", "stderr" },
		{ "pts/ptmx", "ptmx" },
	};
	char dev[512], p[600], src[64];
	int fd;

	if (mnt_at(root, "dev", dev, sizeof(dev)) < 0)
		return MNT_FAIL("rootfs path too long");
	if (mkdir(dev, 0755) < 0 && errno != EEXIST)
		return MNT_FAIL("mkdir /dev: %s", strerror(errno));
	/* nodev: CAP_MKNOD nodes made here cannot be opened; the bind-mounted VM nodes
	 * below are mounts of their own (the VM's devtmpfs flags) and keep working. */
	if (mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_STRICTATIME,
		  "mode=755,size=64k") < 0)
		return MNT_FAIL("mount tmpfs on /dev: %s", strerror(errno));
	for (size_t i = 0; i < ARRAY_SIZE(nodes); i++) {
		snprintf(p, sizeof(p), "%s/%s", dev, nodes[i]);
		snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
		fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
		if (fd < 0)
			return MNT_FAIL("creating /dev/%s: %s", nodes[i], strerror(errno));
		close(fd);
		if (mount(src, p, NULL, MS_BIND, NULL) < 0)
			return MNT_FAIL("bind-mounting /dev/%s: %s", nodes[i], strerror(errno));
	}
	snprintf(p, sizeof(p), "%s/pts", dev);
	if (mkdir(p, 0755) < 0 ||
	    mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620,gid=5") < 0)
		return MNT_FAIL("mount devpts on /dev/pts: %s", strerror(errno));
	snprintf(p, sizeof(p), "%s/shm", dev);
	if (mkdir(p, 01777) < 0 ||
	    mount("shm", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=65536k") < 0)
		return MNT_FAIL("mount tmpfs on /dev/shm: %s", strerror(errno));
	for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
		snprintf(p, sizeof(p), "%s/%s", dev, links[i][1]);
		symlink(links[i][0], p);
	}
	/* /dev/kosa8/generation: the VM's generation file itself, bound read-only, so a
	 * process alive at a checkpoint reads its own copy's generation after a fork or a
	 * rewind (req.c, req_generation). None before a host that sends one. */
	if (access(AGENT_GEN_FILE, F_OK) == 0) {
		snprintf(p, sizeof(p), "%s/kosa8", dev);
		if (mkdir(p, 0755) < 0)
			return MNT_FAIL("mkdir /dev/kosa8: %s", strerror(errno));
		snprintf(p, sizeof(p), "%s/kosa8/generation", dev);
		fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
		if (fd < 0)
			return MNT_FAIL("creating /dev/kosa8/generation: %s", strerror(errno));
		close(fd);
		if (mount(AGENT_GEN_FILE, p, NULL, MS_BIND, NULL) < 0 ||
		    mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV |
			  MS_NOEXEC, NULL) < 0)
			return MNT_FAIL("binding /dev/kosa8/generation: %s", strerror(errno));
	}
	return 0;
}

int mnt_ctr_rootfs(const char *id, const char *lower, char *msg, size_t msglen)
{
	char dir[128], root[160], opts[512], p[600];
	int r;

	snprintf(dir, sizeof(dir), "%s/%s", AGENT_CTR_DIR, id);
	snprintf(root, sizeof(root), "%s/rootfs", dir);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return MNT_FAIL("making / private: %s", strerror(errno));
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s/upper,workdir=%s/work", lower, dir, dir);
	if (mount("overlay", root, "overlay", MS_NODEV, opts) < 0)
		return MNT_FAIL("mount overlay (%s): %s", opts, strerror(errno));
	snprintf(p, sizeof(p), "%s/proc", root);
	if ((mkdir(p, 0555) < 0 && errno != EEXIST) ||
	    mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return MNT_FAIL("mount /proc: %s", strerror(errno));
	if ((r = mnt_ctr_dev(root, msg, msglen)) < 0)
		return r;
	mnt_proc_guard(root);
	/* pivot_root(".", "."): the old root ends up stacked on the new one, and
	 * detaching it leaves nothing of the VM's file systems reachable. */
	if (chdir(root) < 0)
		return MNT_FAIL("chdir %s: %s", root, strerror(errno));
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return MNT_FAIL("pivot_root: %s", strerror(errno));
	if (umount2(".", MNT_DETACH) < 0)
		return MNT_FAIL("detaching the old root: %s", strerror(errno));
	if (chdir("/") < 0)
		return MNT_FAIL("chdir /: %s", strerror(errno));
	return 0;
}
