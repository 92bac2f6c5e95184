/* SPDX-License-Identifier: Apache-2.0 */
/* test_worker.c - the jailed worker that parses hostile bytes (src/common/worker.c): its
 * report comes back (value, error, escaped message); a worker that crashes, execs or is
 * killed is an error of its own and the caller goes on; inside, it holds only the
 * descriptors it was given, no capability beyond its mask, no file outside its folders,
 * no environment but the sanitizers' options; as root of a user namespace it cannot
 * chmod the host's root's files, which as the host's root with no capability it can
 * (Landlock does not cover chmod), and it still dies with its parent. A report that is
 * short, too long, or says what no errno is, is an error of its own. It is a fresh
 * image of this binary: a lock another thread of the parent holds is not held there, and
 * workers started while threads hammer malloc never hang (the child of a fork, running
 * the job, waited for such a lock for ever: under ASan, the allocator's). */
#include "common/worker.h"
#include "t.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/k8-worker-XXXXXX";

static int fn_value(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	*value = 42;
	return 0;
}
WORKER_JOB(value, fn_value);

static int fn_fail(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	return k8_err_set(err, -EPERM, "refused \x1b[2J here");
}
WORKER_JOB(fail, fn_fail);

static int fn_crash(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	raise(SIGSEGV);
	return 0;
}
WORKER_JOB(crash, fn_crash);

static int fn_exec(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	execl("/bin/true", "true", (char *)NULL);
	return k8_err_set(err, -errno, "exec: %s", strerror(errno));
}
WORKER_JOB(exec, fn_exec);

static int fn_socket(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	return k8_err_set(err, -EPERM, "socket: %d", fd);
}
WORKER_JOB(socket, fn_socket);

static int fn_ptrace(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	long r = ptrace(PTRACE_TRACEME, 0, NULL, NULL);

	return k8_err_set(err, -EPERM, "ptrace: %ld", r);
}
WORKER_JOB(ptrace, fn_ptrace);

static int fn_fork(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	pid_t pid = fork();         /* clone without CLONE_THREAD */

	if (pid == 0)
		_exit(0);
	return k8_err_set(err, -EPERM, "fork: %d", (int)pid);
}
WORKER_JOB(fork, fn_fork);

static int fn_setgroups(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	return k8_err_set(err, -EPERM, "setgroups: %d", setgroups(0, NULL));
}
WORKER_JOB(setgroups, fn_setgroups);

static int fn_setreuid(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	return k8_err_set(err, -EPERM, "setreuid: %d", setreuid(-1, getuid()));
}
WORKER_JOB(setreuid, fn_setreuid);

static void *thread_value(void *arg)
{
	*(uint64_t *)arg = 7;
	return arg;
}

static int fn_thread(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	pthread_t t;
	int r = pthread_create(&t, NULL, thread_value, value);

	if (r)
		return k8_err_set(err, -r, "pthread_create: %s", strerror(r));
	pthread_join(t, NULL);
	return 0;
}
WORKER_JOB(thread, fn_thread);

/* Reports a worker of ours never writes, on its report's descriptor (3, worker.c). */
#define REPORT_FD 3

/* Half a report, then a clean exit. */
static int fn_short(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	struct worker_report m = { .code = 0, .value = 5 };

	(void)!write(REPORT_FD, &m, sizeof(m) / 2);
	_exit(0);
}
WORKER_JOB(short, fn_short);

/* A report whose code no errno is and whose message has no end, more bytes after it. */
static int fn_long(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	struct worker_report m = { .code = INT32_MIN, .value = 5 };

	memset(m.msg, 'A', sizeof(m.msg));
	(void)!write(REPORT_FD, &m, sizeof(m));
	(void)!write(REPORT_FD, &m, sizeof(m));
	_exit(1);
}
WORKER_JOB(long, fn_long);

/* A report of success, then a failing exit: not a success. */
static int fn_lie(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	struct worker_report m = { .code = 0, .value = 5 };

	(void)!write(REPORT_FD, &m, sizeof(m));
	_exit(3);
}
WORKER_JOB(lie, fn_lie);

/* The numbers and strings it was given: 1 when each is as the test sent it. */
static int fn_args(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	*value = in->arg[0] == UINT64_MAX && in->arg[1] == 0 && in->arg[3] == 7 &&
		 !strcmp(in->str[0], "a b\nc -x") && !strcmp(in->str[1], "") &&
		 !strcmp(in->str[3], "--k8-worker");
	return 0;
}
WORKER_JOB(args, fn_args);

