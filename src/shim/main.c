/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - containerd-shim-kosa8-v2: the `start` and `delete` subcommands of containerd's
 * shim v2 contract, and the serving shim (shim.h has the theory of operation).
 *
 *   containerd-shim-kosa8-v2 -namespace NS -address A -publish-binary B -id ID start
 *   containerd-shim-kosa8-v2 -namespace NS -address A -publish-binary B -id ID -bundle D delete
 *   containerd-shim-kosa8-v2 -v
 *
 * Settings: the node's config is a JSON file, $KOSA8_SHIM_CONFIG or
 * /etc/kosa8/containerd-shim.json (absent: the defaults); kosa8's home is $KOSA8_HOME,
 * else the config's "home", else $HOME/.kosa8. docs/containerd.md lists the keys.
 */
#include "shim/shim.h"
#include "shim/log.h"
#include "shim/ttrpc.h"
#include "common/sha.h"
#include "common/worker.h"
#include "task.pb-c.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#define SHIM_CONFIG_DEFAULT "/etc/kosa8/containerd-shim.json"
#define SHIM_STATE_DEFAULT "/var/lib/kosa8-shim"
#define SHIM_CONFIG_MAX (1u << 20)

struct opts {
	const char *ns, *id, *address, *publish, *bundle, *action;
	bool debug, version;
};

static void die(const char *fmt, ...) K8_PRINTF(1, 2) __attribute__((noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("containerd-shim-kosa8-v2: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* Go's flag package: -name value, --name value, -name=value; the first other word is the
 * action. */
static void parse_opts(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		const char **dst = NULL;
		char name[32];

		if (a[0] != '-') {
			if (!o->action)
				o->action = a;
			continue;
		}
		a += a[1] == '-' ? 2 : 1;
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(a, "="), a);
		if (strchr(a, '='))
			v = strchr(a, '=') + 1;
		if (!strcmp(name, "debug")) {
			o->debug = true;
			continue;
		}
		if (!strcmp(name, "v") || !strcmp(name, "version")) {
			o->version = true;
			continue;
		}
		if (!strcmp(name, "namespace"))
			dst = &o->ns;
		else if (!strcmp(name, "id"))
			dst = &o->id;
		else if (!strcmp(name, "address"))
			dst = &o->address;
		else if (!strcmp(name, "publish-binary"))
			dst = &o->publish;
		else if (!strcmp(name, "bundle"))
			dst = &o->bundle;
		else if (!strcmp(name, "socket"))
			dst = NULL;
		else
			die("unknown flag -%s", name);
		if (!v) {
			if (i + 1 >= argc)
				die("-%s needs a value", name);
			v = argv[++i];
		}
		if (dst)
			*dst = v;
	}
}

/* The node's config, and the paths it decides. */
static void load_config(struct shim *s)
{
	const char *path = getenv("KOSA8_SHIM_CONFIG");
	cleanup_free char *text = NULL;
	const char *home, *state;
	json_error_t je;
	size_t len;
	int r;

	if (!path || !*path)
		path = SHIM_CONFIG_DEFAULT;
	r = read_file(path, SHIM_CONFIG_MAX, &text, &len);
	if (r == -ENOENT) {
		s->node = json_object();
	} else if (r) {
		die("%s: %s", path, strerror(-r));
	} else {
		s->node = json_loadb(text, len, 0, &je);
		if (!json_is_object(s->node))
			die("%s: not a JSON object: %s (line %d)", path, je.text, je.line);
	}
	home = getenv("KOSA8_HOME");
	if (!home || !*home)
		home = json_string_value(json_object_get(s->node, "home"));
	if (home && *home)
		s->home = xstrdup(home);
	else
		s->home = xasprintf("%s/.kosa8", getenv("HOME") && *getenv("HOME") ?
				    getenv("HOME") : "/root");
	state = json_string_value(json_object_get(s->node, "state_dir"));
	s->state_dir = xstrdup(state && *state ? state : SHIM_STATE_DEFAULT);
	if (s->home[0] != '/' || s->state_dir[0] != '/')
		die("kosa8's home (%s) and the shim's state_dir (%s) must be absolute paths",
		    s->home, s->state_dir);
}

/* The shim's socket for a group (a pod, or a task on its own). */
static void sock_path(struct shim *s, const char *address, const char *group, char out[108])
{
	cleanup_free char *key = xasprintf("%s\n%s\n%s", address ? address : "", s->ns, group);
	char hex[65];

	sha256_hex(key, strlen(key), hex);
	if (snprintf(out, 108, "%s/s/%.32s", s->state_dir, hex) >= 108)
		die("state_dir %s is too long for a unix socket path", s->state_dir);
}

static int sock_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	close(fd);
	return 0;
}

