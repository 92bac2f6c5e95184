/* SPDX-License-Identifier: Apache-2.0 */
/* api_route.c - the API's path matcher and its checked field getters (api.h).
 *
 * Everything here is pure: no HTTP server, no daemon state, so every listener's table
 * shares it, and the unit tests and the fuzz target (tests/fuzz/fuzz_api.c) drive it
 * directly with hostile paths, methods, bodies and query strings.
 */
#include "daemon/api_route.h"
#include "docker/query.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- paths ---- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decode src[0..n) into out[outlen]. As libmicrohttpd's lenient decoder did
 * before: "%HH" with two hex digits is one byte, any other '%' stays literal. Returns
 * the decoded length, -E2BIG when it does not fit with its NUL, -EINVAL for a "%00". */
static ssize_t pct_decode(const char *src, size_t n, char *out, size_t outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		char c = src[i];
		if (c == '%' && i + 2 < n && hexval(src[i + 1]) >= 0 && hexval(src[i + 2]) >= 0) {
			c = (char)(hexval(src[i + 1]) << 4 | hexval(src[i + 2]));
			if (!c)
				return -EINVAL;
			i += 2;
		}
		if (o + 1 >= outlen)
			return -E2BIG;
		out[o++] = c;
	}
	if (o >= outlen)
		return -E2BIG;
	out[o] = '\0';
	return (ssize_t)o;
}

int api_path_split(const char *url, struct api_path *p, struct k8_err *err)
{
	const char *s = url;

	p->n = 0;
	while (*s == '/')
		s++;
	while (*s) {
		size_t len = strcspn(s, "/");
		if (p->n == API_SEG_MAX)
			return k8_err_set(err, -ENOENT, "no such endpoint: more than %d path segments",
					  API_SEG_MAX);
		ssize_t r = pct_decode(s, len, p->seg[p->n], sizeof(p->seg[0]));
		if (r == -E2BIG)
			return k8_err_set(err, -EINVAL, "path segment %d is longer than %d bytes",
					  p->n + 1, API_SEG_LEN - 1);
		if (r < 0)
			return k8_err_set(err, -EINVAL, "path segment %d holds a NUL byte (%%00)",
					  p->n + 1);
		p->n++;
		s += len;
		while (*s == '/')
			s++;
	}
	return 0;
}

/* Does `pattern` match `p`? Collect its parameters into *m. */
static bool pattern_match(const char *pattern, const struct api_path *p, struct api_match *m)
{
	const char *s = pattern;
	int i = 0;

	m->nparams = 0;
	while (*s == '/')
		s++;
	while (*s) {
		size_t len = strcspn(s, "/");
		if (i >= p->n)
			return false;
		if (len >= 2 && s[0] == '{' && s[len - 1] == '}') {
			if (m->nparams == API_PARAM_MAX)
				return false;   /* a table bug; unit-tested away */
			m->params[m->nparams++] = (struct api_param){ s + 1, len - 2, p->seg[i] };
		} else if (strlen(p->seg[i]) != len || memcmp(p->seg[i], s, len)) {
			return false;
		}
		i++;
		s += len;
		while (*s == '/')
			s++;
	}
	return i == p->n;
}

int api_match(const struct api_route *table, size_t n, const char *method,
	      const struct api_path *p, struct api_match *m, char *allow, size_t allowlen)
{
	size_t used = 0;
	bool path_known = false;

	if (allowlen)
		allow[0] = '\0';
	for (size_t k = 0; k < n; k++) {
		struct api_match tm;
		if (!pattern_match(table[k].pattern, p, &tm))
			continue;
		if (!strcmp(table[k].method, method)) {
			*m = tm;
			m->route = &table[k];
			return 0;
		}
		path_known = true;
		bool seen = false;      /* list each method once */
		for (size_t j = 0; j < k && !seen; j++)
			seen = !strcmp(table[j].method, table[k].method) &&
			       pattern_match(table[j].pattern, p, &tm);
		if (!seen && allowlen) {
			int w = snprintf(allow + used, allowlen - used, "%s%s", used ? ", " : "",
					 table[k].method);
			if (w > 0 && (size_t)w < allowlen - used)
				used += (size_t)w;
		}
	}
	return path_known ? -EBADRQC : -ENOENT;
}

const char *api_param(const struct api_call *call, const char *name)
{
	size_t len = strlen(name);

	for (int i = 0; i < call->match.nparams; i++) {
		const struct api_param *q = &call->match.params[i];
		if (q->name_len == len && !memcmp(q->name, name, len))
			return q->value;
	}
	return "";
}

/* ---- body fields ---- */

/* The field, or NULL when it is absent or JSON null (both mean "not given"). */
static json_t *body_field(struct api_call *call, const char *field)
{
	json_t *v = json_object_get(call->body, field);
	return json_is_null(v) ? NULL : v;
}

