/* SPDX-License-Identifier: Apache-2.0 */
/* jail.c - the per-sandbox blocks of unprivileged uids, and the jail QEMU runs in
 * (see jail.h). */
#include "daemon/jail.h"
#include "common/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int jail_range_parse(const char *spec, struct jail_range *r, struct k8_err *err)
{
	uint32_t first, count;

	if (jail_ids_parse(spec, JAIL_ROLES, &first, &count) == 0) {
		r->base = (uid_t)first;
		r->blocks = count / JAIL_ROLES;
		return 0;
	}
	return k8_err_set(err, -EINVAL,
			  "jail_uids must be FIRST-LAST, unused uids above 0 with room for at "
			  "least %d (one sandbox), e.g. \"%s\"", JAIL_ROLES, JAIL_DEFAULT_RANGE);
}

/* A claim file: the sandbox directory on its first line, the first uid of its block on
 * the second. A kosa8 from before per-uid claims wrote one line, in the file of the
 * block's first uid only, and meant the whole block by it. */
static bool claim_read(uid_t uid, char **dir, bool *whole_block)
{
	char path[128];
	size_t n;

	snprintf(path, sizeof(path), "%s/%lu", JAIL_CLAIM_DIR, (unsigned long)uid);
	if (read_file(path, 8192, dir, &n))
		return false;
	char *nl = strchr(*dir, '\n');
	*whole_block = !nl || !nl[1];
	if (nl)
		*nl = '\0';
	return true;
}

/* Who holds `uid`: 1 `sbdir`; 0 nobody (no claim, or a stale one: its directory holds no
 * sandbox.json); -1 another sandbox, whose directory goes to `holder`. A one-line claim
 * of one of the three uids below counts too (it covered its block). */
static int uid_state(uid_t uid, const char *sbdir, char *holder, size_t hn)
{
	for (uid_t k = 0; k < JAIL_ROLES && k <= uid; k++) {
		cleanup_free char *dir = NULL, *rec = NULL;
		bool whole;

		if (!claim_read(uid - k, &dir, &whole) || (k && !whole))
			continue;
		if (!strcmp(dir, sbdir))
			return 1;
		rec = xasprintf("%s/sandbox.json", dir);
		if (dir[0] == '/' && access(rec, F_OK) == 0) {
			snprintf(holder, hn, "%s", dir);
			return -1;
		}
	}
	return 0;
}

static void block_release(const struct jail_range *r, const char *sbdir, int index)
{
	char path[128];

	for (int role = 0; role < JAIL_ROLES; role++) {
		uid_t u = jail_uid(r, index, (enum jail_role)role);
		cleanup_free char *dir = NULL;
		bool whole;

		snprintf(path, sizeof(path), "%s/%lu", JAIL_CLAIM_DIR, (unsigned long)u);
		if (claim_read(u, &dir, &whole) && !strcmp(dir, sbdir))
			unlink(path);
	}
}

/* The home a sandbox directory is in: "<home>/sandboxes/<name>" without the tail. */
static size_t home_len(const char *sbdir)
{
	const char *s = strstr(sbdir, "/sandboxes/"), *t;

	while (s && (t = strstr(s + 1, "/sandboxes/")))
		s = t;
	return s ? (size_t)(s - sbdir) : strlen(sbdir);
}

