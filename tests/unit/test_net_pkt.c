/* SPDX-License-Identifier: Apache-2.0 */
/* test_net_pkt.c - frame parsing and building (src/net/pkt.c, addr.c): every header kind,
 * malformed and truncated frames (each prefix of each valid frame, in an exact-size
 * buffer so a read past the end is caught under ASan), fragments, VLAN, IPv6 extension
 * headers, and each builder's output parsed back with its checksums verified by a
 * separate implementation here. */
#include "net/addr.h"
#include "net/pkt.h"
#include "t.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- an independent checksum and frame construction ---- */

static uint16_t ref_sum(const uint8_t *b, size_t n)
{
	uint32_t s = 0;

	for (size_t i = 0; i < n; i++)
		s += (i & 1) ? b[i] : (uint32_t)b[i] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

static void put16(uint8_t *b, unsigned v) { b[0] = (uint8_t)(v >> 8); b[1] = (uint8_t)v; }
static void put32(uint8_t *b, uint32_t v) { put16(b, v >> 16); put16(b + 2, v & 0xffff); }
static unsigned get16(const uint8_t *b) { return (unsigned)(b[0] << 8 | b[1]); }

static const uint8_t mac_guest[6] = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 };
static const uint8_t mac_gw[6] = { 0x52, 0x55, 0x0a, 0, 2, 2 };
static const uint8_t ip4_guest[4] = { 10, 0, 2, 15 }, ip4_remote[4] = { 203, 0, 113, 7 };
static const uint8_t ip6_guest[16] = { 0xfe, 0xc0, [15] = 0x15 };
static const uint8_t ip6_remote[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 7 };

/* Sum of the pseudo-header and the L4 bytes must be 0xffff (checksum correct). */
static int l4_sum_ok(int v6, const uint8_t *ip, int proto, const uint8_t *l4, size_t l4len)
{
	uint8_t *buf = malloc(40 + l4len);
	size_t n = 0;
	uint16_t s;

	if (!v6) {
		memcpy(buf, ip + 12, 8);
		buf[8] = 0;
		buf[9] = (uint8_t)proto;
		put16(buf + 10, (unsigned)l4len);
		n = 12;
	} else {
		memcpy(buf, ip + 8, 32);
		put32(buf + 32, (uint32_t)l4len);
		buf[36] = buf[37] = buf[38] = 0;
		buf[39] = (uint8_t)proto;
		n = 40;
	}
	memcpy(buf + n, l4, l4len);
	s = ref_sum(buf, n + l4len);
	free(buf);
	return s == 0xffff;
}

/* Checks a frame kosa8-net built: IPv4 header checksum, the L4 checksum (ICMPv4 without a
 * pseudo-header), and the lengths, all from the raw bytes. */
static int frame_sums_ok(const uint8_t *f, size_t len)
{
	size_t l3 = get16(f + 12) == 0x8100 ? 18 : 14;
	unsigned et = get16(f + l3 - 2);
	const uint8_t *ip = f + l3;

	if (et == 0x0800) {
		size_t ihl = (size_t)(ip[0] & 15) * 4, tot = get16(ip + 2);
		int proto = ip[9];

		if (ref_sum(ip, ihl) != 0xffff || l3 + tot != len)
			return 0;
		if (proto == IPPROTO_ICMP)
			return ref_sum(ip + ihl, tot - ihl) == 0xffff;
		if (proto == IPPROTO_UDP && get16(ip + ihl + 6) == 0)
			return 0;       /* we always send UDP checksums */
		return l4_sum_ok(0, ip, proto, ip + ihl, tot - ihl);
	}
	if (et == 0x86dd) {
		size_t pl = get16(ip + 4);

		if (l3 + 40 + pl != len)
			return 0;
		return l4_sum_ok(1, ip, ip[6], ip + 40, pl);
	}
	return 0;
}

/* Ethernet + IP header around l4[l4len]; returns the frame length. The L4 checksum at
 * csum_off inside l4 (or none when < 0) is computed here. ext/extlen: IPv6 extension
 * headers (first_nh: the next-header value for the fixed header). */
struct mk {
	int v6;
	int vlan;
	int proto;
	const uint8_t *ext;
	size_t extlen;
	int first_nh;
	unsigned frag4;         /* IPv4 flags+offset field */
	size_t pad;             /* Ethernet padding after the IP packet */
};

