/* SPDX-License-Identifier: Apache-2.0 */
/* test_net_policy.c - the egress policy (src/net/policy.c): rule parsing (every accepted
 * form, normalised, and the refused ones), name matching, pins (expiry, the TTL cap and
 * floor, updates, the oldest replaced when full, what policy_set keeps) and each step of
 * the decision order in policy.h, DNS rebinding included. */
#include "net/policy.h"
#include "t.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>

#define S(x) ((uint64_t)(x) * 1000000000ull)

static struct net_addr A(const char *s)
{
	struct net_addr a;

	if (net_addr_parse(s, &a))
		fprintf(stderr, "bad test address %s\n", s);
	return a;
}

static struct net_addr gw4, gw6;

/* The verdict for addr:port (TCP) at time t. */
static struct policy_verdict decide(const struct policy *p, const char *addr, uint16_t port,
				    uint64_t t)
{
	struct policy_verdict v;
	struct net_addr a = A(addr);

	policy_decide(p, &a, port, IPPROTO_TCP, &gw4, &gw6, t, &v);
	return v;
}

#define PASS(p, addr, port, t, want) do { struct policy_verdict _v = decide(p, addr, port, t); \
	CHECK(_v.pass); CHECK_STR(_v.dest, want); } while (0)
#define REFUSE(p, addr, port, t, why) do { struct policy_verdict _v = decide(p, addr, port, t); \
	CHECK(!_v.pass); CHECK_STR(_v.reason, why); } while (0)

static int set(struct policy *p, enum policy_mode m, const char *const *rules, int n)
{
	char err[512];
	int rc = policy_set(p, m, rules, n, err, sizeof(err));

	if (rc)
		fprintf(stderr, "policy_set: %s\n", err);
	return rc;
}

/* ---- rules ---- */

