/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_api.c - libFuzzer target: what any local client may send kosa8d's API, through
 * the route matcher and the field checkers (src/daemon/api_route.c).
 *
 * Input: "METHOD\nPATH\nQUERY\nBODY" - QUERY is "k=v&k=v" (raw, as sent); BODY is parsed
 * as the daemon parses it and, when it is an object, read through every getter. The table
 * holds kosa8d.sock's patterns (api.c) and, for the second listener issue 12 adds, a few
 * Docker-shaped ones.
 *
 * Any abort() below is a broken invariant: a segment out of bounds, a parameter pointing
 * outside the path, a getter that accepted a value outside its bounds or refused one
 * without naming the field. */
#include "daemon/api_route.h"
#include "docker/names.h"
#include "docker/query.h"

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int h(struct api_call *c) { (void)c; return 0; }

static const struct api_route table[] = {
	{ "GET", "/v1/status", h }, { "POST", "/v1/shutdown", h }, { "GET", "/v1/images", h },
	{ "POST", "/v1/images/load", h }, { "POST", "/v1/images/pull", h },
	{ "DELETE", "/v1/images/{ref}", h }, { "GET", "/v1/models", h },
	{ "POST", "/v1/models/pull", h }, { "POST", "/v1/models/import", h },
	{ "DELETE", "/v1/models/{name}", h }, { "POST", "/v1/models/{name}/serve", h },
	{ "GET", "/v1/model-servers", h }, { "DELETE", "/v1/model-servers/{name}", h },
	{ "POST", "/v1/bundle/export", h }, { "POST", "/v1/bundle/import", h },
	{ "GET", "/v1/sandboxes", h }, { "POST", "/v1/sandboxes", h },
	{ "GET", "/v1/sandboxes/{name}", h }, { "DELETE", "/v1/sandboxes/{name}", h },
	{ "POST", "/v1/sandboxes/{name}/pull", h }, { "POST", "/v1/sandboxes/{name}/run", h },
	{ "GET", "/v1/sandboxes/{name}/containers", h },
	{ "POST", "/v1/sandboxes/{name}/containers/{id}/exec", h },
	{ "POST", "/v1/sandboxes/{name}/containers/{id}/stop", h },
	{ "DELETE", "/v1/sandboxes/{name}/containers/{id}", h },
	{ "POST", "/v1/sandboxes/{name}/checkpoints", h },
	{ "GET", "/v1/sandboxes/{name}/checkpoints", h },
	{ "DELETE", "/v1/sandboxes/{name}/checkpoints/{label}", h },
	{ "POST", "/v1/sandboxes/{name}/rewind", h }, { "POST", "/v1/sandboxes/{name}/fork", h },
	{ "POST", "/v1/sandboxes/{name}/pause", h }, { "POST", "/v1/sandboxes/{name}/resume", h },
	{ "GET", "/v1/sandboxes/{name}/egress", h }, { "POST", "/v1/sandboxes/{name}/egress", h },
	{ "GET", "/v1/secrets", h }, { "POST", "/v1/secrets/{name}", h },
	{ "DELETE", "/v1/secrets/{name}", h }, { "POST", "/v1/auth", h },
	{ "GET", "/v1/audit", h }, { "GET", "/v1/audit/verify", h },
	{ "GET", "/{version}/containers/{id}/json", h },
	{ "POST", "/{version}/containers/{id}/exec", h },
	{ "PUT", "/{version}/containers/{id}/archive", h },
};

/* The query: a copy of the input's "k=v&k=v" with each '&' and the first '=' cut. */
struct query {
	char *buf;
	size_t len;
};

static const char *q_lookup(void *ctx, const char *key)
{
	struct query *q = ctx;

	for (size_t i = 0; i < q->len;) {
		const char *k = q->buf + i;
		size_t n = strlen(k);
		const char *eq = strchr(k, '=');
		if (eq && (size_t)(eq - k) == strlen(key) && !memcmp(k, key, strlen(key)))
			return eq + 1;
		i += n + 1;
	}
	return NULL;
}

static void check_path(const struct api_path *p)
{
	if (p->n < 0 || p->n > API_SEG_MAX)
		abort();
	for (int i = 0; i < p->n; i++) {
		size_t n = strnlen(p->seg[i], API_SEG_LEN);
		if (n == 0 || n >= API_SEG_LEN)
			abort();
	}
}

