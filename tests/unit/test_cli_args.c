/* SPDX-License-Identifier: Apache-2.0 */
/* test_cli_args.c - the CLI's option parser, local checks and output helpers.
 * src/cli is not part of the library the unit tests link, so its two I/O-free files are
 * included here directly. */
#include "../../src/cli/args.c"
#include "../../src/cli/output.c"
#include "t.h"

static int parse(const struct cli_opt *opts, int stop, struct cli_args *a, struct k8_err *err,
		 int argc, ...)
{
	static char *words[32];
	va_list ap;

	va_start(ap, argc);
	for (int i = 0; i < argc; i++)
		words[i] = va_arg(ap, char *);
	va_end(ap);
	memset(err, 0, sizeof(*err));
	return cli_args_parse(argc, words, opts, stop, a, err);
}

static const struct cli_opt run_opts[] = {
	{ "env", 'e', 1, 'e' }, { "workdir", 'w', 1, 'w' }, { "interactive", 'i', 0, 'i' },
	{ "detach", 'd', 0, 'd' }, { "json", 0, 0, 'j' }, { NULL, 0, 0, 0 },
};

static void test_parse(void)
{
	struct cli_args a;
	struct k8_err err;

	/* Flags before NAME IMAGE, everything after IMAGE verbatim. */
	CHECK_EQ_INT(parse(run_opts, 2, &a, &err, 9, "-e", "A=1", "--workdir=/w", "interp",
			   "py:3", "python3", "-c", "--help", "-e"), 0);
	CHECK_EQ_INT(a.nopts, 2);
	CHECK_EQ_INT(a.opts[0].id, 'e');
	CHECK_STR(a.opts[0].arg, "A=1");
	CHECK_STR(a.opts[1].arg, "/w");
	CHECK_EQ_INT(a.npos, 6);
	CHECK_STR(a.pos[0], "interp");
	CHECK_STR(a.pos[2], "python3");
	CHECK_STR(a.pos[4], "--help");
	CHECK_STR(a.pos[5], "-e");
	CHECK_EQ_INT(a.help, 0);
	cli_args_free(&a);

	/* Combined short flags, a glued value, "-" as a positional, --home. */
	CHECK_EQ_INT(parse(run_opts, 2, &a, &err, 6, "-id", "-eK=V", "--home", "/h", "n", "-"), 0);
	CHECK_EQ_INT(a.nopts, 3);
	CHECK_EQ_INT(a.opts[0].id, 'i');
	CHECK_EQ_INT(a.opts[1].id, 'd');
	CHECK_STR(a.opts[2].arg, "K=V");
	CHECK_STR(a.home, "/h");
	CHECK_EQ_INT(a.npos, 2);
	CHECK_STR(a.pos[1], "-");
	cli_args_free(&a);

	/* Without a stop, flags may follow positionals; "--" ends them. */
	CHECK_EQ_INT(parse(run_opts, 0, &a, &err, 5, "x", "--json", "-h", "--", "--json"), 0);
	CHECK_EQ_INT(a.nopts, 1);
	CHECK_EQ_INT(a.help, 1);
	CHECK_EQ_INT(a.npos, 2);
	CHECK_STR(a.pos[1], "--json");
	cli_args_free(&a);

	CHECK_EQ_INT(parse(run_opts, 0, &a, &err, 2, "x", "--frob"), -EINVAL);
	CHECK(strstr(err.msg, "unknown flag '--frob'") != NULL);
	CHECK_EQ_INT(parse(run_opts, 0, &a, &err, 1, "-z"), -EINVAL);
	CHECK(strstr(err.msg, "'-z'") != NULL);
	CHECK_EQ_INT(parse(run_opts, 0, &a, &err, 1, "--env"), -EINVAL);
	CHECK(strstr(err.msg, "needs a value") != NULL);
	CHECK_EQ_INT(parse(run_opts, 0, &a, &err, 1, "-e"), -EINVAL);
	CHECK_EQ_INT(parse(run_opts, 0, &a, &err, 1, "--json=yes"), -EINVAL);
	CHECK(strstr(err.msg, "takes no value") != NULL);
}

