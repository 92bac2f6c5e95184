/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8-fs: serves a sandbox's shared folders to the guest's FUSE mount.
 *
 *   kosa8-fs --id ID --control PATH --uid UID [--cgroup PROCS]... [--reserve SPEC]
 *            --mount-fd N:rw|ro [--mount-fd ...]                     (kosa8d)
 *   kosa8-fs --id ID --port PATH --control PATH --mount HOSTDIR:rw|ro [...]  (tests)
 *
 * As kosa8d starts it: the shares are inherited directory fds (pinned, idmapped clones
 * the daemon made, docs/shared-folders.md), and the process jails itself
 * (src/common/jail.c) before the first guest byte: its own uid, an empty mount
 * namespace, no capabilities, Landlock, then a seccomp filter that refuses any open by
 * absolute path and any new socket or connect. QEMU's port then arrives as an fd over
 * the control socket (op "port") after every QEMU start. Standalone (--port, --mount;
 * the tests that play QEMU) it connects to the port itself and is not jailed. A daemon
 * that is not root passes share fds without --uid: not jailed, port handed over.
 *
 * One thread, one ppoll loop: the virtio-serial port, the control socket and its
 * clients. A reply that does not fit in the socket stays queued and no
 * further request is read until it is gone, so control requests (save at checkpoint time,
 * while the VM is stopped and reads nothing) are always answered.
 */
#include "fs/fs.h"
#include "common/jail.h"
#include "common/util.h"

#include <fcntl.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#define MAX_CLIENTS 8
#define CLIENT_BUF 65536

struct client {
	int fd;
	char *buf;
	size_t len;
	int passed_fd;           /* an fd that came with the pending line, or -1 */
};

/* Start-up options beyond the mounts. */
struct fs_opts {
	const char *port, *ctl;
	struct jail_opts jail;
	bool jailed;
};

static volatile sig_atomic_t fs_stop;
static const char *fs_id = "?";

static void fs_log(const char *fmt, ...) K8_PRINTF(1, 2);
static void fs_log(const char *fmt, ...)
{
	int saved = errno;
	char ts[K8_TIME_LEN];
	va_list ap;

	k8_time_now(ts, 0);
	fprintf(stderr, "%s kosa8-fs[%s]: ", ts, fs_id);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	errno = saved;
}

static void fs_on_signal(int sig)
{
	(void)sig;
	fs_stop = 1;
}

