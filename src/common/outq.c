/* SPDX-License-Identifier: Apache-2.0 */
/* outq.c - a bounded byte queue in front of a non-blocking fd (outq.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/outq.h"

int outq_push(struct outq *q, const void *data, size_t n)
{
	if (n > q->max || q->len + n > q->max)
		return -ENOBUFS;
	if (q->head + q->len + n > q->cap) {
		if (q->head > 0) {
			memmove(q->buf, q->buf + q->head, q->len);
			q->head = 0;
		}
		if (q->len + n > q->cap) {
			size_t nc = q->cap ? q->cap : 65536;
			while (nc < q->len + n)
				nc *= 2;
			if (nc > q->max)
				nc = q->max;
			uint8_t *nb = realloc(q->buf, nc);
			if (!nb)
				return -ENOMEM;
			q->buf = nb;
			q->cap = nc;
		}
	}
	memcpy(q->buf + q->head + q->len, data, n);
	q->len += n;
	return 0;
}

int outq_flush(struct outq *q, int fd)
{
	while (q->len > 0) {
		ssize_t w = write(fd, q->buf + q->head, q->len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		q->head += (size_t)w;
		q->len -= (size_t)w;
	}
	q->head = 0;
	return 0;
}

void outq_reset(struct outq *q)
{
	q->head = q->len = 0;
}

void outq_free(struct outq *q)
{
	free(q->buf);
	q->buf = NULL;
	q->head = q->len = q->cap = 0;
}
