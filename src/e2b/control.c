/* SPDX-License-Identifier: Apache-2.0 */
/* control.c - E2B's control plane on the wire: ids, create, network, list (control.h). */
#include "e2b/control.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

static int fill_random(void *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = getrandom((char *)p + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO;
		got += (size_t)r;
	}
	return 0;
}

int e2b_id_new(char out[E2B_ID_LEN + 1])
{
	static const char alnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char r[E2B_ID_LEN];
	int i = 0;

	while (i < E2B_ID_LEN) {
		if (fill_random(r, sizeof(r)))
			return -EIO;
		for (size_t k = 0; k < sizeof(r) && i < E2B_ID_LEN; k++)
			if (r[k] < 252)         /* 252 = 7 * 36: no bias */
				out[i++] = alnum[r[k] % 36];
	}
	out[0] = alnum[out[0] % 26];    /* a letter first: never all digits */
	out[E2B_ID_LEN] = '\0';
	return 0;
}

bool e2b_id_ok(const char *s)
{
	if (!s || strlen(s) != E2B_ID_LEN)
		return false;
	for (int i = 0; i < E2B_ID_LEN; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

static int hex_new(char *out, size_t nhex)
{
	unsigned char r[64];

	if (nhex / 2 > sizeof(r) || fill_random(r, nhex / 2))
		return -EIO;
	k8_hex(r, nhex / 2, out);
	explicit_bzero(r, sizeof(r));
	return 0;
}

int e2b_key_new(char out[E2B_KEY_LEN + 1])
{
	memcpy(out, "e2b_", 4);
	return hex_new(out + 4, E2B_KEY_HEX);
}

bool e2b_key_format_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n < 5 || n > 4 + 128 || strncmp(s, "e2b_", 4))
		return false;
	return strspn(s + 4, "0123456789abcdef") == n - 4;
}

int e2b_token_new(char out[E2B_TOKEN_LEN + 1])
{
	return hex_new(out, E2B_TOKEN_LEN);
}

bool e2b_secret_eq(const char *a, const char *b)
{
	size_t na = strnlen(a, 257), nb = strnlen(b, 257);
	unsigned char d = na != nb || na > 256;

	for (size_t i = 0; i < 256; i++)
		d |= (unsigned char)((i < na ? a[i] : 0) ^ (i < nb ? b[i] : 0));
	return !d;
}

/* ---- fields ---- */

static bool env_name_ok(const char *k)
{
	if (!*k || isdigit((unsigned char)*k))
		return false;
	for (; *k; k++)
		if (!isalnum((unsigned char)*k) && *k != '_')
			return false;
	return true;
}

int e2b_str_map(json_t *v, const char *what, size_t max, size_t kmax, size_t vmax, bool env,
		struct k8_err *err)
{
	const char *k;
	json_t *x;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return k8_err_set(err, -EINVAL, "%s must be an object of strings", what);
	if (json_object_size(v) > max)
		return k8_err_set(err, -EINVAL, "%s has more than %zu entries", what, max);
	json_object_foreach(v, k, x) {
		if (!*k || strlen(k) > kmax || (env && !env_name_ok(k)))
			return k8_err_set(err, -EINVAL, "%s: key '%.60s' must be %s of 1..%zu bytes",
					  what, k, env ? "a variable name" : "a string", kmax);
		if (!json_is_string(x) || json_string_length(x) > vmax ||
		    strlen(json_string_value(x)) != json_string_length(x))
			return k8_err_set(err, -EINVAL, "%s: the value of '%.60s' must be a string of "
					  "at most %zu bytes without NUL", what, k, vmax);
	}
	return 0;
}

int e2b_timeout(json_t *body, int64_t *out, struct k8_err *err)
{
	json_t *t = json_object_get(body, "timeout");

	if (!t || json_is_null(t))
		return 0;
	if (!json_is_integer(t) || json_integer_value(t) < 0 ||
	    json_integer_value(t) > E2B_TIMEOUT_MAX)
		return k8_err_set(err, -EINVAL, "timeout must be a number of seconds 0..%d",
				  E2B_TIMEOUT_MAX);
	*out = json_integer_value(t) ? json_integer_value(t) : E2B_TIMEOUT_DEFAULT;
	return 0;
}

