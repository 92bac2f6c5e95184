/* SPDX-License-Identifier: Apache-2.0 */
/* worker.c - a jailed worker for hostile bytes, its report on a pipe (worker.h).
 *
 * Theory of operation. worker_start() prepares everything in the parent (the pipe, the
 * worker's argv and environment, /dev/null) and forks. The child of a multi-threaded
 * process may call only async-signal-safe functions until it execs: a lock another
 * thread held at fork() (malloc's, the sanitizers' allocator's, stdio's, a library's) is
 * held for ever in the child. So worker_child() makes system calls only (syscall(2), not
 * even the libc wrappers the sanitizers intercept): the descriptors it keeps go to
 * fixed numbers (0-2 /dev/null, 3 the report, then keep[], dirs[], the user namespace,
 * the binary last, close-on-exec), every other one is closed, PR_SET_PDEATHSIG, and
 * execveat() of the binary worker_main() opened at start. The new image enters
 * worker_main() -> worker_image(): a fresh process with one thread, no lock held,
 * nothing of its parent's memory, where the jail and the job may use any library.
 */
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

/* Descriptors in the worker: 0-2 /dev/null, then these. */
#define WORKER_FD_REPORT 3
#define WORKER_FD_KEEP 4
/* stdio, the report, keep[], dirs[], the user namespace and the binary */
#define WORKER_NFD (4 + WORKER_MAX_FDS + WORKER_MAX_DIRS + 2)
/* Above every fixed number: where the child parks its descriptors before moving them. */
#define WORKER_FD_HIGH 64

/* The worker's argv: its name, WORKER_ARG, the job, numbers (hex), strings. */
enum {
	WA_NAME, WA_FLAG, WA_JOB, WA_PARENT, WA_CAPS, WA_USERNS, WA_NKEEP, WA_NDIRS, WA_RO,
	WA_ARG0, WA_STR0 = WA_ARG0 + WORKER_MAX_ARGS, WA_COUNT = WA_STR0 + WORKER_MAX_STRS
};

/* The running binary (worker_main), or -1 with the reason in worker_exe_errno. */
static int worker_exe = -1;
static int worker_exe_errno = ENOSYS;

/* The binary's table of jobs (WORKER_JOB): weak, a binary may have none. */
extern const struct worker_job *const __start_k8_worker_jobs[] __attribute__((weak));
extern const struct worker_job *const __stop_k8_worker_jobs[] __attribute__((weak));

static const struct worker_job *worker_job_find(const char *name)
{
	for (const struct worker_job *const *j = __start_k8_worker_jobs;
	     j && j < __stop_k8_worker_jobs; j++)
		if (!strcmp((*j)->name, name))
			return *j;
	return NULL;
}

/* ---- in the worker: a fresh image of the binary ---- */

/* What the worker's argv says, beyond worker_in. */
struct worker_spec {
	const struct worker_job *job;
	pid_t parent;
	uint64_t caps;
	int userns;
	struct jail_dir dirs[WORKER_MAX_DIRS];
	int ndirs;
	int nfd;                     /* descriptors 0 to nfd - 1 are the worker's */
};

static int worker_hex(const char *s, uint64_t max, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 16);
	return !*s || *end || errno || *v > max ? -EINVAL : 0;
}

/* argv into `s` and `in`; 0 or -EINVAL (worker_start wrote it: this is a bug). */
static int worker_parse(int argc, char **argv, struct worker_spec *s, struct worker_in *in,
			struct k8_err *err)
{
	uint64_t parent, userns, nkeep, ndirs, ro;

