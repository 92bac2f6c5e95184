/* SPDX-License-Identifier: Apache-2.0 */
/* test_model_jail.c - kosa8-model serve's seccomp filter (src/model/jail.c), installed in
 * forked children without root (no_new_privs + filter, the --no-jail path): threads still
 * start; a new socket, a signal to another process or exec kill the process; fork, files
 * and executable memory are refused. And --user parsing. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/jail.h"
#include "t.h"

static void *thread_fn(void *a) { return a; }

/* Run `what` in a child under the filter; its wait status. The child leaves with _exit:
 * a check's result is its exit code (0 = as expected). */
static int in_filter(int what)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct mjail j = { .jail = false };
		struct k8_err err = { 0 };
		if (mjail_enter(&j, &err))
			_exit(90);
		switch (what) {
		case 0: {       /* a thread, as libmicrohttpd and the pool make them */
			pthread_t t;
			void *r = NULL;
			_exit(pthread_create(&t, NULL, thread_fn, (void *)7) || pthread_join(t, &r) ||
			      r != (void *)7);
		}
		case 1:         /* a new socket: killed */
			socket(AF_INET, SOCK_STREAM, 0);
			_exit(91);
		case 2:         /* a signal to another process (the parent): killed */
			kill(getppid(), 0);
			_exit(92);
		case 3: {       /* fork: refused */
			long r = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
			if (r == 0)
				_exit(93);
			_exit(!(r < 0 && errno == EPERM));
		}
		case 4:         /* files: refused */
			_exit(!(open("/etc/hostname", O_RDONLY) < 0 && errno == EPERM));
		case 5: {       /* executable memory: refused; plain memory fine */
			void *x = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			void *y = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			_exit(!(x == MAP_FAILED && errno == EPERM && y != MAP_FAILED));
		}
		case 6: {       /* exec: killed */
			char *argv[] = { (char *)"/bin/true", NULL };
			execv(argv[0], argv);
			_exit(94);
		}
		case 7:         /* a signal to itself (abort, raise) still works */
			_exit(syscall(SYS_tgkill, getpid(), gettid(), 0) != 0);
		}
		_exit(99);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	return st;
}

#define KILLED(st) (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS)
#define OK(st) (WIFEXITED(st) && WEXITSTATUS(st) == 0)

int main(void)
{
	struct mjail j = { 0 };

	CHECK_EQ_INT(mjail_parse_user("719999:719998", &j), 0);
	CHECK(j.uid == 719999 && j.gid == 719998);
	CHECK_EQ_INT(mjail_parse_user("0:5", &j), -EINVAL);
	CHECK_EQ_INT(mjail_parse_user("5:0", &j), -EINVAL);
	CHECK_EQ_INT(mjail_parse_user("5", &j), -EINVAL);
	CHECK_EQ_INT(mjail_parse_user("5:x", &j), -EINVAL);
	CHECK_EQ_INT(mjail_parse_user(":5", &j), -EINVAL);
	CHECK_EQ_INT(mjail_parse_user("4294967295:5", &j), -EINVAL);

	int st;
	st = in_filter(0); CHECK(OK(st));
	st = in_filter(1); CHECK(KILLED(st));
	st = in_filter(2); CHECK(KILLED(st));
	st = in_filter(3); CHECK(OK(st));
	st = in_filter(4); CHECK(OK(st));
	st = in_filter(5); CHECK(OK(st));
	st = in_filter(6); CHECK(KILLED(st));
	st = in_filter(7); CHECK(OK(st));
	return T_DONE();
}