static void test_rule_parse(void)
{
	static const struct { const char *in, *text; int kind, port, prefix; } ok[] = {
		{ "example.org", "example.org", RULE_NAME, 0, 0 },
		{ "Example.ORG.", "example.org", RULE_NAME, 0, 0 },
		{ "localhost", "localhost", RULE_NAME, 0, 0 },
		{ "example.org:443", "example.org:443", RULE_NAME, 443, 0 },
		{ "*.example.org", "*.example.org", RULE_WILDCARD, 0, 0 },
		{ "*.Example.org:8443", "*.example.org:8443", RULE_WILDCARD, 8443, 0 },
		{ "_acme.test:1", "_acme.test:1", RULE_NAME, 1, 0 },
		{ "203.0.113.7", "203.0.113.7", RULE_IP, 0, 32 },
		{ "203.0.113.7:53", "203.0.113.7:53", RULE_IP, 53, 32 },
		{ "203.0.113.0/24", "203.0.113.0/24", RULE_CIDR, 0, 24 },
		{ "203.0.113.9/24:443", "203.0.113.0/24:443", RULE_CIDR, 443, 24 },
		{ "0.0.0.0/0", "0.0.0.0/0", RULE_CIDR, 0, 0 },
		{ "2001:db8::1", "2001:db8::1", RULE_IP, 0, 128 },
		{ "2001:DB8:0::1", "2001:db8::1", RULE_IP, 0, 128 },
		{ "[2001:db8::1]:443", "[2001:db8::1]:443", RULE_IP, 443, 128 },
		{ "[2001:db8::1]", "2001:db8::1", RULE_IP, 0, 128 },
		{ "2001:db8::/32", "2001:db8::/32", RULE_CIDR, 0, 32 },
		{ "[2001:db8:1::/32]:65535", "[2001:db8::/32]:65535", RULE_CIDR, 65535, 32 },
		{ "::1", "::1", RULE_IP, 0, 128 },
		{ "::ffff:203.0.113.7", "203.0.113.7", RULE_IP, 0, 32 },
		{ "[::ffff:10.0.0.0/104]:22", "10.0.0.0/8:22", RULE_CIDR, 22, 8 },
	};
	static const char *bad[] = {
		"", " ", "example.org ", "exa mple.org", "example.org:0", "example.org:65536",
		"example.org:http", "example.org:", ":443", "example.org:443:1", "*", "*.", "*.*.org",
		"a.*.org", "*foo.org", "foo*.org", "**.org", "256.1.1.1", "1.2.3", "1.2.3.4.5",
		"203.0.113.0/33", "203.0.113.0/", "203.0.113.0/-1", "203.0.113.0/2x", "2001:db8::/129",
		"[203.0.113.7]:80", "[2001:db8::1", "[2001:db8::1]:", "[2001:db8::1]443",
		"[example.org]:443", "2001:db8::g", "http://example.org", "example.org/24",
		"example..org", ".example.org", "-", "-a.org", "a-.org", "a.b-", "exämple.org", "*.1.2.3.4", "example.123",
		"[2001:db8::1]:0",
	};
	struct policy_rule r;
	char err[512];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int rc = policy_rule_parse(ok[i].in, &r, err, sizeof(err));

		if (rc)
			fprintf(stderr, "refused %s: %s\n", ok[i].in, err);
		CHECK_EQ_INT(rc, 0);
		CHECK_STR(r.text, ok[i].text);
		CHECK_EQ_INT(r.kind, ok[i].kind);
		CHECK_EQ_INT(r.port, ok[i].port);
		if (ok[i].kind == RULE_IP || ok[i].kind == RULE_CIDR)
			CHECK_EQ_INT(r.prefix, ok[i].prefix);
	}
	CHECK(policy_rule_parse("*.Example.org", &r, NULL, 0) == 0 &&
	      !strcmp(r.name, "example.org"));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc;

		err[0] = '\0';
		rc = policy_rule_parse(bad[i], &r, err, sizeof(err));
		if (rc != -EINVAL)
			fprintf(stderr, "accepted bad rule '%s' as %s\n", bad[i], r.text);
		CHECK_EQ_INT(rc, -EINVAL);
		CHECK(strstr(err, "accepted forms: example.org, *.example.org") != NULL);
	}
	policy_rule_parse("example.org:99999", &r, err, sizeof(err));
	CHECK(strstr(err, "port must be 1-65535") != NULL);
	policy_rule_parse("a.*.org", &r, err, sizeof(err));
	CHECK(strstr(err, "'a.*.org'") != NULL);
	CHECK_EQ_INT(policy_rule_parse(NULL, &r, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(policy_rule_parse("x", &r, err, 0), 0);

	{
		enum policy_mode m;

		CHECK(policy_mode_parse("deny", &m) == 0 && m == POLICY_DENY);
		CHECK(policy_mode_parse("allow-list", &m) == 0 && m == POLICY_ALLOW_LIST);
		CHECK(policy_mode_parse("allow-all", &m) == 0 && m == POLICY_ALLOW_ALL);
		CHECK_EQ_INT(policy_mode_parse("allow", &m), -EINVAL);
		CHECK_STR(policy_mode_str(POLICY_ALLOW_LIST), "allow-list");
	}
}

static void test_set(struct policy *p)
{
	static const char *rules[] = { "example.org", "203.0.113.7", "Example.org.", "bad rule" };
	char err[512];

	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, rules, 3), 0);
	CHECK_EQ_INT(p->nrules, 2);     /* the duplicate is folded */
	CHECK_EQ_INT(policy_set(p, POLICY_ALLOW_ALL, rules, 4, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "'bad rule'") != NULL);
	CHECK_EQ_INT(p->mode, POLICY_ALLOW_LIST);      /* unchanged on error */
	CHECK_EQ_INT(p->nrules, 2);
	CHECK_EQ_INT(policy_set(p, (enum policy_mode)7, rules, 1, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(policy_set(p, POLICY_ALLOW_LIST, rules, POLICY_MAX_RULES + 1, err,
				sizeof(err)), -EINVAL);
	CHECK_EQ_INT(set(p, POLICY_DENY, NULL, 0), 0);
	CHECK_EQ_INT(p->nrules, 0);
}

/* ---- names ---- */

static void test_names(struct policy *p)
{
	static const char *rules[] = { "example.org:443", "*.cdn.test", "api.test", "1.2.3.4" };

	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, rules, 4), 0);
	CHECK_EQ_INT(policy_name_allowed(p, "example.org"), 0);
	CHECK_EQ_INT(policy_name_allowed(p, "EXAMPLE.org."), 0);
	CHECK_EQ_INT(policy_name_allowed(p, "www.example.org"), -1);
	CHECK_EQ_INT(policy_name_allowed(p, "xexample.org"), -1);
	CHECK_EQ_INT(policy_name_allowed(p, "a.cdn.test"), 1);
	CHECK_EQ_INT(policy_name_allowed(p, "x.y.CDN.test."), 1);
	CHECK_EQ_INT(policy_name_allowed(p, "cdn.test"), -1);   /* not the bare suffix */
	CHECK_EQ_INT(policy_name_allowed(p, "acdn.test"), -1);
	CHECK_EQ_INT(policy_name_allowed(p, ".cdn.test"), -1);
	CHECK_EQ_INT(policy_name_allowed(p, "api.test"), 2);
	CHECK_EQ_INT(policy_name_allowed(p, "1.2.3.4"), -1);    /* an IP rule is not a name */
	CHECK_EQ_INT(policy_name_allowed(p, ""), -1);
	CHECK_EQ_INT(policy_name_allowed(p, NULL), -1);
	p->mode = POLICY_ALLOW_ALL;
	CHECK_EQ_INT(policy_name_allowed(p, "anything.test"), POLICY_ANY_NAME);
	CHECK_EQ_INT(policy_name_allowed(p, "api.test"), 2);
	p->mode = POLICY_DENY;
	CHECK_EQ_INT(policy_name_allowed(p, "api.test"), -1);
}

