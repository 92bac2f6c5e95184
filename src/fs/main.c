/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8-fs: serves a sandbox's shared folders to the guest's FUSE mount.
 *
 *   kosa8-fs --id ID --control PATH --uid UID [--cgroup PROCS]... [--reserve SPEC]
 *            [--max-nodes N] --mount-fd N:rw|ro [--mount-fd ...]     (kosa8d)
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
#include "common/sidecar.h"
#include "common/util.h"

#include <fcntl.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#define CTL_LINE_MAX 65536             /* its requests are short */

/* Start-up options beyond the mounts. */
struct fs_opts {
	const char *port, *ctl;
	struct jail_opts jail;
	bool jailed;
	size_t max_nodes;            /* --max-nodes (0: K8FS_MAX_NODES) */
};

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

/* The sidecars' base filter (src/common/sidecar_seccomp.c) plus file operations on fds
 * and the rest below. Anything else fails with EPERM: one unforeseen call degrades one
 * request rather than killing every shared folder of the sandbox; calls only an
 * attacker would make (exec, ptrace, mount, namespaces, modules, BPF, id changes, and
 * here any new process or thread) kill the process at once. */
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
	scmp_filter_ctx ctx = sc_seccomp_new();
	static const int allow[] = {
		SCMP_SYS(pread64), SCMP_SYS(pwrite64), SCMP_SYS(fstatfs), SCMP_SYS(getdents64),
		SCMP_SYS(fchmod), SCMP_SYS(ftruncate), SCMP_SYS(fallocate), SCMP_SYS(fsync),
		SCMP_SYS(fdatasync), SCMP_SYS(copy_file_range), SCMP_SYS(dup), SCMP_SYS(dup3),
		SCMP_SYS(accept), SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep),
		SCMP_SYS(rt_sigaction), SCMP_SYS(geteuid), SCMP_SYS(getegid), SCMP_SYS(getuid),
		SCMP_SYS(getgid), SCMP_SYS(sched_yield),
	};
	static const int kill[] = {
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
	rc = sc_seccomp_add(ctx, SCMP_ACT_ALLOW, allow, ARRAY_SIZE(allow));
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
	if (rc == 0)
		rc = sc_seccomp_add(ctx, SCMP_ACT_KILL_PROCESS, kill, ARRAY_SIZE(kill));
	if (rc == 0 && by_path)
		rc = sc_seccomp_add(ctx, SCMP_ACT_ALLOW, standalone, ARRAY_SIZE(standalone));
	/* Standalone (tests): the port is reached by path, a unix socket. Jailed: the
	 * daemon hands the port over; no socket is made and nothing is connected. */
	if (rc == 0 && by_path)
		rc = sc_seccomp_socket(ctx, (const int[]){ AF_UNIX }, 1);
	if (rc == 0 && by_path)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(connect), 0);
	if (rc < 0) {
		seccomp_release(ctx);
		return rc;
	}
	return sc_seccomp_load(ctx);
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

#define FS_USAGE "usage: kosa8-fs --id ID --control PATH (--uid UID [--cgroup PROCS]... " \
	"[--reserve SIZE[,PCT%]] [--max-nodes N] --mount-fd N:rw|ro ... | " \
	"--port PATH --mount HOSTDIR:rw|ro ...)"

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
			sc_die("%s needs a value", a);
		i++;
		if (!strcmp(a, "--id")) {
			sc_set_id(v);
		} else if (!strcmp(a, "--port")) {
			*port = v;
		} else if (!strcmp(a, "--control")) {
			*ctl = v;
		} else if (!strcmp(a, "--uid")) {
			char *e;
			unsigned long u = strtoul(v, &e, 10);
			if (*e || !u || u > 0xfffffffful)
				sc_die("--uid %s: expected a uid other than 0", v);
			o->jail.uid = (uid_t)u;
			o->jail.gid = (gid_t)u;
			o->jailed = true;
		} else if (!strcmp(a, "--cgroup")) {
			if (o->jail.ncgroups >= JAIL_MAX_CGROUPS)
				sc_die("at most %d --cgroup", JAIL_MAX_CGROUPS);
			o->jail.cgroups[o->jail.ncgroups++] = v;
		} else if (!strcmp(a, "--reserve")) {
			if (fs_reserve_parse(v, &c->reserve_bytes, &c->reserve_pct) < 0)
				sc_die("--reserve %s: expected SIZE[,PCT%%] like 1G,5%% "
					       "(SIZE with K, M, G or T; PCT at most 90)", v);
		} else if (!strcmp(a, "--max-nodes")) {
			char *e;
			unsigned long n = strtoul(v, &e, 10);
			if (*e || n < 16 || n > K8FS_MAX_NODES)
				sc_die("--max-nodes %s: expected 16 to %u", v, K8FS_MAX_NODES);
			o->max_nodes = n;
		} else if (!strcmp(a, "--mount-fd")) {
			char *e;
			long fd = strtol(v, &e, 10);
			int r;
			if (fd < 3 || fd > 1023 || (strcmp(e, ":ro") && strcmp(e, ":rw")))
				sc_die("--mount-fd %s: expected N:rw or N:ro", v);
			if (c->nmounts >= K8FS_MAX_MOUNTS)
				sc_die("at most %d mounts", K8FS_MAX_MOUNTS);
			if ((r = fs_mount_add_fd(c, (int)fd, !strcmp(e, ":ro"))) < 0)
				sc_die("--mount-fd %s: %s", v, strerror(-r));
		} else if (!strcmp(a, "--mount")) {
			const char *colon = strrchr(v, ':');
			cleanup_free char *dir = NULL;
			bool ro;
			int r;

			if (!colon || (strcmp(colon, ":ro") && strcmp(colon, ":rw")) || colon == v)
				sc_die("--mount %s: expected HOSTDIR:rw or HOSTDIR:ro", v);
			ro = !strcmp(colon, ":ro");
			dir = strndup(v, (size_t)(colon - v));
			if (c->nmounts >= K8FS_MAX_MOUNTS)
				sc_die("at most %d --mount", K8FS_MAX_MOUNTS);
			if ((r = fs_mount_add(c, dir, ro)) < 0)
				sc_die("--mount %s: %s", dir, strerror(-r));
		} else {
			sc_die("unknown option %s", a);
		}
	}
	if (!*ctl || !c->nmounts)
		sc_die("%s", FS_USAGE);
	if (*port && o->jailed)
		sc_die("--port is for standalone use; jailed, the daemon hands it over");
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
		sc_die("jail: %s", err.msg);
	sc_log("jailed: uid %u, empty mount namespace, no capabilities, %s",
	       (unsigned)o->jail.uid, rep.landlock_abi ? "landlock" : "no landlock (kernel)");
}

