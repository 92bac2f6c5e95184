/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8, the command-line tool: global flags, dispatch to the verb groups,
 * help, and the one place that turns errors into messages and exit codes. */
#include "cli.h"
#include "common/worker.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char top_help[] =
	"kosa8 - run untrusted code in sealed, rewindable virtual machines\n"
	"\n"
	"Usage: kosa8 [--home DIR] COMMAND [ARGS...]\n"
	"\n"
	"The daemon:\n"
	"  daemon start       start kosa8d, the daemon that owns all state\n"
	"  daemon stop        stop kosa8d and its sandboxes' VMs\n"
	"  daemon status      is kosa8d running, which accelerator, how many sandboxes\n"
	"\n"
	"Sandboxes (each one a small VM):\n"
	"  sandbox create     create and boot a sandbox\n"
	"  sandbox pull       make an image available inside a sandbox\n"
	"  sandbox run        run a command in a new container, output streamed live\n"
	"  sandbox start      start a container in the background, print its id\n"
	"  sandbox exec       run a command in a running container\n"
	"  sandbox ps         list a sandbox's containers\n"
	"  sandbox stop       stop a container\n"
	"  sandbox ls         list sandboxes\n"
	"  sandbox inspect    everything about one sandbox, as JSON\n"
	"  sandbox rm         delete a sandbox\n"
	"  sandbox egress     show or change a sandbox's network policy and counts\n"
	"  sandbox broker     a sandbox's egress broker: rules and counts per host\n"
	"  sandbox pause      save a sandbox to disk and free its memory\n"
	"  sandbox resume     bring a paused sandbox back\n"
	"  sandbox fork       a new sandbox from a checkpoint of another\n"
	"  sandbox cell       run Python whose variables persist (and rewind with the VM)\n"
	"  sandbox repl       the same at a prompt\n"
	"  sandbox context    list, create, restart or remove interpreter contexts\n"
	"\n"
	"Agents:\n"
	"  mcp --sandbox NAME   a Model Context Protocol server: run_code, run_cell, files\n"
	"\n"
	"Checkpoints:\n"
	"  checkpoint NAME --label L   save memory, processes and disk\n"
	"  checkpoint ls      list a sandbox's checkpoints\n"
	"  checkpoint rm      remove one\n"
	"  rewind NAME --to L -y       put the whole machine back to a checkpoint\n"
	"  checkpoint push NAME L --to STORE   copy one to a snapshot store\n"
	"\n"
	"Snapshot stores (S3 buckets of your own; fork and resume on any host):\n"
	"  store add s3 NAME ...        keep a bucket's settings and keys (0600, never shown)\n"
	"  store ls [NAME] | rm | gc    the stores; what one holds; unused chunks removed\n"
	"  sandbox fork --from STORE:SANDBOX/LABEL --name NEW\n"
	"  sandbox pause NAME --to STORE; sandbox resume NAME   (on this host or another)\n"
	"\n"
	"Images:\n"
	"  image pull         fetch an image from a registry into the store\n"
	"  image load         load an OCI layout, OCI archive or docker save tarball\n"
	"  login REGISTRY     keep credentials for a registry\n"
	"  image ls           list images in the host's store\n"
	"  image rm           remove an image from the store\n"
	"\n"
	"Models:\n"
	"  model pull REPO:QUANT  download a GGUF model (Hugging Face-compatible hub)\n"
	"  model ls|rm|import     the local model store\n"
	"  model serve NAME       serve it on 127.0.0.1:7434 (OpenAI and Anthropic APIs)\n"
	"  model ps|stop          running model servers\n"
	"  bundle export|import   guest image, images and models in one verified file\n"
	"  guest verify|fetch     the guest image: the release's? fetch it from the release\n"
	"\n"
	"Secrets (for the egress broker):\n"
	"  secret set|ls|rm   API keys kept by the daemon, never shown again\n"
	"\n"
	"Audit log:\n"
	"  audit ls           list recorded actions\n"
	"  audit verify       check the log's hash chain\n"
	"\n"
	"  version            print the versions of kosa8 and kosa8d\n"
	"  help [COMMAND]     this text, or a command's (same as COMMAND --help)\n"
	"\n"
	"Global flags:\n"
	"  --home DIR         state directory (default $KOSA8_HOME, else ~/.kosa8 when it\n"
	"                     exists, else the service's /var/lib/kosa8 when kosa8 is\n"
	"                     installed); the daemon listens on DIR/kosa8d.sock\n"
	"  -h, --help         help\n"
	"\n"
	"Exit codes: 0 ok, 1 error, 2 usage, 3 daemon not running, 4 not found, 5 conflict,\n"
	"6 unavailable; run/exec: the process's own code, 125 when it could not start.\n"
	"\n"
	"Example:\n"
	"  kosa8 daemon start\n"
	"  kosa8 sandbox create interp --cpus 2 --memory 2048\n"
	"  kosa8 sandbox pull interp python:3.12-slim\n"
	"  kosa8 sandbox run interp python:3.12-slim python3 -c 'print(6*7)'\n";

