/* SPDX-License-Identifier: Apache-2.0 */
/* guard.c - the reflected-key guard: does a response body hand the API key back?
 *
 * A body arrives in reads of any size and, chunked, in chunks of any size; a key cut by
 * either boundary is still the key to the client that reassembles the body. So the guard
 * looks at the body's data as one stream: the caller keeps, at the front of its buffer,
 * the last bytes it did not pass on (at most the key's length less one: those that could
 * still be the key's start) and appends the next data after them. Holding them back
 * rather than only remembering them means the client never receives the first part of a
 * key either. Pure: no I/O, no state of its own (tests/unit/test_broker_guard.c). */
#include "broker/broker.h"

#include <string.h>

ssize_t guard_pass(const char *key, size_t klen, const char *buf, size_t n, bool end)
{
	if (!klen)
		return (ssize_t)n;
	if (memmem(buf, n, key, klen))
		return -1;
	if (end)
		return (ssize_t)n;
	/* the longest tail that is a start of the key stays */
	for (size_t s = klen - 1 < n ? klen - 1 : n; s > 0; s--)
		if (buf[n - s] == key[0] && !memcmp(buf + n - s, key, s))
			return (ssize_t)(n - s);
	return (ssize_t)n;
}
