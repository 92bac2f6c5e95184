/* SPDX-License-Identifier: Apache-2.0 */
/* neigh.c - ARP and IPv6 neighbour discovery for the guest, answered by kosa8-net itself.
 * This file decides and builds the frames (neigh_input); engine.c sends them.
 *
 * Theory of operation. libslirp's ARP and NDP input read the guest's bytes with few
 * checks (its ARP code does not even compare the frame's length with the header it
 * reads), and nothing in them needs the policy. So no ARP or ND frame of the guest ever
 * reaches slirp:
 *  - An ARP request for the gateway (10.0.2.2) or the resolver (10.0.2.3) is answered
 *    here, with the MAC slirp would give (52:55 and the IPv4 address). A neighbour
 *    solicitation for fd00::2, fd00::3 or fe80::2 (slirp's router) is answered with a
 *    neighbour advertisement (MAC 52:56 and the address' last four bytes, as slirp).
 *  - slirp still has to learn the guest's MAC to send it anything. For that it is given
 *    a frame built here from the checked fields only: an ARP reply, or a neighbour
 *    advertisement with a valid checksum, "from" the guest's address and MAC.
 *  - Everything else is dropped without an answer: requests for any other address,
 *    router solicitations (the agent sets the route; slirp's periodic router
 *    advertisements still reach the guest), router advertisements and redirects from
 *    the guest, frames whose sender MAC is not the frame's source or is multicast, a
 *    sender address outside the virtual network, a VLAN tag, an ND message with a hop
 *    limit other than 255 or a bad checksum. */
#include <netinet/in.h>
#include <string.h>

#include "common/guest.h"
#include "net/bytes.h"
#include "net/neigh.h"

#define NEIGH_ARP_LEN 60                /* 14 + 28, padded to Ethernet's minimum */
#define ND_NS 135
#define ND_NA 136

static const uint8_t neigh_ll_router[16] = { 0xfe, 0x80, [15] = 2 };    /* fe80::2 */

/* slirp's MAC for one of its IPv4 addresses: 52:55 and the address. */
static void neigh_mac4(uint8_t mac[6], const uint8_t ip[4])
{
	mac[0] = 0x52;
	mac[1] = 0x55;
	memcpy(mac + 2, ip, 4);
}

/* slirp's MAC for one of its IPv6 addresses: 52:56 and the last four bytes. */
static void neigh_mac6(uint8_t mac[6], const uint8_t ip[16])
{
	mac[0] = 0x52;
	mac[1] = 0x56;
	memcpy(mac + 2, ip + 12, 4);
}

static bool neigh_mac_ok(const uint8_t mac[6])
{
	static const uint8_t zero[6];

	return !(mac[0] & 1) && memcmp(mac, zero, 6) != 0;
}

static size_t neigh_arp_build(uint8_t f[NEIGH_ARP_LEN], uint16_t op, const uint8_t dmac[6],
			      const uint8_t smac[6], const uint8_t sha[6], const uint8_t sip[4],
			      const uint8_t tha[6], const uint8_t tip[4])
{
	memset(f, 0, NEIGH_ARP_LEN);
	memcpy(f, dmac, 6);
	memcpy(f + 6, smac, 6);
	f[12] = 0x08, f[13] = 0x06;
	f[15] = 1;                              /* Ethernet */
	f[16] = 0x08, f[17] = 0x00;             /* IPv4 */
	f[18] = 6, f[19] = 4;
	net_wr16(f + 20, op);
	memcpy(f + 22, sha, 6);
	memcpy(f + 28, sip, 4);
	memcpy(f + 32, tha, 6);
	memcpy(f + 38, tip, 4);
	return NEIGH_ARP_LEN;
}

