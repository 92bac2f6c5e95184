/* SPDX-License-Identifier: Apache-2.0 */
/* docker_stats.c - stats and top of a running container, from its agent's ctr.stats and
 * ctr.top, in Docker's shapes (src/docker/stats.c, top.c; docker_stats.h; docs/docker.md
 * "Stats and top").
 */
#include "daemon/docker_stats.h"
#include "daemon/docker_int.h"
#include "docker/stats.h"
#include "docker/top.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- stats and top: the agent's ctr.stats and ctr.top, in Docker's shapes ---- */

/* An agent that predates ctr.stats/ctr.top: say what to do instead of its words. */
static void dks_op_refused(struct k8_err *err, const char *what)
{
	if (err->code == -EOPNOTSUPP) {
		k8_err_clear(err);
		k8_err_set(err, -ENOSYS, "the sandbox's guest agent has no %s: rebuild the guest "
			   "image (make guest) and remove the sandbox", what);
	}
}

/* One sample of c's agent container (op "ctr.stats" or "ctr.top"): its answer, or NULL
 * with err filled (-ESRCH: it does not run). */
static json_t *dks_agent_ask(struct daemon *d, struct dkc *c, const char *op,
			     struct k8_err *err)
{
	struct docker *dk = c->dk;
	char sandbox[64], agent_id[13];
	struct sandbox *sb;
	json_t *resp = NULL;
	bool running;

	pthread_mutex_lock(&dk->lock);
	running = c->state == DPS_RUNNING;
	snprintf(sandbox, sizeof(sandbox), "%s", c->sandbox);
	snprintf(agent_id, sizeof(agent_id), "%s", c->agent_id);
	pthread_mutex_unlock(&dk->lock);
	if (!running) {
		k8_err_set(err, -ESRCH, "Container %s is not running", c->id);
		return NULL;
	}
	sb = sb_get(d, sandbox, err);
	if (!sb)
		return NULL;
	if (sb_agent_request(sb, json_pack("{s:s,s:s}", "op", op, "container", agent_id), 10000,
			     &resp, NULL, err))
		resp = NULL;
	sb_put(d, sb);
	return resp;
}

static void dks_stats_sample(struct daemon *d, struct dkc *c, struct dstats_sample *s,
			     struct k8_err *err)
{
	json_t *ans = dks_agent_ask(d, c, "ctr.stats", err);

	dstats_from_agent(ans, ans ? dk_now_ns() : 0, s);
	json_decref(ans);
}

struct dks_stats {
	struct daemon *d;
	struct dkc *c;
	bool stream, one_shot;
	struct dstats_sample pre, cur;  /* cur: taken by the handler (the first) */
};

static void dks_stats_free(void *ctx)
{
	struct dks_stats *st = ctx;

	dstats_clear(&st->pre);
	dstats_clear(&st->cur);
	dkc_unref(st->c);
	free(st);
}

/* One object and a newline; -1 when the client left. */
static int dks_stats_write(struct dks_stats *st, int fd)
{
	json_t *o = dstats_json(&st->cur, &st->pre, st->c->id, st->c->name);
	char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
	int r = t && write_full(fd, t, strlen(t)) == 0 && write_full(fd, "\n", 1) == 0 ? 0 : -1;

	free(t);
	json_decref(o);
	return r;
}

/* The body: moby's rhythm, a sample a second. stream: each object with the one before as
 * its precpu_stats (the first with zeros), until the container stops or the client goes;
 * stream=false: the second object (so the CPU delta is there), or with one-shot the
 * first; a container that does not run: one object of zeros. */
static void dks_stats_body(void *ctx, const struct api_conn *conn)
{
	struct dks_stats *st = ctx;

	for (bool first = true;; first = false) {
		struct k8_err err = { 0 };
		struct pollfd q = { .fd = conn->fd, .events = 0 };

		if ((st->stream || st->one_shot || !first || !st->cur.read_ns) &&
		    dks_stats_write(st, conn->fd) < 0)
			return;
		if ((!st->stream && (!first || st->one_shot)) || !st->cur.read_ns)
			return;
		/* a second apart; a client that left shows as an error on the pipe */
		if (poll(&q, 1, 1000) > 0 && (q.revents & POLLERR))
			return;
		dstats_clear(&st->pre);
		st->pre = st->cur;
		dks_stats_sample(st->d, st->c, &st->cur, &err);
		if (!st->cur.read_ns && st->stream)
			return;         /* it stopped (or its sandbox went): the stream ends */
	}
}

/* GET /containers/{id}/stats?stream=&one-shot= (docs/docker.md "Stats and top"). */
int dks_api_stats(struct api_call *call)
{
	struct dks_stats *st;
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	st = xcalloc(1, sizeof(*st));
	st->d = call->d;
	st->c = c;
	st->stream = dk_qbool(call, "stream", true);
	st->one_shot = dk_qbool(call, "one-shot", false);
	/* the first sample before the answer: an agent's refusal is a status, not a cut body */
	dks_stats_sample(call->d, c, &st->cur, &call->err);
	if (!st->cur.read_ns && call->err.code != -ESRCH) {
		dks_op_refused(&call->err, "stats (ctr.stats)");
		r = call->err.code ? call->err.code : -EIO;
		dks_stats_free(st);
		return r;
	}
	k8_err_clear(&call->err);
	return api_reply_raw(call, API_RAW_BODY, "application/json", dks_stats_body,
			     dks_stats_free, st);
}

/* GET /containers/{id}/top?ps_args=: moby's 409 when it does not run. */
int dks_api_top(struct api_call *call)
{
	char abuf[128];
	const char *args = NULL;
	enum dtop_fmt fmt;
	struct dkc *c;
	json_t *ans;
	int r;

	if ((r = api_query_str(call, "ps_args", abuf, sizeof(abuf), &args)) ||
	    (r = dtop_args(args, &fmt, &call->err)) || (r = dkc_find_call(call, &c)))
		return r;
	ans = dks_agent_ask(call->d, c, "ctr.top", &call->err);
	dkc_unref(c);
	if (!ans) {
		if (call->err.code == -ESRCH)
			call->err.code = -EBUSY;        /* 409, as moby */
		dks_op_refused(&call->err, "process table (ctr.top)");
		return call->err.code ? call->err.code : -EIO;
	}
	call->out = dtop_json(ans, fmt, time(NULL));
	json_decref(ans);
	return 0;
}
