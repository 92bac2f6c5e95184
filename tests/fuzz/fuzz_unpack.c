/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_unpack.c - libFuzzer target: image_unpack_layer on arbitrary bytes (tar, gzip,
 * zstd, ...) into a scratch directory. Besides crashes and sanitizer reports, it checks
 * the one property that matters: nothing appears beside the scratch root.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Isrc \
 *     tests/fuzz/fuzz_unpack.c src/image/unpack.c src/common/util.c src/common/sha.c \
 *     -larchive -ljansson -lcrypto -o build/fuzz_unpack
 *   build/fuzz_unpack -max_total_time=60 CORPUS_DIR
 */
#include "image/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base[128], root[160], input[160];

/* The scratch directory must hold exactly "root" and "in.tar" afterwards. */
static void fuzz_check_beside(void)
{
	DIR *d = opendir(base);
	struct dirent *de;

	if (!d)
		abort();
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		    strcmp(de->d_name, "root") && strcmp(de->d_name, "in.tar")) {
			fprintf(stderr, "fuzz_unpack: '%s' appeared outside the root\n", de->d_name);
			abort();
		}
	closedir(d);
}

static void fuzz_cleanup(void)
{
	if (base[0])
		rm_rf(base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct k8_err err = { 0 };
	int fd, rootfd, r;

	if (!base[0]) {
		const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
		snprintf(base, sizeof(base), "%s/k8-fuzz-XXXXXX", tmp);
		if (!mkdtemp(base))
			abort();
		snprintf(root, sizeof(root), "%s/root", base);
		snprintf(input, sizeof(input), "%s/in.tar", base);
		atexit(fuzz_cleanup);
	}
	fd = open(input, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write_full(fd, data, size))
		abort();
	close(fd);
	if (mkdir(root, 0755) < 0)
		abort();
	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		abort();
	r = image_unpack_layer(rootfd, input, 16u << 20, &err);
	if (r && !err.msg[0]) {
		fprintf(stderr, "fuzz_unpack: error %d without a message\n", r);
		abort();
	}
	if (r > 0)
		abort();
	close(rootfd);
	fuzz_check_beside();
	if (rm_rf(root))
		abort();
	return 0;
}
