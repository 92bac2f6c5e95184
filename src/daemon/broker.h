/* SPDX-License-Identifier: Apache-2.0 */
/* broker.h - a sandbox's egress broker (broker.c, docs/broker.md "Stage 2"): its rules,
 * its placeholder, its kosa8-broker process, the variables its containers get. */
#ifndef K8_DAEMON_BROKER_H
#define K8_DAEMON_BROKER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/util.h"
#include "daemon/sidecar.h"

#define BROKER_MAX_RULES 16
#define BROKER_PH_PREFIX "k8-ph-"

struct daemon;
struct sandbox;
struct api_call;

/* The broker part of a sandbox; sb->broker, NULL when the sandbox has none. */
struct sb_broker {
	json_t *rules;                  /* array of rule strings, as given */
	char placeholder[48];           /* "k8-ph-" + 32 hex */
	bool intercept;                 /* --broker-intercept: a CA of its own (broker-ca.*) */
	struct sidecar sc;              /* kosa8-broker */
};

/* The "broker" list (and "broker_intercept") of a create body, checked (forms, secret
 * names, secrets present): *rules is NULL when there is none, else what broker_create
 * takes. 0 or a negative errno with err. */
int broker_from_body(struct daemon *d, json_t *body, json_t **rules, struct k8_err *err);
/* Give sb (its directory exists) a broker with these rules (broker_from_body's, stolen)
 * and a fresh placeholder, kept in sb->dir/broker.json; with interception, a fresh CA. */
int broker_create(struct sandbox *sb, json_t *rules, struct k8_err *err);
/* A fork: the source's rules, a placeholder of its own. No-op without a broker. */
int broker_fork(struct sandbox *src, struct sandbox *sb, struct k8_err *err);
/* Read sb->dir/broker.json if sb->broker is not set yet (a sandbox loaded at start). */
void broker_load(struct sandbox *sb);
/* Start (or reconnect to) the sandbox's kosa8-broker; before kosa8-net. No-op without a
 * broker. */
int broker_up(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* After a daemon restart: reconnect to a broker that is still running. */
void broker_adopt(struct daemon *d, struct sandbox *sb);
/* The counts go to the audit log, then the process is stopped. */
void broker_down(struct daemon *d, struct sandbox *sb);
void broker_free(struct sandbox *sb);
/* Interception mode: the rule hosts kosa8-net sends to the broker (--broker-intercept),
 * at most max; 0 without interception. */
int broker_intercept_hosts(struct sandbox *sb, char (*hosts)[254], int max);
/* Interception mode: the CA certificate (PEM) the guest's containers trust, into the
 * agent's net config ("broker_ca"). No-op without interception. */
void broker_guest_net(struct sandbox *sb, json_t *net);
/* kosa8-net's --broker-dir for this sandbox, or false when it has no broker. */
bool broker_dir(struct daemon *d, struct sandbox *sb, char *out, size_t n);
/* {"rules", "url"} for inspect (never the placeholder's use as a key, never a value);
 * NULL without a broker. Caller holds sb->lock. */
json_t *broker_summary(struct sandbox *sb);
/* KEY=VALUE strings every container of the sandbox gets (an empty array without a
 * broker). */
json_t *broker_env(struct sandbox *sb);
/* A secret was set (value, n) or removed (value NULL): every running broker using it
 * takes the new value or forgets it. Returns how many did. */
int broker_secret_changed(struct daemon *d, const char *name, const char *value, size_t n);

/* A model server was started or stopped: every running broker with a local-model rule
 * gets the address of the server its rule now picks (or none). Returns how many. */
int broker_model_changed(struct daemon *d);

/* API handler (api_route.h; the table is in api.c): GET /v1/sandboxes/{name}/broker */
int broker_api_status(struct api_call *call);

#endif
