/* SPDX-License-Identifier: Apache-2.0 */
/* spec.c - a container's spec from a create request, an exec's from its body, and the
 * agent requests that run them (spec.h). Moved out of the daemon (it was static code in
 * docker_ctr.c no test could reach): every word of a create body is an API client's. */
#include "docker/spec.h"
#include "docker/names.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Linux's capability names by number (capability.h), as CapDrop spells them. */
static const char *const dspec_cap_names[] = {
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
	"SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
	"NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO",
	"SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
	"SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
	"AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
	"BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
};

int dspec_cap_drop(const json_t *v, json_t **out, struct k8_err *err)
{
	json_t *e, *nums;
	uint64_t mask = 0;
	size_t i, j;

	if (v && !json_is_null(v) && (!json_is_array(v) || json_array_size(v) > 64))
		return k8_err_set(err, -EINVAL, "HostConfig.CapDrop must be a list of capabilities");
	json_array_foreach((json_t *)v, i, e) {
		const char *n = json_string_value(e);
		bool known = n && !strcasecmp(n, "ALL");

		if (known) {
			mask = ~0ull >> (64 - ARRAY_SIZE(dspec_cap_names));
			continue;
		}
		if (n && !strncasecmp(n, "CAP_", 4))
			n += 4;
		for (j = 0; n && j < ARRAY_SIZE(dspec_cap_names); j++) {
			if (!strcasecmp(n, dspec_cap_names[j])) {
				mask |= 1ull << j;
				known = true;
			}
		}
		if (!known)
			return k8_err_set(err, -EINVAL, "unknown capability: \"%.60s\"",
					  json_string_value(e) ?: "(not a string)");
	}
	if (!out)
		return 0;
	nums = json_array();
	for (j = 0; j < 64; j++)
		if (mask & (1ull << j))
			json_array_append_new(nums, json_integer((json_int_t)j));
	*out = nums;
	return 0;
}

/* HostConfig fields that would lift the isolation, or that kosa8 would not honour: a 400
 * naming the field. */
