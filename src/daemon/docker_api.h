/* SPDX-License-Identifier: Apache-2.0 */
/* docker_api.h - the Docker-compatible Engine API on $KOSA8_HOME/docker.sock
 * (docker_api.c, docs/docker.md): its route table and how it speaks, served by api.c. */
#ifndef K8_DOCKER_API_H
#define K8_DOCKER_API_H

#include "daemon/api_route.h"

/* docker.sock's dialect: for api_listen(). */
extern const struct api_dialect docker_api_dialect;

/* The path rules of docker.sock, exposed for the unit tests and the fuzz target: strip
 * an optional /v1.NN/ prefix (400 outside 1.24..1.47), split, and join an image name
 * that spans segments ("/images/127.0.0.1:5000/py:1/json" -> images, NAME, json). */
int docker_api_split(const char *url, struct api_path *p, struct k8_err *err);

/* The Docker form of a kosa8 image name: "docker.io/library/python:3" -> "python:3",
 * "docker.io/x/y:1" -> "x/y:1", others unchanged. Writes out[len]. */
void docker_familiar(const char *ref, char *out, size_t len);

#endif
