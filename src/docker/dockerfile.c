/* SPDX-License-Identifier: Apache-2.0 */
/* dockerfile.c - Dockerfile parser, ARG/ENV substitution and build-cache keys
 * (dockerfile.h).
 *
 * Theory of operation. df_parse() follows BuildKit's parser, which the classic builder
 * shares: parser directives only at the very top; a line whose first non-blank is '#' is
 * a comment, also between continuation lines; the escape character at the end of a line
 * (trailing blanks allowed) joins the next line on, which keeps its indentation; the
 * keyword is case-insensitive; "--flag=value" words directly after it are flags. RUN, CMD
 * and ENTRYPOINT are exec form when the rest is a JSON array of strings, else one shell
 * string; COPY and ADD likewise, else words split on blanks. ENV and LABEL take either
 * "key value..." (first word without '=') or quoted "k=v" words.
 *
 * df_step() applies Docker's shell-word processing (df_expand) to the instructions Docker
 * applies it to: FROM (with the ARGs declared before the first FROM only), ARG defaults,
 * ENV, LABEL, COPY, ADD, WORKDIR, USER, EXPOSE. RUN, CMD and ENTRYPOINT stay as written:
 * the shell in the container expands them. ENV wins over an ARG of the same name; all
 * pairs of one ENV see the environment from before it ("ENV a=1 b=$a" takes the old a). */
#include "docker/dockerfile.h"
#include "docker/dockerignore.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <openssl/evp.h>

/* ---- string vectors ---------------------------------------------------------------- */

static int sv_push(struct df_strv *v, char *s)   /* takes s; s may be NULL */
{
	if (v->n == v->cap) {
		size_t ncap = v->cap ? 2 * v->cap : 8;
		char **nv = realloc(v->v, ncap * sizeof(char *));
		if (!nv) {
			free(s);
			return -ENOMEM;
		}
		v->v = nv;
		v->cap = ncap;
	}
	v->v[v->n++] = s;
	return 0;
}

static int sv_pushn(struct df_strv *v, const char *s, size_t n)
{
	char *c = strndup(s, n);
	return c ? sv_push(v, c) : -ENOMEM;
}

static int sv_dup(struct df_strv *v, const char *s)  /* s may be NULL */
{
	if (!s)
		return sv_push(v, NULL);
	return sv_pushn(v, s, strlen(s));
}

static void sv_free(struct df_strv *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->v[i]);
	free(v->v);
	memset(v, 0, sizeof(*v));
}

/* Index of key in keys, or -1. */
static long sv_find(const struct df_strv *keys, const char *key)
{
	for (size_t i = 0; i < keys->n; i++)
		if (keys->v[i] && !strcmp(keys->v[i], key))
			return (long)i;
	return -1;
}

/* Set "K=V" in an environment vector, replacing an entry for K. */
static int env_set(struct df_strv *env, const char *k, const char *v)
{
	size_t kl = strlen(k);
	char *kv = xasprintf("%s=%s", k, v);

	for (size_t i = 0; i < env->n; i++)
		if (!strncmp(env->v[i], k, kl) && env->v[i][kl] == '=') {
			free(env->v[i]);
			env->v[i] = kv;
			return 0;
		}
	if (env->n >= 4 * DF_MAX_ARGS) {
		free(kv);
		return -E2BIG;
	}
	return sv_push(env, kv);
}

static const char *env_get(const struct df_strv *env, const char *k, size_t kl)
{
	for (size_t i = env->n; i-- > 0;)
		if (env->v[i] && !strncmp(env->v[i], k, kl) && env->v[i][kl] == '=')
			return env->v[i] + kl + 1;
	return NULL;
}

/* ---- shell-word processing ----------------------------------------------------------- */

struct lex {
	const char *s;
	size_t i, n;
	char esc;
	const struct df_strv *env;
	struct k8_err *err;
	int depth;
};

struct obuf {
	char *p;
	size_t len, cap;
};

