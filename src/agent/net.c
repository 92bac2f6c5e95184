/* SPDX-License-Identifier: Apache-2.0 */
/* net.c - the VM's network: lo and the virtio-net NIC up, a static IPv4 address and
 * default route (ioctl), optionally a static IPv6 address and default route
 * (rtnetlink), /etc/resolv.conf and /etc/hosts in the VM, and the same files in each
 * new container's root.
 *
 * Everything is static, from the init request's "net" (docs/agent.md); kosa8-net on the
 * host answers ARP, NDP and DNS. Router advertisements are ignored (accept_ra 0,
 * autoconf 0 on the NIC) so the addresses are exactly the ones the host chose. There
 * are no tools in the guest (no ip, no busybox): ioctls and one netlink socket.
 */
#include "agent.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#define NET_MAC GUEST_MAC            /* what kosa8d gives the NIC (common/guest.h) */
#define NET_IF_WAIT_MS 2000

/* ---- validation ---- */

static int net_addr(json_t *o, const char *key, int family, int required, char *out,
		    struct k8_err *err)
{
	json_t *v = json_object_get(o, key);
	unsigned char bin[16];

	out[0] = '\0';
	if (!v || json_is_null(v)) {
		if (required)
			return k8_err_set(err, -EINVAL, "missing field 'net.%s'", key);
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) >= NET_ADDR_LEN ||
	    strlen(json_string_value(v)) != json_string_length(v) ||
	    inet_pton(family, json_string_value(v), bin) != 1)
		return k8_err_set(err, -EINVAL, "field 'net.%s' must be an IPv%d address", key,
				  family == AF_INET ? 4 : 6);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int net_int(json_t *o, const char *key, int min, int max, int def, int *out, struct k8_err *err)
{
	json_t *v = json_object_get(o, key);

	*out = def;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return k8_err_set(err, -EINVAL, "field 'net.%s' must be an integer in %d..%d", key, min, max);
	*out = (int)json_integer_value(v);
	return 0;
}

int net_parse(json_t *o, struct net_cfg *c, struct k8_err *err)
{
	json_t *dns, *e;
	size_t i;
	int r;

	memset(c, 0, sizeof(*c));
	if (!json_is_object(o))
		return k8_err_set(err, -EINVAL, "field 'net' must be an object");
	if ((r = net_addr(o, "ip", AF_INET, 1, c->ip, err)) < 0 ||
	    (r = net_int(o, "prefix", 1, 32, 24, &c->prefix, err)) < 0 ||
	    (r = net_addr(o, "gateway", AF_INET, 0, c->gateway, err)) < 0 ||
	    (r = net_addr(o, "ip6", AF_INET6, 0, c->ip6, err)) < 0 ||
	    (r = net_int(o, "prefix6", 1, 128, 64, &c->prefix6, err)) < 0 ||
	    (r = net_addr(o, "gateway6", AF_INET6, 0, c->gateway6, err)) < 0)
		return r;
	if (c->gateway6[0] && !c->ip6[0])
		return k8_err_set(err, -EINVAL, "field 'net.gateway6' needs 'net.ip6'");
	e = json_object_get(o, "broker_ca");
	if (e && !json_is_null(e)) {
		const char *pem = json_string_value(e);
		static const char begin[] = "-----BEGIN CERTIFICATE-----\n";
		if (!pem || json_string_length(e) >= NET_CA_MAX || strlen(pem) != json_string_length(e) ||
		    strncmp(pem, begin, sizeof(begin) - 1) || !strstr(pem, "-----END CERTIFICATE-----"))
			return k8_err_set(err, -EINVAL, "field 'net.broker_ca' must be one PEM "
					  "certificate of less than %d bytes", NET_CA_MAX);
		memcpy(c->broker_ca, pem, strlen(pem) + 1);
	}
	dns = json_object_get(o, "dns");
	if (dns && !json_is_null(dns)) {
		if (!json_is_array(dns) || json_array_size(dns) > NET_MAX_DNS)
			return k8_err_set(err, -EINVAL, "field 'net.dns' must be an array of at most %d addresses",
					  NET_MAX_DNS);
		json_array_foreach(dns, i, e) {
			unsigned char bin[16];
			const char *s = json_string_value(e);

			if (!s || json_string_length(e) >= NET_ADDR_LEN || strlen(s) != json_string_length(e) ||
			    (inet_pton(AF_INET, s, bin) != 1 && inet_pton(AF_INET6, s, bin) != 1))
				return k8_err_set(err, -EINVAL, "net.dns[%zu] must be an IPv4 or IPv6 address", i);
			memcpy(c->dns[i], s, strlen(s) + 1);
			c->ndns = (int)i + 1;
		}
	}
	return 0;
}

/* ---- the interface ---- */

/* The NIC: the one with kosa8d's MAC, else the first Ethernet that is not lo. */
static int net_find_if(char *name, size_t len)
{
	DIR *d = opendir("/sys/class/net");
	struct dirent *de;
	int found = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char path[300], *s = NULL;
		int is_mac;

		if (de->d_name[0] == '.' || !strcmp(de->d_name, "lo") || strlen(de->d_name) >= IFNAMSIZ)
			continue;
		snprintf(path, sizeof(path), "/sys/class/net/%s/type", de->d_name);
		if (read_file(path, 4096, &s, NULL) < 0)
			continue;
		if (atoi(s) != 1) { /* ARPHRD_ETHER */
			free(s);
			continue;
		}
		free(s);
		snprintf(path, sizeof(path), "/sys/class/net/%s/address", de->d_name);
		is_mac = read_file(path, 4096, &s, NULL) == 0 && !strncmp(s, NET_MAC, strlen(NET_MAC));
		free(s);
		if (!found || is_mac)
			snprintf(name, len, "%s", de->d_name);
		found = 1;
		if (is_mac)
			break;
	}
	closedir(d);
	return found ? 0 : -ENODEV;
}

