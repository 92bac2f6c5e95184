/* SPDX-License-Identifier: Apache-2.0 */
/* filters.c - the list endpoints' `filters` parameter and its matchers (filters.h). */
#include "docker/filters.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "docker/stream.h"
#include "image/image.h"

void dfilters_free(struct dfilters *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++) {
		for (size_t k = 0; k < f->f[i].n; k++)
			free(f->f[i].values[k]);
		free(f->f[i].values);
		free(f->f[i].name);
	}
	memset(f, 0, sizeof(*f));
}

static bool name_allowed(const char *name, const char *const *allowed)
{
	for (; allowed && *allowed; allowed++)
		if (!strcmp(*allowed, name))
			return true;
	return false;
}

static int add_value(struct dfilter_field *fl, const char *v, size_t len, struct k8_err *err)
{
	if (fl->n >= DF_FILTER_VALUES_MAX)
		return k8_err_set(err, -E2BIG, "too many values for filter '%s' (at most %d)",
				  fl->name, DF_FILTER_VALUES_MAX);
	if (len > DF_FILTER_VALUE_LEN || strlen(v) != len)
		return k8_err_set(err, -EINVAL, "filter '%s': value too long or not text",
				  fl->name);
	/* A name keeps a value once, as moby's map does. */
	for (size_t i = 0; i < fl->n; i++)
		if (!strcmp(fl->values[i], v))
			return 0;
	if (!fl->values && !(fl->values = calloc(DF_FILTER_VALUES_MAX, sizeof(char *))))
		return -ENOMEM;
	if (!(fl->values[fl->n] = strdup(v)))
		return -ENOMEM;
	fl->n++;
	return 0;
}

int dfilters_parse(const char *js, const char *const *allowed, struct dfilters *out,
		   struct k8_err *err)
{
	json_error_t jerr;
	const char *key;
	json_t *val;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!js || !*js)
		return 0;
	if (strlen(js) > DF_FILTER_JSON_MAX)
		return k8_err_set(err, -E2BIG, "filters parameter longer than %d bytes",
				  DF_FILTER_JSON_MAX);
	json_t *o = json_loads(js, 0, &jerr);
	if (!json_is_object(o)) {
		json_decref(o);
		return k8_err_set(err, -EINVAL, "invalid filters: expected a JSON object such "
				  "as {\"name\":[\"x\"]}");
	}
	json_object_foreach(o, key, val) {
		if (!name_allowed(key, allowed)) {
			rc = k8_err_set(err, -EINVAL, "invalid filter '%.64s'", key);
			break;
		}
		if (out->n >= DF_FILTER_NAMES_MAX) {
			rc = k8_err_set(err, -E2BIG, "too many filters");
			break;
		}
		struct dfilter_field *fl = &out->f[out->n++];
		if (!(fl->name = strdup(key))) {
			rc = -ENOMEM;
			break;
		}
		if (json_is_array(val)) {        /* {"name": ["a", "b"]} */
			size_t i;
			json_t *v;
			json_array_foreach(val, i, v) {
				if (!json_is_string(v)) {
					rc = k8_err_set(err, -EINVAL, "filter '%s': values must be "
							"strings", key);
					break;
				}
				if ((rc = add_value(fl, json_string_value(v), json_string_length(v),
						    err)))
					break;
			}
		} else if (json_is_object(val)) { /* {"name": {"a": true}} */
			const char *k;
			json_t *b;
			json_object_foreach(val, k, b) {
				if (!json_is_boolean(b)) {
					rc = k8_err_set(err, -EINVAL, "filter '%s': map values must be "
							"booleans", key);
					break;
				}
				if ((rc = add_value(fl, k, strlen(k), err)))
					break;
			}
		} else {
			rc = k8_err_set(err, -EINVAL, "filter '%s': expected a list or a map", key);
		}
		if (rc)
			break;
	}
	json_decref(o);
	if (rc)
		dfilters_free(out);
	return rc;
}

