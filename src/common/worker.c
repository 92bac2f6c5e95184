/* SPDX-License-Identifier: Apache-2.0 */
/* worker.c - a jailed child for hostile bytes, its report on a pipe (worker.h). */
#include "common/worker.h"
#include "common/sidecar.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int worker_cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* Close every descriptor from 3 up but the n in `fds`; 0-2 that are not kept read and
 * write /dev/null. */
static void worker_close_others(int *fds, int n)
{
	unsigned lo = 3;
	int null;

	qsort(fds, (size_t)n, sizeof(*fds), worker_cmp_int);
	for (int i = 0; i < n; i++) {
		if (fds[i] < (int)lo)
			continue;
		if ((unsigned)fds[i] > lo)
			syscall(SYS_close_range, lo, (unsigned)fds[i] - 1, 0u);
		lo = (unsigned)fds[i] + 1;
	}
	syscall(SYS_close_range, lo, ~0u, 0u);
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int std = 0; null >= 0 && std < 3; std++) {
		bool kept = false;
		for (int i = 0; i < n; i++)
			kept |= fds[i] == std;
		if (!kept)
			dup2(null, std);
	}
	if (null > 2)
		close(null);
}

/* The seccomp part of the jail: what only an attacker calls kills the process. */
static int worker_seccomp(struct k8_err *err)
{
	/* no network, and no io_uring (its own socket and connect would pass a filter) */
	static const int no_net[] = { SCMP_SYS(socket), SCMP_SYS(socketpair), SCMP_SYS(connect),
				      SCMP_SYS(bind), SCMP_SYS(listen), SCMP_SYS(accept4),
				      SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter),
				      SCMP_SYS(io_uring_register) };
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);

	if (!ctx || sc_seccomp_kill_escapes(ctx) ||
	    sc_seccomp_add(ctx, SCMP_ACT_KILL_PROCESS, no_net, ARRAY_SIZE(no_net)) ||
	    sc_seccomp_load(ctx))
		return k8_err_set(err, -EPERM, "seccomp failed");
	return 0;
}

/* In the child, after the descriptors are sorted out: the jail (worker.h's order). */
static int worker_jail(const struct worker *w, struct k8_err *err)
{
	int abi, r;

	if (w->userns >= 0) {
		/* root of that namespace: its ids are the host's it maps, its capabilities
		 * reach only what those ids own */
		if (setns(w->userns, CLONE_NEWUSER) < 0)
			return k8_err_set(err, -errno, "entering the user namespace: %s",
					  strerror(errno));
		if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
			return k8_err_set(err, -errno, "becoming the namespace's root: %s",
					  strerror(errno));
	}
	if ((r = jail_caps_keep(w->caps, err)))
		return r;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return k8_err_set(err, -errno, "dumpable: %s", strerror(errno));
	if ((r = jail_landlock_dirs(w->dirs, w->ndirs, &abi, err)))
		return r;
	for (int i = 0; i < w->ndirs; i++) {     /* done with, unless `fn` works in one */
		bool kept = false;
		for (int k = 0; k < w->nkeep; k++)
			kept |= w->keep[k] == w->dirs[i].fd;
		if (!kept)
			close(w->dirs[i].fd);
	}
	if (w->userns >= 0)
		close(w->userns);
	return worker_seccomp(err);
}

static _Noreturn void worker_child(const struct worker *w, int rep, pid_t parent)
{
	int fds[1 + WORKER_MAX_FDS + WORKER_MAX_DIRS + 1], n = 0;
	struct worker_report m = { 0 };
	struct k8_err e = { 0 };
	sigset_t all;

	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
		_exit(127);
	fds[n++] = rep;
	for (int i = 0; i < w->nkeep && i < WORKER_MAX_FDS; i++)
		fds[n++] = w->keep[i];
	for (int i = 0; i < w->ndirs && i < WORKER_MAX_DIRS; i++)
		fds[n++] = w->dirs[i].fd;
	if (w->userns >= 0)
		fds[n++] = w->userns;
	worker_close_others(fds, n);
	prctl(PR_SET_NAME, w->name, 0, 0, 0);
	m.code = worker_jail(w, &e);
	if (m.code)
		k8_err_wrap(&e, "jailing %s", w->name);
	else
		m.code = w->fn(w->ctx, &m.value, &e);
	if (m.code && !e.msg[0])
		snprintf(e.msg, sizeof(e.msg), "%s", strerror(-m.code));
	memcpy(m.msg, e.msg, sizeof(m.msg));
	(void)!write_full(rep, &m, sizeof(m));
	_exit(m.code ? 1 : 0);
}

pid_t worker_start(const struct worker *w, int *report, struct k8_err *err)
{
	pid_t parent = getpid(), pid;
	int p[2];

	if (w->ndirs > WORKER_MAX_DIRS || w->nkeep > WORKER_MAX_FDS) {
		k8_err_set(err, -EINVAL, "a worker keeps at most %d descriptors and %d folders",
			   WORKER_MAX_FDS, WORKER_MAX_DIRS);
		return -1;
	}
	if (pipe2(p, O_CLOEXEC) < 0) {
		k8_err_set(err, -errno, "pipe: %s", strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		worker_child(w, p[1], parent);
	}
	close(p[1]);
	if (pid < 0) {
		k8_err_set(err, -errno, "fork: %s", strerror(errno));
		close(p[0]);
		return -1;
	}
	*report = p[0];
	return pid;
}

int worker_wait(pid_t pid, int report, const char *what, uint64_t *value, struct k8_err *err)
{
	struct worker_report m = { 0 };
	int st = 0, r = read_full(report, &m, sizeof(m));

	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (r == 0 && WIFEXITED(st)) {
		char msg[sizeof(m.msg)];
		m.msg[sizeof(m.msg) - 1] = '\0';
		str_escape_to(msg, sizeof(msg), m.msg);     /* the child's words: inert */
		if (m.code < 0)
			return k8_err_set(err, m.code, "%s", msg);
		if (m.code == 0 && WEXITSTATUS(st) == 0) {
			if (value)
				*value = m.value;
			return 0;
		}
	}
	if (WIFSIGNALED(st))
		return k8_err_set(err, -EIO, "%s was stopped by signal %d%s", what, WTERMSIG(st),
				  WTERMSIG(st) == SIGSYS ?
				  " (it tried a system call its jail forbids)" : "");
	return k8_err_set(err, -EIO, "%s ended without a report (exit %d)", what,
			  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int worker_run(const struct worker *w, const char *what, uint64_t *value, struct k8_err *err)
{
	int report, r;
	pid_t pid = worker_start(w, &report, err);

	if (pid < 0)
		return err->code;
	r = worker_wait(pid, report, what, value, err);
	close(report);
	return r;
}
