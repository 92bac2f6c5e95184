/* SPDX-License-Identifier: Apache-2.0 */
/* docker_ctr.h - the Docker API's container records (docker_ctr.c, docs/docker.md
 * "Containers"): create, list, inspect, rm, prune, archive; docker_api.c routes to them.
 * Their run, logs, exec and stats are docker_run.h, docker_logs.h, docker_exec.h and
 * docker_stats.h; what they share is docker_int.h. */
#ifndef K8_DOCKER_CTR_H
#define K8_DOCKER_CTR_H

#include "daemon/api_route.h"

/* The number of containers the Docker API knows (for /info). */
int dkc_count(struct daemon *d, int *running, int *stopped);

/* Does a container of the Docker API (any state) use the image with this config digest
 * (Docker's image ID)? `docker image prune -a` keeps those. */
bool dkc_image_used(struct daemon *d, const char *config_digest);
/* Give up the engine's slot of the image with manifest `digest` (slots.c slot_evict),
 * serialised with the engine's runs by its slot lock. */
int dkc_image_release(struct daemon *d, const char *digest, struct k8_err *err);

/* API handlers (api_route.h; the table is docker_api.c's) */
int dkc_api_create(struct api_call *call);
int dkc_api_list(struct api_call *call);
int dkc_api_inspect(struct api_call *call);
int dkc_api_rm(struct api_call *call);
int dkc_api_prune(struct api_call *call);
/* docker cp and docker-py's get_archive/put_archive (archive.c does the copying) */
int dkc_api_archive_head(struct api_call *call);
int dkc_api_archive_get(struct api_call *call);
int dkc_api_archive_put(struct api_call *call);

#endif
