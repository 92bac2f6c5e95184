/* SPDX-License-Identifier: Apache-2.0 */
/* test_sb_images.c - a sandbox's image list as sandbox.json and meta.json keep it
 * (sb_images_json / sb_images_from_json): a round trip, and records that do not check
 * out (bad slots, missing fields, too many, long strings). */
#include "daemon/sandbox.h"
#include "t.h"

int main(void)
{
	struct vm_image in[2] = { { .ref = "docker.io/library/python:3.12", .digest = "sha256:ab",
				    .disk = "/x/a.img", .slot = 0 },
				  { .ref = "r2", .digest = "sha256:cd", .disk = "/x/b.img",
				    .slot = 3 } };
	struct vm_image out[K8_MAX_SLOTS];
	json_auto_t *arr = sb_images_json(in, 2);

	CHECK_EQ_INT(json_array_size(arr), 2);
	CHECK_EQ_INT(sb_images_from_json(arr, out), 2);
	CHECK_STR(out[0].ref, in[0].ref);
	CHECK_STR(out[1].disk, "/x/b.img");
	CHECK_EQ_INT(out[1].slot, 3);
	CHECK(!out[0].mounted);

	/* hostile: slot out of range, a missing field, a wrong type, then more than fit */
	json_auto_t *bad = json_loads(
		"[{\"ref\":\"a\",\"digest\":\"d\",\"disk\":\"k\",\"slot\":4},"
		"{\"ref\":\"a\",\"digest\":\"d\",\"disk\":\"k\",\"slot\":-1},"
		"{\"ref\":\"a\",\"digest\":\"d\",\"slot\":0},"
		"{\"ref\":1,\"digest\":\"d\",\"disk\":\"k\",\"slot\":0},"
		"7,"
		"{\"ref\":\"a\",\"digest\":\"d\",\"disk\":\"k\",\"slot\":0},"
		"{\"ref\":\"b\",\"digest\":\"d\",\"disk\":\"k\",\"slot\":1},"
		"{\"ref\":\"c\",\"digest\":\"d\",\"disk\":\"k\",\"slot\":2},"
		"{\"ref\":\"d\",\"digest\":\"d\",\"disk\":\"k\",\"slot\":3},"
		"{\"ref\":\"e\",\"digest\":\"d\",\"disk\":\"k\",\"slot\":0}]", 0, NULL);
	CHECK(bad != NULL);
	CHECK_EQ_INT(sb_images_from_json(bad, out), K8_MAX_SLOTS);
	CHECK_STR(out[0].ref, "a");
	CHECK_STR(out[3].ref, "d");
	/* not an array: none */
	json_auto_t *obj = json_object();
	CHECK_EQ_INT(sb_images_from_json(obj, out), 0);
	CHECK_EQ_INT(sb_images_from_json(NULL, out), 0);
	/* a string longer than its field is cut, never overflows */
	char *big = xmalloc(10000);
	memset(big, 'x', 9999);
	big[9999] = '\0';
	json_auto_t *one = json_pack("[{s:s,s:s,s:s,s:i}]", "ref", big, "digest", big, "disk", big,
				     "slot", 1);
	CHECK_EQ_INT(sb_images_from_json(one, out), 1);
	CHECK_EQ_INT(strlen(out[0].ref), sizeof(out[0].ref) - 1);
	CHECK_EQ_INT(strlen(out[0].digest), sizeof(out[0].digest) - 1);
	free(big);
	return T_DONE();
}
