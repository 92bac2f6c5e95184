/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_dockerfile.c - the Dockerfile parser against Docker's documented behaviour
 * (Dockerfile reference: parser directives, escapes, ENV/ARG substitution, exec and shell
 * forms) and the build-cache keys. */
#include "docker/dockerfile.h"
#include "t.h"

static struct dockerfile *parse(const char *s, struct k8_err *e)
{
	struct dockerfile *df = NULL;
	memset(e, 0, sizeof(*e));
	df_parse(s, strlen(s), &df, e);
	return df;
}

/* Parse and run every step with the given build args; the steps stay in out[]. */
static int run_all(const char *s, const char *const *bk, const char *const *bv, size_t nb,
		   struct df_step *out, size_t max, struct k8_err *e)
{
	struct dockerfile *df = parse(s, e);
	struct df_state st;
	int rc = 0;
	size_t i;

	if (!df)
		return -1;
	df_state_init(&st, df, bk, bv, nb);
	for (i = 0; i < df->n && i < max && !rc; i++)
		rc = df_step(&st, &df->inst[i], &out[i], e);
	if (rc)                       /* the failed step freed itself; free the others */
		for (size_t k = 0; k + 1 < i; k++)
			df_step_free(&out[k]);
	df_state_free(&st);
	size_t n = df->n;
	df_free(df);
	return rc ? rc : (int)n;
}

static void free_steps(struct df_step *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		df_step_free(&s[i]);
}

static void test_forms(void)
{
	struct k8_err e;
	struct dockerfile *df = parse(
		"# syntax=docker/dockerfile:1\n"
		"FROM python:3.12-slim AS Base\n"
		"# a comment\n"
		"  run apt-get update && \\\n"
		"    # comment inside\n"
		"\n"
		"      apt-get install -y curl\n"
		"CMD [\"python\", \"-c\", \"print(6*7)\"]\n"
		"ENTRYPOINT [\"tail\", oops]\n"
		"COPY --chown=1000:1000 [\"a b.txt\", \"/app/\"]\n"
		"ADD src /app/src\n", &e);
	CHECK(df != NULL);
	if (!df) {
		fprintf(stderr, "%s\n", e.msg);
		return;
	}
	CHECK_EQ_INT(df->n, 6);
	CHECK_EQ_INT(df->inst[0].kind, DF_FROM);
	CHECK_STR(df->inst[0].words.v[0], "python:3.12-slim");
	CHECK_STR(df->inst[0].as, "base");                 /* stage names are lower-cased */
	CHECK_EQ_INT(df->inst[0].line, 2);
	CHECK_EQ_INT(df->inst[1].kind, DF_RUN);
	CHECK_EQ_INT(df->inst[1].line, 4);
	CHECK(!df->inst[1].json);
	/* The continuation keeps the next line's indentation; comments and blanks vanish. */
	CHECK_STR(df->inst[1].words.v[0], "apt-get update &&       apt-get install -y curl");
	CHECK(df->inst[2].json);
	CHECK_EQ_INT(df->inst[2].words.n, 3);
	CHECK_STR(df->inst[2].words.v[2], "print(6*7)");
	CHECK(!df->inst[3].json);                          /* not valid JSON: shell form */
	CHECK_STR(df->inst[3].words.v[0], "[\"tail\", oops]");
	CHECK(df->inst[4].json);
	CHECK_STR(df->inst[4].chown, "1000:1000");
	CHECK_STR(df->inst[4].words.v[0], "a b.txt");
	CHECK_EQ_INT(df->inst[5].words.n, 2);
	df_free(df);
}

