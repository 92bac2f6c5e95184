/* SPDX-License-Identifier: Apache-2.0 */
/* k8s3.c - kosa8's S3 client (src/store/s3.c) from the command line, for the stores'
 * tests and bench: raw objects, no chunks, no manifest, no daemon ("aws s3 cp" of our
 * own, through the same client code). Settings from the environment: K8S3_ENDPOINT,
 * K8S3_BUCKET, K8S3_REGION (us-east-1), K8S3_ACCESS, K8S3_SECRET, K8S3_PATH_STYLE
 * (1: path-style, the default; 0: virtual-hosted), K8S3_CA (a CA file), K8S3_RETRIES.
 *
 *   k8s3 put KEY FILE [PART_MIB [JOURNAL]]   one PUT, or a multipart upload resumed from JOURNAL
 *   k8s3 get KEY FILE [OFFSET LENGTH]        GET (ranged), resumed where it was cut
 *   k8s3 head KEY | rm KEY | ls PREFIX
 * Prints one JSON line: what was done, bytes sent or received, requests, retries, ms. */
#include "store/s3.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void env_copy(char *out, size_t n, const char *name, const char *def)
{
	const char *v = getenv(name);
	snprintf(out, n, "%s", v && *v ? v : def);
}

static int fail(const struct k8_err *err)
{
	fprintf(stderr, "k8s3: %s\n", err->msg);
	return 1;
}

static int ls_one(void *ctx, const struct s3xml_obj *o)
{
	*(uint64_t *)ctx += 1;
	fprintf(stderr, "%s %" PRIu64 "\n", o->key, o->size);
	return 0;
}

int main(int argc, char **argv)
{
	static struct s3_conf c;
	struct s3_stats st = { 0 };
	struct k8_err err = { 0 };
	struct s3 s;
	uint64_t t0 = now_mono_ns(), bytes = 0;
	int r = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: k8s3 put KEY FILE [PART_MIB [JOURNAL]] | get KEY FILE "
			"[OFF LEN] | head KEY | rm KEY | ls PREFIX\n");
		return 2;
	}
	env_copy(c.endpoint, sizeof(c.endpoint), "K8S3_ENDPOINT", "");
	env_copy(c.bucket, sizeof(c.bucket), "K8S3_BUCKET", "");
	env_copy(c.region, sizeof(c.region), "K8S3_REGION", "us-east-1");
	env_copy(c.access_key, sizeof(c.access_key), "K8S3_ACCESS", "");
	env_copy(c.secret_key, sizeof(c.secret_key), "K8S3_SECRET", "");
	env_copy(c.ca_file, sizeof(c.ca_file), "K8S3_CA", "");
	c.path_style = !getenv("K8S3_PATH_STYLE") || strcmp(getenv("K8S3_PATH_STYLE"), "0");
	c.retries = getenv("K8S3_RETRIES") ? atoi(getenv("K8S3_RETRIES")) : -1;
	c.stats = &st;
	if (s3_conf_check(&c, &err))
		return fail(&err);
	s3_init(&s, &c);
	if (!strcmp(argv[1], "put") && argc >= 4) {
		struct stat sb;
		uint64_t part = argc > 4 ? strtoull(argv[4], NULL, 10) << 20 : 64ull << 20;
		int fd = open(argv[3], O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &sb) < 0) {
			perror(argv[3]);
			return 1;
		}
		r = s3_upload_file(&s, argv[2], fd, (uint64_t)sb.st_size, part,
				   argc > 5 ? argv[5] : NULL, NULL, NULL, &bytes, &err);
		close(fd);
	} else if (!strcmp(argv[1], "get") && argc >= 4) {
		uint64_t off = argc > 5 ? strtoull(argv[4], NULL, 10) : 0, len = 0;
		int fd = open(argv[3], O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0) {
			perror(argv[3]);
			return 1;
		}
		if (argc > 5)
			len = strtoull(argv[5], NULL, 10);
		else if ((r = s3_head(&s, argv[2], &len, &err)))
			return fail(&err);
		if (ftruncate(fd, (off_t)len) < 0) {
			perror("ftruncate");
			return 1;
		}
		r = s3_get_range(&s, argv[2], off, len, fd, 0, &err);
		bytes = len;
		close(fd);
	} else if (!strcmp(argv[1], "head")) {
		r = s3_head(&s, argv[2], &bytes, &err);
	} else if (!strcmp(argv[1], "ls")) {
		r = s3_list(&s, argv[2], ls_one, &bytes, &err);
	} else if (!strcmp(argv[1], "rm")) {
		r = s3_delete(&s, argv[2], &err);
	} else {
		fprintf(stderr, "k8s3: unknown command %s\n", argv[1]);
		return 2;
	}
	s3_fini(&s);
	if (r)
		return fail(&err);
	printf("{\"op\":\"%s\",\"bytes\":%" PRIu64 ",\"requests\":%" PRIu64 ",\"retries\":%" PRIu64
	       ",\"sent\":%" PRIu64 ",\"received\":%" PRIu64 ",\"ms\":%" PRIu64 "}\n", argv[1],
	       bytes, st.requests, st.retries, st.bytes_up, st.bytes_down,
	       (now_mono_ns() - t0) / 1000000);
	return 0;
}
