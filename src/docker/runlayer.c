/* SPDX-License-Identifier: Apache-2.0 */
/* runlayer.c - the check of a RUN step's layer (runlayer.h). */
#include "docker/runlayer.h"
#include "docker/dockerignore.h"
#include "common/uarchive.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int drunlayer_check(int fd, uint64_t max_bytes, unsigned max_entries, struct k8_err *err)
{
	struct archive *a = uarchive_reader(0, err);
	struct archive_entry *e;
	uint64_t total = 0;
	unsigned n = 0;
	int r = 0, ar;

	if (!a)
		return err->code;
	lseek(fd, 0, SEEK_SET);
	if (archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK) {
		r = k8_err_set(err, -EINVAL, "the RUN's layer is not a tar: %s",
			       archive_error_string(a) ?: "error");
		goto out;
	}
	while ((ar = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *p = archive_entry_pathname(e), *hl = archive_entry_hardlink(e);
		mode_t t = archive_entry_filetype(e);
		char clean[4200];
		unsigned depth = 0;

		if (++n > max_entries) {
			r = k8_err_set(err, -E2BIG, "the RUN's layer has more than %u entries",
				       max_entries);
			break;
		}
		for (int k = 0; k < 2 && !r; k++) {
			const char *q = k ? hl : p;
			if (k && !q)
				break;
			if (!q || !*q || strlen(q) >= 4096 || q[0] == '/') {
				r = k8_err_set(err, -EPERM, "the RUN's layer has an entry with a bad "
					       "name");
				break;
			}
			snprintf(clean, sizeof(clean), "%s", q);
			dignore_clean(clean);
			if (!strcmp(clean, "..") || !strncmp(clean, "../", 3)) {
				r = k8_err_set(err, -EPERM, "the RUN's layer has an entry leaving "
					       "the root: %.200s", q);
				break;
			}
			for (const char *c = clean; *c; c++)
				depth += *c == '/';
			if (depth >= 256)
				r = k8_err_set(err, -EPERM, "the RUN's layer nests deeper than 256");
		}
		if (r)
			break;
		if (hl && t != AE_IFREG && t != 0) {
			r = k8_err_set(err, -EPERM, "the RUN's layer has a malformed hard link");
			break;
		}
		if (!hl && t != AE_IFREG && t != AE_IFDIR && t != AE_IFLNK) {
			r = k8_err_set(err, -ENOTSUP, "the RUN step made %.200s, a device, FIFO or "
				       "socket: kosa8 does not keep those in an image", p);
			break;
		}
		if (archive_entry_size(e) < 0 ||
		    (total += (uint64_t)archive_entry_size(e)) > max_bytes) {
			r = k8_err_set(err, -EFBIG, "the RUN's layer is larger than %llu bytes",
				       (unsigned long long)max_bytes);
			break;
		}
	}
	if (!r && ar != ARCHIVE_EOF)
		r = k8_err_set(err, -EINVAL, "the RUN's layer is damaged: %s",
			       archive_error_string(a) ?: "error");
out:
	archive_read_free(a);
	return r;
}
