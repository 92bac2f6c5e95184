/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_keys.c - API keys of the E2B API, stored hashed (e2b_keys.h).
 *
 * A key is "e2b_" and 40 hex digits from getrandom() (160 bits: the Python SDK's format
 * check passes). Only its SHA-256 is kept, with an id to name it by, the first 8
 * characters to recognise it, a name and a date; the key itself is in one answer and
 * nowhere else (not in the log, not in the audit record). The file is read at each check
 * (it is small), so a key removed by one daemon call is refused by the next request; a
 * read-modify-write holds an flock on the folder so two creates never lose one. */
#include "daemon/e2b_keys.h"
#include "daemon/api_route.h"
#include "daemon/daemon.h"
#include "common/sha.h"
#include "e2b/control.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEYS_MAX 1000

/* $home/e2b (0700), locked with flock while fd stays open (shared for a reader). A
 * negative errno with err on failure. */
static int keys_dir(struct daemon *d, char *path, size_t n, bool shared, struct k8_err *err)
{
	char dir[4200];
	int fd;

	snprintf(dir, sizeof(dir), "%s/e2b", d->home);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return k8_err_set(err, -errno, "creating %s: %s", dir, strerror(errno));
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return k8_err_set(err, -errno, "opening %s: %s", dir, strerror(errno));
	flock(fd, shared ? LOCK_SH : LOCK_EX);
	snprintf(path, n, "%s/keys.json", dir);
	return fd;
}

static json_t *keys_read(const char *path)
{
	char *text = NULL;
	size_t len;
	json_t *v = NULL;

	if (read_file(path, 4 << 20, &text, &len) == 0)
		v = json_loadb(text, len, 0, NULL);
	free(text);
	if (!json_is_array(v)) {
		json_decref(v);
		v = json_array();
	}
	return v;
}

static int keys_write(const char *path, json_t *keys, struct k8_err *err)
{
	char *t = json_dumps(keys, JSON_COMPACT | JSON_INDENT(1));
	int r = t ? write_file_atomic(path, t, strlen(t), 0600) : -ENOMEM;

	free(t);
	return r ? k8_err_set(err, r, "writing %s: %s", path, strerror(-r)) : 0;
}

int e2b_key_check(struct daemon *d, const char *key)
{
	char path[4300], hash[65];
	json_t *keys, *v;
	struct k8_err err = { 0 };
	bool ok = false;
	size_t i;
	int fd;

	if (!key || strlen(key) > 256 || !e2b_key_format_ok(key))
		return -EKEYREJECTED;
	fd = keys_dir(d, path, sizeof(path), true, &err);
	if (fd < 0)
		return -EKEYREJECTED;
	keys = keys_read(path);
	close(fd);
	sha256_hex(key, strlen(key), hash);
	json_array_foreach(keys, i, v) {
		const char *h = json_string_value(json_object_get(v, "sha256"));
		ok = ok | (h && e2b_secret_eq(h, hash));
	}
	json_decref(keys);
	return ok ? 0 : -EKEYREJECTED;
}

int e2b_keys_api_create(struct api_call *call)
{
	const char *name = "";
	char key[E2B_KEY_LEN + 1], hash[65], id[E2B_TOKEN_LEN + 2], path[4300], now[K8_TIME_LEN];
	char prefix[9];
	json_t *keys;
	int fd, r;

	if (api_body_str(call, "name", API_OPTIONAL, 64, &name))
		return call->err.code;
	for (const char *c = name; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return k8_err_set(&call->err, -EINVAL, "field 'name' holds a control character");
	/* the id: "k" and 8 random hex digits; the prefix: "e2b_" and the key's first 4 */
	id[0] = 'k';
	if (e2b_key_new(key) || e2b_token_new(id + 1))
		return k8_err_set(&call->err, -EIO, "getrandom failed");
	id[9] = '\0';
	snprintf(prefix, sizeof(prefix), "%.8s", key);
	sha256_hex(key, strlen(key), hash);
	fd = keys_dir(call->d, path, sizeof(path), false, &call->err);
	if (fd < 0)
		return fd;
	keys = keys_read(path);
	if (json_array_size(keys) >= KEYS_MAX) {
		close(fd);
		json_decref(keys);
		return k8_err_set(&call->err, -ENOSPC, "%d keys exist: remove some first "
				  "(kosa8 e2b key rm ID)", KEYS_MAX);
	}
	k8_time_now(now, 0);
	json_array_append_new(keys, json_pack("{s:s,s:s,s:s,s:s,s:s}", "id", id, "name", name,
					      "prefix", prefix, "sha256", hash, "created", now));
	r = keys_write(path, keys, &call->err);
	close(fd);
	json_decref(keys);
	if (r) {
		explicit_bzero(key, sizeof(key));
		return r;
	}
	daemon_audit(call->d, "e2b.key.create", NULL,
		     json_pack("{s:s,s:s,s:s}", "id", id, "name", name, "prefix", prefix));
	call->out = json_pack("{s:s,s:s,s:s,s:s}", "id", id, "name", name, "key", key, "created",
			      now);
	explicit_bzero(key, sizeof(key));
	return 0;
}

int e2b_keys_api_list(struct api_call *call)
{
	char path[4300];
	json_t *keys, *v, *out = json_array();
	size_t i;
	int fd = keys_dir(call->d, path, sizeof(path), true, &call->err);

	if (fd < 0) {
		json_decref(out);
		return fd;
	}
	keys = keys_read(path);
	close(fd);
	json_array_foreach(keys, i, v)
		json_array_append_new(out, json_pack("{s:O?,s:O?,s:O?,s:O?}", "id",
						     json_object_get(v, "id"), "name",
						     json_object_get(v, "name"), "prefix",
						     json_object_get(v, "prefix"), "created",
						     json_object_get(v, "created")));
	json_decref(keys);
	call->out = json_pack("{s:o}", "keys", out);
	return 0;
}

int e2b_keys_api_rm(struct api_call *call)
{
	const char *id = api_param(call, "id");
	char path[4300];
	json_t *keys, *v;
	size_t i;
	int fd, r = -ENOENT;

	fd = keys_dir(call->d, path, sizeof(path), false, &call->err);
	if (fd < 0)
		return fd;
	keys = keys_read(path);
	json_array_foreach(keys, i, v)
		if (!strcmp(json_string_value(json_object_get(v, "id")) ?: "", id)) {
			json_array_remove(keys, i);
			r = keys_write(path, keys, &call->err);
			break;
		}
	close(fd);
	json_decref(keys);
	if (r == -ENOENT)
		return k8_err_set(&call->err, -ENOENT, "no E2B API key '%.40s'; list them with "
				  "`kosa8 e2b key list`", id);
	if (r)
		return r;
	daemon_audit(call->d, "e2b.key.rm", NULL, json_pack("{s:s}", "id", id));
	call->out = json_pack("{s:s}", "id", id);
	return 0;
}
