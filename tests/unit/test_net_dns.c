/* SPDX-License-Identifier: Apache-2.0 */
/* test_net_dns.c - DNS messages (src/net/dns.c): guest queries (flags, counts, every
 * truncation, names with odd bytes, over-long labels and names), compression pointers
 * that loop or point forwards, the replies kosa8-net builds (flags, question echo, answer
 * records), and upstream responses: id/name/type checks, CNAME chains, loops and over-long
 * chains, the smallest TTL, rcodes, authority and additional sections. */
#include "net/dns.h"
#include "t.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- a message writer ---- */

struct w {
	uint8_t b[4096];
	size_t n;
};

static void w8(struct w *w, unsigned v) { w->b[w->n++] = (uint8_t)v; }
static void w16(struct w *w, unsigned v) { w8(w, v >> 8); w8(w, v & 0xff); }
static void w32(struct w *w, uint32_t v) { w16(w, v >> 16); w16(w, v & 0xffff); }
static void wbytes(struct w *w, const void *p, size_t n) { memcpy(w->b + w->n, p, n); w->n += n; }

/* Text name, uncompressed; "" is the root. */
static void wname(struct w *w, const char *name)
{
	while (*name) {
		const char *dot = strchr(name, '.');
		size_t l = dot ? (size_t)(dot - name) : strlen(name);

		w8(w, (unsigned)l);
		wbytes(w, name, l);
		name += l + (dot ? 1 : 0);
	}
	w8(w, 0);
}

static void whdr(struct w *w, unsigned id, unsigned flags, unsigned qd, unsigned an,
		 unsigned ns, unsigned ar)
{
	w->n = 0;
	w16(w, id); w16(w, flags); w16(w, qd); w16(w, an); w16(w, ns); w16(w, ar);
}

/* A resource record whose owner is written by the caller (name or pointer) already. */
static void wrr_tail(struct w *w, unsigned type, uint32_t ttl, const void *rd, size_t rdlen)
{
	w16(w, type); w16(w, 1); w32(w, ttl); w16(w, (unsigned)rdlen);
	wbytes(w, rd, rdlen);
}

static void wrr_a(struct w *w, const char *owner, const char *ip, uint32_t ttl)
{
	uint8_t a[16];
	int v6 = strchr(ip, ':') != NULL;

	inet_pton(v6 ? AF_INET6 : AF_INET, ip, a);
	wname(w, owner);
	wrr_tail(w, v6 ? DNS_T_AAAA : DNS_T_A, ttl, a, v6 ? 16 : 4);
}

static void wrr_cname(struct w *w, const char *owner, const char *target, uint32_t ttl)
{
	struct w t = { .n = 0 };

	wname(&t, target);
	wname(w, owner);
	wrr_tail(w, DNS_T_CNAME, ttl, t.b, t.n);
}

static void wquestion(struct w *w, const char *name, unsigned qtype)
{
	wname(w, name);
	w16(w, qtype);
	w16(w, 1);
}

static uint8_t *dup_exact(const uint8_t *b, size_t n)
{
	uint8_t *d = malloc(n ? n : 1);
	memcpy(d, b, n);
	return d;
}

static int query_exact(const struct w *w, size_t n, struct dns_question *q, int *op)
{
	uint8_t *d = dup_exact(w->b, n);
	int rc = dns_parse_query(d, n, q, op);
	free(d);
	return rc;
}

static int resp_exact(const struct w *w, size_t n, uint16_t id, const char *name,
		      uint16_t qtype, struct dns_answer *a)
{
	uint8_t *d = dup_exact(w->b, n);
	int rc = dns_parse_response(d, n, id, name, qtype, a);
	free(d);
	return rc;
}

static unsigned g16(const uint8_t *b) { return (unsigned)(b[0] << 8 | b[1]); }

/* ---- queries ---- */

