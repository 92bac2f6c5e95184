/* SPDX-License-Identifier: Apache-2.0 */
/* net.h - kosa8-net's shared context: the frame path (engine.c), the guest's resolver
 * (dnssrv.c), the upstream DNS client (resolve.c), counters and deny events (stats.c),
 * the control socket (ctl.c; byte queues: src/common/outq.c). One `struct net` per
 * process, passed explicitly; main.c owns it and runs the poll loop.
 *
 * docs/network.md, "kosa8-net: process, control protocol, limits", is the user's view. */
#ifndef K8_NET_NET_H
#define K8_NET_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <poll.h>

#include <jansson.h>

#include "common/outq.h"
#include "common/sidecar.h"
#include "net/addr.h"
#include "net/dns.h"
#include "net/pkt.h"
#include "net/policy.h"

/* ---- stats.c: per-destination counters (bounded, least recently used evicted) and
 * deny events aggregated per destination and second ---- */
#define STATS_MAX_DEST 1024

struct stats_dest {
	char dest[DNS_NAME_MAX + 16];
	uint64_t passed, refused;
	char reason[128];               /* last refusal reason, "" when none */
	uint64_t used;                  /* LRU tick */
	/* deny events of the current second, not yet sent */
	uint64_t ev_sec;
	uint32_t ev_count;
	char ev_proto[8];
	char ev_reason[128];
};

struct stats {
	struct stats_dest *d;           /* STATS_MAX_DEST slots */
	int n;
	uint64_t tick;
	int pending;                    /* slots with ev_count > 0 */
	uint64_t frames_in, frames_out, malformed, dropped;
	uint64_t tcp_merged;            /* guest TCP segments merged into a larger one */
	uint64_t dns_answered, dns_refused;
};

struct net;
int stats_init(struct stats *s);
void stats_free(struct stats *s);
void stats_pass(struct net *n, const char *dest);
/* One refused attempt: counted, and an event is due at the end of this second. */
void stats_refuse(struct net *n, const char *dest, const char *proto, const char *reason);
/* Send the events of seconds that are over (all of them when `all`). */
void stats_flush_events(struct net *n, bool all);
/* Milliseconds until the next flush is due, or -1 when nothing is pending. */
int stats_next_timeout(const struct net *n);
json_t *stats_json(const struct net *n);

/* ---- resolve.c: the upstream DNS client, for names the policy allows ---- */
#define RESOLVE_MAX_SERVERS 8
#define RESOLVE_MAX_PENDING 128
#define RESOLVE_MAX_HOSTS 1024

struct resolve_result {
	int rcode;                      /* DNS_R_*; SERVFAIL after timeouts */
	struct net_addr addrs[DNS_MAX_ADDRS];
	int naddrs;
	uint32_t ttl;
};

typedef void (*resolve_done_fn)(struct net *n, void *opaque, const struct resolve_result *r);

struct resolve_query {
	bool used;
	int fd;                         /* this try's UDP socket, connected to the server;
	                                 * a fresh one (fresh source port) per try, -1: none */
	uint16_t id;                    /* upstream message id, random, fresh per try */
	char want[DNS_NAME_MAX];        /* the name asked for by the guest */
	char cur[DNS_NAME_MAX];         /* the name asked upstream now (CNAME chase) */
	uint16_t qtype;
	int hops, server, tries;
	uint32_t ttl;                   /* smallest TTL along the chain */
	uint64_t deadline_ns;
	resolve_done_fn done;
	void *opaque;
};

struct resolve_host {
	char name[DNS_NAME_MAX];
	struct net_addr addr;
};

struct resolver {
	struct net_addr servers[RESOLVE_MAX_SERVERS];
	uint16_t ports[RESOLVE_MAX_SERVERS];
	int nservers;
	struct resolve_query q[RESOLVE_MAX_PENDING];
	struct resolve_host *hosts;
	int nhosts;
	uint64_t sent;                  /* upstream queries sent (tests read it from stats) */
};