int jail_claim(const struct jail_range *r, const char *sbdir, int *index, struct k8_err *err)
{
	cleanup_close int lk = -1;
	char other[4096] = "";
	int rc;

	if ((rc = mkdir_p(JAIL_CLAIM_DIR, 0700)) < 0)
		return k8_err_set(err, rc, "mkdir %s: %s", JAIL_CLAIM_DIR, strerror(-rc));
	lk = open(JAIL_CLAIM_DIR "/.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		return k8_err_set(err, -errno, "lock %s: %s", JAIL_CLAIM_DIR, strerror(errno));
	for (long i = -1; i < (long)r->blocks; i++) {
		long idx = i < 0 ? *index : i;
		bool free_ = true;

		if (idx < 0 || idx >= (long)r->blocks)
			continue;
		/* Per uid, not per block: another home's range may overlap this one at any
		 * offset, and its blocks then straddle ours. */
		for (int role = 0; role < JAIL_ROLES && free_; role++) {
			char holder[4096];

			if (uid_state(jail_uid(r, (int)idx, (enum jail_role)role), sbdir, holder,
				      sizeof(holder)) < 0) {
				free_ = false;
				if (!other[0] && (home_len(holder) != home_len(sbdir) ||
						  strncmp(holder, sbdir, home_len(sbdir))))
					snprintf(other, sizeof(other), "%s", holder);
			}
		}
		if (!free_)
			continue;
		cleanup_free char *line = xasprintf("%s\n%lu\n", sbdir,
						    (unsigned long)jail_uid(r, (int)idx, JAIL_QEMU));
		for (int role = 0; role < JAIL_ROLES; role++) {
			char path[128];

			snprintf(path, sizeof(path), "%s/%lu", JAIL_CLAIM_DIR,
				 (unsigned long)jail_uid(r, (int)idx, (enum jail_role)role));
			if ((rc = write_file_atomic(path, line, strlen(line), 0600)) < 0) {
				block_release(r, sbdir, (int)idx);
				return k8_err_set(err, rc, "write %s: %s", path, strerror(-rc));
			}
		}
		*index = (int)idx;
		return 0;
	}
	if (other[0])
		return k8_err_set(err, -ENOSPC,
				  "every uid block of jail_uids is in use (%u sandboxes), some by another "
				  "home's sandbox %s: the two homes' jail_uids overlap. Give each home a "
				  "range of its own in config.json", r->blocks, other);
	return k8_err_set(err, -ENOSPC,
			  "every uid block of jail_uids is in use (%u sandboxes); give the daemon a "
			  "larger range in config.json", r->blocks);
}

void jail_release(const struct jail_range *r, const char *sbdir, int index)
{
	cleanup_close int lk = -1;

	if (index < 0 || index >= (int)r->blocks)
		return;
	lk = open(JAIL_CLAIM_DIR "/.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		return;
	block_release(r, sbdir, index);
}

/* ---- the QEMU jail ---- */

static const char *const host_top[4] = { "/lib", "/lib64", "/bin", "/sbin" };
static const char *const jail_top[4] = { JAIL_ROOT "/lib", JAIL_ROOT "/lib64", JAIL_ROOT "/bin",
					 JAIL_ROOT "/sbin" };

int jail_prepare(struct jail_spec *j, struct k8_err *err)
{
	struct stat st;
	int r;

	if ((r = mkdir_p(JAIL_ROOT, 0700)) < 0)
		return k8_err_set(err, r, "mkdir %s: %s", JAIL_ROOT, strerror(-r));
	for (int i = 0; i < 4; i++) {
		ssize_t n;

		j->link[i][0] = '\0';
		j->dir[i] = false;
		if (lstat(host_top[i], &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			j->dir[i] = true;
		} else if (S_ISLNK(st.st_mode)) {
			n = readlink(host_top[i], j->link[i], sizeof(j->link[i]) - 1);
			j->link[i][n > 0 ? n : 0] = '\0';
		}
	}
	j->ldcache = access("/etc/ld.so.cache", R_OK) == 0;
	if (j->kvm) {
		if (stat("/dev/kvm", &st) < 0 || !S_ISCHR(st.st_mode))
			return k8_err_set(err, -ENODEV, "/dev/kvm is gone: %s", strerror(errno));
		j->kvm_dev = st.st_rdev;
	}
	return 0;
}

/* A read-only bind of `src` at `dst`, created first (a directory or an empty file). */
static int bind_ro(const char *src, const char *dst, bool dir, bool ro)
{
	int fd;

	if (dir) {
		if (mkdir(dst, 0755) < 0 && errno != EEXIST)
			return -1;
	} else {
		fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			return -1;
		close(fd);
	}
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		return -1;
	if (ro && mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
			NULL) < 0)
		return -1;
	return 0;
}

/* Our filter, below QEMU's own (-sandbox on: no spawn, no privilege change, no obsolete
 * calls). It denies what QEMU never needs and what the kernel most often falls to:
 * mounts and namespaces, tracing other processes, kernel modules and kexec, BPF, perf,
 * userfaultfd, io_uring, keyrings, handle-based opens; other architectures' and x32
 * calls are refused. An allow-list would be tighter but would have to track every
 * QEMU release's needs (QEMU's own list does); this list only removes. */
#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)
#define NS_FLAGS (CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | \
		  CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWTIME)

static const struct sock_filter jail_filter[] = {
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),   /* x32 */
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
	/* clone3's flags live in memory a filter cannot read: glibc falls back to clone */
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, NS_FLAGS, 0, 1),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	DENY(__NR_mount), DENY(__NR_umount2), DENY(__NR_pivot_root), DENY(__NR_chroot),
	DENY(__NR_unshare), DENY(__NR_setns), DENY(__NR_ptrace), DENY(__NR_process_vm_readv),
	DENY(__NR_process_vm_writev), DENY(__NR_kcmp), DENY(__NR_pidfd_getfd),
	DENY(__NR_kexec_load), DENY(__NR_kexec_file_load), DENY(__NR_init_module),
	DENY(__NR_finit_module), DENY(__NR_delete_module), DENY(__NR_bpf),
	DENY(__NR_perf_event_open), DENY(__NR_userfaultfd), DENY(__NR_keyctl), DENY(__NR_add_key),
	DENY(__NR_request_key), DENY(__NR_open_by_handle_at), DENY(__NR_name_to_handle_at),
	DENY(__NR_swapon), DENY(__NR_swapoff), DENY(__NR_reboot), DENY(__NR_acct),
	DENY(__NR_quotactl), DENY(__NR_syslog), DENY(__NR_fanotify_init), DENY(__NR_iopl),
	DENY(__NR_ioperm), DENY(__NR_personality), DENY(__NR_vhangup), DENY(__NR_uselib),
	DENY(__NR_settimeofday), DENY(__NR_clock_settime), DENY(__NR_clock_adjtime),
	DENY(__NR_adjtimex), DENY(__NR_sethostname), DENY(__NR_setdomainname),
	DENY(__NR_fsopen), DENY(__NR_fsconfig), DENY(__NR_fsmount), DENY(__NR_fspick),
	DENY(__NR_move_mount), DENY(__NR_open_tree), DENY(__NR_mount_setattr),
	DENY(__NR_io_uring_setup), DENY(__NR_io_uring_enter), DENY(__NR_io_uring_register),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

