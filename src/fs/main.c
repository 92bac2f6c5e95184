/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8-fs: serves a sandbox's shared folders to the guest's FUSE mount.
 *
 *   kosa8-fs --id ID --port PATH --control PATH --mount HOSTDIR:rw|ro [--mount ...]
 *
 * One thread, one ppoll loop: the virtio-serial port (a unix socket QEMU serves; we
 * connect, and reconnect after every EOF, every 100 ms until it answers), the control
 * socket and its clients. A reply that does not fit in the socket stays queued and no
 * further request is read until it is gone, so control requests (save at checkpoint time,
 * while the VM is stopped and reads nothing) are always answered.
 */
#include "fs/fs.h"
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
};

static volatile sig_atomic_t fs_stop;
static const char *fs_id = "?";

static void fs_log(const char *fmt, ...) K8_PRINTF(1, 2);
static void fs_log(const char *fmt, ...)
{
	char ts[32];
	time_t t = time(NULL);
	struct tm tm;
	va_list ap;

	gmtime_r(&t, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	fprintf(stderr, "%s kosa8-fs[%s]: ", ts, fs_id);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
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
static int fs_seccomp(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	static const int allow[] = {
		SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
		SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(lseek), SCMP_SYS(close),
		SCMP_SYS(openat), SCMP_SYS(openat2), SCMP_SYS(open), SCMP_SYS(fstat),
		SCMP_SYS(newfstatat), SCMP_SYS(statx), SCMP_SYS(fstatfs), SCMP_SYS(statfs),
		SCMP_SYS(getdents64), SCMP_SYS(mkdirat), SCMP_SYS(mknodat), SCMP_SYS(unlinkat),
		SCMP_SYS(unlink), SCMP_SYS(rename), SCMP_SYS(renameat), SCMP_SYS(renameat2),
		SCMP_SYS(linkat), SCMP_SYS(symlinkat), SCMP_SYS(readlinkat), SCMP_SYS(fchmodat),
		SCMP_SYS(fchmod), SCMP_SYS(utimensat), SCMP_SYS(ftruncate), SCMP_SYS(fallocate),
		SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(copy_file_range), SCMP_SYS(fcntl),
		SCMP_SYS(dup), SCMP_SYS(dup3),
		SCMP_SYS(ppoll), SCMP_SYS(poll), SCMP_SYS(connect), SCMP_SYS(accept4),
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
	int rc = 0;

	if (!ctx)
		return -ENOMEM;
	for (size_t i = 0; i < ARRAY_SIZE(allow) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allow[i], 0);
	for (size_t i = 0; i < ARRAY_SIZE(kill) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, kill[i], 0);
	if (rc == 0)   /* the port: unix sockets only */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
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

static void fs_client_input(struct fs_ctx *c, struct client *cl)
{
	ssize_t n = read(cl->fd, cl->buf + cl->len, CLIENT_BUF - cl->len);
	char *nl;

	if (n <= 0) {
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		goto drop;
	}
	cl->len += (size_t)n;
	while ((nl = memchr(cl->buf, '\n', cl->len))) {
		size_t l = (size_t)(nl - cl->buf);
		cleanup_free char *resp = fs_ctl_handle(c, cl->buf, l);

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
	free(cl->buf);
	cl->fd = -1;
	cl->buf = NULL;
	cl->len = 0;
}

static void fs_parse_args(int argc, char **argv, struct fs_ctx *c, const char **port,
			  const char **ctl)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			printf("usage: kosa8-fs --id ID --port PATH --control PATH "
			       "--mount HOSTDIR:rw|ro [--mount ...]\n");
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
	if (!*port || !*ctl || !c->nmounts)
		fs_usage_error("usage: kosa8-fs --id ID --port PATH --control PATH "
			       "--mount HOSTDIR:rw|ro [--mount ...]");
}

int main(int argc, char **argv)
{
	static struct fs_ctx ctx;
	struct fs_ctx *c = &ctx;
	struct client clients[MAX_CLIENTS];
	const char *port_path = NULL, *ctl_path = NULL;
	struct sigaction sa = { .sa_handler = fs_on_signal };
	sigset_t block, orig;
	struct rlimit rl;
	uint64_t next_try = 0;
	int lfd, port = -1, r;

	for (int i = 0; i < MAX_CLIENTS; i++)
		clients[i] = (struct client){ .fd = -1 };
	c->proc_fd = -1;
	fs_parse_args(argc, argv, c, &port_path, &ctl_path);
	/* modes come from the guest request (already masked by its umask), minus S_IS[UG]ID */
	umask(0);
	/* every node the guest holds is an O_PATH fd */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
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
	if (getenv("KOSA8_FS_NO_SECCOMP") == NULL) {
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		if ((r = fs_seccomp()) < 0)
			fs_usage_error("seccomp: %s", strerror(-r));
	}
	printf("ready\n");
	fflush(stdout);
	int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull >= 0) {
		dup2(devnull, 1);
		close(devnull);
	}

	while (!fs_stop) {
		struct pollfd pf[2 + MAX_CLIENTS];
		int np = 0, port_i = -1, cl_i[MAX_CLIENTS];
		int timeout_ms = -1;
		uint64_t now = now_mono_ns();

		if (port < 0) {
			if (now >= next_try) {
				port = fs_connect_port(port_path);
				if (port >= 0) {
					uint8_t nonce[K8FS_NONCE_LEN];
					if (getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce)) {
						fs_log("getrandom failed: %s", strerror(errno));
						return 1;
					}
					fs_conn_reset(c, nonce);
					fs_log("connected to %s", port_path);
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