static void neigh_arp(const struct neigh_env *e, const struct pkt *p, struct neigh_out *o)
{
	const uint8_t *a = pkt_get(p, p->l3_off, 28);
	uint8_t gwmac[6];
	struct net_addr sip = { .family = AF_INET };
	bool have_sip;
	uint16_t op;

	if (!a || p->l3_off != 14)
		return;
	op = net_rd16(a + 6);
	memcpy(sip.a, a + 14, 4);
	have_sip = sip.a[0] || sip.a[1] || sip.a[2] || sip.a[3];
	/* sender: the frame's own unicast MAC, an address of the virtual network that is
	 * not slirp's (or 0.0.0.0, an address probe) */
	if (memcmp(a + 8, p->src_mac, 6) || !neigh_mac_ok(a + 8) ||
	    (have_sip && (!net_addr_in(&sip, &e->net4, GUEST_PREFIX4) || sip.a[3] == 0 ||
			  sip.a[3] == 255 || net_addr_eq(&sip, &e->gw4) ||
			  net_addr_eq(&sip, &e->dns4) || net_addr_eq(&sip, &e->broker4))) ||
	    (op != 1 && op != 2))
		return;
	if (op == 1 && (!memcmp(a + 24, e->gw4.a, 4) || !memcmp(a + 24, e->dns4.a, 4) ||
			(e->broker4.family == AF_INET && !memcmp(a + 24, e->broker4.a, 4)))) {
		uint8_t mac[6];

		neigh_mac4(mac, a + 24);
		o->reply_len = neigh_arp_build(o->reply, 2, a + 8, mac, mac, a + 24, a + 8,
					       a + 14);
	} else if (!(op == 2 || !memcmp(a + 14, a + 24, 4))) {
		return;                 /* a request for an address nobody here has */
	}
	/* Teach slirp the guest's MAC (an answer to its own request, an announcement, or
	 * the request just answered): a reply from the guest to the gateway, built here. */
	if (have_sip) {
		neigh_mac4(gwmac, e->gw4.a);
		o->teach_len = neigh_arp_build(o->teach, 2, gwmac, a + 8, a + 8, sip.a, gwmac,
					       e->gw4.a);
	}
	o->verdict = NEIGH_ANSWERED;
}

/* An IPv6 address the guest may use as its own: the virtual prefix or link-local. */
static bool neigh_guest6(const struct neigh_env *e, const uint8_t ip[16])
{
	struct net_addr a = { .family = AF_INET6 };

	memcpy(a.a, ip, 16);
	if (ip[0] == 0xfe && (ip[1] & 0xc0) == 0x80)
		return true;
	return net_addr_in(&a, &e->net6, GUEST_PREFIX6) && !net_addr_eq(&a, &e->gw6) &&
	       !net_addr_eq(&a, &e->dns6);
}

/* A neighbour advertisement: Ethernet + IPv6 (hop limit 255) + ICMPv6 type 136 with a
 * target link-layer address option. Returns the frame length (86). */
static size_t neigh_na_build(uint8_t *f, const uint8_t dmac[6], const uint8_t smac[6],
			     const uint8_t src[16], const uint8_t dst[16], uint8_t flags,
			     const uint8_t target[16], const uint8_t tlla[6])
{
	uint8_t *ip = f + 14, *icmp = ip + 40;
	uint8_t ph[8] = { 0, 0, 0, 32, 0, 0, 0, IPPROTO_ICMPV6 };
	uint16_t c;

	memset(f, 0, 86);
	memcpy(f, dmac, 6);
	memcpy(f + 6, smac, 6);
	f[12] = 0x86, f[13] = 0xdd;
	ip[0] = 0x60;
	ip[5] = 32;                             /* payload length */
	ip[6] = IPPROTO_ICMPV6;
	ip[7] = 255;
	memcpy(ip + 8, src, 16);
	memcpy(ip + 24, dst, 16);
	icmp[0] = ND_NA;
	icmp[4] = flags;                        /* R 0x80, S 0x40, O 0x20 */
	memcpy(icmp + 8, target, 16);
	icmp[24] = 2;                           /* target link-layer address, 8 bytes */
	icmp[25] = 1;
	memcpy(icmp + 26, tlla, 6);
	c = pkt_csum_fold(pkt_csum_add(pkt_csum_add(pkt_csum_add(0, ip + 8, 32), ph, 8),
				       icmp, 32));
	icmp[2] = (uint8_t)(c >> 8), icmp[3] = (uint8_t)c;
	return 86;
}

