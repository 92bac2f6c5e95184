/* SPDX-License-Identifier: Apache-2.0 */
/* test_daemon_secret.c - the daemon's secret store (src/daemon/secret.c) on a temporary
 * home: modes of the directory and files, replace, list (names and dates only, sorted,
 * temp files and foreign entries left out), read, remove (and removing twice), and the
 * name and value rules. */
#include "daemon/secret.h"
#include "t.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int main(void)
{
	char home[] = "/tmp/k8sut.XXXXXX";
	struct k8_err err = { 0 };
	bool replaced = true;
	char path[256];
	struct stat st;

	if (!mkdtemp(home))
		return 1;
	CHECK_EQ_INT(secret_set(home, "openai", "sk-one", 6, &replaced, &err), 0);
	CHECK(!replaced);
	snprintf(path, sizeof(path), "%s/secrets", home);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);
	snprintf(path, sizeof(path), "%s/secrets/openai", home);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	CHECK_EQ_INT(secret_set(home, "openai", "sk-two", 6, &replaced, &err), 0);
	CHECK(replaced);
	CHECK_EQ_INT(secret_set(home, "anthropic", "ak", 2, &replaced, &err), 0);

	char *v = NULL;
	size_t n = 0;
	CHECK_EQ_INT(secret_read(home, "openai", &v, &n, &err), 0);
	CHECK(n == 6 && v && !strcmp(v, "sk-two"));
	secret_wipe(v, n);

	/* a leftover temp file and a foreign entry are not secrets */
	snprintf(path, sizeof(path), "%s/secrets/openai.tmp.123", home);
	FILE *f = fopen(path, "w");
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/secrets/.hidden", home);
	f = fopen(path, "w");
	if (f)
		fclose(f);
	json_t *out = NULL;
	CHECK_EQ_INT(secret_list(home, &out, &err), 0);
	json_t *arr = json_object_get(out, "secrets");
	CHECK_EQ_INT(json_array_size(arr), 2);
	CHECK_STR(json_string_value(json_object_get(json_array_get(arr, 0), "name")), "anthropic");
	CHECK_STR(json_string_value(json_object_get(json_array_get(arr, 1), "name")), "openai");
	CHECK_EQ_INT(json_object_size(json_array_get(arr, 1)), 2);   /* name, updated */
	char *dump = json_dumps(out, 0);
	CHECK(dump && !strstr(dump, "sk-two"));
	free(dump);
	json_decref(out);

	CHECK_EQ_INT(secret_remove(home, "openai", &err), 0);
	struct k8_err e2 = { 0 };
	CHECK_EQ_INT(secret_remove(home, "openai", &e2), -ENOENT);
	CHECK(strstr(e2.msg, "kosa8 secret ls") != NULL);
	struct k8_err e3 = { 0 };
	CHECK_EQ_INT(secret_read(home, "openai", &v, &n, &e3), -ENOENT);

	static const char *const bad_names[] = { "", ".x", "-x", "a/b", "..", "a b", "x\n",
		"0123456789012345678901234567890123456789012345678901234567890123" };
	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		struct k8_err e = { 0 };
		CHECK_EQ_INT(secret_set(home, bad_names[i], "v", 1, &replaced, &e), -EINVAL);
	}
	static const char *const bad_values[] = { "", "a b", "a\r\nX: y", "tab\there" };
	for (size_t i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++) {
		struct k8_err e = { 0 };
		CHECK_EQ_INT(secret_set(home, "x", bad_values[i], strlen(bad_values[i]), &replaced, &e),
			     -EINVAL);
		CHECK(!strstr(e.msg, bad_values[i]) || !bad_values[i][0]);
	}
	char big[5000];
	memset(big, 'a', sizeof(big));
	CHECK_EQ_INT(secret_set(home, "x", big, sizeof(big), &replaced, &err), -EINVAL);
	CHECK(secret_name_ok("a.b-c_d") && secret_value_ok("sk-ant-api03-x", 14));

	rm_rf(home);
	return T_DONE();
}
