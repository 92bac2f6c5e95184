/* SPDX-License-Identifier: Apache-2.0 */
/* chat.c - chat templates recognised from GGUF metadata, rendered in C, tool calls parsed back.
 *
 * The renderings follow the Jinja templates these models ship (Qwen 2.5's ChatML with its
 * "# Tools" system block, Llama 3.0 and 3.1+ with tools in the first user message) for the
 * conversations an API client can send; docs/model.md lists what is and is not reproduced.
 */
#include "model/chat.h"

#include <ctype.h>
#include <string.h>

#define QWEN_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

void chat_calls_free(struct chat_call *calls, int n)
{
	for (int i = 0; calls && i < n; i++) {
		free(calls[i].id);
		free(calls[i].name);
		free(calls[i].args);
	}
	free(calls);
}

void chat_conv_free(struct chat_conv *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n_msgs; i++) {
		free(c->msgs[i].content);
		free(c->msgs[i].tool_call_id);
		chat_calls_free(c->msgs[i].calls, c->msgs[i].n_calls);
	}
	free(c->msgs);
	json_decref(c->tools);
	memset(c, 0, sizeof(*c));
}

void chat_prompt_free(struct chat_prompt *p)
{
	for (int i = 0; p && i < p->n; i++)
		free(p->seg[i].text);
	if (p) {
		free(p->seg);
		memset(p, 0, sizeof(*p));
	}
}

/* ---- recognising the template ---- */

static bool has(struct gguf_str s, const char *needle)
{
	return s.n && memmem(s.p, s.n, needle, strlen(needle)) != NULL;
}

static void add_stop(struct chat_tmpl *ct, int32_t id)
{
	if (id < 0 || ct->n_stop == CHAT_MAX_STOP)
		return;
	for (int i = 0; i < ct->n_stop; i++)
		if (ct->stop[i] == id)
			return;
	ct->stop[ct->n_stop++] = id;
}

int chat_detect(struct chat_tmpl *ct, const struct gguf *g, const struct tok *t, struct k8_err *err)
{
	struct gguf_str tmpl = { 0 };
	bool have = gguf_get_str(g, "tokenizer.chat_template", &tmpl) == 0;
	memset(ct, 0, sizeof(*ct));
	if (have ? has(tmpl, "<|im_start|>") : tok_lookup(t, "<|im_start|>") >= 0) {
		/* No template but ChatML's markers in the vocabulary: ChatML is the only reading. */
		ct->kind = CHAT_CHATML;
		ct->qwen_default_system = has(tmpl, QWEN_SYSTEM);
		ct->name = has(tmpl, "<tool_call>") ? "qwen2.5" : "chatml";
		if (tok_lookup(t, "<|im_start|>") < 0 || tok_lookup(t, "<|im_end|>") < 0)
			return k8_err_set(err, -EINVAL, "the chat template is ChatML but the vocabulary "
					  "has no <|im_start|>/<|im_end|> tokens");
		add_stop(ct, tok_lookup(t, "<|im_end|>"));
		add_stop(ct, tok_lookup(t, "<|endoftext|>"));
	} else if (have && has(tmpl, "<|start_header_id|>") && has(tmpl, "<|eot_id|>")) {
		ct->kind = CHAT_LLAMA3;
		ct->llama_dates = has(tmpl, "Cutting Knowledge Date");
		ct->name = ct->llama_dates ? "llama3.1" : "llama3";
		if (tok_lookup(t, "<|start_header_id|>") < 0 || tok_lookup(t, "<|eot_id|>") < 0)
			return k8_err_set(err, -EINVAL, "the chat template is Llama 3's but the vocabulary "
					  "has no <|start_header_id|>/<|eot_id|> tokens");
		add_stop(ct, tok_lookup(t, "<|eot_id|>"));
		add_stop(ct, tok_lookup(t, "<|eom_id|>"));
		add_stop(ct, tok_lookup(t, "<|end_of_text|>"));
	} else {
		char shown[81];
		size_t n = 0;
		for (uint64_t i = 0; have && i < tmpl.n && n < sizeof(shown) - 1; i++)
			shown[n++] = isprint((unsigned char)tmpl.p[i]) ? tmpl.p[i] : ' ';
		shown[n] = 0;
		if (!have)
			return k8_err_set(err, -ENOTSUP, "the model file has no tokenizer.chat_template "
					  "and no ChatML tokens: kosa8-model cannot tell how to format a "
					  "conversation for it");
		return k8_err_set(err, -ENOTSUP, "unknown chat template (it begins \"%s\"): "
				  "kosa8-model knows ChatML/Qwen 2.5 and Llama 3/3.1+", shown);
	}
	add_stop(ct, t->eos);
	return 0;
}

