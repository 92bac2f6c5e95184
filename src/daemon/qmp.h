/* SPDX-License-Identifier: Apache-2.0 */
/* qmp.h - QMP client: one connection to a QEMU's monitor (qmp.c). Mechanism. */
#ifndef K8_QMP_H
#define K8_QMP_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>

#include "common/util.h"

struct qmp {
	int fd;
	pthread_mutex_t lock;
	char *buf;              /* line buffer, bounded */
	size_t have;
};
int qmp_connect(struct qmp *q, const char *path, int timeout_ms, struct k8_err *err);
void qmp_close(struct qmp *q);
/* Run a command; *ret (may be NULL) receives the "return" value. Events are skipped.
 * Returns -EIO with the QMP error's desc in err. */
int qmp_exec(struct qmp *q, const char *cmd, json_t *args /* stolen, may be NULL */,
	     json_t **ret, int timeout_ms, struct k8_err *err);
/* The same, passing `fd` to QEMU with the command (for getfd). */
int qmp_exec_fd(struct qmp *q, const char *cmd, json_t *args, int fd, json_t **ret,
		int timeout_ms, struct k8_err *err);

#endif
