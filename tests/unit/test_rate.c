/* SPDX-License-Identifier: Apache-2.0 */
/* test_rate.c - the token bucket (common/rate.c): burst, refill, folds, weights, off,
 * and the once-per-ten-seconds log line kosa8-fs makes of it. */
#include "common/rate.h"
#include "t.h"

#include <stdint.h>

static void test_bucket(void)
{
	struct rate_limit r = { .per_minute = 60, .burst = 5, .fold_s = 10 };
	struct rate_bucket b = { 0 };
	const uint64_t S = 1000000000ull;
	uint64_t fold, written = 0, folded = 0, now = 100 * S;

	/* a burst of 1000 at once: 5 written, the rest counted */
	for (int i = 0; i < 1000; i++) {
		written += rate_take(&b, &r, now, 1, &fold);
		folded += fold;
	}
	CHECK_EQ_INT(written, 5);
	CHECK_EQ_INT(folded, 0);
	CHECK_EQ_INT(b.suppressed, 995);
	/* 10 s later: 10 tokens back, and the count is folded once */
	now += 10 * S;
	CHECK(rate_take(&b, &r, now, 1, &fold));
	CHECK_EQ_INT(fold, 995);
	/* a flood for a minute at 1000/s: at most 60 written + the burst left, 6 folds */
	written = folded = 0;
	unsigned nfold = 0;
	for (int t = 0; t < 60000; t++) {
		now += S / 1000;
		written += rate_take(&b, &r, now, 1, &fold);
		if (fold) {
			nfold++;
			folded += fold;
		}
	}
	CHECK(written <= 60 + 5);
	CHECK(nfold <= 6);
	CHECK_EQ_INT(written + folded + rate_drain(&b), 60000);
	CHECK_EQ_INT(rate_drain(&b), 0);
	/* a weight counts as that many */
	now += 3600 * S;
	folded = 0;
	for (int i = 0; i < 6; i++) {
		rate_take(&b, &r, now, 1, &fold);
		folded += fold;         /* the first over budget after a quiet time: folded at once */
	}
	CHECK(!rate_take(&b, &r, now, 1000, &fold));
	CHECK_EQ_INT(folded + fold + rate_drain(&b), 1001);
	/* per_minute 0: no limit */
	struct rate_limit off = { .per_minute = 0, .burst = 1, .fold_s = 1 };
	struct rate_bucket b2 = { 0 };
	for (int i = 0; i < 100; i++)
		CHECK(rate_take(&b2, &off, now, 1, &fold));
}

/* burst 1 at 6 a minute: one line, then one more only after ten seconds */
static void test_log_line(void)
{
	const struct rate_limit r = { .per_minute = 6, .burst = 1, .fold_s = 0 };
	struct rate_bucket b = { 0 };
	const uint64_t S = 1000000000ull;
	uint64_t fold, now = 5 * S;
	int lines = 0;

	for (int i = 0; i < 100; i++, now += S / 10)   /* 100 hits in 10 s */
		lines += rate_take(&b, &r, now, 1, &fold);
	CHECK_EQ_INT(lines, 1);
	/* now is 10 s after the first: a token again */
	CHECK(rate_take(&b, &r, now, 1, &fold));
	CHECK(!rate_take(&b, &r, now + S, 1, &fold));
}

int main(void)
{
	test_bucket();
	test_log_line();
	return T_DONE();
}