/* Add an upstream server "IP" or "IP:PORT" or "[IPv6]:PORT". 0 or -EINVAL. */
int resolve_add_server(struct resolver *r, const char *spec);
/* The nameservers of a resolv.conf (port 53). Returns how many were added. */
int resolve_load_resolv_conf(struct resolver *r, const char *path);
/* Read a hosts file once; a missing file is not an error. */
int resolve_load_hosts(struct resolver *r, const char *path);
/* Check that UDP sockets can be made for the servers' families (each query makes its
 * own later). 0 or a negative errno. */
int resolve_open(struct resolver *r);
void resolve_close(struct resolver *r);
/* Resolve name/qtype (A or AAAA). From the hosts file: `done` is called before this
 * returns. Upstream: `done` is called later from resolve_input/resolve_tick, exactly once.
 * -EAGAIN when the pending table is full, -ENOENT when no server is configured. */
int resolve_start(struct net *n, const char *name, uint16_t qtype, resolve_done_fn done,
		  void *opaque);
/* Forget every query whose opaque is `opaque` (its owner went away); done is not called. */
void resolve_cancel(struct resolver *r, void *opaque);
/* The poll loop: one entry per query socket, appended to *pfd (grown as needed). */
void resolve_poll_fill(const struct resolver *r, struct pollfd **pfd, int *npfd, int *cap);
void resolve_poll_done(struct net *n, const struct pollfd *pfd, int npfd);
void resolve_tick(struct net *n, uint64_t now_ns);
int resolve_next_timeout(const struct resolver *r, uint64_t now_ns);

/* ---- dnssrv.c: kosa8-net as the guest's resolver (10.0.2.3 / fd00::3, UDP and TCP) ---- */
#define DNSSRV_TTL_CAP 300              /* seconds: longest TTL handed to the guest */
#define DNSSRV_MAX_TCP 16               /* concurrent DNS-over-TCP connections */

struct dnssrv;
int dnssrv_init(struct net *n);
/* A UDP datagram to the resolver address, port 53. */
void dnssrv_udp(struct net *n, const struct pkt *p);
/* A TCP segment to the resolver address, port 53 (a small TCP endpoint of our own). */
void dnssrv_tcp(struct net *n, const struct pkt *p);
void dnssrv_reset(struct net *n);       /* frames connection gone: forget all state */
void dnssrv_tick(struct net *n, uint64_t now_ns);
void dnssrv_free(struct net *n);

/* ---- engine.c: frames from the guest, frames to the guest, flows, slirp ---- */
#define ENGINE_UDP_IDLE_S 60
#define ENGINE_TCP_IDLE_S 7200
#define ENGINE_TCP_LINGER_S 30          /* after FIN both ways or RST */
#define ENGINE_RST_PENDING 32
#define ENGINE_INBOUND_SYN_S 75         /* an inbound connection the guest never answers */

struct flow {
	bool used;
	uint8_t proto;                  /* IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP(V6) */
	struct net_addr src, dst;       /* guest side, remote side */
	uint16_t sport, dport;          /* ICMP echo: sport = identifier, dport = 0 */
	uint8_t guest_mac[6], gw_mac[6];
	uint64_t created_ns, last_ns, closing_ns;
	uint8_t fin;                    /* 1: guest sent FIN, 2: remote sent FIN, 4: RST */
	bool have_remote;               /* remote seq known */
	uint32_t isn, g_next, r_next;   /* guest ISN, next guest seq, next remote seq */
	char dest[DNS_NAME_MAX + 8];    /* counted under */
	bool inbound;                   /* opened from the host through a published port
	                                 * (inbound.c): src/sport are the guest's published
	                                 * side, and no policy ever judges it */
	bool guest_seen;                /* inbound: the guest answered (any segment) */
	bool have_sack;                 /* inbound: s_ack is what slirp last acknowledged */
	uint32_t s_ack;                 /* (its rcv_nxt: a RST there is always taken) */
	int next;                       /* hash chain, -1 ends */
};

