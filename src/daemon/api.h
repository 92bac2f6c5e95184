/* SPDX-License-Identifier: Apache-2.0 */
/* api.h - the daemon's API server on its unix socket (api.c, docs/reference/api.md). */
#ifndef K8_API_H
#define K8_API_H

#include "common/util.h"

struct daemon;

struct api_dialect;

/* Serve kosa8d.sock's API on listen_fd. */
int api_start(struct daemon *d, int listen_fd, struct k8_err *err);
/* Serve another listener (docker.sock) with the same HTTP code path and its own table,
 * errors and streams (api_route.h). */
int api_listen(struct daemon *d, int listen_fd, const struct api_dialect *dl,
	       struct k8_err *err);
void api_stop(struct daemon *d);

/* kosa8d.sock's route table (docs/reference/api.md's order), for the tests that check its shape. */
struct api_route;
const struct api_route *api_routes(size_t *n);

#endif
