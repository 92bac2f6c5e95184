/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.c - kosa8 sandbox ...: create, pull, run, start, exec, ps, stop, ls, inspect,
 * rm, egress. run and exec stream the process's output live over an upgraded connection
 * (stream.c) and exit with the process's own exit code. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
	OPT_CPUS = 'c', OPT_MEMORY = 'M', OPT_DISK = 'D', OPT_EGRESS = 'g',
	OPT_EGRESS_ALLOW = 'G', OPT_MOUNT = 'm', OPT_ENV = 'e', OPT_WORKDIR = 'w',
	OPT_USER = 'u', OPT_INTERACTIVE = 'i', OPT_DETACH = 'd', OPT_WIPE = 'W',
	OPT_FORCE = 'f', OPT_TIMEOUT = 't', OPT_ALLOW = 'A', OPT_REMOVE = 'R', OPT_MODE = 'O',
	OPT_IDLE_PAUSE = 'P',
	OPT_BROKER = 'B',
	OPT_INTERCEPT = 'I',
	OPT_SPARE = 'S',
	OPT_PUBLISH = 'p',
};

/* "/v1/sandboxes/<name><suffix>" with the name URL-encoded. */
static char *sb_path(const char *name, const char *suffix)
{
	cleanup_free char *enc = cli_urlenc(name);
	return xasprintf("/v1/sandboxes/%s%s", enc, suffix);
}

/* Check a NAME argument; on failure print the usage error and return 0. */
static int name_ok(const struct cli_cmd *self, const char *name, int *rc)
{
	struct k8_err err = { 0 };

	if (cli_check_name(name, &err) == 0)
		return 1;
	*rc = cli_usage(self->name, "%s", err.msg);
	return 0;
}

/* "docker.io/library/python:3.12-slim" -> "python:3.12-slim" for tables. */
static const char *short_ref(const char *ref)
{
	if (ref && !strncmp(ref, "docker.io/library/", 18))
		return ref + 18;
	if (ref && !strncmp(ref, "docker.io/", 10))
		return ref + 10;
	return ref;
}

/* ---- create ---- */

/* Make a --mount's HOST absolute and real ("~/x" is $HOME/x: the shell does not expand
 * it after "--mount="). 0 or -EINVAL with a message. */
static int mount_resolve(struct cli_mount *m, struct k8_err *err)
{
	cleanup_free char *exp = NULL;
	const char *home = getenv("HOME");
	struct stat st;
	char *real;

	if (m->host[0] == '~' && (m->host[1] == '/' || !m->host[1]) && home)
		exp = xasprintf("%s%s", home, m->host + 1);
	real = realpath(exp ? exp : m->host, NULL);
	if (!real && errno == ENOENT)
		return k8_err_set(err, -EINVAL, "--mount: host folder %s does not exist; create it "
				  "first (mkdir -p %s)", m->host, m->host);
	if (!real)
		return k8_err_set(err, -EINVAL, "--mount: %s: %s", m->host, strerror(errno));
	if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
		free(real);
		return k8_err_set(err, -EINVAL, "--mount: host path %s is not a folder; --mount "
				  "shares folders", m->host);
	}
	free(m->host);
	m->host = real;
	return 0;
}

static int cmd_create(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "cpus", 0, 1, OPT_CPUS }, { "memory", 0, 1, OPT_MEMORY },
		{ "disk", 0, 1, OPT_DISK }, { "egress", 0, 1, OPT_EGRESS },
		{ "egress-allow", 0, 1, OPT_EGRESS_ALLOW }, { "mount", 0, 1, OPT_MOUNT },
		{ "idle-pause", 0, 1, OPT_IDLE_PAUSE }, { "broker", 0, 1, OPT_BROKER },
		{ "rewind-spare", 0, 1, OPT_SPARE },
		{ "publish", 'p', 1, OPT_PUBLISH }, { "broker-intercept", 0, 0, OPT_INTERCEPT },
		{ "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	json_t *broker = NULL;
	int intercept = 0;
	json_t *ports = NULL;
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	long cpus = 2, mem = 1024, disk = 4;
	uint64_t idle = 0;
	int idle_set = 0;
	const char *egress = NULL, *spare = NULL;
	json_t *body = NULL, *res = NULL, *allow = NULL, *mounts = NULL;
	int rc, r, json = 0;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	if (!name_ok(self, a.pos[0], &rc))
		goto out;
	for (int i = 0; i < a.nopts; i++) {
		const char *v = a.opts[i].arg;
		struct cli_mount m;

		r = 0;
		switch (a.opts[i].id) {
		case OPT_CPUS: r = cli_parse_range("--cpus", v, 1, 64, &cpus, &err); break;
		case OPT_MEMORY: r = cli_parse_range("--memory", v, 128, 65536, &mem, &err); break;
		case OPT_DISK: r = cli_parse_range("--disk", v, 1, 1024, &disk, &err); break;
		case CLI_OPT_JSON: json = 1; break;
		case OPT_IDLE_PAUSE:
			idle_set = 1;
			if (k8_duration_parse(v, 2592000, &idle) < 0)
				r = k8_err_set(&err, -EINVAL, "--idle-pause takes a duration of at "
					       "most 30 days such as 90s, 15m, 2h or off (got '%s')", v);
			break;
		case OPT_SPARE: spare = v; break;      /* the daemon checks it */
		case OPT_EGRESS:
			if (strcmp(v, "deny") && strcmp(v, "allow-all"))
				r = k8_err_set(&err, -EINVAL,
					       "--egress must be 'deny' or 'allow-all' (got '%s'); "
					       "to allow some hosts use --egress-allow HOST", v);
			egress = v;
			break;
		case OPT_EGRESS_ALLOW:
			if (!*v)
				r = k8_err_set(&err, -EINVAL, "--egress-allow needs a host name, "
					       "host:port, IP or CIDR");
			if (!allow)
				allow = json_array();
			json_array_append_new(allow, json_string(v));
			break;
		case OPT_INTERCEPT:
			intercept = 1;
			break;
		case OPT_BROKER:        /* checked by the daemon (it knows the secrets) */
			if (!broker)
				broker = json_array();
			json_array_append_new(broker, json_string(v));
			break;
		case OPT_PUBLISH:       /* [IP:]HOSTPORT:GUESTPORT, checked by the daemon */
			if (!ports)
				ports = json_array();
			json_array_append_new(ports, json_string(v));
			break;
		case OPT_MOUNT:
			r = cli_parse_mount(v, &m, &err);
			if (r == 0) {
				r = mount_resolve(&m, &err);
				if (r == 0) {
					if (!mounts)
						mounts = json_array();
					json_array_append_new(mounts, json_pack("{s:s,s:s,s:b}",
						"host", m.host, "guest", m.guest, "ro", m.ro));
				}
				cli_mount_free(&m);
			}
			break;
		}
		if (r < 0) {
			rc = cli_usage(self->name, "%s", err.msg);
			goto out;
		}
	}
	if (egress && allow && !strcmp(egress, "deny")) {
		rc = cli_usage(self->name, "--egress deny and --egress-allow contradict each "
			       "other: deny lets nothing out");
		goto out;
	}
	body = json_pack("{s:s,s:I,s:I,s:I}", "name", a.pos[0], "cpus", (json_int_t)cpus,
			 "memory_mib", (json_int_t)mem, "disk_gb", (json_int_t)disk);
	/* Only what the user asked for: the daemon applies the defaults (egress deny). */
	if (egress)
		json_object_set_new(body, "egress", json_string(egress));
	if (allow)
		json_object_set(body, "egress_allow", allow);
	if (mounts)
		json_object_set(body, "mounts", mounts);
	if (idle_set)
		json_object_set_new(body, "idle_pause_s", json_integer((json_int_t)idle));
	if (broker)
		json_object_set(body, "broker", broker);
	if (intercept)
		json_object_set_new(body, "broker_intercept", json_true());
	if (spare)
		json_object_set_new(body, "rewind_spare", json_string(spare));
	if (ports)
		json_object_set(body, "ports", ports);
	rc = cli_post_progress(&cl, "/v1/sandboxes", body, json, &res);
	if (rc != CLI_EXIT_OK)
		goto out;
	const char *state = json_string_value(json_object_get(res, "state"));
	rc = state && !strcmp(state, "failed") ? CLI_EXIT_ERROR : CLI_EXIT_OK;
	if (json)
		goto out;
	if (rc) {
		const char *e = json_string_value(json_object_get(res, "error"));
		cli_die(rc, "sandbox '%s' failed to start%s%s", a.pos[0], e ? ": " : "",
			e ? e : "");
		goto out;
	}
	if (json_string_value(json_object_get(res, "tcg_note")))
		fprintf(stderr, "note: accel tcg: %s\n",
			json_string_value(json_object_get(res, "tcg_note")));
	printf("sandbox %s %s (%lld vCPUs, %lld MiB memory, %lld GB disk, accel %s)\n",
	       a.pos[0], state ? state : "created",
	       json_integer_value(json_object_get(res, "cpus")) ?: (long long)cpus,
	       json_integer_value(json_object_get(res, "memory_mib")) ?: (long long)mem,
	       json_integer_value(json_object_get(res, "disk_gb")) ?: (long long)disk,
	       json_string_value(json_object_get(res, "accel")) ?: "?");
	cli_ports_print(json_object_get(res, "ports"));
out:
	json_decref(body);
	json_decref(res);
	json_decref(allow);
	json_decref(mounts);
	json_decref(broker);
	json_decref(ports);
	return cli_end(&a, &cl, rc);
}

