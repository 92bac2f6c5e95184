/* SPDX-License-Identifier: Apache-2.0 */
/* test_audit.c - the audit log: appends (also concurrent), every tampering case verify must
 * catch, the crash repairs audit_open makes, the warnings it writes instead, query filters. */
#include "daemon/audit.h"
#include "common/sha.h"
#include "t.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

static char base[256];          /* the test's scratch directory */

/* ---- helpers ---- */

static char *path_in(const char *dir, const char *name)
{
	return xasprintf("%s/%s", dir, name);
}

static char *new_dir(const char *name)
{
	char *d = xasprintf("%s/%s", base, name);
	rm_rf(d);
	mkdir_p(d, 0700);
	return d;
}

struct lines {
	char **v;
	size_t n;
	bool partial;           /* the last entry had no newline */
};

static void lines_load(const char *dir, struct lines *l)
{
	cleanup_free char *p = path_in(dir, AUDIT_LOG_NAME);
	cleanup_free char *buf = NULL;
	size_t len = 0, start = 0;

	memset(l, 0, sizeof(*l));
	if (read_file(p, 64u << 20, &buf, &len) < 0)
		return;
	l->v = xcalloc(len + 1, sizeof(char *));
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		l->v[l->n++] = strndup(buf + start, i - start);
		start = i + 1;
	}
	if (start < len) {
		l->v[l->n++] = strndup(buf + start, len - start);
		l->partial = true;
	}
}

static void lines_save(const char *dir, const struct lines *l)
{
	cleanup_free char *p = path_in(dir, AUDIT_LOG_NAME);
	size_t cap = 1, len = 0;
	char *buf;

	for (size_t i = 0; i < l->n; i++)
		cap += strlen(l->v[i]) + 1;
	buf = xmalloc(cap);
	for (size_t i = 0; i < l->n; i++) {
		size_t k = strlen(l->v[i]);
		memcpy(buf + len, l->v[i], k);
		len += k;
		if (i + 1 < l->n || !l->partial)
			buf[len++] = '\n';
	}
	write_file_atomic(p, buf, len, 0600);
	free(buf);
}

static void lines_free(struct lines *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static void copy_file(const char *from, const char *to, const char *name)
{
	cleanup_free char *a = path_in(from, name), *b = path_in(to, name);
	cleanup_free char *buf = NULL;
	size_t len;

	if (read_file(a, 64u << 20, &buf, &len) == 0)
		write_file_atomic(b, buf, len, 0600);
}

static char *copy_dir(const char *from, const char *name)
{
	char *d = new_dir(name);

	copy_file(from, d, AUDIT_LOG_NAME);
	copy_file(from, d, AUDIT_HEAD_NAME);
	return d;
}

static void write_head(const char *dir, uint64_t seq, const char *hash)
{
	cleanup_free char *p = path_in(dir, AUDIT_HEAD_NAME);
	cleanup_free char *s = xasprintf("{\"seq\":%" PRIu64 ",\"hash\":\"%s\"}\n", seq, hash);

	write_file_atomic(p, s, strlen(s), 0600);
}

static json_t *verify(const char *dir)
{
	struct k8_err e = { 0 };
	json_t *rep = NULL;

	CHECK_EQ_INT(audit_verify(dir, &rep, &e), 0);
	if (!rep)
		rep = json_pack("{s:b,s:i,s:n,s:n,s:s}", "ok", 0, "records", -1, "first_bad",
				"line", "reason", e.msg);
	return rep;
}

static bool rep_ok(json_t *r) { return json_is_true(json_object_get(r, "ok")); }
static long long rep_int(json_t *r, const char *k)
{
	json_t *v = json_object_get(r, k);
	return json_is_integer(v) ? json_integer_value(v) : -1;
}
static const char *rep_reason(json_t *r) { return json_string_value(json_object_get(r, "reason")); }

/* verify reports not ok with this first_bad (-1: null) and line (-2: don't check) */
#define CHECK_BAD(dir, fb, ln) do { json_t *_r = verify(dir); CHECK(!rep_ok(_r)); \
	CHECK_EQ_INT(rep_int(_r, "first_bad"), (fb)); \
	if ((ln) != -2) CHECK_EQ_INT(rep_int(_r, "line"), (ln)); \
	if (getenv("T_VERBOSE")) fprintf(stderr, "  %s: %s\n", dir, rep_reason(_r)); \
	json_decref(_r); } while (0)
#define CHECK_OK(dir, n) do { json_t *_r = verify(dir); CHECK(rep_ok(_r)); \
	CHECK_EQ_INT(rep_int(_r, "records"), (n)); \
	if (!rep_ok(_r)) fprintf(stderr, "  %s: %s\n", dir, rep_reason(_r)); \
	json_decref(_r); } while (0)

static struct audit *open_ok(const char *dir)
{
	struct k8_err e = { 0 };
	struct audit *a = NULL;
	int r = audit_open(dir, &a, &e);

	CHECK_EQ_INT(r, 0);
	if (r)
		fprintf(stderr, "  audit_open %s: %s\n", dir, e.msg);
	return a;
}

static void append_ok(struct audit *a, const char *action, const char *sb, json_t *d)
{
	struct k8_err e = { 0 };
	int r = audit_append(a, action, sb, d, &e);

	CHECK_EQ_INT(r, 0);
	if (r)
		fprintf(stderr, "  audit_append: %s\n", e.msg);
	json_decref(d);
}

static json_t *query(const char *dir, const char *sb, const char *action, uint64_t since,
		     size_t limit)
{
	struct k8_err e = { 0 };
	json_t *out = NULL;

	CHECK_EQ_INT(audit_query(dir, sb, action, since, limit, &out, &e), 0);
	return out ? out : json_array();
}

