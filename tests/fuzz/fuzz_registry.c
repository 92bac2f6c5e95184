/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_registry.c - libFuzzer target: what a registry sends that kosa8 parses itself:
 * WWW-Authenticate challenges, image indexes (the linux/amd64 picker) and registry names
 * (the plain-http rule).
 *
 * Input: one byte choosing the parser, then its input. Any abort() below is a parser bug
 * (a result that breaks the function's contract), not just a sanitizer report. */
#include "image/image_int.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;

	if (size < 1)
		return 0;
	s = malloc(size);
	if (!s)
		return 0;
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	switch (data[0] % 3) {
	case 0: {
		struct registry_challenge c;
		int r = registry_parse_challenge(s, &c);
		if (r == 0 && strcmp(c.scheme, "bearer") && strcmp(c.scheme, "basic"))
			abort();
		if (r == 0 && !strcmp(c.scheme, "bearer") && !c.realm[0])
			abort();
		if (r != 0 && r != -EINVAL && r != -ENOTSUP)
			abort();
		break;
	}
	case 1: {
		json_t *j = json_loadb(s, size - 1, JSON_REJECT_DUPLICATES, NULL);
		char hex[65], avail[64];
		int64_t sz = -1;
		int r = registry_pick_platform(j, hex, &sz, avail, sizeof(avail));
		if (r == 0 && (sz < 0 || strlen(hex) != 64))
			abort();
		if (r == -ENOENT && strlen(avail) >= sizeof(avail))
			abort();
		json_decref(j);
		break;
	}
	default: {
		static const char *const insecure[] = { "reg.lan:5000", "x", NULL };
		(void)registry_plain_http_ok(s, insecure);
		break;
	}
	}
	free(s);
	return 0;
}