static int net_if_up(int sk, const char *ifname)
{
	struct ifreq ifr;

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (ioctl(sk, SIOCGIFFLAGS, &ifr) < 0)
		return -errno;
	ifr.ifr_flags |= IFF_UP;
	return ioctl(sk, SIOCSIFFLAGS, &ifr) < 0 ? -errno : 0;
}

static void net_sysctl(const char *ifname, const char *key, const char *val)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/%s", ifname, key);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	(void)!write(fd, val, strlen(val));
	close(fd);
}

static void net_sin(struct sockaddr *sa, const char *ip)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)sa;

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	if (ip)
		inet_pton(AF_INET, ip, &sin->sin_addr);
}

static int net_ipv4(int sk, const char *ifname, const struct net_cfg *c, struct k8_err *err)
{
	struct ifreq ifr;
	struct rtentry rt;
	struct sockaddr_in *mask;

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	net_sin(&ifr.ifr_addr, c->ip);
	if (ioctl(sk, SIOCSIFADDR, &ifr) < 0)
		return k8_err_set(err, -errno, "net: address %s on %s: %s", c->ip, ifname, strerror(errno));
	net_sin(&ifr.ifr_netmask, NULL);
	mask = (struct sockaddr_in *)&ifr.ifr_netmask;
	mask->sin_addr.s_addr = htonl(c->prefix == 32 ? 0xffffffffu : ~(0xffffffffu >> c->prefix));
	if (ioctl(sk, SIOCSIFNETMASK, &ifr) < 0)
		return k8_err_set(err, -errno, "net: netmask /%d on %s: %s", c->prefix, ifname, strerror(errno));
	if (!c->gateway[0])
		return 0;
	memset(&rt, 0, sizeof(rt));
	net_sin(&rt.rt_dst, "0.0.0.0");
	net_sin(&rt.rt_genmask, "0.0.0.0");
	net_sin(&rt.rt_gateway, c->gateway);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)ifname;
	if (ioctl(sk, SIOCADDRT, &rt) < 0 && errno != EEXIST)
		return k8_err_set(err, -errno, "net: default route via %s: %s", c->gateway, strerror(errno));
	return 0;
}

