/* SPDX-License-Identifier: Apache-2.0 */
/* test_jail.c - the jail's uid ranges, and its seccomp filter in a child process: what
 * it refuses (and how), and that what QEMU needs (threads, files, one execve) still
 * works under it. */
#include "daemon/jail.h"
#include "t.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_range(void)
{
	struct jail_range r;
	struct k8_err err = { 0 };

	CHECK_EQ_INT(jail_range_parse(JAIL_DEFAULT_RANGE, &r, &err), 0);
	CHECK_EQ_INT(r.base, 720000);
	CHECK_EQ_INT(r.blocks, 32768);
	CHECK_EQ_INT(jail_uid(&r, 2, JAIL_QEMU), 720008);
	CHECK_EQ_INT(jail_uid(&r, 2, JAIL_FS), 720010);
	memset(&err, 0, sizeof(err));
	CHECK(jail_range_parse("0-100", &r, &err) < 0);          /* never uid 0 */
	memset(&err, 0, sizeof(err));
	CHECK(jail_range_parse("1000-1002", &r, &err) < 0);      /* not one block */
	memset(&err, 0, sizeof(err));
	CHECK(jail_range_parse("2000-1000", &r, &err) < 0);
	memset(&err, 0, sizeof(err));
	CHECK(jail_range_parse("1000-2000x", &r, &err) < 0);
}

static void *thread_fn(void *arg)
{
	return arg;
}

/* In the child: one byte per check, '1' when it held. */
static void child_checks(int out)
{
	char res[16];
	int n = 0;
	pthread_t t;
	void *ret = NULL;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || jail_seccomp() < 0)
		_exit(2);
	errno = 0;
	res[n++] = mount("none", "/tmp", "tmpfs", 0, NULL) < 0 && errno == EPERM ? '1' : '0';
	errno = 0;
	res[n++] = unshare(CLONE_NEWUSER) < 0 && errno == EPERM ? '1' : '0';
	errno = 0;
	res[n++] = ptrace(PTRACE_ATTACH, getppid(), 0, 0) < 0 && errno == EPERM ? '1' : '0';
	errno = 0;
	res[n++] = syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS ? '1' : '0';
	errno = 0;
	res[n++] = syscall(SYS_io_uring_setup, 1, NULL) < 0 && errno == EPERM ? '1' : '0';
	errno = 0;
	res[n++] = syscall(SYS_bpf, 0, NULL, 0) < 0 && errno == EPERM ? '1' : '0';
	/* what QEMU needs: threads (clone without namespace flags), files */
	res[n++] = pthread_create(&t, NULL, thread_fn, (void *)7) == 0 &&
		   pthread_join(t, &ret) == 0 && ret == (void *)7 ? '1' : '0';
	int fd = open("/dev/null", O_RDONLY);
	res[n++] = fd >= 0 ? '1' : '0';
	if (write(out, res, (size_t)n) != n)
		_exit(3);
	close(out);
	/* and its own start: one execve */
	execl("/bin/true", "true", (char *)NULL);
	_exit(4);
}

static void test_seccomp(void)
{
	int p[2], status = 0;
	char res[16] = "";
	ssize_t n;
	pid_t pid;

	if (pipe(p) < 0)
		return;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		child_checks(p[1]);
	}
	close(p[1]);
	n = read(p[0], res, sizeof(res) - 1);
	close(p[0]);
	waitpid(pid, &status, 0);
	CHECK_EQ_INT(n, 8);
	for (int i = 0; i < n; i++)
		if (res[i] != '1')
			fprintf(stderr, "seccomp check %d did not hold\n", i);
	CHECK_STR(res, "11111111");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);  /* /bin/true ran */
}

int main(void)
{
	test_range();
	test_seccomp();
	return T_DONE();
}
