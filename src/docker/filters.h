/* SPDX-License-Identifier: Apache-2.0 */
/* filters.h - the `filters` query parameter of the list endpoints (GET /containers/json,
 * /images/json): JSON {"name": ["a", "b"]} or the older map form {"name": {"a": true}},
 * both accepted as moby's filters.FromJSON does, and the matching helpers the list
 * handlers use. Values of one filter name are OR'ed; different names are AND'ed, except
 * label, whose values must all match (moby's MatchKVList). */
#ifndef K8_DOCKER_FILTERS_H
#define K8_DOCKER_FILTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define DF_FILTER_NAMES_MAX 16
#define DF_FILTER_VALUES_MAX 64    /* per name */
#define DF_FILTER_VALUE_LEN 256
#define DF_FILTER_JSON_MAX 16384

struct dfilter_field {
	char *name;
	char **values;
	size_t n;
};

struct dfilters {
	struct dfilter_field f[DF_FILTER_NAMES_MAX];
	size_t n;
};

/* Parse the raw (URL-decoded) parameter; NULL or "" gives no filters. Every name must be
 * in `allowed` (NULL-terminated); anything else is moby's "invalid filter 'x'" (-EINVAL).
 * Returns 0 or -EINVAL/-E2BIG with a message; free with dfilters_free() either way. */
int dfilters_parse(const char *json, const char *const *allowed, struct dfilters *out,
		   struct k8_err *err);
void dfilters_free(struct dfilters *f);

/* The values given for `name`, or NULL (and *n 0) when the filter is absent. */
char *const *dfilters_get(const struct dfilters *f, const char *name, size_t *n);
bool dfilters_has(const struct dfilters *f, const char *name);

/* Check status= values against the container states Docker knows
 * (created restarting running removing paused exited dead); -EINVAL with moby's
 * message otherwise. */
int dfilters_check_status(const struct dfilters *f, struct k8_err *err);

/* until= (the prune endpoints): at most one value, as moby's timetypes.GetTimestamp
 * reads it: a Go duration back from `now_ns` ("24h", "1h30m", "90s", "1.5h"), a Unix time
 * ("1700000000", "1700000000.5"), RFC 3339 with a zone, or a date and time without one
 * ("2006-01-02", "2006-01-02T15:04", "2006-01-02T15:04:05"), read as the host's local
 * time like moby. *until_ns is INT64_MAX when the filter is absent. -EINVAL with a message for
 * anything else or a second value. */
int dfilters_until(const struct dfilters *f, int64_t now_ns, int64_t *until_ns,
		   struct k8_err *err);

/* label=: every value "key" (present) or "key=value" (equal) must match the object's
 * labels, given as n pairs keys[i] = vals[i]. True when no label filter is given. */
bool dfilters_match_labels(const struct dfilters *f, const char *const *keys,
			   const char *const *vals, size_t n);

/* name= and id=: moby matches each value as a regular expression against the name
 * (with its leading '/') or the full id, unanchored, so "web" finds "/my-web-1". kosa8
 * supports the regular expressions clients send: literals, '.', '^', '$', the
 * quantifiers '*', '+', '?' and '\' escapes. A value using anything else (classes,
 * groups, alternation) matches only itself literally. True when the filter is absent or
 * one value matches. */
bool dfilters_match_regex(const struct dfilters *f, const char *name, const char *subject);

/* status=: true when absent or one value equals `state`. */
bool dfilters_match_exact(const struct dfilters *f, const char *name, const char *value);

/* ancestor=: true when absent or one value names the container's image: the same
 * reference (a missing tag means ":latest", "docker.io/library/" is implied), or a
 * prefix of at least 4 hex digits of its id, with or without "sha256:". kosa8 does not
 * match images built FROM the given one (moby does); docs/docker.md. */
bool dfilters_match_ancestor(const struct dfilters *f, const char *image_ref,
			     const char *image_id);

/* reference=: true when absent or one value matches one of the image's familiar names
 * ("python:3.12-slim", "127.0.0.1:5000/library/python:3.12"), as moby's FamiliarMatch:
 * a shell glob ('*' stops at '/') against the whole name, then against the name without
 * its tag, so "python" and "py*" find "python:3.12-slim". */
bool dfilters_match_reference(const struct dfilters *f, const char *const *names, size_t n);

/* Unanchored match of the regular-expression subset above; exposed for tests. A pattern
 * outside the subset returns -1. Otherwise 1 (match) or 0. */
int dfilters_regex(const char *re, const char *s);

#endif
