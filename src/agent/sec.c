/* SPDX-License-Identifier: Apache-2.0 */
/* sec.c - the containers' seccomp filter: an allow-list with the intent of Docker's
 * default profile, for the capability set every container gets (launch.c).
 *
 * Theory of operation: the list below is compiled once by libseccomp (linked statically)
 * into a classic BPF program, exported through a memfd and kept in the agent; each new
 * process loads that program right before it gives up its capabilities, so building the
 * filter costs one container start once, and loading it a single syscall.
 *
 * What the list leaves out, and why (everything absent answers EPERM, Docker's default):
 *   mount, umount2, pivot_root, the new mount API, unshare, setns, clone/clone3 with
 *   namespace flags     the container's view of the file systems and namespaces is fixed
 *   sethostname, setdomainname          UTS belongs to the agent
 *   kexec_*, *_module, reboot, swapon/off, acct, quotactl, syslog
 *                                       whole-VM operations
 *   bpf, perf_event_open, userfaultfd, io_uring_*
 *                                       large kernel attack surface (io_uring and bpf are
 *                                       also compiled out of the guest kernel)
 *   keyctl, add_key, request_key        the kernel keyring is not namespaced
 *   clock_settime, settimeofday, iopl, ioperm, vhangup, mbind, set_mempolicy, kcmp,
 *   pidfd_getfd, process_madvise, open_by_handle_at, lookup_dcookie, fanotify_init
 *                                       need capabilities a container does not have
 *   socket(AF_VSOCK)                    no path to the host outside kosa8's own channels
 * and differs from Docker's in: x86-64 only (a syscall through the i386 or x32 ABI kills
 * the process: the guest kernel is x86-64 and the images are amd64), io_uring refused.
 */
#include "agent.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Allowed without looking at arguments. Names libseccomp does not know are skipped. */
static const char *const sec_allow[] = {
	/* files and directories */
	"access", "chdir", "chmod", "chown", "close", "close_range", "copy_file_range", "creat",
	"dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fallocate", "fchdir",
	"fchmod", "fchmodat", "fchown", "fchownat", "fcntl", "fdatasync", "flock", "fstat",
	"fstatfs", "fsync", "ftruncate", "futimesat", "getcwd", "getdents", "getdents64",
	"lchown", "link", "linkat", "lseek", "lstat", "mkdir", "mkdirat", "mknod", "mknodat",
	"name_to_handle_at", "newfstatat", "open", "openat", "openat2", "pread64", "preadv",
	"preadv2", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
	"readlinkat", "readv", "rename", "renameat", "renameat2", "rmdir", "sendfile", "splice",
	"stat", "statfs", "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs",
	"tee", "truncate", "umask", "unlink", "unlinkat", "utime", "utimensat", "utimes",
	"vmsplice", "write", "writev",
	/* extended attributes, inotify, fanotify marks */
	"fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "lgetxattr",
	"listxattr", "llistxattr", "lremovexattr", "lsetxattr", "removexattr", "setxattr",
	"inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "fanotify_mark",
	/* memory */
	"brk", "madvise", "membarrier", "memfd_create", "memfd_secret", "mincore", "mlock",
	"mlock2", "mlockall", "mmap", "mprotect", "mremap", "msync", "munlock", "munlockall",
	"munmap", "pkey_alloc", "pkey_free", "pkey_mprotect", "remap_file_pages",
	/* processes, threads, signals */
	"arch_prctl", "capget", "capset", "execve", "execveat", "exit", "exit_group", "fork",
	"get_robust_list", "get_thread_area", "getcpu", "getegid", "geteuid", "getgid",
	"getgroups", "getitimer", "getpgid", "getpgrp", "getpid", "getppid", "getpriority",
	"getresgid", "getresuid", "getrlimit", "getrusage", "getsid", "gettid", "getuid",
	"ioprio_get", "ioprio_set", "kill", "modify_ldt", "pause", "pidfd_open",
	"pidfd_send_signal", "prctl", "prlimit64", "process_mrelease", "process_vm_readv",
	"process_vm_writev", "ptrace", "restart_syscall", "rseq", "rt_sigaction",
	"rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
	"rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_get_priority_max",
	"sched_get_priority_min", "sched_getaffinity", "sched_getattr", "sched_getparam",
	"sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity", "sched_setattr",
	"sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "set_robust_list",
	"set_thread_area", "set_tid_address", "setfsgid", "setfsuid", "setgid", "setgroups",
	"setitimer", "setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid",
	"setrlimit", "setsid", "setuid", "sigaltstack", "tgkill", "tkill", "vfork", "wait4",
	"waitid", "chroot",
	/* time (reading it; setting needs CAP_SYS_TIME, which containers lack) */
	"adjtimex", "alarm", "clock_adjtime", "clock_getres", "clock_gettime", "clock_nanosleep",
	"gettimeofday", "nanosleep", "time", "timer_create", "timer_delete", "timer_getoverrun",
	"timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	"times",
	/* waiting and events */
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait",
	"eventfd", "eventfd2", "futex", "futex_waitv", "pipe", "pipe2", "poll", "ppoll",
	"pselect6", "select", "signalfd", "signalfd4", "ioctl",
	/* sockets (socket() itself below) */
	"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt",
	"listen", "recvfrom", "recvmmsg", "recvmsg", "sendmmsg", "sendmsg", "sendto",
	"setsockopt", "shutdown", "socketpair",
	/* System V and POSIX IPC (the container's own IPC namespace) */
	"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink",
	"msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop",
	"shmat", "shmctl", "shmdt", "shmget",
	/* asynchronous I/O (not io_uring), sandboxing, information */
	"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_setup", "io_submit",
	"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "getrandom",
	"sysinfo", "uname",
};