static int ob_put(struct lex *L, struct obuf *o, const char *s, size_t n)
{
	if (o->len + n > DF_MAX_EXPANDED)
		return k8_err_set(L->err, -E2BIG, "longer than %d bytes after substitution",
				  DF_MAX_EXPANDED);
	if (o->len + n + 1 > o->cap) {
		size_t ncap = o->cap ? o->cap : 64;
		while (ncap < o->len + n + 1)
			ncap *= 2;
		char *np = realloc(o->p, ncap);
		if (!np)
			return -ENOMEM;
		o->p = np;
		o->cap = ncap;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
	o->p[o->len] = '\0';
	return 0;
}

static int lex_word(struct lex *L, struct obuf *o, char stop);

static bool name_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

static int lex_dollar(struct lex *L, struct obuf *o)
{
	const char *s = L->s;
	size_t start;

	L->i++;                                     /* the '$' */
	if (L->i >= L->n || (s[L->i] != '{' && !name_char(s[L->i])))
		return ob_put(L, o, "$", 1);        /* a lone '$' stays */
	if (s[L->i] != '{') {
		start = L->i;
		if (isdigit((unsigned char)s[L->i]))
			while (L->i < L->n && isdigit((unsigned char)s[L->i]))
				L->i++;
		else
			while (L->i < L->n && name_char(s[L->i]))
				L->i++;
		const char *v = env_get(L->env, s + start, L->i - start);
		return v ? ob_put(L, o, v, strlen(v)) : 0;
	}
	L->i++;                                     /* '{' */
	start = L->i;
	while (L->i < L->n && name_char(s[L->i]))
		L->i++;
	size_t nlen = L->i - start;
	if (L->i >= L->n)
		return k8_err_set(L->err, -EINVAL, "missing '}' in '%.64s'", s);
	if (!nlen)
		return k8_err_set(L->err, -EINVAL, "bad substitution in '%.64s'", s);
	const char *v = env_get(L->env, s + start, nlen);
	if (s[L->i] == '}') {
		L->i++;
		return v ? ob_put(L, o, v, strlen(v)) : 0;
	}
	bool colon = s[L->i] == ':';
	if (colon)
		L->i++;
	char mod = L->i < L->n ? s[L->i++] : '\0';
	if (mod != '-' && mod != '+' && mod != '?')
		return k8_err_set(L->err, -EINVAL, "unsupported modifier (%c) in substitution "
				  "in '%.64s'", mod ? mod : ' ', s);
	if (++L->depth > 16)
		return k8_err_set(L->err, -EINVAL, "substitutions nested too deeply");
	struct obuf word = { 0 };
	int rc = lex_word(L, &word, '}');
	L->depth--;
	if (!rc && (L->i >= L->n || s[L->i] != '}'))
		rc = k8_err_set(L->err, -EINVAL, "missing '}' in '%.64s'", s);
	if (rc) {
		free(word.p);
		return rc;
	}
	L->i++;
	bool unset = colon ? (!v || !*v) : !v;
	const char *w = word.p ? word.p : "";
	if (mod == '-')
		rc = unset ? ob_put(L, o, w, word.len) : ob_put(L, o, v, strlen(v));
	else if (mod == '+')
		rc = unset ? 0 : ob_put(L, o, w, word.len);
	else if (unset)
		rc = k8_err_set(L->err, -EINVAL, "%.*s: %s", (int)nlen, s + start,
				*w ? w : "is not allowed to be unset");
	else
		rc = ob_put(L, o, v, strlen(v));
	free(word.p);
	return rc;
}

/* Process until the end (stop 0) or an unquoted `stop` character, left unconsumed. */
static int lex_word(struct lex *L, struct obuf *o, char stop)
{
	const char *s = L->s;
	int rc = 0;

	while (!rc && L->i < L->n) {
		char c = s[L->i];
		if (stop && c == stop)
			return 0;
		if (c == '\'') {
			const char *q = memchr(s + L->i + 1, '\'', L->n - L->i - 1);
			if (!q)
				return k8_err_set(L->err, -EINVAL, "unexpected end of statement while "
						  "looking for matching single-quote");
			rc = ob_put(L, o, s + L->i + 1, (size_t)(q - s) - L->i - 1);
			L->i = (size_t)(q - s) + 1;
		} else if (c == '"') {
			L->i++;
			for (;;) {
				if (L->i >= L->n)
					return k8_err_set(L->err, -EINVAL, "unexpected end of statement "
							  "while looking for matching double-quote");
				c = s[L->i];
				if (c == '"') {
					L->i++;
					break;
				}
				if (c == '$') {
					rc = lex_dollar(L, o);
				} else if (c == L->esc && L->i + 1 < L->n &&
					   (s[L->i + 1] == '"' || s[L->i + 1] == '$' ||
					    s[L->i + 1] == L->esc)) {
					rc = ob_put(L, o, s + L->i + 1, 1);
					L->i += 2;
				} else if (c == L->esc && L->i + 1 >= L->n) {
					L->i++;
				} else {
					rc = ob_put(L, o, &c, 1);
					L->i++;
				}
				if (rc)
					return rc;
			}
		} else if (c == '$') {
			rc = lex_dollar(L, o);
		} else if (c == L->esc) {
			if (L->i + 1 < L->n)
				rc = ob_put(L, o, s + L->i + 1, 1);
			L->i += 2;
		} else {
			rc = ob_put(L, o, &c, 1);
			L->i++;
		}
	}
	return rc;
}

char *df_expand(const char *word, char escape, const struct df_strv *env, struct k8_err *err)
{
	static const struct df_strv none = { 0 };
	struct lex L = { .s = word, .n = strlen(word), .esc = escape, .env = env ? env : &none,
			 .err = err };
	struct obuf o = { 0 };

	if (lex_word(&L, &o, 0)) {
		free(o.p);
		return NULL;
	}
	return o.p ? o.p : strdup("");
}

/* ---- parsing --------------------------------------------------------------------------- */

static const char *const kind_names[] = {
	[DF_FROM] = "FROM", [DF_RUN] = "RUN", [DF_COPY] = "COPY", [DF_ADD] = "ADD",
	[DF_ENV] = "ENV", [DF_ARG] = "ARG", [DF_WORKDIR] = "WORKDIR", [DF_USER] = "USER",
	[DF_CMD] = "CMD", [DF_ENTRYPOINT] = "ENTRYPOINT", [DF_EXPOSE] = "EXPOSE",
	[DF_LABEL] = "LABEL",
};

const char *df_kind_name(enum df_kind k)
{
	return (size_t)k < ARRAY_SIZE(kind_names) ? kind_names[k] : "?";
}

static void inst_free(struct df_inst *in)
{
	free(in->original);
	sv_free(&in->words);
	sv_free(&in->keys);
	sv_free(&in->vals);
	free(in->as);
	free(in->chown);
}

void df_free(struct dockerfile *df)
{
	if (!df)
		return;
	for (size_t i = 0; i < df->n; i++)
		inst_free(&df->inst[i]);
	free(df->inst);
	free(df);
}

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

/* BuildKit's parseWords: split on blanks outside quotes; quotes and escapes are kept in
 * the words (df_expand removes them later). */
static int split_words(const char *s, char esc, struct df_strv *out)
{
	size_t n = strlen(s), i = 0;
	struct obuf w = { 0 };
	struct lex dummy = { 0 };
	char quote = 0;
	bool in_word = false, blank_ok = false;
	int rc = 0;

	for (i = 0; i <= n && !rc; i++) {
		char c = i < n ? s[i] : '\0';
		if (!in_word && !quote) {
			if (i == n)
				break;
			if (blank(c) || c == '\n')
				continue;
			in_word = true;
		}
		if (i == n) {
			if (blank_ok || w.len)
				rc = sv_pushn(out, w.p ? w.p : "", w.len);
			break;
		}
		if (!quote) {
			if (blank(c) || c == '\n') {
				if (blank_ok || w.len)
					rc = sv_pushn(out, w.p ? w.p : "", w.len);
				w.len = 0;
				blank_ok = false;
				in_word = false;
				continue;
			}
			if (c == '\'' || c == '"') {
				quote = c;
				blank_ok = true;
			} else if (c == esc) {
				if (i + 1 == n)
					continue;
				rc = ob_put(&dummy, &w, &c, 1);
				c = s[++i];
			}
			if (!rc)
				rc = ob_put(&dummy, &w, &c, 1);
			continue;
		}
		if (c == quote) {
			quote = 0;
		} else if (c == esc && quote != '\'') {
			if (i + 1 == n) {
				quote = 0;
				continue;
			}
			rc = ob_put(&dummy, &w, &c, 1);
			c = s[++i];
		}
		if (!rc)
			rc = ob_put(&dummy, &w, &c, 1);
	}
	free(w.p);
	if (!rc && out->n > DF_MAX_WORDS)
		rc = -E2BIG;
	return rc;
}

/* Split on blanks only (parseStringsWhitespaceDelimited). */
static int split_blanks(const char *s, struct df_strv *out)
{
	while (*s) {
		while (*s && blank(*s))
			s++;
		const char *b = s;
		while (*s && !blank(*s))
			s++;
		if (s > b) {
			if (out->n >= DF_MAX_WORDS)
				return -E2BIG;
			int rc = sv_pushn(out, b, (size_t)(s - b));
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* A JSON array of strings, the whole of s: exec form. 1 yes, 0 no, <0 error. */
static int try_json(const char *s, struct df_strv *out)
{
	json_error_t jerr;
	size_t i;
	json_t *v;

	if (*s != '[')
		return 0;
	json_t *a = json_loads(s, 0, &jerr);
	if (!json_is_array(a) || json_array_size(a) > DF_MAX_WORDS) {
		json_decref(a);
		return 0;
	}
	json_array_foreach(a, i, v)
		if (!json_is_string(v)) {
			json_decref(a);
			return 0;
		}
	json_array_foreach(a, i, v) {
		int rc = sv_pushn(out, json_string_value(v), json_string_length(v));
		if (rc) {
			json_decref(a);
			return rc;
		}
	}
	json_decref(a);
	return 1;
}

/* Record an error as "Dockerfile line N: <msg>". */
static int line_err(struct k8_err *err, unsigned line, int code, const char *fmt, ...)
	K8_PRINTF(4, 5);
static int line_err(struct k8_err *err, unsigned line, int code, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return k8_err_set(err, code, "Dockerfile line %u: %s", line, msg);
}

static int parse_name_val(struct df_inst *in, const char *kw, const char *rest, char esc,
			  struct k8_err *err)
{
	struct df_strv w = { 0 };
	int rc = split_words(rest, esc, &w);

	if (rc) {
		sv_free(&w);
		return line_err(err, in->line, rc, "%s has too many words", kw);
	}
	if (w.n == 0) {
		sv_free(&w);
		return line_err(err, in->line, -EINVAL, "%s requires at least one argument", kw);
	}
	if (!strchr(w.v[0], '=')) {      /* legacy "ENV key value with spaces" */
		const char *p = rest;
		while (*p && !blank(*p))
			p++;
		size_t kl = (size_t)(p - rest);
		while (*p && blank(*p))
			p++;
		sv_free(&w);
		if (!*p)
			return line_err(err, in->line, -EINVAL, "%s must have two arguments", kw);
		if ((rc = sv_pushn(&in->keys, rest, kl)) || (rc = sv_dup(&in->vals, p)))
			return rc;
		return 0;
	}
	for (size_t i = 0; i < w.n; i++) {
		char *eq = strchr(w.v[i], '=');
		if (!eq) {
			rc = line_err(err, in->line, -EINVAL, "Syntax error - can't find = in \"%.64s\"."
				      " Must be of the form: name=value", w.v[i]);
			break;
		}
		if ((rc = sv_pushn(&in->keys, w.v[i], (size_t)(eq - w.v[i]))) ||
		    (rc = sv_dup(&in->vals, eq + 1)))
			break;
	}
	sv_free(&w);
	return rc;
}

static const struct {
	const char *name;
	int kind;       /* enum df_kind, or -1 when refused */
} keywords[] = {
	{ "FROM", DF_FROM }, { "RUN", DF_RUN }, { "COPY", DF_COPY }, { "ADD", DF_ADD },
	{ "ENV", DF_ENV }, { "ARG", DF_ARG }, { "WORKDIR", DF_WORKDIR }, { "USER", DF_USER },
	{ "CMD", DF_CMD }, { "ENTRYPOINT", DF_ENTRYPOINT }, { "EXPOSE", DF_EXPOSE },
	{ "LABEL", DF_LABEL }, { "SHELL", -1 }, { "VOLUME", -1 }, { "STOPSIGNAL", -1 },
	{ "HEALTHCHECK", -1 }, { "ONBUILD", -1 }, { "MAINTAINER", -1 },
};

static bool is_url(const char *s)
{
	return strstr(s, "://") || !strncmp(s, "git@", 4);
}

/* Take "--name[=value]" words off the front of *rest. */
static int take_flags(struct df_inst *in, const char *kw, char **rest, struct k8_err *err)
{
	char *p = *rest;

	for (;;) {
		while (blank(*p))
			p++;
		if (p[0] != '-' || p[1] != '-')
			break;
		char *w = p + 2;
		while (*p && !blank(*p))
			p++;
		size_t wl = (size_t)(p - w);
		if (wl == 0)                         /* "--" ends the flags */
			break;
		char *eq = memchr(w, '=', wl);
		size_t nl = eq ? (size_t)(eq - w) : wl;
		char name[32];
		snprintf(name, sizeof(name), "%.*s", (int)(nl < 31 ? nl : 31), w);
		if (in->kind == DF_FROM && !strcmp(name, "platform"))
			return line_err(err, in->line, -ENOTSUP, "FROM --platform is not supported: "
					"kosa8 builds for the host's architecture only");
		if ((in->kind == DF_COPY || in->kind == DF_ADD) && !strcmp(name, "chown")) {
			if (!eq || eq + 1 == p)
				return line_err(err, in->line, -EINVAL, "%s --chown needs a value: "
						"--chown=user:group", kw);
			free(in->chown);
			if (!(in->chown = strndup(eq + 1, (size_t)(p - eq - 1))))
				return -ENOMEM;
			continue;
		}
		if (in->kind == DF_COPY && !strcmp(name, "from"))
			return line_err(err, in->line, -ENOTSUP, "COPY --from is not supported by "
					"kosa8's builder (no multi-stage copies); build the files in "
					"this stage or COPY them from the context");
		if ((in->kind == DF_COPY || in->kind == DF_ADD || in->kind == DF_RUN) &&
		    (!strcmp(name, "chmod") || !strcmp(name, "link") || !strcmp(name, "mount") ||
		     !strcmp(name, "network") || !strcmp(name, "security") ||
		     !strcmp(name, "parents") || !strcmp(name, "exclude") ||
		     !strcmp(name, "checksum") || !strcmp(name, "keep-git-dir")))
			return line_err(err, in->line, -ENOTSUP, "%s --%s needs BuildKit; kosa8 "
					"serves the classic builder", kw, name);
		return line_err(err, in->line, -EINVAL, "Unknown flag: %s", name);
	}
	*rest = p;
	return 0;
}

static int parse_inst(struct dockerfile *df, char *line, unsigned lineno, struct k8_err *err)
{
	char *p = line, *kw, *rest;
	struct df_inst *in;
	int kind = -2, rc;

	while (blank(*p))
		p++;
	kw = p;
	while (*p && !blank(*p))
		p++;
	rest = p;
	if (*p)
		*rest++ = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(keywords); i++)
		if (!strcasecmp(kw, keywords[i].name))
			kind = keywords[i].kind;
	if (kind == -2)
		return line_err(err, lineno, -EINVAL, "unknown instruction: %.32s", kw);
	for (char *u = kw; *u; u++)
		*u = (char)toupper((unsigned char)*u);
	if (kind == -1)
		return line_err(err, lineno, -ENOTSUP, "%s is not supported by kosa8's builder "
				"(docs/docker.md lists what is)", kw);
	if (df->n >= DF_MAX_INST)
		return line_err(err, lineno, -E2BIG, "more than %d instructions", DF_MAX_INST);
	if (kind != DF_ARG && kind != DF_FROM) {
		bool stage = false;
		for (size_t i = 0; i < df->n; i++)
			stage = stage || df->inst[i].kind == DF_FROM;
		if (!stage)
			return line_err(err, lineno, -EINVAL, "%s before FROM: a Dockerfile starts "
					"with FROM (only ARG may come before it)", kw);
	}
	in = &df->inst[df->n];
	memset(in, 0, sizeof(*in));
	in->kind = (enum df_kind)kind;
	in->line = lineno;
	df->n++;                                 /* freed with df from here on */
	if (!(in->original = xasprintf("%s%s%s", kw, *rest ? " " : "", rest)))
		return -ENOMEM;
	if ((rc = take_flags(in, kw, &rest, err)))
		return rc;
	/* trim the rest */
	while (blank(*rest))
		rest++;
	for (size_t l = strlen(rest); l && blank(rest[l - 1]); l--)
		rest[l - 1] = '\0';

	switch (in->kind) {
	case DF_FROM:
		if ((rc = split_blanks(rest, &in->words)))
			return line_err(err, lineno, rc, "FROM has too many words");
		if (in->words.n == 3 && !strcasecmp(in->words.v[1], "as")) {
			char *name = in->words.v[2];
			bool ok = isalpha((unsigned char)name[0]);
			for (char *c = name; *c; c++) {
				*c = (char)tolower((unsigned char)*c);
				ok = ok && (isalnum((unsigned char)*c) || strchr("-_.", *c));
			}
			if (!ok)
				return line_err(err, lineno, -EINVAL, "invalid name for build stage: "
						"\"%.64s\", name can't start with a number or contain "
						"symbols", name);
			in->as = name;
			in->words.v[2] = NULL;
			free(in->words.v[1]);
			in->words.n = 1;
		} else if (in->words.n != 1) {
			return line_err(err, lineno, -EINVAL, "FROM requires either one or three "
					"arguments");
		}
		return 0;
	case DF_RUN:
	case DF_CMD:
	case DF_ENTRYPOINT:
		if ((rc = try_json(rest, &in->words)) < 0)
			return rc;
		in->json = rc == 1;
		if (!in->json) {
			if (!*rest)
				return line_err(err, lineno, -EINVAL, "%s requires at least one "
						"argument", kw);
			return sv_dup(&in->words, rest);
		}
		if (in->kind == DF_RUN && in->words.n == 0)
			return line_err(err, lineno, -EINVAL, "RUN requires at least one argument");
		return 0;
	case DF_COPY:
	case DF_ADD:
		if ((rc = try_json(rest, &in->words)) < 0)
			return rc;
		in->json = rc == 1;
		if (!in->json && (rc = split_blanks(rest, &in->words)))
			return line_err(err, lineno, rc, "%s has too many words", kw);
		if (in->words.n < 2)
			return line_err(err, lineno, -EINVAL, "%s requires at least two arguments, "
					"but only one was provided. Destination could not be "
					"determined", kw);
		for (size_t i = 0; in->kind == DF_ADD && i + 1 < in->words.n; i++)
			if (is_url(in->words.v[i]))
				return line_err(err, lineno, -ENOTSUP, "ADD from a URL (%.64s) is not "
						"supported by kosa8: download it in a RUN step, under "
						"the sandbox's egress policy", in->words.v[i]);
		return 0;
	case DF_ENV:
	case DF_LABEL:
		return parse_name_val(in, kw, rest, df->escape, err);
	case DF_ARG: {
		struct df_strv w = { 0 };
		if ((rc = split_words(rest, df->escape, &w)) || w.n == 0) {
			sv_free(&w);
			return line_err(err, lineno, rc ? rc : -EINVAL, "ARG requires at least one "
					"argument");
		}
		for (size_t i = 0; i < w.n && !rc; i++) {
			char *eq = strchr(w.v[i], '=');
			rc = sv_pushn(&in->keys, w.v[i], eq ? (size_t)(eq - w.v[i]) : strlen(w.v[i]));
			if (!rc)
				rc = sv_dup(&in->vals, eq ? eq + 1 : NULL);
		}
		sv_free(&w);
		return rc;
	}
	case DF_WORKDIR:
	case DF_USER:
		if (!*rest)
			return line_err(err, lineno, -EINVAL, "%s requires exactly one argument", kw);
		return sv_dup(&in->words, rest);
	case DF_EXPOSE:
		if ((rc = split_blanks(rest, &in->words)))
			return line_err(err, lineno, rc, "EXPOSE has too many words");
		if (in->words.n == 0)
			return line_err(err, lineno, -EINVAL, "EXPOSE requires at least one "
					"argument");
		return 0;
	}
	return -EINVAL;
}

/* "# key=value" at the top of the file. 1 when it is a directive, 0 when not. */
static int directive(const char *l, size_t n, char *key, size_t ksz, const char **val,
		     size_t *vlen)
{
	size_t i = 0, k = 0;

	if (!n || l[0] != '#')
		return 0;
	for (i = 1; i < n && blank(l[i]); i++)
		;
	if (i >= n || !isalpha((unsigned char)l[i]))
		return 0;
	while (i < n && isalnum((unsigned char)l[i])) {
		if (k + 1 < ksz)
			key[k++] = (char)tolower((unsigned char)l[i]);
		i++;
	}
	key[k] = '\0';
	while (i < n && blank(l[i]))
		i++;
	if (i >= n || l[i] != '=')
		return 0;
	for (i++; i < n && blank(l[i]); i++)
		;
	while (n > i && blank(l[n - 1]))
		n--;
	if (i >= n)
		return 0;
	*val = l + i;
	*vlen = n - i;
	return 1;
}

/* Strip a trailing escape character (and blanks after it). True when it continues. */
static bool continues(struct obuf *b, char esc)
{
	size_t n = b->len;

	while (n && (b->p[n - 1] == ' ' || b->p[n - 1] == '\t'))
		n--;
	if (!n || b->p[n - 1] != esc)
		return false;
	b->len = n - 1;
	b->p[b->len] = '\0';
	return true;
}

static bool comment_line(const char *l, size_t n)
{
	size_t i = 0;
	while (i < n && (blank(l[i]) || l[i] == '\n'))
		i++;
	return i < n && l[i] == '#';
}

static bool blank_line(const char *l, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!blank(l[i]))
			return false;
	return true;
}

int df_parse(const char *text, size_t len, struct dockerfile **out, struct k8_err *err)
{
	const char *p = text, *end = text + len;
	bool directives = true, seen_escape = false;
	struct obuf b = { 0 };
	struct lex L = { .err = err };
	unsigned lineno = 0;
	int rc = 0;

	*out = NULL;
	if (len > DF_MAX_SIZE)
		return k8_err_set(err, -E2BIG, "Dockerfile is larger than %d bytes", DF_MAX_SIZE);
	if (memchr(text, '\0', len))
		return k8_err_set(err, -EINVAL, "Dockerfile contains a NUL byte");
	struct dockerfile *df = calloc(1, sizeof(*df));
	if (!df || !(df->inst = calloc(DF_MAX_INST, sizeof(*df->inst)))) {
		free(df);
		return -ENOMEM;
	}
	df->escape = '\\';
	if (len >= 3 && !memcmp(p, "\xef\xbb\xbf", 3))
		p += 3;

#define NEXT_LINE(l, n) ({ \
	bool _ok = p < end; \
	if (_ok) { \
		const char *_nl = memchr(p, '\n', (size_t)(end - p)); \
		l = p; n = _nl ? (size_t)(_nl - p) : (size_t)(end - p); \
		p += n + (_nl ? 1 : 0); \
		if (n && l[n - 1] == '\r') n--; \
		lineno++; \
	} \
	_ok; })

	const char *l;
	size_t n;
	while (!rc && NEXT_LINE(l, n)) {
		if (directives) {
			char key[16];
			const char *val;
			size_t vl;
			if (directive(l, n, key, sizeof(key), &val, &vl)) {
				if (!strcmp(key, "escape")) {
					if (seen_escape) {
						rc = line_err(err, lineno, -EINVAL, "only one escape parser "
							      "directive can be used");
						break;
					}
					if (vl != 1 || (val[0] != '\\' && val[0] != '`')) {
						rc = line_err(err, lineno, -EINVAL, "invalid escape token "
							      "'%.*s' does not match ^[\\\\`]$",
							      (int)(vl < 16 ? vl : 16), val);
						break;
					}
					df->escape = val[0];
					seen_escape = true;
					continue;
				}
				if (!strcmp(key, "syntax") || !strcmp(key, "check"))
					continue;      /* BuildKit's; the classic builder ignores them */
			}
			directives = false;
		}
		if (comment_line(l, n) || blank_line(l, n))
			continue;
		if (n > DF_MAX_LINE) {
			rc = line_err(err, lineno, -E2BIG, "line longer than %d bytes", DF_MAX_LINE);
			break;
		}
		unsigned start = lineno;
		b.len = 0;
		while (n && blank(*l)) {
			l++;
			n--;
		}
		if ((rc = ob_put(&L, &b, l, n)))
			break;
		bool more = continues(&b, df->escape);
		while (more && NEXT_LINE(l, n)) {
			if (comment_line(l, n) || blank_line(l, n))
				continue;
			if (b.len + n > DF_MAX_LINE) {
				rc = line_err(err, start, -E2BIG, "instruction longer than %d bytes",
					      DF_MAX_LINE);
				break;
			}
			if ((rc = ob_put(&L, &b, l, n)))
				break;
			more = continues(&b, df->escape);
		}
		if (rc)
			break;
		if (blank_line(b.p, b.len))
			continue;
		rc = parse_inst(df, b.p, start, err);
	}
#undef NEXT_LINE
	free(b.p);
	if (!rc && df->n == 0)
		rc = k8_err_set(err, -EINVAL, "the Dockerfile has no instructions");
	if (!rc) {
		bool from = false;
		for (size_t i = 0; i < df->n; i++)
			from = from || df->inst[i].kind == DF_FROM;
		if (!from)
			rc = k8_err_set(err, -EINVAL, "the Dockerfile has no FROM instruction");
	}
	if (rc) {
		if (rc == -E2BIG && err && !err->code)
			k8_err_set(err, rc, "Dockerfile line %u: too long after joining lines", lineno);
		df_free(df);
		return rc;
	}
	*out = df;
	return 0;
}

