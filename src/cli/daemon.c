/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.c - kosa8 daemon start|stop|status: run kosa8d detached, wait for it to answer,
 * ask it to stop, report what it says about itself. */
#include "cli.h"

#include <fcntl.h>
#include <stdbool.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#define START_TIMEOUT_S 120
#define STOP_TIMEOUT_S 60
#define LOG_TAIL_LINES 20

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* A fresh absolute version of `path` (not resolved: the directory may not exist yet). */
static char *abs_path(const char *path)
{
	char cwd[PATH_MAX];

	if (path[0] == '/' || !getcwd(cwd, sizeof(cwd)))
		return xstrdup(path);
	return xasprintf("%s/%s", cwd, path);
}

/* $KOSA8D, else kosa8d next to this binary. NULL with a message when it is not there. */
static char *find_kosa8d(struct k8_err *err)
{
	const char *env = getenv("KOSA8D");
	char self[PATH_MAX];
	ssize_t n;
	char *p, *slash;

	if (env && *env) {
		if (access(env, X_OK) < 0) {
			k8_err_set(err, -ENOEXEC, "KOSA8D=%s is not an executable file", env);
			return NULL;
		}
		return xstrdup(env);
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0) {
		k8_err_set(err, -errno, "cannot find this program's path: %s", strerror(errno));
		return NULL;
	}
	self[n] = '\0';
	slash = strrchr(self, '/');
	p = xasprintf("%.*s/kosa8d", slash ? (int)(slash - self) : 1, slash ? self : ".");
	if (access(p, X_OK) < 0) {
		k8_err_set(err, -ENOEXEC, "there is no kosa8d next to kosa8 (looked for %s); "
			   "build it, or set KOSA8D to its path", p);
		free(p);
		return NULL;
	}
	return p;
}

/* The last lines the daemon wrote to its log since `from`, to stderr. */
static void print_log_tail(const char *log, off_t from)
{
	cleanup_free char *text = NULL;
	size_t len = 0;
	int lines = 0;
	const char *p;

	if (read_file(log, 64u << 20, &text, &len) < 0 || (off_t)len <= from) {
		fprintf(stderr, "  (%s has nothing new)\n", log);
		return;
	}
	p = text + len;
	while (p > text + from && p[-1] == '\n')
		p--;
	const char *end = p;
	while (p > text + from && lines < LOG_TAIL_LINES) {
		p--;
		if (*p == '\n')
			lines++;
	}
	if (*p == '\n')
		p++;
	fprintf(stderr, "--- the end of %s ---\n%.*s\n", log, (int)(end - p), p);
}

/* The lines on what guards the host, on stderr: TCG said plainly, a jail turned off
 * said loudly. */
static void warn_security(const json_t *st)
{
	const char *tcg = json_string_value(json_object_get(st, "tcg_note"));
	const char *jail = json_string_value(json_object_get(st, "jail_warning"));

	if (tcg)
		fprintf(stderr, "note: accel tcg: %s\n", tcg);
	if (jail)
		fprintf(stderr, "WARNING: %s\n", jail);
}

/* "accel tcg: <reason>" for start, "tcg (<reason>)" for the status table. */
static void describe_accel(const json_t *st, char *buf, size_t len, int for_status)
{
	const char *accel = json_string_value(json_object_get(st, "accel"));
	const char *reason = json_string_value(json_object_get(st, "accel_reason"));

	if (!accel)
		accel = "?";
	if (for_status)
		snprintf(buf, len, "%s%s%s%s", accel, reason && *reason ? " (" : "",
			 reason && *reason ? reason : "", reason && *reason ? ")" : "");
	else if (reason && *reason)
		snprintf(buf, len, "accel %s: %s", accel, reason);
	else
		snprintf(buf, len, "accel %s", accel);
}

/* When the daemon fetched the release's guest image (docs/install.md): where from, after
 * its digest (`daemon start`) or an indent (the status table). */
