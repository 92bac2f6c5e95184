/* SPDX-License-Identifier: Apache-2.0 */
/* hostaddr.c - the host's own addresses, kept current: a NETLINK_ROUTE socket subscribed
 * to address changes (opened at start-up, before the privilege drop and seccomp), then
 * getifaddrs() for what is there already. Every address of every interface is handed to
 * the policy (policy_host_add), which treats it as internal in every mode: without this,
 * an allow-all sandbox would reach the host's services on its public address through
 * slirp, which connects from the host itself.
 *
 * Opening the socket before reading the list means no change is missed between the two.
 * When the kernel drops notifications (ENOBUFS: the socket's buffer overflowed) the list
 * is read again with an RTM_GETADDR dump on the same socket; addresses removed meanwhile
 * stay listed as the host's (refused, never wrongly allowed) until their RTM_DELADDR.
 * Messages are accepted from the kernel only (sender port id 0) and walked with bounds
 * checks like any other input. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/net.h"

static void hostaddr_note(struct net *n, struct policy *p, const struct net_addr *a, bool add)
{
	char s[INET6_ADDRSTRLEN];

	if (!add) {
		policy_host_del(p, a);
		return;
	}
	if (!policy_host_add(p, a) && n)
		net_log(n, "host address %s: more than %d host addresses, not tracked",
			net_addr_str(a, s, sizeof(s)), POLICY_MAX_HOST_ADDRS);
}

int hostaddr_apply(struct net *n, struct policy *p, const uint8_t *buf, size_t len)
{
	int changes = 0;

	while (len >= sizeof(struct nlmsghdr)) {
		struct nlmsghdr h;

		memcpy(&h, buf, sizeof(h));
		if (h.nlmsg_len < sizeof(h) || h.nlmsg_len > len)
			return -EINVAL;
		if (h.nlmsg_type == NLMSG_DONE || h.nlmsg_type == NLMSG_ERROR)
			return changes;
		if ((h.nlmsg_type == RTM_NEWADDR || h.nlmsg_type == RTM_DELADDR) &&
		    h.nlmsg_len >= NLMSG_LENGTH(sizeof(struct ifaddrmsg))) {
			struct ifaddrmsg ifa;
			struct net_addr local = { 0 }, addr = { 0 };
			size_t off = NLMSG_LENGTH(sizeof(ifa)), end = h.nlmsg_len;
			size_t alen;

			memcpy(&ifa, buf + NLMSG_HDRLEN, sizeof(ifa));
			alen = ifa.ifa_family == AF_INET ? 4 : ifa.ifa_family == AF_INET6 ? 16 : 0;
			off = NLMSG_ALIGN(off);
			while (alen && off + sizeof(struct rtattr) <= end) {
				struct rtattr ra;

				memcpy(&ra, buf + off, sizeof(ra));
				if (ra.rta_len < sizeof(ra) || ra.rta_len > end - off)
					break;
				if ((ra.rta_type == IFA_LOCAL || ra.rta_type == IFA_ADDRESS) &&
				    ra.rta_len == RTA_LENGTH(alen)) {
					struct net_addr *dst = ra.rta_type == IFA_LOCAL ? &local
											: &addr;
					dst->family = ifa.ifa_family;
					memcpy(dst->a, buf + off + RTA_LENGTH(0), alen);
				}
				off += RTA_ALIGN(ra.rta_len);
			}
			/* IPv4: IFA_LOCAL is the address, IFA_ADDRESS the peer on a point-to-point
			 * link; IPv6 gives IFA_ADDRESS (and IFA_LOCAL only on such links). Both
			 * are taken: refusing a peer's address too errs on the safe side. */
			if (local.family) {
				hostaddr_note(n, p, &local, h.nlmsg_type == RTM_NEWADDR);
				changes++;
			}
			if (addr.family && (!local.family || !net_addr_eq(&local, &addr))) {
				hostaddr_note(n, p, &addr, h.nlmsg_type == RTM_NEWADDR);
				changes++;
			}
		}
		size_t step = NLMSG_ALIGN(h.nlmsg_len);
		if (step >= len)
			break;
		buf += step;
		len -= step;
	}
	return changes;
}

/* Ask the kernel for every address again (after lost notifications). */
static void hostaddr_dump(struct net *n)
{
	struct {
		struct nlmsghdr h;
		struct ifaddrmsg ifa;
	} req;
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = NLMSG_LENGTH(sizeof(req.ifa));
	req.h.nlmsg_type = RTM_GETADDR;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.h.nlmsg_seq = 1;
	req.ifa.ifa_family = AF_UNSPEC;
	if (sendto(n->nl_fd, &req, req.h.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		net_log(n, "host addresses: cannot ask for the list again: %s", strerror(errno));
}

int hostaddr_open(struct net *n)
{
	struct sockaddr_nl sa = {
		.nl_family = AF_NETLINK,
		.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR,
	};
	struct ifaddrs *ifs, *i;
	int sz = 1 << 20;

	n->nl_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (n->nl_fd < 0)
		return -errno;
	setsockopt(n->nl_fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (bind(n->nl_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	if (getifaddrs(&ifs) < 0)
		return -errno;
	for (i = ifs; i; i = i->ifa_next) {
		struct net_addr a = { 0 };

		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			a.family = AF_INET;
			memcpy(a.a, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			a.family = AF_INET6;
			memcpy(a.a, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
		} else {
			continue;
		}
		hostaddr_note(n, n->policy, &a, true);
	}
	freeifaddrs(ifs);
	return 0;
}

void hostaddr_input(struct net *n)
{
	uint8_t buf[32768] __attribute__((aligned(4)));

	for (int k = 0; k < 64; k++) {
		struct sockaddr_nl from;
		socklen_t fl = sizeof(from);
		ssize_t got = recvfrom(n->nl_fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);

		if (got < 0 && errno == ENOBUFS) {
			net_log(n, "host addresses: notifications lost; reading the list again");
			hostaddr_dump(n);
			continue;
		}
		if (got <= 0)
			return;
		if (fl < sizeof(from) || from.nl_family != AF_NETLINK || from.nl_pid != 0)
			continue;               /* only the kernel speaks here */
		if (hostaddr_apply(n, n->policy, buf, (size_t)got) < 0)
			n->stats.malformed++;
	}
}

void hostaddr_close(struct net *n)
{
	if (n->nl_fd >= 0)
		close(n->nl_fd);
	n->nl_fd = -1;
}
