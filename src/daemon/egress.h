/* SPDX-License-Identifier: Apache-2.0 */
/* egress.h - the network policy of a sandbox and its kosa8-net (egress.c, docs/network.md). */
#ifndef K8_EGRESS_H
#define K8_EGRESS_H

#include "daemon/api_route.h"
#include <jansson.h>
#include <stddef.h>

#include "common/util.h"

struct daemon;
struct sandbox;

/* egress.c: the network policy of a sandbox and its kosa8-net */
/* Mode and rules for a new sandbox from a create body ("egress", "egress_allow"). */
int egress_from_body(json_t *body, char *mode, size_t modelen, json_t **rules,
		     struct k8_err *err);
int net_up(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* After a daemon restart: reconnect to a kosa8-net that is still running. */
void net_adopt(struct daemon *d, struct sandbox *sb);
json_t *egress_summary(struct sandbox *sb);   /* {"mode","rules","network"}; caller locks */
int egress_status(struct daemon *d, struct sandbox *sb, json_t **out, struct k8_err *err);
int egress_update(struct daemon *d, struct sandbox *sb, json_t *body, json_t **out,
		  struct k8_err *err);
/* The guest's network settings for the agent's init. */
json_t *net_guest_config(void);

/* API handlers (api_route.h; the table is in api.c) */
int egress_api_status(struct api_call *call);
int egress_api_update(struct api_call *call);

#endif
