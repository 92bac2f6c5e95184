/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_ctl.h - E2B's control plane (e2b_ctl.c, docs/e2b.md): sandboxes created, connected,
 * paused, killed, listed, their timeouts, metrics, network, snapshots and forks. Every
 * handler first checks the request's X-API-Key (e2b_keys.h). */
#ifndef K8_DAEMON_E2B_CTL_H
#define K8_DAEMON_E2B_CTL_H

#include "daemon/api_route.h"

/* The request's API key, checked: 0, or -EKEYREJECTED (401) with E2B's message. */
int e2b_ctl_auth(struct api_call *call);

struct e2b_box;
/* The data plane's door: the box E2b-Sandbox-Id names (a reference), whose port
 * (E2b-Sandbox-Port, when sent) is `port`, asked with a token of its own: X-Access-Token
 * (envdAccessToken), or on the interpreter's port (49999) E2B-Traffic-Access-Token
 * (trafficAccessToken) as the code interpreter's client sends it. A paused box answers
 * only after e2b_box_ready. 0, or -EINVAL, -EKEYREJECTED, or -EHOSTUNREACH for a sandbox
 * or port that is not here (502, as E2B's proxy answers). */
int e2b_data_auth(struct api_call *call, int port, struct e2b_box **bp);

int e2b_api_create(struct api_call *call);
int e2b_api_list(struct api_call *call);
int e2b_api_connect(struct api_call *call);
int e2b_api_info(struct api_call *call);
int e2b_api_kill(struct api_call *call);
int e2b_api_timeout(struct api_call *call);
int e2b_api_refresh(struct api_call *call);
int e2b_api_pause(struct api_call *call);
int e2b_api_metrics(struct api_call *call);
int e2b_api_network(struct api_call *call);
int e2b_api_snapshot(struct api_call *call);
int e2b_api_snapshots(struct api_call *call);
int e2b_api_snapshot_rm(struct api_call *call);
int e2b_api_fork(struct api_call *call);

#endif
