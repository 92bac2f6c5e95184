/* SPDX-License-Identifier: Apache-2.0 */
/* bundle.h - kosa8 bundle export / import: the air-gap bundle (bundle.c, docs/model.md
 * "Bundles"). */
#ifndef K8_BUNDLE_H
#define K8_BUNDLE_H

#include "daemon/api_route.h"
#include <jansson.h>

#include "common/util.h"

struct daemon;

int bundle_export(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
		  json_t **out, struct k8_err *err);
int bundle_import(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
		  json_t **out, struct k8_err *err);

/* API handlers (api_route.h; the table is in api.c) */
int bundle_api_export(struct api_call *call);
int bundle_api_import(struct api_call *call);

#endif
