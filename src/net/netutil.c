/* SPDX-License-Identifier: Apache-2.0 */
/* netutil.c - kosa8-net's log lines (src/common/sidecar.c's format, on stderr, which the
 * daemon appends to a log file) and its source of randomness. Apart from main.c so that
 * unit tests can link the modules. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

#include "common/util.h"
#include "net/net.h"

void net_log(const struct net *n, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sc_log("%s", msg);
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
