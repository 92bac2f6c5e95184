/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_s3.c - kosa8's S3 client (src/store/s3.c): its pure parts (settings, keys,
 * URLs of both addressings, the query encoding, the backoff), then against a server on
 * 127.0.0.1 that answers as scripted: a 503 and a dropped connection retried, a 404 and
 * a 403 named with S3's own code, a download cut short taken up with a Range from where
 * it stopped, a server that sends more than asked refused, the signature's headers sent.
 * (Against a real S3 server, with every signature checked by the AWS SDK's signer:
 * tests/integration/test_71_store_s3.py.) */
#include "store/s3.h"
#include "t.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_conf(void)
{
	struct s3_conf c = { .endpoint = "http://127.0.0.1:9000", .bucket = "snaps",
			     .region = "us-east-1", .access_key = "a", .secret_key = "s",
			     .path_style = true };
	struct k8_err err = { 0 };
	char url[512];

	CHECK_EQ_INT(s3_conf_check(&c, &err), 0);
	static const char *bad_endpoints[] = {
		"ftp://x", "http://", "http://a:0", "http://a:65536", "http://a:12x",
		"http://user@host", "http://h/path", "http://h?q", "http://-h", "http://h h",
		"file:///etc/passwd",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad_endpoints); i++) {
		struct s3_conf b = c;
		snprintf(b.endpoint, sizeof(b.endpoint), "%s", bad_endpoints[i]);
		memset(&err, 0, sizeof(err));
		int r = s3_conf_check(&b, &err);
		if (r != -EINVAL)
			fprintf(stderr, "endpoint %s passed\n", bad_endpoints[i]);
		CHECK_EQ_INT(r, -EINVAL);
	}
	static const char *good_endpoints[] = {
		"https://s3.eu-west-1.amazonaws.com", "http://[::1]:9000", "http://localhost/",
	};
	for (size_t i = 0; i < ARRAY_SIZE(good_endpoints); i++) {
		struct s3_conf b = c;
		snprintf(b.endpoint, sizeof(b.endpoint), "%s", good_endpoints[i]);
		CHECK_EQ_INT(s3_conf_check(&b, &err), 0);
	}
	static const char *bad_buckets[] = { "ab", "Snaps", "-ab", "ab-", "a..b", "a_b" };
	for (size_t i = 0; i < ARRAY_SIZE(bad_buckets); i++) {
		struct s3_conf b = c;
		snprintf(b.bucket, sizeof(b.bucket), "%s", bad_buckets[i]);
		CHECK_EQ_INT(s3_conf_check(&b, &err), -EINVAL);
	}
	{       /* dots and virtual-hosted https: the certificate would not match */
		struct s3_conf b = c;
		snprintf(b.bucket, sizeof(b.bucket), "my.snaps");
		snprintf(b.endpoint, sizeof(b.endpoint), "https://s3.example.com");
		b.path_style = false;
		CHECK_EQ_INT(s3_conf_check(&b, &err), -EINVAL);
		b.path_style = true;
		CHECK_EQ_INT(s3_conf_check(&b, &err), 0);
	}
	{
		struct s3_conf b = c;
		snprintf(b.region, sizeof(b.region), "US East");
		CHECK_EQ_INT(s3_conf_check(&b, &err), -EINVAL);
		b = c;
		b.secret_key[0] = '\0';
		CHECK_EQ_INT(s3_conf_check(&b, &err), -EINVAL);
	}

	CHECK_EQ_INT(s3_url(&c, "chunks/ab", NULL, url, sizeof(url)), 0);
	CHECK_STR(url, "http://127.0.0.1:9000/snaps/chunks/ab");
	CHECK_EQ_INT(s3_url(&c, "", "list-type=2&prefix=m%2F", url, sizeof(url)), 0);
	CHECK_STR(url, "http://127.0.0.1:9000/snaps?list-type=2&prefix=m%2F");
	c.path_style = false;
	snprintf(c.endpoint, sizeof(c.endpoint), "https://s3.example.com/");
	CHECK_EQ_INT(s3_url(&c, "k", "uploads=", url, sizeof(url)), 0);
	CHECK_STR(url, "https://snaps.s3.example.com/k?uploads=");
	CHECK_EQ_INT(s3_url(&c, "k", NULL, url, 20), -ENAMETOOLONG);
}

