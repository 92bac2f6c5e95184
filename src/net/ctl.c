/* SPDX-License-Identifier: Apache-2.0 */
/* ctl.c - the daemon's control socket: JSON, one object per line both ways. Requests
 * carry "id" and "op" (policy, stats, ping) and get {"id":N,"ok":...}; deny events are
 * pushed without an id. One client at a time: a new connection replaces the old one. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"
#include "net/net.h"

#define CTL_LINE_MAX (1 << 20)
#define CTL_OUT_MAX (4 << 20)

void ctl_close(struct net *n)
{
	struct ctl *c = &n->ctl;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->inlen = 0;
	outq_reset(&c->out);
}

int ctl_accept(struct net *n)
{
	struct ctl *c = &n->ctl;
	int fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return -errno;
	ctl_close(n);
	c->fd = fd;
	c->out.max = CTL_OUT_MAX;
	if (!c->in)
		c->in = malloc(CTL_LINE_MAX);
	if (!c->in) {
		ctl_close(n);
		return -ENOMEM;
	}
	return 0;
}

static void ctl_send(struct net *n, json_t *obj)
{
	struct ctl *c = &n->ctl;
	char *s = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!s || c->fd < 0) {
		free(s);
		return;
	}
	size_t l = strlen(s);
	s[l] = '\n';    /* json_dumps leaves room for the NUL: replace it */
	if (outq_push(&c->out, s, l + 1) < 0) {
		net_log(n, "control: daemon does not read; closing the connection");
		ctl_close(n);
	}
	free(s);
}

void ctl_event(struct net *n, json_t *ev)
{
	if (n->ctl.fd < 0) {
		json_decref(ev);
		return;
	}
	ctl_send(n, ev);
}

static json_t *ctl_stats(struct net *n)
{
	json_t *rules = json_array();
	for (int i = 0; i < n->policy->nrules; i++)
		json_array_append_new(rules, json_string(n->policy->rules[i].text));
	return json_pack("{s:b,s:s,s:o,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:i,s:o,s:{s:I,s:I,s:I}}",
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
			 (json_int_t)n->res.sent);
}

static void ctl_request(struct net *n, const char *line, size_t len)
{
	json_error_t jerr;
	json_t *req = json_loadb(line, len, 0, &jerr);
	json_t *reply = NULL;
	json_int_t id = 0;
	char err[512] = "";
	if (!req || !json_is_object(req)) {
		snprintf(err, sizeof(err), "not a JSON object: %s", req ? "" : jerr.text);
		goto out;
	}
	id = json_integer_value(json_object_get(req, "id"));
	const char *op = json_string_value(json_object_get(req, "op"));
	if (!op) {
		snprintf(err, sizeof(err), "missing \"op\": use policy, stats or ping");
	} else if (strcmp(op, "ping") == 0) {
		reply = json_pack("{s:b}", "ok", 1);
	} else if (strcmp(op, "stats") == 0) {
		reply = ctl_stats(n);
	} else if (strcmp(op, "policy") == 0) {
		if (engine_set_policy(n, req, err, sizeof(err)) == 0)
			reply = json_pack("{s:b}", "ok", 1);
	} else {
		snprintf(err, sizeof(err), "unknown op '%s': use policy, stats or ping", op);
	}
out:
	if (!reply)
		reply = json_pack("{s:b,s:s}", "ok", 0, "error", err[0] ? err : "failed");
	if (reply) {
		json_object_set_new(reply, "id", json_integer(id));
		ctl_send(n, reply);
	}
	json_decref(req);
}

void ctl_input(struct net *n)
{
	struct ctl *c = &n->ctl;
	for (;;) {
		if (c->fd < 0)
			return;
		ssize_t r = read(c->fd, c->in + c->inlen, CTL_LINE_MAX - c->inlen);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (r <= 0) {
			ctl_close(n);
			return;
		}
		c->inlen += (size_t)r;
		size_t start = 0;
		for (size_t i = 0; i < c->inlen; i++) {
			if (c->in[i] != '\n')
				continue;
			if (i > start)
				ctl_request(n, c->in + start, i - start);
			start = i + 1;
			if (c->fd < 0)
				return;
		}
		memmove(c->in, c->in + start, c->inlen - start);
		c->inlen -= start;
		if (c->inlen == CTL_LINE_MAX) {
			net_log(n, "control: line longer than %d bytes; closing", CTL_LINE_MAX);
			ctl_close(n);
			return;
		}
	}
}
