/* SPDX-License-Identifier: Apache-2.0 */
/* pkt.c - bounds-checked parsing of the guest's Ethernet frames and the few frames
 * kosa8-net builds itself (TCP RST, ICMP unreachable, UDP replies).
 *
 * Theory of operation: pkt_parse() walks Ethernet (at most one 802.1Q tag), then ARP or
 * IPv4/IPv6 (with the IPv6 extension header chain), then TCP/UDP/ICMP, reaching every
 * header through pkt_get() and bounding everything after the IP header by the IP length,
 * never by the frame length alone. Fields are read byte by byte in network order, so no
 * unaligned access happens. The builders write the reply header by header into the
 * caller's buffer after checking the whole length fits. */
#include "net/bytes.h"
#include "net/pkt.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#define ETH_HLEN 14
#define ETH_P_IP4 0x0800
#define ETH_P_ARP 0x0806
#define ETH_P_VLAN 0x8100
#define ETH_P_IP6 0x86dd

#define IP6_HLEN 40
#define IP6_MAX_EXT 8
#define IP6_MIN_MTU 1280

#define T_FIN 0x01
#define T_SYN 0x02
#define T_RST 0x04
#define T_ACK 0x10


const void *pkt_get(const struct pkt *p, size_t off, size_t len)
{
	if (!p->frame || off > p->len || len > p->len - off)
		return NULL;
	return p->frame + off;
}

/* ---- parsing ---- */

/* L4 header at p->l4_off, bounded by `end` (the end of the IP payload). For a first
 * fragment the transport length fields describe the whole datagram, not this piece. */
static int pkt_parse_l4(struct pkt *p, size_t end)
{
	size_t avail = end - p->l4_off;
	const uint8_t *h;

	switch (p->proto) {
	case IPPROTO_TCP: {
		size_t doff;

		if (!(h = pkt_get(p, p->l4_off, 20)) || avail < 20)
			return -EINVAL;
		doff = (size_t)(h[12] >> 4) * 4;
		if (doff < 20 || doff > avail || !pkt_get(p, p->l4_off, doff))
			return -EINVAL;
		p->sport = net_rd16(h);
		p->dport = net_rd16(h + 2);
		p->tcp_seq = net_rd32(h + 4);
		p->tcp_ack = net_rd32(h + 8);
		p->tcp_flags = h[13];
		p->payload_off = p->l4_off + doff;
		p->payload_len = avail - doff;
		return 0;
	}
	case IPPROTO_UDP: {
		size_t ulen;

		if (!(h = pkt_get(p, p->l4_off, 8)) || avail < 8)
			return -EINVAL;
		ulen = net_rd16(h + 4);
		p->sport = net_rd16(h);
		p->dport = net_rd16(h + 2);
		p->payload_off = p->l4_off + 8;
		if (p->fragment) {
			/* the length covers the reassembled datagram */
			if (ulen < 8)
				return -EINVAL;
			p->payload_len = avail - 8;
		} else {
			if (ulen < 8 || ulen > avail)
				return -EINVAL;
			p->payload_len = ulen - 8;
		}
		return 0;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		if (!(h = pkt_get(p, p->l4_off, 8)) || avail < 8)
			return -EINVAL;
		p->icmp_type = h[0];
		p->icmp_code = h[1];
		p->payload_off = p->l4_off + 8;
		p->payload_len = avail - 8;
		return 0;
	default:
		p->l4_off = 0;
		return 0;
	}
}

static int pkt_parse_ip4(struct pkt *p)
{
	const uint8_t *h = pkt_get(p, p->l3_off, 20);
	size_t ihl, tot, frag;

	if (!h || h[0] >> 4 != 4)
		return -EINVAL;
	ihl = (size_t)(h[0] & 0x0f) * 4;
	tot = net_rd16(h + 2);
	if (ihl < 20 || !pkt_get(p, p->l3_off, ihl) || tot < ihl || !pkt_get(p, p->l3_off, tot))
		return -EINVAL;
	p->l3 = PKT_IP4;
	p->ttl = h[8];
	p->proto = h[9];
	p->src.family = p->dst.family = AF_INET;
	memcpy(p->src.a, h + 12, 4);
	memcpy(p->dst.a, h + 16, 4);
	frag = net_rd16(h + 6);
	if (frag & 0x3fff) {            /* MF or an offset */
		p->fragment = true;
		p->first_fragment = (frag & 0x1fff) == 0;
		if (!p->first_fragment)
			return 0;       /* no transport header in this piece */
	}
	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP && p->proto != IPPROTO_ICMP)
		return 0;
	p->l4_off = p->l3_off + ihl;
	return pkt_parse_l4(p, p->l3_off + tot);
}

