/* SPDX-License-Identifier: Apache-2.0 */
/* images.h - the image routes of the API (images.c; the store itself is src/image). */
#ifndef K8_IMAGES_H
#define K8_IMAGES_H

#include "daemon/api_route.h"

int images_api_list(struct api_call *call);
int images_api_load(struct api_call *call);
int images_api_pull(struct api_call *call);
int images_api_rm(struct api_call *call);

#endif
