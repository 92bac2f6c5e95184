/* SPDX-License-Identifier: Apache-2.0 */
/* policy.c - the egress policy engine: rule parsing, DNS pins, and the verdict for each new
 * flow, in the order policy.h documents (and docs/network.md explains).
 *
 * An IPv4-mapped IPv6 address (::ffff:a.b.c.d) in a rule or a pin is the IPv4 address it
 * carries; as a flow's destination it is refused (policy.h, step 2). An internal address
 * (net_addr_is_internal, or one of the host's own addresses, policy_host_*) passes only
 * through an IP/CIDR rule that covers it and the port: a pin never passes one on its
 * own, so a listed name that resolves to 127.0.0.1, 10.x or the host's public address
 * (DNS rebinding) reaches nothing the rules do not list by address. */
#include "net/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RULE_TEXT_MAX 280
#define NS_PER_S 1000000000ull

static const char accepted_forms[] =
	"accepted forms: example.org, *.example.org, example.org:443, 203.0.113.7, "
	"203.0.113.7:53, 203.0.113.0/24, 203.0.113.0/24:443, 2001:db8::1, "
	"[2001:db8::1]:443, 2001:db8::/32, [2001:db8::/32]:443 (ports 1-65535)";

__attribute__((format(printf, 4, 5)))
static int policy_err(char *err, size_t errlen, const char *text, const char *fmt, ...)
{
	char what[160];
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(what, sizeof(what), fmt, ap);
		va_end(ap);
		if (text)
			snprintf(err, errlen, "egress rule '%.64s%s': %s; %s", text,
				 strlen(text) > 64 ? "..." : "", what, accepted_forms);
		else
			snprintf(err, errlen, "%s", what);
	}
	return -EINVAL;
}

static char policy_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Lower-case copy of name without one trailing dot; false when it does not fit. */
static bool policy_name_norm(const char *name, char *out, size_t cap)
{
	size_t n = strlen(name);

	if (n && name[n - 1] == '.')
		n--;
	if (n >= cap)
		return false;
	for (size_t i = 0; i < n; i++)
		out[i] = policy_lower(name[i]);
	out[n] = '\0';
	return true;
}

/* 1-65535, digits only. */
static int policy_port_parse(const char *s, uint16_t *port)
{
	unsigned long v = 0;
	size_t n = strlen(s);

	if (n == 0 || n > 5)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -EINVAL;
	*port = (uint16_t)v;
	return 0;
}

/* "addr" or "addr/prefix" into r (IP or CIDR). want: 0 any family, else that family. */
static int policy_addr_parse(const char *s, struct policy_rule *r, int want, char *err,
			     size_t errlen, const char *text)
{
	char a[64];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	int bits, prefix;

	if (alen == 0 || alen >= sizeof(a))
		return policy_err(err, errlen, text, "not an IP address");
	memcpy(a, s, alen);
	a[alen] = '\0';
	if (net_addr_parse(a, &r->addr))
		return policy_err(err, errlen, text, "'%s' is not an IP address", a);
	if (want && r->addr.family != want)
		return policy_err(err, errlen, text, "brackets are for IPv6 addresses only");
	bits = r->addr.family == AF_INET ? 32 : 128;
	if (slash) {
		const char *d = slash + 1;
		size_t n = strlen(d);

		prefix = 0;
		if (n == 0 || n > 3)
			return policy_err(err, errlen, text, "prefix length must be 0-%d", bits);
		for (size_t i = 0; i < n; i++) {
			if (d[i] < '0' || d[i] > '9')
				return policy_err(err, errlen, text, "prefix length must be 0-%d",
						  bits);
			prefix = prefix * 10 + (d[i] - '0');
		}
		if (prefix > bits)
			return policy_err(err, errlen, text, "prefix length must be 0-%d", bits);
		r->kind = RULE_CIDR;
	} else {
		prefix = bits;
		r->kind = RULE_IP;
	}
	if (net_addr_is_mapped(&r->addr) && prefix >= 96) {
		net_addr_unmap(&r->addr, &r->addr);
		prefix -= 96;
	}
	net_addr_mask(&r->addr, prefix);
	r->prefix = prefix;
	return 0;
}

/* A name's last label all digits looks like a mistyped address, not a host name. */
static bool policy_numeric_tld(const char *name)
{
	const char *dot = strrchr(name, '.');
	const char *l = dot ? dot + 1 : name;

	if (!*l)
		return false;
	for (; *l; l++)
		if (*l < '0' || *l > '9')
			return false;
	return true;
}