/* ---- steps ------------------------------------------------------------------------------ */

/* The ARGs Docker defines without an ARG line; they reach RUN but not the cache key. */
static bool proxy_arg(const char *k)
{
	static const char *const names[] = { "HTTP_PROXY", "http_proxy", "HTTPS_PROXY",
		"https_proxy", "FTP_PROXY", "ftp_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY",
		"all_proxy" };
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcmp(k, names[i]))
			return true;
	return false;
}

int df_state_init(struct df_state *st, const struct dockerfile *df, const char *const *keys,
		  const char *const *vals, size_t n)
{
	memset(st, 0, sizeof(*st));
	st->escape = df ? df->escape : '\\';
	if (n > DF_MAX_ARGS)
		return -E2BIG;
	for (size_t i = 0; i < n; i++) {
		int rc = sv_dup(&st->bkeys, keys[i]);
		if (!rc)
			rc = sv_dup(&st->bvals, vals ? vals[i] : NULL);
		if (rc) {
			df_state_free(st);
			return rc;
		}
	}
	return 0;
}

void df_state_free(struct df_state *st)
{
	if (!st)
		return;
	sv_free(&st->bkeys);
	sv_free(&st->bvals);
	sv_free(&st->mkeys);
	sv_free(&st->mvals);
	sv_free(&st->akeys);
	sv_free(&st->avals);
	sv_free(&st->env);
	sv_free(&st->stages);
	free(st->workdir);
	st->workdir = NULL;
}