static void show_fetched(const json_t *st, bool digest)
{
	const json_t *g = json_object_get(st, "guest");
	const char *from = json_string_value(json_object_get(g, "fetched_from"));

	if (from)
		printf("%s%s fetched from %s, checked against the release's digest\n",
		       digest ? "guest image " : "              ",
		       digest ? json_string_value(json_object_get(g, "digest")) : "", from);
}

static const struct cli_opt start_opts[] = {
	{ "accel", 0, 1, 'a' },
	{ "allow-mount", 0, 1, 'm' },
	{ "foreground", 0, 0, 'f' },
	{ "offline", 0, 0, 'o' },
	{ "fs-reserve", 0, 1, 'r' },
	{ "require-sandbox", 0, 0, 'R' },
	{ "allow-public-ports", 0, 0, 'P' },
	{ "socket-group", 0, 1, 'g' },
	{ NULL, 0, 0, 0 },
};

/* The daemon does not answer: whether this user may start one in `home` at all. A home
 * that is someone else's (the system service's, root's) is not ours to start a kosa8d in:
 * say who starts it, rather than run an unprivileged one there. 0 or an exit code. */
static int start_refused(struct client *cl, const char *home)
{
	struct k8_err err = { 0 };
	struct stat st;

	if (client_denied(cl, &err))
		return cli_fail(&err);
	if (geteuid() == 0 || stat(home, &st) < 0 || st.st_uid == geteuid())
		return 0;
	return cli_die(CLI_EXIT_NO_DAEMON, "kosa8d is not running in %s, which belongs to %s; "
		       "it is started by its owner%s", home, st.st_uid ? "another user" : "root",
		       st.st_uid ? "" : ": sudo systemctl start kosa8 (the system service), or "
		       "sudo kosa8 daemon start");
}