/* ---- network ---- */

static bool all_traffic(const char *s)
{
	return !strcmp(s, "0.0.0.0/0") || !strcmp(s, "::/0");
}

/* A host name of a transform rule: letters, digits, '-', '.'; no wildcard. */
static bool rule_host_ok(const char *h)
{
	size_t n = strlen(h);

	if (!n || n > 253 || h[0] == '.' || h[n - 1] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)h[i]) && h[i] != '-' && h[i] != '.')
			return false;
	return true;
}

static bool header_name_ok(const char *h)
{
	size_t n = strlen(h);

	if (!n || n > 127)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)h[i]) && !strchr("!#$%&'*+-.^_`|~", h[i]))
			return false;
	return true;
}

static int net_list(json_t *v, const char *what, json_t **out, struct k8_err *err)
{
	size_t i;
	json_t *x;

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) > 256)
		return k8_err_set(err, -EINVAL, "network.%s must be a list of at most 256 strings",
				  what);
	json_array_foreach(v, i, x)
		if (!json_is_string(x) || !json_string_length(x) || json_string_length(x) > 260 ||
		    strlen(json_string_value(x)) != json_string_length(x))
			return k8_err_set(err, -EINVAL, "network.%s[%zu] must be an address, a "
					  "network or a host name", what, i);
	*out = json_incref(v);
	return 0;
}

static int net_transforms(json_t *rules, struct e2b_net *n, struct k8_err *err)
{
	const char *host;
	json_t *list;

	if (!json_is_object(rules))
		return k8_err_set(err, -EINVAL, "network.rules must be an object of host -> rules");
	n->has_rules = true;
	json_object_foreach(rules, host, list) {
		size_t i;
		json_t *rule;

		if (!rule_host_ok(host))
			return k8_err_set(err, -ENOTSUP, "network.rules['%.80s']: kosa8's broker takes "
					  "exact host names only (no wildcards)", host);
		if (!json_is_array(list))
			return k8_err_set(err, -EINVAL, "network.rules['%.80s'] must be a list", host);
		json_array_foreach(list, i, rule) {
			json_t *tf = json_object_get(rule, "transform"), *hdrs, *val;
			const char *h;

			if (!json_is_object(rule))
				return k8_err_set(err, -EINVAL, "network.rules['%.80s'][%zu] must be "
						  "an object", host, i);
			if (!tf || json_is_null(tf))
				continue;
			hdrs = json_object_get(tf, "headers");
			if (json_object_size(tf) != (hdrs ? 1u : 0u) || (hdrs && !json_is_object(hdrs)))
				return k8_err_set(err, -ENOTSUP, "network.rules['%.80s']: only header "
						  "transforms are supported by kosa8", host);
			json_object_foreach(hdrs, h, val) {
				struct e2b_transform *t;
				const char *s = json_string_value(val);
				if (!header_name_ok(h) || !s)
					return k8_err_set(err, -EINVAL, "network.rules['%.80s']: header "
							  "'%.60s' needs a name and a string value",
							  host, h);
				for (size_t j = 0; j < n->nt; j++)
					if (!strcasecmp(n->t[j].host, host))
						return k8_err_set(err, -ENOTSUP, "network.rules['%.80s']: "
								  "kosa8's broker adds one header per "
								  "host", host);
				if (n->nt == E2B_TRANSFORM_MAX)
					return k8_err_set(err, -ENOTSUP, "network.rules: at most %d "
							  "hosts with header rules",
							  E2B_TRANSFORM_MAX);
				t = &n->t[n->nt];
				bool bearer = !strncmp(s, "Bearer ", 7);
				if (bearer)
					s += 7;
				size_t len = strlen(s);
				bool visible = len > 0 && len <= 4096;
				for (size_t k = 0; visible && k < len; k++)
					visible = s[k] > 0x20 && s[k] < 0x7f;
				if (!visible)
					return k8_err_set(err, -ENOTSUP, "network.rules['%.80s']: the "
							  "value of '%.60s' must be 1-4096 visible ASCII "
							  "characters (optionally after 'Bearer '): it "
							  "becomes a kosa8 secret", host, h);
				for (size_t k = 0; host[k] && k < sizeof(t->host) - 1; k++)
					t->host[k] = (char)tolower((unsigned char)host[k]);
				snprintf(t->header, sizeof(t->header), "%s", h);
				t->value = xstrdup(s);
				t->bearer = bearer;
				n->nt++;
			}
		}
	}
	return 0;
}

