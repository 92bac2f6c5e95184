/* SPDX-License-Identifier: Apache-2.0 */
/* stats.c - counters per destination (a bounded table, least recently used entry
 * evicted) and the deny events: at most one per destination and second, carrying the
 * number of refused attempts in that second, so that a port scan cannot flood the log. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "net/net.h"

int stats_init(struct stats *s)
{
	memset(s, 0, sizeof(*s));
	s->d = calloc(STATS_MAX_DEST, sizeof(*s->d));
	return s->d ? 0 : -ENOMEM;
}

void stats_free(struct stats *s)
{
	free(s->d);
	s->d = NULL;
}

static uint64_t stats_sec(void)
{
	return now_real_ns() / 1000000000ull;
}

static void stats_emit(struct net *n, struct stats_dest *e)
{
	char tbuf[K8_TIME_LEN];
	k8_time_fmt(tbuf, (int64_t)e->ev_sec, -1);
	json_t *ev = json_pack("{s:s,s:s,s:s,s:I,s:s,s:s}", "event", "deny", "dest", e->dest,
			       "proto", e->ev_proto, "count", (json_int_t)e->ev_count,
			       "reason", e->ev_reason, "time", tbuf);
	e->ev_count = 0;
	n->stats.pending--;
	if (ev)
		ctl_event(n, ev);
}

/* The entry for dest, created (evicting the least recently used) when absent. */
static struct stats_dest *stats_get(struct net *n, const char *dest)
{
	struct stats *s = &n->stats;
	struct stats_dest *lru = NULL;
	for (int i = 0; i < s->n; i++) {
		if (strcmp(s->d[i].dest, dest) == 0) {
			s->d[i].used = ++s->tick;
			return &s->d[i];
		}
		if (!lru || s->d[i].used < lru->used)
			lru = &s->d[i];
	}
	struct stats_dest *e;
	if (s->n < STATS_MAX_DEST) {
		e = &s->d[s->n++];
	} else {
		e = lru;
		if (e->ev_count)
			stats_emit(n, e);
	}
	memset(e, 0, sizeof(*e));
	snprintf(e->dest, sizeof(e->dest), "%s", dest);
	e->used = ++s->tick;
	return e;
}

void stats_pass(struct net *n, const char *dest)
{
	stats_get(n, dest)->passed++;
}

void stats_refuse(struct net *n, const char *dest, const char *proto, const char *reason)
{
	struct stats_dest *e = stats_get(n, dest);
	uint64_t sec = stats_sec();
	e->refused++;
	snprintf(e->reason, sizeof(e->reason), "%s", reason);
	if (e->ev_count && e->ev_sec != sec)
		stats_emit(n, e);
	if (!e->ev_count) {
		e->ev_sec = sec;
		n->stats.pending++;
	}
	e->ev_count++;
	snprintf(e->ev_proto, sizeof(e->ev_proto), "%s", proto);
	snprintf(e->ev_reason, sizeof(e->ev_reason), "%s", reason);
}

void stats_flush_events(struct net *n, bool all)
{
	struct stats *s = &n->stats;
	if (!s->pending)
		return;
	uint64_t sec = stats_sec();
	for (int i = 0; i < s->n && s->pending; i++)
		if (s->d[i].ev_count && (all || s->d[i].ev_sec < sec))
			stats_emit(n, &s->d[i]);
}

int stats_next_timeout(const struct net *n)
{
	if (!n->stats.pending)
		return -1;
	uint64_t ns = now_real_ns();
	return (int)(1000 - (ns / 1000000ull) % 1000) + 1;
}

json_t *stats_json(const struct net *n)
{
	const struct stats *s = &n->stats;
	json_t *arr = json_array();
	for (int i = 0; i < s->n; i++) {
		const struct stats_dest *e = &s->d[i];
		json_array_append_new(arr, json_pack("{s:s,s:I,s:I,s:o}", "dest", e->dest,
						     "passed", (json_int_t)e->passed, "refused",
						     (json_int_t)e->refused, "reason",
						     e->reason[0] ? json_string(e->reason)
								  : json_null()));
	}
	return arr;
}