static size_t mk_frame(uint8_t *f, const struct mk *m, uint8_t *l4, size_t l4len, int csum_off)
{
	size_t l3 = m->vlan ? 18 : 14, iplen;
	uint8_t *ip = f + l3;

	memcpy(f, mac_gw, 6);
	memcpy(f + 6, mac_guest, 6);
	if (m->vlan) {
		put16(f + 12, 0x8100);
		put16(f + 14, 42);
	}
	put16(f + l3 - 2, m->v6 ? 0x86dd : 0x0800);
	if (csum_off >= 0) {
		put16(l4 + csum_off, 0);
		/* computed over the pseudo-header with the final IP addresses */
	}
	if (!m->v6) {
		memset(ip, 0, 20);
		ip[0] = 0x45;
		iplen = 20 + l4len;
		put16(ip + 2, (unsigned)iplen);
		put16(ip + 6, m->frag4);
		ip[8] = 64;
		ip[9] = (uint8_t)m->proto;
		memcpy(ip + 12, ip4_guest, 4);
		memcpy(ip + 16, ip4_remote, 4);
		put16(ip + 10, (uint16_t)~ref_sum(ip, 20));
		memcpy(ip + 20, l4, l4len);
		if (csum_off >= 0) {
			uint8_t *c = ip + 20 + csum_off;
			uint16_t s;
			if (m->proto == IPPROTO_ICMP) {
				s = (uint16_t)~ref_sum(ip + 20, l4len);
			} else {
				uint8_t *tmp = malloc(12 + l4len);
				memcpy(tmp, ip + 12, 8);
				tmp[8] = 0; tmp[9] = (uint8_t)m->proto;
				put16(tmp + 10, (unsigned)l4len);
				memcpy(tmp + 12, ip + 20, l4len);
				s = (uint16_t)~ref_sum(tmp, 12 + l4len);
				free(tmp);
			}
			put16(c, s);
		}
	} else {
		memset(ip, 0, 40);
		ip[0] = 0x60;
		iplen = 40 + m->extlen + l4len;
		put16(ip + 4, (unsigned)(m->extlen + l4len));
		ip[6] = (uint8_t)(m->extlen ? m->first_nh : m->proto);
		ip[7] = 64;
		memcpy(ip + 8, ip6_guest, 16);
		memcpy(ip + 24, ip6_remote, 16);
		if (m->extlen)
			memcpy(ip + 40, m->ext, m->extlen);
		memcpy(ip + 40 + m->extlen, l4, l4len);
		if (csum_off >= 0) {
			uint8_t *tmp = malloc(40 + l4len);
			memcpy(tmp, ip + 8, 32);
			put32(tmp + 32, (uint32_t)l4len);
			tmp[36] = tmp[37] = tmp[38] = 0; tmp[39] = (uint8_t)m->proto;
			memcpy(tmp + 40, ip + 40 + m->extlen, l4len);
			put16(ip + 40 + m->extlen + csum_off, (uint16_t)~ref_sum(tmp, 40 + l4len));
			free(tmp);
		}
	}
	memset(ip + iplen, 0, m->pad);
	return l3 + iplen + m->pad;
}

static size_t mk_tcp(uint8_t *t, unsigned sport, unsigned dport, uint32_t seq, uint32_t ack,
		     uint8_t flags, size_t optlen, const char *data)
{
	size_t dl = data ? strlen(data) : 0, hl = 20 + optlen;

	memset(t, 0, hl);
	put16(t, sport);
	put16(t + 2, dport);
	put32(t + 4, seq);
	put32(t + 8, ack);
	t[12] = (uint8_t)((hl / 4) << 4);
	t[13] = flags;
	put16(t + 14, 65535);
	for (size_t i = 20; i < hl; i++)
		t[i] = 1;       /* NOPs */
	memcpy(t + hl, data ? data : "", dl);
	return hl + dl;
}

static size_t mk_udp(uint8_t *u, unsigned sport, unsigned dport, const uint8_t *data, size_t dl)
{
	put16(u, sport);
	put16(u + 2, dport);
	put16(u + 4, (unsigned)(8 + dl));
	put16(u + 6, 0);
	memmove(u + 8, data, dl);
	return 8 + dl;
}

/* Parses a copy of f[len] held in a buffer of exactly len bytes. */
static int parse_exact(struct pkt *p, const uint8_t *f, size_t len, uint8_t **hold)
{
	*hold = malloc(len ? len : 1);
	memcpy(*hold, f, len);
	return pkt_parse(p, *hold, len);
}

/* Every offset a parsed frame reports lies inside it. */
static int offsets_ok(const struct pkt *p)
{
	if (p->l3_off > p->len)
		return 0;
	if (p->l4_off && p->l4_off > p->len)
		return 0;
	if (p->payload_off > p->len || p->payload_len > p->len - p->payload_off)
		return 0;
	return 1;
}

/* Every prefix of f parses (0) or fails with -EINVAL, never reads outside it, and every
 * builder copes with what parsed. Returns the number of prefixes that failed to behave. */
static int truncations_ok(const uint8_t *f, size_t len)
{
	static uint8_t out[2048];
	int bad = 0;

	for (size_t n = 0; n <= len; n++) {
		struct pkt p;
		uint8_t *hold;
		int rc = parse_exact(&p, f, n, &hold);

		if (rc != 0 && rc != -EINVAL)
			bad++;
		if (rc == 0) {
			size_t r;

			bad += !offsets_ok(&p);
			if ((r = pkt_build_tcp_rst(out, sizeof(out), &p)))
				bad += !frame_sums_ok(out, r);
			if ((r = pkt_build_tcp_rst_outbound(out, sizeof(out), &p)))
				bad += !frame_sums_ok(out, r);
			if ((r = pkt_build_unreach(out, sizeof(out), &p, 13, 1)))
				bad += !frame_sums_ok(out, r);
			if ((r = pkt_build_udp_reply(out, sizeof(out), &p, (const uint8_t *)"x", 1)))
				bad += !frame_sums_ok(out, r);
		}
		free(hold);
	}
	return bad;
}

/* ---- tests ---- */

