/* SPDX-License-Identifier: Apache-2.0 */
/* docker_system.h - docker.sock's /_ping, /version and /info (docker_system.c,
 * docs/docker.md "The socket"), and the versions it announces. */
#ifndef K8_DOCKER_SYSTEM_H
#define K8_DOCKER_SYSTEM_H

#include "common/version.h"
#include "daemon/api_route.h"

/* kosa8's own version, as kosa8d.sock's /v1/status reports it (one place: version.h). */
#define DOCKER_K8_VERSION KOSA8_VERSION
#define DOCKER_MIN_API "1.24"
/* /version's Version: the Docker Engine release whose API version (1.47) this socket
 * announces. Clients parse it as Docker's (OpenHands wants >= 18.09; packaging.version
 * must accept it), so it is a plain X.Y.Z; kosa8's own version is in Platform.Name and
 * in a second component "kosa8" (docs/docker.md). */
#define DOCKER_ENGINE_VERSION "27.5.0"

int dksys_api_ping(struct api_call *call);
int dksys_api_version(struct api_call *call);
/* Containers: the Docker API's own (docker_ctr.c), not kosa8's sandboxes. */
int dksys_api_info(struct api_call *call);

#endif