static long long seq_at(json_t *arr, size_t i)
{
	return json_integer_value(json_object_get(json_array_get(arr, i), "seq"));
}

static size_t count_action(const char *dir, const char *action)
{
	json_t *q = query(dir, NULL, action, 0, 0);
	size_t n = json_array_size(q);

	json_decref(q);
	return n;
}

/* A dir with `n` records, closed. */
static char *make_log(const char *name, int n)
{
	char *d = new_dir(name);
	struct audit *a = open_ok(d);

	for (int i = 1; i <= n; i++)
		append_ok(a, i % 3 ? "sandbox.create" : "container.run", i % 2 ? "alpha" : "beta",
			  json_pack("{s:i,s:s}", "i", i, "argv", "sh -c 'echo hi'"));
	audit_close(a);
	return d;
}

/* ---- tests ---- */

static void test_fresh(void)
{
	cleanup_free char *d = new_dir("fresh");
	cleanup_free char *log = path_in(d, AUDIT_LOG_NAME), *head = path_in(d, AUDIT_HEAD_NAME);
	cleanup_free char *hb = NULL;
	struct audit *a = open_ok(d), *b = NULL;
	struct k8_err e = { 0 };
	struct stat st;

	CHECK(a != NULL);
	CHECK(stat(log, &st) == 0 && (st.st_mode & 0777) == 0600);
	CHECK(read_file(head, 4096, &hb, NULL) == 0);
	CHECK(hb && strstr(hb, "\"seq\":0"));
	CHECK_OK(d, 0);
	/* one writer per directory */
	CHECK_EQ_INT(audit_open(d, &b, &e), -EBUSY);
	CHECK(b == NULL && strstr(e.msg, "already open"));
	audit_close(a);
	audit_close(NULL);
	/* a log left with a lax mode is put back to 0600 */
	chmod(log, 0644);
	a = open_ok(d);
	CHECK(stat(log, &st) == 0 && (st.st_mode & 0777) == 0600);
	audit_close(a);
	CHECK_EQ_INT(count_action(d, NULL), 0);
}

static void test_format(void)
{
	cleanup_free char *d = make_log("format", 3);
	struct lines l;
	char h[65];

	lines_load(d, &l);
	CHECK_EQ_INT(l.n, 3);
	CHECK(!l.partial);
	if (l.n == 3) {
		const char *s = l.v[0];
		const char *p1 = strstr(s, "{\"seq\":1,\"time\":\""), *p2 = strstr(s, "\",\"action\":\"");
		const char *p3 = strstr(s, ",\"sandbox\":\"alpha\",\"details\":{\"i\":1,");
		const char *p4 = strstr(s, "},\"prev\":\"0000000000000000000000000000000000000000000"
					"000000000000000000000\"}");
		CHECK(p1 == s);
		CHECK(p2 && p3 && p4 && p2 < p3 && p3 < p4);
		CHECK(strlen(s) > 41 && s[17 + 23] == 'Z'); /* "2026-11-29T12:00:00.123Z" */
		sha256_hex(l.v[0], strlen(l.v[0]), h);
		CHECK(strstr(l.v[1], h) != NULL);
		sha256_hex(l.v[2], strlen(l.v[2]), h);
		cleanup_free char *hp = path_in(d, AUDIT_HEAD_NAME), *hb = NULL;
		CHECK(read_file(hp, 4096, &hb, NULL) == 0);
		CHECK(hb && strstr(hb, "\"seq\":3") && strstr(hb, h));
	}
	lines_free(&l);
	CHECK_OK(d, 3);
	/* a clean reopen adds nothing */
	struct audit *a = open_ok(d);
	audit_close(a);
	CHECK_OK(d, 3);
}

struct worker {
	struct audit *a;
	const char *dir;
	int n, fails, id;
	volatile int *stop;
};

static void *appender(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < w->n; i++) {
		struct k8_err e = { 0 };
		json_t *d = json_pack("{s:i,s:i}", "thread", w->id, "i", i);
		if (audit_append(w->a, "exec.start", w->id ? "t1" : "t0", d, &e) < 0)
			w->fails++;
		json_decref(d);
	}
	return NULL;
}

static void *verifier(void *arg)
{
	struct worker *w = arg;

	while (!*w->stop) {
		struct k8_err e = { 0 };
		json_t *rep = NULL;
		if (audit_verify(w->dir, &rep, &e) < 0 || !rep_ok(rep)) {
			if (!w->fails++)
				fprintf(stderr, "  concurrent verify: %s\n",
					rep ? rep_reason(rep) : e.msg);
		}
		json_decref(rep);
		w->n++;
	}
	return NULL;
}

static void test_threads(void)
{
	cleanup_free char *d = new_dir("threads");
	struct audit *a = open_ok(d);
	volatile int stop = 0;
	struct worker w[3] = {
		{ .a = a, .n = 150, .id = 0 }, { .a = a, .n = 150, .id = 1 },
		{ .dir = d, .stop = &stop },
	};
	pthread_t t[3];

	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, i < 2 ? appender : verifier, &w[i]);
	pthread_join(t[0], NULL);
	pthread_join(t[1], NULL);
	stop = 1;
	pthread_join(t[2], NULL);
	CHECK_EQ_INT(w[0].fails + w[1].fails, 0);
	CHECK_EQ_INT(w[2].fails, 0);    /* verify during appends always sees a consistent log */
	CHECK(w[2].n > 0);
	audit_close(a);
	CHECK_OK(d, 300);
	json_t *q = query(d, "t1", NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 150);
	json_decref(q);
	q = query(d, NULL, NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 300);
	for (size_t i = 0; i < json_array_size(q); i++)
		if (seq_at(q, i) != (long long)i + 1) {
			CHECK_EQ_INT(seq_at(q, i), (long long)i + 1);
			break;
		}
	json_decref(q);
}