static void test_get_and_csum(void)
{
	uint8_t f[20] = { 0 };
	struct pkt p = { .frame = f, .len = sizeof(f) };
	static const uint8_t rfc1071[8] = { 0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7 };

	CHECK(pkt_get(&p, 0, 20) == f);
	CHECK(pkt_get(&p, 20, 0) == f + 20);
	CHECK(pkt_get(&p, 19, 2) == NULL);
	CHECK(pkt_get(&p, 21, 0) == NULL);
	CHECK(pkt_get(&p, 1, SIZE_MAX) == NULL);
	CHECK(pkt_get(&p, SIZE_MAX, 1) == NULL);
	/* RFC 1071's example: the sum is 0xddf2, so the checksum is 0x220d */
	CHECK_EQ_INT(pkt_csum_add(0, rfc1071, 8), 0xddf2);
	CHECK_EQ_INT(pkt_csum_fold(pkt_csum_add(0, rfc1071, 8)), 0x220d);
	/* split in even pieces gives the same sum; an odd tail is zero-padded */
	CHECK_EQ_INT(pkt_csum_add(pkt_csum_add(0, rfc1071, 4), rfc1071 + 4, 4), 0xddf2);
	CHECK_EQ_INT(pkt_csum_add(0, rfc1071, 7), ref_sum(rfc1071, 7));
	CHECK_EQ_INT(pkt_csum_fold(0xffff), 0);
	CHECK(pkt_parse(&p, NULL, 0) == -EINVAL);
}

static void test_tcp4(void)
{
	uint8_t f[256], l4[128], *h;
	struct pkt p;
	struct mk m = { .proto = IPPROTO_TCP };
	size_t n = mk_frame(f, &m, l4, mk_tcp(l4, 40000, 443, 1000, 0, 0x02, 0, NULL), 16);

	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.l3, PKT_IP4);
	CHECK_EQ_INT(p.ethertype, 0x0800);
	CHECK_EQ_INT(p.l3_off, 14);
	CHECK_EQ_INT(p.l4_off, 34);
	CHECK_EQ_INT(p.proto, IPPROTO_TCP);
	CHECK_EQ_INT(p.sport, 40000);
	CHECK_EQ_INT(p.dport, 443);
	CHECK_EQ_INT(p.tcp_seq, 1000);
	CHECK_EQ_INT(p.tcp_flags, 0x02);
	CHECK_EQ_INT(p.payload_len, 0);
	CHECK_EQ_INT(p.ttl, 64);
	CHECK(!p.fragment);
	CHECK(!memcmp(p.src.a, ip4_guest, 4) && p.src.family == AF_INET);
	CHECK(!memcmp(p.dst.a, ip4_remote, 4));
	CHECK(!memcmp(p.src_mac, mac_guest, 6) && !memcmp(p.dst_mac, mac_gw, 6));
	CHECK(frame_sums_ok(f, n));
	CHECK_EQ_INT(truncations_ok(f, n), 0);
	free(h);

	/* options and data; Ethernet padding after the IP packet is not payload */
	m.pad = 6;
	n = mk_frame(f, &m, l4, mk_tcp(l4, 40000, 443, 7, 9, 0x18, 12, "hello"), 16);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.payload_off, 14 + 20 + 32);
	CHECK_EQ_INT(p.payload_len, 5);
	CHECK(!memcmp(f + p.payload_off, "hello", 5));
	CHECK_EQ_INT(p.tcp_ack, 9);
	CHECK_EQ_INT(truncations_ok(f, n), 0);
	free(h);
	m.pad = 0;

	/* malformed: data offset below 5, beyond the segment */
	n = mk_frame(f, &m, l4, mk_tcp(l4, 1, 2, 0, 0, 0x10, 0, "ab"), 16);
	f[14 + 20 + 12] = 4 << 4;
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL);
	free(h);
	f[14 + 20 + 12] = 6 << 4;       /* 24 bytes, but only 22 there */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL);
	free(h);
	CHECK_EQ_INT(truncations_ok(f, n), 0);
}

static void test_ip4_malformed(void)
{
	uint8_t f[256], l4[64], *h;
	struct pkt p;
	struct mk m = { .proto = IPPROTO_TCP };
	size_t n = mk_frame(f, &m, l4, mk_tcp(l4, 1, 2, 0, 0, 0x02, 0, NULL), 16);
	uint8_t *ip = f + 14;

	ip[0] = 0x55;                   /* version 5 */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	ip[0] = 0x44;                   /* IHL 4 */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	ip[0] = 0x4f;                   /* IHL 15: 60 bytes, the packet has 40 */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	ip[0] = 0x45;
	put16(ip + 2, 41);              /* total length beyond the frame */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	put16(ip + 2, 19);              /* below the header */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	put16(ip + 2, 30);              /* TCP header cut by the IP length */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	put16(ip + 2, 40);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0); free(h);
	/* IHL 6 with an option: TCP moves 4 bytes on */
	{
		uint8_t g[256];
		memcpy(g, f, 34);
		g[14] = 0x46;
		memset(g + 34, 1, 4);
		memcpy(g + 38, f + 34, 20);
		put16(g + 16, 44);
		CHECK_EQ_INT(parse_exact(&p, g, 58, &h), 0);
		CHECK_EQ_INT(p.l4_off, 38);
		CHECK_EQ_INT(p.sport, 1);
		free(h);
	}
	/* a protocol we do not know: parsed, no L4 */
	ip[9] = 47;
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.proto, 47);
	CHECK_EQ_INT(p.l4_off, 0);
	CHECK_EQ_INT(p.sport, 0);
	free(h);
	/* too short for Ethernet; frames beyond PKT_MAX_FRAME */
	CHECK_EQ_INT(parse_exact(&p, f, 13, &h), -EINVAL); free(h);
	{
		uint8_t *big = calloc(1, PKT_MAX_FRAME + 1);
		CHECK_EQ_INT(pkt_parse(&p, big, PKT_MAX_FRAME + 1), -EINVAL);
		CHECK_EQ_INT(pkt_parse(&p, big, PKT_MAX_FRAME), 0);     /* type 0: other */
		CHECK_EQ_INT(p.l3, PKT_OTHER);
		free(big);
	}
}