/* One rtnetlink request, answered with an ACK (or an error). */
static int net_nl(int nl, struct nlmsghdr *h)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	union {
		struct nlmsghdr h;
		unsigned char b[1024];
	} ans;
	ssize_t n;

	h->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
	if (sendto(nl, h, h->nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	for (;;) {
		n = recv(nl, &ans, sizeof(ans), 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (struct nlmsghdr *m = &ans.h; NLMSG_OK(m, (size_t)n); m = NLMSG_NEXT(m, n)) {
			if (m->nlmsg_seq != h->nlmsg_seq)
				continue;
			if (m->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr *e = NLMSG_DATA(m);

				if (m->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
					return -EIO;
				return e->error;
			}
		}
	}
}

static void net_rta(struct nlmsghdr *h, size_t cap, int type, const void *p, size_t n)
{
	struct rtattr *rta = (struct rtattr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len));

	if (NLMSG_ALIGN(h->nlmsg_len) + RTA_SPACE(n) > cap)
		return; /* cannot happen: the buffers below are sized for what we add */
	rta->rta_type = (unsigned short)type;
	rta->rta_len = (unsigned short)RTA_LENGTH(n);
	if (n)
		memcpy(RTA_DATA(rta), p, n);
	h->nlmsg_len = (uint32_t)(NLMSG_ALIGN(h->nlmsg_len) + RTA_SPACE(n));
}

struct net_req {
	union {
		struct nlmsghdr h;
		unsigned char b[512];
	};
};

/* A new request: `type` with `flags`, its fixed header of `len` bytes zeroed; returns it. */
static void *net_req_start(struct net_req *req, int type, int flags, int seq, size_t len)
{
	memset(req, 0, sizeof(*req));
	req->h.nlmsg_len = (uint32_t)NLMSG_LENGTH(len);
	req->h.nlmsg_type = (unsigned short)type;
	req->h.nlmsg_flags = (unsigned short)flags;
	req->h.nlmsg_seq = (uint32_t)seq;
	return NLMSG_DATA(&req->h);
}

/* An address `a` (4 or 16 bytes by `family`)/`len` on link `idx`; `flags` IFA_F_*. */
static int net_addr_add(int nl, int family, unsigned idx, const void *a, int len, int flags,
			int seq)
{
	struct net_req req;
	struct ifaddrmsg *ifa = net_req_start(&req, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE,
					      seq, sizeof(*ifa));
	size_t n = family == AF_INET6 ? sizeof(struct in6_addr) : sizeof(struct in_addr);

	ifa->ifa_family = (unsigned char)family;
	ifa->ifa_prefixlen = (unsigned char)len;
	ifa->ifa_flags = (unsigned char)flags;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = idx;
	net_rta(&req.h, sizeof(req), IFA_LOCAL, a, n);
	net_rta(&req.h, sizeof(req), IFA_ADDRESS, a, n);
	return net_nl(nl, &req.h);
}

/* A route of the main table to `dst`/`len` (4 or 16 bytes by `family`; unused when len
 * is 0): `type` RTN_UNICAST (via gw, or on the link when gw is NULL) or RTN_UNREACHABLE
 * (no device). */
static int net_route_add(int nl, int family, unsigned idx, const void *dst, int len,
			 const void *gw, int type, int seq)
{
	struct net_req req;
	struct rtmsg *rtm = net_req_start(&req, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, seq,
					  sizeof(*rtm));
	size_t n = family == AF_INET6 ? sizeof(struct in6_addr) : sizeof(struct in_addr);

	rtm->rtm_family = (unsigned char)family;
	rtm->rtm_dst_len = (unsigned char)len;
	rtm->rtm_table = RT_TABLE_MAIN;
	rtm->rtm_protocol = RTPROT_STATIC;
	rtm->rtm_type = (unsigned char)type;
	rtm->rtm_scope = type == RTN_UNICAST && !gw ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
	if (len)
		net_rta(&req.h, sizeof(req), RTA_DST, dst, n);
	if (gw)
		net_rta(&req.h, sizeof(req), RTA_GATEWAY, gw, n);
	if (type == RTN_UNICAST)
		net_rta(&req.h, sizeof(req), RTA_OIF, &idx, sizeof(idx));
	return net_nl(nl, &req.h);
}

static int net_ipv6(const char *ifname, const struct net_cfg *c, struct k8_err *err)
{
	struct in6_addr addr, gw;
	unsigned idx = if_nametoindex(ifname);
	int nl, r;

	if (!idx)
		return k8_err_set(err, -errno, "net: %s: %s", ifname, strerror(errno));
	inet_pton(AF_INET6, c->ip6, &addr);
	nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (nl < 0)
		return k8_err_set(err, -errno, "net: netlink socket: %s", strerror(errno));

	/* The address, without duplicate address detection (the link holds the host's
	 * engine and us; DAD would leave the address unusable for a second or more). */
	if ((r = net_addr_add(nl, AF_INET6, idx, &addr, c->prefix6, IFA_F_NODAD, 1)) < 0) {
		close(nl);
		return k8_err_set(err, r, "net: address %s/%d on %s: %s", c->ip6, c->prefix6, ifname,
				  strerror(-r));
	}
	if (c->gateway6[0]) {
		inet_pton(AF_INET6, c->gateway6, &gw);
		if ((r = net_route_add(nl, AF_INET6, idx, NULL, 0, &gw, RTN_UNICAST, 2)) < 0) {
			close(nl);
			return k8_err_set(err, r, "net: IPv6 default route via %s: %s", c->gateway6,
					  strerror(-r));
		}
	}
	close(nl);
	return 0;
}

static int net_write(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	int r;

	if (fd < 0)
		return -errno;
	r = write_full(fd, text, strlen(text));
	close(fd);
	return r;
}

static char *net_resolv_text(const struct net_cfg *c)
{
	size_t cap = 64 + NET_MAX_DNS * (NET_ADDR_LEN + 16), n = 0;
	char *s = xmalloc(cap);

	s[0] = '\0';
	for (int i = 0; i < c->ndns; i++)
		n += (size_t)snprintf(s + n, cap - n, "nameserver %s\n", c->dns[i]);
	snprintf(s + n, cap - n, "options timeout:2 attempts:2\n");
	return s;
}

static void net_hosts_text(char *buf, size_t len, const char *ip, const char *hostname)
{
	snprintf(buf, len, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n",
		 ip && *ip ? ip : "127.0.1.1", hostname);
}

int net_apply(struct agent *a, const struct net_cfg *c, struct k8_err *err)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	char ifname[IFNAMSIZ], hosts[256], host[65];
	int sk, r, i;

	for (i = 0; (r = net_find_if(ifname, sizeof(ifname))) < 0 && i < NET_IF_WAIT_MS / 10; i++)
		nanosleep(&ts, NULL);
	if (r < 0)
		return k8_err_set(err, -ENODEV, "net: no network interface (is the virtio-net device there?)");
	sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sk < 0)
		return k8_err_set(err, -errno, "net: socket: %s", strerror(errno));
	/* Static addresses only: no SLAAC, no routes from router advertisements. */
	net_sysctl(ifname, "accept_ra", "0");
	net_sysctl(ifname, "autoconf", "0");
	if ((r = net_if_up(sk, "lo")) < 0) {
		close(sk);
		return k8_err_set(err, r, "net: bringing up lo: %s", strerror(-r));
	}
	if ((r = net_if_up(sk, ifname)) < 0) {
		close(sk);
		return k8_err_set(err, r, "net: bringing up %s: %s", ifname, strerror(-r));
	}
	r = net_ipv4(sk, ifname, c, err);
	close(sk);
	if (r < 0)
		return r;
	if (c->ip6[0] && (r = net_ipv6(ifname, c, err)) < 0)
		return r;

	free(a->resolv_conf);
	a->resolv_conf = net_resolv_text(c);
	if (mkdir("/etc", 0755) < 0 && errno != EEXIST)
		return k8_err_set(err, -errno, "net: mkdir /etc: %s", strerror(errno));
	if ((r = net_write("/etc/resolv.conf", a->resolv_conf)) < 0)
		return k8_err_set(err, r, "net: writing /etc/resolv.conf: %s", strerror(-r));
	if (gethostname(host, sizeof(host)) < 0 || !host[0])
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	net_hosts_text(hosts, sizeof(hosts), c->ip, host);
	if ((r = net_write("/etc/hosts", hosts)) < 0)
		return k8_err_set(err, r, "net: writing /etc/hosts: %s", strerror(-r));
	snprintf(a->ifname, sizeof(a->ifname), "%s", ifname);
	a->net = *c;
	a->net_up = 1;
	agent_log("net: %s %s/%d via %s%s%s, %d name servers", ifname, c->ip, c->prefix,
		  c->gateway[0] ? c->gateway : "-", c->ip6[0] ? ", " : "", c->ip6, c->ndns);
	return 0;
}

