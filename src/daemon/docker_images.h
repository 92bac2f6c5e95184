/* SPDX-License-Identifier: Apache-2.0 */
/* docker_images.h - docker.sock's image endpoints (docker_images.c, docs/docker.md
 * "Images"); docker_api.c routes to them. */
#ifndef K8_DOCKER_IMAGES_H
#define K8_DOCKER_IMAGES_H

#include "daemon/api_route.h"

/* Every image of the store (by manifest digest) in Docker's list shape, with two private
 * fields (kosa8_digest, kosa8_created); NULL with err filled on failure. */
json_t *dki_images(struct daemon *d, struct k8_err *err);

int dki_api_list(struct api_call *call);
int dki_api_inspect(struct api_call *call);
/* POST /images/create?fromImage=&tag=: a pull (sandbox.c audits it as image.pull). */
int dki_api_create(struct api_call *call);
int dki_api_tag(struct api_call *call);
int dki_api_rm(struct api_call *call);
int dki_api_prune(struct api_call *call);

#endif
