/* SPDX-License-Identifier: Apache-2.0 */
/* rules.c - kosa8-broker's rules, placeholder, secret store and counters.
 *
 * Secrets live only in this process's heap: handed over by the daemon on a pipe or the
 * control socket, never on a command line, in the environment or in a log. A replaced
 * value is zeroed before it is freed. The stats name hosts and reasons, never values. */
#include "broker/broker.h"
#include "common/guest.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

const char *const broker_refusal_names[REF_N] = {
	[REF_BAD_REQUEST] = "bad_request",
	[REF_NO_RULE] = "no_rule",
	[REF_PLACEHOLDER_MISSING] = "placeholder_missing",
	[REF_PLACEHOLDER_WRONG] = "placeholder_wrong",
	[REF_TOO_LARGE] = "too_large",
	[REF_NO_SECRET] = "no_secret",
	[REF_UPSTREAM_CONNECT] = "upstream_connect",
	[REF_UPSTREAM_TLS] = "upstream_tls",
	[REF_UPSTREAM_PROTOCOL] = "upstream_protocol",
	[REF_BUSY] = "busy",
	[REF_TIMEOUT] = "timeout",
	[REF_NO_MODEL] = "no_model",
};

bool broker_secret_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n >= BROKER_NAME_MAX || name[0] == '.' || name[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("-_.", name[i]))
			return false;
	return true;
}

bool broker_secret_value_ok(const char *v, size_t n)
{
	if (n == 0 || n > BROKER_SECRET_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e)
			return false;
	return true;
}

static bool broker_host_ok(const char *h, size_t n)
{
	if (n == 0 || n > 253)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)h[i]) && h[i] != '-' && h[i] != '.')
			return false;
	return true;
}

static bool broker_token_ok(const char *h)
{
	size_t n = strlen(h);
	if (n == 0 || n >= BROKER_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)h[i]) && !strchr("!#$%&'*+-.^_`|~", h[i]))
			return false;
	return true;
}

