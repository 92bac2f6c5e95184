/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_ctl.c - E2B's control plane over kosa8's sandboxes (e2b_ctl.h, docs/e2b.md).
 *
 * A create boots a kosa8 sandbox "e2b-<id>" (sizes from config.json "e2b", egress from
 * the request's network, the header rules as broker rules whose values become kosa8
 * secrets "e2b-<id>-N") and starts the template image's long-lived container. A
 * template that names a snapshot forks that checkpoint instead. Fork by count takes a
 * checkpoint of the source, forks it count times and drops it (each fork's disk links
 * the checkpoint's layers). Pause is kosa8's pause to disk; resume its restore. */
#include "daemon/e2b_ctl.h"
#include "daemon/e2b_box.h"
#include "daemon/e2b_keys.h"
#include "daemon/broker.h"
#include "daemon/checkpoint.h"
#include "daemon/egress.h"
#include "daemon/sandbox.h"
#include "daemon/secret.h"
#include "docker/stream.h"
#include "e2b/control.h"
#include "image/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define E2B_LIST_LIMIT 100
#define E2B_FORK_MAX 8

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int e2b_ctl_auth(struct api_call *call)
{
	const char *key = call->header ? call->header(call->query_ctx, "X-API-Key") : NULL;

	if (!key || !*key)
		return k8_err_set(&call->err, -EKEYREJECTED, "missing X-API-Key: make a key with "
				  "`kosa8 e2b key create` and set E2B_API_KEY");
	if (e2b_key_check(call->d, key))
		return k8_err_set(&call->err, -EKEYREJECTED, "invalid API key (keys: `kosa8 e2b key "
				  "list`)");
	return 0;
}

/* The box the path's {id} names, with a reference; 404 in E2B's words when none. */
static int ctl_box(struct api_call *call, bool killed, struct e2b_box **bp)
{
	const char *id = api_param(call, "id");

	*bp = e2b_box_get(call->d, id, killed);
	if (*bp)
		return 0;
	return k8_err_set(&call->err, -ENOENT, "sandbox %.40s not found", id);
}

/* auth and box: the first two steps of every per-sandbox handler */
static int ctl_begin(struct api_call *call, struct e2b_box **bp)
{
	int r = e2b_ctl_auth(call);

	return r ? r : ctl_box(call, false, bp);
}

/* The end of a handler that answers 204: the box's reference goes. */
static int ctl_done(struct api_call *call, struct e2b_box *b, int r)
{
	e2b_box_put(call->d, b);
	if (!r)
		call->status = 204;
	return r;
}

static json_t *ctl_created(struct e2b_box *b)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:n}", "sandboxID", b->id, "templateID",
			 b->template_id, "clientID", "kosa8", "envdVersion", E2B_ENVD_VERSION,
			 "envdAccessToken", b->token, "trafficAccessToken", b->traffic, "domain");
}

static void set_end(struct daemon *d, struct e2b_box *b, int64_t timeout_s)
{
	struct e2b *e = e2b_of(d);

	pthread_mutex_lock(&e->lock);
	b->end_ns = now_ns() + timeout_s * 1000000000LL;
	pthread_mutex_unlock(&e->lock);
}

/* The network as getInfo shows it: allowOut, denyOut, rules by host with their header
 * names (never a value), allow_internet_access. */
static json_t *ctl_network_record(const struct e2b_net *n)
{
	json_t *v = json_object(), *rules = json_object();

	if (n->allow_out)
		json_object_set(v, "allowOut", n->allow_out);
	if (n->deny_out)
		json_object_set(v, "denyOut", n->deny_out);
	for (size_t i = 0; i < n->nt; i++)
		json_object_set_new(rules, n->t[i].host,
				    json_pack("[{s:{s:{s:s}}}]", "transform", "headers",
					      n->t[i].header, "(kept by kosa8)"));
	if (n->has_rules)
		json_object_set(v, "rules", rules);
	json_decref(rules);
	if (n->allow_internet >= 0)
		json_object_set_new(v, "allow_internet_access", json_boolean(n->allow_internet));
	return v;
}

/* The header rules as kosa8 secrets and broker rules (added to body). */
static int ctl_broker(struct daemon *d, struct e2b_box *b, const struct e2b_net *n,
		      json_t *body, struct k8_err *err)
{
	json_t *rules;

	if (!n->nt)
		return 0;
	rules = json_array();
	for (size_t i = 0; i < n->nt; i++) {
		char name[SECRET_NAME_MAX + 1];
		bool replaced;
		int r;

		snprintf(name, sizeof(name), "e2b-%s-%zu", b->id, i);
		r = secret_set(d->home, name, n->t[i].value, strlen(n->t[i].value), &replaced, err);
		if (r) {
			json_decref(rules);
			return r;
		}
		json_array_append_new(b->secrets, json_string(name));
		json_array_append_new(rules, json_sprintf("header:%s:%s=%s", n->t[i].host,
							  n->t[i].header, name));
	}
	json_object_set_new(body, "broker", rules);
	json_object_set_new(body, "broker_intercept", json_true());
	return 0;
}

