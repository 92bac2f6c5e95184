/* SPDX-License-Identifier: Apache-2.0 */
/* test_net_hostaddr.c - the host's addresses from rtnetlink messages (src/net/hostaddr.c):
 * RTM_NEWADDR adds, RTM_DELADDR removes, IFA_LOCAL and IFA_ADDRESS both count, internal
 * addresses are not stored, and messages or attributes whose lengths lie are not read
 * beyond the buffer. */
#include "net/net.h"
#include "t.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdlib.h>
#include <string.h>

struct msgbuf {
	uint8_t b[4096] __attribute__((aligned(4)));
	size_t len;
};

/* Append one address message with the given attributes (type, text address) pairs. */
static void add_msg(struct msgbuf *m, uint16_t type, int family, int nattr, const int *atype,
		    const char *const *addrs)
{
	size_t start = m->len, alen = family == AF_INET ? 4 : 16;
	struct nlmsghdr h = { .nlmsg_type = type };
	struct ifaddrmsg ifa = { .ifa_family = (uint8_t)family, .ifa_index = 1 };
	size_t off = start + NLMSG_LENGTH(sizeof(ifa));

	memcpy(m->b + start + NLMSG_HDRLEN, &ifa, sizeof(ifa));
	off = NLMSG_ALIGN(off);
	for (int i = 0; i < nattr; i++) {
		struct rtattr ra = { .rta_len = (unsigned short)RTA_LENGTH(alen),
				     .rta_type = (unsigned short)atype[i] };

		memcpy(m->b + off, &ra, sizeof(ra));
		inet_pton(family, addrs[i], m->b + off + RTA_LENGTH(0));
		off += RTA_ALIGN(ra.rta_len);
	}
	h.nlmsg_len = (uint32_t)(off - start);
	memcpy(m->b + start, &h, sizeof(h));
	m->len = NLMSG_ALIGN(off);
}

static bool is_host(const struct policy *p, const char *s)
{
	struct net_addr a;

	return net_addr_parse(s, &a) == 0 && policy_is_host(p, &a);
}

int main(void)
{
	struct policy *p = calloc(1, sizeof(*p));
	struct msgbuf m = { .len = 0 };
	static const int local_addr[] = { IFA_LOCAL, IFA_ADDRESS };
	static const int addr_only[] = { IFA_ADDRESS };

	/* IPv4 with a peer (point-to-point): both; IPv6; a private one (not stored) */
	add_msg(&m, RTM_NEWADDR, AF_INET, 2, local_addr,
		(const char *const[]){ "192.0.2.2", "192.0.2.1" });
	add_msg(&m, RTM_NEWADDR, AF_INET6, 1, addr_only, (const char *const[]){ "2001:db8::2" });
	add_msg(&m, RTM_NEWADDR, AF_INET, 1, local_addr, (const char *const[]){ "10.1.1.1" });
	add_msg(&m, RTM_NEWADDR, AF_INET6, 1, addr_only, (const char *const[]){ "fe80::1" });
	CHECK_EQ_INT(hostaddr_apply(NULL, p, m.b, m.len), 5);
	CHECK_EQ_INT(p->nhost, 3);
	CHECK(is_host(p, "192.0.2.2"));
	CHECK(is_host(p, "192.0.2.1"));
	CHECK(is_host(p, "2001:db8::2"));
	CHECK(is_host(p, "64:ff9b::c000:202"));         /* NAT64 of 192.0.2.2 */
	CHECK(!is_host(p, "10.1.1.1"));                 /* internal anyway */

	/* removal */
	m.len = 0;
	add_msg(&m, RTM_DELADDR, AF_INET, 2, local_addr,
		(const char *const[]){ "192.0.2.2", "192.0.2.1" });
	CHECK_EQ_INT(hostaddr_apply(NULL, p, m.b, m.len), 2);
	CHECK(!is_host(p, "192.0.2.2"));
	CHECK_EQ_INT(p->nhost, 1);

	/* a message longer than the buffer: nothing read past it */
	m.len = 0;
	add_msg(&m, RTM_NEWADDR, AF_INET, 1, local_addr, (const char *const[]){ "198.18.0.1" });
	CHECK_EQ_INT(hostaddr_apply(NULL, p, m.b, m.len - 4), -EINVAL);
	CHECK(!is_host(p, "198.18.0.1"));
	/* an attribute whose length runs past its message: ignored, the message still ends */
	{
		struct rtattr ra;
		size_t at = NLMSG_ALIGN(NLMSG_LENGTH(sizeof(struct ifaddrmsg)));

		memcpy(&ra, m.b + at, sizeof(ra));
		ra.rta_len = 200;
		memcpy(m.b + at, &ra, sizeof(ra));
		CHECK_EQ_INT(hostaddr_apply(NULL, p, m.b, m.len), 0);
		ra.rta_len = 6;                         /* wrong size for an IPv4 address */
		memcpy(m.b + at, &ra, sizeof(ra));
		CHECK_EQ_INT(hostaddr_apply(NULL, p, m.b, m.len), 0);
		CHECK(!is_host(p, "198.18.0.1"));
	}
	/* a header shorter than itself, an empty buffer, NLMSG_DONE */
	{
		struct nlmsghdr h = { .nlmsg_len = 3, .nlmsg_type = RTM_NEWADDR };
		uint8_t b[64] __attribute__((aligned(4))) = { 0 };

		memcpy(b, &h, sizeof(h));
		CHECK_EQ_INT(hostaddr_apply(NULL, p, b, sizeof(b)), -EINVAL);
		CHECK_EQ_INT(hostaddr_apply(NULL, p, b, 0), 0);
		h.nlmsg_len = sizeof(h);
		h.nlmsg_type = NLMSG_DONE;
		memcpy(b, &h, sizeof(h));
		CHECK_EQ_INT(hostaddr_apply(NULL, p, b, sizeof(b)), 0);
	}
	/* an unknown family carries nothing */
	m.len = 0;
	add_msg(&m, RTM_NEWADDR, AF_INET, 1, local_addr, (const char *const[]){ "198.18.0.2" });
	((struct ifaddrmsg *)(m.b + NLMSG_HDRLEN))->ifa_family = 99;
	CHECK_EQ_INT(hostaddr_apply(NULL, p, m.b, m.len), 0);
	CHECK_EQ_INT(p->nhost, 1);
	free(p);
	return T_DONE();
}
