/* SPDX-License-Identifier: Apache-2.0 */
/* guest.h - the guest image: kernel and initramfs, found and verified (guest.c). Mechanism. */
#ifndef K8_DAEMON_GUEST_H
#define K8_DAEMON_GUEST_H

#include "common/util.h"

#include <stdbool.h>

struct guest_image {
	char dir[4096];
	char kernel[4096], initramfs[4096];
	char kernel_sha[65], initramfs_sha[65];
	char digest[72];                /* "sha256:" + the SHA-256 of manifest.json */
	char source[128];
};
int guest_find(struct guest_image *g, struct k8_err *err);
/* The guest image whose manifest.json is in `dir` (no other place looked at). */
int guest_find_dir(struct guest_image *g, const char *dir, struct k8_err *err);
/* As guest_find, but first $KOSA8_HOME/guest (where `kosa8 bundle import` installs one). */
int guest_find_home(struct guest_image *g, const char *home, struct k8_err *err);
/* Install the checked guest image staged in g->dir (its manifest.json, kernel and
 * initramfs) as $home/guest, replacing the one there (kept as guest.old until the rename
 * succeeded): its files made world-readable (the jailed QEMU reopens them through
 * /proc/self/fd, which checks the file's mode; nothing in them is secret). Then *g is the
 * installed image. 0 or -errno with a message. The caller verified it first. */
int guest_install(struct guest_image *g, const char *home, struct k8_err *err);
/* Open and verify both files against the manifest; on success *kfd and *ifd are open fds of
 * exactly the bytes that were checked (QEMU is given /proc/self/fd/N, so a file swapped
 * after the check is never booted). */
int guest_verify_open(const struct guest_image *g, int *kfd, int *ifd, struct k8_err *err);
/* For a report (GET /v1/status), not a boot: whether both files match the manifest, as
 * guest_verify_open says, but without hashing them again while each still has the
 * device, inode, size, mtime and ctime it had when they last matched. */
bool guest_verified(const struct guest_image *g, struct k8_err *err);

#endif
