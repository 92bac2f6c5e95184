/* SPDX-License-Identifier: Apache-2.0 */
/* outq.h - a bounded byte queue in front of a non-blocking fd: what the peer does not
 * take now waits here, up to a cap (kosa8-net's frames to QEMU, every sidecar's control
 * replies, src/common/sidecar.c). */
#ifndef K8_OUTQ_H
#define K8_OUTQ_H

#include <stddef.h>
#include <stdint.h>

struct outq {
	uint8_t *buf;
	size_t head, len, cap, max;     /* bytes [head, head+len) are pending; max: hard cap */
};
/* Append n bytes; -ENOBUFS when the queue would exceed its cap (nothing appended). */
int outq_push(struct outq *q, const void *data, size_t n);
/* Write what the fd takes now. 0, or a negative errno for a broken fd. */
int outq_flush(struct outq *q, int fd);
void outq_reset(struct outq *q);
void outq_free(struct outq *q);

#endif
