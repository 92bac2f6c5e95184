/* SPDX-License-Identifier: Apache-2.0 */
/* dnssrv.c - kosa8-net as the guest's resolver: queries to 10.0.2.3 / fd00::3 port 53,
 * over UDP and over TCP, are answered here and never reach slirp.
 *
 * Theory of operation. A query (hostile bytes) is parsed by dns_parse_query. A name the
 * policy does not allow gets REFUSED at once, is counted under "dns:<name>" and becomes a
 * deny event; it is never looked up. An allowed name of type A or AAAA is looked up by
 * resolve.c (hosts file, then the upstream servers); every address of the answer is
 * pinned to the name (policy_pin), and those it refuses to pin (internal addresses that
 * no IP rule lists) are left out; an answer left empty that way is REFUSED. Other types
 * of an allowed name get an empty NOERROR. TTLs given to the guest are capped.
 *
 * DNS over TCP is served by a small TCP endpoint of our own (handshake, in-order data,
 * ACKs, FIN; no retransmission: the link to the guest does not lose frames while QEMU
 * is connected, and when it is not the guest retries). slirp's guestfwd cannot serve the
 * resolver address and cannot tell two connections to the same port apart. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "net/bytes.h"
#include "common/guest.h"
#include "net/net.h"

#define DNSSRV_TCP_BUF (2 + 65535)
#define DNSSRV_TCP_IDLE_NS (30ull * 1000000000ull)
#define DNSSRV_TCP_SEG 1220             /* payload per segment: fits any MSS we may meet */
#define DNSSRV_REPLY_MAX 4096

struct dnssrv_conn {
	bool used, fin_rcvd, fin_sent;
	uint32_t gen;
	struct net_addr guest, srv;
	uint16_t gport;
	uint8_t gmac[6], smac[6];
	uint32_t rcv_nxt, snd_nxt;
	uint8_t *buf;
	size_t blen;
	int pending;
	uint64_t last_ns;
};

struct dnssrv_ctx {
	bool used;
	int conn;                       /* -1: UDP */
	uint32_t gen;
	uint8_t *frame;                 /* UDP: the query's frame, to build the reply from */
	size_t flen;
	struct dns_question q;
	uint16_t sport;                 /* UDP duplicate detection */
	struct net_addr src;
};

struct dnssrv {
	struct dnssrv_ctx ctx[RESOLVE_MAX_PENDING];
	struct dnssrv_conn conn[DNSSRV_MAX_TCP];
	uint32_t gen;
};

int dnssrv_init(struct net *n)
{
	n->dns = calloc(1, sizeof(*n->dns));
	return n->dns ? 0 : -ENOMEM;
}

static void dnssrv_conn_free(struct net *n, struct dnssrv_conn *c)
{
	free(c->buf);
	memset(c, 0, sizeof(*c));
}

static void dnssrv_ctx_free(struct net *n, struct dnssrv_ctx *x)
{
	resolve_cancel(&n->res, x);
	if (x->conn >= 0 && x->conn < DNSSRV_MAX_TCP && n->dns->conn[x->conn].gen == x->gen &&
	    n->dns->conn[x->conn].pending > 0)
		n->dns->conn[x->conn].pending--;
	free(x->frame);
	memset(x, 0, sizeof(*x));
}

void dnssrv_reset(struct net *n)
{
	if (!n->dns)
		return;
	for (int i = 0; i < RESOLVE_MAX_PENDING; i++)
		if (n->dns->ctx[i].used)
			dnssrv_ctx_free(n, &n->dns->ctx[i]);
	for (int i = 0; i < DNSSRV_MAX_TCP; i++)
		if (n->dns->conn[i].used)
			dnssrv_conn_free(n, &n->dns->conn[i]);
}

void dnssrv_free(struct net *n)
{
	dnssrv_reset(n);
	free(n->dns);
	n->dns = NULL;
}

static void dnssrv_tcp_send(struct net *n, struct dnssrv_conn *c, uint8_t flags,
			    const uint8_t *data, size_t len, const uint8_t *opt, size_t optlen)
{
	uint8_t frame[DNSSRV_TCP_SEG + 200];
	size_t fl = engine_build_tcp(frame, sizeof(frame), c->smac, c->gmac, &c->srv, &c->guest,
				     53, c->gport, c->snd_nxt, c->rcv_nxt, flags, 65535, opt,
				     optlen, data, len);
	if (fl)
		engine_send_guest(n, frame, fl);
	c->snd_nxt += (uint32_t)len + ((flags & (TH_SYN | TH_FIN)) ? 1 : 0);
}

