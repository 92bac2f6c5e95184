/* SPDX-License-Identifier: Apache-2.0 */
/* secret_api.h - GET /v1/secrets, POST and DELETE /v1/secrets/{name} (secret_api.c,
 * docs/broker.md "Secrets"); the table is api.c's. */
#ifndef K8_DAEMON_SECRET_API_H
#define K8_DAEMON_SECRET_API_H

#include "daemon/api_route.h"

int secret_api_list(struct api_call *call);
int secret_api_set(struct api_call *call);
int secret_api_rm(struct api_call *call);

#endif
