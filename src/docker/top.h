/* SPDX-License-Identifier: Apache-2.0 */
/* top.h - Docker's top (GET /containers/{id}/top?ps_args=, docs/docker.md "Stats and
 * top"): the columns of `ps -ef` or `ps aux`, formatted from kosa8-agent's `ctr.top`
 * process table (the guest has no ps of ours, and a container's ps is the container's).
 * Pure: no daemon, no I/O; every field of the table is a guest's and is checked. */
#ifndef K8_DOCKER_TOP_H
#define K8_DOCKER_TOP_H

#include "common/util.h"

#include <jansson.h>
#include <time.h>

enum dtop_fmt {
	DTOP_EF,        /* -ef (moby's default): UID PID PPID C STIME TTY TIME CMD */
	DTOP_E,         /* -e, -A: PID TTY TIME CMD */
	DTOP_AUX,       /* aux: USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND */
	DTOP_AX,        /* ax, a, x: PID TTY STAT TIME COMMAND */
};

/* The format `ps_args` asks for (NULL or "": -ef). The UNIX letters e, f, A and the BSD
 * letters a, u, x, with or without dashes, not mixed; anything else is -EINVAL with err
 * saying what is served. */
int dtop_args(const char *ps_args, enum dtop_fmt *fmt, struct k8_err *err);

/* {"Titles": [...], "Processes": [[...], ...]} (every value a string, as moby's) from the
 * agent's answer `ans`; `now` is the wall clock, to place each start time. Processes
 * whose fields do not check out are left out. */
json_t *dtop_json(const json_t *ans, enum dtop_fmt fmt, time_t now);

#endif
