/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dcopy.c - libFuzzer target: arbitrary bytes as the entries of an image layer (type,
 * name, link target, as kosa8d's links worker sends them) whose symlinks a COPY
 * destination resolves through (src/docker/copy.c dcopy_links_entry, dcopy_resolve)
 * and as a local archive a build context holds for ADD (dcopy_layer, the layer it makes
 * read back).
 *
 * Any abort() below is a broken invariant: a symlink kept under a name that climbs or is
 * absolute, a resolved destination that leaves the image's root, or an ADD that writes
 * an entry outside its destination. */
#include "docker/copy.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char ctx[64];

static bool climbs(const char *p)
{
	return p[0] == '/' || !strcmp(p, "..") || !strncmp(p, "../", 3) || strstr(p, "/../") ||
	       (strlen(p) >= 3 && !strcmp(p + strlen(p) - 3, "/.."));
}

/* The bytes as entries: a line each, its first byte the type (mod 3), then the name, then
 * after a TAB a link target. */
static void check_links(const uint8_t *data, size_t size)
{
	struct dcopy_links lk = { json_object(), json_array(), json_object() };
	struct k8_err err = { 0 };
	const char *k;
	json_t *v;
	char out[4096];
	size_t i = 0;

	while (i < size) {
		const uint8_t *nl = memchr(data + i, '\n', size - i);
		size_t len = nl ? (size_t)(nl - (data + i)) : size - i;
		char *line = strndup((const char *)data + i, len), *tab;

		i += len + 1;
		if (!line || !line[0]) {
			free(line);
			continue;
		}
		tab = strchr(line + 1, '\t');
		if (tab)
			*tab++ = '\0';
		k8_err_clear(&err);
		dcopy_links_entry(&lk, (unsigned char)line[0] % 3, line + 1, tab, &err);
		free(line);
	}
	json_object_foreach(lk.links, k, v)
		if (climbs(k))
			abort();
	static const char *const paths[] = { "a/b/c", "usr/lib/x", "l/x", "x", "a", "..", "b/../c" };
	for (size_t j = 0; j < sizeof(paths) / sizeof(paths[0]); j++) {
		k8_err_clear(&err);
		if (dcopy_resolve(lk.links, paths[j], j & 1, out, sizeof(out), &err) == 0 &&
		    climbs(out))
			abort();
	}
	dcopy_links_clear(&lk);
}

static void check_add(const uint8_t *data, size_t size)
{
	char p[128];
	const char *w[2] = { "in.tar", "/dst/" };
	struct df_step s = { .kind = DF_ADD };
	struct k8_err err = { 0 };
	char digest[65];
	int fd, out, ctxfd;

	snprintf(p, sizeof(p), "%s/in.tar", ctx);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return;
	}
	close(fd);
	s.argv.v = (char **)w;
	s.argv.n = 2;
	ctxfd = open(ctx, O_RDONLY | O_DIRECTORY);
	out = memfd_create("out", 0);
	struct dcopy_in in = { .ctxfd = ctxfd };
	if (dcopy_layer(&in, &s, out, digest, &err) == 0) {
		struct archive *a = archive_read_new();
		struct archive_entry *e;
		lseek(out, 0, SEEK_SET);
		archive_read_support_format_tar(a);
		if (archive_read_open_fd(a, out, 4096) == ARCHIVE_OK)
			while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
				const char *n = archive_entry_pathname(e);
				if (!n || strncmp(n, "dst", 3) || climbs(n))
					abort();
			}
		archive_read_free(a);
	}
	close(out);
	close(ctxfd);
}

/* The context directory goes with the process. */
static void cleanup(void)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/in.tar", ctx);
	unlink(p);
	rmdir(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ctx[0]) {
		snprintf(ctx, sizeof(ctx), "/tmp/k8fuzz-copy-XXXXXX");
		if (!mkdtemp(ctx))
			abort();
		atexit(cleanup);
	}
	check_links(data, size);
	check_add(data, size);
	return 0;
}