/* The image's environment, user and working folder into b. */
static int ctl_image(struct daemon *d, struct e2b_box *b, struct k8_err *err)
{
	struct image_info info;
	int r = image_resolve(d->images, b->image, &info, err);

	if (r)
		return r;
	json_decref(b->image_env);
	b->image_env = json_incref(info.env);
	snprintf(b->user, sizeof(b->user), "%s", info.user);
	snprintf(b->workdir, sizeof(b->workdir), "%s", info.workdir);
	image_info_clear(&info);
	return 0;
}

/* A fresh sandbox for b (its template resolved to b->image): boot, then its container. */
static int ctl_boot(struct daemon *d, struct e2b_box *b, struct e2b_create *c,
		    struct k8_err *err)
{
	int cpus, mem, disk, r;
	json_t *body, *out = NULL;

	if ((r = ctl_image(d, b, err)))
		return r;
	e2b_sizes(d, &cpus, &mem, &disk);
	body = json_pack("{s:s,s:i,s:i,s:i,s:s,s:O,s:i,s:{s:s,s:s,s:s}}", "name", b->sandbox,
			 "cpus", cpus, "memory_mib", mem, "disk_gb", disk, "egress", c->net.mode,
			 "egress_allow", c->net.rules, "idle_pause_s", 0, "owner", "kind", "e2b",
			 "namespace", "e2b", "id", b->id);
	if ((r = ctl_broker(d, b, &c->net, body, err))) {
		json_decref(body);
		return r;
	}
	r = sb_create(d, body, NULL, NULL, &out, err);
	json_decref(body);
	json_decref(out);
	return r ? r : e2b_box_container(d, b, err);
}

/* Undo a create or fork that failed half way: the sandbox, its secrets, the box. */
static void ctl_unmake(struct daemon *d, struct e2b_box *b)
{
	struct k8_err e = { 0 };
	size_t i;
	json_t *v;

	sb_remove(d, b->sandbox, false, &e);
	json_array_foreach(b->secrets, i, v) {
		if (strncmp(json_string_value(v), "e2b-", 4) || !strstr(json_string_value(v), b->id))
			continue;       /* a fork's secrets are its source's */
		k8_err_clear(&e);
		secret_remove(d->home, json_string_value(v), &e);
	}
	e2b_box_forget(d, b);
}

/* The snapshot `id` (or name) of any box: that box (a reference) and the checkpoint's
 * label; NULL when there is none. */
static struct e2b_box *ctl_snapshot_find(struct daemon *d, const char *id, char *label,
					 size_t n)
{
	size_t nb, i, j, k;
	struct e2b_box **all = e2b_box_all(d, &nb), *hit = NULL;
	struct e2b *e = e2b_of(d);
	json_t *s, *name;

	pthread_mutex_lock(&e->lock);
	for (i = 0; i < nb && !hit; i++)
		json_array_foreach(all[i]->snapshots, j, s) {
			bool match = !strcmp(json_string_value(json_object_get(s, "id")) ?: "", id);
			json_array_foreach(json_object_get(s, "names"), k, name)
				match = match || !strcmp(json_string_value(name) ?: "", id);
			if (match) {
				hit = all[i];
				hit->refs++;
				snprintf(label, n, "%s", json_string_value(json_object_get(s, "label")) ?: "");
				break;
			}
		}
	pthread_mutex_unlock(&e->lock);
	for (i = 0; i < nb; i++)
		e2b_box_put(d, all[i]);
	free(all);
	return hit;
}

/* A new box forked from checkpoint `label` of src: its settings copied, running, with
 * its own id and tokens. Its op is held while it is made: the reaper takes a box in the
 * table whose kosa8 sandbox is not there (yet) for one removed behind its back and
 * kills it, unless its op is busy (as create holds it). */