static int dspec_refuse_host(const json_t *hc, struct k8_err *err)
{
	static const char *const host_modes[] = { "PidMode", "IpcMode", "UsernsMode", "UTSMode",
						  "CgroupnsMode" };
	const char *nm = json_string_value(json_object_get(hc, "NetworkMode"));
	json_t *v;
	size_t i;

	if (json_is_true(json_object_get(hc, "Privileged")))
		return k8_err_set(err, -EINVAL, "HostConfig.Privileged is not supported by kosa8: "
				  "it would lift the container's isolation");
	if (json_array_size(json_object_get(hc, "CapAdd")))
		return k8_err_set(err, -EINVAL, "HostConfig.CapAdd is not supported by kosa8: "
				  "containers keep Docker's default capability set");
	if (json_array_size(json_object_get(hc, "Devices")) ||
	    json_array_size(json_object_get(hc, "DeviceRequests")))
		return k8_err_set(err, -EINVAL, "HostConfig.Devices is not supported by kosa8");
	if (json_array_size(json_object_get(hc, "DeviceCgroupRules")))
		return k8_err_set(err, -EINVAL, "HostConfig.DeviceCgroupRules is not supported by "
				  "kosa8: containers open no devices");
	/* Asked-for changes kosa8 would not make: refused rather than silently ignored
	 * (docs/docker.md). Unmasking /proc would lift the isolation; ReadonlyRootfs would
	 * leave the container weaker than asked. */
	if (json_is_array(json_object_get(hc, "MaskedPaths")))
		return k8_err_set(err, -EINVAL, "HostConfig.MaskedPaths is not supported by kosa8: "
				  "/proc is masked as in Docker's default");
	if (json_is_array(json_object_get(hc, "ReadonlyPaths")))
		return k8_err_set(err, -EINVAL, "HostConfig.ReadonlyPaths is not supported by kosa8:"
				  " /proc is read-only as in Docker's default");
	if (dspec_cap_drop(json_object_get(hc, "CapDrop"), NULL, err))
		return err->code;
	if (json_is_true(json_object_get(hc, "ReadonlyRootfs")))
		return k8_err_set(err, -EINVAL, "HostConfig.ReadonlyRootfs is not supported by kosa8 "
				  "yet: the root file system is writable");
	for (i = 0; i < ARRAY_SIZE(host_modes); i++) {
		const char *m = json_string_value(json_object_get(hc, host_modes[i]));
		if (m && !strcmp(m, "host"))
			return k8_err_set(err, -EINVAL, "HostConfig.%s \"host\" is not supported by "
					  "kosa8: it would share the host's namespace", host_modes[i]);
	}
	if (nm && *nm && strcmp(nm, "default") && strcmp(nm, "bridge") && strcmp(nm, "none"))
		return k8_err_set(err, -EINVAL, "HostConfig.NetworkMode \"%.60s\" is not supported "
				  "by kosa8 (default, bridge or none)", nm);
	json_array_foreach(json_object_get(hc, "SecurityOpt"), i, v) {
		const char *s = json_string_value(v);
		if (s && strstr(s, "unconfined"))
			return k8_err_set(err, -EINVAL, "HostConfig.SecurityOpt \"%.60s\" is not "
					  "supported by kosa8: seccomp and the capability set stay", s);
	}
	/* the container's own cgroup limits (the agent's run): Docker's bounds and words */
	v = json_object_get(hc, "Memory");
	if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0 ||
				      json_integer_value(v) > (1ll << 50)))
		return k8_err_set(err, -EINVAL, "HostConfig.Memory must be a number of bytes");
	if (json_integer_value(v) > 0 && json_integer_value(v) < 6ll << 20)
		return k8_err_set(err, -EINVAL, "Minimum memory limit allowed is 6MB");
	v = json_object_get(hc, "NanoCpus");
	if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0 ||
				      json_integer_value(v) > 1000000000000ll))
		return k8_err_set(err, -EINVAL, "HostConfig.NanoCpus must be a number of 10^-9 CPUs");
	if (json_integer_value(v) > 0 && json_integer_value(v) < 10000000)
		return k8_err_set(err, -EINVAL, "Range of CPUs is from 0.01 upwards");
	return 0;
}

static size_t dspec_json_len(const json_t *v)
{
	char *t = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	size_t n = t ? strlen(t) : 0;

	free(t);
	return n;
}

static int dspec_argv_env_fits(const json_t *cmd, const json_t *ep, const json_t *env,
			       struct k8_err *err)
{
	size_t n = dspec_json_len(cmd) + dspec_json_len(ep) + dspec_json_len(env);

	if (n > DSPEC_ARGV_ENV_MAX)
		return k8_err_set(err, -EINVAL, "Cmd, Entrypoint and Env together are %zu bytes: "
				  "kosa8 takes at most %u KiB", n, DSPEC_ARGV_ENV_MAX >> 10);
	return 0;
}

/* An array of strings (or null/absent: NULL) from a client's field; a string is a list of
 * one (docker-py sends a string Cmd through shlex; others do not). -EINVAL otherwise. */
static int dspec_strings(const json_t *v, const char *what, json_t **out, struct k8_err *err)
{
	size_t i;
	json_t *s;

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		*out = json_pack("[O]", v);
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) > 4096)
		return k8_err_set(err, -EINVAL, "%s must be a list of strings", what);
	json_array_foreach((json_t *)v, i, s)
		if (!json_is_string(s) || memchr(json_string_value(s), 0, json_string_length(s)))
			return k8_err_set(err, -EINVAL, "%s must be a list of strings", what);
	*out = json_incref((json_t *)v);
	return 0;
}

