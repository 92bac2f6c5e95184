/* SPDX-License-Identifier: Apache-2.0 */
/* secret.c - kosa8 secret set|ls|rm: the API keys the egress broker adds to a sandbox's
 * requests on the host (docs/broker.md). A value is read from stdin or from a variable
 * of this process's environment, never from the command line (where `ps` shows it), sent
 * once to the daemon, and wiped from our memory; nothing prints it back. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

enum { OPT_STDIN = 's', OPT_FROM_ENV = 'e' };

#define VALUE_MAX 4096

/* Read the value from stdin: at most VALUE_MAX bytes, one trailing newline dropped. On a
 * terminal: one line, typed without echo, after a prompt on stderr. */
static int read_stdin_value(const char *name, char *buf, size_t cap, size_t *n,
			    struct k8_err *err)
{
	size_t len = 0;
	int tty = isatty(STDIN_FILENO);

	if (tty) {
		char prompt[128];
		ssize_t l;
		snprintf(prompt, sizeof(prompt), "value of secret %s (not shown)", name);
		l = cli_read_line(prompt, true, buf, cap);
		if (l < 0)
			return k8_err_set(err, -EINVAL, "the secret is longer than %d bytes", VALUE_MAX);
		*n = (size_t)l;
		return 0;
	}
	for (;;) {
		ssize_t r = read(STDIN_FILENO, buf + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return k8_err_set(err, -errno, "reading the secret from stdin: %s", strerror(errno));
		if (r == 0)
			break;
		len += (size_t)r;
		if (len == cap)
			return k8_err_set(err, -EINVAL, "the secret on stdin is longer than %d bytes",
					  VALUE_MAX);
	}
	if (len && buf[len - 1] == '\n')
		len--;
	if (len && buf[len - 1] == '\r')
		len--;
	*n = len;
	return 0;
}

static int cmd_set(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "stdin", 0, 0, OPT_STDIN }, { "from-env", 0, 1, OPT_FROM_ENV },
		{ "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	char buf[VALUE_MAX + 2];
	const char *env = NULL, *value = NULL;
	size_t n = 0;
	int rc, from_stdin = 0;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	for (int i = 0; i < a.nopts; i++) {
		if (a.opts[i].id == OPT_STDIN)
			from_stdin = 1;
		else if (a.opts[i].id == OPT_FROM_ENV)
			env = a.opts[i].arg;
	}
	if (from_stdin == !!env)
		return cli_end(&a, &cl, cli_usage(self->name, "give exactly one of --stdin and "
						  "--from-env VAR (never the value itself)"));
	if (env) {
		value = getenv(env);
		if (!value || !*value)
			return cli_end(&a, &cl, cli_usage(self->name, "the environment variable %s "
							  "is not set or empty", env));
		n = strlen(value);
	} else {
		if (read_stdin_value(a.pos[0], buf, sizeof(buf) - 1, &n, &err) < 0)
			return cli_end(&a, &cl, cli_fail(&err));
		buf[n] = '\0';
		value = buf;
	}
	json_t *body = json_object(), *res = NULL;
	json_object_set_new(body, "value", json_stringn(value, n));
	cleanup_free char *enc = cli_urlenc(a.pos[0]);
	cleanup_free char *path = xasprintf("/v1/secrets/%s", enc);
	int r = client_call(&cl, "POST", path, body, NULL, NULL, 30000, &res, &err);
	/* wipe our copies: the JSON string and the stdin buffer */
	json_t *v = json_object_get(body, "value");
	OPENSSL_cleanse((char *)json_string_value(v), json_string_length(v));
	json_decref(body);
	OPENSSL_cleanse(buf, sizeof(buf));
	if (r < 0)
		return cli_end(&a, &cl, cli_fail(&err));
	if (cli_has_opt(&a, CLI_OPT_JSON))
		out_json(res, 0);
	else
		printf("%s secret %s\n", json_is_true(json_object_get(res, "replaced")) ?
		       "replaced" : "stored", a.pos[0]);
	json_decref(res);
	return cli_end(&a, &cl, CLI_EXIT_OK);
}

static void ls_row(struct out_table *t, const json_t *item, double now)
{
	char ago[32];
	const char *cells[2] = {
		json_string_value(json_object_get(item, "name")),
		out_ago(out_time_parse(json_object_get(item, "updated")), now, ago, sizeof(ago)),
	};
	out_table_row(t, cells);
}

static int ls_show(const json_t *res, void *ctx)
{
	static const char *const headers[] = { "NAME", "UPDATED" };
	const json_t *items = json_object_get(res, "secrets");
	if (!json_array_size(items)) {
		printf("no secrets; store one with `kosa8 secret set NAME --stdin`\n");
		return CLI_EXIT_OK;
	}
	out_table_array(items, 2, headers, ls_row);
	return CLI_EXIT_OK;
}

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cli_view(self, argc, argv, home, "/v1/secrets", 30000, ls_show);
}

