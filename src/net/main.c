/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8-net: one unprivileged network process per sandbox. Arguments, the two
 * unix sockets (frames from QEMU, control from the daemon), privilege drop, seccomp, and
 * the poll loop that drives the frame path, the resolver, slirp and the control socket.
 *
 *   kosa8-net --id ID --frames PATH --control PATH [--policy FILE]
 *             [--dns-server IP[:PORT]]... [--hosts FILE] [--max-flows N] [--user UID:GID]
 *             [--cgroup PROCS]...
 *
 * Start-up ends with "ready\n" (or "error: <message>\n" and exit 1) on stdout, which is
 * then closed. docs/network.md describes the contract. */
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/ioctl.h>
#include <time.h>

#include <seccomp.h>

#include "common/jail.h"
#include "common/util.h"
#include "net/bytes.h"
#include "net/net.h"

#define FRAMES_OUT_MAX (8 << 20)
#define FRAMES_IN_BUF (4 + PKT_MAX_FRAME + 65536)

static volatile sig_atomic_t net_stop;

static void net_on_signal(int sig)
{
	net_stop = 1;
}

/* Start-up failure: the daemon reads the reason on stdout. */
static void K8_PRINTF(1, 2) net_die(const char *fmt, ...)
{
	char msg[1200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dprintf(STDOUT_FILENO, "error: %s\n", msg);
	fprintf(stderr, "kosa8-net: %s\n", msg);
	exit(1);
}

static int net_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			close(fd);
			return -EEXIST;         /* never remove anything but a stale socket */
		}
		unlink(path);
	}
	mode_t old = umask(0177);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc < 0 || chmod(path, 0600) < 0 || listen(fd, 4) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* Allow-list of what the loop, slirp and the resolver need. Anything else fails with
 * EPERM (a slirp path we did not foresee degrades instead of killing the sandbox's
 * network); a few calls that only an attacker would make kill the process at once. */
static int net_seccomp(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!ctx)
		return -ENOMEM;
	static const int allow[] = {
		SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
		SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
		SCMP_SYS(ppoll), SCMP_SYS(poll), SCMP_SYS(close), SCMP_SYS(connect),
		SCMP_SYS(bind), SCMP_SYS(listen), SCMP_SYS(setsockopt), SCMP_SYS(getsockopt),
		SCMP_SYS(getsockname), SCMP_SYS(getpeername), SCMP_SYS(shutdown),
		SCMP_SYS(accept4), SCMP_SYS(fcntl), SCMP_SYS(clock_gettime),
		SCMP_SYS(gettimeofday), SCMP_SYS(time), SCMP_SYS(getrandom), SCMP_SYS(brk),
		SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(madvise), SCMP_SYS(rt_sigreturn),
		SCMP_SYS(rt_sigprocmask), SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(futex),
		SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(tgkill), SCMP_SYS(fstat),
		SCMP_SYS(newfstatat), SCMP_SYS(restart_syscall), SCMP_SYS(lseek),
	};
	static const int kill[] = {
		SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv),
		SCMP_SYS(process_vm_writev), SCMP_SYS(bpf), SCMP_SYS(init_module),
		SCMP_SYS(finit_module), SCMP_SYS(kexec_load), SCMP_SYS(mount), SCMP_SYS(unshare),
		SCMP_SYS(setns), SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key),
		SCMP_SYS(userfaultfd), SCMP_SYS(perf_event_open), SCMP_SYS(open_by_handle_at),
		SCMP_SYS(setuid), SCMP_SYS(setgid), SCMP_SYS(setresuid), SCMP_SYS(setresgid),
	};
	int rc = 0;
	for (size_t i = 0; i < ARRAY_SIZE(allow) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allow[i], 0);
	for (size_t i = 0; i < ARRAY_SIZE(kill) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, kill[i], 0);
	/* New sockets: IP only (slirp's TCP, UDP and ICMP sockets, the resolver's UDP). */
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_EQ, AF_INET));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_EQ, AF_INET6));
	/* Memory, never executable. */
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
				      SCMP_A1(SCMP_CMP_EQ, FIONREAD));
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

