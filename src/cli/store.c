/* SPDX-License-Identifier: Apache-2.0 */
/* store.c - kosa8 store add|ls|rm|gc|key: snapshot stores, S3 buckets of the user's own
 * that hold checkpoints and paused sandboxes (docs/stores.md). Credentials are read from
 * stdin or this process's environment, never from the command line (where `ps` shows
 * them), sent once to the daemon and wiped from our memory, as `kosa8 secret` does. */
#include "cli.h"

#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

enum {
	OPT_ENDPOINT = 1, OPT_BUCKET, OPT_REGION, OPT_KEY_STDIN, OPT_KEY_ENV, OPT_PATH_STYLE,
	OPT_VHOST, OPT_CA, OPT_ENCRYPT, OPT_KEY_FILE, OPT_CHUNK, OPT_THREADS, OPT_GRACE,
};

#define CRED_MAX 8192

/* One line of stdin (cli_read_line), which must not be empty. */
static int read_line(const char *prompt, bool hidden, char *buf, size_t cap, struct k8_err *err)
{
	ssize_t n = cli_read_line(prompt, hidden, buf, cap);

	if (n == -E2BIG)
		return k8_err_set(err, -EINVAL, "%s: longer than %zu bytes", prompt, cap - 1);
	if (n <= 0)
		return k8_err_set(err, -EINVAL, "%s: nothing on stdin (give the access key id on the "
				  "first line, the secret key on the second)", prompt);
	return 0;
}

/* The store's key from a file of 64 hex digits (what `kosa8 store key` prints). */
static int read_key_file(const char *path, char out[65], struct k8_err *err)
{
	char buf[80];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		n--;
	if (n != 64 || strspn(buf, "0123456789abcdef") < 64) {
		OPENSSL_cleanse(buf, sizeof(buf));
		return k8_err_set(err, -EINVAL, "%s does not hold a store key (64 hex digits)", path);
	}
	memcpy(out, buf, 64);
	out[64] = '\0';
	OPENSSL_cleanse(buf, sizeof(buf));
	return 0;
}

static void show_store(const json_t *s)
{
	printf("store %s: s3 %s bucket %s (%s, %s)%s\n",
	       json_string_value(json_object_get(s, "name")),
	       json_string_value(json_object_get(s, "endpoint")),
	       json_string_value(json_object_get(s, "bucket")),
	       json_string_value(json_object_get(s, "region")),
	       json_is_true(json_object_get(s, "path_style")) ? "path-style" : "virtual-hosted",
	       json_is_true(json_object_get(s, "encrypted")) ? ", encrypted" : "");
}