static int rm_one(struct client *cl, const char *name, void *ctx, struct k8_err *err)
{
	cleanup_free char *enc = cli_urlenc(name);
	cleanup_free char *path = xasprintf("/v1/secrets/%s", enc);
	json_t *res = NULL;
	int r = client_call(cl, "DELETE", path, NULL, NULL, NULL, 30000, &res, err);

	if (r < 0)
		return r;
	if (*(const int *)ctx)
		out_json(res, 0);
	else if (json_integer_value(json_object_get(res, "brokers")) > 0)
		printf("removed secret %s (%lld running broker(s) refuse its rules now)\n", name,
		       (long long)json_integer_value(json_object_get(res, "brokers")));
	else
		printf("removed secret %s\n", name);
	json_decref(res);
	return 0;
}

static int cmd_rm(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	int rc, json;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 1, -1, home, &a, &cl, &rc))
		return rc;
	json = cli_has_opt(&a, CLI_OPT_JSON);
	return cli_end(&a, &cl, cli_each(&cl, a.pos, a.npos, rm_one, &json));
}

const struct cli_cmd cli_secret_cmds[] = {
	{ "secret set", cmd_set, "store an API key for the egress broker",
	  "Usage: kosa8 secret set NAME (--stdin | --from-env VAR) [--json]\n"
	  "\n"
	  "Store an API key under NAME on the host ($KOSA8_HOME/secrets/NAME, 0600) for the\n"
	  "egress broker (kosa8-broker, docs/broker.md): a client of the broker holds only a\n"
	  "placeholder, and the broker on the host puts the key in. Setting an existing NAME\n"
	  "replaces it (rotation). The value is never taken from the command line, never\n"
	  "shown and never audited (the audit log records the name).\n"
	  "\n"
	  "Options:\n"
	  "  --stdin          read the value from standard input (one trailing newline dropped;\n"
	  "                   on a terminal: prompted for, not echoed)\n"
	  "  --from-env VAR   take the value from this environment variable\n"
	  "  --json           the answer as JSON: {\"name\",\"replaced\"}\n"
	  "\n"
	  "Examples:\n"
	  "  kosa8 secret set openai --stdin < ~/.openai-key\n"
	  "  kosa8 secret set anthropic --from-env ANTHROPIC_API_KEY\n" },
	{ "secret ls", cmd_ls, "list the stored secrets (names and dates)",
	  "Usage: kosa8 secret ls [--json]\n"
	  "\n"
	  "List the secrets the daemon keeps: names and when each was last set, never values.\n"
	  "\n"
	  "Options:\n"
	  "  --json     {\"secrets\": [{\"name\",\"updated\"}]}\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 secret ls\n" },
	{ "secret rm", cmd_rm, "remove secrets",
	  "Usage: kosa8 secret rm NAME... [--json]\n"
	  "\n"
	  "Overwrite and remove each named secret. Brokers already running keep the value\n"
	  "they were given until they stop.\n"
	  "\n"
	  "Options:\n"
	  "  --json     one {} line per removed secret\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 secret rm openai\n" },
	{ NULL, NULL, NULL, NULL },
};
