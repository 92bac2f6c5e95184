/* SPDX-License-Identifier: Apache-2.0 */
/* interp.c - the interpreter's verbs: kosa8 sandbox context (list, new, restart, rm),
 * sandbox cell (one cell, for scripts) and sandbox repl (cells typed by a person);
 * docs/reference/cli.md, docs/interpreter.md. */
#include "cli/cli.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	OPT_NEW = 'n', OPT_IMAGE = 'i', OPT_CONTAINER = 'c', OPT_CWD = 'w', OPT_ENV = 'e',
	OPT_RM = 'r', OPT_RESTART = 'R', OPT_CONTEXT = 'x', OPT_TIMEOUT = 't',
};

/* An env object {"K":"V"} from the -e K=V options; NULL when there are none. Usage
 * errors are reported (the return then NULL and *rc set). */
static json_t *env_opts(const struct cli_cmd *self, const struct cli_args *a, int *rc)
{
	json_t *env = NULL;

	*rc = CLI_EXIT_OK;
	for (int i = 0; i < a->nopts; i++) {
		struct k8_err err = { 0 };
		const char *kv = a->opts[i].arg, *eq;
		if (a->opts[i].id != OPT_ENV)
			continue;
		eq = strchr(kv, '=');
		if (!eq || cli_check_env(kv, &err) < 0) {
			*rc = cli_usage(self->name, "-e %s: expected KEY=VALUE%s%s", kv,
					err.msg[0] ? ": " : "", err.msg);
			json_decref(env);
			return NULL;
		}
		if (!env)
			env = json_object();
		cleanup_free char *k = xasprintf("%.*s", (int)(eq - kv), kv);
		json_object_set_new(env, k, json_string(eq + 1));
	}
	return env;
}

/* ---- kosa8 sandbox context ---- */

static void ctx_row(struct out_table *t, const json_t *c, double now)
{
	char ago[32], pid[24];
	const char *cells[6];

	snprintf(pid, sizeof(pid), "%lld", json_integer_value(json_object_get(c, "pid")));
	cells[0] = json_string_value(json_object_get(c, "id"));
	cells[1] = json_string_value(json_object_get(c, "container"));
	cells[2] = pid;
	cells[3] = json_is_true(json_object_get(c, "alive")) ? "running" : "exited";
	cells[4] = out_ago(out_time_parse(json_object_get(c, "created")), now, ago, sizeof(ago));
	cells[5] = json_string_value(json_object_get(c, "cwd"));
	out_table_row(t, cells);
}

static int show_contexts(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "CONTEXT", "CONTAINER", "PID", "STATE", "CREATED",
					   "CWD" };
	if (!json_array_size(res)) {
		printf("sandbox %s has no interpreter contexts\n", (const char *)ctx);
		return CLI_EXIT_OK;
	}
	out_table_array(res, 6, hdr, ctx_row);
	return CLI_EXIT_OK;
}