/* Its environment: how many variables other than the sanitizers' options. */
static int fn_env(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	extern char **environ;

	for (char **e = environ; e && *e; e++)
		if (strncmp(*e, "ASAN_OPTIONS=", 13) && strncmp(*e, "UBSAN_OPTIONS=", 14))
			++*value;
	return 0;
}
WORKER_JOB(env, fn_env);

/* What the jail left: one bit a fact, in *value. str[0] is the test's folder. */
static int fn_probe(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	int others = 0;
	struct stat s;
	char p[300];
	int fd;

	*value = 0;
	if (fcntl(in->fd[0], F_GETFD) >= 0)
		*value |= 1;                            /* the descriptor it was given */
	for (int i = 3; i < 1024; i++)
		others += i != in->fd[0] && fcntl(i, F_GETFD) >= 0;
	if (others == 1 && in->fd[1] < 0)
		*value |= 2;                            /* none but it and its report */
	snprintf(p, sizeof(p), "%s/in/f", in->str[0]);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		*value |= 4;                            /* a file in its folder */
		close(fd);
	}
	snprintf(p, sizeof(p), "%s/out", in->str[0]);
	if (open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644) < 0 && errno == EACCES)
		*value |= 8;                            /* not beside it (Landlock) */
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
		*value |= 16;
	if (prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0 &&
	    prctl(PR_CAPBSET_READ, CAP_CHOWN, 0, 0, 0) == 1)
		*value |= 32;                           /* the mask, bounding set too */
	if (fstat(0, &s) == 0 && S_ISCHR(s.st_mode))
		*value |= 64;                           /* stdin is /dev/null */
	if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0)
		*value |= 128;
	return 0;
}
WORKER_JOB(probe, fn_probe);

/* chmod a root-owned file (str[0]) outside the worker's folder: 0, or the errno. */
static int fn_chmod(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	*value = chmod(in->str[0], 04777) < 0 ? (uint64_t)errno : 0;
	return 0;
}
WORKER_JOB(chmod, fn_chmod);

/* A lock of this program's that another thread of the parent holds while the worker
 * starts (as a daemon thread may hold malloc's or the sanitizer's allocator's). */
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;

static int fn_lock(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	pthread_mutex_lock(&held);
	*value = 7;
	pthread_mutex_unlock(&held);
	return 0;
}
WORKER_JOB(lock, fn_lock);

/* Allocates and frees every size of the allocator's classes, and mapped ones: 7. */
static int fn_malloc(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	for (size_t n = 1; n <= (1u << 21); n = n * 2 + 1) {
		char *p = malloc(n);
		if (!p)
			return k8_err_set(err, -ENOMEM, "malloc %zu", n);
		p[n - 1] = 1;
		free(p);
	}
	*value = 7;
	return 0;
}
WORKER_JOB(malloc, fn_malloc);

/* Signals: another process (arg 0, a worker of the same uid), its group and every
 * process (signal 0: nothing is sent even where allowed), itself. A bit per refusal. */
static int fn_signal(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	pid_t other = (pid_t)in->arg[0];

	*value = 0;
	if (kill(other, SIGKILL) < 0 && errno == EPERM)
		*value |= 1;
	if (kill(0, 0) < 0 && errno == EPERM)
		*value |= 2;
	if (kill(-1, 0) < 0 && errno == EPERM)
		*value |= 4;
	if (kill(getpid(), 0) == 0)
		*value |= 8;
	if (syscall(SYS_tgkill, other, other, 0) < 0 && errno == EPERM)
		*value |= 16;
	if (syscall(SYS_pidfd_open, other, 0) < 0 && errno == EPERM)
		*value |= 32;
	return 0;
}
WORKER_JOB(signal, fn_signal);

/* Waits for ever (its parent's death ends it), holding fd[0]. */
static int fn_block(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	for (;;)
		pause();
	return 0;
}
WORKER_JOB(block, fn_block);

static const struct worker_job stray = { .name = "value", .fn = fn_value };

static struct worker base(const struct worker_job *job)
{
	struct worker w = { .name = "k8-test-worker", .job = job, .userns = -1 };
	return w;
}

/* worker_run of `job` with nothing more, `err` cleared first. */
static int run(const struct worker_job *job, const char *what, uint64_t *v, struct k8_err *err)
{
	struct worker w = base(job);

	memset(err, 0, sizeof(*err));
	return worker_run(&w, what, v, err);
}

static int lock_ready[2], lock_done[2];