static void test_udp(void)
{
	uint8_t f[256], l4[128], *h;
	struct pkt p;
	struct mk m = { .proto = IPPROTO_UDP };
	size_t n = mk_frame(f, &m, l4, mk_udp(l4, 5353, 53, (const uint8_t *)"query", 5), 6);

	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.proto, IPPROTO_UDP);
	CHECK_EQ_INT(p.sport, 5353);
	CHECK_EQ_INT(p.dport, 53);
	CHECK_EQ_INT(p.payload_len, 5);
	CHECK(!memcmp(f + p.payload_off, "query", 5));
	CHECK(frame_sums_ok(f, n));
	free(h);
	CHECK_EQ_INT(truncations_ok(f, n), 0);

	put16(f + 34 + 4, 12);          /* UDP shorter than the IP payload: bounded by it */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.payload_len, 4);
	free(h);
	put16(f + 34 + 4, 14);          /* longer than the IP payload */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	put16(f + 34 + 4, 7);           /* below the header */
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);

	m.v6 = 1;
	n = mk_frame(f, &m, l4, mk_udp(l4, 5353, 53, (const uint8_t *)"q6", 2), 6);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.l3, PKT_IP6);
	CHECK_EQ_INT(p.l4_off, 54);
	CHECK_EQ_INT(p.payload_len, 2);
	CHECK(frame_sums_ok(f, n));
	free(h);
	CHECK_EQ_INT(truncations_ok(f, n), 0);
}

static void test_icmp(void)
{
	uint8_t f[256], l4[64] = { 8, 0, 0, 0, 0, 1, 0, 2, 'p', 'i', 'n', 'g' }, *h;
	struct pkt p;
	struct mk m = { .proto = IPPROTO_ICMP };
	size_t n = mk_frame(f, &m, l4, 12, 2);

	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.proto, IPPROTO_ICMP);
	CHECK_EQ_INT(p.icmp_type, 8);
	CHECK_EQ_INT(p.payload_len, 4);
	CHECK_EQ_INT(p.sport, 0);
	CHECK(frame_sums_ok(f, n));
	free(h);
	CHECK_EQ_INT(truncations_ok(f, n), 0);
	/* 4 bytes of ICMP: too short */
	n = mk_frame(f, &m, l4, 4, -1);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);

	m.v6 = 1;
	m.proto = IPPROTO_ICMPV6;
	l4[0] = 128;
	n = mk_frame(f, &m, l4, 12, 2);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.proto, IPPROTO_ICMPV6);
	CHECK_EQ_INT(p.icmp_type, 128);
	CHECK(frame_sums_ok(f, n));
	free(h);
	CHECK_EQ_INT(truncations_ok(f, n), 0);
}

static void test_arp_vlan_other(void)
{
	uint8_t f[64] = { 0 }, l4[64], *h;
	struct pkt p;
	size_t n;

	memset(f, 0xff, 6);
	memcpy(f + 6, mac_guest, 6);
	put16(f + 12, 0x0806);
	put16(f + 14, 1);
	put16(f + 16, 0x0800);
	f[18] = 6; f[19] = 4;
	put16(f + 20, 1);
	memcpy(f + 22, mac_guest, 6);
	memcpy(f + 28, ip4_guest, 4);
	f[38] = 10; f[39] = 0; f[40] = 2; f[41] = 2;
	CHECK_EQ_INT(parse_exact(&p, f, 42, &h), 0);
	CHECK_EQ_INT(p.l3, PKT_ARP);
	CHECK_EQ_INT(p.proto, -1);
	CHECK(!memcmp(p.src.a, ip4_guest, 4));
	CHECK_EQ_INT(p.dst.a[3], 2);
	free(h);
	CHECK_EQ_INT(truncations_ok(f, 60), 0);
	CHECK_EQ_INT(parse_exact(&p, f, 41, &h), -EINVAL); free(h);
	f[18] = 8;                      /* not Ethernet/IPv4 ARP: well formed, not ours */
	CHECK_EQ_INT(parse_exact(&p, f, 42, &h), 0);
	CHECK_EQ_INT(p.l3, PKT_OTHER);
	free(h);

	put16(f + 12, 0x88cc);          /* LLDP */
	CHECK_EQ_INT(parse_exact(&p, f, 60, &h), 0);
	CHECK_EQ_INT(p.l3, PKT_OTHER);
	CHECK_EQ_INT(p.ethertype, 0x88cc);
	free(h);

	/* one 802.1Q tag */
	{
		uint8_t g[256];
		struct mk m = { .vlan = 1, .proto = IPPROTO_TCP };

		n = mk_frame(g, &m, l4, mk_tcp(l4, 1234, 80, 5, 0, 0x02, 0, NULL), 16);
		CHECK_EQ_INT(parse_exact(&p, g, n, &h), 0);
		CHECK_EQ_INT(p.l3_off, 18);
		CHECK_EQ_INT(p.ethertype, 0x0800);
		CHECK_EQ_INT(p.dport, 80);
		free(h);
		CHECK_EQ_INT(truncations_ok(g, n), 0);
		CHECK_EQ_INT(parse_exact(&p, g, 17, &h), -EINVAL); free(h);
		/* a second tag is not followed */
		put16(g + 16, 0x8100);
		CHECK_EQ_INT(parse_exact(&p, g, n, &h), 0);
		CHECK_EQ_INT(p.l3, PKT_OTHER);
		free(h);
	}
}