/* The sidecar jail (src/common/jail.c): the sandbox's kosa8-net uid, its cgroup, an
 * empty mount namespace, no capabilities, and Landlock with no file access at all
 * (everything was read at start). Without root (tests) only the uid check applies. */
static void net_drop_privileges(const char *spec, const char *const *cgroups, int ncg)
{
	struct jail_opts jo = { .landlock = true };
	struct jail_report rep;
	struct k8_err jerr = { 0 };
	unsigned long uid, gid;
	char *e;
	uid = strtoul(spec, &e, 10);
	if (e == spec || *e != ':')
		net_die("--user %s: expected UID:GID", spec);
	const char *g = e + 1;
	gid = strtoul(g, &e, 10);
	if (e == g || *e)
		net_die("--user %s: expected UID:GID", spec);
	jo.uid = (uid_t)uid;
	jo.gid = (gid_t)gid;
	for (int i = 0; i < ncg && i < JAIL_MAX_CGROUPS; i++)
		jo.cgroups[jo.ncgroups++] = cgroups[i];
	if (jail_enter(&jo, &rep, &jerr) < 0)
		net_die("jail (%s): %s", spec, jerr.msg);
}

static void net_frames_close(struct net *n)
{
	if (n->frames_fd >= 0)
		close(n->frames_fd);
	n->frames_fd = -1;
	n->finlen = 0;
	outq_reset(&n->fout);
	engine_guest_gone(n);
}

