/* SPDX-License-Identifier: Apache-2.0 */
/* test_ckpt_snapshot.c - where a pulled snapshot's files go (checkpoint.c's
 * ckpt_snapshot_local, the one map from a snapshot's names to places): the names a
 * checkpoint has, and every other name refused, so a manifest that passed its own checks
 * still cannot place a file anywhere else (docs/stores.md, test_97_hostile_store). */
#include "daemon/checkpoint.h"
#include "t.h"

#include <stdlib.h>

static void want(const char *label, const char *path, const char *expect)
{
	char *got = ckpt_snapshot_local("/h/sb", label, path);

	if (!expect) {
		if (got)
			fprintf(stderr, "%s accepted as %s\n", path, got);
		CHECK(got == NULL);
	} else {
		CHECK_STR(got, expect);
	}
	free(got);
}

int main(void)
{
	const char *hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char img[128], imgat[160];

	want("c1", "state/devices", "/h/sb/checkpoints/c1/devices");
	want("c1", "state/memory", "/h/sb/checkpoints/c1/memory");
	want("c1", "state/state", "/h/sb/checkpoints/c1/state");
	want(NULL, "state/memory", "/h/sb/paused/memory");
	want("c1", "disk/scratch.qcow2", "/h/sb/scratch.qcow2");
	want("c1", "disk/layer-18ee9cf33bf9002a.qcow2", "/h/sb/layer-18ee9cf33bf9002a.qcow2");
	snprintf(img, sizeof(img), "images/%s.erofs", hex);
	snprintf(imgat, sizeof(imgat), "/h/sb/%s", img);
	want("c1", img, imgat);

	static const char *const bad[] = {
		"state/meta.json", "state/fs-nodes.json", "state/../memory", "state/",
		"disk/layers.json", "disk/sandbox.json", "disk/layer-.qcow2", "disk/layer-xyz.qcow2",
		"disk/layer-12345678901234567.qcow2", "disk/../scratch.qcow2", "disk/slot0.qcow2",
		"images/short.erofs", "images/0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef.erofs",
		"images/x/../../etc.erofs", "memory", "../memory", "/etc/shadow", "", "paused/memory",
		"checkpoints/c1/memory",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		want("c1", bad[i], NULL);
	return T_DONE();
}
