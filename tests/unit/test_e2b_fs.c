/* SPDX-License-Identifier: Apache-2.0 */
/* test_e2b_fs.c - envd's paths, the guest's listing read back (GNU find's real output,
 * made here with the host's find), EntryInfo, watch events, and the streaming multipart
 * reader of POST /files at every split. */
#include "e2b/fs.h"
#include "e2b/multipart.h"
#include "t.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_paths(void)
{
	char out[4200];
	struct k8_err err = { 0 };
	static const char *const cases[][2] = {
		{ "/a/b", "/a/b" }, { "a", "/home/user/a" }, { "~", "/home/user" },
		{ "~/x/../y", "/home/user/y" }, { "/a/./b//c/", "/a/b/c" }, { "/..", "/" },
		{ "/a/../../b", "/b" }, { "/", "/" }, { "~x", "/home/user/~x" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		CHECK_EQ_INT(e2b_path(cases[i][0], "/home/user", out, sizeof(out), &err), 0);
		CHECK_STR(out, cases[i][1]);
	}
	CHECK_EQ_INT(e2b_path("", "/root", out, sizeof(out), &err), -EINVAL);
	char *big = xmalloc(5000);
	memset(big, 'a', 4999);
	big[0] = '/';
	big[4999] = 0;
	CHECK_EQ_INT(e2b_path(big, "/root", out, sizeof(out), &err), -EINVAL);
	free(big);
}

/* A user named in a query, as the agent takes it. */
static void test_users(void)
{
	struct k8_err err = { 0 };

	CHECK_EQ_INT(e2b_user_check("1000", &err), 0);
	CHECK_EQ_INT(e2b_user_check("www-data", &err), 0);
	CHECK_EQ_INT(e2b_user_check("a.b_c", &err), 0);
	CHECK_EQ_INT(e2b_user_check("a:b", &err), -EINVAL);
	CHECK_EQ_INT(e2b_user_check("-rf", &err), -EINVAL);
	CHECK_EQ_INT(e2b_user_check("a b", &err), -EINVAL);
	CHECK_EQ_INT(e2b_user_check("", &err), -EINVAL);
	CHECK_EQ_INT(e2b_user_check("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", &err), -EINVAL);
}

/* What the guest's helper prints, made by the host's own GNU find over a folder. */
static size_t run_find(const char *dir, const char *depth, uint8_t *buf, size_t max)
{
	int p[2];
	size_t n = 0;
	ssize_t r;

	if (pipe(p))
		return 0;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		execlp("find", "find", dir, "-mindepth", "1", "-maxdepth", depth, "-printf",
		       "%y\\0%s\\0%m\\0%u\\0%g\\0%T@\\0%P\\0%l\\0", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while ((r = read(p[0], buf + n, max - n)) > 0)
		n += (size_t)r;
	close(p[0]);
	waitpid(pid, NULL, 0);
	return n;
}

static void test_listing(void)
{
	char dir[] = "/tmp/k8e2bXXXXXX", path[256];
	uint8_t buf[65536];
	struct e2b_entry *e;
	size_t n, count;
	struct k8_err err = { 0 };

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/file one.txt", dir);
	int fd = open(path, O_CREAT | O_WRONLY, 0640);
	CHECK(fd >= 0 && write(fd, "hello", 5) == 5);
	close(fd);
	snprintf(path, sizeof(path), "%s/sub", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/sub/deep", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/link", dir);
	CHECK(symlink("file one.txt", path) == 0);

	n = run_find(dir, "1", buf, sizeof(buf));
	CHECK_EQ_INT(e2b_listing_parse(buf, n, 100, &e, &count, &err), 0);
	CHECK_EQ_INT(count, 3);
	for (size_t i = 0; i < count; i++) {
		json_t *v = e2b_entry_json(&e[i], "/data");
		const char *name = json_string_value(json_object_get(v, "name"));
		if (!strcmp(name, "file one.txt")) {
			CHECK_STR(json_string_value(json_object_get(v, "type")), "FILE_TYPE_FILE");
			CHECK_STR(json_string_value(json_object_get(v, "path")), "/data/file one.txt");
			CHECK_STR(json_string_value(json_object_get(v, "size")), "5");
			CHECK_EQ_INT(json_integer_value(json_object_get(v, "mode")), 0640);
			CHECK_STR(json_string_value(json_object_get(v, "permissions")), "-rw-r-----");
		} else if (!strcmp(name, "sub")) {
			CHECK_STR(json_string_value(json_object_get(v, "type")), "FILE_TYPE_DIRECTORY");
			CHECK_STR(json_string_value(json_object_get(v, "permissions")), "drwxr-xr-x");
		} else {
			CHECK_STR(name, "link");
			CHECK_STR(json_string_value(json_object_get(v, "symlinkTarget")), "file one.txt");
			CHECK_STR(json_string_value(json_object_get(v, "permissions")), "Lrwxrwxrwx");
		}
		CHECK(json_string_length(json_object_get(v, "modifiedTime")) >= 20);
		json_decref(v);
	}
	e2b_entries_free(e, count);
	n = run_find(dir, "2", buf, sizeof(buf));
	CHECK_EQ_INT(e2b_listing_parse(buf, n, 100, &e, &count, &err), 0);
	CHECK_EQ_INT(count, 4);
	e2b_entries_free(e, count);
	CHECK_EQ_INT(e2b_listing_parse(buf, n, 3, &e, &count, &err), -E2BIG);
	/* every prefix of it: cut short or fine, never a crash or more entries */
	for (size_t cut = 0; cut < n; cut++) {
		k8_err_clear(&err);
		int r = e2b_listing_parse(buf, cut, 100, &e, &count, &err);
		CHECK(r == 0 || r == -EBADMSG);
		if (r == 0)
			e2b_entries_free(e, count);
	}

	/* hostile lines */
	static const char *const bad[] = {
		"x\0" "1\0" "644\0" "u\0" "g\0" "1.0\0" "a\0" "\0",      /* type */
		"f\0" "-1\0" "644\0" "u\0" "g\0" "1.0\0" "a\0" "\0",     /* size */
		"f\0" "1\0" "999\0" "u\0" "g\0" "1.0\0" "a\0" "\0",      /* mode */
		"f\0" "1\0" "644\0" "a/b\0" "g\0" "1.0\0" "a\0" "\0",    /* owner */
		"f\0" "1\0" "644\0" "u\0" "g\0" "x\0" "a\0" "\0",        /* time */
		"f\0" "1\0" "644\0" "u\0" "g\0" "1.0\0" "/a\0" "\0",     /* absolute */
		"f\0" "1\0" "644\0" "u\0" "g\0" "1.0\0" "a/../b\0" "\0", /* .. */
		"f\0" "1\0" "644\0" "u\0" "g\0" "1.0\0" "a\0" "t\0",     /* link on a file */
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		size_t len = 0;
		for (int f = 0; f < 8; f++)
			len += strlen(bad[i] + len) + 1;
		k8_err_clear(&err);
		CHECK_EQ_INT(e2b_listing_parse((const uint8_t *)bad[i], len, 10, &e, &count, &err),
			     -EBADMSG);
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

struct evs {
	char log[512];
};

static int on_ev(void *ctx, const char *type, const struct e2b_entry *e)
{
	struct evs *v = ctx;
	size_t l = strlen(v->log);
	snprintf(v->log + l, sizeof(v->log) - l, "%s:%s ", type + 11, e->rel);
	return 0;
}

static struct e2b_entry ent(char type, const char *rel, uint64_t size, int64_t mtime)
{
	struct e2b_entry e = { .type = type, .size = size, .perm = 0644, .mtime = mtime };
	strcpy(e.owner, "root");
	strcpy(e.group, "root");
	e.rel = xstrdup(rel);
	e.link = xstrdup("");
	return e;
}

static void test_watch(void)
{
	struct e2b_watch w = { 0 };
	struct evs v = { .log = "" };
	struct e2b_entry *a = xcalloc(2, sizeof(*a)), *b = xcalloc(3, sizeof(*b));

	a[0] = ent('f', "keep", 1, 10);
	a[1] = ent('f', "gone", 1, 10);
	CHECK_EQ_INT(e2b_watch_update(&w, a, 2, on_ev, &v), 0);
	CHECK_STR(v.log, "");           /* the first listing reports nothing */
	b[0] = ent('f', "new", 3, 11);
	b[1] = ent('f', "keep", 2, 12);
	b[2] = ent('d', "dir", 0, 12);
	CHECK_EQ_INT(e2b_watch_update(&w, b, 3, on_ev, &v), 0);
	CHECK_STR(v.log, "CREATE:dir REMOVE:gone WRITE:keep CREATE:new WRITE:new ");
	e2b_watch_free(&w);
}

/* ---- multipart ---- */

struct parts {
	char log[1024];
	size_t bytes;
};

static int mp_begin(void *ctx, const char *field, const char *file)
{
	struct parts *p = ctx;
	size_t l = strlen(p->log);
	snprintf(p->log + l, sizeof(p->log) - l, "[%s|%s:", field, file);
	return 0;
}

static int mp_data(void *ctx, const uint8_t *d, size_t n)
{
	struct parts *p = ctx;
	size_t l = strlen(p->log);
	if (l + n + 1 < sizeof(p->log)) {
		memcpy(p->log + l, d, n);
		p->log[l + n] = 0;
	}
	p->bytes += n;
	return 0;
}

static int mp_end(void *ctx)
{
	struct parts *p = ctx;
	strcat(p->log, "]");
	return 0;
}

static const struct e2b_mp_ops ops = { mp_begin, mp_data, mp_end };

static void test_multipart(void)
{
	/* undici's FormData as files.write([{path, data}, ...]) sends it */
	const char *ct = "multipart/form-data; boundary=----formdata-undici-0123456789";
	const char *body =
		"------formdata-undici-0123456789\r\n"
		"Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\n"
		"Content-Type: application/octet-stream\r\n\r\n"
		"hello\r\n-- not a delimiter\r\n"
		"\r\n------formdata-undici-0123456789\r\n"
		"Content-Disposition: form-data; name=\"file\"; filename=\"b \\\"q\\\".bin\"\r\n\r\n"
		"\r\n------formdata-undici-0123456789--\r\n";
	size_t n = strlen(body);
	struct k8_err err = { 0 };

	for (size_t step = 1; step <= n; step++) {
		struct e2b_mp m;
		struct parts p = { .log = "" };
		int rc = e2b_mp_init(&m, ct, &err);
		for (size_t i = 0; i < n && !rc; i += step)
			rc = e2b_mp_feed(&m, (const uint8_t *)body + i, i + step > n ? n - i : step,
					 &ops, &p, &err);
		CHECK_EQ_INT(rc, 0);
		CHECK_EQ_INT(e2b_mp_finish(&m, &err), 0);
		CHECK_STR(p.log, "[file|/home/user/a.txt:hello\r\n-- not a delimiter\r\n]"
			  "[file|b \"q\".bin:]");
		CHECK_EQ_INT(m.parts, 2);
	}
	/* bad input */
	struct e2b_mp m;
	struct parts p = { .log = "" };
	CHECK_EQ_INT(e2b_mp_init(&m, "application/octet-stream", &err), -EINVAL);
	CHECK_EQ_INT(e2b_mp_init(&m, "multipart/form-data", &err), -EINVAL);
	CHECK_EQ_INT(e2b_mp_init(&m, "multipart/form-data; boundary=x", &err), 0);
	const char *cut = "--x\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nabc";
	CHECK_EQ_INT(e2b_mp_feed(&m, (const uint8_t *)cut, strlen(cut), &ops, &p, &err), 0);
	k8_err_clear(&err);
	CHECK_EQ_INT(e2b_mp_finish(&m, &err), -EBADMSG);
	CHECK_EQ_INT(e2b_mp_init(&m, "multipart/form-data; boundary=x", &err), 0);
	const char *nodisp = "--x\r\nContent-Type: a/b\r\n\r\nabc\r\n--x--";
	k8_err_clear(&err);
	CHECK_EQ_INT(e2b_mp_feed(&m, (const uint8_t *)nodisp, strlen(nodisp), &ops, &p, &err),
		     -EBADMSG);
	/* a head that never ends is refused at its cap, not buffered on */
	CHECK_EQ_INT(e2b_mp_init(&m, "multipart/form-data; boundary=x", &err), 0);
	char *junk = xmalloc(20000);
	memcpy(junk, "--x\r\n", 5);
	memset(junk + 5, 'h', 20000 - 5);
	k8_err_clear(&err);
	CHECK_EQ_INT(e2b_mp_feed(&m, (const uint8_t *)junk, 20000, &ops, &p, &err), -EBADMSG);
	free(junk);
}

int main(void)
{
	test_paths();
	test_users();
	test_listing();
	test_watch();
	test_multipart();
	return T_DONE();
}