/* ---- pull ---- */

static int cmd_pull(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	json_t *body = NULL, *res = NULL;
	cleanup_free char *path = NULL;
	int rc, json;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 2, 2, home, &a, &cl, &rc))
		return rc;
	if (!name_ok(self, a.pos[0], &rc))
		return cli_end(&a, &cl, rc);
	json = cli_has_opt(&a, CLI_OPT_JSON);
	body = json_pack("{s:s}", "image", a.pos[1]);
	path = sb_path(a.pos[0], "/pull");
	rc = cli_post_progress(&cl, path, body, json, &res);
	if (rc == CLI_EXIT_OK && !json) {
		char d[40];
		printf("%s: %s (%s) ready\n", a.pos[0],
		       json_string_value(json_object_get(res, "ref")) ?: a.pos[1],
		       out_short_digest(json_string_value(json_object_get(res, "digest")), d,
					sizeof(d)));
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

/* ---- run, start, exec ---- */

static const struct cli_opt proc_opts[] = {
	{ "env", 'e', 1, OPT_ENV }, { "workdir", 'w', 1, OPT_WORKDIR },
	{ "user", 'u', 1, OPT_USER }, { "interactive", 'i', 0, OPT_INTERACTIVE },
	{ "detach", 'd', 0, OPT_DETACH }, { NULL, 0, 0, 0 },
};
/* exec: the same without --detach. */
static const struct cli_opt exec_opts[] = {
	{ "env", 'e', 1, OPT_ENV }, { "workdir", 'w', 1, OPT_WORKDIR },
	{ "user", 'u', 1, OPT_USER }, { "interactive", 'i', 0, OPT_INTERACTIVE },
	{ NULL, 0, 0, 0 },
};
/* start: always detached, no stdin. */
static const struct cli_opt start_opts[] = {
	{ "env", 'e', 1, OPT_ENV }, { "workdir", 'w', 1, OPT_WORKDIR },
	{ "user", 'u', 1, OPT_USER }, { NULL, 0, 0, 0 },
};

/* The fields run and exec share: argv, env, cwd, user. *interactive and *detach are set
 * from -i and -d. 0 or -EINVAL with a message. */
static int proc_body(const struct cli_args *a, int first_cmd, json_t *body, int *interactive,
		     int *detach, struct k8_err *err)
{
	json_t *args = json_array(), *env = json_array();

	*interactive = *detach = 0;
	for (int i = first_cmd; i < a->npos; i++)
		json_array_append_new(args, json_string(a->pos[i]));
	json_object_set_new(body, "argv", args);
	json_object_set_new(body, "env", env);
	for (int i = 0; i < a->nopts; i++) {
		const char *v = a->opts[i].arg;
		switch (a->opts[i].id) {
		case OPT_ENV:
			if (cli_check_env(v, err) < 0)
				return err->code;
			if (strchr(v, '=')) {
				json_array_append_new(env, json_string(v));
			} else {
				/* -e KEY: this environment's value, or nothing (as Docker). */
				const char *val = getenv(v);
				if (val) {
					cleanup_free char *kv = xasprintf("%s=%s", v, val);
					json_array_append_new(env, json_string(kv));
				}
			}
			break;
		case OPT_WORKDIR:
			if (v[0] != '/')
				return k8_err_set(err, -EINVAL, "-w '%s': the working directory "
						  "must be an absolute path", v);
			json_object_set_new(body, "cwd", json_string(v));
			break;
		case OPT_USER:
			if (!*v)
				return k8_err_set(err, -EINVAL, "-u needs a user: UID[:GID]");
			json_object_set_new(body, "user", json_string(v));
			break;
		case OPT_INTERACTIVE:
			*interactive = 1;
			break;
		case OPT_DETACH:
			*detach = 1;
			break;
		}
	}
	return 0;
}

/* Open an exec stream at `path` and pump it. Returns the exit code of kosa8. */
static int run_stream(struct client *cl, const char *path, json_t *body, int fwd_stdin)
{
	struct k8_err err = { 0 };
	unsigned char *extra = NULL;
	size_t extra_len = 0;
	int fd, code = 0, r;

	fflush(stdout);
	r = client_upgrade(cl, path, body, &fd, &extra, &extra_len, &err);
	if (r < 0) {
		if (r == -ECONNREFUSED)
			return cli_fail(&err);
		/* The process never started: the daemon's hint (127 command not found, 126
		 * not executable), else Docker's 125. */
		return cli_die(client_exit_hint() ? client_exit_hint() : CLI_EXIT_CANNOT_RUN,
			       "%s", err.msg);
	}
	r = stream_pump(fd, extra, extra_len, fwd_stdin, &code, &err);
	close(fd);
	free(extra);
	if (r == 0)
		return code;
	if (r == -ECANCELED) {
		if (code != 128 + 13) /* not SIGPIPE: the user pressed Ctrl-C twice */
			fprintf(stderr, "kosa8: disconnected; the daemon kills the process\n");
		return code;
	}
	return cli_die(CLI_EXIT_CANNOT_RUN, "%s", err.msg);
}

/* Start detached: POST run with "detach":true, print the container id. */
static int run_detached(struct client *cl, const char *path, json_t *body)
{
	struct k8_err err = { 0 };
	json_t *res = NULL;
	const char *id;
	int rc;

	json_object_set_new(body, "detach", json_true());
	json_object_set_new(body, "stdin", json_false());
	if (client_call(cl, "POST", path, body, NULL, NULL, 0, &res, &err) < 0) {
		if (err.code == -ECONNREFUSED)
			return cli_fail(&err);
		return cli_die(CLI_EXIT_CANNOT_RUN, "%s", err.msg);
	}
	id = json_string_value(json_object_get(res, "id"));
	if (id) {
		printf("%s\n", id);
		rc = CLI_EXIT_OK;
	} else {
		rc = cli_die(CLI_EXIT_CANNOT_RUN, "the daemon did not say which container it "
			     "started");
	}
	json_decref(res);
	return rc;
}

/* run (detach_always 0) and start (1). */
static int do_run(const struct cli_cmd *self, int argc, char **argv, const char *home,
		  int detach_always)
{
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	json_t *body = NULL;
	cleanup_free char *path = NULL;
	int rc, interactive, detach, fwd;

	if (!cli_begin(self, argc, argv, detach_always ? start_opts : proc_opts, 2, 2, -1, home,
		       &a, &cl, &rc))
		return rc;
	if (!name_ok(self, a.pos[0], &rc))
		goto out;
	body = json_pack("{s:s}", "image", a.pos[1]);
	if (proc_body(&a, 2, body, &interactive, &detach, &err) < 0) {
		rc = cli_usage(self->name, "%s", err.msg);
		goto out;
	}
	path = sb_path(a.pos[0], "/run");
	if (detach || detach_always) {
		rc = run_detached(&cl, path, body);
		goto out;
	}
	fwd = interactive || !isatty(0);
	json_object_set_new(body, "stdin", json_boolean(fwd));
	json_object_set_new(body, "detach", json_false());
	rc = run_stream(&cl, path, body, fwd);
out:
	json_decref(body);
	return cli_end(&a, &cl, rc);
}

static int cmd_run(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return do_run(self, argc, argv, home, 0);
}

static int cmd_start(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return do_run(self, argc, argv, home, 1);
}

static int cmd_exec(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	json_t *body = NULL;
	cleanup_free char *path = NULL, *id = NULL, *suffix = NULL;
	int rc, interactive, detach, fwd;

	if (!cli_begin(self, argc, argv, exec_opts, 2, 3, -1, home, &a, &cl, &rc))
		return rc;
	if (!name_ok(self, a.pos[0], &rc))
		goto out;
	body = json_object();
	if (proc_body(&a, 2, body, &interactive, &detach, &err) < 0) {
		rc = cli_usage(self->name, "%s", err.msg);
		goto out;
	}
	fwd = interactive || !isatty(0);
	json_object_set_new(body, "stdin", json_boolean(fwd));
	id = cli_urlenc(a.pos[1]);
	suffix = xasprintf("/containers/%s/exec", id);
	path = sb_path(a.pos[0], suffix);
	rc = run_stream(&cl, path, body, fwd);
out:
	json_decref(body);
	return cli_end(&a, &cl, rc);
}

/* ---- ps, stop, ls, inspect, rm ---- */

/* ps and inspect: `NAME [--json]`, GET the sandbox's path + suffix, and print the answer
 * with show; as JSON with --json, or always when show is NULL. */
static int sb_view(const struct cli_cmd *self, int argc, char **argv, const char *home,
		   const char *suffix, cli_show_fn show)
{
	struct cli_args a;
	struct client cl;
	int rc;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	if (name_ok(self, a.pos[0], &rc)) {
		cleanup_free char *path = sb_path(a.pos[0], suffix);
		rc = cli_get_show(&cl, path, 0, !show || cli_has_opt(&a, CLI_OPT_JSON), show,
				  NULL);
	}
	return cli_end(&a, &cl, rc);
}

/* A row of the `sandbox ps` table (an out_row_fn). */
static void container_row(struct out_table *t, const json_t *it, double now)
{
	char pid[24] = "", status[32], started[32], cmd[200] = "";
	json_t *argvj = json_object_get(it, "argv"), *w, *ec;
	size_t k, off = 0;

	if (json_integer_value(json_object_get(it, "pid")) > 0)
		snprintf(pid, sizeof(pid), "%lld", json_integer_value(json_object_get(it, "pid")));
	ec = json_object_get(it, "exit_code");
	if (json_is_true(json_object_get(it, "running")))
		snprintf(status, sizeof(status), "running");
	else if (json_is_true(json_object_get(it, "created")))
		snprintf(status, sizeof(status), "created");
	else if (json_is_integer(ec))
		snprintf(status, sizeof(status), "exited (%lld)", json_integer_value(ec));
	else
		snprintf(status, sizeof(status), "exited");
	json_array_foreach(argvj, k, w) {
		int n = snprintf(cmd + off, sizeof(cmd) - off, "%s%s", k ? " " : "",
				 json_string_value(w) ?: "");
		if (n < 0 || (size_t)n >= sizeof(cmd) - off)
			break;
		off += (size_t)n;
	}
	const char *row[6] = {
		json_string_value(json_object_get(it, "id")),
		short_ref(json_string_value(json_object_get(it, "image"))),
		pid, status,
		out_ago(out_time_parse(json_object_get(it, "started")), now, started,
			sizeof(started)),
		cmd,
	};
	out_table_row(t, row);
}

static int show_containers(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "CONTAINER", "IMAGE", "PID", "STATUS", "STARTED",
					   "COMMAND" };

	out_table_array(res, 6, hdr, container_row);
	return CLI_EXIT_OK;
}

