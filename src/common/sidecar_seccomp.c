/* SPDX-License-Identifier: Apache-2.0 */
/* sidecar_seccomp.c - the sidecars' seccomp filter base and helpers (sidecar.h). Apart
 * from sidecar.c so that only the programs that filter link libseccomp. */
#include <sys/mman.h>
#include <unistd.h>

#include "common/sidecar.h"

scmp_filter_ctx sc_seccomp_new(void)
{
	static const int allow[] = {
		SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
		SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
		SCMP_SYS(ppoll), SCMP_SYS(poll), SCMP_SYS(close), SCMP_SYS(fcntl), SCMP_SYS(lseek),
		SCMP_SYS(fstat), SCMP_SYS(accept4), SCMP_SYS(setsockopt), SCMP_SYS(getsockopt),
		SCMP_SYS(shutdown), SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday),
		SCMP_SYS(time), SCMP_SYS(getrandom), SCMP_SYS(brk), SCMP_SYS(munmap),
		SCMP_SYS(mremap), SCMP_SYS(madvise), SCMP_SYS(rt_sigreturn),
		SCMP_SYS(rt_sigprocmask), SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(futex),
		SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(tgkill), SCMP_SYS(restart_syscall),
	};
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	int rc;

	if (!ctx)
		return NULL;
	rc = sc_seccomp_add(ctx, SCMP_ACT_ALLOW, allow, ARRAY_SIZE(allow));
	if (rc == 0)
		rc = sc_seccomp_kill_escapes(ctx);
	/* Memory, never executable. */
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc < 0) {
		seccomp_release(ctx);
		return NULL;
	}
	return ctx;
}

int sc_seccomp_kill_escapes(scmp_filter_ctx ctx)
{
	static const int kill[] = {
		SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv),
		SCMP_SYS(process_vm_writev), SCMP_SYS(bpf), SCMP_SYS(init_module),
		SCMP_SYS(finit_module), SCMP_SYS(kexec_load), SCMP_SYS(mount), SCMP_SYS(umount2),
		SCMP_SYS(pivot_root), SCMP_SYS(chroot), SCMP_SYS(unshare), SCMP_SYS(setns),
		SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key), SCMP_SYS(userfaultfd),
		SCMP_SYS(perf_event_open), SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at),
		SCMP_SYS(setuid), SCMP_SYS(setgid), SCMP_SYS(setresuid), SCMP_SYS(setresgid),
	};

	return sc_seccomp_add(ctx, SCMP_ACT_KILL_PROCESS, kill, ARRAY_SIZE(kill));
}

int sc_seccomp_signal_self(scmp_filter_ctx ctx)
{
	static const int to_pid[] = { SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo),
				      SCMP_SYS(rt_tgsigqueueinfo) };
	static const int never[] = { SCMP_SYS(tkill), SCMP_SYS(pidfd_open),
				     SCMP_SYS(pidfd_send_signal), SCMP_SYS(pidfd_getfd) };
	scmp_datum_t self = (scmp_datum_t)getpid();
	int rc = sc_seccomp_add(ctx, SCMP_ACT_ERRNO(EPERM), never, ARRAY_SIZE(never));

	/* the pid argument is an int: compared on its low 32 bits, however it was extended */
	for (size_t i = 0; i < ARRAY_SIZE(to_pid) && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), to_pid[i], 1,
				      SCMP_A0_32(SCMP_CMP_NE, self));
	return rc;
}

int sc_seccomp_add(scmp_filter_ctx ctx, uint32_t action, const int *nrs, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++)
		rc = seccomp_rule_add(ctx, action, nrs[i], 0);
	return rc;
}

int sc_seccomp_socket(scmp_filter_ctx ctx, const int *families, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i]));
	return rc;
}

int sc_seccomp_load(scmp_filter_ctx ctx)
{
	int rc = seccomp_load(ctx);

	seccomp_release(ctx);
	return rc;
}
