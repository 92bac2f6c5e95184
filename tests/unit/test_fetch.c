/* SPDX-License-Identifier: Apache-2.0 */
/* test_fetch.c - kosa8d's HTTP GETs (src/daemon/fetch.c) against a server on 127.0.0.1
 * that answers as told: a status line read within its bytes only; a file streamed, hashed
 * and refused past its cap; a 404's or 500's body never written; a redirect followed and
 * judged by its last answer; an answer in memory under a cap. */
#include "daemon/fetch.h"
#include "common/sha.h"
#include "t.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int lfd;
static int port;

static const char *answer(const char *path)
{
	if (!strcmp(path, "/ok"))
		return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
	if (!strcmp(path, "/big"))
		return "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
		       "0123456789012345678901234567890123456789012345678901234567890123456789"
		       "012345678901234567890123456789";
	if (!strcmp(path, "/redir"))
		return "HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: 4\r\n"
		       "Connection: close\r\n\r\nmove";
	if (!strcmp(path, "/err"))
		return "HTTP/1.1 500 Oops\r\nContent-Length: 4\r\nConnection: close\r\n\r\nboom";
	return "HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnope";
}

/* One request per connection, for as long as the test runs. */
static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		char req[4096], path[256] = "";
		size_t n = 0;
		if (c < 0)
			return NULL;
		while (n < sizeof(req) - 1) {
			ssize_t k = read(c, req + n, sizeof(req) - 1 - n);
			if (k <= 0)
				break;
			n += (size_t)k;
			req[n] = 0;
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		req[n] = 0;
		sscanf(req, "GET %255s", path);
		const char *a = answer(path);
		(void)!write(c, a, strlen(a));
		close(c);
	}
}

static char *url(const char *path)
{
	return xasprintf("http://127.0.0.1:%d%s", port, path);
}

static void test_status_line(void)
{
	const char full[] = "HTTP/1.1 206 Partial Content\r\n";
	CHECK_EQ_INT(fetch_status_line(full, strlen(full)), 206);
	CHECK_EQ_INT(fetch_status_line("HTTP/2 404\r\n", 12), 404);
	/* only the bytes handed over count: a number cut short is what was given */
	CHECK_EQ_INT(fetch_status_line("HTTP/1.1 2001", 10), 2);
	CHECK_EQ_INT(fetch_status_line("HTTP/1.1 99999\r\n", 16), 999);
	CHECK_EQ_INT(fetch_status_line("HTTP/1.1\r\n", 10), 0);
	CHECK_EQ_INT(fetch_status_line("Content-Length: 5\r\n", 19), -1);
	CHECK_EQ_INT(fetch_status_line("HTTP", 4), -1);
}

static void test_file(void)
{
	struct k8_err err = { 0 };
	char hex[65], want[65];
	uint64_t n = 0;
	char tmpl[] = "/tmp/k8-test-fetch-XXXXXX";
	int fd = mkstemp(tmpl);
	cleanup_free char *ok = url("/ok"), *big = url("/big"), *missing = url("/missing");
	cleanup_free char *redir = url("/redir"), *boom = url("/err");

	unlink(tmpl);
	sha256_hex("hello", 5, want);
	CHECK_EQ_INT(fetch_file(ok, "ok", fd, 1024, hex, &n, &err), 0);
	CHECK_STR(hex, want);
	CHECK_EQ_INT(n, 5);
	CHECK_EQ_INT(lseek(fd, 0, SEEK_CUR), 5);
	/* past the cap: refused, and not more than the cap was written */
	CHECK(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
	CHECK_EQ_INT(fetch_file(big, "big", fd, 50, hex, &n, &err), -EFBIG);
	CHECK(strstr(err.msg, "more than 50 bytes") != NULL);
	CHECK(lseek(fd, 0, SEEK_CUR) <= 50);
	/* an error answer's body is never the file's */
	k8_err_clear(&err);
	CHECK(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
	CHECK_EQ_INT(fetch_file(missing, "m", fd, 1024, hex, &n, &err), -ENOENT);
	CHECK_EQ_INT(lseek(fd, 0, SEEK_CUR), 0);
	k8_err_clear(&err);
	CHECK_EQ_INT(fetch_file(boom, "e", fd, 1024, hex, &n, &err), -EPROTO);
	CHECK(strstr(err.msg, "HTTP 500") != NULL);
	CHECK_EQ_INT(lseek(fd, 0, SEEK_CUR), 0);
	/* a redirect: its own body dropped, the target's taken */
	k8_err_clear(&err);
	CHECK_EQ_INT(fetch_file(redir, "r", fd, 1024, hex, &n, &err), 0);
	CHECK_STR(hex, want);
	CHECK_EQ_INT(lseek(fd, 0, SEEK_CUR), 5);
	close(fd);
}

static void test_mem(void)
{
	struct k8_err err = { 0 };
	cleanup_free char *ok = url("/ok"), *big = url("/big");
	struct fetch_buf b = { .max = 64 }, b2 = { .max = 50 };

	CHECK_EQ_INT(fetch_mem(ok, NULL, 10, &b, &err), 200);
	CHECK_EQ_INT(b.n, 5);
	CHECK_STR(b.p, "hello");
	CHECK_EQ_INT(fetch_mem(big, NULL, 10, &b2, &err), -EFBIG);
	CHECK(b2.over);
	free(b.p);
	free(b2.p);
}

int main(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	pthread_t th;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 8) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0) {
		perror("test_fetch: listen");
		return 1;
	}
	port = ntohs(sa.sin_port);
	pthread_create(&th, NULL, serve, NULL);
	test_status_line();
	test_file();
	test_mem();
	return T_DONE();
}
