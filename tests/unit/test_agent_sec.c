/* SPDX-License-Identifier: Apache-2.0 */
/* test_agent_sec.c - the containers' seccomp filter (src/agent/sec.c), loaded in a
 * forked child on this host: what a container must be refused is refused with the
 * right errno, and what ordinary programs need still works. */
#include "agent/agent.h"
#include "t.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static struct agent ag;

enum { R_MOUNT, R_UNSHARE_USER, R_CLONE_NEWNS, R_CLONE3, R_KEYCTL, R_BPF, R_PERF, R_KEXEC,
       R_SETNS, R_SETHOSTNAME, R_VSOCK, R_PERSONALITY_BAD, R_IO_URING,
       /* allowed */
       R_GETPID, R_FORK, R_INET, R_MMAP, R_PERSONALITY_QUERY, R_COUNT };

/* errno of a failed call, 0 when it succeeded */
static int sc_errno(long r)
{
	return r < 0 ? errno : 0;
}

static void child(int wfd)
{
	int res[R_COUNT];
	pid_t p;
	void *m;

	if (sec_apply(&ag, 1) < 0)
		_exit(2);
	res[R_MOUNT] = sc_errno(syscall(SYS_mount, "none", "/", "tmpfs", 0, NULL));
	res[R_UNSHARE_USER] = sc_errno(syscall(SYS_unshare, CLONE_NEWUSER));
	p = (pid_t)syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0);
	if (p == 0)
		_exit(0);
	res[R_CLONE_NEWNS] = sc_errno(p);
	res[R_CLONE3] = sc_errno(syscall(435 /* clone3 */, NULL, 0));
	res[R_KEYCTL] = sc_errno(syscall(SYS_keyctl, 0, -3, 0, 0, 0));
	res[R_BPF] = sc_errno(syscall(SYS_bpf, 0, NULL, 0));
	res[R_PERF] = sc_errno(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	res[R_KEXEC] = sc_errno(syscall(SYS_kexec_load, 0, 0, NULL, 0));
	res[R_SETNS] = sc_errno(syscall(SYS_setns, 0, 0));
	res[R_SETHOSTNAME] = sc_errno(syscall(SYS_sethostname, "x", 1));
	res[R_VSOCK] = sc_errno(syscall(SYS_socket, 40 /* AF_VSOCK */, SOCK_STREAM, 0));
	res[R_PERSONALITY_BAD] = sc_errno(syscall(SYS_personality, 0x0040000 /* READ_IMPLIES_EXEC */));
	res[R_IO_URING] = sc_errno(syscall(425 /* io_uring_setup */, 1, NULL));
	res[R_GETPID] = sc_errno(syscall(SYS_getpid));
	p = fork();
	if (p == 0)
		_exit(0);
	res[R_FORK] = p < 0 ? errno : (waitpid(p, NULL, 0) == p ? 0 : errno);
	res[R_INET] = sc_errno(socket(AF_INET, SOCK_DGRAM, 0));
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	res[R_MMAP] = m == MAP_FAILED ? errno : 0;
	res[R_PERSONALITY_QUERY] = sc_errno(syscall(SYS_personality, 0xffffffff));
	(void)!write(wfd, res, sizeof(res));
	_exit(0);
}

int main(void)
{
	int res[R_COUNT], fds[2], st = -1;
	pid_t pid;

	CHECK_EQ_INT(sec_build(&ag), 0);
	CHECK(ag.sec_prog != NULL && ag.sec_len > 50 && ag.sec_len < 4096);
	CHECK_EQ_INT(sec_build(&ag), 0); /* once */
	if (!ag.sec_prog || pipe(fds) < 0)
		return T_DONE();
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		child(fds[1]);
	}
	close(fds[1]);
	memset(res, 0xff, sizeof(res));
	CHECK_EQ_INT(read(fds[0], res, sizeof(res)), (long long)sizeof(res));
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	for (int i = R_MOUNT; i <= R_PERSONALITY_BAD; i++)
		if (i != R_CLONE3)
			CHECK_EQ_INT(res[i], EPERM);
	CHECK_EQ_INT(res[R_CLONE3], ENOSYS);     /* so glibc falls back to clone(2) */
	CHECK(res[R_IO_URING] == EPERM);
	for (int i = R_GETPID; i < R_COUNT; i++)
		CHECK_EQ_INT(res[i], 0);
	free(ag.sec_prog);
	return T_DONE();
}
