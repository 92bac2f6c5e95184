/* SPDX-License-Identifier: Apache-2.0 */
/* rate.c - the token bucket of rate.h. */
#include "common/rate.h"

bool rate_take(struct rate_bucket *b, const struct rate_limit *r, uint64_t now_ns,
	       uint64_t weight, uint64_t *fold)
{
	uint64_t cap = (uint64_t)(r->burst ? r->burst : 1) * 1000000u;
	bool ok;

	*fold = 0;
	if (weight == 0)
		weight = 1;
	if (!b->started) {
		b->started = true;
		b->tokens_u = cap;
		b->last_ns = now_ns;
		b->fold_ns = now_ns;
	}
	if (r->per_minute == 0)
		return true;
	if (now_ns > b->last_ns) {
		/* millionths of a token per ns: per_minute * 1e6 / 60e9; in 128 bits, no overflow */
		unsigned __int128 add = (unsigned __int128)(now_ns - b->last_ns) * r->per_minute /
					60000u;
		b->tokens_u = add >= cap - b->tokens_u ? cap : b->tokens_u + (uint64_t)add;
		b->last_ns = now_ns;
	}
	ok = b->tokens_u >= 1000000u;
	if (ok)
		b->tokens_u -= 1000000u;
	else
		b->suppressed = b->suppressed + weight < b->suppressed ? UINT64_MAX
								      : b->suppressed + weight;
	if (b->suppressed && now_ns - b->fold_ns >= (uint64_t)r->fold_s * 1000000000u) {
		*fold = b->suppressed;
		b->suppressed = 0;
		b->fold_ns = now_ns;
	}
	return ok;
}

uint64_t rate_drain(struct rate_bucket *b)
{
	uint64_t n = b->suppressed;

	b->suppressed = 0;
	return n;
}
