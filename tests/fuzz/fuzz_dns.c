/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dns.c - libFuzzer target: arbitrary bytes as a DNS message, both as a guest's query
 * (dns_parse_query, then every reply built from it, parsed back as a response) and as an
 * upstream response (dns_parse_response, for the question the message itself carries and
 * for a fixed one).
 *
 * Any abort() below is a broken invariant: counts beyond their arrays, a name that is not
 * lower case or too long, an answer we built that does not parse back. */
#include "net/dns.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);

	if (n >= cap || n > 253)
		abort();
	for (size_t i = 0; i < n; i++)
		if (s[i] >= 'A' && s[i] <= 'Z')
			abort();
}

static void check_answer(const struct dns_answer *a)
{
	if (a->naddrs < 0 || a->naddrs > DNS_MAX_ADDRS || a->ncnames < 0 ||
	    a->ncnames > DNS_MAX_CNAMES || a->rcode < 0 || a->rcode > 15)
		abort();
	check_name(a->final, sizeof(a->final));
	for (int i = 0; i < a->ncnames; i++)
		check_name(a->cnames[i], sizeof(a->cnames[i]));
}

static void fuzz_query(const uint8_t *m, size_t n)
{
	static uint8_t out[4096];
	static const struct net_addr addrs[3] = {
		{ .family = AF_INET, .a = { 203, 0, 113, 7 } },
		{ .family = AF_INET6, .a = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 } },
		{ .family = AF_INET, .a = { 198, 51, 100, 1 } },
	};
	struct dns_question q;
	struct dns_answer a;
	size_t len;
	int op;

	if (dns_parse_query(m, n, &q, &op) != 0)
		return;
	check_name(q.name, sizeof(q.name));
	if (q.end > n || op != q.opcode)
		abort();
	for (int rc = 0; rc <= 5; rc++) {
		len = dns_build_error(out, sizeof(out), &q, rc);
		if (len < 12 || len > sizeof(out))
			abort();
	}
	len = dns_build_answer(out, sizeof(out), &q, addrs, 3, 60);
	if (len && q.opcode == 0 && q.qclass == 1 &&
	    (q.qtype == DNS_T_A || q.qtype == DNS_T_AAAA)) {
		int rc = dns_parse_response(out, len, q.id, q.name, q.qtype, &a);

		if (rc != 0 || a.naddrs != (q.qtype == DNS_T_A ? 2 : 1) || a.ttl != 60)
			abort();
	}
	len = dns_build_query(out, sizeof(out), q.id, q.name, q.qtype);
	if (q.name[0] && len) {
		struct dns_question q2;

		if (dns_parse_query(out, len, &q2, &op) || strcmp(q2.name, q.name) ||
		    q2.qtype != q.qtype || !q2.rd)
			abort();
	}
}

static void fuzz_response(const uint8_t *m, size_t n)
{
	struct dns_question q;
	struct dns_answer a;
	uint8_t *copy;
	int op, rc;

	rc = dns_parse_response(m, n, n >= 2 ? (uint16_t)(m[0] << 8 | m[1]) : 0, "example.org",
				DNS_T_A, &a);
	if (rc == 0)
		check_answer(&a);
	else if (rc != -EINVAL && rc != -ELOOP)
		abort();
	/* the question the message carries: clear QR and read it as a query */
	if (n < 12)
		return;
	copy = malloc(n);
	memcpy(copy, m, n);
	copy[2] &= 0x7d;                /* QR and TC off */
	if (dns_parse_query(copy, n, &q, &op) == 0) {
		rc = dns_parse_response(m, n, q.id, q.name, q.qtype, &a);
		if (rc == 0)
			check_answer(&a);
		else if (rc != -EINVAL && rc != -ELOOP)
			abort();
	}
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *m;

	if (size > 65535)
		return 0;
	m = malloc(size ? size : 1);    /* exact size: a read past the end is caught */
	memcpy(m, data, size);
	fuzz_query(m, size);
	fuzz_response(m, size);
	free(m);
	return 0;
}
