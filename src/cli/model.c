/* SPDX-License-Identifier: Apache-2.0 */
/* model.c - kosa8 model pull|ls|rm|import|serve|ps|stop: local models and their servers. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OPT_NAME = 'n', OPT_PORT = 'p', OPT_HOST = 'H', OPT_THREADS = 't', OPT_CTX = 'c' };

static void show_model(const json_t *m, const char *verb)
{
	char sz[32];
	printf("%s %s (sha256:%.12s, %s)\n", verb, json_string_value(json_object_get(m, "name")) ?: "?",
	       json_string_value(json_object_get(m, "sha256")) ?: "?",
	       out_bytes((uint64_t)json_integer_value(json_object_get(m, "size")), sz, sizeof(sz)));
}

/* kosa8 model pull REPO[:QUANT]: the daemon downloads (it has the network and the store). */
static int cmd_pull(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "name", 0, 1, OPT_NAME },
					       { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 } };
	struct cli_args a;
	struct client cl;
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	int json = cli_has_opt(&a, CLI_OPT_JSON);
	json_t *body = json_pack("{s:s}", "model", a.pos[0]);
	if (cli_opt_last(&a, OPT_NAME))
		json_object_set_new(body, "name", json_string(cli_opt_last(&a, OPT_NAME)));
	const char *tok = getenv("HF_TOKEN");
	if (tok && *tok)   /* to the daemon over its private socket; never printed */
		json_object_set_new(body, "token", json_string(tok));
	rc = cli_post_progress(&cl, "/v1/models/pull", body, json, &res);
	if (rc == CLI_EXIT_OK && !json)
		show_model(res, json_is_true(json_object_get(res, "cached")) ? "have" : "pulled");
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

static int cmd_import(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "name", 0, 1, OPT_NAME },
					       { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 } };
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	int json = cli_has_opt(&a, CLI_OPT_JSON);
	cleanup_free char *path = realpath(a.pos[0], NULL);
	if (!path) {
		k8_err_set(&err, -errno, "%s: %s", a.pos[0], strerror(errno));
		return cli_end(&a, &cl, cli_fail(&err));
	}
	json_t *body = json_pack("{s:s}", "path", path);
	if (cli_opt_last(&a, OPT_NAME))
		json_object_set_new(body, "name", json_string(cli_opt_last(&a, OPT_NAME)));
	rc = cli_post_progress(&cl, "/v1/models/import", body, json, &res);
	if (rc == CLI_EXIT_OK && !json)
		show_model(res, "imported");
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

static void model_row(struct out_table *t, const json_t *it, double now)
{
	char sz[32], cr[32], d[32];
	const json_t *src = json_object_get(it, "source");
	const char *from = json_string_value(json_object_get(src, "repo"));
	snprintf(d, sizeof(d), "sha256:%.12s", json_string_value(json_object_get(it, "sha256")) ?: "");
	const char *row[5] = {
		json_string_value(json_object_get(it, "name")), d,
		out_bytes((uint64_t)json_integer_value(json_object_get(it, "size")), sz, sizeof(sz)),
		from ? from : json_string_value(json_object_get(src, "file")),
		out_ago(out_time_parse(json_object_get(it, "created")), now, cr, sizeof(cr)),
	};
	out_table_row(t, row);
}

static int show_models(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "NAME", "DIGEST", "SIZE", "SOURCE", "CREATED" };
	(void)ctx;
	out_table_array(res, 5, hdr, model_row);
	return CLI_EXIT_OK;
}

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cli_view(self, argc, argv, home, "/v1/models", 0, show_models);
}

static void server_row(struct out_table *t, const json_t *it, double now)
{
	char pid[16], url[128];
	(void)now;
	snprintf(pid, sizeof(pid), "%d", (int)json_integer_value(json_object_get(it, "pid")));
	snprintf(url, sizeof(url), "http://%s:%d", json_string_value(json_object_get(it, "host")) ?: "?",
		 (int)json_integer_value(json_object_get(it, "port")));
	const char *row[3] = { json_string_value(json_object_get(it, "name")), url, pid };
	out_table_row(t, row);
}

