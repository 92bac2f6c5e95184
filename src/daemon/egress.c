/* SPDX-License-Identifier: Apache-2.0 */
/* egress.c - a sandbox's network policy: what the user asked for, kept in sandbox.json,
 * and the kosa8-net process that enforces it on the host.
 *
 * The daemon owns the policy (mode + rules); kosa8-net owns the enforcement and the
 * counts. The daemon validates every rule with the same parser kosa8-net uses
 * (src/net/policy.c), so a bad rule is refused before anything changes. kosa8-net is
 * given the policy in a file when it starts and over its control socket when it changes;
 * its refusals come back as events that become `sandbox.egress.deny` audit records
 * within the sandbox's audit budget (daemon_audit_guest; the rest are counted into one
 * "sandbox.audit.suppressed" record), on top of kosa8-net's own aggregation per
 * destination and second.
 * docs/network.md has the policy language and the threat model.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/guest.h"
#include "daemon/broker.h"
#include "daemon/egress.h"
#include "daemon/api_route.h"
#include "daemon/record.h"
#include "net/policy.h"

#define NET_MAX_FLOWS 256

json_t *net_guest_config(void)
{
	return json_pack("{s:s,s:i,s:s,s:[s],s:s,s:i,s:s}", "ip", GUEST_IP4, "prefix",
			 GUEST_PREFIX4, "gateway", GUEST_GW4, "dns", GUEST_DNS4, "ip6", GUEST_IP6,
			 "prefix6", GUEST_PREFIX6, "gateway6", GUEST_GW6);
}

/* Normalise one rule with the policy parser; the message says what is accepted. */
static int rule_norm(const char *text, char *out, size_t n, struct k8_err *err)
{
	struct policy_rule r;
	char msg[512];

	if (!text)
		return k8_err_set(err, -EINVAL, "an egress rule must be a string");
	/* The parser's message names the rule and the accepted forms. */
	if (policy_rule_parse(text, &r, msg, sizeof(msg)) < 0)
		return k8_err_set(err, -EINVAL, "%s", msg);
	snprintf(out, n, "%s", r.text);
	return 0;
}

static int rules_find(json_t *rules, const char *rule)
{
	size_t i;
	json_t *v;

	json_array_foreach(rules, i, v)
		if (!strcmp(json_string_value(v), rule))
			return (int)i;
	return -1;
}

/* Append each normalised rule of `list` (an array of strings, or NULL) to `rules`. */
static int rules_add(json_t *rules, json_t *list, const char *what, json_t *added,
		     struct k8_err *err)
{
	size_t i;
	json_t *v;
	char norm[300];
	int r;

	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return k8_err_set(err, -EINVAL, "%s must be a list of rules", what);
	json_array_foreach(list, i, v) {
		if ((r = rule_norm(json_string_value(v), norm, sizeof(norm), err)))
			return r;
		if (rules_find(rules, norm) >= 0)
			continue;
		if (json_array_size(rules) >= POLICY_MAX_RULES)
			return k8_err_set(err, -E2BIG, "at most %d egress rules", POLICY_MAX_RULES);
		json_array_append_new(rules, json_string(norm));
		if (added)
			json_array_append_new(added, json_string(norm));
	}
	return 0;
}

static int mode_check(const char *s, struct k8_err *err)
{
	enum policy_mode m;

	if (policy_mode_parse(s, &m) < 0)
		return k8_err_set(err, -EINVAL, "egress mode '%.40s' is not one of deny, "
				  "allow-list, allow-all", s);
	return 0;
}

int egress_from_body(json_t *body, char *mode, size_t modelen, json_t **rules,
		     struct k8_err *err)
{
	json_t *eg = json_object_get(body, "egress");
	json_t *list = json_array();
	int r;

	*rules = NULL;
	if (eg && !json_is_null(eg) && !json_is_string(eg)) {
		json_decref(list);
		return k8_err_set(err, -EINVAL, "egress must be a string");
	}
	if ((r = rules_add(list, json_object_get(body, "egress_allow"), "egress_allow", NULL,
			   err))) {
		json_decref(list);
		return r;
	}
	if (json_is_string(eg)) {
		if ((r = mode_check(json_string_value(eg), err))) {
			json_decref(list);
			return r;
		}
		if (!strcmp(json_string_value(eg), "deny") && json_array_size(list)) {
			json_decref(list);
			return k8_err_set(err, -EINVAL, "--egress deny and --egress-allow contradict "
					  "each other: give one or the other");
		}
		snprintf(mode, modelen, "%s", json_string_value(eg));
	} else {
		/* No mode: listing anything means "only these"; nothing means deny. */
		snprintf(mode, modelen, "%s", json_array_size(list) ? "allow-list" : "deny");
	}
	*rules = list;
	return 0;
}

