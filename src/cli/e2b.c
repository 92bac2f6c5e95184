/* SPDX-License-Identifier: Apache-2.0 */
/* e2b.c - kosa8 e2b key create|list|rm: the API keys of kosa8d's E2B-compatible API
 * (docs/e2b.md). A key is printed once, by create; the daemon keeps only its hash. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

enum { OPT_NAME = 'n' };

static void key_row(struct out_table *t, const json_t *item, double now)
{
	char ago[32];
	const char *cells[4] = {
		json_string_value(json_object_get(item, "id")),
		json_string_value(json_object_get(item, "prefix")),
		json_string_value(json_object_get(item, "name")),
		out_ago(out_time_parse(json_object_get(item, "created")), now, ago, sizeof(ago)),
	};
	out_table_row(t, cells);
}

static int key_list_show(const json_t *res, void *ctx)
{
	static const char *const headers[] = { "ID", "PREFIX", "NAME", "CREATED" };
	const json_t *keys = json_object_get(res, "keys");

	(void)ctx;
	if (!json_array_size(keys)) {
		printf("no E2B API keys; make one with `kosa8 e2b key create`\n");
		return CLI_EXIT_OK;
	}
	out_table_array(keys, 4, headers, key_row);
	return CLI_EXIT_OK;
}

static int key_rm_one(struct client *cl, const char *id, void *ctx, struct k8_err *err)
{
	cleanup_free char *enc = cli_urlenc(id);
	cleanup_free char *path = xasprintf("/v1/e2b/keys/%s", enc);
	json_t *res = NULL;
	int r = client_call(cl, "DELETE", path, NULL, NULL, NULL, 30000, &res, err);

	if (r < 0)
		return r;
	if (*(const int *)ctx)
		out_json(res, 0);
	else
		printf("removed E2B API key %s\n", id);
	json_decref(res);
	return 0;
}

static int cmd_key(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "name", 0, 1, OPT_NAME }, { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	const char *name = NULL, *action;
	int rc, json;

	if (!cli_begin(self, argc, argv, opts, 0, 1, -1, home, &a, &cl, &rc))
		return rc;
	json = cli_has_opt(&a, CLI_OPT_JSON);
	for (int i = 0; i < a.nopts; i++)
		if (a.opts[i].id == OPT_NAME)
			name = a.opts[i].arg;
	action = a.pos[0];
	if (!strcmp(action, "list") || !strcmp(action, "ls")) {
		if (a.npos != 1 || name)
			return cli_end(&a, &cl, cli_usage(self->name, "list takes no arguments"));
		return cli_end(&a, &cl, cli_get_show(&cl, "/v1/e2b/keys", 30000, json,
						     key_list_show, NULL));
	}
	if (!strcmp(action, "rm")) {
		if (a.npos < 2 || name)
			return cli_end(&a, &cl, cli_usage(self->name, "rm takes the ids of keys "
							  "(kosa8 e2b key list)"));
		return cli_end(&a, &cl, cli_each(&cl, a.pos + 1, a.npos - 1, key_rm_one, &json));
	}
	if (strcmp(action, "create") || a.npos != 1)
		return cli_end(&a, &cl, cli_usage(self->name, "expected create [--name NAME], "
						  "list or rm ID..."));
	json_t *body = json_object(), *res = NULL;
	if (name)
		json_object_set_new(body, "name", json_string(name));
	rc = client_call(&cl, "POST", "/v1/e2b/keys", body, NULL, NULL, 30000, &res, &err);
	json_decref(body);
	if (rc < 0)
		return cli_end(&a, &cl, cli_fail(&err));
	if (json)
		out_json(res, 0);
	else
		printf("%s\n", json_string_value(json_object_get(res, "key")) ?: "");
	/* the key is shown once: our copy goes */
	json_t *k = json_object_get(res, "key");
	if (json_is_string(k))
		OPENSSL_cleanse((char *)json_string_value(k), json_string_length(k));
	json_decref(res);
	if (!json && isatty(STDOUT_FILENO))
		fprintf(stderr, "kosa8: this key is shown once; kosa8d keeps only its hash. Use it as "
			"E2B_API_KEY (docs/e2b.md)\n");
	return cli_end(&a, &cl, CLI_EXIT_OK);
}

const struct cli_cmd cli_e2b_cmds[] = {
	{ "e2b key", cmd_key, "API keys of the E2B-compatible API: create, list, rm",
	  "Usage: kosa8 e2b key create [--name NAME] [--json]\n"
	  "       kosa8 e2b key list [--json]\n"
	  "       kosa8 e2b key rm ID...\n"
	  "\n"
	  "Keys for kosa8d's E2B-compatible API (docs/e2b.md), which E2B's SDKs use with\n"
	  "E2B_API_URL and E2B_SANDBOX_URL set to the address `kosa8 daemon status` shows.\n"
	  "create prints a new key (e2b_ and 40 hex digits) once: the daemon keeps only its\n"
	  "SHA-256. list shows ids, the first 8 characters and names; rm removes keys by id,\n"
	  "refused from the next request on. Creates and removals are audited (e2b.key.*,\n"
	  "never the key).\n"
	  "\n"
	  "Options:\n"
	  "  --name NAME   a name to recognise the key by (create)\n"
	  "  --json        create: {\"id\",\"name\",\"key\",\"created\"}; list: {\"keys\":[...]}\n"
	  "\n"
	  "Examples:\n"
	  "  export E2B_API_KEY=$(kosa8 e2b key create --name laptop)\n"
	  "  kosa8 e2b key list\n"
	  "  kosa8 e2b key rm k1a2b3c4d\n" },
	{ NULL, NULL, NULL, NULL },
};