int main(int argc, char **argv)
{
	static struct fs_ctx ctx;
	struct fs_ctx *c = &ctx;
	static struct fs_opts opts;
	const char *port_path, *ctl_path;
	sigset_t orig;
	struct rlimit rl;
	uint64_t next_try = 0;
	struct sc_ctl ctl;
	int lfd, port = -1, r;

	sc_init("kosa8-fs", NULL);
	c->proc_fd = -1;
	c->port_handoff = -1;
	c->log = sc_log;
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
			sc_log("open files limited to %llu: at most %zu nodes, %zu handles",
			       (unsigned long long)rl.rlim_cur, c->max_nodes, c->max_handles);
		}
	}
	/* a lower cap asked for (config.json's fs_max_nodes) */
	if (opts.max_nodes && (!c->max_nodes || opts.max_nodes < c->max_nodes)) {
		c->max_nodes = opts.max_nodes;
		sc_log("at most %zu nodes (--max-nodes)", c->max_nodes);
	}
	if ((r = fs_ctx_init(c)) < 0)
		sc_die("cannot set up: %s", strerror(-r));
	if ((lfd = sc_listen(ctl_path, 4, true)) < 0)
		sc_die("control socket %s: %s", ctl_path, strerror(-lfd));
	/* up to 8 clients (the daemon, a tool); "port", "save" and "load" take an fd */
	sc_ctl_init(&ctl, lfd, &(struct sc_ctl_conf){ .line_max = CTL_LINE_MAX, .max_clients = 8,
		.take_fds = true, .handle = fs_ctl_handle, .ctx = c });
	sc_signals(&orig);
	for (uint32_t i = 0; i < c->nmounts; i++)
		sc_log("mount %u: %s (%s)", i, c->mounts[i].path, c->mounts[i].ro ? "ro" : "rw");
	if (opts.jailed)
		fs_enter_jail(c, &opts);
	/* the jail is not optional; seccomp is, for debugging standalone */
	if (opts.jailed || getenv("KOSA8_FS_NO_SECCOMP") == NULL) {
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		if ((r = fs_seccomp(port_path != NULL)) < 0)
			sc_die("seccomp: %s", strerror(-r));
	}
	if ((r = sc_ready()) < 0)
		sc_die("stdout: %s", strerror(-r));

	while (!sc_stopping()) {
		struct pollfd pf[1 + SC_CTL_MAX_CLIENTS + 1];
		int np = 0, port_i = -1;
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
						sc_log("getrandom failed: %s", strerror(errno));
						return 1;
					}
					fs_conn_reset(c, nonce);
					sc_log("connected to %s", port_path ? port_path
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
		sc_ctl_poll_fill(&ctl, pf);
		np = sc_ctl_nfds(&ctl);
		if (port >= 0) {
			port_i = np;
			pf[np++] = (struct pollfd){ .fd = port,
				.events = c->out_off < c->out_len ? POLLOUT : POLLIN };
		}
		struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000 };
		if (ppoll(pf, (nfds_t)np, timeout_ms < 0 ? NULL : &ts, &orig) < 0) {
			if (errno == EINTR)
				continue;
			sc_log("ppoll: %s", strerror(errno));
			return 1;
		}
		sc_ctl_poll_done(&ctl, pf);
		if (port_i < 0 || port < 0 || !pf[port_i].revents)
			continue;
		if (pf[port_i].revents & POLLIN) {
			size_t room;
			uint8_t *p = fs_conn_room(c, &room);
			ssize_t n = room ? read(port, p, room) : 0;

			if (n == 0 && room) {
				sc_log("port closed; reconnecting");
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
			sc_log("protocol error from the guest (bad request length); "
			       "dropping the link to resync");
drop:
		if (r != -ECONNRESET)
			sc_log("link dropped: %s", strerror(-r));
		close(port);
		port = -1;
		fs_conn_drop(c);
		next_try = now_mono_ns() + 100000000ull;
	}
	sc_log("stopping");
	if (!opts.jailed)
		unlink(ctl_path);
	sc_ctl_flush(&ctl);
	sc_ctl_free(&ctl);
	if (port >= 0)
		close(port);
	fs_ctx_free(c);
	return 0;
}