/* WorkingDir absolute (or empty) and User at most 255 bytes, where given. */
static int dspec_wd_user(const json_t *body, struct k8_err *err)
{
	const json_t *wv = json_object_get(body, "WorkingDir"), *uv = json_object_get(body, "User");
	const char *wd = json_string_value(wv), *user = json_string_value(uv);

	if ((wv && !json_is_null(wv) && !wd) || (uv && !json_is_null(uv) && !user) ||
	    (wd && (strlen(wd) > 4095 || (*wd && *wd != '/'))) || (user && strlen(user) > 255))
		return k8_err_set(err, -EINVAL, "WorkingDir must be an absolute path and User "
				  "at most 255 bytes");
	return 0;
}

int dspec_check(const json_t *body, const char **image, struct k8_err *err)
{
	const json_t *hc = json_object_get(body, "HostConfig");
	json_t *tmp = NULL;
	int r;

	*image = json_string_value(json_object_get(body, "Image"));
	if (!*image || !**image)
		return k8_err_set(err, -EINVAL, "Config.Image is required");
	if (hc && !json_is_object(hc) && !json_is_null(hc))
		return k8_err_set(err, -EINVAL, "HostConfig must be an object");
	if (json_is_object(hc)) {
		struct dn_port pt[32];
		if ((r = dspec_refuse_host(hc, err)))
			return r;
		/* malformed bindings fail here, not at start */
		if ((r = dn_port_bindings(json_object_get(hc, "PortBindings"), pt, ARRAY_SIZE(pt),
					  err)) < 0)
			return r;
		for (int i = 0; i < r; i++)
			if (pt[i].proto != DN_TCP)
				return k8_err_set(err, -EINVAL, "port %u/udp: kosa8 publishes TCP "
						  "ports only", pt[i].ctr_port);
	}
	if ((r = dspec_strings(json_object_get(body, "Cmd"), "Cmd", &tmp, err)))
		return r;
	json_decref(tmp);
	if ((r = dspec_strings(json_object_get(body, "Entrypoint"), "Entrypoint", &tmp, err)))
		return r;
	json_decref(tmp);
	if ((r = dspec_strings(json_object_get(body, "Env"), "Env", &tmp, err)))
		return r;
	json_decref(tmp);
	return dspec_wd_user(body, err);
}

json_t *dspec_merge_env(const json_t *base, const json_t *over)
{
	json_t *out = json_array(), *v, *w;
	size_t i, j;

	json_array_foreach((json_t *)base, i, v) {
		const char *s = json_string_value(v), *eq;
		bool overridden = false;

		if (!s || !(eq = strchr(s, '=')))
			continue;
		json_array_foreach((json_t *)over, j, w) {
			const char *t = json_string_value(w);
			if (t && (!strncmp(t, s, (size_t)(eq - s + 1)) ||
				  (!strncmp(t, s, (size_t)(eq - s)) && !t[eq - s])))
				overridden = true;
		}
		if (!overridden)
			json_array_append(out, v);
	}
	json_array_foreach((json_t *)over, i, v)
		if (json_string_value(v) && strchr(json_string_value(v), '='))
			json_array_append(out, v);
	return out;
}