/* ---- decisions, step by step ---- */

static void test_deny(struct policy *p)
{
	static const char *rules[] = { "203.0.113.7", "127.0.0.1", "example.org" };
	struct net_addr a = A("203.0.113.7");

	CHECK_EQ_INT(set(p, POLICY_DENY, rules, 3), 0);
	REFUSE(p, "203.0.113.7", 443, 0, "egress deny");
	REFUSE(p, "10.0.2.2", 80, 0, "egress deny");
	REFUSE(p, "8.8.8.8", 53, 0, "egress deny");
	CHECK(!policy_pin(p, "example.org", 2, &a, 60, 0));
	{
		struct policy_verdict v;

		policy_decide(p, &a, 443, IPPROTO_TCP, &gw4, &gw6, 0, &v);
		CHECK_STR(v.dest, "203.0.113.7:443");
	}
}

static void test_gateway(struct policy *p)
{
	static const char *none[] = { "example.org" };
	static const char *one[] = { "127.0.0.1:8080", "::1" };
	static const char *net[] = { "127.0.0.0/8" };

	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, none, 1), 0);
	REFUSE(p, "10.0.2.2", 8080, 0, "host loopback");
	REFUSE(p, "fd00::2", 8080, 0, "host loopback");
	CHECK_EQ_INT(set(p, POLICY_ALLOW_ALL, none, 1), 0);
	REFUSE(p, "10.0.2.2", 8080, 0, "host loopback");        /* whatever the mode */
	REFUSE(p, "::ffff:10.0.2.2", 8080, 0, "mapped address");
	REFUSE(p, "64:ff9b::a00:202", 8080, 0, "internal address");  /* NAT64: not the gw */

	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, one, 2), 0);
	PASS(p, "10.0.2.2", 8080, 0, "127.0.0.1:8080");
	REFUSE(p, "10.0.2.2", 8081, 0, "host loopback");
	PASS(p, "fd00::2", 22, 0, "[::1]:22");
	PASS(p, "127.0.0.1", 8080, 0, "127.0.0.1:8080");        /* listed: step 5 */
	/* the mapped forms are refused even when the loopback is listed */
	REFUSE(p, "::ffff:10.0.2.2", 8080, 0, "mapped address");
	REFUSE(p, "::ffff:127.0.0.1", 8080, 0, "mapped address");
	CHECK_EQ_INT(set(p, POLICY_ALLOW_ALL, one, 2), 0);
	PASS(p, "10.0.2.2", 8080, 0, "127.0.0.1:8080");
	REFUSE(p, "10.0.2.2", 9, 0, "host loopback");

	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, net, 1), 0);
	PASS(p, "10.0.2.2", 1, 0, "127.0.0.1:1");
	REFUSE(p, "fd00::2", 1, 0, "host loopback");
	/* no gateway given: 10.0.2.2 is just an internal address */
	{
		struct policy_verdict v;
		struct net_addr a = A("10.0.2.2");

		policy_decide(p, &a, 1, IPPROTO_TCP, NULL, NULL, 0, &v);
		CHECK(!v.pass);
		CHECK_STR(v.reason, "internal address");
	}
}