static int policy_file_write(struct sandbox *sb, struct k8_err *err)
{
	cleanup_free char *path = xasprintf("%s/egress.json", sb->dir);
	json_t *o;
	char *t;
	int r;

	pthread_mutex_lock(&sb->lock);
	o = json_pack("{s:s,s:O}", "mode", sb->egress_mode, "rules", sb->egress_rules);
	pthread_mutex_unlock(&sb->lock);
	t = json_dumps(o, JSON_INDENT(2));
	json_decref(o);
	r = write_file_atomic(path, t, strlen(t), 0600);
	free(t);
	if (r)
		return k8_err_set(err, r, "writing %s: %s", path, strerror(-r));
	return 0;
}

static void net_event(void *ctx, json_t *ev)
{
	struct sandbox *sb = ctx;
	struct daemon *d = sb->d;
	const char *name = json_string_value(json_object_get(ev, "event"));

	if (!name)
		return;
	if (!strcmp(name, "down")) {
		if (sb->net.closing)
			return;
		daemon_log("sandbox %s: kosa8-net is gone (%s): the sandbox has no network until "
			   "its next boot or rewind", sb->name,
			   json_string_value(json_object_get(ev, "why")));
		daemon_audit_guest(d, sb, "sandbox.net.down",
				   json_pack("{s:s?}", "why",
					     json_string_value(json_object_get(ev, "why"))), 1);
		return;
	}
	if (strcmp(name, "deny"))
		return;
	json_t *cnt = json_object_get(ev, "count");
	json_t *det = json_object();
	const char *keys[] = { "dest", "proto", "reason", "time" };
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		const char *v = json_string_value(json_object_get(ev, keys[i]));
		if (v && strlen(v) < 300)
			json_object_set_new(det, keys[i], json_string(v));
	}
	uint64_t n = 1;
	if (json_is_integer(cnt) && json_integer_value(cnt) > 0) {
		json_object_set(det, "count", cnt);
		n = (uint64_t)json_integer_value(cnt);
	}
	daemon_audit_guest(d, sb, "sandbox.egress.deny", det, n);
}

static int net_push_policy(struct sandbox *sb, struct k8_err *err)
{
	json_t *req;

	pthread_mutex_lock(&sb->lock);
	req = json_pack("{s:s,s:s,s:O}", "op", "policy", "mode", sb->egress_mode, "rules",
			sb->egress_rules);
	pthread_mutex_unlock(&sb->lock);
	return sidecar_request(&sb->net, req, 5000, NULL, err);
}

static int net_connect(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	char ctl[4200];
	int r;

	sb_sock_path(d, sb, "netctl", ctl, sizeof(ctl));
	if ((r = sidecar_connect(&sb->net, ctl, net_event, sb, err)))
		return r;
	return net_push_policy(sb, err);
}

