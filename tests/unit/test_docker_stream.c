/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_stream.c - multiplexed stream framing (moby's stdcopy layout), the
 * X-Docker-Container-Path-Stat header and Go FileMode conversions. */
#include "docker/stream.h"
#include "t.h"

#include <sys/stat.h>

struct sink {
	char out[256], err[256];
	size_t no, ne;
	int frames;
};

static int collect(void *ctx, enum ds_type t, const uint8_t *p, size_t n, bool end)
{
	struct sink *s = ctx;
	char *dst = t == DS_STDOUT ? s->out : s->err;
	size_t *len = t == DS_STDOUT ? &s->no : &s->ne;
	if (*len + n >= sizeof(s->out))
		return -ENOSPC;
	memcpy(dst + *len, p, n);
	*len += n;
	s->frames += end;
	return 0;
}

static void test_frames(void)
{
	uint8_t buf[64];
	size_t n = ds_encode(buf, DS_STDOUT, "hello\n", 6);
	const uint8_t want[] = { 1, 0, 0, 0, 0, 0, 0, 6, 'h' };
	CHECK_EQ_INT(n, 14);
	CHECK(!memcmp(buf, want, sizeof(want)));
	n += ds_encode(buf + n, DS_STDERR, "oops", 4);
	n += ds_encode(buf + n, DS_STDOUT, "", 0);
	ds_header(buf + n, DS_STDOUT, 0x01020304);
	CHECK(buf[n + 4] == 1 && buf[n + 5] == 2 && buf[n + 6] == 3 && buf[n + 7] == 4);

	/* Every split of the same bytes decodes the same. */
	for (size_t step = 1; step <= n; step++) {
		struct ds_decoder d;
		struct sink s = { 0 };
		struct k8_err e = { 0 };
		int rc = 0;
		ds_decoder_init(&d, 1 << 20, 0);
		for (size_t off = 0; off < n && !rc; off += step)
			rc = ds_decode(&d, buf + off, off + step > n ? n - off : step, collect, &s, &e);
		CHECK_EQ_INT(rc, 0);
		CHECK(s.no == 6 && !memcmp(s.out, "hello\n", 6));
		CHECK(s.ne == 4 && !memcmp(s.err, "oops", 4));
		CHECK_EQ_INT(s.frames, 3);
		CHECK(ds_decoder_idle(&d));
	}
	/* A partial frame is not idle. */
	struct ds_decoder d;
	struct sink s = { 0 };
	struct k8_err e = { 0 };
	ds_decoder_init(&d, 1 << 20, 0);
	CHECK_EQ_INT(ds_decode(&d, buf, 10, collect, &s, &e), 0);
	CHECK(!ds_decoder_idle(&d));
}

static void test_bad_frames(void)
{
	const uint8_t bad_type[] = { 7, 0, 0, 0, 0, 0, 0, 1, 'x' };
	const uint8_t bad_pad[] = { 1, 0, 1, 0, 0, 0, 0, 1, 'x' };
	const uint8_t huge[] = { 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff };
	const uint8_t stdin_frame[] = { 0, 0, 0, 0, 0, 0, 0, 1, 'x' };
	struct ds_decoder d;
	struct sink s = { 0 };
	struct k8_err e = { 0 };

	ds_decoder_init(&d, 1 << 20, 0);
	CHECK_EQ_INT(ds_decode(&d, bad_type, sizeof(bad_type), collect, &s, &e), -EBADMSG);
	CHECK(strstr(e.msg, "bad frame header"));
	CHECK_EQ_INT(ds_decode(&d, bad_pad, 1, collect, &s, &e), -EBADMSG);   /* stays failed */
	ds_decoder_init(&d, 1 << 20, 0);
	CHECK_EQ_INT(ds_decode(&d, bad_pad, sizeof(bad_pad), collect, &s, &e), -EBADMSG);
	ds_decoder_init(&d, 1 << 20, 0);
	CHECK_EQ_INT(ds_decode(&d, huge, sizeof(huge), collect, &s, &e), -EBADMSG);
	ds_decoder_init(&d, 1 << 20, 0);
	CHECK_EQ_INT(ds_decode(&d, stdin_frame, sizeof(stdin_frame), collect, &s, &e), -EBADMSG);
	ds_decoder_init(&d, 1 << 20, 1u << DS_STDIN);
	s.no = 0;
	CHECK_EQ_INT(ds_decode(&d, stdin_frame, sizeof(stdin_frame), collect, &s, &e), 0);
	CHECK(s.ne == 1);   /* the sink files non-stdout under err */
	/* The callback's error stops decoding. */
	uint8_t big[300];
	ds_header(big, DS_STDOUT, 292);
	memset(big + 8, 'a', 292);
	struct sink s2 = { 0 };
	ds_decoder_init(&d, 1 << 20, 0);
	CHECK_EQ_INT(ds_decode(&d, big, sizeof(big), collect, &s2, &e), -ENOSPC);
}

static void test_modes(void)
{
	CHECK_EQ_INT(ds_gomode_from_posix(S_IFDIR | 0755), (long long)(GO_MODE_DIR | 0755));
	CHECK_EQ_INT(ds_gomode_from_posix(S_IFDIR | 0755), 2147484141LL);  /* what dockerd sends */
	CHECK_EQ_INT(ds_gomode_from_posix(S_IFREG | 0644), 0644);
	CHECK_EQ_INT(ds_gomode_from_posix(S_IFLNK | 0777), (long long)(GO_MODE_SYMLINK | 0777));
	CHECK_EQ_INT(ds_gomode_from_posix(S_IFCHR | 0666),
		     (long long)(GO_MODE_DEVICE | GO_MODE_CHARDEVICE | 0666));
	CHECK_EQ_INT(ds_gomode_from_posix(S_IFREG | S_ISUID | 0755),
		     (long long)(GO_MODE_SETUID | 0755));
	CHECK_EQ_INT(ds_gomode_from_posix(S_IFDIR | S_ISVTX | 0777),
		     (long long)(GO_MODE_DIR | GO_MODE_STICKY | 0777));
	const mode_t all[] = { S_IFREG | 0644, S_IFDIR | 01777, S_IFLNK | 0777, S_IFCHR | 0600,
			       S_IFBLK | 0660, S_IFIFO | 0600, S_IFSOCK | 0755,
			       S_IFREG | S_ISGID | S_ISUID | 0750 };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		CHECK_EQ_INT(ds_posix_from_gomode(ds_gomode_from_posix(all[i])), all[i]);
}

static void test_time(void)
{
	char t[40];
	int64_t sec;
	int32_t ns;
	ds_rfc3339(0, 0, t);
	CHECK_STR(t, "1970-01-01T00:00:00Z");
	ds_rfc3339(1700000000, 120000000, t);
	CHECK_STR(t, "2023-11-14T22:13:20.12Z");
	ds_rfc3339(951782400, 0, t);
	CHECK_STR(t, "2000-02-29T00:00:00Z");
	ds_rfc3339(-1, 0, t);
	CHECK_STR(t, "1969-12-31T23:59:59Z");
	CHECK_EQ_INT(ds_parse_rfc3339("2023-11-14T22:13:20.12Z", &sec, &ns), 0);
	CHECK_EQ_INT(sec, 1700000000);
	CHECK_EQ_INT(ns, 120000000);
	CHECK_EQ_INT(ds_parse_rfc3339("2023-11-14T23:13:20+01:00", &sec, &ns), 0);
	CHECK_EQ_INT(sec, 1700000000);
	CHECK_EQ_INT(ds_parse_rfc3339("2023-11-14T22:13:20.123456789123Z", &sec, &ns), 0);
	CHECK_EQ_INT(ns, 123456789);
	CHECK_EQ_INT(ds_parse_rfc3339("2023-02-29T00:00:00Z", &sec, &ns), -EINVAL);
	CHECK_EQ_INT(ds_parse_rfc3339("2023-11-14 22:13:20Z", &sec, &ns), -EINVAL);
	CHECK_EQ_INT(ds_parse_rfc3339("2023-11-14T22:13:20", &sec, &ns), -EINVAL);
	CHECK_EQ_INT(ds_parse_rfc3339("2023-11-14T22:13:20Zjunk", &sec, &ns), -EINVAL);
}

static void test_path_stat(void)
{
	char nm[] = "hostname", lt[] = "";
	struct ds_path_stat st = { .name = nm, .size = 13, .mode = 0644,
				   .mtime_sec = 1700000000, .link_target = lt }, back;
	struct k8_err e = { 0 };
	char *h = ds_path_stat_encode(&st);
	CHECK(h != NULL);
	/* base64 of the JSON dockerd writes for the same file */
	uint8_t raw[256];
	ssize_t n = ds_b64_decode(h, strlen(h), raw);
	CHECK(n > 0);
	raw[n > 0 ? n : 0] = '\0';
	CHECK_STR((char *)raw, "{\"name\":\"hostname\",\"size\":13,\"mode\":420,"
		  "\"mtime\":\"2023-11-14T22:13:20Z\",\"linkTarget\":\"\"}");
	CHECK_EQ_INT(ds_path_stat_decode(h, strlen(h), &back, &e), 0);
	CHECK_STR(back.name, "hostname");
	CHECK_EQ_INT(back.size, 13);
	CHECK_EQ_INT(back.mode, 0644);
	CHECK_EQ_INT(back.mtime_sec, 1700000000);
	ds_path_stat_free(&back);
	free(h);

	/* A directory as dockerd reports it (mode with the Go dir bit), unknown field. */
	const char *js = "{\"name\":\"etc\",\"size\":4096,\"mode\":2147484141,"
			 "\"mtime\":\"2024-01-02T03:04:05.5+01:00\",\"linkTarget\":\"\",\"x\":1}";
	char enc[512];
	ds_b64_encode((const uint8_t *)js, strlen(js), enc);
	CHECK_EQ_INT(ds_path_stat_decode(enc, strlen(enc), &back, &e), 0);
	CHECK(back.mode & GO_MODE_DIR);
	CHECK_EQ_INT(ds_posix_from_gomode(back.mode), S_IFDIR | 0755);
	CHECK_EQ_INT(back.mtime_nsec, 500000000);
	ds_path_stat_free(&back);

	const char *bad[] = {
		"{\"name\":1,\"size\":1,\"mode\":1,\"mtime\":\"1970-01-01T00:00:00Z\"}",
		"{\"name\":\"a\",\"size\":-1,\"mode\":1,\"mtime\":\"1970-01-01T00:00:00Z\"}",
		"{\"name\":\"a\",\"size\":1,\"mode\":4294967296,\"mtime\":\"1970-01-01T00:00:00Z\"}",
		"{\"name\":\"a\",\"size\":1,\"mode\":1,\"mtime\":\"yesterday\"}",
		"{\"name\":\"a\\u0000b\",\"size\":1,\"mode\":1,\"mtime\":\"1970-01-01T00:00:00Z\"}",
		"[1,2]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ds_b64_encode((const uint8_t *)bad[i], strlen(bad[i]), enc);
		memset(&e, 0, sizeof(e));
		CHECK_EQ_INT(ds_path_stat_decode(enc, strlen(enc), &back, &e), -EBADMSG);
		CHECK(back.name == NULL && back.link_target == NULL);
	}
	CHECK_EQ_INT(ds_path_stat_decode("!!!!", 4, &back, &e), -EBADMSG);
	CHECK_EQ_INT(ds_path_stat_decode("abc", 3, &back, &e), -EBADMSG);
	CHECK_EQ_INT(ds_path_stat_decode("a", DS_STAT_HDR_MAX + 1, &back, &e), -E2BIG);
	uint8_t o[8];
	CHECK_EQ_INT(ds_b64_decode("YQ==", 4, o), 1);
	CHECK_EQ_INT(ds_b64_decode("YWI=", 4, o), 2);
	CHECK_EQ_INT(ds_b64_decode("Y===", 4, o), -EINVAL);
	CHECK_EQ_INT(ds_b64_decode("YQ==YQ==", 8, o), -EINVAL);
}

static void test_registry_auth(void)
{
	struct k8_err e = { 0 };
	char basic[64];

	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(ds_registry_auth("eyJ1c2VybmFtZSI6Imt1c2VyIiwicGFzc3dvcmQiOiJwPz5-czp3Iiwic2VydmVyYWRkcmVzcyI6IjEyNy4wLjAuMTo1MDAwIn0=", basic, sizeof(basic), &e), 0);
	CHECK_STR(basic, "kuser:p?>~s:w");
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(ds_registry_auth("eyJ1c2VybmFtZSI6Imt1c2VyIiwicGFzc3dvcmQiOiJwPz5+czp3In0", basic, sizeof(basic), &e), 0);
	CHECK_STR(basic, "kuser:p?>~s:w");
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(ds_registry_auth("e30=", basic, sizeof(basic), &e), 0);
	CHECK_STR(basic, "");
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(ds_registry_auth("eyJpZGVudGl0eXRva2VuIjoidG9rIn0=", basic, sizeof(basic), &e), 0);
	CHECK_STR(basic, "");
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(ds_registry_auth("eyJ1c2VybmFtZSI6ImE6YiIsInBhc3N3b3JkIjoieCJ9", basic, sizeof(basic), &e), -EINVAL);
	CHECK_STR(basic, "");
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(ds_registry_auth("WzFd", basic, sizeof(basic), &e), -EINVAL);
	CHECK_STR(basic, "");
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(ds_registry_auth("!!!", basic, sizeof(basic), &e), -EINVAL);
	CHECK_STR(basic, "");
	/* too long for the buffer: refused, nothing half-written */
	CHECK_EQ_INT(ds_registry_auth("eyJ1c2VybmFtZSI6Imt1c2VyIiwicGFzc3dvcmQiOiJwPz5-czp3Iiwic2VydmVyYWRkcmVzcyI6IjEyNy4wLjAuMTo1MDAwIn0=", basic, 8, &e), -EINVAL);
	CHECK_STR(basic, "");
}

int main(void)
{
	test_frames();
	test_bad_frames();
	test_modes();
	test_time();
	test_path_stat();
	test_registry_auth();
	return T_DONE();
}
