/* SPDX-License-Identifier: Apache-2.0 */
/* docker_route.h - docker.sock's path rules and Docker's image names (docker_route.c),
 * pure: no HTTP server, no daemon state (docs/docker.md, "The socket"). */
#ifndef K8_DOCKER_ROUTE_H
#define K8_DOCKER_ROUTE_H

#include "daemon/api_route.h"

/* Strip an optional /v1.NN/ prefix (-EINVAL with moby's wording outside 1.24..1.47),
 * split like api_path_split, and join an image name that spans segments:
 * "/images/127.0.0.1:5000/py:1/json" -> images, "127.0.0.1:5000/py:1", json. Returns 0,
 * or a negative errno with err filled (a joined name longer than API_SEG_LEN - 1 bytes:
 * -EINVAL). */
int docker_api_split(const char *url, struct api_path *p, struct k8_err *err);

/* The Docker form of a kosa8 image name: "docker.io/library/python:3" -> "python:3",
 * "docker.io/x/y:1" -> "x/y:1", others unchanged. Writes out[len]. */
void docker_familiar(const char *ref, char *out, size_t len);

#endif
