/* SPDX-License-Identifier: Apache-2.0 */
/* auditappend.c - durable audit appends per second and verify time, with and without
 * segments (docs/audit.md, "Durability"). Build after `make`:
 *   cc -O2 -std=gnu11 -D_GNU_SOURCE -Isrc -pthread -o /tmp/auditappend bench/auditappend.c \
 *      build/obj/src/daemon/audit.o build/obj/src/common/util.o build/obj/src/common/sha.o \
 *      -ljansson -lcrypto
 *   /tmp/auditappend /tmp/k8-audit-bench 2000 [SEGMENT_BYTES]
 * (the directory is removed first). */
#include "daemon/audit.h"
#include <stdio.h>
int main(int argc, char **argv)
{
	struct audit *a; struct k8_err e = {0};
	int n = atoi(argv[2]);
	rm_rf(argv[1]);
	if (audit_open(argv[1], &a, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
	if (argc > 3) audit_set_segment_bytes(a, strtoull(argv[3], 0, 10));
	uint64_t t0 = now_mono_ns();
	for (int i = 0; i < n; i++) {
		json_t *d = json_pack("{s:s,s:s,s:i}", "dest", "10.77.0.1:9", "proto", "udp", "count", i);
		audit_append(a, "sandbox.egress.deny", "hostile", d, &e);
		json_decref(d);
	}
	double s = (now_mono_ns() - t0) / 1e9;
	audit_close(a);
	uint64_t t1 = now_mono_ns(); json_t *rep; audit_verify(argv[1], &rep, &e);
	double v = (now_mono_ns() - t1) / 1e9;
	printf("%d appends in %.2fs = %.0f/s; verify %.3fs ok=%d segments=%lld\n", n, s, n / s, v,
	       json_is_true(json_object_get(rep, "ok")), json_integer_value(json_object_get(rep, "segments")));
	return 0;
}
