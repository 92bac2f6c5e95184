/* SPDX-License-Identifier: Apache-2.0 */
/* image.c - kosa8 image load|ls|rm: the host's image store, shared by all sandboxes. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const struct cli_opt json_only[] = { { "json", 0, 0, 'j' }, { NULL, 0, 0, 0 } };

static int has_opt(const struct cli_args *a, int id)
{
	for (int i = 0; i < a->nopts; i++)
		if (a->opts[i].id == id)
			return 1;
	return 0;
}

static int cmd_load(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "tag", 't', 1, 't' }, { "json", 0, 0, 'j' }, { NULL, 0, 0, 0 },
	};
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	struct out_progress prog;
	const char *tag = NULL;
	cleanup_free char *path = NULL;
	json_t *body = NULL, *res = NULL;
	int rc, json = 0;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	for (int i = 0; i < a.nopts; i++) {
		if (a.opts[i].id == 't')
			tag = a.opts[i].arg;
		else if (a.opts[i].id == 'j')
			json = 1;
	}
	path = realpath(a.pos[0], NULL);
	if (!path) {
		k8_err_set(&err, -errno, "%s: %s", a.pos[0], strerror(errno));
		rc = cli_fail(&err);
		goto out;
	}
	body = json_pack("{s:s}", "path", path);
	if (tag)
		json_object_set_new(body, "tag", json_string(tag));
	out_progress_init(&prog, json);
	int r = client_call(&cl, "POST", "/v1/images/load", body, out_progress_cb, &prog, 0, &res,
			    &err);
	out_progress_end(&prog);
	if (r < 0) {
		rc = cli_fail(&err);
		goto out;
	}
	rc = CLI_EXIT_OK;
	if (json) {
		out_json(res, 0);
		goto out;
	}
	json_t *loaded = json_object_get(res, "loaded"), *it;
	size_t i;
	json_array_foreach(loaded, i, it) {
		char d[40];
		printf("loaded %s (%s)\n", json_string_value(json_object_get(it, "ref")) ?: "?",
		       out_short_digest(json_string_value(json_object_get(it, "digest")), d,
					sizeof(d)));
	}
	if (!json_array_size(loaded))
		printf("loaded nothing: %s holds no image\n", path);
out:
	json_decref(body);
	json_decref(res);
	cli_args_free(&a);
	client_free(&cl);
	return rc;
}

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const char *const hdr[] = { "REF", "DIGEST", "SIZE", "CREATED" };
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	json_t *res = NULL, *it;
	size_t i;
	int rc;

	if (!cli_begin(self, argc, argv, json_only, 0, 0, 0, home, &a, &cl, &rc))
		return rc;
	if (client_call(&cl, "GET", "/v1/images", NULL, NULL, NULL, 0, &res, &err) < 0) {
		rc = cli_fail(&err);
		goto out;
	}
	rc = CLI_EXIT_OK;
	if (has_opt(&a, 'j')) {
		out_json(res, 1);
		goto out;
	}
	struct out_table *t = out_table_new(4, hdr);
	double now = (double)time(NULL);
	json_array_foreach(res, i, it) {
		char d[40], sz[32], cr[32];
		json_t *size = json_object_get(it, "size");
		const char *row[4] = {
			json_string_value(json_object_get(it, "ref")),
			out_short_digest(json_string_value(json_object_get(it, "digest")), d,
					 sizeof(d)),
			json_is_integer(size) ? out_bytes((uint64_t)json_integer_value(size), sz,
							  sizeof(sz)) : NULL,
			out_ago(out_time_parse(json_object_get(it, "created")), now, cr,
				sizeof(cr)),
		};
		out_table_row(t, row);
	}
	out_table_print(t, stdout);
	out_table_free(t);
out:
	json_decref(res);
	cli_args_free(&a);
	client_free(&cl);
	return rc;
}

static int cmd_rm(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, json_only, 0, 1, -1, home, &a, &cl, &rc))
		return rc;
	rc = CLI_EXIT_OK;
	for (int i = 0; i < a.npos; i++) {
		cleanup_free char *enc = cli_urlenc(a.pos[i]);
		cleanup_free char *path = xasprintf("/v1/images/%s", enc);
		memset(&err, 0, sizeof(err));
		if (client_call(&cl, "DELETE", path, NULL, NULL, NULL, 0, &res, &err) < 0) {
			rc = cli_fail(&err);
			if (err.code == -ECONNREFUSED)
				break;
			continue;
		}
		if (has_opt(&a, 'j'))
			out_json(res, 0);
		else
			printf("removed %s\n", a.pos[i]);
		json_decref(res);
		res = NULL;
	}
	cli_args_free(&a);
	client_free(&cl);
	return rc;
}

const struct cli_cmd cli_image_cmds[] = {
	{ "image load", cmd_load, "load an image from a file or directory",
	  "Usage: kosa8 image load PATH [--tag NAME:TAG] [--json]\n"
	  "\n"
	  "Load images into the host's store from PATH: an OCI image layout (a directory),\n"
	  "an OCI archive or a `docker save` tarball. For machines that are never online.\n"
	  "Every blob is checked against its digest. The daemon reads PATH itself, so it\n"
	  "must be readable by the user the daemon runs as.\n"
	  "\n"
	  "Options:\n"
	  "  -t, --tag NAME:TAG   name the image (when PATH holds one image; needed when\n"
	  "                       PATH does not name it)\n"
	  "  --json               progress as JSON lines, then the result as one JSON line\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 image load ./python.tar --tag python:3.12-slim\n" },
	{ "image ls", cmd_ls, "list the images in the store",
	  "Usage: kosa8 image ls [--json]\n"
	  "\n"
	  "List the images in the host's store: reference, manifest digest, compressed size\n"
	  "and when it arrived.\n"
	  "\n"
	  "Options:\n"
	  "  --json     the daemon's list as JSON\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 image ls\n" },
	{ "image rm", cmd_rm, "remove images from the store",
	  "Usage: kosa8 image rm REF...\n"
	  "\n"
	  "Remove images from the host's store. Refused (exit 5) while a sandbox uses it;\n"
	  "remove the sandbox first.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 image rm python:3.12-slim\n" },
	{ NULL, NULL, NULL, NULL },
};
