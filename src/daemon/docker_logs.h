/* SPDX-License-Identifier: Apache-2.0 */
/* docker_logs.h - logs and attach of a Docker API container (docker_logs.c,
 * docs/docker.md "Containers", "Streams"); docker_api.c routes to them. */
#ifndef K8_DOCKER_LOGS_H
#define K8_DOCKER_LOGS_H

#include "daemon/api_route.h"

int dkl_api_logs(struct api_call *call);
int dkl_api_attach(struct api_call *call);

#endif