static void test_escape_directive(void)
{
	struct k8_err e;
	struct dockerfile *df = parse("# escape=`\n\nFROM mcr/windows\nRUN dir c:\\ `\n  /s\n", &e);
	CHECK(df != NULL);
	if (df) {
		CHECK_EQ_INT(df->escape, '`');
		CHECK_STR(df->inst[1].words.v[0], "dir c:\\   /s");
		df_free(df);
	}
	/* After the first non-directive line a directive is an ordinary comment. */
	df = parse("FROM a\n# escape=`\nRUN x \\\n y\n", &e);
	CHECK(df && df->escape == '\\' && df->n == 2);
	df_free(df);
	CHECK(!parse("# escape=x\nFROM a\n", &e));
	CHECK(strstr(e.msg, "line 1") && strstr(e.msg, "invalid escape token"));
	CHECK(!parse("# escape=`\n# escape=\\\nFROM a\n", &e));
	CHECK(strstr(e.msg, "only one escape"));
}

static void test_errors(void)
{
	struct k8_err e;
	CHECK(!parse("FROM a\nFROB x\n", &e));
	CHECK(strstr(e.msg, "Dockerfile line 2: unknown instruction: FROB"));
	CHECK(!parse("RUN x\n", &e));
	CHECK(strstr(e.msg, "line 1") && strstr(e.msg, "before FROM"));
	CHECK(!parse("FROM --platform=linux/arm64 a\n", &e));
	CHECK_EQ_INT(e.code, -ENOTSUP);
	CHECK(strstr(e.msg, "--platform"));
	CHECK(!parse("FROM a\nCOPY --from=build /x /y\n", &e));
	CHECK_EQ_INT(e.code, -ENOTSUP);
	CHECK(strstr(e.msg, "line 2: COPY --from"));
	CHECK(!parse("FROM a\n\nADD https://example.com/x.tgz /x\n", &e));
	CHECK(strstr(e.msg, "line 3") && strstr(e.msg, "URL"));
	CHECK(!parse("FROM a\nCOPY --chmod=755 x /y\n", &e));
	CHECK(strstr(e.msg, "BuildKit"));
	CHECK(!parse("FROM a\nCOPY --bogus x /y\n", &e));
	CHECK(strstr(e.msg, "Unknown flag: bogus"));
	CHECK(!parse("FROM a\nCOPY x\n", &e));
	CHECK(strstr(e.msg, "at least two arguments"));
	CHECK(!parse("FROM a b\n", &e));
	CHECK(strstr(e.msg, "one or three"));
	CHECK(!parse("FROM a AS 1x\n", &e));
	CHECK(strstr(e.msg, "invalid name for build stage"));
	CHECK(!parse("FROM a\nENV a=b c\n", &e));
	CHECK(strstr(e.msg, "can't find = in \"c\""));
	CHECK(!parse("FROM a\nENV onlykey\n", &e));
	CHECK(strstr(e.msg, "two arguments"));
	CHECK(!parse("FROM a\nVOLUME /data\n", &e));
	CHECK_EQ_INT(e.code, -ENOTSUP);
	CHECK(!parse("FROM a\nRUN\n", &e));
	CHECK(!parse("FROM a\nWORKDIR\n", &e));
	CHECK(!parse("# just a comment\n\n", &e));
	CHECK(!parse("ARG x=1\n", &e));
	CHECK(strstr(e.msg, "no FROM"));
	struct dockerfile *df = NULL;
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(df_parse("FROM a\nRUN a\0b\n", 14, &df, &e), -EINVAL);
}