static int cmd_add(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "endpoint", 0, 1, OPT_ENDPOINT }, { "bucket", 0, 1, OPT_BUCKET },
		{ "region", 0, 1, OPT_REGION }, { "access-key-stdin", 0, 0, OPT_KEY_STDIN },
		{ "access-key-from-env", 0, 0, OPT_KEY_ENV }, { "path-style", 0, 0, OPT_PATH_STYLE },
		{ "virtual-hosted", 0, 0, OPT_VHOST }, { "ca-file", 0, 1, OPT_CA },
		{ "encrypt", 0, 0, OPT_ENCRYPT }, { "key-file", 0, 1, OPT_KEY_FILE },
		{ "chunk-kib", 0, 1, OPT_CHUNK }, { "threads", 0, 1, OPT_THREADS },
		{ "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	char akey[CRED_MAX], skey[CRED_MAX], keyhex[65] = "";
	const char *endpoint, *bucket, *region, *ca, *kf, *v;
	json_t *body = NULL, *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, opts, 0, 2, 2, home, &a, &cl, &rc))
		return rc;
	if (strcmp(a.pos[0], "s3"))
		return cli_end(&a, &cl, cli_usage(self->name, "the only store type is s3: kosa8 "
						  "store add s3 NAME ..."));
	endpoint = cli_opt_last(&a, OPT_ENDPOINT);
	bucket = cli_opt_last(&a, OPT_BUCKET);
	region = cli_opt_last(&a, OPT_REGION);
	if (!endpoint || !bucket)
		return cli_end(&a, &cl, cli_usage(self->name, "--endpoint URL and --bucket B are "
						  "required"));
	if (cli_has_opt(&a, OPT_KEY_STDIN) == cli_has_opt(&a, OPT_KEY_ENV))
		return cli_end(&a, &cl, cli_usage(self->name, "give exactly one of "
						  "--access-key-stdin and --access-key-from-env "
						  "(never the keys themselves)"));
	if (cli_has_opt(&a, OPT_PATH_STYLE) && cli_has_opt(&a, OPT_VHOST))
		return cli_end(&a, &cl, cli_usage(self->name, "--path-style or --virtual-hosted, "
						  "not both"));
	if ((kf = cli_opt_last(&a, OPT_KEY_FILE)) && read_key_file(kf, keyhex, &err) < 0)
		return cli_end(&a, &cl, cli_fail(&err));
	if (cli_has_opt(&a, OPT_KEY_ENV)) {
		const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
		if (!ak || !*ak || !sk || !*sk || strlen(ak) >= CRED_MAX || strlen(sk) >= CRED_MAX)
			return cli_end(&a, &cl, cli_usage(self->name, "AWS_ACCESS_KEY_ID and "
							  "AWS_SECRET_ACCESS_KEY are not both set"));
		snprintf(akey, sizeof(akey), "%s", ak);
		snprintf(skey, sizeof(skey), "%s", sk);
	} else if (read_line("access key id", false, akey, sizeof(akey), &err) < 0 ||
		   read_line("secret access key", true, skey, sizeof(skey), &err) < 0) {
		OPENSSL_cleanse(skey, sizeof(skey));
		return cli_end(&a, &cl, cli_fail(&err));
	}
	body = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:b}", "name", a.pos[1], "type", "s3",
			 "endpoint", endpoint, "bucket", bucket, "region",
			 region ? region : "us-east-1", "access_key", akey, "secret_key", skey,
			 "encrypt", cli_has_opt(&a, OPT_ENCRYPT));
	OPENSSL_cleanse(akey, sizeof(akey));
	OPENSSL_cleanse(skey, sizeof(skey));
	if (keyhex[0])
		json_object_set_new(body, "key", json_string(keyhex));
	OPENSSL_cleanse(keyhex, sizeof(keyhex));
	if (cli_has_opt(&a, OPT_PATH_STYLE) || cli_has_opt(&a, OPT_VHOST))
		json_object_set_new(body, "path_style", json_boolean(cli_has_opt(&a, OPT_PATH_STYLE)));
	if ((ca = cli_opt_last(&a, OPT_CA))) {
		char abs[4096];
		if (!realpath(ca, abs)) {
			rc = cli_die(CLI_EXIT_USAGE, "--ca-file %s: %s", ca, strerror(errno));
			goto out;
		}
		json_object_set_new(body, "ca_file", json_string(abs));
	}
	if ((v = cli_opt_last(&a, OPT_CHUNK)))
		json_object_set_new(body, "chunk_kib", json_integer(atoi(v)));
	if ((v = cli_opt_last(&a, OPT_THREADS)))
		json_object_set_new(body, "threads", json_integer(atoi(v)));
	if (client_call(&cl, "POST", "/v1/stores", body, NULL, NULL, 300000, &res, &err) < 0) {
		rc = cli_fail(&err);
		goto out;
	}
	rc = CLI_EXIT_OK;
	if (cli_has_opt(&a, CLI_OPT_JSON)) {
		out_json(res, 0);
	} else {
		show_store(res);
		printf("%s\n", json_is_true(json_object_get(res, "new")) ?
		       "the bucket was empty of kosa8: a new store was made in it" :
		       "the bucket holds this store already: its snapshots are usable here");
		if (json_is_true(json_object_get(res, "encrypted")) && !kf)
			printf("a new key was made; other hosts need it: kosa8 store key %s > "
			       "FILE, then store add ... --key-file FILE there\n", a.pos[1]);
	}