/* `start`: bind the group's socket (or find its shim running), start the serving shim
 * with it as fd 3, write the bundle's "address" file and print the address. */
static int cmd_start(struct shim *s, const struct opts *o, char **argv)
{
	cleanup_free char *text = NULL, *addr = NULL;
	struct spec sp = { 0 };
	struct k8_err err = { 0 };
	char path[108], buf[4096];
	const char *group = o->id;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	size_t len;
	int lfd, r;
	pid_t pid;

	if (!o->id || !*o->id)
		die("start: -id is required");
	/* containerd writes the runtime's options on stdin: read and drop them */
	while (read(0, buf, sizeof(buf)) > 0)
		;
	/* One shim for a pod: its containers carry the pod's id (as runc's v2 shim groups). */
	if (read_file("config.json", SPEC_MAX_BYTES, &text, &len) == 0 &&
	    spec_parse(text, len, &sp, &err) == 0 && sp.pod[0])
		group = sp.pod;
	sock_path(s, o->address, group, path);
	spec_free(&sp);
	addr = xasprintf("unix://%s", path);
	{
		cleanup_free char *sdir = xasprintf("%s/s", s->state_dir);
		if ((r = mkdir_p(sdir, 0700)))
			die("%s: %s", sdir, strerror(-r));
	}
	if (sock_connect(path) == 0) {
		if ((r = write_file_atomic("address", addr, strlen(addr), 0600)))
			die("writing the address file: %s", strerror(-r));
		printf("%s", addr);
		return 0;
	}
	unlink(path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(path, 0600) < 0 ||
	    listen(lfd, 128) < 0)
		die("%s: %s", path, strerror(errno));
	if ((r = write_file_atomic("address", addr, strlen(addr), 0600)))
		die("writing the address file: %s", strerror(-r));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		const char *args[16];
		int n = 0, null = open("/dev/null", O_RDWR);

		setsid();
		/* fd 3, inherited (dup2 onto itself would keep its close-on-exec) */
		if (lfd == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(lfd, 3) < 0)
			_exit(1);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
		}
		args[n++] = argv[0];
		args[n++] = "-namespace";
		args[n++] = s->ns;
		args[n++] = "-id";
		args[n++] = o->id;
		args[n++] = "-address";
		args[n++] = o->address ? o->address : "";
		if (o->publish) {
			args[n++] = "-publish-binary";
			args[n++] = o->publish;
		}
		if (o->debug)
			args[n++] = "-debug";
		args[n] = NULL;
		execv("/proc/self/exe", (char *const *)args);
		_exit(127);
	}
	close(lfd);
	printf("%s", addr);
	return 0;
}

/* `delete`: containerd cleans up after a shim it lost (killed, crashed). Whatever the
 * task made in kosa8 goes; the answer says it was killed. */