static void test_checks(void)
{
	struct k8_err err = { 0 };
	struct cli_mount m;
	long v = 0;
	char n63[64];

	CHECK_EQ_INT(cli_check_name("interp", &err), 0);
	CHECK_EQ_INT(cli_check_name("a", &err), 0);
	CHECK_EQ_INT(cli_check_name("0a_b.c-d", &err), 0);
	memset(n63, 'a', 63);
	n63[63] = '\0';
	CHECK_EQ_INT(cli_check_name(n63, &err), 0);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(cli_check_name("", &err), -EINVAL);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(cli_check_name("Interp", &err), -EINVAL);
	CHECK(strstr(err.msg, "'Interp'") != NULL);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(cli_check_name("-x", &err), -EINVAL);
	CHECK_EQ_INT(cli_check_name(".x", &err), -EINVAL);
	CHECK_EQ_INT(cli_check_name("a/b", &err), -EINVAL);
	CHECK_EQ_INT(cli_check_name("a b", &err), -EINVAL);
	memset(n63, 'a', 63);
	{
		char n64[65];
		memset(n64, 'a', 64);
		n64[64] = '\0';
		CHECK_EQ_INT(cli_check_name(n64, &err), -EINVAL);
	}

	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(cli_parse_range("--cpus", "2", 1, 64, &v, &err), 0);
	CHECK_EQ_INT(v, 2);
	CHECK_EQ_INT(cli_parse_range("--cpus", "64", 1, 64, &v, &err), 0);
	CHECK_EQ_INT(cli_parse_range("--cpus", "65", 1, 64, &v, &err), -EINVAL);
	CHECK(strstr(err.msg, "from 1 to 64") != NULL);
	CHECK_EQ_INT(cli_parse_range("--cpus", "0", 1, 64, &v, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_range("--cpus", "", 1, 64, &v, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_range("--cpus", "-1", 1, 64, &v, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_range("--cpus", "2x", 1, 64, &v, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_range("--m", "99999999999999999999999", 1, 64, &v, &err), -EINVAL);
	CHECK_EQ_INT(v, 64);

	CHECK_EQ_INT(cli_parse_mount("/h/in:/in:ro", &m, &err), 0);
	CHECK_STR(m.host, "/h/in");
	CHECK_STR(m.guest, "/in");
	CHECK_EQ_INT(m.ro, 1);
	cli_mount_free(&m);
	CHECK_EQ_INT(cli_parse_mount("out:/out", &m, &err), 0);
	CHECK_STR(m.host, "out");
	CHECK_EQ_INT(m.ro, 0);
	cli_mount_free(&m);
	CHECK_EQ_INT(cli_parse_mount("a:/b:rw", &m, &err), 0);
	CHECK_EQ_INT(m.ro, 0);
	cli_mount_free(&m);
	CHECK_EQ_INT(cli_parse_mount("/a", &m, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_mount(":/a", &m, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_mount("/a:b", &m, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_mount("/a:/", &m, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_mount("/a:/b/../c", &m, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_mount("/a:/b:x", &m, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_mount("/a:/b:ro:x", &m, &err), -EINVAL);
	CHECK_EQ_INT(cli_parse_mount("/a:/b..c", &m, &err), 0);
	cli_mount_free(&m);

	CHECK_EQ_INT(cli_check_env("A=1", &err), 0);
	CHECK_EQ_INT(cli_check_env("_x9=", &err), 0);
	CHECK_EQ_INT(cli_check_env("PATH", &err), 0);
	CHECK_EQ_INT(cli_check_env("=1", &err), -EINVAL);
	CHECK_EQ_INT(cli_check_env("9A=1", &err), -EINVAL);
	CHECK_EQ_INT(cli_check_env("A-B=1", &err), -EINVAL);
}

/* The folders that "exist" for test_system_home. */
static const char *fake_dirs[4];

static int fake_is_dir(const char *path)
{
	for (size_t i = 0; i < ARRAY_SIZE(fake_dirs) && fake_dirs[i]; i++)
		if (!strcmp(fake_dirs[i], path))
			return 1;
	return 0;
}

/* An installed kosa8's home serves a user without one of their own; the flag, KOSA8_HOME
 * and an existing ~/.kosa8 still win. */
static void test_system_home(void)
{
	struct k8_err err = { 0 };
	char *s;

	fake_dirs[0] = KOSA8_SYSTEM_HOME;
	s = cli_home_pick(NULL, NULL, "/home/al", fake_is_dir, &err);
	CHECK_STR(s, KOSA8_SYSTEM_HOME);
	free(s);
	s = cli_home_pick(NULL, "/env", "/home/al", fake_is_dir, &err);
	CHECK_STR(s, "/env");
	free(s);
	s = cli_home_pick("/flag", NULL, "/home/al", fake_is_dir, &err);
	CHECK_STR(s, "/flag");
	free(s);
	s = cli_home_pick(NULL, NULL, NULL, fake_is_dir, &err);
	CHECK_STR(s, KOSA8_SYSTEM_HOME);
	free(s);
	fake_dirs[1] = "/home/al/.kosa8";
	s = cli_home_pick(NULL, NULL, "/home/al", fake_is_dir, &err);
	CHECK_STR(s, "/home/al/.kosa8");
	free(s);
	fake_dirs[0] = NULL;          /* no system home: ~/.kosa8 whether or not it exists */
	s = cli_home_pick(NULL, NULL, "/home/bo", fake_is_dir, &err);
	CHECK_STR(s, "/home/bo/.kosa8");
	free(s);
}

static void test_paths(void)
{
	struct k8_err err = { 0 };
	char *s, longhome[200];

	s = cli_home_pick("/flag", "/env", "/root", NULL, &err);
	CHECK_STR(s, "/flag");
	free(s);
	s = cli_home_pick(NULL, "/env", "/root", NULL, &err);
	CHECK_STR(s, "/env");
	free(s);
	s = cli_home_pick(NULL, "", "/root", NULL, &err);
	CHECK_STR(s, "/root/.kosa8");
	free(s);
	s = cli_home_pick(NULL, NULL, "/", NULL, &err);
	CHECK_STR(s, "/.kosa8");
	free(s);
	CHECK(cli_home_pick(NULL, NULL, NULL, NULL, &err) == NULL);
	CHECK_EQ_INT(err.code, -EINVAL);

	memset(&err, 0, sizeof(err));
	s = cli_sock_path("/tmp/h/", &err);
	CHECK_STR(s, "/tmp/h/kosa8d.sock");
	free(s);
	memset(longhome, 'x', sizeof(longhome) - 1);
	longhome[0] = '/';
	longhome[sizeof(longhome) - 1] = '\0';
	CHECK(cli_sock_path(longhome, &err) == NULL);
	CHECK_EQ_INT(err.code, -ENAMETOOLONG);

	s = cli_urlenc("docker.io/library/python:3.12-slim@sha256:ab");
	CHECK_STR(s, "docker.io%2Flibrary%2Fpython%3A3.12-slim%40sha256%3Aab");
	free(s);
	s = cli_urlenc("a b&c=d~_");
	CHECK_STR(s, "a%20b%26c%3Dd~_");
	free(s);
}

static void test_codes(void)
{
	CHECK_EQ_INT(cli_exit_code(cli_api_errno("bad_request", 400)), 2);
	CHECK_EQ_INT(cli_exit_code(cli_api_errno("not_found", 404)), 4);
	CHECK_EQ_INT(cli_exit_code(cli_api_errno("conflict", 409)), 5);
	CHECK_EQ_INT(cli_exit_code(cli_api_errno("unavailable", 503)), 6);
	CHECK_EQ_INT(cli_exit_code(cli_api_errno("internal", 500)), 1);
	CHECK_EQ_INT(cli_exit_code(cli_api_errno("something_new", 500)), 1);
	CHECK_EQ_INT(cli_exit_code(cli_api_errno(NULL, 404)), 4);
	CHECK_EQ_INT(cli_exit_code(cli_api_errno(NULL, 409)), 5);
	CHECK_EQ_INT(cli_exit_code(-ECONNREFUSED), 3);
	CHECK_EQ_INT(cli_exit_code(0), 0);
	CHECK_EQ_INT(cli_exit_code(-EIO), 1);
}

static void test_output(void)
{
	char b[64];
	json_t *v;

	CHECK_STR(out_bytes(999, b, sizeof(b)), "999 B");
	CHECK_STR(out_bytes(12300000, b, sizeof(b)), "12.3 MB");
	CHECK_STR(out_bytes(1500000000ull, b, sizeof(b)), "1.5 GB");
	CHECK_STR(out_short_digest("sha256:0123456789abcdef0123", b, sizeof(b)),
		  "sha256:0123456789ab");
	CHECK_STR(out_short_digest(NULL, b, sizeof(b)), "-");

	v = json_string("2026-11-03T12:00:05Z");
	CHECK(out_time_parse(v) == 1793707205.0);
	json_decref(v);
	v = json_string("2026-11-03T13:00:05.5+01:00");
	CHECK(out_time_parse(v) == 1793707205.5);
	json_decref(v);
	v = json_integer(1793707205);
	CHECK(out_time_parse(v) == 1793707205.0);
	json_decref(v);
	v = json_integer(1793707205000000000ll);
	CHECK(out_time_parse(v) == 1793707205.0);
	json_decref(v);
	v = json_string("yesterday");
	CHECK(out_time_parse(v) < 0);
	json_decref(v);
	CHECK(out_time_parse(NULL) < 0);

	CHECK_STR(out_ago(1000, 1030, b, sizeof(b)), "30s ago");
	CHECK_STR(out_ago(1000, 1000 + 300, b, sizeof(b)), "5m ago");
	CHECK_STR(out_ago(1000, 1000 + 7200, b, sizeof(b)), "2h ago");
	CHECK_STR(out_ago(1000, 1000 + 86400 * 3, b, sizeof(b)), "3d ago");
	CHECK_STR(out_ago(-1, 1000, b, sizeof(b)), "-");
}

static void test_table(void)
{
	static const char *const hdr[] = { "NAME", "STATE", "X" };
	static const char *const r1[] = { "interp", NULL, "last" };
	struct out_table *t = out_table_new(3, hdr);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	out_table_row(t, r1);
	out_table_print(t, f);
	fclose(f);
	CHECK_STR(buf, "NAME     STATE   X\ninterp   -       last\n");
	free(buf);
	out_table_free(t);
}

static void test_escape(void)
{
	struct { const char *in, *out; } cases[] = {
		{ "plain text", "plain text" },
		{ "\x1b[2J\x1b]0;title\a", "\\x1b[2J\\x1b]0;title\\x07" },
		{ "a\nb\rc\td", "a\\x0ab\\x0dc\\x09d" },
		{ "back\\slash", "back\\slash" },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80" },
		{ "c1 \xc2\x9b" "31m", "c1 \\xc2\\x9b31m" },           /* CSI as UTF-8 */
		{ "del \x7f", "del \\x7f" },
		{ "bad \xff\xc3", "bad \\xff\\xc3" },                   /* invalid, truncated */
		{ "overlong \xc0\xaf \xe0\x80\xaf", "overlong \\xc0\\xaf \\xe0\\x80\\xaf" },
		{ "bidi \xe2\x80\xae" "evil", "bidi \\xe2\\x80\\xaeevil" },
		{ "", "" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		cleanup_free char *e = str_escape(cases[i].in);
		CHECK_STR(e, cases[i].out);
	}
	cleanup_free char *n = str_escape(NULL);
	CHECK_STR(n, "");
	/* the bounded form cuts between characters, never inside an escape */
	char small[8];
	str_escape_to(small, sizeof(small), "ab\x1b\x1b");
	CHECK_STR(small, "ab\\x1b");
	str_escape_to(small, sizeof(small), "abcdef\xc3\xa9");
	CHECK_STR(small, "abcdef");
	/* a table row with a newline and an escape stays one row */
	struct out_table *t = out_table_new(2, (const char *const[]){ "A", "B" });
	out_table_row(t, (const char *const[]){ "x\n2 fake row", "\x1b[31mred" });
	CHECK_STR(t->cells[2], "x\\x0a2 fake row");
	CHECK_STR(t->cells[3], "\\x1b[31mred");
	out_table_free(t);
}

int main(void)
{
	test_escape();
	test_parse();
	test_checks();
	test_paths();
	test_system_home();
	test_codes();
	test_output();
	test_table();
	return T_DONE();
}