static void test_allow_all(struct policy *p)
{
	static const char *rules[] = { "192.168.1.0/24", "10.0.0.5:5432" };
	struct net_addr a = A("93.184.216.34");

	CHECK_EQ_INT(set(p, POLICY_ALLOW_ALL, rules, 2), 0);
	PASS(p, "1.1.1.1", 443, 0, "1.1.1.1:443");
	PASS(p, "2606:4700::1111", 443, 0, "[2606:4700::1111]:443");
	REFUSE(p, "10.0.0.1", 443, 0, "internal address");
	REFUSE(p, "169.254.169.254", 80, 0, "internal address");
	REFUSE(p, "127.0.0.1", 80, 0, "internal address");
	REFUSE(p, "::1", 80, 0, "internal address");
	REFUSE(p, "fe80::1", 80, 0, "internal address");
	REFUSE(p, "::ffff:172.16.0.1", 80, 0, "mapped address");
	REFUSE(p, "::ffff:1.1.1.1", 443, 0, "mapped address");
	REFUSE(p, "64:ff9b::ac10:1", 80, 0, "internal address");    /* NAT64 of 172.16.0.1 */
	PASS(p, "64:ff9b::101:101", 443, 0, "[64:ff9b::101:101]:443");
	REFUSE(p, "100.64.0.1", 80, 0, "internal address");
	PASS(p, "192.168.1.20", 22, 0, "192.168.1.20:22");
	PASS(p, "10.0.0.5", 5432, 0, "10.0.0.5:5432");
	REFUSE(p, "10.0.0.5", 22, 0, "port not listed");
	/* a lookup's name is what the counts go under */
	CHECK(policy_pin(p, "Some.Site.", POLICY_ANY_NAME, &a, 60, 0));
	PASS(p, "93.184.216.34", 443, S(1), "some.site:443");
	/* internal addresses are not pinned in allow-all either */
	a = A("10.9.9.9");
	CHECK(!policy_pin(p, "evil.test", POLICY_ANY_NAME, &a, 60, 0));
}

static void test_ip_rules(struct policy *p)
{
	static const char *rules[] = { "203.0.113.7:53", "198.51.100.0/24:443", "2001:db8::/32",
				       "[2001:db8:1::1]:80", "10.1.0.0/16" };

	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, rules, 5), 0);
	PASS(p, "203.0.113.7", 53, 0, "203.0.113.7:53");
	REFUSE(p, "203.0.113.7", 54, 0, "port not listed");
	REFUSE(p, "203.0.113.8", 53, 0, "not listed");
	PASS(p, "198.51.100.99", 443, 0, "198.51.100.99:443");
	REFUSE(p, "198.51.100.99", 80, 0, "port not listed");
	REFUSE(p, "198.51.101.1", 443, 0, "not listed");
	PASS(p, "2001:db8:ffff::1", 22, 0, "[2001:db8:ffff::1]:22");
	PASS(p, "2001:db8:1::1", 80, 0, "[2001:db8:1::1]:80");
	REFUSE(p, "2001:db9::1", 22, 0, "not listed");
	/* a mapped destination is refused, counted under the IPv4 address */
	REFUSE(p, "::ffff:203.0.113.7", 53, 0, "mapped address");
	{
		struct policy_verdict v = decide(p, "::ffff:203.0.113.7", 53, 0);
		CHECK_STR(v.dest, "203.0.113.7:53");
	}
	PASS(p, "10.1.2.3", 5432, 0, "10.1.2.3:5432");            /* internal, but listed */
	REFUSE(p, "10.2.0.1", 5432, 0, "internal address");
	{
		/* ICMP has port 0: only a rule without a port covers it */
		struct policy_verdict v;
		struct net_addr a = A("203.0.113.7");

		policy_decide(p, &a, 0, IPPROTO_ICMP, &gw4, &gw6, 0, &v);
		CHECK(!v.pass);
		a = A("2001:db8::9");
		policy_decide(p, &a, 0, IPPROTO_ICMPV6, &gw4, &gw6, 0, &v);
		CHECK(v.pass);
		CHECK_STR(v.dest, "2001:db8::9");
	}
}

