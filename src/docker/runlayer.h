/* SPDX-License-Identifier: Apache-2.0 */
/* runlayer.h - the check of the layer a build's RUN step sends back from the guest.
 * The tar is hostile (the RUN's process, root in its container, wrote that tree), so it
 * is read with libarchive only to check it, before the image store's own unpacker
 * (which enforces the same again while writing) ever sees it. Pure: a file descriptor
 * in, a verdict out; fuzzed (tests/fuzz/fuzz_runlayer.c). */
#ifndef K8_DOCKER_RUNLAYER_H
#define K8_DOCKER_RUNLAYER_H

#include <stdint.h>

#include "common/util.h"

/* Read the tar in fd from its start: every path and hard-link target relative, cleaned,
 * without `..`, under 4096 bytes and 256 components deep; only files, directories,
 * symlinks and hard links; at most max_entries entries and max_bytes of file data.
 * Returns 0, or -EINVAL (not a tar, damaged), -EPERM (a bad name), -ENOTSUP (a device,
 * FIFO or socket), -E2BIG/-EFBIG (a cap) with a message saying which. */
int drunlayer_check(int fd, uint64_t max_bytes, unsigned max_entries, struct k8_err *err);

#endif
