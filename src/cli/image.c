/* SPDX-License-Identifier: Apache-2.0 */
/* image.c - kosa8 image load|ls|rm: the host's image store, shared by all sandboxes. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* What `image load` loaded, one line an image. */
static void show_loaded(const json_t *res, const char *path)
{
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
}

static int cmd_load(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "tag", 't', 1, 't' }, { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	const char *tag = NULL;
	cleanup_free char *path = NULL;
	json_t *body = NULL, *res = NULL;
	int rc, json = 0;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	for (int i = 0; i < a.nopts; i++) {
		if (a.opts[i].id == 't')
			tag = a.opts[i].arg;
		else if (a.opts[i].id == CLI_OPT_JSON)
			json = 1;
	}
	path = realpath(a.pos[0], NULL);
	if (!path) {
		k8_err_set(&err, -errno, "%s: %s", a.pos[0], strerror(errno));
		return cli_end(&a, &cl, cli_fail(&err));
	}
	body = json_pack("{s:s}", "path", path);
	if (tag)
		json_object_set_new(body, "tag", json_string(tag));
	rc = cli_post_progress(&cl, "/v1/images/load", body, json, &res);
	if (rc == CLI_EXIT_OK && !json)
		show_loaded(res, path);
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

/* kosa8 image pull REF: the daemon fetches it (registries are reached by the host). */
static int cmd_pull(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	json_t *body, *res = NULL;
	int rc, json;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	json = cli_has_opt(&a, CLI_OPT_JSON);
	body = json_pack("{s:s}", "image", a.pos[0]);
	rc = cli_post_progress(&cl, "/v1/images/pull", body, json, &res);
	if (rc == CLI_EXIT_OK && !json) {
		char d[40];
		printf("pulled %s (%s) from %s\n",
		       json_string_value(json_object_get(res, "ref")) ?: a.pos[0],
		       out_short_digest(json_string_value(json_object_get(res, "digest")), d, sizeof(d)),
		       json_string_value(json_object_get(res, "registry")) ?: "?");
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

/* kosa8 login REGISTRY [-u USER] [--password-stdin]: credentials go to the daemon, which
 * keeps them readable by its user only. */
static int cmd_login(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "username", 'u', 1, 'u' },
					       { "password-stdin", 0, 0, 'p' }, { NULL, 0, 0, 0 } };
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	char user[256] = "", pass[4097] = "";
	json_t *body, *res = NULL;
	int rc, from_stdin = 0;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	for (int i = 0; i < a.nopts; i++) {
		if (a.opts[i].id == 'u')
			snprintf(user, sizeof(user), "%s", a.opts[i].arg);
		else if (a.opts[i].id == 'p')
			from_stdin = 1;
	}
	if (!user[0]) {
		if (!isatty(0))
			return cli_end(&a, &cl, cli_die(CLI_EXIT_USAGE, "-u USER is required when "
							"not on a terminal"));
		fprintf(stderr, "Username: ");
		if (!fgets(user, sizeof(user), stdin))
			return cli_end(&a, &cl, cli_die(CLI_EXIT_USAGE, "no username"));
		user[strcspn(user, "\r\n")] = '\0';
	}
	if (from_stdin || !isatty(0)) {
		if (!fgets(pass, sizeof(pass), stdin))
			pass[0] = '\0';
	} else {
		struct termios old, quiet;
		fprintf(stderr, "Password: ");
		tcgetattr(0, &old);
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(0, TCSANOW, &quiet);
		if (!fgets(pass, sizeof(pass), stdin))
			pass[0] = '\0';
		tcsetattr(0, TCSANOW, &old);
		fputc('\n', stderr);
	}
	pass[strcspn(pass, "\r\n")] = '\0';
	if (!pass[0])
		return cli_end(&a, &cl, cli_die(CLI_EXIT_USAGE, "no password given"));
	body = json_pack("{s:s,s:s,s:s}", "registry", a.pos[0], "username", user, "password", pass);
	explicit_bzero(pass, sizeof(pass));
	if (client_call(&cl, "POST", "/v1/auth", body, NULL, NULL, 30000, &res, &err) < 0)
		rc = cli_fail(&err);
	else
		printf("credentials for %s saved (readable by the daemon's user only)\n", a.pos[0]);
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

const struct cli_cmd cli_login_cmd = {
	"login", cmd_login, "keep credentials for a registry",
	"Usage: kosa8 login REGISTRY [-u USER] [--password-stdin]\n"
	"\n"
	"Save credentials for REGISTRY (host[:port], as in image references) in\n"
	"$KOSA8_HOME/auth.json, mode 0600, used by `image pull` and `sandbox pull` for Basic\n"
	"auth and for Bearer tokens. The password is read from stdin (--password-stdin, or\n"
	"whenever stdin is not a terminal), else asked for without echo. They are not\n"
	"checked against the registry until the next pull. ~/.docker/config.json is read too.\n"
	"\n"
	"Options:\n"
	"  -u, --username USER   the user name (asked for on a terminal when missing)\n"
	"  --password-stdin      read the password from standard input\n"
	"\n"
	"Example:\n"
	"  echo \"$TOKEN\" | kosa8 login registry.example.com -u me --password-stdin\n",
};

/* A row of the `image ls` table (an out_row_fn). */
static void image_row(struct out_table *t, const json_t *it, double now)
{
	char d[40], sz[32], cr[32];
	json_t *size = json_object_get(it, "size");
	const char *row[4] = {
		json_string_value(json_object_get(it, "ref")),
		out_short_digest(json_string_value(json_object_get(it, "digest")), d, sizeof(d)),
		json_is_integer(size) ? out_bytes((uint64_t)json_integer_value(size), sz,
						  sizeof(sz)) : NULL,
		out_ago(out_time_parse(json_object_get(it, "created")), now, cr, sizeof(cr)),
	};

	out_table_row(t, row);
}

static int show_images(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "REF", "DIGEST", "SIZE", "CREATED" };

	out_table_array(res, 4, hdr, image_row);
	return CLI_EXIT_OK;
}

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cli_view(self, argc, argv, home, "/v1/images", 0, show_images);
}