static void check_match(const struct api_call *c, const char *method)
{
	const struct api_match *m = &c->match;

	if (m->route < table || m->route >= table + ARRAY_SIZE(table) ||
	    strcmp(m->route->method, method) || m->nparams < 0 || m->nparams > API_PARAM_MAX)
		abort();
	for (int i = 0; i < m->nparams; i++) {
		const char *v = m->params[i].value;
		const char *lo = (const char *)c->path.seg, *hi = lo + sizeof(c->path.seg);
		if (v < lo || v >= hi || m->params[i].name < m->route->pattern ||
		    m->params[i].name + m->params[i].name_len > m->route->pattern +
		    strlen(m->route->pattern))
			abort();
		char name[64];
		snprintf(name, sizeof(name), "%.*s", (int)m->params[i].name_len, m->params[i].name);
		if (api_param(c, name) != v)
			abort();        /* no pattern here repeats a name */
	}
}

static void fresh(struct api_call *c)
{
	memset(&c->err, 0, sizeof(c->err));
}

static void check_err(const struct api_call *c, int r, const char *field)
{
	if (r == 0)
		return;
	if (r != -EINVAL || c->err.code != -EINVAL || !strstr(c->err.msg, field))
		abort();
}

static void check_getters(struct api_call *c)
{
	static const char *const fields[] = { "label", "to", "from", "name", "image", "path",
					      "timeout_s", "detach", "stop_vms", "value" };
	static const char *const keys[] = { "limit", "since_seq", "wipe", "sandbox", "action" };

	for (size_t k = 0; k < ARRAY_SIZE(fields); k++) {
		const char *s = NULL;
		int64_t i = -1;
		bool b;
		for (int req = 0; req < 2; req++) {
			fresh(c);
			int r = api_body_str(c, fields[k], req, 63, &s);
			check_err(c, r, fields[k]);
			if (r == 0 && s && (strlen(s) > 63 || (req && !*s)))
				abort();
			fresh(c);
			r = api_body_int(c, fields[k], req, 1, 600, &i);
			check_err(c, r, fields[k]);
			if (r == 0 && i != -1 && (i < 1 || i > 600))
				abort();
			fresh(c);
			check_err(c, api_body_bool(c, fields[k], req, &b), fields[k]);
		}
	}
	for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
		char buf[64];
		const char *s = NULL;
		uint64_t u = 1000;
		bool b;
		fresh(c);
		int r = api_query_str(c, keys[k], buf, sizeof(buf), &s);
		check_err(c, r, keys[k]);
		if (r == 0 && s && (s != buf || strlen(s) >= sizeof(buf)))
			abort();
		fresh(c);
		r = api_query_u64(c, keys[k], 5, 100, &u);
		check_err(c, r, keys[k]);
		if (r == 0 && u != 1000 && (u < 5 || u > 100))
			abort();
		fresh(c);
		check_err(c, api_query_bool(c, keys[k], &b), keys[k]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct api_call call;
	const char *p = (const char *)data, *end = p + size;
	char *parts[3];
	char allow[64];
	struct query q;

	/* METHOD, PATH and QUERY lines, NUL-terminated copies; the rest is the body */
	for (int i = 0; i < 3; i++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		parts[i] = strndup(p, n);
		p += n + (nl ? 1 : 0);
	}
	memset(&call, 0, sizeof(call));
	if (api_path_split(parts[1], &call.path, &call.err) == 0) {
		check_path(&call.path);
		int r = api_match(table, ARRAY_SIZE(table), parts[0], &call.path, &call.match,
				  allow, sizeof(allow));
		if (r == 0)
			check_match(&call, parts[0]);
		else if (r == -EBADRQC && !allow[0])
			abort();        /* a 405 names what the path takes */
		else if (r != -EBADRQC && r != -ENOENT)
			abort();
	} else if (call.err.code != -EINVAL && call.err.code != -ENOENT) {
		abort();
	}
	/* docker.sock's path rules (src/docker/query.c, names.c): the same bounds, a name
	 * joined in one segment, and familiar names that fit. */
	memset(&call, 0, sizeof(call));
	if (api_path_split_docker(parts[1], &call.path, &call.err) == 0) {
		char fam[64];
		check_path(&call.path);
		if (call.path.n > 3 && !strcmp(call.path.seg[0], "images"))
			abort();
		for (int i = 0; i < call.path.n; i++) {
			dn_familiar(call.path.seg[i], fam, sizeof(fam));
			if (strlen(fam) >= sizeof(fam))
				abort();
		}
	} else if (call.err.code != -EINVAL && call.err.code != -ENOENT) {
		abort();
	}

	q.len = strlen(parts[2]);
	q.buf = parts[2];
	for (size_t i = 0; i < q.len; i++)
		if (q.buf[i] == '&')
			q.buf[i] = '\0';
	call.query = q_lookup;
	call.query_ctx = &q;
	call.body = json_loadb(p, (size_t)(end - p), JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(call.body)) {
		json_decref(call.body);
		call.body = json_object();
	}
	check_getters(&call);
	json_decref(call.body);
	for (int i = 0; i < 3; i++)
		free(parts[i]);
	return 0;
}
