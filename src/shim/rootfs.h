/* SPDX-License-Identifier: Apache-2.0 */
/* rootfs.h - a task's root file system: containerd's snapshot, made a kosa8 image.
 *
 * Decision (docs/containerd.md "The container's root"): containerd hands the shim the
 * mounts of its snapshotter (an overlay of the image's committed layers and an empty
 * upper directory). The shim mounts them at <bundle>/rootfs as the shim contract asks,
 * then turns that tree into a kosa8 image once: a jailed worker (src/common/worker.c:
 * Landlock beneath the rootfs, CAP_DAC_READ_SEARCH only, seccomp) writes it as one tar
 * layer of an OCI layout, and kosa8d loads it (POST /v1/images/load: its own checks,
 * its jailed unpacker, its EROFS disk). The image is tagged
 * localhost/kosa8-shim-rootfs:<key>, key = SHA-256 of the lower directories' paths,
 * devices, inodes and birth times, so the next container of the same image finds it in
 * kosa8's store and costs nothing. A rootfs with a non-empty upper directory, or one
 * that is not an overlay of committed layers, is converted for that task alone and its
 * image removed with the task.
 */
#ifndef K8_SHIM_ROOTFS_H
#define K8_SHIM_ROOTFS_H

#include "common/util.h"
#include "shim/kclient.h"

#include <stdbool.h>
#include <stddef.h>

#define ROOTFS_REPO "localhost/kosa8-shim-rootfs"

/* One mount of containerd's (K8task__Mount's fields). */
struct rootfs_mount {
	const char *type, *source;
	const char *const *options;
	size_t noptions;
};

/* Mount them at dir (<bundle>/rootfs), read-only: the VM never writes to it. 0 when n is
 * 0 (a bundle whose rootfs is already there). */
int rootfs_mount(const char *dir, const struct rootfs_mount *m, size_t n, struct k8_err *err);
/* Undo rootfs_mount (every mount at dir, lazily); 0 when nothing was mounted. */
int rootfs_unmount(const char *dir);

/* The cache key of these mounts: 0 with 24 hex digits in key, or -ENOENT when they
 * cannot be cached (not one overlay, or its upper directory holds something). */
int rootfs_key(const struct rootfs_mount *m, size_t n, char key[25]);

/* The kosa8 image reference of dir's tree, loaded into kosa8d's store when it is not
 * there yet (key: from rootfs_key, or NULL for a task of its own, then tagged with
 * `own_tag`). work is a folder for the layout while kosa8d loads it. */
int rootfs_image(const struct kc *k, const char *dir, const char *key, const char *own_tag,
		 const char *work, char ref[256], struct k8_err *err);

#endif
