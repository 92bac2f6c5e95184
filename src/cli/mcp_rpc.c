/* SPDX-License-Identifier: Apache-2.0 */
/* mcp_rpc.c - the MCP server's wire, pure (mcp.h): JSON-RPC 2.0 messages parsed and
 * checked, responses and errors built, tool arguments read through checked getters, the
 * file tools' guest paths, and output kept within a limit.
 *
 * Everything an MCP client sends is hostile (an agent drives it, and a prompt drives the
 * agent): a message is bounded before it is parsed, its shape is checked before any of
 * it is used, and every argument is read through a getter that names it in the error.
 * Fuzzed: tests/fuzz/fuzz_mcp.c.
 */
#include "cli/mcp.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const protos[] = { "2025-06-18", "2025-03-26", "2024-11-05", NULL };

bool mcp_proto_known(const char *v)
{
	for (int i = 0; v && protos[i]; i++)
		if (!strcmp(protos[i], v))
			return true;
	return false;
}

const char *mcp_proto_pick(const char *asked)
{
	for (int i = 0; asked && protos[i]; i++)
		if (!strcmp(protos[i], asked))
			return protos[i];
	return MCP_PROTO_DEFAULT;
}

json_t *mcp_result(json_t *id, json_t *result)
{
	return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result",
			 result ? result : json_object());
}

json_t *mcp_error(json_t *id, int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	char *safe = mcp_utf8(msg, strlen(msg));
	json_t *e = json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id",
			      id ? id : json_null(), "error", "code", code, "message", safe);
	free(safe);
	return e;
}

json_t *mcp_notification(const char *method, json_t *params)
{
	return json_pack("{s:s,s:s,s:o}", "jsonrpc", "2.0", "method", method, "params",
			 params ? params : json_object());
}

void mcp_msg_free(struct mcp_msg *m)
{
	json_decref(m->msg);
	memset(m, 0, sizeof(*m));
}

int mcp_rpc_parse(const char *buf, size_t n, struct mcp_msg *m, json_t **reply)
{
	json_error_t je;
	json_t *o, *v, *id;

	memset(m, 0, sizeof(*m));
	*reply = NULL;
	if (n > MCP_MSG_MAX) {
		*reply = mcp_error(NULL, MCP_INVALID_REQUEST, "the message is larger than %u bytes",
				   MCP_MSG_MAX);
		return -E2BIG;
	}
	o = json_loadb(buf, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (!o) {
		*reply = mcp_error(NULL, MCP_PARSE_ERROR, "Parse error: %s", je.text);
		return -EINVAL;
	}
	if (json_is_array(o)) {
		json_decref(o);
		*reply = mcp_error(NULL, MCP_INVALID_REQUEST, "Invalid Request: batches are not "
				   "supported (MCP 2025-06-18 has none)");
		return -EINVAL;
	}
	if (!json_is_object(o)) {
		json_decref(o);
		*reply = mcp_error(NULL, MCP_INVALID_REQUEST, "Invalid Request: not an object");
		return -EINVAL;
	}
	id = json_object_get(o, "id");
	if (id && !json_is_string(id) && !json_is_integer(id))
		id = NULL;      /* answered with id null, as JSON-RPC says for an unreadable id */
	v = json_object_get(o, "jsonrpc");
	if (!json_is_string(v) || strcmp(json_string_value(v), "2.0")) {
		*reply = mcp_error(id, MCP_INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\"");
		json_decref(o);
		return -EINVAL;
	}
	if (json_object_get(o, "id") && !id) {
		*reply = mcp_error(NULL, MCP_INVALID_REQUEST, "Invalid Request: id must be a string "
				   "or an integer");
		json_decref(o);
		return -EINVAL;
	}
	if (id && json_is_string(id) && json_string_length(id) > 256) {
		*reply = mcp_error(NULL, MCP_INVALID_REQUEST, "Invalid Request: id longer than 256 "
				   "bytes");
		json_decref(o);
		return -EINVAL;
	}
	v = json_object_get(o, "method");
	if (v) {
		json_t *p = json_object_get(o, "params");
		if (!json_is_string(v) || json_string_length(v) == 0 ||
		    json_string_length(v) > 256 ||
		    strlen(json_string_value(v)) != json_string_length(v)) {
			*reply = mcp_error(id, MCP_INVALID_REQUEST, "Invalid Request: method must be "
					   "a string of 1..256 bytes");
			json_decref(o);
			return -EINVAL;
		}
		if (p && !json_is_object(p) && !json_is_null(p)) {
			*reply = mcp_error(id, MCP_INVALID_REQUEST, "Invalid Request: params must be "
					   "an object");
			json_decref(o);
			return -EINVAL;
		}
		m->method = json_string_value(v);
		m->params = json_is_object(p) ? p : NULL;
		m->kind = id ? MCP_REQUEST : MCP_NOTIFICATION;
	} else if (id && (json_object_get(o, "result") || json_is_object(json_object_get(o, "error")))) {
		m->kind = MCP_RESPONSE;
	} else {
		*reply = mcp_error(id, MCP_INVALID_REQUEST, "Invalid Request: no method, and not a "
				   "response");
		json_decref(o);
		return -EINVAL;
	}
	m->msg = o;
	m->id = id;
	return 0;
}

/* ---- tool arguments ---- */

int mcp_arg_str(const json_t *args, const char *name, bool required, size_t max,
		const char **out, struct k8_err *err)
{
	json_t *v = json_object_get(args, name);

	if ((!v || json_is_null(v)) && !required)
		return 0;
	if (!json_is_string(v) || json_string_length(v) > max ||
	    strlen(json_string_value(v)) != json_string_length(v) ||
	    (required && !json_string_length(v)))
		return k8_err_set(err, -EINVAL, "argument '%s' must be a string of %s..%zu bytes "
				  "without NUL", name, required ? "1" : "0", max);
	*out = json_string_value(v);
	return 0;
}

int mcp_arg_int(const json_t *args, const char *name, long long min, long long max,
		long long *out, struct k8_err *err)
{
	json_t *v = json_object_get(args, name);

	if (!v || json_is_null(v))
		return 0;
	/* a model may well write 30.0 for 30 */
	if (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v) &&
	    json_real_value(v) >= (double)min && json_real_value(v) <= (double)max) {
		*out = (long long)json_real_value(v);
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return k8_err_set(err, -EINVAL, "argument '%s' must be an integer %lld..%lld", name,
				  min, max);
	*out = json_integer_value(v);
	return 0;
}

int mcp_arg_bool(const json_t *args, const char *name, bool *out, struct k8_err *err)
{
	json_t *v = json_object_get(args, name);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return k8_err_set(err, -EINVAL, "argument '%s' must be true or false", name);
	*out = json_is_true(v);
	return 0;
}

int mcp_args_only(const json_t *args, const char *const *known, struct k8_err *err)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)args, k, v) {
		const char *const *p;
		for (p = known; *p && strcmp(*p, k); p++)
			;
		if (!*p) {
			char *safe = mcp_utf8(k, strlen(k));
			k8_err_set(err, -EINVAL, "unknown argument '%.60s'", safe);
			free(safe);
			return -EINVAL;
		}
	}
	return 0;
}

