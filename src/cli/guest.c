/* SPDX-License-Identifier: Apache-2.0 */
/* guest.c - kosa8 guest verify|fetch: the guest image every sandbox boots, checked against
 * the digest built into kosa8d (the release's published checksum), and fetched from the
 * release when it is missing or not the release's (docs/install.md "The guest image"). */
#include "cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* kosa8d hashes the kernel and the initramfs anew: a second or two on a slow disk. */
#define GUEST_VERIFY_TIMEOUT_MS 120000L
/* A fetch downloads some 20 MB; each transfer is cut by kosa8d when it stalls. */
#define GUEST_FETCH_TIMEOUT_MS 1800000L

static int verify_show(const json_t *res, void *ctx)
{
	const char *dir = json_string_value(json_object_get(res, "dir"));
	const char *digest = json_string_value(json_object_get(res, "digest"));
	const char *rel = json_string_value(json_object_get(res, "release_digest"));
	const char *why = json_string_value(json_object_get(res, "error"));
	bool files_ok = json_is_true(json_object_get(res, "files_ok"));
	bool release = json_is_true(json_object_get(res, "release"));

	(void)ctx;
	if (!dir) {
		fprintf(stderr, "kosa8: no guest image: %s\n", why ? why : "none found");
		return CLI_EXIT_NOT_FOUND;
	}
	printf("guest image: %s\n", dir);
	printf("  digest:    %s\n", digest ? digest : "?");
	printf("  release:   %s\n", rel ? rel : "(none built in)");
	printf("  files:     %s\n", files_ok ? "match the manifest (hashed now)" : why ? why : "?");
	if (!files_ok)
		return CLI_EXIT_ERROR;
	if (!release) {
		printf("  verdict:   NOT the guest this kosa8 was released with\n");
		return CLI_EXIT_ERROR;
	}
	printf("  verdict:   the release's guest image\n");
	return CLI_EXIT_OK;
}

static int cmd_verify(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	return cli_view(self, argc, argv, home, "/v1/guest", GUEST_VERIFY_TIMEOUT_MS, verify_show);
}

enum { OPT_URL = 'u', OPT_FORCE = 'f' };

static int cmd_fetch(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "url", 0, 1, OPT_URL }, { "force", 0, 0, OPT_FORCE },
		{ "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	json_t *body = json_object(), *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 0, 0, home, &a, &cl, &rc)) {
		json_decref(body);
		return rc;
	}
	for (int i = 0; i < a.nopts; i++) {
		if (a.opts[i].id == OPT_URL)
			json_object_set_new(body, "url", json_string(a.opts[i].arg));
		else if (a.opts[i].id == OPT_FORCE)
			json_object_set_new(body, "force", json_true());
	}
	int r = client_call(&cl, "POST", "/v1/guest/fetch", body, NULL, NULL,
			    GUEST_FETCH_TIMEOUT_MS, &res, &err);
	json_decref(body);
	if (r < 0)
		return cli_end(&a, &cl, cli_fail(&err));
	if (cli_has_opt(&a, CLI_OPT_JSON))
		out_json(res, 0);
	else if (json_is_true(json_object_get(res, "fetched")))
		printf("fetched the guest image %s from %s (%lld bytes), verified against the "
		       "release's digest; installed in %s\n",
		       json_string_value(json_object_get(res, "digest")),
		       json_string_value(json_object_get(res, "url")),
		       (long long)json_integer_value(json_object_get(res, "bytes")),
		       json_string_value(json_object_get(res, "dir")));
	else
		printf("the guest image in %s is the release's (%s) and matches its manifest; "
		       "nothing fetched (--force fetches it again)\n",
		       json_string_value(json_object_get(res, "dir")),
		       json_string_value(json_object_get(res, "digest")));
	json_decref(res);
	return cli_end(&a, &cl, CLI_EXIT_OK);
}

const struct cli_cmd cli_guest_cmds[] = {
	{ "guest verify", cmd_verify, "is the guest image the release's, unchanged?",
	  "Usage: kosa8 guest verify [--json]\n"
	  "\n"
	  "Hash the guest image the daemon boots (kernel and initramfs) against its\n"
	  "manifest.json, and compare that manifest's digest with the one built into kosa8d:\n"
	  "the guest image this kosa8 was released with (its published checksum). Exits 0\n"
	  "when both hold, 1 when either does not, 4 when there is no guest image.\n"
	  "\n"
	  "Options:\n"
	  "  --json     {\"dir\",\"digest\",\"release_digest\",\"files_ok\",\"release\",\"error\",\n"
	  "             \"fetched_from\"}\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 guest verify\n" },
	{ "guest fetch", cmd_fetch, "fetch the release's guest image",
	  "Usage: kosa8 guest fetch [--url URL] [--force] [--json]\n"
	  "\n"
	  "Fetch the guest image from the release (config.json \"guest_url\", else this\n"
	  "version's on kosa8.com) into $KOSA8_HOME/guest and boot it from now on. Its\n"
	  "manifest.json must have the digest built into kosa8d, and the kernel and initramfs\n"
	  "the manifest's SHA-256; anything else is refused and nothing is installed. kosa8d\n"
	  "does the same by itself at start when it finds no guest image. Never when offline\n"
	  "(KOSA8_OFFLINE=1): copy one in with `kosa8 bundle import` instead. When the guest\n"
	  "in use is already the release's and unchanged, nothing is fetched.\n"
	  "\n"
	  "Options:\n"
	  "  --url URL  the folder holding manifest.json, vmlinux and initramfs.cpio (a\n"
	  "             mirror); what is fetched is checked against the same digest\n"
	  "  --force    fetch even when the guest in use is the release's\n"
	  "  --json     {\"fetched\",\"url\",\"digest\",\"dir\",\"bytes\"}\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 guest fetch\n" },
	{ NULL, NULL, NULL, NULL },
};
