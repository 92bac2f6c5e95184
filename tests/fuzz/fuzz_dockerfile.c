/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dockerfile.c - libFuzzer target: arbitrary bytes as a Dockerfile from a build
 * context (parsed, then every instruction resolved with two build args and a base-image
 * environment, and a cache key taken), and as a .dockerignore matched against a few paths.
 *
 * Any abort() below is a broken invariant: a parse that succeeded with no instruction or
 * past the limits, a line number outside the file, a failure without a message. */
#include "docker/dockerfile.h"
#include "docker/dockerignore.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	struct dockerfile *df = NULL;
	struct k8_err err = { 0 };
	size_t lines = 1;

	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	int rc = df_parse(text, size, &df, &err);
	if (rc < 0 && (!err.code || !err.msg[0]))
		abort();
	if (rc == 0) {
		static const char *const bk[] = { "VER", "HTTP_PROXY" };
		static const char *const bv[] = { "1.0", "http://p:1" };
		static const char *const base[] = { "PATH=/usr/bin", "HOME=/root" };
		struct df_state st;
		if (!df || df->n == 0 || df->n > DF_MAX_INST)
			abort();
		df_state_init(&st, df, bk, bv, 2);
		for (size_t i = 0; i < df->n; i++) {
			struct df_step s;
			struct k8_err e = { 0 };
			char key[65];
			if (df->inst[i].line == 0 || df->inst[i].line > lines)
				abort();
			if (df_step(&st, &df->inst[i], &s, &e)) {
				if (!e.msg[0] && e.code != -ENOMEM)
					abort();
				break;
			}
			if (s.kind == DF_FROM) {
				df_state_set_env(&st, base, 2);
				df_state_set_workdir(&st, "/srv");
			}
			if (s.kind == DF_WORKDIR && (!st.workdir || st.workdir[0] != '/'))
				abort();
			if (df_step_key("sha256:parent", &s, NULL, key) == 0 && strlen(key) != 64)
				abort();
			df_step_free(&s);
		}
		const char *unused[4];
		df_state_unused(&st, unused, 4);
		df_state_free(&st);
		df_free(df);
	}

	struct dignore ig;
	if (dignore_parse(text, size, &ig, &err) == 0) {
		static const char *const paths[] = { "a", "src/main.c", "docs/x/y.md", ".git/HEAD",
						     "Dockerfile", "../x", "" };
		for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
			dignore_excluded(&ig, paths[i]);
		dignore_free(&ig);
	}
	/* The input as one glob against a path made of itself. */
	if (size < 512) {
		char *pat = strndup(text, size);
		if (pat) {
			dignore_glob(pat, "src/a/b/c.txt");
			dignore_glob("**/*.c", pat);
			free(pat);
		}
	}
	return 0;
}
