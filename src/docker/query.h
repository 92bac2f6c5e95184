/* SPDX-License-Identifier: Apache-2.0 */
/* query.h - the Docker Engine API's request-path and query-string conventions: the
 * optional /v1.NN/ version prefix and moby's boolean query values. Pure functions, no I/O. */
#ifndef K8_DOCKER_QUERY_H
#define K8_DOCKER_QUERY_H

#include <stdbool.h>
#include <stddef.h>

/* The API versions the Docker layer answers: /v1.24/ .. /v1.47/ and bare paths. */
#define DQ_MIN_MINOR 24
#define DQ_MAX_MINOR 47
/* What /_ping's Api-Version and /version's ApiVersion announce (docs/docker.md). */
#define DQ_API_VERSION "1.47"

struct dq_path {
	int major, minor;   /* 0, 0 for an unversioned path */
	const char *rest;   /* the route inside `path`, always starting with '/' */
};

/* Split "/v1.44/containers/json" into version 1.44 and "/containers/json"; a bare path
 * ("/version") gives 0.0 and the path itself. Returns 0; -EINVAL with a message in
 * `msg` (Docker's own wording, 400) for a version outside 1.24..1.47 or a malformed
 * one. A path that does not start with "/v<digit>" is bare ("/version" is). */
int dq_split_path(const char *path, struct dq_path *out, char *msg, size_t msgsz);

/* The image routes' name rule: the docker CLI sends "/images/127.0.0.1:5000/py:1/json"
 * unescaped, so below `images` every segment up to a final json, tag, push, history or
 * get (all of them when there is none: DELETE) is one name, joined with '/'. `seg` holds
 * *n decoded segments, each `stride` bytes (with its NUL); the name goes into seg[1] and
 * *n becomes 2 or 3. Paths of other routes are left as they are. Returns 0, or -EINVAL
 * with a message in `msg` when the joined name does not fit one segment. */
int dq_image_segments(char *seg, size_t stride, int *n, char *msg, size_t msgsz);

/* moby's BoolValue: "", "0", "no", "false", "none" (any case, spaces trimmed) are false,
 * anything else is true. NULL (parameter absent) is false. */
bool dq_bool(const char *v);
/* Same, but an absent or empty value gives `def` (moby's BoolValueOrDefault). */
bool dq_bool_default(const char *v, bool def);

/* A non-negative decimal integer query value no larger than `max` ("tail=20", "t=10").
 * Returns 0 and sets *out, or -EINVAL for anything else (signs, spaces, overflow). */
int dq_uint(const char *v, unsigned long long max, unsigned long long *out);

#endif
