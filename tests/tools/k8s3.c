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
 *   k8s3 snap-push NAME FILE...              the files as a snapshot of the chunk store
 *   k8s3 snap-pull NAME DIR                  (src/store/xfer.c), K8S3_KEY (64 hex) encrypts,
 *   k8s3 snap-gc GRACE_S                     K8S3_CHUNK_KIB, K8S3_THREADS
 * Prints one JSON line: what was done, bytes sent or received, requests, retries, ms. */
#include "store/s3.h"
#include "common/worker.h"
#include "store/jobs.h"
#include "store/xfer.h"

#include <libgen.h>
#include <signal.h>

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

static struct xfer x;

static void xfer_setup(const struct s3_conf *c)
{
	const char *k = getenv("K8S3_KEY");

	x.conf = *c;
	x.conf.xml = store_job_xml;
	x.userns = -1;
	x.chunk_size = (getenv("K8S3_CHUNK_KIB") ? (uint32_t)atoi(getenv("K8S3_CHUNK_KIB")) : 1024)
		       << 10;
	x.threads = getenv("K8S3_THREADS") ? atoi(getenv("K8S3_THREADS")) : 4;
	x.level = 3;
	x.what = "k8s3";
	if (k && strlen(k) == 64) {
		uint8_t m[CHUNK_KEY_LEN];
		chunk_unhex(k, m);
		chunk_keys_derive(m, &x.keys);
	}
}

static int snap(int argc, char **argv, const struct s3_conf *c, struct k8_err *err)
{
	static struct manifest m;
	struct xfer_result res = { 0 };
	int fds[MF_FILES_MAX], r;

	xfer_setup(c);
	if ((r = xfer_marker(&x, true, err)))
		return r;
	if (!strcmp(argv[1], "snap-push")) {
		snprintf(m.kind, sizeof(m.kind), "paused");
		snprintf(m.sandbox, sizeof(m.sandbox), "%s", argv[2]);
		snprintf(m.config, sizeof(m.config), "{}");
		m.chunk_size = x.chunk_size;
		for (int i = 3; i < argc && i - 3 < MF_FILES_MAX; i++) {
			struct stat st;
			char *dup = xstrdup(argv[i]);
			fds[i - 3] = open(argv[i], O_RDONLY | O_CLOEXEC);
			if (fds[i - 3] < 0 || fstat(fds[i - 3], &st) < 0)
				return k8_err_set(err, -errno, "%s: %s", argv[i], strerror(errno));
			manifest_file(&m, basename(dup), (uint64_t)st.st_size, st.st_mode & 0777);
			free(dup);
		}
		r = xfer_push(&x, &m, fds, &res, err);
	} else if (!strcmp(argv[1], "snap-pull")) {
		if ((r = xfer_manifest_get(&x, "paused", argv[2], &m, err)))
			return r;
		for (uint32_t i = 0; i < m.nfiles; i++) {
			char *p = xasprintf("%s/%s", argv[3], m.files[i].path);
			fds[i] = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
			free(p);
			if (fds[i] < 0)
				return k8_err_set(err, -errno, "%s: %s", m.files[i].path, strerror(errno));
		}
		r = xfer_pull(&x, &m, fds, &res, err);
	} else if (!strcmp(argv[1], "snap-gc")) {
		struct xfer_gc g;
		r = xfer_gc(&x, strtoull(argv[2], NULL, 10), &g, err);
		if (!r)
			printf("{\"op\":\"gc\",\"manifests\":%" PRIu64 ",\"live\":%" PRIu64
			       ",\"removed\":%" PRIu64 ",\"young\":%" PRIu64 "}\n", g.manifests,
			       g.live, g.removed, g.kept_young);
		return r;
	} else {
		return k8_err_set(err, -EINVAL, "unknown command %s", argv[1]);
	}
	if (!r)
		printf("{\"op\":\"%s\",\"bytes\":%" PRIu64 ",\"data\":%" PRIu64 ",\"chunks\":%"
		       PRIu64 ",\"chunks_sent\":%" PRIu64 ",\"sent\":%" PRIu64 ",\"requests\":%"
		       PRIu64 ",\"ms\":%" PRIu64 "}\n", argv[1], res.bytes, res.data, res.chunks,
		       res.chunks_sent, res.sent, res.requests, res.ms);
	return r;
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

	worker_main(argc, argv);        /* the snapshot commands' workers are this binary */
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
	signal(SIGPIPE, SIG_IGN);
	if (!strncmp(argv[1], "snap-", 5)) {
		r = snap(argc, argv, &c, &err);
		return r ? fail(&err) : 0;
	}
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
