/* SPDX-License-Identifier: Apache-2.0 */
/* test_uarchive.c - the reader of untrusted archives (src/common/uarchive.c): tar, plain
 * or compressed with gzip, zstd, xz or bzip2, reads; bytes that libarchive would hand to
 * an external program (lrzip's magic, with a fake `lrzip` first on PATH that leaves a
 * marker) are refused and the program never runs. A reader with every filter, as kosa8
 * had, runs it: the control that shows the test can see a run. */
#include "common/uarchive.h"
#include "t.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/k8-uarchive-XXXXXX";

/* One file "hello" in a tar compressed with `filter` (ARCHIVE_FILTER_*), in memory. */
static size_t tar_with(int filter, char *buf, size_t cap)
{
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	size_t used = 0;

	archive_write_add_filter(a, filter);
	archive_write_set_format_pax_restricted(a);
	archive_write_open_memory(a, buf, cap, &used);
	archive_entry_set_pathname(e, "hello");
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, 3);
	archive_write_header(a, e);
	archive_write_data(a, "hi\n", 3);
	archive_entry_free(e);
	archive_write_close(a);
	archive_write_free(a);
	return used;
}

/* The first entry's name, or NULL when the reader would not open the bytes. */
static const char *first_name(struct archive *a, const void *p, size_t n)
{
	static char name[64];
	struct archive_entry *e;

	if (archive_read_open_memory(a, p, n) != ARCHIVE_OK ||
	    archive_read_next_header(a, &e) != ARCHIVE_OK)
		return NULL;
	snprintf(name, sizeof(name), "%s", archive_entry_pathname(e));
	return name;
}

static void test_allowed_filters(void)
{
	static const int filters[] = { ARCHIVE_FILTER_NONE, ARCHIVE_FILTER_GZIP,
				       ARCHIVE_FILTER_ZSTD, ARCHIVE_FILTER_XZ, ARCHIVE_FILTER_BZIP2 };
	static char buf[1 << 16];
	struct k8_err err = { 0 };

	for (size_t i = 0; i < ARRAY_SIZE(filters); i++) {
		size_t n = tar_with(filters[i], buf, sizeof(buf));
		struct archive *a = uarchive_reader(UARCHIVE_COMPRESSED, &err);
		CHECK(a != NULL);
		CHECK_STR(first_name(a, buf, n), "hello");
		archive_read_free(a);
		/* a tar-only reader takes the plain one only */
		a = uarchive_reader(0, &err);
		const char *got = first_name(a, buf, n);
		CHECK(i == 0 ? got && !strcmp(got, "hello") : got == NULL);
		archive_read_free(a);
	}
	CHECK_EQ_INT(err.code, 0);
}

static void test_no_external_program(void)
{
	static const char lrz[24] = "LRZI\0\6";    /* lrzip's magic, version 0.6 */
	char bin[256], prog[300], marker[300], path[4096];
	struct k8_err err = { 0 };
	struct archive *a;
	FILE *f;

	snprintf(bin, sizeof(bin), "%s/bin", dir);
	snprintf(prog, sizeof(prog), "%s/lrzip", bin);
	snprintf(marker, sizeof(marker), "%s/ran", dir);
	CHECK_EQ_INT(mkdir(bin, 0700), 0);
	f = fopen(prog, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fprintf(f, "#!/bin/sh\nid -u > %s\nexit 1\n", marker);
	fclose(f);
	chmod(prog, 0700);
	snprintf(path, sizeof(path), "%s:%s", bin, getenv("PATH") ?: "/usr/bin:/bin");
	setenv("PATH", path, 1);

	a = uarchive_reader(UARCHIVE_COMPRESSED | UARCHIVE_EMPTY, &err);
	CHECK(a != NULL);
	CHECK(first_name(a, lrz, sizeof(lrz)) == NULL);
	CHECK(strstr(archive_error_string(a) ?: "", "Unrecognized archive format") != NULL);
	archive_read_free(a);
	CHECK(access(marker, F_OK) < 0);

	/* the control: every filter, as before, starts the program */
	a = archive_read_new();
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	CHECK(first_name(a, lrz, sizeof(lrz)) == NULL);
	archive_read_free(a);
	CHECK(access(marker, F_OK) == 0);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	test_allowed_filters();
	test_no_external_program();
	{
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)!system(cmd);
	}
	return T_DONE();
}