out:
	if (body) {
		static const char *const wipe[] = { "access_key", "secret_key", "key" };
		for (size_t i = 0; i < ARRAY_SIZE(wipe); i++) {
			json_t *s = json_object_get(body, wipe[i]);
			if (json_is_string(s))
				OPENSSL_cleanse((char *)json_string_value(s), json_string_length(s));
		}
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

static void store_row(struct out_table *t, const json_t *it, double now)
{
	const char *cells[6];
	(void)now;
	cells[0] = json_string_value(json_object_get(it, "name"));
	cells[1] = json_string_value(json_object_get(it, "endpoint"));
	cells[2] = json_string_value(json_object_get(it, "bucket"));
	cells[3] = json_string_value(json_object_get(it, "region"));
	cells[4] = json_is_true(json_object_get(it, "path_style")) ? "path" : "virtual";
	cells[5] = json_is_true(json_object_get(it, "encrypted")) ? "yes" : "no";
	out_table_row(t, cells);
}

static int show_stores(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "NAME", "ENDPOINT", "BUCKET", "REGION", "ADDRESSING",
					   "ENCRYPTED" };
	(void)ctx;
	out_table_array(json_object_get(res, "stores"), 6, hdr, store_row);
	return CLI_EXIT_OK;
}

static void snap_row(struct out_table *t, const json_t *it, double now)
{
	char sz[32], data[32], ago[32];
	const char *cells[6];
	const char *kind = json_string_value(json_object_get(it, "kind"));

	out_bytes((uint64_t)json_integer_value(json_object_get(it, "bytes")), sz, sizeof(sz));
	out_bytes((uint64_t)json_integer_value(json_object_get(it, "data")), data, sizeof(data));
	out_ago(out_time_parse(json_object_get(it, "created")), now, ago, sizeof(ago));
	cells[0] = json_string_value(json_object_get(it, "sandbox"));
	cells[1] = kind && !strcmp(kind, "paused") ? "(paused)" :
		   json_string_value(json_object_get(it, "label"));
	cells[2] = ago;
	cells[3] = sz;
	cells[4] = data;
	cells[5] = json_string_value(json_object_get(it, "kosa8_version"));
	out_table_row(t, cells);
}

static int show_snaps(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "SANDBOX", "LABEL", "PUSHED", "SIZE", "DATA",
					   "KOSA8" };
	json_int_t bad = json_integer_value(json_object_get(res, "unreadable"));
	(void)ctx;
	out_table_array(json_object_get(res, "snapshots"), 6, hdr, snap_row);
	if (bad)
		fprintf(stderr, "kosa8: %lld object(s) under manifests/ did not read back as this "
			"store's manifests (another key, damaged, or not kosa8's)\n", (long long)bad);
	return CLI_EXIT_OK;
}

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	cleanup_free char *path = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 0, 1, home, &a, &cl, &rc))
		return rc;
	if (a.npos) {
		cleanup_free char *enc = cli_urlenc(a.pos[0]);
		path = xasprintf("/v1/stores/%s/snapshots", enc);
		rc = cli_get_show(&cl, path, 0, cli_has_opt(&a, CLI_OPT_JSON), show_snaps, NULL);
	} else {
		rc = cli_get_show(&cl, "/v1/stores", 30000, cli_has_opt(&a, CLI_OPT_JSON),
				  show_stores, NULL);
	}
	return cli_end(&a, &cl, rc);
}

/* NAME: forget the store; STORE:SANDBOX/LABEL or STORE:SANDBOX: remove a snapshot. */
static int rm_one(struct client *cl, const char *item, void *ctx, struct k8_err *err)
{
	const char *colon = strchr(item, ':');
	cleanup_free char *path = NULL;
	json_t *res = NULL;
	int r;

	(void)ctx;
	if (colon) {
		cleanup_free char *store = xasprintf("%.*s", (int)(colon - item), item);
		cleanup_free char *se = cli_urlenc(store);
		cleanup_free char *rest = xstrdup(colon + 1);
		char *slash = strchr(rest, '/');
		if (slash)
			*slash = '\0';
		cleanup_free char *be = cli_urlenc(rest);
		cleanup_free char *le = slash ? cli_urlenc(slash + 1) : NULL;
		if (!rest[0] || colon == item || (slash && !slash[1]))
			return k8_err_set(err, -EINVAL, "give STORE:SANDBOX/LABEL (a checkpoint) or "
					  "STORE:SANDBOX (a paused sandbox)");
		path = le ? xasprintf("/v1/stores/%s/snapshots/%s/%s", se, be, le) :
			    xasprintf("/v1/stores/%s/snapshots/%s", se, be);
	} else {
		cleanup_free char *enc = cli_urlenc(item);
		path = xasprintf("/v1/stores/%s", enc);
	}
	r = client_call(cl, "DELETE", path, NULL, NULL, NULL, 60000, &res, err);
	json_decref(res);
	if (r == 0)
		printf(colon ? "removed %s from its store (its chunks go at the next store gc)\n" :
		       "removed store %s (its bucket is untouched)\n", item);
	return r;
}