int cli_cmd_context(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "new", 0, 0, OPT_NEW }, { "image", 0, 1, OPT_IMAGE },
		{ "container", 0, 1, OPT_CONTAINER }, { "cwd", 0, 1, OPT_CWD },
		{ "env", 'e', 1, OPT_ENV }, { "rm", 0, 1, OPT_RM }, { "restart", 0, 1, OPT_RESTART },
		{ "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	cleanup_free char *enc = NULL, *path = NULL;
	json_t *env;
	int rc, json;
	bool acted = false;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	json = cli_has_opt(&a, CLI_OPT_JSON);
	enc = cli_urlenc(a.pos[0]);
	path = xasprintf("/v1/sandboxes/%s/contexts", enc);
	env = env_opts(self, &a, &rc);
	if (rc)
		goto out;
	if (cli_has_opt(&a, OPT_NEW)) {
		json_t *body = json_object(), *res = NULL;
		acted = true;
		if (cli_opt_last(&a, OPT_IMAGE))
			json_object_set_new(body, "image", json_string(cli_opt_last(&a, OPT_IMAGE)));
		if (cli_opt_last(&a, OPT_CONTAINER))
			json_object_set_new(body, "container", json_string(cli_opt_last(&a, OPT_CONTAINER)));
		if (cli_opt_last(&a, OPT_CWD))
			json_object_set_new(body, "cwd", json_string(cli_opt_last(&a, OPT_CWD)));
		if (env)
			json_object_set(body, "env", env);
		if (client_call(&cl, "POST", path, body, NULL, NULL, 0, &res, &err) < 0)
			rc = cli_fail(&err);
		else if (json)
			out_json(res, 0);
		else
			printf("%s\n", json_string_value(json_object_get(res, "id")) ?: "");
		json_decref(body);
		json_decref(res);
	}
	for (int i = 0; i < a.nopts && rc == CLI_EXIT_OK; i++) {
		int id = a.opts[i].id;
		json_t *res = NULL;
		if (id != OPT_RM && id != OPT_RESTART)
			continue;
		acted = true;
		cleanup_free char *ienc = cli_urlenc(a.opts[i].arg);
		cleanup_free char *p = xasprintf("%s/%s%s", path, ienc, id == OPT_RM ? "" : "/restart");
		if (client_call(&cl, id == OPT_RM ? "DELETE" : "POST", p, NULL, NULL, NULL, 0, &res,
				&err) < 0)
			rc = cli_fail(&err);
		else if (json && id == OPT_RESTART)
			out_json(res, 0);
		else if (!json)
			printf("%s %s\n", id == OPT_RM ? "removed" : "restarted", a.opts[i].arg);
		json_decref(res);
	}
	if (!acted) {
		cleanup_free char *cenc = cli_opt_last(&a, OPT_CONTAINER) ?
					  cli_urlenc(cli_opt_last(&a, OPT_CONTAINER)) : NULL;
		cleanup_free char *p = xasprintf("%s%s%s", path, cenc ? "?container=" : "",
						 cenc ? cenc : "");
		rc = cli_get_show(&cl, p, 0, json, show_contexts, (void *)a.pos[0]);
	}
out:
	json_decref(env);
	return cli_end(&a, &cl, rc);
}

/* ---- one cell: its events on this terminal ---- */

struct cell_out {
	volatile sig_atomic_t *cancel;
	bool json;
	bool ok, ended, timed_out;
	bool nl_out, nl_err;            /* the last text written to stdout/stderr ended a line */
};

static void put(FILE *f, const char *s, bool *nl)
{
	size_t n = strlen(s);
	fwrite(s, 1, n, f);
	fflush(f);
	if (n)
		*nl = s[n - 1] == '\n';
}

static int cell_tick(void *ctx)
{
	struct cell_out *o = ctx;
	return o->cancel && *o->cancel;
}

static int cell_event(void *ctx, json_t *ev)
{
	struct cell_out *o = ctx;
	const char *type = json_string_value(json_object_get(ev, "type"));

	if (o->json) {
		out_json(ev, 0);
		fflush(stdout);
	}
	if (!type)
		return 0;
	if (!strcmp(type, "end")) {
		o->ended = true;
		o->ok = json_is_true(json_object_get(ev, "ok"));
		return 0;
	}
	if (!strcmp(type, "error") &&
	    !strcmp(json_string_value(json_object_get(ev, "name")) ?: "", "TimeoutError") &&
	    json_object_get(ev, "source"))
		o->timed_out = true;
	if (o->json)
		return 0;
	if (!strcmp(type, "stdout")) {
		put(stdout, json_string_value(json_object_get(ev, "text")) ?: "", &o->nl_out);
	} else if (!strcmp(type, "stderr")) {
		put(stderr, json_string_value(json_object_get(ev, "text")) ?: "", &o->nl_err);
	} else if (!strcmp(type, "result")) {
		json_t *data = json_object_get(ev, "data");
		const char *text = json_string_value(json_object_get(data, "text/plain"));
		const char *k;
		json_t *v;
		if (!o->nl_out)
			put(stdout, "\n", &o->nl_out);
		if (text) {
			put(stdout, text, &o->nl_out);
			put(stdout, "\n", &o->nl_out);
		}
		json_object_foreach(data, k, v)
			if (strcmp(k, "text/plain"))
				printf("[%s: %zu bytes; --json shows it]\n", k, json_string_length(v));
	} else if (!strcmp(type, "error")) {
		const char *tb = json_string_value(json_object_get(ev, "traceback"));
		if (!o->nl_err)
			put(stderr, "\n", &o->nl_err);
		if (tb && *tb) {
			put(stderr, tb, &o->nl_err);
		} else {
			fprintf(stderr, "%s: %s\n", json_string_value(json_object_get(ev, "name")) ?: "",
				json_string_value(json_object_get(ev, "value")) ?: "");
			o->nl_err = true;
		}
	}
	return 0;
}