static void policy_rule_text(struct policy_rule *r)
{
	char a[INET6_ADDRSTRLEN], net[INET6_ADDRSTRLEN + 8];
	bool v6 = r->addr.family == AF_INET6;

	switch (r->kind) {
	case RULE_NAME:
	case RULE_WILDCARD:
		if (r->port)
			snprintf(r->text, sizeof(r->text), "%s%s:%u",
				 r->kind == RULE_WILDCARD ? "*." : "", r->name, r->port);
		else
			snprintf(r->text, sizeof(r->text), "%s%s",
				 r->kind == RULE_WILDCARD ? "*." : "", r->name);
		return;
	case RULE_IP:
		snprintf(net, sizeof(net), "%s", net_addr_str(&r->addr, a, sizeof(a)));
		break;
	case RULE_CIDR:
		snprintf(net, sizeof(net), "%s/%d", net_addr_str(&r->addr, a, sizeof(a)),
			 r->prefix);
		break;
	}
	if (!r->port)
		snprintf(r->text, sizeof(r->text), "%s", net);
	else if (v6)
		snprintf(r->text, sizeof(r->text), "[%s]:%u", net, r->port);
	else
		snprintf(r->text, sizeof(r->text), "%s:%u", net, r->port);
}

int policy_rule_parse(const char *text, struct policy_rule *r, char *err, size_t errlen)
{
	char buf[RULE_TEXT_MAX + 1], *host = buf, *colon;
	size_t n;
	int colons = 0, rc;

	if (err && errlen)
		err[0] = '\0';
	memset(r, 0, sizeof(*r));
	if (!text || !*text)
		return policy_err(err, errlen, "", "empty rule");
	n = strlen(text);
	if (n > RULE_TEXT_MAX)
		return policy_err(err, errlen, text, "longer than %d characters", RULE_TEXT_MAX);
	for (size_t i = 0; i <= n; i++) {
		if (text[i] && (text[i] <= ' ' || text[i] >= 0x7f))
			return policy_err(err, errlen, text, "spaces and control characters are "
					  "not allowed");
		buf[i] = policy_lower(text[i]);
		colons += text[i] == ':';
	}

	if (buf[0] == '[') {
		char *close = strchr(buf, ']');

		if (!close)
			return policy_err(err, errlen, text, "missing ']'");
		*close = '\0';
		if (close[1] == ':') {
			if (policy_port_parse(close + 2, &r->port))
				return policy_err(err, errlen, text, "port must be 1-65535");
		} else if (close[1]) {
			return policy_err(err, errlen, text, "only ':port' may follow ']'");
		}
		rc = policy_addr_parse(buf + 1, r, AF_INET6, err, errlen, text);
		if (rc)
			return rc;
		policy_rule_text(r);
		return 0;
	}
	if (colons >= 2) {
		/* bare IPv6: no port (that needs brackets) */
		rc = policy_addr_parse(buf, r, AF_INET6, err, errlen, text);
		if (rc)
			return policy_err(err, errlen, text, "not an IPv6 address (a port after "
					  "an IPv6 address needs brackets: [2001:db8::1]:443)");
		policy_rule_text(r);
		return 0;
	}
	if (colons == 1) {
		colon = strchr(buf, ':');
		*colon = '\0';
		if (policy_port_parse(colon + 1, &r->port))
			return policy_err(err, errlen, text, "port must be 1-65535");
	}
	if (!*host)
		return policy_err(err, errlen, text, "no host before the port");
	if (strchr(host, '/') || strspn(host, "0123456789.") == strlen(host)) {
		rc = policy_addr_parse(host, r, AF_INET, err, errlen, text);
		if (rc)
			return rc;
		policy_rule_text(r);
		return 0;
	}
	if (host[0] == '*') {
		if (host[1] != '.')
			return policy_err(err, errlen, text, "a wildcard must be a whole first "
					  "label, as in *.example.org");
		host += 2;
		r->kind = RULE_WILDCARD;
	} else {
		r->kind = RULE_NAME;
	}
	if (strchr(host, '*'))
		return policy_err(err, errlen, text, "'*' is only allowed as the first label");
	if (!dns_name_valid(host))
		return policy_err(err, errlen, text, "not a valid host name (letters, digits, "
				  "'-', '_'; labels of 1-63 characters, 253 in all)");
	for (const char *l = host; *l; l++)
		if (*l == '-' && (l == host || l[-1] == '.' || l[1] == '.' || !l[1]))
			return policy_err(err, errlen, text, "a label may not begin or end "
					  "with '-'");
	if (policy_numeric_tld(host))
		return policy_err(err, errlen, text, "not an IP address, and a host name does "
				  "not end in a number");
	if (!policy_name_norm(host, r->name, sizeof(r->name)))
		return policy_err(err, errlen, text, "name too long");
	policy_rule_text(r);
	return 0;
}

