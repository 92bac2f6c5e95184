/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_envd.h - envd's process service (process.Process over Connect), /health and /envs
 * (e2b_envd.c, docs/e2b.md "One stream loop per process"). Every handler first checks the
 * request's sandbox and token (e2b_ctl.h's e2b_data_auth). Unary calls answer Connect's
 * {"code","message"} with Connect's status; Start and Connect answer 200 and a stream of
 * Connect messages whose last one carries an error, if any. */
#ifndef K8_DAEMON_E2B_ENVD_H
#define K8_DAEMON_E2B_ENVD_H

#include "daemon/api_route.h"

#define E2B_ENVD_PORT 49983

/* Start and Connect take their body (one Connect envelope) as a stream: they belong in
 * the dialect's `streamed` list (api_take_body). */
int e2b_api_proc_start(struct api_call *call);
int e2b_api_proc_connect(struct api_call *call);
int e2b_api_proc_list(struct api_call *call);
int e2b_api_proc_input(struct api_call *call);
int e2b_api_proc_signal(struct api_call *call);
int e2b_api_proc_close_stdin(struct api_call *call);
int e2b_api_proc_update(struct api_call *call);
/* GET /health: 204 while the sandbox is usable; GET /envs: its envVars. */
int e2b_api_health(struct api_call *call);
int e2b_api_envs(struct api_call *call);

#endif
