/* SPDX-License-Identifier: Apache-2.0 */
/* bundle.c - kosa8 bundle export|import: one file with the guest image, images and models,
 * for machines that are never online. */
#include "cli.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_IMAGE = 'i', OPT_MODEL = 'm', OPT_NO_GUEST = 'g', OPT_TRUST_GUEST = 't' };

/* FILE made absolute (it need not exist yet; its directory must). */
static char *abs_out(const char *f)
{
	char *dup1 = xstrdup(f), *dup2 = xstrdup(f);
	char *dir = realpath(dirname(dup1), NULL);
	char *r = dir ? xasprintf("%s/%s", dir, basename(dup2)) : NULL;
	free(dir);
	free(dup1);
	free(dup2);
	return r;
}

static int cmd_export(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "image", 0, 1, OPT_IMAGE }, { "model", 0, 1, OPT_MODEL },
		{ "no-guest", 0, 0, OPT_NO_GUEST }, { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	int json = cli_has_opt(&a, CLI_OPT_JSON);
	cleanup_free char *path = abs_out(a.pos[0]);
	if (!path) {
		k8_err_set(&err, -errno, "%s: %s", a.pos[0], strerror(errno));
		return cli_end(&a, &cl, cli_fail(&err));
	}
	json_t *images = json_array(), *models = json_array();
	for (int i = 0; i < a.nopts; i++) {
		if (a.opts[i].id == OPT_IMAGE)
			json_array_append_new(images, json_string(a.opts[i].arg));
		else if (a.opts[i].id == OPT_MODEL)
			json_array_append_new(models, json_string(a.opts[i].arg));
	}
	json_t *body = json_pack("{s:s,s:o,s:o,s:b}", "path", path, "images", images, "models", models,
				 "guest", !cli_has_opt(&a, OPT_NO_GUEST));
	rc = cli_post_progress(&cl, "/v1/bundle/export", body, json, &res);
	if (rc == CLI_EXIT_OK && !json) {
		char sz[32];
		printf("wrote %s (%s, %d parts)\n", path,
		       out_bytes((uint64_t)json_integer_value(json_object_get(res, "size")), sz, sizeof(sz)),
		       (int)json_integer_value(json_object_get(res, "parts")));
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

static int cmd_import(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "trust-guest", 0, 1, OPT_TRUST_GUEST }, { "json", 0, 0, CLI_OPT_JSON },
		{ NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	int json = cli_has_opt(&a, CLI_OPT_JSON);
	const char *trust = NULL;
	for (int i = 0; i < a.nopts; i++)
		if (a.opts[i].id == OPT_TRUST_GUEST)
			trust = a.opts[i].arg;
	cleanup_free char *path = realpath(a.pos[0], NULL);
	if (!path) {
		k8_err_set(&err, -errno, "%s: %s", a.pos[0], strerror(errno));
		return cli_end(&a, &cl, cli_fail(&err));
	}
	json_t *body = json_pack("{s:s,s:s?}", "path", path, "trust_guest", trust);
	rc = cli_post_progress(&cl, "/v1/bundle/import", body, json, &res);
	if (rc == CLI_EXIT_OK && !json)
		printf("imported %s: %d parts verified, %zu images, %d models%s\n", path,
		       (int)json_integer_value(json_object_get(res, "parts")),
		       json_array_size(json_object_get(res, "images")),
		       (int)json_integer_value(json_object_get(res, "models")),
		       !json_is_true(json_object_get(res, "guest")) ? "" :
		       json_is_true(json_object_get(res, "trusted_guest")) ?
		       ", the guest image (trusted by --trust-guest, not this build's)" : ", the guest image");
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

const struct cli_cmd cli_bundle_cmds[] = {
	{ "bundle export", cmd_export, "write the guest image, images and models to one file",
	  "Usage: kosa8 bundle export FILE [--image REF]... [--model NAME]... [--no-guest] [--json]\n"
	  "\n"
	  "Write one file (a tar whose first member, manifest.json, lists the SHA-256 and size\n"
	  "of every part) with this daemon's guest image (unless --no-guest), the images and\n"
	  "the models named. The daemon writes FILE.\n"
	  "\n"
	  "Options:\n"
	  "  --image REF   an image from the store (repeatable)\n"
	  "  --model NAME  a model from the model store (repeatable)\n"
	  "  --no-guest    leave the guest image out\n"
	  "  --json        progress as JSON lines, then the bundle as one JSON line\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 bundle export offline.k8b --image python:3.12-slim \\\n"
	  "      --model qwen2.5-0.5b-instruct-q4_k_m\n" },
	{ "bundle import", cmd_import, "verify a bundle, then install what it holds",
	  "Usage: kosa8 bundle import FILE [--trust-guest sha256:HEX] [--json]\n"
	  "\n"
	  "Every part is checked against the bundle's manifest (a part missing, extra, twice,\n"
	  "of another size or SHA-256, or a truncated file is refused) before anything is\n"
	  "installed: images into the store, models into the model store, the guest image into\n"
	  "$KOSA8_HOME/guest (used by the daemon from then on). Needs no network.\n"
	  "The guest image runs in every sandbox, so it is also checked against the one this\n"
	  "kosa8 was released with (its digest, the SHA-256 of the guest's manifest.json, is\n"
	  "built in: `kosa8 daemon status --json`, guest.release_digest); a bundle with another\n"
	  "guest image is refused and nothing is installed.\n"
	  "\n"
	  "Options:\n"
	  "  --trust-guest sha256:HEX  accept a guest image of this digest instead (the published\n"
	  "                checksum of a guest you trust); the audit log records it\n"
	  "  --json        progress as JSON lines, then what was installed as one JSON line\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 bundle import offline.k8b\n" },
	{ NULL, NULL, NULL, NULL },
};