/* ---- rendering ---- */

static void put(struct chat_prompt *p, bool special, const char *s, size_t n)
{
	if (p->err || !n)
		return;
	if (p->n && p->seg[p->n - 1].special == special) {   /* extend the last segment */
		struct chat_seg *l = &p->seg[p->n - 1];
		char *nt = realloc(l->text, l->len + n + 1);
		if (!nt) {
			p->err = -ENOMEM;
			return;
		}
		memcpy(nt + l->len, s, n);
		l->len += n;
		nt[l->len] = 0;
		l->text = nt;
		return;
	}
	if (p->n == p->cap) {
		int cap = p->cap ? 2 * p->cap : 16;
		struct chat_seg *ns = realloc(p->seg, (size_t)cap * sizeof(*ns));
		if (!ns) {
			p->err = -ENOMEM;
			return;
		}
		p->seg = ns;
		p->cap = cap;
	}
	char *c = malloc(n + 1);
	if (!c) {
		p->err = -ENOMEM;
		return;
	}
	memcpy(c, s, n);
	c[n] = 0;
	p->seg[p->n++] = (struct chat_seg){ c, n, special };
}

static void mark(struct chat_prompt *p, const char *s) { put(p, true, s, strlen(s)); }
/* Template text that holds no control token: tokenized like content. */
static void lit(struct chat_prompt *p, const char *s) { put(p, false, s, strlen(s)); }
static void text(struct chat_prompt *p, const char *s) { if (s) put(p, false, s, strlen(s)); }

/* Jinja's `| trim`: surrounding whitespace off. */
static void text_trim(struct chat_prompt *p, const char *s)
{
	if (!s)
		return;
	size_t b = 0, e = strlen(s);
	while (b < e && isspace((unsigned char)s[b]))
		b++;
	while (e > b && isspace((unsigned char)s[e - 1]))
		e--;
	put(p, false, s + b, e - b);
}

/* Python's json.dumps (what `tojson` does): ", " and ": " separators, key order kept. */
static void json_text(struct chat_prompt *p, const json_t *j, size_t flags)
{
	char *s = json_dumps(j, flags | JSON_ENCODE_ANY);
	if (!s) {
		p->err = -ENOMEM;
		return;
	}
	text(p, s);
	free(s);
}

/* A call's arguments as the templates show them: the object itself when they parse. */
static void args_text(struct chat_prompt *p, const char *args)
{
	json_t *j = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
	if (j)
		json_text(p, j, 0);
	else
		text(p, args ? args : "{}");
	json_decref(j);
}

static const char *role_name(enum chat_role r)
{
	return r == ROLE_SYSTEM ? "system" : r == ROLE_USER ? "user" : r == ROLE_ASSISTANT ? "assistant" : "tool";
}