static void test_query(void)
{
	struct w w;
	struct dns_question q;
	int op, bad = 0;

	whdr(&w, 0x1234, 0x0100, 1, 0, 0, 0);
	wquestion(&w, "WWW.Example.ORG", DNS_T_AAAA);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);
	CHECK_EQ_INT(q.id, 0x1234);
	CHECK(q.rd);
	CHECK_STR(q.name, "www.example.org");
	CHECK_EQ_INT(q.qtype, DNS_T_AAAA);
	CHECK_EQ_INT(q.qclass, 1);
	CHECK_EQ_INT(q.end, w.n);
	CHECK_EQ_INT(op, 0);
	for (size_t n = 0; n < w.n; n++)
		bad += query_exact(&w, n, &q, &op) != -EINVAL;
	CHECK_EQ_INT(bad, 0);

	/* an EDNS OPT record after the question is fine */
	whdr(&w, 1, 0x0100, 1, 0, 0, 1);
	wquestion(&w, "example.org", DNS_T_A);
	w8(&w, 0); w16(&w, 41); w16(&w, 1232); w32(&w, 0); w16(&w, 0);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);
	CHECK_EQ_INT(q.end, 12 + 13 + 4);
	CHECK(q.rd);                 /* flags 0x0100: recursion desired */

	/* QR=1, qdcount 0 or 2, TC set */
	whdr(&w, 1, 0x8100, 1, 0, 0, 0);
	wquestion(&w, "example.org", DNS_T_A);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	w.b[2] = 0x01; w.b[5] = 0;
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	w.b[5] = 2;
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	w.b[5] = 1; w.b[2] = 0x03;
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	/* another opcode still parses, with the opcode given back */
	w.b[2] = 0x20;                  /* opcode 4, NOTIFY */
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);
	CHECK_EQ_INT(op, 4);
	CHECK_EQ_INT(q.opcode, 4);
	CHECK(!q.rd);

	/* the root */
	whdr(&w, 1, 0, 1, 0, 0, 0);
	wquestion(&w, "", 2);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);
	CHECK_STR(q.name, "");

	/* a label holding a dot, a NUL, a space: refused */
	whdr(&w, 1, 0, 1, 0, 0, 0);
	w8(&w, 3); wbytes(&w, "a.b", 3); wname(&w, "org"); w16(&w, 1); w16(&w, 1);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	w.b[14] = 0;
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	w.b[14] = ' ';
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	w.b[14] = '_';
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);
	CHECK_STR(q.name, "a_b.org");
}

static void test_name_limits(void)
{
	struct w w;
	struct dns_question q;
	char name[400];
	int op;

	/* 63-byte label fine; 64 is an extended label type, refused */
	memset(name, 'a', 63);
	strcpy(name + 63, ".org");
	whdr(&w, 1, 0, 1, 0, 0, 0);
	wquestion(&w, name, 1);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);
	memset(name, 'a', 64);
	strcpy(name + 64, ".org");
	whdr(&w, 1, 0, 1, 0, 0, 0);
	wquestion(&w, name, 1);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);

	/* 253 characters fine, 254 not: 4 x 63 + dots = 255, so build exactly */
	for (int total = 253; total <= 255; total++) {
		size_t n = 0;

		while (n < (size_t)total) {
			size_t l = (size_t)total - n > 63 ? 62 : (size_t)total - n;

			if (n) {
				name[n++] = '.';
				if (l + n > (size_t)total)
					l = (size_t)total - n;
			}
			memset(name + n, 'b', l);
			n += l;
		}
		name[n] = '\0';
		whdr(&w, 1, 0, 1, 0, 0, 0);
		wquestion(&w, name, 1);
		CHECK_EQ_INT(strlen(name), (size_t)total);
		CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), total == 253 ? 0 : -EINVAL);
	}
}