char *const *dfilters_get(const struct dfilters *f, const char *name, size_t *n)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->f[i].name, name)) {
			*n = f->f[i].n;
			return f->f[i].values;
		}
	*n = 0;
	return NULL;
}

bool dfilters_has(const struct dfilters *f, const char *name)
{
	size_t n;
	return dfilters_get(f, name, &n) != NULL;
}

int dfilters_check_status(const struct dfilters *f, struct k8_err *err)
{
	static const char *const states[] = { "created", "restarting", "running", "removing",
					      "paused", "exited", "dead", NULL };
	size_t n;
	char *const *v = dfilters_get(f, "status", &n);

	for (size_t i = 0; i < n; i++)
		if (!name_allowed(v[i], states))
			return k8_err_set(err, -EINVAL, "invalid filter 'status=%s'", v[i]);
	return 0;
}

/* A Go duration: a sign, then one or more decimal numbers (a fraction allowed) each with
 * a unit ns us µs ms s m h. Nanoseconds, or -EINVAL (also past ~292 years). */
static int go_duration(const char *s, int64_t *out)
{
	static const struct { const char *u; double ns; } units[] = {
		{ "ns", 1 }, { "us", 1e3 }, { "\xc2\xb5s", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
		{ "m", 60e9 }, { "h", 3600e9 },
	};
	double total = 0;
	int sign = 1;

	if (*s == '-' || *s == '+')
		sign = *s++ == '-' ? -1 : 1;
	if (!strcmp(s, "0")) {
		*out = 0;
		return 0;
	}
	if (!*s)
		return -EINVAL;
	while (*s) {
		double v = 0, scale = 1;
		bool any = false;
		size_t best = 0, ul = 0;

		for (; isdigit((unsigned char)*s); s++, any = true)
			v = v * 10 + (*s - '0');
		if (*s == '.')
			for (s++; isdigit((unsigned char)*s); s++, any = true)
				v += (*s - '0') * (scale /= 10);
		if (!any)
			return -EINVAL;
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			size_t l = strlen(units[i].u);
			if (!strncmp(s, units[i].u, l) && l > ul) {
				best = i;
				ul = l;
			}
		}
		if (!ul)
			return -EINVAL;
		total += v * units[best].ns;
		s += ul;
		if (total > 9.2e18)
			return -EINVAL;
	}
	*out = sign * (int64_t)total;
	return 0;
}

/* "2006-01-02", "2006-01-02T15:04" or "2006-01-02T15:04:05": the host's local time. */
static int local_time(const char *s, int64_t *sec)
{
	static const char *const fmts[] = { "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d" };

	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		struct tm tm = { 0 };
		const char *end = strptime(s, fmts[i], &tm);
		time_t t;
		if (!end || *end || !isdigit((unsigned char)*s))
			continue;
		tm.tm_isdst = -1;
		if ((t = mktime(&tm)) == (time_t)-1)
			return -EINVAL;
		*sec = t;
		return 0;
	}
	return -EINVAL;
}

/* sec seconds and ns nanoseconds as nanoseconds since the epoch, saturated: a time
 * past what int64 nanoseconds hold (after 2262, before 1677) is after, or before,
 * every container there is. */
static int64_t epoch_ns(int64_t sec, int64_t ns)
{
	int64_t r;

	if (__builtin_mul_overflow(sec, (int64_t)1000000000, &r) ||
	    __builtin_add_overflow(r, ns, &r))
		return sec < 0 ? INT64_MIN : INT64_MAX;
	return r;
}

