/* SPDX-License-Identifier: Apache-2.0 */
/* test_worker.c - the jailed child that parses hostile bytes (src/common/worker.c): its
 * report comes back (value, error, escaped message); a worker that crashes, execs or is
 * killed is an error of its own and the caller goes on; inside, it holds only the
 * descriptors it was given, no capability beyond its mask, no file outside its folders;
 * and as root of a user namespace it cannot chmod the host's root's files, which as the
 * host's root with no capability it can (Landlock does not cover chmod). */
#include "common/worker.h"
#include "t.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/k8-worker-XXXXXX";

static int fn_value(void *ctx, uint64_t *value, struct k8_err *err)
{
	*value = 42;
	return 0;
}

static int fn_fail(void *ctx, uint64_t *value, struct k8_err *err)
{
	return k8_err_set(err, -EPERM, "refused \x1b[2J here");
}

static int fn_crash(void *ctx, uint64_t *value, struct k8_err *err)
{
	raise(SIGSEGV);
	return 0;
}

static int fn_exec(void *ctx, uint64_t *value, struct k8_err *err)
{
	execl("/bin/true", "true", (char *)NULL);
	return k8_err_set(err, -errno, "exec: %s", strerror(errno));
}

/* What the jail left: one bit a fact, in *value. */
static int fn_probe(void *ctx, uint64_t *value, struct k8_err *err)
{
	int kept = *(int *)ctx;
	struct stat s;
	char p[300];
	int fd;

	*value = 0;
	if (fcntl(kept, F_GETFD) >= 0)
		*value |= 1;                            /* the descriptor it was given */
	if (fcntl(kept + 1, F_GETFD) < 0)
		*value |= 2;                            /* not the next one */
	snprintf(p, sizeof(p), "%s/in/f", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		*value |= 4;                            /* a file in its folder */
		close(fd);
	}
	snprintf(p, sizeof(p), "%s/out", dir);
	if (open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644) < 0 && errno == EACCES)
		*value |= 8;                            /* not beside it (Landlock) */
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
		*value |= 16;
	if (prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0 &&
	    prctl(PR_CAPBSET_READ, CAP_CHOWN, 0, 0, 0) == 1)
		*value |= 32;                           /* the mask, bounding set too */
	if (fstat(0, &s) == 0 && S_ISCHR(s.st_mode))
		*value |= 64;                           /* stdin is /dev/null */
	return 0;
}

/* chmod a root-owned file outside the worker's folder: 0, or the errno it got. */
static int fn_chmod(void *ctx, uint64_t *value, struct k8_err *err)
{
	*value = chmod((const char *)ctx, 04777) < 0 ? (uint64_t)errno : 0;
	return 0;
}

static struct worker base(int (*fn)(void *, uint64_t *, struct k8_err *), void *ctx)
{
	struct worker w = { .name = "k8-test-worker", .userns = -1, .fn = fn, .ctx = ctx };
	return w;
}

int main(void)
{
	struct k8_err err = { 0 };
	uint64_t v = 0;
	char p[300];
	int keep[2];

	if (!mkdtemp(dir))
		return 1;
	snprintf(p, sizeof(p), "%s/in", dir);
	mkdir(p, 0755);

	struct worker w = base(fn_value, NULL);
	CHECK_EQ_INT(worker_run(&w, "the test", &v, &err), 0);
	CHECK_EQ_INT(v, 42);

	w = base(fn_fail, NULL);
	CHECK_EQ_INT(worker_run(&w, "the test", &v, &err), -EPERM);
	CHECK_STR(err.msg, "refused \\x1b[2J here");

	memset(&err, 0, sizeof(err));
	w = base(fn_crash, NULL);
	CHECK_EQ_INT(worker_run(&w, "the test", &v, &err), -EIO);
	CHECK_STR(err.msg, "the test was stopped by signal 11");

	memset(&err, 0, sizeof(err));
	w = base(fn_exec, NULL);
	CHECK_EQ_INT(worker_run(&w, "the test", &v, &err), -EIO);
	CHECK(strstr(err.msg, "signal 31 (it tried a system call its jail forbids)") != NULL);

	/* inside */
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(pipe(keep), 0);
	if (keep[1] != keep[0] + 1)
		fprintf(stderr, "the probe expects the pipe's ends side by side\n");
	w = base(fn_probe, &keep[0]);
	w.keep[0] = keep[0];
	w.nkeep = 1;
	w.caps = 1ull << CAP_CHOWN;
	w.dirs[0].fd = open(p, O_PATH | O_DIRECTORY);
	w.ndirs = 1;
	v = 0;
	CHECK_EQ_INT(worker_run(&w, "the probe", &v, &err), 0);
	CHECK_EQ_INT(v & 15, 15);
	CHECK(v & 16);
	if (geteuid() == 0)
		CHECK(v & 32);
	CHECK(v & 64);
	close(keep[0]);
	close(keep[1]);
	close(w.dirs[0].fd);

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
		w = base(fn_chmod, victim);
		w.dirs[0].fd = open(p, O_PATH | O_DIRECTORY);
		w.ndirs = 1;
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
		close(w.userns);
		close(w.dirs[0].fd);
	}
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)!system(cmd);
	}
	return T_DONE();
}
