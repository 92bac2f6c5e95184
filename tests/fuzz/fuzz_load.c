/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_load.c - libFuzzer target: `image load` of an arbitrary archive (an OCI archive or
 * a `docker save` tarball as a hostile user or tool would hand it over) into a store of
 * its own. Besides crashes and sanitizer reports it checks the load's contract: a failed
 * load leaves nothing behind (no reference, no blob, nothing in tmp/), and an error always
 * carries a message.
 *
 * Seeds: tests/fuzz/seeds/fuzz_load (made by seeds/make_seeds.py). */
#include "image/image.h"
#include "fuzz_scratch.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char store[160];

/* Entries in DIR other than . and .. (0 when it does not exist). */
static int fuzz_count(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct image_store *st = NULL;
	struct k8_err err = { 0 };
	json_t *loaded = NULL;
	char path[256];
	int r;

	fuzz_scratch_input("fuzzload", data, size);
	snprintf(store, sizeof(store), "%s/store", fuzz_base);
	if (image_store_open(store, &st, &err))
		abort();
	r = image_load(st, fuzz_input, "fuzz/image:seed", NULL, NULL, &loaded, &err);
	if (r && !err.msg[0]) {
		fprintf(stderr, "fuzz_load: error %d without a message\n", r);
		abort();
	}
	if (r > 0)
		abort();
	if (r) {
		snprintf(path, sizeof(path), "%s/blobs/sha256", store);
		if (fuzz_count(path)) {
			fprintf(stderr, "fuzz_load: a failed load left blobs (%s)\n", err.msg);
			abort();
		}
		snprintf(path, sizeof(path), "%s/tmp", store);
		if (fuzz_count(path)) {
			fprintf(stderr, "fuzz_load: a failed load left files in tmp/ (%s)\n", err.msg);
			abort();
		}
	} else if (!json_is_array(loaded) || !json_array_size(loaded)) {
		fprintf(stderr, "fuzz_load: success without a loaded image\n");
		abort();
	}
	json_decref(loaded);
	image_store_close(st);
	if (rm_rf(store))
		abort();
	return 0;
}
