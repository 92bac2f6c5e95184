/* SPDX-License-Identifier: Apache-2.0 */
/* docker_run.h - a Docker API container's run (docker_run.c, docs/docker.md
 * "Containers"): start, stop, kill, restart, wait, resize; docker_api.c routes to them. */
#ifndef K8_DOCKER_RUN_H
#define K8_DOCKER_RUN_H

#include "daemon/api_route.h"

int dkr_api_start(struct api_call *call);
int dkr_api_stop(struct api_call *call);
int dkr_api_kill(struct api_call *call);
int dkr_api_restart(struct api_call *call);
int dkr_api_wait(struct api_call *call);
int dkr_api_resize(struct api_call *call);

#endif