static int cmd_ps(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return sb_view(self, argc, argv, home, "/containers", show_containers);
}

/* What `sandbox stop` applies to each container. */
struct stop_req {
	const char *name;
	long timeout;
};

/* Stop the container `id` (a cli_item_fn; ctx is a struct stop_req) and print its id. */
static int stop_one(struct client *cl, const char *id, void *ctx, struct k8_err *err)
{
	const struct stop_req *req = ctx;
	cleanup_free char *enc = cli_urlenc(id);
	cleanup_free char *suffix = xasprintf("/containers/%s/stop", enc);
	cleanup_free char *path = sb_path(req->name, suffix);
	json_t *body = json_pack("{s:I}", "timeout_s", (json_int_t)req->timeout), *res = NULL;

	/* The daemon waits up to timeout_s, then kills: allow it that long. */
	int r = client_call(cl, "POST", path, body, NULL, NULL, 0, &res, err);
	json_decref(body);
	json_decref(res);
	if (r >= 0)
		printf("%s\n", id);
	return r;
}

static int cmd_stop(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "timeout", 't', 1, OPT_TIMEOUT },
					       { NULL, 0, 0, 0 } };
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	struct stop_req req = { .timeout = 10 };
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 2, -1, home, &a, &cl, &rc))
		return rc;
	if (!name_ok(self, a.pos[0], &rc))
		return cli_end(&a, &cl, rc);
	for (int i = 0; i < a.nopts; i++)
		if (a.opts[i].id == OPT_TIMEOUT &&
		    cli_parse_range("--timeout", a.opts[i].arg, 0, 3600, &req.timeout, &err) < 0)
			return cli_end(&a, &cl, cli_usage(self->name, "%s", err.msg));
	req.name = a.pos[0];
	return cli_end(&a, &cl, cli_each(&cl, a.pos + 1, a.npos - 1, stop_one, &req));
}

