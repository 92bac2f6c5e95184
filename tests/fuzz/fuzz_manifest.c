/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_manifest.c - libFuzzer target: a snapshot's manifest (src/store/manifest.c) read as
 * a hostile bucket would hand it over, then packed and unpacked as the worker and kosa8d
 * do. Besides crashes and sanitizer reports it checks the contract: an error is negative
 * with a message; an accepted manifest passes manifest_check, every chunk lies within its
 * file, every path is one manifest_path_ok accepts, and it survives the pipe unchanged. */
#include "store/manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct manifest m, back;
	struct k8_err err = { 0 };
	FILE *f;
	int r;

	r = manifest_parse((const char *)data, size, &m, &err);
	if (r) {
		if (r > 0 || !err.msg[0])
			abort();
		manifest_free(&m);
		return 0;
	}
	if (manifest_check(&m, &err))
		abort();
	for (uint32_t i = 0; i < m.nfiles; i++) {
		if (!manifest_path_ok(m.files[i].path))
			abort();
		for (uint32_t c = 0; c < m.files[i].nchunks; c++)
			if (m.files[i].chunks[c].off + m.files[i].chunks[c].len > m.files[i].size)
				abort();
	}
	f = tmpfile();
	if (!f || manifest_pack(&m, fileno(f)))
		abort();
	lseek(fileno(f), 0, SEEK_SET);
	if (manifest_unpack(fileno(f), &back, &err))
		abort();
	if (back.nfiles != m.nfiles || strcmp(back.config, m.config))
		abort();
	for (uint32_t i = 0; i < m.nfiles; i++)
		if (back.files[i].nchunks != m.files[i].nchunks ||
		    memcmp(back.files[i].chunks, m.files[i].chunks,
			   m.files[i].nchunks * sizeof(struct mf_chunk)))
			abort();
	fclose(f);
	manifest_free(&back);
	manifest_free(&m);
	return 0;
}
