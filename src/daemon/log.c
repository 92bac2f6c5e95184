/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - the daemon's log lines (stderr, i.e. kosa8d.log). */
#include "daemon/log.h"

#include <pthread.h>
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
	/* One line per call, whatever the arguments hold: names and reasons that came from a
	 * sandbox or a sidecar cannot end the line or put escape sequences in the log. */
	char raw[2048], line[4096];
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	str_escape_to(line, sizeof(line), raw);
	pthread_mutex_lock(&log_lock);
	fprintf(stderr, "%s.%03ldZ kosa8d: %s\n", ts, now.tv_nsec / 1000000, line);
	fflush(stderr);
	pthread_mutex_unlock(&log_lock);
}
