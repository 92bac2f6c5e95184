/* SPDX-License-Identifier: Apache-2.0 */
/* docker_stats.h - stats and top of a Docker API container (docker_stats.c,
 * docs/docker.md "Stats and top"); docker_api.c routes to them. */
#ifndef K8_DAEMON_DOCKER_STATS_H
#define K8_DAEMON_DOCKER_STATS_H

#include "daemon/api_route.h"

int dks_api_stats(struct api_call *call);
int dks_api_top(struct api_call *call);

#endif
