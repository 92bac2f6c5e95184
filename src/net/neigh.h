/* SPDX-License-Identifier: Apache-2.0 */
/* neigh.h - ARP and IPv6 neighbour discovery from the guest, answered by kosa8-net (the
 * frames are never handed to libslirp). Pure: it decides and builds frames; engine.c
 * sends them. neigh.c explains what is answered and what is dropped. */
#ifndef K8_NET_NEIGH_H
#define K8_NET_NEIGH_H

#include <stddef.h>
#include <stdint.h>

#include "net/addr.h"
#include "net/pkt.h"

#define NEIGH_FRAME_MAX 86

/* The virtual network: 10.0.2.0/24 and fd00::/64, slirp's gateway and resolver. */
struct neigh_env {
	struct net_addr net4, gw4, dns4, net6, gw6, dns6;
	struct net_addr broker4;        /* the egress broker's address; family 0: none */
};

enum neigh_verdict { NEIGH_DROPPED = 0, NEIGH_ANSWERED, NEIGH_MALFORMED };

struct neigh_out {
	enum neigh_verdict verdict;
	uint8_t reply[NEIGH_FRAME_MAX]; /* to the guest: an ARP reply or an advertisement */
	size_t reply_len;               /* 0: none */
	uint8_t teach[NEIGH_FRAME_MAX]; /* to slirp: the guest's address and MAC, in a frame
	                                 * built here from checked fields only */
	size_t teach_len;               /* 0: none */
};

/* An ARP frame, or an ICMPv6 message of types 133-137, from the guest (parsed by
 * pkt_parse). Anything else: NEIGH_DROPPED with no frames. */
void neigh_input(const struct neigh_env *e, const struct pkt *p, struct neigh_out *o);

#endif
