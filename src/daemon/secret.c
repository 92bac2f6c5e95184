/* SPDX-License-Identifier: Apache-2.0 */
/* secret.c - the daemon's secret store for the egress broker (docs/broker.md):
 * $KOSA8_HOME/secrets/ (0700), one file per secret named after it (0600, written
 * atomically). A value leaves this file only towards a broker (on a pipe or its control
 * socket), never into an answer, a log or the audit log: set and rm are audited with
 * the name only, and the list shows names and dates.
 *
 * Names: a letter or digit, then letters, digits, '-', '_', '.', at most 63 bytes (the
 * same rule as kosa8-broker's broker_secret_name_ok). Values: 1 to 4096 bytes of visible
 * ASCII, because the broker puts them in a header line. */
#include "daemon/daemon.h"
#include "daemon/secret.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/crypto.h>

bool secret_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > SECRET_NAME_MAX || !isalnum((unsigned char)name[0]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("-_.", name[i]))
			return false;
	return true;
}

bool secret_value_ok(const char *v, size_t n)
{
	if (n == 0 || n > SECRET_VALUE_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e)
			return false;
	return true;
}

static int secret_dir(const char *home, char *out, size_t n, bool create, struct k8_err *err)
{
	snprintf(out, n, "%s/secrets", home);
	if (!create)
		return 0;
	if (mkdir(out, 0700) < 0 && errno != EEXIST)
		return k8_err_set(err, -errno, "creating %s: %s", out, strerror(errno));
	struct stat st;
	if (lstat(out, &st) < 0 || !S_ISDIR(st.st_mode))
		return k8_err_set(err, -ENOTDIR, "%s is not a directory", out);
	if ((st.st_mode & 077) && chmod(out, 0700) < 0)
		return k8_err_set(err, -errno, "chmod 0700 %s: %s", out, strerror(errno));
	return 0;
}

static int secret_check_name(const char *name, struct k8_err *err)
{
	if (!secret_name_ok(name))
		return k8_err_set(err, -EINVAL, "bad secret name '%.80s': a letter or digit, then "
				  "letters, digits, '-', '_' or '.', at most %d characters", name,
				  SECRET_NAME_MAX);
	return 0;
}

int secret_set(const char *home, const char *name, const char *value, size_t n,
	       bool *replaced, struct k8_err *err)
{
	char dir[4200], path[4300];
	struct stat st;

	if (secret_check_name(name, err) < 0)
		return err->code;
	if (!secret_value_ok(value, n))
		return k8_err_set(err, -EINVAL, "secret '%s': the value must be 1 to %d bytes of "
				  "visible ASCII (no spaces, tabs or line breaks)", name,
				  SECRET_VALUE_MAX);
	if (secret_dir(home, dir, sizeof(dir), true, err) < 0)
		return err->code;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	*replaced = lstat(path, &st) == 0;
	int rc = write_file_atomic(path, value, n, 0600);
	if (rc < 0)
		return k8_err_set(err, rc, "writing secret '%s': %s", name, strerror(-rc));
	return 0;
}

int secret_remove(const char *home, const char *name, struct k8_err *err)
{
	char dir[4200], path[4300];

	if (secret_check_name(name, err) < 0)
		return err->code;
	secret_dir(home, dir, sizeof(dir), false, err);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int r = secret_wipe_file(path);
	if (r == -ENOENT)
		return k8_err_set(err, -ENOENT, "no secret '%s'; list them with `kosa8 secret ls`",
				  name);
	if (r < 0)
		return k8_err_set(err, r, "removing secret '%s': %s", name, strerror(-r));
	return 0;
}

int secret_wipe_file(const char *path)
{
	/* Overwrite before unlinking: the file system may keep the blocks, not the bytes. */
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return -ENOENT;
	if (fd >= 0) {
		struct stat st;
		char zero[512] = { 0 };
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
			for (off_t o = 0; o < st.st_size; o += (off_t)sizeof(zero))
				if (write(fd, zero, sizeof(zero)) < 0)
					break;
		fdatasync(fd);
		close(fd);
	}
	return unlink(path) < 0 ? -errno : 0;
}

int secret_read(const char *home, const char *name, char **value, size_t *n,
		struct k8_err *err)
{
	char dir[4200], path[4300];

	if (secret_check_name(name, err) < 0)
		return err->code;
	secret_dir(home, dir, sizeof(dir), false, err);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int rc = read_file(path, SECRET_VALUE_MAX, value, n);
	if (rc == -ENOENT)
		return k8_err_set(err, rc, "secret '%s' is not set; set it with `kosa8 secret set "
				  "%s --stdin`", name, name);
	if (rc < 0)
		return k8_err_set(err, rc, "reading secret '%s': %s", name, strerror(-rc));
	return 0;
}

void secret_wipe(char *value, size_t n)
{
	if (value)
		OPENSSL_cleanse(value, n);
	free(value);
}

static int secret_cmp(const void *a, const void *b)
{
	return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "name")),
		      json_string_value(json_object_get(*(json_t *const *)b, "name")));
}

int secret_list(const char *home, json_t **out, struct k8_err *err)
{
	char dir[4200], when[64];
	json_t *items[256];
	size_t n = 0;

	secret_dir(home, dir, sizeof(dir), false, err);
	DIR *dh = opendir(dir);
	if (!dh && errno != ENOENT)
		return k8_err_set(err, -errno, "reading %s: %s", dir, strerror(errno));
	for (struct dirent *e; dh && (e = readdir(dh)) && n < ARRAY_SIZE(items);) {
		struct stat st;
		if (!secret_name_ok(e->d_name) || strstr(e->d_name, ".tmp.") || fstatat(dirfd(dh), e->d_name, &st,
							    AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;       /* temp files of an atomic write, anything foreign */
		k8_time_fmt(when, (int64_t)st.st_mtime, -1);
		items[n++] = json_pack("{s:s,s:s}", "name", e->d_name, "updated", when);
	}
	if (dh)
		closedir(dh);
	qsort(items, n, sizeof(items[0]), secret_cmp);
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, items[i]);
	*out = json_pack("{s:o}", "secrets", arr);
	return 0;
}
