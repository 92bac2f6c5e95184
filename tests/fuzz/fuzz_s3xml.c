/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_s3xml.c - libFuzzer target: the readers of S3's XML answers (src/store/s3xml.c) on
 * arbitrary bytes, as a hostile S3 server would send them. The first byte picks the
 * answer (error, list, upload id, parts, completion). Besides crashes and sanitizer
 * reports it checks the readers' contract: an error is negative and carries a message; a
 * success leaves every count within its bound and every string terminated within its
 * array, so that s3xml_check (what the daemon runs on a worker's result) changes nothing. */
#include "store/s3xml.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static union {
		struct s3xml_error e;
		struct s3xml_list l;
		struct s3xml_upload u;
		struct s3xml_parts p;
		struct s3xml_complete c;
	} out, copy;
	struct k8_err err = { 0 };
	enum s3xml_kind kind;
	int r;

	if (size < 1)
		return 0;
	kind = (enum s3xml_kind)(1 + data[0] % 5);
	r = s3xml_parse(kind, (const char *)data + 1, size - 1, &out, &err);
	if (r) {
		if (r > 0 || !err.msg[0])
			abort();
		return 0;
	}
	memcpy(&copy, &out, s3xml_size(kind));
	if (s3xml_check(kind, &copy) || memcmp(&copy, &out, s3xml_size(kind)))
		abort();
	if (kind == S3XML_LIST)
		for (uint32_t i = 0; i < out.l.n; i++)
			if (!out.l.o[i].key[0])
				abort();
	return 0;
}