/* Teach slirp that the guest has `addr` at `mac`: an advertisement to fe80::2. */
static void neigh_teach6(struct neigh_out *o, const uint8_t addr[16], const uint8_t mac[6])
{
	uint8_t rmac[6];

	neigh_mac6(rmac, neigh_ll_router);
	o->teach_len = neigh_na_build(o->teach, rmac, mac, addr, neigh_ll_router, 0x60, addr,
				      mac);
}

static void neigh_nd(const struct neigh_env *e, const struct pkt *p, struct neigh_out *o)
{
	static const uint8_t unspec[16];
	const uint8_t *ip = pkt_get(p, p->l3_off, 40), *m;
	size_t mlen = p->payload_len + 8;
	uint8_t mac[6];
	uint32_t sum;
	uint8_t ph[8];

	/* NS and NA only; at least type..target (24 bytes); link-local scope (255) */
	if (!ip || p->l3_off != 14 || (p->icmp_type != ND_NS && p->icmp_type != ND_NA) ||
	    p->icmp_code != 0 || p->ttl != 255 || mlen < 24 ||
	    !(m = pkt_get(p, p->l4_off, mlen)) || !neigh_mac_ok(p->src_mac) || m[8] == 0xff)
		return;
	net_wr32(ph, (uint32_t)mlen);
	ph[4] = ph[5] = ph[6] = 0, ph[7] = IPPROTO_ICMPV6;
	sum = pkt_csum_add(pkt_csum_add(pkt_csum_add(0, ip + 8, 32), ph, 8), m, mlen);
	if (pkt_csum_fold(sum) != 0) {
		o->verdict = NEIGH_MALFORMED;
		return;
	}
	/* a link-layer address option, if any, must be the frame's source MAC */
	for (size_t off = 24; off + 2 <= mlen;) {
		size_t olen = (size_t)m[off + 1] * 8;

		if (olen == 0 || olen > mlen - off) {
			o->verdict = NEIGH_MALFORMED;
			return;
		}
		if ((m[off] == 1 || m[off] == 2) &&
		    (olen != 8 || memcmp(m + off + 2, p->src_mac, 6)))
			return;
		off += olen;
	}
	if (p->icmp_type == ND_NA) {
		/* the guest answers slirp's solicitation (or announces itself) */
		if (!neigh_guest6(e, m + 8))
			return;
		neigh_teach6(o, m + 8, p->src_mac);
		o->verdict = NEIGH_ANSWERED;
		return;
	}
	/* NS: from one of the guest's addresses, or :: (duplicate address detection) */
	bool dad = !memcmp(ip + 8, unspec, 16);
	if (!dad && !neigh_guest6(e, ip + 8))
		return;
	if (memcmp(m + 8, e->gw6.a, 16) && memcmp(m + 8, e->dns6.a, 16) &&
	    memcmp(m + 8, neigh_ll_router, 16))
		return;                 /* nobody else lives here */
	neigh_mac6(mac, m + 8);
	o->verdict = NEIGH_ANSWERED;
	if (dad) {
		static const uint8_t all_nodes[16] = { 0xff, 0x02, [15] = 1 };
		static const uint8_t all_nodes_mac[6] = { 0x33, 0x33, 0, 0, 0, 1 };

		o->reply_len = neigh_na_build(o->reply, all_nodes_mac, mac, m + 8, all_nodes, 0xa0,
					      m + 8, mac);
		return;
	}
	o->reply_len = neigh_na_build(o->reply, p->src_mac, mac, m + 8, ip + 8, 0xe0, m + 8,
				      mac);
	neigh_teach6(o, ip + 8, p->src_mac);
}

void neigh_input(const struct neigh_env *e, const struct pkt *p, struct neigh_out *o)
{
	o->verdict = NEIGH_DROPPED;
	o->reply_len = o->teach_len = 0;
	if (p->l3 == PKT_ARP)
		neigh_arp(e, p, o);
	else if (p->l3 == PKT_IP6 && p->proto == IPPROTO_ICMPV6 && p->l4_off)
		neigh_nd(e, p, o);
}
