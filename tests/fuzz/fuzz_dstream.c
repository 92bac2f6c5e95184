/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dstream.c - libFuzzer target: arbitrary bytes as a multiplexed Docker stream (fed
 * whole and in pieces whose sizes the input picks), as an X-Docker-Container-Path-Stat
 * header, as a filters parameter, and as port specs.
 *
 * Any abort() below is a broken invariant: the decoder reporting more payload than was
 * fed, different results for different splits, a decoded path stat that does not encode
 * again, or a port outside 1..65535. */
#include "docker/filters.h"
#include "docker/names.h"
#include "docker/stream.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct tally {
	size_t bytes[4];
	size_t frames;
};

static int count(void *ctx, enum ds_type t, const uint8_t *p, size_t n, bool end)
{
	struct tally *c = ctx;
	if ((unsigned)t > 3 || (n && !p))
		abort();
	c->bytes[t] += n;
	c->frames += end;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = data[0] % 13 + 1;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	struct ds_decoder a, b;
	struct tally ta = { 0 }, tb = { 0 };
	struct k8_err err = { 0 };

	ds_decoder_init(&a, 4096, 0);
	ds_decoder_init(&b, 4096, 0);
	int ra = ds_decode(&a, p, n, count, &ta, &err);
	int rb = 0;
	for (size_t off = 0; off < n && !rb; off += step)
		rb = ds_decode(&b, p + off, off + step > n ? n - off : step, count, &tb, &err);
	if ((ra < 0) != (rb < 0) || ta.bytes[1] + ta.bytes[2] > n)
		abort();
	if (ra == 0 && (memcmp(&ta, &tb, sizeof(ta)) || ds_decoder_idle(&a) != ds_decoder_idle(&b)))
		abort();

	struct ds_path_stat st;
	if (ds_path_stat_decode((const char *)p, n, &st, &err) == 0) {
		char *again = ds_path_stat_encode(&st);
		struct ds_path_stat st2;
		if (!again || ds_path_stat_decode(again, strlen(again), &st2, &err))
			abort();
		if (strcmp(st.name, st2.name) || st.size != st2.size || st.mode != st2.mode ||
		    st.mtime_sec != st2.mtime_sec || st.mtime_nsec != st2.mtime_nsec)
			abort();
		ds_path_stat_free(&st2);
		free(again);
		ds_path_stat_free(&st);
	}
	ds_posix_from_gomode(n >= 4 ? (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3] : 0);

	char *s = strndup((const char *)p, n);
	if (!s)
		return 0;
	static const char *const allowed[] = { "label", "name", "id", "status", "ancestor",
					       "reference", "until", NULL };
	struct dfilters f;
	if (dfilters_parse(s, allowed, &f, &err) == 0) {
		const char *k[] = { "a" }, *v[] = { "b" };
		const char *refs[] = { "python:3.12-slim", "127.0.0.1:5000/library/python:3" };
		dfilters_match_labels(&f, k, v, 1);
		dfilters_match_reference(&f, refs, 2);
		dfilters_match_regex(&f, "name", "/web-1");
		dfilters_match_ancestor(&f, "python:3.12", "sha256:abcd");
		dfilters_check_status(&f, &err);
		int64_t until;
		dfilters_until(&f, 1700000000LL * 1000000000, &until, &err);
	}
	dfilters_free(&f);
	dfilters_regex(s, "/openhands-runtime-1");
	struct dn_port port;
	if (dn_port_spec(s, &port, &err) == 0 && port.ctr_port == 0)
		abort();
	char name[DN_NAME_MAX + 1];
	dn_name_check(s, name, &err);
	char basic[64];
	if (ds_registry_auth(s, basic, sizeof(basic), &err) == 0 && basic[0] && !strchr(basic, ':'))
		abort();
	free(s);
	return 0;
}