static void *lock_holder(void *arg)
{
	char c;

	pthread_mutex_lock(&held);
	(void)!write(lock_ready[1], "h", 1);            /* held */
	(void)!read(lock_done[0], &c, 1);               /* until the test is done */
	pthread_mutex_unlock(&held);
	return NULL;
}

/* The deadlock class: a job that takes a lock a thread of the parent holds at the fork.
 * 0 when the worker reported 7 within 20 s; -ETIMEDOUT (the worker killed) if not. */
static int test_lock_held_elsewhere(void)
{
	struct k8_err err = { 0 };
	struct pollfd pfd;
	struct worker w = base(&worker_job_lock);
	pthread_t t;
	uint64_t v = 0;
	int report, r;
	pid_t pid;
	char c;

	if (pipe(lock_ready) || pipe(lock_done) || pthread_create(&t, NULL, lock_holder, NULL))
		return -errno;
	(void)!read(lock_ready[0], &c, 1);
	pid = worker_start(&w, &report, &err);
	if (pid < 0)
		return err.code;
	pfd = (struct pollfd){ .fd = report, .events = POLLIN };
	r = poll(&pfd, 1, 20000);
	if (r <= 0) {
		fprintf(stderr, "the worker waits for a lock its parent's thread holds\n");
		kill(pid, SIGKILL);
	}
	r = worker_wait(pid, report, "the lock", &v, &err);
	close(report);
	(void)!write(lock_done[1], "d", 1);
	pthread_join(t, NULL);
	close(lock_ready[0]);
	close(lock_ready[1]);
	close(lock_done[0]);
	close(lock_done[1]);
	return r ? r : v == 7 ? 0 : -EBADMSG;
}

/* Threads of the parent that allocate and free until told to stop, as a daemon's do. */
static volatile int hammer_stop;

static void *hammer(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	void *slot[64] = { 0 };

	while (!hammer_stop) {
		unsigned i = (unsigned)rand_r(&seed) % 64;
		size_t n = (size_t)1 << (rand_r(&seed) % 19);      /* 1 B to 256 KiB */
		free(slot[i]);
		slot[i] = malloc(n + (unsigned)rand_r(&seed) % 64);
	}
	for (int i = 0; i < 64; i++)
		free(slot[i]);
	return NULL;
}

/* The deadlock the ASan daemon hit: `n` workers started one after another while 3
 * threads of the parent hammer malloc, each given 10 s to report. The number that
 * reported 7; a worker that did not is killed, and the test stops at the first. */
static int test_malloc_hammer(int n)
{
	pthread_t t[3];
	int ok = 0;

	hammer_stop = 0;
	for (int i = 0; i < 3; i++)
		if (pthread_create(&t[i], NULL, hammer, (void *)(uintptr_t)(i + 1)))
			return -errno;
	for (int i = 0; i < n; i++) {
		struct k8_err err = { 0 };
		struct worker w = base(&worker_job_malloc);
		struct pollfd pfd;
		uint64_t v = 0;
		int report;
		pid_t pid = worker_start(&w, &report, &err);

		if (pid < 0)
			break;
		pfd = (struct pollfd){ .fd = report, .events = POLLIN };
		if (poll(&pfd, 1, 10000) != 1) {
			fprintf(stderr, "worker %d of %d has not reported in 10 s\n", i + 1, n);
			kill(pid, SIGKILL);
		}
		if (worker_wait(pid, report, "the malloc", &v, &err) == 0 && v == 7)
			ok++;
		close(report);
		if (ok != i + 1)
			break;
	}
	hammer_stop = 1;
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	return ok;
}

/* A worker in a user namespace whose parent dies: it dies too (the uid change of
 * entering the namespace clears the parent-death signal: armed again after it). The
 * worker holds the write end of a pipe; EOF on it within 10 s is its end. Its comm and
 * seccomp mode are read from /proc meanwhile. 0, or what failed. */