static void test_pointers(void)
{
	struct w w;
	struct dns_question q;
	struct dns_answer a;
	int op;

	/* a pointer to itself, a forward pointer: refused */
	whdr(&w, 1, 0, 1, 0, 0, 0);
	w16(&w, 0xc00c); w16(&w, 1); w16(&w, 1);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	whdr(&w, 1, 0, 1, 0, 0, 0);
	w16(&w, 0xc00e); w8(&w, 0); w16(&w, 1); w16(&w, 1);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	/* a label then a pointer back into that same label: a loop */
	whdr(&w, 1, 0, 1, 0, 0, 0);
	w8(&w, 1); w8(&w, 'a'); w16(&w, 0xc00c); w16(&w, 1); w16(&w, 1);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);
	/* a pointer cut in half */
	whdr(&w, 1, 0, 1, 0, 0, 0);
	w8(&w, 0xc0);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), -EINVAL);

	/* in a response: answer owner 0xc00c is fine; an owner pointing at itself is not */
	whdr(&w, 7, 0x8180, 1, 1, 0, 0);
	wquestion(&w, "example.org", DNS_T_A);
	w16(&w, 0xc00c);
	wrr_tail(&w, DNS_T_A, 60, "\xcb\x00\x71\x07", 4);
	CHECK_EQ_INT(resp_exact(&w, w.n, 7, "example.org", DNS_T_A, &a), 0);
	CHECK_EQ_INT(a.naddrs, 1);
	CHECK_EQ_INT(a.addrs[0].a[0], 203);
	w.b[12 + 13 + 4] = 0xc0;
	w.b[12 + 13 + 5] = (uint8_t)(12 + 13 + 4);
	CHECK_EQ_INT(resp_exact(&w, w.n, 7, "example.org", DNS_T_A, &a), -EINVAL);

	/* a chain of pointers, each one back to the one before (held in the rdata of an
	 * unknown record type): up to DNS_MAX_HOPS (32) hops are followed, more are not */
	for (int k = 20; k <= 40; k += 20) {
		size_t first;

		whdr(&w, 7, 0x8180, 1, 2, 0, 0);
		wquestion(&w, "example.org", DNS_T_A);
		w16(&w, 0xc00c);
		w16(&w, 99); w16(&w, 1); w32(&w, 60); w16(&w, (unsigned)k * 2);
		first = w.n;
		w16(&w, 0xc00c);
		for (int i = 1; i < k; i++)
			w16(&w, 0xc000 | (unsigned)(first + 2 * (size_t)(i - 1)));
		w16(&w, 0xc000 | (unsigned)(first + 2 * (size_t)(k - 1)));
		wrr_tail(&w, DNS_T_A, 60, "\x01\x02\x03\x04", 4);
		CHECK_EQ_INT(resp_exact(&w, w.n, 7, "example.org", DNS_T_A, &a), k == 20 ? 0 : -EINVAL);
		if (k == 20)
			CHECK_EQ_INT(a.naddrs, 1);
	}
}

/* ---- replies ---- */

