/* SPDX-License-Identifier: Apache-2.0 */
/* docker_api.h - the Docker-compatible Engine API on $KOSA8_HOME/docker.sock
 * (docker_api.c, docs/docker.md): its route table and how it speaks, served by api.c. */
#ifndef K8_DOCKER_API_H
#define K8_DOCKER_API_H

#include "daemon/api_route.h"

/* docker.sock's dialect: for api_listen(). */
extern const struct api_dialect docker_api_dialect;

/* docker.sock's paths: strip an optional /v1.NN/ prefix (-EINVAL with moby's wording
 * outside 1.24..1.47), split like api_path_split, and join an image name that spans
 * segments (dq_image_segments: "/images/127.0.0.1:5000/py:1/json" -> images,
 * "127.0.0.1:5000/py:1", json). Returns 0, or a negative errno with err filled. */
int docker_api_split(const char *url, struct api_path *p, struct k8_err *err);

#endif