static int cmd_rm(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	int rc;

	if (!cli_begin(self, argc, argv, NULL, 0, 1, -1, home, &a, &cl, &rc))
		return rc;
	rc = cli_each(&cl, a.pos, a.npos, rm_one, NULL);
	return cli_end(&a, &cl, rc);
}

static int cmd_gc(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "grace", 0, 1, OPT_GRACE },
					       { "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 } };
	struct cli_args a;
	struct client cl;
	cleanup_free char *enc = NULL, *path = NULL;
	json_t *body = json_object(), *res = NULL;
	const char *g;
	int rc, json;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc)) {
		json_decref(body);
		return rc;
	}
	json = cli_has_opt(&a, CLI_OPT_JSON);
	if ((g = cli_opt_last(&a, OPT_GRACE))) {
		uint64_t secs;
		if (k8_duration_parse(g, 365 * 86400, &secs) < 0) {
			json_decref(body);
			return cli_end(&a, &cl, cli_usage(self->name, "--grace %s: a duration such as "
							  "1h, 30m or 0", g));
		}
		json_object_set_new(body, "grace_s", json_integer((json_int_t)secs));
	}
	enc = cli_urlenc(a.pos[0]);
	path = xasprintf("/v1/stores/%s/gc", enc);
	rc = cli_post_progress(&cl, path, body, json, &res);
	if (rc == CLI_EXIT_OK && !json) {
		char sz[32];
		out_bytes((uint64_t)json_integer_value(json_object_get(res, "removed_bytes")), sz,
			  sizeof(sz));
		printf("store %s: %lld snapshot(s) name %lld chunk(s); removed %lld unnamed chunk(s) "
		       "(%s), kept %lld younger than the grace time\n", a.pos[0],
		       (long long)json_integer_value(json_object_get(res, "manifests")),
		       (long long)json_integer_value(json_object_get(res, "live_chunks")),
		       (long long)json_integer_value(json_object_get(res, "removed")), sz,
		       (long long)json_integer_value(json_object_get(res, "kept_young")));
	}
	json_decref(body);
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

