/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - the shim's log lines (log.h). */
#include "shim/log.h"

#include <stdio.h>
#include <string.h>

static int log_fd = 2;

void shim_log_fd(int fd)
{
	log_fd = fd;
}

void shim_log(const char *fmt, ...)
{
	char line[2048], when[K8_TIME_LEN];
	va_list ap;
	int n, m;

	n = snprintf(line, sizeof(line), "time=\"%s\" level=info msg=\"kosa8 shim[%d]: ",
		     k8_time_now(when, 1), (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(line) - 3)
		return;
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - 3 - (size_t)n, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	if ((size_t)m > sizeof(line) - 4 - (size_t)n)
		m = (int)(sizeof(line) - 4 - (size_t)n);
	/* logrus quoting: a quote, backslash or line break inside would end the field */
	for (int i = n; i < n + m; i++)
		if (line[i] == '"' || line[i] == '\\' || line[i] == '\n' || line[i] == '\r')
			line[i] = '\'';
	n += m;
	line[n++] = '"';
	line[n++] = '\n';
	(void)!write(log_fd, line, (size_t)n);
}