/* Join `dir` to the current working directory unless absolute, then clean it. */
static char *workdir_join(const char *cur, const char *dir)
{
	char *p = dir[0] == '/' ? xasprintf("%s", dir) :
		  xasprintf("%s/%s", cur ? cur : "", dir);
	if (p)
		dignore_clean(p);     /* rooted: never above "/" */
	return p;
}

int df_state_set_workdir(struct df_state *st, const char *dir)
{
	free(st->workdir);
	st->workdir = dir && *dir ? workdir_join(NULL, dir) : NULL;
	return 0;
}

int df_state_set_env(struct df_state *st, const char *const *env, size_t n)
{
	sv_free(&st->env);
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(env[i], '=');
		if (!eq || eq == env[i])
			continue;               /* Docker ignores such entries too */
		char *k = strndup(env[i], (size_t)(eq - env[i]));
		int rc = k ? env_set(&st->env, k, eq + 1) : -ENOMEM;
		free(k);
		if (rc)
			return rc;
	}
	return 0;
}

size_t df_state_unused(const struct df_state *st, const char **names, size_t max)
{
	size_t c = 0;

	for (size_t i = 0; i < st->bkeys.n; i++) {
		if (st->used[i] || proxy_arg(st->bkeys.v[i]))
			continue;
		if (c < max)
			names[c] = st->bkeys.v[i];
		c++;
	}
	return c;
}

