/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8-net: one unprivileged network process per sandbox. Arguments, the two
 * unix sockets (frames from QEMU, control from the daemon), privilege drop, seccomp, and
 * the poll loop that drives the frame path, the resolver, slirp and the control socket.
 *
 *   kosa8-net --id ID --frames PATH --control PATH [--policy FILE]
 *             [--dns-server IP[:PORT]]... [--hosts FILE] [--max-flows N] [--user UID:GID]
 *             [--cgroup PROCS]... [--broker-dir DIR]
 *
 * Start-up ends with "ready\n" (or "error: <message>\n" and exit 1) on stdout, which is
 * then closed. docs/network.md describes the contract. */
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <time.h>

#include <seccomp.h>

#include "common/jail.h"
#include "common/sidecar.h"
#include "common/util.h"
#include "net/bytes.h"
#include "net/net.h"

#define FRAMES_OUT_MAX (8 << 20)
#define FRAMES_IN_BUF (4 + PKT_MAX_FRAME + 65536)
#define CTL_LINE_MAX (1 << 20)          /* a policy of many rules stays well below */

/* The sidecars' base filter (src/common/sidecar_seccomp.c: EPERM by default, calls
 * only an attacker makes kill) plus what slirp and the resolver need. EPERM for the
 * rest: a slirp path we did not foresee degrades instead of killing the sandbox's
 * network. */
static int net_seccomp(bool broker)
{
	static const int allow[] = {
		SCMP_SYS(connect), SCMP_SYS(bind), SCMP_SYS(listen), SCMP_SYS(getsockname),
		SCMP_SYS(getpeername), SCMP_SYS(newfstatat),
		/* published ports (inbound.c): the daemon's listener takes the place of
		 * slirp's throwaway one; both are this process's own fds */
		SCMP_SYS(dup2), SCMP_SYS(dup3), SCMP_SYS(accept),
	};
	/* New sockets: IP only (slirp's TCP, UDP and ICMP sockets, the resolver's UDP). */
	static const int families[] = { AF_INET, AF_INET6 };
	scmp_filter_ctx ctx = sc_seccomp_new();
	int rc;

	if (!ctx)
		return -ENOMEM;
	rc = sc_seccomp_add(ctx, SCMP_ACT_ALLOW, allow, ARRAY_SIZE(allow));
	if (rc == 0)
		rc = sc_seccomp_socket(ctx, families, ARRAY_SIZE(families));
	/* With a broker, slirp makes one unix socket per broker connection and connects it
	 * to "sock" in our cwd (the broker's directory); the jail's root has nothing else. */
	if (rc == 0 && broker)
		rc = sc_seccomp_socket(ctx, (const int[]){ AF_UNIX }, 1);
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
				      SCMP_A1(SCMP_CMP_EQ, FIONREAD));
	if (rc < 0) {
		seccomp_release(ctx);
		return rc;
	}
	return sc_seccomp_load(ctx);
}

/* The sidecar jail (src/common/jail.c): the sandbox's kosa8-net uid, its cgroup, an
 * empty mount namespace, no capabilities, and Landlock with no file access at all
 * (everything was read at start). Without root (tests) only the uid check applies. */
static void net_drop_privileges(const char *spec, const char *const *cgroups, int ncg)
{
	struct jail_opts jo = { .landlock = true };
	struct jail_report rep;
	struct k8_err jerr = { 0 };

	if (sc_parse_ids(spec, &jo.uid, &jo.gid) < 0)
		sc_die("--user %s: expected UID:GID", spec);
	for (int i = 0; i < ncg && i < JAIL_MAX_CGROUPS; i++)
		jo.cgroups[jo.ncgroups++] = cgroups[i];
	if (jail_enter(&jo, &rep, &jerr) < 0)
		sc_die("jail (%s): %s", spec, jerr.msg);
}

