/* SPDX-License-Identifier: Apache-2.0 */
/* worker.h - hostile bytes parsed in a process of their own, a fresh image of the running
 * binary jailed before it reads a byte, whose verdict comes back on a pipe as one
 * fixed-size report.
 *
 * The CLI extracts a container's tar this way (src/cli/cp.c), kosa8d checks and unpacks
 * image layers, build contexts and RUN layers this way (src/image/unpack_jail.c,
 * src/daemon/docker_build.c).
 *
 * How a worker starts. The parent forks; the child makes only system calls (no library
 * function: POSIX allows the child of a multi-threaded process only async-signal-safe
 * calls, because a lock another thread held at the fork stays held in the child for
 * ever): it moves the descriptors it is given to fixed numbers, closes every other one,
 * dies with its parent (PR_SET_PDEATHSIG) and execs the running binary through the
 * descriptor worker_main() opened at start (execveat, no path looked up), with argv[1]
 * WORKER_ARG, the job's name, its numbers and strings, and an environment that is empty
 * but for ASAN_OPTIONS and UBSAN_OPTIONS. Before, the child ran the job in the forked
 * copy of kosa8d: with the ASan+UBSan build 5 of 100 build contexts hung for ever in a
 * lock of the sanitizer's allocator another daemon thread held at the fork (a stress of
 * 4 builders and 2 pollers), and the forked copy held all of the daemon's memory.
 *
 * The new image, in worker_main(), before anything else of main(): resets its signals,
 * takes its name, enters the user namespace it is given (if any) as its root and arms
 * its parent-death signal again (a change of uid clears it), keeps only `caps` (in
 * every set, the bounding set too; none when 0), sets no_new_privs, becomes
 * non-dumpable, applies Landlock (file access only beneath `dirs`, never execute), then
 * a seccomp filter under which exec, ptrace, mounts, namespaces, id changes, sockets and
 * io_uring kill it. Only then does it run the job, and it writes one struct
 * worker_report.
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
#define WORKER_MAX_ARGS 4
#define WORKER_MAX_STRS 4
#define WORKER_MAX_STR 16384            /* bytes of one string, its NUL included */
#define WORKER_ARG "--k8-worker"        /* argv[1] of a worker */

/* What a job is given, in the worker. */
struct worker_in {
	int fd[WORKER_MAX_FDS];         /* the caller's keep[i], at its number here */
	uint64_t arg[WORKER_MAX_ARGS];
	const char *str[WORKER_MAX_STRS];  /* never NULL: the caller's NULL is "" */
};

/* A job of this binary: the work, in the jailed worker: 0 or a negative errno with
 * `err` set; `*value` (0 to begin with) is reported back (a count, a size). */
struct worker_job {
	const char *name;
	int (*fn)(const struct worker_in *in, uint64_t *value, struct k8_err *err);
};

/* Define worker_job_ID, running `fn`, in the file of its caller, and put it in the
 * binary's table of jobs (a linker section the worker looks its name up in): a binary
 * has the jobs of the files it links, no list to keep. */
#define WORKER_JOB(id, func)                                                           \
	static const struct worker_job worker_job_##id = { .name = #id, .fn = (func) }; \
	static const struct worker_job *const worker_job_ptr_##id                      \
		__attribute__((used, section("k8_worker_jobs"))) = &worker_job_##id

struct worker {
	const char *name;            /* its comm (ps, /proc/PID/status), at most 15 bytes */
	const struct worker_job *job;
	int userns;                  /* a user namespace to enter as its root, or -1 */
	uint64_t caps;               /* capabilities kept (1ull << CAP_*), in that namespace */
	struct jail_dir dirs[WORKER_MAX_DIRS];  /* Landlock: files beneath these only */
	int ndirs;
	int keep[WORKER_MAX_FDS];    /* the descriptors the job uses: its in->fd[] */
	int nkeep;
	uint64_t arg[WORKER_MAX_ARGS];         /* its in->arg[] */
	const char *str[WORKER_MAX_STRS];      /* its in->str[] */
};

/* What the child writes as it ends. */
struct worker_report {
	int32_t code;
	uint64_t value;
	char msg[sizeof(((struct k8_err *)0)->msg)];
};

/* First thing in main() of a program that starts workers, before any thread: in a
 * worker (argv[1] is WORKER_ARG) it runs the job and exits; otherwise it opens the
 * running binary (/proc/self/exe, close-on-exec) for worker_start to exec, so a binary
 * replaced on disk later is not what a worker runs. A program that did not call it
 * cannot start workers (worker_start fails, saying so). */
void worker_main(int argc, char **argv);

/* Start the worker. Its pid, with the read end of its report in *report (close-on-exec),
 * or -1 with `err` set. The descriptors of `w` stay the caller's to close. */
pid_t worker_start(const struct worker *w, int *report, struct k8_err *err);
/* Read the report of `pid` from `report` and reap it. 0 with *value (may be NULL), the
 * child's error, or one saying how `what` ("the extraction") ended without a report. */
int worker_wait(pid_t pid, int report, const char *what, uint64_t *value, struct k8_err *err);
/* worker_start, then worker_wait: for work that needs nothing of the parent meanwhile. */
int worker_run(const struct worker *w, const char *what, uint64_t *value, struct k8_err *err);

#endif
