/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_runlayer.c - the check of a RUN step's layer (src/docker/runlayer.c) on
 * tars written here with libarchive: what a RUN legitimately makes passes; names that
 * leave the root, devices, and the caps are refused with a message. */
#include "docker/runlayer.h"
#include "t.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ent {
	const char *name;
	mode_t type;             /* AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR, 0 = hard link */
	const char *target;      /* symlink or hard link target */
	size_t size;
};

/* A tar of the entries in a temporary file, rewound; -1 on failure. */
static int tar_of(const struct ent *es, size_t n)
{
	char path[] = "/tmp/k8-runlayer-XXXXXX";
	int fd = mkstemp(path);
	struct archive *a = archive_write_new();
	char zeros[4096] = { 0 };

	if (fd < 0)
		return -1;
	unlink(path);
	archive_write_set_format_pax_restricted(a);
	archive_write_open_fd(a, fd);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, es[i].name);
		archive_entry_set_perm(e, 0644);
		if (es[i].type == 0) {
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_hardlink(e, es[i].target);
		} else {
			archive_entry_set_filetype(e, es[i].type);
			if (es[i].type == AE_IFLNK)
				archive_entry_set_symlink(e, es[i].target);
			if (es[i].type == AE_IFREG)
				archive_entry_set_size(e, (la_int64_t)es[i].size);
		}
		archive_write_header(a, e);
		for (size_t left = es[i].type == AE_IFREG ? es[i].size : 0; left; ) {
			size_t k = left < sizeof(zeros) ? left : sizeof(zeros);
			archive_write_data(a, zeros, k);
			left -= k;
		}
		archive_entry_free(e);
	}
	archive_write_close(a);
	archive_write_free(a);
	lseek(fd, 0, SEEK_SET);
	return fd;
}

static int check(const struct ent *es, size_t n, uint64_t max, unsigned entries, char *msg)
{
	struct k8_err err = { 0 };
	int fd = tar_of(es, n), r;

	if (fd < 0)
		return -999;
	r = drunlayer_check(fd, max, entries, &err);
	close(fd);
	if (msg)
		snprintf(msg, sizeof(err.msg), "%s", err.msg);
	if (r)
		CHECK(err.msg[0]);      /* every refusal says why */
	return r;
}

static void test_ok(void)
{
	const struct ent es[] = {
		{ "usr", AE_IFDIR, NULL, 0 }, { "usr/bin/tool", AE_IFREG, NULL, 100 },
		{ "usr/bin/link", AE_IFLNK, "/etc/shadow", 0 },  /* a link's target is data */
		{ "usr/bin/hard", 0, "usr/bin/tool", 0 }, { "etc/.wh.old", AE_IFREG, NULL, 0 },
		{ "./var/./lib/x", AE_IFREG, NULL, 1 },
	};
	CHECK_EQ_INT(check(es, sizeof(es) / sizeof(es[0]), 1 << 20, 100, NULL), 0);
}

static void test_refused(void)
{
	char msg[256];
	const struct ent up[] = { { "a/../../etc/passwd", AE_IFREG, NULL, 1 } };
	const struct ent abs[] = { { "/etc/passwd", AE_IFREG, NULL, 1 } };
	const struct ent hard[] = { { "h", 0, "../../etc/shadow", 0 } };
	const struct ent dev[] = { { "dev/mem", AE_IFCHR, NULL, 0 } };
	const struct ent big[] = { { "a", AE_IFREG, NULL, 3000 }, { "b", AE_IFREG, NULL, 3000 } };
	const struct ent many[] = { { "a", AE_IFDIR, NULL, 0 }, { "b", AE_IFDIR, NULL, 0 },
				    { "c", AE_IFDIR, NULL, 0 } };

	CHECK_EQ_INT(check(up, 1, 1 << 20, 100, msg), -EPERM);
	CHECK(strstr(msg, "leaving the root"));
	CHECK_EQ_INT(check(abs, 1, 1 << 20, 100, msg), -EPERM);
	CHECK_EQ_INT(check(hard, 1, 1 << 20, 100, msg), -EPERM);
	CHECK_EQ_INT(check(dev, 1, 1 << 20, 100, msg), -ENOTSUP);
	CHECK(strstr(msg, "dev/mem"));
	CHECK_EQ_INT(check(big, 2, 5000, 100, msg), -EFBIG);
	CHECK_EQ_INT(check(many, 3, 1 << 20, 2, msg), -E2BIG);
}

static void test_not_tar(void)
{
	char path[] = "/tmp/k8-runlayer-XXXXXX";
	int fd = mkstemp(path);
	struct k8_err err = { 0 };
	char junk[1024];

	unlink(path);
	memset(junk, 'x', sizeof(junk));
	CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
	CHECK_EQ_INT(drunlayer_check(fd, 1 << 20, 100, &err), -EINVAL);
	CHECK(strstr(err.msg, "the RUN's layer"));
	close(fd);
}

int main(void)
{
	test_ok();
	test_refused();
	test_not_tar();
	return T_DONE();
}