static void render_chatml(const struct chat_tmpl *ct, const struct chat_conv *c, struct chat_prompt *p)
{
	const struct chat_msg *m = c->msgs;
	int n = c->n_msgs, i = 0;
	bool tools = c->tools && json_array_size(c->tools) > 0;
	const char *sys = n && m[0].role == ROLE_SYSTEM ? (m[0].content ? m[0].content : "") : NULL;
	if (sys)
		i = 1;
	if (tools) {
		mark(p, "<|im_start|>");
		lit(p, "system\n");
		text(p, sys ? sys : ct->qwen_default_system ? QWEN_SYSTEM : "");
		lit(p, "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
		       "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
		size_t k;
		json_t *tool;
		json_array_foreach(c->tools, k, tool) {
			lit(p, "\n");
			json_text(p, tool, 0);
		}
		lit(p, "\n</tools>\n\nFor each function call, return a json object with function name and "
		       "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
		       "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
		mark(p, "<|im_end|>");
		lit(p, "\n");
	} else if (sys || ct->qwen_default_system) {
		mark(p, "<|im_start|>");
		lit(p, "system\n");
		text(p, sys ? sys : QWEN_SYSTEM);
		mark(p, "<|im_end|>");
		lit(p, "\n");
	}
	for (; i < n; i++) {
		const struct chat_msg *x = &m[i];
		if (x->role == ROLE_TOOL) {
			if (i == 0 || m[i - 1].role != ROLE_TOOL) {
				mark(p, "<|im_start|>");
				lit(p, "user");
			}
			lit(p, "\n<tool_response>\n");
			text(p, x->content);
			lit(p, "\n</tool_response>");
			if (i + 1 == n || m[i + 1].role != ROLE_TOOL) {
				mark(p, "<|im_end|>");
				lit(p, "\n");
			}
			continue;
		}
		mark(p, "<|im_start|>");
		lit(p, role_name(x->role));
		if (x->role == ROLE_ASSISTANT && x->n_calls) {
			if (x->content && *x->content) {
				lit(p, "\n");
				text(p, x->content);
			}
			for (int k = 0; k < x->n_calls; k++) {
				lit(p, "\n<tool_call>\n{\"name\": \"");
				text(p, x->calls[k].name);
				lit(p, "\", \"arguments\": ");
				args_text(p, x->calls[k].args);
				lit(p, "}\n</tool_call>");
			}
		} else {
			lit(p, "\n");
			text(p, x->content);
		}
		mark(p, "<|im_end|>");
		lit(p, "\n");
	}
	mark(p, "<|im_start|>");
	lit(p, "assistant\n");
}

static void header(struct chat_prompt *p, const char *role)
{
	mark(p, "<|start_header_id|>");
	lit(p, role);
	mark(p, "<|end_header_id|>");
	lit(p, "\n\n");
}

static int render_llama3(const struct chat_tmpl *ct, const struct chat_conv *c, struct chat_prompt *p,
			 struct k8_err *err)
{
	const struct chat_msg *m = c->msgs;
	int n = c->n_msgs, i = 0;
	bool tools = c->tools && json_array_size(c->tools) > 0;
	mark(p, "<|begin_of_text|>");
	const char *sys = n && m[0].role == ROLE_SYSTEM ? m[0].content : NULL;
	if (n && m[0].role == ROLE_SYSTEM)
		i = 1;
	if (ct->llama_dates || tools) {
		header(p, "system");
		if (tools)
			lit(p, "Environment: ipython\n");
		lit(p, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
		text_trim(p, sys);
		mark(p, "<|eot_id|>");
	} else if (sys) {
		header(p, "system");
		text_trim(p, sys);
		mark(p, "<|eot_id|>");
	}
	if (tools) {
		if (i == n || m[i].role != ROLE_USER)
			return k8_err_set(err, -EINVAL, "Llama 3 puts the tools in the first user "
					  "message, and the conversation has none");
		header(p, "user");
		lit(p, "Given the following functions, please respond with a JSON for a function call "
		       "with its proper arguments that best answers the given prompt.\n\n"
		       "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
		       "argument name and its value}.Do not use variables.\n\n");
		size_t k;
		json_t *tool;
		json_array_foreach(c->tools, k, tool) {
			json_text(p, tool, JSON_INDENT(4));
			lit(p, "\n\n");
		}
		text_trim(p, m[i].content);
		mark(p, "<|eot_id|>");
		i++;
	}
	for (; i < n; i++) {
		const struct chat_msg *x = &m[i];
		if (x->role == ROLE_ASSISTANT && x->n_calls) {
			if (x->n_calls != 1)
				return k8_err_set(err, -EINVAL, "Llama 3 takes one tool call per turn; "
						  "a message has %d", x->n_calls);
			header(p, "assistant");
			lit(p, "{\"name\": \"");
			text(p, x->calls[0].name);
			lit(p, "\", \"parameters\": ");
			args_text(p, x->calls[0].args);
			lit(p, "}");
		} else if (x->role == ROLE_TOOL) {
			header(p, "ipython");
			json_t *s = json_string(x->content ? x->content : "");   /* the template's tojson */
			if (s)
				json_text(p, s, 0);
			else
				text(p, x->content);   /* not UTF-8: as is */
			json_decref(s);
		} else {
			header(p, role_name(x->role));
			text_trim(p, x->content);
		}
		mark(p, "<|eot_id|>");
	}
	header(p, "assistant");
	return 0;
}

int chat_render(const struct chat_tmpl *ct, const struct chat_conv *c, struct chat_prompt *out,
		struct k8_err *err)
{
	memset(out, 0, sizeof(*out));
	int rc = 0;
	if (ct->kind == CHAT_CHATML)
		render_chatml(ct, c, out);
	else
		rc = render_llama3(ct, c, out, err);
	if (!rc && out->err)
		rc = k8_err_set(err, out->err, "out of memory rendering the conversation");
	if (rc)
		chat_prompt_free(out);
	return rc;
}

char *chat_prompt_text(const struct chat_prompt *p, size_t *len)
{
	size_t n = 0;
	for (int i = 0; i < p->n; i++)
		n += p->seg[i].len;
	char *s = malloc(n + 1);
	if (!s)
		return NULL;
	n = 0;
	for (int i = 0; i < p->n; i++) {
		memcpy(s + n, p->seg[i].text, p->seg[i].len);
		n += p->seg[i].len;
	}
	s[n] = 0;
	if (len)
		*len = n;
	return s;
}

int chat_tokenize(const struct chat_prompt *p, const struct tok *t, int32_t **out)
{
	int32_t *all = NULL;
	size_t n = 0;
	bool bos = t->add_bos && t->bos >= 0;
	if (p->n && p->seg[0].special && t->bos >= 0 && t->text[t->bos].n <= p->seg[0].len &&
	    !memcmp(p->seg[0].text, t->text[t->bos].p, t->text[t->bos].n))
		bos = false;   /* the template writes it */
	for (int i = 0; i < p->n; i++) {
		int32_t *ids;
		int k = tok_encode(t, p->seg[i].text, p->seg[i].len, bos && i == 0, p->seg[i].special, &ids);
		if (k < 0) {
			free(all);
			return k;
		}
		if (n + (size_t)k > INT32_MAX / 2) {
			free(ids);
			free(all);
			return -E2BIG;
		}
		int32_t *na = realloc(all, (n + (size_t)k + 1) * sizeof(*na));
		if (!na) {
			free(ids);
			free(all);
			return -ENOMEM;
		}
		all = na;
		memcpy(all + n, ids, (size_t)k * sizeof(*ids));
		n += (size_t)k;
		free(ids);
	}
	*out = all ? all : malloc(sizeof(int32_t));
	return *out ? (int)n : -ENOMEM;
}

/* ---- tool calls back ---- */

static bool all_space(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)s[i]))
			return false;
	return true;
}

