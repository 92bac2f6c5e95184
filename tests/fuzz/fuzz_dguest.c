/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dguest.c - libFuzzer target: arbitrary bytes as a guest agent's answer to
 * ctr.stats and ctr.top (parsed as JSON), turned into Docker's stats object and top's
 * table in every format; the first bytes as a ps_args string too.
 *
 * Any abort() below is a broken invariant: no stats object for a sample, or a top row
 * that is not all strings, or a ps_args accepted that names a letter outside e f A a u x. */
#include "docker/stats.h"
#include "docker/top.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dstats_sample a, b;
	struct k8_err err = { 0 };
	enum dtop_fmt fmt;
	json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
	char *args = strndup((const char *)data, size < 64 ? size : 64);

	if (args && dtop_args(args, &fmt, &err) == 0)
		for (const char *p = args; *p; p++)
			if (!strchr(" -efAaux", *p))
				abort();
	free(args);
	if (!v)
		return 0;
	dstats_from_agent(v, 1700000000000000000ll, &a);
	dstats_from_agent(v, 1700000001000000000ll, &b);
	json_t *o = dstats_json(&b, &a, "0123456789ab", "name");
	if (!o)
		abort();
	json_decref(o);
	dstats_clear(&a);
	dstats_clear(&b);
	for (int f = DTOP_EF; f <= DTOP_AX; f++) {
		json_t *t = dtop_json(v, (enum dtop_fmt)f, 1700000000), *row, *cell;
		size_t i, j;
		if (!t)
			abort();
		json_array_foreach(json_object_get(t, "Processes"), i, row)
			json_array_foreach(row, j, cell)
				if (!json_is_string(cell))
					abort();
		json_decref(t);
	}
	json_decref(v);
	return 0;
}