/* ---- in a new container's child, after pivot_root ---- */

/* Replace `path` in the container's root by a file with `text`. A symlink (Debian's
 * resolv.conf may point into /run) is removed, never followed: on the overlay that
 * leaves a whiteout, and the new file lands in the writable layer. */
static int net_ctr_put(const char *path, const char *text, char *msg, size_t msglen)
{
	struct stat st;
	int r;

	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && unlink(path) < 0) {
		r = -errno;
		snprintf(msg, msglen, "replacing %s in the container: %s", path, strerror(errno));
		return r;
	}
	if ((r = net_write(path, text)) < 0)
		snprintf(msg, msglen, "writing %s in the container: %s", path, strerror(-r));
	return r;
}

/* The calling thread's own network namespace with lo up: its fd (/proc/thread-self), or
 * a negative errno with msg filled. */
static int net_empty_ns(char *msg, size_t msglen)
{
	int sk, r, fd;

	if (unshare(CLONE_NEWNET) < 0) {
		r = -errno;
		snprintf(msg, msglen, "unshare network namespace: %s", strerror(errno));
		return r;
	}
	sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sk < 0) {
		r = -errno;
		snprintf(msg, msglen, "socket: %s", strerror(errno));
		return r;
	}
	r = net_if_up(sk, "lo");
	close(sk);
	if (r < 0) {
		snprintf(msg, msglen, "bringing up lo in the container: %s", strerror(-r));
		return r;
	}
	if ((fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
		r = -errno;
		snprintf(msg, msglen, "open /proc/thread-self/ns/net: %s", strerror(errno));
		return r;
	}
	return fd;
}

/* Join the network namespace `fd` (`what` names it in msg): 0 or a negative errno. */
static int net_join(int fd, const char *what, char *msg, size_t msglen)
{
	int r;

	if (setns(fd, CLONE_NEWNET) == 0)
		return 0;
	r = -errno;
	snprintf(msg, msglen, "joining %s: %s", what, strerror(errno));
	return r;
}

int net_ctr_netns(int spare, char *msg, size_t msglen)
{
	int r;

	if (spare >= 0)
		return net_join(spare, "the prepared network namespace", msg, msglen);
	if ((r = net_empty_ns(msg, msglen)) < 0)
		return r;
	close(r);
	return 0;
}

/* ---- "netns":"own": an ipvlan link of the NIC in the container's namespace ----
 *
 * Theory of operation (docs/agent.md, "A network of its own"). The container gets an
 * ipvlan slave of the VM's NIC, in L2 mode with the VEPA flag: every frame it sends,
 * unicast to another container or to the VM's own address included, leaves through the
 * NIC to kosa8-net, which never forwards a guest's frame back to a guest address. (The
 * PRIVATE flag would stop slave-to-slave unicast only: a frame with the NIC's own MAC
 * as destination would still reach the VM's stack.) The slave shares the NIC's MAC, so
 * kosa8-net's MAC check holds; inbound frames reach it by destination address.
 * What ipvlan does not stop, a broadcast or multicast from one slave delivered to the
 * others, the receiving namespace refuses: its address is a /32, the rest of the /24
 * is an unreachable route and rp_filter is strict, so a source of the /24 other than the
 * gateway, the resolver and the broker fails the reverse path check (and ARP requests
 * from such a source go unanswered); IPv6 is off on the link (IPv4 only, for now).
 * Everything runs in the child, still root with every capability: a netlink socket
 * opened in the VM's namespace creates the link straight into the new one. */

static struct rtattr *net_nest(struct nlmsghdr *h, size_t cap, int type)
{
	struct rtattr *rta = (struct rtattr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len));

	net_rta(h, cap, type, NULL, 0);
	return rta;
}

static void net_nest_end(struct nlmsghdr *h, struct rtattr *rta)
{
	rta->rta_len = (unsigned short)((char *)h + h->nlmsg_len - (char *)rta);
}

/* A sysctl of the calling task's network namespace; missing files are ignored. */
static void net_sysctl_path(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	(void)!write(fd, val, strlen(val));
	close(fd);
}

/* The ipvlan slave of `master` (an index in the socket's namespace) in the namespace
 * `nsfd`, through `nl` (a socket of the VM's namespace). Without a name: rtnetlink looks
 * a given name up in the socket's namespace, where eth0 is the NIC itself, so the kernel
 * names it (NET_IPVLAN_NAME in the new, empty namespace) and it is renamed there. */