static int pkt_parse_ip6(struct pkt *p)
{
	const uint8_t *h = pkt_get(p, p->l3_off, IP6_HLEN);
	size_t off, end;
	int nh;

	if (!h || h[0] >> 4 != 6)
		return -EINVAL;
	end = p->l3_off + IP6_HLEN + net_rd16(h + 4);
	if (!pkt_get(p, p->l3_off, end - p->l3_off))
		return -EINVAL;
	p->l3 = PKT_IP6;
	p->ttl = h[7];
	p->src.family = p->dst.family = AF_INET6;
	memcpy(p->src.a, h + 8, 16);
	memcpy(p->dst.a, h + 24, 16);
	nh = h[6];
	off = p->l3_off + IP6_HLEN;
	for (int n = 0;; n++) {
		const uint8_t *e;
		size_t elen;

		if (nh != 0 && nh != 43 && nh != 44 && nh != 60)
			break;
		if (n == IP6_MAX_EXT)
			return -EINVAL;
		if (nh == 0 && n != 0)
			return -EINVAL;         /* hop-by-hop only right after the header */
		if (!(e = pkt_get(p, off, 8)) || end - off < 8)
			return -EINVAL;
		if (nh == 44) {
			uint16_t fo = net_rd16(e + 2);

			p->fragment = true;
			p->first_fragment = (fo >> 3) == 0;
			elen = 8;
			if (!p->first_fragment) {
				p->proto = e[0];
				return 0;
			}
		} else {
			elen = ((size_t)e[1] + 1) * 8;
			if (elen > end - off)
				return -EINVAL;
		}
		nh = e[0];
		off += elen;
	}
	p->proto = nh;
	if (nh != IPPROTO_TCP && nh != IPPROTO_UDP && nh != IPPROTO_ICMPV6)
		return 0;
	p->l4_off = off;
	return pkt_parse_l4(p, end);
}

int pkt_parse(struct pkt *p, const uint8_t *frame, size_t len)
{
	const uint8_t *eth;

	memset(p, 0, sizeof(*p));
	p->frame = frame;
	p->len = len;
	p->proto = -1;
	if (!frame || len > PKT_MAX_FRAME || !(eth = pkt_get(p, 0, ETH_HLEN)))
		return -EINVAL;
	memcpy(p->dst_mac, eth, 6);
	memcpy(p->src_mac, eth + 6, 6);
	p->ethertype = net_rd16(eth + 12);
	p->l3_off = ETH_HLEN;
	if (p->ethertype == ETH_P_VLAN) {
		const uint8_t *tag = pkt_get(p, ETH_HLEN, 4);

		if (!tag)
			return -EINVAL;
		p->ethertype = net_rd16(tag + 2);
		p->l3_off += 4;
	}
	switch (p->ethertype) {
	case ETH_P_ARP: {
		const uint8_t *a = pkt_get(p, p->l3_off, 28);

		if (!a)
			return -EINVAL;
		/* Ethernet/IPv4 ARP only; another kind is well formed but not ours */
		if (net_rd16(a) != 1 || net_rd16(a + 2) != ETH_P_IP4 || a[4] != 6 || a[5] != 4)
			return 0;
		p->l3 = PKT_ARP;
		p->src.family = p->dst.family = AF_INET;
		memcpy(p->src.a, a + 14, 4);
		memcpy(p->dst.a, a + 24, 4);
		return 0;
	}
	case ETH_P_IP4:
		return pkt_parse_ip4(p);
	case ETH_P_IP6:
		return pkt_parse_ip6(p);
	default:
		return 0;
	}
}

/* ---- checksums ---- */

/* One's complement sum of big-endian 16-bit words; an odd last byte is padded with zero,
 * so every piece but the last must have an even length. The result stays below 2^17. */
uint32_t pkt_csum_add(uint32_t sum, const void *data, size_t len)
{
	const uint8_t *b = data;
	uint64_t s = sum;
	size_t i;

	for (i = 0; i + 1 < len; i += 2)
		s += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (i < len)
		s += (uint32_t)b[i] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint32_t)s;
}

/* The checksum to store, big-endian, in the header. */
uint16_t pkt_csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

/* Pseudo-header sum for a transport segment of `len` bytes from src to dst. */
static uint32_t pkt_pseudo(const struct net_addr *src, const struct net_addr *dst, int proto,
			   size_t len)
{
	uint8_t tail[8];
	uint32_t s;

	if (src->family == AF_INET) {
		s = pkt_csum_add(0, src->a, 4);
		s = pkt_csum_add(s, dst->a, 4);
		tail[0] = 0;
		tail[1] = (uint8_t)proto;
		net_wr16(tail + 2, (uint16_t)len);
		return pkt_csum_add(s, tail, 4);
	}
	s = pkt_csum_add(0, src->a, 16);
	s = pkt_csum_add(s, dst->a, 16);
	net_wr32(tail, (uint32_t)len);
	tail[4] = tail[5] = tail[6] = 0;
	tail[7] = (uint8_t)proto;
	return pkt_csum_add(s, tail, 8);
}