static void net_frames_accept(struct net *n)
{
	int fd = accept4(n->frames_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd >= 0)
		net_frames_take(n, fd);
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
	sc_die("usage: kosa8-net --id ID --frames PATH --control PATH [--policy FILE] "
		"[--dns-server IP[:PORT]]... [--hosts FILE] [--max-flows N] [--user UID:GID] "
		"[--cgroup PROCS]... [--broker-dir DIR]");
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
		{ "broker-dir", required_argument, NULL, 'b' },
		{ "broker-intercept", required_argument, NULL, 'I' },
		{ NULL, 0, NULL, 0 },
	};
	sc_init("kosa8-net", NULL);
	struct net *n = calloc(1, sizeof(*n));
	if (!n)
		sc_die("out of memory");
	const char *frames = NULL, *control = NULL, *policy_file = NULL, *hosts = "/etc/hosts";
	const char *user = NULL, *cgroups[JAIL_MAX_CGROUPS], *broker_dir = NULL;
	int ncg = 0;
	n->max_flows = 256;
	n->frames_fd = n->frames_lfd = -1;
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
		case 'b': broker_dir = optarg; break;
		case 'I': {
			size_t l = strlen(optarg);
			if (n->nintercept >= (int)ARRAY_SIZE(n->intercept) || l == 0 || l > 253 ||
			    strspn(optarg, "abcdefghijklmnopqrstuvwxyz0123456789-.") != l)
				sc_die("--broker-intercept %s: expected a lower-case host name (at most "
				       "%zu)", optarg, ARRAY_SIZE(n->intercept));
			memcpy(n->intercept[n->nintercept++], optarg, l + 1);
			break;
		}
		case 'g':
			if (ncg < JAIL_MAX_CGROUPS)
				cgroups[ncg++] = optarg;
			break;
		case 'd':
			if (resolve_add_server(&n->res, optarg) < 0)
				sc_die("--dns-server %s: expected IP or IP:PORT (at most %d servers)",
					optarg, RESOLVE_MAX_SERVERS);
			break;
		case 'm': {
			long v = strtol(optarg, &e, 10);
			if (*e || v < 1 || v > 65536)
				sc_die("--max-flows %s: expected a number from 1 to 65536", optarg);
			n->max_flows = (int)v;
			break;
		}
		default:
			net_usage();
		}
	}
	if (!n->id || !frames || !control || optind != argc || (n->nintercept && !broker_dir))
		net_usage();
	/* The broker's directory, opened now: the jail's root will not have it. */
	int broker_dfd = -1;
	if (broker_dir) {
		broker_dfd = open(broker_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (broker_dfd < 0)
			sc_die("--broker-dir %s: %s", broker_dir, strerror(errno));
		n->broker = true;
	}

	sc_set_id(n->id);
	sigset_t orig;
	sc_signals(&orig);

	char err[512] = "";
	n->policy = calloc(1, sizeof(*n->policy));
	n->fin = malloc(FRAMES_IN_BUF);
	if (!n->policy || !n->fin || stats_init(&n->stats) < 0 || dnssrv_init(n) < 0)
		sc_die("out of memory");
	n->fout.max = FRAMES_OUT_MAX;
	if (policy_set(n->policy, POLICY_DENY, NULL, 0, err, sizeof(err)) < 0)
		sc_die("policy: %s", err);
	if (n->res.nservers == 0)
		resolve_load_resolv_conf(&n->res, "/etc/resolv.conf");
	int rc = resolve_load_hosts(&n->res, hosts);
	if (rc < 0)
		sc_die("--hosts %s: %s", hosts, strerror(-rc));
	if (engine_init(n, err, sizeof(err)) < 0)
		sc_die("%s", err);
	if (policy_file) {
		cleanup_free char *text = NULL;
		size_t len;
		json_error_t jerr;
		rc = read_file(policy_file, 4 << 20, &text, &len);
		if (rc < 0)
			sc_die("--policy %s: %s", policy_file, strerror(-rc));
		json_t *obj = json_loadb(text, len, 0, &jerr);
		if (!obj || !json_is_object(obj))
			sc_die("--policy %s: not a JSON object (line %d: %s)", policy_file,
				jerr.line, obj ? "expected {\"mode\":...,\"rules\":[...]}" : jerr.text);
		if (engine_set_policy(n, obj, err, sizeof(err)) < 0)
			sc_die("--policy %s: %s", policy_file, err);
		json_decref(obj);
	}
	/* Before the privilege drop and seccomp, which allow no new netlink socket. */
	rc = hostaddr_open(n);
	if (rc < 0)
		sc_die("the host's addresses (netlink): %s", strerror(-rc));
	rc = resolve_open(&n->res);
	if (rc < 0)
		sc_die("upstream DNS sockets: %s", strerror(-rc));
	n->frames_lfd = sc_listen(frames, 4, true);
	if (n->frames_lfd < 0)
		sc_die("--frames %s: %s", frames, strerror(-n->frames_lfd));
	int lfd = sc_listen(control, 4, true);
	if (lfd < 0)
		sc_die("--control %s: %s", control, strerror(-lfd));
	sc_ctl_init(&n->ctl, lfd, &(struct sc_ctl_conf){ .line_max = CTL_LINE_MAX,
		.max_clients = 1, .take_fds = true, .handle = ctl_handle, .ctx = n });
	/* Jailed before "ready", so a failure reaches the daemon as an error. */
	if (user)
		net_drop_privileges(user, cgroups, ncg);
	if (broker_dfd >= 0 && (fchdir(broker_dfd) < 0 || close(broker_dfd) < 0))
		sc_die("--broker-dir %s: %s", broker_dir, strerror(errno));
	net_log(n, "ready: mode %s, %d rule(s), %d upstream server(s), max %d flows, %d host "
		"address(es) refused", policy_mode_str(n->policy->mode), n->policy->nrules,
		n->res.nservers, n->max_flows, n->policy->nhost);
	if ((rc = sc_ready()) < 0)
		sc_die("stdout: %s", strerror(-rc));
	/* From here on a failure is only in the log (stderr): the daemon sees the exit. */
	if (prctl(PR_SET_DUMPABLE, 0) < 0 || (rc = net_seccomp(n->broker)) < 0)
		sc_die("seccomp: %s", strerror(rc < 0 ? -rc : errno));

	struct pollfd *pfd = NULL;
	int cap = 0;
	while (!sc_stopping()) {
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
		int ctl_i = np;
		sc_ctl_poll_fill(&n->ctl, pfd + np);
		np += sc_ctl_nfds(&n->ctl);
		int nl_i = np;
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
		sc_ctl_poll_done(&n->ctl, pfd + ctl_i);
		if (pfd[nl_i].revents & (POLLIN | POLLERR))
			hostaddr_input(n);
		resolve_poll_done(n, pfd + rfirst, rlast - rfirst);
		resolve_tick(n, n->now_ns);
		dnssrv_tick(n, n->now_ns);
		engine_tick(n, n->now_ns);
		stats_flush_events(n, false);
		if (n->frames_fd >= 0 && outq_flush(&n->fout, n->frames_fd) < 0)
			net_frames_close(n);
		sc_ctl_flush(&n->ctl);
	}
	net_log(n, "stopping");
	stats_flush_events(n, true);
	sc_ctl_flush(&n->ctl);
	free(pfd);
	engine_free(n);
	dnssrv_free(n);
	resolve_close(&n->res);
	hostaddr_close(n);
	stats_free(&n->stats);
	outq_free(&n->fout);
	sc_ctl_free(&n->ctl);
	free(n->fin);
	free(n->policy);
	free(n);
	return 0;
}