#define NET_IPVLAN_NAME "ipvlan0"
static int net_ipvlan_new(int nl, unsigned master, int nsfd)
{
	struct net_req req;
	struct ifinfomsg *ifi = net_req_start(&req, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, 1,
					      sizeof(*ifi));
	struct rtattr *info, *data;
	uint32_t link = master, fd = (uint32_t)nsfd;
	uint16_t mode = IPVLAN_MODE_L2, flags = IPVLAN_F_VEPA;

	ifi->ifi_family = AF_UNSPEC;
	net_rta(&req.h, sizeof(req), IFLA_LINK, &link, sizeof(link));
	net_rta(&req.h, sizeof(req), IFLA_NET_NS_FD, &fd, sizeof(fd));
	info = net_nest(&req.h, sizeof(req), IFLA_LINKINFO);
	net_rta(&req.h, sizeof(req), IFLA_INFO_KIND, "ipvlan", 7);
	data = net_nest(&req.h, sizeof(req), IFLA_INFO_DATA);
	net_rta(&req.h, sizeof(req), IFLA_IPVLAN_MODE, &mode, sizeof(mode));
	net_rta(&req.h, sizeof(req), IFLA_IPVLAN_FLAGS, &flags, sizeof(flags));
	net_nest_end(&req.h, data);
	net_nest_end(&req.h, info);
	return net_nl(nl, &req.h);
}

/* In a container's namespace: eth0's index and a netlink socket (returned), or a negative
 * errno with msg filled. */
static int net_eth0_nl(unsigned *idx, char *msg, size_t msglen)
{
	int nl, r;

	*idx = if_nametoindex("eth0");
	nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (*idx && nl >= 0)
		return nl;
	r = -errno;
	if (nl >= 0)
		close(nl);
	snprintf(msg, msglen, "the container's eth0: %s", strerror(errno));
	return r;
}

/* Inside the new namespace, before it has an address: lo and eth0 up (arp_notify on), a
 * route on the link to each of the network's own hosts (gateway, IPv4 resolvers, the
 * broker's address), the rest of the /24 unreachable, the default route via the gateway.
 * None of it depends on the container's address, so a spare namespace has it already. */
static int net_ctr_links(const struct net_cfg *n, char *msg, size_t msglen)
{
	struct in_addr vm, gw, net, host;
	unsigned idx;
	int nl, sk = -1, r, seq = 10;
	const char *what = "bringing up lo";

	inet_pton(AF_INET, n->ip, &vm);
	inet_pton(AF_INET, n->gateway, &gw);
	net.s_addr = vm.s_addr & htonl(~(0xffffffffu >> n->prefix));
	if ((nl = net_eth0_nl(&idx, msg, msglen)) < 0)
		return nl;
	net_sysctl_path("/proc/sys/net/ipv4/conf/eth0/arp_notify", "1");
	sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sk < 0) {
		r = -errno;
		goto out;
	}
	if ((r = net_if_up(sk, "lo")) < 0)
		goto out;
	what = "bringing up eth0";
	if ((r = net_if_up(sk, "eth0")) < 0)
		goto out;
	what = "a route to the gateway";
	if ((r = net_route_add(nl, AF_INET, idx, &gw, 32, NULL, RTN_UNICAST, seq++)) < 0)
		goto out;
	what = "a route to a resolver";
	for (int i = 0; i < n->ndns; i++)
		if (inet_pton(AF_INET, n->dns[i], &host) == 1 &&
		    (r = net_route_add(nl, AF_INET, idx, &host, 32, NULL, RTN_UNICAST, seq++)) < 0)
			goto out;
	what = "a route to the broker";
	if (inet_pton(AF_INET, GUEST_BROKER4, &host) == 1 &&
	    (r = net_route_add(nl, AF_INET, idx, &host, 32, NULL, RTN_UNICAST, seq++)) < 0)
		goto out;
	what = "the unreachable route";
	if ((r = net_route_add(nl, AF_INET, idx, &net, n->prefix, NULL, RTN_UNREACHABLE,
				 seq++)) < 0)
		goto out;
	what = "the default route";
	r = net_route_add(nl, AF_INET, idx, NULL, 0, &gw, RTN_UNICAST, seq++);
out:
	if (sk >= 0)
		close(sk);
	close(nl);
	if (r < 0)
		snprintf(msg, msglen, "%s in the container: %s", what, strerror(-r));
	return r;
}

/* A gratuitous ARP request for `ip` from eth0 (sender and target both `ip`, to
 * broadcast) through `pk`, a packet socket of the namespace, as the kernel's arp_notify
 * sends on link up: kosa8-net teaches slirp the address, so a published port's first
 * connection finds the container. Best effort: a lost one costs that first connection
 * slirp's own ARP request. The socket is made with the spare, and its last close (which
 * waits for an RCU grace period, ~10 ms under TCG) is left to the idle thread. */
static void net_ctr_announce(int pk, unsigned idx, const struct in_addr *ip)
{
	struct sockaddr_ll to = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ARP),
				  .sll_ifindex = (int)idx, .sll_halen = 6 };
	unsigned char arp[28] = { 0, 1, 8, 0, 6, 4, 0, 1 };  /* Ethernet, IPv4, request */
	struct ifreq ifr;

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "eth0");
	if (ioctl(pk, SIOCGIFHWADDR, &ifr) < 0)
		return;
	memcpy(arp + 8, ifr.ifr_hwaddr.sa_data, 6);
	memcpy(arp + 14, ip, 4);
	memcpy(arp + 24, ip, 4);
	memset(to.sll_addr, 0xff, 6);
	(void)!sendto(pk, arp, sizeof(arp), 0, (struct sockaddr *)&to, sizeof(to));
}