int net_up(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	char frames[4200], ctl[4200];
	cleanup_free char *exe = k8_beside_self("kosa8-net");
	cleanup_free char *policy = xasprintf("%s/egress.json", sb->dir);
	cleanup_free char *log = xasprintf("%s/net.log", sb->dir);
	json_t *cfg;
	char **dns;
	const char *argv[64];
	int argc = 0, r;
	char user[32], maxf[16], cgv[2][512];

	if (sidecar_alive(&sb->net)) {
		if (sidecar_connected(&sb->net))
			return 0;
		return net_connect(d, sb, err);
	}
	if (access(exe, X_OK) < 0)
		return k8_err_set(err, -ENOENT, "%s is missing (it enforces the network policy); "
				  "build it with `make`", exe);
	if ((r = policy_file_write(sb, err)))
		return r;
	sb_sock_path(d, sb, "net", frames, sizeof(frames));
	sb_sock_path(d, sb, "netctl", ctl, sizeof(ctl));
	cfg = daemon_config(d);
	dns = daemon_setting_list("KOSA8_DNS_SERVERS", cfg, "dns_servers");
	json_decref(cfg);
	/* the sandbox's own kosa8-net uid (jail.h); nobody only if none was claimed */
	if (sb->jail_index >= 0)
		snprintf(user, sizeof(user), "%u:%u",
			 (unsigned)jail_uid(&d->jail, sb->jail_index, JAIL_NET),
			 (unsigned)jail_uid(&d->jail, sb->jail_index, JAIL_NET));
	else
		snprintf(user, sizeof(user), "65534:65534");
	snprintf(maxf, sizeof(maxf), "%d", NET_MAX_FLOWS);
	argv[argc++] = exe;
	argv[argc++] = "--id";
	argv[argc++] = sb->id;
	argv[argc++] = "--frames";
	argv[argc++] = frames;
	argv[argc++] = "--control";
	argv[argc++] = ctl;
	argv[argc++] = "--policy";
	argv[argc++] = policy;
	argv[argc++] = "--max-flows";
	argv[argc++] = maxf;
	/* Root here: kosa8-net binds its sockets, then jails itself (src/common/jail.c). */
	if (geteuid() == 0) {
		argv[argc++] = "--user";
		argv[argc++] = user;
		for (int i = 0, n = cgroup_procs_paths(&d->cg, sb->name, cgv, 2); i < n; i++) {
			argv[argc++] = "--cgroup";
			argv[argc++] = cgv[i];
		}
	}
	char bdir[4200];
	char ihosts[8][254];
	if (broker_dir(d, sb, bdir, sizeof(bdir))) {
		argv[argc++] = "--broker-dir";
		argv[argc++] = bdir;
		/* interception: the rules' hosts resolve to the broker (docs/broker.md) */
		for (int i = 0, n = broker_intercept_hosts(sb, ihosts, 8); i < n; i++) {
			argv[argc++] = "--broker-intercept";
			argv[argc++] = ihosts[i];
		}
	}
	for (int i = 0; dns && dns[i] && argc < (int)ARRAY_SIZE(argv) - 3; i++) {
		argv[argc++] = "--dns-server";
		argv[argc++] = dns[i];
	}
	argv[argc] = NULL;
	r = sidecar_start(&sb->net, argv, log, ctl, net_event, sb, err);
	daemon_setting_list_free(dns);
	if (r)
		return r;
	daemon_log("sandbox %s: kosa8-net running (pid %d, egress %s)", sb->name,
		   (int)sb->net.pid, sb->egress_mode);
	return 0;
}

void net_adopt(struct daemon *d, struct sandbox *sb)
{
	struct k8_err err = { 0 };

	if (!sidecar_alive(&sb->net)) {
		snprintf(sb->net.why, sizeof(sb->net.why),
			 "kosa8-net was not running when the daemon started");
		sb->net.down = true;
		sb->net.pid = 0;
		daemon_audit(d, "sandbox.net.down", sb->name, json_pack("{s:s}", "why", sb->net.why));
		return;
	}
	if (net_connect(d, sb, &err))
		daemon_log("sandbox %s: cannot reach kosa8-net: %s", sb->name, err.msg);
}

/* Caller holds sb->lock. */
json_t *egress_summary(struct sandbox *sb)
{
	const char *state;

	if (sb->state != SB_RUNNING)
		state = "off";
	else if (sidecar_connected(&sb->net))
		state = "up";
	else
		state = "down";
	json_t *o = json_pack("{s:s,s:O,s:s}", "mode", sb->egress_mode, "rules",
			      sb->egress_rules, "network", state);
	if (!strcmp(state, "down") && sb->net.why[0])
		json_object_set_new(o, "why", json_string(sb->net.why));
	return o;
}

int egress_status(struct daemon *d, struct sandbox *sb, json_t **out, struct k8_err *err)
{
	json_t *o, *st = NULL;
	struct k8_err e2 = { 0 };

	pthread_mutex_lock(&sb->lock);
	o = egress_summary(sb);
	pthread_mutex_unlock(&sb->lock);
	if (!strcmp(json_string_value(json_object_get(o, "network")), "up") &&
	    sidecar_request(&sb->net, json_pack("{s:s}", "op", "stats"), 5000, &st, &e2) == 0) {
		const char *keys[] = { "flows", "max_flows", "frames_in", "frames_out",
				       "destinations", "dns", "malformed", "dropped", "tcp_merged",
				       "ports" };
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
			json_t *v = json_object_get(st, keys[i]);
			if (v)
				json_object_set(o, keys[i], v);
		}
	} else if (e2.msg[0]) {
		json_object_set_new(o, "stats_error", json_string(e2.msg));
	}
	json_decref(st);
	(void)d;
	(void)err;
	*out = o;
	return 0;
}

