/* SPDX-License-Identifier: Apache-2.0 */
/* engine.c - the frame path: every frame from the guest is parsed (pkt.c), checked
 * against the policy (policy.c) and only then handed to libslirp, which NATs it to host
 * sockets; frames from slirp go back to the guest. Keeps the flow table.
 *
 * Theory of operation.
 *  - Order for a frame from the guest: parse (pkt.c; malformed: dropped); ARP to
 *    neigh.c; anything not IPv4/IPv6 dropped; fragments dropped; neighbour/router
 *    discovery to neigh.c; multicast and broadcast dropped; DNS to the resolver
 *    (dnssrv.c); then the policy for TCP, UDP and ICMP echo, and only what it passes
 *    reaches slirp. ARP and ND are answered by neigh.c, which gives slirp only frames
 *    it built from checked fields (so slirp learns the guest's MAC).
 *  - The resolver address (10.0.2.3, fd00::3) port 53 is served by dnssrv.c; nothing
 *    else sent to it, and nothing sent to any other address of the virtual network
 *    (slirp maps every one of them to the host's loopback), reaches slirp. The gateway
 *    (10.0.2.2, fd00::2) stands for the host's loopback: policy_decide says when it may.
 *  - TCP: a SYN (no ACK) of a new 4-tuple asks policy_decide; passed, the flow is
 *    recorded and the SYN handed to slirp; refused, the guest gets a RST. A segment of no
 *    known flow gets a RST and never reaches slirp. UDP and ICMP echo: the first
 *    datagram of a pair asks; a refusal is an ICMP "administratively prohibited".
 *  - Frames from slirp to the guest are parsed too: TCP and UDP of no known flow are
 *    dropped (a cut flow stays cut), and FIN/RST and sequence numbers are tracked, so a
 *    flow can be cut with RSTs both ways that each side accepts.
 *  - IP fragments from the guest are dropped: their ports cannot be checked, and the
 *    guest's MTU (1500) and TCP's DF make them rare.
 *  - Broadcast and multicast (other than neighbour discovery) are dropped silently, and
 *    so is a frame whose source is not the guest's (its NIC's MAC and its own address):
 *    root in the guest can write any frame, and slirp would answer any source. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

#include <slirp/libslirp.h>

#include "common/guest.h"
#include "common/util.h"
#include "net/bytes.h"
#include "net/neigh.h"
#include "net/net.h"

#define ENGINE_NS 1000000000ull
/* ICMPv4 code 13 / ICMPv6 code 1: administratively prohibited. A connected UDP socket
 * in a Linux guest gets EHOSTUNREACH (v4) or EACCES (v6) on its next call. */
#define ENGINE_UNREACH4 13
#define ENGINE_UNREACH6 1
/* The MAC kosa8d gives the guest's NIC (src/daemon/vm.c, src/agent/net.c). */
static const uint8_t engine_guest_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };  /* GUEST_MAC */

static inline Slirp *engine_slirp(struct net *n)
{
	return n->eng.slirp;
}

static void engine_dest(char *buf, size_t len, const struct net_addr *a, uint16_t port)
{
	char s[INET6_ADDRSTRLEN];
	net_addr_str(a, s, sizeof(s));
	if (!port)
		snprintf(buf, len, "%s", s);
	else if (a->family == AF_INET6)
		snprintf(buf, len, "[%s]:%u", s, port);
	else
		snprintf(buf, len, "%s:%u", s, port);
}

/* ---- frames to the guest ---- */

void engine_send_guest(struct net *n, const uint8_t *frame, size_t len)
{
	if (n->frames_fd < 0 || len == 0 || len > PKT_MAX_FRAME)
		return;
	uint8_t hdr[4];
	net_wr32(hdr, (uint32_t)len);
	if (n->fout.len + 4 + len > n->fout.max) {
		n->stats.dropped++;
		return;
	}
	if (outq_push(&n->fout, hdr, 4) < 0 || outq_push(&n->fout, frame, len) < 0) {
		n->stats.dropped++;
		return;
	}
	n->stats.frames_out++;
}

static void engine_reply(struct net *n, const uint8_t *frame, size_t len)
{
	if (len)
		engine_send_guest(n, frame, len);
}

size_t engine_build_tcp(uint8_t *out, size_t cap, const uint8_t smac[6], const uint8_t dmac[6],
			const struct net_addr *src, const struct net_addr *dst, uint16_t sport,
			uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags, uint16_t win,
			const uint8_t *opt, size_t optlen, const uint8_t *data, size_t dlen)
{
	bool v6 = src->family == AF_INET6;
	size_t iplen = v6 ? 40 : 20, tcplen = 20 + optlen + dlen;
	size_t total = 14 + iplen + tcplen;
	if (optlen % 4 || optlen > 40 || total > cap || src->family != dst->family)
		return 0;
	memset(out, 0, 14 + iplen + 20);
	memcpy(out, dmac, 6);
	memcpy(out + 6, smac, 6);
	uint8_t *ip = out + 14, *t = ip + iplen;
	uint32_t sum = 0;
	if (v6) {
		out[12] = 0x86, out[13] = 0xdd;
		ip[0] = 0x60;
		net_wr16(ip + 4, (uint16_t)tcplen);
		ip[6] = IPPROTO_TCP, ip[7] = 64;
		memcpy(ip + 8, src->a, 16);
		memcpy(ip + 24, dst->a, 16);
		sum = pkt_csum_add(sum, ip + 8, 32);
	} else {
		out[12] = 0x08, out[13] = 0x00;
		ip[0] = 0x45;
		net_wr16(ip + 2, (uint16_t)(20 + tcplen));
		ip[6] = 0x40;                   /* DF */
		ip[8] = 64, ip[9] = IPPROTO_TCP;
		memcpy(ip + 12, src->a, 4);
		memcpy(ip + 16, dst->a, 4);
		net_wr16(ip + 10, pkt_csum_fold(pkt_csum_add(0, ip, 20)));
		sum = pkt_csum_add(sum, ip + 12, 8);
	}
	uint8_t ph[4] = { 0, 0, 0, IPPROTO_TCP };
	uint8_t pl[4];
	net_wr32(pl, (uint32_t)tcplen);
	sum = pkt_csum_add(sum, ph, 4);
	sum = pkt_csum_add(sum, pl, 4);
	net_wr16(t, sport);
	net_wr16(t + 2, dport);
	net_wr32(t + 4, seq);
	net_wr32(t + 8, ack);
	t[12] = (uint8_t)(((20 + optlen) / 4) << 4);
	t[13] = flags;
	net_wr16(t + 14, win);
	if (optlen)
		memcpy(t + 20, opt, optlen);
	if (dlen)
		memcpy(t + 20 + optlen, data, dlen);
	net_wr16(t + 16, pkt_csum_fold(pkt_csum_add(sum, t, tcplen)));
	return total;
}