static void fs_usage_error(const char *fmt, ...) K8_PRINTF(1, 2);
static void fs_usage_error(const char *fmt, ...)
{
	va_list ap;

	printf("error: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static int fs_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	mode_t old = umask(0177);
	rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc < 0 || chmod(path, 0600) < 0 || listen(fd, 4) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

static int fs_connect_port(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

/* Allow-list: file operations on fds, the sockets, memory (never executable), signals.
 * Anything else fails with EPERM: one unforeseen call degrades one request rather than
 * killing every shared folder of the sandbox; calls only an attacker would make (exec,
 * ptrace, mount, namespaces, modules, BPF, id changes) kill the process at once. */
/* Calls taking a directory fd (argument `arg`) are allowed only with a real fd there:
 * bit 31 of the int clear, so never AT_FDCWD (-100): no path from the (empty) root or
 * the cwd is ever walked. Seen by the kernel as an int, so only the low 32 bits count. */
static int fs_seccomp_dirfd(scmp_filter_ctx ctx, int nr, unsigned arg)
{
	return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
				SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, 0x80000000u, 0));
}

/* by_path: standalone with --port/--mount paths (tests): the path calls save/load by
 * path need, and a socket + connect for the port. Otherwise none of that. */
static int fs_seccomp(bool by_path)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	static const int allow[] = {
		SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
		SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(lseek), SCMP_SYS(close),
		SCMP_SYS(fstat), SCMP_SYS(fstatfs),
		SCMP_SYS(getdents64), SCMP_SYS(fchmod), SCMP_SYS(ftruncate), SCMP_SYS(fallocate),
		SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(copy_file_range), SCMP_SYS(fcntl),
		SCMP_SYS(dup), SCMP_SYS(dup3),
		SCMP_SYS(ppoll), SCMP_SYS(poll), SCMP_SYS(accept4),
		SCMP_SYS(accept), SCMP_SYS(setsockopt), SCMP_SYS(getsockopt), SCMP_SYS(shutdown),
		SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
		SCMP_SYS(getrandom), SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday),
		SCMP_SYS(time), SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(brk),
		SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(madvise), SCMP_SYS(rt_sigreturn),
		SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigaction), SCMP_SYS(exit),
		SCMP_SYS(exit_group), SCMP_SYS(futex), SCMP_SYS(getpid), SCMP_SYS(gettid),
		SCMP_SYS(tgkill), SCMP_SYS(geteuid), SCMP_SYS(getegid), SCMP_SYS(getuid),
		SCMP_SYS(getgid), SCMP_SYS(restart_syscall), SCMP_SYS(sched_yield),
	};
	static const int kill[] = {
		SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv),
		SCMP_SYS(process_vm_writev), SCMP_SYS(bpf), SCMP_SYS(init_module),
		SCMP_SYS(finit_module), SCMP_SYS(kexec_load), SCMP_SYS(mount), SCMP_SYS(umount2),
		SCMP_SYS(pivot_root), SCMP_SYS(chroot), SCMP_SYS(unshare), SCMP_SYS(setns),
		SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key), SCMP_SYS(userfaultfd),
		SCMP_SYS(perf_event_open), SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at),
		SCMP_SYS(setuid), SCMP_SYS(setgid), SCMP_SYS(setresuid), SCMP_SYS(setresgid),
		SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(clone), SCMP_SYS(clone3),
	};
	/* { syscall, index of its directory fd argument(s) } */
	static const struct { int nr; int a, b; } at[] = {
		{ SCMP_SYS(openat), 0, -1 }, { SCMP_SYS(openat2), 0, -1 },
		{ SCMP_SYS(newfstatat), 0, -1 }, { SCMP_SYS(statx), 0, -1 },
		{ SCMP_SYS(mkdirat), 0, -1 }, { SCMP_SYS(mknodat), 0, -1 },
		{ SCMP_SYS(unlinkat), 0, -1 }, { SCMP_SYS(renameat2), 0, 2 },
		{ SCMP_SYS(renameat), 0, 2 },       /* glibc's renameat2() with flags 0 */
		{ SCMP_SYS(linkat), 0, 2 }, { SCMP_SYS(symlinkat), 1, -1 },
		{ SCMP_SYS(readlinkat), 0, -1 }, { SCMP_SYS(fchmodat), 0, -1 },
		{ SCMP_SYS(utimensat), 0, -1 },
	};
	int rc = 0;

	if (!ctx)
		return -ENOMEM;
	for (size_t i = 0; i < ARRAY_SIZE(allow) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allow[i], 0);
	static const int standalone[] = {   /* save/load by path: tests, debugging */
		SCMP_SYS(open), SCMP_SYS(rename), SCMP_SYS(unlink), SCMP_SYS(statfs),
	};
	for (size_t i = 0; i < ARRAY_SIZE(at) && rc == 0; i++) {
		if (by_path)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, at[i].nr, 0);
		else if (at[i].b < 0)
			rc = fs_seccomp_dirfd(ctx, at[i].nr, (unsigned)at[i].a);
		else
			rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, at[i].nr, 2,
					      SCMP_CMP((unsigned)at[i].a, SCMP_CMP_MASKED_EQ,
						       0x80000000u, 0),
					      SCMP_CMP((unsigned)at[i].b, SCMP_CMP_MASKED_EQ,
						       0x80000000u, 0));
	}
	for (size_t i = 0; i < ARRAY_SIZE(kill) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, kill[i], 0);
	for (size_t i = 0; i < ARRAY_SIZE(standalone) && rc == 0 && by_path; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, standalone[i], 0);
	/* Standalone (tests): the port is reached by path, a unix socket. Jailed: the
	 * daemon hands the port over; no socket is made and nothing is connected. */
	if (rc == 0 && by_path)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
	if (rc == 0 && by_path)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(connect), 0);
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

/* Write out the queued reply, then handle requests until one's reply cannot be written
 * at once or the input runs dry. 0, or -errno when the link must be dropped. */
static int fs_pump(struct fs_ctx *c, int port)
{
	for (;;) {
		while (c->out_off < c->out_len) {
			ssize_t n = send(port, c->out + c->out_off, c->out_len - c->out_off,
					 MSG_NOSIGNAL);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return errno == EAGAIN ? 0 : -errno;
			}
			c->out_off += (size_t)n;
		}
		c->out_off = c->out_len = 0;
		int r = fs_conn_step(c);
		if (r <= 0)
			return r;
	}
}

