/* SPDX-License-Identifier: Apache-2.0 */
/* unpackjail.c - what unpacking an image's layers in a jailed worker costs
 * (src/image/unpack_jail.c) against unpacking them in the calling process, as kosa8d
 * did before: the python test image's layers, side by side, alternating, ROUNDS rounds
 * each; then a whole disk build (unpack + mkfs.erofs) for scale. Wall time and CPU time
 * (user + system, the worker's included): on a shared machine the CPU time is the
 * steadier of the two. Last, the fixed cost of one worker (an empty layer). Root only.
 *
 *   unpackjail OCI-LAYOUT          (bench/run.sh passes scripts/test-image.sh's) */
#include "image/image_int.h"
#include "common/worker.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 7

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* CPU milliseconds of this process and its reaped children. */
static double cpu_ms(void)
{
	struct rusage a, b;

	getrusage(RUSAGE_SELF, &a);
	getrusage(RUSAGE_CHILDREN, &b);
	return (a.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_utime.tv_sec + b.ru_stime.tv_sec) *
	       1e3 + (a.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_utime.tv_usec +
		      b.ru_stime.tv_usec) / 1e3;
}

/* Every layer of `m` into a fresh tree under the store's tmp/, in this process or in
 * the jail; wall milliseconds (and CPU ones in *cpu), or -1. */
static double unpack_all(struct image_store *st, json_t *m, bool jailed, double *cpu)
{
	char work[64];
	size_t i;
	json_t *l;
	uint64_t used = 0;
	struct k8_err err = { 0 };
	int rootfd, r = 0;
	double t0;

	store_tmp_name(st, "bench", work, sizeof(work));
	if (mkdirat(st->tmpfd, work, 0755) < 0 ||
	    (rootfd = openat(st->tmpfd, work, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -1;
	*cpu = cpu_ms();
	t0 = now_ms();
	json_array_foreach(json_object_get(m, "layers"), i, l) {
		const char *dg = json_string_value(json_object_get(l, "digest"));
		int fd = openat(st->blobfd, dg + 7, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		r = jailed ? image_unpack_jailed(st, rootfd, fd, dg + 7, true, IMAGE_UNPACK_MAX,
						 &used, &err)
			   : unpack_layer_fd(rootfd, fd, dg + 7, UNPACK_OWNERS | UNPACK_MODES,
					     IMAGE_UNPACK_MAX, &used, &err);
		close(fd);
		if (r)
			break;
	}
	t0 = now_ms() - t0;
	*cpu = cpu_ms() - *cpu;
	close(rootfd);
	unpack_remove_at(st->tmpfd, work, 0);
	if (r)
		fprintf(stderr, "unpack: %s\n", err.msg);
	return r ? -1 : t0;
}

/* The fixed cost: an empty layer (two zero blocks) unpacked `n` times; ms per unpack. */
static double empty_ms(struct image_store *st, bool jailed, int n)
{
	static const char zeros[1024];
	struct k8_err err = { 0 };
	uint64_t used = 0;
	int fd = openat(st->tmpfd, "empty.tar", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int rootfd = openat(st->tmpfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
	double t0;

	if (fd < 0 || rootfd < 0 || write(fd, zeros, sizeof(zeros)) != sizeof(zeros))
		return -1;
	t0 = now_ms();
	for (int i = 0; i < n && !r; i++) {
		lseek(fd, 0, SEEK_SET);
		r = jailed ? image_unpack_jailed(st, rootfd, fd, "empty", true, 1 << 20, &used, &err)
			   : unpack_layer_fd(rootfd, fd, "empty", UNPACK_OWNERS | UNPACK_MODES,
					     1 << 20, &used, &err);
	}
	t0 = (now_ms() - t0) / n;
	close(fd);
	close(rootfd);
	unlinkat(st->tmpfd, "empty.tar", 0);
	return r ? -1 : t0;
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/k8-unpackjail-XXXXXX", store[64], md[80];
	struct image_store *st;
	struct k8_err err = { 0 };
	json_t *loaded = NULL, *m = NULL, *cfg = NULL;
	double in[ROUNDS], jl[ROUNDS], inc[ROUNDS], jlc[ROUNDS], disk;
	char *path = NULL;

	worker_main(argc, argv);        /* the workers are this binary */
	if (argc != 2 || geteuid() != 0) {
		fprintf(stderr, "usage (as root): %s OCI-LAYOUT\n", argv[0]);
		return 2;
	}
	if (!mkdtemp(dir))
		return 1;
	snprintf(store, sizeof(store), "%s/store", dir);
	if (image_store_open(store, &st, &err) ||
	    image_load(st, argv[1], "bench:1", NULL, NULL, &loaded, &err) ||
	    image_read(st, "bench:1", md, &m, &cfg, &err)) {
		fprintf(stderr, "unpackjail: %s\n", err.msg);
		return 1;
	}
	for (int k = 0; k < ROUNDS; k++) {
		bool first_jailed = k & 1;
		double ac, bc, a = unpack_all(st, m, first_jailed, &ac),
			   b = unpack_all(st, m, !first_jailed, &bc);
		in[k] = first_jailed ? b : a;
		jl[k] = first_jailed ? a : b;
		inc[k] = first_jailed ? bc : ac;
		jlc[k] = first_jailed ? ac : bc;
		if (in[k] < 0 || jl[k] < 0)
			return 1;
	}
	qsort(in, ROUNDS, sizeof(double), cmp_double);
	qsort(jl, ROUNDS, sizeof(double), cmp_double);
	qsort(inc, ROUNDS, sizeof(double), cmp_double);
	qsort(jlc, ROUNDS, sizeof(double), cmp_double);
	disk = now_ms();
	if (image_disk(st, "bench:1", NULL, NULL, &path, &err)) {
		fprintf(stderr, "disk: %s\n", err.msg);
		return 1;
	}
	disk = now_ms() - disk;
	printf("unpack of %zu layer(s), median of %d: wall in-process %.0f ms, jailed %.0f ms "
	       "(%+.1f%%); CPU in-process %.0f ms, jailed %.0f ms (%+.1f%%); a whole disk build "
	       "(jailed unpack + mkfs.erofs) %.0f ms wall\n",
	       json_array_size(json_object_get(m, "layers")), ROUNDS, in[ROUNDS / 2],
	       jl[ROUNDS / 2], 100.0 * (jl[ROUNDS / 2] - in[ROUNDS / 2]) / in[ROUNDS / 2],
	       inc[ROUNDS / 2], jlc[ROUNDS / 2],
	       100.0 * (jlc[ROUNDS / 2] - inc[ROUNDS / 2]) / inc[ROUNDS / 2], disk);
	printf("fixed cost per layer (an empty one, 50 times): in-process %.2f ms, jailed "
	       "%.2f ms\n", empty_ms(st, false, 50), empty_ms(st, true, 50));
	free(path);
	json_decref(m);
	json_decref(cfg);
	json_decref(loaded);
	image_store_close(st);
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)!system(cmd);
	}
	return 0;
}