/* The tampering cases, each on a copy of a log of 20 records. */
static void test_tamper(const char *good)
{
	struct lines l;
	char h[65];

	CHECK_OK(good, 20);
	{       /* edit a details field of record 5: its hash no longer matches 6's prev */
		cleanup_free char *d = copy_dir(good, "t-edit");
		lines_load(d, &l);
		char *p = strstr(l.v[4], "\"i\":5");
		CHECK(p != NULL);
		if (p)
			p[4] = '6';
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 5, 5);
	}
	{       /* edit the last record: only the head can tell */
		cleanup_free char *d = copy_dir(good, "t-edit-last");
		lines_load(d, &l);
		char *p = strstr(l.v[19], "alpha");
		CHECK(p == NULL);       /* record 20 is beta's */
		p = strstr(l.v[19], "beta");
		if (p)
			p[0] = 'z';
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 20, 20);
	}
	{       /* delete a middle line */
		cleanup_free char *d = copy_dir(good, "t-delete");
		lines_load(d, &l);
		free(l.v[9]);
		memmove(l.v + 9, l.v + 10, (l.n - 10) * sizeof(char *));
		l.n--;
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 10, 10);
	}
	{       /* delete the last line: a cut-off tail */
		cleanup_free char *d = copy_dir(good, "t-cut");
		lines_load(d, &l);
		free(l.v[--l.n]);
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 20, 20);
	}
	{       /* delete the last three lines */
		cleanup_free char *d = copy_dir(good, "t-cut3");
		lines_load(d, &l);
		for (int i = 0; i < 3; i++)
			free(l.v[--l.n]);
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 18, 18);
	}
	{       /* swap two lines */
		cleanup_free char *d = copy_dir(good, "t-swap");
		lines_load(d, &l);
		char *t = l.v[6];
		l.v[6] = l.v[7];
		l.v[7] = t;
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 7, 7);
	}
	{       /* insert a forged record 13 after record 12, with a correct prev */
		cleanup_free char *d = copy_dir(good, "t-insert");
		lines_load(d, &l);
		sha256_hex(l.v[11], strlen(l.v[11]), h);
		char *forged = xasprintf("{\"seq\":13,\"time\":\"2026-11-29T12:00:00.000Z\","
					 "\"action\":\"sandbox.rm\",\"sandbox\":\"alpha\","
					 "\"details\":{},\"prev\":\"%s\"}", h);
		l.v = realloc(l.v, (l.n + 1) * sizeof(char *));
		memmove(l.v + 13, l.v + 12, (l.n - 12) * sizeof(char *));
		l.v[12] = forged;
		l.n++;
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 13, 13);
	}
	{       /* insert a forged record at the end, correctly chained: the head tells */
		cleanup_free char *d = copy_dir(good, "t-append-forged");
		lines_load(d, &l);
		sha256_hex(l.v[19], strlen(l.v[19]), h);
		l.v = realloc(l.v, (l.n + 2) * sizeof(char *));
		l.v[l.n++] = xasprintf("{\"seq\":21,\"time\":\"2026-11-29T12:00:00.000Z\","
				       "\"action\":\"sandbox.rm\",\"sandbox\":null,"
				       "\"details\":{},\"prev\":\"%s\"}", h);
		sha256_hex(l.v[20], strlen(l.v[20]), h);
		l.v[l.n++] = xasprintf("{\"seq\":22,\"time\":\"2026-11-29T12:00:00.000Z\","
				       "\"action\":\"sandbox.rm\",\"sandbox\":null,"
				       "\"details\":{},\"prev\":\"%s\"}", h);
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 21, 21);
	}
	{       /* cut the last line in half */
		cleanup_free char *d = copy_dir(good, "t-half");
		lines_load(d, &l);
		l.v[19][strlen(l.v[19]) / 2] = '\0';
		l.partial = true;
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 20, 20);
	}
	{       /* cut a middle line in half (the newline stays) */
		cleanup_free char *d = copy_dir(good, "t-half-mid");
		lines_load(d, &l);
		l.v[3][strlen(l.v[3]) / 2] = '\0';
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 4, 4);
	}
	{       /* garbage line */
		cleanup_free char *d = copy_dir(good, "t-garbage");
		lines_load(d, &l);
		free(l.v[2]);
		l.v[2] = xstrdup("not json at all");
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 3, 3);
	}
	{       /* a duplicate key is not a valid record either */
		cleanup_free char *d = copy_dir(good, "t-dupkey");
		lines_load(d, &l);
		char *p = strstr(l.v[1], ",\"prev\"");
		char *s = p ? xasprintf("%.*s,\"seq\":2%s", (int)(p - l.v[1]), l.v[1], p) : NULL;
		CHECK(s != NULL);
		if (s) {
			free(l.v[1]);
			l.v[1] = s;
		}
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 2, 2);
	}
	{       /* remove the head */
		cleanup_free char *d = copy_dir(good, "t-nohead");
		cleanup_free char *hp = path_in(d, AUDIT_HEAD_NAME);
		unlink(hp);
		CHECK_BAD(d, -1, -1);
	}
	{       /* a corrupt head */
		cleanup_free char *d = copy_dir(good, "t-badhead");
		cleanup_free char *hp = path_in(d, AUDIT_HEAD_NAME);
		write_file_atomic(hp, "{\"seq\":\"x\"}", 11, 0600);
		CHECK_BAD(d, -1, -1);
	}
	{       /* empty the whole log */
		cleanup_free char *d = copy_dir(good, "t-empty");
		cleanup_free char *lp = path_in(d, AUDIT_LOG_NAME);
		CHECK_EQ_INT(truncate(lp, 0), 0);
		CHECK_BAD(d, 1, 1);
		unlink(lp);     /* or remove it */
		CHECK_BAD(d, 1, 1);
	}
	{       /* the head put back to an older copy (records 16..20 unconfirmed) */
		cleanup_free char *d = copy_dir(good, "t-oldhead");
		lines_load(d, &l);
		sha256_hex(l.v[14], strlen(l.v[14]), h);
		lines_free(&l);
		write_head(d, 15, h);
		CHECK_BAD(d, 16, 16);
	}
	{       /* the whole log rewritten from record 1 on but the head kept: record 1 wrong */
		cleanup_free char *d = copy_dir(good, "t-first");
		lines_load(d, &l);
		char *p = strstr(l.v[0], "\"prev\":\"0");
		if (p)
			p[8] = '1';
		lines_save(d, &l);
		lines_free(&l);
		CHECK_BAD(d, 1, 1);
	}
}