static void test_fragments(void)
{
	uint8_t f[256], l4[64], *h;
	struct pkt p;
	struct mk m = { .proto = IPPROTO_UDP, .frag4 = 0x2000 };   /* MF, offset 0 */
	size_t ul = mk_udp(l4, 1000, 53, (const uint8_t *)"0123456789abcdef", 16), n;

	put16(l4 + 4, 8 + 16 + 100);    /* the whole datagram is longer than this piece */
	n = mk_frame(f, &m, l4, ul, -1);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK(p.fragment && p.first_fragment);
	CHECK_EQ_INT(p.dport, 53);
	CHECK_EQ_INT(p.payload_len, 16);
	free(h);
	CHECK_EQ_INT(truncations_ok(f, n), 0);

	m.frag4 = 0x0003;               /* offset 24 bytes, last piece */
	n = mk_frame(f, &m, l4, ul, -1);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK(p.fragment && !p.first_fragment);
	CHECK_EQ_INT(p.l4_off, 0);
	CHECK_EQ_INT(p.sport, 0);
	CHECK_EQ_INT(p.dport, 0);
	CHECK_EQ_INT(p.proto, IPPROTO_UDP);
	free(h);
	CHECK_EQ_INT(truncations_ok(f, n), 0);

	/* a first fragment too short for the transport header: dropped */
	m.frag4 = 0x2000;
	n = mk_frame(f, &m, l4, 4, -1);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);

	/* DF alone is not a fragment */
	m.frag4 = 0x4000;
	n = mk_frame(f, &m, l4, mk_udp(l4, 1, 2, (const uint8_t *)"", 0), -1);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK(!p.fragment);
	free(h);

	/* IPv6 fragment header: first piece, then a later one */
	{
		uint8_t ext[8] = { IPPROTO_UDP, 0, 0, 1, 0, 0, 0, 7 };  /* offset 0, M */
		struct mk m6 = { .v6 = 1, .proto = IPPROTO_UDP, .ext = ext, .extlen = 8,
				 .first_nh = 44 };

		ul = mk_udp(l4, 1000, 53, (const uint8_t *)"abcdefgh", 8);
		n = mk_frame(f, &m6, l4, ul, -1);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
		CHECK(p.fragment && p.first_fragment);
		CHECK_EQ_INT(p.dport, 53);
		CHECK_EQ_INT(p.l4_off, 14 + 48);
		free(h);
		CHECK_EQ_INT(truncations_ok(f, n), 0);
		put16(ext + 2, (16 << 3));      /* offset 128 bytes, last */
		n = mk_frame(f, &m6, l4, ul, -1);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
		CHECK(p.fragment && !p.first_fragment);
		CHECK_EQ_INT(p.l4_off, 0);
		CHECK_EQ_INT(p.proto, IPPROTO_UDP);
		free(h);
	}
}

static void test_ip6_ext(void)
{
	uint8_t f[512], l4[64], ext[128], *h;
	struct pkt p;
	struct mk m = { .v6 = 1, .proto = IPPROTO_TCP, .ext = ext, .first_nh = 0 };
	size_t tl = mk_tcp(l4, 5555, 443, 1, 0, 0x02, 0, NULL), n;

	/* hop-by-hop (8) -> destination options (16) -> routing (8) -> TCP */
	memset(ext, 0, sizeof(ext));
	ext[0] = 60; ext[1] = 0;
	ext[8] = 43; ext[9] = 1;
	ext[24] = IPPROTO_TCP; ext[25] = 0;
	m.extlen = 32;
	n = mk_frame(f, &m, l4, tl, 16);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.proto, IPPROTO_TCP);
	CHECK_EQ_INT(p.l4_off, 14 + 40 + 32);
	CHECK_EQ_INT(p.dport, 443);
	CHECK(!p.fragment);
	free(h);
	CHECK_EQ_INT(truncations_ok(f, n), 0);

	/* an extension header longer than the payload */
	ext[25] = 9;
	n = mk_frame(f, &m, l4, tl, 16);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	ext[25] = 0;

	/* hop-by-hop not first */
	ext[8] = 0;
	n = mk_frame(f, &m, l4, tl, 16);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);

	/* eight destination-options headers are fine, nine are not */
	for (int k = 8; k <= 9; k++) {
		memset(ext, 0, sizeof(ext));
		for (int i = 0; i < k; i++)
			ext[i * 8] = i == k - 1 ? IPPROTO_TCP : 60;
		m.first_nh = 60;
		m.extlen = (size_t)k * 8;
		n = mk_frame(f, &m, l4, tl, 16);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), k == 8 ? 0 : -EINVAL);
		free(h);
		CHECK_EQ_INT(truncations_ok(f, n), 0);
	}

	/* no next header (59): parses, no L4 */
	m.extlen = 0;
	m.proto = 59;
	n = mk_frame(f, &m, l4, 0, -1);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	CHECK_EQ_INT(p.proto, 59);
	CHECK_EQ_INT(p.l4_off, 0);
	free(h);

	/* payload length beyond the frame; wrong version */
	m.proto = IPPROTO_TCP;
	n = mk_frame(f, &m, l4, tl, 16);
	put16(f + 18, (unsigned)tl + 1);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
	put16(f + 18, (unsigned)tl);
	f[14] = 0x40;
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), -EINVAL); free(h);
}