static struct e2b_box *ctl_fork_one(struct daemon *d, struct e2b_box *src, const char *label,
				    int64_t timeout_s, struct k8_err *err)
{
	struct e2b *e = e2b_of(d);
	struct e2b_box *b = e2b_box_new(d, err);
	struct sandbox *ssb;
	json_t *out = NULL;
	int r;

	if (!b)
		return NULL;
	pthread_mutex_lock(&e->lock);
	snprintf(b->template_id, sizeof(b->template_id), "%s", src->template_id);
	snprintf(b->image, sizeof(b->image), "%s", src->image);
	snprintf(b->container, sizeof(b->container), "%s", src->container);
	snprintf(b->user, sizeof(b->user), "%s", src->user);
	snprintf(b->workdir, sizeof(b->workdir), "%s", src->workdir);
	json_decref(b->image_env);
	json_decref(b->env_vars);
	json_decref(b->metadata);
	json_decref(b->network);
	json_decref(b->secrets);
	b->image_env = json_deep_copy(src->image_env);
	b->env_vars = json_deep_copy(src->env_vars);
	b->metadata = json_deep_copy(src->metadata);
	b->network = json_deep_copy(src->network);
	b->secrets = json_deep_copy(src->secrets);      /* the broker rules name them */
	b->auto_pause = src->auto_pause;
	b->auto_resume = src->auto_resume;
	pthread_mutex_unlock(&e->lock);
	pthread_mutex_lock(&b->op);
	ssb = sb_get(d, src->sandbox, err);
	if (!ssb) {
		pthread_mutex_unlock(&b->op);
		e2b_box_forget(d, b);
		e2b_box_put(d, b);
		return NULL;
	}
	r = ckpt_fork(d, ssb, label, b->sandbox, &out, err);
	sb_put(d, ssb);
	json_decref(out);
	set_end(d, b, timeout_s);
	if (!r)
		r = e2b_box_save(d, b, err);
	pthread_mutex_unlock(&b->op);
	if (r) {
		ctl_unmake(d, b);
		e2b_box_put(d, b);
		return NULL;
	}
	e2b_audit(d, b, "e2b.fork", json_pack("{s:s,s:s}", "from", src->id, "checkpoint", label));
	return b;
}

int e2b_api_create(struct api_call *call)
{
	struct daemon *d = call->d;
	struct e2b_create c;
	struct e2b_box *b, *src;
	char label[64];
	int r;

	if ((r = e2b_ctl_auth(call)) || (r = e2b_create_parse(call->body, "base", &c, &call->err)))
		return r;
	src = ctl_snapshot_find(d, c.template_id, label, sizeof(label));
	if (src) {
		/* a snapshot: a fork of its checkpoint, with this request's metadata and env */
		if (c.net.nt || json_object_get(call->body, "network")) {
			e2b_box_put(d, src);
			e2b_create_clear(&c);
			return k8_err_set(&call->err, -ENOTSUP, "network settings for a sandbox "
					  "made from a snapshot are not supported by kosa8: it has "
					  "the snapshot's (change them with updateNetwork)");
		}
		pthread_mutex_lock(&src->op);
		b = ctl_fork_one(d, src, label, c.timeout_s, &call->err);
		pthread_mutex_unlock(&src->op);
		e2b_box_put(d, src);
		if (!b) {
			e2b_create_clear(&c);
			return call->err.code ? call->err.code : -EIO;
		}
		pthread_mutex_lock(&e2b_of(d)->lock);
		snprintf(b->template_id, sizeof(b->template_id), "%s", c.template_id);
		json_decref(b->metadata);
		b->metadata = json_incref(c.metadata);
		json_object_update(b->env_vars, c.env_vars);
		b->auto_pause = c.auto_pause;
		b->auto_resume = c.auto_resume;
		pthread_mutex_unlock(&e2b_of(d)->lock);
		e2b_box_save(d, b, &call->err);
		k8_err_clear(&call->err);
		goto done;
	}
	b = e2b_box_new(d, &call->err);
	if (!b) {
		e2b_create_clear(&c);
		return call->err.code;
	}
	snprintf(b->template_id, sizeof(b->template_id), "%s", c.template_id);
	json_decref(b->metadata);
	json_decref(b->env_vars);
	json_decref(b->network);
	b->metadata = json_incref(c.metadata);
	b->env_vars = json_incref(c.env_vars);
	b->network = ctl_network_record(&c.net);
	b->auto_pause = c.auto_pause;
	b->auto_resume = c.auto_resume;
	pthread_mutex_lock(&b->op);
	r = e2b_template_image(d, c.template_id, b->image, sizeof(b->image), &call->err);
	if (!r)
		r = ctl_boot(d, b, &c, &call->err);
	set_end(d, b, c.timeout_s);
	if (!r)
		r = e2b_box_save(d, b, &call->err);
	pthread_mutex_unlock(&b->op);
	if (r) {
		/* a template that names nothing is the client's mistake: 400, as E2B answers */
		if (r == -ENOENT)
			call->err.code = -EINVAL;
		ctl_unmake(d, b);
		e2b_box_put(d, b);
		e2b_create_clear(&c);
		return call->err.code;
	}
	e2b_audit(d, b, "e2b.create", json_pack("{s:s,s:s,s:I,s:s}", "template", c.template_id,
						"image", b->image, "timeout_s",
						(json_int_t)c.timeout_s, "egress", c.net.mode));
done:
	e2b_create_clear(&c);
	call->status = 201;
	call->out = ctl_created(b);
	e2b_box_put(d, b);
	return 0;
}

/* ---- connect, info, kill, timeout, pause ---- */