static int test_dies_with_parent(int userns)
{
	int hold[2], tell[2], r = 0;
	char p[64], comm[32] = "";
	struct pollfd pfd;
	pid_t mid, wpid = -1;
	FILE *f;

	if (pipe2(hold, O_CLOEXEC) || pipe2(tell, O_CLOEXEC))
		return -errno;
	mid = fork();
	if (mid == 0) {         /* the parent that dies */
		struct k8_err err = { 0 };
		struct worker w = base(&worker_job_block);
		int report;
		w.userns = userns;
		w.keep[0] = hold[1];
		w.nkeep = 1;
		wpid = worker_start(&w, &report, &err);
		(void)!write(tell[1], &wpid, sizeof(wpid));
		sleep(1);       /* jailed by then */
		_exit(0);
	}
	close(hold[1]);
	close(tell[1]);
	if (read(tell[0], &wpid, sizeof(wpid)) != sizeof(wpid) || wpid <= 0)
		r = -EIO;
	close(tell[0]);
	usleep(300000);
	snprintf(p, sizeof(p), "/proc/%d/comm", (int)wpid);
	if (!r && (f = fopen(p, "r"))) {
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
	}
	if (!r && strcmp(comm, "k8-test-worker\n")) {
		fprintf(stderr, "the worker is named \"%s\"\n", comm);
		r = -EBADMSG;
	}
	waitpid(mid, NULL, 0);
	pfd = (struct pollfd){ .fd = hold[0], .events = POLLIN };
	if (!r && poll(&pfd, 1, 10000) != 1) {
		fprintf(stderr, "the worker outlived its parent\n");
		kill(wpid, SIGKILL);
		r = -ETIMEDOUT;
	}
	close(hold[0]);
	return r;
}

/* Two workers at once share a uid: one may signal only itself, never the other (its
 * victim here stays alive), its process group or every process (kill(-1)). */
static int test_signals_stay_home(void)
{
	struct k8_err err = { 0 };
	struct worker w = base(&worker_job_block);
	uint64_t v = 0;
	int report, status, bad = 0;
	pid_t victim = worker_start(&w, &report, &err);

	if (victim < 0)
		return -1;
	w = base(&worker_job_signal);
	w.arg[0] = (uint64_t)victim;
	if (worker_run(&w, "the signaller", &v, &err) != 0 || v != 63) {
		fprintf(stderr, "signal job: %s, refusals 0x%llx (want 0x3f)\n", err.msg,
			(unsigned long long)v);
		bad = -1;
	}
	if (waitpid(victim, &status, WNOHANG) != 0) {
		fprintf(stderr, "the other worker was killed\n");
		bad = -1;
	} else {
		kill(victim, SIGKILL);
		waitpid(victim, &status, 0);
	}
	close(report);
	return bad;
}

