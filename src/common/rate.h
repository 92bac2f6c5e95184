/* SPDX-License-Identifier: Apache-2.0 */
/* rate.h - the one rate limiter: a token bucket that counts what it refuses.
 *
 * `burst` events pass at once, refilled at `per_minute`. An event over budget is not
 * passed but counted (with its weight), and the count is handed back to the caller at
 * most every `fold_s` seconds, so it can be reported as one folded line or record.
 * Mechanism only: the caller owns the struct, serializes calls on it and decides what a
 * pass or a fold means (the daemon's audit budget, kosa8-fs's limit log line).
 */
#ifndef K8_RATE_H
#define K8_RATE_H

#include <stdbool.h>
#include <stdint.h>

struct rate_limit {
	uint32_t per_minute;    /* refill; 0 = no limit */
	uint32_t burst;         /* bucket size (at least 1) */
	uint32_t fold_s;        /* at most one fold per this many seconds */
};

struct rate_bucket {
	bool started;
	uint64_t last_ns;       /* monotonic time the tokens were computed at */
	uint64_t tokens_u;      /* tokens, in millionths */
	uint64_t suppressed;    /* events counted, not passed, since the last fold */
	uint64_t fold_ns;       /* monotonic time of the last fold */
};

/* One event of `weight` occurrences (>= 1) at monotonic `now_ns`. Returns true when it
 * may pass. *fold is the count the caller reports first as one folded event (0: none;
 * the count is then reset). A zero bucket starts full at its first event. */
bool rate_take(struct rate_bucket *b, const struct rate_limit *r, uint64_t now_ns,
	       uint64_t weight, uint64_t *fold);
/* The count not yet folded (reset to 0): for the last report, when the owner stops. */
uint64_t rate_drain(struct rate_bucket *b);

#endif
