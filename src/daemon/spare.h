/* SPDX-License-Identifier: Apache-2.0 */
/* spare.h - a sandbox's spare: a QEMU already restored from one of its checkpoints,
 * loaded and stopped, that a rewind to that checkpoint swaps in (spare.c,
 * docs/design.md "Rewind through a spare"). */
#ifndef K8_SPARE_H
#define K8_SPARE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/util.h"
#include "daemon/daemon.h"
#include "daemon/record.h"
#include "daemon/boot.h"

/* Which checkpoint a sandbox keeps a spare of (sandbox.json "rewind_spare"). */
#define SPARE_LATEST "latest"   /* the label rewound to most recently (the default) */
#define SPARE_OFF "off"
/* Is `v` "latest", "off" or a checkpoint label? */
bool spare_setting_valid(const char *v);

/* After a rewind to `label` succeeded (caller holds the busy token): prepare a spare of
 * it in the background if the sandbox's setting asks for one, and drop a spare of
 * another label that the setting no longer wants. Never fails the caller. */
void spare_after_rewind(struct daemon *d, struct sandbox *sb, const char *label);

/* A rewind to `label` through the ready spare of that label. Caller holds the busy
 * token; the sandbox runs with its sidecars up. Returns:
 *   -EAGAIN  no spare of that label is ready, or it could not be used before anything
 *            changed: the running VM is untouched; rewind cold (err is clear).
 *   0        the spare runs as the sandbox's VM: the old QEMU is gone, the vCPUs run
 *            and the agent's port is connected and greeted (sb_connect_vm_start); the
 *            caller must still sb_connect_vm_finish with `conn` (HELLO, clock, RNG
 *            reseed, mounts) before anything talks to the agent. `layer` (n bytes) is
 *            its top layer's file name, on `frozen` (not yet in layers.json: the caller
 *            records it).
 *   < 0      the swap failed after the old VM went: the sandbox has no VM (as a failed
 *            cold rewind), err says why. */
int spare_take(struct daemon *d, struct sandbox *sb, const char *label, char *layer,
	       size_t n, struct sb_connect *conn, struct k8_err *err);

/* End the spare (ready or being prepared) and forget what the setting asked: the
 * sandbox stops, is removed, or goes to disk. Accepts a sandbox without one. Does not
 * take sb->lock (callers may hold it). */
void spare_drop(struct daemon *d, struct sandbox *sb);
/* The same when checkpoint `label` goes, if the spare is of that label. */
void spare_drop_label(struct daemon *d, struct sandbox *sb, const char *label);
/* Wait until no spare is being prepared for sb (after a drop, the preparation ends soon:
 * its QEMU is killed, and one not started yet is not). Called without sb->lock, which
 * the preparation takes. */
void spare_wait_idle(struct sandbox *sb);
/* At daemon start: end a spare an earlier daemon left (spare.json: its pid, start time
 * and layer) and remove its files. Spares are never adopted. */
void spare_reap(struct daemon *d, struct sandbox *sb);
/* {"label", "ready", "pid", "rss_kib"} of the sandbox's spare, or NULL when it has none. */
json_t *spare_json(struct sandbox *sb);
/* Free the spare's bookkeeping (sb_free; the spare was dropped before). */
void spare_free(struct sandbox *sb);

#endif