int broker_rule_parse(const char *spec, struct broker_rule *r, struct k8_err *err)
{
	char buf[512];
	memset(r, 0, sizeof(*r));
	if (strlen(spec) >= sizeof(buf))
		return k8_err_set(err, -EINVAL, "broker rule too long");
	strcpy(buf, spec);
	char *secret = strrchr(buf, '=');
	if (secret)
		*secret++ = '\0';
	if (!strcmp(buf, "openai")) {
		r->kind = RULE_OPENAI;
		strcpy(r->host, "api.openai.com");
		strcpy(r->header, "Authorization");
	} else if (!strcmp(buf, "anthropic")) {
		r->kind = RULE_ANTHROPIC;
		strcpy(r->host, "api.anthropic.com");
		strcpy(r->header, "x-api-key");
	} else if (!strcmp(buf, BROKER_LOCAL_HOST)) {
		/* no key: "=MODEL" names the daemon's model server, nothing the broker uses */
		if (secret && (!*secret || strlen(secret) > 128 ||
			       strspn(secret, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(secret)))
			return k8_err_set(err, -EINVAL, "broker rule '%s': bad model name", spec);
		r->kind = RULE_LOCAL;
		strcpy(r->host, BROKER_LOCAL_HOST);
		return 0;
	} else if (!strncmp(buf, "header:", 7)) {
		char *host = buf + 7, *hdr = strchr(host, ':');
		if (!hdr || !secret)
			return k8_err_set(err, -EINVAL, "broker rule '%s': expected "
					  "header:HOST:HEADER=SECRET", spec);
		*hdr++ = '\0';
		if (!broker_host_ok(host, strlen(host)))
			return k8_err_set(err, -EINVAL, "broker rule '%s': bad host name", spec);
		if (!broker_token_ok(hdr))
			return k8_err_set(err, -EINVAL, "broker rule '%s': bad header name", spec);
		r->kind = RULE_HEADER;
		for (size_t i = 0; host[i]; i++)
			r->host[i] = (char)tolower((unsigned char)host[i]);
		strcpy(r->header, hdr);
	} else {
		return k8_err_set(err, -EINVAL, "broker rule '%s': expected openai[=SECRET], "
				  "anthropic[=SECRET] or header:HOST:HEADER=SECRET", spec);
	}
	const char *name = secret ? secret : buf;
	if (!broker_secret_name_ok(name))
		return k8_err_set(err, -EINVAL, "broker rule '%s': bad secret name '%s' (letters, "
				  "digits, '-', '_', '.', at most 63)", spec, name);
	strcpy(r->secret, name);
	return 0;
}

int broker_load_rules(struct broker *b, json_t *obj, struct k8_err *err)
{
	const char *ph = json_string_value(json_object_get(obj, "placeholder"));
	json_t *rules = json_object_get(obj, "rules");

	if (!ph || strlen(ph) != BROKER_PH_LEN || strncmp(ph, BROKER_PH_PREFIX, 6) != 0 ||
	    strspn(ph + 6, "0123456789abcdef") != 32)
		return k8_err_set(err, -EINVAL, "\"placeholder\": expected \"k8-ph-\" and 32 "
				  "lower-case hex digits");
	if (!json_is_array(rules) || json_array_size(rules) == 0 ||
	    json_array_size(rules) > BROKER_MAX_RULES)
		return k8_err_set(err, -EINVAL, "\"rules\": expected 1 to %d rule strings",
				  BROKER_MAX_RULES);
	strcpy(b->placeholder, ph);
	size_t i;
	json_t *v;
	json_array_foreach(rules, i, v) {
		const char *s = json_string_value(v);
		if (!s)
			return k8_err_set(err, -EINVAL, "\"rules\"[%zu]: not a string", i);
		struct broker_rule r;
		int rc = broker_rule_parse(s, &r, err);
		if (rc < 0)
			return rc;
		for (int j = 0; j < b->nrules; j++)
			if (!strcmp(b->rules[j].host, r.host))
				return k8_err_set(err, -EINVAL, "two rules for host %s", r.host);
		b->rules[b->nrules++] = r;
	}
	return 0;
}

int broker_secret_set(struct broker *b, const char *name, const char *value, size_t n,
		      struct k8_err *err)
{
	if (!broker_secret_name_ok(name))
		return k8_err_set(err, -EINVAL, "bad secret name");
	if (!broker_secret_value_ok(value, n))
		return k8_err_set(err, -EINVAL, "secret '%s': the value must be 1 to %d bytes of "
				  "visible ASCII (no spaces or line breaks)", name, BROKER_SECRET_MAX);
	char *copy = malloc(n + 1);
	if (!copy)
		return k8_err_set(err, -ENOMEM, "out of memory");
	memcpy(copy, value, n);
	copy[n] = '\0';
	pthread_mutex_lock(&b->lock);
	struct broker_secret *s = NULL;
	for (int i = 0; i < b->nsecrets; i++)
		if (!strcmp(b->secrets[i].name, name))
			s = &b->secrets[i];
	if (!s && b->nsecrets < BROKER_MAX_SECRETS) {
		s = &b->secrets[b->nsecrets++];
		strcpy(s->name, name);
	}
	if (s && s->value) {
		OPENSSL_cleanse(s->value, s->len);
		free(s->value);
	}
	if (s) {
		s->value = copy;
		s->len = n;
	}
	pthread_mutex_unlock(&b->lock);
	if (!s) {
		OPENSSL_cleanse(copy, n);
		free(copy);
		return k8_err_set(err, -ENOSPC, "too many secrets (at most %d)", BROKER_MAX_SECRETS);
	}
	return 0;
}

int broker_secret_unset(struct broker *b, const char *name)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&b->lock);
	for (int i = 0; i < b->nsecrets; i++) {
		struct broker_secret *s = &b->secrets[i];
		if (strcmp(s->name, name))
			continue;
		if (s->value) {
			OPENSSL_cleanse(s->value, s->len);
			free(s->value);
		}
		/* the slot goes: the stats' "secrets" list names the ones held */
		b->secrets[i] = b->secrets[--b->nsecrets];
		memset(&b->secrets[b->nsecrets], 0, sizeof(b->secrets[0]));
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&b->lock);
	return rc;
}

