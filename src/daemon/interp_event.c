/* SPDX-License-Identifier: Apache-2.0 */
/* interp_event.c - the interpreter's wire, pure (interp_event.h, docs/interpreter.md).
 *
 * Everything here reads bytes that came from inside a sandbox: a driver that misbehaves,
 * or a container that put its own python3 in the driver's place. So a line is bounded
 * before it is parsed (interp_lines), parsed by jansson (its own nesting bound), and an
 * event is rebuilt from the fields we know, each of the type we expect and cut to its
 * bound; the rest is dropped.
 */
#include "daemon/interp_event.h"

#include <stdio.h>
#include <string.h>

/* ---- lines ---- */

void interp_lines_init(struct interp_lines *lr, size_t max)
{
	memset(lr, 0, sizeof(*lr));
	lr->max = max;
}

void interp_lines_free(struct interp_lines *lr)
{
	free(lr->buf);
	memset(lr, 0, sizeof(*lr));
}

int interp_lines_feed(struct interp_lines *lr, const void *p, size_t n,
		      int (*fn)(void *ctx, const char *line, size_t n), void *ctx)
{
	const char *s = p;

	while (n) {
		const char *nl = memchr(s, '\n', n);
		size_t take = nl ? (size_t)(nl - s) : n;

		if (lr->skipping) {
			if (nl)
				lr->skipping = false;
		} else if (lr->len + take + 1 > lr->max) {
			/* too long: forget what was kept of it, skip to its end */
			lr->len = 0;
			lr->dropped++;
			lr->skipping = !nl;
		} else {
			if (!lr->buf)
				lr->buf = xmalloc(lr->max);
			memcpy(lr->buf + lr->len, s, take);
			lr->len += take;
			if (nl) {
				size_t len = lr->len;
				lr->len = 0;
				int r = fn(ctx, lr->buf, len);
				if (r < 0)
					return r;
			}
		}
		if (!nl)
			break;
		s = nl + 1;
		n -= take + 1;
	}
	return 0;
}

/* ---- events ---- */

/* A string field cut to max bytes (at a UTF-8 boundary), with a note when cut. NULL when
 * absent or not a string. */
static json_t *str_cut(const json_t *o, const char *field, size_t max)
{
	json_t *v = json_object_get(o, field);
	const char *s;
	size_t n;

	if (!json_is_string(v))
		return NULL;
	s = json_string_value(v);
	n = json_string_length(v);
	if (n <= max)
		return json_stringn(s, n);
	while (max && ((unsigned char)s[max] & 0xc0) == 0x80)
		max--;
	char *t = xasprintf("%.*s\n[kosa8: cut at %zu of %zu bytes]", (int)max, s, max, n);
	json_t *r = json_string(t);
	free(t);
	return r;
}

/* "type/subtype": a MIME type as result data may carry (lowercase, 3-100 bytes). */
static bool mime_ok(const char *k)
{
	const char *slash = strchr(k, '/');
	size_t n = strlen(k);

	if (!slash || slash == k || n < 3 || n > 100 || !slash[1])
		return false;
	for (const char *c = k; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
		      (c > slash && strchr(".+-_", *c)) || c == slash))
			return false;
	return true;
}

static int check_count(const json_t *o, json_int_t *n)
{
	json_t *v = json_object_get(o, "execution_count");

	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > (json_int_t)1 << 52)
		return -EINVAL;
	*n = json_integer_value(v);
	return 0;
}