/* ---- builders ---- */

/* Size of the L2 + L3 headers the reply to `in` carries. */
static size_t pkt_hdr_len(const struct pkt *in)
{
	return in->l3_off + (in->l3 == PKT_IP4 ? 20 : IP6_HLEN);
}

/* Ethernet header (the VLAN tag of `in` kept) and IP header for `l4len` bytes of `proto`
 * from `src` to `dst`. Returns the offset of the L4 header. */
static size_t pkt_write_hdr(uint8_t *out, const struct pkt *in, bool swap, int proto,
			    size_t l4len, const struct net_addr *src, const struct net_addr *dst)
{
	uint8_t *ip = out + in->l3_off;

	memcpy(out, swap ? in->src_mac : in->dst_mac, 6);
	memcpy(out + 6, swap ? in->dst_mac : in->src_mac, 6);
	memcpy(out + 12, in->frame + 12, in->l3_off - 12);     /* ethertype, or tag + type */
	if (in->l3 == PKT_IP4) {
		memset(ip, 0, 20);
		ip[0] = 0x45;
		net_wr16(ip + 2, (uint16_t)(20 + l4len));
		net_wr16(ip + 6, 0x4000);   /* DF */
		ip[8] = 64;
		ip[9] = (uint8_t)proto;
		memcpy(ip + 12, src->a, 4);
		memcpy(ip + 16, dst->a, 4);
		net_wr16(ip + 10, pkt_csum_fold(pkt_csum_add(0, ip, 20)));
		return in->l3_off + 20;
	}
	memset(ip, 0, IP6_HLEN);
	ip[0] = 0x60;
	net_wr16(ip + 4, (uint16_t)l4len);
	ip[6] = (uint8_t)proto;
	ip[7] = 64;
	memcpy(ip + 8, src->a, 16);
	memcpy(ip + 24, dst->a, 16);
	return in->l3_off + IP6_HLEN;
}

static bool pkt_is_ip(const struct pkt *in)
{
	return in && in->frame && (in->l3 == PKT_IP4 || in->l3 == PKT_IP6) &&
	       in->l3_off >= ETH_HLEN && in->l3_off <= ETH_HLEN + 4 && in->len >= in->l3_off;
}

static bool pkt_is_tcp(const struct pkt *in)
{
	return pkt_is_ip(in) && in->proto == IPPROTO_TCP && in->l4_off &&
	       !(in->tcp_flags & T_RST);
}

/* Sequence space `in` occupies: payload plus SYN and FIN. */
static uint32_t pkt_seg_len(const struct pkt *in)
{
	return (uint32_t)in->payload_len + !!(in->tcp_flags & T_SYN) + !!(in->tcp_flags & T_FIN);
}

static size_t pkt_write_rst(uint8_t *out, size_t cap, const struct pkt *in, bool outbound,
			    uint32_t seq, uint32_t ack, uint8_t flags)
{
	size_t len = pkt_hdr_len(in) + 20, off;
	const struct net_addr *src = outbound ? &in->src : &in->dst;
	const struct net_addr *dst = outbound ? &in->dst : &in->src;
	uint8_t *t;

	if (len > cap)
		return 0;
	off = pkt_write_hdr(out, in, !outbound, IPPROTO_TCP, 20, src, dst);
	t = out + off;
	memset(t, 0, 20);
	net_wr16(t, outbound ? in->sport : in->dport);
	net_wr16(t + 2, outbound ? in->dport : in->sport);
	net_wr32(t + 4, seq);
	net_wr32(t + 8, ack);
	t[12] = 5 << 4;
	t[13] = flags;
	net_wr16(t + 16, pkt_csum_fold(pkt_csum_add(pkt_pseudo(src, dst, IPPROTO_TCP, 20), t, 20)));
	return len;
}

/* RFC 793 (and Linux's tcp_v4_send_reset): a segment carrying ACK gets <SEQ=SEG.ACK><RST>;
 * one without (a SYN) gets <SEQ=0><ACK=SEG.SEQ+SEG.LEN><RST,ACK>. */
size_t pkt_build_tcp_rst(uint8_t *out, size_t cap, const struct pkt *in)
{
	if (!out || !pkt_is_tcp(in))
		return 0;
	if (in->tcp_flags & T_ACK)
		return pkt_write_rst(out, cap, in, false, in->tcp_ack, 0, T_RST);
	return pkt_write_rst(out, cap, in, false, 0, in->tcp_seq + pkt_seg_len(in),
			     T_RST | T_ACK);
}

/* As the guest would send it: the sequence number just past `in`, which slirp's receive
 * window holds whether or not `in` itself reached slirp. */
