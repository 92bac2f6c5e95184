/* SPDX-License-Identifier: Apache-2.0 */
/* dns.c - DNS messages for kosa8-net: the guest's queries (hostile), the upstream
 * resolver's responses (untrusted) and the replies kosa8-net writes.
 *
 * Theory of operation: every name goes through dns_name_read(), which follows compression
 * pointers only backwards (each pointer must point before the labels it continues, so a
 * name cannot loop) and at most DNS_MAX_HOPS times, limits labels to 63 bytes and the
 * name to 253 characters, and lower-cases it. A label byte that has no faithful text form
 * (a dot, a space, a control or non-ASCII byte, a backslash) marks the name "odd": a
 * query for such a name is refused, and such an owner never matches anything. */
#include "net/bytes.h"
#include "net/dns.h"

#include <errno.h>
#include <string.h>

#define DNS_HDR 12
#define DNS_MAX_HOPS 32
#define DNS_CLASS_IN 1
#define DNS_UDP_MAX 512                 /* replies stay within the classic UDP size */

#define F_QR 0x8000
#define F_TC 0x0200
#define F_RD 0x0100
#define F_RA 0x0080


static char dns_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* The name at msg[off]: text into out[DNS_NAME_MAX], *end just past it where it starts
 * (not where its pointers led). 0 or -EINVAL. */
static int dns_name_read(const uint8_t *msg, size_t len, size_t off, char *out, size_t *end,
			 bool *odd)
{
	size_t pos = off, lim = off, n = 0;
	bool jumped = false;
	int hops = 0;

	*odd = false;
	out[0] = '\0';
	for (;;) {
		uint8_t c;

		if (pos >= len)
			return -EINVAL;
		c = msg[pos];
		if ((c & 0xc0) == 0xc0) {
			size_t ptr;

			if (len - pos < 2)
				return -EINVAL;
			ptr = (size_t)(c & 0x3f) << 8 | msg[pos + 1];
			if (!jumped)
				*end = pos + 2;
			/* backwards, before every label of this stretch of the name */
			if (ptr >= lim || ++hops > DNS_MAX_HOPS)
				return -EINVAL;
			jumped = true;
			pos = lim = ptr;
			continue;
		}
		if (c & 0xc0)
			return -EINVAL;         /* 0x40, 0x80: extended label types */
		if (c == 0) {
			if (!jumped)
				*end = pos + 1;
			break;
		}
		if (len - pos - 1 < c || n + (n ? 1 : 0) + c > DNS_NAME_MAX - 1)
			return -EINVAL;
		if (n)
			out[n++] = '.';
		for (size_t i = 0; i < c; i++) {
			uint8_t b = msg[pos + 1 + i];

			if (b <= 0x20 || b >= 0x7f || b == '.' || b == '\\') {
				*odd = true;
				b = '?';
			}
			out[n++] = dns_lower((char)b);
		}
		pos += 1 + (size_t)c;
	}
	out[n] = '\0';
	return 0;
}

/* Case-insensitive, one trailing dot on either side ignored. */
static bool dns_name_eq(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	if (la && a[la - 1] == '.')
		la--;
	if (lb && b[lb - 1] == '.')
		lb--;
	if (la != lb)
		return false;
	for (size_t i = 0; i < la; i++)
		if (dns_lower(a[i]) != dns_lower(b[i]))
			return false;
	return true;
}

/* Wire form of a text name into out[cap]; its length, or 0 when it is not a name or does
 * not fit. "" (and ".") is the root. */
static size_t dns_name_write(uint8_t *out, size_t cap, const char *name)
{
	size_t n = strlen(name), o = 0, start = 0;

	if (n && name[n - 1] == '.')
		n--;
	if (n > DNS_NAME_MAX - 1)
		return 0;
	while (start < n) {
		size_t l = 0;

		while (start + l < n && name[start + l] != '.')
			l++;
		if (l == 0 || l > 63 || o + 1 + l > cap)
			return 0;
		out[o++] = (uint8_t)l;
		for (size_t i = 0; i < l; i++)
			out[o++] = (uint8_t)dns_lower(name[start + i]);
		start += l + 1;
	}
	if (o + 1 > cap)
		return 0;
	out[o++] = 0;
	return o;
}

static void dns_hdr_write(uint8_t *out, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an)
{
	net_wr16(out, id);
	net_wr16(out + 2, flags);
	net_wr16(out + 4, qd);
	net_wr16(out + 6, an);
	net_wr16(out + 8, 0);
	net_wr16(out + 10, 0);
}

/* Header + question; returns the length so far or 0. */
static size_t dns_question_write(uint8_t *out, size_t cap, uint16_t id, uint16_t flags,
				 const char *name, uint16_t qtype, uint16_t qclass)
{
	size_t n;

	if (cap < DNS_HDR + 1 + 4)
		return 0;
	n = dns_name_write(out + DNS_HDR, cap - DNS_HDR - 4, name);
	if (!n)
		return 0;
	dns_hdr_write(out, id, flags, 1, 0);
	net_wr16(out + DNS_HDR + n, qtype);
	net_wr16(out + DNS_HDR + n + 2, qclass);
	return DNS_HDR + n + 4;
}