/* A row of the `sandbox ls` table (an out_row_fn). */
static void sandbox_row(struct out_table *t, const json_t *it, double now)
{
	char cpus[16], mem[24], disk[24], created[32], images[256] = "";
	json_t *imgs = json_object_get(it, "images"), *im;
	size_t k, off = 0;

	snprintf(cpus, sizeof(cpus), "%lld", json_integer_value(json_object_get(it, "cpus")));
	snprintf(mem, sizeof(mem), "%lld MiB",
		 json_integer_value(json_object_get(it, "memory_mib")));
	snprintf(disk, sizeof(disk), "%lld GB", json_integer_value(json_object_get(it, "disk_gb")));
	json_array_foreach(imgs, k, im) {
		int n = snprintf(images + off, sizeof(images) - off, "%s%s", k ? "," : "",
				 short_ref(json_string_value(json_object_get(im, "ref"))) ?: "?");
		if (n < 0 || (size_t)n >= sizeof(images) - off)
			break;
		off += (size_t)n;
	}
	/* A sandbox containerd's shim made for a task or a pod (docs/containerd.md). */
	char owner[80] = "-";
	json_t *ow = json_object_get(it, "owner");
	if (json_is_object(ow)) {
		cleanup_free char *ns = str_escape(json_string_value(json_object_get(ow, "namespace")));
		cleanup_free char *id = str_escape(json_string_value(json_object_get(ow, "id")));
		snprintf(owner, sizeof(owner), "%s:%.20s/%.24s%s",
			 json_string_value(json_object_get(ow, "kind")) ?: "?", ns, id,
			 json_is_true(json_object_get(ow, "pod")) ? "(pod)" : "");
	}
	const char *row[10] = {
		json_string_value(json_object_get(it, "name")),
		json_string_value(json_object_get(it, "state")),
		cpus, mem, disk,
		json_string_value(json_object_get(it, "accel")),
		json_string_value(json_object_get(it, "egress")) ?: "deny",
		out_ago(out_time_parse(json_object_get(it, "created")), now, created,
			sizeof(created)),
		owner,
		images,
	};
	out_table_row(t, row);
}

static int show_sandboxes(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "NAME", "STATE", "CPUS", "MEMORY", "DISK", "ACCEL",
					   "EGRESS", "CREATED", "OWNER", "IMAGES" };

	out_table_array(res, 10, hdr, sandbox_row);
	return CLI_EXIT_OK;
}

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cli_view(self, argc, argv, home, "/v1/sandboxes", 0, show_sandboxes);
}

static int cmd_inspect(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return sb_view(self, argc, argv, home, "", NULL);
}

/* ---- egress ---- */

static void egress_row(struct out_table *t, const json_t *it, double now)
{
	char passed[24], refused[24];
	const char *reason = json_string_value(json_object_get(it, "reason"));

	snprintf(passed, sizeof(passed), "%lld", json_integer_value(json_object_get(it, "passed")));
	snprintf(refused, sizeof(refused), "%lld",
		 json_integer_value(json_object_get(it, "refused")));
	const char *row[4] = { json_string_value(json_object_get(it, "dest")) ?: "?", passed,
			       refused, reason ? reason : "" };
	out_table_row(t, row);
}

static int show_egress(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "DESTINATION", "PASSED", "REFUSED", "LAST REFUSAL" };
	const char *mode = json_string_value(json_object_get(res, "mode")) ?: "?";
	const char *net = json_string_value(json_object_get(res, "network")) ?: "?";
	const char *why = json_string_value(json_object_get(res, "why"));
	const char *name = ctx;
	json_t *rules = json_object_get(res, "rules"), *dests = json_object_get(res, "destinations");
	json_t *dns = json_object_get(res, "dns"), *v;
	size_t i;

	printf("sandbox %s: egress %s", name, mode);
	if (!strcmp(mode, "deny"))
		printf(" (nothing leaves the sandbox, DNS included)");
	else if (!strcmp(mode, "allow-all"))
		printf(" (any destination except the host and internal networks not listed)");
	cleanup_free char *safe_why = why ? str_escape(why) : NULL;  /* may quote kosa8-net */
	printf("\nnetwork: %s%s%s", net, why ? " - " : "", why ? safe_why : "");
	if (json_object_get(res, "flows"))
		printf(", %lld flows tracked (at most %lld)",
		       json_integer_value(json_object_get(res, "flows")),
		       json_integer_value(json_object_get(res, "max_flows")));
	printf("\n");
	if (json_array_size(rules)) {
		printf("allowed%s:\n", !strcmp(mode, "deny") ? " (inactive while deny)" : "");
		json_array_foreach(rules, i, v)
			printf("  %s\n", json_string_value(v));
	} else if (!strcmp(mode, "allow-list")) {
		printf("allowed: nothing listed yet (add with --allow HOST)\n");
	}
	if (dns)
		printf("dns: %lld answered, %lld refused\n",
		       json_integer_value(json_object_get(dns, "answered")),
		       json_integer_value(json_object_get(dns, "refused")));
	if (json_array_size(dests)) {
		printf("\n");
		out_table_array(dests, 4, hdr, egress_row);
	}
	return CLI_EXIT_OK;
}

/* `sandbox broker NAME`: the rules and the broker's counts per host (never a value). */
static void broker_row(struct out_table *t, const char *host, const json_t *h)
{
	char req[24], up[24], down[24], ref[24], why[256] = "";
	const char *k;
	json_t *v;

	snprintf(req, sizeof(req), "%lld", json_integer_value(json_object_get(h, "requests")));
	snprintf(up, sizeof(up), "%lld", json_integer_value(json_object_get(h, "bytes_up")));
	snprintf(down, sizeof(down), "%lld", json_integer_value(json_object_get(h, "bytes_down")));
	snprintf(ref, sizeof(ref), "%lld", json_integer_value(json_object_get(h, "refusals")));
	json_object_foreach((json_t *)json_object_get(h, "refused"), k, v) {
		size_t l = strlen(why);
		snprintf(why + l, sizeof(why) - l, "%s%s %lld", l ? ", " : "", k,
			 json_integer_value(v));
	}
	const char *cells[] = { host, req, up, down, ref, why };
	out_table_row(t, cells);
}