static void test_repair(const char *good)
{
	struct lines l;
	char h[65];

	{       /* crash mid-write: a partial last line, head at the last complete record */
		cleanup_free char *d = copy_dir(good, "r-partial");
		cleanup_free char *lp = path_in(d, AUDIT_LOG_NAME);
		int fd = open(lp, O_WRONLY | O_APPEND);
		CHECK(fd >= 0 && write(fd, "{\"seq\":21,\"ti", 13) == 13);
		close(fd);
		CHECK_BAD(d, 21, 21);
		struct audit *a = open_ok(d);
		audit_close(a);
		CHECK_OK(d, 21);
		json_t *q = query(d, NULL, "audit.repair", 0, 0);
		CHECK_EQ_INT(json_array_size(q), 1);
		json_t *det = json_object_get(json_array_get(q, 0), "details");
		CHECK_STR(json_string_value(json_object_get(det, "repaired")), "partial-line");
		CHECK_EQ_INT(json_integer_value(json_object_get(det, "bytes")), 13);
		CHECK_EQ_INT(seq_at(q, 0), 21);
		json_decref(q);
		lines_load(d, &l);
		CHECK(!l.partial && l.n == 21 && !strstr(l.v[20], "\"seq\":21,\"ti\"{"));
		lines_free(&l);
	}
	{       /* crash between the log write and the head update */
		cleanup_free char *d = copy_dir(good, "r-behind");
		lines_load(d, &l);
		sha256_hex(l.v[18], strlen(l.v[18]), h);
		lines_free(&l);
		write_head(d, 19, h);
		CHECK_BAD(d, 20, 20);
		struct audit *a = open_ok(d);
		append_ok(a, "sandbox.rm", "alpha", NULL);
		audit_close(a);
		CHECK_OK(d, 22);
		json_t *q = query(d, NULL, "audit.*", 0, 0);
		CHECK_EQ_INT(json_array_size(q), 1);
		json_t *det = json_object_get(json_array_get(q, 0), "details");
		CHECK_STR(json_string_value(json_object_get(json_array_get(q, 0), "action")),
			  "audit.repair");
		CHECK_STR(json_string_value(json_object_get(det, "repaired")), "head-behind");
		json_decref(q);
	}
	{       /* the very first append crashed before the head update */
		cleanup_free char *d = copy_dir(good, "r-behind-first");
		lines_load(d, &l);
		l.n = 1;
		lines_save(d, &l);
		l.n = 20;
		lines_free(&l);
		write_head(d, 0, "0000000000000000000000000000000000000000000000000000000000000000");
		CHECK_BAD(d, 1, 1);
		struct audit *a = open_ok(d);
		audit_close(a);
		CHECK_OK(d, 2);
	}
	{       /* an edited record is not repaired: warning, verify keeps failing, no repeat */
		cleanup_free char *d = copy_dir(good, "r-edit");
		lines_load(d, &l);
		char *p = strstr(l.v[4], "\"i\":5");
		if (p)
			p[4] = '7';
		lines_save(d, &l);
		lines_free(&l);
		struct audit *a = open_ok(d);
		append_ok(a, "sandbox.create", "gamma", NULL);
		audit_close(a);
		CHECK_BAD(d, 5, 5);
		a = open_ok(d);
		audit_close(a);
		CHECK_EQ_INT(count_action(d, "audit.warning"), 1);
		json_t *q = query(d, NULL, "audit.warning", 0, 0);
		json_t *det = json_object_get(json_array_get(q, 0), "details");
		CHECK_EQ_INT(json_integer_value(json_object_get(det, "first_bad")), 5);
		CHECK_EQ_INT(seq_at(q, 0), 21);
		json_decref(q);
		CHECK_EQ_INT(count_action(d, "sandbox.create"), 15);
	}
	{       /* a cut-off tail: warning, new records do not reuse seq 20 */
		cleanup_free char *d = copy_dir(good, "r-cut");
		lines_load(d, &l);
		free(l.v[--l.n]);
		lines_save(d, &l);
		lines_free(&l);
		struct audit *a = open_ok(d);
		append_ok(a, "sandbox.create", "gamma", NULL);
		audit_close(a);
		CHECK_BAD(d, 20, 20);
		a = open_ok(d);
		audit_close(a);
		CHECK_EQ_INT(count_action(d, "audit.warning"), 1);
		json_t *q = query(d, NULL, NULL, 0, 2);
		CHECK_EQ_INT(json_array_size(q), 2);
		CHECK_EQ_INT(seq_at(q, 0), 21);
		CHECK_EQ_INT(seq_at(q, 1), 22);
		json_decref(q);
	}
	{       /* the head removed: warning; verify keeps failing (it reports the warning) */
		cleanup_free char *d = copy_dir(good, "r-nohead");
		cleanup_free char *hp = path_in(d, AUDIT_HEAD_NAME);
		unlink(hp);
		struct audit *a = open_ok(d);
		audit_close(a);
		a = open_ok(d);
		audit_close(a);
		CHECK_EQ_INT(count_action(d, "audit.warning"), 1);
		json_t *r = verify(d);
		CHECK(!rep_ok(r));
		CHECK(strstr(rep_reason(r), "audit.warning") && strstr(rep_reason(r), "missing"));
		CHECK(json_is_null(json_object_get(r, "first_bad")));
		json_decref(r);
	}
	{       /* half of the last record cut (the head names it): evidence is kept */
		cleanup_free char *d = copy_dir(good, "r-half");
		lines_load(d, &l);
		l.v[19][30] = '\0';
		l.partial = true;
		lines_save(d, &l);
		lines_free(&l);
		struct audit *a = open_ok(d);
		append_ok(a, "sandbox.create", "gamma", NULL);
		audit_close(a);
		CHECK_BAD(d, 20, 20);
		lines_load(d, &l);
		CHECK_EQ_INT(l.n, 22);
		CHECK(l.n == 22 && strlen(l.v[19]) == 30);
		lines_free(&l);
		a = open_ok(d);
		audit_close(a);
		CHECK_EQ_INT(count_action(d, "audit.warning"), 1);
	}
	{       /* the log emptied: the warning continues from the head's seq */
		cleanup_free char *d = copy_dir(good, "r-empty");
		cleanup_free char *lp = path_in(d, AUDIT_LOG_NAME);
		CHECK_EQ_INT(truncate(lp, 0), 0);
		struct audit *a = open_ok(d);
		audit_close(a);
		CHECK_BAD(d, 1, 1);
		json_t *q = query(d, NULL, NULL, 0, 0);
		CHECK_EQ_INT(json_array_size(q), 1);
		CHECK_EQ_INT(seq_at(q, 0), 21);
		json_decref(q);
		a = open_ok(d);
		audit_close(a);
		CHECK_EQ_INT(count_action(d, "audit.warning"), 1);
	}
}