int e2b_net_parse(json_t *network, int allow_internet, struct e2b_net *n, struct k8_err *err)
{
	static const char *const known[] = { "allowOut", "denyOut", "rules", "egressProxy",
					     "allowPublicTraffic", "maskRequestHost", "httpsPorts",
					     "allow_internet_access" };
	bool allow_all = false, deny_all = false;
	const char *k;
	json_t *v;
	size_t i;
	int r;

	memset(n, 0, sizeof(*n));
	n->allow_internet = allow_internet;
	if (network && !json_is_null(network) && !json_is_object(network))
		return k8_err_set(err, -EINVAL, "network must be an object");
	json_object_foreach(network, k, v) {
		bool ok = false;
		for (i = 0; i < ARRAY_SIZE(known); i++)
			ok = ok || !strcmp(k, known[i]);
		if (!ok)
			return k8_err_set(err, -ENOTSUP, "network.%.60s is not supported by kosa8", k);
	}
	if (json_object_get(network, "egressProxy") &&
	    !json_is_null(json_object_get(network, "egressProxy")))
		return k8_err_set(err, -ENOTSUP, "network.egressProxy is not supported by kosa8: "
				  "traffic leaves through the host's own network, under the "
				  "sandbox's egress policy");
	if (json_object_get(network, "maskRequestHost") &&
	    !json_is_null(json_object_get(network, "maskRequestHost")))
		return k8_err_set(err, -ENOTSUP, "network.maskRequestHost is not supported by kosa8: "
				  "kosa8 serves no sandbox URLs");
	if (json_array_size(json_object_get(network, "httpsPorts")))
		return k8_err_set(err, -ENOTSUP, "network.httpsPorts is not supported by kosa8: "
				  "kosa8 serves no sandbox URLs");
	if (json_is_true(json_object_get(network, "allowPublicTraffic")))
		return k8_err_set(err, -ENOTSUP, "network.allowPublicTraffic: true is not "
				  "supported by kosa8: kosa8 serves no sandbox URLs");
	if ((r = net_list(json_object_get(network, "allowOut"), "allowOut", &n->allow_out, err)) ||
	    (r = net_list(json_object_get(network, "denyOut"), "denyOut", &n->deny_out, err)))
		goto fail;
	n->rules = json_array();
	json_array_foreach(n->allow_out, i, v) {
		if (all_traffic(json_string_value(v)))
			allow_all = true;
		else
			json_array_append(n->rules, v);
	}
	json_array_foreach(n->deny_out, i, v)
		if (all_traffic(json_string_value(v)))
			deny_all = true;
	/* allowed entries win over denied ones: an all-traffic allowOut opens everything */
	bool everything = allow_all || (allow_internet == 1 && !deny_all);
	if (everything) {
		json_array_foreach(n->deny_out, i, v)
			if (!allow_all && !all_traffic(json_string_value(v))) {
				r = k8_err_set(err, -ENOTSUP, "network.denyOut '%.80s' with all other "
					       "traffic allowed is not supported by kosa8: its egress "
					       "policy has no deny rules; list what may be reached in "
					       "allowOut instead (everything else is denied)",
					       json_string_value(v));
				goto fail;
			}
		snprintf(n->mode, sizeof(n->mode), "allow-all");
	} else {
		snprintf(n->mode, sizeof(n->mode), "%s", json_array_size(n->rules) ? "allow-list"
										   : "deny");
	}
	v = json_object_get(network, "rules");
	if (v && !json_is_null(v) && (r = net_transforms(v, n, err)))
		goto fail;
	/* a rule opens nothing by itself (E2B's rule): its host must be allowed */
	for (i = 0; i < n->nt; i++) {
		bool listed = !strcmp(n->mode, "allow-all");
		size_t j;
		json_array_foreach(n->rules, j, v)
			listed = listed || !strcasecmp(json_string_value(v), n->t[i].host);
		if (!listed) {
			r = k8_err_set(err, -EINVAL, "network.rules['%s']: list %s in allowOut too "
				       "(a rule does not allow traffic by itself)", n->t[i].host,
				       n->t[i].host);
			goto fail;
		}
	}
	return 0;
fail:
	e2b_net_clear(n);
	return r;
}