int jail_seccomp(void)
{
	struct sock_fprog prog = { .len = ARRAY_SIZE(jail_filter),
				   .filter = (struct sock_filter *)jail_filter };

	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0 ? -errno : 0;
}

const char *jail_qemu_enter(const struct jail_spec *j)
{
	static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/random",
					    "/dev/urandom" };
	char dst[64];
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct caps[2];

	/* Into the sandbox's cgroups before anything else runs: "0" is the writer. */
	for (int i = 0; i < j->ncg; i++)
		if (write(j->cg_fds[i], "0", 1) != 1)
			return "entering the sandbox's cgroup";
	if (!j->uid)
		return NULL;

	/* A mount namespace for the root below; an empty network namespace (QEMU needs
	 * no network of its own: the NIC's socket is passed in), so an escaped QEMU cannot
	 * reach the host's loopback services, its abstract unix sockets or the outside
	 * past kosa8-net; its own SysV IPC. */
	if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC) < 0)
		return "unshare(mount, network, IPC namespaces)";
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return "making / private";
	if (mount("tmpfs", JAIL_ROOT, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "mode=0755,size=64k,nr_inodes=64") < 0)
		return "mounting the jail's tmpfs";
	if (bind_ro("/usr", JAIL_ROOT "/usr", true, true) < 0)
		return "binding /usr";
	for (int i = 0; i < 4; i++) {
		if (j->link[i][0] && symlink(j->link[i], jail_top[i]) < 0)
			return "linking /lib";
		if (j->dir[i] && bind_ro(host_top[i], jail_top[i], true, true) < 0)
			return "binding /lib";
	}
	if (j->ldcache && (mkdir(JAIL_ROOT "/etc", 0755) < 0 ||
			   bind_ro("/etc/ld.so.cache", JAIL_ROOT "/etc/ld.so.cache", false, true) < 0))
		return "binding /etc/ld.so.cache";
	if (j->preload) {
		static const char line[] = JAIL_PRELOAD "\n";
		int fd;

		if (bind_ro(j->preload, JAIL_ROOT JAIL_PRELOAD, false, true) < 0)
			return "binding the preloaded library";
		if ((mkdir(JAIL_ROOT "/etc", 0755) < 0 && errno != EEXIST) ||
		    (fd = open(JAIL_ROOT "/etc/ld.so.preload", O_WRONLY | O_CREAT | O_EXCL |
			       O_CLOEXEC, 0644)) < 0)
			return "writing /etc/ld.so.preload";
		if (write(fd, line, sizeof(line) - 1) != (ssize_t)sizeof(line) - 1) {
			close(fd);
			return "writing /etc/ld.so.preload";
		}
		close(fd);
	}
	/* /dev: a tmpfs of its own that allows device nodes; the four harmless ones are
	 * bound from the host, /dev/kvm (KVM only) is a node of its own owned by QEMU's
	 * uid, as Firecracker's jailer does: the host's is often 0600 root or 0660 kvm. */
	if (mkdir(JAIL_ROOT "/dev", 0755) < 0 ||
	    mount("tmpfs", JAIL_ROOT "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC,
		  "mode=0755,size=4k,nr_inodes=16") < 0)
		return "mounting /dev";
	if (j->kvm && (mknod(JAIL_ROOT "/dev/kvm", S_IFCHR | 0600, j->kvm_dev) < 0 ||
		       chown(JAIL_ROOT "/dev/kvm", j->uid, j->uid) < 0))
		return "making /dev/kvm";
	for (size_t i = 0; i < ARRAY_SIZE(devs); i++) {
		memcpy(dst, JAIL_ROOT, sizeof(JAIL_ROOT) - 1);
		memcpy(dst + sizeof(JAIL_ROOT) - 1, devs[i], strlen(devs[i]) + 1);
		if (bind_ro(devs[i], dst, false, false) < 0)
			return "binding a device node";
	}
	/* -kernel and -initrd are /proc/self/fd/3 and 4 (the verified open files). This
	 * procfs shows only pid directories, and of those only QEMU's own (its uid is the
	 * sandbox's alone): no /proc/sys, no other process. */
	if (mkdir(JAIL_ROOT "/proc", 0555) < 0 ||
	    mount("proc", JAIL_ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "hidepid=invisible,subset=pid") < 0)
		return "mounting /proc";
	if (chdir(JAIL_ROOT) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return "pivot_root";
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  NULL) < 0)
		return "making the jail's root read-only";

	/* Identity: every capability gone, for good. Not dumpable: PR_SET_DUMPABLE does
	 * not survive execve, but execve makes a process whose effective gid is not its
	 * real gid non-dumpable (as fs.suid_dumpable says, 0 or 2: never by its own uid),
	 * so no process of QEMU's uid may ptrace it or open its /proc/<pid>/mem, and its
	 * /proc files are root's. The real gid is JAIL_REAL_GID, which grants nothing:
	 * files are reached with the effective gid, signals look at uids only. No core file
	 * either (a core of QEMU is the guest's memory). */
	static const struct rlimit no_core = { 0, 0 };
	if (setrlimit(RLIMIT_CORE, &no_core) < 0)
		return "setting RLIMIT_CORE to 0";
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return "dropping the capability bounding set";
	if (syscall(SYS_setgroups, 0, NULL) < 0 ||
	    syscall(SYS_setresgid, JAIL_REAL_GID, j->uid, j->uid) < 0 ||
	    syscall(SYS_setresuid, j->uid, j->uid, j->uid) < 0)
		return "changing to the sandbox's uid";
	memset(caps, 0, sizeof(caps));
	if (syscall(SYS_capset, &hdr, caps) < 0)
		return "clearing capabilities";
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return "clearing ambient capabilities";
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return "no_new_privs";
	if (jail_seccomp() < 0)
		return "installing the seccomp filter";
	return NULL;
}
