/* SPDX-License-Identifier: Apache-2.0 */
/* jail.c - a sidecar jails itself: cgroup, empty mount namespace, uid, capabilities,
 * no_new_privs, Landlock (jail.h says why in this order); user namespaces and idmapped
 * clones for the jails that keep ids. */
#include <ctype.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/mount.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/jail.h"

/* Newer than the build machine's headers (Debian 12: Linux 6.1 uapi). */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

/* Write "0" (this process) into each cgroup.procs. */
static int jail_cgroups(const struct jail_opts *o, struct k8_err *err)
{
	for (int i = 0; i < o->ncgroups; i++) {
		int fd = open(o->cgroups[i], O_WRONLY | O_CLOEXEC);
		ssize_t n;

		if (fd < 0)
			return k8_err_set(err, -errno, "cgroup %s: %s", o->cgroups[i],
					  strerror(errno));
		n = write(fd, "0", 1);
		close(fd);
		if (n != 1)
			return k8_err_set(err, -errno, "joining cgroup %s: %s", o->cgroups[i],
					  strerror(errno));
	}
	return 0;
}

/* A private mount namespace whose / is an empty, read-only tmpfs. The old root is
 * stacked under the new one by pivot_root(".", ".") and then detached. Fds opened
 * before (the shares, /proc/self/fd) keep working: they do not depend on paths. */
static int jail_mounts(struct k8_err *err)
{
	if (unshare(CLONE_NEWNS) < 0)
		return k8_err_set(err, -errno, "unshare(CLONE_NEWNS): %s", strerror(errno));
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return k8_err_set(err, -errno, "making / private: %s", strerror(errno));
	if (mount("kosa8-jail", "/tmp", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "size=4k,nr_inodes=2,mode=0555") < 0)
		return k8_err_set(err, -errno, "mounting the empty root: %s", strerror(errno));
	if (chdir("/tmp") < 0)
		return k8_err_set(err, -errno, "chdir: %s", strerror(errno));
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return k8_err_set(err, -errno, "pivot_root: %s", strerror(errno));
	if (umount2(".", MNT_DETACH) < 0)
		return k8_err_set(err, -errno, "detaching the host's tree: %s", strerror(errno));
	if (chdir("/") < 0)
		return k8_err_set(err, -errno, "chdir /: %s", strerror(errno));
	return 0;
}

/* Every capability but those in `keep` out of the bounding set (needs CAP_SETPCAP:
 * while still root), and the ambient set cleared. */
static int jail_bounding_drop(uint64_t keep, struct k8_err *err)
{
	for (int cap = 0; cap <= 63; cap++)
		if (!(keep >> cap & 1) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 &&
		    errno != EINVAL)
			return k8_err_set(err, -errno, "dropping capability %d: %s", cap,
					  strerror(errno));
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return k8_err_set(err, -errno, "clearing ambient capabilities: %s", strerror(errno));
	return 0;
}

int jail_caps_keep(uint64_t keep, struct k8_err *err)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = {
		{ .effective = (uint32_t)keep, .permitted = (uint32_t)keep },
		{ .effective = (uint32_t)(keep >> 32), .permitted = (uint32_t)(keep >> 32) },
	};
	int r;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return k8_err_set(err, -errno, "no_new_privs: %s", strerror(errno));
	if (geteuid() == 0 && (r = jail_bounding_drop(keep, err)))
		return r;       /* (another user has none to drop, nor the right to) */
	if (syscall(SYS_capset, &h, d) < 0)
		return k8_err_set(err, -errno, "capset: %s", strerror(errno));
	return 0;
}

int jail_caps_none(struct k8_err *err)
{
	return jail_caps_keep(0, err);
}

/* Bounding set first (needs CAP_SETPCAP, so while still root), then ids; setresuid
 * away from 0 clears the permitted and effective sets, capset clears inheritable. */
static int jail_ids(const struct jail_opts *o, struct k8_err *err)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { 0 };
	uid_t r, e, s;
	int rc;

	if ((rc = jail_bounding_drop(0, err)))
		return rc;
	if (setgroups(0, NULL) < 0)
		return k8_err_set(err, -errno, "setgroups: %s", strerror(errno));
	if (setresgid(o->gid, o->gid, o->gid) < 0)
		return k8_err_set(err, -errno, "setresgid %u: %s", (unsigned)o->gid, strerror(errno));
	if (setresuid(o->uid, o->uid, o->uid) < 0)
		return k8_err_set(err, -errno, "setresuid %u: %s", (unsigned)o->uid, strerror(errno));
	if (syscall(SYS_capset, &h, d) < 0)
		return k8_err_set(err, -errno, "capset: %s", strerror(errno));
	if (getresuid(&r, &e, &s) < 0 || r != o->uid || e != o->uid || s != o->uid ||
	    setuid(0) == 0)
		return k8_err_set(err, -EPERM, "the uid switch did not hold");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return k8_err_set(err, -errno, "no_new_privs: %s", strerror(errno));
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return k8_err_set(err, -errno, "dumpable: %s", strerror(errno));
	return 0;
}