static void test_pins(struct policy *p)
{
	static const char *rules[] = { "example.org:443", "*.cdn.test", "api.test", "10.1.2.3" };
	struct net_addr a = A("93.184.216.34"), c = A("151.101.1.1"), d = A("2001:db8::44");
	struct net_addr lo = A("127.0.0.1"), ten = A("10.4.4.4"), listed = A("10.1.2.3");
	struct net_addr m = A("::ffff:10.4.4.4"), ula = A("fd00::1"), meta = A("169.254.169.254");
	uint64_t t0 = S(1000);

	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, rules, 4), 0);
	REFUSE(p, "93.184.216.34", 443, t0, "not listed");
	CHECK(policy_pin(p, "example.org", 0, &a, 60, t0));
	PASS(p, "93.184.216.34", 443, t0, "example.org:443");
	REFUSE(p, "93.184.216.34", 80, t0, "port not listed");
	PASS(p, "93.184.216.34", 443, t0 + S(59), "example.org:443");
	REFUSE(p, "93.184.216.34", 443, t0 + S(60), "not listed");     /* expired */
	REFUSE(p, "::ffff:93.184.216.34", 443, t0, "mapped address");

	CHECK(policy_pin(p, "x.cdn.test", 1, &c, 30, t0));
	PASS(p, "151.101.1.1", 8080, t0, "x.cdn.test:8080");
	CHECK(policy_pin(p, "api.test", 2, &d, 30, t0));
	PASS(p, "2001:db8::44", 22, t0, "api.test:22");
	/* the same address under a second name with another port rule: either may pass it */
	CHECK(policy_pin(p, "api.test", 2, &a, 30, t0));
	PASS(p, "93.184.216.34", 80, t0, "api.test:80");

	/* rebinding: a listed name that resolves to an internal address is not pinned */
	CHECK(!policy_pin(p, "api.test", 2, &lo, 60, t0));
	CHECK(!policy_pin(p, "api.test", 2, &ten, 60, t0));
	CHECK(!policy_pin(p, "api.test", 2, &m, 60, t0));
	CHECK(!policy_pin(p, "api.test", 2, &ula, 60, t0));
	CHECK(!policy_pin(p, "example.org", 0, &meta, 60, t0));
	REFUSE(p, "127.0.0.1", 443, t0, "internal address");
	REFUSE(p, "10.4.4.4", 443, t0, "internal address");
	/* ...unless that address is listed itself */
	CHECK(policy_pin(p, "api.test", 2, &listed, 60, t0));
	PASS(p, "10.1.2.3", 443, t0, "api.test:443");
	/* a pin never passes an internal address on its own, even if one slips in */
	p->pins[p->npins] = (struct policy_pin){ .addr = ten, .rule = 2, .expires_ns = S(1e6) };
	strcpy(p->pins[p->npins++].name, "api.test");
	REFUSE(p, "10.4.4.4", 443, t0, "internal address");
	p->npins--;

	/* bad arguments */
	CHECK(!policy_pin(p, "api.test", 4, &c, 60, t0));
	CHECK(!policy_pin(p, "api.test", -1, &c, 60, t0));
	CHECK(!policy_pin(p, "", 2, &c, 60, t0));
	CHECK(!policy_pin(p, NULL, 2, &c, 60, t0));
	{
		struct net_addr none = { 0 };
		CHECK(!policy_pin(p, "api.test", 2, &none, 60, t0));
	}
}