/* Remove the image `ref` (a cli_item_fn; ctx points to the --json flag) and say so. */
static int rm_one(struct client *cl, const char *ref, void *ctx, struct k8_err *err)
{
	const int *json = ctx;
	cleanup_free char *enc = cli_urlenc(ref);
	cleanup_free char *path = xasprintf("/v1/images/%s", enc);
	json_t *res = NULL;
	int r = client_call(cl, "DELETE", path, NULL, NULL, NULL, 0, &res, err);

	if (r < 0)
		return r;
	if (*json)
		out_json(res, 0);
	else
		printf("removed %s\n", ref);
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

const struct cli_cmd cli_image_cmds[] = {
	{ "image pull", cmd_pull, "fetch an image from a registry into the store",
	  "Usage: kosa8 image pull REF [--json]\n"
	  "\n"
	  "Fetch REF from its registry on the host: every blob is checked against its digest\n"
	  "and kept in the store shared by all sandboxes. REF is a name as Docker spells it\n"
	  "(python:3.12-slim is docker.io/library/python:3.12-slim), with a tag or @sha256:\n"
	  "digest. Registries on 127.0.0.1 or listed in KOSA8_INSECURE_REGISTRIES (as seen by\n"
	  "the daemon) are reached over plain HTTP. Mirrors for docker.io come from\n"
	  "KOSA8_REGISTRY_MIRRORS; credentials from $KOSA8_HOME/auth.json or\n"
	  "~/.docker/config.json. With KOSA8_OFFLINE=1 on the daemon nothing is fetched.\n"
	  "\n"
	  "Options:\n"
	  "  --json     progress as JSON lines, then {\"ref\",\"digest\",\"registry\"}\n"
	  "\n"
	  "Examples:\n"
	  "  kosa8 image pull python:3.12-slim\n"
	  "  kosa8 image pull 127.0.0.1:5000/library/python:3.12-slim\n" },
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
