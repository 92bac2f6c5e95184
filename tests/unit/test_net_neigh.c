/* SPDX-License-Identifier: Apache-2.0 */
/* test_net_neigh.c - ARP and neighbour discovery answered by kosa8-net (src/net/neigh.c):
 * what gets an answer and what slirp is taught, and every kind of frame that is dropped. */
#include "net/neigh.h"
#include "t.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static const uint8_t GM[6] = { 0x52, 0x54, 0, 0x12, 0x34, 0x56 };
static struct neigh_env env;

static size_t arp(uint8_t *f, uint16_t op, const uint8_t sha[6], const char *sip,
		  const char *tip)
{
	memset(f, 0, 42);
	memset(f, 0xff, 6);
	memcpy(f + 6, sha, 6);
	f[12] = 8, f[13] = 6, f[15] = 1, f[16] = 8, f[18] = 6, f[19] = 4;
	f[20] = (uint8_t)(op >> 8), f[21] = (uint8_t)op;
	memcpy(f + 22, sha, 6);
	inet_pton(AF_INET, sip, f + 28);
	inet_pton(AF_INET, tip, f + 38);
	return 42;
}

static void run(uint8_t *f, size_t n, struct neigh_out *o)
{
	struct pkt p;

	memset(o, 0xaa, sizeof(*o));
	CHECK_EQ_INT(pkt_parse(&p, f, n), 0);
	neigh_input(&env, &p, o);
}

static uint16_t csum(const uint8_t *b, size_t n, uint32_t s)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		s += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (n & 1)
		s += (uint32_t)b[n - 1] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* An NS from src for target with a source link-layer option of mac, hop limit hop. */
static size_t ns(uint8_t *f, const char *src, const char *target, const uint8_t mac[6],
		 uint8_t hop)
{
	uint8_t *ip = f + 14, *m = ip + 40, ph[8] = { 0, 0, 0, 32, 0, 0, 0, 58 };
	uint16_t c;

	memset(f, 0, 86);
	f[0] = 0x33, f[1] = 0x33, f[2] = 0xff, f[5] = 2;
	memcpy(f + 6, GM, 6);
	f[12] = 0x86, f[13] = 0xdd;
	ip[0] = 0x60, ip[5] = 32, ip[6] = 58, ip[7] = hop;
	inet_pton(AF_INET6, src, ip + 8);
	inet_pton(AF_INET6, "ff02::1:ff00:2", ip + 24);
	m[0] = 135;
	inet_pton(AF_INET6, target, m + 8);
	m[24] = 1, m[25] = 1;
	memcpy(m + 26, mac, 6);
	c = csum(ph, 8, 0);
	c = csum(ip + 8, 32, (uint16_t)~c);
	c = csum(m, 32, (uint16_t)~c);
	m[2] = (uint8_t)(c >> 8), m[3] = (uint8_t)c;
	return 86;
}

