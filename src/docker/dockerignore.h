/* SPDX-License-Identifier: Apache-2.0 */
/* dockerignore.h - .dockerignore patterns against build-context paths, with moby's
 * patternmatcher semantics: Go filepath.Match syntax (* ? [class] \escape), "**" for any
 * number of directories, "!" exceptions where the last matching line wins, and a pattern
 * that matches a directory also matching everything below it. The same matcher serves
 * COPY/ADD source globs (dignore_glob). Pure functions. */
#ifndef K8_DOCKER_DOCKERIGNORE_H
#define K8_DOCKER_DOCKERIGNORE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/util.h"

#define DIGNORE_FILE_MAX (1 << 20)   /* bytes of .dockerignore accepted */
#define DIGNORE_PATTERNS_MAX 4096
#define DIGNORE_PATTERN_LEN 4096

struct dignore_pat;

struct dignore {
	struct dignore_pat *p;
	size_t n;
};

/* Parse a .dockerignore file of n bytes: a UTF-8 BOM is dropped; lines starting with '#'
 * are comments; each line is trimmed, "!" marks an exception, the pattern is cleaned
 * like Go's filepath.Clean and a leading '/' dropped. Returns 0 or -EINVAL/-E2BIG with a
 * message naming the line (an unterminated '[', a trailing '\'). Free with
 * dignore_free() either way. */
int dignore_parse(const char *text, size_t n, struct dignore *out, struct k8_err *err);
void dignore_free(struct dignore *ig);

/* Is the context path (relative, '/'-separated, e.g. "src/a.c") excluded? The path is
 * cleaned first; "." (the context root) is never excluded. */
bool dignore_excluded(const struct dignore *ig, const char *path);

/* One Go filepath.Match-style glob (plus "**") against a whole path: 1 match, 0 no
 * match, -EINVAL for a malformed pattern. */
int dignore_glob(const char *pattern, const char *path);

/* Go's filepath.Clean for relative '/' paths, in place: collapses "//" and "/./",
 * resolves "..", drops a trailing '/'; "" becomes "." (so the buffer must hold at least
 * two bytes). A leading ".." that cannot be
 * resolved is kept (the caller decides: the builder refuses paths leaving the context). */
void dignore_clean(char *path);

#endif
