/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_neigh.c - libFuzzer target: arbitrary bytes as a guest Ethernet frame through
 * pkt_parse() and, when it is ARP or ICMPv6, neigh_input(): kosa8-net's own answers to
 * ARP and neighbour discovery (src/net/neigh.c).
 *
 * Any abort() below is a broken invariant: a frame built for the guest or for slirp that
 * does not parse, is not ARP / a neighbour advertisement with hop limit 255, or carries
 * an address outside the virtual network. */
#include "net/neigh.h"
#include "net/pkt.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct neigh_env env;
static bool ready;

static void fuzz_setup(void)
{
	net_addr_parse("10.0.2.0", &env.net4);
	net_addr_parse("10.0.2.2", &env.gw4);
	net_addr_parse("10.0.2.3", &env.dns4);
	net_addr_parse("fd00::", &env.net6);
	net_addr_parse("fd00::2", &env.gw6);
	net_addr_parse("fd00::3", &env.dns6);
	ready = true;
}

/* A frame neigh.c built: ARP (Ethernet/IPv4) or an NA with hop limit 255. */
static void check_built(const uint8_t *f, size_t n)
{
	struct pkt r;
	uint8_t *copy;

	if (!n)
		return;
	if (n > NEIGH_FRAME_MAX)
		abort();
	copy = malloc(n);
	memcpy(copy, f, n);
	if (pkt_parse(&r, copy, n))
		abort();
	if (r.l3 == PKT_ARP) {
		if (!net_addr_in(&r.src, &env.net4, 24))
			abort();
	} else if (r.l3 != PKT_IP6 || r.proto != IPPROTO_ICMPV6 || r.icmp_type != 136 ||
		   r.ttl != 255) {
		abort();
	}
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct neigh_out o;
	struct pkt p;
	uint8_t *f;

	if (!ready)
		fuzz_setup();
	if (size > PKT_MAX_FRAME)
		return 0;
	f = malloc(size ? size : 1);             /* exact size: a read past it is caught */
	memcpy(f, data, size);
	if (pkt_parse(&p, f, size) == 0 &&
	    (p.l3 == PKT_ARP || (p.l3 == PKT_IP6 && p.proto == IPPROTO_ICMPV6))) {
		neigh_input(&env, &p, &o);
		if (o.verdict != NEIGH_ANSWERED && (o.reply_len || o.teach_len))
			abort();
		check_built(o.reply, o.reply_len);
		check_built(o.teach, o.teach_len);
	}
	free(f);
	return 0;
}
