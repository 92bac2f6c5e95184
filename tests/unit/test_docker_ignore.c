/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_ignore.c - .dockerignore against the cases moby's patternmatcher and the
 * Dockerfile reference document: '*' within one directory, '**' across any, '!'
 * exceptions with the last match winning, parent directories matching their contents. */
#include "docker/dockerignore.h"
#include "t.h"

static bool ex(const char *file, const char *path)
{
	struct dignore ig;
	struct k8_err e = { 0 };
	if (dignore_parse(file, strlen(file), &ig, &e)) {
		fprintf(stderr, "parse: %s\n", e.msg);
		return false;
	}
	bool r = dignore_excluded(&ig, path);
	dignore_free(&ig);
	return r;
}

static void test_glob(void)
{
	CHECK_EQ_INT(dignore_glob("*.go", "a.go"), 1);
	CHECK_EQ_INT(dignore_glob("*.go", "dir/a.go"), 0);      /* '*' stays in one dir */
	CHECK_EQ_INT(dignore_glob("*/*.go", "dir/a.go"), 1);
	CHECK_EQ_INT(dignore_glob("**/*.go", "a.go"), 1);       /* '**' may be no dir */
	CHECK_EQ_INT(dignore_glob("**/*.go", "x/y/z/a.go"), 1);
	CHECK_EQ_INT(dignore_glob("a/**/b", "a/b"), 1);
	CHECK_EQ_INT(dignore_glob("a/**/b", "a/x/y/b"), 1);
	CHECK_EQ_INT(dignore_glob("a/**/b", "a/xb"), 0);
	CHECK_EQ_INT(dignore_glob("a/**", "a/x/y"), 1);
	CHECK_EQ_INT(dignore_glob("a/**", "a"), 0);
	CHECK_EQ_INT(dignore_glob("**", "anything/at/all"), 1);
	CHECK_EQ_INT(dignore_glob("**/foo", "foo"), 1);
	CHECK_EQ_INT(dignore_glob("**/foo", "x/foo"), 1);
	CHECK_EQ_INT(dignore_glob("**foo", "barfoo"), 1);       /* moby's suffix match */
	CHECK_EQ_INT(dignore_glob("?.txt", "a.txt"), 1);
	CHECK_EQ_INT(dignore_glob("?.txt", "ab.txt"), 0);
	CHECK_EQ_INT(dignore_glob("?", "/"), 0);
	CHECK_EQ_INT(dignore_glob("?.txt", "\xc3\xa9.txt"), 1);  /* one rune, two bytes */
	CHECK_EQ_INT(dignore_glob("[a-c]x", "bx"), 1);
	CHECK_EQ_INT(dignore_glob("[a-c]x", "dx"), 0);
	CHECK_EQ_INT(dignore_glob("[^a-c]x", "dx"), 1);
	CHECK_EQ_INT(dignore_glob("[]]", "]"), 1);
	CHECK_EQ_INT(dignore_glob("\\*", "*"), 1);
	CHECK_EQ_INT(dignore_glob("\\*", "a"), 0);
	CHECK_EQ_INT(dignore_glob("a.b", "axb"), 0);            /* '.' is literal */
	CHECK_EQ_INT(dignore_glob("[a-", "a"), -EINVAL);
	CHECK_EQ_INT(dignore_glob("[z-a]", "a"), -EINVAL);
	CHECK_EQ_INT(dignore_glob("abc\\", "abc"), -EINVAL);
	/* No backtracking blow-up: many stars against a long near-miss. */
	char path[4001];
	memset(path, 'a', 4000);
	path[4000] = '\0';
	CHECK_EQ_INT(dignore_glob("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", path), 0);
	CHECK_EQ_INT(dignore_glob("**/**/**/**/**/**/**/**/b", path), 0);
}

static void test_clean(void)
{
	char a[] = "./a//b/../c/", b[] = "../x/./y", c[] = "/a/../../b", d[2] = "", e[] = "a/..";
	dignore_clean(a);
	dignore_clean(b);
	dignore_clean(c);
	dignore_clean(d);
	dignore_clean(e);
	CHECK_STR(a, "a/c");
	CHECK_STR(b, "../x/y");
	CHECK_STR(c, "/b");
	CHECK_STR(d, ".");
	CHECK_STR(e, ".");
}

static void test_file(void)
{
	const char *f =
		"\xef\xbb\xbf# comment\n"
		"*.pyc\n"
		"  node_modules  \n"
		"/build/\n"
		"docs/**/*.md\n"
		"!docs/keep/README.md\n"
		"**/.git\n"
		"\n"
		"secret*\n"
		"!secret.example\n";
	CHECK(ex(f, "a.pyc"));
	CHECK(!ex(f, "pkg/a.pyc"));                 /* no '**': top level only */
	CHECK(ex(f, "node_modules"));
	CHECK(ex(f, "node_modules/x/index.js"));    /* a matched directory takes its tree */
	CHECK(ex(f, "build/out.o"));                /* leading '/' and trailing '/' cleaned */
	CHECK(ex(f, "./build"));
	CHECK(ex(f, "docs/a/b.md"));
	CHECK(ex(f, "docs/b.md"));
	CHECK(!ex(f, "docs/keep/README.md"));       /* the exception wins: it comes later */
	CHECK(ex(f, "src/.git/config"));
	CHECK(ex(f, ".git/HEAD"));
	CHECK(ex(f, "secret.key"));
	CHECK(!ex(f, "secret.example"));
	CHECK(!ex(f, "src/main.c"));
	CHECK(!ex(f, "."));
	/* Order matters: an exception before the rule it should cancel does nothing. */
	CHECK(ex("!a.txt\n*.txt\n", "a.txt"));
	/* " #x" is a pattern, not a comment (comments are checked before trimming). */
	CHECK(ex(" #x\n", "#x"));
	/* Exclude everything, then bring one file back. */
	CHECK(!ex("*\n!Dockerfile\n!src\n", "src/a.c"));
	CHECK(ex("*\n!Dockerfile\n!src\n", "README"));

	struct dignore ig;
	struct k8_err e = { 0 };
	CHECK_EQ_INT(dignore_parse("ok\n  !  \n", 9, &ig, &e), -EINVAL);
	CHECK(strstr(e.msg, "line 2") && strstr(e.msg, "illegal exclusion"));
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(dignore_parse("ok\n[abc\n", 8, &ig, &e), -EINVAL);
	CHECK(strstr(e.msg, "line 2"));
	char *many = malloc(3 * (DIGNORE_PATTERNS_MAX + 1) + 1);
	for (int i = 0; i <= DIGNORE_PATTERNS_MAX; i++)
		memcpy(many + 3 * i, "ab\n", 3);
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(dignore_parse(many, 3 * (DIGNORE_PATTERNS_MAX + 1), &ig, &e), -E2BIG);
	free(many);
}

int main(void)
{
	test_glob();
	test_clean();
	test_file();
	return T_DONE();
}
