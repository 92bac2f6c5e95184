/* SPDX-License-Identifier: Apache-2.0 */
/* test_registry.c - the registry client's pure parts: WWW-Authenticate challenges, the
 * linux/amd64 picker of image indexes and the plain-http rule. */
#include "image/image_int.h"
#include "t.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define E64 "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

static void test_challenge(void)
{
	struct registry_challenge c;

	CHECK_EQ_INT(registry_parse_challenge("Bearer realm=\"https://auth.docker.io/token\","
					      "service=\"registry.docker.io\",scope=\"repository:"
					      "library/python:pull\"", &c), 0);
	CHECK_STR(c.scheme, "bearer");
	CHECK_STR(c.realm, "https://auth.docker.io/token");
	CHECK_STR(c.service, "registry.docker.io");
	CHECK_STR(c.scope, "repository:library/python:pull");

	/* Case, spaces after commas, unquoted values, escapes, unknown keys. */
	CHECK_EQ_INT(registry_parse_challenge("bearer Realm=https://r.example/t, service=x, "
					      "error=\"insufficient_scope\", scope=\"a\\\"b\"", &c), 0);
	CHECK_STR(c.realm, "https://r.example/t");
	CHECK_STR(c.service, "x");
	CHECK_STR(c.scope, "a\"b");

	/* Two scopes in one value (space separated inside quotes). */
	CHECK_EQ_INT(registry_parse_challenge("Bearer realm=\"https://x/t\",scope=\"repository:a:"
					      "pull repository:b:pull\"", &c), 0);
	CHECK_STR(c.scope, "repository:a:pull repository:b:pull");

	CHECK_EQ_INT(registry_parse_challenge("Basic realm=\"Registry Realm\"", &c), 0);
	CHECK_STR(c.scheme, "basic");
	CHECK_STR(c.realm, "Registry Realm");

	CHECK_EQ_INT(registry_parse_challenge("Digest realm=\"x\"", &c), -ENOTSUP);
	CHECK_EQ_INT(registry_parse_challenge("Bearer service=\"x\"", &c), -EINVAL);   /* no realm */
	CHECK_EQ_INT(registry_parse_challenge("Bearer realm=\"unterminated", &c), -EINVAL);
	CHECK_EQ_INT(registry_parse_challenge("Bearer realm", &c), -EINVAL);
	CHECK_EQ_INT(registry_parse_challenge("", &c), -EINVAL);
	CHECK_EQ_INT(registry_parse_challenge(NULL, &c), -EINVAL);
	{
		char big[3000];
		memset(big, 'a', sizeof(big));
		memcpy(big, "Bearer realm=\"", 14);
		big[sizeof(big) - 2] = '"';
		big[sizeof(big) - 1] = '\0';
		CHECK_EQ_INT(registry_parse_challenge(big, &c), -EINVAL);   /* too long, no overflow */
	}
}

static void test_same_origin(void)
{
	CHECK(registry_same_origin("http://127.0.0.1:5000/v2/x/blobs/sha256:a", "http://127.0.0.1:5000"));
	CHECK(registry_same_origin("https://Registry.Example/v2/", "https://registry.example:443"));
	CHECK(registry_same_origin("http://[::1]:80/x", "http://[::1]"));
	CHECK(registry_same_origin("https://u:p@r.example/x", "https://r.example"));
	/* another host name for the same address, another port, another scheme */
	CHECK(!registry_same_origin("http://localhost:5000/x", "http://127.0.0.1:5000"));
	CHECK(!registry_same_origin("http://127.0.0.1:5001/x", "http://127.0.0.1:5000"));
	CHECK(!registry_same_origin("http://r.example/x", "https://r.example"));
	CHECK(!registry_same_origin("https://r.example.evil/x", "https://r.example"));
	CHECK(!registry_same_origin("https://r.example@evil.example/x", "https://r.example"));
	/* malformed: never the same */
	CHECK(!registry_same_origin("r.example/x", "https://r.example"));
	CHECK(!registry_same_origin("https://r.example:99999/", "https://r.example:99999"));
	CHECK(!registry_same_origin("https://[::1/", "https://[::1/"));
	CHECK(!registry_same_origin("ftp://r.example/", "ftp://r.example/"));
	CHECK(!registry_same_origin(NULL, "https://r.example"));
}

