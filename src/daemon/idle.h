/* SPDX-License-Identifier: Apache-2.0 */
/* idle.h - the idle pause: sandboxes nobody uses are paused to disk (idle.c,
 * docs/design.md "Idle sandboxes"). */
#ifndef K8_IDLE_H
#define K8_IDLE_H

#include <jansson.h>

#include "common/util.h"

struct daemon;

/* Read config.json's "idle_pause" into d->idle_pause_s (0 when absent, "off" or not a
 * duration; the last is logged). Called at start and every few seconds after. */
void idle_read_config(struct daemon *d);
/* What an idle sandbox costs, as `daemon status` says: the daemon's idle pause, TCG's
 * translation cache, the host's KSM (read, never changed). */
json_t *idle_status_json(struct daemon *d);
/* Start the thread that pauses idle sandboxes. It ends with the daemon. */
int idle_start(struct daemon *d, struct k8_err *err);

#endif