static int show_servers(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "NAME", "URL", "PID" };
	(void)ctx;
	out_table_array(res, 3, hdr, server_row);
	return CLI_EXIT_OK;
}

static int cmd_ps(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cli_view(self, argc, argv, home, "/v1/model-servers", 0, show_servers);
}

static int rm_one(struct client *cl, const char *name, void *ctx, struct k8_err *err)
{
	const char *base = ctx;
	cleanup_free char *enc = cli_urlenc(name);
	cleanup_free char *path = xasprintf("%s/%s", base, enc);
	json_t *res = NULL;
	int r = client_call(cl, "DELETE", path, NULL, NULL, NULL, 60000, &res, err);
	if (r < 0)
		return r;
	printf("%s %s\n", strstr(base, "servers") ? "stopped" : "removed", name);
	json_decref(res);
	return 0;
}

static int cmd_rm_or_stop(const struct cli_cmd *self, int argc, char **argv, const char *home,
			  const char *base)
{
	struct cli_args a;
	struct client cl;
	int rc;
	static const struct cli_opt none[] = { { NULL, 0, 0, 0 } };
	if (!cli_begin(self, argc, argv, none, 0, 1, -1, home, &a, &cl, &rc))
		return rc;
	return cli_end(&a, &cl, cli_each(&cl, a.pos, a.npos, rm_one, (void *)base));
}

static int cmd_rm(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cmd_rm_or_stop(self, argc, argv, home, "/v1/models");
}

static int cmd_stop(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cmd_rm_or_stop(self, argc, argv, home, "/v1/model-servers");
}

