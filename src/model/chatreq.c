/* SPDX-License-Identifier: Apache-2.0 */
/* chatreq.c - OpenAI and Anthropic request bodies -> struct gen_req.
 *
 * Both APIs are mapped onto one conversation model (chat.h): OpenAI's "developer" role is a
 * system message, its content parts are concatenated text; Anthropic's top-level system
 * becomes the first message, tool_use blocks become an assistant's calls and tool_result
 * blocks become tool messages, in order. Anything else (images, audio, n > 1) is refused
 * with a message naming the field.
 */
#include "model/chatreq.h"

#include <math.h>
#include <string.h>

#define FAIL(...) k8_err_set(err, -EINVAL, __VA_ARGS__)

void chatreq_free(struct gen_req *r)
{
	if (!r)
		return;
	chat_conv_free(&r->conv);
	free(r->prompt);
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	memset(r, 0, sizeof(*r));
}

static int add_msg(struct chat_conv *c, enum chat_role role, struct chat_msg **out, struct k8_err *err)
{
	if (c->n_msgs >= REQ_MAX_MSGS)
		return FAIL("messages: more than %d", REQ_MAX_MSGS);
	struct chat_msg *m = realloc(c->msgs, (size_t)(c->n_msgs + 1) * sizeof(*m));
	if (!m)
		return k8_err_set(err, -ENOMEM, "out of memory");
	c->msgs = m;
	*out = &m[c->n_msgs++];
	memset(*out, 0, sizeof(**out));
	(*out)->role = role;
	return 0;
}

/* Append s to *dst (which may be NULL). */
static int cat(char **dst, const char *s, size_t n, struct k8_err *err)
{
	size_t l = *dst ? strlen(*dst) : 0;
	char *d = realloc(*dst, l + n + 1);
	if (!d)
		return k8_err_set(err, -ENOMEM, "out of memory");
	memcpy(d + l, s, n);
	d[l + n] = 0;
	*dst = d;
	return 0;
}

/* A string, or an array of {"type":"text","text":...} parts, into *dst. `what` names the
 * field for errors. NUL bytes inside a string are refused (the template is text). */
static int text_of(json_t *v, char **dst, const char *what, struct k8_err *err)
{
	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		if (strlen(json_string_value(v)) != json_string_length(v))
			return FAIL("%s: contains a NUL character", what);
		return cat(dst, json_string_value(v), json_string_length(v), err);
	}
	if (!json_is_array(v))
		return FAIL("%s: must be a string or an array of text parts", what);
	size_t i;
	json_t *part;
	json_array_foreach(v, i, part) {
		const char *type = json_string_value(json_object_get(part, "type"));
		json_t *t = json_object_get(part, "text");
		if (!type || strcmp(type, "text") || !json_is_string(t))
			return FAIL("%s[%zu]: only text parts are supported (got %s)", what, i,
				    type ? type : "no type");
		int rc = text_of(t, dst, what, err);
		if (rc)
			return rc;
	}
	if (!*dst)
		return cat(dst, "", 0, err);
	return 0;
}

static int get_num(json_t *o, const char *key, double lo, double hi, double *out, struct k8_err *err)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v))
		return 1;
	if (!json_is_number(v))
		return FAIL("%s: must be a number", key);
	double d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi)
		return FAIL("%s: %g is outside [%g, %g]", key, d, lo, hi);
	*out = d;
	return 0;
}

static int get_stop(json_t *v, struct gen_req *r, const char *what, struct k8_err *err)
{
	if (!v || json_is_null(v))
		return 0;
	json_t *one = json_is_string(v) ? v : NULL;
	size_t n = one ? 1 : json_is_array(v) ? json_array_size(v) : SIZE_MAX;
	if (n == SIZE_MAX)
		return FAIL("%s: must be a string or an array of strings", what);
	if (n > REQ_MAX_STOP)
		return FAIL("%s: at most %d sequences", what, REQ_MAX_STOP);
	for (size_t i = 0; i < n; i++) {
		json_t *s = one ? one : json_array_get(v, i);
		if (!json_is_string(s))
			return FAIL("%s[%zu]: must be a string", what, i);
		size_t l = json_string_length(s);
		if (l == 0 || l > REQ_MAX_STOP_LEN)
			return FAIL("%s[%zu]: length must be 1 to %d bytes", what, i, REQ_MAX_STOP_LEN);
		if (!(r->stop[r->n_stop] = strndup(json_string_value(s), l)))
			return k8_err_set(err, -ENOMEM, "out of memory");
		r->n_stop++;
	}
	return 0;
}