struct engine {
	void *slirp;                    /* Slirp * */
	struct flow *flows;
	int cap, nflows, free_hint;
	int *bucket;
	unsigned nbuckets;
	/* RSTs for slirp decided inside one of slirp's own callbacks (an inbound SYN over
	 * its cap): handed to slirp at the next tick, never re-entering it. */
	struct {
		uint8_t frame[128];
		size_t len;
	} rst[ENGINE_RST_PENDING];
	int nrst;
	struct {                        /* slirp's one timer (router advertisements) */
		bool used, armed;
		int id;
		void (*cb)(void *);
		void *cb_opaque;
		int64_t expire_ms;
	} timer[4];
	int ntimers;
	struct pollfd **pfd;            /* the poll set being filled (engine_poll_fill) */
	int *npfd, *pfd_cap;
	uint64_t last_tick_ns;
	uint8_t guest_mac[6];
	bool guest_mac_known;
	/* The guest's bulk TCP data, merged (like GRO) before slirp sees it: consecutive
	 * in-order data segments of one flow become one segment, so slirp makes one send()
	 * on the host socket and one ACK per batch instead of one per 1.4 KB frame. */
	struct {
		uint8_t *buf;           /* the merged frame, ENGINE_GRO_BUF bytes */
		size_t len;             /* frame length so far; 0: nothing pending */
		size_t l4;              /* TCP header offset in buf */
		size_t plen;            /* payload bytes so far */
		struct flow *flow;
		uint32_t seq_next, ack;
		uint32_t psum;          /* one's complement sum of the payload (big-endian) */
		int nseg;
	} gro;
};

int engine_init(struct net *n, char *err, size_t errlen);
void engine_free(struct net *n);
/* One frame from the guest. */
void engine_input(struct net *n, const uint8_t *frame, size_t len);
/* The end of a batch of frames from the guest: hand slirp what is still being merged. */
void engine_input_done(struct net *n);
/* Queue a frame to the guest (dropped when QEMU is not connected). */
void engine_send_guest(struct net *n, const uint8_t *frame, size_t len);
/* Apply {"mode":...,"rules":[...]}; on success flows the new policy refuses are cut.
 * 0 or -EINVAL with a message. */
int engine_set_policy(struct net *n, const json_t *obj, char *err, size_t errlen);
void engine_tick(struct net *n, uint64_t now_ns);
/* slirp's part of the poll loop. */
void engine_poll_fill(struct net *n, struct pollfd **pfd, int *npfd, int *cap, int *timeout);
void engine_poll_done(struct net *n, struct pollfd *pfd, int npfd, bool error);
/* The frames connection went away: drop all flows (the guest is gone or rewound). */
void engine_guest_gone(struct net *n);
/* A complete Ethernet + IPv4/IPv6 + TCP frame (checksums filled, TTL 64); returns its
 * length or 0 when it does not fit. */
size_t engine_build_tcp(uint8_t *out, size_t cap, const uint8_t smac[6], const uint8_t dmac[6],
			const struct net_addr *src, const struct net_addr *dst, uint16_t sport,
			uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags, uint16_t win,
			const uint8_t *opt, size_t optlen, const uint8_t *data, size_t dlen);

/* The broker's address and port, for TCP, when this sandbox has a broker. */
bool engine_is_broker(const struct net *n, const struct net_addr *dst, uint16_t port, int proto);
/* An engine container's own IPv4 address: GUEST_CTR4_FIRST..LAST of the /24. */
bool engine_is_ctr4(const struct net *n, const struct net_addr *a);
/* Published ports (inbound.c): the inbound flows of one guest port, counted or cut. */
int engine_count_inbound(struct net *n, const struct net_addr *guest, uint16_t guest_port);
void engine_cut_inbound(struct net *n, const struct net_addr *guest, uint16_t guest_port);

/* ---- inbound.c: published ports, connections from the host into the guest ---- */
#define INBOUND_MAX 32                  /* published ports per sandbox */
#define INBOUND_MAX_CONNS 64            /* default concurrent connections per port */

struct inbound_port {
	bool used;
	int fd;                         /* the published listener, at the fd number slirp
	                                 * holds it by */
	int family, flags;              /* AF_INET / AF_INET6; slirp's hostfwd flags */
	char host_ip[46];
	struct net_addr guest;          /* the guest's address: the VM's, or an engine
	                                 * container's own (GUEST_CTR4_FIRST..LAST) */
	uint16_t host_port, guest_port;
	struct sockaddr_storage haddr;  /* its address: how slirp finds it to remove it */
	socklen_t haddrlen;
	int max_conns;
	uint64_t accepted, refused;     /* connections let into the guest / refused at cap */
	uint64_t bytes_in, bytes_out;   /* payload towards the guest / from the guest */
};