void df_step_free(struct df_step *s)
{
	if (!s)
		return;
	sv_free(&s->argv);
	sv_free(&s->keys);
	sv_free(&s->vals);
	sv_free(&s->run_env);
	free(s->chown);
	free(s->as);
	free(s->key_text);
	memset(s, 0, sizeof(*s));
}

/* What substitution sees: the stage's ARGs with values, then the image's Env on top. */
static int scope_env(const struct df_state *st, struct df_strv *out)
{
	int rc = 0;

	for (size_t i = 0; i < st->akeys.n && !rc; i++)
		if (st->avals.v[i])
			rc = env_set(out, st->akeys.v[i], st->avals.v[i]);
	for (size_t i = 0; i < st->env.n && !rc; i++)
		rc = sv_dup(out, st->env.v[i]);
	return rc;
}

static int meta_env(const struct df_state *st, struct df_strv *out)
{
	int rc = 0;

	for (size_t i = 0; i < st->mkeys.n && !rc; i++)
		if (st->mvals.v[i])
			rc = env_set(out, st->mkeys.v[i], st->mvals.v[i]);
	return rc;
}

/* Expand every word of `in` into `out`. */
static int expand_all(const struct df_strv *in, char esc, const struct df_strv *env,
		      struct df_strv *out, unsigned line, struct k8_err *err)
{
	for (size_t i = 0; i < in->n; i++) {
		struct k8_err e = { 0 };
		char *w = in->v[i] ? df_expand(in->v[i], esc, env, &e) : NULL;
		if (in->v[i] && !w)
			return line_err(err, line, e.code ? e.code : -ENOMEM, "%s", e.msg);
		int rc = sv_push(out, w);
		if (rc)
			return rc;
	}
	return 0;
}