static void net_frames_accept(struct net *n)
{
	int fd = accept4(n->frames_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (n->frames_fd >= 0)
		net_log(n, "frames: a new connection replaces the old one");
	net_frames_close(n);
	int sz = 1 << 20;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	n->frames_fd = fd;
}

/* Frames from QEMU: a 4-byte big-endian length before each. */
static void net_frames_input(struct net *n)
{
	for (int k = 0; k < 64 && n->frames_fd >= 0; k++) {
		ssize_t r = read(n->frames_fd, n->fin + n->finlen, FRAMES_IN_BUF - n->finlen);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (r <= 0) {
			net_log(n, "frames: QEMU disconnected");
			net_frames_close(n);
			return;
		}
		n->finlen += (size_t)r;
		size_t off = 0;
		while (n->finlen - off >= 4) {
			const uint8_t *h = n->fin + off;
			size_t fl = net_rd32(h);
			if (fl == 0 || fl > PKT_MAX_FRAME) {
				net_log(n, "frames: bad frame length %zu; dropping the connection", fl);
				net_frames_close(n);
				return;
			}
			if (n->finlen - off < 4 + fl)
				break;
			engine_input(n, h + 4, fl);
			off += 4 + fl;
			if (n->frames_fd < 0)
				return;
		}
		memmove(n->fin, n->fin + off, n->finlen - off);
		n->finlen -= off;
	}
}

static void net_usage(void)
{
	net_die("usage: kosa8-net --id ID --frames PATH --control PATH [--policy FILE] "
		"[--dns-server IP[:PORT]]... [--hosts FILE] [--max-flows N] [--user UID:GID]");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "id", required_argument, NULL, 'i' },
		{ "frames", required_argument, NULL, 'f' },
		{ "control", required_argument, NULL, 'c' },
		{ "policy", required_argument, NULL, 'p' },
		{ "dns-server", required_argument, NULL, 'd' },
		{ "hosts", required_argument, NULL, 'H' },
		{ "max-flows", required_argument, NULL, 'm' },
		{ "user", required_argument, NULL, 'u' },
		{ "cgroup", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};
	struct net *n = calloc(1, sizeof(*n));
	if (!n)
		net_die("out of memory");
	const char *frames = NULL, *control = NULL, *policy_file = NULL, *hosts = "/etc/hosts";
	const char *user = NULL, *cgroups[JAIL_MAX_CGROUPS];
	int ncg = 0;
	n->max_flows = 256;
	n->frames_fd = n->ctl.fd = n->ctl.lfd = n->frames_lfd = -1;
	n->nl_fd = -1;
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *e;
		switch (c) {
		case 'i': n->id = optarg; break;
		case 'f': frames = optarg; break;
		case 'c': control = optarg; break;
		case 'p': policy_file = optarg; break;
		case 'H': hosts = optarg; break;
		case 'u': user = optarg; break;
		case 'g':
			if (ncg < JAIL_MAX_CGROUPS)
				cgroups[ncg++] = optarg;
			break;
		case 'd':
			if (resolve_add_server(&n->res, optarg) < 0)
				net_die("--dns-server %s: expected IP or IP:PORT (at most %d servers)",
					optarg, RESOLVE_MAX_SERVERS);
			break;
		case 'm': {
			long v = strtol(optarg, &e, 10);
			if (*e || v < 1 || v > 65536)
				net_die("--max-flows %s: expected a number from 1 to 65536", optarg);
			n->max_flows = (int)v;
			break;
		}
		default:
			net_usage();
		}
	}
	if (!n->id || !frames || !control || optind != argc)
		net_usage();

	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = net_on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigset_t block, orig;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &orig);

	char err[512] = "";
	n->policy = calloc(1, sizeof(*n->policy));
	n->fin = malloc(FRAMES_IN_BUF);
	if (!n->policy || !n->fin || stats_init(&n->stats) < 0 || dnssrv_init(n) < 0)
		net_die("out of memory");
	n->fout.max = FRAMES_OUT_MAX;
	n->ctl.out.max = 4 << 20;
	if (policy_set(n->policy, POLICY_DENY, NULL, 0, err, sizeof(err)) < 0)
		net_die("policy: %s", err);
	if (n->res.nservers == 0)
		resolve_load_resolv_conf(&n->res, "/etc/resolv.conf");
	int rc = resolve_load_hosts(&n->res, hosts);
	if (rc < 0)
		net_die("--hosts %s: %s", hosts, strerror(-rc));
	if (engine_init(n, err, sizeof(err)) < 0)
		net_die("%s", err);
	if (policy_file) {
		cleanup_free char *text = NULL;
		size_t len;
		json_error_t jerr;
		rc = read_file(policy_file, 4 << 20, &text, &len);
		if (rc < 0)
			net_die("--policy %s: %s", policy_file, strerror(-rc));
		json_t *obj = json_loadb(text, len, 0, &jerr);
		if (!obj || !json_is_object(obj))
			net_die("--policy %s: not a JSON object (line %d: %s)", policy_file,
				jerr.line, obj ? "expected {\"mode\":...,\"rules\":[...]}" : jerr.text);
		if (engine_set_policy(n, obj, err, sizeof(err)) < 0)
			net_die("--policy %s: %s", policy_file, err);
		json_decref(obj);
	}
	/* Before the privilege drop and seccomp, which allow no new netlink socket. */
	rc = hostaddr_open(n);
	if (rc < 0)
		net_die("the host's addresses (netlink): %s", strerror(-rc));
	rc = resolve_open(&n->res);
	if (rc < 0)
		net_die("upstream DNS sockets: %s", strerror(-rc));
	n->frames_lfd = net_listen(frames);
	if (n->frames_lfd < 0)
		net_die("--frames %s: %s", frames, strerror(-n->frames_lfd));
	n->ctl.lfd = net_listen(control);
	if (n->ctl.lfd < 0)
		net_die("--control %s: %s", control, strerror(-n->ctl.lfd));

	int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0)
		net_die("/dev/null: %s", strerror(errno));
	/* Jailed before "ready", so a failure reaches the daemon as an error. */
	if (user)
		net_drop_privileges(user, cgroups, ncg);
	net_log(n, "ready: mode %s, %d rule(s), %d upstream server(s), max %d flows, %d host "
		"address(es) refused", policy_mode_str(n->policy->mode), n->policy->nrules,
		n->res.nservers, n->max_flows, n->policy->nhost);
	if (write_full(STDOUT_FILENO, "ready\n", 6) < 0)
		net_die("stdout: %s", strerror(errno));
	dup2(devnull, STDOUT_FILENO);   /* closes the pipe: the daemon sees EOF */
	close(devnull);
	/* From here on a failure is only in the log (stderr): the daemon sees the exit. */
	if (prctl(PR_SET_DUMPABLE, 0) < 0 || (rc = net_seccomp()) < 0)
		net_die("seccomp: %s", strerror(rc < 0 ? -rc : errno));

	struct pollfd *pfd = NULL;
	int cap = 0;
	while (!net_stop) {
		int np = 0;
		n->now_ns = now_mono_ns();
		if (cap < 64) {
			pfd = realloc(pfd, 64 * sizeof(*pfd));
			if (!pfd)
				abort();
			cap = 64;
		}
		pfd[np++] = (struct pollfd){ .fd = n->frames_lfd, .events = POLLIN };
		pfd[np++] = (struct pollfd){ .fd = n->frames_fd, .events = (short)(POLLIN |
						(n->fout.len ? POLLOUT : 0)) };
		pfd[np++] = (struct pollfd){ .fd = n->ctl.lfd, .events = POLLIN };
		pfd[np++] = (struct pollfd){ .fd = n->ctl.fd, .events = (short)(POLLIN |
						(n->ctl.out.len ? POLLOUT : 0)) };
		pfd[np++] = (struct pollfd){ .fd = n->nl_fd, .events = POLLIN };
		int rfirst = np;
		resolve_poll_fill(&n->res, &pfd, &np, &cap);
		int rlast = np;
		int timeout = 1000, t;
		if ((t = stats_next_timeout(n)) >= 0 && t < timeout)
			timeout = t;
		if ((t = resolve_next_timeout(&n->res, n->now_ns)) >= 0 && t < timeout)
			timeout = t;
		engine_poll_fill(n, &pfd, &np, &cap, &timeout);
		struct timespec ts = { .tv_sec = timeout / 1000, .tv_nsec = (timeout % 1000) * 1000000L };
		int r = ppoll(pfd, (nfds_t)np, timeout < 0 ? NULL : &ts, &orig);
		if (r < 0)
			for (int i = 0; i < np; i++)
				pfd[i].revents = 0;
		n->now_ns = now_mono_ns();
		engine_poll_done(n, pfd, np, r < 0 && errno != EINTR);
		if (pfd[0].revents & POLLIN)
			net_frames_accept(n);
		else if (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))
			net_frames_input(n);
		engine_input_done(n);
		if (pfd[2].revents & POLLIN)
			ctl_accept(n);
		else if (pfd[3].revents & (POLLIN | POLLHUP | POLLERR))
			ctl_input(n);
		if (pfd[4].revents & (POLLIN | POLLERR))
			hostaddr_input(n);
		resolve_poll_done(n, pfd + rfirst, rlast - rfirst);
		resolve_tick(n, n->now_ns);
		dnssrv_tick(n, n->now_ns);
		engine_tick(n, n->now_ns);
		stats_flush_events(n, false);
		if (n->frames_fd >= 0 && outq_flush(&n->fout, n->frames_fd) < 0)
			net_frames_close(n);
		if (n->ctl.fd >= 0 && outq_flush(&n->ctl.out, n->ctl.fd) < 0)
			ctl_close(n);
	}
	net_log(n, "stopping");
	stats_flush_events(n, true);
	if (n->ctl.fd >= 0)
		outq_flush(&n->ctl.out, n->ctl.fd);
	free(pfd);
	engine_free(n);
	dnssrv_free(n);
	resolve_close(&n->res);
	hostaddr_close(n);
	stats_free(&n->stats);
	outq_free(&n->fout);
	outq_free(&n->ctl.out);
	free(n->ctl.in);
	free(n->fin);
	free(n->policy);
	free(n);
	return 0;
}
