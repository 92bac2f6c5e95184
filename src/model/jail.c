/* SPDX-License-Identifier: Apache-2.0 */
/* jail.c - kosa8-model serve's jail and seccomp allow-list (jail.h says what and when). */
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/jail.h"
#include "model/jail.h"

int mjail_parse_user(const char *spec, struct mjail *j)
{
	unsigned long uid, gid;
	char *e;

	errno = 0;
	uid = strtoul(spec, &e, 10);
	if (errno || e == spec || *e != ':' || uid == 0 || uid > 0xfffffffeUL)
		return -EINVAL;
	spec = e + 1;
	gid = strtoul(spec, &e, 10);
	if (errno || e == spec || *e || gid == 0 || gid > 0xfffffffeUL)
		return -EINVAL;
	j->uid = (uid_t)uid;
	j->gid = (gid_t)gid;
	return 0;
}

/* What the server's threads do once serving: the listening socket is already bound, so no
 * socket, bind or connect; threads but no fork; memory never executable; signals only to
 * this process. Anything else fails with EPERM; calls only an attacker would make kill
 * the process. clone3 answers ENOSYS so glibc creates threads with clone, whose flags a
 * filter can see. */
static int mjail_seccomp(void)
{
	static const int allow[] = {
		SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
		SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
		SCMP_SYS(poll), SCMP_SYS(ppoll), SCMP_SYS(select), SCMP_SYS(pselect6),
		SCMP_SYS(epoll_create1), SCMP_SYS(epoll_ctl), SCMP_SYS(epoll_wait),
		SCMP_SYS(epoll_pwait), SCMP_SYS(eventfd2), SCMP_SYS(pipe2), SCMP_SYS(close),
		SCMP_SYS(accept4), SCMP_SYS(accept), SCMP_SYS(shutdown), SCMP_SYS(setsockopt),
		SCMP_SYS(getsockopt), SCMP_SYS(getsockname), SCMP_SYS(getpeername),
		SCMP_SYS(fcntl), SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(lseek),
		SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres), SCMP_SYS(gettimeofday),
		SCMP_SYS(time), SCMP_SYS(nanosleep), SCMP_SYS(clock_nanosleep), SCMP_SYS(pause),
		SCMP_SYS(getrandom), SCMP_SYS(brk), SCMP_SYS(munmap), SCMP_SYS(mremap),
		SCMP_SYS(madvise), SCMP_SYS(futex), SCMP_SYS(set_robust_list),
		SCMP_SYS(get_robust_list), SCMP_SYS(rseq), SCMP_SYS(sched_yield),
		SCMP_SYS(sched_getaffinity), SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask),
		SCMP_SYS(rt_sigaction), SCMP_SYS(sigaltstack), SCMP_SYS(restart_syscall),
		SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(exit), SCMP_SYS(exit_group),
		SCMP_SYS(prlimit64), SCMP_SYS(getrusage),
	};
	static const int kill[] = {
		SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv),
		SCMP_SYS(process_vm_writev), SCMP_SYS(bpf), SCMP_SYS(init_module),
		SCMP_SYS(finit_module), SCMP_SYS(kexec_load), SCMP_SYS(mount), SCMP_SYS(unshare),
		SCMP_SYS(setns), SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key),
		SCMP_SYS(userfaultfd), SCMP_SYS(perf_event_open), SCMP_SYS(open_by_handle_at),
		SCMP_SYS(setuid), SCMP_SYS(setgid), SCMP_SYS(setresuid), SCMP_SYS(setresgid),
		SCMP_SYS(kill), SCMP_SYS(socket), SCMP_SYS(connect), SCMP_SYS(fork),
		SCMP_SYS(vfork),
	};
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	int rc = 0;

	if (!ctx)
		return -ENOMEM;
	for (size_t i = 0; i < ARRAY_SIZE(allow) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allow[i], 0);
	for (size_t i = 0; i < ARRAY_SIZE(kill) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, kill[i], 0);
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
				      SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
				      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid()));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
				      SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME));
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

int mjail_enter(const struct mjail *j, struct k8_err *err)
{
	int r;

	if (j->jail) {
		struct jail_opts o = { .uid = j->uid, .gid = j->gid, .landlock = true };
		struct jail_report rep;

		if ((r = jail_enter(&o, &rep, err)) < 0)
			return r;
	} else if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		return k8_err_set(err, -errno, "no_new_privs: %s", strerror(errno));
	}
	if ((r = mjail_seccomp()) < 0)
		return k8_err_set(err, r, "seccomp: %s", strerror(-r));
	return 0;
}