/* ---- merging the guest's bulk TCP data (like GRO) ----
 * A guest sending in bulk emits 1.4 KB segments; slirp would make one send() on the host
 * socket and one ACK frame back to the guest for each. Consecutive in-order data segments
 * of one established flow (plain ACK/PSH, no options, same ack number, a valid checksum)
 * that arrive in one batch are merged into one segment of up to ENGINE_GRO_MAX bytes,
 * headers and checksums redone, before slirp sees it. Anything else that goes to slirp
 * first hands it the merged segment, so slirp sees everything in the guest's order.
 * IPv4 only: slirp's IPv6 input refuses a packet above its MTU (ICMPv6 "packet too big"
 * to the guest), while its IPv4 input takes any length. */
#define ENGINE_GRO_MAX 65000            /* payload: the IPv4 total length fits */
#define ENGINE_GRO_BUF (14 + 20 + 20 + ENGINE_GRO_MAX)

static uint32_t engine_fold16(uint64_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint32_t)s;
}

/* One's complement sum of data as big-endian 16-bit words (an odd last byte padded with
 * zero), eight bytes a step: the sum of native-order words is the byte-swapped sum. */
static uint32_t engine_csum(const uint8_t *b, size_t len)
{
	uint64_t s = 0;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint32_t a, c;
		memcpy(&a, b + i, 4);
		memcpy(&c, b + i + 4, 4);
		s += (uint64_t)a + c;
	}
	for (; i + 2 <= len; i += 2) {
		uint16_t h;
		memcpy(&h, b + i, 2);
		s += h;
	}
	if (i < len) {
		uint8_t last[2] = { b[i], 0 };
		uint16_t h;
		memcpy(&h, last, 2);
		s += h;
	}
	return ntohs((uint16_t)engine_fold16(s));
}

/* Hand slirp the merged segment, if any. */
static void engine_gro_flush(struct net *n)
{
	struct engine *e = &n->eng;
	size_t len = e->gro.len;
	if (!len)
		return;
	e->gro.len = 0;
	e->gro.flow = NULL;
	uint8_t *b = e->gro.buf;
	if (e->gro.nseg > 1) {
		uint8_t *ip = b + 14, *t = b + e->gro.l4;
		size_t tcplen = 20 + e->gro.plen, tot = 20 + tcplen;
		net_wr16(ip + 2, (uint16_t)tot);
		ip[10] = ip[11] = 0;
		net_wr16(ip + 10, pkt_csum_fold(pkt_csum_add(0, ip, 20)));
		t[16] = t[17] = 0;
		uint32_t s = pkt_csum_add(pkt_csum_add(0, ip + 12, 8), t, 20);
		net_wr16(t + 16, pkt_csum_fold(s + IPPROTO_TCP + (uint32_t)tcplen + e->gro.psum));
		n->stats.tcp_merged += (uint64_t)e->gro.nseg - 1;
	}
	slirp_input(engine_slirp(n), b, (int)len);
}

/* Every frame for slirp goes through here (or engine_tcp_to_slirp). */
static void engine_to_slirp(struct net *n, const uint8_t *frame, size_t len)
{
	engine_gro_flush(n);
	slirp_input(engine_slirp(n), frame, (int)len);
}

void engine_input_done(struct net *n)
{
	engine_gro_flush(n);
}

/* A TCP segment of flow f (already tracked) for slirp: merged when it can be. */
static void engine_tcp_to_slirp(struct net *n, struct flow *f, const struct pkt *p)
{
	struct engine *e = &n->eng;
	size_t plen = p->payload_len;
	if (!e->gro.buf || p->l3 != PKT_IP4 || p->l3_off != 14 || p->fragment || plen == 0 ||
	    plen > ENGINE_GRO_MAX || p->l4_off != 14 + 20 || p->payload_off != p->l4_off + 20 ||
	    (p->tcp_flags & ~TH_PUSH) != TH_ACK || f->fin || f->closing_ns || !f->have_remote) {
		engine_to_slirp(n, p->frame, p->len);
		return;
	}
	const uint8_t *ip = p->frame + 14, *t = p->frame + p->l4_off;
	uint32_t ps = engine_csum(p->frame + p->payload_off, plen);
	uint32_t s = pkt_csum_add(pkt_csum_add(0, ip + 12, 8), t, 20);
	if (pkt_csum_fold(s + IPPROTO_TCP + 20 + (uint32_t)plen + ps) != 0) {
		engine_to_slirp(n, p->frame, p->len);   /* slirp drops it, as it would */
		return;
	}
	if (e->gro.len && e->gro.flow == f && p->tcp_seq == e->gro.seq_next &&
	    p->tcp_ack == e->gro.ack && !(e->gro.plen & 1) &&
	    e->gro.plen + plen <= ENGINE_GRO_MAX) {
		uint8_t *gt = e->gro.buf + e->gro.l4;
		memcpy(e->gro.buf + e->gro.len, p->frame + p->payload_off, plen);
		e->gro.len += plen;
		e->gro.plen += plen;
		gt[13] |= t[13] & TH_PUSH;
		gt[14] = t[14], gt[15] = t[15];         /* the latest window */
		e->gro.psum = engine_fold16((uint64_t)e->gro.psum + ps);
		e->gro.seq_next += (uint32_t)plen;
		e->gro.nseg++;
		return;
	}
	engine_gro_flush(n);
	size_t flen = p->payload_off + plen;        /* without any Ethernet padding */
	memcpy(e->gro.buf, p->frame, flen);
	e->gro.len = flen;
	e->gro.l4 = p->l4_off;
	e->gro.plen = plen;
	e->gro.flow = f;
	e->gro.seq_next = p->tcp_seq + (uint32_t)plen;
	e->gro.ack = p->tcp_ack;
	e->gro.psum = ps;
	e->gro.nseg = 1;
}