/* The container's address, a /32 on eth0. In a spare (links up already) it is announced
 * through the spare's packet socket `pk`: arp_notify announces on link up only. */
static int net_ctr_addr(const char *ip, int pk, char *msg, size_t msglen)
{
	struct in_addr addr;
	unsigned idx;
	int nl = net_eth0_nl(&idx, msg, msglen), r;

	if (nl < 0)
		return nl;
	inet_pton(AF_INET, ip, &addr);
	r = net_addr_add(nl, AF_INET, idx, &addr, 32, 0, 1);
	close(nl);
	if (r < 0) {
		snprintf(msg, msglen, "its address (%s) in the container: %s", ip, strerror(-r));
		return r;
	}
	if (pk >= 0)
		net_ctr_announce(pk, idx, &addr);
	return 0;
}

int net_ctr_ip_ok(const struct agent *a, const char *ip)
{
	struct in_addr x, vm;
	uint32_t mask, host;

	if (!a->net_up || !ip || inet_pton(AF_INET, ip, &x) != 1 ||
	    inet_pton(AF_INET, a->net.ip, &vm) != 1 || a->net.prefix < 8 || a->net.prefix > 24)
		return 0;
	mask = 0xffffffffu >> a->net.prefix;
	host = ntohl(x.s_addr) & mask;
	if ((ntohl(x.s_addr) & ~mask) != (ntohl(vm.s_addr) & ~mask) || host < 16 || host > 254 ||
	    x.s_addr == vm.s_addr || !strcmp(ip, a->net.gateway))
		return 0;
	for (int i = 0; i < a->net.ndns; i++)
		if (!strcmp(ip, a->net.dns[i]))
			return 0;
	return 1;
}

/* The calling thread's own network namespace with the ipvlan link of `ifname` in it,
 * named eth0, its strict sysctls, and with `n` its links up and routes (net_ctr_links);
 * no address (net_ctr_addr). Returns the namespace's fd (/proc/thread-self: a thread has
 * its own namespace after unshare), or a negative errno with msg filled. */