size_t pkt_build_tcp_rst_outbound(uint8_t *out, size_t cap, const struct pkt *in)
{
	if (!out || !pkt_is_tcp(in))
		return 0;
	if (in->tcp_flags & T_ACK)
		return pkt_write_rst(out, cap, in, true, in->tcp_seq + pkt_seg_len(in),
				     in->tcp_ack, T_RST | T_ACK);
	return pkt_write_rst(out, cap, in, true, in->tcp_seq + pkt_seg_len(in), 0, T_RST);
}

/* Never answer an ICMP error with an ICMP error, a non-first fragment, or a packet from an
 * address that is not one host (RFC 1122 3.2.2, RFC 4443 2.4). */
static bool pkt_unreach_ok(const struct pkt *in)
{
	const uint8_t *s = in->src.a;

	if (in->fragment && !in->first_fragment)
		return false;
	if (in->l3 == PKT_IP4) {
		if (in->proto == IPPROTO_ICMP && (!in->l4_off || in->icmp_type == 3 ||
		    in->icmp_type == 4 || in->icmp_type == 5 || in->icmp_type == 11 ||
		    in->icmp_type == 12))
			return false;   /* the error types, and anything we could not read */
		if (s[0] == 0 || s[0] >= 224 || in->dst.a[0] >= 224)
			return false;
		return true;
	}
	if (in->proto == IPPROTO_ICMPV6 && (!in->l4_off || in->icmp_type < 128))
		return false;
	if (s[0] == 0xff || in->dst.a[0] == 0xff)
		return false;
	for (int i = 0; i < 16; i++)
		if (s[i])
			return true;
	return false;                   /* from :: */
}

size_t pkt_build_unreach(uint8_t *out, size_t cap, const struct pkt *in, uint8_t code4,
			 uint8_t code6)
{
	const uint8_t *ip;
	size_t iplen, quote, len, off;
	int proto;
	uint8_t *icmp;
	uint32_t sum;

	if (!out || !pkt_is_ip(in) || !pkt_unreach_ok(in))
		return 0;
	if (in->l3 == PKT_IP4) {
		if (!(ip = pkt_get(in, in->l3_off, 20)))
			return 0;
		iplen = net_rd16(ip + 2);
		quote = (size_t)(ip[0] & 0x0f) * 4 + 8;
		proto = IPPROTO_ICMP;
	} else {
		if (!(ip = pkt_get(in, in->l3_off, IP6_HLEN)))
			return 0;
		iplen = IP6_HLEN + net_rd16(ip + 4);
		quote = IP6_MIN_MTU - IP6_HLEN - 8;
		proto = IPPROTO_ICMPV6;
	}
	if (quote > iplen)
		quote = iplen;
	if (!pkt_get(in, in->l3_off, quote))
		return 0;
	len = pkt_hdr_len(in) + 8 + quote;
	if (len > cap)
		return 0;
	off = pkt_write_hdr(out, in, true, proto, 8 + quote, &in->dst, &in->src);
	icmp = out + off;
	memset(icmp, 0, 8);
	icmp[0] = in->l3 == PKT_IP4 ? 3 : 1;
	icmp[1] = in->l3 == PKT_IP4 ? code4 : code6;
	memcpy(icmp + 8, ip, quote);
	sum = in->l3 == PKT_IP4 ? 0 : pkt_pseudo(&in->dst, &in->src, proto, 8 + quote);
	net_wr16(icmp + 2, pkt_csum_fold(pkt_csum_add(sum, icmp, 8 + quote)));
	return len;
}

size_t pkt_build_udp_reply(uint8_t *out, size_t cap, const struct pkt *in,
			   const uint8_t *data, size_t len)
{
	size_t total, off, max;
	uint8_t *u;
	uint16_t c;

	if (!out || !pkt_is_ip(in) || in->proto != IPPROTO_UDP || !in->l4_off ||
	    (len && !data))
		return 0;
	max = in->l3 == PKT_IP4 ? 65535 - 20 - 8 : 65535 - 8;
	if (len > max)
		return 0;
	total = pkt_hdr_len(in) + 8 + len;
	if (total > cap)
		return 0;
	off = pkt_write_hdr(out, in, true, IPPROTO_UDP, 8 + len, &in->dst, &in->src);
	u = out + off;
	net_wr16(u, in->dport);
	net_wr16(u + 2, in->sport);
	net_wr16(u + 4, (uint16_t)(8 + len));
	net_wr16(u + 6, 0);
	if (len)
		memmove(u + 8, data, len);
	c = pkt_csum_fold(pkt_csum_add(pkt_pseudo(&in->dst, &in->src, IPPROTO_UDP, 8 + len),
				       u, 8 + len));
	net_wr16(u + 6, c ? c : 0xffff);    /* 0 means "no checksum" (v4) */
	return total;
}