/* The namespace flags of clone(2): a container cannot make namespaces (CAP_SYS_ADMIN). */
#define SEC_CLONE_NS_FLAGS                                                                    \
	(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | \
	 CLONE_NEWCGROUP)

/* personality(2) values Docker allows: Linux, 32-bit, UNAME26 and the query. */
static const uint32_t sec_personalities[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffff };

static int sec_rules(scmp_filter_ctx ctx)
{
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(sec_allow); i++) {
		int nr = seccomp_syscall_resolve_name(sec_allow[i]);

		if (nr == __NR_SCMP_ERROR)
			continue; /* newer than this libseccomp: stays refused */
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0)) < 0)
			return r;
	}
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, SEC_CLONE_NS_FLAGS, 0))) < 0)
		return r;
	/* ENOSYS, not EPERM: glibc then falls back to clone(2), where the flags are seen
	 * (clone3 passes them in memory a filter cannot read). */
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
		return r;
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				  SCMP_A0(SCMP_CMP_NE, AF_VSOCK))) < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(sec_personalities); i++)
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
					  SCMP_A0(SCMP_CMP_EQ, sec_personalities[i]))) < 0)
			return r;
	return 0;
}

int sec_build(struct agent *a)
{
	scmp_filter_ctx ctx;
	struct stat st;
	void *prog = NULL;
	int fd = -1, r;

	if (a->sec_prog)
		return 0;
	ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!ctx)
		return -ENOMEM;
	/* No NO_NEW_PRIVS from libseccomp: launch.c sets it only when asked (as Docker). */
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0 ||
	    (r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0 ||
	    (r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0 || (r = sec_rules(ctx)) < 0)
		goto out;
	fd = memfd_create("kosa8-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	if ((r = seccomp_export_bpf(ctx, fd)) < 0)
		goto out;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter) ||
	    st.st_size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS) {
		r = -E2BIG;
		goto out;
	}
	prog = xmalloc((size_t)st.st_size);
	if (pread(fd, prog, (size_t)st.st_size, 0) != st.st_size) {
		r = -EIO;
		goto out;
	}
	a->sec_prog = steal_pointer(&prog);
	a->sec_len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
	r = 0;
out:
	free(prog);
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return r;
}

int sec_apply(const struct agent *a, int no_new_privs)
{
	struct sock_fprog fp = { .len = a->sec_len, .filter = a->sec_prog };

	if (!a->sec_prog)
		return -ENOENT;
	if (no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	/* No SECCOMP_FILTER_FLAG_SPEC_ALLOW: the kernel's own default for filtered tasks
	 * applies (on the guest's 6.1 kernel, speculative store bypass mitigation is per
	 * prctl, not forced by seccomp), rather than opting out of a mitigation. */
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp) < 0)
		return -errno;
	return 0;
}
