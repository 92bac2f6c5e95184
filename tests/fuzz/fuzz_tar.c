/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_tar.c - libFuzzer target: the archive ops' tar reader (src/agent/tar.c, built for
 * the host from the agent's source) on arbitrary bytes, fed whole and in two pieces
 * split where the first byte says. Besides crashes and sanitizer reports it checks what
 * the extractor relies on: every name it reports is relative, has no empty, "." or ".."
 * component, and data never exceeds the size the entry announced.
 *
 *   FUZZ_TARGETS=fuzz_tar ./tests/fuzz/run.sh
 */
#include "agent/tar.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct st {
	uint64_t want, got;
	int in_entry;
};

static void check_name(const char *n)
{
	const char *p = n;

	if (n[0] == '/')
		abort();
	while (*p) {
		const char *s = p;
		while (*p && *p != '/')
			p++;
		size_t len = (size_t)(p - s);
		if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
			abort();
		if (*p)
			p++;
		if (!*p && p[-1] == '/')
			abort();
	}
}

static int f_entry(void *ctx, const struct tar_entry *e)
{
	struct st *s = ctx;

	if (s->in_entry)
		abort();
	check_name(e->name);
	if (e->type == TAR_LINK)
		check_name(e->link);
	if (e->type != TAR_REG && e->size)
		abort();
	s->want = e->size;
	s->got = 0;
	s->in_entry = 1;
	return 0;
}

static int f_data(void *ctx, const unsigned char *p, size_t n)
{
	struct st *s = ctx;

	(void)p;
	s->got += n;
	if (!s->in_entry || s->got > s->want)
		abort();
	return 0;
}

static int f_end(void *ctx)
{
	struct st *s = ctx;

	if (!s->in_entry || s->got != s->want)
		abort();
	s->in_entry = 0;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct tar_ops ops = { f_entry, f_data, f_end };
	size_t cut = size ? (size_t)data[0] * 7 % (size + 1) : 0;

	for (int pass = 0; pass < 2; pass++) {
		struct tar_reader r;
		struct k8_err err = { 0 };
		struct st s = { 0 };
		int rc;

		tar_reader_init(&r);
		if (pass == 0) {
			rc = tar_feed(&r, data, size, &ops, &s, &err);
		} else {
			rc = tar_feed(&r, data, cut, &ops, &s, &err);
			if (rc == 0)
				rc = tar_feed(&r, data + cut, size - cut, &ops, &s, &err);
		}
		if (rc == 0)
			(void)tar_finish(&r, &err);
		tar_reader_free(&r);
	}
	return 0;
}
