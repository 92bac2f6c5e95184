/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint.c - kosa8 checkpoint NAME --label L | checkpoint ls | checkpoint rm,
 * kosa8 rewind NAME --to L -y, and sandbox pause | resume | fork. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

enum { OPT_LABEL = 1, OPT_TO, OPT_YES, OPT_FROM, OPT_NAME, OPT_IN_MEMORY };

/* "pushed: 12.3 MB of data in 4.1 s (3.0 MB/s); 12 of 80 chunks sent (2.1 MB)" */
static void print_transfer(const char *what, const json_t *r)
{
	bool push = !strcmp(what, "pushed");
	char a[32], b[32];
	long long ms = (long long)json_integer_value(json_object_get(r, "ms"));
	long long chunks = (long long)json_integer_value(json_object_get(r, "chunks"));
	long long sent_chunks = (long long)json_integer_value(json_object_get(r, "chunks_sent"));

	out_bytes((uint64_t)json_integer_value(json_object_get(r, "data")), a, sizeof(a));
	out_bytes((uint64_t)json_integer_value(json_object_get(r, "sent")), b, sizeof(b));
	printf("%s: %s of data in %lld.%01lld s (%.1f MB/s); %lld of %lld chunks %s (%s)\n", what,
	       a, ms / 1000, (ms % 1000) / 100, json_real_value(json_object_get(r, "mb_per_s")),
	       sent_chunks, chunks, push ? "sent" : "fetched", b);
}

static char *sb_sub(const char *name, const char *sub)
{
	cleanup_free char *n = cli_urlenc(name);
	return xasprintf("/v1/sandboxes/%s%s", n, sub);
}

/* POST and print: JSON with --json, else `fmt` filled by the caller's printer. */
static int post(struct client *cl, const char *path, json_t *body, json_t **res)
{
	struct k8_err err = { 0 };

	if (client_call(cl, "POST", path, body, NULL, NULL, 0, res, &err) < 0)
		return cli_fail(&err);
	return CLI_EXIT_OK;
}

static int cmd_create(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "label", 'l', 1, OPT_LABEL },
					       { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 } };
	struct cli_args a;
	struct client cl;
	json_t *body, *res = NULL;
	cleanup_free char *path = NULL;
	const char *label;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	label = cli_opt_last(&a, OPT_LABEL);
	if (!label || !*label)
		return cli_end(&a, &cl, cli_die(CLI_EXIT_USAGE, "--label L is required; e.g. "
						"kosa8 checkpoint %s --label clean", a.pos[0]));
	body = json_pack("{s:s}", "label", label);
	path = sb_sub(a.pos[0], "/checkpoints");
	rc = post(&cl, path, body, &res);
	if (rc == CLI_EXIT_OK) {
		if (cli_has_opt(&a, CLI_OPT_JSON)) {
			out_json(res, 0);
		} else {
			char sz[32];
			out_bytes((uint64_t)json_integer_value(json_object_get(res, "size")), sz, sizeof(sz));
			printf("checkpoint %s of %s: %s of memory and device state, %lld ms\n", label,
			       a.pos[0], sz, (long long)json_integer_value(json_object_get(res, "ms")));
			if (json_string_value(json_object_get(res, "removed")))
				printf("removed the oldest checkpoint, %s (%d are kept)\n",
				       json_string_value(json_object_get(res, "removed")), 10);
		}
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

static void ckpt_row(struct out_table *t, const json_t *it, double now)
{
	char sz[32], ago[32];
	const char *cells[3];

	out_bytes((uint64_t)json_integer_value(json_object_get(it, "size")), sz, sizeof(sz));
	out_ago(out_time_parse(json_object_get(it, "created")), now, ago, sizeof(ago));
	cells[0] = json_string_value(json_object_get(it, "label"));
	cells[1] = ago;
	cells[2] = sz;
	out_table_row(t, cells);
}

static int show_ckpts(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "LABEL", "CREATED", "SIZE" };
	(void)ctx;
	out_table_array(res, 3, hdr, ckpt_row);
	return CLI_EXIT_OK;
}

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	cleanup_free char *path = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	path = sb_sub(a.pos[0], "/checkpoints");
	rc = cli_get_show(&cl, path, 30000, cli_has_opt(&a, CLI_OPT_JSON), show_ckpts, NULL);
	return cli_end(&a, &cl, rc);
}