/* ---- the flow table ---- */

static unsigned engine_hash(const struct net *n, int proto, const struct net_addr *src,
			    const struct net_addr *dst, uint16_t sport, uint16_t dport)
{
	uint32_t h = 2166136261u;
	const uint8_t *parts[2] = { src->a, dst->a };
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 16; i++)
			h = (h ^ parts[k][i]) * 16777619u;
	h = (h ^ (uint32_t)proto) * 16777619u;
	h = (h ^ sport) * 16777619u;
	h = (h ^ dport) * 16777619u;
	return h & (n->eng.nbuckets - 1);
}

static struct flow *engine_flow_find(struct net *n, int proto, const struct net_addr *src,
				     const struct net_addr *dst, uint16_t sport, uint16_t dport)
{
	struct engine *e = &n->eng;
	for (int i = e->bucket[engine_hash(n, proto, src, dst, sport, dport)]; i >= 0;
	     i = e->flows[i].next) {
		struct flow *f = &e->flows[i];
		if (f->proto == proto && f->sport == sport && f->dport == dport &&
		    net_addr_eq(&f->src, src) && net_addr_eq(&f->dst, dst))
			return f;
	}
	return NULL;
}

static void engine_flow_del(struct net *n, struct flow *f);

/* At the cap, the connection closed longest ago (lingering only to absorb its last
 * segments) gives its place to a new one: closed flows never block new work. */
static bool engine_flow_reclaim(struct net *n)
{
	struct engine *e = &n->eng;
	struct flow *old = NULL;

	for (int i = 0; i < e->cap; i++) {
		struct flow *f = &e->flows[i];
		if (f->used && f->closing_ns && (!old || f->closing_ns < old->closing_ns))
			old = f;
	}
	if (!old)
		return false;
	engine_flow_del(n, old);
	return true;
}

static struct flow *engine_flow_add(struct net *n, const struct pkt *p, int proto,
				    uint16_t sport, uint16_t dport, const char *dest)
{
	struct engine *e = &n->eng;
	if (e->nflows >= e->cap && !engine_flow_reclaim(n))
		return NULL;
	int idx = -1;
	for (int k = 0; k < e->cap; k++) {
		int i = (e->free_hint + k) % e->cap;
		if (!e->flows[i].used) {
			idx = i;
			break;
		}
	}
	if (idx < 0)
		return NULL;
	e->free_hint = idx + 1;
	struct flow *f = &e->flows[idx];
	memset(f, 0, sizeof(*f));
	f->used = true;
	f->proto = (uint8_t)proto;
	f->src = p->src;
	f->dst = p->dst;
	f->sport = sport;
	f->dport = dport;
	memcpy(f->guest_mac, p->src_mac, 6);
	memcpy(f->gw_mac, p->dst_mac, 6);
	f->created_ns = f->last_ns = n->now_ns;
	snprintf(f->dest, sizeof(f->dest), "%s", dest);
	unsigned b = engine_hash(n, proto, &f->src, &f->dst, sport, dport);
	f->next = e->bucket[b];
	e->bucket[b] = idx;
	e->nflows++;
	return f;
}

static void engine_flow_del(struct net *n, struct flow *f)
{
	struct engine *e = &n->eng;
	if (e->gro.flow == f)
		engine_gro_flush(n);            /* what the flow passed still reaches slirp */
	int idx = (int)(f - e->flows);
	int *pp = &e->bucket[engine_hash(n, f->proto, &f->src, &f->dst, f->sport, f->dport)];
	while (*pp >= 0 && *pp != idx)
		pp = &e->flows[*pp].next;
	if (*pp == idx)
		*pp = f->next;
	f->used = false;
	e->nflows--;
}

/* Cut a TCP flow: a RST to the guest that its stack accepts (seq = what it expects next)
 * and a RST into slirp as if from the guest, so slirp closes the host socket. */
static void engine_flow_cut(struct net *n, struct flow *f, bool tell_guest)
{
	if (f->proto != IPPROTO_TCP || (f->fin & 4))
		return;
	uint8_t fake[256], out[256];
	struct pkt p;
	size_t l;
	/* Towards slirp: from the guest, at the guest's next sequence number; for an inbound
	 * flow at what slirp acknowledged last, which it takes even with its window shut
	 * (a download the host reads slowly), so the host's connection surely ends. */
	uint32_t gseq = f->inbound && f->have_sack ? f->s_ack : f->g_next;
	l = engine_build_tcp(fake, sizeof(fake), f->guest_mac, f->gw_mac, &f->src, &f->dst,
			     f->sport, f->dport, gseq, f->r_next, TH_ACK, 0, NULL, 0, NULL, 0);
	if (l && pkt_parse(&p, fake, l) == 0) {
		size_t ol = pkt_build_tcp_rst_outbound(out, sizeof(out), &p);
		if (ol)
			engine_to_slirp(n, out, ol);
	}
	if (!tell_guest)
		return;
	/* Towards the guest: answering a segment the guest "sent"; with no answer from the
	 * remote yet, that is its SYN (RST+ACK acknowledging it). */
	if (f->have_remote)
		l = engine_build_tcp(fake, sizeof(fake), f->guest_mac, f->gw_mac, &f->src, &f->dst,
				     f->sport, f->dport, f->g_next, f->r_next, TH_ACK, 0, NULL, 0,
				     NULL, 0);
	else
		l = engine_build_tcp(fake, sizeof(fake), f->guest_mac, f->gw_mac, &f->src, &f->dst,
				     f->sport, f->dport, f->isn, 0, TH_SYN, 0, NULL, 0, NULL, 0);
	if (l && pkt_parse(&p, fake, l) == 0)
		engine_reply(n, out, pkt_build_tcp_rst(out, sizeof(out), &p));
}