int broker_secrets_load(struct broker *b, json_t *obj, struct k8_err *err)
{
	const char *k;
	json_t *v;

	if (!json_is_object(obj))
		return k8_err_set(err, -EINVAL, "secrets: expected a JSON object of names and values");
	json_object_foreach(obj, k, v) {
		if (!json_is_string(v))
			return k8_err_set(err, -EINVAL, "secret '%s': not a string", k);
		int rc = broker_secret_set(b, k, json_string_value(v), json_string_length(v), err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int broker_secret_get(struct broker *b, const char *name, char *out, size_t cap)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&b->lock);
	for (int i = 0; i < b->nsecrets; i++) {
		struct broker_secret *s = &b->secrets[i];
		if (strcmp(s->name, name) || !s->value)
			continue;
		if (s->len < cap) {
			memcpy(out, s->value, s->len + 1);
			rc = (int)s->len;
		} else {
			rc = -E2BIG;
		}
	}
	pthread_mutex_unlock(&b->lock);
	return rc;
}

const struct broker_rule *broker_rule_for_host(const struct broker *b, const char *host,
					       size_t n, int *idx)
{
	/* "host" or "host:port" (the port is the broker's, not the upstream's); anything
	 * else (userinfo, a second colon, a path) matches no rule */
	*idx = b->nrules;
	const char *colon = memchr(host, ':', n);
	if (colon) {
		size_t pl = n - (size_t)(colon - host) - 1;
		if (pl == 0 || pl > 5)
			return NULL;
		for (size_t i = 1; i <= pl; i++)
			if (colon[i] < '0' || colon[i] > '9')
				return NULL;
		n = (size_t)(colon - host);
	}
	while (n && host[n - 1] == '.')
		n--;                    /* a fully qualified name */
	/* Inside a sandbox the broker is GUEST_BROKER_NAME: "X.broker.kosa8.internal" stands
	 * for host X, and "openai." / "anthropic." for the providers' hosts (the base URLs
	 * the daemon sets, docs/broker.md "Inside the sandbox"). */
	const size_t sl = sizeof(GUEST_BROKER_NAME);          /* with the dot before it */
	if (n > sl && host[n - sl] == '.' &&
	    !strncasecmp(host + n - sl + 1, GUEST_BROKER_NAME, sl - 1)) {
		n -= sl;
		if (n == 6 && !strncasecmp(host, "openai", 6))
			host = "api.openai.com", n = 14;
		else if (n == 9 && !strncasecmp(host, "anthropic", 9))
			host = "api.anthropic.com", n = 17;
	}
	for (int i = 0; i < b->nrules; i++) {
		if (strlen(b->rules[i].host) == n && !strncasecmp(b->rules[i].host, host, n)) {
			*idx = i;
			return &b->rules[i];
		}
	}
	*idx = b->nrules;
	return NULL;
}

bool broker_placeholder_ok(const struct broker *b, const char *v, size_t n)
{
	/* The length is public (fixed format); the comparison of the bytes is constant-time. */
	return n == BROKER_PH_LEN && CRYPTO_memcmp(v, b->placeholder, n) == 0;
}

void broker_count(struct broker *b, int rule, enum broker_refusal why, uint64_t up,
		  uint64_t down, bool request)
{
	if (rule < 0 || rule > b->nrules)
		rule = b->nrules;
	pthread_mutex_lock(&b->lock);
	struct broker_hoststats *h = &b->hs[rule];
	if (request)
		h->requests++;
	if (why < REF_N)
		h->refused[why]++;
	h->bytes_up += up;
	h->bytes_down += down;
	pthread_mutex_unlock(&b->lock);
}

static json_t *broker_refused_json(const uint64_t *r, uint64_t *total)
{
	json_t *o = json_object();
	for (int i = 0; i < REF_N; i++) {
		if (!r[i])
			continue;
		json_object_set_new(o, broker_refusal_names[i], json_integer((json_int_t)r[i]));
		*total += r[i];
	}
	return o;
}

json_t *broker_stats_json(struct broker *b)
{
	json_t *hosts = json_object(), *all = json_object();
	uint64_t req = 0, up = 0, down = 0, sum[REF_N] = { 0 }, ref = 0;

	pthread_mutex_lock(&b->lock);
	for (int i = 0; i <= b->nrules; i++) {
		struct broker_hoststats *h = &b->hs[i];
		uint64_t n = 0;
		json_t *r = broker_refused_json(h->refused, &n);
		json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:o}", "requests", (json_int_t)h->requests,
				      "bytes_up", (json_int_t)h->bytes_up, "bytes_down",
				      (json_int_t)h->bytes_down, "refusals", (json_int_t)n,
				      "refused", r);
		if (i < b->nrules) {
			static const char *const kinds[] = { [RULE_OPENAI] = "openai",
				[RULE_ANTHROPIC] = "anthropic", [RULE_HEADER] = "header",
				[RULE_LOCAL] = BROKER_LOCAL_HOST };
			json_object_set_new(o, "rule", json_string(kinds[b->rules[i].kind]));
			if (b->rules[i].secret[0])
				json_object_set_new(o, "secret", json_string(b->rules[i].secret));
		}
		if (i < b->nrules || h->requests)
			json_object_set_new(hosts, i < b->nrules ? b->rules[i].host : "(no rule)", o);
		else
			json_decref(o);
		req += h->requests;
		up += h->bytes_up;
		down += h->bytes_down;
		for (int k = 0; k < REF_N; k++)
			sum[k] += h->refused[k];
	}
	json_object_set_new(all, "connections", json_integer((json_int_t)b->connections));
	json_t *secrets = json_array();
	for (int i = 0; i < b->nsecrets; i++)
		json_array_append_new(secrets, json_string(b->secrets[i].name));
	pthread_mutex_unlock(&b->lock);
	json_object_set_new(all, "requests", json_integer((json_int_t)req));
	json_object_set_new(all, "bytes_up", json_integer((json_int_t)up));
	json_object_set_new(all, "bytes_down", json_integer((json_int_t)down));
	json_object_set_new(all, "refused", broker_refused_json(sum, &ref));
	json_object_set_new(all, "refusals", json_integer((json_int_t)ref));
	json_object_set_new(all, "hosts", hosts);
	json_object_set_new(all, "secrets", secrets);   /* names only */
	return all;
}

void broker_free(struct broker *b)
{
	for (int i = 0; i < b->nsecrets; i++) {
		if (b->secrets[i].value)
			OPENSSL_cleanse(b->secrets[i].value, b->secrets[i].len);
		free(b->secrets[i].value);
	}
	b->nsecrets = 0;
	if (b->ssl)
		SSL_CTX_free(b->ssl);
	SSL_CTX_free(b->tls);
	for (int i = 0; i < BROKER_MAX_RULES; i++)
		SSL_CTX_free(b->leaf[i]);
	pthread_mutex_destroy(&b->lock);
}
