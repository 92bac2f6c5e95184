/* SPDX-License-Identifier: Apache-2.0 */
/* netparse.c - how many guest frames per second kosa8-net's pure half gets through:
 * pkt_parse() alone, and pkt_parse() + policy_decide(), over a realistic mix: TCP data
 * to an allowed, pinned address (70%), SYNs to refused addresses (20%), UDP DNS queries
 * to the resolver address (10%), IPv4 and some IPv6. Prints one line:
 *   netparse: N frames/s parse+policy (M frames/s parse only) */
#include "net/pkt.h"
#include "net/policy.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NFRAMES 1024
#define FRAME_CAP 1600

static uint8_t frames[NFRAMES][FRAME_CAP];
static size_t lens[NFRAMES];

static void put16(uint8_t *b, unsigned v) { b[0] = (uint8_t)(v >> 8); b[1] = (uint8_t)v; }
static void put32(uint8_t *b, uint32_t v) { put16(b, v >> 16); put16(b + 2, v & 0xffff); }

/* Ethernet + IPv4 or IPv6 + TCP/UDP with `plen` payload bytes, checksums left zero (the
 * parser does not check them; the guest's stack would have filled them). */
static size_t netparse_frame(uint8_t *f, int v6, int proto, const uint8_t *dst,
			     unsigned dport, uint8_t tcp_flags, size_t plen)
{
	static const uint8_t src4[4] = { 10, 0, 2, 15 };
	static const uint8_t src6[16] = { 0xfe, 0xc0, [15] = 0x15 };
	size_t l4len = (proto == IPPROTO_TCP ? 32 : 8) + plen, off;
	uint8_t *ip = f + 14, *l4;

	memset(f, 0, 14);
	f[0] = 0x52; f[1] = 0x55; f[6] = 0x52; f[7] = 0x54;
	put16(f + 12, v6 ? 0x86dd : 0x0800);
	if (!v6) {
		memset(ip, 0, 20);
		ip[0] = 0x45;
		put16(ip + 2, (unsigned)(20 + l4len));
		put16(ip + 6, 0x4000);
		ip[8] = 64;
		ip[9] = (uint8_t)proto;
		memcpy(ip + 12, src4, 4);
		memcpy(ip + 16, dst, 4);
		off = 34;
	} else {
		memset(ip, 0, 40);
		ip[0] = 0x60;
		put16(ip + 4, (unsigned)l4len);
		ip[6] = (uint8_t)proto;
		ip[7] = 64;
		memcpy(ip + 8, src6, 16);
		memcpy(ip + 24, dst, 16);
		off = 54;
	}
	l4 = f + off;
	memset(l4, 0, l4len);
	put16(l4, 40000 + (unsigned)(rand() % 20000));
	put16(l4 + 2, dport);
	if (proto == IPPROTO_TCP) {
		put32(l4 + 4, (uint32_t)rand());
		put32(l4 + 8, tcp_flags & 0x10 ? (uint32_t)rand() : 0);
		l4[12] = 8 << 4;        /* 12 bytes of options, as Linux sends timestamps */
		l4[13] = tcp_flags;
		put16(l4 + 14, 64240);
		l4[20] = 1; l4[21] = 1; l4[22] = 8; l4[23] = 10;
	} else {
		put16(l4 + 4, (unsigned)l4len);
	}
	return off + l4len;
}

static double netparse_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
	static const char *rules[] = {
		"example.org:443", "*.github.com", "*.githubusercontent.com", "pypi.org",
		"files.pythonhosted.org", "registry.npmjs.org", "deb.debian.org", "api.test:8443",
		"203.0.113.0/24:53", "[2001:db8::/32]:443", "198.18.0.0/15", "127.0.0.1:8080",
		"*.s3.amazonaws.com", "crates.io", "static.crates.io", "index.crates.io",
		"proxy.golang.org", "sum.golang.org", "objects.githubusercontent.com", "ghcr.io",
	};
	static const uint8_t pinned4[4] = { 93, 184, 216, 34 };
	static const uint8_t pinned6[16] = { 0x26, 0x06, 0x28, 0x00, 0x02, 0x20, 0, 1, [15] = 1 };
	static const uint8_t resolver[4] = { 10, 0, 2, 3 };
	struct policy *p = calloc(1, sizeof(*p));
	struct net_addr a, gw4, gw6;
	char err[256];
	double secs = 1.5, t0, t_parse, t_both;
	unsigned long n_parse = 0, n_both = 0, passed = 0;
	volatile unsigned long sink = 0;

	if (!p || policy_set(p, POLICY_ALLOW_LIST, rules, (int)(sizeof(rules) / sizeof(rules[0])),
			     err, sizeof(err))) {
		fprintf(stderr, "netparse: %s\n", err);
		return 1;
	}
	net_addr_parse("10.0.2.2", &gw4);
	net_addr_parse("fd00::2", &gw6);
	/* a few hundred live pins, as after a package install; ours among them */
	for (int i = 0; i < 300; i++) {
		a.family = AF_INET;
		memset(a.a, 0, sizeof(a.a));
		a.a[0] = 151; a.a[1] = 101; a.a[2] = (uint8_t)(i >> 8); a.a[3] = (uint8_t)i;
		policy_pin(p, "pypi.org", 3, &a, 300, 0);
	}
	a.family = AF_INET;
	memcpy(a.a, pinned4, 4);
	policy_pin(p, "example.org", 0, &a, 300, 0);
	a.family = AF_INET6;
	memcpy(a.a, pinned6, 16);
	policy_pin(p, "example.org", 0, &a, 300, 0);

	srand(42);
	for (int i = 0; i < NFRAMES; i++) {
		int r = rand() % 100;

		if (r < 70) {           /* TCP data to the pinned address, v6 one in five */
			int v6 = rand() % 5 == 0;
			lens[i] = netparse_frame(frames[i], v6, IPPROTO_TCP, v6 ? pinned6 : pinned4,
						 443, 0x18, 100 + (size_t)(rand() % 1300));
		} else if (r < 90) {    /* SYNs to addresses nothing lists */
			uint8_t d[4] = { 192, 0, 2, (uint8_t)rand() };
			lens[i] = netparse_frame(frames[i], 0, IPPROTO_TCP, d, 22, 0x02, 0);
		} else {                /* a DNS query */
			lens[i] = netparse_frame(frames[i], 0, IPPROTO_UDP, resolver, 53, 0,
						 29 + (size_t)(rand() % 20));
		}
	}

	t0 = netparse_now();
	do {
		for (int k = 0; k < 64; k++)
			for (int i = 0; i < NFRAMES; i++) {
				struct pkt pk;

				sink += (unsigned long)pkt_parse(&pk, frames[i], lens[i]) + pk.dport;
			}
		n_parse += 64 * NFRAMES;
	} while ((t_parse = netparse_now() - t0) < secs);

	t0 = netparse_now();
	do {
		for (int k = 0; k < 16; k++)
			for (int i = 0; i < NFRAMES; i++) {
				struct pkt pk;
				struct policy_verdict v;

				if (pkt_parse(&pk, frames[i], lens[i]) || !pk.l4_off)
					continue;
				policy_decide(p, &pk.dst, pk.dport, pk.proto, &gw4, &gw6, 1, &v);
				passed += v.pass;
			}
		n_both += 16 * NFRAMES;
	} while ((t_both = netparse_now() - t0) < secs);

	printf("netparse: %.0f frames/s parse+policy (%.0f frames/s parse only)\n",
	       (double)n_both / t_both, (double)n_parse / t_parse);
	free(p);
	return sink == 1 && passed == 0 ? 2 : 0;
}
