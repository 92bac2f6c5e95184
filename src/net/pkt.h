/* SPDX-License-Identifier: Apache-2.0 */
/* pkt.h - bounds-checked parsing of one Ethernet frame from the guest, and builders for
 * the few frames kosa8-net writes itself (TCP RST, ICMP unreachable, UDP replies).
 *
 * Nothing here trusts a length inside the frame: every header is reached through
 * pkt_get(), which returns NULL for a range outside the frame. */
#ifndef K8_NET_PKT_H
#define K8_NET_PKT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/addr.h"

#define PKT_MAX_FRAME 65550             /* largest frame kosa8-net accepts (64 KiB + L2) */

enum pkt_l3 { PKT_OTHER = 0, PKT_ARP, PKT_IP4, PKT_IP6 };

struct pkt {
	const uint8_t *frame;
	size_t len;
	uint8_t src_mac[6], dst_mac[6];
	uint16_t ethertype;             /* after at most one 802.1Q tag */
	enum pkt_l3 l3;
	size_t l3_off;                  /* IP (or ARP) header */
	size_t l4_off;                  /* TCP/UDP/ICMP header; 0 when absent */
	size_t payload_off, payload_len;/* L4 payload (bounded by the IP length) */
	int proto;                      /* IPPROTO_TCP/UDP/ICMP/ICMPV6, other, or -1 */
	struct net_addr src, dst;
	uint16_t sport, dport;          /* host order; 0 for ICMP */
	uint8_t tcp_flags;              /* TH_SYN etc. */
	uint32_t tcp_seq, tcp_ack;
	uint8_t icmp_type, icmp_code;
	uint8_t ttl;
	bool fragment;                  /* IPv4 MF or offset != 0, or IPv6 fragment header:
	                                 * ports are unknown unless first_fragment */
	bool first_fragment;
};

/* Bounds-checked view into the frame: NULL when [off, off+len) is not inside it. */
const void *pkt_get(const struct pkt *p, size_t off, size_t len);

/* Parse one frame. Returns 0, or -EINVAL for a frame that is malformed (too short,
 * bad IP header length, IP total length beyond the frame, ...). A well-formed frame of
 * an unknown type parses with l3 = PKT_OTHER. IPv6 extension headers are walked
 * (hop-by-hop, routing, fragment, destination options; at most 8). */
int pkt_parse(struct pkt *p, const uint8_t *frame, size_t len);

/* Internet checksum helpers. */
uint32_t pkt_csum_add(uint32_t sum, const void *data, size_t len);
uint16_t pkt_csum_fold(uint32_t sum);

/* Builders. Each writes a complete Ethernet frame answering `in` (MACs, addresses and
 * ports swapped, checksums filled) into out[cap] and returns its length, or 0 when it
 * does not fit or `in` is not of the right kind. */
/* TCP RST for a guest segment: ack = in.seq + payload + SYN/FIN. Not for an RST. */
size_t pkt_build_tcp_rst(uint8_t *out, size_t cap, const struct pkt *in);
/* ICMP (v4: type 3 code `code4`; v6: type 1 code `code6`) quoting the start of `in`. */
size_t pkt_build_unreach(uint8_t *out, size_t cap, const struct pkt *in, uint8_t code4,
			 uint8_t code6);
/* UDP datagram from in.dst:in.dport back to in.src:in.sport carrying data[len]. */
size_t pkt_build_udp_reply(uint8_t *out, size_t cap, const struct pkt *in,
			   const uint8_t *data, size_t len);
/* TCP RST towards the *remote* side of a guest flow, as if the guest had sent it
 * (src = in.src): fed to slirp to make it close the host socket when a flow is cut. */
size_t pkt_build_tcp_rst_outbound(uint8_t *out, size_t cap, const struct pkt *in);

#endif
