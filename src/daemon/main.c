/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8d: start-up, the one-daemon-per-home lock, signals, shutdown.
 *
 * kosa8d runs in the foreground; `kosa8 daemon start` detaches it and sends its output
 * to $KOSA8_HOME/kosa8d.log. SIGTERM/SIGINT and POST /v1/shutdown stop it cleanly (VMs
 * stopped, sandboxes kept on disk). A SIGKILL leaves VMs running; the next start adopts
 * them.
 */
#include "daemon/daemon.h"
#include "daemon/accel.h"
#include "daemon/api.h"
#include "daemon/docker_api.h"
#include "daemon/docker_engine.h"
#include "daemon/e2b_api.h"
#include "daemon/e2b_box.h"
#include "daemon/guestfetch.h"
#include "daemon/idle.h"
#include "daemon/model.h"
#include "daemon/store.h"
#include "daemon/sandbox.h"
#include "daemon/audit.h"
#include "image/image.h"
#include "common/guest_digest.h"
#include "common/version.h"
#include "common/worker.h"

#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <stddef.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <linux/close_range.h>
#include <sys/syscall.h>

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kosa8d [--home DIR] [--accel auto|kvm|tcg] [--allow-mount DIR]... [--offline]\n"
		"              [--fs-reserve SIZE[,PCT%%]] [--require-sandbox]\n"
		"              [--allow-public-ports] [--socket-group GROUP] [--foreground]\n"
		"\n"
		"The kosa8 daemon: owns all sandboxes, images and the audit log under DIR\n"
		"(default $KOSA8_HOME or ~/.kosa8) and serves the API on DIR/kosa8d.sock.\n"
		"--offline (or KOSA8_OFFLINE=1) fetches nothing from any registry.\n"
		"--allow-public-ports lets sandboxes publish ports on addresses other than\n"
		"loopback (e.g. 0.0.0.0); config.json \"allow_public_ports\": true likewise.\n"
		"--socket-group GROUP makes the sockets 0660 of that group and DIR 0710: its\n"
		"members may use the daemon, which is as good as root (the default for\n"
		"" KOSA8_SYSTEM_HOME " is the group kosa8, when it exists).\n"
		"Without a guest image it fetches the release's (config.json \"guest_url\"),\n"
		"unless offline. Under systemd (Type=notify) it says READY=1 once it serves.\n"
		"Normally started with `kosa8 daemon start`, or as the service kosa8.service.\n");
}

/* The group given the sockets and the home (--socket-group), or (gid_t)-1. */
static gid_t socket_gid = (gid_t)-1;

/* GROUP by name or number; -1 with a message when there is no such group. */
static int group_lookup(const char *name, gid_t *gid)
{
	struct group *gr = getgrnam(name);
	char *end;
	unsigned long n;

	if (gr) {
		*gid = gr->gr_gid;
		return 0;
	}
	errno = 0;
	n = strtoul(name, &end, 10);
	if (*name && !*end && !errno && n < (gid_t)-1) {
		*gid = (gid_t)n;
		return 0;
	}
	return -1;
}

/* systemd's readiness protocol (sd_notify(3)), without libsystemd: one datagram to
 * $NOTIFY_SOCKET (a path, or '@' for an abstract name). Nothing when it is not set. */
static void notify_systemd(const char *msg)
{
	static char path[108];
	static bool read_env;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	int fd;

	if (!read_env) {
		const char *e = getenv("NOTIFY_SOCKET");
		read_env = true;
		if (e && strlen(e) < sizeof(path) && (e[0] == '/' || e[0] == '@'))
			snprintf(path, sizeof(path), "%s", e);
		unsetenv("NOTIFY_SOCKET");      /* not for QEMU and the sidecars */
	}
	if (!path[0])
		return;
	memcpy(sa.sun_path, path, strlen(path));
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
		daemon_log("WARNING: telling systemd '%s' failed: %s", msg, strerror(errno));
	close(fd);
}

static int listen_unix(const char *path, struct k8_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return k8_err_set(err, -ENAMETOOLONG,
				  "the socket path %s is longer than %zu bytes; use a shorter --home",
				  path, sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, path);
	unlink(path);  /* we hold the lock: any socket file here is stale */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	old = umask(0177);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		umask(old);
		close(fd);
		return k8_err_set(err, e, "bind %s: %s", path, strerror(-e));
	}
	umask(old);
	/* 0600 until the group is set: never open to the group of the moment before */
	if (socket_gid != (gid_t)-1 && chown(path, (uid_t)-1, socket_gid) < 0) {
		int e = -errno;
		close(fd);
		return k8_err_set(err, e, "chown %s to group %u: %s", path, (unsigned)socket_gid,
				  strerror(-e));
	}
	chmod(path, socket_gid != (gid_t)-1 ? 0660 : 0600);
	if (listen(fd, 64) < 0) {
		int e = -errno;
		close(fd);
		return k8_err_set(err, e, "listen: %s", strerror(-e));
	}
	return fd;
}

