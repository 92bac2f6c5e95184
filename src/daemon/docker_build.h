/* SPDX-License-Identifier: Apache-2.0 */
/* docker_build.h - docker.sock's POST /build, the classic builder (docker_build.c,
 * docs/docker.md "Build"). Its body (the context tar) is streamed: the handler is in
 * the dialect's `streamed` list. */
#ifndef K8_DAEMON_DOCKER_BUILD_H
#define K8_DAEMON_DOCKER_BUILD_H

#include "daemon/api_route.h"

int dkb_api_build(struct api_call *call);
/* POST /build/prune: the build cache (docs/docker.md "Build") */
int dkb_api_prune(struct api_call *call);

#endif
