/* SPDX-License-Identifier: Apache-2.0 */
/* model.h - the model store ($KOSA8_HOME/models) and kosa8-model servers (model.c, docs/model.md). */
#ifndef K8_DAEMON_MODEL_H
#define K8_DAEMON_MODEL_H

#include "daemon/api_route.h"
#include <jansson.h>

#include "common/util.h"

struct daemon;

int model_pull(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
	       json_t **out, struct k8_err *err);
int model_import(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
		 json_t **out, struct k8_err *err);
json_t *model_list_json(struct daemon *d);
int model_remove(struct daemon *d, const char *name, struct k8_err *err);
int model_serve(struct daemon *d, const char *name, json_t *body, json_t **out, struct k8_err *err);
json_t *model_ps_json(struct daemon *d);
int model_stop(struct daemon *d, const char *name, struct k8_err *err);
void model_stop_all(struct daemon *d);
/* At daemon start: stop the model servers a killed daemon left running (their pid files
 * in run/), so that none answers for a daemon that no longer knows it. */
void model_reap_orphans(struct daemon *d);
/* The address ("IP:PORT", "[IPv6]:PORT") a process on the host reaches a running server
 * at: the one named, or without a name the one on the default port 7434, else the only
 * one running. -ENOENT (none runs), -EEXIST (several, none named), with err. */
int model_server_addr(struct daemon *d, const char *name, char *out, size_t n,
		      struct k8_err *err);

/* API handlers (api_route.h; the table is in api.c) */
int model_api_list(struct api_call *call);
int model_api_pull(struct api_call *call);
int model_api_import(struct api_call *call);
int model_api_rm(struct api_call *call);
int model_api_serve(struct api_call *call);
int model_api_servers(struct api_call *call);
int model_api_server_stop(struct api_call *call);

#endif
