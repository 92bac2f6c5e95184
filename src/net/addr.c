/* SPDX-License-Identifier: Apache-2.0 */
/* addr.c - IPv4/IPv6 addresses for the policy engine: parsing, printing, prefix tests and
 * the list of internal ranges a looked-up name must not lead to unless listed. */
#include "net/addr.h"
#include "net/bytes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const uint8_t mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

int net_addr_parse(const char *s, struct net_addr *out)
{
	struct net_addr a;

	memset(&a, 0, sizeof(a));
	if (!s || !*s || strlen(s) >= INET6_ADDRSTRLEN)
		return -EINVAL;
	if (inet_pton(AF_INET, s, a.a) == 1) {
		a.family = AF_INET;
	} else if (inet_pton(AF_INET6, s, a.a) == 1) {
		a.family = AF_INET6;
	} else {
		return -EINVAL;
	}
	*out = a;
	return 0;
}

const char *net_addr_str(const struct net_addr *a, char *buf, size_t len)
{
	if (!len)
		return buf;
	buf[0] = '\0';
	if (!a || (a->family != AF_INET && a->family != AF_INET6)) {
		snprintf(buf, len, "(none)");
		return buf;
	}
	if (!inet_ntop(a->family, a->a, buf, (socklen_t)(len > 1024 ? 1024 : len)))
		buf[0] = '\0';
	return buf;
}

bool net_addr_eq(const struct net_addr *x, const struct net_addr *y)
{
	if (x->family != y->family)
		return false;
	if (x->family == AF_INET)
		return !memcmp(x->a, y->a, 4);
	if (x->family == AF_INET6)
		return !memcmp(x->a, y->a, 16);
	return true;
}

bool net_addr_in(const struct net_addr *a, const struct net_addr *net, int prefix)
{
	int bits = a->family == AF_INET ? 32 : a->family == AF_INET6 ? 128 : -1;
	int full, rest;

	if (a->family != net->family || bits < 0 || prefix < 0 || prefix > bits)
		return false;
	full = prefix / 8;
	rest = prefix % 8;
	if (memcmp(a->a, net->a, (size_t)full))
		return false;
	if (rest) {
		uint8_t mask = (uint8_t)(0xff << (8 - rest));
		if ((a->a[full] & mask) != (net->a[full] & mask))
			return false;
	}
	return true;
}

bool net_addr_is_mapped(const struct net_addr *a)
{
	return a->family == AF_INET6 && !memcmp(a->a, mapped_prefix, 12);
}

void net_addr_unmap(const struct net_addr *in, struct net_addr *out)
{
	struct net_addr a = *in;

	if (net_addr_is_mapped(in)) {
		memset(&a, 0, sizeof(a));
		a.family = AF_INET;
		memcpy(a.a, in->a + 12, 4);
	}
	*out = a;
}

void net_addr_mask(struct net_addr *a, int prefix)
{
	int bits = a->family == AF_INET ? 32 : 128;

	if (prefix < 0)
		prefix = 0;
	for (int i = 0; i < 16; i++) {
		int keep = prefix - i * 8;
		if (i * 8 >= bits || keep <= 0)
			a->a[i] = 0;
		else if (keep < 8)
			a->a[i] &= (uint8_t)(0xff << (8 - keep));
	}
}

static bool v4_internal(const uint8_t *b)
{
	uint32_t x = net_rd32(b);
	static const struct { uint32_t net; int prefix; } r[] = {
		{ 0x00000000, 8 },      /* 0/8 "this network", incl. 0.0.0.0 */
		{ 0x0a000000, 8 },      /* 10/8 */
		{ 0x64400000, 10 },     /* 100.64/10 CGNAT */
		{ 0x7f000000, 8 },      /* 127/8 loopback */
		{ 0xa9fe0000, 16 },     /* 169.254/16 link-local, metadata */
		{ 0xac100000, 12 },     /* 172.16/12 */
		{ 0xc0000000, 24 },     /* 192.0.0/24 IETF protocol assignments */
		{ 0xc0a80000, 16 },     /* 192.168/16 */
		{ 0xe0000000, 4 },      /* 224/4 multicast */
		{ 0xf0000000, 4 },      /* 240/4 reserved, incl. 255.255.255.255 broadcast */
	};

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		uint32_t mask = r[i].prefix ? 0xffffffffu << (32 - r[i].prefix) : 0;
		if ((x & mask) == r[i].net)
			return true;
	}
	return false;
}

bool net_addr_is_internal(const struct net_addr *a)
{
	const uint8_t *b = a->a;
	static const uint8_t zero[12];
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };

	if (a->family == AF_INET)
		return v4_internal(b);
	if (a->family != AF_INET6)
		return true;            /* no address at all: never a destination */
	if (!memcmp(b, mapped_prefix, 12) || !memcmp(b, nat64, 12))
		return v4_internal(b + 12);
	if (!memcmp(b, zero, 12))
		return true;            /* ::, ::1 and the deprecated IPv4-compatible ::/96 */
	if ((b[0] & 0xfe) == 0xfc)
		return true;            /* fc00::/7 ULA */
	if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
		return true;            /* fe80::/10 link-local */
	if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0)
		return true;            /* fec0::/10 old site-local */
	if (b[0] == 0xff)
		return true;            /* ff00::/8 multicast */
	return false;
}