static int cmd_start(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	struct out_progress prog;
	const char *accel = NULL;
	int foreground = 0, rc, nargs = 0;
	cleanup_free char *bin = NULL, *abshome = NULL, *log = NULL;
	char **args = NULL, **owned = NULL;
	int nowned = 0;
	json_t *st = NULL;
	char desc[512];

	if (!cli_begin(self, argc, argv, start_opts, 0, 0, 0, home, &a, &cl, &rc))
		return rc;
	args = xcalloc((size_t)a.nopts * 2 + 8, sizeof(char *));
	owned = xcalloc((size_t)a.nopts + 1, sizeof(char *));
	abshome = abs_path(cl.home);
	args[nargs++] = (char *)"kosa8d";
	args[nargs++] = (char *)"--home";
	args[nargs++] = abshome;
	for (int i = 0; i < a.nopts; i++) {
		const char *v = a.opts[i].arg;
		switch (a.opts[i].id) {
		case 'a':
			if (strcmp(v, "auto") && strcmp(v, "kvm") && strcmp(v, "tcg")) {
				rc = cli_usage(self->name, "--accel must be auto, kvm or tcg (got '%s')",
					       v);
				goto out;
			}
			accel = v;
			break;
		case 'm': {
			char *real = realpath(v, NULL);
			struct stat sb;
			if (!real || stat(real, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
				rc = cli_usage(self->name, "--allow-mount %s: %s", v,
					       real ? "not a directory" : strerror(errno));
				free(real);
				goto out;
			}
			args[nargs++] = (char *)"--allow-mount";
			args[nargs++] = owned[nowned++] = real;
			break;
		}
		case 'f':
			foreground = 1;
			break;
		case 'o':
			args[nargs++] = (char *)"--offline";
			break;
		case 'R':
			args[nargs++] = (char *)"--require-sandbox";
			break;
		case 'P':
			args[nargs++] = (char *)"--allow-public-ports";
			break;
		case 'r':
			args[nargs++] = (char *)"--fs-reserve";
			args[nargs++] = (char *)v;
			break;
		case 'g':
			args[nargs++] = (char *)"--socket-group";
			args[nargs++] = (char *)v;
			break;
		}
	}
	if (accel) {
		args[nargs++] = (char *)"--accel";
		args[nargs++] = (char *)accel;
	}
	args[nargs++] = (char *)"--foreground";
	args[nargs] = NULL;

	if (client_ping(&cl, 3000, &st)) {
		describe_accel(st, desc, sizeof(desc), 0);
		printf("kosa8d is already running (pid %lld, %s)\n",
		       (long long)json_integer_value(json_object_get(st, "pid")), desc);
		warn_security(st);
		rc = CLI_EXIT_OK;
		goto out;
	}
	if ((rc = start_refused(&cl, abshome)))
		goto out;
	bin = find_kosa8d(&err);
	if (!bin) {
		rc = cli_fail(&err);
		goto out;
	}
	int e = mkdir_p(abshome, 0700);
	if (e < 0) {
		rc = cli_die(CLI_EXIT_ERROR, "cannot create %s: %s", abshome, strerror(-e));
		goto out;
	}
	if (foreground) {
		/* The user keeps the daemon in this terminal (systemd, debugging). */
		fflush(NULL);
		signal(SIGPIPE, SIG_DFL); /* main() ignores it; kosa8d should not inherit that */
		execv(bin, args);
		rc = cli_die(CLI_EXIT_ERROR, "cannot run %s: %s", bin, strerror(errno));
		goto out;
	}

	log = xasprintf("%s/kosa8d.log", abshome);
	int logfd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (logfd < 0) {
		rc = cli_die(CLI_EXIT_ERROR, "cannot open %s: %s", log, strerror(errno));
		goto out;
	}
	off_t log_from = lseek(logfd, 0, SEEK_END);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		close(logfd);
		rc = cli_die(CLI_EXIT_ERROR, "fork: %s", strerror(errno));
		goto out;
	}
	if (pid == 0) {
		/* Detached: own session, no terminal, output to the log. */
		int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
		setsid();
		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		/* the caller's other descriptors stay the caller's */
		(void)syscall(SYS_close_range, 3, ~0U, 0);
		signal(SIGPIPE, SIG_DFL);
		execv(bin, args);
		dprintf(2, "kosa8: cannot run %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	close(logfd);

	out_progress_init(&prog, 0);
	uint64_t t0 = now_mono_ns();
	for (;;) {
		int status;
		uint64_t el = (now_mono_ns() - t0) / 1000000000ull;

		if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
			if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
				/* A kosa8d that forked itself away: keep waiting for the
				 * socket. */
				pid = -1;
				continue;
			}
			out_spinner_clear(&prog);
			if (WIFEXITED(status))
				fprintf(stderr, "kosa8: kosa8d exited with status %d before it "
					"answered\n", WEXITSTATUS(status));
			else
				fprintf(stderr, "kosa8: kosa8d was killed by signal %d before it "
					"answered\n", WTERMSIG(status));
			print_log_tail(log, log_from);
			rc = CLI_EXIT_ERROR;
			goto out;
		}
		if (client_ping(&cl, 2000, &st))
			break;
		if (el >= START_TIMEOUT_S) {
			out_spinner_clear(&prog);
			rc = cli_die(CLI_EXIT_ERROR, "kosa8d did not answer on %s within %d s; it "
				     "may still be starting: see %s", cl.sock, START_TIMEOUT_S,
				     log);
			goto out;
		}
		out_spinner(&prog, "starting kosa8d (%llus)", (unsigned long long)el);
		sleep_ms(200);
	}
	out_spinner_clear(&prog);
	describe_accel(st, desc, sizeof(desc), 0);
	printf("kosa8d running (pid %lld, %s)\n",
	       (long long)json_integer_value(json_object_get(st, "pid")), desc);
	show_fetched(st, true);
	if (json_is_string(json_object_get(st, "docker_socket")))
		printf("docker API: unix://%s\n",
		       json_string_value(json_object_get(st, "docker_socket")));
	if (json_is_string(json_object_get(st, "e2b_api")))
		printf("e2b API: %s (E2B_API_URL and E2B_SANDBOX_URL; keys: kosa8 e2b key create)\n",
		       json_string_value(json_object_get(st, "e2b_api")));
	warn_security(st);
	rc = CLI_EXIT_OK;
out:
	json_decref(st);
	free(args);
	for (int i = 0; i < nowned; i++)
		free(owned[i]);
	free(owned);
	return cli_end(&a, &cl, rc);
}