struct inbound {
	struct inbound_port p[INBOUND_MAX];
};

/* {"op":"publish","guest_port":N[,"max_conns":M][,"guest_ip":"10.0.2.K"]} with the
 * listening socket *fd (taken: *fd = -1 on success). guest_ip: an engine container's own
 * address (host part GUEST_CTR4_FIRST..LAST, IPv4 listeners only); default the VM's
 * address of the listener's family. *out: {"host_ip","host_port","guest_ip","guest_port"}.
 * 0 or a negative errno with a message. */
int inbound_publish(struct net *n, int *fd, const json_t *req, json_t **out, char *err,
		    size_t errlen);
/* {"op":"unpublish","host_ip":...,"host_port":N}: the listener is closed and the
 * port's connections are cut. 0 or a negative errno with a message. */
int inbound_unpublish(struct net *n, const json_t *req, char *err, size_t errlen);
/* The published port of guest:guest_port, or NULL. */
struct inbound_port *inbound_find_guest(struct net *n, const struct net_addr *guest,
					uint16_t guest_port);
/* [{"host_ip","host_port","guest_ip","guest_port","conns","max_conns","accepted","refused",
 *   "bytes_in","bytes_out"}] */
json_t *inbound_json(struct net *n);

/* ---- hostaddr.c: the host's own addresses, kept current in the policy ---- */
/* Open the NETLINK_ROUTE socket (address changes), then read the current addresses.
 * Start-up only (before the privilege drop and seccomp). 0 or a negative errno. */
int hostaddr_open(struct net *n);
/* Notifications on nl_fd. */
void hostaddr_input(struct net *n);
/* Apply a buffer of rtnetlink messages (RTM_NEWADDR adds, RTM_DELADDR removes) to p;
 * n (may be NULL) is for log lines. The number of addresses seen, or -EINVAL for a
 * message whose length does not fit (the ones before it are applied). */
int hostaddr_apply(struct net *n, struct policy *p, const uint8_t *buf, size_t len);
void hostaddr_close(struct net *n);

/* ---- ctl.c: the daemon's requests on the control socket (src/common/sidecar.c serves
 * the JSON lines) ---- */
json_t *ctl_handle(void *net, json_t *req, int *fd, struct k8_err *err);
/* ctl.c: frames come on `fd` (connected, non-blocking, ours) from now on; the old
 * connection and its flows go. net_frames_close: the connection goes (QEMU ended). */
void net_frames_take(struct net *n, int fd);
void net_frames_close(struct net *n);
/* Push one event object (consumed); dropped when no daemon is connected. */
void ctl_event(struct net *n, json_t *ev);

/* ---- the whole process ---- */
struct net {
	const char *id;
	struct policy *policy;
	int max_flows;
	struct net_addr gw4, gw6, dns4, dns6, net4, net6, guest4, guest6;
	/* the egress broker (--broker-dir): TCP to broker4:GUEST_BROKER_PORT goes to the
	 * unix socket "sock" in that directory (our cwd once jailed), past the policy */
	bool broker;
	struct net_addr broker4;
	/* interception (--broker-intercept HOST): these names resolve to broker4, and TCP to
	 * broker4:443 goes to the unix socket "tls" in the broker's directory */
	char intercept[16][254];
	int nintercept;
	int frames_lfd, frames_fd;
	int nl_fd;                      /* hostaddr.c: NETLINK_ROUTE, address changes */
	uint8_t *fin;                   /* frames read buffer */
	size_t finlen;
	struct outq fout;
	struct sc_ctl ctl;
	struct resolver res;
	struct stats stats;
	struct engine eng;
	struct inbound in;
	struct dnssrv *dns;
	uint64_t now_ns;                /* monotonic, refreshed each loop */
};

/* Log a line on stderr with the sandbox id (the daemon appends stderr to a log file). */
void net_log(const struct net *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Random bytes (getrandom). */
void net_random(void *buf, size_t len);

#endif