static int do_arg(struct df_state *st, const struct df_inst *in, struct df_step *out,
		  struct k8_err *err)
{
	bool meta = !st->in_stage;
	struct df_strv *keys = meta ? &st->mkeys : &st->akeys, *vals = meta ? &st->mvals : &st->avals;
	int rc = 0;

	for (size_t i = 0; i < in->keys.n && !rc; i++) {
		const char *k = in->keys.v[i];
		char *val = NULL;
		struct df_strv env = { 0 };
		if (!*k)
			return line_err(err, in->line, -EINVAL, "ARG names can not be blank");
		long b = sv_find(&st->bkeys, k);
		long m = meta ? -1 : sv_find(&st->mkeys, k);
		if (b >= 0)
			st->used[b] = true;
		if (b >= 0 && st->bvals.v[b]) {
			val = strdup(st->bvals.v[b]);
		} else if (in->vals.v[i]) {
			struct k8_err e = { 0 };
			rc = meta ? meta_env(st, &env) : scope_env(st, &env);
			if (!rc && !(val = df_expand(in->vals.v[i], st->escape, &env, &e)))
				rc = line_err(err, in->line, e.code ? e.code : -ENOMEM, "%s", e.msg);
		} else if (m >= 0 && st->mvals.v[m]) {
			val = strdup(st->mvals.v[m]);
		}
		sv_free(&env);
		if (rc) {
			free(val);
			return rc;
		}
		long have = sv_find(keys, k);
		if (have >= 0) {
			free(vals->v[have]);
			vals->v[have] = val;
		} else if (keys->n >= DF_MAX_ARGS) {
			free(val);
			return line_err(err, in->line, -E2BIG, "more than %d ARGs", DF_MAX_ARGS);
		} else if ((rc = sv_dup(keys, k)) || (rc = sv_push(vals, val))) {
			return rc;
		}
		if ((rc = sv_dup(&out->keys, k)) || (rc = sv_dup(&out->vals, vals->v[sv_find(keys, k)])))
			return rc;
	}
	return rc;
}