static void test_rst(void)
{
	uint8_t f[256], l4[128], out[256], *h, *h2;
	struct pkt p, r;
	size_t n, rn;

	for (int v6 = 0; v6 <= 1; v6++) {
		for (int vlan = 0; vlan <= 1; vlan++) {
			struct mk m = { .v6 = v6, .vlan = vlan, .proto = IPPROTO_TCP };
			size_t l3 = vlan ? 18 : 14;

			/* SYN: RST|ACK, seq 0, ack = seq + 1 */
			n = mk_frame(f, &m, l4, mk_tcp(l4, 40000, 443, 0xfffffff0u, 0, 0x02, 0,
						       NULL), 16);
			CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
			rn = pkt_build_tcp_rst(out, sizeof(out), &p);
			CHECK_EQ_INT(rn, l3 + (v6 ? 40 : 20) + 20);
			CHECK(frame_sums_ok(out, rn));
			CHECK_EQ_INT(parse_exact(&r, out, rn, &h2), 0);
			CHECK_EQ_INT(r.tcp_flags, 0x14);
			CHECK_EQ_INT(r.tcp_seq, 0);
			CHECK_EQ_INT(r.tcp_ack, 0xfffffff1u);
			CHECK_EQ_INT(r.sport, 443);
			CHECK_EQ_INT(r.dport, 40000);
			CHECK(net_addr_eq(&r.src, &p.dst) && net_addr_eq(&r.dst, &p.src));
			CHECK(!memcmp(r.dst_mac, mac_guest, 6) && !memcmp(r.src_mac, mac_gw, 6));
			CHECK_EQ_INT(r.l3_off, l3);
			CHECK_EQ_INT(r.payload_len, 0);
			free(h2);
			CHECK_EQ_INT(pkt_build_tcp_rst(out, rn - 1, &p), 0);   /* does not fit */

			/* outbound RST for the same SYN: from the guest, seq just past it */
			rn = pkt_build_tcp_rst_outbound(out, sizeof(out), &p);
			CHECK(rn > 0 && frame_sums_ok(out, rn));
			CHECK_EQ_INT(parse_exact(&r, out, rn, &h2), 0);
			CHECK_EQ_INT(r.tcp_flags, 0x04);
			CHECK_EQ_INT(r.tcp_seq, 0xfffffff1u);
			CHECK_EQ_INT(r.sport, 40000);
			CHECK_EQ_INT(r.dport, 443);
			CHECK(net_addr_eq(&r.src, &p.src) && net_addr_eq(&r.dst, &p.dst));
			CHECK(!memcmp(r.src_mac, mac_guest, 6));
			free(h2);
			free(h);

			/* data with ACK: RST, seq = their ack */
			n = mk_frame(f, &m, l4, mk_tcp(l4, 40000, 443, 100, 5000, 0x18, 4, "data!"),
				     16);
			CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
			rn = pkt_build_tcp_rst(out, sizeof(out), &p);
			CHECK(rn > 0 && frame_sums_ok(out, rn));
			CHECK_EQ_INT(parse_exact(&r, out, rn, &h2), 0);
			CHECK_EQ_INT(r.tcp_flags, 0x04);
			CHECK_EQ_INT(r.tcp_seq, 5000);
			CHECK_EQ_INT(r.tcp_ack, 0);
			free(h2);
			rn = pkt_build_tcp_rst_outbound(out, sizeof(out), &p);
			CHECK_EQ_INT(parse_exact(&r, out, rn, &h2), 0);
			CHECK_EQ_INT(r.tcp_flags, 0x14);
			CHECK_EQ_INT(r.tcp_seq, 105);
			CHECK_EQ_INT(r.tcp_ack, 5000);
			CHECK(frame_sums_ok(out, rn));
			free(h2);
			free(h);

			/* FIN without ACK counts one; no RST for an RST */
			n = mk_frame(f, &m, l4, mk_tcp(l4, 1, 2, 10, 0, 0x01, 0, "ab"), 16);
			CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
			rn = pkt_build_tcp_rst(out, sizeof(out), &p);
			CHECK_EQ_INT(parse_exact(&r, out, rn, &h2), 0);
			CHECK_EQ_INT(r.tcp_ack, 13);
			free(h2);
			free(h);
			n = mk_frame(f, &m, l4, mk_tcp(l4, 1, 2, 10, 0, 0x04, 0, NULL), 16);
			CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
			CHECK_EQ_INT(pkt_build_tcp_rst(out, sizeof(out), &p), 0);
			CHECK_EQ_INT(pkt_build_tcp_rst_outbound(out, sizeof(out), &p), 0);
			CHECK_EQ_INT(pkt_build_udp_reply(out, sizeof(out), &p, NULL, 0), 0);
			free(h);
		}
	}
}

