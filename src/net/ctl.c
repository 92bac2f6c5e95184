/* SPDX-License-Identifier: Apache-2.0 */
/* ctl.c - the daemon's requests on the control socket: policy, stats, frames, ping, and the
 * published ports (publish with a listening socket passed along, unpublish, ports), and
 * the deny events pushed without an id. The JSON lines themselves, their limits and the
 * reply's "id" and "ok" are src/common/sidecar.c's (one client: a new connection
 * replaces the old one). */
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <string.h>

#include "common/util.h"
#include "net/net.h"

void ctl_event(struct net *n, json_t *ev)
{
	sc_ctl_event(&n->ctl, ev);
}

static json_t *ctl_stats(struct net *n)
{
	json_t *rules = json_array();
	for (int i = 0; i < n->policy->nrules; i++)
		json_array_append_new(rules, json_string(n->policy->rules[i].text));
	return json_pack("{s:b,s:s,s:o,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:i,s:o,s:{s:I,s:I,s:I},s:o}",
			 "ok", 1,
			 "mode", policy_mode_str(n->policy->mode), "rules", rules, "flows",
			 n->eng.nflows, "max_flows", n->max_flows, "frames_in",
			 (json_int_t)n->stats.frames_in, "frames_out",
			 (json_int_t)n->stats.frames_out, "malformed",
			 (json_int_t)n->stats.malformed, "dropped", (json_int_t)n->stats.dropped,
			 "tcp_merged", (json_int_t)n->stats.tcp_merged,
			 "host_addresses", n->policy->nhost, "destinations", stats_json(n), "dns", "answered",
			 (json_int_t)n->stats.dns_answered, "refused",
			 (json_int_t)n->stats.dns_refused, "upstream_queries",
			 (json_int_t)n->res.sent, "ports", inbound_json(n));
}

/* The frame connection (main.c polls it; here so that the unit tests, which link no
 * main.c, have it too). */
void net_frames_close(struct net *n)
{
	if (n->frames_fd >= 0)
		close(n->frames_fd);
	n->frames_fd = -1;
	n->finlen = 0;
	outq_reset(&n->fout);
	engine_guest_gone(n);
}

/* `fd` (a connected stream socket, ours from now on) carries the frames from now on; the
 * old connection goes and with it every flow (engine_guest_gone), as when QEMU ends. */
void net_frames_take(struct net *n, int fd)
{
	if (n->frames_fd >= 0)
		net_log(n, "frames: a new connection replaces the old one");
	net_frames_close(n);
	int sz = 1 << 20;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	n->frames_fd = fd;
}

/* "frames" with a descriptor: the daemon hands over the socket of the VM that replaces
 * the current one (a rewind through a spare, docs/design.md), already connected to that
 * QEMU's NIC. It must be a stream socket; it is put in non-blocking mode. */
static json_t *ctl_frames(struct net *n, int *fd, struct k8_err *err)
{
	int type = 0;
	socklen_t tl = sizeof(type);

	if (*fd < 0 || getsockopt(*fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
	    type != SOCK_STREAM || fcntl(*fd, F_SETFL, O_NONBLOCK) < 0) {
		k8_err_set(err, -EINVAL, "\"frames\" needs a connected stream socket as an fd");
		return NULL;
	}
	net_frames_take(n, *fd);
	*fd = -1;
	return json_object();
}

json_t *ctl_handle(void *net, json_t *req, int *fd, struct k8_err *err)
{
	struct net *n = net;
	const char *op = json_string_value(json_object_get(req, "op"));
	char msg[512] = "";

	if (strcmp(op, "ping") == 0)
		return json_object();
	if (strcmp(op, "stats") == 0)
		return ctl_stats(n);
	if (strcmp(op, "publish") == 0) {
		json_t *out = NULL;
		int rc = inbound_publish(n, fd, req, &out, msg, sizeof(msg));
		if (rc == 0)
			return out;
		k8_err_set(err, rc, "%s", msg[0] ? msg : "failed");
		return NULL;
	}
	if (strcmp(op, "unpublish") == 0) {
		int rc = inbound_unpublish(n, req, msg, sizeof(msg));
		if (rc == 0)
			return json_object();
		k8_err_set(err, rc, "%s", msg[0] ? msg : "failed");
		return NULL;
	}
	if (strcmp(op, "ports") == 0)
		return json_pack("{s:o}", "ports", inbound_json(n));
	if (strcmp(op, "policy") == 0) {
		if (engine_set_policy(n, req, msg, sizeof(msg)) == 0)
			return json_object();
		k8_err_set(err, -EINVAL, "%s", msg[0] ? msg : "failed");
		return NULL;
	}
	if (strcmp(op, "frames") == 0)
		return ctl_frames(n, fd, err);
	k8_err_set(err, -EINVAL, "unknown op '%s': use policy, stats, frames, ping, publish, "
		   "unpublish or ports", op);
	return NULL;
}
