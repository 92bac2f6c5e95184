/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_frame.c - libFuzzer target: arbitrary bytes as a guest Ethernet frame through
 * pkt_parse(), then what kosa8-net does with a frame that parses: every builder (TCP RST
 * both ways, ICMP unreachable, UDP reply) with its output parsed back, and policy_decide()
 * on the frame's destination under a fixed policy with a few pins.
 *
 * Any abort() below is a broken invariant, not just a sanitizer report: an offset outside
 * the frame, a built frame that does not parse or is not what was asked for. */
#include "net/pkt.h"
#include "net/policy.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct policy *pol;
static struct net_addr gw4, gw6;

static void fuzz_setup(void)
{
	static const char *rules[] = { "example.org:443", "*.cdn.test", "203.0.113.0/24:53",
				       "[2001:db8::/32]:443", "127.0.0.1:8080", "10.1.2.3" };
	struct net_addr a;
	char err[256];

	pol = calloc(1, sizeof(*pol));
	if (!pol || policy_set(pol, POLICY_ALLOW_LIST, rules, 6, err, sizeof(err)))
		abort();
	net_addr_parse("10.0.2.2", &gw4);
	net_addr_parse("fd00::2", &gw6);
	net_addr_parse("93.184.216.34", &a);
	policy_pin(pol, "example.org", 0, &a, 60, 0);
	net_addr_parse("2606:2800:220:1::1", &a);
	policy_pin(pol, "a.cdn.test", 1, &a, 60, 0);
	net_addr_parse("10.1.2.3", &a);
	policy_pin(pol, "a.cdn.test", 1, &a, 60, 0);
}

static void check_offsets(const struct pkt *p)
{
	if (p->l3_off > p->len || p->l4_off > p->len || p->payload_off > p->len ||
	    p->payload_len > p->len - p->payload_off)
		abort();
	if (p->l4_off && p->payload_len && p->payload_off < p->l4_off)
		abort();
	if (p->l3 == PKT_IP4 || p->l3 == PKT_IP6) {
		if (p->src.family != (p->l3 == PKT_IP4 ? AF_INET : AF_INET6))
			abort();
		if (p->fragment && !p->first_fragment && p->l4_off)
			abort();
	}
}

/* A frame we built: it parses, it is an IP frame of the protocol asked, addressed back. */
static void check_built(const uint8_t *out, size_t n, const struct pkt *in, int proto,
			bool swapped)
{
	struct pkt r;
	uint8_t *copy;

	if (!n)
		return;
	copy = malloc(n);
	memcpy(copy, out, n);
	if (pkt_parse(&r, copy, n) || r.l3 != in->l3 || r.proto != proto || !r.l4_off)
		abort();
	if (!net_addr_eq(&r.src, swapped ? &in->dst : &in->src) ||
	    !net_addr_eq(&r.dst, swapped ? &in->src : &in->dst))
		abort();
	if (r.fragment)
		abort();
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t out[PKT_MAX_FRAME + 2048];
	struct policy_verdict v;
	struct pkt p;
	uint8_t *f;
	size_t n;

	if (!pol)
		fuzz_setup();
	if (size > PKT_MAX_FRAME + 16)
		return 0;
	/* an exact-size copy, so a read one byte past the frame is caught */
	f = malloc(size ? size : 1);
	memcpy(f, data, size);
	if (pkt_parse(&p, f, size) != 0) {
		free(f);
		return 0;
	}
	check_offsets(&p);
	if (p.l3 == PKT_IP4 || p.l3 == PKT_IP6) {
		n = pkt_build_tcp_rst(out, sizeof(out), &p);
		check_built(out, n, &p, IPPROTO_TCP, true);
		n = pkt_build_tcp_rst_outbound(out, sizeof(out), &p);
		check_built(out, n, &p, IPPROTO_TCP, false);
		n = pkt_build_unreach(out, sizeof(out), &p, 13, 1);
		check_built(out, n, &p, p.l3 == PKT_IP4 ? IPPROTO_ICMP : IPPROTO_ICMPV6, true);
		if (n && p.l3 == PKT_IP6 && n - p.l3_off > 1280)
			abort();
		n = pkt_build_udp_reply(out, sizeof(out), &p, p.frame + p.payload_off,
					p.payload_len);
		check_built(out, n, &p, IPPROTO_UDP, true);
		/* small buffers: never written past */
		for (size_t cap = 0; cap < 80; cap += 13)
			if (pkt_build_tcp_rst(out, cap, &p) > cap)
				abort();
		policy_decide(pol, &p.dst, p.dport, p.proto, &gw4, &gw6, 1, &v);
		if (!v.pass && !v.reason[0])
			abort();
		policy_decide(pol, &p.src, p.sport, p.proto, &gw4, &gw6, 1, &v);
	}
	free(f);
	return 0;
}