/* Run code as a cell of context ctx ("default" unless given) and show its events; the
 * exit code: 0 the cell ran, 1 it raised, 124 it timed out, else the failure's. */
static int cell_run(struct client *cl, const char *sbname, const struct cli_args *a,
		    const json_t *env, const char *code, bool json, volatile sig_atomic_t *cancel)
{
	struct cell_out o = { .cancel = cancel, .json = json, .nl_out = true, .nl_err = true };
	struct k8_err err = { 0 };
	const char *ctx = cli_opt_last(a, OPT_CONTEXT), *image = cli_opt_last(a, OPT_IMAGE);
	const char *timeout = cli_opt_last(a, OPT_TIMEOUT);
	cleanup_free char *enc = cli_urlenc(sbname);
	cleanup_free char *cenc = cli_urlenc(ctx ? ctx : "default");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/contexts/%s/run", enc, cenc);
	json_t *body = json_pack("{s:s}", "code", code);
	long t = 0;
	int r;

	if (timeout && cli_parse_range("--timeout", timeout, 0, 86400, &t, &err) < 0) {
		json_decref(body);
		return cli_usage("sandbox cell", "%s", err.msg);
	}
	if (t)
		json_object_set_new(body, "timeout_s", json_integer(t));
	if (image)
		json_object_set_new(body, "image", json_string(image));
	if (env)
		json_object_set(body, "env", (json_t *)env);
	r = client_stream(cl, "POST", path, body, cell_event, cell_tick, &o, &err);
	json_decref(body);
	if (!o.nl_out)
		put(stdout, "\n", &o.nl_out);
	if (r == -ECANCELED) {
		fprintf(stderr, "KeyboardInterrupt\n");
		return CLI_EXIT_ERROR;
	}
	if (r < 0)
		return cli_fail(&err);
	if (!o.ended)
		return cli_die(CLI_EXIT_ERROR, "the cell's stream ended without its end");
	return o.ok ? CLI_EXIT_OK : o.timed_out ? 124 : CLI_EXIT_ERROR;
}