/* File access rights Landlock knows at each ABI version. */
static __u64 jail_ll_fs_rights(int abi)
{
	__u64 r = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;      /* ABI 1 */

	if (abi >= 2)
		r |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		r |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		r |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return r;
}

int jail_landlock_dirs(const struct jail_dir *dirs, int ndirs, int *abi, struct k8_err *err)
{
	struct landlock_ruleset_attr ra = { 0 };
	__u64 all, ro = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	int rfd;

	*abi = 0;
	if (v < 0)
		return errno == ENOSYS || errno == EOPNOTSUPP ? 0
			: k8_err_set(err, -errno, "landlock: %s", strerror(errno));
	*abi = (int)v;
	all = jail_ll_fs_rights(*abi);
	ra.handled_access_fs = all;
	rfd = (int)syscall(SYS_landlock_create_ruleset, &ra, sizeof(ra), 0);
	if (rfd < 0)
		return k8_err_set(err, -errno, "landlock ruleset: %s", strerror(errno));
	for (int i = 0; i < ndirs; i++) {
		struct landlock_path_beneath_attr pb = {
			.allowed_access = dirs[i].ro ? ro
				: all & ~(__u64)(LANDLOCK_ACCESS_FS_EXECUTE |
						 LANDLOCK_ACCESS_FS_IOCTL_DEV),
			.parent_fd = dirs[i].fd,
		};
		if (syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0) {
			int e = errno;
			close(rfd);
			return k8_err_set(err, -e, "landlock rule %d: %s", i, strerror(e));
		}
	}
	if (syscall(SYS_landlock_restrict_self, rfd, 0) < 0) {
		int e = errno;
		close(rfd);
		return k8_err_set(err, -e, "landlock_restrict_self: %s", strerror(e));
	}
	close(rfd);
	return 0;
}

int jail_enter(const struct jail_opts *o, struct jail_report *rep, struct k8_err *err)
{
	int r;

	rep->landlock_abi = 0;
	if (o->uid == 0 || o->gid == 0)
		return k8_err_set(err, -EINVAL, "a jail needs a uid and gid other than 0");
	if ((r = jail_cgroups(o, err)) || (r = jail_mounts(err)) || (r = jail_ids(o, err)))
		return r;
	if (o->landlock && (r = jail_landlock_dirs(o->dirs, o->ndirs, &rep->landlock_abi, err)))
		return r;
	return 0;
}

/* Write `text` to an existing file (a /proc map). 0 or -errno. */
static int jail_write(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		r = errno ? -errno : -EIO;
	close(fd);
	return r;
}

int jail_userns(const struct jail_idmap *uids, const struct jail_idmap *gids,
		struct k8_err *err)
{
	char path[64], map[64];
	int fd = -1, r = 0;
	pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);

	if (pid < 0)
		return k8_err_set(err, -errno, "a user namespace: %s", strerror(errno));
	if (pid == 0) {
		for (;;)
			pause();
	}
	/* as root in ours we may map any ids */
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u %u\n", uids->inside, uids->outside, uids->count);
	if ((r = jail_write(path, map)) == 0) {
		snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
		snprintf(map, sizeof(map), "%u %u %u\n", gids->inside, gids->outside, gids->count);
		r = jail_write(path, map);
	}
	if (r == 0) {
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			r = -errno;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	if (r)
		return k8_err_set(err, r, "mapping ids in a user namespace: %s", strerror(-r));
	return fd;
}

int jail_idmapped_clone(int dirfd, int userns, uint64_t attrs, struct k8_err *err)
{
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP | attrs,
				   .userns_fd = (uint64_t)userns };
	int tree = (int)syscall(SYS_open_tree, dirfd, "",
				OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);

	if (tree < 0)
		return k8_err_set(err, -errno, "cannot make a private mount of it (open_tree: %s); "
				  "this needs Linux 5.12 or later", strerror(errno));
	if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
		int e = errno;
		close(tree);
		return k8_err_set(err, -e, "its file system cannot be used through an idmapped "
				  "mount (%s): ext4, xfs, btrfs and tmpfs can", strerror(e));
	}
	return tree;
}

int jail_ids_parse(const char *spec, uint32_t min, uint32_t *first, uint32_t *count)
{
	unsigned long a, b;
	char *e;

	if (!spec)
		return -EINVAL;
	errno = 0;
	a = strtoul(spec, &e, 10);
	if (errno || e == spec || *e != '-' || !isdigit((unsigned char)e[1]))
		return -EINVAL;
	b = strtoul(e + 1, &e, 10);
	if (errno || *e || b < a || a == 0 || b > 0xfffffffeUL || b - a + 1 < min)
		return -EINVAL;
	*first = (uint32_t)a;
	*count = (uint32_t)(b - a + 1);
	return 0;
}
