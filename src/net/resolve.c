/* SPDX-License-Identifier: Apache-2.0 */
/* resolve.c - the upstream DNS client: looks up names the policy allows, from the hosts
 * file read at start or from the configured servers over kosa8-net's own UDP sockets
 * (never through slirp). Non-blocking: a table of pending queries with timeouts; CNAME
 * chains the server did not finish are followed with further queries.
 *
 * Against off-path spoofing of answers (which would pin an attacker's address to a
 * listed name), every message sent upstream, first try, retry or CNAME step, leaves
 * from a new UDP socket (a port the kernel picks at random) with a new random id. The
 * socket is connected to the server, so the kernel drops datagrams from anywhere else;
 * the source is checked again here, and the id and question must match. */
#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"
#include "net/net.h"

#define RESOLVE_TRY_NS 1500000000ull    /* per try */
#define RESOLVE_MAX_TRIES 4
#define RESOLVE_HOSTS_TTL 60
#define RESOLVE_MAX_HOPS 16             /* CNAME names followed, over all queries */

int resolve_add_server(struct resolver *r, const char *spec)
{
	char buf[INET6_ADDRSTRLEN + 16];
	unsigned long port = 53;
	if (r->nservers >= RESOLVE_MAX_SERVERS || strlen(spec) >= sizeof(buf))
		return -EINVAL;
	snprintf(buf, sizeof(buf), "%s", spec);
	char *host = buf, *p = NULL;
	if (buf[0] == '[') {
		char *end = strchr(buf, ']');
		if (!end)
			return -EINVAL;
		*end = 0;
		host = buf + 1;
		if (end[1] == ':')
			p = end + 2;
		else if (end[1])
			return -EINVAL;
	} else {
		char *c = strchr(buf, ':');
		if (c && !strchr(c + 1, ':')) {  /* one colon: IPv4:PORT */
			*c = 0;
			p = c + 1;
		}
	}
	if (p) {
		char *e;
		if (!*p)
			return -EINVAL;
		port = strtoul(p, &e, 10);
		if (*e || port == 0 || port > 65535)
			return -EINVAL;
	}
	struct net_addr a;
	if (net_addr_parse(host, &a) < 0)
		return -EINVAL;
	r->servers[r->nservers] = a;
	r->ports[r->nservers++] = (uint16_t)port;
	return 0;
}

int resolve_load_resolv_conf(struct resolver *r, const char *path)
{
	cleanup_free char *text = NULL;
	size_t len;
	int added = 0;
	if (read_file(path, 1 << 20, &text, &len) < 0)
		return 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char kw[32], val[64];
		if (sscanf(line, " %31s %63s", kw, val) != 2 || strcmp(kw, "nameserver") != 0)
			continue;
		char *pct = strchr(val, '%');  /* fe80::1%eth0: scoped, not usable here */
		if (pct)
			continue;
		struct net_addr a;
		if (net_addr_parse(val, &a) < 0 || r->nservers >= RESOLVE_MAX_SERVERS)
			continue;
		r->servers[r->nservers] = a;
		r->ports[r->nservers++] = 53;
		added++;
	}
	return added;
}

int resolve_load_hosts(struct resolver *r, const char *path)
{
	cleanup_free char *text = NULL;
	size_t len;
	int rc = read_file(path, 4 << 20, &text, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *s2 = NULL;
		char *ip = strtok_r(line, " \t\r", &s2);
		struct net_addr a;
		if (!ip || net_addr_parse(ip, &a) < 0)
			continue;
		for (char *nm = strtok_r(NULL, " \t\r", &s2); nm; nm = strtok_r(NULL, " \t\r", &s2)) {
			if (r->nhosts >= RESOLVE_MAX_HOSTS || !dns_name_valid(nm))
				continue;
			if (!r->hosts) {
				r->hosts = calloc(RESOLVE_MAX_HOSTS, sizeof(*r->hosts));
				if (!r->hosts)
					return -ENOMEM;
			}
			struct resolve_host *h = &r->hosts[r->nhosts++];
			snprintf(h->name, sizeof(h->name), "%s", nm);
			for (char *c = h->name; *c; c++)
				*c = (char)tolower((unsigned char)*c);
			size_t l = strlen(h->name);
			if (l && h->name[l - 1] == '.')
				h->name[l - 1] = 0;
			h->addr = a;
		}
	}
	return 0;
}

static int resolve_socket(int family)
{
	int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

int resolve_open(struct resolver *r)
{
	bool tried[2] = { false, false };

	for (int i = 0; i < r->nservers; i++) {
		int k = r->servers[i].family == AF_INET ? 0 : 1;
		if (tried[k])
			continue;
		tried[k] = true;
		int fd = resolve_socket(r->servers[i].family);
		if (fd < 0)
			return fd;
		close(fd);
	}
	return 0;
}

static void resolve_drop_fd(struct resolve_query *q)
{
	if (q->fd >= 0)
		close(q->fd);
	q->fd = -1;
}

void resolve_close(struct resolver *r)
{
	for (int i = 0; i < RESOLVE_MAX_PENDING; i++)
		if (r->q[i].used)
			resolve_drop_fd(&r->q[i]);
	free(r->hosts);
	r->hosts = NULL;
}

static socklen_t resolve_sockaddr(const struct net_addr *a, uint16_t port,
				  struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, a->a, 4);
		return sizeof(*s);
	}
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(port);
	memcpy(&s->sin6_addr, a->a, 16);
	return sizeof(*s);
}