/* A finished reply for ctx x: over UDP as a datagram, over TCP length-prefixed. */
static void dnssrv_reply(struct net *n, struct dnssrv_ctx *x, const uint8_t *msg, size_t len)
{
	if (!len)
		return;
	if (x->conn < 0) {
		struct pkt p;
		uint8_t out[DNSSRV_REPLY_MAX + 200];
		if (pkt_parse(&p, x->frame, x->flen) < 0)
			return;
		size_t ol = pkt_build_udp_reply(out, sizeof(out), &p, msg, len);
		if (ol)
			engine_send_guest(n, out, ol);
		return;
	}
	if (x->conn >= DNSSRV_MAX_TCP)
		return;
	struct dnssrv_conn *c = &n->dns->conn[x->conn];
	if (!c->used || c->gen != x->gen || c->fin_sent)
		return;
	uint8_t buf[DNSSRV_REPLY_MAX + 2];
	net_wr16(buf, (uint16_t)len);
	memcpy(buf + 2, msg, len);
	for (size_t off = 0; off < len + 2; off += DNSSRV_TCP_SEG) {
		size_t l = len + 2 - off < DNSSRV_TCP_SEG ? len + 2 - off : DNSSRV_TCP_SEG;
		dnssrv_tcp_send(n, c, TH_ACK | TH_PUSH, buf + off, l, NULL, 0);
	}
}

static void dnssrv_refuse(struct net *n, struct dnssrv_ctx *x, const char *reason)
{
	uint8_t out[DNSSRV_REPLY_MAX];
	char dest[DNS_NAME_MAX + 8];
	snprintf(dest, sizeof(dest), "dns:%s", x->q.name);
	stats_refuse(n, dest, "dns", reason);
	n->stats.dns_refused++;
	dnssrv_reply(n, x, out, dns_build_error(out, sizeof(out), &x->q, DNS_R_REFUSED));
}

static void dnssrv_done(struct net *n, void *opaque, const struct resolve_result *r)
{
	struct dnssrv_ctx *x = opaque;
	uint8_t out[DNSSRV_REPLY_MAX];
	size_t len;
	/* The policy may have changed while the query was out. */
	int rule = policy_name_allowed(n->policy, x->q.name);
	if (rule == -1) {
		dnssrv_refuse(n, x, n->policy->mode == POLICY_DENY ? "egress deny" : "not listed");
		goto out;
	}
	if (r->rcode != DNS_R_NOERROR) {
		len = dns_build_error(out, sizeof(out), &x->q, r->rcode);
		n->stats.dns_answered++;
		dnssrv_reply(n, x, out, len);
		goto out;
	}
	uint32_t ttl = r->ttl < DNSSRV_TTL_CAP ? r->ttl : DNSSRV_TTL_CAP;
	struct net_addr keep[DNS_MAX_ADDRS];
	int nk = 0;
	for (int i = 0; i < r->naddrs && i < DNS_MAX_ADDRS; i++)
		if (policy_pin(n->policy, x->q.name, rule, &r->addrs[i], ttl, n->now_ns))
			keep[nk++] = r->addrs[i];
	if (r->naddrs > 0 && nk == 0) {
		dnssrv_refuse(n, x, "internal address");
		goto out;
	}
	char dest[DNS_NAME_MAX + 8];
	snprintf(dest, sizeof(dest), "dns:%s", x->q.name);
	stats_pass(n, dest);
	n->stats.dns_answered++;
	len = dns_build_answer(out, sizeof(out), &x->q, keep, nk, ttl);
	if (!len)
		len = dns_build_error(out, sizeof(out), &x->q, DNS_R_SERVFAIL);
	dnssrv_reply(n, x, out, len);
out:
	if (x->used)
		dnssrv_ctx_free(n, x);
}

/* GUEST_BROKER_NAME or a name below it, when this sandbox has a broker. */
static bool dnssrv_broker_name(const struct net *n, const char *name)
{
	size_t l = strlen(name), bl = strlen(GUEST_BROKER_NAME);
	if (!n->broker || l < bl || strcmp(name + l - bl, GUEST_BROKER_NAME))
		return false;
	return l == bl || name[l - bl - 1] == '.';
}

/* A rule host of interception mode: answered with the broker's address (IPv4 only, so
 * that no client goes around it over IPv6), in every egress mode. */
static bool dnssrv_intercepted(const struct net *n, const char *name)
{
	for (int i = 0; n->broker && i < n->nintercept; i++)
		if (!strcmp(n->intercept[i], name))
			return true;
	return false;
}

