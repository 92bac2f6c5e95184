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
#include "fuzz_scratch.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[160];

/* The scratch directory must hold exactly "root" and "in.tar" afterwards. */
static void fuzz_check_beside(void)
{
	DIR *d = opendir(fuzz_base);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct k8_err err = { 0 };
	int rootfd, r;

	fuzz_scratch_input("fuzz", data, size);
	snprintf(root, sizeof(root), "%s/root", fuzz_base);
	if (mkdir(root, 0755) < 0)
		abort();
	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		abort();
	r = image_unpack_layer(rootfd, fuzz_input, 16u << 20, &err);
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
