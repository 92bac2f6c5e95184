/* SPDX-License-Identifier: Apache-2.0 */
/* containers.h - a sandbox's containers through its agent: list, stop, remove
 * (containers.c; run and exec are exec.h's). */
#ifndef K8_CONTAINERS_H
#define K8_CONTAINERS_H

#include "daemon/api_route.h"

int ctr_api_list(struct api_call *call);
int ctr_api_stop(struct api_call *call);
int ctr_api_rm(struct api_call *call);
int ctr_api_resize(struct api_call *call);

#endif