int policy_mode_parse(const char *s, enum policy_mode *m)
{
	if (!s)
		return -EINVAL;
	if (!strcmp(s, "deny"))
		*m = POLICY_DENY;
	else if (!strcmp(s, "allow-list"))
		*m = POLICY_ALLOW_LIST;
	else if (!strcmp(s, "allow-all"))
		*m = POLICY_ALLOW_ALL;
	else
		return -EINVAL;
	return 0;
}

const char *policy_mode_str(enum policy_mode m)
{
	switch (m) {
	case POLICY_DENY: return "deny";
	case POLICY_ALLOW_LIST: return "allow-list";
	case POLICY_ALLOW_ALL: return "allow-all";
	}
	return "?";
}

/* The IPv4 address a NAT64 (64:ff9b::/96) or mapped (::ffff:0:0/96) form carries, else a. */
static void policy_embedded(const struct net_addr *a, struct net_addr *out)
{
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };

	if (a->family == AF_INET6 && !memcmp(a->a, nat64, 12)) {
		memset(out, 0, sizeof(*out));
		out->family = AF_INET;
		memcpy(out->a, a->a + 12, 4);
		return;
	}
	net_addr_unmap(a, out);
}

bool policy_is_host(const struct policy *p, const struct net_addr *a)
{
	struct net_addr x;

	if (!p || !a)
		return false;
	policy_embedded(a, &x);
	for (int i = 0; i < p->nhost; i++)
		if (net_addr_eq(&p->host[i], &x))
			return true;
	return false;
}

bool policy_host_add(struct policy *p, const struct net_addr *a)
{
	struct net_addr x;

	net_addr_unmap(a, &x);
	if (x.family != AF_INET && x.family != AF_INET6)
		return true;            /* nothing to add */
	/* loopback, private, link-local...: internal already; keeps the table small on
	 * hosts with many bridges (each with its fe80:: address) */
	if (net_addr_is_internal(&x) || policy_is_host(p, &x))
		return true;
	if (p->nhost >= POLICY_MAX_HOST_ADDRS)
		return false;
	p->host[p->nhost++] = x;
	return true;
}

void policy_host_del(struct policy *p, const struct net_addr *a)
{
	struct net_addr x;

	net_addr_unmap(a, &x);
	for (int i = 0; i < p->nhost; i++)
		if (net_addr_eq(&p->host[i], &x)) {
			p->host[i] = p->host[--p->nhost];
			return;
		}
}

void policy_host_clear(struct policy *p)
{
	p->nhost = 0;
}

/* Internal for the policy: the fixed ranges, and the host's own addresses. */
static bool policy_internal(const struct policy *p, const struct net_addr *a)
{
	return net_addr_is_internal(a) || policy_is_host(p, a);
}

/* Does an IP/CIDR rule cover a? With any_port, whatever its port; else the rule must
 * have no port or `port`. *addr_hit says an IP rule covered a with another port. */
static bool policy_ip_listed(const struct policy *p, const struct net_addr *a, uint16_t port,
			     bool any_port, bool *addr_hit)
{
	for (int i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];

		if ((r->kind != RULE_IP && r->kind != RULE_CIDR) ||
		    !net_addr_in(a, &r->addr, r->prefix))
			continue;
		if (any_port || !r->port || r->port == port)
			return true;
		if (addr_hit)
			*addr_hit = true;
	}
	return false;
}

int policy_name_allowed(const struct policy *p, const char *name)
{
	char n[DNS_NAME_MAX];
	size_t ln;

	if (!p || !name || p->mode == POLICY_DENY || !policy_name_norm(name, n, sizeof(n)))
		return -1;
	ln = strlen(n);
	for (int i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];
		size_t ls = strlen(r->name);

		if (r->kind == RULE_NAME && !strcmp(r->name, n))
			return i;
		if (r->kind == RULE_WILDCARD && ln > ls + 1 && n[ln - ls - 1] == '.' &&
		    !strcmp(n + ln - ls, r->name))
			return i;
	}
	return p->mode == POLICY_ALLOW_ALL && ln ? POLICY_ANY_NAME : -1;
}