int api_body_str(struct api_call *call, const char *field, int required, size_t max,
		 const char **out)
{
	json_t *v = body_field(call, field);
	size_t len;

	if (!v && !required)
		return 0;
	if (!json_is_string(v) || (len = json_string_length(v)) > max ||
	    (required && len == 0) || strlen(json_string_value(v)) != len)
		return k8_err_set(&call->err, -EINVAL, "field '%s' must be a string of %s..%zu bytes",
				  field, required ? "1" : "0", max);
	*out = json_string_value(v);
	return 0;
}

int api_body_int(struct api_call *call, const char *field, int required, int64_t min,
		 int64_t max, int64_t *out)
{
	json_t *v = body_field(call, field);

	if (!v && !required)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return k8_err_set(&call->err, -EINVAL, "field '%s' must be an integer %" PRId64
				  "..%" PRId64, field, min, max);
	*out = json_integer_value(v);
	return 0;
}

int api_body_bool(struct api_call *call, const char *field, int required, bool *out)
{
	json_t *v = body_field(call, field);

	if (!v && !required)
		return 0;
	if (!json_is_boolean(v))
		return k8_err_set(&call->err, -EINVAL, "field '%s' must be true or false", field);
	*out = json_is_true(v);
	return 0;
}

/* ---- query arguments ---- */

/* The decoded value in buf, NULL when absent or empty, or -EINVAL when it does not fit or
 * holds a NUL. */
static int query_get(struct api_call *call, const char *key, char *buf, size_t len,
		     const char **out)
{
	const char *raw = call->query ? call->query(call->query_ctx, key) : NULL;

	*out = NULL;
	if (!raw || !*raw)
		return 0;
	if (pct_decode(raw, strlen(raw), buf, len) < 0)
		return -EINVAL;
	*out = buf;
	return 0;
}

int api_query_str(struct api_call *call, const char *key, char *buf, size_t len,
		  const char **out)
{
	const char *s;

	if (query_get(call, key, buf, len, &s) < 0)
		return k8_err_set(&call->err, -EINVAL, "query argument '%s' must be at most %zu "
				  "bytes, without NUL", key, len ? len - 1 : 0);
	if (s && *s)
		*out = s;
	return 0;
}

int api_query_u64(struct api_call *call, const char *key, uint64_t min, uint64_t max,
		  uint64_t *out)
{
	char buf[32];
	const char *s;
	uint64_t v = 0;

	if (query_get(call, key, buf, sizeof(buf), &s) < 0)
		goto bad;
	if (!s || !*s)
		return 0;
	for (const char *c = s; *c; c++) {
		if (*c < '0' || *c > '9' || v > (UINT64_MAX - (uint64_t)(*c - '0')) / 10)
			goto bad;
		v = v * 10 + (uint64_t)(*c - '0');
	}
	if (v < min || v > max)
		goto bad;
	*out = v;
	return 0;
bad:
	return k8_err_set(&call->err, -EINVAL, "query argument '%s' must be an integer %" PRIu64
			  "..%" PRIu64, key, min, max);
}

int api_query_bool(struct api_call *call, const char *key, bool *out)
{
	char buf[8];
	const char *s;

	if (query_get(call, key, buf, sizeof(buf), &s) < 0)
		goto bad;
	if (!s || !*s)
		return 0;
	if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes")) {
		*out = true;
		return 0;
	}
	if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no")) {
		*out = false;
		return 0;
	}
bad:
	return k8_err_set(&call->err, -EINVAL, "query argument '%s' must be 1, 0, true or false",
			  key);
}

/* ---- replies ---- */

int api_reply_job(struct api_call *call, api_job_fn fn, const char *arg)
{
	call->job.fn = fn;
	snprintf(call->job.arg, sizeof(call->job.arg), "%s", arg ? arg : "");
	return 0;
}

int api_reply_upgrade(struct api_call *call, struct exec_ctx *exec)
{
	call->exec = exec;
	return 0;
}

int api_reply_reader(struct api_call *call, const struct api_reader *rd)
{
	call->reader = *rd;
	return 0;
}

int api_take_body(struct api_call *call, const struct api_sink *sink)
{
	call->sink = *sink;
	return 0;
}

int api_reply_raw(struct api_call *call, enum api_raw_kind kind, const char *type,
		  void (*fn)(void *ctx, const struct api_conn *conn),
		  void (*free_fn)(void *ctx), void *ctx)
{
	call->raw.fn = fn;
	call->raw.free = free_fn;
	call->raw.ctx = ctx;
	call->raw.type = type;
	call->raw.kind = kind;
	return 0;
}

int api_path_split_docker(const char *url, struct api_path *p, struct k8_err *err)
{
	struct dq_path dp;
	char msg[256];
	int r;

	if (dq_split_path(url, &dp, msg, sizeof(msg)))
		return k8_err_set(err, -EINVAL, "%s", msg);
	r = api_path_split(dp.rest, p, err);
	if (!r && dq_image_segments(&p->seg[0][0], sizeof(p->seg[0]), &p->n, msg, sizeof(msg)))
		r = k8_err_set(err, -EINVAL, "%s", msg);
	return r;
}