static int cmd_stop(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { NULL, 0, 0, 0 } };
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	struct out_progress prog;
	json_t *st = NULL, *res = NULL, *body;
	long long pid;
	int rc, r;

	if (!cli_begin(self, argc, argv, opts, 0, 0, 0, home, &a, &cl, &rc))
		return rc;
	if (!client_ping(&cl, 5000, &st)) {
		printf("kosa8d is not running\n");
		rc = CLI_EXIT_OK;
		goto out;
	}
	pid = json_integer_value(json_object_get(st, "pid"));
	body = json_pack("{s:b}", "stop_vms", 1);
	r = client_call(&cl, "POST", "/v1/shutdown", body, NULL, NULL, STOP_TIMEOUT_S * 1000L,
			&res, &err);
	json_decref(body);
	/* A daemon may close the connection as it exits: that is success too. */
	if (r < 0 && r != -ECONNRESET && r != -ECONNREFUSED) {
		rc = cli_fail(&err);
		goto out;
	}
	out_progress_init(&prog, 0);
	uint64_t t0 = now_mono_ns();
	for (;;) {
		uint64_t el = (now_mono_ns() - t0) / 1000000000ull;
		/* Gone means both: the socket stopped answering and the process exited
		 * (so that a `daemon start` right after does not race its exit). */
		int gone = pid <= 0 || (kill((pid_t)pid, 0) < 0 && errno == ESRCH);

		if (gone && !client_ping(&cl, 1000, NULL))
			break;
		if (el >= STOP_TIMEOUT_S) {
			out_spinner_clear(&prog);
			rc = cli_die(CLI_EXIT_ERROR, "kosa8d (pid %lld) is still running %d s after "
				     "it was asked to stop", pid, STOP_TIMEOUT_S);
			goto out;
		}
		out_spinner(&prog, "stopping kosa8d (%llus)", (unsigned long long)el);
		sleep_ms(200);
	}
	out_spinner_clear(&prog);
	printf("kosa8d stopped\n");
	rc = CLI_EXIT_OK;
out:
	json_decref(st);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

