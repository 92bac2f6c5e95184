/* SPDX-License-Identifier: Apache-2.0 */
/* test_util_time.c - the one timestamp format (common/util.c): exact bytes, with and
 * without milliseconds, and times gmtime cannot represent. The audit chain hashes these
 * bytes, so this test pins them. */
#include "common/util.h"
#include "t.h"

#include <stdint.h>

int main(void)
{
	char t[K8_TIME_LEN];

	CHECK_STR(k8_time_fmt(t, 0, -1), "1970-01-01T00:00:00Z");
	CHECK_STR(k8_time_fmt(t, 1796220000, -1), "2026-12-02T14:00:00Z");
	CHECK_STR(k8_time_fmt(t, 1796220000, 7), "2026-12-02T14:00:00.007Z");
	CHECK_STR(k8_time_fmt(t, 1796220000, 999), "2026-12-02T14:00:00.999Z");
	CHECK_STR(k8_time_fmt(t, INT64_MAX, -1), "1970-01-01T00:00:00Z");
	k8_time_now(t, 1);
	CHECK_EQ_INT(strlen(t), 24);
	CHECK(t[4] == '-' && t[10] == 'T' && t[19] == '.' && t[23] == 'Z');
	k8_time_now(t, 0);
	CHECK_EQ_INT(strlen(t), 20);
	return T_DONE();
}