int main(void)
{
	uint8_t f[128], liar[6] = { 2, 0, 0, 0, 0, 0x66 };
	struct neigh_out o;
	struct pkt r;

	net_addr_parse("10.0.2.0", &env.net4);
	net_addr_parse("10.0.2.2", &env.gw4);
	net_addr_parse("10.0.2.3", &env.dns4);
	net_addr_parse("fd00::", &env.net6);
	net_addr_parse("fd00::2", &env.gw6);
	net_addr_parse("fd00::3", &env.dns6);

	/* ARP for the gateway: a reply with slirp's MAC, and slirp is taught the guest */
	run(f, arp(f, 1, GM, "10.0.2.15", "10.0.2.2"), &o);
	CHECK_EQ_INT(o.verdict, NEIGH_ANSWERED);
	CHECK_EQ_INT(o.reply_len, 60);
	CHECK(!memcmp(o.reply, GM, 6));
	CHECK(!memcmp(o.reply + 22, "\x52\x55\x0a\x00\x02\x02", 6));
	CHECK_EQ_INT(o.reply[21], 2);
	CHECK_EQ_INT(o.teach_len, 60);
	CHECK_EQ_INT(pkt_parse(&r, o.teach, o.teach_len), 0);
	CHECK_EQ_INT(r.l3, PKT_ARP);
	CHECK(!memcmp(o.teach + 22, GM, 6));            /* sender: the guest */
	/* the resolver; a reply from the guest (taught, not answered); a probe (answered,
	 * nothing taught) */
	run(f, arp(f, 1, GM, "10.0.2.15", "10.0.2.3"), &o);
	CHECK(o.reply_len && !memcmp(o.reply + 22, "\x52\x55\x0a\x00\x02\x03", 6));
	/* the broker's address: answered only in a sandbox that has one */
	run(f, arp(f, 1, GM, "10.0.2.15", "10.0.2.4"), &o);
	CHECK_EQ_INT(o.reply_len, 0);
	net_addr_parse("10.0.2.4", &env.broker4);
	run(f, arp(f, 1, GM, "10.0.2.15", "10.0.2.4"), &o);
	CHECK(o.reply_len && !memcmp(o.reply + 22, "\x52\x55\x0a\x00\x02\x04", 6));
	env.broker4 = (struct net_addr){ 0 };
	run(f, arp(f, 1, GM, "10.0.2.15", "10.0.2.3"), &o);
	run(f, arp(f, 2, GM, "10.0.2.15", "10.0.2.2"), &o);
	CHECK(o.verdict == NEIGH_ANSWERED && !o.reply_len && o.teach_len);
	run(f, arp(f, 1, GM, "0.0.0.0", "10.0.2.2"), &o);
	CHECK(o.reply_len && !o.teach_len);
	/* dropped: nobody there, sender off the network or slirp's, a lying or multicast
	 * sender MAC, an unknown op */
	static const char *const bad[][2] = { { "10.0.2.15", "10.0.2.77" },
					      { "192.0.2.9", "10.0.2.2" },
					      { "10.0.2.2", "10.0.2.2" },
					      { "10.0.2.255", "10.0.2.2" } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		run(f, arp(f, 1, GM, bad[i][0], bad[i][1]), &o);
		CHECK(o.verdict == NEIGH_DROPPED && !o.reply_len && !o.teach_len);
	}
	arp(f, 1, GM, "10.0.2.15", "10.0.2.2");
	memcpy(f + 22, liar, 6);
	run(f, 42, &o);
	CHECK(o.verdict == NEIGH_DROPPED && !o.reply_len && !o.teach_len);
	run(f, arp(f, 1, (const uint8_t *)"\xff\xff\xff\xff\xff\xff", "10.0.2.15", "10.0.2.2"),
	    &o);
	CHECK(o.verdict == NEIGH_DROPPED && !o.reply_len);
	run(f, arp(f, 3, GM, "10.0.2.15", "10.0.2.2"), &o);
	CHECK(o.verdict == NEIGH_DROPPED && !o.reply_len);

	/* NS for the gateway: an NA (hop limit 255, MAC 52:56:...), slirp taught */
	run(f, ns(f, "fd00::15", "fd00::2", GM, 255), &o);
	CHECK_EQ_INT(o.verdict, NEIGH_ANSWERED);
	CHECK_EQ_INT(o.reply_len, 86);
	CHECK_EQ_INT(pkt_parse(&r, o.reply, o.reply_len), 0);
	CHECK(r.proto == IPPROTO_ICMPV6 && r.icmp_type == 136 && r.ttl == 255);
	CHECK(!memcmp(o.reply + 14 + 40 + 26, "\x52\x56\x00\x00\x00\x02", 6));
	CHECK_EQ_INT(o.teach_len, 86);
	/* its checksum is right: answered in turn when fed back as the guest's NA */
	{
		uint8_t t[NEIGH_FRAME_MAX];
		size_t tl = o.teach_len;

		memcpy(t, o.teach, tl);
		run(t, tl, &o);
		CHECK_EQ_INT(o.verdict, NEIGH_ANSWERED);
		CHECK(!o.reply_len && o.teach_len);
	}
	/* fe80::2 from a link-local source; duplicate address detection */
	run(f, ns(f, "fe80::5054:ff:fe12:3456", "fe80::2", GM, 255), &o);
	CHECK(o.reply_len && o.teach_len);
	run(f, ns(f, "::", "fd00::2", GM, 255), &o);
	CHECK(o.reply_len && !o.teach_len && o.reply[0] == 0x33);
	/* dropped: another target, hop limit, a lying option, a foreign source; a bad
	 * checksum is malformed */
	run(f, ns(f, "fd00::15", "fd00::99", GM, 255), &o);
	CHECK(o.verdict == NEIGH_DROPPED && !o.reply_len && !o.teach_len);
	run(f, ns(f, "fd00::15", "fd00::2", GM, 64), &o);
	CHECK(o.verdict == NEIGH_DROPPED && !o.reply_len);
	run(f, ns(f, "fd00::15", "fd00::2", liar, 255), &o);
	CHECK(o.verdict == NEIGH_DROPPED && !o.reply_len);
	run(f, ns(f, "2001:db8::1", "fd00::2", GM, 255), &o);
	CHECK(o.verdict == NEIGH_DROPPED && !o.reply_len);
	ns(f, "fd00::15", "fd00::2", GM, 255);
	f[14 + 40 + 2] ^= 0x55;
	run(f, 86, &o);
	CHECK(o.verdict == NEIGH_MALFORMED && !o.reply_len && !o.teach_len);
	return T_DONE();
}