static void test_build(void)
{
	struct w w;
	struct dns_question q;
	uint8_t out[1024];
	size_t n;
	int op;
	struct net_addr addrs[3] = { { .family = AF_INET, .a = { 203, 0, 113, 7 } },
				     { .family = AF_INET6, .a = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 } },
				     { .family = AF_INET, .a = { 198, 51, 100, 1 } } };

	whdr(&w, 0xbeef, 0x0100, 1, 0, 0, 0);
	wquestion(&w, "example.org", DNS_T_A);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);

	n = dns_build_error(out, sizeof(out), &q, DNS_R_REFUSED);
	CHECK_EQ_INT(n, w.n);
	CHECK_EQ_INT(g16(out), 0xbeef);
	CHECK_EQ_INT(g16(out + 2), 0x8000 | 0x0100 | 0x0080 | DNS_R_REFUSED);  /* QR RD RA */
	CHECK_EQ_INT(g16(out + 4), 1);
	CHECK_EQ_INT(g16(out + 6), 0);
	CHECK(!memcmp(out + 12, w.b + 12, w.n - 12));   /* the question, echoed */
	CHECK_EQ_INT(dns_build_error(out, w.n - 1, &q, DNS_R_REFUSED), 0);
	{
		/* a question that cannot be written back: FORMERR with the header only */
		struct dns_question bq = { .id = 3, .rd = true };

		strcpy(bq.name, "a..b");
		CHECK_EQ_INT(dns_build_error(out, sizeof(out), &bq, DNS_R_FORMERR), 12);
		CHECK_EQ_INT(g16(out + 2), 0x8181);
		CHECK_EQ_INT(g16(out + 4), 0);
	}

	n = dns_build_answer(out, sizeof(out), &q, addrs, 3, 42);
	CHECK_EQ_INT(n, w.n + 2 * 16);
	CHECK_EQ_INT(g16(out + 2), 0x8180);             /* AA clear */
	CHECK_EQ_INT(g16(out + 6), 2);
	CHECK_EQ_INT(g16(out + w.n), 0xc00c);
	CHECK_EQ_INT(g16(out + w.n + 2), DNS_T_A);
	CHECK_EQ_INT(g16(out + w.n + 4), 1);
	CHECK_EQ_INT(g16(out + w.n + 8), 42);
	CHECK_EQ_INT(g16(out + w.n + 10), 4);
	CHECK(!memcmp(out + w.n + 12, addrs[0].a, 4));
	CHECK(!memcmp(out + w.n + 16 + 12, addrs[2].a, 4));
	/* our own answer parses as a response to our own query */
	{
		struct dns_answer a;
		uint8_t *d = dup_exact(out, n);

		CHECK_EQ_INT(dns_parse_response(d, n, 0xbeef, "example.org.", DNS_T_A, &a), 0);
		CHECK_EQ_INT(a.naddrs, 2);
		CHECK_EQ_INT(a.ttl, 42);
		CHECK_STR(a.final, "example.org");
		free(d);
	}
	/* no room for the second record: it is left out */
	CHECK_EQ_INT(dns_build_answer(out, w.n + 16 + 15, &q, addrs, 3, 42), w.n + 16);
	CHECK_EQ_INT(g16(out + 6), 1);
	/* none: an empty NOERROR */
	n = dns_build_answer(out, sizeof(out), &q, addrs, 0, 42);
	CHECK_EQ_INT(n, w.n);
	CHECK_EQ_INT(g16(out + 2) & 0xf, 0);
	CHECK_EQ_INT(g16(out + 6), 0);

	/* AAAA: only the IPv6 one; no RD in the query, none in the reply */
	whdr(&w, 9, 0, 1, 0, 0, 0);
	wquestion(&w, "Example.org", DNS_T_AAAA);
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);
	n = dns_build_answer(out, sizeof(out), &q, addrs, 3, 5);
	CHECK_EQ_INT(n, w.n + 28);
	CHECK_EQ_INT(g16(out + 2), 0x8080);
	CHECK_EQ_INT(g16(out + 6), 1);
	CHECK(!memcmp(out + w.n + 12, addrs[1].a, 16));

	/* NOTIMP echoes the opcode */
	w.b[2] = 0x28;                  /* opcode 5, UPDATE */
	CHECK_EQ_INT(query_exact(&w, w.n, &q, &op), 0);
	n = dns_build_error(out, sizeof(out), &q, DNS_R_NOTIMP);
	CHECK_EQ_INT(g16(out + 2), 0x8000 | (5 << 11) | 0x80 | DNS_R_NOTIMP);

	/* our query: RD set, parses back */
	n = dns_build_query(out, sizeof(out), 77, "Sub.Example.org.", DNS_T_AAAA);
	CHECK(n > 0);
	{
		struct w c;

		memcpy(c.b, out, n);
		c.n = n;
		CHECK_EQ_INT(query_exact(&c, n, &q, &op), 0);
		CHECK_EQ_INT(q.id, 77);
		CHECK(q.rd);
		CHECK_STR(q.name, "sub.example.org");
		CHECK_EQ_INT(q.qtype, DNS_T_AAAA);
	}
	CHECK_EQ_INT(dns_build_query(out, sizeof(out), 1, "a..b", 1), 0);
	CHECK_EQ_INT(dns_build_query(out, 20, 1, "example.org", 1), 0);
}

/* ---- responses ---- */