int interp_event_check(const char *line, size_t n, json_t **out)
{
	json_error_t je;
	json_t *o, *ev = NULL, *v;
	const char *type;
	json_int_t cnt;
	int kind = -EINVAL;

	*out = NULL;
	while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
		n--;
	o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(o))
		goto out;
	type = json_string_value(json_object_get(o, "type"));
	if (!type)
		goto out;
	if (!strcmp(type, "connected")) {
		ev = json_pack("{s:s}", "type", "connected");
		kind = INTERP_EV_CONNECTED;
	} else if (!strcmp(type, "start") && check_count(o, &cnt) == 0) {
		ev = json_pack("{s:s,s:I}", "type", "start", "execution_count", cnt);
		kind = INTERP_EV_START;
	} else if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		v = json_object_get(o, "text");
		if (!json_is_string(v))
			goto out;
		ev = json_pack("{s:s,s:O}", "type", type, "text", v);
		kind = type[3] == 'o' ? INTERP_EV_STDOUT : INTERP_EV_STDERR;
	} else if (!strcmp(type, "result")) {
		json_t *data = json_object_get(o, "data"), *d2 = json_object(), *x;
		json_t *main_r = json_object_get(o, "is_main_result");
		const char *k;
		int nk = 0;

		if (!json_is_object(data) || (main_r && !json_is_boolean(main_r))) {
			json_decref(d2);
			goto out;
		}
		json_object_foreach(data, k, x) {
			if (!json_is_string(x) || !mime_ok(k) || nk == INTERP_MIME_MAX)
				continue;
			json_object_set(d2, k, x);
			nk++;
		}
		ev = json_pack("{s:s,s:b,s:o}", "type", "result", "is_main_result",
			       json_is_true(main_r), "data", d2);
		kind = INTERP_EV_RESULT;
	} else if (!strcmp(type, "error")) {
		json_t *name = str_cut(o, "name", INTERP_NAME_MAX);
		json_t *value = str_cut(o, "value", INTERP_VALUE_MAX);
		json_t *tb = str_cut(o, "traceback", INTERP_TB_MAX);

		if (!name) {
			json_decref(value);
			json_decref(tb);
			goto out;
		}
		ev = json_pack("{s:s,s:o,s:o,s:o}", "type", "error", "name", name, "value",
			       value ? value : json_string(""), "traceback",
			       tb ? tb : json_string(""));
		kind = INTERP_EV_ERROR;
	} else if (!strcmp(type, "end") && check_count(o, &cnt) == 0 &&
		   json_is_boolean(json_object_get(o, "ok"))) {
		ev = json_pack("{s:s,s:I,s:b}", "type", "end", "execution_count", cnt, "ok",
			       json_is_true(json_object_get(o, "ok")));
		kind = INTERP_EV_END;
	}
out:
	json_decref(o);
	if (!ev)
		return -EINVAL;
	*out = ev;
	return kind;
}

/* ---- the request ---- */

static void buf_add(char **b, size_t *len, size_t *cap, const void *p, size_t n)
{
	if (*len + n + 1 > *cap) {
		while (*len + n + 1 > *cap)
			*cap = *cap ? *cap * 2 : 4096;
		*b = realloc(*b, *cap);
		if (!*b)
			abort();
	}
	memcpy(*b + *len, p, n);
	*len += n;
	(*b)[*len] = '\0';
}

static void field_add(char **b, size_t *len, size_t *cap, const char *name, const char *p,
		      size_t n)
{
	char head[64];
	int w = snprintf(head, sizeof(head), "%s %zu\n", name, n);

	buf_add(b, len, cap, head, (size_t)w);
	buf_add(b, len, cap, p, n);
}

char *interp_request(const char *code, size_t code_len, const json_t *env, size_t *len)
{
	char *b = NULL;
	size_t cap = 0;
	const char *k;
	json_t *v;

	*len = 0;
	buf_add(&b, len, &cap, "K8CELL1\n", 8);
	field_add(&b, len, &cap, "code", code, code_len);
	json_object_foreach((json_t *)env, k, v) {
		char *kv = xasprintf("%s=%s", k, json_string_value(v) ? json_string_value(v) : "");
		field_add(&b, len, &cap, "env", kv, strlen(kv));
		free(kv);
	}
	buf_add(&b, len, &cap, "END\n", 4);
	return b;
}

int interp_env_check(const json_t *env, const char *field, struct k8_err *err)
{
	const char *k;
	json_t *v;

	if (!env || json_is_null(env))
		return 0;
	if (!json_is_object(env) || json_object_size(env) > INTERP_ENV_MAX)
		return k8_err_set(err, -EINVAL, "field '%s' must be an object of at most %d "
				  "variables, {\"NAME\": \"value\"}", field, INTERP_ENV_MAX);
	json_object_foreach((json_t *)env, k, v) {
		bool ok = *k && !(*k >= '0' && *k <= '9') && strlen(k) <= 255;
		for (const char *c = k; ok && *c; c++)
			ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			     (*c >= '0' && *c <= '9') || *c == '_';
		if (!ok)
			return k8_err_set(err, -EINVAL, "field '%s': '%.60s' is not a variable name "
					  "(letters, digits and _, not starting with a digit)",
					  field, k);
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
		    json_string_length(v) > 65536)
			return k8_err_set(err, -EINVAL, "field '%s': the value of %s must be a "
					  "string of at most 65536 bytes without NUL", field, k);
	}
	return 0;
}

int interp_id_parse(const char *id, char ctr[13])
{
	size_t n = strlen(id);

	if (n < 14 || n > INTERP_ID_LEN || id[12] != '-')
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (i == 12)
			continue;
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= (i < 12 ? 'f' : 'z'))))
			return -EINVAL;
	}
	memcpy(ctr, id, 12);
	ctr[12] = '\0';
	return 0;
}
