/* SPDX-License-Identifier: Apache-2.0 */
/* code.c - the code interpreter's wire: /execute, /contexts, the stream's lines (code.h). */
#include "e2b/code.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* A language field: absent, null or Python. kosa8's interpreter is Python's only. */
static int code_language(json_t *req, struct k8_err *err)
{
	json_t *v = json_object_get(req, "language");
	const char *l = json_string_value(v);

	if (!v || json_is_null(v))
		return 0;
	if (!l)
		return k8_err_set(err, -EINVAL, "field 'language' must be a string");
	if (!strcmp(l, "python") || !strcmp(l, "python3"))
		return 0;
	return k8_err_set(err, -ENOTSUP, "language '%.40s' is not supported by kosa8: its "
			  "interpreter runs Python only", l);
}

int e2b_code_exec_parse(json_t *req, const char **ctx, json_t **cell, struct k8_err *err)
{
	json_t *code = json_object_get(req, "code"), *id = json_object_get(req, "context_id");
	json_t *env = json_object_get(req, "env_vars");
	int r;

	*ctx = NULL;
	*cell = NULL;
	if (!json_is_string(code))
		return k8_err_set(err, -EINVAL, "field 'code' must be a string");
	if (id && !json_is_null(id) && (!json_is_string(id) || !json_string_length(id) ||
					 json_string_length(id) > E2B_CTX_ID_MAX))
		return k8_err_set(err, -EINVAL, "field 'context_id' must be a context's id");
	if (env && !json_is_null(env) && !json_is_object(env))
		return k8_err_set(err, -EINVAL, "field 'env_vars' must be an object of strings");
	if ((r = code_language(req, err)))
		return r;
	/* context and language together are refused by the client itself; here the context
	 * wins, as on E2B's server */
	*ctx = json_string_value(id);
	*cell = json_pack("{s:O}", "code", code);
	if (env && json_object_size(env))
		json_object_set(*cell, "env", env);
	return 0;
}

int e2b_code_ctx_parse(json_t *req, const char **cwd, struct k8_err *err)
{
	json_t *v = json_object_get(req, "cwd");

	*cwd = NULL;
	if (v && !json_is_null(v) && !json_is_string(v))
		return k8_err_set(err, -EINVAL, "field 'cwd' must be a string");
	*cwd = json_string_value(v);
	return code_language(req, err);
}

/* Jupyter's MIME types as E2B's fields (api/models/result.py of E2B's server); the
 * JSON-valued ones are objects on E2B's wire, strings in kosa8's events. */
static const struct {
	const char *mime, *field;
	bool json;
} code_mimes[] = {
	{ "text/plain", "text", false },
	{ "text/html", "html", false },
	{ "text/markdown", "markdown", false },
	{ "image/svg+xml", "svg", false },
	{ "image/png", "png", false },
	{ "image/jpeg", "jpeg", false },
	{ "application/pdf", "pdf", false },
	{ "text/latex", "latex", false },
	{ "application/json", "json", true },
	{ "application/javascript", "javascript", false },
	{ "e2b/data", "data", true },
	{ "e2b/chart", "chart", true },
};

/* A result's MIME bundle as E2B's fields. */
static json_t *code_result(const json_t *ev)
{
	json_t *data = json_object_get(ev, "data"), *out, *extra = json_object(), *v;
	const char *mime;

	out = json_pack("{s:s,s:b}", "type", "result", "is_main_result",
			json_is_true(json_object_get(ev, "is_main_result")));
	json_object_foreach(data, mime, v) {
		const char *s = json_string_value(v);
		size_t i, n = json_string_length(v);

		if (!s)
			continue;
		for (i = 0; i < ARRAY_SIZE(code_mimes) && strcmp(mime, code_mimes[i].mime); i++)
			;
		if (i == ARRAY_SIZE(code_mimes)) {
			json_object_set(extra, mime, v);
		} else if (code_mimes[i].json) {
			json_t *parsed = json_loadb(s, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
						    NULL);
			json_object_set_new(out, code_mimes[i].field, parsed ? parsed : json_incref(v));
		} else if (!strcmp(code_mimes[i].field, "text") && n >= 2 && s[0] == '\'' &&
			   s[n - 1] == '\'') {
			/* a repr'd str, as E2B's server shows it: without its quotes */
			json_object_set_new(out, "text", json_stringn(s + 1, n - 2));
		} else {
			json_object_set(out, code_mimes[i].field, v);
		}
	}
	if (json_object_size(extra))
		json_object_set(out, "extra", extra);
	json_decref(extra);
	return out;
}

/* ev's field k (a new reference), or dflt when there is none (taken either way). */
static json_t *code_field(const json_t *ev, const char *k, json_t *dflt)
{
	json_t *v = json_object_get(ev, k);

	if (!v)
		return dflt;
	json_decref(dflt);
	return json_incref(v);
}

json_t *e2b_code_event(const json_t *ev, int64_t now_ns)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	char ts[K8_TIME_LEN];

	if (!type)
		return NULL;
	if (!strcmp(type, "start"))
		return json_pack("{s:s,s:o}", "type", "number_of_executions", "execution_count",
				 code_field(ev, "execution_count", json_integer(0)));
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr"))
		return json_pack("{s:s,s:o,s:s}", "type", type, "text",
				 code_field(ev, "text", json_string("")), "timestamp",
				 k8_time_fmt(ts, now_ns / 1000000000, (int)(now_ns / 1000000 % 1000)));
	if (!strcmp(type, "result"))
		return code_result(ev);
	if (!strcmp(type, "error"))
		return json_pack("{s:s,s:o,s:o,s:o}", "type", "error", "name",
				 code_field(ev, "name", json_string("")), "value",
				 code_field(ev, "value", json_string("")), "traceback",
				 code_field(ev, "traceback", json_string("")));
	if (!strcmp(type, "end"))
		return json_pack("{s:s}", "type", "end_of_execution");
	if (!strcmp(type, "keepalive"))
		return json_pack("{s:s}", "type", "keepalive");
	return NULL;
}

json_t *e2b_code_ctx(const json_t *ctx)
{
	return json_pack("{s:o,s:s,s:o}", "id", code_field(ctx, "id", json_string("")),
			 "language", "python", "cwd", code_field(ctx, "cwd", json_string("/")));
}
