/* SPDX-License-Identifier: Apache-2.0 */
/* jailcost.c - the jail's own cost, without a VM's noise: (1) fork + jail + exec of
 * /bin/true against fork + exec (namespaces, mounts, pivot_root, identity, seccomp);
 * (2) one system call with and without the jail's seccomp filter. Root only. */
#include "daemon/jail.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SPAWNS 200
#define CALLS 2000000

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double spawn_ms(const struct jail_spec *j)
{
	double t0 = now_ms();

	for (int i = 0; i < SPAWNS; i++) {
		int st;
		pid_t p = fork();
		if (p == 0) {
			const char *fail = jail_qemu_enter(j);
			if (fail) {
				perror(fail);
				_exit(1);
			}
			execl("/usr/bin/true", "true", (char *)NULL);
			_exit(2);
		}
		if (p < 0 || waitpid(p, &st, 0) < 0 || st) {
			fprintf(stderr, "jailcost: a spawn failed (root? status %d)\n", st);
			exit(1);
		}
	}
	return (now_ms() - t0) / SPAWNS;
}

static double call_ns(void)
{
	double t0 = now_ms();

	for (int i = 0; i < CALLS; i++)
		syscall(SYS_getppid);
	return (now_ms() - t0) * 1e6 / CALLS;
}

int main(void)
{
	struct jail_spec plain = { 0 }, jailed = { .uid = 720003 };  /* a spare uid */
	struct k8_err err = { 0 };

	if (jail_prepare(&jailed, &err)) {
		fprintf(stderr, "jailcost: %s\n", err.msg);
		return 1;
	}
	double p = spawn_ms(&plain), j = spawn_ms(&jailed);
	printf("spawn (fork, exec /bin/true): plain %.2f ms, jailed %.2f ms: the jail adds %.2f ms\n",
	       p, j, j - p);
	double c0 = call_ns();
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || jail_seccomp() < 0) {
		perror("seccomp");
		return 1;
	}
	double c1 = call_ns();
	printf("a system call: %.0f ns, under the jail's filter %.0f ns: +%.0f ns\n", c0, c1,
	       c1 - c0);
	return 0;
}