static int show_broker(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "HOST", "REQUESTS", "BYTES UP", "BYTES DOWN",
					   "REFUSED", "REASONS" };
	const char *state = json_string_value(json_object_get(res, "state")) ?: "?";
	json_t *rules = json_object_get(res, "rules"), *hosts, *v;
	json_t *st = json_object_get(res, "stats");
	const char *k;
	size_t i;

	printf("sandbox %s: broker %s at %s\n", (const char *)ctx, state,
	       json_string_value(json_object_get(res, "url")) ?: "?");
	printf("rules:\n");
	json_array_foreach(rules, i, v)
		printf("  %s\n", json_string_value(v));
	if (json_is_true(json_object_get(res, "intercept")))
		printf("intercepting HTTPS to the rules' hosts (--broker-intercept)\n");
	if (!st)
		return CLI_EXIT_OK;
	printf("requests %lld, refused %lld, bytes up %lld, down %lld\n\n",
	       json_integer_value(json_object_get(st, "requests")),
	       json_integer_value(json_object_get(st, "refusals")),
	       json_integer_value(json_object_get(st, "bytes_up")),
	       json_integer_value(json_object_get(st, "bytes_down")));
	struct out_table *t = out_table_new(6, hdr);
	hosts = json_object_get(st, "hosts");
	json_object_foreach(hosts, k, v)
		broker_row(t, k, v);
	out_table_print(t, stdout);
	out_table_free(t);
	return CLI_EXIT_OK;
}

static int cmd_broker(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	cleanup_free char *path = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	if (name_ok(self, a.pos[0], &rc)) {
		char name[128];
		snprintf(name, sizeof(name), "%s", a.pos[0]);
		path = sb_path(name, "/broker");
		rc = cli_get_show(&cl, path, 0, cli_has_opt(&a, CLI_OPT_JSON), show_broker, name);
	}
	return cli_end(&a, &cl, rc);
}

static int cmd_egress(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "allow", 0, 1, OPT_ALLOW }, { "remove", 0, 1, OPT_REMOVE },
		{ "mode", 0, 1, OPT_MODE }, { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	json_t *body = NULL, *res = NULL, *allow = NULL, *remove = NULL;
	struct k8_err err = { 0 };
	const char *mode = NULL;
	char *path = NULL, name[128];
	int rc, json;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	if (!name_ok(self, a.pos[0], &rc))
		goto out;
	snprintf(name, sizeof(name), "%s", a.pos[0]);
	json = cli_has_opt(&a, CLI_OPT_JSON);
	for (int i = 0; i < a.nopts; i++) {
		const char *v = a.opts[i].arg;
		json_t **list = a.opts[i].id == OPT_ALLOW ? &allow
			      : a.opts[i].id == OPT_REMOVE ? &remove : NULL;
		if (a.opts[i].id == OPT_MODE) {
			if (strcmp(v, "deny") && strcmp(v, "allow-list") && strcmp(v, "allow-all")) {
				rc = cli_usage(self->name, "--mode must be deny, allow-list or "
					       "allow-all (got '%s')", v);
				goto out;
			}
			mode = v;
		}
		if (!list)
			continue;
		if (!*list)
			*list = json_array();
		json_array_append_new(*list, json_string(v));
	}
	path = sb_path(name, "/egress");
	if (!allow && !remove && !mode) {
		rc = cli_get_show(&cl, path, 0, json, show_egress, name);
		goto out;
	}
	body = json_object();
	if (allow)
		json_object_set(body, "allow", allow);
	if (remove)
		json_object_set(body, "remove", remove);
	if (mode)
		json_object_set_new(body, "mode", json_string(mode));
	if (client_call(&cl, "POST", path, body, NULL, NULL, 0, &res, &err) < 0) {
		rc = cli_fail(&err);
		goto out;
	}
	if (json) {
		char *t = json_dumps(res, JSON_COMPACT);
		printf("%s\n", t ? t : "{}");
		free(t);
	} else {
		const char *applied = json_string_value(json_object_get(res, "applied"));
		printf("egress policy of %s changed (%s)\n", a.pos[0], applied ? applied : "saved");
		show_egress(res, name);
	}
	rc = CLI_EXIT_OK;
out:
	free(path);
	json_decref(body);
	json_decref(res);
	json_decref(allow);
	json_decref(remove);
	return cli_end(&a, &cl, rc);
}

/* How `sandbox rm` removes each sandbox. */
struct rm_req {
	int wipe;
	int force;
};

/* Delete the sandbox `name` (a cli_item_fn; ctx is a struct rm_req) and say so; with
 * force, one that does not exist is no error and says nothing. */
static int rm_one(struct client *cl, const char *name, void *ctx, struct k8_err *err)
{
	const struct rm_req *req = ctx;
	cleanup_free char *path = sb_path(name, req->wipe ? "?wipe=1" : "");
	json_t *res = NULL;
	struct out_progress prog;

	out_progress_init(&prog, 0);
	out_spinner(&prog, "removing %s%s", name, req->wipe ? " (wiping its disk)" : "");
	int r = client_call(cl, "DELETE", path, NULL, NULL, NULL, 0, &res, err);
	out_spinner_clear(&prog);
	json_decref(res);
	if (r == -ENOENT && req->force)
		return 0;
	if (r >= 0)
		printf("removed %s\n", name);
	return r;
}

static int cmd_rm(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "wipe", 0, 0, OPT_WIPE }, { "force", 'f', 0, OPT_FORCE }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct rm_req req;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, -1, home, &a, &cl, &rc))
		return rc;
	for (int i = 0; i < a.npos; i++)
		if (!name_ok(self, a.pos[i], &rc))
			return cli_end(&a, &cl, rc);
	req.wipe = cli_has_opt(&a, OPT_WIPE);
	req.force = cli_has_opt(&a, OPT_FORCE);
	return cli_end(&a, &cl, cli_each(&cl, a.pos, a.npos, rm_one, &req));
}

