/* SPDX-License-Identifier: Apache-2.0 */
/* t.h - the unit tests' few macros. Each test binary prints one line per failed check
 * and ends with "N passed, N failed"; tests/run-unit.sh adds them up. */
#ifndef K8_T_H
#define K8_T_H
#include <stdio.h>
#include <string.h>

static int t_pass, t_fail;
#define CHECK(cond) do { if (cond) t_pass++; else { t_fail++; \
	fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_EQ_INT(a, b) do { long long _a = (a), _b = (b); if (_a == _b) t_pass++; else { \
	t_fail++; fprintf(stderr, "%s:%d: FAILED: %s == %s (%lld != %lld)\n", __FILE__, \
	__LINE__, #a, #b, _a, _b); } } while (0)
#define CHECK_STR(a, b) do { const char *_a = (a), *_b = (b); if (_a && _b && !strcmp(_a, _b)) \
	t_pass++; else { t_fail++; fprintf(stderr, "%s:%d: FAILED: %s == \"%s\" (got \"%s\")\n", \
	__FILE__, __LINE__, #a, _b ? _b : "(null)", _a ? _a : "(null)"); } } while (0)
#define T_DONE() (printf("%s: %d passed, %d failed\n", __FILE__, t_pass, t_fail), t_fail ? 1 : 0)
#endif
