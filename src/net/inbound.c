/* SPDX-License-Identifier: Apache-2.0 */
/* inbound.c - published ports: connections from the host into the guest, only to the
 * guest ports the daemon published (docs/network.md, "Published ports").
 *
 * Theory of operation.
 *  - The daemon (root) binds the host's listening socket and passes it here over the
 *    control socket (SCM_RIGHTS) with {"op":"publish","guest_port":N}. kosa8-net never
 *    picks or binds a host port of its own that anything can reach: it is jailed, and
 *    the daemon decides which address and port (loopback unless allowed).
 *  - libslirp owns the guest's TCP, but its only way in is a host forward that binds
 *    its own socket (slirp_add_hostxfwd). So slirp binds a throwaway listener on
 *    loopback port 0, whose fd number we know beforehand (the lowest free one: this
 *    process has one thread, and nothing else opens an fd in between), and dup2()
 *    puts the daemon's socket in its place. From then on slirp accept()s the host's
 *    connections on the published socket and opens each one towards the guest with a
 *    SYN to GUEST_ADDRESS:GUEST_PORT (the VM's address, or an engine container's own
 *    one: "guest_ip"); removal (slirp_remove_hostxfwd) finds it by its
 *    address, which is the published one.
 *  - engine.c sees that SYN among slirp's frames to the guest and records an inbound
 *    flow (inbound_flow_ok decides: a published guest port, under its connection cap),
 *    so the guest's answers match a flow and never ask the egress policy. A SYN to any
 *    other port, which only slirp could send, is dropped; policy changes never cut an
 *    inbound flow. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include <slirp/libslirp.h>

#include "common/guest.h"
#include "common/util.h"
#include "net/net.h"

static void inbound_addr_str(const struct sockaddr_storage *ss, char *ip, size_t len,
			     uint16_t *port)
{
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, (socklen_t)len);
		*port = ntohs(s6->sin6_port);
	} else {
		const struct sockaddr_in *s4 = (const void *)ss;
		inet_ntop(AF_INET, &s4->sin_addr, ip, (socklen_t)len);
		*port = ntohs(s4->sin_port);
	}
}

static struct inbound_port *inbound_find_host(struct net *n, const char *ip, int port)
{
	for (int i = 0; i < INBOUND_MAX; i++) {
		struct inbound_port *p = &n->in.p[i];
		if (p->used && p->host_port == port && !strcmp(p->host_ip, ip))
			return p;
	}
	return NULL;
}

struct inbound_port *inbound_find_guest(struct net *n, const struct net_addr *guest,
					uint16_t guest_port)
{
	for (int i = 0; i < INBOUND_MAX; i++) {
		struct inbound_port *p = &n->in.p[i];
		if (p->used && p->guest_port == guest_port && net_addr_eq(&p->guest, guest))
			return p;
	}
	return NULL;
}

/* A listening TCP socket of the IP families, and its address. */
static int inbound_check_fd(int fd, struct sockaddr_storage *ss, socklen_t *sslen,
			    char *err, size_t errlen)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || !v) {
		snprintf(err, errlen, "the descriptor passed is not a listening socket");
		return -EINVAL;
	}
	l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) < 0 || v != SOCK_STREAM) {
		snprintf(err, errlen, "the descriptor passed is not a stream socket");
		return -EINVAL;
	}
	*sslen = sizeof(*ss);
	if (getsockname(fd, (struct sockaddr *)ss, sslen) < 0 ||
	    (ss->ss_family != AF_INET && ss->ss_family != AF_INET6)) {
		snprintf(err, errlen, "the socket passed is not an IPv4 or IPv6 socket");
		return -EINVAL;
	}
	return 0;
}

