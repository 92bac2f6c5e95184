/* SPDX-License-Identifier: Apache-2.0 */
/* qcow2.h - an empty qcow2 layer over another, written by kosa8d itself. */
#ifndef K8_IMAGE_QCOW2_H
#define K8_IMAGE_QCOW2_H

#include <stdint.h>

/* The largest disk qcow2_overlay makes: its L1 table fits in one cluster (4 TiB). */
#define QCOW2_OVERLAY_MAX ((uint64_t)8192 << 29)

/* Create `path` (0600, no link followed, truncated if it exists) as an empty qcow2 of
 * `size` bytes whose backing file is the qcow2 `backing` (a path written in its header,
 * never opened here): the same bytes `qemu-img create -f qcow2 -F qcow2 -u -b backing
 * path size` writes (QEMU 7.2: version 3, 64 KiB clusters, 16-bit refcounts). `size` a
 * multiple of 512 up to QCOW2_OVERLAY_MAX; `backing` 1-1023 bytes. 0 or -errno; nothing
 * is left at `path` on failure. */
int qcow2_overlay(const char *path, const char *backing, uint64_t size);

#endif