/* One query message from the guest; `tmpl` says where the reply goes. */
static void dnssrv_query(struct net *n, const uint8_t *msg, size_t len, struct dnssrv_ctx *tmpl,
			 const uint8_t *frame, size_t flen)
{
	uint8_t out[DNSSRV_REPLY_MAX];
	int opcode = 0;
	struct dnssrv_ctx x = *tmpl;
	x.frame = (uint8_t *)frame;
	x.flen = flen;
	if (dns_parse_query(msg, len, &x.q, &opcode) < 0) {
		n->stats.malformed++;
		return;
	}
	if (opcode != 0 || x.q.qclass != 1) {
		dnssrv_reply(n, &x, out, dns_build_error(out, sizeof(out), &x.q, DNS_R_NOTIMP));
		return;
	}
	if (dnssrv_broker_name(n, x.q.name) || dnssrv_intercepted(n, x.q.name)) {
		/* The broker's names: answered here in every mode (the broker is not egress). */
		n->stats.dns_answered++;
		dnssrv_reply(n, &x, out, dns_build_answer(out, sizeof(out), &x.q, &n->broker4,
							  x.q.qtype == DNS_T_A ? 1 : 0, 300));
		return;
	}
	int rule = policy_name_allowed(n->policy, x.q.name);
	if (rule == -1) {
		dnssrv_refuse(n, &x, n->policy->mode == POLICY_DENY ? "egress deny" : "not listed");
		return;
	}
	if (x.q.qtype != DNS_T_A && x.q.qtype != DNS_T_AAAA) {
		n->stats.dns_answered++;
		dnssrv_reply(n, &x, out, dns_build_answer(out, sizeof(out), &x.q, NULL, 0, 0));
		return;
	}
	struct dnssrv_ctx *slot = NULL;
	for (int i = 0; i < RESOLVE_MAX_PENDING; i++) {
		struct dnssrv_ctx *c = &n->dns->ctx[i];
		if (!c->used) {
			if (!slot)
				slot = c;
			continue;
		}
		/* A retransmission of a query still out: the first answer serves it. */
		if (x.conn < 0 && c->conn < 0 && c->q.id == x.q.id && c->sport == x.sport &&
		    net_addr_eq(&c->src, &x.src))
			return;
	}
	if (!slot) {
		dnssrv_reply(n, &x, out, dns_build_error(out, sizeof(out), &x.q, DNS_R_SERVFAIL));
		return;
	}
	*slot = x;
	slot->used = true;
	slot->frame = NULL;
	if (x.conn < 0) {
		slot->frame = malloc(flen);
		if (!slot->frame) {
			slot->used = false;
			return;
		}
		memcpy(slot->frame, frame, flen);
	} else {
		n->dns->conn[x.conn].pending++;
	}
	int rc = resolve_start(n, x.q.name, x.q.qtype, dnssrv_done, slot);
	if (rc < 0) {
		/* No server configured, or too many queries out. */
		dnssrv_reply(n, slot, out, dns_build_error(out, sizeof(out), &slot->q,
							    DNS_R_SERVFAIL));
		dnssrv_ctx_free(n, slot);
	}
}

void dnssrv_udp(struct net *n, const struct pkt *p)
{
	const uint8_t *msg = pkt_get(p, p->payload_off, p->payload_len);
	if (!msg || p->payload_len == 0) {
		n->stats.malformed++;
		return;
	}
	struct dnssrv_ctx tmpl = { .conn = -1, .sport = p->sport, .src = p->src };
	dnssrv_query(n, msg, p->payload_len, &tmpl, p->frame, p->len);
}

static void dnssrv_tcp_rst(struct net *n, const struct pkt *p)
{
	uint8_t out[256];
	if (p->tcp_flags & TH_RST)
		return;
	size_t l = pkt_build_tcp_rst(out, sizeof(out), p);
	if (l)
		engine_send_guest(n, out, l);
}

