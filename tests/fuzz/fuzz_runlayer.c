/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_runlayer.c - libFuzzer target: drunlayer_check (src/docker/runlayer.c), the check
 * of the tar a build's RUN step sends back from the guest, on arbitrary bytes. Besides
 * crashes and sanitizer reports: every refusal carries a message, the answer is one of
 * the documented codes, and a small cap is enforced. */
#include "docker/runlayer.h"
#include "fuzz_scratch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct k8_err err = { 0 };
	int fd, r;

	fuzz_scratch_input("runlayer", data, size);
	fd = open(fuzz_input, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		abort();
	/* A 64 KiB, 64-entry cap so that the caps' paths are reached too. */
	r = drunlayer_check(fd, 65536, 64, &err);
	close(fd);
	if (r && !err.msg[0]) {
		fprintf(stderr, "fuzz_runlayer: error %d without a message\n", r);
		abort();
	}
	if (r != 0 && r != -EINVAL && r != -EPERM && r != -ENOTSUP && r != -E2BIG &&
	    r != -EFBIG) {
		fprintf(stderr, "fuzz_runlayer: undocumented answer %d\n", r);
		abort();
	}
	return 0;
}