static void default_home(char *out, size_t n)
{
	const char *h = getenv("KOSA8_HOME");
	if (h && *h) {
		snprintf(out, n, "%s", h);
		return;
	}
	h = getenv("HOME");
	if (!h || !*h) {
		struct passwd *pw = getpwuid(getuid());
		h = pw ? pw->pw_dir : "/";
	}
	snprintf(out, n, "%s/.kosa8", h);
}

/* The command line into d and *group (--socket-group): 0, or the exit status (2: usage; 0
 * after --help). */
static int main_options(struct daemon *d, int argc, char **argv, const char **group,
			bool *done)
{
	static const struct option opts[] = {
		{ "home", required_argument, NULL, 'H' },
		{ "accel", required_argument, NULL, 'a' },
		{ "allow-mount", required_argument, NULL, 'm' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "offline", no_argument, NULL, 'o' },
		{ "require-sandbox", no_argument, NULL, 'R' },
		{ "allow-public-ports", no_argument, NULL, 'P' },
		{ "fs-reserve", required_argument, NULL, 'r' },
		{ "socket-group", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*done = false;
	default_home(d->home, sizeof(d->home));
	snprintf(d->accel_opt, sizeof(d->accel_opt), "auto");
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'H':
			snprintf(d->home, sizeof(d->home), "%s", optarg);
			break;
		case 'a':
			if (strcmp(optarg, "auto") && strcmp(optarg, "kvm") && strcmp(optarg, "tcg")) {
				fprintf(stderr, "kosa8d: --accel takes auto, kvm or tcg\n");
				return 2;
			}
			snprintf(d->accel_opt, sizeof(d->accel_opt), "%s", optarg);
			break;
		case 'm': {
			/* Roots are compared with the realpath of each mount: resolve them too. */
			char real[PATH_MAX];
			if (!realpath(optarg, real)) {
				fprintf(stderr, "kosa8d: --allow-mount %s: %s\n", optarg, strerror(errno));
				return 2;
			}
			d->allow_mounts = realloc(d->allow_mounts, sizeof(char *) * (size_t)(d->nallow_mounts + 1));
			d->allow_mounts[d->nallow_mounts++] = xstrdup(real);
			break;
		}
		case 'f':
			break;
		case 'r':       /* kosa8-fs checks the syntax; config.json's fs_reserve otherwise */
			d->fs_reserve = xstrdup(optarg);
			break;
		case 'o':
			d->offline = true;
			break;
		case 'R':
			d->require_sandbox = true;
			break;
		case 'P':
			d->allow_public_ports = true;
			break;
		case 'g':
			*group = optarg;
			break;
		case 'h':
			usage(stdout);
			*done = true;
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	return 0;
}

/* The home (absolute, 0700, or 0710 of the sockets' group, with run/) and its lock: one
 * daemon per home; *groupp becomes kosa8 for the system's home when that group exists. The
 * lock's fd (it holds our pid), or -1 with the reason printed (*exit_status the status). */
static int main_home(struct daemon *d, const char **groupp, int *exit_status)
{
	const char *group = *groupp;
	char path[4200];
	int lockfd;

	if (d->home[0] != '/') {
		char cwd[4096];
		if (getcwd(cwd, sizeof(cwd))) {
			char tmp[4096];
			snprintf(tmp, sizeof(tmp), "%s/%s", cwd, d->home);
			snprintf(d->home, sizeof(d->home), "%s", tmp);
		}
	}
	*exit_status = 1;
	notify_systemd("STATUS=starting");     /* also takes NOTIFY_SOCKET out of the environment */
	/* The system service's home serves the group kosa8 unless told otherwise. */
	if (!group && !strcmp(d->home, KOSA8_SYSTEM_HOME) && getgrnam("kosa8"))
		group = *groupp = "kosa8";
	if (group && group_lookup(group, &socket_gid) < 0) {
		fprintf(stderr, "kosa8d: --socket-group %s: no such group\n", group);
		*exit_status = 2;
		return -1;
	}
	if (mkdir_p(d->home, 0700) < 0) {
		fprintf(stderr, "kosa8d: cannot create %s: %s\n", d->home, strerror(errno));
		return -1;
	}
	/* Its members reach the sockets by name (x), never list or read the home (the
	 * files below are the daemon's user's, 0600 or in 0700 folders). */
	if (socket_gid != (gid_t)-1 && chown(d->home, (uid_t)-1, socket_gid) < 0) {
		fprintf(stderr, "kosa8d: chown %s to group %s: %s\n", d->home, group, strerror(errno));
		return -1;
	}
	chmod(d->home, socket_gid != (gid_t)-1 ? 0710 : 0700);
	snprintf(path, sizeof(path), "%s/run", d->home);
	mkdir_p(path, 0700);
	snprintf(path, sizeof(path), "%s/kosa8d.lock", d->home);
	lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "kosa8d: another kosa8d already owns %s (lock %s held)\n", d->home, path);
		return -1;
	}
	if (ftruncate(lockfd, 0) == 0)
		dprintf(lockfd, "%d\n", (int)getpid());
	return lockfd;
}

