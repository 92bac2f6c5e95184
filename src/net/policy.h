/* SPDX-License-Identifier: Apache-2.0 */
/* policy.h - the egress policy engine: rules, DNS pins, and the verdict for each flow.
 * Mechanism lives elsewhere (engine.c enforces); this file only decides.
 *
 * Rule text (one --egress-allow value each), docs/network.md:
 *   example.org            the name, any port
 *   *.example.org          any name below example.org (not example.org itself)
 *   example.org:443        the name, that port only
 *   203.0.113.7  203.0.113.7:53  203.0.113.0/24  203.0.113.0/24:443
 *   2001:db8::1  [2001:db8::1]:443  2001:db8::/32  [2001:db8::/32]:443
 *
 * Order of decision for a new flow to (addr, port, proto):
 *   1. mode deny: refuse.
 *   2. addr is IPv4-mapped IPv6 (::ffff:a.b.c.d): refuse, whatever the rules. No guest
 *      stack puts one on the wire (a mapped socket sends IPv4), and slirp would hand it
 *      to a host socket that talks IPv4 around slirp's own IPv4 translation (the
 *      gateway, the resolver). A NAT64 address (64:ff9b::/96) is judged as the IPv4
 *      address it carries for the internal ranges and the host's addresses.
 *   3. addr is the gateway: it stands for the host's loopback (127.0.0.1 / ::1); it passes
 *      only when a rule lists that loopback address (or a CIDR holding it), whatever
 *      the mode.
 *   4. mode allow-all: pass, except internal addresses (net_addr_is_internal) and the
 *      host's own addresses (policy_host_*), which pass only when listed.
 *   5. an IP or CIDR rule covers addr (and its port, if any): pass.
 *   6. addr was returned by this sandbox's own lookup of a listed name, not expired, and
 *      the name's rule has no port or the same port: pass (pinned to that name). An
 *      internal address never gets pinned (policy_pin refuses it) unless an IP/CIDR rule
 *      lists it, and even then only step 5 (the rule, with its port) passes it: a pin
 *      of an internal address only names the destination. The host's own addresses
 *      count as internal here too.
 *   7. refuse.
 */
#ifndef K8_NET_POLICY_H
#define K8_NET_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/addr.h"
#include "net/dns.h"

#define POLICY_MAX_RULES 256
#define POLICY_MAX_PINS 4096
#define POLICY_MAX_HOST_ADDRS 512

enum policy_mode { POLICY_DENY = 0, POLICY_ALLOW_LIST, POLICY_ALLOW_ALL };

enum policy_rule_kind { RULE_NAME, RULE_WILDCARD, RULE_IP, RULE_CIDR };

struct policy_rule {
	enum policy_rule_kind kind;
	char name[DNS_NAME_MAX];        /* NAME: the name; WILDCARD: the suffix after "*." */
	struct net_addr addr;           /* IP / CIDR */
	int prefix;                     /* CIDR prefix length (IP: 32 or 128) */
	uint16_t port;                  /* 0: any port */
	char text[300];                 /* the rule as written, normalised */
};

struct policy_pin {
	struct net_addr addr;
	char name[DNS_NAME_MAX];
	int rule;                       /* index of the rule the name matched */
	uint64_t expires_ns;            /* monotonic */
	uint64_t added_ns;              /* added: when first pinned; the oldest goes first */
};

struct policy {
	enum policy_mode mode;
	struct policy_rule rules[POLICY_MAX_RULES];
	int nrules;
	struct policy_pin pins[POLICY_MAX_PINS]; /* oldest replaced first when full */
	int npins;
	/* The host's own addresses, every interface (hostaddr.c keeps them current):
	 * internal in every mode unless an IP/CIDR rule covers them. Not touched by
	 * policy_set. Stored unmapped (a NAT64 or mapped form is compared by its IPv4). */
	struct net_addr host[POLICY_MAX_HOST_ADDRS];
	int nhost;
};

/* Parse one rule; on error return -EINVAL with a message in err[errlen] saying what is
 * wrong and what is accepted. */
int policy_rule_parse(const char *text, struct policy_rule *r, char *err, size_t errlen);
/* Set the mode and rules ("deny", "allow-list", "allow-all"); pins are kept only when
 * their name still matches a rule. 0 or -EINVAL with err. */
int policy_set(struct policy *p, enum policy_mode mode, const char *const *rules, int n,
	       char *err, size_t errlen);
int policy_mode_parse(const char *s, enum policy_mode *m);
const char *policy_mode_str(enum policy_mode m);

/* May the guest resolve `name`? Returns the index of the first matching NAME or WILDCARD
 * rule; in mode allow-all, POLICY_ANY_NAME when no rule matches; otherwise -1 (always -1
 * in mode deny). */
#define POLICY_ANY_NAME (-2)
int policy_name_allowed(const struct policy *p, const char *name);

/* Record that a lookup of `name` (matched by rule `rule`, or POLICY_ANY_NAME) returned
 * addr, valid for ttl seconds from now_ns. Internal addresses are not pinned unless an
 * IP/CIDR rule covers them: returns false then (the caller leaves them out of the
 * answer). */
bool policy_pin(struct policy *p, const char *name, int rule, const struct net_addr *addr,
		uint32_t ttl, uint64_t now_ns);
/* Added: a pin lives ttl seconds clamped to [POLICY_PIN_TTL_MIN, POLICY_PIN_TTL_MAX];
 * policy_pin_ttl() is that clamp, for the TTL the guest is told. */
#define POLICY_PIN_TTL_MIN 5
#define POLICY_PIN_TTL_MAX 300
uint32_t policy_pin_ttl(uint32_t ttl);

/* The host's own addresses. policy_host_add: false when the table is full (the address
 * is then not known as the host's: the caller logs it); adding one twice keeps one, and
 * an address that is internal anyway (loopback, private, link-local) is not stored. */
bool policy_host_add(struct policy *p, const struct net_addr *a);
void policy_host_del(struct policy *p, const struct net_addr *a);
void policy_host_clear(struct policy *p);
/* Is a (or the IPv4 address a mapped or NAT64 form carries) one of the host's? */
bool policy_is_host(const struct policy *p, const struct net_addr *a);

struct policy_verdict {
	bool pass;
	char dest[DNS_NAME_MAX + 8];    /* what the counts are kept under: the pinned name
	                                 * or the address, with ":port" when port != 0 */
	char reason[128];               /* for a refusal: "not listed", "port not listed",
	                                 * "egress deny", "host loopback", "internal address",
	                                 * "host address", "mapped address" */
};

/* The verdict for a new flow from the guest to addr:port. gateway is the address that
 * stands for the host (10.0.2.2 / its IPv6 twin), proto an IPPROTO_* value. */
void policy_decide(const struct policy *p, const struct net_addr *addr, uint16_t port,
		   int proto, const struct net_addr *gw4, const struct net_addr *gw6,
		   uint64_t now_ns, struct policy_verdict *v);

#endif