	if (argc != WA_COUNT || !(s->job = worker_job_find(argv[WA_JOB])) ||
	    worker_hex(argv[WA_PARENT], INT32_MAX, &parent) ||
	    worker_hex(argv[WA_CAPS], UINT64_MAX, &s->caps) ||
	    worker_hex(argv[WA_USERNS], 1, &userns) ||
	    worker_hex(argv[WA_NKEEP], WORKER_MAX_FDS, &nkeep) ||
	    worker_hex(argv[WA_NDIRS], WORKER_MAX_DIRS, &ndirs) ||
	    worker_hex(argv[WA_RO], (1u << WORKER_MAX_DIRS) - 1, &ro))
		return k8_err_set(err, -EINVAL, "a worker's arguments do not parse (job %s)",
				  argc > WA_JOB ? argv[WA_JOB] : "?");
	for (int i = 0; i < WORKER_MAX_ARGS; i++)
		if (worker_hex(argv[WA_ARG0 + i], UINT64_MAX, &in->arg[i]))
			return k8_err_set(err, -EINVAL, "a worker's argument %d does not parse",
					  i);
	for (int i = 0; i < WORKER_MAX_STRS; i++)
		in->str[i] = argv[WA_STR0 + i];
	s->parent = (pid_t)parent;
	s->nfd = WORKER_FD_KEEP;
	for (int i = 0; i < WORKER_MAX_FDS; i++)
		in->fd[i] = i < (int)nkeep ? s->nfd++ : -1;
	s->ndirs = (int)ndirs;
	for (int i = 0; i < s->ndirs; i++)
		s->dirs[i] = (struct jail_dir){ .fd = s->nfd++, .ro = ro >> i & 1 };
	s->userns = userns ? s->nfd++ : -1;
	return 0;
}

/* The seccomp part of the jail: what only an attacker calls kills the process, and a
 * signal reaches only itself (workers at work share one uid). */
static int worker_seccomp(struct k8_err *err)
{
	/* no network, and no io_uring (its own socket and connect would pass a filter) */
	static const int no_net[] = { SCMP_SYS(socket), SCMP_SYS(socketpair), SCMP_SYS(connect),
				      SCMP_SYS(bind), SCMP_SYS(listen), SCMP_SYS(accept4),
				      SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter),
				      SCMP_SYS(io_uring_register) };
	/* no other id (kill_escapes has the set*res* calls), and no process of its own: a
	 * child that kept the report's pipe open would keep its reader waiting for ever.
	 * Threads stay (clone with CLONE_THREAD); clone3's flags are behind a pointer a
	 * filter cannot read, so it says ENOSYS and glibc falls back to clone. */
	static const int no_ids_no_children[] = {
		SCMP_SYS(setreuid), SCMP_SYS(setregid), SCMP_SYS(setfsuid), SCMP_SYS(setfsgid),
		SCMP_SYS(setgroups), SCMP_SYS(fork), SCMP_SYS(vfork),
	};
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);

	if (!ctx || sc_seccomp_kill_escapes(ctx) || sc_seccomp_signal_self(ctx) ||
	    sc_seccomp_add(ctx, SCMP_ACT_KILL_PROCESS, no_net, ARRAY_SIZE(no_net)) ||
	    sc_seccomp_add(ctx, SCMP_ACT_KILL_PROCESS, no_ids_no_children,
			   ARRAY_SIZE(no_ids_no_children)) ||
	    seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(clone), 1,
			     SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)) ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) ||
	    sc_seccomp_load(ctx))
		return k8_err_set(err, -EPERM, "seccomp failed");
	return 0;
}

/* The jail, in worker.h's order. */
static int worker_jail(const struct worker_spec *s, struct k8_err *err)
{
	int abi, r;

	if (s->userns >= 0) {
		/* root of that namespace: its ids are the host's it maps, its capabilities
		 * reach only what those ids own */
		if (setns(s->userns, CLONE_NEWUSER) < 0)
			return k8_err_set(err, -errno, "entering the user namespace: %s",
					  strerror(errno));
		if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
			return k8_err_set(err, -errno, "becoming the namespace's root: %s",
					  strerror(errno));
	}
	if ((r = jail_caps_keep(s->caps, err)))
		return r;
	/* a change of uid (the namespace's root is another uid of the host) clears the
	 * parent-death signal: armed again after the last one, and the parent checked */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != s->parent)
		return k8_err_set(err, -ESRCH, "its parent is gone");
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return k8_err_set(err, -errno, "dumpable: %s", strerror(errno));
	if ((r = jail_landlock_dirs(s->dirs, s->ndirs, &abi, err)))
		return r;
	for (int i = 0; i < s->ndirs; i++)     /* done with: the job has its own fds */
		close(s->dirs[i].fd);
	if (s->userns >= 0)
		close(s->userns);
	return worker_seccomp(err);
}