/* The `daemon status` report of the status object st; ctx is the struct client. */
static int show_status(const json_t *st, void *ctx)
{
	const struct client *cl = ctx;
	json_t *cg, *guest;
	char desc[512], up[32];

	describe_accel(st, desc, sizeof(desc), 1);
	long long upt = json_integer_value(json_object_get(st, "uptime_s"));
	if (upt < 120)
		snprintf(up, sizeof(up), "%llds", upt);
	else if (upt < 7200)
		snprintf(up, sizeof(up), "%lldm", upt / 60);
	else
		snprintf(up, sizeof(up), "%lldh%02lldm", upt / 3600, upt / 60 % 60);
	printf("kosa8d %s running (pid %lld, up %s)\n",
	       json_string_value(json_object_get(st, "version")) ?: "?",
	       json_integer_value(json_object_get(st, "pid")), up);
	printf("  home:       %s\n", json_string_value(json_object_get(st, "home")) ?: cl->home);
	printf("  socket:     %s\n", cl->sock);
	if (json_is_string(json_object_get(st, "docker_socket")))
		printf("  docker API: unix://%s\n",
		       json_string_value(json_object_get(st, "docker_socket")));
	if (json_is_string(json_object_get(st, "e2b_api")))
		printf("  e2b API:    %s\n", json_string_value(json_object_get(st, "e2b_api")));
	printf("  accel:      %s\n", desc);
	printf("  sandboxes:  %lld\n", json_integer_value(json_object_get(st, "sandboxes")));
	{
		/* those containerd's shim made, by name and task or pod (docs/containerd.md) */
		json_t *owned = json_object_get(st, "owned_sandboxes"), *o;
		size_t i;
		if (json_array_size(owned))
			printf("  containerd: %zu sandbox%s made by containerd-shim-kosa8-v2\n",
			       json_array_size(owned), json_array_size(owned) == 1 ? "" : "es");
		json_array_foreach(owned, i, o) {
			json_t *ow = json_object_get(o, "owner");
			cleanup_free char *name = str_escape(json_string_value(json_object_get(o, "name")));
			cleanup_free char *ns = str_escape(json_string_value(json_object_get(ow, "namespace")));
			cleanup_free char *id = str_escape(json_string_value(json_object_get(ow, "id")));
			printf("    %s: %s %s in namespace %s\n", name,
			       json_is_true(json_object_get(ow, "pod")) ? "pod" : "task", id, ns);
		}
	}
	if (json_is_boolean(json_object_get(st, "jail")))
		printf("  jail:       %s\n", json_is_true(json_object_get(st, "jail")) ?
		       "on (QEMU: own uid, no capabilities, seccomp, empty root)" :
		       "OFF (QEMU runs as root)");
	if (json_is_true(json_object_get(st, "offline")))
		printf("  network:    offline (nothing is fetched: image and model pulls are "
		       "refused; load, import or bundle import instead)\n");
	cg = json_object_get(st, "cgroup");
	if (cg) {
		json_t *ver = json_object_get(cg, "version");
		const char *note = json_string_value(json_object_get(cg, "note"));
		printf("  cgroup:     ");
		if (json_is_integer(ver))
			printf("v%lld, ", json_integer_value(ver));
		else if (json_is_string(ver))
			printf("%s, ", json_string_value(ver));
		printf("%s%s%s\n", json_is_true(json_object_get(cg, "usable")) ? "usable" :
		       "not usable", note && *note ? ": " : "", note ? note : "");
	}
	json_t *idle = json_object_get(st, "idle");
	if (idle) {
		json_int_t after = json_integer_value(json_object_get(idle, "idle_pause_s"));
		json_t *ksm = json_object_get(idle, "ksm");
		if (after > 0)
			printf("  idle pause: after %llds unused (config.json idle_pause)\n",
			       (long long)after);
		else
			printf("  idle pause: off (config.json idle_pause, or sandbox create "
			       "--idle-pause)\n");
		printf("  KSM:        %s\n",
		       json_string_value(json_object_get(ksm, "note")) ?: "unknown");
	}
	guest = json_object_get(st, "guest");
	if (guest) {
		json_t *ver = json_object_get(guest, "verified");
		printf("  guest:      kernel %s, initramfs %s, %s\n",
		       json_string_value(json_object_get(guest, "kernel")) ?: "?",
		       json_string_value(json_object_get(guest, "initramfs")) ?: "?",
		       json_is_true(ver) ? "checksum verified" :
		       json_is_false(ver) ? "checksum NOT verified" : "checksum unknown");
		const char *dg = json_string_value(json_object_get(guest, "digest"));
		const char *rel = json_string_value(json_object_get(guest, "release_digest"));
		if (dg && *dg)
			printf("              %s (%s)\n", dg, rel && !strcmp(dg, rel) ?
			       "the one this kosa8 was released with" :
			       "NOT the one this kosa8 was released with");
		show_fetched(st, false);
	}
	fflush(stdout);
	warn_security(st);
	return CLI_EXIT_OK;
}

static int cmd_status(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cli_view(self, argc, argv, home, "/v1/status", 10000, show_status);
}