static int cmd_key(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	cleanup_free char *enc = NULL, *path = NULL;
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, NULL, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	enc = cli_urlenc(a.pos[0]);
	path = xasprintf("/v1/stores/%s/key", enc);
	if (client_call(&cl, "GET", path, NULL, NULL, NULL, 30000, &res, &err) < 0) {
		rc = cli_fail(&err);
	} else {
		json_t *k = json_object_get(res, "key");
		printf("%s\n", json_string_value(k) ? json_string_value(k) : "");
		if (json_is_string(k))
			OPENSSL_cleanse((char *)json_string_value(k), json_string_length(k));
		rc = CLI_EXIT_OK;
	}
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

const struct cli_cmd cli_store_cmds[] = {
	{ "store add", cmd_add, "keep an S3 bucket's settings and keys as a snapshot store",
	  "Usage: kosa8 store add s3 NAME --endpoint URL --bucket B [--region R]\n"
	  "       (--access-key-stdin | --access-key-from-env) [--path-style | --virtual-hosted]\n"
	  "       [--ca-file FILE] [--encrypt | --key-file FILE] [--chunk-kib N] [--threads N]\n"
	  "       [--json]\n"
	  "\n"
	  "A snapshot store is a bucket of your own on any S3-compatible server (AWS S3, R2,\n"
	  "MinIO, ...) that holds checkpoints (kosa8 checkpoint push) and paused sandboxes\n"
	  "(kosa8 sandbox pause --to), so that this host or another forks or resumes them.\n"
	  "The daemon checks the bucket answers to these credentials and keeps them in its\n"
	  "home (0600, like kosa8 secret): never shown, logged or audited again. The bucket\n"
	  "gets a small marker object, kosa8-store; one already there must be this store's\n"
	  "(same encryption, same key).\n"
	  "\n"
	  "Options:\n"
	  "  --endpoint URL          http(s)://HOST[:PORT] of the S3 server\n"
	  "  --bucket B              the bucket (it must exist)\n"
	  "  --region R              its region, for the signature (default us-east-1; R2: auto)\n"
	  "  --access-key-stdin      read the access key id (first line) and the secret key\n"
	  "                          (second line) from stdin; on a terminal, asked for\n"
	  "  --access-key-from-env   take them from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY\n"
	  "  --path-style            HOST/BUCKET/KEY (the default, except on amazonaws.com)\n"
	  "  --virtual-hosted        BUCKET.HOST/KEY\n"
	  "  --ca-file FILE          trust the CAs in FILE for https (default: the system's)\n"
	  "  --encrypt               encrypt everything stored (AES-256-GCM) with a new random\n"
	  "                          key kept on this host: the bucket's operator sees only\n"
	  "                          ciphertext, and names that tell nothing\n"
	  "  --key-file FILE         encrypt with the key in FILE (64 hex digits, from `kosa8\n"
	  "                          store key NAME` on a host that has the store)\n"
	  "  --chunk-kib N           chunk size of what this host pushes (64-16384, default 1024)\n"
	  "  --threads N             transfers at once (1-16, default 4)\n"
	  "  --json                  the store's settings as one line\n"
	  "\n"
	  "Example:\n"
	  "  printf '%s\\n%s\\n' \"$AK\" \"$SK\" | kosa8 store add s3 mine --endpoint \\\n"
	  "      https://s3.example.com --bucket snaps --region us-east-1 --access-key-stdin\n" },
	{ "store ls", cmd_ls, "list the stores, or what one holds",
	  "Usage: kosa8 store ls [NAME] [--json]\n"
	  "\n"
	  "Without NAME: this host's stores. With NAME: the snapshots in that store, read\n"
	  "back from the bucket: sandbox, label (or \"(paused)\"), when pushed, size (the\n"
	  "files, holes included) and data (what the chunks hold), the kosa8 that pushed it.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 store ls mine\n" },
	{ "store rm", cmd_rm, "forget a store, or remove a snapshot from one",
	  "Usage: kosa8 store rm NAME... | STORE:SANDBOX/LABEL... | STORE:SANDBOX...\n"
	  "\n"
	  "NAME: forget store NAME on this host: its settings, credentials and key are\n"
	  "overwritten and removed. The bucket and what it holds are not touched; without\n"
	  "the key an encrypted store's snapshots cannot be read again, so keep a copy of it\n"
	  "(kosa8 store key NAME) if another host does not have it.\n"
	  "STORE:SANDBOX/LABEL: remove that checkpoint from the store; STORE:SANDBOX: the\n"
	  "sandbox paused there. Their chunks are removed by the next store gc, unless\n"
	  "another snapshot names them.\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 store rm mine:interp/clean\n"
	  "  kosa8 store rm mine\n" },
	{ "store gc", cmd_gc, "remove the chunks no snapshot names",
	  "Usage: kosa8 store gc NAME [--grace DURATION] [--json]\n"
	  "\n"
	  "Read every manifest of store NAME and remove each chunk none of them names and\n"
	  "that is older than the grace time (default 1h: a push under way has uploaded\n"
	  "chunks its manifest, written last, does not name yet). A manifest that does not\n"
	  "read back stops the collection before anything is removed. Do not run it while\n"
	  "another host pushes to the same store with a grace shorter than that push.\n"
	  "\n"
	  "Options:\n"
	  "  --grace DURATION  leave unnamed chunks younger than this (1h, 30m, 0)\n"
	  "  --json            progress lines, then {\"manifests\",\"live_chunks\",\"removed\",\n"
	  "                    \"removed_bytes\",\"kept_young\",\"grace_s\"}\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 store gc mine --grace 10m\n" },
	{ "store key", cmd_key, "print an encrypted store's key (for another host)",
	  "Usage: kosa8 store key NAME\n"
	  "\n"
	  "Print the key of encrypted store NAME (64 hex digits) on stdout, for `store add ...\n"
	  "--key-file FILE` on another host. Whoever has it reads everything in the store.\n"
	  "Audited (store.key).\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 store key mine > mine.key && chmod 600 mine.key\n" },
	{ NULL, NULL, NULL, NULL },
};