static void test_keys_query_backoff(void)
{
	char out[64];

	CHECK(s3_key_ok("chunks/0123abcd"));
	CHECK(s3_key_ok("m/a.b_c-d"));
	CHECK(s3_key_ok(""));
	CHECK(!s3_key_ok("/a"));
	CHECK(!s3_key_ok("a/"));
	CHECK(!s3_key_ok("a//b"));
	CHECK(!s3_key_ok("a/../b"));
	CHECK(!s3_key_ok(".."));
	CHECK(!s3_key_ok("a/./b"));
	CHECK(!s3_key_ok("a b"));
	CHECK(!s3_key_ok("a?b"));
	CHECK(!s3_key_ok("a%2Fb"));
	CHECK(s3_key_ok("a/.../b"));

	CHECK_EQ_INT(s3_query_enc("a-Z_0.~", out, sizeof(out)), 0);
	CHECK_STR(out, "a-Z_0.~");
	CHECK_EQ_INT(s3_query_enc("a/b c+d=e&\xff", out, sizeof(out)), 0);
	CHECK_STR(out, "a%2Fb%20c%2Bd%3De%26%FF");
	CHECK_EQ_INT(s3_query_enc("////", out, 12), -ENAMETOOLONG);

	for (int a = 1; a <= 10; a++) {
		unsigned lo = s3_backoff_ms(200, a, 0), hi = s3_backoff_ms(200, a, 0xffffffffu);
		CHECK(lo <= hi);
		CHECK(hi <= 8000);
	}
	CHECK_EQ_INT(s3_backoff_ms(200, 1, 0), 100);
	CHECK_EQ_INT(s3_backoff_ms(200, 3, 0), 400);
	CHECK_EQ_INT(s3_backoff_ms(200, 20, 0), 4000);
}

/* ---- a scripted server ---- */

enum act { A_OK_BODY, A_503, A_DROP, A_404, A_403, A_CUT, A_RANGE, A_MORE };

static int lfd, port;
static enum act script[16];
static int nscript, step;
static char last_range[64], last_auth[512], last_sha[128];
static const char body[] = "0123456789abcdefghijklmnopqrstuvwxyz";
static const char nosuch[] = "<Error><Code>NoSuchKey</Code><Message>gone\xe2\x80\xae</Message></Error>";
static const char denied[] = "<Error><Code>AccessDenied</Code><Message>no</Message></Error>";

static void hdr_copy(const char *req, const char *name, char *out, size_t n)
{
	const char *p = strcasestr(req, name), *e;
	out[0] = '\0';
	if (!p)
		return;
	p += strlen(name);
	while (*p == ' ')
		p++;
	e = strstr(p, "\r\n");
	snprintf(out, n, "%.*s", (int)(e ? e - p : 0), p);
}

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		char req[8192], out[1024];
		size_t n = 0;
		if (c < 0)
			return NULL;
		for (;;) {      /* keep-alive: one scripted answer per request */
			n = 0;
			while (n < sizeof(req) - 1) {
				ssize_t k = read(c, req + n, sizeof(req) - 1 - n);
				if (k <= 0)
					goto next;
				n += (size_t)k;
				req[n] = 0;
				if (strstr(req, "\r\n\r\n"))
					break;
			}
			hdr_copy(req, "\r\nRange:", last_range, sizeof(last_range));
			hdr_copy(req, "\r\nAuthorization:", last_auth, sizeof(last_auth));
			hdr_copy(req, "\r\nx-amz-content-sha256:", last_sha, sizeof(last_sha));
			enum act a = step < nscript ? script[step] : A_OK_BODY;
			step++;
			size_t bl = strlen(body);
			unsigned long from = 0;
			switch (a) {
			case A_OK_BODY:
				snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
					 "ETag: \"e1\"\r\n\r\n%s", bl, body);
				break;
			case A_503:
				snprintf(out, sizeof(out), "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n");
				break;
			case A_DROP:
				close(c);
				goto next;
			case A_404:
				snprintf(out, sizeof(out), "HTTP/1.1 404 Not Found\r\nContent-Length: %zu\r\n\r\n%s",
					 strlen(nosuch), nosuch);
				break;
			case A_403:
				snprintf(out, sizeof(out), "HTTP/1.1 403 Forbidden\r\nContent-Length: %zu\r\n\r\n%s",
					 strlen(denied), denied);
				break;
			case A_CUT:     /* promises all, sends 10 bytes, leaves */
				snprintf(out, sizeof(out), "HTTP/1.1 206 Partial\r\nContent-Length: %zu\r\n\r\n"
					 "%.10s", bl, body);
				(void)!write(c, out, strlen(out));
				close(c);
				goto next;
			case A_RANGE:   /* honours "bytes=N-" */
				sscanf(last_range, "bytes=%lu", &from);
				if (from > bl)
					from = bl;
				snprintf(out, sizeof(out), "HTTP/1.1 206 Partial\r\nContent-Length: %zu\r\n\r\n%s",
					 bl - from, body + from);
				break;
			case A_MORE:
				snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s%s",
					 2 * bl, body, body);
				break;
			}
			(void)!write(c, out, strlen(out));
		}