static void test_limits(void)
{
	struct k8_err e;
	size_t n = DF_MAX_LINE + 100;
	char *big = malloc(2 * n + 32);
	strcpy(big, "FROM a\nRUN ");
	memset(big + 11, 'x', n - 11);
	big[n] = '\0';
	CHECK(!parse(big, &e));
	CHECK_EQ_INT(e.code, -E2BIG);
	CHECK(strstr(e.msg, "line 2"));
	/* The same length made of continuation lines. */
	size_t off = strlen(strcpy(big, "FROM a\nRUN "));
	while (off + 12 < 2 * n) {
		memcpy(big + off, "xxxxxxxxx \\\n", 12);
		off += 12;
	}
	strcpy(big + off, "y\n");
	CHECK(!parse(big, &e));
	CHECK_EQ_INT(e.code, -E2BIG);
	free(big);

	size_t cnt = DF_MAX_INST + 1, len = 7 + cnt * 8;
	char *many = malloc(len + 1);
	strcpy(many, "FROM a\n");
	off = 7;
	for (size_t i = 0; i < cnt; i++, off += 8)
		memcpy(many + off, "RUN abc\n", 8);
	many[off] = '\0';
	CHECK(!parse(many, &e));
	CHECK_EQ_INT(e.code, -E2BIG);
	CHECK(strstr(e.msg, "more than"));
	free(many);

	/* Doubling a variable 40 times is stopped, not allocated. */
	char *dbl = malloc(64 * 24 + 64);
	strcpy(dbl, "FROM a\nENV a=xxxxxxxxxxxxxxxx\n");
	for (int i = 0; i < 40; i++)
		strcat(dbl, "ENV a=$a$a\n");
	struct df_step steps[64];
	memset(&e, 0, sizeof(e));
	int rc = run_all(dbl, NULL, NULL, 0, steps, 64, &e);
	CHECK_EQ_INT(rc, -E2BIG);
	CHECK(strstr(e.msg, "after substitution"));
	free(dbl);
}

static void test_substitution(void)
{
	struct df_strv env = { 0 };
	char a[] = "A=apple", b[] = "E=", c[] = "PATH=/usr/bin", d[] = "A_1=x";
	char *kv[] = { a, b, c, d };
	struct k8_err e = { 0 };
	env.v = kv;
	env.n = 4;
#define EXP(in, want) do { char *_r = df_expand(in, '\\', &env, &e); CHECK_STR(_r, want); \
	free(_r); } while (0)
	EXP("$A", "apple");
	EXP("${A}s", "apples");
	EXP("$A_1", "x");
	EXP("$Nope-", "-");
	EXP("${Nope:-dflt}", "dflt");
	EXP("${E:-dflt}", "dflt");          /* empty counts as unset with ':' */
	EXP("${E-dflt}", "");               /* ... but not without it */
	EXP("${A:+alt}", "alt");
	EXP("${E:+alt}", "");
	EXP("${E+alt}", "alt");
	EXP("${Nope:+alt}", "");
	EXP("${Nope:-${A}}", "apple");
	EXP("'$A'", "$A");                  /* no substitution in single quotes */
	EXP("\"$A b\"", "apple b");
	EXP("\\$A", "$A");
	EXP("a\\ b", "a b");
	EXP("\"a\\\"b\\n\"", "a\"b\\n");    /* in double quotes only \" \$ \\ are escapes */
	EXP("$", "$");
	EXP("100%", "100%");
	EXP("${PATH}:/x", "/usr/bin:/x");
	char *r = df_expand("${A", '\\', &env, &e);
	CHECK(r == NULL && strstr(e.msg, "missing '}'"));
	memset(&e, 0, sizeof(e));
	CHECK(df_expand("${A:=x}", '\\', &env, &e) == NULL && strstr(e.msg, "unsupported modifier"));
	memset(&e, 0, sizeof(e));
	CHECK(df_expand("${}", '\\', &env, &e) == NULL);
	memset(&e, 0, sizeof(e));
	CHECK(df_expand("'abc", '\\', &env, &e) == NULL && strstr(e.msg, "single-quote"));
	memset(&e, 0, sizeof(e));
	CHECK(df_expand("${Nope:?must be set}", '\\', &env, &e) == NULL &&
	      strstr(e.msg, "Nope: must be set"));
#undef EXP
}