static void test_platform(void)
{
	char hex[65], avail[200];
	int64_t size = -1;
	json_t *idx;

	idx = json_loads("{\"manifests\": ["
			 "{\"digest\": \"sha256:" E64 "\", \"size\": 10, \"platform\": {\"os\": "
			 "\"linux\", \"architecture\": \"arm64\", \"variant\": \"v8\"}},"
			 "{\"digest\": \"sha256:" D64 "\", \"size\": 523, \"platform\": {\"os\": "
			 "\"linux\", \"architecture\": \"amd64\"}}]}", 0, NULL);
	CHECK_EQ_INT(registry_pick_platform(idx, hex, &size, avail, sizeof(avail)), 0);
	CHECK_STR(hex, D64);
	CHECK_EQ_INT(size, 523);
	json_decref(idx);

	idx = json_loads("{\"manifests\": ["
			 "{\"digest\": \"sha256:" E64 "\", \"size\": 10, \"platform\": {\"os\": "
			 "\"linux\", \"architecture\": \"arm64\", \"variant\": \"v8\"}},"
			 "{\"digest\": \"sha256:" D64 "\", \"size\": 5, \"platform\": {\"os\": "
			 "\"windows\", \"architecture\": \"amd64\"}},"
			 "{\"digest\": \"sha256:" D64 "\", \"size\": 5}]}", 0, NULL);
	CHECK_EQ_INT(registry_pick_platform(idx, hex, &size, avail, sizeof(avail)), -ENOENT);
	CHECK_STR(avail, "linux/arm64/v8, windows/amd64, ?/?");
	/* A tiny buffer is truncated, not overrun. */
	CHECK_EQ_INT(registry_pick_platform(idx, hex, &size, avail, 8), -ENOENT);
	CHECK(strlen(avail) < 8);
	json_decref(idx);

	idx = json_loads("{\"manifests\": [{\"digest\": \"sha512:" D64 "\", \"size\": 1, "
			 "\"platform\": {\"os\": \"linux\", \"architecture\": \"amd64\"}}]}", 0, NULL);
	CHECK_EQ_INT(registry_pick_platform(idx, hex, &size, avail, sizeof(avail)), -EINVAL);
	json_decref(idx);
	idx = json_loads("{\"manifests\": [{\"digest\": \"sha256:" D64 "\", \"size\": -1, "
			 "\"platform\": {\"os\": \"linux\", \"architecture\": \"amd64\"}}]}", 0, NULL);
	CHECK_EQ_INT(registry_pick_platform(idx, hex, &size, avail, sizeof(avail)), -EINVAL);
	json_decref(idx);
	idx = json_loads("{\"manifests\": 3}", 0, NULL);
	CHECK_EQ_INT(registry_pick_platform(idx, hex, &size, avail, sizeof(avail)), -EINVAL);
	json_decref(idx);
}

static void test_plain_http(void)
{
	static const char *const insecure[] = { "reg.lan:5000", "other.lan", NULL };

	CHECK(registry_plain_http_ok("127.0.0.1:5000", NULL));
	CHECK(registry_plain_http_ok("127.3.4.5", NULL));
	CHECK(registry_plain_http_ok("localhost:5000", NULL));
	CHECK(registry_plain_http_ok("localhost", NULL));
	CHECK(registry_plain_http_ok("[::1]:5000", NULL));
	CHECK(!registry_plain_http_ok("128.0.0.1:5000", NULL));
	CHECK(!registry_plain_http_ok("127.0.0.1.evil.com", NULL));
	CHECK(!registry_plain_http_ok("localhost.evil.com:5000", NULL));
	CHECK(!registry_plain_http_ok("docker.io", NULL));
	CHECK(!registry_plain_http_ok("[::2]:5000", NULL));
	CHECK(registry_plain_http_ok("reg.lan:5000", insecure));
	CHECK(!registry_plain_http_ok("reg.lan:5001", insecure));
	CHECK(registry_plain_http_ok("other.lan:443", insecure));
	CHECK(!registry_plain_http_ok("reg.lan", insecure));
}

int main(void)
{
	test_challenge();
	test_same_origin();
	test_platform();
	test_plain_http();
	return T_DONE();
}