static _Noreturn void worker_image(int argc, char **argv)
{
	struct worker_report m = { 0 };
	struct worker_spec s = { 0 };
	struct worker_in in = { 0 };
	struct k8_err e = { 0 };
	sigset_t all;

	/* exec kept what the parent ignored (SIGPIPE) and blocked */
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	m.code = worker_parse(argc, argv, &s, &in, &e);
	/* and what a library's constructor may have opened */
	syscall(SYS_close_range, m.code ? WORKER_FD_KEEP : (unsigned)s.nfd, ~0u, 0u);
	prctl(PR_SET_NAME, argv[WA_NAME], 0, 0, 0);
	if (!m.code && (m.code = worker_jail(&s, &e)))
		k8_err_wrap(&e, "jailing %s", argv[WA_NAME]);
	if (!m.code)
		m.code = s.job->fn(&in, &m.value, &e);
	if (m.code && !e.msg[0])
		snprintf(e.msg, sizeof(e.msg), "%s", strerror(-m.code));
	memcpy(m.msg, e.msg, sizeof(m.msg));
	(void)!write_full(WORKER_FD_REPORT, &m, sizeof(m));
	_exit(m.code ? 1 : 0);
}

void worker_main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], WORKER_ARG))
		worker_image(argc, argv);
	worker_exe = open("/proc/self/exe", O_PATH | O_CLOEXEC);
	worker_exe_errno = worker_exe < 0 ? errno : 0;
}

/* ---- in the parent ---- */

/* What the child needs, all made before fork(). */
struct worker_spawn {
	int from[WORKER_NFD];        /* descriptor i of the worker; the last is the binary */
	int n;
	pid_t parent;
	char *const *argv, *const *envp;
};

/* Between fork() and exec: system calls only (the file's head says why). Each
 * descriptor is parked above WORKER_FD_HIGH first, so moving one to its number never
 * overwrites another not moved yet. */
static _Noreturn void worker_child(const struct worker_spawn *s)
{
	long hi[WORKER_NFD];

	for (int i = 0; i < s->n; i++)
		if ((hi[i] = syscall(SYS_fcntl, s->from[i], F_DUPFD, WORKER_FD_HIGH)) < 0)
			syscall(SYS_exit_group, 127);
	for (int i = 0; i < s->n; i++)
		if (syscall(SYS_dup3, hi[i], i, i == s->n - 1 ? O_CLOEXEC : 0) < 0)
			syscall(SYS_exit_group, 127);
	syscall(SYS_close_range, (unsigned)s->n, ~0u, 0u);
	if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 ||
	    syscall(SYS_getppid) != s->parent)
		syscall(SYS_exit_group, 127);
	syscall(SYS_execveat, s->n - 1, "", s->argv, s->envp, AT_EMPTY_PATH);
	syscall(SYS_exit_group, 127);
	__builtin_unreachable();
}

/* The environment a worker gets: the sanitizers' options, if set (so a sanitizer build
 * still reports from its workers), nothing else. */
static int worker_env(const char **envp)
{
	extern char **environ;
	int n = 0;

	for (char **e = environ; e && *e; e++)
		if (!strncmp(*e, "ASAN_OPTIONS=", 13) || !strncmp(*e, "UBSAN_OPTIONS=", 14))
			if (n < 2)
				envp[n++] = *e;
	envp[n] = NULL;
	return n;
}