static uint16_t resolve_new_id(const struct resolver *r)
{
	for (;;) {
		uint16_t id;
		bool taken = false;
		net_random(&id, sizeof(id));
		for (int i = 0; i < RESOLVE_MAX_PENDING; i++)
			if (r->q[i].used && r->q[i].id == id)
				taken = true;
		if (!taken)
			return id;
	}
}

/* Send q's question on a new socket: a new source port for every message. */
static void resolve_send(struct net *n, struct resolve_query *q)
{
	struct resolver *r = &n->res;
	uint8_t msg[DNS_NAME_MAX + 64];
	q->deadline_ns = n->now_ns + RESOLVE_TRY_NS;
	resolve_drop_fd(q);
	size_t len = dns_build_query(msg, sizeof(msg), q->id, q->cur, q->qtype);
	const struct net_addr *a = &r->servers[q->server];
	if (!len)
		return;                 /* times out and tries the next server */
	struct sockaddr_storage ss;
	socklen_t sl = resolve_sockaddr(a, r->ports[q->server], &ss);
	int fd = resolve_socket(a->family);
	if (fd < 0) {
		net_log(n, "dns: no socket for upstream server %d: %s", q->server, strerror(-fd));
		return;
	}
	/* connect() binds a random ephemeral port and filters what can arrive */
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0 || send(fd, msg, len, 0) < 0) {
		net_log(n, "dns: sending to upstream server %d: %s", q->server, strerror(errno));
		close(fd);
		return;
	}
	q->fd = fd;
	r->sent++;
}

static void resolve_finish(struct net *n, struct resolve_query *q, const struct resolve_result *res)
{
	resolve_done_fn done = q->done;
	void *opaque = q->opaque;
	resolve_drop_fd(q);
	q->used = false;
	done(n, opaque, res);
}

static void resolve_fail(struct net *n, struct resolve_query *q, int rcode)
{
	struct resolve_result res = { .rcode = rcode };
	resolve_finish(n, q, &res);
}

int resolve_start(struct net *n, const char *name, uint16_t qtype, resolve_done_fn done,
		  void *opaque)
{
	struct resolver *r = &n->res;
	bool in_hosts = false;
	struct resolve_result res = { .rcode = DNS_R_NOERROR, .ttl = RESOLVE_HOSTS_TTL };
	int fam = qtype == DNS_T_AAAA ? AF_INET6 : AF_INET;
	for (int i = 0; i < r->nhosts; i++) {
		if (strcmp(r->hosts[i].name, name) != 0)
			continue;
		in_hosts = true;
		if (r->hosts[i].addr.family == fam && res.naddrs < DNS_MAX_ADDRS)
			res.addrs[res.naddrs++] = r->hosts[i].addr;
	}
	if (in_hosts) {
		done(n, opaque, &res);
		return 0;
	}
	if (r->nservers == 0)
		return -ENOENT;
	struct resolve_query *q = NULL;
	for (int i = 0; i < RESOLVE_MAX_PENDING && !q; i++)
		if (!r->q[i].used)
			q = &r->q[i];
	if (!q)
		return -EAGAIN;
	memset(q, 0, sizeof(*q));
	q->fd = -1;
	q->used = true;
	q->id = resolve_new_id(r);
	snprintf(q->want, sizeof(q->want), "%s", name);
	snprintf(q->cur, sizeof(q->cur), "%s", name);
	q->qtype = qtype;
	q->ttl = UINT32_MAX;
	q->done = done;
	q->opaque = opaque;
	resolve_send(n, q);
	return 0;
}

void resolve_cancel(struct resolver *r, void *opaque)
{
	for (int i = 0; i < RESOLVE_MAX_PENDING; i++)
		if (r->q[i].used && r->q[i].opaque == opaque) {
			resolve_drop_fd(&r->q[i]);
			r->q[i].used = false;
		}
}