static int cmd_rm(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	cleanup_free char *path = NULL, *lab = NULL;
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, NULL, 0, 2, 2, home, &a, &cl, &rc))
		return rc;
	lab = cli_urlenc(a.pos[1]);
	{
		cleanup_free char *sub = xasprintf("/checkpoints/%s", lab);
		path = sb_sub(a.pos[0], sub);
	}
	if (client_call(&cl, "DELETE", path, NULL, NULL, NULL, 30000, &res, &err) < 0)
		rc = cli_fail(&err);
	else {
		printf("removed checkpoint %s of %s\n", a.pos[1], a.pos[0]);
		rc = CLI_EXIT_OK;
	}
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

static int cmd_push(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "to", 't', 1, OPT_TO },
					       { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 } };
	struct cli_args a;
	struct client cl;
	json_t *body, *res = NULL;
	cleanup_free char *path = NULL, *lab = NULL, *sub = NULL;
	const char *to;
	int rc, json;

	if (!cli_begin(self, argc, argv, opts, 0, 2, 2, home, &a, &cl, &rc))
		return rc;
	json = cli_has_opt(&a, CLI_OPT_JSON);
	to = cli_opt_last(&a, OPT_TO);
	if (!to || !*to)
		return cli_end(&a, &cl, cli_usage(self->name, "--to STORE is required (kosa8 store "
						  "ls lists them)"));
	lab = cli_urlenc(a.pos[1]);
	sub = xasprintf("/checkpoints/%s/push", lab);
	path = sb_sub(a.pos[0], sub);
	body = json_pack("{s:s}", "to", to);
	rc = cli_post_progress(&cl, path, body, json, &res);
	if (rc == CLI_EXIT_OK && !json) {
		printf("checkpoint %s of %s pushed to store %s\n", a.pos[1], a.pos[0], to);
		print_transfer("pushed", res);
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

const struct cli_cmd cli_checkpoint_cmds[] = {
	{ "checkpoint create", cmd_create, "save the whole machine: memory, processes, disk",
	  "Usage: kosa8 checkpoint NAME --label LABEL [--json]\n"
	  "\n"
	  "Save sandbox NAME as it is this instant: memory, running processes, device state\n"
	  "and disk. The vCPUs stop for the moment it takes (a few hundred ms), then go on.\n"
	  "Labels are unique per sandbox; ten checkpoints are kept, and the eleventh removes\n"
	  "the oldest (and says so).\n"
	  "\n"
	  "Options:\n"
	  "  -l, --label LABEL   its name: letters, digits, '-', '_', '.'\n"
	  "  --json              {\"label\",\"created\",\"size\",\"ms\"} as one line\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 checkpoint interp --label clean\n" },
	{ "checkpoint ls", cmd_ls, "list a sandbox's checkpoints",
	  "Usage: kosa8 checkpoint ls NAME [--json]\n"
	  "\n"
	  "The checkpoints of sandbox NAME, oldest first: label, age and size.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 checkpoint ls interp\n" },
	{ "checkpoint push", cmd_push, "copy a checkpoint to a snapshot store",
	  "Usage: kosa8 checkpoint push NAME LABEL --to STORE [--json]\n"
	  "\n"
	  "Copy checkpoint LABEL of sandbox NAME (memory, devices, disk layers, the images it\n"
	  "uses) to snapshot store STORE (kosa8 store add), where any host with that store\n"
	  "can fork it: kosa8 sandbox fork --from STORE:NAME/LABEL --name NEW. Files are cut\n"
	  "in chunks and only the chunks the store lacks are sent, compressed (and encrypted\n"
	  "when the store is), so a second push of a sandbox that changed little sends\n"
	  "little. A push cut short is taken up by the next one. The sandbox runs on\n"
	  "meanwhile. config.json \"push_checkpoints\": \"STORE\" pushes every checkpoint.\n"
	  "\n"
	  "Options:\n"
	  "  -t, --to STORE  the store\n"
	  "  --json          progress lines, then {\"store\",\"manifest\",\"bytes\",\"data\",\n"
	  "                  \"chunks\",\"chunks_sent\",\"sent\",\"ms\",\"mb_per_s\",...}\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 checkpoint push interp clean --to mine\n" },
	{ "checkpoint rm", cmd_rm, "remove a checkpoint",
	  "Usage: kosa8 checkpoint rm NAME LABEL\n"
	  "\n"
	  "Remove checkpoint LABEL of sandbox NAME and the disk layers only it needed.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 checkpoint rm interp clean\n" },
	{ NULL, NULL, NULL, NULL },
};

static int cmd_rewind(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "to", 't', 1, OPT_TO }, { "yes", 'y', 0, OPT_YES },
					       { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 } };
	struct cli_args a;
	struct client cl;
	json_t *body, *res = NULL;
	cleanup_free char *path = NULL;
	const char *to;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	to = cli_opt_last(&a, OPT_TO);
	if (!to || !*to)
		return cli_end(&a, &cl, cli_die(CLI_EXIT_USAGE, "--to LABEL is required; list the "
						"labels with kosa8 checkpoint ls %s", a.pos[0]));
	if (!cli_has_opt(&a, OPT_YES)) {
		char line[16];
		if (!isatty(0) || !isatty(2))
			return cli_end(&a, &cl, cli_die(CLI_EXIT_USAGE,
				"rewinding %s to %s discards everything since; pass -y (--yes) to "
				"confirm when not on a terminal", a.pos[0], to));
		fprintf(stderr, "Rewind %s to checkpoint %s? Everything since is lost. [y/N] ",
			a.pos[0], to);
		if (!fgets(line, sizeof(line), stdin) || (line[0] != 'y' && line[0] != 'Y'))
			return cli_end(&a, &cl, cli_die(CLI_EXIT_ERROR, "not rewound"));
	}
	body = json_pack("{s:s}", "to", to);
	path = sb_sub(a.pos[0], "/rewind");
	rc = post(&cl, path, body, &res);
	if (rc == CLI_EXIT_OK) {
		if (cli_has_opt(&a, CLI_OPT_JSON))
			out_json(res, 0);
		else
			printf("%s rewound to %s in %lld ms%s\n", a.pos[0], to,
			       (long long)json_integer_value(json_object_get(res, "ms")),
			       json_is_true(json_object_get(res, "spare")) ? " (spare)" : "");
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

const struct cli_cmd cli_rewind_cmd = {
	"rewind", cmd_rewind, "put a sandbox back to a checkpoint",
	"Usage: kosa8 rewind NAME --to LABEL [-y] [--json]\n"
	"\n"
	"Put the whole machine of sandbox NAME back to checkpoint LABEL: memory, running\n"
	"processes and disk. The guest's clock is set to now and its random number\n"
	"generator reseeded from the host. Asks for confirmation on a terminal; -y skips\n"
	"the question, and is required when not on a terminal.\n"
	"\n"
	"Options:\n"
	"  -t, --to LABEL   the checkpoint\n"
	"  -y, --yes        do not ask\n"
	"  --json           {\"label\",\"ms\",\"spare\"} as one line (spare: true when a\n"
	"                   spare restored ahead of time was swapped in)\n"
	"\n"
	"Example:\n"
	"  kosa8 rewind interp --to clean -y\n",
};

static int pause_resume(const struct cli_cmd *self, int argc, char **argv, const char *home,
			const char *what)
{
	static const struct cli_opt pause_opts[] = { { "in-memory", 0, 0, OPT_IN_MEMORY },
						     { "to", 0, 1, OPT_TO },
						     { "json", 0, 0, CLI_OPT_JSON },
						     { NULL, 0, 0, 0 } };
	static const struct cli_opt resume_opts[] = { { "from", 0, 1, OPT_FROM },
						      { "json", 0, 0, CLI_OPT_JSON },
						      { NULL, 0, 0, 0 } };
	bool pause = what[1] == 'p';
	struct cli_args a;
	struct client cl;
	cleanup_free char *path = NULL;
	json_t *body = json_object(), *res = NULL;
	const char *store;
	int rc, json;

	if (!cli_begin(self, argc, argv, pause ? pause_opts : resume_opts, 0, 1, 1, home, &a,
		       &cl, &rc)) {
		json_decref(body);
		return rc;
	}
	json = cli_has_opt(&a, CLI_OPT_JSON);
	path = sb_sub(a.pos[0], what);
	store = cli_opt_last(&a, pause ? OPT_TO : OPT_FROM);
	if (pause && cli_has_opt(&a, OPT_IN_MEMORY)) {
		if (store) {
			json_decref(body);
			return cli_end(&a, &cl, cli_usage(self->name, "--in-memory and --to STORE "
							  "contradict each other"));
		}
		json_object_set_new(body, "in_memory", json_true());
	}
	if (store)
		json_object_set_new(body, pause ? "to" : "from", json_string(store));
	/* to or from a store this is a transfer with progress; a resume may pull too */
	rc = cli_post_progress(&cl, path, body, json, &res);
	if (rc == CLI_EXIT_OK && !json) {
		const char *where = json_string_value(json_object_get(res, pause ? "to" : "from"));
		const json_t *pulled = json_object_get(res, "pulled");
		if (pause && store) {
			printf("%s paused and pushed to store %s\n", a.pos[0], store);
			print_transfer("pushed", res);
		} else {
			printf("%s %s%s%s in %lld ms\n", a.pos[0], pause ? "paused" : "resumed",
			       where ? (pause ? " to " : " from ") : "", where ? where : "",
			       (long long)json_integer_value(json_object_get(res, "ms")));
			if (pulled)
				print_transfer("pulled", pulled);
		}
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

int cli_cmd_pause(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return pause_resume(self, argc, argv, home, "/pause");
}

int cli_cmd_resume(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return pause_resume(self, argc, argv, home, "/resume");
}

int cli_cmd_fork(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "from", 0, 1, OPT_FROM }, { "name", 0, 1, OPT_NAME },
					       { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 } };
	struct cli_args a;
	struct client cl;
	json_t *body, *res = NULL;
	cleanup_free char *path = NULL, *store = NULL;
	const char *from, *name, *colon;
	int rc, json;

	if (!cli_begin(self, argc, argv, opts, 0, 0, 1, home, &a, &cl, &rc))
		return rc;
	json = cli_has_opt(&a, CLI_OPT_JSON);
	from = cli_opt_last(&a, OPT_FROM);
	name = cli_opt_last(&a, OPT_NAME);
	if (!name || !*name)
		return cli_end(&a, &cl, cli_die(CLI_EXIT_USAGE, "--name NEW is required: the new "
						"sandbox's name"));
	/* --from STORE:SANDBOX/LABEL: a checkpoint in a snapshot store */
	colon = from ? strchr(from, ':') : NULL;
	if (colon && !a.npos) {
		const char *slash = strchr(colon + 1, '/');
		if (!slash || slash == colon + 1 || !slash[1] || colon == from)
			return cli_end(&a, &cl, cli_usage(self->name, "--from STORE:SANDBOX/LABEL "
							  "names a checkpoint in a store"));
		store = xasprintf("%.*s", (int)(colon - from), from);
		cleanup_free char *enc = cli_urlenc(store);
		cleanup_free char *sbx = xasprintf("%.*s", (int)(slash - colon - 1), colon + 1);
		body = json_pack("{s:s,s:s,s:s}", "sandbox", sbx, "label", slash + 1, "name", name);
		path = xasprintf("/v1/stores/%s/fork", enc);
		rc = cli_post_progress(&cl, path, body, json, &res);
		if (rc == CLI_EXIT_OK && !json) {
			printf("%s forked from %s in %lld ms\n", name, from,
			       (long long)json_integer_value(json_object_get(res, "ms")));
			print_transfer("pulled", json_object_get(res, "pulled"));
		}
		json_decref(body);
		json_decref(res);
		return cli_end(&a, &cl, rc);
	}
	if (a.npos != 1)
		return cli_end(&a, &cl, cli_usage(self->name, "give SRC --from LABEL, or --from "
						  "STORE:SANDBOX/LABEL"));
	if (!from || !*from)
		return cli_end(&a, &cl, cli_die(CLI_EXIT_USAGE, "--from LABEL is required; list the "
						"labels with kosa8 checkpoint ls %s", a.pos[0]));
	body = json_pack("{s:s,s:s}", "from", from, "name", name);
	path = sb_sub(a.pos[0], "/fork");
	rc = post(&cl, path, body, &res);
	if (rc == CLI_EXIT_OK) {
		if (json)
			out_json(res, 0);
		else
			printf("%s forked from %s at checkpoint %s in %lld ms\n", name, a.pos[0], from,
			       (long long)json_integer_value(json_object_get(res, "ms")));
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}
