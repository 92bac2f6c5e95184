/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_bundle.c - libFuzzer target: the bundle importer's reader (src/daemon/bundle_read.c:
 * manifest.json, then the walk over the members into a staging directory) on arbitrary
 * bytes, as a hostile bundle would hand them over. Besides crashes and sanitizer reports
 * it checks the reader's contract: an error is negative and carries a message; a success
 * means every part the manifest lists was seen, and each is in the staging directory with
 * the size the manifest gives; nothing is ever written outside the staging directory.
 *
 * Seeds: tests/fuzz/seeds/fuzz_bundle (made by seeds/make_seeds.py). */
#include "daemon/bundle_read.h"
#include "fuzz_scratch.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Entries in DIR other than . and .. */
static int fuzz_count(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		abort();
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bundle_read br = { 0 };
	struct k8_err err = { 0 };
	struct archive *a;
	char stage[200];
	int r;

	fuzz_scratch_input("fuzzbundle", NULL, 0);    /* the scratch directory; input unused */
	snprintf(stage, sizeof(stage), "%s/stage", fuzz_base);
	rm_rf(stage);
	if (mkdir(stage, 0700) < 0)
		abort();
	a = archive_read_new();
	archive_read_support_format_tar(a);
	if (archive_read_open_memory(a, data, size) != ARCHIVE_OK) {
		archive_read_free(a);
		return 0;
	}
	r = bundle_read(a, "fuzz.k8b", stage, NULL, NULL, &br, &err);
	archive_read_free(a);
	if (r > 0 || (r && !err.msg[0])) {
		fprintf(stderr, "fuzz_bundle: %d without a message\n", r);
		abort();
	}
	if (r == 0) {
		const char *k;
		json_t *v;
		size_t i;
		if ((int)json_object_size(br.seen) != br.nparts)
			abort();
		json_array_foreach(json_object_get(br.manifest, "parts"), i, v) {
			char path[600];
			struct stat st;
			const char *p = json_string_value(json_object_get(v, "path"));
			snprintf(path, sizeof(path), "%s/%s", stage, p);
			if (!json_object_get(br.seen, p) || lstat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
			    st.st_size != json_integer_value(json_object_get(v, "size")))
				abort();
		}
		json_object_foreach(br.seen, k, v)
			if (!bundle_member_ok(k))
				abort();
	}
	bundle_read_free(&br);
	/* Only the staging directory (and the input file) in the scratch directory. */
	if (fuzz_count(fuzz_base) != 2)
		abort();
	return 0;
}
