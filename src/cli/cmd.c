/* SPDX-License-Identifier: Apache-2.0 */
/* cmd.c - the steps the commands share: start (parse, help, client), end, and the daemon
 * calls that report their own failures and hand back an exit code. */
#include "cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>

const struct cli_opt cli_json_only[] = { { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 } };

int cli_has_opt(const struct cli_args *a, int id)
{
	for (int i = 0; i < a->nopts; i++)
		if (a->opts[i].id == id)
			return 1;
	return 0;
}

const char *cli_opt_last(const struct cli_args *a, int id)
{
	const char *v = NULL;
	for (int i = 0; i < a->nopts; i++)
		if (a->opts[i].id == id)
			v = a->opts[i].arg;
	return v;
}

int cli_begin(const struct cli_cmd *self, int argc, char **argv, const struct cli_opt *opts,
	      int stop_after, int min_pos, int max_pos, const char *home, struct cli_args *a,
	      struct client *cl, int *rc)
{
	struct k8_err err = { 0 };
	const char *nl;

	if (cli_args_parse(argc, argv, opts, stop_after, a, &err) < 0) {
		*rc = cli_usage(self->name, "%s", err.msg);
		return 0;
	}
	if (a->help) {
		cli_args_free(a);
		*rc = cli_help(self);
		return 0;
	}
	if (a->npos < min_pos || (max_pos >= 0 && a->npos > max_pos)) {
		nl = strchr(self->help, '\n');
		fprintf(stderr, "kosa8: %s: %s\n%.*s\n", self->name,
			a->npos < min_pos ? "missing arguments" : "too many arguments",
			nl ? (int)(nl - self->help) : (int)strlen(self->help), self->help);
		cli_args_free(a);
		*rc = CLI_EXIT_USAGE;
		return 0;
	}
	if (cl && client_init(cl, cli_home(a, home), &err) < 0) {
		cli_args_free(a);
		*rc = cli_fail(&err);
		return 0;
	}
	return 1;
}

int cli_end(struct cli_args *a, struct client *cl, int rc)
{
	cli_args_free(a);
	client_free(cl);
	return rc;
}

int cli_get(struct client *cl, const char *path, long timeout_ms, json_t **res)
{
	struct k8_err err = { 0 };

	if (client_call(cl, "GET", path, NULL, NULL, NULL, timeout_ms, res, &err) < 0)
		return cli_fail(&err);
	return CLI_EXIT_OK;
}

int cli_get_show(struct client *cl, const char *path, long timeout_ms, int json,
		 cli_show_fn show, void *ctx)
{
	json_t *res = NULL;
	int rc = cli_get(cl, path, timeout_ms, &res);

	if (rc == CLI_EXIT_OK && json)
		out_json(res, 1);
	else if (rc == CLI_EXIT_OK)
		rc = show(res, ctx);
	json_decref(res);
	return rc;
}

int cli_view(const struct cli_cmd *self, int argc, char **argv, const char *home,
	     const char *path, long timeout_ms, cli_show_fn show)
{
	struct cli_args a;
	struct client cl;
	int rc;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 0, 0, home, &a, &cl, &rc))
		return rc;
	rc = cli_get_show(&cl, path, timeout_ms, cli_has_opt(&a, CLI_OPT_JSON), show, &cl);
	return cli_end(&a, &cl, rc);
}

int cli_post_progress(struct client *cl, const char *path, const json_t *body, int json,
		      json_t **res)
{
	struct k8_err err = { 0 };
	struct out_progress prog;
	int r;

	out_progress_init(&prog, json);
	r = client_call(cl, "POST", path, body, out_progress_cb, &prog, 0, res, &err);
	out_progress_end(&prog);
	if (r < 0)
		return cli_fail(&err);
	if (json)
		out_json(*res, 0);
	return CLI_EXIT_OK;
}

int cli_each(struct client *cl, const char *const *items, int n, cli_item_fn fn, void *ctx)
{
	int rc = CLI_EXIT_OK;

	for (int i = 0; i < n; i++) {
		struct k8_err err = { 0 };
		int r = fn(cl, items[i], ctx, &err);

		if (r < 0) {
			rc = cli_fail(&err);
			if (r == -ECONNREFUSED)
				break;
		}
	}
	return rc;
}

ssize_t cli_read_line(const char *prompt, bool hidden, char *buf, size_t cap)
{
	struct termios old, quiet;
	int tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
	size_t len = 0;
	bool over = false;

	if (tty) {
		fprintf(stderr, "%s: ", prompt);
		if (hidden) {
			quiet = old;
			quiet.c_lflag &= ~(tcflag_t)ECHO;
			tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
		}
	}
	for (;;) {
		char c;
		ssize_t r = read(STDIN_FILENO, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || c == '\n')
			break;
		if (len + 1 < cap)
			buf[len++] = c;
		else
			over = true;
	}
	if (tty && hidden) {
		tcsetattr(STDIN_FILENO, TCSANOW, &old);
		fputc('\n', stderr);
	}
	if (len && buf[len - 1] == '\r')
		len--;
	buf[len] = '\0';
	return over ? -E2BIG : (ssize_t)len;
}
