/* SPDX-License-Identifier: Apache-2.0 */
/* docker_api.h - the Docker-compatible Engine API on $KOSA8_HOME/docker.sock
 * (docker_api.c, docs/docker.md): its route table and how it speaks, served by api.c. */
#ifndef K8_DOCKER_API_H
#define K8_DOCKER_API_H

#include "daemon/api_route.h"

/* docker.sock's dialect: for api_listen(). */
extern const struct api_dialect docker_api_dialect;

#endif