int e2b_api_connect(struct api_call *call)
{
	struct e2b_box *b;
	int64_t timeout = 0;
	bool resumed = false;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	if ((r = e2b_timeout(call->body, &timeout, &call->err)))
		goto out;
	if (json_is_false(json_object_get(call->body, "memory"))) {
		r = k8_err_set(&call->err, -ENOTSUP, "onResume 'reboot' is not supported by kosa8: "
			       "a paused sandbox resumes with its memory");
		goto out;
	}
	pthread_mutex_lock(&b->op);
	if (b->state == E2B_PAUSED) {
		r = e2b_box_resume(call->d, b, &call->err);
		resumed = !r;
		if (!r && !timeout)
			timeout = E2B_TIMEOUT_DEFAULT;
	}
	if (!r && timeout) {
		set_end(call->d, b, timeout);
		r = e2b_box_save(call->d, b, &call->err);
	}
	pthread_mutex_unlock(&b->op);
	if (!r) {
		call->status = resumed ? 201 : 200;
		call->out = ctl_created(b);
	}
out:
	e2b_box_put(call->d, b);
	return r;
}

int e2b_api_info(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	struct e2b_box *b;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	pthread_mutex_lock(&e->lock);
	call->out = e2b_box_json(call->d, b, true);
	pthread_mutex_unlock(&e->lock);
	e2b_box_put(call->d, b);
	return 0;
}

int e2b_api_kill(struct api_call *call)
{
	struct e2b_box *b;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	pthread_mutex_lock(&b->op);
	r = b->state == E2B_KILLED ? k8_err_set(&call->err, -ENOENT, "sandbox %s not found", b->id)
				   : e2b_box_kill(call->d, b, "api", &call->err);
	pthread_mutex_unlock(&b->op);
	return ctl_done(call, b, r);
}

int e2b_api_timeout(struct api_call *call)
{
	struct e2b_box *b;
	int64_t t = -1;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	if (!json_object_get(call->body, "timeout"))
		r = k8_err_set(&call->err, -EINVAL, "timeout (seconds) is required");
	else
		r = e2b_timeout(call->body, &t, &call->err);
	if (!r) {
		pthread_mutex_lock(&b->op);
		set_end(call->d, b, t);
		r = e2b_box_save(call->d, b, &call->err);
		pthread_mutex_unlock(&b->op);
		e2b_audit(call->d, b, "e2b.timeout", json_pack("{s:I}", "timeout_s", (json_int_t)t));
	}
	return ctl_done(call, b, r);
}

/* POST /sandboxes/{id}/refreshes {"duration"}: the older SDKs' keep-alive: the timeout
 * becomes at least that many seconds from now. */
int e2b_api_refresh(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	struct e2b_box *b;
	int64_t dur = 0;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	if ((r = api_body_int(call, "duration", API_OPTIONAL, 0, E2B_TIMEOUT_MAX, &dur)) == 0) {
		pthread_mutex_lock(&e->lock);
		int64_t want = now_ns() + (dur ? dur : E2B_TIMEOUT_DEFAULT) * 1000000000LL;
		if (want > b->end_ns)
			b->end_ns = want;
		pthread_mutex_unlock(&e->lock);
		r = e2b_box_save(call->d, b, &call->err);
	}
	return ctl_done(call, b, r);
}

int e2b_api_pause(struct api_call *call)
{
	struct e2b_box *b;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	if (json_is_false(json_object_get(call->body, "memory"))) {
		e2b_box_put(call->d, b);
		return k8_err_set(&call->err, -ENOTSUP, "a pause without memory (keepMemory: false) "
				  "is not supported by kosa8: a pause always keeps the memory");
	}
	pthread_mutex_lock(&b->op);
	if (b->state == E2B_PAUSED)
		r = k8_err_set(&call->err, -EBUSY, "sandbox %s is already paused", b->id);
	else
		r = e2b_box_pause(call->d, b, "api", &call->err);
	pthread_mutex_unlock(&b->op);
	return ctl_done(call, b, r);
}

/* ---- list ---- */

static int cmp_box(const void *a, const void *b)
{
	const struct e2b_box *x = *(struct e2b_box *const *)a, *y = *(struct e2b_box *const *)b;

	if (x->started_ns != y->started_ns)
		return x->started_ns > y->started_ns ? -1 : 1;     /* newest first */
	return strcmp(x->id, y->id);
}

/* Is box x after the cursor "<started_ns>.<id>" in cmp_box's order? */
static bool after_cursor(const struct e2b_box *x, int64_t ns, const char *id)
{
	if (x->started_ns != ns)
		return x->started_ns < ns;
	return strcmp(x->id, id) > 0;
}