/* {"name": "...", "arguments"|"parameters": {...}} -> a call; false when it is not one. */
static bool call_from_json(const char *s, size_t n, struct chat_call *c)
{
	json_t *j = json_loadb(s, n, 0, NULL);
	json_t *name = json_object_get(j, "name"), *args = json_object_get(j, "arguments");
	if (!args)
		args = json_object_get(j, "parameters");
	if (!json_is_string(name) || (args && !json_is_object(args) && !json_is_string(args))) {
		json_decref(j);
		return false;
	}
	c->name = strdup(json_string_value(name));
	if (json_is_string(args))
		c->args = strdup(json_string_value(args));
	else
		c->args = args ? json_dumps(args, JSON_COMPACT) : strdup("{}");
	c->id = NULL;
	json_decref(j);
	if (!c->name || !c->args) {
		free(c->name);
		free(c->args);
		return false;
	}
	return true;
}

#define TC_OPEN "<tool_call>"
#define TC_CLOSE "</tool_call>"

int chat_parse_calls(const struct chat_tmpl *ct, const char *text, size_t len,
		     size_t *content_len, struct chat_call **calls)
{
	*content_len = len;
	*calls = NULL;
	if (ct->kind == CHAT_LLAMA3) {
		size_t b = 0;
		while (b < len && isspace((unsigned char)text[b]))
			b++;
		if (b == len || text[b] != '{')
			return 0;
		struct chat_call c;
		if (!call_from_json(text + b, len - b, &c))
			return 0;
		if (!(*calls = malloc(sizeof(c)))) {
			free(c.name);
			free(c.args);
			return -ENOMEM;
		}
		(*calls)[0] = c;
		*content_len = 0;
		return 1;
	}
	const char *first = memmem(text, len, TC_OPEN, strlen(TC_OPEN));
	if (!first)
		return 0;
	int n = 0, cap = 0;
	struct chat_call *v = NULL;
	const char *p = first, *end = text + len;
	while (p && p < end) {
		const char *body = p + strlen(TC_OPEN);
		const char *close = memmem(body, (size_t)(end - body), TC_CLOSE, strlen(TC_CLOSE));
		size_t blen = close ? (size_t)(close - body) : (size_t)(end - body);
		struct chat_call c;
		if (!call_from_json(body, blen, &c)) {
			chat_calls_free(v, n);
			return 0;   /* not a well-formed call: the whole reply stays text */
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 4;
			struct chat_call *nv = realloc(v, (size_t)cap * sizeof(*nv));
			if (!nv) {
				free(c.name);
				free(c.args);
				chat_calls_free(v, n);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = c;
		if (!close)
			break;
		p = close + strlen(TC_CLOSE);
		while (p < end && isspace((unsigned char)*p))
			p++;
		if (p < end && (size_t)(end - p) >= strlen(TC_OPEN) && !memcmp(p, TC_OPEN, strlen(TC_OPEN)))
			continue;
		if (p < end && !all_space(p, (size_t)(end - p))) {
			chat_calls_free(v, n);
			return 0;   /* text after the calls: not a tool-call reply */
		}
		break;
	}
	*calls = v;
	size_t cl = (size_t)(first - text);
	while (cl && isspace((unsigned char)text[cl - 1]))
		cl--;
	*content_len = cl;
	return n;
}

size_t chat_stream_safe(const struct chat_tmpl *ct, const char *text, size_t len, bool *begun)
{
	*begun = false;
	if (ct->kind == CHAT_LLAMA3) {
		size_t b = 0;
		while (b < len && isspace((unsigned char)text[b]))
			b++;
		if (b < len && text[b] == '{')
			*begun = true;
		return b < len && text[b] != '{' ? len : 0;   /* undecided while only spaces */
	}
	const char *hit = memmem(text, len, TC_OPEN, strlen(TC_OPEN));
	if (hit) {
		*begun = true;
		return (size_t)(hit - text);
	}
	size_t keep = strlen(TC_OPEN) - 1 < len ? strlen(TC_OPEN) - 1 : len;
	for (; keep; keep--)
		if (!memcmp(text + len - keep, TC_OPEN, keep))
			return len - keep;
	return len;
}

json_t *chat_json_bytes(const char *s, size_t n)
{
	char *o = malloc(3 * n + 1);
	size_t l = 0;
	if (!o)
		return NULL;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
		bool ok = len && i + len <= n && c != 0;
		for (size_t k = 1; ok && k < len; k++)
			ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
		if (ok && len > 1) {
			json_t *probe = json_stringn(s + i, len);   /* rejects overlongs and surrogates */
			ok = probe != NULL;
			json_decref(probe);
		}
		if (!ok && c == 0 && len == 1) {
			o[l++] = 0;   /* NUL is valid UTF-8; jansson takes it with json_stringn */
			i++;
			continue;
		}
		if (!ok) {
			memcpy(o + l, "\xef\xbf\xbd", 3);
			l += 3;
			i++;
			continue;
		}
		memcpy(o + l, s + i, len);
		l += len;
		i += len;
	}
	json_t *j = json_stringn(o, l);
	free(o);
	return j;
}