/* Signals go to the main thread's signalfd only; descriptors to their hard limit (each
 * sandbox holds a few: QMP, agent, sidecars' control, logs; with hundreds of them the
 * usual soft limit of 1024 would be reached). The signalfd. */
static int main_process(void)
{
	struct rlimit rl;
	sigset_t mask;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	return signalfd(-1, &mask, SFD_CLOEXEC);
}

/* config.json's jail settings: the sandboxes' uid range (or no jail) and the image
 * unpacker's, apart from them. 0, or -1 with the reason printed. */
static int main_config(struct daemon *d, struct k8_err *err)
{
	json_t *cfg = daemon_config(d);
	const char *spec = json_string_value(json_object_get(cfg, "jail_uids"));
	int bad = jail_range_parse(spec ? spec : JAIL_DEFAULT_RANGE, &d->jail, err);

	/* "jail": false exists to measure what the jail costs (bench/jail.py). */
	d->jail_off = json_is_false(json_object_get(cfg, "jail"));
	if (d->jail_off)
		snprintf(d->jail_why, sizeof(d->jail_why), "%s", JAIL_OFF_NOTE);
	else if (geteuid() != 0) {
		d->jail_off = true;
		snprintf(d->jail_why, sizeof(d->jail_why), "%s", JAIL_NOROOT_NOTE);
	}
	/* the image unpacker's ids (src/image/unpack_jail.c): apart from the sandboxes' */
	const char *uspec = json_string_value(json_object_get(cfg, "unpack_uids"));
	if (!bad)
		bad = image_store_unpack_ids(d->images, uspec ? uspec : IMAGE_UNPACK_IDS_DEFAULT, err);
	if (!bad) {
		uint32_t ufirst, ucount;
		uint64_t jend = (uint64_t)d->jail.base + (uint64_t)d->jail.blocks * JAIL_ROLES;
		image_store_unpack_range(d->images, &ufirst, &ucount);
		if (ufirst < jend && d->jail.base < (uint64_t)ufirst + ucount)
			bad = k8_err_set(err, -EINVAL, "unpack_uids (%u-%u) overlaps jail_uids "
					 "(%u-%llu): give each its own ids", ufirst,
					 ufirst + (ucount - 1), (unsigned)d->jail.base,
					 (unsigned long long)jend - 1);
	}
	json_decref(cfg);
	if (bad) {
		fprintf(stderr, "kosa8d: %s/config.json: %s\n", d->home, err->msg);
		return -1;
	}
	return 0;
}

/* The daemon's context: its audit log, image store, jail range, host limits, guest image
 * and accelerator. 0, or -1 with the reason printed. */
static int main_context(struct daemon *d, struct k8_err *err)
{
	char path[4200];

	pthread_mutex_init(&d->lock, NULL);
	d->model_addr = model_server_addr;
	d->after_checkpoint = store_after_checkpoint;
	d->started_mono = now_mono_ns();
	if (pipe2(d->stop_pipe, O_CLOEXEC) < 0)
		return -1;
	if (audit_open(d->home, &d->audit, err) < 0) {
		fprintf(stderr, "kosa8d: audit log: %s\n", err->msg);
		return -1;
	}
	daemon_audit_settings(d);
	snprintf(path, sizeof(path), "%s/images", d->home);
	if (image_store_open(path, &d->images, err) < 0) {
		fprintf(stderr, "kosa8d: image store: %s\n", err->msg);
		return -1;
	}
	if (main_config(d, err) < 0)
		return -1;
	cgroup_probe(&d->cg, d->home);
	daemon_log("host limits: %s", d->cg.note);
	k8_err_clear(err);
	d->guest_release = guest_release_digest;
	if (guest_find_home(&d->guest, d->home, err) < 0)
		daemon_log("WARNING: %s", err->msg);
	k8_err_clear(err);
	if (!d->guest.kernel[0])
		notify_systemd("STATUS=no guest image: fetching the release's");
	guest_fetch_at_start(d);        /* none found: the release's, unless offline */
	if (accel_choose(d, err) < 0) {
		fprintf(stderr, "kosa8d: %s\n", err->msg);
		return -1;
	}
	daemon_log("accelerator: %s", d->accel_reason);
	if (!strcmp(d->accel, "tcg"))
		daemon_log("%s", ACCEL_TCG_NOTE);
	if (d->jail_off)
		daemon_log("WARNING: %s", d->jail_why);
	return 0;
}