static int cmd_delete(struct shim *s, const struct opts *o)
{
	K8task__DeleteResponse resp = K8TASK__DELETE_RESPONSE__INIT;
	K8task__Timestamp ts = K8TASK__TIMESTAMP__INIT;
	struct k8_err err = { 0 };
	char cwd[4096];
	const char *bundle = o->bundle;
	cleanup_free unsigned char *out = NULL;
	struct timespec now;
	uint32_t pid = 0;
	size_t len;

	if (!bundle || !*bundle)
		bundle = getcwd(cwd, sizeof(cwd));
	if (!bundle)
		die("delete: no bundle");
	if (task_cleanup_bundle(s, bundle, &pid, &err))
		fprintf(stderr, "kosa8: cleaning up task %s: %s\n", o->id ? o->id : "?", err.msg);
	clock_gettime(CLOCK_REALTIME, &now);
	ts.seconds = now.tv_sec;
	ts.nanos = (int32_t)now.tv_nsec;
	resp.pid = pid;
	resp.exit_status = 128 + SIGKILL;
	resp.exited_at = &ts;
	out = ttrpc_pack(&resp.base, &len);
	return write_full(1, out, len) ? 1 : 0;
}

static int cmd_serve(struct shim *s, const struct opts *o)
{
	struct sockaddr_un a;
	socklen_t alen = sizeof(a);
	int acc = 0, logfd;
	socklen_t ol = sizeof(acc);
	struct k8_err err = { 0 };

	if (getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &acc, &ol) < 0 || !acc)
		die("the serving shim expects its listening socket at fd 3 (run it through "
		    "`start`)");
	fcntl(3, F_SETFD, FD_CLOEXEC);
	/* containerd reads the bundle's "log" FIFO (it opened it before `start`) */
	logfd = open("log", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (logfd >= 0) {
		fcntl(logfd, F_SETFL, fcntl(logfd, F_GETFL) & ~O_NONBLOCK);
		shim_log_fd(logfd);
	}
	if (kc_init(&s->kc, s->home, &err))
		die("%s", err.msg);
	s->pid = (uint32_t)getpid();
	s->ev = events_open(getenv("TTRPC_ADDRESS"), s->ns);
	shim_log("serving namespace %s (first task %s), kosa8 home %s", s->ns, s->id, s->home);
	server_run(s, 3);
	events_close(s->ev, 5000);
	if (getsockname(3, (struct sockaddr *)&a, &alen) == 0 && a.sun_path[0])
		unlink(a.sun_path);
	shim_log("no task left: exiting");
	(void)o;
	return 0;
}

int main(int argc, char **argv)
{
	struct shim s = { 0 };
	struct opts o;
	int r;

	/* a worker (the rootfs's layer: src/common/worker.h) runs its job here and ends */
	worker_main(argc, argv);
	parse_opts(argc, argv, &o);
	if (o.version) {
		printf("%s:\n  Version:  %s\n", argv[0], SHIM_VERSION);
		return 0;
	}
	if (!o.ns || !*o.ns)
		die("shim namespace cannot be empty (-namespace)");
	if (strlen(o.ns) >= sizeof(s.ns) || (o.id && strlen(o.id) > SHIM_ID_MAX))
		die("the namespace or the id is too long");
	signal(SIGPIPE, SIG_IGN);
	snprintf(s.ns, sizeof(s.ns), "%s", o.ns);
	snprintf(s.id, sizeof(s.id), "%s", o.id ? o.id : "");
	s.address = o.address ? xstrdup(o.address) : NULL;
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.cond, NULL);
	load_config(&s);
	if (o.action && !strcmp(o.action, "start")) {
		r = cmd_start(&s, &o, argv);
	} else if (o.action && !strcmp(o.action, "delete")) {
		struct k8_err err = { 0 };
		if (kc_init(&s.kc, s.home, &err))
			die("%s", err.msg);
		s.kc.timeout_ms = 60000;
		r = cmd_delete(&s, &o);
	} else if (o.action) {
		die("unknown action %s (start, delete)", o.action);
	} else {
		r = cmd_serve(&s, &o);
	}
	json_decref(s.node);
	free(s.home);
	free(s.state_dir);
	free(s.address);
	return r;
}