static int net_ipvlan_ns(const char *ifname, const struct net_cfg *n, char *msg, size_t msglen)
{
	unsigned master;
	int nl, nsfd, r;

	master = if_nametoindex(ifname);
	nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (!master || nl < 0) {
		r = -errno;
		if (nl >= 0)
			close(nl);
		snprintf(msg, msglen, "the VM's %s: %s", ifname, strerror(errno));
		return r;
	}
	if (unshare(CLONE_NEWNET) < 0) {
		r = -errno;
		close(nl);
		snprintf(msg, msglen, "unshare network namespace: %s", strerror(errno));
		return r;
	}
	/* before the link exists: strict reverse path, no IPv6 on new links */
	net_sysctl_path("/proc/sys/net/ipv4/conf/all/rp_filter", "1");
	net_sysctl_path("/proc/sys/net/ipv4/conf/default/rp_filter", "1");
	net_sysctl_path("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
	nsfd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (nsfd < 0) {
		r = -errno;
		close(nl);
		snprintf(msg, msglen, "open /proc/thread-self/ns/net: %s", strerror(errno));
		return r;
	}
	r = net_ipvlan_new(nl, master, nsfd);
	close(nl);
	if (r < 0) {
		close(nsfd);
		snprintf(msg, msglen, "an ipvlan link of %s for the container: %s%s", ifname,
			 strerror(-r), r == -EOPNOTSUPP || r == -ENOENT ?
			 " (a guest kernel without CONFIG_IPVLAN: rebuild the guest)" : "");
		return r;
	}
	struct ifreq ifr;
	int sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", NET_IPVLAN_NAME);
	snprintf(ifr.ifr_newname, sizeof(ifr.ifr_newname), "eth0");
	if (sk < 0 || ioctl(sk, SIOCSIFNAME, &ifr) < 0) {
		r = -errno;
		if (sk >= 0)
			close(sk);
		close(nsfd);
		snprintf(msg, msglen, "naming the container's link eth0: %s", strerror(-r));
		return r;
	}
	close(sk);
	net_sysctl_path("/proc/sys/net/ipv6/conf/eth0/disable_ipv6", "1");
	net_sysctl_path("/proc/sys/net/ipv4/conf/eth0/rp_filter", "1");
	/* a unicast IP packet in a broadcast frame can only come from another slave */
	net_sysctl_path("/proc/sys/net/ipv4/conf/eth0/drop_unicast_in_l2_multicast", "1");
	if (n && (r = net_ctr_links(n, msg, msglen)) < 0) {
		close(nsfd);
		return r;
	}
	return nsfd;
}

int net_ctr_ipvlan(const struct agent *a, const char *ip, const struct net_spare *sp,
		   char *msg, size_t msglen)
{
	int r;

	if (!a->net_up || !a->net.gateway[0]) {
		snprintf(msg, msglen, "the VM has no network to give the container");
		return -ENETDOWN;
	}
	if (sp->ns >= 0) {
		if ((r = net_join(sp->ns, "the prepared network namespace", msg, msglen)) < 0)
			return r;
		return net_ctr_addr(ip, sp->pk, msg, msglen);
	}
	/* made now: the address first, so eth0 coming up announces it (arp_notify) */
	if ((r = net_ipvlan_ns(a->ifname, NULL, msg, msglen)) < 0)
		return r;
	close(r);
	if ((r = net_ctr_addr(ip, -1, msg, msglen)) < 0)
		return r;
	return net_ctr_links(&a->net, msg, msglen);
}

/* ---- network namespaces made and ended while the VM is idle ----
 *
 * Making a container's namespace and its ipvlan link is most of what "netns":"own" costs
 * its start, and ending them (the kernel's cleanup_net, in a kworker, as the container's
 * last process exits) costs its exit about as much again (together ~45 ms of one vCPU
 * under TCG, docs/agent.md). Neither need be paid while someone waits:
 * - After the first such run the agent keeps one namespace ready (net_spare_take): the
 *   next container's child joins it and adds only its address. A spare serves one
 *   container and is never used twice: each container still gets a namespace nobody
 *   has been in. "netns":"none" containers get the same, an empty namespace with lo up
 *   (about 8 ms each way).
 * - The agent holds each container's namespace (ctr.c) until its exit was reported, then
 *   hands it here (net_ns_retire); its last reference goes when the VM is idle.
 * Both are done by one short-lived thread at SCHED_IDLE, which runs only when nothing
 * else in the VM wants the CPU; it ends when there is nothing left to do. */
#define NET_RETIRE_MAX 64
static pthread_mutex_t net_idle_lock = PTHREAD_MUTEX_INITIALIZER;
static struct net_spare net_spare = { -1, -1 };
static int net_spare_wanted;        /* a "netns":"own" container has run */
static struct net_spare net_empty = { -1, -1 };  /* the same for "netns":"none" */
static int net_empty_wanted;
/* what the next spare is for (net_spare_make), and what the one being made or ready was
 * made for (the thread's; read by net_spare_take only while one is ready) */
static char net_want_if[16], net_made_if[16];
static struct net_cfg net_want_cfg, net_made_cfg;
static int net_retired[NET_RETIRE_MAX], net_nretired;
static int net_idle_running;

/* Back to the VM's namespace `vm`: each spare starts there, and after making one the
 * thread is in that one. 0, or a negative errno with msg filled. */
static int net_idle_home(int vm, char *msg, size_t msglen)
{
	return net_join(vm, "the VM's network namespace again", msg, msglen);
}

/* A spare just made into its slot; if making it failed (made.ns < 0), why, on the
 * console, and none is wanted until the next such container asks again. */
static void net_idle_keep(struct net_spare made, struct net_spare *slot, int *wanted,
			  const char *what, const char *msg)
{
	if (made.ns < 0)
		agent_log("preparing %s: %s", what, msg);
	pthread_mutex_lock(&net_idle_lock);
	if (made.ns < 0)
		*wanted = 0;
	else
		*slot = made;
	pthread_mutex_unlock(&net_idle_lock);
}

static void *net_idle_thread(void *arg)
{
	struct sched_param sp = { 0 };
	char msg[256];
	int vm = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);

	(void)arg;
	(void)!sched_setscheduler(0, SCHED_IDLE, &sp);   /* 0: this thread */
	for (;;) {
		int fds[NET_RETIRE_MAX], n, make, empty, ns, pk = -1;

		pthread_mutex_lock(&net_idle_lock);
		n = net_nretired;
		memcpy(fds, net_retired, (size_t)n * sizeof(int));
		net_nretired = 0;
		make = net_spare_wanted && net_spare.ns < 0 && net_want_if[0] && vm >= 0;
		empty = net_empty_wanted && net_empty.ns < 0 && vm >= 0;
		if (make) {
			memcpy(net_made_if, net_want_if, sizeof(net_made_if));
			net_made_cfg = net_want_cfg;
		}
		if (!n && !make && !empty) {
			net_idle_running = 0;
			pthread_mutex_unlock(&net_idle_lock);
			break;
		}
		pthread_mutex_unlock(&net_idle_lock);
		for (int i = 0; i < n; i++)
			close(fds[i]);
		if (empty) {
			ns = net_idle_home(vm, msg, sizeof(msg)) < 0 ? -1 :
			     net_empty_ns(msg, sizeof(msg));
			net_idle_keep((struct net_spare){ ns, -1 }, &net_empty, &net_empty_wanted,
				      "an empty network namespace", msg);
		}
		if (!make)
			continue;
		ns = net_idle_home(vm, msg, sizeof(msg)) < 0 ? -1 :
		     net_ipvlan_ns(net_made_if, &net_made_cfg, msg, sizeof(msg));
		if (ns >= 0 && (pk = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
			snprintf(msg, sizeof(msg), "a packet socket: %s", strerror(errno));
			close(ns);
			ns = -1;
		}
		net_idle_keep((struct net_spare){ ns, pk }, &net_spare, &net_spare_wanted,
			      "a container network namespace", msg);
	}
	if (vm >= 0)
		close(vm);
	return NULL;
}

/* Start the thread unless it runs (it looks again before it ends). Caller holds the
 * lock. Never while the agent is in a container's PID namespace (no thread then). */
static void net_idle_kick_locked(void)
{
	pthread_attr_t at;
	pthread_t t;

	if (net_idle_running)
		return;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 128 * 1024);
	if (pthread_create(&t, &at, net_idle_thread, NULL) == 0)
		net_idle_running = 1;
	pthread_attr_destroy(&at);
}

