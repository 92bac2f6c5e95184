/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - the daemon's log lines (stderr, i.e. kosa8d.log) and its audit helper. */
#include "daemon/daemon.h"
#include "daemon/audit.h"

#include <stdio.h>
#include <time.h>

struct daemon *g_daemon_for_signals;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void daemon_log(const char *fmt, ...)
{
	char ts[32];
	struct timespec now;
	struct tm tm;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	pthread_mutex_lock(&log_lock);
	fprintf(stderr, "%s.%03ldZ kosa8d: ", ts, now.tv_nsec / 1000000);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	pthread_mutex_unlock(&log_lock);
}

/* Never fails the caller: an audit failure is logged loudly. Steals `details`. */
void daemon_audit(struct daemon *d, const char *action, const char *sandbox, json_t *details)
{
	struct k8_err err = { 0 };

	if (d && d->audit && audit_append(d->audit, action, sandbox, details, &err) < 0)
		daemon_log("AUDIT FAILURE (%s): %s", action, err.msg);
	json_decref(details);
}