const struct cli_cmd cli_daemon_cmds[] = {
	{ "daemon start", cmd_start, "start kosa8d and wait until it answers",
	  "Usage: kosa8 daemon start [--home DIR] [--accel auto|kvm|tcg] [--allow-mount DIR]... "
	  "[--offline] [--fs-reserve SIZE[,PCT%]] [--require-sandbox]\n"
	  "[--allow-public-ports] [--socket-group GROUP] [--foreground]\n"
	  "\n"
	  "Start kosa8d, the daemon that owns all of kosa8's state, detached from this\n"
	  "terminal (its output goes to $KOSA8_HOME/kosa8d.log), and wait until it answers\n"
	  "(up to 120 s: it may first probe whether KVM can boot the guest, or fetch the\n"
	  "release's guest image when it has none). If a daemon already answers on the\n"
	  "socket, say so and succeed: an installed kosa8's service (its home\n"
	  "/var/lib/kosa8) answers members of the group kosa8 as well as root.\n"
	  "\n"
	  "Options:\n"
	  "  --home DIR          state directory (default $KOSA8_HOME, else ~/.kosa8 when it\n"
	  "                      exists, else /var/lib/kosa8 when kosa8 is installed)\n"
	  "  --accel MODE        auto (default: KVM when it boots the guest, else TCG), kvm\n"
	  "                      or tcg\n"
	  "  --allow-mount DIR   host directory that sandboxes may mount (--mount), and what\n"
	  "                      is below it; repeat for more\n"
	  "  --offline           fetch nothing from any registry (like KOSA8_OFFLINE=1);\n"
	  "                      local images keep working\n"
	  "  --fs-reserve SIZE[,PCT%]  host disk kept free under shared folders: writes\n"
	  "                      through a share fail (ENOSPC) before the host file system\n"
	  "                      has less free than the larger of SIZE (K, M, G, T) and PCT%\n"
	  "                      of its size (default 1G,5%)\n"
	  "  --require-sandbox   every container made through the Docker API gets a sandbox\n"
	  "                      (VM) of its own, removed with it (config.json\n"
	  "                      \"require_sandbox\": true does the same), instead of the\n"
	  "                      shared docker-engine sandbox\n"
	  "  --allow-public-ports  let sandboxes publish ports (--publish) on addresses\n"
	  "                      other than loopback, e.g. 0.0.0.0 (config.json\n"
	  "                      \"allow_public_ports\": true likewise); loopback only without\n"
	  "  --socket-group GROUP  the sockets (kosa8d.sock, docker.sock) are 0660 with this\n"
	  "                      group and the home 0710: its members may use kosa8d, which\n"
	  "                      is as good as root (default: the group kosa8 for\n"
	  "                      /var/lib/kosa8 when it exists, else only the daemon's user)\n"
	  "  --foreground        run kosa8d in this terminal instead (for systemd, debugging)\n"
	  "\n"
	  "The daemon program is $KOSA8D, or kosa8d in the same directory as kosa8.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 daemon start --allow-mount ~/interp\n" },
	{ "daemon stop", cmd_stop, "stop kosa8d and its VMs",
	  "Usage: kosa8 daemon stop [--home DIR]\n"
	  "\n"
	  "Ask kosa8d to stop its sandboxes' VMs and exit, and wait (up to 60 s) until it is\n"
	  "gone. Sandboxes stay recorded; a new daemon finds them again. Succeeds when no\n"
	  "daemon is running.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 daemon stop\n" },
	{ "daemon status", cmd_status, "is kosa8d running, with which accelerator",
	  "Usage: kosa8 daemon status [--home DIR] [--json]\n"
	  "\n"
	  "Show whether kosa8d runs, its pid and version, the accelerator it chose (and why),\n"
	  "the number of sandboxes, whether host cgroups can limit the VMs and whether the\n"
	  "guest image's checksum was verified. Exits 3 when the daemon is not running.\n"
	  "\n"
	  "Options:\n"
	  "  --json     print the daemon's status object\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 daemon status\n" },
	{ NULL, NULL, NULL, NULL },
};
