/* SPDX-License-Identifier: Apache-2.0 */
/* args.c - the CLI's option parser and the checks it makes before asking the daemon.
 *
 * Nothing here does I/O or keeps state, so tests/unit/test_cli_args.c includes this file
 * directly. Every function returns 0 or a negative errno and says what is wrong in err.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/un.h>

static const struct cli_opt *opt_find_long(const struct cli_opt *opts, const char *name,
					   size_t len)
{
	for (; opts && opts->name; opts++)
		if (strlen(opts->name) == len && !strncmp(opts->name, name, len))
			return opts;
	return NULL;
}

static const struct cli_opt *opt_find_short(const struct cli_opt *opts, char c)
{
	for (; opts && opts->name; opts++)
		if (opts->short_name && opts->short_name == c)
			return opts;
	return NULL;
}

/* Options every command knows. */
static const struct cli_opt common_opts[] = {
	{ "help", 'h', 0, CLI_OPT_HELP },
	{ "home", 0, 1, CLI_OPT_HOME },
	{ NULL, 0, 0, 0 },
};

static void args_add(struct cli_args *out, const struct cli_opt *o, const char *arg)
{
	if (o->id == CLI_OPT_HELP) {
		out->help = 1;
		return;
	}
	if (o->id == CLI_OPT_HOME) {
		out->home = arg;
		return;
	}
	out->opts[out->nopts].id = o->id;
	out->opts[out->nopts].arg = arg;
	out->nopts++;
}

int cli_args_parse(int argc, char **argv, const struct cli_opt *opts, int stop_after,
		   struct cli_args *out, struct k8_err *err)
{
	int i, only_pos = 0;

	memset(out, 0, sizeof(*out));
	/* Each word yields at most as many options as it has characters. */
	size_t cap = 1;
	for (i = 0; i < argc; i++)
		cap += strlen(argv[i]) + 1;
	out->opts = xcalloc(cap, sizeof(*out->opts));
	out->pos = xcalloc((size_t)argc + 1, sizeof(*out->pos));

	for (i = 0; i < argc; i++) {
		const char *w = argv[i];

		if (only_pos || (stop_after && out->npos >= stop_after) || w[0] != '-' ||
		    !w[1]) {
			out->pos[out->npos++] = w;
			continue;
		}
		if (!strcmp(w, "--")) {
			only_pos = 1;
			continue;
		}
		if (w[1] == '-') {
			const char *name = w + 2, *eq = strchr(name, '=');
			size_t len = eq ? (size_t)(eq - name) : strlen(name);
			const struct cli_opt *o = opt_find_long(opts, name, len);

			if (!o)
				o = opt_find_long(common_opts, name, len);
			if (!o) {
				cli_args_free(out);
				return k8_err_set(err, -EINVAL, "unknown flag '--%.*s'", (int)len,
						  name);
			}
			if (!o->takes_arg) {
				if (eq) {
					cli_args_free(out);
					return k8_err_set(err, -EINVAL,
							  "flag '--%s' takes no value", o->name);
				}
				args_add(out, o, NULL);
				continue;
			}
			if (eq) {
				args_add(out, o, eq + 1);
				continue;
			}
			if (i + 1 >= argc) {
				cli_args_free(out);
				return k8_err_set(err, -EINVAL, "flag '--%s' needs a value",
						  o->name);
			}
			args_add(out, o, argv[++i]);
			continue;
		}
		/* One or more single-letter flags: "-id", "-e K=V", "-eK=V". */
		for (const char *c = w + 1; *c; c++) {
			const struct cli_opt *o = opt_find_short(opts, *c);

			if (!o)
				o = opt_find_short(common_opts, *c);
			if (!o) {
				cli_args_free(out);
				return k8_err_set(err, -EINVAL, "unknown flag '-%c'%s%s%s", *c,
						  c != w + 1 ? " in '" : "", c != w + 1 ? w : "",
						  c != w + 1 ? "'" : "");
			}
			if (!o->takes_arg) {
				args_add(out, o, NULL);
				continue;
			}
			if (c[1]) {
				args_add(out, o, c + 1);
			} else if (i + 1 < argc) {
				args_add(out, o, argv[++i]);
			} else {
				cli_args_free(out);
				return k8_err_set(err, -EINVAL, "flag '-%c' (--%s) needs a value",
						  *c, o->name);
			}
			break;
		}
	}
	return 0;
}

void cli_args_free(struct cli_args *a)
{
	free(a->opts);
	free(a->pos);
	a->opts = NULL;
	a->pos = NULL;
	a->nopts = a->npos = 0;
}

int cli_check_name(const char *name, struct k8_err *err)
{
	size_t n = strlen(name);

	if (n == 0)
		return k8_err_set(err, -EINVAL, "a sandbox name cannot be empty");
	if (n > 63)
		return k8_err_set(err, -EINVAL,
				  "sandbox name '%.70s%s' is too long (at most 63 characters)",
				  name, n > 70 ? "..." : "");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			 (i > 0 && (c == '_' || c == '.' || c == '-'));
		if (!ok)
			return k8_err_set(err, -EINVAL,
					  "invalid sandbox name '%s': use lower-case letters, digits "
					  "and '_', '.', '-' (not first), at most 63 characters",
					  name);
	}
	return 0;
}

int cli_parse_range(const char *flag, const char *s, long min, long max, long *out,
		    struct k8_err *err)
{
	long v = 0;
	const char *p = s;

	if (!*p)
		goto bad;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			goto bad;
		if (v > (LONG_MAX - 9) / 10)
			goto bad;
		v = v * 10 + (*p - '0');
	}
	if (v < min || v > max)
		goto bad;
	*out = v;
	return 0;
bad:
	return k8_err_set(err, -EINVAL, "%s must be a whole number from %ld to %ld (got '%s')",
			  flag, min, max, s);
}