static void test_response(void)
{
	struct w w;
	struct dns_answer a;
	int bad = 0;

	/* www.example.org -> cdn.example.net -> edge.cdn.net: 2 A records, an unrelated A, an
	 * A of the wrong length, a AAAA; then SOA in authority and OPT in additional */
	whdr(&w, 0x4242, 0x8180, 1, 7, 1, 1);
	wquestion(&w, "WWW.example.org", DNS_T_A);
	wrr_cname(&w, "www.example.org", "cdn.example.net", 300);
	wrr_cname(&w, "Cdn.Example.Net", "edge.cdn.net", 60);
	wrr_a(&w, "edge.cdn.net", "192.0.2.1", 120);
	wrr_a(&w, "other.net", "192.0.2.99", 1);
	wname(&w, "edge.cdn.net");
	wrr_tail(&w, DNS_T_A, 1, "\x01\x02\x03\x04\x05", 5);
	wrr_a(&w, "edge.cdn.net", "2001:db8::5", 2);
	wrr_a(&w, "EDGE.cdn.net", "192.0.2.2", 30);
	wname(&w, "cdn.net");
	wrr_tail(&w, 6, 900, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 22);
	w8(&w, 0); w16(&w, 41); w16(&w, 1232); w32(&w, 0); w16(&w, 0);
	CHECK_EQ_INT(resp_exact(&w, w.n, 0x4242, "www.example.org", DNS_T_A, &a), 0);
	CHECK_EQ_INT(a.rcode, 0);
	CHECK_EQ_INT(a.ncnames, 2);
	CHECK_STR(a.cnames[0], "cdn.example.net");
	CHECK_STR(a.cnames[1], "edge.cdn.net");
	CHECK_STR(a.final, "edge.cdn.net");
	CHECK_EQ_INT(a.naddrs, 2);
	CHECK_EQ_INT(a.addrs[0].a[3], 1);
	CHECK_EQ_INT(a.addrs[1].a[3], 2);
	CHECK_EQ_INT(a.ttl, 30);
	for (size_t n = 0; n < w.n; n++)
		bad += resp_exact(&w, n, 0x4242, "www.example.org", DNS_T_A, &a) == 0;
	CHECK_EQ_INT(bad, 0);

	/* mismatches */
	CHECK_EQ_INT(resp_exact(&w, w.n, 0x4243, "www.example.org", DNS_T_A, &a), -EINVAL);
	CHECK_EQ_INT(resp_exact(&w, w.n, 0x4242, "example.org", DNS_T_A, &a), -EINVAL);
	CHECK_EQ_INT(resp_exact(&w, w.n, 0x4242, "www.example.org", DNS_T_AAAA, &a), -EINVAL);
	w.b[2] &= 0x7f;                 /* QR clear: a query, not a response */
	CHECK_EQ_INT(resp_exact(&w, w.n, 0x4242, "www.example.org", DNS_T_A, &a), -EINVAL);
	w.b[2] |= 0x80;
	/* a broken additional section: rdlength beyond the message */
	w.b[w.n - 1] = 9;
	CHECK_EQ_INT(resp_exact(&w, w.n, 0x4242, "www.example.org", DNS_T_A, &a), -EINVAL);
	w.b[w.n - 1] = 0;
	/* counts larger than what is there */
	w.b[11] = 2;
	CHECK_EQ_INT(resp_exact(&w, w.n, 0x4242, "www.example.org", DNS_T_A, &a), -EINVAL);
	w.b[11] = 1;

	/* AAAA answer for the same chain */
	whdr(&w, 1, 0x8180, 1, 2, 0, 0);
	wquestion(&w, "a.test", DNS_T_AAAA);
	wrr_a(&w, "a.test", "2001:db8::1", 10);
	wrr_a(&w, "a.test", "2001:db8::1", 20);      /* a duplicate, counted once */
	CHECK_EQ_INT(resp_exact(&w, w.n, 1, "a.test", DNS_T_AAAA, &a), 0);
	CHECK_EQ_INT(a.naddrs, 1);
	CHECK_EQ_INT(a.addrs[0].family, AF_INET6);
	CHECK_EQ_INT(a.ttl, 10);
	CHECK_EQ_INT(a.ncnames, 0);

	/* NXDOMAIN; a chain to a name without records here */
	whdr(&w, 1, 0x8183, 1, 0, 0, 0);
	wquestion(&w, "nope.test", DNS_T_A);
	CHECK_EQ_INT(resp_exact(&w, w.n, 1, "nope.test", DNS_T_A, &a), 0);
	CHECK_EQ_INT(a.rcode, DNS_R_NXDOMAIN);
	CHECK_EQ_INT(a.naddrs, 0);
	CHECK_EQ_INT(a.ttl, 0);
	CHECK_STR(a.final, "nope.test");
	whdr(&w, 1, 0x8180, 1, 1, 0, 0);
	wquestion(&w, "a.test", DNS_T_A);
	wrr_cname(&w, "a.test", "b.elsewhere", 50);
	CHECK_EQ_INT(resp_exact(&w, w.n, 1, "a.test", DNS_T_A, &a), 0);
	CHECK_EQ_INT(a.naddrs, 0);
	CHECK_EQ_INT(a.ncnames, 1);
	CHECK_STR(a.final, "b.elsewhere");
	CHECK_EQ_INT(a.ttl, 50);

	/* a CNAME target compressed against the question */
	whdr(&w, 1, 0x8180, 1, 2, 0, 0);
	wquestion(&w, "x.a.test", DNS_T_A);
	w16(&w, 0xc00c);
	w16(&w, DNS_T_CNAME); w16(&w, 1); w32(&w, 9); w16(&w, 4);
	w8(&w, 1); w8(&w, 'y'); w16(&w, 0xc00e);      /* y.a.test */
	wrr_a(&w, "y.a.test", "192.0.2.3", 99);
	CHECK_EQ_INT(resp_exact(&w, w.n, 1, "x.a.test", DNS_T_A, &a), 0);
	CHECK_STR(a.final, "y.a.test");
	CHECK_EQ_INT(a.naddrs, 1);
	CHECK_EQ_INT(a.ttl, 9);
	/* a target running past its rdata */
	w.b[12 + 10 + 4 + 2 + 8 + 1] = 3;
	CHECK_EQ_INT(resp_exact(&w, w.n, 1, "x.a.test", DNS_T_A, &a), -EINVAL);
}