static void test_unreach(void)
{
	uint8_t f[2048], l4[1600], out[2048], *h, *h2;
	struct pkt p, r;
	size_t n, rn;
	struct mk m = { .proto = IPPROTO_UDP };

	memset(l4, 'z', sizeof(l4));
	n = mk_frame(f, &m, l4, mk_udp(l4, 1000, 9999, l4 + 100, 100), 6);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	rn = pkt_build_unreach(out, sizeof(out), &p, 13, 1);
	CHECK_EQ_INT(rn, 14 + 20 + 8 + 28);     /* quotes IP header + 8 bytes */
	CHECK(frame_sums_ok(out, rn));
	CHECK_EQ_INT(parse_exact(&r, out, rn, &h2), 0);
	CHECK_EQ_INT(r.proto, IPPROTO_ICMP);
	CHECK_EQ_INT(r.icmp_type, 3);
	CHECK_EQ_INT(r.icmp_code, 13);
	CHECK(net_addr_eq(&r.dst, &p.src));
	CHECK(!memcmp(out + 14 + 28, f + 14, 28));
	free(h2);
	CHECK_EQ_INT(pkt_build_unreach(out, rn - 1, &p, 13, 1), 0);
	free(h);

	/* no error about an ICMP error, nor about a later fragment */
	{
		uint8_t e[8] = { 3, 1, 0, 0, 0, 0, 0, 0 };
		struct mk mi = { .proto = IPPROTO_ICMP };

		n = mk_frame(f, &mi, e, 8, 2);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
		CHECK_EQ_INT(pkt_build_unreach(out, sizeof(out), &p, 13, 1), 0);
		free(h);
		e[0] = 8;
		n = mk_frame(f, &mi, e, 8, 2);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
		rn = pkt_build_unreach(out, sizeof(out), &p, 13, 1);
		CHECK(rn > 0 && frame_sums_ok(out, rn));
		free(h);
		m.frag4 = 0x0010;
		n = mk_frame(f, &m, l4, 100, -1);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
		CHECK_EQ_INT(pkt_build_unreach(out, sizeof(out), &p, 13, 1), 0);
		free(h);
		m.frag4 = 0;
	}

	/* IPv6: quotes as much as keeps the error within 1280 bytes */
	m.v6 = 1;
	n = mk_frame(f, &m, l4, mk_udp(l4, 1000, 9999, l4 + 200, 1400), 6);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	rn = pkt_build_unreach(out, sizeof(out), &p, 13, 1);
	CHECK_EQ_INT(rn, 14 + 1280);
	CHECK(frame_sums_ok(out, rn));
	CHECK_EQ_INT(parse_exact(&r, out, rn, &h2), 0);
	CHECK_EQ_INT(r.proto, IPPROTO_ICMPV6);
	CHECK_EQ_INT(r.icmp_type, 1);
	CHECK_EQ_INT(r.icmp_code, 1);
	CHECK(!memcmp(out + 14 + 48, f + 14, 1232));
	free(h2);
	free(h);
	/* a short one is quoted whole */
	n = mk_frame(f, &m, l4, mk_udp(l4, 1000, 9999, l4, 10), 6);
	CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
	rn = pkt_build_unreach(out, sizeof(out), &p, 13, 4);
	CHECK_EQ_INT(rn, 14 + 48 + 58);
	CHECK(frame_sums_ok(out, rn));
	free(h);
	/* ICMPv6 errors (type < 128) get none */
	{
		uint8_t e[8] = { 1, 4, 0, 0, 0, 0, 0, 0 };
		struct mk mi = { .v6 = 1, .proto = IPPROTO_ICMPV6 };

		n = mk_frame(f, &mi, e, 8, 2);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
		CHECK_EQ_INT(pkt_build_unreach(out, sizeof(out), &p, 13, 1), 0);
		free(h);
	}
}