static int do_from(struct df_state *st, const struct df_inst *in, struct df_step *out,
		   struct k8_err *err)
{
	struct df_strv env = { 0 };
	int rc = meta_env(st, &env);

	if (!rc)
		rc = expand_all(&in->words, st->escape, &env, &out->argv, in->line, err);
	sv_free(&env);
	if (rc)
		return rc;
	if (!out->argv.v[0][0])
		return line_err(err, in->line, -EINVAL, "base name (%.64s) should not be blank",
				in->words.v[0]);
	out->from_stage = -1;
	for (size_t i = 0; i < st->stages.n; i++)
		if (st->stages.v[i][0] && !strcasecmp(st->stages.v[i], out->argv.v[0]))
			out->from_stage = (long)i;
	if (in->as) {
		if (sv_find(&st->stages, in->as) >= 0)
			return line_err(err, in->line, -EINVAL, "duplicate stage name \"%s\"", in->as);
		if (!(out->as = strdup(in->as)))
			return -ENOMEM;
	}
	if ((rc = sv_dup(&st->stages, in->as ? in->as : "")))
		return rc;
	sv_free(&st->akeys);
	sv_free(&st->avals);
	sv_free(&st->env);
	free(st->workdir);
	st->workdir = NULL;
	st->in_stage = true;
	return 0;
}

/* EXPOSE: port[-port][/proto] -> "port[-port]/proto". */
static int expose_norm(const char *w, unsigned line, struct df_strv *out, struct k8_err *err)
{
	const char *sl = strchr(w, '/');
	size_t n = sl ? (size_t)(sl - w) : strlen(w);
	char proto[8] = "tcp";
	unsigned lo = 0, hi = 0, *cur = &lo;
	bool range = false, digit = false;

	for (size_t i = 0; i < n; i++) {
		if (w[i] == '-' && !range && digit) {
			range = true;
			cur = &hi;
			digit = false;
			continue;
		}
		if (!isdigit((unsigned char)w[i]) || *cur > 65535)
			goto bad;
		*cur = *cur * 10 + (unsigned)(w[i] - '0');
		digit = true;
	}
	if (!digit || lo == 0 || lo > 65535 || (range && (hi < lo || hi > 65535)))
		goto bad;
	if (sl) {
		size_t pl = strlen(sl + 1);
		if (pl == 0 || pl >= sizeof(proto))
			goto bad;
		for (size_t i = 0; i <= pl; i++)
			proto[i] = (char)tolower((unsigned char)sl[1 + i]);
		if (strcmp(proto, "tcp") && strcmp(proto, "udp") && strcmp(proto, "sctp"))
			goto bad;
	}
	char *s = range ? xasprintf("%u-%u/%s", lo, hi, proto) : xasprintf("%u/%s", lo, proto);
	return sv_push(out, s);
bad:
	return line_err(err, line, -EINVAL, "invalid port for EXPOSE: \"%.32s\"", w);
}