static void test_env_arg(void)
{
	struct df_step s[16];
	struct k8_err e = { 0 };
	const char *bk[] = { "VER", "UNUSED", "HTTP_PROXY" };
	const char *bv[] = { "3.12", "1", "http://proxy:3128" };
	int n = run_all(
		"ARG VER=3.11\n"
		"ARG BASE=python\n"
		"FROM ${BASE}:${VER}-slim\n"
		"ARG VER\n"                          /* inherits the meta value: build arg */
		"ARG NAME=world\n"
		"ENV GREETING=\"hello $NAME\" OLD=$GREETING\n"
		"ENV abc=bye def=$abc\n"
		"ENV key value with spaces\n"
		"RUN echo $GREETING\n"
		"WORKDIR /srv/${NAME:-x}\n"
		"LABEL org.version=$VER \"quoted key\"='v 1'\n"
		"USER ${UID:-1000}\n"
		"EXPOSE 8888 53/UDP 8000-8010\n"
		"COPY --chown=$NAME:$NAME src/ /app/$VER/\n",
		bk, bv, 3, s, 16, &e);
	CHECK_EQ_INT(n, 14);
	if (n != 14) {
		fprintf(stderr, "%s\n", e.msg);
		return;
	}
	CHECK_STR(s[2].argv.v[0], "python:3.12-slim");
	CHECK_STR(s[3].vals.v[0], "3.12");
	CHECK_STR(s[5].keys.v[0], "GREETING");
	CHECK_STR(s[5].vals.v[0], "hello world");
	CHECK_STR(s[5].vals.v[1], "");             /* GREETING was not set before this ENV */
	CHECK_STR(s[6].vals.v[1], "");             /* "ENV abc=bye def=$abc": the old abc */
	CHECK_STR(s[7].keys.v[0], "key");
	CHECK_STR(s[7].vals.v[0], "value with spaces");
	CHECK_STR(s[8].argv.v[0], "echo $GREETING");   /* RUN is left to the shell */
	CHECK_EQ_INT(s[8].run_env.n, 3);           /* VER, NAME and the proxy */
	CHECK_STR(s[8].run_env.v[0], "VER=3.12");
	CHECK_STR(s[8].run_env.v[2], "HTTP_PROXY=http://proxy:3128");
	CHECK(!strstr(s[8].key_text, "proxy"));    /* proxies stay out of the cache key */
	CHECK(strstr(s[8].key_text, "VER=3.12") != NULL);
	CHECK_STR(s[9].argv.v[0], "/srv/world");
	CHECK_STR(s[10].keys.v[0], "org.version");
	CHECK_STR(s[10].vals.v[0], "3.12");
	CHECK_STR(s[10].keys.v[1], "quoted key");
	CHECK_STR(s[10].vals.v[1], "v 1");
	CHECK_STR(s[11].argv.v[0], "1000");
	CHECK_EQ_INT(s[12].argv.n, 3);
	CHECK_STR(s[12].argv.v[1], "53/udp");
	CHECK_STR(s[12].argv.v[2], "8000-8010/tcp");
	CHECK_STR(s[13].chown, "world:world");
	CHECK_STR(s[13].argv.v[1], "/app/3.12/");
	free_steps(s, 14);

	/* ENV wins over an ARG of the same name; the ARG does not reach RUN then. */
	n = run_all("FROM a\nARG X=arg\nENV X=env\nWORKDIR /$X\nRUN true\n", NULL, NULL, 0, s,
		    16, &e);
	CHECK_EQ_INT(n, 5);
	CHECK_STR(s[3].argv.v[0], "/env");
	CHECK_EQ_INT(s[4].run_env.n, 0);
	free_steps(s, 5);

	/* A meta ARG is only visible in FROM unless declared again in the stage. */
	n = run_all("ARG V=1\nFROM a:$V\nWORKDIR /w$V\n", NULL, NULL, 0, s, 16, &e);
	CHECK_EQ_INT(n, 3);
	CHECK_STR(s[1].argv.v[0], "a:1");
	CHECK_STR(s[2].argv.v[0], "/w");
	free_steps(s, 3);

	/* Stages: a new FROM forgets ARG and ENV; FROM can name an earlier stage. */
	n = run_all("FROM a AS one\nENV X=1\nFROM one\nWORKDIR /$X\n", NULL, NULL, 0, s, 16, &e);
	CHECK_EQ_INT(n, 4);
	CHECK_EQ_INT(s[2].from_stage, 0);
	CHECK_STR(s[3].argv.v[0], "/");
	free_steps(s, 4);

	memset(&e, 0, sizeof(e));
	CHECK(run_all("ARG B\nFROM ${B}\n", NULL, NULL, 0, s, 16, &e) < 0);
	CHECK(strstr(e.msg, "should not be blank"));
	memset(&e, 0, sizeof(e));
	CHECK(run_all("FROM a\nCOPY ../etc/passwd /x\n", NULL, NULL, 0, s, 16, &e) < 0);
	CHECK(strstr(e.msg, "line 2: forbidden path outside the build context"));
	memset(&e, 0, sizeof(e));
	CHECK(run_all("FROM a\nARG U=https://x/y\nADD $U /y\n", NULL, NULL, 0, s, 16, &e) < 0);
	CHECK(strstr(e.msg, "line 3") && strstr(e.msg, "URL"));
	memset(&e, 0, sizeof(e));
	CHECK(run_all("FROM a\nEXPOSE 80/foo\n", NULL, NULL, 0, s, 16, &e) < 0);
	CHECK(strstr(e.msg, "invalid port"));
	memset(&e, 0, sizeof(e));
	CHECK(run_all("FROM a\nEXPOSE 0\n", NULL, NULL, 0, s, 16, &e) < 0);

	/* The Dockerfile reference's own examples. */
	n = run_all("FROM a\nENV abc=hello\nENV abc=bye def=$abc\nENV ghi=$abc\n", NULL, NULL,
		    0, s, 16, &e);
	CHECK_EQ_INT(n, 4);
	CHECK_STR(s[2].vals.v[1], "hello");
	CHECK_STR(s[3].vals.v[0], "bye");
	free_steps(s, 4);
	const char *vk[] = { "CONT_IMG_VER" }, *vv[] = { "v2.0.1" };
	const char *df_ref = "FROM ubuntu\nARG CONT_IMG_VER\n"
			     "ENV CONT_IMG_VER=${CONT_IMG_VER:-v1.0.0}\nRUN echo $CONT_IMG_VER\n";
	n = run_all(df_ref, NULL, NULL, 0, s, 16, &e);
	CHECK_EQ_INT(n, 4);
	CHECK_STR(s[2].vals.v[0], "v1.0.0");
	CHECK_EQ_INT(s[3].run_env.n, 0);
	free_steps(s, 4);
	n = run_all(df_ref, vk, vv, 1, s, 16, &e);
	CHECK_EQ_INT(n, 4);
	CHECK_STR(s[2].vals.v[0], "v2.0.1");
	free_steps(s, 4);

	/* A relative WORKDIR continues from the previous one; ".." stops at "/". */
	n = run_all("FROM a\nWORKDIR app\nWORKDIR src/../lib\nWORKDIR /x\nWORKDIR ../../..\n",
		    NULL, NULL, 0, s, 16, &e);
	CHECK_EQ_INT(n, 5);
	CHECK_STR(s[1].argv.v[0], "/app");
	CHECK_STR(s[2].argv.v[0], "/app/lib");
	CHECK_STR(s[3].argv.v[0], "/x");
	CHECK_STR(s[4].argv.v[0], "/");
	free_steps(s, 5);

	/* Unused build args are reported; the predefined proxies never are. */
	struct dockerfile *df = parse("FROM a\nARG VER\n", &e);
	struct df_state st;
	const char *un[4];
	df_state_init(&st, df, bk, bv, 3);
	for (size_t i = 0; i < df->n; i++) {
		df_step(&st, &df->inst[i], &s[i], &e);
		df_step_free(&s[i]);
	}
	CHECK_EQ_INT(df_state_unused(&st, un, 4), 1);
	CHECK_STR(un[0], "UNUSED");
	df_state_free(&st);
	df_free(df);
}