int e2b_api_list(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	char mbuf[8192], sbuf[64], tbuf[64], tplbuf[256];
	const char *mq = NULL, *sq = NULL, *token = NULL, *tpl = NULL;
	json_t *want = NULL, *out;
	unsigned mask = 0;
	uint64_t limit = E2B_LIST_LIMIT;
	int64_t cur_ns = 0;
	char cur_id[E2B_ID_LEN + 1] = "";
	struct e2b_box **all;
	size_t n, i, shown = 0;
	int r;

	if ((r = e2b_ctl_auth(call)) ||
	    (r = api_query_str(call, "metadata", mbuf, sizeof(mbuf), &mq)) ||
	    (r = api_query_str(call, "state", sbuf, sizeof(sbuf), &sq)) ||
	    (r = api_query_str(call, "nextToken", tbuf, sizeof(tbuf), &token)) ||
	    (r = api_query_str(call, "template", tplbuf, sizeof(tplbuf), &tpl)) ||
	    (r = api_query_u64(call, "limit", 1, E2B_LIST_LIMIT, &limit)))
		return r;
	if (mq && (r = e2b_metadata_query(mq, &want, &call->err)))
		return r;
	if (sq && (r = e2b_state_query(sq, &mask, &call->err))) {
		json_decref(want);
		return r;
	}
	if (token) {
		const char *dot = strchr(token, '.');
		long long ns;
		if (!dot || sscanf(token, "%lld.", &ns) != 1 || !e2b_id_ok(dot + 1)) {
			json_decref(want);
			return k8_err_set(&call->err, -EINVAL, "nextToken is not one this server gave");
		}
		cur_ns = ns;
		snprintf(cur_id, sizeof(cur_id), "%s", dot + 1);
	}
	if (!mask)
		mask = E2B_STATE_RUNNING | E2B_STATE_PAUSED;
	all = e2b_box_all(call->d, &n);
	qsort(all, n, sizeof(*all), cmp_box);
	out = json_array();
	pthread_mutex_lock(&e->lock);
	for (i = 0; i < n; i++) {
		struct e2b_box *b = all[i];
		unsigned bit = b->state == E2B_PAUSED ? E2B_STATE_PAUSED : E2B_STATE_RUNNING;
		if (b->state == E2B_KILLED || !(mask & bit) || (token && !after_cursor(b, cur_ns, cur_id)) ||
		    (want && !e2b_metadata_match(b->metadata, want)) ||
		    (tpl && strcmp(tpl, b->template_id)))
			continue;
		if (shown == limit) {
			/* more remain: the cursor is the last one shown */
			struct e2b_box *last = NULL;
			for (size_t j = i; j-- > 0;)
				if (json_array_size(out) && !strcmp(all[j]->id,
				    json_string_value(json_object_get(json_array_get(out,
						json_array_size(out) - 1), "sandboxID")))) {
					last = all[j];
					break;
				}
			if (last) {
				call->reply_hname = "x-next-token";
				call->reply_hvalue = xasprintf("%lld.%s", (long long)last->started_ns,
							       last->id);
			}
			break;
		}
		json_array_append_new(out, e2b_box_json(call->d, b, false));
		shown++;
	}
	pthread_mutex_unlock(&e->lock);
	for (i = 0; i < n; i++)
		e2b_box_put(call->d, all[i]);
	free(all);
	json_decref(want);
	call->out = out;
	return 0;
}

/* ---- metrics ---- */

/* utime + stime of pid, in clock ticks; 0 when unreadable. */
static uint64_t cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p || !(p = strrchr(buf, ')')))
		return 0;
	/* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
	if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return ut + st;
}

int e2b_api_metrics(struct api_call *call)
{
	struct e2b_box *b;
	struct sandbox *sb;
	json_t *resp = NULL;
	char now[40];
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	if (b->state != E2B_RUNNING) {
		e2b_box_put(call->d, b);
		call->out = json_array();       /* a paused sandbox has no live figures */
		return 0;
	}
	sb = sb_get(call->d, b->sandbox, &call->err);
	e2b_box_put(call->d, b);
	if (!sb)
		return call->err.code;
	pid_t pid = sb->pid;
	int cpus = sb->cpus;
	uint64_t t0 = cpu_ticks(pid), n0 = now_mono_ns();
	r = sb_agent_request(sb, json_pack("{s:s}", "op", "stat"), 10000, &resp, NULL, &call->err);
	usleep(100000);
	uint64_t t1 = cpu_ticks(pid), n1 = now_mono_ns();
	sb_put_peek(call->d, sb);
	if (r)
		return r;
	double secs = (double)(n1 - n0) / 1e9, used = (double)(t1 - t0) / (double)sysconf(_SC_CLK_TCK);
	double pct = secs > 0 ? 100.0 * used / secs / (cpus ? cpus : 1) : 0;
	json_int_t mt = json_integer_value(json_object_get(resp, "mem_total_kib"));
	json_int_t mf = json_integer_value(json_object_get(resp, "mem_free_kib"));
	json_int_t dt = json_integer_value(json_object_get(resp, "disk_total_kib"));
	json_int_t df = json_integer_value(json_object_get(resp, "disk_free_kib"));
	int64_t ns = now_ns();
	ds_rfc3339(ns / 1000000000, 0, now);
	call->out = json_pack("[{s:s,s:f,s:i,s:I,s:I,s:I,s:I,s:I}]", "timestamp", now,
			      "cpuUsedPct", pct > 100 ? 100.0 : pct, "cpuCount", cpus,
			      "memUsed", (mt - mf) * 1024, "memTotal", mt * 1024, "memCache",
			      (json_int_t)0, "diskUsed", (dt - df) * 1024, "diskTotal", dt * 1024);
	json_decref(resp);
	return 0;
}

