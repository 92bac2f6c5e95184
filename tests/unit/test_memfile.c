/* SPDX-License-Identifier: Apache-2.0 */
/* test_memfile.c - a VM's RAM written as a file (daemon/memfile.c), out of a real second
 * process: one whose memory is anonymous (a VM that booted), and one that maps a base
 * file private and wrote some of it (a restored VM). The file must read back as that
 * process sees its memory, with holes where it has only zeros. */
#include "daemon/memfile.h"
#include "t.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG 4096
#define SIZE (12u << 20)                /* three windows of memfile.c */

static char base[256];

/* A byte pattern for page `i` of version `v`: never all zero. */
static void fill(uint8_t *p, size_t i, int v)
{
	for (size_t k = 0; k < PG; k++)
		p[k] = (uint8_t)(i * 7 + k + v * 13) | 1;
}

/* A child that maps `fd` (private) or anonymous memory, changes it as `change` says, and
 * waits; its address comes back through a pipe. */
struct kid {
	pid_t pid;
	uintptr_t addr;
	int go;                         /* write a byte: the child exits */
};

static void kid_start_n(struct kid *k, int fd, size_t size, void (*change)(uint8_t *))
{
	int up[2], down[2];

	if (pipe(up) || pipe(down))
		abort();
	k->pid = fork();
	if (k->pid == 0) {
		uint8_t *m = fd >= 0 ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0)
				     : mmap(NULL, size, PROT_READ | PROT_WRITE,
					    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		uintptr_t a = (uintptr_t)m;
		char c;
		if (m == MAP_FAILED)
			_exit(1);
		change(m);
		if (write(up[1], &a, sizeof(a)) != sizeof(a))
			_exit(1);
		if (read(down[0], &c, 1) < 0)
			_exit(1);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	if (read(up[0], &k->addr, sizeof(k->addr)) != sizeof(k->addr))
		abort();
	close(up[0]);
	k->go = down[1];
}

static void kid_start(struct kid *k, int fd, void (*change)(uint8_t *))
{
	kid_start_n(k, fd, SIZE, change);
}

static void kid_end(struct kid *k)
{
	if (write(k->go, "x", 1) < 0)
		kill(k->pid, SIGKILL);
	close(k->go);
	waitpid(k->pid, NULL, 0);
}

static bool is_hole(int fd, off_t off)
{
	off_t d = lseek(fd, off, SEEK_DATA);
	return d < 0 || d >= off + PG;
}

/* A booted VM: anonymous memory, some pages written, some only read (the zero page). */
static void anon_change(uint8_t *m)
{
	volatile uint8_t sink = 0;

	fill(m + 0 * PG, 0, 1);
	fill(m + 1 * PG, 1, 1);
	sink += m[5 * PG];               /* read: present as the zero page, all zero */
	fill(m + 1030 * PG, 1030, 1);    /* the second window */
	fill(m + (SIZE / PG - 1) * PG, SIZE / PG - 1, 1);  /* the last page */
	m[2000 * PG + 17] = 0;           /* written, all zero: must stay a hole */
	(void)sink;
}

static void test_anonymous(void)
{
	cleanup_free char *out = xasprintf("%s/anon", base);
	struct kid k;
	struct memfile_stats st;
	struct k8_err err = { 0 };
	uint8_t want[PG], got[PG];
	int fd;

	kid_start(&k, -1, anon_change);
	fd = memfile_create(out, SIZE, &err);
	CHECK(fd >= 0);
	struct memfile_src src = { .pid = k.pid, .hva = k.addr, .size = SIZE, .base_fd = -1 };
	CHECK_EQ_INT(memfile_write(&src, fd, &st, &err), 0);
	kid_end(&k);
	close(fd);
	CHECK_EQ_INT(st.written, 4 * PG);
	fd = open(out, O_RDONLY);
	const size_t pages[] = { 0, 1, 1030, SIZE / PG - 1 };
	for (size_t i = 0; i < ARRAY_SIZE(pages); i++) {
		fill(want, pages[i], 1);
		CHECK(pread(fd, got, PG, (off_t)pages[i] * PG) == PG && !memcmp(got, want, PG));
	}
	CHECK(is_hole(fd, 5 * PG));
	CHECK(is_hole(fd, 2000 * PG));
	CHECK(is_hole(fd, 3000 * PG));
	close(fd);
}

/* A restored VM: the base has data in some pages, holes elsewhere; the process wrote
 * over a base page, into a hole, zeroed a base page, and left the rest alone. */
static void base_change(uint8_t *m)
{
	fill(m + 3 * PG, 3, 2);           /* over base data */
	fill(m + 2500 * PG, 2500, 2);     /* into a hole of the base */
	memset(m + 4 * PG, 0, PG);        /* a base page zeroed: a hole now */
}

static void test_private_over_base(void)
{
	cleanup_free char *bp = xasprintf("%s/base", base);
	cleanup_free char *out = xasprintf("%s/over", base);
	struct kid k;
	struct memfile_stats st;
	struct k8_err err = { 0 };
	uint8_t want[PG], got[PG];
	int bfd, fd;

	bfd = open(bp, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(bfd >= 0 && ftruncate(bfd, SIZE) == 0);
	for (size_t i = 2; i < 8; i++) {   /* pages 2..7 have data */
		fill(want, i, 0);
		CHECK(pwrite(bfd, want, PG, (off_t)i * PG) == PG);
	}
	fill(want, 2900, 0);              /* and one in the last window */
	CHECK(pwrite(bfd, want, PG, (off_t)2900 * PG) == PG);
	close(bfd);
	bfd = memfile_open(bp, SIZE, &err);
	CHECK(bfd >= 0);
	CHECK_EQ_INT(memfile_open(bp, SIZE + PG, &err), -EINVAL);  /* the wrong size */
	/* another's to write, or another's: refused; then the daemon's alone again */
	CHECK(chmod(bp, 0620) == 0);
	CHECK_EQ_INT(memfile_open(bp, SIZE, &err), -EPERM);
	CHECK(chmod(bp, 0604) == 0);
	CHECK_EQ_INT(memfile_open(bp, SIZE, &err), -EPERM);
	if (geteuid() == 0) {
		CHECK(chmod(bp, 0600) == 0 && chown(bp, 65534, 65534) == 0);
		CHECK_EQ_INT(memfile_open(bp, SIZE, &err), -EPERM);
		CHECK(chown(bp, 0, 0) == 0);
	}
	CHECK(chmod(bp, 0600) == 0);
	/* a symlink to it, a directory: not followed, not a file */
	cleanup_free char *lp = xasprintf("%s/link", base);
	CHECK(symlink(bp, lp) == 0);
	CHECK_EQ_INT(memfile_open(lp, SIZE, &err), -ELOOP);
	CHECK_EQ_INT(memfile_open(base, SIZE, &err), -EINVAL);
	unlink(lp);
	kid_start(&k, bfd, base_change);
	fd = memfile_create(out, SIZE, &err);
	CHECK(fd >= 0);
	CHECK_EQ_INT(memfile_create(out, SIZE, &err), -EEXIST);
	struct memfile_src src = { .pid = k.pid, .hva = k.addr, .size = SIZE, .base_fd = bfd };
	CHECK_EQ_INT(memfile_write(&src, fd, &st, &err), 0);
	kid_end(&k);
	close(fd);
	/* base pages 2,3(changed),5,6,7, 2500 and 2900 written; page 4 was zeroed */
	CHECK_EQ_INT(st.written, 7 * PG);
	CHECK_EQ_INT(st.from_vm, 3 * PG);  /* the three pages it copied on write */
	fd = open(out, O_RDONLY);
	for (size_t i = 2; i < 8; i++) {
		if (i == 4)
			continue;
		fill(want, i, i == 3 ? 2 : 0);
		CHECK(pread(fd, got, PG, (off_t)i * PG) == PG && !memcmp(got, want, PG));
	}
	fill(want, 2500, 2);
	CHECK(pread(fd, got, PG, (off_t)2500 * PG) == PG && !memcmp(got, want, PG));
	fill(want, 2900, 0);
	CHECK(pread(fd, got, PG, (off_t)2900 * PG) == PG && !memcmp(got, want, PG));
	CHECK(is_hole(fd, 4 * PG));
	CHECK(is_hole(fd, 0));
	CHECK(is_hole(fd, 1500 * PG));
	close(fd);
	/* the base itself is as it was: the process's writes were its own */
	fill(want, 3, 0);
	CHECK(pread(bfd, got, PG, 3 * PG) == PG && !memcmp(got, want, PG));
	close(bfd);
}

static void no_change(uint8_t *m);

/* Reads two pages of its base, as a restored guest reads some: they are cached, with
 * the kernel's read-around. */
static void peek(uint8_t *m)
{
	volatile uint8_t sink = 0;

	sink += m[0] + m[1500 * PG];
	(void)sink;
}

#define CSIZE (96u << 20)                /* larger than the kernel's read-around */
#define CDATA (64u << 20)

/* Pages of `fd` in the page cache (mincore on a mapping that faults nothing). */
static size_t cached_pages(int fd)
{
	unsigned char *vec = xcalloc(CSIZE / PG, 1);
	void *m = mmap(NULL, CSIZE, PROT_READ, MAP_SHARED, fd, 0);
	size_t n = 0;

	if (m != MAP_FAILED && mincore(m, CSIZE, vec) == 0)
		for (size_t i = 0; i < CSIZE / PG; i++)
			n += vec[i] & 1;
	if (m != MAP_FAILED)
		munmap(m, CSIZE);
	free(vec);
	return n;
}

/* A base the page cache holds only a little of (what the restored guest read) is read
 * from the disk for the rest, not pulled into the cache: on a host that is itself a VM,
 * fresh page cache costs more than the copy. */
static void test_cold_base_stays_out_of_the_cache(void)
{
	cleanup_free char *bp = xasprintf("%s/cold", base);
	cleanup_free char *out = xasprintf("%s/cold-out", base);
	static uint8_t page[PG];
	struct memfile_stats st;
	struct k8_err err = { 0 };
	size_t before, after;
	bool wrote = true;
	struct kid k;
	int bfd, fd;

	bfd = open(bp, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(bfd >= 0 && ftruncate(bfd, CSIZE) == 0);
	for (size_t i = 0; i < CDATA / PG; i++) {
		fill(page, i, 3);
		wrote = wrote && pwrite(bfd, page, PG, (off_t)i * PG) == PG;
	}
	CHECK(wrote);
	CHECK(fdatasync(bfd) == 0);
	CHECK(posix_fadvise(bfd, 0, CSIZE, POSIX_FADV_DONTNEED) == 0);
	close(bfd);
	bfd = memfile_open(bp, CSIZE, &err);
	kid_start_n(&k, bfd, CSIZE, peek);
	usleep(300000);                 /* the readahead its reads started has landed */
	before = cached_pages(bfd);
	fd = memfile_create(out, CSIZE, &err);
	struct memfile_src src = { .pid = k.pid, .hva = k.addr, .size = CSIZE, .base_fd = bfd };
	CHECK_EQ_INT(memfile_write(&src, fd, &st, &err), 0);
	kid_end(&k);
	after = cached_pages(bfd);
	CHECK_EQ_INT(st.written, CDATA);
	/* (a file system without O_DIRECT reads through the cache: tmpfs is the cache) */
	int direct = open(bp, O_RDONLY | O_DIRECT);
	if (direct >= 0) {
		close(direct);
		CHECK(before < CDATA / PG / 2);
		CHECK(st.from_disk >= CDATA / 2);
		CHECK(after <= before + 256);
	}
	fill(page, 1000, 3);
	{
		uint8_t got[PG];
		int rfd = open(out, O_RDONLY);
		CHECK(pread(rfd, got, PG, 1000 * PG) == PG && !memcmp(got, page, PG));
		close(rfd);
	}
	close(fd);
	close(bfd);
}

static void no_change(uint8_t *m)
{
	(void)m;
}

static void test_refusals(void)
{
	cleanup_free char *out = xasprintf("%s/bad", base);
	struct kid k;
	struct k8_err err = { 0 };
	int fd = memfile_create(out, SIZE, &err);

	kid_start(&k, -1, no_change);
	/* not page-aligned */
	struct memfile_src src = { .pid = k.pid, .hva = k.addr + 1, .size = SIZE, .base_fd = -1 };
	CHECK_EQ_INT(memfile_write(&src, fd, NULL, &err), -EINVAL);
	kid_end(&k);
	/* a process that is gone: no page map to read */
	src.hva = k.addr;
	CHECK(memfile_write(&src, fd, NULL, &err) < 0);
	close(fd);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/k8-memfile-%d", tmp ? tmp : "/tmp", (int)getpid());
	rm_rf(base);
	mkdir_p(base, 0700);
	test_anonymous();
	test_private_over_base();
	test_cold_base_stays_out_of_the_cache();
	test_refusals();
	if (!t_fail)
		rm_rf(base);
	return T_DONE();
}