/* Common sampling fields. */
static int common(json_t *j, struct gen_req *r, const char *max_key, struct k8_err *err)
{
	double d;
	int rc;
	r->max_tokens = -1;
	r->temperature = 1.0f;
	r->top_p = 1.0f;
	json_t *mt = json_object_get(j, max_key);
	if (!mt && r->api == API_OPENAI_CHAT)
		mt = json_object_get(j, "max_completion_tokens");
	if (mt && !json_is_null(mt)) {
		if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > INT32_MAX)
			return FAIL("%s: must be a positive integer", max_key);
		r->max_tokens = (int)json_integer_value(mt);
	} else if (r->api == API_ANTHROPIC) {
		return FAIL("max_tokens: field required");
	}
	if ((rc = get_num(j, "temperature", 0, 2, &d, err)) < 0)
		return rc;
	if (rc == 0)
		r->temperature = (float)d;
	if ((rc = get_num(j, "top_p", 0, 1, &d, err)) < 0)
		return rc;
	if (rc == 0)
		r->top_p = d > 0 ? (float)d : 1e-6f;
	json_t *seed = json_object_get(j, "seed");
	if (seed && !json_is_null(seed)) {
		if (!json_is_integer(seed))
			return FAIL("seed: must be an integer");
		r->seed = (uint64_t)json_integer_value(seed);
		r->has_seed = true;
	}
	json_t *st = json_object_get(j, "stream");
	if (st && !json_is_null(st) && !json_is_boolean(st))
		return FAIL("stream: must be a boolean");
	r->stream = json_is_true(st);
	json_t *n = json_object_get(j, "n");
	if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1))
		return FAIL("n: only 1 is supported");
	return 0;
}

static int tool_def(json_t *fn, const char *what, struct k8_err *err)
{
	if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
	    !json_string_length(json_object_get(fn, "name")))
		return FAIL("%s: a tool needs a name", what);
	return 0;
}

static int openai_tools(json_t *j, struct gen_req *r, struct k8_err *err)
{
	json_t *tools = json_object_get(j, "tools");
	if (!tools || json_is_null(tools))
		return 0;
	if (!json_is_array(tools) || json_array_size(tools) > REQ_MAX_TOOLS)
		return FAIL("tools: must be an array of at most %d tools", REQ_MAX_TOOLS);
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t) {
		const char *type = json_string_value(json_object_get(t, "type"));
		if (!type || strcmp(type, "function"))
			return FAIL("tools[%zu]: only type \"function\" is supported", i);
		int rc = tool_def(json_object_get(t, "function"), "tools", err);
		if (rc)
			return rc;
	}
	json_t *choice = json_object_get(j, "tool_choice");
	if (json_is_string(choice) && !strcmp(json_string_value(choice), "none"))
		return 0;
	if (json_array_size(tools))
		r->conv.tools = json_incref(tools);
	return 0;
}