/* ---- network ---- */

/* The rules of a running box's header transforms must stay (kosa8's broker takes them at
 * start); their values may change (the secrets rotate, pushed to the running broker). */
static int ctl_rules_same(struct daemon *d, struct e2b_box *b, const struct e2b_net *n,
			  struct k8_err *err)
{
	json_t *had = json_object_get(b->network, "rules");
	size_t nhad = 0;
	const char *host;
	json_t *v;

	json_object_foreach(had, host, v)
		nhad++;
	if (nhad != n->nt)
		return k8_err_set(err, -ENOTSUP, "network.rules: kosa8 cannot add or remove header "
				  "rules of a running sandbox (its broker took them at create); "
				  "values may change");
	for (size_t i = 0; i < n->nt; i++) {
		const char *hdr = NULL, *k;
		json_t *headers = json_object_get(json_object_get(json_array_get(
			json_object_get(had, n->t[i].host), 0), "transform"), "headers");
		json_object_foreach(headers, k, v)
			hdr = k;
		if (!hdr || strcasecmp(hdr, n->t[i].header))
			return k8_err_set(err, -ENOTSUP, "network.rules['%s']: kosa8 cannot change "
					  "which header a running sandbox's broker adds", n->t[i].host);
	}
	/* the values: each secret replaced, and the running broker told */
	for (size_t i = 0; i < n->nt; i++) {
		char name[SECRET_NAME_MAX + 1];
		bool replaced;
		int r;
		snprintf(name, sizeof(name), "e2b-%s-%zu", b->id, i);
		r = secret_set(d->home, name, n->t[i].value, strlen(n->t[i].value), &replaced, err);
		if (r)
			return r;
		broker_secret_changed(d, name, n->t[i].value, strlen(n->t[i].value));
	}
	return 0;
}

int e2b_api_network(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	struct e2b_box *b;
	struct e2b_net n;
	struct sandbox *sb = NULL;
	json_t *ai = json_object_get(call->body, "allow_internet_access"), *body, *out = NULL;
	int allow = ai && json_is_boolean(ai) ? json_is_true(ai) : -1;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	if ((r = e2b_net_parse(call->body, allow, &n, &call->err))) {
		e2b_box_put(call->d, b);
		return r;
	}
	pthread_mutex_lock(&b->op);
	if (n.has_rules && (r = ctl_rules_same(call->d, b, &n, &call->err)))
		goto out;
	if (!(sb = sb_get(call->d, b->sandbox, &call->err))) {
		r = call->err.code;
		goto out;
	}
	pthread_mutex_lock(&sb->lock);
	json_t *old = json_deep_copy(sb->egress_rules);
	pthread_mutex_unlock(&sb->lock);
	body = json_pack("{s:s,s:o,s:O}", "mode", n.mode, "remove", old, "allow", n.rules);
	r = egress_update(call->d, sb, body, &out, &call->err);
	json_decref(body);
	json_decref(out);
	sb_put(call->d, sb);
	if (r)
		goto out;
	pthread_mutex_lock(&e->lock);
	json_t *rec = ctl_network_record(&n);
	if (!n.has_rules && json_object_get(b->network, "rules"))
		json_object_set(rec, "rules", json_object_get(b->network, "rules"));
	json_decref(b->network);
	b->network = rec;
	pthread_mutex_unlock(&e->lock);
	r = e2b_box_save(call->d, b, &call->err);
	e2b_audit(call->d, b, "e2b.network", json_pack("{s:s}", "mode", n.mode));
out:
	pthread_mutex_unlock(&b->op);
	e2b_net_clear(&n);
	return ctl_done(call, b, r);
}

/* ---- snapshots ---- */