int dspec_build(const json_t *body, const struct dspec_image *img, const char *hostname,
		json_t **config, json_t **host, struct k8_err *err)
{
	const json_t *hc = json_object_get(body, "HostConfig");
	const char *wd = json_string_value(json_object_get(body, "WorkingDir"));
	const char *user = json_string_value(json_object_get(body, "User"));
	json_t *cmd = NULL, *ep = NULL, *env = NULL, *cfg, *h;
	int r;

	*config = *host = NULL;
	if ((r = dspec_strings(json_object_get(body, "Cmd"), "Cmd", &cmd, err)) ||
	    (r = dspec_strings(json_object_get(body, "Entrypoint"), "Entrypoint", &ep, err)) ||
	    (r = dspec_strings(json_object_get(body, "Env"), "Env", &env, err)))
		goto out;
	/* Docker's merge: an Entrypoint given drops the image's Cmd too. */
	if (!ep) {
		ep = img->entrypoint ? json_incref((json_t *)img->entrypoint) : NULL;
		if (!json_array_size(cmd)) {
			json_decref(cmd);
			cmd = img->cmd ? json_incref((json_t *)img->cmd) : NULL;
		}
	} else if (json_array_size(ep) == 1 && !json_string_length(json_array_get(ep, 0))) {
		json_decref(ep);
		ep = NULL;
	}
	if (!json_array_size(cmd) && !json_array_size(ep)) {
		r = k8_err_set(err, -EINVAL, "no command specified");
		goto out;
	}
	cfg = json_deep_copy(body);
	json_object_del(cfg, "HostConfig");
	json_object_del(cfg, "NetworkingConfig");
	json_object_set_new(cfg, "Hostname", json_string(hostname));
	json_object_set_new(cfg, "Cmd", cmd ? json_incref(cmd) : json_null());
	json_object_set_new(cfg, "Entrypoint", ep ? json_incref(ep) : json_null());
	json_object_set_new(cfg, "Env", dspec_merge_env(img->env, env));
	json_object_set_new(cfg, "WorkingDir", json_string(wd && *wd ? wd : img->workdir ?: ""));
	json_object_set_new(cfg, "User", json_string(user && *user ? user : img->user ?: ""));
	if (!json_is_object(json_object_get(cfg, "Labels")))
		json_object_set_new(cfg, "Labels", json_object());
	if ((r = dspec_argv_env_fits(json_object_get(cfg, "Cmd"), json_object_get(cfg, "Entrypoint"),
				     json_object_get(cfg, "Env"), err))) {
		json_decref(cfg);
		goto out;
	}
	h = json_is_object(hc) ? json_deep_copy(hc) : json_object();
	if (!json_object_get(h, "NetworkMode"))
		json_object_set_new(h, "NetworkMode", json_string("default"));
	json_object_set_new(h, "LogConfig", json_pack("{s:s,s:{}}", "Type", "json-file", "Config"));
	if (json_is_true(json_object_get(body, "NetworkDisabled")))
		json_object_set_new(h, "NetworkMode", json_string("none"));
	*config = cfg;
	*host = h;
out:
	json_decref(cmd);
	json_decref(ep);
	json_decref(env);
	return r;
}

bool dspec_below(const char *p, const char *root)
{
	size_t n = strlen(root);

	if (n == 1)
		return true;
	return !strncmp(p, root, n) && (p[n] == '\0' || p[n] == '/');
}

