/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_interp.h - E2B's code interpreter (its port 49999: /execute, /contexts) over
 * kosa8's own interpreter (e2b_interp.c, interp.h, docs/e2b.md). */
#ifndef K8_DAEMON_E2B_INTERP_H
#define K8_DAEMON_E2B_INTERP_H

#include "daemon/api_route.h"

/* POST /execute: a cell, its events streamed as E2B's NDJSON lines. */
int e2b_api_execute(struct api_call *call);
/* POST /contexts, GET /contexts, DELETE /contexts/{id}, POST /contexts/{id}/restart. */
int e2b_api_ctx_create(struct api_call *call);
int e2b_api_ctx_list(struct api_call *call);
int e2b_api_ctx_rm(struct api_call *call);
int e2b_api_ctx_restart(struct api_call *call);

#endif