int e2b_api_snapshot(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	struct e2b_box *b, *other;
	struct sandbox *sb;
	const char *name = NULL;
	char sid[E2B_ID_LEN + 8], label[64], when[K8_TIME_LEN], other_label[64];
	json_t *out = NULL, *names;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	if ((r = api_body_str(call, "name", API_OPTIONAL, 128, &name)))
		goto out_put;
	if (name && (other = ctl_snapshot_find(call->d, name, other_label, sizeof(other_label)))) {
		e2b_box_put(call->d, other);
		r = k8_err_set(&call->err, -EEXIST, "a snapshot named '%s' exists", name);
		goto out_put;
	}
	snprintf(sid, sizeof(sid), "snap-");
	if (e2b_id_new(sid + 5)) {
		r = k8_err_set(&call->err, -EIO, "getrandom failed");
		goto out_put;
	}
	snprintf(label, sizeof(label), "e2b-%s", sid);
	pthread_mutex_lock(&b->op);
	if (!(sb = sb_get(call->d, b->sandbox, &call->err))) {
		r = call->err.code;
		goto out_op;
	}
	r = ckpt_create(call->d, sb, label, &out, &call->err);
	sb_put(call->d, sb);
	if (r)
		goto out_op;
	names = name ? json_pack("[s]", name) : json_array();
	pthread_mutex_lock(&e->lock);
	/* kosa8 keeps ten checkpoints: the one it dropped is no snapshot any more */
	const char *removed = json_string_value(json_object_get(out, "removed"));
	size_t i;
	json_t *s;
	json_array_foreach(b->snapshots, i, s)
		if (removed && !strcmp(json_string_value(json_object_get(s, "label")) ?: "", removed)) {
			json_array_remove(b->snapshots, i);
			break;
		}
	json_array_append_new(b->snapshots, json_pack("{s:s,s:s,s:O,s:s}", "id", sid, "label",
						      label, "names", names, "created",
						      k8_time_now(when, 0)));
	pthread_mutex_unlock(&e->lock);
	r = e2b_box_save(call->d, b, &call->err);
	e2b_audit(call->d, b, "e2b.snapshot", json_pack("{s:s,s:s}", "snapshot", sid, "label", label));
	if (!r) {
		call->status = 201;
		call->out = json_pack("{s:s,s:O}", "snapshotID", sid, "names", names);
	}
	json_decref(names);
out_op:
	pthread_mutex_unlock(&b->op);
	json_decref(out);
out_put:
	e2b_box_put(call->d, b);
	return r;
}

int e2b_api_snapshots(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	char ibuf[64], nbuf[256];
	const char *sid = NULL, *name = NULL;
	uint64_t limit = E2B_LIST_LIMIT;
	struct e2b_box **all;
	size_t n, i, j, k;
	json_t *s, *out;
	int r;

	if ((r = e2b_ctl_auth(call)) ||
	    (r = api_query_str(call, "sandboxID", ibuf, sizeof(ibuf), &sid)) ||
	    (r = api_query_str(call, "name", nbuf, sizeof(nbuf), &name)) ||
	    (r = api_query_u64(call, "limit", 1, E2B_LIST_LIMIT, &limit)))
		return r;
	all = e2b_box_all(call->d, &n);
	out = json_array();
	pthread_mutex_lock(&e->lock);
	for (i = 0; i < n; i++) {
		if (sid && strcmp(sid, all[i]->id))
			continue;
		json_array_foreach(all[i]->snapshots, j, s) {
			bool named = !name;
			json_t *x;
			json_array_foreach(json_object_get(s, "names"), k, x)
				named = named || !strcmp(json_string_value(x) ?: "", name);
			if (named && json_array_size(out) < limit)
				json_array_append_new(out, json_pack("{s:O,s:O,s:s,s:O}", "snapshotID",
								     json_object_get(s, "id"), "names",
								     json_object_get(s, "names"),
								     "sandboxID", all[i]->id,
								     "createdAt",
								     json_object_get(s, "created")));
		}
	}
	pthread_mutex_unlock(&e->lock);
	for (i = 0; i < n; i++)
		e2b_box_put(call->d, all[i]);
	free(all);
	call->out = out;
	return 0;
}

/* DELETE /templates/{id}: a snapshot (kosa8 has no other templates to delete). */
int e2b_api_snapshot_rm(struct api_call *call)
{
	struct e2b *e = e2b_of(call->d);
	const char *id = api_param(call, "id");
	char label[64];
	struct e2b_box *b;
	struct sandbox *sb;
	size_t i;
	json_t *s;
	int r;

	if ((r = e2b_ctl_auth(call)))
		return r;
	if (!(b = ctl_snapshot_find(call->d, id, label, sizeof(label))))
		return k8_err_set(&call->err, -ENOENT, "snapshot %.80s not found (kosa8's E2B API "
				  "deletes snapshots only, not images)", id);
	pthread_mutex_lock(&b->op);
	sb = sb_get(call->d, b->sandbox, &call->err);
	r = sb ? ckpt_remove(call->d, sb, label, &call->err) : call->err.code;
	if (sb)
		sb_put(call->d, sb);
	if (r == -ENOENT)
		r = 0;          /* gone already: forget it */
	if (!r) {
		pthread_mutex_lock(&e->lock);
		json_array_foreach(b->snapshots, i, s)
			if (!strcmp(json_string_value(json_object_get(s, "label")) ?: "", label)) {
				json_array_remove(b->snapshots, i);
				break;
			}
		bool last = !json_array_size(b->snapshots) && b->state == E2B_KILLED;
		pthread_mutex_unlock(&e->lock);
		e2b_audit(call->d, b, "e2b.snapshot.rm", json_pack("{s:s}", "label", label));
		/* a killed sandbox kept for its snapshots goes with its last one */
		r = last ? e2b_box_kill(call->d, b, "snapshot removed", &call->err)
			 : e2b_box_save(call->d, b, &call->err);
	}
	pthread_mutex_unlock(&b->op);
	return ctl_done(call, b, r);
}