/* ---- paths ---- */

int mcp_path_under(const char *path, const char *root, const char **rel)
{
	size_t n = strlen(path), rn;
	const char *c;

	if (path[0] != '/' || n > 4095)
		return -EINVAL;
	for (c = path; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return -EINVAL;
	/* each component: not empty (but a trailing '/'), not "." or ".." */
	for (c = path + 1; *c;) {
		size_t len = strcspn(c, "/");
		if ((len == 0 && c[len]) || (len == 1 && c[0] == '.') ||
		    (len == 2 && c[0] == '.' && c[1] == '.'))
			return -EINVAL;
		c += len;
		if (*c)
			c++;
	}
	rn = strlen(root);
	while (rn > 1 && root[rn - 1] == '/')
		rn--;
	if (rn == 1 && root[0] == '/') {
		*rel = path + 1;
		return 0;
	}
	if (strncmp(path, root, rn) || (path[rn] && path[rn] != '/'))
		return -ENOENT;
	*rel = path[rn] ? path + rn + 1 : path + rn;
	return 0;
}

/* ---- text ---- */

/* The length of the valid UTF-8 sequence at p (1-4), 0 when none starts there. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	unsigned c = p[0];
	size_t len;
	unsigned cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, cp = c & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

char *mcp_utf8(const char *p, size_t n)
{
	const unsigned char *s = (const unsigned char *)p;
	char *out = xmalloc(n * 3 + 1), *o = out;

	for (size_t i = 0; i < n;) {
		size_t l = utf8_seq(s + i, n - i);
		if (l && s[i]) {
			memcpy(o, s + i, l);
			o += l;
			i += l;
		} else {
			memcpy(o, "\xef\xbf\xbd", 3);   /* U+FFFD; a NUL too */
			o += 3;
			i++;
		}
	}
	*o = '\0';
	return out;
}

void mcp_outbuf_init(struct mcp_outbuf *o, size_t limit)
{
	memset(o, 0, sizeof(*o));
	if (limit < 64)
		limit = 64;
	o->limit = limit;
	o->head = xmalloc(limit / 4);
	o->tcap = limit - limit / 4;
	o->tail = xmalloc(o->tcap);
}

void mcp_outbuf_add(struct mcp_outbuf *o, const void *p, size_t n)
{
	const char *s = p;
	size_t take = 0;

	o->total += n;
	if (o->hlen < o->limit / 4) {
		take = o->limit / 4 - o->hlen < n ? o->limit / 4 - o->hlen : n;
		memcpy(o->head + o->hlen, s, take);
		o->hlen += take;
	}
	for (size_t i = take; i < n; i++) {
		o->tail[o->tpos] = s[i];
		o->tpos = (o->tpos + 1) % o->tcap;
		if (o->tlen < o->tcap)
			o->tlen++;
	}
}

char *mcp_outbuf_text(const struct mcp_outbuf *o)
{
	size_t n = o->hlen + o->tlen;
	char *raw = xmalloc(n + 1), *out, *mid = NULL, *text;
	uint64_t cut = o->total - n;
	size_t start = (o->tpos + o->tcap - o->tlen) % o->tcap;

	memcpy(raw, o->head, o->hlen);
	for (size_t i = 0; i < o->tlen; i++)
		raw[o->hlen + i] = o->tail[(start + i) % o->tcap];
	if (!cut) {
		out = mcp_utf8(raw, n);
		free(raw);
		return out;
	}
	text = mcp_utf8(raw, o->hlen);
	out = mcp_utf8(raw + o->hlen, o->tlen);
	mid = xasprintf("%s\n[kosa8: %llu bytes of output left out here; the output was %llu "
			"bytes, more than the %zu kept]\n%s", text, (unsigned long long)cut,
			(unsigned long long)o->total, o->limit, out);
	free(text);
	free(out);
	free(raw);
	return mid;
}

void mcp_outbuf_free(struct mcp_outbuf *o)
{
	free(o->head);
	free(o->tail);
	memset(o, 0, sizeof(*o));
}