static void test_pin_ttl(struct policy *p)
{
	static const char *rules[] = { "api.test" };
	struct net_addr a = A("198.18.0.1"), b = A("198.18.0.2");
	uint64_t t0 = S(50);
	int n;

	CHECK_EQ_INT(policy_pin_ttl(0), 5);
	CHECK_EQ_INT(policy_pin_ttl(4), 5);
	CHECK_EQ_INT(policy_pin_ttl(5), 5);
	CHECK_EQ_INT(policy_pin_ttl(120), 120);
	CHECK_EQ_INT(policy_pin_ttl(300), 300);
	CHECK_EQ_INT(policy_pin_ttl(UINT32_MAX), 300);
	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, rules, 1), 0);
	p->npins = 0;
	/* capped at 300 s */
	CHECK(policy_pin(p, "api.test", 0, &a, 86400, t0));
	PASS(p, "198.18.0.1", 1, t0 + S(299), "api.test:1");
	REFUSE(p, "198.18.0.1", 1, t0 + S(300), "not listed");
	/* floored at 5 s */
	CHECK(policy_pin(p, "api.test", 0, &b, 0, t0));
	PASS(p, "198.18.0.2", 1, t0 + S(4), "api.test:1");
	REFUSE(p, "198.18.0.2", 1, t0 + S(5), "not listed");
	/* the same address and name again: updated in place, never shortened */
	n = p->npins;
	CHECK(policy_pin(p, "API.test.", 0, &b, 100, t0 + S(1)));
	CHECK_EQ_INT(p->npins, n);
	PASS(p, "198.18.0.2", 1, t0 + S(100), "api.test:1");
	CHECK(policy_pin(p, "api.test", 0, &b, 10, t0 + S(2)));
	PASS(p, "198.18.0.2", 1, t0 + S(100), "api.test:1");
	CHECK_EQ_INT(p->npins, n);
	/* after expiry a new answer starts again */
	CHECK(policy_pin(p, "api.test", 0, &b, 10, t0 + S(500)));
	PASS(p, "198.18.0.2", 1, t0 + S(505), "api.test:1");
	REFUSE(p, "198.18.0.2", 1, t0 + S(511), "not listed");
}

static void test_pin_full(struct policy *p)
{
	static const char *rules[] = { "api.test", "*.svc.test" };
	struct net_addr a = { .family = AF_INET, .a = { 198, 18 } }, first;
	char s[64];

	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, rules, 2), 0);
	p->npins = 0;
	for (int i = 0; i < POLICY_MAX_PINS; i++) {
		a.a[2] = (uint8_t)(i >> 8);
		a.a[3] = (uint8_t)i;
		if (i == 0)
			first = a;
		if (!policy_pin(p, "api.test", 0, &a, 300, S(10) + (uint64_t)i))
			break;
	}
	CHECK_EQ_INT(p->npins, POLICY_MAX_PINS);
	PASS(p, net_addr_str(&first, s, sizeof(s)), 443, S(20), "api.test:443");
	a.a[1] = 19;                    /* 198.19.0.0: one more */
	a.a[2] = a.a[3] = 0;
	CHECK(policy_pin(p, "api.test", 0, &a, 300, S(20)));
	CHECK_EQ_INT(p->npins, POLICY_MAX_PINS);
	PASS(p, "198.19.0.0", 443, S(21), "api.test:443");
	REFUSE(p, net_addr_str(&first, s, sizeof(s)), 443, S(21), "not listed"); /* oldest */
	PASS(p, "198.18.0.1", 443, S(21), "api.test:443");
	/* when full of expired pins, they make room first */
	a.a[3] = 1;
	CHECK(policy_pin(p, "api.test", 0, &a, 5, S(1000)));
	CHECK_EQ_INT(p->npins, 1);
	PASS(p, "198.19.0.1", 443, S(1001), "api.test:443");

	/* policy_set keeps the pins whose name still matches, re-indexed */
	CHECK(policy_pin(p, "x.svc.test", 1, &first, 60, S(1000)));
	{
		static const char *r2[] = { "other.test", "*.svc.test:8443" };
		static const char *r3[] = { "other.test" };

		CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, r2, 2), 0);
		CHECK_EQ_INT(p->npins, 1);
		CHECK_EQ_INT(p->pins[0].rule, 1);
		PASS(p, net_addr_str(&first, s, sizeof(s)), 8443, S(1001), "x.svc.test:8443");
		REFUSE(p, net_addr_str(&first, s, sizeof(s)), 443, S(1001), "port not listed");
		CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, r3, 1), 0);
		CHECK_EQ_INT(p->npins, 0);
	}
	/* and drops internal ones whose address is no longer listed */
	{
		static const char *r4[] = { "api.test", "10.1.2.3" };
		static const char *r5[] = { "api.test" };
		struct net_addr l = A("10.1.2.3");

		CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, r4, 2), 0);
		CHECK(policy_pin(p, "api.test", 0, &l, 60, S(1000)));
		CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, r5, 1), 0);
		CHECK_EQ_INT(p->npins, 0);
		CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, r4, 2), 0);
		CHECK(policy_pin(p, "api.test", 0, &l, 60, S(1000)));
		CHECK_EQ_INT(set(p, POLICY_DENY, r4, 2), 0);
		CHECK_EQ_INT(p->npins, 0);
	}
}