static int openai_calls(json_t *tc, struct chat_msg *m, struct k8_err *err)
{
	if (!json_is_array(tc) || json_array_size(tc) > REQ_MAX_TOOLS)
		return FAIL("tool_calls: must be an array of at most %d calls", REQ_MAX_TOOLS);
	size_t n = json_array_size(tc);
	if (!n)
		return 0;
	if (!(m->calls = calloc(n, sizeof(*m->calls))))
		return k8_err_set(err, -ENOMEM, "out of memory");
	size_t i;
	json_t *c;
	json_array_foreach(tc, i, c) {
		json_t *fn = json_object_get(c, "function");
		json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
		if (!json_is_string(name))
			return FAIL("tool_calls[%zu].function.name: must be a string", i);
		struct chat_call *k = &m->calls[m->n_calls++];
		k->name = strdup(json_string_value(name));
		k->id = json_is_string(json_object_get(c, "id")) ?
			strdup(json_string_value(json_object_get(c, "id"))) : strdup("");
		k->args = json_is_string(args) ? strdup(json_string_value(args)) :
			  args ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{}");
		if (!k->name || !k->id || !k->args)
			return k8_err_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

static int parse_openai_chat(json_t *j, struct gen_req *r, struct k8_err *err)
{
	int rc = common(j, r, "max_tokens", err);
	if (rc)
		return rc;
	json_t *so = json_object_get(j, "stream_options");
	r->include_usage = json_is_true(json_object_get(so, "include_usage"));
	if ((rc = get_stop(json_object_get(j, "stop"), r, "stop", err)) ||
	    (rc = openai_tools(j, r, err)))
		return rc;
	json_t *msgs = json_object_get(j, "messages");
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return FAIL("messages: must be a non-empty array");
	size_t i;
	json_t *x;
	json_array_foreach(msgs, i, x) {
		const char *role = json_string_value(json_object_get(x, "role"));
		enum chat_role ro;
		if (!role)
			return FAIL("messages[%zu].role: must be a string", i);
		if (!strcmp(role, "system") || !strcmp(role, "developer"))
			ro = ROLE_SYSTEM;
		else if (!strcmp(role, "user"))
			ro = ROLE_USER;
		else if (!strcmp(role, "assistant"))
			ro = ROLE_ASSISTANT;
		else if (!strcmp(role, "tool"))
			ro = ROLE_TOOL;
		else
			return FAIL("messages[%zu].role: unknown role \"%.40s\"", i, role);
		struct chat_msg *m;
		char what[64];
		snprintf(what, sizeof(what), "messages[%zu].content", i);
		if ((rc = add_msg(&r->conv, ro, &m, err)) ||
		    (rc = text_of(json_object_get(x, "content"), &m->content, what, err)))
			return rc;
		json_t *tc = json_object_get(x, "tool_calls");
		if (ro == ROLE_ASSISTANT && tc && !json_is_null(tc) && (rc = openai_calls(tc, m, err)))
			return rc;
		json_t *id = json_object_get(x, "tool_call_id");
		if (ro == ROLE_TOOL && json_is_string(id) && !(m->tool_call_id = strdup(json_string_value(id))))
			return k8_err_set(err, -ENOMEM, "out of memory");
		if (ro != ROLE_ASSISTANT && !m->content)
			return FAIL("messages[%zu].content: required for role %s", i, role);
	}
	return 0;
}

static int parse_openai_completion(json_t *j, struct gen_req *r, struct k8_err *err)
{
	int rc = common(j, r, "max_tokens", err);
	if (rc)
		return rc;
	if (r->max_tokens < 0)
		r->max_tokens = 16;   /* the API's documented default */
	json_t *so = json_object_get(j, "stream_options");
	r->include_usage = json_is_true(json_object_get(so, "include_usage"));
	if ((rc = get_stop(json_object_get(j, "stop"), r, "stop", err)))
		return rc;
	json_t *p = json_object_get(j, "prompt");
	if (json_is_array(p) && json_array_size(p) == 1)
		p = json_array_get(p, 0);
	if (!json_is_string(p))
		return FAIL("prompt: must be a string (one prompt per request)");
	return text_of(p, &r->prompt, "prompt", err);
}

static int anthropic_blocks(json_t *content, enum chat_role ro, size_t i, struct gen_req *r,
			    struct k8_err *err)
{
	struct chat_msg *m = NULL;
	char what[64];
	int rc;
	snprintf(what, sizeof(what), "messages[%zu].content", i);
	if (json_is_string(content)) {
		if ((rc = add_msg(&r->conv, ro, &m, err)))
			return rc;
		return text_of(content, &m->content, what, err);
	}
	if (!json_is_array(content))
		return FAIL("%s: must be a string or an array of content blocks", what);
	size_t k;
	json_t *b;
	json_array_foreach(content, k, b) {
		const char *type = json_string_value(json_object_get(b, "type"));
		if (!type)
			return FAIL("%s[%zu].type: must be a string", what, k);
		if (!strcmp(type, "tool_result")) {
			if (ro != ROLE_USER)
				return FAIL("%s[%zu]: tool_result belongs in a user message", what, k);
			struct chat_msg *t;
			json_t *id = json_object_get(b, "tool_use_id");
			if ((rc = add_msg(&r->conv, ROLE_TOOL, &t, err)) ||
			    (rc = text_of(json_object_get(b, "content"), &t->content, what, err)))
				return rc;
			if (!t->content && (rc = cat(&t->content, "", 0, err)))
				return rc;
			if (json_is_string(id) && !(t->tool_call_id = strdup(json_string_value(id))))
				return k8_err_set(err, -ENOMEM, "out of memory");
			m = NULL;   /* text after a result starts a new message */
			continue;
		}
		if (!m || m->role != ro) {
			if ((rc = add_msg(&r->conv, ro, &m, err)))
				return rc;
		}
		if (!strcmp(type, "text")) {
			json_t *t = json_object_get(b, "text");
			if (!json_is_string(t))
				return FAIL("%s[%zu].text: must be a string", what, k);
			if ((rc = text_of(t, &m->content, what, err)))
				return rc;
		} else if (!strcmp(type, "tool_use") && ro == ROLE_ASSISTANT) {
			json_t *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
			json_t *id = json_object_get(b, "id");
			if (!json_is_string(name) || (input && !json_is_object(input)))
				return FAIL("%s[%zu]: tool_use needs a name and an object input", what, k);
			if (m->n_calls >= REQ_MAX_TOOLS)
				return FAIL("%s: too many tool_use blocks", what);
			struct chat_call *nc = realloc(m->calls, (size_t)(m->n_calls + 1) * sizeof(*nc));
			if (!nc)
				return k8_err_set(err, -ENOMEM, "out of memory");
			m->calls = nc;
			struct chat_call *c = &nc[m->n_calls++];
			c->name = strdup(json_string_value(name));
			c->id = strdup(json_is_string(id) ? json_string_value(id) : "");
			c->args = input ? json_dumps(input, JSON_COMPACT) : strdup("{}");
			if (!c->name || !c->id || !c->args)
				return k8_err_set(err, -ENOMEM, "out of memory");
		} else {
			return FAIL("%s[%zu]: block type \"%.40s\" is not supported here", what, k, type);
		}
	}
	return 0;
}

static int parse_anthropic(json_t *j, struct gen_req *r, struct k8_err *err)
{
	int rc = common(j, r, "max_tokens", err);
	if (rc || (rc = get_stop(json_object_get(j, "stop_sequences"), r, "stop_sequences", err)))
		return rc;
	json_t *sys = json_object_get(j, "system");
	if (sys && !json_is_null(sys)) {
		struct chat_msg *m;
		if ((rc = add_msg(&r->conv, ROLE_SYSTEM, &m, err)) ||
		    (rc = text_of(sys, &m->content, "system", err)))
			return rc;
	}
	json_t *tools = json_object_get(j, "tools");
	const char *choice = json_string_value(json_object_get(json_object_get(j, "tool_choice"), "type"));
	if (tools && !json_is_null(tools)) {
		if (!json_is_array(tools) || json_array_size(tools) > REQ_MAX_TOOLS)
			return FAIL("tools: must be an array of at most %d tools", REQ_MAX_TOOLS);
		json_t *conv = json_array();
		size_t i;
		json_t *t;
		json_array_foreach(tools, i, t) {
			if ((rc = tool_def(t, "tools", err))) {
				json_decref(conv);
				return rc;
			}
			json_t *fn = json_pack("{s:O}", "name", json_object_get(t, "name"));
			if (json_object_get(t, "description"))
				json_object_set(fn, "description", json_object_get(t, "description"));
			json_t *schema = json_object_get(t, "input_schema");
			json_object_set_new(fn, "parameters", schema ? json_incref(schema) : json_object());
			json_array_append_new(conv, json_pack("{s:s,s:o}", "type", "function", "function", fn));
		}
		if (json_array_size(conv) && !(choice && !strcmp(choice, "none")))
			r->conv.tools = conv;
		else
			json_decref(conv);
	}
	json_t *msgs = json_object_get(j, "messages");
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return FAIL("messages: must be a non-empty array");
	size_t i;
	json_t *x;
	json_array_foreach(msgs, i, x) {
		const char *role = json_string_value(json_object_get(x, "role"));
		if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
			return FAIL("messages[%zu].role: must be \"user\" or \"assistant\"", i);
		if ((rc = anthropic_blocks(json_object_get(x, "content"),
					   strcmp(role, "user") ? ROLE_ASSISTANT : ROLE_USER, i, r, err)))
			return rc;
	}
	return 0;
}

int chatreq_parse(enum api api, const char *body, size_t len, struct gen_req *r, struct k8_err *err)
{
	memset(r, 0, sizeof(*r));
	r->api = api;
	if (len > REQ_MAX_BODY)
		return k8_err_set(err, -E2BIG, "the request body is over %u bytes", REQ_MAX_BODY);
	json_error_t je;
	json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return FAIL("the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
	int rc;
	if (!json_is_object(j))
		rc = FAIL("the body must be a JSON object");
	else if (api == API_OPENAI_CHAT)
		rc = parse_openai_chat(j, r, err);
	else if (api == API_OPENAI_COMPLETION)
		rc = parse_openai_completion(j, r, err);
	else
		rc = parse_anthropic(j, r, err);
	json_decref(j);
	if (rc)
		chatreq_free(r);
	return rc;
}