/* Whether two networks give a container the same links and routes. */
static int net_cfg_same4(const struct net_cfg *x, const struct net_cfg *y)
{
	if (strcmp(x->ip, y->ip) || x->prefix != y->prefix || strcmp(x->gateway, y->gateway) ||
	    x->ndns != y->ndns)
		return 0;
	for (int i = 0; i < x->ndns; i++)
		if (strcmp(x->dns[i], y->dns[i]))
			return 0;
	return 1;
}

void net_spare_take(const struct agent *a, int with_link, struct net_spare *sp)
{
	int stale;

	pthread_mutex_lock(&net_idle_lock);
	if (!with_link) {
		*sp = net_empty;
		net_empty = (struct net_spare){ -1, -1 };
		pthread_mutex_unlock(&net_idle_lock);
		return;
	}
	*sp = net_spare;
	net_spare = (struct net_spare){ -1, -1 };
	stale = sp->ns >= 0 && (strcmp(net_made_if, a->ifname) ||
				!net_cfg_same4(&net_made_cfg, &a->net));
	pthread_mutex_unlock(&net_idle_lock);
	if (stale) {    /* made for a network the VM no longer has */
		net_ns_retire(&sp->ns);
		net_ns_retire(&sp->pk);
	}
}

void net_spare_make(const struct agent *a, int with_link)
{
	pthread_mutex_lock(&net_idle_lock);
	if (!with_link) {
		net_empty_wanted = 1;
		net_idle_kick_locked();
	} else if (a->net_up && a->net.gateway[0]) {
		snprintf(net_want_if, sizeof(net_want_if), "%s", a->ifname);
		net_want_cfg = a->net;
		net_spare_wanted = 1;
		net_idle_kick_locked();
	}
	pthread_mutex_unlock(&net_idle_lock);
}

void net_ns_retire(int *fd)
{
	if (*fd < 0)
		return;
	pthread_mutex_lock(&net_idle_lock);
	if (net_nretired < NET_RETIRE_MAX) {
		net_retired[net_nretired++] = *fd;
		net_idle_kick_locked();
	} else {
		close(*fd);
	}
	pthread_mutex_unlock(&net_idle_lock);
	*fd = -1;
}

/* Interception mode: the broker's CA in the container, alone (for NODE_EXTRA_CA_CERTS)
 * and appended to the image's bundle, written as /etc/kosa8/ca-bundle.crt (for
 * SSL_CERT_FILE and the like) and over the image's own bundle when it has one (the
 * container's trust store; its writable layer, the image is untouched). */
#define NET_BUNDLE_MAX (4 << 20)
static int net_ctr_ca(const char *pem, char *msg, size_t msglen)
{
	static const char *const system = "/etc/ssl/certs/ca-certificates.crt";
	char *sys = NULL, *bundle;
	size_t n = 0;
	struct stat st;
	int r;

	if (mkdir("/etc/kosa8", 0755) < 0 && errno != EEXIST) {
		r = -errno;
		snprintf(msg, msglen, "mkdir /etc/kosa8 in the container: %s", strerror(errno));
		return r;
	}
	if ((r = net_ctr_put("/etc/kosa8/broker-ca.crt", pem, msg, msglen)) < 0)
		return r;
	int has = lstat(system, &st) == 0 && S_ISREG(st.st_mode) &&
		   read_file(system, NET_BUNDLE_MAX, &sys, &n) == 0;
	if (has && strstr(sys, pem)) {          /* there already (a restarted container) */
		r = net_ctr_put("/etc/kosa8/ca-bundle.crt", sys, msg, msglen);
		free(sys);
		return r;
	}
	bundle = malloc(n + strlen(pem) + 2);
	if (!bundle) {
		free(sys);
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	bundle[0] = '\0';
	if (has) {
		memcpy(bundle, sys, n);
		bundle[n] = '\0';
		if (n && bundle[n - 1] != '\n')
			strcat(bundle, "\n");
	}
	strcat(bundle, pem);
	free(sys);
	r = net_ctr_put("/etc/kosa8/ca-bundle.crt", bundle, msg, msglen);
	if (r == 0 && has)
		r = net_ctr_put(system, bundle, msg, msglen);
	free(bundle);
	return r;
}

int net_ctr_files(const struct agent *a, const char *hostname, int own_netns, const char *ip,
		  char *msg, size_t msglen)
{
	struct stat st;
	char hosts[256];
	int r;

	if (mkdir("/etc", 0755) < 0 && errno != EEXIST) {
		r = -errno;
		snprintf(msg, msglen, "mkdir /etc in the container: %s", strerror(errno));
		return r;
	}
	/* Without a network ("none": only lo) the image's own resolv.conf stays (nothing
	 * would answer). With one (the VM's, or its own "own" one) kosa8-net answers. */
	if (a->resolv_conf && (!own_netns || (ip && *ip)) &&
	    (r = net_ctr_put("/etc/resolv.conf", a->resolv_conf, msg, msglen)) < 0)
		return r;
	if (a->net_up && a->net.broker_ca[0] && (r = net_ctr_ca(a->net.broker_ca, msg, msglen)) < 0)
		return r;
	/* An image's own non-empty /etc/hosts is kept; otherwise localhost and our name. */
	if (lstat("/etc/hosts", &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
		return 0;
	net_hosts_text(hosts, sizeof(hosts), ip && *ip ? ip : a->net_up && !own_netns ? a->net.ip : NULL,
		       hostname);
	return net_ctr_put("/etc/hosts", hosts, msg, msglen);
}