int policy_set(struct policy *p, enum policy_mode mode, const char *const *rules, int n,
	       char *err, size_t errlen)
{
	struct policy_rule r;
	int k = 0;

	if (err && errlen)
		err[0] = '\0';
	if (mode != POLICY_DENY && mode != POLICY_ALLOW_LIST && mode != POLICY_ALLOW_ALL)
		return policy_err(err, errlen, NULL, "egress mode must be deny, allow-list or "
				  "allow-all");
	if (n < 0 || n > POLICY_MAX_RULES || (n && !rules))
		return policy_err(err, errlen, NULL, "at most %d egress rules", POLICY_MAX_RULES);
	/* check them all first: on error the policy is left as it was */
	for (int i = 0; i < n; i++) {
		int rc = policy_rule_parse(rules[i], &r, err, errlen);
		if (rc)
			return rc;
	}
	p->mode = mode;
	for (int i = 0; i < n; i++) {
		bool dup = false;

		policy_rule_parse(rules[i], &r, NULL, 0);
		for (int j = 0; j < k; j++)
			dup |= !strcmp(p->rules[j].text, r.text);
		if (!dup)
			p->rules[k++] = r;
	}
	p->nrules = k;

	/* keep the pins whose name still matches (re-indexed) and whose address may still
	 * be pinned; order, oldest first, is kept */
	k = 0;
	for (int i = 0; i < p->npins && i < POLICY_MAX_PINS; i++) {
		struct policy_pin *pin = &p->pins[i];
		int idx = policy_name_allowed(p, pin->name);

		if (idx == -1)
			continue;
		if (policy_internal(p, &pin->addr) &&
		    !policy_ip_listed(p, &pin->addr, 0, true, NULL))
			continue;
		pin->rule = idx;
		p->pins[k++] = *pin;
	}
	p->npins = k;
	return 0;
}

uint32_t policy_pin_ttl(uint32_t ttl)
{
	if (ttl < POLICY_PIN_TTL_MIN)
		return POLICY_PIN_TTL_MIN;
	if (ttl > POLICY_PIN_TTL_MAX)
		return POLICY_PIN_TTL_MAX;
	return ttl;
}

bool policy_pin(struct policy *p, const char *name, int rule, const struct net_addr *addr,
		uint32_t ttl, uint64_t now_ns)
{
	char n[DNS_NAME_MAX];
	struct net_addr a;
	uint64_t expires;
	int slot = -1;

	if (!p || !name || !addr || p->mode == POLICY_DENY ||
	    !policy_name_norm(name, n, sizeof(n)) || !n[0])
		return false;
	if (rule != POLICY_ANY_NAME && (rule < 0 || rule >= p->nrules))
		return false;
	net_addr_unmap(addr, &a);
	if (a.family != AF_INET && a.family != AF_INET6)
		return false;
	if (policy_internal(p, &a) && !policy_ip_listed(p, &a, 0, true, NULL))
		return false;
	expires = now_ns + (uint64_t)policy_pin_ttl(ttl) * NS_PER_S;

	for (int i = 0; i < p->npins; i++) {
		struct policy_pin *pin = &p->pins[i];

		if (net_addr_eq(&pin->addr, &a) && !strcmp(pin->name, n)) {
			pin->rule = rule;
			if (pin->expires_ns <= now_ns || expires > pin->expires_ns)
				pin->expires_ns = expires;
			return true;
		}
	}
	if (p->npins >= POLICY_MAX_PINS) {
		int k = 0;

		for (int i = 0; i < p->npins; i++)
			if (p->pins[i].expires_ns > now_ns)
				p->pins[k++] = p->pins[i];
		p->npins = k;
	}
	if (p->npins >= POLICY_MAX_PINS) {
		slot = 0;
		for (int i = 1; i < p->npins; i++)
			if (p->pins[i].added_ns < p->pins[slot].added_ns)
				slot = i;
	} else {
		slot = p->npins++;
	}
	memset(&p->pins[slot], 0, sizeof(p->pins[slot]));
	p->pins[slot].addr = a;
	memcpy(p->pins[slot].name, n, sizeof(n));
	p->pins[slot].rule = rule;
	p->pins[slot].expires_ns = expires;
	p->pins[slot].added_ns = now_ns;
	return true;
}

/* A live pin of a whose rule allows port (any port with any_port). NULL if none;
 * *port_miss says a live pin exists but its rule names another port. */
static const struct policy_pin *policy_pin_find(const struct policy *p,
						const struct net_addr *a, uint16_t port,
						bool any_port, uint64_t now_ns, bool *port_miss)
{
	size_t alen = a->family == AF_INET ? 4 : 16;

	for (int i = 0; i < p->npins; i++) {
		const struct policy_pin *pin = &p->pins[i];
		uint16_t rport;

		/* inline net_addr_eq: this loop runs for every new flow */
		if (pin->addr.a[alen - 1] != a->a[alen - 1] || pin->addr.family != a->family ||
		    memcmp(pin->addr.a, a->a, alen) || pin->expires_ns <= now_ns)
			continue;
		if (pin->rule == POLICY_ANY_NAME) {
			if (p->mode == POLICY_ALLOW_ALL)
				return pin;
			continue;
		}
		if (pin->rule < 0 || pin->rule >= p->nrules)
			continue;
		rport = p->rules[pin->rule].port;
		if (any_port || !rport || rport == port)
			return pin;
		if (port_miss)
			*port_miss = true;
	}
	return NULL;
}