void e2b_net_clear(struct e2b_net *n)
{
	for (size_t i = 0; i < n->nt; i++) {
		if (n->t[i].value)
			explicit_bzero(n->t[i].value, strlen(n->t[i].value));
		free(n->t[i].value);
		n->t[i].value = NULL;
	}
	n->nt = 0;
	json_decref(n->rules);
	json_decref(n->allow_out);
	json_decref(n->deny_out);
	n->rules = n->allow_out = n->deny_out = NULL;
}

/* ---- create ---- */

int e2b_create_parse(json_t *body, const char *dflt_template, struct e2b_create *c,
		     struct k8_err *err)
{
	static const char *const known[] = { "templateID", "timeout", "metadata", "envVars",
					     "allow_internet_access", "network", "autoPause",
					     "autoPauseMemory", "autoResume", "secure", "mcp", "iam",
					     "volumeMounts" };
	json_t *v, *ai;
	const char *k, *tpl;
	int allow = -1, r;
	size_t i;

	memset(c, 0, sizeof(*c));
	c->timeout_s = E2B_TIMEOUT_DEFAULT;
	json_object_foreach(body, k, v) {
		bool ok = false;
		for (i = 0; i < ARRAY_SIZE(known); i++)
			ok = ok || !strcmp(k, known[i]);
		if (!ok)
			return k8_err_set(err, -ENOTSUP, "field '%.60s' is not supported by kosa8's "
					  "E2B API", k);
	}
	if ((v = json_object_get(body, "mcp")) && !json_is_null(v))
		return k8_err_set(err, -ENOTSUP, "mcp is not supported by kosa8's E2B API");
	if ((v = json_object_get(body, "iam")) && !json_is_null(v))
		return k8_err_set(err, -ENOTSUP, "iam (workload identity tokens) is not supported "
				  "by kosa8's E2B API");
	if (json_array_size(json_object_get(body, "volumeMounts")))
		return k8_err_set(err, -ENOTSUP, "volumeMounts are not supported by kosa8's E2B API "
				  "(kosa8's shared folders are given at `kosa8 sandbox create`)");
	v = json_object_get(body, "autoPauseMemory");
	if (json_is_false(v))
		return k8_err_set(err, -ENOTSUP, "autoPauseMemory: false is not supported by kosa8: "
				  "a pause always keeps the memory");
	tpl = json_string_value(json_object_get(body, "templateID"));
	if (json_object_get(body, "templateID") && !json_is_null(json_object_get(body, "templateID"))
	    && (!tpl || !*tpl || strlen(tpl) >= sizeof(c->template_id)))
		return k8_err_set(err, -EINVAL, "templateID must be a string of 1..%zu bytes",
				  sizeof(c->template_id) - 1);
	snprintf(c->template_id, sizeof(c->template_id), "%s", tpl ? tpl : dflt_template);
	if ((r = e2b_timeout(body, &c->timeout_s, err)))
		return r;
	v = json_object_get(body, "metadata");
	if ((r = e2b_str_map(v, "metadata", E2B_META_MAX, E2B_META_KEY_MAX, E2B_META_VAL_MAX,
			     false, err)))
		return r;
	c->metadata = json_is_object(v) ? json_deep_copy(v) : json_object();
	v = json_object_get(body, "envVars");
	if ((r = e2b_str_map(v, "envVars", E2B_ENV_MAX, 256, 32768, true, err)))
		goto fail;
	c->env_vars = json_is_object(v) ? json_deep_copy(v) : json_object();
	ai = json_object_get(body, "allow_internet_access");
	if (ai && !json_is_null(ai)) {
		if (!json_is_boolean(ai)) {
			r = k8_err_set(err, -EINVAL, "allow_internet_access must be true or false");
			goto fail;
		}
		allow = json_is_true(ai);
	}
	if ((r = e2b_net_parse(json_object_get(body, "network"), allow, &c->net, err)))
		goto fail;
	v = json_object_get(body, "autoPause");
	if (v && !json_is_null(v) && !json_is_boolean(v)) {
		r = k8_err_set(err, -EINVAL, "autoPause must be true or false");
		goto fail;
	}
	c->auto_pause = json_is_true(v);
	v = json_object_get(body, "autoResume");
	if (v && !json_is_null(v)) {
		json_t *en = json_object_get(v, "enabled");
		if (!json_is_object(v) || (en && !json_is_boolean(en))) {
			r = k8_err_set(err, -EINVAL, "autoResume must be {\"enabled\": bool}");
			goto fail;
		}
		c->auto_resume = json_is_true(en);
	}
	return 0;
fail:
	e2b_create_clear(c);
	return r;
}