static uint16_t dns_reply_flags(const struct dns_question *q, int rcode)
{
	return (uint16_t)(F_QR | (q->opcode & 0xf) << 11 | (q->rd ? F_RD : 0) | F_RA |
			  (rcode & 0xf));
}

int dns_parse_query(const uint8_t *msg, size_t len, struct dns_question *q, int *opcode)
{
	uint16_t flags;
	size_t end;
	bool odd;

	memset(q, 0, sizeof(*q));
	if (opcode)
		*opcode = 0;
	if (!msg || len < DNS_HDR)
		return -EINVAL;
	flags = net_rd16(msg + 2);
	q->id = net_rd16(msg);
	q->rd = !!(flags & F_RD);
	q->opcode = (flags >> 11) & 0xf;
	if (opcode)
		*opcode = q->opcode;
	/* a query (QR=0), not truncated, asking exactly one question */
	if ((flags & F_QR) || (flags & F_TC) || net_rd16(msg + 4) != 1)
		return -EINVAL;
	if (dns_name_read(msg, len, DNS_HDR, q->name, &end, &odd) || odd || len - end < 4)
		return -EINVAL;
	q->qtype = net_rd16(msg + end);
	q->qclass = net_rd16(msg + end + 2);
	q->end = end + 4;
	return 0;
}

size_t dns_build_error(uint8_t *out, size_t cap, const struct dns_question *q, int rcode)
{
	uint8_t tmp[DNS_NAME_MAX + 2];

	if (!out || !q)
		return 0;
	if (!dns_name_write(tmp, sizeof(tmp), q->name)) {
		/* a question we cannot write back (FORMERR for a bad one): the header only */
		if (cap < DNS_HDR)
			return 0;
		dns_hdr_write(out, q->id, dns_reply_flags(q, rcode), 0, 0);
		return DNS_HDR;
	}
	return dns_question_write(out, cap, q->id, dns_reply_flags(q, rcode), q->name,
				  q->qtype, q->qclass);
}

/* Records that do not fit within DNS_UDP_MAX bytes (or cap) are left out, so a client
 * without EDNS never sees a reply larger than it asked for. */
size_t dns_build_answer(uint8_t *out, size_t cap, const struct dns_question *q,
			const struct net_addr *addrs, int n, uint32_t ttl)
{
	size_t o, lim = cap < DNS_UDP_MAX ? cap : DNS_UDP_MAX;
	int family, alen;
	uint16_t an = 0;

	if (!out || !q)
		return 0;
	o = dns_question_write(out, lim, q->id, dns_reply_flags(q, DNS_R_NOERROR), q->name,
			       q->qtype, q->qclass);
	if (!o)
		return 0;
	family = q->qtype == DNS_T_A ? AF_INET : q->qtype == DNS_T_AAAA ? AF_INET6 : -1;
	alen = family == AF_INET ? 4 : 16;
	for (int i = 0; addrs && i < n && family > 0; i++) {
		uint8_t *r = out + o;

		if (addrs[i].family != family)
			continue;
		if (lim - o < 12 + (size_t)alen)
			break;
		net_wr16(r, 0xc000 | DNS_HDR);      /* the question's name */
		net_wr16(r + 2, q->qtype);
		net_wr16(r + 4, DNS_CLASS_IN);
		net_wr32(r + 6, ttl);
		net_wr16(r + 10, (uint16_t)alen);
		memcpy(r + 12, addrs[i].a, (size_t)alen);
		o += 12 + (size_t)alen;
		an++;
	}
	net_wr16(out + 6, an);
	return o;
}

size_t dns_build_query(uint8_t *out, size_t cap, uint16_t id, const char *name,
		       uint16_t qtype)
{
	if (!out || !name)
		return 0;
	return dns_question_write(out, cap, id, F_RD, name, qtype, DNS_CLASS_IN);
}

struct dns_rr {
	char name[DNS_NAME_MAX];
	bool odd;
	uint16_t type, rclass;
	uint32_t ttl;
	size_t rdoff, rdlen;
};

/* The resource record at *off; advances *off past it. 0 or -EINVAL. */
static int dns_rr_read(const uint8_t *msg, size_t len, size_t *off, struct dns_rr *rr)
{
	size_t end;

	if (dns_name_read(msg, len, *off, rr->name, &end, &rr->odd) || len - end < 10)
		return -EINVAL;
	rr->type = net_rd16(msg + end);
	rr->rclass = net_rd16(msg + end + 2);
	rr->ttl = net_rd32(msg + end + 4);
	rr->rdlen = net_rd16(msg + end + 8);
	rr->rdoff = end + 10;
	if (len - rr->rdoff < rr->rdlen)
		return -EINVAL;
	*off = rr->rdoff + rr->rdlen;
	return 0;
}