/* ---- fork ---- */

int e2b_api_fork(struct api_call *call)
{
	struct e2b_box *b;
	struct sandbox *sb;
	int64_t count = 1, timeout = E2B_TIMEOUT_DEFAULT;
	char label[64], hex[E2B_TOKEN_LEN + 1];
	json_t *out = NULL, *list;
	int r;

	if ((r = ctl_begin(call, &b)))
		return r;
	if ((r = api_body_int(call, "count", API_OPTIONAL, 1, E2B_FORK_MAX, &count)) ||
	    (r = e2b_timeout(call->body, &timeout, &call->err)))
		goto out_put;
	if (e2b_token_new(hex)) {
		r = k8_err_set(&call->err, -EIO, "getrandom failed");
		goto out_put;
	}
	snprintf(label, sizeof(label), "e2b-fork-%.12s", hex);
	pthread_mutex_lock(&b->op);
	if (b->state != E2B_RUNNING) {
		r = k8_err_set(&call->err, -EBUSY, "sandbox %s is paused; connect to it first", b->id);
		goto out_op;
	}
	if (!(sb = sb_get(call->d, b->sandbox, &call->err))) {
		r = call->err.code;
		goto out_op;
	}
	r = ckpt_create(call->d, sb, label, &out, &call->err);
	json_decref(out);
	if (r) {
		sb_put(call->d, sb);
		goto out_op;
	}
	list = json_array();
	for (int64_t i = 0; i < count; i++) {
		struct k8_err err = { 0 };
		struct e2b_box *f = ctl_fork_one(call->d, b, label, timeout, &err);
		if (f) {
			json_array_append_new(list, json_pack("{s:o}", "sandbox", ctl_created(f)));
			e2b_box_put(call->d, f);
		} else {
			unsigned http = err.code == -ENOSPC ? 507 : 500;
			json_array_append_new(list, json_pack("{s:{s:i,s:s}}", "error", "code", http,
							      "message", err.msg));
		}
	}
	{
		struct k8_err e2 = { 0 };
		ckpt_remove(call->d, sb, label, &e2);   /* the forks link its layers: it may go */
	}
	sb_put(call->d, sb);
	call->status = 201;
	call->out = list;
out_op:
	pthread_mutex_unlock(&b->op);
out_put:
	e2b_box_put(call->d, b);
	return r;
}

/* ---- the data plane's door ---- */

int e2b_data_auth(struct api_call *call, int port, struct e2b_box **bp)
{
	const char *id = call->header ? call->header(call->query_ctx, "E2b-Sandbox-Id") : NULL;
	const char *p = call->header ? call->header(call->query_ctx, "E2b-Sandbox-Port") : NULL;
	const char *tok = call->header(call->query_ctx, "X-Access-Token");
	const char *traffic = call->header(call->query_ctx, "E2B-Traffic-Access-Token");
	struct e2b_box *b;
	bool ok;

	*bp = NULL;
	if (!id || !*id)
		return k8_err_set(&call->err, -EINVAL, "the E2b-Sandbox-Id header is required (set "
				  "E2B_SANDBOX_URL to this server: docs/e2b.md)");
	if (p && atoi(p) != port)
		return k8_err_set(&call->err, -EHOSTUNREACH, "port %.8s of sandbox %.40s is not "
				  "served by kosa8 (envd: 49983, the code interpreter: 49999)", p, id);
	b = e2b_box_get(call->d, id, false);
	if (!b)         /* as E2B's proxy answers for a sandbox it does not know: 502 */
		return k8_err_set(&call->err, -EHOSTUNREACH, "sandbox %.40s not found", id);
	/* a token of this box and no other: envd's, or on the interpreter's port its own */
	ok = tok && e2b_secret_eq(tok, b->token);
	if (!ok && port == 49999)
		ok = traffic && e2b_secret_eq(traffic, b->traffic);
	if (!ok) {
		e2b_box_put(call->d, b);
		return k8_err_set(&call->err, -EKEYREJECTED, "%s access token for sandbox %.40s",
				  tok || traffic ? "wrong" : "missing", id);
	}
	*bp = b;
	return 0;
}
