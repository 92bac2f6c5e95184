/* SPDX-License-Identifier: Apache-2.0 */
/* test_agent_tar.c - the archive ops' tar reader and writer (src/agent/tar.c), on the
 * host: round trips through the writer (long names and links go through pax), names a
 * reader must refuse (absolute, `..`), sizes and records past the caps, truncation,
 * bad checksums, and input fed one byte at a time. */
#include "agent/tar.h"
#include "t.h"

#include <stdlib.h>

struct seen {
	int n;
	char names[16][TAR_NAME_MAX + 1];
	char links[16][TAR_NAME_MAX + 1];
	int types[16];
	uint64_t data[16];
	int64_t mtime[16];
	uint32_t mode[16];
	int ends;
};

static int on_entry(void *ctx, const struct tar_entry *e)
{
	struct seen *s = ctx;
	if (s->n == 16)
		return -E2BIG;
	snprintf(s->names[s->n], TAR_NAME_MAX + 1, "%s", e->name);
	snprintf(s->links[s->n], TAR_NAME_MAX + 1, "%s", e->link);
	s->types[s->n] = e->type;
	s->mtime[s->n] = e->mtime;
	s->mode[s->n] = e->mode;
	s->n++;
	return 0;
}

static int on_data(void *ctx, const unsigned char *p, size_t n)
{
	struct seen *s = ctx;
	(void)p;
	s->data[s->n - 1] += n;
	return 0;
}

static int on_end(void *ctx)
{
	((struct seen *)ctx)->ends++;
	return 0;
}

static const struct tar_ops ops = { on_entry, on_data, on_end };

