/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint.h - checkpoints: memory, devices and disk of a running sandbox, and back;
 * rewind, fork, pause (checkpoint.c, docs/design.md "Checkpoints and rewind"). */
#ifndef K8_CHECKPOINT_H
#define K8_CHECKPOINT_H

#include "daemon/api_route.h"
#include <jansson.h>
#include <stdbool.h>

#include "common/util.h"

struct daemon;
struct sandbox;

/* checkpoint.c: memory, devices and disk of a running sandbox, and back */
#define K8_MAX_CHECKPOINTS 10
int ckpt_create(struct daemon *d, struct sandbox *sb, const char *label, json_t **out,
		struct k8_err *err);
int ckpt_list(struct daemon *d, struct sandbox *sb, json_t **out, struct k8_err *err);
int ckpt_remove(struct daemon *d, struct sandbox *sb, const char *label, struct k8_err *err);
int ckpt_rewind(struct daemon *d, struct sandbox *sb, const char *label, json_t **out,
		struct k8_err *err);
/* pause: to disk (QEMU ends, paused/state keeps the machine), or with in_memory the
 * vCPUs only stop; resume undoes either. out: {"to"|"from": "disk"|"memory", "ms"}. */
int sb_pause(struct daemon *d, struct sandbox *sb, bool pause, bool in_memory, json_t **out,
	     struct k8_err *err);
/* The idle pause (idle.c): to disk, if still_idle(sb), asked with the busy token and
 * sb->lock held, says so (a request may have come meanwhile). 1: paused, 0: left
 * running, <0: the pause failed (the VM runs on). Audited with "by": "idle". */
int sb_pause_idle(struct daemon *d, struct sandbox *sb, bool (*still_idle)(struct sandbox *),
		  struct k8_err *err);
/* A new sandbox `name` started from checkpoint `label` of `src`: its disk layers are hard
 * links to the checkpoint's, so it costs only what it writes. */
int ckpt_fork(struct daemon *d, struct sandbox *src, const char *label, const char *name,
	      json_t **out, struct k8_err *err);

/* API handlers (api_route.h; the table is in api.c). Pause lives here: a paused VM is
 * the first half of a checkpoint. */
int ckpt_api_create(struct api_call *call);
int ckpt_api_list(struct api_call *call);
int ckpt_api_rm(struct api_call *call);
int ckpt_api_rewind(struct api_call *call);
int ckpt_api_fork(struct api_call *call);
int ckpt_api_pause(struct api_call *call);
int ckpt_api_resume(struct api_call *call);

#endif
