/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_scratch.h - the scratch directory a file-based fuzz target works in: made once per
 * process under /dev/shm (or /tmp), removed at exit; each input is written to `input`. */
#ifndef K8_FUZZ_SCRATCH_H
#define K8_FUZZ_SCRATCH_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/util.h"

static char fuzz_base[128], fuzz_input[160];

static void fuzz_scratch_cleanup(void)
{
	if (fuzz_base[0])
		rm_rf(fuzz_base);
}

/* Make the directory on the first call; write the input's bytes to fuzz_input. */
static void fuzz_scratch_input(const char *tag, const uint8_t *data, size_t size)
{
	int fd;

	if (!fuzz_base[0]) {
		const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
		snprintf(fuzz_base, sizeof(fuzz_base), "%s/k8-%s-XXXXXX", tmp, tag);
		if (!mkdtemp(fuzz_base))
			abort();
		snprintf(fuzz_input, sizeof(fuzz_input), "%s/in.tar", fuzz_base);
		atexit(fuzz_scratch_cleanup);
	}
	fd = open(fuzz_input, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write_full(fd, data, size))
		abort();
	close(fd);
}

#endif