/* The host's own addresses: internal in every mode unless an IP/CIDR rule lists them,
 * never pinned, kept across policy changes, compared by the IPv4 a NAT64 form carries. */
static void test_host_addrs(struct policy *p)
{
	static const char *all[] = { "example.org" };
	static const char *listed[] = { "192.0.2.10:22", "2001:db8::/32" };
	struct net_addr h4 = A("192.0.2.10"), h6 = A("2001:db8::10"), other = A("192.0.2.11");
	struct net_addr mapped = A("::ffff:198.18.0.7");

	policy_host_clear(p);
	CHECK_EQ_INT(set(p, POLICY_ALLOW_ALL, all, 1), 0);
	PASS(p, "192.0.2.10", 80, 0, "192.0.2.10:80");          /* not known yet */
	CHECK(policy_host_add(p, &h4));
	CHECK(policy_host_add(p, &h4));                         /* twice: one entry */
	CHECK(policy_host_add(p, &h6));
	CHECK(policy_host_add(p, &mapped));                     /* stored as 198.18.0.7 */
	CHECK_EQ_INT(p->nhost, 3);
	CHECK(policy_is_host(p, &h4));
	CHECK(!policy_is_host(p, &other));
	REFUSE(p, "192.0.2.10", 80, 0, "host address");
	REFUSE(p, "2001:db8::10", 443, 0, "host address");
	REFUSE(p, "198.18.0.7", 443, 0, "host address");
	REFUSE(p, "64:ff9b::c000:20a", 80, 0, "host address");  /* NAT64 of 192.0.2.10 */
	REFUSE(p, "::ffff:192.0.2.10", 80, 0, "mapped address");
	PASS(p, "192.0.2.11", 80, 0, "192.0.2.11:80");
	/* a listed name resolving to the host is not pinned (rebinding to the host) */
	CHECK(!policy_pin(p, "example.org", 0, &h4, 60, 0));
	/* kept across policy_set; in an allow-list only an IP/CIDR rule opens it */
	CHECK_EQ_INT(set(p, POLICY_ALLOW_LIST, listed, 2), 0);
	CHECK_EQ_INT(p->nhost, 3);
	PASS(p, "192.0.2.10", 22, 0, "192.0.2.10:22");
	REFUSE(p, "192.0.2.10", 80, 0, "port not listed");
	PASS(p, "2001:db8::10", 443, 0, "[2001:db8::10]:443");
	CHECK_EQ_INT(set(p, POLICY_ALLOW_ALL, listed, 2), 0);
	PASS(p, "192.0.2.10", 22, 0, "192.0.2.10:22");
	REFUSE(p, "192.0.2.10", 23, 0, "port not listed");
	REFUSE(p, "198.18.0.7", 23, 0, "host address");
	/* removed: an ordinary address again */
	policy_host_del(p, &h4);
	CHECK(!policy_is_host(p, &h4));
	CHECK_EQ_INT(set(p, POLICY_ALLOW_ALL, all, 1), 0);
	PASS(p, "192.0.2.10", 80, 0, "192.0.2.10:80");
	/* the table is bounded */
	policy_host_clear(p);
	for (int i = 0; i < POLICY_MAX_HOST_ADDRS; i++) {
		struct net_addr x = A("203.0.113.0");

		x.a[2] = (uint8_t)(i >> 8);
		x.a[3] = (uint8_t)i;
		CHECK(policy_host_add(p, &x));
	}
	CHECK(!policy_host_add(p, &other));
	CHECK_EQ_INT(p->nhost, POLICY_MAX_HOST_ADDRS);
	policy_host_clear(p);
}

int main(void)
{
	struct policy *p = calloc(1, sizeof(*p));

	gw4 = A("10.0.2.2");
	gw6 = A("fd00::2");
	test_rule_parse();
	test_set(p);
	test_names(p);
	test_deny(p);
	test_gateway(p);
	test_allow_all(p);
	test_ip_rules(p);
	test_pins(p);
	test_pin_ttl(p);
	test_pin_full(p);
	test_host_addrs(p);
	free(p);
	return T_DONE();
}