/* Random damage (a byte changed, bytes removed or inserted, the file cut short) is always
 * reported; open never fails on it, never makes it verify, and warns once only. */
static void test_random_damage(const char *good)
{
	cleanup_free char *lp0 = path_in(good, AUDIT_LOG_NAME);
	cleanup_free char *orig = NULL;
	size_t olen = 0;
	unsigned seed = 12345;
	int undetected = 0, open_failed = 0, healed = 0, rewarned = 0, append_failed = 0;

	CHECK_EQ_INT(read_file(lp0, 1u << 20, &orig, &olen), 0);
	for (int it = 0; it < 150 && olen > 10; it++) {
		cleanup_free char *d = copy_dir(good, "rand");
		cleanup_free char *lp = path_in(d, AUDIT_LOG_NAME);
		cleanup_free char *buf = xmalloc(olen + 64);
		size_t len = olen, pos = (size_t)rand_r(&seed) % (olen - 1);
		int kind = it % 4;

		memcpy(buf, orig, olen);
		if (kind == 0) {                /* change one byte */
			buf[pos] = (char)(buf[pos] ^ (1 + rand_r(&seed) % 255));
		} else if (kind == 1) {         /* remove 1..40 bytes */
			size_t k = 1 + (size_t)rand_r(&seed) % 40;
			if (k > olen - pos)
				k = olen - pos;
			memmove(buf + pos, buf + pos + k, olen - pos - k);
			len -= k;
		} else if (kind == 2) {         /* insert 1..40 bytes, not at the very end */
			size_t k = 1 + (size_t)rand_r(&seed) % 40;
			memmove(buf + pos + k, buf + pos, olen - pos);
			for (size_t i = 0; i < k; i++)
				buf[pos + i] = (char)(it & 1 ? rand_r(&seed) : "{}\"\n,:0a"[i % 9]);
			len += k;
		} else {                        /* cut the file short */
			len = pos;
		}
		write_file_atomic(lp, buf, len, 0600);
		json_t *r = verify(d);
		if (rep_ok(r))
			undetected++;
		json_decref(r);
		struct audit *a = NULL;
		struct k8_err e = { 0 };
		if (audit_open(d, &a, &e) < 0) {
			if (!open_failed++)
				fprintf(stderr, "  open after damage %d: %s\n", it, e.msg);
			continue;
		}
		memset(&e, 0, sizeof(e));
		if (audit_append(a, "sandbox.create", "x", NULL, &e) < 0)
			append_failed++;
		audit_close(a);
		r = verify(d);
		if (rep_ok(r))
			healed++;
		json_decref(r);
		size_t w = count_action(d, "audit.warning");
		a = NULL;
		if (audit_open(d, &a, &e) == 0)
			audit_close(a);
		if (count_action(d, "audit.warning") != w)
			rewarned++;
	}
	CHECK_EQ_INT(undetected, 0);
	CHECK_EQ_INT(open_failed, 0);
	CHECK_EQ_INT(append_failed, 0);
	CHECK_EQ_INT(healed, 0);
	CHECK_EQ_INT(rewarned, 0);
}

