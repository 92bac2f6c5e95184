/* SPDX-License-Identifier: Apache-2.0 */
/* dns.h - the DNS messages kosa8-net reads and writes: queries from the guest (hostile),
 * answers from the host's upstream resolver (untrusted), and the replies it builds.
 * Every name is checked (labels 1-63 bytes, total <= 253, compression pointers bounded
 * and never looping) and lower-cased. */
#ifndef K8_NET_DNS_H
#define K8_NET_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/addr.h"

#define DNS_NAME_MAX 254                /* 253 chars + NUL, no trailing dot */
#define DNS_MAX_ADDRS 16
#define DNS_MAX_CNAMES 8

enum { DNS_T_A = 1, DNS_T_CNAME = 5, DNS_T_AAAA = 28 };
enum { DNS_R_NOERROR = 0, DNS_R_FORMERR = 1, DNS_R_SERVFAIL = 2, DNS_R_NXDOMAIN = 3,
       DNS_R_NOTIMP = 4, DNS_R_REFUSED = 5 };

struct dns_question {
	uint16_t id;
	bool rd;
	char name[DNS_NAME_MAX];        /* lower case, no trailing dot; "" for the root */
	uint16_t qtype, qclass;
	size_t end;                     /* offset just past the question in the message */
	int opcode;                     /* added: echoed in replies (dns_parse_query sets it) */
};

/* A guest's query: QR=0, exactly one question. OPCODE other than QUERY still parses
 * (so it can be answered NOTIMP) with *opcode set. 0 or -EINVAL. */
int dns_parse_query(const uint8_t *msg, size_t len, struct dns_question *q, int *opcode);

/* A reply carrying only the question and rcode (REFUSED, SERVFAIL, NXDOMAIN, NOTIMP,
 * FORMERR). Returns its length or 0 if cap is too small. */
size_t dns_build_error(uint8_t *out, size_t cap, const struct dns_question *q, int rcode);

/* A NOERROR reply with one A or AAAA record per address of the question's type (others
 * skipped), owner = question name, TTL = ttl. n == 0 gives an empty NOERROR answer
 * (the name exists but has no records of this type). */
size_t dns_build_answer(uint8_t *out, size_t cap, const struct dns_question *q,
			const struct net_addr *addrs, int n, uint32_t ttl);

/* A recursive query for name/qtype with the given id (RD set). */
size_t dns_build_query(uint8_t *out, size_t cap, uint16_t id, const char *name,
		       uint16_t qtype);

struct dns_answer {
	int rcode;
	struct net_addr addrs[DNS_MAX_ADDRS];
	int naddrs;
	uint32_t ttl;                   /* smallest TTL along the chain that was used */
	char final[DNS_NAME_MAX];       /* name at the end of the CNAME chain */
	char cnames[DNS_MAX_CNAMES][DNS_NAME_MAX]; /* names passed through, in order */
	int ncnames;
};

/* An upstream response to our query (id, name, qtype must match, else -EINVAL). Follows
 * the CNAME chain in the answer section from `name` (at most DNS_MAX_CNAMES hops; a loop
 * is -ELOOP) and collects the A or AAAA records of the final name. When the chain ends
 * in a name with no records here, naddrs is 0 and `final` says which name to ask next. */
int dns_parse_response(const uint8_t *msg, size_t len, uint16_t id, const char *name,
		       uint16_t qtype, struct dns_answer *ans);

/* Name checks used by the policy: a valid host name (letters, digits, '-', '_', dots,
 * labels 1-63, total <= 253), case-insensitive. */
bool dns_name_valid(const char *name);

#endif