/* A container path: absolute, no '.', '..' or empty components, not "/". */
static bool dspec_dst_ok(const char *p)
{
	const char *s;

	if (!p || p[0] != '/' || !p[1] || strlen(p) > 1000)
		return false;
	for (s = p; *s; ) {
		const char *e;
		size_t cl;
		s++;
		e = strchrnul(s, '/');
		cl = (size_t)(e - s);
		if ((cl == 0 && *e) || (cl == 1 && s[0] == '.') || (cl == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		s = e;
	}
	return true;
}

/* One bind into out[*n]: the host path must be absolute (no named volumes), the
 * container path a proper one. */
static int dspec_bind_one(const char *src, const char *dst, bool ro, struct dspec_bind *out,
			  size_t *n, struct k8_err *err)
{
	struct dspec_bind *b;
	size_t dl;

	if (!src || src[0] != '/')
		return k8_err_set(err, -EINVAL, "invalid mount source \"%.200s\": only bind mounts "
				  "of host paths are supported by kosa8 (no named volumes)",
				  src ? src : "");
	if (*n >= DSPEC_BINDS_MAX)
		return k8_err_set(err, -EINVAL, "at most %d bind mounts per container",
				  DSPEC_BINDS_MAX);
	b = &out[*n];
	snprintf(b->dst, sizeof(b->dst), "%s", dst ? dst : "");
	dl = strlen(b->dst);
	while (dl > 1 && b->dst[dl - 1] == '/')
		b->dst[--dl] = '\0';
	if (!dspec_dst_ok(b->dst) || (dst && strlen(dst) >= sizeof(b->dst)))
		return k8_err_set(err, -EINVAL, "invalid mount destination \"%.200s\": an absolute "
				  "path other than /", dst ? dst : "");
	if (strlen(src) >= sizeof(b->src))
		return k8_err_set(err, -EINVAL, "mount source longer than %zu bytes",
				  sizeof(b->src) - 1);
	snprintf(b->src, sizeof(b->src), "%s", src);
	b->ro = ro;
	(*n)++;
	return 0;
}

/* The options after HOST:CTR: ro, or ones that change nothing here. */
static int dspec_bind_opts(char *opts, bool *ro, struct k8_err *err)
{
	static const char *const noops[] = { "rw", "z", "Z", "rprivate", "private", "delegated",
					     "cached", "consistent" };
	char *save = NULL;

	for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		size_t i;

		if (!strcmp(o, "ro")) {
			*ro = true;
			continue;
		}
		for (i = 0; i < ARRAY_SIZE(noops) && strcmp(o, noops[i]); i++)
			;
		if (i == ARRAY_SIZE(noops))
			return k8_err_set(err, -EINVAL, "invalid mode: %.40s", o);
	}
	return 0;
}

int dspec_binds(const json_t *hc, struct dspec_bind *out, size_t *n, struct k8_err *err)
{
	json_t *v;
	size_t i;
	int r;

	*n = 0;
	json_array_foreach(json_object_get(hc, "Binds"), i, v) {
		char spec[2048], *dst, *opts;
		bool ro = false;

		if (!json_is_string(v) || json_string_length(v) >= sizeof(spec))
			return k8_err_set(err, -EINVAL, "HostConfig.Binds must be strings "
					  "HOST:CONTAINER[:ro]");
		snprintf(spec, sizeof(spec), "%s", json_string_value(v));
		dst = strchr(spec, ':');
		if (!dst)
			return k8_err_set(err, -EINVAL, "invalid volume specification: '%.200s' "
					  "(anonymous volumes are not supported by kosa8)", spec);
		*dst++ = '\0';
		opts = strchr(dst, ':');
		if (opts) {
			*opts++ = '\0';
			if ((r = dspec_bind_opts(opts, &ro, err)))
				return r;
		}
		if ((r = dspec_bind_one(spec, dst, ro, out, n, err)))
			return r;
	}
	json_array_foreach(json_object_get(hc, "Mounts"), i, v) {
		const char *type = json_string_value(json_object_get(v, "Type"));
		if (!type || strcmp(type, "bind"))
			return k8_err_set(err, -EINVAL, "HostConfig.Mounts of type \"%.20s\" are not "
					  "supported by kosa8 (bind only)", type ? type : "");
		if ((r = dspec_bind_one(json_string_value(json_object_get(v, "Source")),
					json_string_value(json_object_get(v, "Target")),
					json_is_true(json_object_get(v, "ReadOnly")), out, n, err)))
			return r;
	}
	return 0;
}

void dspec_console_size(const json_t *o, unsigned *rows, unsigned *cols)
{
	const json_t *h = json_array_get(o, 0), *w = json_array_get(o, 1);

	*rows = *cols = 0;
	if (json_array_size(o) != 2 || !json_is_integer(h) || !json_is_integer(w) ||
	    json_integer_value(h) < 0 || json_integer_value(h) > 65535 ||
	    json_integer_value(w) < 0 || json_integer_value(w) > 65535)
		return;
	*rows = (unsigned)json_integer_value(h);
	*cols = (unsigned)json_integer_value(w);
}

int dspec_signal(const char *s)
{
	static const struct { const char *name; int sig; } sigs[] = {
		{ "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "ILL", SIGILL },
		{ "TRAP", SIGTRAP }, { "ABRT", SIGABRT }, { "BUS", SIGBUS }, { "FPE", SIGFPE },
		{ "KILL", SIGKILL }, { "USR1", SIGUSR1 }, { "SEGV", SIGSEGV }, { "USR2", SIGUSR2 },
		{ "PIPE", SIGPIPE }, { "ALRM", SIGALRM }, { "TERM", SIGTERM }, { "CHLD", SIGCHLD },
		{ "CONT", SIGCONT }, { "STOP", SIGSTOP }, { "TSTP", SIGTSTP }, { "TTIN", SIGTTIN },
		{ "TTOU", SIGTTOU }, { "URG", SIGURG }, { "XCPU", SIGXCPU }, { "XFSZ", SIGXFSZ },
		{ "VTALRM", SIGVTALRM }, { "PROF", SIGPROF }, { "WINCH", SIGWINCH }, { "IO", SIGIO },
		{ "PWR", SIGPWR }, { "SYS", SIGSYS },
	};
	char *end;
	long n;

	if (!s || !*s)
		return SIGKILL;
	n = strtol(s, &end, 10);
	if (!*end)
		return n >= 1 && n <= 64 ? (int)n : 0;
	if (!strncasecmp(s, "SIG", 3))
		s += 3;
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		if (!strcasecmp(s, sigs[i].name))
			return sigs[i].sig;
	return 0;
}

int dspec_exec(const json_t *body, struct dspec_exec *x, struct k8_err *err)
{
	const char *wd = json_string_value(json_object_get(body, "WorkingDir"));
	const char *user = json_string_value(json_object_get(body, "User"));
	int r;

	memset(x, 0, sizeof(*x));
	if (json_is_true(json_object_get(body, "Privileged")))
		return k8_err_set(err, -EINVAL, "Privileged is not supported by kosa8");
	if ((r = dspec_strings(json_object_get(body, "Cmd"), "Cmd", &x->cmd, err)) ||
	    (r = dspec_strings(json_object_get(body, "Env"), "Env", &x->env, err)))
		goto fail;
	if (!json_array_size(x->cmd)) {
		r = k8_err_set(err, -EINVAL, "No exec command specified");
		goto fail;
	}
	if ((r = dspec_wd_user(body, err)))
		goto fail;
	snprintf(x->cwd, sizeof(x->cwd), "%s", wd ? wd : "");
	snprintf(x->user, sizeof(x->user), "%s", user ? user : "");
	x->tty = json_is_true(json_object_get(body, "Tty"));
	dspec_console_size(json_object_get(body, "ConsoleSize"), &x->rows, &x->cols);
	x->attach_stdin = json_is_true(json_object_get(body, "AttachStdin"));
	x->attach_stdout = json_is_true(json_object_get(body, "AttachStdout"));
	x->attach_stderr = json_is_true(json_object_get(body, "AttachStderr"));
	return 0;
fail:
	dspec_exec_clear(x);
	return r;
}

int dspec_exec_inherit(struct dspec_exec *x, const json_t *cfg, struct k8_err *err)
{
	json_t *env = dspec_merge_env(json_object_get(cfg, "Env"), x->env);

	json_decref(x->env);
	x->env = env;
	if (!x->cwd[0])
		snprintf(x->cwd, sizeof(x->cwd), "%s",
			 json_string_value(json_object_get(cfg, "WorkingDir")) ?: "");
	if (!x->user[0])
		snprintf(x->user, sizeof(x->user), "%s",
			 json_string_value(json_object_get(cfg, "User")) ?: "");
	return dspec_argv_env_fits(x->cmd, NULL, x->env, err);
}

void dspec_exec_clear(struct dspec_exec *x)
{
	json_decref(x->cmd);
	json_decref(x->env);
	memset(x, 0, sizeof(*x));
}

/* A Tty run or exec asks the agent for a pty: "stdin":"tty" and the first size. */
static void dspec_tty(json_t *req, unsigned rows, unsigned cols)
{
	json_object_set_new(req, "stdin", json_string("tty"));
	if (rows || cols)
		json_object_set_new(req, "tty_size", json_pack("[i,i]", (int)rows, (int)cols));
}

json_t *dspec_run_request(const json_t *config, const json_t *host, const struct dspec_run *r)
{
	const char *wd = json_string_value(json_object_get(config, "WorkingDir"));
	const char *user = json_string_value(json_object_get(config, "User"));
	json_int_t mem = json_integer_value(json_object_get(host, "Memory"));
	json_int_t ncpu = json_integer_value(json_object_get(host, "NanoCpus"));
	json_t *argv = json_array(), *req, *drop = NULL;
	struct k8_err e = { 0 };

	if (json_is_array(json_object_get(config, "Entrypoint")))
		json_array_extend(argv, json_object_get(config, "Entrypoint"));
	if (json_is_array(json_object_get(config, "Cmd")))
		json_array_extend(argv, json_object_get(config, "Cmd"));
	/* the broker's variables under Config.Env: inspect's Config.Env stays the client's */
	req = json_pack("{s:s,s:s,s:s,s:o,s:o,s:s,s:s,s:b,s:b,s:b,s:s}", "op", "run",
			"container", r->agent_id, "image", r->image, "argv", argv, "env",
			dspec_merge_env(r->broker_env, json_object_get(config, "Env")),
			"cwd", wd && *wd ? wd : "/", "user", user && *user ? user : "0",
			"stdin", json_is_true(json_object_get(config, "OpenStdin")),
			"rm", r->rm, "detach", false,
			"netns", !r->ip[0] ? "none" : r->own_sandbox ? "vm" : "own");
	/* an engine container: its own namespace and address (a VM of its own isolates one
	 * with --require-sandbox already; it keeps the VM's) */
	if (r->ip[0] && !r->own_sandbox)
		json_object_set_new(req, "ip", json_string(r->ip));
	/* always: a Docker container sees only its own binds, never the engine's roots */
	json_object_set_new(req, "binds", r->binds ? json_incref((json_t *)r->binds) : json_array());
	if (mem > 0)
		json_object_set_new(req, "memory_max", json_integer(mem));
	if (ncpu > 0)
		json_object_set_new(req, "nano_cpus", json_integer(ncpu));
	dspec_cap_drop(json_object_get(host, "CapDrop"), &drop, &e);      /* checked at create */
	if (json_array_size(drop))
		json_object_set(req, "cap_drop", drop);
	json_decref(drop);
	if (json_is_true(json_object_get(config, "Tty"))) {
		unsigned rows, cols;
		dspec_console_size(json_object_get(host, "ConsoleSize"), &rows, &cols);
		dspec_tty(req, rows, cols);
	}
	return req;
}

bool dspec_run_applied(const json_t *req, const json_t *resp)
{
	if ((json_object_get(req, "memory_max") || json_object_get(req, "nano_cpus")) &&
	    !json_is_object(json_object_get(resp, "limits")))
		return false;
	return !json_object_get(req, "cap_drop") || json_is_integer(json_object_get(resp, "cap_drop"));
}

json_t *dspec_exec_request(const struct dspec_exec *x, const char *agent_id,
			   const json_t *broker_env, bool detach, bool tty)
{
	json_t *req = json_pack("{s:s,s:s,s:O,s:o,s:s,s:s,s:b}", "op", "exec", "container",
				agent_id, "argv", x->cmd, "env",
				dspec_merge_env(broker_env, x->env), "cwd",
				x->cwd[0] ? x->cwd : "/", "user", x->user[0] ? x->user : "0",
				"stdin", x->attach_stdin && !detach);

	if (tty)
		dspec_tty(req, x->rows, x->cols);
	return req;
}