static char *read_all(FILE *f)
{
	size_t len = 0, cap = 4096;
	char *b = xmalloc(cap);
	size_t n;

	while ((n = fread(b + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (len + 1 == cap)
			b = realloc(b, cap *= 2);
		if (!b)
			abort();
	}
	b[len] = '\0';
	return b;
}

static const struct cli_opt cell_opts[] = {
	{ "context", 0, 1, OPT_CONTEXT }, { "image", 0, 1, OPT_IMAGE },
	{ "env", 'e', 1, OPT_ENV }, { "timeout", 0, 1, OPT_TIMEOUT },
	{ "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
};

int cli_cmd_cell(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	cleanup_free char *code = NULL;
	json_t *env;
	int rc;

	if (!cli_begin(self, argc, argv, cell_opts, 2, 2, 2, home, &a, &cl, &rc))
		return rc;
	env = env_opts(self, &a, &rc);
	if (rc == CLI_EXIT_OK) {
		code = strcmp(a.pos[1], "-") ? xstrdup(a.pos[1]) : read_all(stdin);
		if (strlen(code) > (1u << 20) - 4096)
			rc = cli_usage(self->name, "the cell is larger than 1 MiB");
		else
			rc = cell_run(&cl, a.pos[0], &a, env, code, cli_has_opt(&a, CLI_OPT_JSON), NULL);
	}
	json_decref(env);
	return cli_end(&a, &cl, rc);
}

/* ---- kosa8 sandbox repl: cells typed at a prompt ---- */

static volatile sig_atomic_t repl_int;

static void on_sigint(int sig)
{
	(void)sig;
	repl_int = 1;
}

/* Does the code typed so far need more lines? An open bracket or string, a line ending in
 * ':' or '\', or a block being typed (ended by an empty line), as Python's prompt does. */
static bool repl_more(const char *code, bool last_empty)
{
	int depth = 0;
	char q = 0;
	bool triple = false, block;
	const char *p;

	for (p = code; *p; p++) {
		if (q) {
			if (*p == '\\' && p[1]) {
				p++;
			} else if (triple && !strncmp(p, (char[]){ q, q, q, 0 }, 3)) {
				q = 0;
				p += 2;
			} else if (!triple && (*p == q || *p == '\n')) {
				q = 0;
			}
			continue;
		}
		if (*p == '#') {
			while (p[1] && p[1] != '\n')
				p++;
		} else if (*p == '\'' || *p == '"') {
			q = *p;
			triple = p[1] == q && p[2] == q;
			if (triple)
				p += 2;
		} else if (strchr("([{", *p)) {
			depth++;
		} else if (strchr(")]}", *p)) {
			depth--;
		}
	}
	if (q && triple)
		return true;
	if (depth > 0)
		return true;
	/* the first line opened a block: more until an empty line */
	size_t n = strcspn(code, "\n");
	while (n && (code[n - 1] == ' ' || code[n - 1] == '\t' || code[n - 1] == '\r'))
		n--;
	block = (n && code[n - 1] == ':') || strchr(code, '\n') != strrchr(code, '\n');
	if (block)
		return !last_empty;
	n = strlen(code);
	while (n && (code[n - 1] == '\n' || code[n - 1] == ' '))
		n--;
	return n && code[n - 1] == '\\';
}

int cli_cmd_repl(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "context", 0, 1, OPT_CONTEXT }, { "image", 0, 1, OPT_IMAGE },
		{ NULL, 0, 0, 0 },
	};
	struct sigaction sa = { .sa_handler = on_sigint }, old;
	struct cli_args a;
	struct client cl;
	char *line = NULL, *code = NULL;
	size_t cap = 0, len = 0;
	bool tty = isatty(0);
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old);   /* no SA_RESTART: a read ends with EINTR */
	if (tty)
		fprintf(stderr, "kosa8 repl: Python in sandbox %s, context %s (variables persist; "
			"Ctrl-C interrupts a cell, Ctrl-D ends)\n", a.pos[0],
			cli_opt_last(&a, OPT_CONTEXT) ?: "default");
	for (;;) {
		ssize_t n;
		if (tty) {
			fputs(len ? "... " : ">>> ", stdout);
			fflush(stdout);
		}
		repl_int = 0;
		errno = 0;
		n = getline(&line, &cap, stdin);
		if (n < 0 && repl_int) {
			clearerr(stdin);
			fputs("\nKeyboardInterrupt\n", stdout);
			len = 0;
			continue;
		}
		if (n < 0)
			break;
		bool empty = line[strspn(line, " \t\r\n")] == '\0';
		if (!len && empty)
			continue;
		code = realloc(code, len + (size_t)n + 1);
		if (!code)
			abort();
		memcpy(code + len, line, (size_t)n + 1);
		len += (size_t)n;
		if (repl_more(code, empty) && len < (1u << 20) - 4096)
			continue;
		repl_int = 0;
		rc = cell_run(&cl, a.pos[0], &a, NULL, code, false, &repl_int);
		len = 0;
		if (rc != CLI_EXIT_OK && rc != CLI_EXIT_ERROR && rc != 124)
			break;          /* the daemon or the sandbox failed: said already */
		rc = CLI_EXIT_OK;
	}
	if (tty)
		fputc('\n', stdout);
	sigaction(SIGINT, &old, NULL);
	free(line);
	free(code);
	return cli_end(&a, &cl, rc);
}