int inbound_publish(struct net *n, int *fdp, const json_t *req, json_t **out, char *err,
		    size_t errlen)
{
	json_t *gp = json_object_get(req, "guest_port"), *mc = json_object_get(req, "max_conns");
	json_t *gip = json_object_get(req, "guest_ip");
	struct net_addr guest = { 0 };
	struct sockaddr_storage ss, tmp;
	socklen_t sslen;
	struct inbound_port *p = NULL;
	char ip[INET6_ADDRSTRLEN];
	uint16_t hport;
	int fd = *fdp, rc;

	if (fd < 0) {
		snprintf(err, errlen, "publish needs a listening socket passed with the request");
		return -EINVAL;
	}
	if (!json_is_integer(gp) || json_integer_value(gp) < 1 || json_integer_value(gp) > 65535) {
		snprintf(err, errlen, "\"guest_port\" must be a number from 1 to 65535");
		return -EINVAL;
	}
	if (mc && (!json_is_integer(mc) || json_integer_value(mc) < 1 ||
		   json_integer_value(mc) > n->max_flows)) {
		snprintf(err, errlen, "\"max_conns\" must be a number from 1 to %d", n->max_flows);
		return -EINVAL;
	}
	if ((rc = inbound_check_fd(fd, &ss, &sslen, err, errlen)) < 0)
		return rc;
	/* towards the VM's own address of the listener's family, or a container's own */
	guest = ss.ss_family == AF_INET ? n->guest4 : n->guest6;
	if (gip && !json_is_null(gip) &&
	    (!json_is_string(gip) || json_string_length(gip) >= INET6_ADDRSTRLEN ||
	     strlen(json_string_value(gip)) != json_string_length(gip) ||
	     net_addr_parse(json_string_value(gip), &guest) < 0 || !engine_is_ctr4(n, &guest) ||
	     ss.ss_family != AF_INET)) {
		snprintf(err, errlen, "\"guest_ip\" must be an engine container's address "
			 "(10.0.2.%d-%d) and the listener IPv4", GUEST_CTR4_FIRST, GUEST_CTR4_LAST);
		return -EINVAL;
	}
	inbound_addr_str(&ss, ip, sizeof(ip), &hport);
	if (inbound_find_host(n, ip, hport)) {
		snprintf(err, errlen, "%s port %u is published already", ip, hport);
		return -EEXIST;
	}
	for (int i = 0; i < INBOUND_MAX && !p; i++)
		if (!n->in.p[i].used)
			p = &n->in.p[i];
	if (!p) {
		snprintf(err, errlen, "at most %d published ports", INBOUND_MAX);
		return -ENOSPC;
	}

	/* slirp's throwaway listener: loopback, port 0, of the published socket's family,
	 * towards the guest's address of the same family. */
	union { struct sockaddr_storage ss; struct sockaddr_in s4; struct sockaddr_in6 s6; }
		h = { 0 }, g = { 0 };
	socklen_t hl, gl;
	int flags = 0;
	if (ss.ss_family == AF_INET) {
		h.s4.sin_family = g.s4.sin_family = AF_INET;
		h.s4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		memcpy(&g.s4.sin_addr, guest.a, 4);
		g.s4.sin_port = htons((uint16_t)json_integer_value(gp));
		hl = gl = sizeof(struct sockaddr_in);
	} else {
		h.s6.sin6_family = g.s6.sin6_family = AF_INET6;
		h.s6.sin6_addr = in6addr_loopback;
		memcpy(&g.s6.sin6_addr, guest.a, 16);
		g.s6.sin6_port = htons((uint16_t)json_integer_value(gp));
		hl = gl = sizeof(struct sockaddr_in6);
		flags = SLIRP_HOSTFWD_V6ONLY;
	}
	int slot = fcntl(fd, F_DUPFD_CLOEXEC, 0);   /* the lowest free fd number */
	if (slot < 0) {
		snprintf(err, errlen, "no descriptor free: %s", strerror(errno));
		return -errno;
	}
	close(slot);
	if (slirp_add_hostxfwd(n->eng.slirp, (struct sockaddr *)&h, hl, (struct sockaddr *)&g, gl,
			       flags) < 0) {
		snprintf(err, errlen, "libslirp could not add the forward: %s", strerror(errno));
		return -EIO;
	}
	/* The throwaway must be exactly where we expected it before it is replaced. */
	socklen_t tl = sizeof(tmp);
	int acc = 0;
	socklen_t al = sizeof(acc);
	if (getsockname(slot, (struct sockaddr *)&tmp, &tl) < 0 || tmp.ss_family != ss.ss_family ||
	    getsockopt(slot, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0 || !acc) {
		/* Not ours: leave slirp's listener alone (it is on loopback, towards the guest's
		 * port; remove it by the address it has, if it can be found). */
		net_log(n, "publish: libslirp's listener is not at fd %d; forward refused", slot);
		snprintf(err, errlen, "internal error: libslirp's listener was not where expected");
		return -EIO;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || dup2(fd, slot) < 0) {
		int e = errno;
		slirp_remove_hostxfwd(n->eng.slirp, (struct sockaddr *)&tmp, tl, flags);
		snprintf(err, errlen, "taking the socket: %s", strerror(e));
		return -e;
	}
	close(fd);
	*fdp = -1;
	*p = (struct inbound_port){ .used = true, .fd = slot, .family = ss.ss_family, .guest = guest,
				    .host_port = hport, .guest_port = (uint16_t)json_integer_value(gp),
				    .max_conns = mc ? (int)json_integer_value(mc) : INBOUND_MAX_CONNS,
				    .flags = flags };
	snprintf(p->host_ip, sizeof(p->host_ip), "%s", ip);
	memcpy(&p->haddr, &ss, sizeof(ss));
	p->haddrlen = sslen;
	char gs[INET6_ADDRSTRLEN];
	net_addr_str(&guest, gs, sizeof(gs));
	net_log(n, "published %s port %u -> %s port %u", ip, hport, gs, p->guest_port);
	*out = json_pack("{s:s,s:i,s:s,s:i}", "host_ip", ip, "host_port", hport, "guest_ip", gs,
			 "guest_port", p->guest_port);
	return 0;
}

int inbound_unpublish(struct net *n, const json_t *req, char *err, size_t errlen)
{
	const char *ip = json_string_value(json_object_get(req, "host_ip"));
	json_t *hp = json_object_get(req, "host_port");

	if (!ip || !json_is_integer(hp)) {
		snprintf(err, errlen, "unpublish needs \"host_ip\" and \"host_port\"");
		return -EINVAL;
	}
	struct inbound_port *p = inbound_find_host(n, ip, (int)json_integer_value(hp));
	if (!p) {
		snprintf(err, errlen, "%s port %lld is not published", ip,
			 (long long)json_integer_value(hp));
		return -ENOENT;
	}
	if (slirp_remove_hostxfwd(n->eng.slirp, (struct sockaddr *)&p->haddr, p->haddrlen,
				  p->flags) < 0) {
		/* slirp did not find it: close the listener ourselves so the port is shut. */
		net_log(n, "unpublish: libslirp did not find the forward of port %u", p->host_port);
		shutdown(p->fd, SHUT_RDWR);
	}
	engine_cut_inbound(n, &p->guest, p->guest_port);
	net_log(n, "unpublished %s port %u", p->host_ip, p->host_port);
	p->used = false;
	return 0;
}

json_t *inbound_json(struct net *n)
{
	json_t *a = json_array();
	for (int i = 0; i < INBOUND_MAX; i++) {
		struct inbound_port *p = &n->in.p[i];
		char gs[INET6_ADDRSTRLEN];
		if (!p->used)
			continue;
		net_addr_str(&p->guest, gs, sizeof(gs));
		json_array_append_new(a, json_pack("{s:s,s:i,s:s,s:i,s:i,s:i,s:I,s:I,s:I,s:I}",
			"host_ip", p->host_ip, "host_port", p->host_port, "guest_ip", gs, "guest_port",
			p->guest_port, "conns", engine_count_inbound(n, &p->guest, p->guest_port),
			"max_conns", p->max_conns, "accepted", (json_int_t)p->accepted,
			"refused", (json_int_t)p->refused, "bytes_in", (json_int_t)p->bytes_in,
			"bytes_out", (json_int_t)p->bytes_out));
	}
	return a;
}
