/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint.h - checkpoints: memory, devices and disk of a running sandbox, and back;
 * rewind, fork, pause (checkpoint.c, docs/design.md "Checkpoints and rewind"). */
#ifndef K8_CHECKPOINT_H
#define K8_CHECKPOINT_H

#include "daemon/api_route.h"
#include <jansson.h>
#include <stdbool.h>

#include "common/util.h"
#include "daemon/vm.h"

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

/* Portable snapshots (docs/stores.md): a checkpoint, or a sandbox paused to disk, as
 * files another host rebuilds it from; store.c moves the files. */
#define CKPT_X_FILES 64
struct ckpt_xfile {
	char path[128];                 /* its name in the snapshot (ckpt_snapshot_local) */
	int fd;                         /* open read-only: the file stays while it is read */
	uint32_t mode;
	uint64_t size;
};
struct ckpt_export {
	struct ckpt_xfile files[CKPT_X_FILES];
	int nfiles;
	struct vm_image images[K8_MAX_SLOTS];   /* disk: its file's name in the snapshot */
	int nimages;
	json_t *settings;               /* sizes, machine, memory kind, layers, agent, egress */
	struct sandbox *held;           /* a paused sandbox's busy token, until _end */
};
/* The files and settings of checkpoint `label` of sb, or (label NULL) of sb paused to
 * disk, whose busy token is then held until ckpt_export_end (its top layer is part of
 * it). A sandbox with shared folders or broker rules is refused: those are this host's. */
int ckpt_export(struct daemon *d, struct sandbox *sb, const char *label,
		struct ckpt_export *ex, struct k8_err *err);
void ckpt_export_end(struct ckpt_export *ex);
/* Where a snapshot's file `path` goes under `dir` (label: a checkpoint's; NULL: paused/),
 * malloc'd; NULL for a path that is not one a snapshot holds (a pull is then refused). */
char *ckpt_snapshot_local(const char *dir, const char *label, const char *path);
/* A new sandbox `name` forked from checkpoint `label` pulled into `mirror` (its files at
 * ckpt_snapshot_local's places; imgs' disks absolute paths there), with the snapshot's
 * settings (checked here as an API body is). The fork keeps links of its own to
 * everything, so `mirror` can go after. */
int ckpt_fork_import(struct daemon *d, const char *mirror, const char *src_name,
		     const char *label, const json_t *settings, const struct vm_image *imgs,
		     int nimgs, const char *name, json_t **out, struct k8_err *err);
/* A sandbox paused on another host, here: ckpt_import_begin reserves `name` (its busy
 * token held) and makes its directory for the pull; ckpt_import_paused records it
 * paused to disk once the files are in. On failure the caller sb_unreserve()s it. */
struct sandbox *ckpt_import_begin(struct daemon *d, const char *name, const json_t *settings,
				  struct k8_err *err);
int ckpt_import_paused(struct daemon *d, struct sandbox *sb, const json_t *settings,
		       const struct vm_image *imgs, int nimgs, struct k8_err *err);

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