/* Append an entry (header and `size` bytes of data, padded) to buf. */
static size_t add(unsigned char *buf, size_t off, const char *name, int type, const char *link,
		  uint64_t size)
{
	struct tar_entry *e = calloc(1, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s", name);
	snprintf(e->link, sizeof(e->link), "%s", link ? link : "");
	e->type = type;
	e->mode = 0640;
	e->size = size;
	e->mtime = 1700000000;
	off += tar_header(e, buf + off);
	memset(buf + off, 'x', size);
	off += size;
	off += (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK;
	free(e);
	return off;
}

static int feed(const unsigned char *buf, size_t n, size_t step, struct seen *s, struct k8_err *err)
{
	struct tar_reader r;
	int rc = 0;

	memset(s, 0, sizeof(*s));
	tar_reader_init(&r);
	for (size_t i = 0; i < n && rc == 0; i += step)
		rc = tar_feed(&r, buf + i, n - i < step ? n - i : step, &ops, s, err);
	if (rc == 0)
		rc = tar_finish(&r, err);
	tar_reader_free(&r);
	return rc;
}

static void corrupt_name(unsigned char *h, const char *name)
{
	unsigned sum = 0;
	memset(h, 0, 100);
	memcpy(h, name, strlen(name));
	memset(h + 148, ' ', 8);
	for (int i = 0; i < TAR_BLOCK; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

int main(void)
{
	unsigned char *buf = calloc(1, 1 << 20);
	char longname[300], longlink[400];
	struct seen s;
	struct k8_err err = { 0 };
	size_t n = 0;

	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	longname[100] = '/';
	memset(longlink, 'b', sizeof(longlink) - 1);
	longlink[sizeof(longlink) - 1] = '\0';

	n = add(buf, n, "dir", TAR_DIR, NULL, 0);
	n = add(buf, n, "dir/f", TAR_REG, NULL, 1000);
	n = add(buf, n, longname, TAR_REG, NULL, 3);
	n = add(buf, n, "dir/l", TAR_SYMLINK, longlink, 0);
	n = add(buf, n, "dir/h", TAR_LINK, "dir/f", 0);
	memset(buf + n, 0, 1024);
	n += 1024;
	for (size_t step = 1; step <= 4096; step *= 8) {
		CHECK_EQ_INT(feed(buf, n, step, &s, &err), 0);
		CHECK_EQ_INT(s.n, 5);
		CHECK_STR(s.names[0], "dir");
		CHECK_EQ_INT(s.types[0], TAR_DIR);
		CHECK_EQ_INT((long long)s.data[1], 1000);
		CHECK_STR(s.names[2], longname);
		CHECK_EQ_INT((long long)s.data[2], 3);
		CHECK_STR(s.links[3], longlink);
		CHECK_STR(s.links[4], "dir/f");
		CHECK_EQ_INT(s.ends, 5);
		CHECK_EQ_INT(s.mtime[1], 1700000000);
		CHECK_EQ_INT(s.mode[1], 0640);
	}
	/* without the end blocks: still fine (GNU tar accepts it too) */
	CHECK_EQ_INT(feed(buf, n - 1024, 512, &s, &err), 0);
	/* cut inside a file's data: truncated */
	k8_err_clear(&err);
	CHECK_EQ_INT(feed(buf, 1024 + 100, 512, &s, &err), -EBADMSG);
	CHECK(strstr(err.msg, "truncated") != NULL);

	/* hostile names */
	const char *bad[] = { "/etc/passwd", "../x", "a/../../x", "a/..", "..", NULL };
	for (int i = 0; bad[i]; i++) {
		unsigned char one[3 * TAR_BLOCK] = { 0 };
		add(one, 0, "placeholder", TAR_REG, NULL, 0);
		corrupt_name(one, bad[i]);
		k8_err_clear(&err);
		CHECK_EQ_INT(feed(one, sizeof(one), 512, &s, &err), -EPERM);
		CHECK_EQ_INT(s.n, 0);
	}
	char clean[TAR_NAME_MAX + 1];
	CHECK_EQ_INT(tar_name_clean("./a//b/./c/", clean, &err), 0);
	CHECK_STR(clean, "a/b/c");
	CHECK_EQ_INT(tar_name_clean("./", clean, &err), 0);
	CHECK_STR(clean, "");
	/* a hard link to ../ is refused like a name */
	{
		unsigned char one[3 * TAR_BLOCK] = { 0 };
		add(one, 0, "h", TAR_LINK, "../../etc/shadow", 0);
		k8_err_clear(&err);
		CHECK_EQ_INT(feed(one, sizeof(one), 512, &s, &err), -EPERM);
	}
	/* a bad checksum */
	{
		unsigned char one[3 * TAR_BLOCK] = { 0 };
		add(one, 0, "f", TAR_REG, NULL, 0);
		one[0] ^= 1;
		k8_err_clear(&err);
		CHECK_EQ_INT(feed(one, sizeof(one), 512, &s, &err), -EBADMSG);
	}
	/* a huge size field (base-256, 2^63 - 1): refused before any data */
	{
		unsigned char one[3 * TAR_BLOCK] = { 0 };
		unsigned sum = 0;
		add(one, 0, "big", TAR_REG, NULL, 0);
		one[124] = 0x80;
		memset(one + 125, 0xff, 11);
		memset(one + 148, ' ', 8);
		for (int i = 0; i < TAR_BLOCK; i++)
			sum += one[i];
		snprintf((char *)one + 148, 8, "%06o", sum);
		one[155] = ' ';
		k8_err_clear(&err);
		CHECK(feed(one, sizeof(one), 512, &s, &err) < 0);
		CHECK_EQ_INT(s.n, 0);
	}
	/* a pax record larger than the cap */
	{
		unsigned char one[3 * TAR_BLOCK] = { 0 };
		unsigned sum = 0;
		add(one, 0, "PaxHeader", 'x', NULL, 0);
		snprintf((char *)one + 124, 12, "%011o", (TAR_PAX_MAX + 1));
		memset(one + 148, ' ', 8);
		for (int i = 0; i < TAR_BLOCK; i++)
			sum += one[i];
		snprintf((char *)one + 148, 8, "%06o", sum);
		one[155] = ' ';
		k8_err_clear(&err);
		CHECK_EQ_INT(feed(one, sizeof(one), 512, &s, &err), -E2BIG);
	}
	/* an unsupported type */
	{
		unsigned char one[3 * TAR_BLOCK] = { 0 };
		add(one, 0, "sparse", 'S', NULL, 0);
		k8_err_clear(&err);
		CHECK_EQ_INT(feed(one, sizeof(one), 512, &s, &err), -ENOTSUP);
	}
	free(buf);
	return T_DONE();
}
