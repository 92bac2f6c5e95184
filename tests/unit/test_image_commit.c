/* SPDX-License-Identifier: Apache-2.0 */
/* test_image_commit.c - images made on the host (src/image/commit.c, docker build):
 * blobs added, a manifest committed and named, cache names left out of the list, a
 * manifest naming a blob the store lacks refused, GC keeping what a held build adds. */
#include "image/image.h"
#include "common/sha.h"
#include "t.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void)
{
	char T[64] = "/tmp/k8-commit-XXXXXX", store[128], lpath[160], lhex[65], chex[65];
	char mdg[80], mdg2[80], bogus[65];
	struct image_store *st = NULL;
	struct k8_err err = { 0 };
	struct image_info info;
	json_t *man, *m2 = NULL, *c2 = NULL, *list = NULL, *v;
	const char *cfg = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":"
			  "[\"A=1\"],\"Cmd\":[\"true\"]},\"rootfs\":{\"type\":\"layers\","
			  "\"diff_ids\":[]}}";
	uint64_t lsize = 0;
	size_t i;
	bool saw_cache = false, saw_named = false;
	int fd;

	if (!mkdtemp(T))
		return 1;
	snprintf(store, sizeof(store), "%s/store", T);
	CHECK(image_store_open(store, &st, &err) == 0);

	/* a layer from a file (an empty tar is two zero blocks) and a config from memory */
	snprintf(lpath, sizeof(lpath), "%s/layer.tar", T);
	fd = open(lpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
	{
		static char z[1024];
		CHECK(write(fd, z, sizeof(z)) == (ssize_t)sizeof(z));
	}
	image_hold(st);
	CHECK(image_blob_add_fd(st, fd, lhex, &lsize, &err) == 0);
	CHECK_EQ_INT(lsize, 1024);
	close(fd);
	CHECK(image_blob_add(st, cfg, strlen(cfg), chex, &err) == 0);
	{
		char want[65];
		sha256_hex(cfg, strlen(cfg), want);
		CHECK_STR(chex, want);
	}
	/* adding the same blob again keeps it */
	CHECK(image_blob_add(st, cfg, strlen(cfg), chex, &err) == 0);

	man = json_pack("{s:i,s:s,s:{s:s,s:s+,s:i},s:[{s:s,s:s+,s:I}]}", "schemaVersion", 2,
			"mediaType", "application/vnd.oci.image.manifest.v1+json", "config",
			"mediaType", "application/vnd.oci.image.config.v1+json", "digest",
			"sha256:", chex, "size", (int)strlen(cfg), "layers", "mediaType",
			"application/vnd.oci.image.layer.v1.tar", "digest", "sha256:", lhex, "size",
			(json_int_t)lsize);
	/* a cache name, then a user's name for the same image */
	CHECK(image_commit(st, man, IMAGE_CACHE_REPO ":0123456789abcdef", mdg, &err) == 0);
	CHECK(image_commit(st, man, "mine", mdg2, &err) == 0);
	CHECK_STR(mdg, mdg2);
	image_release(st);
	CHECK(image_resolve(st, "mine:latest", &info, &err) == 0);
	CHECK_STR(info.digest, mdg);
	CHECK_STR(json_string_value(json_array_get(info.cmd, 0)), "true");
	image_info_clear(&info);
	CHECK(image_read(st, IMAGE_CACHE_REPO ":0123456789abcdef", mdg2, &m2, &c2, &err) == 0);
	CHECK_STR(mdg2, mdg);
	CHECK_STR(json_string_value(json_object_get(c2, "os")), "linux");
	json_decref(m2);
	json_decref(c2);
	CHECK(image_list(st, &list, &err) == 0);
	json_array_foreach(list, i, v) {
		const char *ref = json_string_value(json_object_get(v, "ref"));
		saw_cache |= strstr(ref, "kosa8-build-cache") != NULL;
		saw_named |= !strcmp(ref, "docker.io/library/mine:latest");
	}
	CHECK(!saw_cache && saw_named);
	json_decref(list);

	/* a manifest naming a layer the store does not have: refused, nothing named */
	memset(bogus, 'a', 64);
	bogus[64] = '\0';
	json_array_append_new(json_object_get(man, "layers"),
			      json_pack("{s:s,s:s+,s:i}", "mediaType",
					"application/vnd.oci.image.layer.v1.tar", "digest",
					"sha256:", bogus, "size", 1));
	k8_err_clear(&err);
	CHECK(image_commit(st, man, "other", mdg2, &err) == -EINVAL);
	CHECK(strstr(err.msg, "not stored") != NULL);
	CHECK(image_resolve(st, "other", &info, &err) == -ENOENT);
	/* a digest is not a name for a built image */
	json_array_remove(json_object_get(man, "layers"), 1);
	k8_err_clear(&err);
	CHECK(image_commit(st, man, "x@sha256:0123456789012345678901234567890123456789012345678"
			   "901234567890123", mdg2, &err) == -EINVAL);

	/* removing the user's name keeps the cache's image */
	CHECK(image_remove(st, "mine", &err) == 0);
	CHECK(image_resolve(st, mdg, &info, &err) == 0);
	image_info_clear(&info);
	json_decref(man);
	image_store_close(st);
	rm_rf(T);
	return T_DONE();
}
