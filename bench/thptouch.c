/* SPDX-License-Identifier: Apache-2.0 */
/* thptouch.c - why a fork loaded its state slowly (docs/design.md "Fork"): the time to
 * write one byte in each 4 KiB page of N MiB of new anonymous memory, with huge pages
 * asked for (as QEMU asks for guest RAM) or not. Run it twice at once and again after
 * 15 s idle: on a host that reports free memory to its own hypervisor, fresh huge pages
 * are the slow case. Usage: thptouch MIB 0|1 (1: madvise(MADV_HUGEPAGE)). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? (size_t)atoi(argv[1]) << 20 : (size_t)512 << 20;
	int huge = argc > 2 && atoi(argv[2]);
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double t0;

	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	if (huge && madvise(p, n, MADV_HUGEPAGE) < 0)
		perror("madvise");
	t0 = now_ms();
	for (size_t i = 0; i < n; i += 4096)
		p[i] = 1;
	printf("%zu MiB, huge pages %s: written in %.0f ms\n", n >> 20, huge ? "asked" : "not asked",
	       now_ms() - t0);
	return 0;
}