/* Read from a control client; an fd passed along (SCM_RIGHTS) is kept for its line. */
static ssize_t fs_client_recv(struct client *cl)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct iovec iov = { .iov_base = cl->buf + cl->len, .iov_len = CLIENT_BUF - cl->len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	ssize_t n = recvmsg(cl->fd, &mh, MSG_CMSG_CLOEXEC);

	if (n < 0)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (cl->passed_fd >= 0)
				close(cl->passed_fd);      /* one per line: the last one wins */
			cl->passed_fd = fd;
		}
	}
	return n;
}

static void fs_client_input(struct fs_ctx *c, struct client *cl)
{
	ssize_t n = fs_client_recv(cl);
	char *nl;

	if (n <= 0) {
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		goto drop;
	}
	cl->len += (size_t)n;
	while ((nl = memchr(cl->buf, '\n', cl->len))) {
		size_t l = (size_t)(nl - cl->buf);
		cleanup_free char *resp = fs_ctl_handle(c, cl->buf, l, &cl->passed_fd);

		if (cl->passed_fd >= 0) {        /* not wanted by that op */
			close(cl->passed_fd);
			cl->passed_fd = -1;
		}
		memmove(cl->buf, nl + 1, cl->len - l - 1);
		cl->len -= l + 1;
		if (write_full(cl->fd, resp, strlen(resp)) < 0)
			goto drop;
	}
	if (cl->len == CLIENT_BUF)
		goto drop;               /* a line longer than we accept */
	return;
drop:
	close(cl->fd);
	if (cl->passed_fd >= 0)
		close(cl->passed_fd);
	cl->passed_fd = -1;
	free(cl->buf);
	cl->fd = -1;
	cl->buf = NULL;
	cl->len = 0;
}

#define FS_USAGE "usage: kosa8-fs --id ID --control PATH (--uid UID [--cgroup PROCS]... " \
	"[--reserve SIZE[,PCT%]] --mount-fd N:rw|ro ... | --port PATH --mount HOSTDIR:rw|ro ...)"

static void fs_parse_args(int argc, char **argv, struct fs_ctx *c, struct fs_opts *o)
{
	const char **port = &o->port, **ctl = &o->ctl;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			printf("%s\n", FS_USAGE);
			exit(0);
		}
		if (!v)
			fs_usage_error("%s needs a value", a);
		i++;
		if (!strcmp(a, "--id")) {
			fs_id = v;
		} else if (!strcmp(a, "--port")) {
			*port = v;
		} else if (!strcmp(a, "--control")) {
			*ctl = v;
		} else if (!strcmp(a, "--uid")) {
			char *e;
			unsigned long u = strtoul(v, &e, 10);
			if (*e || !u || u > 0xfffffffful)
				fs_usage_error("--uid %s: expected a uid other than 0", v);
			o->jail.uid = (uid_t)u;
			o->jail.gid = (gid_t)u;
			o->jailed = true;
		} else if (!strcmp(a, "--cgroup")) {
			if (o->jail.ncgroups >= JAIL_MAX_CGROUPS)
				fs_usage_error("at most %d --cgroup", JAIL_MAX_CGROUPS);
			o->jail.cgroups[o->jail.ncgroups++] = v;
		} else if (!strcmp(a, "--reserve")) {
			if (fs_reserve_parse(v, &c->reserve_bytes, &c->reserve_pct) < 0)
				fs_usage_error("--reserve %s: expected SIZE[,PCT%%] like 1G,5%% "
					       "(SIZE with K, M, G or T; PCT at most 90)", v);
		} else if (!strcmp(a, "--mount-fd")) {
			char *e;
			long fd = strtol(v, &e, 10);
			int r;
			if (fd < 3 || fd > 1023 || (strcmp(e, ":ro") && strcmp(e, ":rw")))
				fs_usage_error("--mount-fd %s: expected N:rw or N:ro", v);
			if (c->nmounts >= K8FS_MAX_MOUNTS)
				fs_usage_error("at most %d mounts", K8FS_MAX_MOUNTS);
			if ((r = fs_mount_add_fd(c, (int)fd, !strcmp(e, ":ro"))) < 0)
				fs_usage_error("--mount-fd %s: %s", v, strerror(-r));
		} else if (!strcmp(a, "--mount")) {
			const char *colon = strrchr(v, ':');
			cleanup_free char *dir = NULL;
			bool ro;
			int r;

			if (!colon || (strcmp(colon, ":ro") && strcmp(colon, ":rw")) || colon == v)
				fs_usage_error("--mount %s: expected HOSTDIR:rw or HOSTDIR:ro", v);
			ro = !strcmp(colon, ":ro");
			dir = strndup(v, (size_t)(colon - v));
			if (c->nmounts >= K8FS_MAX_MOUNTS)
				fs_usage_error("at most %d --mount", K8FS_MAX_MOUNTS);
			if ((r = fs_mount_add(c, dir, ro)) < 0)
				fs_usage_error("--mount %s: %s", dir, strerror(-r));
		} else {
			fs_usage_error("unknown option %s", a);
		}
	}
	if (!*ctl || !c->nmounts)
		fs_usage_error("%s", FS_USAGE);
	if (*port && o->jailed)
		fs_usage_error("--port is for standalone use; jailed, the daemon hands it over");
}

