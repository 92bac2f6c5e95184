/* SPDX-License-Identifier: Apache-2.0 */
/* docker_engine.h - the sandbox a Docker API container runs in (docker_engine.c,
 * docs/docker.md "The engine"): the shared, always-warm `docker-engine`, or one of its
 * own per container with require_sandbox. */
#ifndef K8_DOCKER_ENGINE_H
#define K8_DOCKER_ENGINE_H

#include "daemon/daemon.h"
#include "daemon/sandbox.h"

#define DKE_NAME "docker-engine"

/* config.json "require_sandbox": true (read at each call, like every setting). */
bool dke_require_sandbox(struct daemon *d);

/* The sandbox named `name` (DKE_NAME, or a container's own "dk-<id12>"), created with the
 * docker_engine_* settings when it does not exist, and running. Returns it with a user
 * reference (sb_put it), or NULL with err filled. Creation is serialised: two first
 * containers at once make one engine. */
struct sandbox *dke_get(struct daemon *d, const char *name, struct k8_err *err);

/* config.json "docker_engine_boot": true: create and boot the engine now, in the
 * background (daemon start). */
void dke_boot_at_start(struct daemon *d);

#endif
