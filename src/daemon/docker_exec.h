/* SPDX-License-Identifier: Apache-2.0 */
/* docker_exec.h - exec in a Docker API container (docker_exec.c, docs/docker.md
 * "Containers", "Streams"); docker_api.c routes to them. */
#ifndef K8_DOCKER_EXEC_H
#define K8_DOCKER_EXEC_H

#include "daemon/api_route.h"

int dkx_api_create(struct api_call *call);
int dkx_api_start(struct api_call *call);
int dkx_api_inspect(struct api_call *call);
int dkx_api_resize(struct api_call *call);

#endif
