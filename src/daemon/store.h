/* SPDX-License-Identifier: Apache-2.0 */
/* store.h - snapshot stores (store.c, docs/stores.md): S3 buckets of the user's own that
 * hold checkpoints and paused sandboxes, pushed from one host and forked or resumed on
 * another. The bytes move through src/store/ (xfer.c); this module keeps the stores'
 * settings and keys, and joins checkpoints and sandboxes (checkpoint.c's portable
 * snapshots) to them. */
#ifndef K8_DAEMON_STORE_H
#define K8_DAEMON_STORE_H

#include "daemon/api_route.h"

struct daemon;
struct sandbox;

/* After checkpoint `label` of sb was made: pushed in the background to the store
 * config.json's "push_checkpoints" names, if any (audited as store.push, "by": "auto").
 * The store's name, or NULL when none is set. */
const char *store_after_checkpoint(struct daemon *d, struct sandbox *sb, const char *label);

/* API handlers (api_route.h; the table is in api.c) */
int store_api_list(struct api_call *call);
int store_api_add(struct api_call *call);
int store_api_rm(struct api_call *call);
int store_api_key(struct api_call *call);
int store_api_snapshots(struct api_call *call);
int store_api_snapshot_rm(struct api_call *call);
int store_api_gc(struct api_call *call);
int store_api_fork(struct api_call *call);
int store_api_push(struct api_call *call);
/* pause and resume of sandboxes: with a store ("to", "from", or one the sandbox was paused
 * to) here, else checkpoint.c's */
int store_api_pause(struct api_call *call);
int store_api_resume(struct api_call *call);

#endif