static void test_query(void)
{
	cleanup_free char *d = new_dir("query");
	struct audit *a = open_ok(d);
	json_t *q;

	for (int i = 1; i <= 40; i++) {
		const char *act = i % 4 == 0 ? "sandbox.create" : i % 4 == 1 ? "sandbox.rm"
				: i % 4 == 2 ? "image.pull" : "sandboxes.list";
		append_ok(a, act, i % 2 ? "a" : (i % 5 ? "b" : NULL), json_pack("{s:i}", "i", i));
	}
	audit_close(a);
	q = query(d, NULL, NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 40);
	json_decref(q);
	q = query(d, "", "", 0, 0);
	CHECK_EQ_INT(json_array_size(q), 40);
	json_decref(q);
	q = query(d, "a", NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 20);
	json_decref(q);
	q = query(d, "b", NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 16);
	json_decref(q);
	q = query(d, "nobody", NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 0);
	json_decref(q);
	q = query(d, NULL, "sandbox.*", 0, 0);      /* not "sandboxes.list" */
	CHECK_EQ_INT(json_array_size(q), 20);
	json_decref(q);
	q = query(d, NULL, "sandbox*", 0, 0);       /* a plain prefix does include it */
	CHECK_EQ_INT(json_array_size(q), 30);
	json_decref(q);
	q = query(d, NULL, "*", 0, 0);
	CHECK_EQ_INT(json_array_size(q), 40);
	json_decref(q);
	q = query(d, NULL, "image.pull", 0, 0);
	CHECK_EQ_INT(json_array_size(q), 10);
	json_decref(q);
	q = query(d, NULL, "image", 0, 0);          /* exact without '*' */
	CHECK_EQ_INT(json_array_size(q), 0);
	json_decref(q);
	q = query(d, "a", "sandbox.rm", 0, 0);      /* i % 4 == 1: all odd */
	CHECK_EQ_INT(json_array_size(q), 10);
	json_decref(q);
	q = query(d, NULL, NULL, 30, 0);
	CHECK_EQ_INT(json_array_size(q), 10);
	CHECK_EQ_INT(seq_at(q, 0), 31);
	json_decref(q);
	q = query(d, NULL, NULL, 0, 5);             /* the newest five, newest last */
	CHECK_EQ_INT(json_array_size(q), 5);
	CHECK_EQ_INT(seq_at(q, 0), 36);
	CHECK_EQ_INT(seq_at(q, 4), 40);
	json_decref(q);
	q = query(d, NULL, NULL, 0, 100);
	CHECK_EQ_INT(json_array_size(q), 40);
	CHECK_EQ_INT(seq_at(q, 0), 1);
	json_decref(q);
	q = query(d, NULL, NULL, 10, 5);            /* paging forward from seq 10 */
	CHECK_EQ_INT(json_array_size(q), 5);
	CHECK_EQ_INT(seq_at(q, 0), 11);
	CHECK_EQ_INT(seq_at(q, 4), 15);
	json_decref(q);
	q = query(d, "b", "sandbox.*", 0, 3);       /* b: even i not divisible by 5 */
	CHECK_EQ_INT(json_array_size(q), 3);
	CHECK_EQ_INT(seq_at(q, 2), 36);
	json_decref(q);
	q = query(d, NULL, NULL, 1000, 0);
	CHECK_EQ_INT(json_array_size(q), 0);
	json_decref(q);
	/* a directory without a log: empty, not an error */
	cleanup_free char *e = new_dir("query-none");
	q = query(e, NULL, NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 0);
	json_decref(q);
	CHECK_OK(e, 0);
}