int main(int argc, char **argv)
{
	struct k8_err err = { 0 };
	struct worker w;
	uint64_t v = 0;
	char p[300];
	int keep[2], report;

	worker_main(argc, argv);
	if (!mkdtemp(dir))
		return 1;
	snprintf(p, sizeof(p), "%s/in", dir);
	mkdir(p, 0755);

	CHECK_EQ_INT(run(&worker_job_value, "the test", &v, &err), 0);
	CHECK_EQ_INT(v, 42);
	CHECK_EQ_INT(run(&worker_job_fail, "the test", &v, &err), -EPERM);
	CHECK_STR(err.msg, "refused \\x1b[2J here");
	CHECK_EQ_INT(run(&worker_job_crash, "the test", &v, &err), -EIO);
	CHECK_STR(err.msg, "the test was stopped by signal 11");

	/* exec, a socket, ptrace: killed by its filter */
	CHECK_EQ_INT(run(&worker_job_exec, "the test", &v, &err), -EIO);
	CHECK_STR(err.msg, "the test was stopped by signal 31 (it tried a system call its jail "
		  "forbids)");
	CHECK_EQ_INT(run(&worker_job_socket, "the socket", &v, &err), -EIO);
	CHECK(strstr(err.msg, "signal 31") != NULL);
	CHECK_EQ_INT(run(&worker_job_ptrace, "the ptrace", &v, &err), -EIO);
	CHECK(strstr(err.msg, "signal 31") != NULL);
	/* no child process (its copy of the report's pipe would hold the reader), no other
	 * id; a thread is fine */
	CHECK_EQ_INT(run(&worker_job_fork, "the fork", &v, &err), -EIO);
	CHECK(strstr(err.msg, "signal 31") != NULL);
	CHECK_EQ_INT(run(&worker_job_setgroups, "the setgroups", &v, &err), -EIO);
	CHECK(strstr(err.msg, "signal 31") != NULL);
	CHECK_EQ_INT(run(&worker_job_setreuid, "the setreuid", &v, &err), -EIO);
	CHECK(strstr(err.msg, "signal 31") != NULL);
	CHECK_EQ_INT(run(&worker_job_thread, "the thread", &v, &err), 0);
	CHECK_EQ_INT(v, 7);
	CHECK_EQ_INT(test_signals_stay_home(), 0);

	/* reports no worker of ours writes: not a success, its message cut to size */
	v = 0;
	CHECK_EQ_INT(run(&worker_job_short, "the short", &v, &err), -EIO);
	CHECK_STR(err.msg, "the short ended without a report (exit 0)");
	CHECK_EQ_INT(run(&worker_job_long, "the long", &v, &err), -EIO);
	CHECK_EQ_INT(strlen(err.msg), sizeof(err.msg) - 1);
	CHECK_EQ_INT(strspn(err.msg, "A"), sizeof(err.msg) - 1);
	CHECK_EQ_INT(run(&worker_job_lie, "the lie", &v, &err), -EIO);
	CHECK_STR(err.msg, "the lie ended without a report (exit 3)");
	CHECK_EQ_INT(v, 0);

	/* only jobs of the binary's table; what it is given arrives as given */
	memset(&err, 0, sizeof(err));
	w = base(&stray);
	CHECK_EQ_INT(worker_start(&w, &report, &err), -1);
	CHECK_EQ_INT(err.code, -EINVAL);
	w = base(&worker_job_args);
	w.arg[0] = UINT64_MAX;
	w.arg[3] = 7;
	w.str[0] = "a b\nc -x";
	w.str[3] = "--k8-worker";
	memset(&err, 0, sizeof(err));
	v = 0;
	CHECK_EQ_INT(worker_run(&w, "the args", &v, &err), 0);
	CHECK_EQ_INT(v, 1);

	/* no environment but the sanitizers' options */
	setenv("K8_TEST_SECRET", "hunter2", 1);
	w = base(&worker_job_env);
	v = 99;
	CHECK_EQ_INT(worker_run(&w, "the env", &v, &err), 0);
	CHECK_EQ_INT(v, 0);
	unsetenv("K8_TEST_SECRET");

	/* inside */
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(pipe(keep), 0);
	w = base(&worker_job_probe);
	w.keep[0] = keep[0];
	w.nkeep = 1;
	w.caps = 1ull << CAP_CHOWN;
	w.dirs[0].fd = open(p, O_PATH | O_DIRECTORY);
	w.ndirs = 1;
	w.str[0] = dir;
	v = 0;
	CHECK_EQ_INT(worker_run(&w, "the probe", &v, &err), 0);
	CHECK_EQ_INT(v & 15, 15);
	CHECK(v & 16);
	if (geteuid() == 0)
		CHECK(v & 32);
	CHECK(v & 64);
	CHECK(v & 128);
	close(keep[0]);
	close(keep[1]);
	close(w.dirs[0].fd);

	/* a fresh image: a lock held by another thread of the parent is not held there, and
	 * the allocator's locks other threads take are never held there */
	CHECK_EQ_INT(test_lock_held_elsewhere(), 0);
	CHECK_EQ_INT(test_malloc_hammer(100), 100);

	/* Why kosa8d's workers are root of a user namespace (docs/threat-model.md
	 * "Workers"): Landlock does not cover chmod, so the host's root without a single
	 * capability still changes its own files' modes anywhere; root of the namespace
	 * (host uid 851072) owns none of them. */
	if (geteuid() == 0) {
		struct jail_idmap ids = { .inside = 0, .outside = 851072, .count = 65536 };
		char victim[300];
		struct stat s;
		int fd;

		chmod(dir, 0755);       /* reachable: what stops it is whose file it is */
		snprintf(victim, sizeof(victim), "%s/victim", dir);
		fd = open(victim, O_WRONLY | O_CREAT, 0600);
		close(fd);
		w = base(&worker_job_chmod);
		w.dirs[0].fd = open(p, O_PATH | O_DIRECTORY);
		w.ndirs = 1;
		w.str[0] = victim;
		v = 1;
		CHECK_EQ_INT(worker_run(&w, "the chmod", &v, &err), 0);
		CHECK_EQ_INT(v, 0);             /* the gap: it could */
		CHECK(stat(victim, &s) == 0 && (s.st_mode & 07777) == 04777);
		chmod(victim, 0600);
		w.userns = jail_userns(&ids, &ids, &err);
		CHECK(w.userns >= 0);
		v = 0;
		CHECK_EQ_INT(worker_run(&w, "the chmod", &v, &err), 0);
		CHECK_EQ_INT(v, EPERM);         /* in the namespace it cannot */
		CHECK(stat(victim, &s) == 0 && (s.st_mode & 07777) == 0600);

		/* and there, it still dies with its parent */
		CHECK_EQ_INT(test_dies_with_parent(w.userns), 0);
		close(w.userns);
		close(w.dirs[0].fd);
	}
	CHECK_EQ_INT(test_dies_with_parent(-1), 0);
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)!system(cmd);
	}
	return T_DONE();
}
