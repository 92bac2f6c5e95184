/* SPDX-License-Identifier: Apache-2.0 */
/* dockerignore.c - .dockerignore parsing and matching (dockerignore.h).
 *
 * Theory of operation. moby turns each pattern into a Go regular expression:
 * a star becomes [^/]*, '?' becomes [^/], "**" followed by '/' any run of whole
 * directories (possibly none), a trailing "**" anything, a class is passed through, and
 * a backslash escapes the next character. We match the same language without
 * regular expressions: one pass over the pattern carrying the set of path positions
 * reachable so far (a bool per byte of the path), so the cost is pattern x path with no
 * backtracking, whatever a hostile context sends. One quirk is kept on purpose: moby
 * matches a pattern "**<literal>" with no other special character as a plain suffix
 * ("**foo" excludes "barfoo"). */
#include "docker/dockerignore.h"

#include <stdio.h>
#include <string.h>

struct dignore_pat {
	char *pat;
	bool excl;
};

void dignore_clean(char *path)
{
	bool rooted = path[0] == '/';
	char *out = path, *r = path;
	size_t dotdot = rooted ? 1 : 0;   /* out may not back up below this */
	size_t w = 0;

	if (rooted) {
		out[w++] = '/';
		r++;
	}
	while (*r) {
		if (*r == '/') {
			r++;
		} else if (r[0] == '.' && (r[1] == '/' || !r[1])) {
			r++;
		} else if (r[0] == '.' && r[1] == '.' && (r[2] == '/' || !r[2])) {
			r += 2;
			if (w > dotdot) {                 /* drop the last element */
				w--;
				while (w > dotdot && out[w] != '/')
					w--;
			} else if (!rooted) {             /* cannot resolve: keep ".." */
				if (w > 0)
					out[w++] = '/';
				out[w++] = '.';
				out[w++] = '.';
				dotdot = w;
			}
		} else {
			if ((rooted && w != 1) || (!rooted && w != 0))
				out[w++] = '/';
			while (*r && *r != '/')
				out[w++] = *r++;
		}
	}
	if (w == 0)
		out[w++] = '.';
	out[w] = '\0';
}

/* Length and value of the UTF-8 rune at s (at most n bytes); a bad byte counts alone. */
static size_t rune_at(const unsigned char *s, size_t n, unsigned *cp)
{
	size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xf0 && s[0] < 0xf8 ? 4 :
		     s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 1;
	if (len > n)
		len = 1;
	*cp = len == 1 ? s[0] : s[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*cp = s[0];
			return 1;
		}
		*cp = *cp << 6 | (s[i] & 0x3f);
	}
	return len;
}

/* One class element of the pattern at *p: a rune or "\x". -1 at the end of the pattern. */
static long class_char(const char **p)
{
	unsigned cp;

	if (**p == '\\')
		(*p)++;
	if (!**p)
		return -1;
	*p += rune_at((const unsigned char *)*p, strlen(*p), &cp);
	return cp;
}

/* Does the class starting after '[' at *p contain cp? Advances *p past ']'.
 * -EINVAL for an unterminated class or a range going backwards. */
static int class_match(const char **p, unsigned cp)
{
	bool neg = false, hit = false;
	int nrange = 0;

	if (**p == '^') {
		neg = true;
		(*p)++;
	}
	for (;;) {
		if (**p == ']' && nrange > 0) {
			(*p)++;
			break;
		}
		long lo = class_char(p), hi = lo;
		if (lo < 0)
			return -EINVAL;
		if (**p == '-' && (*p)[1] != ']') {
			(*p)++;
			if ((hi = class_char(p)) < 0 || hi < lo)
				return -EINVAL;
		}
		if (cp >= (unsigned long)lo && cp <= (unsigned long)hi)
			hit = true;
		nrange++;
	}
	return hit != neg;
}

static int glob_dp(const char *pat, const char *path, size_t n, bool *cur, bool *nxt)
{
	const unsigned char *s = (const unsigned char *)path;
	const char *p = pat;

	memset(cur, 0, n + 1);
	cur[0] = true;
	while (*p) {
		memset(nxt, 0, n + 1);
		if (p[0] == '*' && p[1] == '*') {
			p += 2;
			if (*p == '/')
				p++;
			bool any = false;
			for (size_t k = 0; k <= n; k++) {
				any = any || cur[k];
				if (!*p)                   /* trailing "**": anything */
					nxt[k] = any;
				else if (cur[k] || (k > 0 && s[k - 1] == '/' && any))
					nxt[k] = true;     /* zero or more dirs */
			}
		} else if (*p == '*') {
			p++;
			bool run = false;
			for (size_t k = 0; k <= n; k++) {
				run = (run && k > 0 && s[k - 1] != '/') || cur[k];
				nxt[k] = run;
			}
		} else if (*p == '?' || *p == '[') {
			const char *start = p + 1, *q = start;
			bool cls = *p == '[';
			if (cls) {                         /* validate and find the end once */
				if (class_match(&q, 0) < 0)
					return -EINVAL;
			}
			for (size_t k = 0; k < n; k++) {
				unsigned cp;
				if (!cur[k])
					continue;
				size_t len = rune_at(s + k, n - k, &cp);
				const char *c = start;
				if (cls ? class_match(&c, cp) == 1 : cp != '/')
					nxt[k + len] = true;
			}
			p = q;
			if (!cls)
				p = start;
		} else {
			char c = *p++;
			if (c == '\\') {
				if (!*p)
					return -EINVAL;    /* Go's Match: a trailing '\' is bad */
				c = *p++;
			}
			for (size_t k = 0; k < n; k++)
				if (cur[k] && s[k] == (unsigned char)c)
					nxt[k + 1] = true;
		}
		bool *t = cur;
		cur = nxt;
		nxt = t;
		if (!memchr(cur, true, n + 1))    /* nothing left to extend */
			return 0;
	}
	return cur[n];
}