static void policy_dest(struct policy_verdict *v, const char *name, const struct net_addr *a,
			uint16_t port)
{
	char s[INET6_ADDRSTRLEN];

	if (!name)
		name = net_addr_str(a, s, sizeof(s));
	if (!port)
		snprintf(v->dest, sizeof(v->dest), "%s", name);
	else if (!strchr(name, ':'))
		snprintf(v->dest, sizeof(v->dest), "%s:%u", name, port);
	else
		snprintf(v->dest, sizeof(v->dest), "[%s]:%u", name, port);
}

static void policy_verdict_set(struct policy_verdict *v, bool pass, const char *reason)
{
	v->pass = pass;
	snprintf(v->reason, sizeof(v->reason), "%s", pass ? "" : reason);
}

void policy_decide(const struct policy *p, const struct net_addr *addr, uint16_t port,
		   int proto, const struct net_addr *gw4, const struct net_addr *gw6,
		   uint64_t now_ns, struct policy_verdict *v)
{
	const struct policy_pin *pin;
	struct net_addr a, loop;
	bool internal, host, addr_hit = false, port_miss = false;

	(void)proto;            /* a port rule covers TCP and UDP alike; ICMP has port 0 */
	memset(v, 0, sizeof(*v));
	if (!p || !addr) {
		policy_verdict_set(v, false, "not listed");
		return;
	}
	a = *addr;
	policy_dest(v, NULL, &a, port);

	/* 1. */
	if (p->mode != POLICY_ALLOW_LIST && p->mode != POLICY_ALLOW_ALL) {
		policy_verdict_set(v, false, "egress deny");
		return;
	}

	/* 2. an IPv4-mapped destination is never forwarded (counted under its IPv4 form) */
	if (net_addr_is_mapped(addr)) {
		net_addr_unmap(addr, &a);
		policy_dest(v, NULL, &a, port);
		policy_verdict_set(v, false, "mapped address");
		return;
	}

	/* 3. the gateway is the host's loopback; only its exact address (a NAT64 form of
	 * it leads elsewhere and is an internal address below) */
	memset(&loop, 0, sizeof(loop));
	if (gw4 && gw4->family == AF_INET && net_addr_eq(&a, gw4)) {
		loop.family = AF_INET;
		loop.a[0] = 127;
		loop.a[3] = 1;
	} else if (gw6 && gw6->family == AF_INET6 && net_addr_eq(&a, gw6)) {
		loop.family = AF_INET6;
		loop.a[15] = 1;
	}
	if (loop.family) {
		policy_dest(v, NULL, &loop, port);
		policy_verdict_set(v, policy_ip_listed(p, &loop, port, false, NULL),
				   "host loopback");
		return;
	}

	internal = net_addr_is_internal(&a);
	host = !internal && policy_is_host(p, &a);
	internal |= host;
	/* 4. allow-all passes anything but an internal or host address; those are decided
	 * by steps 5 and 7 as in an allow-list (step 6 never passes them) */
	if (p->mode == POLICY_ALLOW_ALL && !internal) {
		pin = policy_pin_find(p, &a, port, true, now_ns, NULL);
		policy_dest(v, pin ? pin->name : NULL, &a, port);
		policy_verdict_set(v, true, NULL);
		return;
	}

	/* 5. */
	if (policy_ip_listed(p, &a, port, false, &addr_hit)) {
		pin = policy_pin_find(p, &a, port, false, now_ns, NULL);
		policy_dest(v, pin ? pin->name : NULL, &a, port);
		policy_verdict_set(v, true, NULL);
		return;
	}

	/* 6. pinned by a lookup of a listed name; never for an internal address, which
	 * only an IP/CIDR rule passes (step 5) */
	if (!internal) {
		pin = policy_pin_find(p, &a, port, false, now_ns, &port_miss);
		if (pin) {
			policy_dest(v, pin->name, &a, port);
			policy_verdict_set(v, true, NULL);
			return;
		}
	}

	/* 7. */
	policy_verdict_set(v, false, addr_hit || port_miss ? "port not listed" :
			   host ? "host address" : internal ? "internal address" : "not listed");
}
