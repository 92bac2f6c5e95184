/* SPDX-License-Identifier: Apache-2.0 */
/* test_util_duration.c - durations as people write them (common/util.c): units, "off",
 * the cap, and what is refused (--idle-pause, config.json's idle_pause). */
#include "common/util.h"
#include "t.h"

#include <errno.h>
#include <stdint.h>

int main(void)
{
	uint64_t s = 7;

	CHECK_EQ_INT(k8_duration_parse("90", 1000000, &s), 0);
	CHECK_EQ_INT(s, 90);
	CHECK_EQ_INT(k8_duration_parse("2s", 1000000, &s), 0);
	CHECK_EQ_INT(s, 2);
	CHECK_EQ_INT(k8_duration_parse("15m", 1000000, &s), 0);
	CHECK_EQ_INT(s, 900);
	CHECK_EQ_INT(k8_duration_parse("2h", 1000000, &s), 0);
	CHECK_EQ_INT(s, 7200);
	CHECK_EQ_INT(k8_duration_parse("1d", 1000000, &s), 0);
	CHECK_EQ_INT(s, 86400);
	CHECK_EQ_INT(k8_duration_parse("off", 1000000, &s), 0);
	CHECK_EQ_INT(s, 0);
	CHECK_EQ_INT(k8_duration_parse("0", 1000000, &s), 0);
	CHECK_EQ_INT(s, 0);
	s = 5;
	CHECK_EQ_INT(k8_duration_parse("", 100, &s), -EINVAL);
	CHECK_EQ_INT(k8_duration_parse(NULL, 100, &s), -EINVAL);
	CHECK_EQ_INT(k8_duration_parse("m", 100, &s), -EINVAL);
	CHECK_EQ_INT(k8_duration_parse("-1", 100, &s), -EINVAL);
	CHECK_EQ_INT(k8_duration_parse("10ms", 100, &s), -EINVAL);
	CHECK_EQ_INT(k8_duration_parse("10 s", 100, &s), -EINVAL);
	CHECK_EQ_INT(k8_duration_parse("2m", 100, &s), -EINVAL);      /* over the cap */
	CHECK_EQ_INT(k8_duration_parse("99999999999999999999999", UINT64_MAX, &s), -EINVAL);
	CHECK_EQ_INT(k8_duration_parse("18446744073709551615d", UINT64_MAX, &s), -EINVAL);
	CHECK_EQ_INT(s, 5);
	return T_DONE();
}