/* Go's filepath.Match errors: an unterminated or backwards class, a trailing '\'. */
static bool glob_valid(const char *p)
{
	while (*p) {
		if (*p == '\\') {
			if (!p[1])
				return false;
			p += 2;
		} else if (*p++ == '[' && class_match(&p, 0) < 0) {
			return false;
		}
	}
	return true;
}

/* `checked`: the pattern is known to be well-formed (dignore_parse checked it), so a
 * path that does not start with the pattern's literal prefix can be refused at once. */
static int glob_match(const char *pattern, const char *path, bool checked)
{
	size_t n = strlen(path);
	bool stack_buf[2 * 257];

	if (!checked && !glob_valid(pattern))
		return -EINVAL;
	if (checked) {
		size_t lit = strcspn(pattern, "*?[\\");
		if (strncmp(pattern, path, lit))
			return 0;
		if (!pattern[lit])
			return path[lit] == '\0';
	}

	/* moby's suffix match: "**" then nothing special. */
	if (pattern[0] == '*' && pattern[1] == '*' && !strpbrk(pattern + 2, "*?[]\\")) {
		const char *suf = pattern + 2;
		size_t sl = strlen(suf);
		if (n >= sl && !strcmp(path + n - sl, suf))
			return 1;
		return suf[0] == '/' && !strcmp(path, suf + 1);
	}
	bool *buf = n < 257 ? stack_buf : malloc(2 * (n + 1));
	if (!buf)
		return -ENOMEM;
	int rc = glob_dp(pattern, path, n, buf, buf + n + 1);
	if (buf != stack_buf)
		free(buf);
	return rc;
}

int dignore_glob(const char *pattern, const char *path)
{
	return glob_match(pattern, path, false);
}

void dignore_free(struct dignore *ig)
{
	if (!ig)
		return;
	for (size_t i = 0; i < ig->n; i++)
		free(ig->p[i].pat);
	free(ig->p);
	ig->p = NULL;
	ig->n = 0;
}

static void trim(char **s, size_t *n)
{
	while (*n && strchr(" \t\r\v\f", **s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && strchr(" \t\r\v\f", (*s)[*n - 1]))
		(*n)--;
}

int dignore_parse(const char *text, size_t len, struct dignore *out, struct k8_err *err)
{
	size_t lineno = 0, cap = 0;
	const char *p = text, *end = text + len;

	memset(out, 0, sizeof(*out));
	if (len > DIGNORE_FILE_MAX)
		return k8_err_set(err, -E2BIG, ".dockerignore is larger than %d bytes",
				  DIGNORE_FILE_MAX);
	if (len >= 3 && !memcmp(p, "\xef\xbb\xbf", 3))
		p += 3;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char *line = (char *)p;
		bool excl = false;

		lineno++;
		p += n + (nl ? 1 : 0);
		if (n && line[0] == '#')          /* comment: before trimming, as moby does */
			continue;
		trim(&line, &n);
		if (!n)
			continue;
		if (n > DIGNORE_PATTERN_LEN || memchr(line, '\0', n)) {
			dignore_free(out);
			return k8_err_set(err, -EINVAL, ".dockerignore line %zu: pattern too long "
					  "or not text", lineno);
		}
		if (line[0] == '!') {
			excl = true;
			line++;
			n--;
			trim(&line, &n);
			if (!n) {
				dignore_free(out);
				return k8_err_set(err, -EINVAL, ".dockerignore line %zu: illegal "
						  "exclusion pattern: \"!\"", lineno);
			}
		}
		if (out->n >= DIGNORE_PATTERNS_MAX) {
			dignore_free(out);
			return k8_err_set(err, -E2BIG, ".dockerignore: more than %d patterns",
					  DIGNORE_PATTERNS_MAX);
		}
		if (out->n == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			struct dignore_pat *np = realloc(out->p, ncap * sizeof(*np));
			if (!np) {
				dignore_free(out);
				return -ENOMEM;
			}
			out->p = np;
			cap = ncap;
		}
		char *pat = strndup(line, n);
		if (!pat) {
			dignore_free(out);
			return -ENOMEM;
		}
		dignore_clean(pat);
		if (pat[0] == '/' && pat[1])
			memmove(pat, pat + 1, strlen(pat));
		/* moby checks the syntax up front with filepath.Match(p, "."). */
		if (dignore_glob(pat, ".") < 0) {
			free(pat);
			dignore_free(out);
			return k8_err_set(err, -EINVAL, ".dockerignore line %zu: syntax error in "
					  "pattern", lineno);
		}
		out->p[out->n].pat = pat;
		out->p[out->n++].excl = excl;
	}
	return 0;
}

bool dignore_excluded(const struct dignore *ig, const char *path)
{
	bool matched = false;
	size_t n = strlen(path);
	char *f = malloc(n + 2);

	if (!f)
		return false;
	memcpy(f, path, n + 1);
	dignore_clean(f);
	if (!strcmp(f, ".") || (f[0] == '/' && !f[1])) {
		free(f);
		return false;
	}
	for (size_t i = 0; i < ig->n; i++) {
		if (ig->p[i].excl != matched)
			continue;
		bool m = glob_match(ig->p[i].pat, f, true) == 1;
		/* A pattern matching a parent directory matches what is below it. */
		for (char *sl = strchr(f, '/'); !m && sl; sl = strchr(sl + 1, '/')) {
			*sl = '\0';
			m = glob_match(ig->p[i].pat, f, true) == 1;
			*sl = '/';
		}
		if (m)
			matched = !ig->p[i].excl;
	}
	free(f);
	return matched;
}
