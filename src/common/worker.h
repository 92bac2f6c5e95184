/* SPDX-License-Identifier: Apache-2.0 */
/* worker.h - hostile bytes parsed in a child process of their own, jailed before it reads
 * a byte, whose verdict comes back on a pipe as one fixed-size report.
 *
 * The CLI extracts a container's tar this way (src/cli/cp.c), kosa8d checks and unpacks
 * image layers, build contexts and RUN layers this way (src/image/unpack_jail.c,
 * src/daemon/docker_build.c). The parent forks; the child, in this order: resets its
 * signals, dies with its parent, closes every descriptor but the ones it is given
 * (stdin, stdout and stderr become /dev/null), takes its name, enters the user
 * namespace it is given (if any) as its root, keeps only `caps` (in every set, the
 * bounding set too; none when 0), sets no_new_privs, becomes non-dumpable, applies
 * Landlock (file access only beneath `dirs`, never execute), then a seccomp filter
 * under which exec, ptrace, mounts, namespaces, id changes, sockets and io_uring kill
 * it. Only then does it run `fn`, and it writes one struct worker_report.
 *
 * The parent only reads that report (its length checked, its text cut to size) and the
 * exit status: a child that crashes, is killed by its filter or dies any other way is an
 * error with a message, never the parent's problem.
 */
#ifndef KOSA8_COMMON_WORKER_H
#define KOSA8_COMMON_WORKER_H

#include <stdint.h>
#include <sys/types.h>

#include "common/jail.h"
#include "common/util.h"

#define WORKER_MAX_DIRS 4
#define WORKER_MAX_FDS 4

struct worker {
	const char *name;            /* its comm (ps, /proc/PID/status), at most 15 bytes */
	int userns;                  /* a user namespace to enter as its root, or -1 */
	uint64_t caps;               /* capabilities kept (1ull << CAP_*), in that namespace */
	struct jail_dir dirs[WORKER_MAX_DIRS];  /* Landlock: files beneath these only */
	int ndirs;
	int keep[WORKER_MAX_FDS];    /* the descriptors `fn` uses */
	int nkeep;
	/* The work, in the jailed child: 0 or a negative errno with `err` set; `*value` is
	 * reported back (a count, a size). */
	int (*fn)(void *ctx, uint64_t *value, struct k8_err *err);
	void *ctx;
};

/* What the child writes as it ends. */
struct worker_report {
	int32_t code;
	uint64_t value;
	char msg[sizeof(((struct k8_err *)0)->msg)];
};

/* Start the child. Its pid, with the read end of its report in *report (close-on-exec),
 * or -1 with `err` set. The descriptors of `w` stay the caller's to close. */
pid_t worker_start(const struct worker *w, int *report, struct k8_err *err);
/* Read the report of `pid` from `report` and reap it. 0 with *value (may be NULL), the
 * child's error, or one saying how `what` ("the extraction") ended without a report. */
int worker_wait(pid_t pid, int report, const char *what, uint64_t *value, struct k8_err *err);
/* worker_start, then worker_wait: for work that needs nothing of the parent meanwhile. */
int worker_run(const struct worker *w, const char *what, uint64_t *value, struct k8_err *err);

#endif