/* The canonical text of a step: compact JSON, arrays in order. */
static char *key_text(const struct df_step *s, const struct df_strv *key_env)
{
	json_t *a = json_array(), *args = json_array(), *kv = json_array(), *env = json_array();

	for (size_t i = 0; i < s->argv.n; i++)
		json_array_append_new(args, json_string(s->argv.v[i]));
	for (size_t i = 0; i < s->keys.n; i++)
		json_array_append_new(kv, json_pack("[s, s?]", s->keys.v[i], s->vals.v[i]));
	for (size_t i = 0; key_env && i < key_env->n; i++)
		json_array_append_new(env, json_string(key_env->v[i]));
	json_array_append_new(a, json_string(df_kind_name(s->kind)));
	json_array_append_new(a, json_boolean(s->json));
	json_array_append_new(a, args);
	json_array_append_new(a, kv);
	json_array_append_new(a, s->chown ? json_string(s->chown) : json_null());
	json_array_append_new(a, env);
	char *t = json_dumps(a, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(a);
	return t;
}

int df_step(struct df_state *st, const struct df_inst *in, struct df_step *out,
	    struct k8_err *err)
{
	struct df_strv env = { 0 }, key_env = { 0 };
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->kind = in->kind;
	out->line = in->line;
	out->json = in->json;
	out->from_stage = -1;
	if (!st->in_stage && in->kind != DF_FROM && in->kind != DF_ARG)
		return line_err(err, in->line, -EINVAL, "%s before FROM", df_kind_name(in->kind));
	switch (in->kind) {
	case DF_FROM:
		rc = do_from(st, in, out, err);
		break;
	case DF_ARG:
		rc = do_arg(st, in, out, err);
		break;
	case DF_RUN:
		for (size_t i = 0; i < in->words.n && !rc; i++)
			rc = sv_dup(&out->argv, in->words.v[i]);
		/* ARG values reach the process unless ENV set the same name. */
		for (size_t i = 0; i < st->akeys.n && !rc; i++) {
			const char *k = st->akeys.v[i];
			if (!st->avals.v[i] || env_get(&st->env, k, strlen(k)))
				continue;
			char *kv = xasprintf("%s=%s", k, st->avals.v[i]);
			rc = sv_dup(&key_env, kv);
			if (!rc)
				rc = sv_push(&out->run_env, kv);
			else
				free(kv);
		}
		for (size_t i = 0; i < st->bkeys.n && !rc; i++) {
			const char *k = st->bkeys.v[i];
			if (!proxy_arg(k) || !st->bvals.v[i] || sv_find(&st->akeys, k) >= 0)
				continue;
			st->used[i] = true;
			rc = sv_push(&out->run_env, xasprintf("%s=%s", k, st->bvals.v[i]));
		}
		break;
	case DF_CMD:
	case DF_ENTRYPOINT:
		for (size_t i = 0; i < in->words.n && !rc; i++)
			rc = sv_dup(&out->argv, in->words.v[i]);
		break;
	case DF_COPY:
	case DF_ADD:
	case DF_WORKDIR:
	case DF_USER:
	case DF_EXPOSE: {
		struct df_strv words = { 0 };
		if (!(rc = scope_env(st, &env)))
			rc = expand_all(&in->words, st->escape, &env, &words, in->line, err);
		if (!rc && in->chown) {
			struct k8_err e = { 0 };
			if (!(out->chown = df_expand(in->chown, st->escape, &env, &e)))
				rc = line_err(err, in->line, e.code ? e.code : -ENOMEM, "%s", e.msg);
		}
		for (size_t i = 0; i < words.n && !rc; i++) {
			const char *w = words.v[i];
			if (in->kind == DF_EXPOSE) {
				struct df_strv parts = { 0 };
				rc = split_blanks(w, &parts);
				for (size_t k = 0; k < parts.n && !rc; k++)
					rc = expose_norm(parts.v[k], in->line, &out->argv, err);
				sv_free(&parts);
				continue;
			}
			if ((in->kind == DF_COPY || in->kind == DF_ADD) && i + 1 < words.n) {
				if (in->kind == DF_ADD && is_url(w)) {
					rc = line_err(err, in->line, -ENOTSUP, "ADD from a URL (%.64s) is "
						      "not supported by kosa8: download it in a RUN step",
						      w);
					break;
				}
				char *c = malloc(strlen(w) + 2);
				if (c)
					strcpy(c, w);
				if (!c) {
					rc = -ENOMEM;
					break;
				}
				dignore_clean(c);
				bool outside = !strcmp(c, "..") || !strncmp(c, "../", 3);
				free(c);
				if (outside) {
					rc = line_err(err, in->line, -EPERM, "forbidden path outside the "
						      "build context: %.64s", w);
					break;
				}
			}
			if ((in->kind == DF_USER || in->kind == DF_WORKDIR) && !*w) {
				rc = line_err(err, in->line, -EINVAL, "%s is empty after substitution",
					      df_kind_name(in->kind));
				break;
			}
			if (in->kind == DF_WORKDIR) {
				char *abs = workdir_join(st->workdir, w);
				free(st->workdir);
				st->workdir = abs;
				rc = sv_dup(&out->argv, abs);
				continue;
			}
			rc = sv_dup(&out->argv, w);
		}
		sv_free(&words);
		break;
	}
	case DF_ENV:
	case DF_LABEL:
		if (!(rc = scope_env(st, &env)))
			rc = expand_all(&in->keys, st->escape, &env, &out->keys, in->line, err);
		if (!rc)
			rc = expand_all(&in->vals, st->escape, &env, &out->vals, in->line, err);
		for (size_t i = 0; i < out->keys.n && !rc; i++) {
			if (!out->keys.v[i][0])
				rc = line_err(err, in->line, -EINVAL, "%s names can not be blank",
					      df_kind_name(in->kind));
			else if (in->kind == DF_ENV && (rc = env_set(&st->env, out->keys.v[i],
								      out->vals.v[i])))
				rc = line_err(err, in->line, rc, "too many ENV entries");
		}
		break;
	}
	sv_free(&env);
	if (!rc && !(out->key_text = key_text(out, &key_env)))
		rc = -ENOMEM;
	sv_free(&key_env);
	if (rc)
		df_step_free(out);
	return rc;
}

/* ---- cache keys ------------------------------------------------------------------------- */

static int cmp_file(const void *a, const void *b)
{
	return strcmp(((const struct df_copy_file *)a)->path, ((const struct df_copy_file *)b)->path);
}

static void sha_final_hex(EVP_MD_CTX *c, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	EVP_DigestFinal_ex(c, md, &n);
	k8_hex(md, 32, out);
}

static void sha_str(EVP_MD_CTX *c, const char *s)
{
	EVP_DigestUpdate(c, s ? s : "", s ? strlen(s) + 1 : 1);  /* NUL-separated */
}

int df_content_digest(struct df_copy_file *files, size_t n, char out[65])
{
	char num[96];

	for (size_t i = 0; i < n; i++)
		if (!files[i].path)
			return -EINVAL;
	if (n)
		qsort(files, n, sizeof(*files), cmp_file);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	if (!c)
		return -ENOMEM;
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	sha_str(c, "kosa8-copy-v1");
	for (size_t i = 0; i < n; i++) {
		const struct df_copy_file *f = &files[i];
		snprintf(num, sizeof(num), "%o %u %u %llu", f->mode, f->uid, f->gid,
			 (unsigned long long)f->size);
		sha_str(c, f->path);
		sha_str(c, num);
		sha_str(c, f->link_target);
		sha_str(c, f->sha256);
	}
	sha_final_hex(c, out);
	EVP_MD_CTX_free(c);
	return 0;
}

int df_step_key(const char *parent_id, const struct df_step *s, const char *content_digest,
		char out[65])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();

	if (!c)
		return -ENOMEM;
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	sha_str(c, "kosa8-step-v1");
	sha_str(c, parent_id);
	sha_str(c, s->key_text);
	sha_str(c, content_digest);
	sha_final_hex(c, out);
	EVP_MD_CTX_free(c);
	return 0;
}
