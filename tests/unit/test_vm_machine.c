/* SPDX-License-Identifier: Apache-2.0 */
/* test_vm_machine.c - a VM's machine as meta.json and sandbox.json keep it
 * (vm_machine_json / vm_machine_from_json): a round trip, a record from before it existed
 * (the virtio-rng machine), and records that do not check out; and the host's TSC rate
 * a TCG guest is told (vm_tsc_khz: unknown, or plausible and stable). */
#include "daemon/vm.h"
#include "t.h"

int main(void)
{
	struct vm_machine on = { .balloon = true, .rtc = true }, m = { .balloon = true };
	json_auto_t *j = vm_machine_json(&on);

	CHECK_EQ_INT(vm_machine_from_json(j, &m), 0);
	CHECK(m.balloon && m.rtc);
	/* absent: taken before the balloon (and the RTC) */
	CHECK_EQ_INT(vm_machine_from_json(NULL, &m), 0);
	CHECK(!m.balloon && !m.rtc);
	/* recorded before the RTC: a machine without one */
	json_auto_t *norc = json_loads("{\"balloon\":true}", 0, NULL);
	m.rtc = true;
	CHECK_EQ_INT(vm_machine_from_json(norc, &m), 0);
	CHECK(m.balloon && !m.rtc);
	/* hostile or damaged: refused, and the result is the old machine, never garbage */
	static const char *const bad[] = { "7", "[]", "{}", "{\"balloon\":1}",
					   "{\"balloon\":\"yes\"}", "{\"balloon\":null}",
					   "{\"balloon\":true,\"rtc\":1}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_auto_t *b = json_loads(bad[i], JSON_DECODE_ANY, NULL);
		m.balloon = true;
		CHECK(b != NULL);
		CHECK_EQ_INT(vm_machine_from_json(b, &m), -EINVAL);
		CHECK(!m.balloon && !m.rtc);
	}
	/* unknown fields are passed over (a later kosa8 may add some) */
	json_auto_t *more = json_loads("{\"balloon\":false,\"x\":1}", 0, NULL);
	CHECK_EQ_INT(vm_machine_from_json(more, &m), 0);
	CHECK(!m.balloon);

	unsigned khz = vm_tsc_khz();
	CHECK(khz == 0 || (khz > 100000 && khz < 20000000));
	CHECK_EQ_INT(vm_tsc_khz(), khz);        /* measured once */
	return T_DONE();
}