static void test_udp_reply(void)
{
	uint8_t f[256], l4[64], out[2048], *h, *h2;
	struct pkt p, r;
	size_t n, rn;
	static const uint8_t answer[] = "an answer, odd length";

	for (int v6 = 0; v6 <= 1; v6++) {
		struct mk m = { .v6 = v6, .vlan = v6, .proto = IPPROTO_UDP };

		n = mk_frame(f, &m, l4, mk_udp(l4, 33333, 53, (const uint8_t *)"q", 1), 6);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
		rn = pkt_build_udp_reply(out, sizeof(out), &p, answer, sizeof(answer) - 1);
		CHECK_EQ_INT(rn, (v6 ? 18 + 40 : 14 + 20) + 8 + sizeof(answer) - 1);
		CHECK(frame_sums_ok(out, rn));
		CHECK_EQ_INT(parse_exact(&r, out, rn, &h2), 0);
		CHECK_EQ_INT(r.sport, 53);
		CHECK_EQ_INT(r.dport, 33333);
		CHECK_EQ_INT(r.payload_len, sizeof(answer) - 1);
		CHECK(!memcmp(out + r.payload_off, answer, sizeof(answer) - 1));
		CHECK(net_addr_eq(&r.src, &p.dst) && net_addr_eq(&r.dst, &p.src));
		free(h2);
		CHECK_EQ_INT(pkt_build_udp_reply(out, rn - 1, &p, answer, sizeof(answer) - 1), 0);
		/* empty payload; a TCP frame is the wrong kind */
		rn = pkt_build_udp_reply(out, sizeof(out), &p, NULL, 0);
		CHECK(rn > 0 && frame_sums_ok(out, rn));
		free(h);
		m.proto = IPPROTO_TCP;
		n = mk_frame(f, &m, l4, mk_tcp(l4, 1, 2, 0, 0, 2, 0, NULL), 16);
		CHECK_EQ_INT(parse_exact(&p, f, n, &h), 0);
		CHECK_EQ_INT(pkt_build_udp_reply(out, sizeof(out), &p, answer, 3), 0);
		CHECK_EQ_INT(pkt_build_unreach(out, sizeof(out), &p, 13, 1) > 0, 1);
		free(h);
	}
}

static void test_addr(void)
{
	struct net_addr a, b, n;
	char s[INET6_ADDRSTRLEN];
	static const char *internal[] = {
		"0.0.0.0", "127.0.0.1", "127.255.0.9", "10.1.2.3", "172.16.0.1", "172.31.255.255",
		"192.168.1.1", "100.64.0.1", "100.127.255.255", "169.254.169.254", "224.0.0.251",
		"239.1.1.1", "255.255.255.255", "::", "::1", "fc00::1", "fd12:3456::1",
		"fe80::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"::ffff:169.254.169.254", "64:ff9b::a00:1",
	};
	static const char *external[] = {
		"1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "203.0.113.7", "2001:db8::1",
		"2606:4700::1111", "::ffff:1.1.1.1",
	};

	for (size_t i = 0; i < sizeof(internal) / sizeof(internal[0]); i++) {
		CHECK_EQ_INT(net_addr_parse(internal[i], &a), 0);
		if (!net_addr_is_internal(&a))
			fprintf(stderr, "not internal: %s\n", internal[i]);
		CHECK(net_addr_is_internal(&a));
	}
	for (size_t i = 0; i < sizeof(external) / sizeof(external[0]); i++) {
		CHECK_EQ_INT(net_addr_parse(external[i], &a), 0);
		CHECK(!net_addr_is_internal(&a));
	}
	CHECK_EQ_INT(net_addr_parse("[::1]", &a), -EINVAL);
	CHECK_EQ_INT(net_addr_parse("1.2.3.4:80", &a), -EINVAL);
	CHECK_EQ_INT(net_addr_parse("1.2.3", &a), -EINVAL);
	CHECK_EQ_INT(net_addr_parse("", &a), -EINVAL);
	CHECK_EQ_INT(net_addr_parse("2001:db8::1", &a), 0);
	CHECK_STR(net_addr_str(&a, s, sizeof(s)), "2001:db8::1");
	CHECK_EQ_INT(net_addr_parse("2001:db8::", &n), 0);
	CHECK(net_addr_in(&a, &n, 32));
	CHECK(net_addr_in(&a, &n, 127));
	CHECK(!net_addr_in(&a, &n, 128));
	CHECK(!net_addr_in(&a, &n, 129));
	CHECK(net_addr_in(&a, &n, 0));
	CHECK_EQ_INT(net_addr_parse("203.0.113.200", &a), 0);
	CHECK_EQ_INT(net_addr_parse("203.0.113.128", &n), 0);
	CHECK(net_addr_in(&a, &n, 25));
	CHECK(!net_addr_in(&a, &n, 26));
	CHECK(!net_addr_in(&a, &n, 33));
	CHECK_EQ_INT(net_addr_parse("::ffff:203.0.113.200", &b), 0);
	CHECK(!net_addr_eq(&a, &b));
	CHECK(net_addr_is_mapped(&b));
	net_addr_unmap(&b, &b);
	CHECK(net_addr_eq(&a, &b));
	CHECK(!net_addr_in(&b, &(struct net_addr){ .family = AF_INET6 }, 0));
	net_addr_mask(&a, 20);
	CHECK_STR(net_addr_str(&a, s, sizeof(s)), "203.0.112.0");
	memset(&a, 0, sizeof(a));
	CHECK_STR(net_addr_str(&a, s, sizeof(s)), "(none)");
	CHECK(net_addr_is_internal(&a));
}

int main(void)
{
	test_get_and_csum();
	test_addr();
	test_tcp4();
	test_ip4_malformed();
	test_udp();
	test_icmp();
	test_arp_vlan_other();
	test_fragments();
	test_ip6_ext();
	test_rst();
	test_unreach();
	test_udp_reply();
	return T_DONE();
}