/* Print "kosa8: MSG". Messages carry names and words that came from the daemon, and
 * through it from a sandbox or a registry (a guest's console, an agent's error): each
 * line is escaped (str_escape) before it reaches the terminal, and the lines after the
 * first are indented, so the guest's text can neither send escape sequences nor pass
 * for a line of kosa8's own. */
static void cli_print_msg(const char *msg)
{
	const char *p = msg;

	fputs("kosa8: ", stderr);
	for (;;) {
		size_t n = strcspn(p, "\n");
		cleanup_free char *raw = xmalloc(n + 1);
		memcpy(raw, p, n);
		raw[n] = '\0';
		cleanup_free char *safe = str_escape(raw);
		fputs(safe, stderr);
		if (!p[n] || !p[n + 1])
			break;
		fputs("\n    ", stderr);
		p += n + 1;
	}
	fputc('\n', stderr);
}

int cli_fail(const struct k8_err *err)
{
	cli_print_msg(err->msg[0] ? err->msg : strerror(-err->code));
	return cli_exit_code(err->code);
}

int cli_die(int code, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	cli_print_msg(buf);
	return code;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("kosa8: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nSee: kosa8 %s --help\n", cmd);
	return CLI_EXIT_USAGE;
}

const char *cli_home(const struct cli_args *a, const char *global_home)
{
	return a->home ? a->home : global_home;
}

int cli_help(const struct cli_cmd *cmd)
{
	fputs(cmd->help, stdout);
	return CLI_EXIT_OK;
}

/* ---- kosa8 version ---- */

static int cmd_version(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "json", 0, 0, 'j' }, { NULL, 0, 0, 0 } };
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	json_t *st = NULL;
	int json = 0, up = 0;

	if (cli_args_parse(argc, argv, opts, 0, &a, &err) < 0)
		return cli_usage("version", "%s", err.msg);
	if (a.help) {
		cli_args_free(&a);
		return cli_help(self);
	}
	json = a.nopts > 0;
	if (a.npos) {
		cli_args_free(&a);
		return cli_usage("version", "version takes no arguments");
	}
	if (client_init(&cl, cli_home(&a, home), &err) == 0) {
		up = client_ping(&cl, 5000, &st);
		client_free(&cl);
	}
	cli_args_free(&a);
	if (json) {
		json_t *o = json_pack("{s:s}", "kosa8", KOSA8_VERSION);
		if (up)
			json_object_set(o, "kosa8d", json_object_get(st, "version"));
		out_json(o, 1);
		json_decref(o);
	} else {
		printf("kosa8  %s\n", KOSA8_VERSION);
		if (up)
			printf("kosa8d %s\n", json_string_value(json_object_get(st, "version"))
						      ?: "(unknown)");
		else
			printf("kosa8d not running\n");
	}
	json_decref(st);
	return CLI_EXIT_OK;
}

static const struct cli_cmd version_cmd = {
	"version", cmd_version, "print the versions of kosa8 and kosa8d",
	"Usage: kosa8 version [--json]\n"
	"\n"
	"Print the version of this kosa8 and, when the daemon answers, of kosa8d.\n"
	"\n"
	"Options:\n"
	"  --json     {\"kosa8\": \"...\", \"kosa8d\": \"...\"}\n"
	"\n"
	"Example:\n"
	"  kosa8 version\n",
};

/* ---- dispatch ---- */

struct group {
	const char *name;
	const struct cli_cmd *cmds;
	const char *what;
};

static const struct group groups[] = {
	{ "daemon", cli_daemon_cmds, "start, stop and ask about kosa8d, the daemon" },
	{ "sandbox", cli_sandbox_cmds, "create sandboxes (small VMs) and run code in them" },
	{ "image", cli_image_cmds, "the host's image store, shared by all sandboxes" },
	{ "audit", cli_audit_cmds, "the hash-chained record of every action" },
	{ "checkpoint", cli_checkpoint_cmds, "save a whole sandbox: memory, processes, disk" },
	{ "model", cli_model_cmds, "local models and their OpenAI/Anthropic servers" },
	{ "bundle", cli_bundle_cmds, "one file with what an offline machine needs" },
	{ "guest", cli_guest_cmds, "the guest image every sandbox boots, and its release digest" },
	{ "secret", cli_secret_cmds, "API keys the egress broker adds on the host" },
	{ "e2b", cli_e2b_cmds, "keys of the E2B-compatible API (E2B's SDKs on kosa8)" },
	{ "store", cli_store_cmds, "snapshot stores: S3 buckets of your own for checkpoints" },
};

static const char *verb_of(const struct cli_cmd *c)
{
	const char *sp = strchr(c->name, ' ');
	return sp ? sp + 1 : c->name;
}

static void group_help(const struct group *g, FILE *f)
{
	fprintf(f, "kosa8 %s - %s\n\nUsage: kosa8 %s COMMAND [ARGS...]\n\nCommands:\n",
		g->name, g->what, g->name);
	for (const struct cli_cmd *c = g->cmds; c->name; c++)
		fprintf(f, "  %-10s %s\n", verb_of(c), c->summary);
	fprintf(f, "\nRun 'kosa8 %s COMMAND --help' for a command's flags and an example.\n",
		g->name);
}