const struct cli_cmd cli_sandbox_cmds[] = {
	{ "sandbox create", cmd_create, "create and boot a sandbox (a small VM)",
	  "Usage: kosa8 sandbox create NAME [--cpus N] [--memory MIB] [--disk GB]\n"
	  "           [--egress deny|allow-all] [--egress-allow HOST]... "
	  "[--mount HOST:GUEST[:ro]]...\n"
	  "           [--idle-pause DURATION] [--broker PROVIDER=SECRET]... [--broker-intercept]\n"
	  "           [--rewind-spare latest|off|LABEL]\n"
	  "           [-p|--publish [IP:]HOSTPORT:GUESTPORT]... [--json]\n"
	  "\n"
	  "Create a sandbox: a virtual machine with its own kernel, booted and ready to run\n"
	  "containers. NAME is 1-63 characters: lower-case letters, digits, '_', '.', '-'\n"
	  "(not first).\n"
	  "\n"
	  "Options:\n"
	  "  --cpus N               virtual CPUs, 1-64 (default 2)\n"
	  "  --memory MIB           memory in MiB, 128-65536 (default 1024)\n"
	  "  --disk GB              scratch disk in GB, 1-1024 (default 4)\n"
	  "  --egress deny          no network at all, DNS included (the default)\n"
	  "  --egress allow-all     any destination but the host itself and internal\n"
	  "                         networks (those only when listed with --egress-allow)\n"
	  "  --egress-allow RULE    allow only what is listed: a name (pkgs.example.org),\n"
	  "                         *.domain, NAME:PORT, an IP, a CIDR (IP/N[:PORT]);\n"
	  "                         repeat for more. DNS answers listed names only\n"
	  "  --mount HOST:GUEST[:ro]  share the host folder HOST at GUEST in the VM and in\n"
	  "                         its containers; writable unless :ro (enforced on the\n"
	  "                         host). HOST must exist and, when the daemon was started\n"
	  "                         with --allow-mount, lie below one of those folders\n"
	  "  --idle-pause DURATION  pause it to disk once nobody has used it for DURATION\n"
	  "                         (90s, 15m, 2h; off: never) and no container runs in\n"
	  "                         it; the next run or exec resumes it by itself. Default:\n"
	  "                         the daemon's config.json \"idle_pause\" (off unless set)\n"
	  "  --broker RULE          model API keys added on the host by the sandbox's egress\n"
	  "                         broker: openai[=SECRET], anthropic[=SECRET] or\n"
	  "                         header:HOST:HEADER=SECRET (secrets from `kosa8 secret`);\n"
	  "                         containers get OPENAI_API_KEY/ANTHROPIC_API_KEY (a\n"
	  "                         placeholder) and OPENAI_BASE_URL/ANTHROPIC_BASE_URL\n"
	  "  --broker-intercept     also catch HTTPS to the rules' hosts (tools that hard-code\n"
	  "                         https://api.openai.com): a CA of the sandbox's own is\n"
	  "                         trusted in its containers (SSL_CERT_FILE and the like)\n"
	  "  --rewind-spare WHICH   keep a spare of a checkpoint, restored and stopped, so\n"
	  "                         a rewind to it takes tens of milliseconds: latest (the\n"
	  "                         label rewound to most recently; the default), off, or\n"
	  "                         a LABEL. It costs the host the checkpoint's memory\n"
	  "  -p, --publish [IP:]HOSTPORT:GUESTPORT  forward connections to the host's\n"
	  "                         IP:HOSTPORT (default IP 127.0.0.1; HOSTPORT 0: any free\n"
	  "                         port, shown) to GUESTPORT in the VM; repeat for more.\n"
	  "                         Only loopback unless the daemon allows public ports\n"
	  "  --json                 progress as JSON lines, then the sandbox as one line\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox create interp --cpus 2 --memory 2048 --egress deny \\\n"
	  "      --mount ~/interp/in:/in:ro --mount ~/interp/out:/out\n" },
	{ "sandbox pull", cmd_pull, "make an image available inside a sandbox",
	  "Usage: kosa8 sandbox pull NAME IMAGE [--json]\n"
	  "\n"
	  "Fetch IMAGE on the host (the sandbox needs no network for it), prepare its\n"
	  "read-only disk and attach it to the sandbox NAME. IMAGE is a reference such as\n"
	  "python:3.12-slim or registry.example:5000/team/tool@sha256:....\n"
	  "\n"
	  "Options:\n"
	  "  --json     progress as JSON lines, then {\"ref\",\"digest\",\"slot\"} as one line\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox pull interp python:3.12-slim\n" },
	{ "sandbox run", cmd_run, "run a command in a new container, output live",
	  "Usage: kosa8 sandbox run [-e KEY=VAL]... [-w DIR] [-u USER] [-i] [-d] NAME IMAGE "
	  "[CMD...]\n"
	  "\n"
	  "Run CMD (default: the image's own command) in a new container from IMAGE inside\n"
	  "the sandbox NAME. Output is streamed live to stdout and stderr; kosa8 exits with\n"
	  "the command's exit code (128+N when killed by signal N, 137 on out of memory),\n"
	  "or 125 when the command could not be started. Flags go before NAME and IMAGE:\n"
	  "everything after IMAGE is the command, verbatim.\n"
	  "\n"
	  "Standard input is passed on when it is not a terminal (a pipe or a file), or\n"
	  "with -i; otherwise the command sees an empty stdin. Ctrl-C sends SIGINT to the\n"
	  "command; a second Ctrl-C disconnects, and the daemon kills the command.\n"
	  "\n"
	  "Options:\n"
	  "  -e, --env KEY=VAL    set an environment variable (-e KEY: take this shell's value)\n"
	  "  -w, --workdir DIR    working directory inside the container (absolute)\n"
	  "  -u, --user USER      uid[:gid] to run as\n"
	  "  -i, --interactive    pass a terminal's input on too\n"
	  "  -d, --detach         start in the background, print the container id (as start)\n"
	  "\n"
	  "Examples:\n"
	  "  kosa8 sandbox run interp python:3.12-slim timeout 30 python3 /in/main.py\n"
	  "  echo 'print(6*7)' | kosa8 sandbox run interp python:3.12-slim python3 -\n" },
	{ "sandbox start", cmd_start, "start a container in the background, print its id",
	  "Usage: kosa8 sandbox start [-e KEY=VAL]... [-w DIR] [-u USER] NAME IMAGE [CMD...]\n"
	  "\n"
	  "Start CMD in a new container from IMAGE inside the sandbox NAME and leave it\n"
	  "running; print the container's id alone on stdout. Use it with sandbox exec to\n"
	  "keep files and processes between commands. Same flags as run.\n"
	  "\n"
	  "Example:\n"
	  "  id=$(kosa8 sandbox start interp python:3.12-slim sleep infinity)\n"
	  "  kosa8 sandbox exec interp \"$id\" python3 /in/cell.py\n" },
	{ "sandbox exec", cmd_exec, "run a command in a running container",
	  "Usage: kosa8 sandbox exec [-e KEY=VAL]... [-w DIR] [-u USER] [-i] NAME ID CMD...\n"
	  "\n"
	  "Run CMD inside the running container ID (from sandbox start or sandbox ps) of\n"
	  "the sandbox NAME, streamed like run, with the same exit codes and stdin rules.\n"
	  "Everything after ID is the command, verbatim. Disconnecting kills CMD, not the\n"
	  "container.\n"
	  "\n"
	  "Options:\n"
	  "  -e, --env KEY=VAL    set an environment variable\n"
	  "  -w, --workdir DIR    working directory (absolute)\n"
	  "  -u, --user USER      uid[:gid] to run as\n"
	  "  -i, --interactive    pass a terminal's input on too\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox exec interp 3f2a9c0d1e4b python3 -c 'import os; print(os.getcwd())'\n" },
	{ "sandbox cell", cli_cmd_cell, "run Python in a persistent interpreter, print its output",
	  "Usage: kosa8 sandbox cell NAME [--context ID] [--image REF] [-e KEY=VALUE]...\n"
	  "                          [--timeout S] [--json] CODE|-\n"
	  "\n"
	  "Run CODE (or stdin, for -) as one cell of a Python context in sandbox NAME:\n"
	  "variables, imports and functions persist from cell to cell of a context, and a\n"
	  "checkpoint holds them (a rewind brings them back, a fork goes on with them).\n"
	  "Output is printed as it is written, then the value of the last expression (its\n"
	  "repr), or the exception's traceback on stderr. Without --context the cell runs in\n"
	  "the sandbox's default context, in a container of the image (made on first use;\n"
	  "the image needs python3 only). Audited (sandbox.cell, sandbox.cell.end).\n"
	  "\n"
	  "Options:\n"
	  "  --context ID       a context of kosa8 sandbox context NAME\n"
	  "  --image REF        the default context's image, when the sandbox has several\n"
	  "  -e, --env K=V      an environment variable for this cell only (repeatable)\n"
	  "  --timeout S        interrupt the cell after S seconds (exit 124)\n"
	  "  --json             the cell's events as JSON lines (docs/interpreter.md)\n"
	  "\n"
	  "Exit: 0 the cell ran, 1 it raised an exception, 124 it timed out.\n"
	  "\n"
	  "Examples:\n"
	  "  kosa8 sandbox cell interp 'x = 6 * 7'\n"
	  "  kosa8 sandbox cell interp 'x'                  # 42\n"
	  "  echo 'import sys; sys.version' | kosa8 sandbox cell interp -\n" },
	{ "sandbox context", cli_cmd_context, "list, create, restart or remove interpreter contexts",
	  "Usage: kosa8 sandbox context NAME [--json]\n"
	  "       kosa8 sandbox context NAME --new [--image REF | --container ID] [--cwd DIR]\n"
	  "                                [-e KEY=VALUE]... [--json]\n"
	  "       kosa8 sandbox context NAME --restart ID | --rm ID...\n"
	  "\n"
	  "A context is a Python interpreter that lives in a container of sandbox NAME and\n"
	  "keeps its variables between cells (kosa8 sandbox cell, repl). Without options:\n"
	  "list them (every running container's, or --container ID's). --new starts one, in\n"
	  "container ID or in the sandbox's interpreter container for the image, and prints\n"
	  "its id; --restart starts it again empty (same id, folder and environment); --rm\n"
	  "ends it. Audited (sandbox.context.create, .restart, .rm).\n"
	  "\n"
	  "Options:\n"
	  "  --new              start a context\n"
	  "  --image REF        in the interpreter container of this image (default: the\n"
	  "                     sandbox's only image)\n"
	  "  --container ID     in this running container (kosa8 sandbox ps)\n"
	  "  --cwd DIR          its working folder (default /)\n"
	  "  -e, --env K=V      its environment (repeatable)\n"
	  "  --restart ID       start context ID again, its variables gone\n"
	  "  --rm ID            end context ID (repeatable)\n"
	  "  --json             answers as JSON\n"
	  "\n"
	  "Examples:\n"
	  "  ID=$(kosa8 sandbox context interp --new --cwd /out)\n"
	  "  kosa8 sandbox cell interp --context $ID 'import os; os.getcwd()'\n"
	  "  kosa8 sandbox context interp --rm $ID\n" },
	{ "sandbox repl", cli_cmd_repl, "a Python prompt in a sandbox, variables kept",
	  "Usage: kosa8 sandbox repl NAME [--context ID] [--image REF]\n"
	  "\n"
	  "Type Python at a prompt; each statement (a block ends with an empty line) runs as\n"
	  "a cell of the sandbox's default context (or --context ID), as kosa8 sandbox cell\n"
	  "does. Ctrl-C interrupts a running cell (KeyboardInterrupt; the variables stay),\n"
	  "Ctrl-D ends the prompt; the context lives on.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox repl interp\n" },
	{ "sandbox ps", cmd_ps, "list a sandbox's containers",
	  "Usage: kosa8 sandbox ps NAME [--json]\n"
	  "\n"
	  "List the containers in the sandbox NAME: id, image, main process, whether it\n"
	  "runs (or its exit code), when it started and its command.\n"
	  "\n"
	  "Options:\n"
	  "  --json     the daemon's list as JSON\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox ps interp\n" },
	{ "sandbox cp", cli_cmd_cp, "copy files between this machine and a container",
	  "Usage: kosa8 sandbox cp SANDBOX:CONTAINER:/PATH DEST\n"
	  "       kosa8 sandbox cp SRC SANDBOX:CONTAINER:/PATH\n"
	  "\n"
	  "Copy a file or a folder (with everything in it) out of a container or into it,\n"
	  "as docker cp does. The container may be running or stopped (not removed).\n"
	  "Out: into DEST when it is a folder, else as DEST; PATH/. copies the folder's\n"
	  "contents. In: into PATH when it is a folder in the container, else as PATH (its\n"
	  "folder must exist). Modes, times and symlinks are kept (symlinks are copied as\n"
	  "links, never followed); owners are kept going in, not coming out. DEST - writes\n"
	  "a tar to stdout; SRC - reads a tar from stdin and extracts it into PATH. What\n"
	  "comes out of a container is checked: nothing is written outside DEST.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox cp interp:3f2a9c1b7d4e:/out/report.csv .\n"
	  "  kosa8 sandbox cp ./data interp:3f2a9c1b7d4e:/work\n"
	  "  tar -C src -cf - . | kosa8 sandbox cp - interp:3f2a9c1b7d4e:/work\n" },
	{ "sandbox stop", cmd_stop, "stop containers",
	  "Usage: kosa8 sandbox stop [-t SECONDS] NAME ID...\n"
	  "\n"
	  "Stop containers in the sandbox NAME: SIGTERM to each, then SIGKILL after the\n"
	  "timeout. Prints each id stopped.\n"
	  "\n"
	  "Options:\n"
	  "  -t, --timeout S    seconds to wait before SIGKILL, 0-3600 (default 10)\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox stop interp 3f2a9c0d1e4b\n" },
	{ "sandbox ls", cmd_ls, "list sandboxes",
	  "Usage: kosa8 sandbox ls [--json]\n"
	  "\n"
	  "List all sandboxes with their state, size, accelerator, age and images.\n"
	  "\n"
	  "Options:\n"
	  "  --json     the daemon's list as JSON\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox ls\n" },
	{ "sandbox inspect", cmd_inspect, "everything about one sandbox, as JSON",
	  "Usage: kosa8 sandbox inspect NAME\n"
	  "\n"
	  "Print everything the daemon knows about the sandbox NAME as indented JSON: its\n"
	  "settings, state, images, containers, limits and the guest's own statistics.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox inspect interp\n" },
	{ "sandbox broker", cmd_broker, "show a sandbox's broker rules and counts per host",
	  "Usage: kosa8 sandbox broker NAME [--json]\n"
	  "\n"
	  "Show the egress broker of sandbox NAME: its rules (never a secret's value), and\n"
	  "per host the requests, bytes and refusals by reason since the broker started.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox broker agent\n" },
	{ "sandbox egress", cmd_egress, "show or change a sandbox's network policy",
	  "Usage: kosa8 sandbox egress NAME [--allow RULE]... [--remove RULE]...\n"
	  "                              [--mode deny|allow-list|allow-all] [--json]\n"
	  "\n"
	  "Without options: show the sandbox's egress policy, whether its network is up,\n"
	  "and per destination how many flows passed and how many attempts were refused\n"
	  "(DNS refusals appear as dns:NAME). With options: change the policy of the\n"
	  "running sandbox at once, no restart; flows the new policy refuses are cut.\n"
	  "Every change is in the audit log (sandbox.egress.change), every refusal too\n"
	  "(sandbox.egress.deny).\n"
	  "\n"
	  "Options:\n"
	  "  --allow RULE     allow RULE too (a name, *.domain, NAME:PORT, IP, CIDR[:PORT]);\n"
	  "                   on a deny sandbox this switches to allow-list\n"
	  "  --remove RULE    drop a rule\n"
	  "  --mode MODE      deny (nothing), allow-list (only the rules), allow-all\n"
	  "  --json           the policy and counts as JSON\n"
	  "\n"
	  "Examples:\n"
	  "  kosa8 sandbox egress b\n"
	  "  kosa8 sandbox egress b --allow example.org --allow '*.pythonhosted.org:443'\n"
	  "  kosa8 sandbox egress b --mode deny\n" },
	{ "sandbox port", cli_cmd_port, "list, publish or close a sandbox's published ports",
	  "Usage: kosa8 sandbox port NAME [-p [IP:]HOSTPORT:GUESTPORT]... [--rm [IP:]HOSTPORT]...\n"
	  "                          [--json]\n"
	  "\n"
	  "Without options: list the ports of sandbox NAME that the host forwards into its VM,\n"
	  "with their connections and bytes. -p publishes one more on the running sandbox at\n"
	  "once (HOSTPORT 0: any free port, printed); --rm closes one and cuts its\n"
	  "connections. Nothing else from the host reaches the VM. Audited\n"
	  "(sandbox.port.publish, sandbox.port.unpublish).\n"
	  "\n"
	  "Options:\n"
	  "  -p, --publish SPEC   [IP:]HOSTPORT:GUESTPORT; IP 127.0.0.1 unless given (::1 in\n"
	  "                       brackets: [::1]:8080:80); other than loopback only when\n"
	  "                       the daemon runs with --allow-public-ports\n"
	  "  --rm [IP:]HOSTPORT   close a published port\n"
	  "  --json               the answer as JSON\n"
	  "\n"
	  "Examples:\n"
	  "  kosa8 sandbox port web -p 127.0.0.1:0:8000\n"
	  "  kosa8 sandbox port web --rm 8080\n" },
	{ "sandbox rm", cmd_rm, "delete sandboxes",
	  "Usage: kosa8 sandbox rm [--wipe] [-f] NAME...\n"
	  "\n"
	  "Stop each sandbox's VM and delete all its state: disks, checkpoints, containers.\n"
	  "Shared host folders (--mount) are not touched.\n"
	  "\n"
	  "Options:\n"
	  "  --wipe       overwrite the disk files before unlinking them\n"
	  "  -f, --force  succeed when a sandbox does not exist\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox rm interp\n" },
	{ "sandbox pause", cli_cmd_pause, "save a sandbox's machine to disk and free its memory",
	  "Usage: kosa8 sandbox pause NAME [--in-memory | --to STORE] [--json]\n"
	  "\n"
	  "Stop sandbox NAME where it is: memory, processes and devices are saved to its\n"
	  "directory and its VM ends, so it holds no host memory while paused. It is listed\n"
	  "as paused and survives a daemon restart and a host reboot. resume brings it\n"
	  "back; so does any use (run, exec, pull, checkpoint, ps), by itself.\n"
	  "\n"
	  "Options:\n"
	  "  --in-memory  only stop its vCPUs: faster both ways, but its memory stays\n"
	  "               taken; run and exec are refused until resume, and a daemon\n"
	  "               restart lets it run on\n"
	  "  --to STORE   paused to disk, then pushed to snapshot store STORE: any host\n"
	  "               with the store resumes it (kosa8 sandbox resume NAME there).\n"
	  "               The store's copy is the one that counts: here it no longer\n"
	  "               resumes by use, and `sandbox resume` takes it back from the store\n"
	  "               first (refused once another host took it)\n"
	  "  --json       {\"to\":\"disk\"|\"memory\",\"ms\"} as one line (with --to: progress\n"
	  "               lines, then what was pushed)\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox pause interp\n" },
	{ "sandbox resume", cli_cmd_resume, "bring a paused sandbox back",
	  "Usage: kosa8 sandbox resume NAME [--from STORE] [--json]\n"
	  "\n"
	  "Let a paused sandbox go on where it stopped (restored from disk, or its vCPUs\n"
	  "started again); its clock is set to now. A sandbox paused to a store (sandbox\n"
	  "pause --to) is taken from it first: on the host that paused it, it resumes from\n"
	  "its own copy once the store's is still the one it pushed; on another host it is\n"
	  "pulled (every chunk checked) and becomes that host's sandbox. No sandbox NAME\n"
	  "here: the stores are asked, or STORE.\n"
	  "\n"
	  "Options:\n"
	  "  --from STORE  the store that holds it (when several could)\n"
	  "  --json        the result as one line (progress lines first when it pulls)\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox resume interp\n" },
	{ "sandbox fork", cli_cmd_fork, "a new sandbox from a checkpoint of another",
	  "Usage: kosa8 sandbox fork SRC --from LABEL --name NEW [--json]\n"
	  "       kosa8 sandbox fork --from STORE:SANDBOX/LABEL --name NEW [--json]\n"
	  "\n"
	  "Create sandbox NEW from checkpoint LABEL of sandbox SRC: the same memory, running\n"
	  "processes, containers and disk as SRC had at that instant. The disk layers are\n"
	  "shared copy-on-write (hard links), so a fork costs only what it writes, and SRC\n"
	  "can be removed without harm to it. NEW has its own hostname (its name), its\n"
	  "clock is set to now and its random number generator reseeded from the host.\n"
	  "SRC keeps running untouched.\n"
	  "\n"
	  "Options:\n"
	  "  --from LABEL   the checkpoint of SRC (kosa8 checkpoint ls SRC)\n"
	  "  --from STORE:SANDBOX/LABEL\n"
	  "                 a checkpoint in a snapshot store (kosa8 store ls STORE), pushed\n"
	  "                 from any host: pulled, every chunk checked before anything boots\n"
	  "  --name NEW     the new sandbox's name\n"
	  "  --json         the new sandbox as one line, with \"forked_from\" and \"ms\"\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 sandbox fork interp --from clean --name interp-2\n"
	  "  kosa8 sandbox fork --from mine:interp/clean --name interp-3\n" },
	{ NULL, NULL, NULL, NULL },
};
