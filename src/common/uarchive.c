/* SPDX-License-Identifier: Apache-2.0 */
/* uarchive.c - libarchive readers for untrusted bytes: tar and four in-process
 * decompressors, never a program (uarchive.h says why). Apart from util.c so that only
 * the programs that link libarchive link it. */
#include "common/uarchive.h"

#include <archive.h>

struct archive *uarchive_reader(unsigned flags, struct k8_err *err)
{
	static const struct {
		const char *name;
		int (*add)(struct archive *);
	} filters[] = {
		{ "gzip", archive_read_support_filter_gzip },
		{ "zstd", archive_read_support_filter_zstd },
		{ "xz", archive_read_support_filter_xz },
		{ "bzip2", archive_read_support_filter_bzip2 },
	};
	struct archive *a = archive_read_new();

	if (!a) {
		k8_err_set(err, -ENOMEM, "libarchive: out of memory");
		return NULL;
	}
	/* ARCHIVE_WARN here means "using an external program": never for hostile bytes. */
	for (size_t i = 0; (flags & UARCHIVE_COMPRESSED) && i < ARRAY_SIZE(filters); i++)
		if (filters[i].add(a) != ARCHIVE_OK) {
			k8_err_set(err, -ENOTSUP, "this libarchive decodes %s with an external "
				   "program, which kosa8 never runs on untrusted bytes; install a "
				   "libarchive built with it (Debian's is)", filters[i].name);
			archive_read_free(a);
			return NULL;
		}
	if (archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    ((flags & UARCHIVE_EMPTY) && archive_read_support_format_empty(a) != ARCHIVE_OK)) {
		k8_err_set(err, -ENOMEM, "libarchive: %s", archive_error_string(a) ?: "no tar reader");
		archive_read_free(a);
		return NULL;
	}
	return a;
}