/* The jail (src/common/jail.c): Landlock lets us reach the shares only, the read-only
 * ones read-only. Then the seccomp filter. Any failure ends the process: serving the
 * guest half-jailed is not an option. */
static void fs_enter_jail(struct fs_ctx *c, struct fs_opts *o)
{
	struct k8_err err = { 0 };
	struct jail_report rep;

	for (uint32_t i = 0; i < c->nmounts; i++)
		o->jail.dirs[o->jail.ndirs++] = (struct jail_dir){ c->mounts[i].fd,
								   c->mounts[i].ro };
	o->jail.landlock = true;
	if (jail_enter(&o->jail, &rep, &err) < 0)
		fs_usage_error("jail: %s", err.msg);
	fs_log("jailed: uid %u, empty mount namespace, no capabilities, %s",
	       (unsigned)o->jail.uid, rep.landlock_abi ? "landlock" : "no landlock (kernel)");
}

int main(int argc, char **argv)
{
	static struct fs_ctx ctx;
	struct fs_ctx *c = &ctx;
	struct client clients[MAX_CLIENTS];
	static struct fs_opts opts;
	const char *port_path, *ctl_path;
	struct sigaction sa = { .sa_handler = fs_on_signal };
	sigset_t block, orig;
	struct rlimit rl;
	uint64_t next_try = 0;
	int lfd, port = -1, r;

	for (int i = 0; i < MAX_CLIENTS; i++)
		clients[i] = (struct client){ .fd = -1, .passed_fd = -1 };
	c->proc_fd = -1;
	c->port_handoff = -1;
	c->log = fs_log;
	fs_parse_args(argc, argv, c, &opts);
	port_path = opts.port;
	ctl_path = opts.ctl;
	/* modes come from the guest request (already masked by its umask), minus S_IS[UG]ID */
	umask(0);
	/* Every node the guest holds is an O_PATH fd: room for the caps (raising the hard
	 * limit works while we are still root), and the node cap lowered to what the
	 * limit leaves, so the guest gets ENFILE from the cap, never EMFILE. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rlim_t want = K8FS_MAX_NODES + K8FS_MAX_HANDLES + 256;
		if (rl.rlim_max < want) {
			struct rlimit up = { want, want };
			if (setrlimit(RLIMIT_NOFILE, &up) == 0)
				rl = up;
		}
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
		/* a limit we could not raise (no CAP_SYS_RESOURCE): a quarter for handles */
		if (rl.rlim_cur < want) {
			c->max_handles = (size_t)rl.rlim_cur / 4;
			c->max_nodes = rl.rlim_cur > c->max_handles + 512
				? (size_t)rl.rlim_cur - c->max_handles - 256 : (size_t)rl.rlim_cur / 4;
			fs_log("open files limited to %llu: at most %zu nodes, %zu handles",
			       (unsigned long long)rl.rlim_cur, c->max_nodes, c->max_handles);
		}
	}
	if ((r = fs_ctx_init(c)) < 0)
		fs_usage_error("cannot set up: %s", strerror(-r));
	if ((lfd = fs_listen(ctl_path)) < 0)
		fs_usage_error("control socket %s: %s", ctl_path, strerror(-lfd));
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &orig);
	for (uint32_t i = 0; i < c->nmounts; i++)
		fs_log("mount %u: %s (%s)", i, c->mounts[i].path, c->mounts[i].ro ? "ro" : "rw");
	int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (opts.jailed)
		fs_enter_jail(c, &opts);
	/* the jail is not optional; seccomp is, for debugging standalone */
	if (opts.jailed || getenv("KOSA8_FS_NO_SECCOMP") == NULL) {
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		if ((r = fs_seccomp(port_path != NULL)) < 0)
			fs_usage_error("seccomp: %s", strerror(-r));
	}
	printf("ready\n");
	fflush(stdout);
	if (devnull >= 0) {
		dup2(devnull, 1);
		close(devnull);
	}

	while (!fs_stop) {
		struct pollfd pf[2 + MAX_CLIENTS];
		int np = 0, port_i = -1, cl_i[MAX_CLIENTS];
		int timeout_ms = -1;
		uint64_t now = now_mono_ns();

		if (c->port_handoff >= 0) {
			/* a new QEMU: whatever the old link carried is gone */
			if (port >= 0) {
				close(port);
				fs_conn_drop(c);
			}
			port = c->port_handoff;
			c->port_handoff = -1;
			fcntl(port, F_SETFL, fcntl(port, F_GETFL) | O_NONBLOCK);
			next_try = 0;
			goto connected;
		}
		if (port < 0 && port_path) {
			if (now >= next_try) {
				port = fs_connect_port(port_path);
				if (port >= 0) {
connected:;
					uint8_t nonce[K8FS_NONCE_LEN];
					if (getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce)) {
						fs_log("getrandom failed: %s", strerror(errno));
						return 1;
					}
					fs_conn_reset(c, nonce);
					fs_log("connected to %s", port_path ? port_path
								  : "the port the daemon passed");
					if ((r = fs_pump(c, port)) < 0)
						goto drop;
				} else {
					next_try = now + 100000000ull;
				}
			}
			if (port < 0)
				timeout_ms = (int)((next_try - now) / 1000000) + 1;
		}
		pf[np++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		if (port >= 0) {
			port_i = np;
			pf[np++] = (struct pollfd){ .fd = port,
				.events = c->out_off < c->out_len ? POLLOUT : POLLIN };
		}
		for (int i = 0; i < MAX_CLIENTS; i++) {
			cl_i[i] = -1;
			if (clients[i].fd >= 0) {
				cl_i[i] = np;
				pf[np++] = (struct pollfd){ .fd = clients[i].fd, .events = POLLIN };
			}
		}
		struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000 };
		if (ppoll(pf, (nfds_t)np, timeout_ms < 0 ? NULL : &ts, &orig) < 0) {
			if (errno == EINTR)
				continue;
			fs_log("ppoll: %s", strerror(errno));
			return 1;
		}
		if (pf[0].revents & POLLIN) {
			int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (cfd >= 0) {
				struct timeval tv = { 2, 0 };
				int i;
				setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
				for (i = 0; i < MAX_CLIENTS && clients[i].fd >= 0; i++)
					;
				if (i == MAX_CLIENTS) {
					close(cfd);
				} else {
					clients[i].fd = cfd;
					clients[i].buf = xmalloc(CLIENT_BUF);
					clients[i].len = 0;
				}
			}
		}
		for (int i = 0; i < MAX_CLIENTS; i++)
			if (cl_i[i] >= 0 && (pf[cl_i[i]].revents & (POLLIN | POLLHUP | POLLERR)))
				fs_client_input(c, &clients[i]);
		if (port_i < 0 || port < 0 || !pf[port_i].revents)
			continue;
		if (pf[port_i].revents & POLLIN) {
			size_t room;
			uint8_t *p = fs_conn_room(c, &room);
			ssize_t n = room ? read(port, p, room) : 0;

			if (n == 0 && room) {
				fs_log("port closed; reconnecting");
				r = -ECONNRESET;
				goto drop;
			}
			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				r = -errno;
				goto drop;
			}
			if (n > 0)
				fs_conn_added(c, (size_t)n);
		} else if (pf[port_i].revents & (POLLHUP | POLLERR)) {
			r = -ECONNRESET;
			goto drop;
		}
		if ((r = fs_pump(c, port)) == 0)
			continue;
		if (r == -EPROTO)
			fs_log("protocol error from the guest (bad request length); "
			       "dropping the link to resync");
drop:
		if (r != -ECONNRESET)
			fs_log("link dropped: %s", strerror(-r));
		close(port);
		port = -1;
		fs_conn_drop(c);
		next_try = now_mono_ns() + 100000000ull;
	}
	fs_log("stopping");
	if (!opts.jailed)
		unlink(ctl_path);
	for (int i = 0; i < MAX_CLIENTS; i++)
		if (clients[i].fd >= 0) {
			close(clients[i].fd);
			free(clients[i].buf);
		}
	if (port >= 0)
		close(port);
	close(lfd);
	fs_ctx_free(c);
	return 0;
}