void e2b_create_clear(struct e2b_create *c)
{
	json_decref(c->metadata);
	json_decref(c->env_vars);
	c->metadata = c->env_vars = NULL;
	e2b_net_clear(&c->net);
}

/* ---- list ---- */

/* Two hex digits as a byte, -1 when they are not. */
static int hex2(const char *p)
{
	if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]))
		return -1;
	return ((p[0] & 15) + (p[0] > '9' ? 9 : 0)) << 4 | ((p[1] & 15) + (p[1] > '9' ? 9 : 0));
}

/* Percent-decode s[0..n) (and '+' as a space when form) into a new string; NULL for a
 * bad escape or a NUL byte. */
static char *pct_decode(const char *s, size_t n, bool form)
{
	char *out = xmalloc(n + 1);
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '%') {
			int v = i + 2 < n ? hex2(s + i + 1) : -1;
			if (v <= 0) {   /* a bad escape, or a NUL */
				free(out);
				return NULL;
			}
			out[o++] = (char)v;
			i += 2;
		} else {
			out[o++] = form && s[i] == '+' ? ' ' : s[i];
		}
	}
	out[o] = '\0';
	return out;
}

int e2b_metadata_query(const char *q, json_t **out, struct k8_err *err)
{
	const char *p = q;

	*out = json_object();
	while (p && *p) {
		const char *amp = strchr(p, '&'), *end = amp ? amp : p + strlen(p);
		const char *eq = memchr(p, '=', (size_t)(end - p));
		if (end > p) {
			char *k1, *v1, *k2, *v2;
			if (!eq) {
				json_decref(*out);
				*out = NULL;
				return k8_err_set(err, -EINVAL, "metadata filter: '%.*s' is not key=value",
						  (int)(end - p > 60 ? 60 : end - p), p);
			}
			k1 = pct_decode(p, (size_t)(eq - p), true);
			v1 = pct_decode(eq + 1, (size_t)(end - eq - 1), true);
			k2 = k1 ? pct_decode(k1, strlen(k1), false) : NULL;
			v2 = v1 ? pct_decode(v1, strlen(v1), false) : NULL;
			free(k1);
			free(v1);
			if (!k2 || !v2 || !*k2 || json_object_size(*out) >= E2B_META_MAX ||
			    json_object_set_new(*out, k2, json_string(v2))) {
				free(k2);
				free(v2);
				json_decref(*out);
				*out = NULL;
				return k8_err_set(err, -EINVAL, "metadata filter: a key or value is not "
						  "percent-encoded UTF-8, or there are more than %d",
						  E2B_META_MAX);
			}
			free(k2);
			free(v2);
		}
		p = amp ? amp + 1 : NULL;
	}
	return 0;
}

int e2b_state_query(const char *q, unsigned *mask, struct k8_err *err)
{
	const char *p = q;

	*mask = 0;
	while (p && *p) {
		const char *c = strchr(p, ',');
		size_t n = c ? (size_t)(c - p) : strlen(p);
		if (n == 7 && !strncmp(p, "running", 7))
			*mask |= E2B_STATE_RUNNING;
		else if (n == 6 && !strncmp(p, "paused", 6))
			*mask |= E2B_STATE_PAUSED;
		else if (n)
			return k8_err_set(err, -EINVAL, "state must list running and/or paused");
		p = c ? c + 1 : NULL;
	}
	return 0;
}

bool e2b_metadata_match(json_t *meta, json_t *want)
{
	const char *k;
	json_t *v;

	json_object_foreach(want, k, v)
		if (!json_equal(json_object_get(meta, k), v))
			return false;
	return true;
}