static int cmd_serve(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "port", 0, 1, OPT_PORT }, { "host", 0, 1, OPT_HOST }, { "threads", 0, 1, OPT_THREADS },
		{ "ctx", 0, 1, OPT_CTX }, { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	rc = CLI_EXIT_OK;
	json_t *body = json_object();
	long v;
	static const struct { int id; const char *flag, *key; long lo, hi; } nums[] = {
		{ OPT_PORT, "--port", "port", 1, 65535 }, { OPT_THREADS, "--threads", "threads", 1, 256 },
		{ OPT_CTX, "--ctx", "ctx", 16, 1 << 20 },
	};
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		const char *s = cli_opt_last(&a, nums[i].id);
		if (!s)
			continue;
		if (cli_parse_range(nums[i].flag, s, nums[i].lo, nums[i].hi, &v, &err)) {
			json_decref(body);
			return cli_end(&a, &cl, cli_fail(&err));
		}
		json_object_set_new(body, nums[i].key, json_integer(v));
	}
	if (cli_opt_last(&a, OPT_HOST))
		json_object_set_new(body, "host", json_string(cli_opt_last(&a, OPT_HOST)));
	cleanup_free char *enc = cli_urlenc(a.pos[0]);
	cleanup_free char *path = xasprintf("/v1/models/%s/serve", enc);
	if (client_call(&cl, "POST", path, body, NULL, NULL, 180000, &res, &err) < 0) {
		rc = cli_fail(&err);
	} else if (cli_has_opt(&a, CLI_OPT_JSON)) {
		out_json(res, 0);
	} else {
		const char *h = json_string_value(json_object_get(res, "host")) ?: "127.0.0.1";
		int port = (int)json_integer_value(json_object_get(res, "port"));
		printf("serving %s on http://%s:%d\n"
		       "  export OPENAI_BASE_URL=http://%s:%d/v1\n"
		       "  export ANTHROPIC_BASE_URL=http://%s:%d\n",
		       a.pos[0], h, port, h, port, h, port);
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

const struct cli_cmd cli_model_cmds[] = {
	{ "model pull", cmd_pull, "download a GGUF model from a Hugging Face-compatible hub",
	  "Usage: kosa8 model pull REPO[:QUANT] [--name NAME] [--json]\n"
	  "\n"
	  "The daemon fetches the repo's file list, picks the .gguf file whose quant tag is\n"
	  "QUANT (case-insensitive; without QUANT the repo must hold one model; otherwise the\n"
	  "choices are listed), downloads it resumably (an interrupted pull continues where it\n"
	  "stopped) and checks its SHA-256 against the hub's LFS digest before naming it. The\n"
	  "name is the file's, lower case, without .gguf (qwen2.5-0.5b-instruct-q4_k_m).\n"
	  "Hub: KOSA8_HF_ENDPOINT or hf_endpoint in $KOSA8_HOME/config.json, default\n"
	  "https://huggingface.co. Token: HF_TOKEN (passed to the daemon, never logged), else\n"
	  "the password `kosa8 login HOST` saved for the hub's host. With KOSA8_OFFLINE=1 on\n"
	  "the daemon nothing is fetched.\n"
	  "\n"
	  "Options:\n"
	  "  --name NAME   store it under another name\n"
	  "  --json        progress as JSON lines, then the model as one JSON line\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 model pull Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m\n" },
	{ "model ls", cmd_ls, "list local models",
	  "Usage: kosa8 model ls [--json]\n"
	  "\n"
	  "List the models in $KOSA8_HOME/models: NAME, DIGEST, SIZE, SOURCE, CREATED.\n"
	  "\n"
	  "Options:\n"
	  "  --json        the list as one JSON array\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 model ls\n" },
	{ "model rm", cmd_rm, "remove local models",
	  "Usage: kosa8 model rm NAME...\n"
	  "\n"
	  "Remove models from the store (refused while served: kosa8 model stop NAME).\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 model rm qwen2.5-0.5b-instruct-q4_k_m\n" },
	{ "model import", cmd_import, "add a local .gguf file",
	  "Usage: kosa8 model import FILE [--name NAME] [--json]\n"
	  "\n"
	  "Copy a GGUF file into the store (the daemon reads FILE; it must be readable by the\n"
	  "daemon's user). For machines that are never online.\n"
	  "\n"
	  "Options:\n"
	  "  --name NAME   store it under another name (default: the file's, lower case)\n"
	  "  --json        progress as JSON lines, then the model as one JSON line\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 model import ./qwen2.5-0.5b-instruct-q4_k_m.gguf\n" },
	{ "model serve", cmd_serve, "serve a model on the OpenAI and Anthropic APIs",
	  "Usage: kosa8 model serve NAME [--port 7434] [--host 127.0.0.1] [--threads 2]\n"
	  "                         [--ctx 4096] [--json]\n"
	  "\n"
	  "kosa8d starts kosa8-model serve for NAME and returns once it answers. Loopback\n"
	  "only unless --host says otherwise. OpenAI clients: OPENAI_BASE_URL=http://HOST:PORT/v1;\n"
	  "Anthropic clients: ANTHROPIC_BASE_URL=http://HOST:PORT. Stopped by kosa8 model stop\n"
	  "or with the daemon.\n"
	  "\n"
	  "Options:\n"
	  "  --port N      TCP port, 1-65535 (default 7434)\n"
	  "  --host ADDR   address to listen on (default 127.0.0.1)\n"
	  "  --threads N   threads for generation, 1-256 (default 2)\n"
	  "  --ctx N       context length in tokens, 16-1048576 (default 4096)\n"
	  "  --json        the server as one JSON object\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 model serve qwen2.5-0.5b-instruct-q4_k_m\n" },
	{ "model ps", cmd_ps, "list running model servers",
	  "Usage: kosa8 model ps [--json]\n"
	  "\n"
	  "List running model servers: NAME, URL, PID.\n"
	  "\n"
	  "Options:\n"
	  "  --json        the list as one JSON array\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 model ps\n" },
	{ "model stop", cmd_stop, "stop model servers",
	  "Usage: kosa8 model stop NAME...\n"
	  "\n"
	  "Stop the servers of the models named (they also stop with the daemon).\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 model stop qwen2.5-0.5b-instruct-q4_k_m\n" },
	{ NULL, NULL, NULL, NULL },
};
