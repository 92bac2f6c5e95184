/* SPDX-License-Identifier: Apache-2.0 */
/* netutil.c - kosa8-net's log lines (stderr, which the daemon appends to a log file) and
 * its source of randomness. Apart from main.c so that unit tests can link the modules. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

#include "common/util.h"
#include "net/net.h"

void net_log(const struct net *n, const char *fmt, ...)
{
	char t[K8_TIME_LEN];
	k8_time_now(t, 0);
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s kosa8-net[%s]: ", t, n && n->id ? n->id : "?");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void net_random(void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len > 0) {
		ssize_t r = getrandom(p, len, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			abort();        /* no randomness: ids and ISNs would be guessable */
		}
		p += r;
		len -= (size_t)r;
	}
}