int egress_update(struct daemon *d, struct sandbox *sb, json_t *body, json_t **out,
		  struct k8_err *err)
{
	json_t *mode_v = json_object_get(body, "mode"), *remove = json_object_get(body, "remove");
	json_t *rules, *added = json_array(), *removed = json_array(), *v;
	char old_mode[16], mode[16], norm[300];
	bool live;
	size_t i;
	int r = 0;

	if (mode_v && !json_is_null(mode_v) &&
	    (!json_is_string(mode_v) || (r = mode_check(json_string_value(mode_v), err)))) {
		r = r ? r : k8_err_set(err, -EINVAL, "mode must be a string");
		goto out_free;
	}
	if (remove && !json_is_null(remove) && !json_is_array(remove)) {
		r = k8_err_set(err, -EINVAL, "remove must be a list of rules");
		goto out_free;
	}
	sb_busy_enter(sb);
	pthread_mutex_lock(&sb->lock);
	snprintf(old_mode, sizeof(old_mode), "%s", sb->egress_mode);
	rules = json_deep_copy(sb->egress_rules);
	pthread_mutex_unlock(&sb->lock);
	snprintf(mode, sizeof(mode), "%s", old_mode);
	json_array_foreach(remove, i, v) {
		int at;
		if ((r = rule_norm(json_string_value(v), norm, sizeof(norm), err)))
			goto out_busy;
		if ((at = rules_find(rules, norm)) < 0) {
			char *list = json_dumps(rules, JSON_COMPACT);
			r = k8_err_set(err, -ENOENT, "sandbox '%s' has no egress rule '%s'; its "
				       "rules are %s", sb->name, norm, list ? list : "[]");
			free(list);
			goto out_busy;
		}
		json_array_remove(rules, (size_t)at);
		json_array_append_new(removed, json_string(norm));
	}
	if ((r = rules_add(rules, json_object_get(body, "allow"), "allow", added, err)))
		goto out_busy;
	if (json_is_string(mode_v))
		snprintf(mode, sizeof(mode), "%s", json_string_value(mode_v));
	else if (!strcmp(mode, "deny") && json_array_size(added))
		snprintf(mode, sizeof(mode), "allow-list");   /* allowing something lifts deny */
	/* paused to disk, kosa8-net stays and serves the resume: it takes the change too */
	live = (sb->state == SB_RUNNING || sb->state == SB_PAUSED) && sidecar_connected(&sb->net);
	if (live) {
		/* kosa8-net applies it (and cuts flows it now refuses) before we record it. */
		r = sidecar_request(&sb->net,
				    json_pack("{s:s,s:s,s:O}", "op", "policy", "mode", mode, "rules",
					      rules),
				    5000, NULL, err);
		if (r) {
			k8_err_wrap(err, "the policy was not changed");
			goto out_busy;
		}
	}
	pthread_mutex_lock(&sb->lock);
	snprintf(sb->egress_mode, sizeof(sb->egress_mode), "%s", mode);
	json_decref(sb->egress_rules);
	sb->egress_rules = json_incref(rules);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	daemon_audit(d, "sandbox.egress.change", sb->name,
		     json_pack("{s:s,s:s,s:O,s:O,s:O,s:b}", "from", old_mode, "mode", mode, "added",
			       added, "removed", removed, "rules", rules, "live", live));
	egress_status(d, sb, out, err);
	json_object_set_new(*out, "applied", json_string(live ? "live" : "at next boot"));
out_busy:
	json_decref(rules);
	sb_busy_leave(sb);
out_free:
	json_decref(added);
	json_decref(removed);
	return r;
}

/* ---- API: GET and POST /v1/sandboxes/{name}/egress (api.h; the table is in api.c).
 * The body's rules are checked by egress_from_body with kosa8-net's own parser. ---- */

int egress_api_status(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);
	int r;

	if (!sb)
		return call->err.code;
	r = egress_status(call->d, sb, &call->out, &call->err);
	sb_put(call->d, sb);
	return r;
}

int egress_api_update(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);
	int r;

	if (!sb)
		return call->err.code;
	r = egress_update(call->d, sb, call->body, &call->out, &call->err);
	sb_put(call->d, sb);
	return r;
}