static void resolve_answer(struct net *n, struct resolve_query *q, const uint8_t *msg,
			   size_t len)
{
	struct resolver *r = &n->res;
	if (len < 2 || (uint16_t)(msg[0] << 8 | msg[1]) != q->id)
		return;                 /* not for this try: keep waiting */
	uint16_t id = q->id;
	struct dns_answer *ans = calloc(1, sizeof(*ans));
	if (!ans)
		return;
	int rc = dns_parse_response(msg, len, id, q->cur, q->qtype, ans);
	if (rc == -EINVAL)
		goto out;               /* not an answer to this question: keep waiting */
	if (rc < 0) {
		resolve_fail(n, q, DNS_R_SERVFAIL);
		goto out;
	}
	if (ans->rcode != DNS_R_NOERROR) {
		resolve_fail(n, q, ans->rcode == DNS_R_NXDOMAIN ? DNS_R_NXDOMAIN : DNS_R_SERVFAIL);
		goto out;
	}
	if (ans->ttl < q->ttl)
		q->ttl = ans->ttl;
	if (ans->naddrs > 0 || !ans->final[0] || strcmp(ans->final, q->cur) == 0) {
		struct resolve_result res = { .rcode = DNS_R_NOERROR, .ttl = q->ttl };
		res.naddrs = ans->naddrs < DNS_MAX_ADDRS ? ans->naddrs : DNS_MAX_ADDRS;
		memcpy(res.addrs, ans->addrs, sizeof(res.addrs[0]) * (size_t)res.naddrs);
		if (res.ttl == UINT32_MAX)
			res.ttl = 0;
		resolve_finish(n, q, &res);
		goto out;
	}
	/* The chain ends in a name the server gave no records for: ask for it. */
	q->hops += ans->ncnames > 0 ? ans->ncnames : 1;
	if (q->hops > RESOLVE_MAX_HOPS) {
		resolve_fail(n, q, DNS_R_SERVFAIL);
		goto out;
	}
	snprintf(q->cur, sizeof(q->cur), "%s", ans->final);
	q->id = resolve_new_id(r);
	q->tries = 0;
	resolve_send(n, q);
out:
	free(ans);
}

/* Datagrams on one query's socket. */
static void resolve_input(struct net *n, int fd)
{
	struct resolver *r = &n->res;
	uint8_t msg[65536];
	for (int k = 0; k < 8; k++) {
		struct resolve_query *q = NULL;
		for (int i = 0; i < RESOLVE_MAX_PENDING && !q; i++)
			if (r->q[i].used && r->q[i].fd == fd)
				q = &r->q[i];
		if (!q)
			return;         /* answered (and its socket closed) */
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		ssize_t got = recvfrom(fd, msg, sizeof(msg), 0, (struct sockaddr *)&ss, &sl);
		if (got < 0)
			return;
		struct net_addr from = { 0 };
		uint16_t port = 0;
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *s = (struct sockaddr_in *)&ss;
			from.family = AF_INET;
			memcpy(from.a, &s->sin_addr, 4);
			port = ntohs(s->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
			from.family = AF_INET6;
			memcpy(from.a, &s->sin6_addr, 16);
			port = ntohs(s->sin6_port);
		}
		/* connected, so the kernel checked this already; once more, cheaply */
		if (!net_addr_eq(&from, &r->servers[q->server]) || port != r->ports[q->server])
			continue;
		resolve_answer(n, q, msg, (size_t)got);
	}
}

void resolve_poll_fill(const struct resolver *r, struct pollfd **pfd, int *npfd, int *cap)
{
	for (int i = 0; i < RESOLVE_MAX_PENDING; i++) {
		if (!r->q[i].used || r->q[i].fd < 0)
			continue;
		if (*npfd >= *cap) {
			int nc = *cap ? *cap * 2 : 64;
			struct pollfd *np = realloc(*pfd, (size_t)nc * sizeof(*np));
			if (!np)
				return;         /* polled next time round */
			*pfd = np;
			*cap = nc;
		}
		(*pfd)[(*npfd)++] = (struct pollfd){ .fd = r->q[i].fd, .events = POLLIN };
	}
}

void resolve_poll_done(struct net *n, const struct pollfd *pfd, int npfd)
{
	for (int i = 0; i < npfd; i++)
		if (pfd[i].revents & (POLLIN | POLLERR))
			resolve_input(n, pfd[i].fd);
}

void resolve_tick(struct net *n, uint64_t now_ns)
{
	struct resolver *r = &n->res;
	for (int i = 0; i < RESOLVE_MAX_PENDING; i++) {
		struct resolve_query *q = &r->q[i];
		if (!q->used || q->deadline_ns > now_ns)
			continue;
		if (++q->tries >= RESOLVE_MAX_TRIES) {
			resolve_fail(n, q, DNS_R_SERVFAIL);
			continue;
		}
		q->server = (q->server + 1) % r->nservers;
		q->id = resolve_new_id(r);
		resolve_send(n, q);
	}
}

int resolve_next_timeout(const struct resolver *r, uint64_t now_ns)
{
	int t = -1;
	for (int i = 0; i < RESOLVE_MAX_PENDING; i++) {
		if (!r->q[i].used)
			continue;
		uint64_t d = r->q[i].deadline_ns > now_ns ? r->q[i].deadline_ns - now_ns : 0;
		int ms = (int)(d / 1000000ull) + 1;
		if (t < 0 || ms < t)
			t = ms;
	}
	return t;
}
