/* SPDX-License-Identifier: Apache-2.0 */
/* addr.h - one IPv4 or IPv6 address, as the policy engine and the frame path see it. */
#ifndef K8_NET_ADDR_H
#define K8_NET_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct net_addr {
	int family;                     /* AF_INET or AF_INET6; 0: none */
	uint8_t a[16];                  /* IPv4 in a[0..3], network order */
};

/* Parse "192.0.2.1" or "2001:db8::1" (no brackets, no port). 0 or -EINVAL. */
int net_addr_parse(const char *s, struct net_addr *out);
/* Text form into buf (INET6_ADDRSTRLEN is enough); returns buf. */
const char *net_addr_str(const struct net_addr *a, char *buf, size_t len);
bool net_addr_eq(const struct net_addr *x, const struct net_addr *y);
/* True when the first `prefix` bits of a and net agree (same family only). */
bool net_addr_in(const struct net_addr *a, const struct net_addr *net, int prefix);
/* Addresses a name must not lead to unless the address itself is listed: unspecified,
 * loopback, RFC 1918, CGNAT 100.64/10, link-local (incl. 169.254.169.254 metadata),
 * multicast, broadcast, IPv6 ULA fc00::/7, link-local fe80::/10, ::1, IPv4-mapped
 * forms of all of these. */
bool net_addr_is_internal(const struct net_addr *a);
/* Added for the policy engine: an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4
 * address it carries. net_addr_unmap copies in to out, turning a mapped form into
 * AF_INET (in and out may be the same). net_addr_mask clears the bits after `prefix`. */
bool net_addr_is_mapped(const struct net_addr *a);
void net_addr_unmap(const struct net_addr *in, struct net_addr *out);
void net_addr_mask(struct net_addr *a, int prefix);

#endif
