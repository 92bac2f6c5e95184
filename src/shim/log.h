/* SPDX-License-Identifier: Apache-2.0 */
/* log.h - the shim's log: one line per event, to the "log" FIFO containerd reads from the
 * bundle (its lines appear in containerd's own log), else stderr. Thread-safe: each line
 * is one write(2). Text that came from elsewhere (kosa8d, the guest) is escaped by the
 * caller's %s through str_escape where it may hold control bytes. */
#ifndef K8_SHIM_LOG_H
#define K8_SHIM_LOG_H

#include "common/util.h"

void shim_log_fd(int fd);
void shim_log(const char *fmt, ...) K8_PRINTF(1, 2);

#endif
