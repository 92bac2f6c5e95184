/* SPDX-License-Identifier: Apache-2.0 */
/* test_qcow2.c - image/qcow2.c: the empty overlay kosa8d writes is the file qemu-img
 * writes, byte for byte, and qemu-img reads it back as a sound qcow2 over its backing. */
#include "image/qcow2.h"
#include "common/util.h"
#include "t.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char base[256];

/* Run argv with stdout to `out` (NULL: /dev/null); its exit status, or -1. */
static int run(const char *const argv[], const char *out)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		int fd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0)
			dup2(fd, 1);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static char *slurp(const char *p, size_t *n)
{
	char *t = NULL;
	return read_file(p, 1 << 24, &t, n) ? NULL : t;
}

/* Ours and qemu-img's for one size and backing name: the same bytes; qemu-img check
 * finds nothing wrong and info names the backing file and its format. */
static void same_as_qemu_img(const char *size_arg, uint64_t size, const char *backing)
{
	cleanup_free char *ours = xasprintf("%s/ours.qcow2", base);
	cleanup_free char *theirs = xasprintf("%s/theirs.qcow2", base);
	cleanup_free char *info = xasprintf("%s/info.json", base);
	cleanup_free char *a = NULL, *b = NULL, *i = NULL;
	const char *create[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-u",
				 "-b", backing, theirs, size_arg, NULL };
	const char *check[] = { "qemu-img", "check", "-q", ours, NULL };
	const char *inf[] = { "qemu-img", "info", "--output=json", ours, NULL };
	size_t na = 0, nb = 0;
	struct stat st;

	CHECK_EQ_INT(qcow2_overlay(ours, backing, size), 0);
	CHECK_EQ_INT(run(create, NULL), 0);
	a = slurp(ours, &na);
	b = slurp(theirs, &nb);
	CHECK(a && b);
	CHECK_EQ_INT(na, nb);
	CHECK(a && b && na == nb && !memcmp(a, b, na));
	CHECK(stat(ours, &st) == 0 && (st.st_mode & 07777) == 0600);
	if (access(backing, F_OK) < 0)  /* a name only: qemu-img opens the chain below */
		return;
	CHECK_EQ_INT(run(check, NULL), 0);
	CHECK_EQ_INT(run(inf, info), 0);
	i = slurp(info, NULL);
	CHECK(i && strstr(i, "\"backing-filename-format\": \"qcow2\""));
	CHECK(i && strstr(i, backing));
	CHECK(i && strstr(i, "\"cluster-size\": 65536"));
}

static void test_bytes(void)
{
	cleanup_free char *bk = xasprintf("%s/layer-17e5a1c2b3d4f5a6.qcow2", base);
	const char *mk[] = { "qemu-img", "create", "-q", "-f", "qcow2", bk, "2G", NULL };

	CHECK_EQ_INT(run(mk, NULL), 0);
	same_as_qemu_img("2G", 2ull << 30, bk);
	same_as_qemu_img("1G", 1ull << 30, "/b");
	same_as_qemu_img("10G", 10ull << 30, bk);     /* an L1 table of 20 entries */
	same_as_qemu_img("1000M", 1000ull << 20, bk);  /* not a whole L2's reach */
	same_as_qemu_img("1024G", 1024ull << 30, bk);  /* kosa8's largest disk */
}

static void test_refused(void)
{
	cleanup_free char *p = xasprintf("%s/bad.qcow2", base);
	cleanup_free char *link = xasprintf("%s/link.qcow2", base);
	cleanup_free char *victim = xasprintf("%s/victim", base);
	char longname[1100];
	struct stat st;

	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	CHECK_EQ_INT(qcow2_overlay(p, "", 1 << 30), -EINVAL);
	CHECK_EQ_INT(qcow2_overlay(p, NULL, 1 << 30), -EINVAL);
	CHECK_EQ_INT(qcow2_overlay(p, longname, 1 << 30), -EINVAL);
	CHECK_EQ_INT(qcow2_overlay(p, "/b", 0), -EINVAL);
	CHECK_EQ_INT(qcow2_overlay(p, "/b", 1000), -EINVAL);
	CHECK_EQ_INT(qcow2_overlay(p, "/b", QCOW2_OVERLAY_MAX + 512), -EINVAL);
	CHECK(access(p, F_OK) < 0);
	/* a link where the layer goes is not followed: what it names stays as it was */
	write_file_atomic(victim, "keep", 4, 0600);
	CHECK(symlink(victim, link) == 0);
	CHECK_EQ_INT(qcow2_overlay(link, "/b", 1 << 30), -ELOOP);
	CHECK(stat(victim, &st) == 0 && st.st_size == 4);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/k8-qcow2-%d", tmp ? tmp : "/tmp", (int)getpid());
	rm_rf(base);
	mkdir_p(base, 0700);
	test_bytes();
	test_refused();
	if (!t_fail)
		rm_rf(base);
	return T_DONE();
}