void dnssrv_tcp(struct net *n, const struct pkt *p)
{
	struct dnssrv *d = n->dns;
	struct dnssrv_conn *c = NULL;
	int ci = -1;
	for (int i = 0; i < DNSSRV_MAX_TCP; i++)
		if (d->conn[i].used && d->conn[i].gport == p->sport &&
		    net_addr_eq(&d->conn[i].guest, &p->src) && net_addr_eq(&d->conn[i].srv, &p->dst)) {
			c = &d->conn[i];
			ci = i;
		}
	uint8_t fl = p->tcp_flags;
	if (fl & TH_RST) {
		if (c)
			dnssrv_conn_free(n, c);
		return;
	}
	if ((fl & TH_SYN) && !(fl & TH_ACK)) {
		if (c && c->rcv_nxt != p->tcp_seq + 1) {
			dnssrv_conn_free(n, c);  /* a new connection on an old port */
			c = NULL;
		}
		if (!c) {
			for (int i = 0; i < DNSSRV_MAX_TCP && !c; i++)
				if (!d->conn[i].used)
					c = &d->conn[i];
			if (!c) {
				dnssrv_tcp_rst(n, p);
				return;
			}
			c->buf = malloc(DNSSRV_TCP_BUF);
			if (!c->buf) {
				dnssrv_tcp_rst(n, p);
				return;
			}
			c->used = true;
			c->gen = ++d->gen;
			c->guest = p->src;
			c->srv = p->dst;
			c->gport = p->sport;
			memcpy(c->gmac, p->src_mac, 6);
			memcpy(c->smac, p->dst_mac, 6);
			c->rcv_nxt = p->tcp_seq + 1;
			net_random(&c->snd_nxt, sizeof(c->snd_nxt));
		} else {
			c->snd_nxt--;           /* the SYN-ACK again */
		}
		c->last_ns = n->now_ns;
		static const uint8_t mss[4] = { 2, 4, DNSSRV_TCP_SEG >> 8, DNSSRV_TCP_SEG & 0xff };
		dnssrv_tcp_send(n, c, TH_SYN | TH_ACK, NULL, 0, mss, sizeof(mss));
		return;
	}
	if (!c) {
		dnssrv_tcp_rst(n, p);
		return;
	}
	c->last_ns = n->now_ns;
	if (c->fin_sent && (fl & TH_ACK) && p->tcp_ack == c->snd_nxt && !(fl & TH_FIN) &&
	    p->payload_len == 0) {
		dnssrv_conn_free(n, c);  /* our FIN acknowledged: done */
		return;
	}
	bool ack_needed = false;
	if (p->payload_len > 0 || (fl & TH_FIN)) {
		ack_needed = true;
		if (p->tcp_seq == c->rcv_nxt && !c->fin_rcvd) {
			const uint8_t *data = pkt_get(p, p->payload_off, p->payload_len);
			if (p->payload_len > 0) {
				if (!data || c->blen + p->payload_len > DNSSRV_TCP_BUF) {
					dnssrv_tcp_rst(n, p);
					dnssrv_conn_free(n, c);
					return;
				}
				memcpy(c->buf + c->blen, data, p->payload_len);
				c->blen += p->payload_len;
				c->rcv_nxt += (uint32_t)p->payload_len;
			}
			if (fl & TH_FIN) {
				c->rcv_nxt++;
				c->fin_rcvd = true;
			}
		}
	}
	if (ack_needed)
		dnssrv_tcp_send(n, c, TH_ACK, NULL, 0, NULL, 0);
	/* Whole messages in the buffer: answer each. */
	while (c->blen >= 2) {
		size_t ml = net_rd16(c->buf);
		if (c->blen < 2 + ml)
			break;
		struct dnssrv_ctx tmpl = { .conn = ci, .gen = c->gen };
		if (ml > 0)
			dnssrv_query(n, c->buf + 2, ml, &tmpl, NULL, 0);
		if (!c->used)
			return;
		memmove(c->buf, c->buf + 2 + ml, c->blen - 2 - ml);
		c->blen -= 2 + ml;
	}
	if (c->fin_rcvd && !c->fin_sent && c->pending == 0) {
		dnssrv_tcp_send(n, c, TH_FIN | TH_ACK, NULL, 0, NULL, 0);
		c->fin_sent = true;
	}
}

void dnssrv_tick(struct net *n, uint64_t now_ns)
{
	for (int i = 0; i < DNSSRV_MAX_TCP; i++) {
		struct dnssrv_conn *c = &n->dns->conn[i];
		if (!c->used)
			continue;
		if (c->fin_rcvd && !c->fin_sent && c->pending == 0) {
			dnssrv_tcp_send(n, c, TH_FIN | TH_ACK, NULL, 0, NULL, 0);
			c->fin_sent = true;
		}
		if (now_ns - c->last_ns > DNSSRV_TCP_IDLE_NS) {
			if (!c->fin_sent)
				dnssrv_tcp_send(n, c, TH_RST | TH_ACK, NULL, 0, NULL, 0);
			dnssrv_conn_free(n, c);
		}
	}
}
