/* SPDX-License-Identifier: Apache-2.0 */
/* log.h - the daemon's log lines: one line each, on stderr (kosa8d.log), timestamped,
 * escaped (log.c). Mechanism: every module may log. */
#ifndef K8_DAEMON_LOG_H
#define K8_DAEMON_LOG_H

#include "common/util.h"

void daemon_log(const char *fmt, ...) K8_PRINTF(1, 2);

#endif