next:
		;
	}
}

static void script_set(int n, ...)
{
	va_list ap;
	va_start(ap, n);
	for (int i = 0; i < n; i++)
		script[i] = (enum act)va_arg(ap, int);
	va_end(ap);
	nscript = n;
	step = 0;
}

static void test_server(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	pthread_t t;
	struct s3_stats st = { 0 };
	static struct s3_conf c = { .bucket = "snaps", .region = "us-east-1", .access_key = "AK",
				    .secret_key = "SK", .path_style = true, .retries = 3,
				    .backoff_ms = 1 };
	struct k8_err err = { 0 };
	struct s3 s;
	char *got = NULL;
	size_t n = 0;
	char tmpl[] = "/tmp/k8s3-XXXXXX", buf[64] = "";
	int fd = mkstemp(tmpl);

	unlink(tmpl);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(listen(lfd, 8) == 0);
	getsockname(lfd, (struct sockaddr *)&a, &al);
	port = ntohs(a.sin_port);
	pthread_create(&t, NULL, serve, NULL);
	snprintf(c.endpoint, sizeof(c.endpoint), "http://127.0.0.1:%d", port);
	c.stats = &st;
	s3_init(&s, &c);

	/* a 503, a dropped connection: retried, then the answer */
	script_set(3, A_503, A_DROP, A_OK_BODY);
	CHECK_EQ_INT(s3_get(&s, "k", 1024, &got, &n, &err), 0);
	CHECK_EQ_INT(n, strlen(body));
	CHECK_STR(got, body);
	CHECK_EQ_INT(step, 3);          /* libcurl may retry a dropped reused connection itself */
	CHECK(st.retries >= 1);
	free(got);
	if (strncmp(last_auth, "AWS4-HMAC-SHA256 Credential=AK/", 31))
		fprintf(stderr, "auth: %s\n", last_auth);
	CHECK(!strncmp(last_auth, "AWS4-HMAC-SHA256 Credential=AK/", 31));
	CHECK(strstr(last_auth, "/us-east-1/s3/aws4_request") != NULL);
	CHECK(strstr(last_auth, "SignedHeaders=host;x-amz-content-sha256;x-amz-date") != NULL);
	CHECK_STR(last_sha, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

	/* no more than the retries */
	script_set(5, A_503, A_503, A_503, A_503, A_503);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(s3_get(&s, "k", 1024, &got, &n, &err), -EPROTO);
	CHECK(strstr(err.msg, "HTTP 503") != NULL);
	CHECK_EQ_INT(step, 4);

	/* errors named with S3's code, escaped */
	script_set(1, A_404);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(s3_get(&s, "k", 1024, &got, &n, &err), -ENOENT);
	CHECK(strstr(err.msg, "NoSuchKey: gone") != NULL);
	CHECK(strstr(err.msg, "\xe2\x80\xae") == NULL);   /* a bidi override, escaped */
	script_set(1, A_403);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(s3_head(&s, "k", NULL, &err), -EACCES);

	/* an answer over the cap */
	script_set(1, A_OK_BODY);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(s3_get(&s, "k", 8, &got, &n, &err), -EFBIG);

	/* a ranged download cut after 10 bytes: taken up with a Range from byte 10 */
	script_set(2, A_CUT, A_RANGE);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(s3_get_range(&s, "k", 0, strlen(body), fd, 0, &err), 0);
	CHECK_STR(last_range, "bytes=10-35");
	CHECK_EQ_INT(pread(fd, buf, sizeof(buf) - 1, 0), (ssize_t)strlen(body));
	CHECK_STR(buf, body);

	/* more bytes than the range asked for: refused */
	script_set(1, A_MORE);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(s3_get_range(&s, "k", 0, strlen(body), fd, 0, &err), -EIO);

	/* a PUT signs its body's SHA-256 */
	script_set(1, A_OK_BODY);
	CHECK_EQ_INT(s3_put(&s, "k", "abc", 3, &err), 0);
	CHECK_STR(last_sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

	/* keys kosa8 never makes are refused before anything is sent */
	memset(&err, 0, sizeof(err));
	step = 0;
	CHECK_EQ_INT(s3_put(&s, "../x", "abc", 3, &err), -EINVAL);
	CHECK_EQ_INT(step, 0);
	s3_fini(&s);
	close(fd);
}

int main(void)
{
	test_conf();
	test_keys_query_backoff();
	test_server();
	return T_DONE();
}