/* The target of the CNAME `owner` among the an records at off, into target. 1 found,
 * 0 none, -EINVAL for a malformed target. */
static int dns_cname_find(const uint8_t *msg, size_t len, size_t off, int an,
			  const char *owner, char *target, uint32_t *ttl)
{
	struct dns_rr rr;

	for (int i = 0; i < an; i++) {
		size_t end;
		bool odd;

		if (dns_rr_read(msg, len, &off, &rr))
			return -EINVAL;
		if (rr.type != DNS_T_CNAME || rr.rclass != DNS_CLASS_IN || rr.odd ||
		    strcmp(rr.name, owner))
			continue;
		if (dns_name_read(msg, rr.rdoff + rr.rdlen, rr.rdoff, target, &end, &odd) ||
		    odd || end != rr.rdoff + rr.rdlen)
			return -EINVAL;
		*ttl = rr.ttl;
		return 1;
	}
	return 0;
}

int dns_parse_response(const uint8_t *msg, size_t len, uint16_t id, const char *name,
		       uint16_t qtype, struct dns_answer *ans)
{
	char qname[DNS_NAME_MAX], cur[DNS_NAME_MAX], next[DNS_NAME_MAX];
	uint32_t ttl = UINT32_MAX, t;
	size_t off, an_off;
	uint16_t flags;
	struct dns_rr rr;
	bool odd, used = false;
	int an, rest, found;

	memset(ans, 0, sizeof(*ans));
	if (!msg || !name || len < DNS_HDR || net_rd16(msg) != id)
		return -EINVAL;
	flags = net_rd16(msg + 2);
	if (!(flags & F_QR) || ((flags >> 11) & 0xf) != 0 || net_rd16(msg + 4) != 1)
		return -EINVAL;
	if (dns_name_read(msg, len, DNS_HDR, qname, &off, &odd) || odd || len - off < 4 ||
	    !dns_name_eq(qname, name) || net_rd16(msg + off) != qtype ||
	    net_rd16(msg + off + 2) != DNS_CLASS_IN)
		return -EINVAL;
	off += 4;
	an_off = off;
	an = net_rd16(msg + 6);
	rest = net_rd16(msg + 8) + net_rd16(msg + 10);
	/* every record of every section must be well formed, even those we do not use */
	for (int i = 0; i < an + rest; i++)
		if (dns_rr_read(msg, len, &off, &rr))
			return -EINVAL;
	ans->rcode = flags & 0xf;

	memcpy(cur, qname, sizeof(cur));
	while ((found = dns_cname_find(msg, len, an_off, an, cur, next, &t)) == 1) {
		if (ans->ncnames == DNS_MAX_CNAMES || !strcmp(next, qname))
			return -ELOOP;
		for (int i = 0; i < ans->ncnames; i++)
			if (!strcmp(ans->cnames[i], next))
				return -ELOOP;
		memcpy(ans->cnames[ans->ncnames++], next, sizeof(next));
		memcpy(cur, next, sizeof(cur));
		ttl = t < ttl ? t : ttl;
		used = true;
	}
	if (found < 0)
		return found;

	off = an_off;
	for (int i = 0; i < an; i++) {
		struct net_addr a;
		bool dup = false;

		if (dns_rr_read(msg, len, &off, &rr))
			return -EINVAL;
		if (rr.type != qtype || rr.rclass != DNS_CLASS_IN || rr.odd || strcmp(rr.name, cur))
			continue;
		memset(&a, 0, sizeof(a));
		if (qtype == DNS_T_A && rr.rdlen == 4)
			a.family = AF_INET;
		else if (qtype == DNS_T_AAAA && rr.rdlen == 16)
			a.family = AF_INET6;
		else
			continue;
		memcpy(a.a, msg + rr.rdoff, rr.rdlen);
		ttl = rr.ttl < ttl ? rr.ttl : ttl;
		used = true;
		for (int j = 0; j < ans->naddrs; j++)
			dup |= net_addr_eq(&ans->addrs[j], &a);
		if (!dup && ans->naddrs < DNS_MAX_ADDRS)
			ans->addrs[ans->naddrs++] = a;
	}
	memcpy(ans->final, cur, sizeof(cur));
	ans->ttl = used ? ttl : 0;
	return 0;
}

bool dns_name_valid(const char *name)
{
	size_t n, label = 0;

	if (!name)
		return false;
	n = strlen(name);
	if (n && name[n - 1] == '.')
		n--;
	if (n == 0 || n > DNS_NAME_MAX - 1)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = dns_lower(name[i]);

		if (c == '.') {
			if (label == 0)
				return false;
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return false;
		if (++label > 63)
			return false;
	}
	return label > 0;
}