pid_t worker_start(const struct worker *w, int *report, struct k8_err *err)
{
	char nums[WA_STR0][20];
	const char *argv[WA_COUNT + 1], *envp[3];
	struct worker_spawn s = { .parent = getpid(), .argv = (char *const *)argv,
				  .envp = (char *const *)envp };
	unsigned ro = 0;
	int p[2], null;
	pid_t pid;

	if (w->ndirs > WORKER_MAX_DIRS || w->nkeep > WORKER_MAX_FDS || w->ndirs < 0 ||
	    w->nkeep < 0) {
		k8_err_set(err, -EINVAL, "a worker keeps at most %d descriptors and %d folders",
			   WORKER_MAX_FDS, WORKER_MAX_DIRS);
		return -1;
	}
	if (!w->name || !w->job || worker_job_find(w->job->name) != w->job) {
		k8_err_set(err, -EINVAL, "worker %s: its job is not in this program's table",
			   w->name ? w->name : "?");
		return -1;
	}
	for (int i = 0; i < WORKER_MAX_STRS; i++)
		if (w->str[i] && strlen(w->str[i]) >= WORKER_MAX_STR) {
			k8_err_set(err, -E2BIG, "worker %s: a string of %zu bytes (at most %d)",
				   w->name, strlen(w->str[i]), WORKER_MAX_STR - 1);
			return -1;
		}
	if (worker_exe < 0) {
		k8_err_set(err, -worker_exe_errno, "this program cannot start workers: "
			   "/proc/self/exe: %s", strerror(worker_exe_errno));
		return -1;
	}
	for (int i = 0; i < w->ndirs; i++)
		ro |= (unsigned)w->dirs[i].ro << i;
	argv[WA_NAME] = w->name;
	argv[WA_FLAG] = WORKER_ARG;
	argv[WA_JOB] = w->job->name;
	snprintf(nums[WA_PARENT], sizeof(nums[0]), "%x", (unsigned)s.parent);
	snprintf(nums[WA_CAPS], sizeof(nums[0]), "%llx", (unsigned long long)w->caps);
	snprintf(nums[WA_USERNS], sizeof(nums[0]), "%x", w->userns >= 0);
	snprintf(nums[WA_NKEEP], sizeof(nums[0]), "%x", (unsigned)w->nkeep);
	snprintf(nums[WA_NDIRS], sizeof(nums[0]), "%x", (unsigned)w->ndirs);
	snprintf(nums[WA_RO], sizeof(nums[0]), "%x", ro);
	for (int i = 0; i < WORKER_MAX_ARGS; i++)
		snprintf(nums[WA_ARG0 + i], sizeof(nums[0]), "%llx",
			 (unsigned long long)w->arg[i]);
	for (int i = WA_PARENT; i < WA_STR0; i++)
		argv[i] = nums[i];
	for (int i = 0; i < WORKER_MAX_STRS; i++)
		argv[WA_STR0 + i] = w->str[i] ? w->str[i] : "";
	argv[WA_COUNT] = NULL;
	worker_env(envp);

	if ((null = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
		k8_err_set(err, -errno, "/dev/null: %s", strerror(errno));
		return -1;
	}
	if (pipe2(p, O_CLOEXEC) < 0) {
		k8_err_set(err, -errno, "pipe: %s", strerror(errno));
		close(null);
		return -1;
	}
	for (int i = 0; i < 3; i++)
		s.from[s.n++] = null;
	s.from[s.n++] = p[1];
	for (int i = 0; i < w->nkeep; i++)
		s.from[s.n++] = w->keep[i];
	for (int i = 0; i < w->ndirs; i++)
		s.from[s.n++] = w->dirs[i].fd;
	if (w->userns >= 0)
		s.from[s.n++] = w->userns;
	s.from[s.n++] = worker_exe;
	pid = fork();
	if (pid == 0)
		worker_child(&s);
	close(null);
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
		/* a code an errno is not (INT32_MIN: -code overflows) is an I/O error */
		if (m.code < 0)
			return k8_err_set(err, m.code >= -4095 ? m.code : -EIO, "%s", msg);
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