static bool engine_seq_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

/* ---- slirp callbacks ---- */

static bool engine_in_net(const struct net *n, const struct net_addr *a)
{
	if (a->family == AF_INET)
		return net_addr_in(a, &n->net4, GUEST_PREFIX4);
	return net_addr_in(a, &n->net6, GUEST_PREFIX6);
}

/* An engine container's own IPv4 address (docs/network.md, addresses). */
bool engine_is_ctr4(const struct net *n, const struct net_addr *a)
{
	return a->family == AF_INET && net_addr_in(a, &n->net4, GUEST_PREFIX4) &&
	       a->a[3] >= GUEST_CTR4_FIRST && a->a[3] <= GUEST_CTR4_LAST;
}

/* ---- published ports (inbound.c) ---- */

static void engine_inbound_bytes(struct net *n, const struct flow *f, size_t len, bool in)
{
	struct inbound_port *ip = inbound_find_guest(n, &f->src, f->sport);
	if (!ip)
		return;
	if (in)
		ip->bytes_in += len;
	else
		ip->bytes_out += len;
}

int engine_count_inbound(struct net *n, const struct net_addr *guest, uint16_t guest_port)
{
	struct engine *e = &n->eng;
	int c = 0;
	for (int i = 0; i < e->cap; i++) {
		const struct flow *f = &e->flows[i];
		if (f->used && f->inbound && !f->closing_ns && net_addr_eq(&f->src, guest) &&
		    f->sport == guest_port)
			c++;
	}
	return c;
}

void engine_cut_inbound(struct net *n, const struct net_addr *guest, uint16_t guest_port)
{
	struct engine *e = &n->eng;
	for (int i = 0; i < e->cap; i++) {
		struct flow *f = &e->flows[i];
		if (f->used && f->inbound && net_addr_eq(&f->src, guest) && f->sport == guest_port) {
			engine_flow_cut(n, f, true);
			engine_flow_del(n, f);
		}
	}
}

/* slirp opens a connection towards the guest: only slirp's host forwards do that, and
 * only the published ports have one. A published port under its cap becomes an inbound
 * flow; over the cap (or with the flow table full) slirp gets a RST as if from the guest
 * at the next tick, so it closes the host's connection. Any other SYN from slirp: NULL,
 * dropped. `p` is slirp's frame (src: the remote, dst: the guest). */
static struct flow *engine_inbound_syn(struct net *n, const struct pkt *p)
{
	struct engine *e = &n->eng;
	struct inbound_port *ip;
	struct flow *f = NULL;
	struct pkt q;

	if (!(ip = inbound_find_guest(n, &p->dst, p->dport)))
		return NULL;
	if (engine_count_inbound(n, &ip->guest, ip->guest_port) < ip->max_conns) {
		/* the flow is kept from the guest's side, as for its own connections */
		q = *p;
		q.src = p->dst;
		q.dst = p->src;
		memcpy(q.src_mac, p->dst_mac, 6);
		memcpy(q.dst_mac, p->src_mac, 6);
		char dest[DNS_NAME_MAX + 8];
		snprintf(dest, sizeof(dest), "inbound:%u", ip->guest_port);
		f = engine_flow_add(n, &q, IPPROTO_TCP, p->dport, p->sport, dest);
	}
	if (!f) {
		ip->refused++;
		if (e->nrst < ENGINE_RST_PENDING) {
			size_t l = pkt_build_tcp_rst(e->rst[e->nrst].frame,
						     sizeof(e->rst[e->nrst].frame), p);
			if (l)
				e->rst[e->nrst++].len = l;
		}
		return NULL;
	}
	f->inbound = true;
	f->have_remote = true;
	f->r_next = p->tcp_seq + 1;
	ip->accepted++;
	return f;
}

/* The RSTs decided inside slirp's callbacks, now that slirp is not running. */
static void engine_rst_flush(struct net *n)
{
	struct engine *e = &n->eng;
	int k = e->nrst;
	e->nrst = 0;
	for (int i = 0; i < k; i++)
		engine_to_slirp(n, e->rst[i].frame, e->rst[i].len);
}