/* "1700000000" or "1700000000.123": seconds (and a fraction) since the epoch. */
static int unix_time(const char *s, int64_t *ns)
{
	int64_t sec = 0, frac = 0, scale = 1000000000;
	const char *p = s;

	for (; isdigit((unsigned char)*p); p++) {
		if (sec > 99999999999)
			return -EINVAL;
		sec = sec * 10 + (*p - '0');
	}
	if (p == s)
		return -EINVAL;
	if (*p == '.') {
		const char *q = ++p;
		for (; isdigit((unsigned char)*p) && p - q < 9; p++)
			frac += (*p - '0') * (scale /= 10);
		if (p == q || *p)
			return -EINVAL;
	}
	if (*p)
		return -EINVAL;
	*ns = epoch_ns(sec, frac);
	return 0;
}

int dfilters_until(const struct dfilters *f, int64_t now_ns, int64_t *until_ns,
		   struct k8_err *err)
{
	size_t n;
	char *const *v = dfilters_get(f, "until", &n);
	int64_t x, sec;
	int32_t nsec;

	*until_ns = INT64_MAX;
	if (!n)
		return 0;
	if (n > 1)
		return k8_err_set(err, -EINVAL, "more than one until filter specified");
	if (ds_parse_rfc3339(v[0], &sec, &nsec) == 0)
		*until_ns = epoch_ns(sec, nsec);
	else if (local_time(v[0], &sec) == 0)
		*until_ns = epoch_ns(sec, 0);
	else if (unix_time(v[0], &x) == 0)
		*until_ns = x;
	else if (go_duration(v[0], &x) == 0) {
		if (__builtin_sub_overflow(now_ns, x, until_ns))
			*until_ns = x < 0 ? INT64_MAX : INT64_MIN;
	} else
		return k8_err_set(err, -EINVAL,
				  "invalid filter 'until=%s': give a duration (24h, 90m), a Unix "
				  "time or a date (2006-01-02T15:04:05)", v[0]);
	return 0;
}

bool dfilters_match_labels(const struct dfilters *f, const char *const *keys,
			   const char *const *vals, size_t n)
{
	size_t nv;
	char *const *v = dfilters_get(f, "label", &nv);

	for (size_t i = 0; i < nv; i++) {
		const char *eq = strchr(v[i], '=');
		size_t klen = eq ? (size_t)(eq - v[i]) : strlen(v[i]);
		bool hit = false;
		for (size_t k = 0; k < n && !hit; k++)
			hit = strlen(keys[k]) == klen && !strncmp(keys[k], v[i], klen) &&
			      (!eq || !strcmp(vals[k] ? vals[k] : "", eq + 1));
		if (!hit)
			return false;
	}
	return true;
}

/* The regular-expression subset: atoms (a byte or '.') each with a quantifier, matched by
 * simulating all states at once (linear in pattern x subject, no backtracking). */
#define RE_MAX 128
struct re_atom {
	int c;          /* byte, or -1 for '.' */
	char q;         /* 0, '*' or '?' ('+' is compiled as the atom then the atom '*') */
};

static int re_compile(const char *re, struct re_atom *a, size_t *na, bool *bol, bool *eol)
{
	size_t n = 0;

	*bol = *eol = false;
	if (*re == '^') {
		*bol = true;
		re++;
	}
	for (; *re; re++) {
		int c = (unsigned char)*re;
		if (c == '$' && re[1] == '\0') {
			*eol = true;
			break;
		}
		if (strchr("[](){}|^$", c))
			return -1;
		if (c == '*' || c == '+' || c == '?') {
			if (n == 0 || a[n - 1].q)
				return -1;
			if (c == '+') {
				if (n >= RE_MAX)
					return -1;
				a[n] = a[n - 1];
				a[n++].q = '*';
			} else {
				a[n - 1].q = (char)c;
			}
			continue;
		}
		if (c == '\\') {
			c = (unsigned char)*++re;
			if (!c || isalnum(c))    /* \d, \w ... are classes: not in the subset */
				return -1;
		} else if (c == '.') {
			c = -1;
		}
		if (n >= RE_MAX)
			return -1;
		a[n].c = c;
		a[n++].q = 0;
	}
	*na = n;
	return 0;
}

