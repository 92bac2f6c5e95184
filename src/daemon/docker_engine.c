/* SPDX-License-Identifier: Apache-2.0 */
/* docker_engine.c - the sandbox a Docker API container runs in (docker_engine.h).
 *
 * An ordinary sandbox made with the daemon's own sb_create: listed, inspectable,
 * checkpointable, removable like any other (a removed engine is made again on next
 * need). Its size and egress come from config.json, read when it is created:
 *   docker_engine_memory_mib (default 1024), docker_engine_cpus (2),
 *   docker_engine_disk_gb (8), docker_engine_egress ("deny", as every sandbox),
 *   docker_engine_egress_allow (list of rules, as --egress-allow),
 *   docker_engine_broker (rules, as --broker), docker_engine_broker_intercept (false),
 *   docker_engine_boot (false: made on first need; true: at daemon start).
 * With require_sandbox each container gets its own sandbox of the same size.
 */
#include "daemon/docker_engine.h"
#include "daemon/record.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The engine's state in a daemon: two first containers at once make one engine. */
struct docker_engine {
	pthread_mutex_t lock;           /* held while an engine sandbox is looked up or made */
};

static void *dke_make(struct daemon *d)
{
	struct docker_engine *e = xcalloc(1, sizeof(*e));

	(void)d;
	pthread_mutex_init(&e->lock, NULL);
	return e;
}

static struct docker_engine *dke_of(struct daemon *d)
{
	return daemon_state(d, (void **)&d->docker_engine, dke_make);
}

bool dke_require_sandbox(struct daemon *d)
{
	json_t *cfg = daemon_config(d);
	bool on = json_is_true(json_object_get(cfg, "require_sandbox"));

	json_decref(cfg);
	return on || d->require_sandbox;
}

/* The sb_create body for an engine, from config.json (sb_create checks the ranges). */
static json_t *dke_body(struct daemon *d, const char *name)
{
	json_t *cfg = daemon_config(d), *v;
	json_t *body = json_pack("{s:s,s:i,s:i,s:i}", "name", name, "memory_mib", 1024,
				 "cpus", 2, "disk_gb", 8);

	if ((v = json_object_get(cfg, "docker_engine_memory_mib")))
		json_object_set(body, "memory_mib", v);
	if ((v = json_object_get(cfg, "docker_engine_cpus")))
		json_object_set(body, "cpus", v);
	if ((v = json_object_get(cfg, "docker_engine_disk_gb")))
		json_object_set(body, "disk_gb", v);
	if ((v = json_object_get(cfg, "docker_engine_egress")))
		json_object_set(body, "egress", v);
	if ((v = json_object_get(cfg, "docker_engine_egress_allow")))
		json_object_set(body, "egress_allow", v);
	/* A broker (docs/docker.md): its rules as `sandbox create --broker`; each engine
	 * (the shared one, or a container's own) gets a placeholder of its own. */
	if ((v = json_object_get(cfg, "docker_engine_broker")))
		json_object_set(body, "broker", v);
	if ((v = json_object_get(cfg, "docker_engine_broker_intercept")))
		json_object_set(body, "broker_intercept", v);
	/* Every --allow-mount root, read-write, at /kosa8/bind/<i>: a container's binds are
	 * sub-paths of these, and its mount namespace holds only them (docs/docker.md). */
	if (d->nallow_mounts) {
		json_t *mounts = json_array();
		for (int i = 0; i < d->nallow_mounts && i < K8_MAX_MOUNTS; i++) {
			char guest[32];
			snprintf(guest, sizeof(guest), "/kosa8/bind/%d", i);
			json_array_append_new(mounts, json_pack("{s:s,s:s,s:b}", "host",
								d->allow_mounts[i], "guest",
								guest, "ro", false));
		}
		json_object_set_new(body, "mounts", mounts);
	}
	json_decref(cfg);
	return body;
}

struct sandbox *dke_get(struct daemon *d, const char *name, struct k8_err *err)
{
	struct sandbox *sb;
	struct k8_err e2 = { 0 };
	json_t *body, *out = NULL;
	int r;

	struct docker_engine *e = dke_of(d);

	pthread_mutex_lock(&e->lock);
	sb = sb_get(d, name, &e2);
	if (!sb) {
		body = dke_body(d, name);
		r = sb_create(d, body, NULL, NULL, &out, err);
		json_decref(body);
		json_decref(out);
		if (r) {
			char msg[sizeof(err->msg)];
			pthread_mutex_unlock(&e->lock);
			snprintf(msg, sizeof(msg), "%s", err->msg);
			k8_err_clear(err);
			k8_err_set(err, r, "cannot create the Docker engine sandbox '%s': %s",
				   name, msg);
			return NULL;
		}
		daemon_audit(d, "docker.engine.create", name, json_pack("{s:s}", "via", "docker"));
		sb = sb_get(d, name, err);
	}
	pthread_mutex_unlock(&e->lock);
	if (!sb)
		return NULL;
	if (sb_ensure_running(d, sb, err)) {
		sb_put(d, sb);
		return NULL;
	}
	return sb;
}

static void *dke_boot_thread(void *arg)
{
	struct daemon *d = arg;
	struct k8_err err = { 0 };
	struct sandbox *sb = dke_get(d, DKE_NAME, &err);

	if (sb)
		sb_put(d, sb);
	else
		daemon_log("docker engine: %s", err.msg);
	return NULL;
}

void dke_boot_at_start(struct daemon *d)
{
	json_t *cfg = daemon_config(d);
	bool boot = json_is_true(json_object_get(cfg, "docker_engine_boot"));
	pthread_attr_t attr;
	pthread_t t;

	json_decref(cfg);
	if (!boot)
		return;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, dke_boot_thread, d) != 0)
		daemon_log("docker engine: cannot start the boot thread");
	pthread_attr_destroy(&attr);
}