static void test_caps(void)
{
	cleanup_free char *d = new_dir("caps");
	struct audit *a = open_ok(d);
	struct k8_err e = { 0 };
	char *big = xmalloc(10001);
	json_t *q, *det;

	memset(big, 'x', 10000);
	big[10000] = '\0';
	append_ok(a, "exec.start", "s", json_pack("{s:s}", "cmd", big));
	/* a multi-byte character straddling the cut is not split */
	for (int i = 0; i < 10000; i += 2)
		memcpy(big + i, "\xc3\xa9", 2);      /* é */
	append_ok(a, "exec.start", "s", json_pack("{s:s}", "cmd", big));
	/* many strings: each under the cap, together over the details cap */
	json_t *many = json_object();
	for (int i = 0; i < 8; i++) {
		char k[8];
		snprintf(k, sizeof(k), "k%d", i);
		json_object_set_new(many, k, json_stringn(big, 3000));
	}
	append_ok(a, "exec.start", "s", many);
	/* untrusted bytes: newlines, quotes, control characters, non-ASCII */
	append_ok(a, "exec.start", "s\n\"x\"\x01", json_pack("{s:s}", "cmd",
		  "echo \"}\n{\\\"seq\\\":1}\" \x1b[31m\x7f \xe2\x98\x83"));
	append_ok(a, "daemon.start", NULL, NULL);
	/* deep nesting is cut, not recursed into without end */
	json_t *deep = json_object(), *cur = deep;
	for (int i = 0; i < 200; i++) {
		json_t *n = json_object();
		json_object_set_new(cur, "n", n);
		cur = n;
	}
	append_ok(a, "exec.start", NULL, deep);
	/* bad input */
	CHECK_EQ_INT(audit_append(a, "Bad Action", NULL, NULL, &e), -EINVAL);
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(audit_append(a, "", NULL, NULL, &e), -EINVAL);
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(audit_append(a, "audit.warning", NULL, NULL, &e), -EINVAL);
	memset(&e, 0, sizeof(e));
	json_t *arr = json_array();
	CHECK_EQ_INT(audit_append(a, "x.y", NULL, arr, &e), -EINVAL);
	json_decref(arr);
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(audit_append(a, "x.y", "\xff\xfe", NULL, &e), -EINVAL);
	audit_close(a);
	free(big);
	CHECK_OK(d, 6);

	q = query(d, NULL, NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 6);
	det = json_object_get(json_array_get(q, 0), "details");
	const char *cmd = json_string_value(json_object_get(det, "cmd"));
	CHECK(cmd && strlen(cmd) <= AUDIT_STRING_MAX && strlen(cmd) > 4000);
	CHECK(cmd && strstr(cmd, "...[truncated: 10000 bytes]"));
	det = json_object_get(json_array_get(q, 1), "details");
	cmd = json_string_value(json_object_get(det, "cmd"));
	CHECK(cmd && strlen(cmd) <= AUDIT_STRING_MAX && !memcmp(cmd, "\xc3\xa9", 2));
	det = json_object_get(json_array_get(q, 2), "details");
	CHECK(json_is_true(json_object_get(det, "truncated")));
	CHECK(json_integer_value(json_object_get(det, "bytes")) > (json_int_t)AUDIT_DETAILS_MAX);
	CHECK(json_string_length(json_object_get(det, "sha256")) == 64);
	CHECK_STR(json_string_value(json_object_get(json_array_get(q, 3), "sandbox")),
		  "s\n\"x\"\x01");
	det = json_object_get(json_array_get(q, 3), "details");
	CHECK_STR(json_string_value(json_object_get(det, "cmd")),
		  "echo \"}\n{\\\"seq\\\":1}\" \x1b[31m\x7f \xe2\x98\x83");
	CHECK(json_is_null(json_object_get(json_array_get(q, 4), "sandbox")));
	det = json_object_get(json_array_get(q, 4), "details");
	CHECK(json_is_object(det) && json_object_size(det) == 0);
	json_decref(q);

	/* the log is one ASCII line per record */
	struct lines l;
	lines_load(d, &l);
	CHECK_EQ_INT(l.n, 6);
	bool ascii = true;
	for (size_t i = 0; i < l.n; i++)
		for (const char *p = l.v[i]; *p; p++)
			if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7f)
				ascii = false;
	CHECK(ascii);
	lines_free(&l);
}

/* ---- segments ---- */

static bool exists_in(const char *dir, const char *name)
{
	cleanup_free char *p = path_in(dir, name);
	struct stat st;

	return stat(p, &st) == 0;
}

static int copy_seg(const char *from, const char *to, const char *name)
{
	copy_file(from, to, name);
	return 0;
}

/* A log of `n` records with a small segment size; returns how many segments it has. */
static char *make_segmented(const char *name, int n, unsigned *nseg)
{
	char *d = new_dir(name);
	struct audit *a = open_ok(d);

	audit_set_segment_bytes(a, AUDIT_SEGMENT_MIN);
	for (int i = 1; i <= n; i++)
		append_ok(a, "sandbox.create", "alpha",
			  json_pack("{s:i,s:s}", "i", i, "pad", "0123456789012345678901234567890123"
				    "456789012345678901234567890123456789012345678901234567890123"));
	audit_close(a);
	*nseg = 0;
	for (unsigned k = 1; k < 1000; k++) {
		char sn[32];
		snprintf(sn, sizeof(sn), "audit.log.%06u", k);
		if (!exists_in(d, sn))
			break;
		*nseg = k;
	}
	return d;
}

static char *copy_segmented(const char *from, const char *name, unsigned nseg)
{
	char *d = copy_dir(from, name);

	for (unsigned k = 1; k <= nseg; k++) {
		char sn[32];
		snprintf(sn, sizeof(sn), "audit.log.%06u", k);
		copy_seg(from, d, sn);
	}
	return d;
}

/* Change one byte of a record's details in file `name` (a digit of "i"). */
static void tamper_in(const char *dir, const char *name)
{
	cleanup_free char *p = path_in(dir, name);
	cleanup_free char *buf = NULL;
	size_t len;
	char *i;

	CHECK_EQ_INT(read_file(p, 64u << 20, &buf, &len), 0);
	i = buf ? strstr(buf, "\"i\":") : NULL;
	CHECK(i != NULL);
	if (!i)
		return;
	i[4] = i[4] == '9' ? '8' : (char)(i[4] + 1);
	write_file_atomic(p, buf, len, 0600);
}