/* kosa8d.sock (0, or -1 with the reason printed), the idle pause, docker.sock (a daemon
 * without it still serves: docs/docker.md) and the engine when config.json boots it. */
static int main_listen(struct daemon *d, struct k8_err *err)
{
	char path[4200];
	int lfd;

	snprintf(path, sizeof(path), "%s/kosa8d.sock", d->home);
	lfd = listen_unix(path, err);
	if (lfd < 0 || api_start(d, lfd, err) < 0) {
		fprintf(stderr, "kosa8d: %s\n", err->msg);
		return -1;
	}
	k8_err_clear(err);
	if (idle_start(d, err) < 0)
		daemon_log("WARNING: %s; no sandbox is paused when idle", err->msg);
	snprintf(path, sizeof(path), "%s/docker.sock", d->home);
	k8_err_clear(err);
	lfd = listen_unix(path, err);
	if (lfd < 0 || api_listen(d, lfd, &docker_api_dialect, err) < 0)
		daemon_log("WARNING: the Docker API is not served: %s", err->msg);
	else
		daemon_log("docker API: unix://%s", path);
	dke_boot_at_start(d);   /* config docker_engine_boot (docs/docker.md) */
	/* The E2B-compatible API (docs/e2b.md): TCP, loopback unless allowed otherwise. */
	k8_err_clear(err);
	if (e2b_listen(d, err) < 0)
		daemon_log("%se2b API: not served: %s", err->code == -ENOENT ? "" : "WARNING: ",
			   err->msg);
	else
		daemon_log("e2b API: http://%s", e2b_of(d)->listen);
	k8_err_clear(err);
	return 0;
}

/* Until a signal (the VMs stop too) or the API's shutdown (they stop when it asked). */
static void main_wait(struct daemon *d, int sfd)
{
	for (;;) {
		struct pollfd pfd[2] = { { .fd = sfd, .events = POLLIN },
					 { .fd = d->stop_pipe[0], .events = POLLIN } };
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof(si)) == sizeof(si)) {
				daemon_log("signal %u: shutting down", si.ssi_signo);
				d->stop_vms = true;
			}
			break;
		}
		if (pfd[1].revents & POLLIN) {
			usleep(50000); /* let the shutdown answer reach the client */
			break;
		}
	}
}

int main(int argc, char **argv)
{
	struct daemon *d;
	struct k8_err err = { 0 };
	const char *group = NULL;
	char path[4200];
	bool done;
	int r, sfd;

	/* a worker (src/common/worker.h) runs its job here and ends; kosa8d goes on */
	worker_main(argc, argv);
	/* What kosa8d was started with beyond 0-2 (a shell's, a harness's descriptors) is
	 * none of its children's business: close-on-exec, before any child exists. */
	(void)syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
	d = xcalloc(1, sizeof(*d));
	if ((r = main_options(d, argc, argv, &group, &done)) || done)
		return r;
	if (main_home(d, &group, &r) < 0)
		return r;
	sfd = main_process();
	if (main_context(d, &err) < 0)
		return 1;
	sb_load_all(d);
	/* After adoption: every adopted broker has been told no model server runs (this
	 * daemon has none yet) while the old daemon's servers still hold their ports, so
	 * none points at a port that is free for anyone to take (issue 34). */
	model_reap_orphans(d);
	if (main_listen(d, &err) < 0)
		return 1;
	snprintf(path, sizeof(path), "%s/kosa8d.sock", d->home);
	daemon_audit(d, "daemon.start", NULL,
		     json_pack("{s:i,s:s,s:s,s:b}", "pid", (int)getpid(), "accel", d->accel, "home",
			       d->home, "jail", !d->jail_off));
	daemon_log("listening on %s (pid %d)%s%s", path, (int)getpid(),
		   group ? ", for root and the group " : "", group ? group : "");
	notify_systemd("READY=1");
	main_wait(d, sfd);
	d->stopping = 1;
	notify_systemd("STOPPING=1");
	if (d->stop_vms) {
		e2b_stop(d);    /* E2B's sandboxes are paused to disk, to come back whole */
		sb_stop_all(d);
	}
	model_stop_all(d);
	daemon_audit(d, "daemon.stop", NULL, json_pack("{s:b}", "stopped_vms", d->stop_vms));
	snprintf(path, sizeof(path), "%s/kosa8d.sock", d->home);
	unlink(path);
	snprintf(path, sizeof(path), "%s/docker.sock", d->home);
	unlink(path);
	/* Connections may still be inside long operations; exiting ends them. */
	audit_close(d->audit);
	daemon_log("stopped");
	_exit(0);
}