/* Add state i and every state reachable by skipping optional atoms. */
static void re_add(bool *set, const struct re_atom *a, size_t na, size_t i)
{
	for (; i <= na && !set[i]; i++) {
		set[i] = true;
		if (i == na || !a[i].q)
			break;
	}
}

int dfilters_regex(const char *re, const char *s)
{
	struct re_atom a[RE_MAX];
	bool cur[RE_MAX + 1], nxt[RE_MAX + 1], bol, eol;
	size_t na;

	if (strlen(re) > RE_MAX || re_compile(re, a, &na, &bol, &eol))
		return -1;
	memset(cur, 0, sizeof(cur));
	re_add(cur, a, na, 0);
	for (;; s++) {
		if (cur[na] && (!eol || !*s))
			return 1;
		if (!*s)
			return 0;
		memset(nxt, 0, sizeof(nxt));
		for (size_t i = 0; i < na; i++) {
			if (!cur[i] || (a[i].c >= 0 && a[i].c != (unsigned char)*s) ||
			    (a[i].c < 0 && *s == '\n'))
				continue;
			re_add(nxt, a, na, a[i].q == '*' ? i : i + 1);
		}
		if (!bol)
			re_add(nxt, a, na, 0);
		memcpy(cur, nxt, sizeof(cur));
	}
}

bool dfilters_match_regex(const struct dfilters *f, const char *name, const char *subject)
{
	size_t n;
	char *const *v = dfilters_get(f, name, &n);

	if (!v)
		return true;
	for (size_t i = 0; i < n; i++) {
		/* moby: an exact match first, then the regular expression. */
		if (!strcmp(v[i], subject))
			return true;
		int m = dfilters_regex(v[i], subject);
		if (m == 1 || (m < 0 && strstr(subject, v[i])))
			return true;
	}
	return false;
}

bool dfilters_match_exact(const struct dfilters *f, const char *name, const char *value)
{
	size_t n;
	char *const *v = dfilters_get(f, name, &n);

	if (!v)
		return true;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i], value))
			return true;
	return false;
}

static bool id_prefix(const char *v, const char *id)
{
	size_t n;

	if (!id)
		return false;
	if (!strncmp(v, "sha256:", 7))
		v += 7;
	if (!strncmp(id, "sha256:", 7))
		id += 7;
	n = strlen(v);
	if (n < 4)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)v[i]))
			return false;
	return !strncmp(id, v, n);
}

bool dfilters_match_ancestor(const struct dfilters *f, const char *image_ref,
			     const char *image_id)
{
	size_t n;
	char *const *v = dfilters_get(f, "ancestor", &n);
	char want[512], have[512];

	if (!v)
		return true;
	if (image_ref && image_ref_normalize(image_ref, have, sizeof(have), NULL))
		snprintf(have, sizeof(have), "%s", image_ref);
	for (size_t i = 0; i < n; i++) {
		if (id_prefix(v[i], image_id))
			return true;
		if (image_ref && !image_ref_normalize(v[i], want, sizeof(want), NULL) &&
		    !strcmp(want, have))
			return true;
	}
	return false;
}

bool dfilters_match_reference(const struct dfilters *f, const char *const *names, size_t n)
{
	size_t nv;
	char *const *v = dfilters_get(f, "reference", &nv);
	char repo[512];

	if (!v)
		return true;
	for (size_t i = 0; i < nv; i++)
		for (size_t j = 0; j < n; j++) {
			const char *slash = strrchr(names[j], '/');
			const char *colon = strrchr(slash ? slash : names[j], ':');
			size_t len = colon ? (size_t)(colon - names[j]) : strlen(names[j]);

			if (!fnmatch(v[i], names[j], FNM_PATHNAME))
				return true;
			if (len < sizeof(repo)) {
				memcpy(repo, names[j], len);
				repo[len] = '\0';
				if (!fnmatch(v[i], repo, FNM_PATHNAME))
					return true;
			}
		}
	return false;
}