static void test_base_env(void)
{
	struct k8_err e = { 0 };
	struct dockerfile *df = parse("FROM python\nWORKDIR $HOME/app\nENV PATH=/opt/bin:$PATH\n", &e);
	struct df_state st;
	struct df_step s;
	const char *base[] = { "PATH=/usr/local/bin:/usr/bin", "HOME=/root", "junk" };

	df_state_init(&st, df, NULL, NULL, 0);
	CHECK_EQ_INT(df_step(&st, &df->inst[0], &s, &e), 0);
	df_step_free(&s);
	CHECK_EQ_INT(df_state_set_env(&st, base, 3), 0);
	CHECK_EQ_INT(df_state_set_workdir(&st, "/srv"), 0);
	CHECK_EQ_INT(df_step(&st, &df->inst[1], &s, &e), 0);
	CHECK_STR(s.argv.v[0], "/root/app");
	CHECK_STR(st.workdir, "/root/app");
	df_step_free(&s);
	CHECK_EQ_INT(df_step(&st, &df->inst[2], &s, &e), 0);
	CHECK_STR(s.vals.v[0], "/opt/bin:/usr/local/bin:/usr/bin");
	df_step_free(&s);
	df_state_free(&st);
	df_free(df);
}

static void test_cache_keys(void)
{
	struct df_step a[4], b[4];
	struct k8_err e = { 0 };
	char k1[65], k2[65], k3[65], d1[65], d2[65], d3[65];
	const char *bk[] = { "V" }, *v1[] = { "1" }, *v2[] = { "2" };

	CHECK_EQ_INT(run_all("FROM a\nARG V\nRUN make\n", bk, v1, 1, a, 4, &e), 3);
	CHECK_EQ_INT(run_all("FROM a\nARG V\nRUN  make\n", bk, v2, 1, b, 4, &e), 3);
	df_step_key("sha256:p", &a[2], NULL, k1);
	df_step_key("sha256:p", &b[2], NULL, k2);
	CHECK(strcmp(k1, k2) != 0);                /* a build arg RUN sees is in its key */
	df_step_key("sha256:q", &a[2], NULL, k3);
	CHECK(strcmp(k1, k3) != 0);                /* so is the parent */
	free_steps(b, 3);
	CHECK_EQ_INT(run_all("FROM a\nARG V\nRUN make\n", bk, v1, 1, b, 4, &e), 3);
	df_step_key("sha256:p", &b[2], NULL, k2);
	CHECK_STR(k1, k2);                         /* same input, same key */
	free_steps(a, 3);
	free_steps(b, 3);

	struct df_copy_file f1[] = {
		{ "b.txt", 0100644, 0, 0, 3, NULL, "aa" },
		{ "a.txt", 0100644, 0, 0, 3, NULL, "bb" },
	}, f2[] = {
		{ "a.txt", 0100644, 0, 0, 3, NULL, "bb" },
		{ "b.txt", 0100644, 0, 0, 3, NULL, "aa" },
	}, f3[] = {
		{ "a.txt", 0100755, 0, 0, 3, NULL, "bb" },
		{ "b.txt", 0100644, 0, 0, 3, NULL, "aa" },
	};
	CHECK_EQ_INT(df_content_digest(f1, 2, d1), 0);
	CHECK_EQ_INT(df_content_digest(f2, 2, d2), 0);
	CHECK_EQ_INT(df_content_digest(f3, 2, d3), 0);
	CHECK_STR(d1, d2);                         /* order of the tar does not matter */
	CHECK(strcmp(d1, d3) != 0);                /* the mode does */
	CHECK_EQ_INT(run_all("FROM a\nCOPY . /app\n", NULL, NULL, 0, a, 4, &e), 2);
	df_step_key("p", &a[1], d1, k1);
	df_step_key("p", &a[1], d3, k2);
	CHECK(strcmp(k1, k2) != 0);
	CHECK_EQ_INT(strlen(k1), 64);
	free_steps(a, 2);
}

int main(void)
{
	test_forms();
	test_escape_directive();
	test_errors();
	test_limits();
	test_substitution();
	test_env_arg();
	test_base_env();
	test_cache_keys();
	return T_DONE();
}