/* A frame from slirp to the guest. */
static ssize_t engine_slirp_send(const void *buf, size_t len, void *opaque)
{
	struct net *n = opaque;
	struct pkt p;
	if (pkt_parse(&p, buf, len) == 0 && (p.l3 == PKT_IP4 || p.l3 == PKT_IP6) && !p.fragment &&
	    (p.proto == IPPROTO_TCP || p.proto == IPPROTO_UDP)) {
		struct flow *f = engine_flow_find(n, p.proto, &p.dst, &p.src, p.dport, p.sport);
		if (!f && p.proto == IPPROTO_TCP && (p.tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN)
			f = engine_inbound_syn(n, &p);
		else if (f && f->inbound && p.proto == IPPROTO_TCP &&
			 (p.tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN && p.tcp_seq + 1 != f->r_next &&
			 (f->closing_ns || (f->fin & 4))) {
			/* slirp reuses the 4-tuple of a closed inbound connection: a new one. */
			engine_flow_del(n, f);
			f = engine_inbound_syn(n, &p);
		}
		if (!f) {
			if (!(p.proto == IPPROTO_TCP && (p.tcp_flags & TH_RST)))
				return (ssize_t)len;    /* no flow: not for the guest */
		} else {
			if (f->inbound) {
				engine_inbound_bytes(n, f, p.payload_len, true);
				if (p.proto == IPPROTO_TCP && (p.tcp_flags & TH_ACK)) {
					f->s_ack = p.tcp_ack;
					f->have_sack = true;
				}
			}
			f->last_ns = n->now_ns;
			if (p.proto == IPPROTO_TCP) {
				uint32_t end = p.tcp_seq + (uint32_t)p.payload_len +
					       ((p.tcp_flags & TH_SYN) ? 1 : 0) +
					       ((p.tcp_flags & TH_FIN) ? 1 : 0);
				if (!f->have_remote || engine_seq_after(end, f->r_next))
					f->r_next = end;
				f->have_remote = true;
				if (p.tcp_flags & TH_FIN)
					f->fin |= 2;
				if (p.tcp_flags & TH_RST)
					f->fin |= 4;
				if (((f->fin & 3) == 3 || (f->fin & 4)) && !f->closing_ns)
					f->closing_ns = n->now_ns;
			}
		}
	}
	engine_send_guest(n, buf, len);
	return (ssize_t)len;
}

static void engine_slirp_error(const char *msg, void *opaque)
{
	net_log(opaque, "slirp: guest error: %s", msg);
}

static int64_t engine_clock(void *opaque)
{
	return (int64_t)now_mono_ns();
}

static void *engine_timer_new(SlirpTimerCb cb, void *cb_opaque, void *opaque)
{
	struct engine *e = &((struct net *)opaque)->eng;
	for (int i = 0; i < (int)ARRAY_SIZE(e->timer); i++)
		if (!e->timer[i].used) {
			memset(&e->timer[i], 0, sizeof(e->timer[i]));
			e->timer[i].used = true;
			e->timer[i].cb = cb;
			e->timer[i].cb_opaque = cb_opaque;
			return &e->timer[i];
		}
	return NULL;
}

static void *engine_timer_new_opaque(SlirpTimerId id, void *cb_opaque, void *opaque)
{
	struct engine *e = &((struct net *)opaque)->eng;
	for (int i = 0; i < (int)ARRAY_SIZE(e->timer); i++)
		if (!e->timer[i].used) {
			memset(&e->timer[i], 0, sizeof(e->timer[i]));
			e->timer[i].used = true;
			e->timer[i].id = id;
			e->timer[i].cb_opaque = cb_opaque;
			return &e->timer[i];
		}
	return NULL;
}

static void engine_timer_free(void *timer, void *opaque)
{
	struct engine *e = &((struct net *)opaque)->eng;
	for (int i = 0; i < (int)ARRAY_SIZE(e->timer); i++)
		if ((void *)&e->timer[i] == timer)
			e->timer[i].used = e->timer[i].armed = false;
}

static void engine_timer_mod(void *timer, int64_t expire_ms, void *opaque)
{
	struct engine *e = &((struct net *)opaque)->eng;
	for (int i = 0; i < (int)ARRAY_SIZE(e->timer); i++)
		if ((void *)&e->timer[i] == timer) {
			e->timer[i].armed = true;
			e->timer[i].expire_ms = expire_ms;
		}
}

static void engine_nop_fd(int fd, void *opaque)
{
}

static void engine_notify(void *opaque)
{
}

static const SlirpCb engine_cb = {
	.send_packet = engine_slirp_send,
	.guest_error = engine_slirp_error,
	.clock_get_ns = engine_clock,
	.timer_new = engine_timer_new,
	.timer_free = engine_timer_free,
	.timer_mod = engine_timer_mod,
	.register_poll_fd = engine_nop_fd,
	.unregister_poll_fd = engine_nop_fd,
	.notify = engine_notify,
	.timer_new_opaque = engine_timer_new_opaque,
};

int engine_init(struct net *n, char *err, size_t errlen)
{
	struct engine *e = &n->eng;
	net_addr_parse(GUEST_NET4, &n->net4);
	net_addr_parse(GUEST_GW4, &n->gw4);
	net_addr_parse(GUEST_DNS4, &n->dns4);
	net_addr_parse(GUEST_IP4, &n->guest4);
	net_addr_parse(GUEST_NET6, &n->net6);
	net_addr_parse(GUEST_GW6, &n->gw6);
	net_addr_parse(GUEST_DNS6, &n->dns6);
	net_addr_parse(GUEST_IP6, &n->guest6);

	e->cap = n->max_flows;
	e->flows = calloc((size_t)e->cap, sizeof(*e->flows));
	for (e->nbuckets = 16; e->nbuckets < (unsigned)e->cap * 2; e->nbuckets *= 2)
		;
	e->bucket = malloc(e->nbuckets * sizeof(*e->bucket));
	e->gro.buf = malloc(ENGINE_GRO_BUF);
	if (!e->flows || !e->bucket || !e->gro.buf) {
		snprintf(err, errlen, "out of memory for %d flows", e->cap);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < e->nbuckets; i++)
		e->bucket[i] = -1;

	SlirpConfig cfg = {
		.version = 4,
		.in_enabled = true,
		.in6_enabled = true,
		.vprefix_len = 64,
		.disable_host_loopback = false, /* the gateway: policy_decide guards it */
		.disable_dns = true,
		.disable_dhcp = true,           /* the agent configures the guest statically */
	};
	memcpy(&cfg.vnetwork, n->net4.a, 4);
	inet_pton(AF_INET, "255.255.255.0", &cfg.vnetmask);   /* GUEST_PREFIX4 */
	memcpy(&cfg.vhost, n->gw4.a, 4);
	memcpy(&cfg.vnameserver, n->dns4.a, 4);
	memcpy(&cfg.vdhcp_start, n->guest4.a, 4);
	memcpy(&cfg.vprefix_addr6, n->net6.a, 16);
	memcpy(&cfg.vhost6, n->gw6.a, 16);
	memcpy(&cfg.vnameserver6, n->dns6.a, 16);
	e->slirp = slirp_new(&cfg, &engine_cb, n);
	if (!e->slirp) {
		snprintf(err, errlen, "libslirp could not start");
		return -ENOMEM;
	}
	/* The broker: slirp connects a unix socket per guest connection (a relative path:
	 * the broker's directory is our cwd, main.c, even inside the jail's empty root). */
	net_addr_parse(GUEST_BROKER4, &n->broker4);
	if (n->broker) {
		struct in_addr ba;
		memcpy(&ba, n->broker4.a, 4);
		if (slirp_add_unix(e->slirp, "sock", &ba, GUEST_BROKER_PORT) < 0 ||
		    (n->nintercept && slirp_add_unix(e->slirp, "tls", &ba, 443) < 0)) {
			snprintf(err, errlen, "libslirp refused the broker's address");
			return -EINVAL;
		}
	}
	return 0;
}

void engine_free(struct net *n)
{
	struct engine *e = &n->eng;
	if (e->slirp)
		slirp_cleanup(e->slirp);
	e->slirp = NULL;
	free(e->flows);
	free(e->bucket);
	free(e->gro.buf);
	e->gro.buf = NULL;
	e->gro.len = 0;
	e->flows = NULL;
	e->bucket = NULL;
}

/* ---- frames from the guest ---- */

/* ARP and neighbour discovery (neigh.c): the answer to the guest, and slirp learns the
 * guest's MAC from a frame neigh.c built; the guest's own bytes never reach slirp. */
static void engine_neigh(struct net *n, const struct pkt *p)
{
	const struct neigh_env env = { .net4 = n->net4, .gw4 = n->gw4, .dns4 = n->dns4,
				       .net6 = n->net6, .gw6 = n->gw6, .dns6 = n->dns6,
				       .broker4 = n->broker ? n->broker4 : (struct net_addr){ 0 } };
	struct neigh_out o;

	neigh_input(&env, p, &o);
	if (o.verdict == NEIGH_MALFORMED)
		n->stats.malformed++;
	else if (o.verdict == NEIGH_DROPPED)
		n->stats.dropped++;
	if (o.reply_len)
		engine_send_guest(n, o.reply, o.reply_len);
	if (o.teach_len)
		engine_to_slirp(n, o.teach, o.teach_len);
}

static void engine_refuse(struct net *n, const struct pkt *p, const char *dest, const char *reason)
{
	uint8_t out[1600];
	const char *proto = p->proto == IPPROTO_TCP ? "tcp" : p->proto == IPPROTO_UDP ? "udp" : "icmp";
	stats_refuse(n, dest, proto, reason);
	if (p->proto == IPPROTO_TCP)
		engine_reply(n, out, pkt_build_tcp_rst(out, sizeof(out), p));
	else
		engine_reply(n, out, pkt_build_unreach(out, sizeof(out), p, ENGINE_UNREACH4,
						       ENGINE_UNREACH6));
}

static bool engine_is_multicast(const struct net *n, const struct net_addr *a)
{
	if (a->family == AF_INET6)
		return a->a[0] == 0xff;
	if ((a->a[0] & 0xf0) == 0xe0)
		return true;
	if (a->a[0] == 255 && a->a[1] == 255 && a->a[2] == 255 && a->a[3] == 255)
		return true;
	return net_addr_in(a, &n->net4, GUEST_PREFIX4) && a->a[3] == 255;
}

/* A frame the guest's own stack could have sent: its NIC's MAC, its own address (or
 * its IPv6 link-local one), or an engine container's address (an ipvlan link of the NIC,
 * same MAC; GUEST_CTR4_FIRST..LAST). Anything else is root in the guest writing frames
 * by hand: slirp would open host connections for, and answer, an address that is not
 * the guest's. Frames from one guest address to another are refused later all the same
 * ("internal address"): nothing here forwards a guest's frame back into the guest. */
static bool engine_from_guest(const struct net *n, const struct pkt *p)
{
	if (memcmp(p->src_mac, engine_guest_mac, 6) != 0)
		return false;
	if (p->src.family == AF_INET)
		return net_addr_eq(&p->src, &n->guest4) || engine_is_ctr4(n, &p->src);
	return net_addr_eq(&p->src, &n->guest6) ||
	       (p->src.a[0] == 0xfe && (p->src.a[1] & 0xc0) == 0x80);
}

bool engine_is_broker(const struct net *n, const struct net_addr *dst, uint16_t port, int proto)
{
	return n->broker && proto == IPPROTO_TCP &&
	       (port == GUEST_BROKER_PORT || (port == 443 && n->nintercept)) &&
	       net_addr_eq(dst, &n->broker4);
}

/* The verdict for a new flow, the flow cap included. The broker is not egress: its
 * flows pass in every mode (slirp hands them to the broker's socket, engine_init). */
static void engine_decide(struct net *n, const struct pkt *p, uint16_t port, int proto,
			  struct policy_verdict *v)
{
	if (engine_is_broker(n, &p->dst, port, proto)) {
		memset(v, 0, sizeof(*v));
		v->pass = true;
		snprintf(v->dest, sizeof(v->dest), "broker");
	} else {
		policy_decide(n->policy, &p->dst, port, proto, &n->gw4, &n->gw6, n->now_ns, v);
	}
	if (v->pass && n->eng.nflows >= n->eng.cap && !engine_flow_reclaim(n)) {
		v->pass = false;
		snprintf(v->reason, sizeof(v->reason), "flow limit");
	}
}

static void engine_tcp(struct net *n, const struct pkt *p)
{
	uint8_t out[256];
	struct flow *f = engine_flow_find(n, IPPROTO_TCP, &p->src, &p->dst, p->sport, p->dport);
	uint8_t fl = p->tcp_flags;
	if (!f) {
		if (!(fl & TH_SYN) || (fl & (TH_ACK | TH_RST))) {
			if (!(fl & TH_RST))
				engine_reply(n, out, pkt_build_tcp_rst(out, sizeof(out), p));
			return;
		}
		struct policy_verdict v;
		engine_decide(n, p, p->dport, IPPROTO_TCP, &v);
		if (!v.pass) {
			engine_refuse(n, p, v.dest, v.reason);
			return;
		}
		f = engine_flow_add(n, p, IPPROTO_TCP, p->sport, p->dport, v.dest);
		if (!f) {
			engine_refuse(n, p, v.dest, "flow limit");
			return;
		}
		f->isn = p->tcp_seq;
		f->g_next = p->tcp_seq + 1;
		stats_pass(n, v.dest);
	} else if ((fl & TH_SYN) && !(fl & TH_ACK) && p->tcp_seq != f->isn &&
		   (f->closing_ns || (f->fin & 4))) {
		/* A new connection reusing the 4-tuple of a closed one: decide again. */
		engine_flow_del(n, f);
		engine_tcp(n, p);
		return;
	}
	f->last_ns = n->now_ns;
	if (f->inbound) {
		f->guest_seen = true;
		engine_inbound_bytes(n, f, p->payload_len, false);
	}
	uint32_t end = p->tcp_seq + (uint32_t)p->payload_len + ((fl & TH_SYN) ? 1 : 0) +
		       ((fl & TH_FIN) ? 1 : 0);
	if (engine_seq_after(end, f->g_next))
		f->g_next = end;
	if (fl & TH_FIN)
		f->fin |= 1;
	if (fl & TH_RST)
		f->fin |= 4;
	if (((f->fin & 3) == 3 || (f->fin & 4)) && !f->closing_ns)
		f->closing_ns = n->now_ns;
	engine_tcp_to_slirp(n, f, p);
}

/* UDP, and ICMP echo (id in place of the source port, port 0 for the policy). */
static void engine_dgram(struct net *n, const struct pkt *p, uint16_t sport, uint16_t dport)
{
	struct flow *f = engine_flow_find(n, p->proto, &p->src, &p->dst, sport, dport);
	if (!f) {
		struct policy_verdict v;
		engine_decide(n, p, dport, p->proto, &v);
		if (!v.pass) {
			engine_refuse(n, p, v.dest, v.reason);
			return;
		}
		f = engine_flow_add(n, p, p->proto, sport, dport, v.dest);
		if (!f) {
			engine_refuse(n, p, v.dest, "flow limit");
			return;
		}
		stats_pass(n, v.dest);
	}
	f->last_ns = n->now_ns;
	engine_to_slirp(n, p->frame, p->len);
}

void engine_input(struct net *n, const uint8_t *frame, size_t len)
{
	struct pkt p;
	n->stats.frames_in++;
	if (pkt_parse(&p, frame, len) < 0) {
		n->stats.malformed++;
		return;
	}
	if (p.l3 == PKT_ARP) {
		engine_neigh(n, &p);
		return;
	}
	if (p.l3 != PKT_IP4 && p.l3 != PKT_IP6) {
		n->stats.dropped++;
		return;
	}
	if (!n->eng.guest_mac_known) {
		memcpy(n->eng.guest_mac, p.src_mac, 6);
		n->eng.guest_mac_known = true;
	}
	if (p.fragment) {
		n->stats.dropped++;
		return;
	}
	/* Neighbour and router discovery: answered (or dropped) by neigh.c. */
	if (p.proto == IPPROTO_ICMPV6 && p.icmp_type >= 133 && p.icmp_type <= 137) {
		engine_neigh(n, &p);
		return;
	}
	if (engine_is_multicast(n, &p.dst)) {
		n->stats.dropped++;
		return;
	}
	if (!engine_from_guest(n, &p)) {
		n->stats.dropped++;             /* a spoofed source address or MAC */
		return;
	}
	bool is_dns = net_addr_eq(&p.dst, &n->dns4) || net_addr_eq(&p.dst, &n->dns6);
	if (is_dns && p.dport == 53 && p.proto == IPPROTO_UDP) {
		dnssrv_udp(n, &p);
		return;
	}
	if (is_dns && p.dport == 53 && p.proto == IPPROTO_TCP) {
		dnssrv_tcp(n, &p);
		return;
	}
	bool echo = (p.proto == IPPROTO_ICMP && p.icmp_type == 8) ||
		    (p.proto == IPPROTO_ICMPV6 && p.icmp_type == 128);
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP && !echo) {
		n->stats.dropped++;             /* other protocols, ICMP errors from the guest */
		return;
	}
	bool is_gw = net_addr_eq(&p.dst, &n->gw4) || net_addr_eq(&p.dst, &n->gw6);
	if (!is_gw && engine_in_net(n, &p.dst) && !engine_is_broker(n, &p.dst, p.dport, p.proto)) {
		/* slirp would take any other address of its network for the host's loopback. */
		char dest[DNS_NAME_MAX + 8];
		engine_dest(dest, sizeof(dest), &p.dst, echo ? 0 : p.dport);
		if (p.proto == IPPROTO_TCP && (p.tcp_flags & (TH_RST | TH_ACK)) != 0 &&
		    !(p.tcp_flags & TH_SYN)) {
			uint8_t out[256];
			if (!(p.tcp_flags & TH_RST))
				engine_reply(n, out, pkt_build_tcp_rst(out, sizeof(out), &p));
			return;
		}
		engine_refuse(n, &p, dest, "internal address");
		return;
	}
	if (p.proto == IPPROTO_TCP) {
		engine_tcp(n, &p);
		return;
	}
	if (echo) {
		const uint8_t *id = pkt_get(&p, p.l4_off + 4, 2);
		if (!id) {
			n->stats.malformed++;
			return;
		}
		engine_dgram(n, &p, net_rd16(id), 0);
		return;
	}
	engine_dgram(n, &p, p.sport, p.dport);
}

/* ---- policy changes, expiry, the guest going away ---- */

int engine_set_policy(struct net *n, const json_t *obj, char *err, size_t errlen)
{
	const char *ms = json_string_value(json_object_get(obj, "mode"));
	const json_t *rules = json_object_get(obj, "rules");
	enum policy_mode mode = POLICY_DENY;
	if (ms && policy_mode_parse(ms, &mode) < 0) {
		snprintf(err, errlen, "unknown mode '%s': use deny, allow-list or allow-all", ms);
		return -EINVAL;
	}
	if (!ms && json_object_get(obj, "mode")) {
		snprintf(err, errlen, "\"mode\" must be a string: deny, allow-list or allow-all");
		return -EINVAL;
	}
	if (rules && !json_is_array(rules)) {
		snprintf(err, errlen, "\"rules\" must be an array of strings");
		return -EINVAL;
	}
	size_t nr = rules ? json_array_size(rules) : 0;
	if (nr > POLICY_MAX_RULES) {
		snprintf(err, errlen, "%zu rules; at most %d are allowed", nr, POLICY_MAX_RULES);
		return -EINVAL;
	}
	const char *texts[POLICY_MAX_RULES];
	for (size_t i = 0; i < nr; i++) {
		texts[i] = json_string_value(json_array_get(rules, i));
		if (!texts[i]) {
			snprintf(err, errlen, "rule %zu is not a string", i + 1);
			return -EINVAL;
		}
	}
	/* On a copy: a bad rule leaves the policy in force untouched. */
	struct policy *np = malloc(sizeof(*np));
	if (!np) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	memcpy(np, n->policy, sizeof(*np));
	int rc = policy_set(np, mode, texts, (int)nr, err, errlen);
	if (rc < 0) {
		free(np);
		return rc;
	}
	memcpy(n->policy, np, sizeof(*np));
	free(np);
	/* Flows the new policy refuses are cut. Pins are judged as of the flow's start. */
	struct engine *e = &n->eng;
	int cut = 0;
	for (int i = 0; i < e->cap; i++) {
		struct flow *f = &e->flows[i];
		if (!f->used || engine_is_broker(n, &f->dst, f->dport, f->proto))
			continue;
		if (f->inbound)
			continue;               /* asked for by the host, not the egress policy's */
		struct policy_verdict v;
		policy_decide(n->policy, &f->dst, f->dport, f->proto, &n->gw4, &n->gw6,
			      f->created_ns, &v);
		if (v.pass)
			continue;
		engine_flow_cut(n, f, true);
		engine_flow_del(n, f);
		cut++;
	}
	if (cut)
		net_log(n, "policy change cut %d flow(s)", cut);
	return 0;
}

void engine_guest_gone(struct net *n)
{
	struct engine *e = &n->eng;
	engine_gro_flush(n);
	for (int i = 0; i < e->cap; i++)
		if (e->flows[i].used) {
			engine_flow_cut(n, &e->flows[i], false);
			engine_flow_del(n, &e->flows[i]);
		}
	e->guest_mac_known = false;
	dnssrv_reset(n);
}

void engine_tick(struct net *n, uint64_t now_ns)
{
	struct engine *e = &n->eng;
	engine_gro_flush(n);
	engine_rst_flush(n);
	int64_t now_ms = (int64_t)(now_ns / 1000000ull);
	for (int i = 0; i < (int)ARRAY_SIZE(e->timer); i++) {
		if (!e->timer[i].used || !e->timer[i].armed || e->timer[i].expire_ms > now_ms)
			continue;
		e->timer[i].armed = false;
		if (e->timer[i].cb)
			e->timer[i].cb(e->timer[i].cb_opaque);
		else
			slirp_handle_timer(engine_slirp(n), e->timer[i].id, e->timer[i].cb_opaque);
	}
	if (now_ns - e->last_tick_ns < ENGINE_NS)
		return;
	e->last_tick_ns = now_ns;
	for (int i = 0; i < e->cap; i++) {
		struct flow *f = &e->flows[i];
		if (!f->used)
			continue;
		uint64_t idle = now_ns - f->last_ns;
		if (f->inbound && !f->guest_seen &&
		    now_ns - f->created_ns > ENGINE_INBOUND_SYN_S * ENGINE_NS) {
			/* a guest that never answers does not keep the port's places */
			engine_flow_cut(n, f, false);
			engine_flow_del(n, f);
		} else if (f->proto == IPPROTO_TCP) {
			if (f->closing_ns && now_ns - f->closing_ns > ENGINE_TCP_LINGER_S * ENGINE_NS) {
				engine_flow_del(n, f);
			} else if (idle > ENGINE_TCP_IDLE_S * ENGINE_NS) {
				engine_flow_cut(n, f, true);
				engine_flow_del(n, f);
			}
		} else if (idle > ENGINE_UDP_IDLE_S * ENGINE_NS) {
			engine_flow_del(n, f);
		}
	}
}

static int engine_add_poll(int fd, int events, void *opaque)
{
	struct net *n = opaque;
	struct engine *e = &n->eng;
	if (*e->npfd >= *e->pfd_cap) {
		int nc = *e->pfd_cap ? *e->pfd_cap * 2 : 64;
		struct pollfd *np = realloc(*e->pfd, (size_t)nc * sizeof(*np));
		if (!np)
			return -1;
		*e->pfd = np;
		*e->pfd_cap = nc;
	}
	short ev = 0;
	if (events & SLIRP_POLL_IN)
		ev |= POLLIN;
	if (events & SLIRP_POLL_OUT)
		ev |= POLLOUT;
	if (events & SLIRP_POLL_PRI)
		ev |= POLLPRI;
	(*e->pfd)[*e->npfd] = (struct pollfd){ .fd = fd, .events = ev };
	return (*e->npfd)++;
}

static int engine_get_revents(int idx, void *opaque)
{
	struct net *n = opaque;
	struct engine *e = &n->eng;
	if (idx < 0 || idx >= *e->npfd)
		return 0;
	short r = (*e->pfd)[idx].revents;
	int out = 0;
	if (r & POLLIN)
		out |= SLIRP_POLL_IN;
	if (r & POLLOUT)
		out |= SLIRP_POLL_OUT;
	if (r & POLLPRI)
		out |= SLIRP_POLL_PRI;
	if (r & POLLERR)
		out |= SLIRP_POLL_ERR;
	if (r & POLLHUP)
		out |= SLIRP_POLL_HUP;
	return out;
}

void engine_poll_fill(struct net *n, struct pollfd **pfd, int *npfd, int *cap, int *timeout)
{
	struct engine *e = &n->eng;
	engine_gro_flush(n);
	e->pfd = pfd;
	e->npfd = npfd;
	e->pfd_cap = cap;
	uint32_t t = *timeout < 0 ? UINT32_MAX : (uint32_t)*timeout;
	int64_t now_ms = (int64_t)(now_mono_ns() / 1000000ull);
	for (int i = 0; i < (int)ARRAY_SIZE(e->timer); i++)
		if (e->timer[i].used && e->timer[i].armed) {
			int64_t d = e->timer[i].expire_ms - now_ms;
			uint32_t dm = d < 0 ? 0 : (uint32_t)d;
			if (dm < t)
				t = dm;
		}
	slirp_pollfds_fill(engine_slirp(n), &t, engine_add_poll, n);
	*timeout = t == UINT32_MAX ? -1 : (int)(t > 1000000 ? 1000000 : t);
}

void engine_poll_done(struct net *n, struct pollfd *pfd, int npfd, bool error)
{
	engine_gro_flush(n);
	slirp_pollfds_poll(engine_slirp(n), error ? 1 : 0, engine_get_revents, n);
}