static int path_has_dotdot(const char *p)
{
	const char *s = p;

	while ((s = strstr(s, ".."))) {
		int start = s == p || s[-1] == '/';
		int end = s[2] == '\0' || s[2] == '/';
		if (start && end)
			return 1;
		s += 2;
	}
	return 0;
}

int cli_parse_mount(const char *spec, struct cli_mount *m, struct k8_err *err)
{
	const char *c1 = strchr(spec, ':'), *c2;
	const char *mode = NULL;
	size_t glen;

	memset(m, 0, sizeof(*m));
	if (!c1 || c1 == spec)
		return k8_err_set(err, -EINVAL,
				  "--mount '%s': expected HOST:GUEST or HOST:GUEST:ro", spec);
	c2 = strchr(c1 + 1, ':');
	if (c2) {
		mode = c2 + 1;
		glen = (size_t)(c2 - (c1 + 1));
		if (strcmp(mode, "ro") && strcmp(mode, "rw"))
			return k8_err_set(err, -EINVAL,
					  "--mount '%s': the part after GUEST must be 'ro' or 'rw'",
					  spec);
	} else {
		glen = strlen(c1 + 1);
	}
	if (glen == 0 || c1[1] != '/')
		return k8_err_set(err, -EINVAL,
				  "--mount '%s': GUEST must be an absolute path inside the sandbox",
				  spec);
	m->guest = xasprintf("%.*s", (int)glen, c1 + 1);
	if (!strcmp(m->guest, "/") || path_has_dotdot(m->guest)) {
		cli_mount_free(m);
		return k8_err_set(err, -EINVAL,
				  "--mount '%s': GUEST cannot be '/' or contain '..'", spec);
	}
	m->host = xasprintf("%.*s", (int)(c1 - spec), spec);
	m->ro = mode && !strcmp(mode, "ro");
	return 0;
}

void cli_mount_free(struct cli_mount *m)
{
	free(m->host);
	free(m->guest);
	m->host = m->guest = NULL;
}

int cli_check_env(const char *kv, struct k8_err *err)
{
	const char *eq = strchr(kv, '=');
	size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);

	if (klen == 0)
		return k8_err_set(err, -EINVAL, "-e '%s': expected KEY=VALUE", kv);
	for (size_t i = 0; i < klen; i++) {
		unsigned char c = (unsigned char)kv[i];
		if (!(isalnum(c) || c == '_') || (i == 0 && isdigit(c)))
			return k8_err_set(err, -EINVAL,
					  "-e '%s': a variable name has letters, digits and '_' "
					  "and does not start with a digit", kv);
	}
	return 0;
}

char *cli_home_pick(const char *flag, const char *env_home, const char *user_home,
		    int (*is_dir)(const char *path), struct k8_err *err)
{
	if (flag && *flag)
		return xstrdup(flag);
	if (env_home && *env_home)
		return xstrdup(env_home);
	if (user_home && *user_home) {
		char *own = xasprintf("%s/.kosa8", strcmp(user_home, "/") ? user_home : "");
		/* An installed kosa8 (the system service) serves everyone whose own home
		 * has no kosa8 state: the guides' `kosa8 daemon start` after the install. */
		if (is_dir && !is_dir(own) && is_dir(KOSA8_SYSTEM_HOME)) {
			free(own);
			return xstrdup(KOSA8_SYSTEM_HOME);
		}
		return own;
	}
	if (is_dir && is_dir(KOSA8_SYSTEM_HOME))
		return xstrdup(KOSA8_SYSTEM_HOME);
	k8_err_set(err, -EINVAL, "cannot tell where kosa8 keeps its state: set KOSA8_HOME, "
		   "HOME or pass --home DIR");
	return NULL;
}

char *cli_sock_path(const char *home, struct k8_err *err)
{
	struct sockaddr_un sa;
	size_t hl = strlen(home);
	char *p;

	while (hl > 1 && home[hl - 1] == '/')
		hl--;
	p = xasprintf("%.*s/kosa8d.sock", (int)hl, home);
	if (strlen(p) >= sizeof(sa.sun_path)) {
		k8_err_set(err, -ENAMETOOLONG,
			   "the socket path %s is longer than %zu bytes, the limit of a unix "
			   "socket; choose a shorter --home or KOSA8_HOME",
			   p, sizeof(sa.sun_path) - 1);
		free(p);
		return NULL;
	}
	return p;
}

char *cli_urlenc(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = xmalloc(strlen(s) * 3 + 1), *o = out;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~') {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = '\0';
	return out;
}

int cli_api_errno(const char *code, long http_status)
{
	if (code) {
		if (!strcmp(code, "bad_request"))
			return -EINVAL;
		if (!strcmp(code, "not_found"))
			return -ENOENT;
		if (!strcmp(code, "conflict"))
			return -EBUSY;
		if (!strcmp(code, "unavailable"))
			return -EAGAIN;
		if (!strcmp(code, "internal"))
			return -EIO;
	}
	switch (http_status) {
	case 400: return -EINVAL;
	case 404: return -ENOENT;
	case 409: return -EBUSY;
	case 503: return -EAGAIN;
	default: return -EIO;
	}
}

int cli_exit_code(int neg_errno)
{
	switch (neg_errno) {
	case 0: return CLI_EXIT_OK;
	case -EINVAL: return CLI_EXIT_USAGE;
	case -ECONNREFUSED: return CLI_EXIT_NO_DAEMON;
	case -ENOENT: return CLI_EXIT_NOT_FOUND;
	case -EBUSY: return CLI_EXIT_CONFLICT;
	case -EAGAIN: return CLI_EXIT_UNAVAILABLE;
	default: return CLI_EXIT_ERROR;
	}
}
