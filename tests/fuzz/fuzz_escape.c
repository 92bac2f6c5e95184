/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_escape.c - libFuzzer target: str_escape / str_escape_to on arbitrary bytes (what a
 * guest, a sidecar or a registry may put in a name or a message). Checks the contract, not
 * only memory safety: the output holds no C0 control, no DEL, no C1 control encoded in
 * UTF-8, no bidi or line separator; it is valid UTF-8; str_escape_to never writes past its
 * size and cuts only between characters (its output is a prefix of the full escape). */
#include "common/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check_clean(const unsigned char *o)
{
	while (*o) {
		unsigned c = *o;
		if (c < 0x20 || c == 0x7f)
			abort();
		if (c < 0x80) {
			o++;
			continue;
		}
		/* a UTF-8 sequence that the escaper let through: well formed and printable */
		size_t k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
		if (!k)
			abort();
		for (size_t i = 1; i < k; i++)
			if ((o[i] & 0xc0) != 0x80)
				abort();
		unsigned cp = k == 2 ? ((c & 0x1f) << 6) | (o[1] & 0x3f)
			    : k == 3 ? ((c & 0x0f) << 12) | ((o[1] & 0x3f) << 6) | (o[2] & 0x3f)
				     : ((c & 0x07) << 18) | ((o[1] & 0x3f) << 12) |
					       ((o[2] & 0x3f) << 6) | (o[3] & 0x3f);
		if ((cp >= 0x80 && cp < 0xa0) || (cp >= 0x200e && cp <= 0x200f) ||
		    (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
			abort();
		o += k;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s, *full, small[64];
	size_t cut;

	if (size < 1)
		return 0;
	s = malloc(size);
	if (!s)
		return 0;
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	full = str_escape(s);
	fuzz_check_clean((const unsigned char *)full);
	cut = 1 + data[0] % sizeof(small);
	memset(small, 0x55, sizeof(small));
	str_escape_to(small, cut, s);
	for (size_t i = cut; i < sizeof(small); i++)
		if (small[i] != 0x55)
			abort();                /* wrote past its size */
	if (strncmp(full, small, strlen(small)))
		abort();                        /* not a prefix of the full escape */
	fuzz_check_clean((const unsigned char *)small);
	free(full);
	free(s);
	return 0;
}