/* The command `verb` of group g; NULL after reporting "<adj> command 'kosa8 GROUP VERB';
 * see: kosa8 GROUP --help" on stderr (the caller exits with CLI_EXIT_USAGE). */
static const struct cli_cmd *group_find(const struct group *g, const char *verb,
					const char *adj)
{
	for (const struct cli_cmd *c = g->cmds; c->name; c++)
		if (!strcmp(verb_of(c), verb))
			return c;
	cli_die(CLI_EXIT_USAGE, "%s command 'kosa8 %s %s'; see: kosa8 %s --help", adj, g->name,
		verb, g->name);
	return NULL;
}

static const struct group *find_group(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(groups); i++)
		if (!strcmp(groups[i].name, name))
			return &groups[i];
	return NULL;
}

/* kosa8 help [GROUP [VERB]] */
static int do_help(int argc, char **argv)
{
	const struct group *g;
	const struct cli_cmd *c;

	if (argc == 0) {
		fputs(top_help, stdout);
		return CLI_EXIT_OK;
	}
	if (!strcmp(argv[0], "version"))
		return cli_help(&version_cmd);
	if (!strcmp(argv[0], "rewind"))
		return cli_help(&cli_rewind_cmd);
	if (!strcmp(argv[0], "login"))
		return cli_help(&cli_login_cmd);
	if (!strcmp(argv[0], "mcp"))
		return cli_help(&cli_mcp_cmd);
	g = find_group(argv[0]);
	if (!g)
		return cli_die(CLI_EXIT_USAGE, "no help for '%s'; see: kosa8 help", argv[0]);
	if (argc == 1) {
		group_help(g, stdout);
		return CLI_EXIT_OK;
	}
	c = group_find(g, argv[1], "no");
	return c ? cli_help(c) : CLI_EXIT_USAGE;
}

static int run_group(const struct group *g, int argc, char **argv, const char *home)
{
	const struct cli_cmd *c;

	if (argc == 0) {
		group_help(g, stderr);
		return CLI_EXIT_USAGE;
	}
	if (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h") || !strcmp(argv[0], "help")) {
		group_help(g, stdout);
		return CLI_EXIT_OK;
	}
	/* `kosa8 checkpoint NAME --label L`: the group's first word is a sandbox name. */
	if (g->cmds == cli_checkpoint_cmds && strcmp(argv[0], "ls") && strcmp(argv[0], "rm") &&
	    strcmp(argv[0], "create") && strcmp(argv[0], "push"))
		return g->cmds[0].fn(&g->cmds[0], argc, argv, home);
	c = group_find(g, argv[0], "unknown");
	return c ? c->fn(c, argc - 1, argv + 1, home) : CLI_EXIT_USAGE;
}

int main(int argc, char **argv)
{
	const char *home = NULL;
	const struct group *g;
	int i = 1;

	/* a worker (`sandbox cp`'s extraction: src/common/worker.h) runs its job here and
	 * ends; the CLI goes on */
	worker_main(argc, argv);
	/* Broken pipes show up as EPIPE where we write, not as a silent death. */
	signal(SIGPIPE, SIG_IGN);

	while (i < argc && argv[i][0] == '-') {
		const char *w = argv[i];
		if (!strcmp(w, "--home")) {
			if (i + 1 >= argc)
				return cli_die(CLI_EXIT_USAGE, "flag '--home' needs a value");
			home = argv[i + 1];
			i += 2;
		} else if (!strncmp(w, "--home=", 7)) {
			home = w + 7;
			i++;
		} else if (!strcmp(w, "--help") || !strcmp(w, "-h")) {
			fputs(top_help, stdout);
			return CLI_EXIT_OK;
		} else if (!strcmp(w, "--version")) {
			printf("kosa8 %s\n", KOSA8_VERSION);
			return CLI_EXIT_OK;
		} else {
			return cli_die(CLI_EXIT_USAGE, "unknown flag '%s'; see: kosa8 --help", w);
		}
	}
	if (i >= argc) {
		fputs(top_help, stderr);
		return CLI_EXIT_USAGE;
	}
	if (!strcmp(argv[i], "help"))
		return do_help(argc - i - 1, argv + i + 1);
	if (!strcmp(argv[i], "version"))
		return cmd_version(&version_cmd, argc - i - 1, argv + i + 1, home);
	if (!strcmp(argv[i], "rewind"))
		return cli_rewind_cmd.fn(&cli_rewind_cmd, argc - i - 1, argv + i + 1, home);
	if (!strcmp(argv[i], "login"))
		return cli_login_cmd.fn(&cli_login_cmd, argc - i - 1, argv + i + 1, home);
	if (!strcmp(argv[i], "mcp"))
		return cli_mcp_cmd.fn(&cli_mcp_cmd, argc - i - 1, argv + i + 1, home);
	g = find_group(argv[i]);
	if (!g)
		return cli_die(CLI_EXIT_USAGE, "unknown command '%s'; see: kosa8 --help", argv[i]);
	return run_group(g, argc - i - 1, argv + i + 1, home);
}
