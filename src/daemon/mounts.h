/* SPDX-License-Identifier: Apache-2.0 */
/* mounts.h - shared folders of a sandbox and its kosa8-fs (mounts.c, docs/shared-folders.md). */
#ifndef K8_MOUNTS_H
#define K8_MOUNTS_H

#include <jansson.h>
#include <stdbool.h>

#include "common/util.h"
#include "daemon/record.h"

/* mounts.c: shared folders and their kosa8-fs */
int mounts_from_body(struct daemon *d, json_t *list, struct sb_mount *out, int *n,
		     struct k8_err *err);
/* Check existing mounts again (a fork, or a boot after the daemon's roots changed). */
int mounts_recheck(struct daemon *d, const struct sb_mount *m, int n, struct k8_err *err);
int fs_up(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* Connect to QEMU's kosa8.fs chardev and hand the fd to kosa8-fs (after QEMU starts). */
int fs_attach_port(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* Default host free-space reserve for writes through shares (docs/shared-folders.md). */
#define K8FS_DEFAULT_RESERVE "1G,5%"
void fs_adopt(struct daemon *d, struct sandbox *sb);
/* kosa8-fs's node and handle tables, saved with a checkpoint and loaded at rewind/fork. */
int fs_save(struct sandbox *sb, const char *path, struct k8_err *err);
int fs_load(struct sandbox *sb, const char *path, struct k8_err *err);

#endif
