/* SPDX-License-Identifier: Apache-2.0 */
/* test_image_ref.c - image reference normalisation: Docker's rules, good and bad input. */
#include "image/image.h"
#include "t.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const struct {
	const char *in, *out;
} good[] = {
	{ "python", "docker.io/library/python:latest" },
	{ "python:3.12-slim", "docker.io/library/python:3.12-slim" },
	{ "org/x", "docker.io/org/x:latest" },
	{ "org/sub/x:1.0", "docker.io/org/sub/x:1.0" },
	{ "docker.io/python", "docker.io/library/python:latest" },
	{ "index.docker.io/library/python:3", "docker.io/library/python:3" },
	{ "ghcr.io/org/tool@sha256:" D64, "ghcr.io/org/tool@sha256:" D64 },
	{ "ghcr.io/org/tool:v1@sha256:" D64, "ghcr.io/org/tool:v1@sha256:" D64 },
	{ "python@sha256:" D64, "docker.io/library/python@sha256:" D64 },
	{ "127.0.0.1:5000/library/python:3.12-slim", "127.0.0.1:5000/library/python:3.12-slim" },
	{ "localhost/x", "localhost/x:latest" },
	{ "localhost:5000/a/b:t", "localhost:5000/a/b:t" },
	{ "registry.example.com/team/app", "registry.example.com/team/app:latest" },
	{ "my-registry.io:443/a", "my-registry.io:443/a:latest" },
	{ "[::1]:5000/x:y", "[::1]:5000/x:y" },
	{ "ab_c/x", "docker.io/ab_c/x:latest" },
	{ "x:_T.a-G", "docker.io/library/x:_T.a-G" },
	{ "Upper.io/x", "Upper.io/x:latest" },
};

static const char *const bad[] = {
	"", ":tag", "python:", "Python", "org/Python", "python:-x", "python:.x",
	"python:" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",   /* 129-character tag */
	"python@sha256:abc", "python@sha512:" D64, "python@" D64, "python@sha256:" D64 "0",
	"python@sha256:" "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
	"a//b", "a/", "/a", "a b", "a\tb", "a\nb", "-a", "a-", "a..b", "a___b", "a_-b",
	"ex-.com/x", "-ex.com/x", "ex.com:/x", "ex.com:99999x/x", "ex.com./x",
	"x@sha256:" D64 "@sha256:" D64, D64, "caf\xc3\xa9", "a:b:c",
	"a.b_c/x",   /* has a '.', so a registry host, and '_' is not allowed in one */
};

int main(void)
{
	char out[512];

	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		struct k8_err e = { 0 };
		int r = image_ref_normalize(good[i].in, out, sizeof(out), &e);
		if (r)
			fprintf(stderr, "'%s': %s\n", good[i].in, e.msg);
		CHECK_EQ_INT(r, 0);
		CHECK_STR(r ? "" : out, good[i].out);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct k8_err e = { 0 };
		int r = image_ref_normalize(bad[i], out, sizeof(out), &e);
		if (!r)
			fprintf(stderr, "'%s' was accepted as '%s'\n", bad[i], out);
		CHECK_EQ_INT(r, -EINVAL);
		CHECK(strstr(e.msg, "invalid image reference") != NULL);
	}
	/* Messages name the problem. */
	{
		struct k8_err e = { 0 };
		image_ref_normalize("org/Python", out, sizeof(out), &e);
		CHECK(strstr(e.msg, "lowercase") != NULL);
	}
	{
		struct k8_err e = { 0 };
		image_ref_normalize("python:-x", out, sizeof(out), &e);
		CHECK(strstr(e.msg, "bad tag '-x'") != NULL);
	}
	{
		struct k8_err e = { 0 };
		image_ref_normalize("x@sha512:" D64, out, sizeof(out), &e);
		CHECK(strstr(e.msg, "only sha256") != NULL);
	}
	/* Too small an output buffer is an error, not a truncated name. */
	{
		struct k8_err e = { 0 };
		CHECK(image_ref_normalize("python", out, 10, &e) < 0);
	}
	/* A 255-character name is fine, 256 is not. */
	{
		char name[300];
		struct k8_err e = { 0 };
		memset(name, 'a', sizeof(name));
		memcpy(name, "example.com/", 12);
		name[255] = '\0';
		CHECK_EQ_INT(image_ref_normalize(name, out, sizeof(out), &e), 0);
		name[255] = 'a';
		name[256] = '\0';
		CHECK_EQ_INT(image_ref_normalize(name, out, sizeof(out), &e), -EINVAL);
	}
	return T_DONE();
}