static void test_segments(void)
{
	unsigned nseg = 0;
	cleanup_free char *good = make_segmented("seg-good", 200, &nseg);
	json_t *q, *r;

	/* 200 records of ~250 bytes with 4 KiB segments: several segments, all in one chain */
	CHECK(nseg >= 5);
	CHECK_OK(good, 200);
	r = verify(good);
	CHECK_EQ_INT(rep_int(r, "segments"), nseg + 1);
	json_decref(r);
	q = query(good, NULL, NULL, 0, 0);
	CHECK_EQ_INT(json_array_size(q), 200);
	CHECK_EQ_INT(seq_at(q, 0), 1);
	CHECK_EQ_INT(seq_at(q, 199), 200);
	json_decref(q);
	q = query(good, NULL, NULL, 0, 3);           /* the newest 3, across files */
	CHECK_EQ_INT(json_array_size(q), 3);
	CHECK_EQ_INT(seq_at(q, 2), 200);
	json_decref(q);
	q = query(good, NULL, NULL, 15, 2);          /* paging forward */
	CHECK_EQ_INT(seq_at(q, 0), 16);
	json_decref(q);

	/* reopening goes on in the chain, and writes no warning */
	{
		cleanup_free char *d = copy_segmented(good, "seg-reopen", nseg);
		struct audit *a = open_ok(d);
		append_ok(a, "sandbox.remove", "alpha", NULL);
		audit_close(a);
		CHECK_OK(d, 201);
		CHECK_EQ_INT(count_action(d, "audit.warning"), 0);
	}
	/* a record changed in a middle segment: named by segment and line */
	{
		cleanup_free char *d = copy_segmented(good, "seg-tamper", nseg);
		tamper_in(d, "audit.log.000002");
		r = verify(d);
		CHECK(!rep_ok(r));
		CHECK_STR(json_string_value(json_object_get(r, "segment")), "audit.log.000002");
		CHECK_EQ_INT(rep_int(r, "line"), 1);
		CHECK(strstr(rep_reason(r), "line 1 of audit.log.000002") != NULL);
		if (getenv("T_VERBOSE"))
			fprintf(stderr, "  %s\n", rep_reason(r));
		json_decref(r);
	}
	/* a middle segment removed: named */
	{
		cleanup_free char *d = copy_segmented(good, "seg-gone", nseg);
		cleanup_free char *p = path_in(d, "audit.log.000003");
		unlink(p);
		r = verify(d);
		CHECK(!rep_ok(r));
		CHECK(strstr(rep_reason(r), "audit.log.000003 is missing") != NULL);
		CHECK_STR(json_string_value(json_object_get(r, "segment")), "audit.log.000004");
		json_decref(r);
		/* the daemon starts anyway, with a warning, and verify keeps failing */
		struct audit *a = open_ok(d);
		audit_close(a);
		CHECK_EQ_INT(count_action(d, "audit.warning"), 1);
		r = verify(d);
		CHECK(!rep_ok(r));
		json_decref(r);
	}
	/* the first segment removed: record 1 is missing */
	{
		cleanup_free char *d = copy_segmented(good, "seg-first", nseg);
		cleanup_free char *p = path_in(d, "audit.log.000001");
		unlink(p);
		CHECK_BAD(d, 1, 1);
	}
	/* the tail cut: audit.log emptied, the last segment removed */
	{
		cleanup_free char *d = copy_segmented(good, "seg-tail", nseg);
		char sn[32];
		snprintf(sn, sizeof(sn), "audit.log.%06u", nseg);
		cleanup_free char *p = path_in(d, sn);
		cleanup_free char *lp = path_in(d, AUDIT_LOG_NAME);
		unlink(p);
		write_file_atomic(lp, "", 0, 0600);
		r = verify(d);
		CHECK(!rep_ok(r));
		CHECK(strstr(rep_reason(r), "cut off") != NULL);
		json_decref(r);
	}
	/* a segment cut short (no newline at its end) */
	{
		cleanup_free char *d = copy_segmented(good, "seg-short", nseg);
		cleanup_free char *p = path_in(d, "audit.log.000002");
		struct stat st;
		CHECK_EQ_INT(stat(p, &st), 0);
		CHECK_EQ_INT(truncate(p, st.st_size - 5), 0);
		r = verify(d);
		CHECK(!rep_ok(r));
		CHECK_STR(json_string_value(json_object_get(r, "segment")), "audit.log.000002");
		json_decref(r);
	}
	/* a rotation interrupted between link and unlink: finished at open, nothing lost */
	{
		cleanup_free char *d = copy_segmented(good, "seg-link", nseg);
		char sn[32];
		struct lines l;
		snprintf(sn, sizeof(sn), "audit.log.%06u", nseg + 1);
		cleanup_free char *lp = path_in(d, AUDIT_LOG_NAME), *sp = path_in(d, sn);
		lines_load(d, &l);
		size_t live = l.n;
		lines_free(&l);
		CHECK(live > 0);
		CHECK_EQ_INT(link(lp, sp), 0);
		struct audit *a = open_ok(d);
		append_ok(a, "sandbox.remove", "alpha", NULL);
		audit_close(a);
		CHECK_OK(d, 201);
		CHECK_EQ_INT(count_action(d, "audit.warning"), 0);
		CHECK(exists_in(d, sn));
	}
}

/* Group commit: concurrent appends share fdatasyncs, and every record still lands in
 * order with an intact chain. */
static void test_group_commit(void)
{
	cleanup_free char *d = new_dir("group");
	struct audit *a = open_ok(d);
	struct worker w[8];
	pthread_t t[8];
	uint64_t commits;

	for (int i = 0; i < 8; i++) {
		w[i] = (struct worker){ .a = a, .n = 50, .id = i % 2 };
		pthread_create(&t[i], NULL, appender, &w[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ_INT(w[i].fails, 0);
	}
	commits = audit_commits(a);
	CHECK(commits >= 1);
	CHECK(commits < 400);            /* 400 records, fewer syncs: they were batched */
	fprintf(stderr, "  group commit: 400 records in %llu syncs\n",
		(unsigned long long)commits);
	audit_close(a);
	CHECK_OK(d, 400);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/k8-test-audit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	test_fresh();
	test_format();
	test_threads();
	test_group_commit();
	cleanup_free char *good = make_log("good", 20);
	test_tamper(good);
	test_repair(good);
	test_random_damage(good);
	test_query();
	test_caps();
	test_segments();
	if (!t_fail)
		rm_rf(base);
	else
		fprintf(stderr, "test files kept in %s\n", base);
	return T_DONE();
}