static void test_cname_loops(void)
{
	struct w w;
	struct dns_answer a;
	char from[32], to[32];

	/* a -> a */
	whdr(&w, 1, 0x8180, 1, 1, 0, 0);
	wquestion(&w, "a.test", DNS_T_A);
	wrr_cname(&w, "a.test", "a.test", 5);
	CHECK_EQ_INT(resp_exact(&w, w.n, 1, "a.test", DNS_T_A, &a), -ELOOP);
	/* a -> b -> c -> b */
	whdr(&w, 1, 0x8180, 1, 3, 0, 0);
	wquestion(&w, "a.test", DNS_T_A);
	wrr_cname(&w, "a.test", "b.test", 5);
	wrr_cname(&w, "b.test", "c.test", 5);
	wrr_cname(&w, "c.test", "b.test", 5);
	CHECK_EQ_INT(resp_exact(&w, w.n, 1, "a.test", DNS_T_A, &a), -ELOOP);
	/* a -> b -> a */
	whdr(&w, 1, 0x8180, 1, 2, 0, 0);
	wquestion(&w, "a.test", DNS_T_A);
	wrr_cname(&w, "a.test", "b.test", 5);
	wrr_cname(&w, "b.test", "A.test", 5);
	CHECK_EQ_INT(resp_exact(&w, w.n, 1, "a.test", DNS_T_A, &a), -ELOOP);

	/* DNS_MAX_CNAMES hops are fine, one more is not */
	for (int hops = DNS_MAX_CNAMES; hops <= DNS_MAX_CNAMES + 1; hops++) {
		whdr(&w, 1, 0x8180, 1, (unsigned)hops + 1, 0, 0);
		wquestion(&w, "h0.test", DNS_T_A);
		for (int i = 0; i < hops; i++) {
			snprintf(from, sizeof(from), "h%d.test", i);
			snprintf(to, sizeof(to), "h%d.test", i + 1);
			wrr_cname(&w, from, to, 100 - (uint32_t)i);
		}
		wrr_a(&w, to, "192.0.2.8", 1000);
		if (hops == DNS_MAX_CNAMES) {
			CHECK_EQ_INT(resp_exact(&w, w.n, 1, "h0.test", DNS_T_A, &a), 0);
			CHECK_EQ_INT(a.ncnames, DNS_MAX_CNAMES);
			CHECK_EQ_INT(a.naddrs, 1);
			CHECK_EQ_INT(a.ttl, 100 - DNS_MAX_CNAMES + 1);
			CHECK_STR(a.final, "h8.test");
		} else {
			CHECK_EQ_INT(resp_exact(&w, w.n, 1, "h0.test", DNS_T_A, &a), -ELOOP);
		}
	}
}

static void test_name_valid(void)
{
	char long_label[80];

	CHECK(dns_name_valid("example.org"));
	CHECK(dns_name_valid("Example.ORG."));
	CHECK(dns_name_valid("_dmarc.a-b.example"));
	CHECK(dns_name_valid("localhost"));
	CHECK(!dns_name_valid(""));
	CHECK(!dns_name_valid("."));
	CHECK(!dns_name_valid(".example.org"));
	CHECK(!dns_name_valid("a..b"));
	CHECK(!dns_name_valid("a.b.."));
	CHECK(!dns_name_valid("*.example.org"));
	CHECK(!dns_name_valid("exa mple.org"));
	CHECK(!dns_name_valid("ex\\ample.org"));
	CHECK(!dns_name_valid("exämple.org"));
	CHECK(!dns_name_valid(NULL));
	memset(long_label, 'x', 64);
	long_label[64] = '\0';
	CHECK(!dns_name_valid(long_label));
	long_label[63] = '\0';
	CHECK(dns_name_valid(long_label));
}

int main(void)
{
	test_query();
	test_name_limits();
	test_pointers();
	test_build();
	test_response();
	test_cname_loops();
	test_name_valid();
	return T_DONE();
}
