/* SPDX-License-Identifier: Apache-2.0 */
/* test_qemu_ram.c - kosa8-qemu-ram.so (src/preload/qemu_ram.c), preloaded into a child as
 * into QEMU: an O_RDWR open of /proc/self/fd/N gives back the read-only N, which maps
 * private and writable; a hole punched through it is a no-op that leaves the file whole;
 * every other open and fallocate is the kernel's. The child runs as another uid, as QEMU
 * does in its jail, on a file that uid may not open (root's, 0600). */
#define _FILE_OFFSET_BITS 64
#include "t.h"
#include "common/util.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG 4096
#define NOBODY 65534

static int child(const char *path)
{
	struct stat a, b;
	char buf[PG], proc[64];
	volatile int flags = O_RDWR;    /* not a constant: the fortified open, as in QEMU */
	int ro = open(path, O_RDONLY), fd, other;
	char *m;

	CHECK(ro >= 0);
	if (getuid() == 0 && (setgid(NOBODY) < 0 || setuid(NOBODY) < 0))
		return 2;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", ro);
	fd = open(proc, flags);
	CHECK(fd >= 0 && fd != ro);
	CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
	CHECK(fstat(ro, &a) == 0 && fstat(fd, &b) == 0 && a.st_ino == b.st_ino);
	CHECK(open64(proc, O_RDWR) >= 0);
	/* as QEMU maps a memory backend with share=off */
	m = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(m != MAP_FAILED);
	if (m != MAP_FAILED) {
		CHECK(m[PG] == 'a');
		m[PG] = 'z';            /* its own copy */
		/* a discard: the punch does nothing, then the private copy goes */
		CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, PG, PG) == 0);
		CHECK(madvise(m + PG, PG, MADV_DONTNEED) == 0);
		CHECK(m[PG] == 'a');    /* the file's page again, not zeros */
	}
	CHECK(pread(ro, buf, PG, PG) == PG && buf[0] == 'a' && buf[PG - 1] == 'a');
	CHECK(write(fd, "x", 1) < 0);   /* read-only: the kernel says no */
	/* any other mode, any other descriptor: the kernel's own answer */
	CHECK(fallocate(fd, 0, 0, PG) < 0);
	CHECK(fallocate(ro, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, PG) < 0);
	/* a descriptor open for writing is not redirected */
	other = open("/dev/null", O_WRONLY);
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", other);
	fd = open(proc, flags);
	CHECK(fd >= 0 && fd != other);
	CHECK(open("/proc/self/fd/x", flags) < 0 && open("/nonexistent", flags) < 0);
	return T_DONE();
}

int main(int argc, char **argv)
{
	char exe[4096], lib[4200], path[256];
	const char *tmp = getenv("TMPDIR");
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char page[PG];
	int fd, status;
	pid_t pid;

	if (argc == 3 && !strcmp(argv[1], "child"))
		return child(argv[2]);
	if (n <= 0)
		return 1;
	exe[n] = '\0';
	snprintf(lib, sizeof(lib), "%s", exe);
	*strrchr(lib, '/') = '\0';
	*strrchr(lib, '/') = '\0';
	strcat(lib, "/bin/kosa8-qemu-ram.so");
	snprintf(path, sizeof(path), "%s/k8-qemu-ram-%d", tmp ? tmp : "/tmp", (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	memset(page, 'a', sizeof(page));
	for (int i = 0; i < 4; i++)
		CHECK(pwrite(fd, page, PG, (off_t)i * PG) == PG);
	close(fd);
	pid = fork();
	if (pid == 0) {
		char env[4300];
		snprintf(env, sizeof(env), "LD_PRELOAD=%s", lib);
		char *const av[] = { argv[0], (char *)"child", path, NULL };
		/* An ASan build's child has the library ahead of ASan's runtime: allowed, the
		 * library only wraps libc (make san runs this too). */
		char *const ev[] = { env, (char *)"ASAN_OPTIONS=verify_asan_link_order=0", NULL };
		execve(exe, av, ev);
		_exit(127);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* the file is whole after all that */
	fd = open(path, O_RDONLY);
	for (int i = 0; i < 4; i++)
		CHECK(pread(fd, page, PG, (off_t)i * PG) == PG && page[0] == 'a' && page[PG - 1] == 'a');
	close(fd);
	unlink(path);
	return T_DONE();
}
