/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_api.c - request-level helpers of the Docker layer: API version prefixes,
 * moby's boolean query values, the filters parameter in both JSON forms (and until=),
 * container names and id prefixes, port publishing specs. */
#include "docker/filters.h"
#include "docker/names.h"
#include "docker/query.h"
#include "t.h"

#include <time.h>

static void test_query(void)
{
	struct dq_path p;
	char msg[256];

	CHECK_EQ_INT(dq_split_path("/v1.44/containers/json", &p, msg, sizeof(msg)), 0);
	CHECK(p.major == 1 && p.minor == 44);
	CHECK_STR(p.rest, "/containers/json");
	CHECK_EQ_INT(dq_split_path("/version", &p, msg, sizeof(msg)), 0);
	CHECK(p.major == 0 && p.minor == 0);
	CHECK_STR(p.rest, "/version");
	CHECK_EQ_INT(dq_split_path("/volumes", &p, msg, sizeof(msg)), 0);   /* 'v' + letter */
	CHECK_STR(p.rest, "/volumes");
	CHECK_EQ_INT(dq_split_path("/v1.24/_ping", &p, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(dq_split_path("/v1.47", &p, msg, sizeof(msg)), 0);
	CHECK_STR(p.rest, "/");
	CHECK_EQ_INT(dq_split_path("/v1.12/info", &p, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "client version 1.12 is too old. Minimum supported API version is 1.24"));
	CHECK_EQ_INT(dq_split_path("/v1.99/info", &p, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "client version 1.99 is too new. Maximum supported API version is 1.47"));
	CHECK_EQ_INT(dq_split_path("/v2.0/info", &p, msg, sizeof(msg)), -EINVAL);
	CHECK_EQ_INT(dq_split_path("/v1/info", &p, msg, sizeof(msg)), -EINVAL);
	CHECK_EQ_INT(dq_split_path("/v1.4x/info", &p, msg, sizeof(msg)), -EINVAL);
	CHECK_EQ_INT(dq_split_path("/v99999999.1/info", &p, msg, sizeof(msg)), -EINVAL);

	CHECK(!dq_bool(NULL));
	const char *f[] = { "", "0", "no", "false", "none", "False", "NO", " none ", "FALSE" };
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		CHECK(!dq_bool(f[i]));
	const char *t[] = { "1", "True", "true", "yes", "on", "2", "anything" };
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		CHECK(dq_bool(t[i]));
	CHECK(dq_bool_default(NULL, true));
	CHECK(dq_bool_default("", true));
	CHECK(!dq_bool_default("0", true));

	unsigned long long v;
	CHECK_EQ_INT(dq_uint("20", 1000, &v), 0);
	CHECK_EQ_INT(v, 20);
	CHECK_EQ_INT(dq_uint("1001", 1000, &v), -EINVAL);
	CHECK_EQ_INT(dq_uint("-1", 1000, &v), -EINVAL);
	CHECK_EQ_INT(dq_uint("all", 1000, &v), -EINVAL);
	CHECK_EQ_INT(dq_uint("99999999999999999999999", ~0ULL, &v), -EINVAL);
	CHECK_EQ_INT(dq_uint("18446744073709551615", ~0ULL, &v), 0);
	CHECK_EQ_INT(dq_uint("", 10, &v), -EINVAL);
}

static const char *const ctr_filters[] = { "ancestor", "id", "label", "name", "status", NULL };

static void test_filters(void)
{
	struct dfilters f;
	struct k8_err e = { 0 };

	CHECK_EQ_INT(dfilters_parse("", ctr_filters, &f, &e), 0);
	CHECK_EQ_INT(f.n, 0);
	CHECK(dfilters_match_regex(&f, "name", "/anything"));
	dfilters_free(&f);

	/* The list form (docker CLI, docker-py) */
	CHECK_EQ_INT(dfilters_parse("{\"label\":[\"app=web\",\"tier\"],\"status\":[\"running\"],"
				    "\"name\":[\"^/openhands-runtime-\"]}", ctr_filters, &f, &e), 0);
	const char *k[] = { "app", "tier", "x" }, *v[] = { "web", "", "y" };
	CHECK(dfilters_match_labels(&f, k, v, 3));
	CHECK(!dfilters_match_labels(&f, k, v, 1));          /* every label value must hold */
	const char *v2[] = { "db", "", "y" };
	CHECK(!dfilters_match_labels(&f, k, v2, 3));
	CHECK(dfilters_match_exact(&f, "status", "running"));
	CHECK(!dfilters_match_exact(&f, "status", "exited"));
	CHECK(dfilters_match_regex(&f, "name", "/openhands-runtime-abc"));
	CHECK(!dfilters_match_regex(&f, "name", "/x-openhands-runtime-abc"));
	CHECK_EQ_INT(dfilters_check_status(&f, &e), 0);
	dfilters_free(&f);

	/* The map form (older clients) */
	CHECK_EQ_INT(dfilters_parse("{\"name\":{\"web\":true},\"id\":{\"abc1\":true}}",
				    ctr_filters, &f, &e), 0);
	CHECK(dfilters_match_regex(&f, "name", "/my-web-1"));  /* unanchored, like moby */
	CHECK(!dfilters_match_regex(&f, "name", "/db"));
	CHECK(dfilters_match_regex(&f, "id", "00abc1ff"));
	CHECK(dfilters_match_exact(&f, "status", "exited"));   /* absent filter: all match */
	dfilters_free(&f);

	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(dfilters_parse("{\"colour\":[\"red\"]}", ctr_filters, &f, &e), -EINVAL);
	CHECK(strstr(e.msg, "invalid filter 'colour'"));
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(dfilters_parse("{\"name\":\"x\"}", ctr_filters, &f, &e), -EINVAL);
	CHECK_EQ_INT(dfilters_parse("[1]", ctr_filters, &f, &e), -EINVAL);
	CHECK_EQ_INT(dfilters_parse("{", ctr_filters, &f, &e), -EINVAL);
	CHECK_EQ_INT(dfilters_parse("{\"name\":[1]}", ctr_filters, &f, &e), -EINVAL);
	CHECK_EQ_INT(dfilters_parse("{\"name\":{\"a\":\"yes\"}}", ctr_filters, &f, &e), -EINVAL);
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(dfilters_parse("{\"status\":[\"sleeping\"]}", ctr_filters, &f, &e), 0);
	CHECK_EQ_INT(dfilters_check_status(&f, &e), -EINVAL);
	CHECK(strstr(e.msg, "invalid filter 'status=sleeping'"));
	dfilters_free(&f);

	/* Bounded: too many values. */
	char big[8192] = "{\"name\":[";
	for (int i = 0; i <= DF_FILTER_VALUES_MAX; i++)
		sprintf(big + strlen(big), "%s\"n%d\"", i ? "," : "", i);
	strcat(big, "]}");
	CHECK_EQ_INT(dfilters_parse(big, ctr_filters, &f, &e), -E2BIG);

	/* ancestor: same reference after normalisation, or an id prefix. */
	CHECK_EQ_INT(dfilters_parse("{\"ancestor\":[\"python:3.12-slim\"]}", ctr_filters, &f,
				    &e), 0);
	CHECK(dfilters_match_ancestor(&f, "docker.io/library/python:3.12-slim", "sha256:ab12"));
	CHECK(!dfilters_match_ancestor(&f, "docker.io/library/python:3.11", "sha256:ab12"));
	dfilters_free(&f);
	CHECK_EQ_INT(dfilters_parse("{\"ancestor\":[\"busybox\",\"sha256:ab12cd\"]}", ctr_filters,
				    &f, &e), 0);
	CHECK(dfilters_match_ancestor(&f, "busybox:latest", NULL));
	CHECK(dfilters_match_ancestor(&f, "alpine", "sha256:ab12cdef"));
	CHECK(!dfilters_match_ancestor(&f, "alpine", "sha256:ffff"));
	dfilters_free(&f);

	/* reference: a glob on the familiar name, then on the name without its tag. */
	static const char *const img_filters[] = { "reference", NULL };
	const char *names[] = { "python:3.12-slim", "127.0.0.1:5000/library/python:3.12" };
	CHECK_EQ_INT(dfilters_parse("{\"reference\":{\"python\":true}}", img_filters, &f, &e), 0);
	CHECK(dfilters_match_reference(&f, names, 1));
	CHECK(!dfilters_match_reference(&f, names + 1, 1));     /* '*' never crosses '/' */
	dfilters_free(&f);
	CHECK_EQ_INT(dfilters_parse("{\"reference\":[\"py*:3.12*\"]}", img_filters, &f, &e), 0);
	CHECK(dfilters_match_reference(&f, names, 1));
	dfilters_free(&f);
	CHECK_EQ_INT(dfilters_parse("{\"reference\":[\"*/library/python\"]}", img_filters, &f,
				    &e), 0);
	CHECK(!dfilters_match_reference(&f, names, 1));
	CHECK(dfilters_match_reference(&f, names, 2));
	CHECK(!dfilters_match_reference(&f, NULL, 0));
	dfilters_free(&f);
	CHECK(dfilters_match_reference(&f, NULL, 0));           /* absent: everything */
}

static void test_regex(void)
{
	CHECK_EQ_INT(dfilters_regex("web", "/my-web-1"), 1);
	CHECK_EQ_INT(dfilters_regex("^/web$", "/web"), 1);
	CHECK_EQ_INT(dfilters_regex("^/web$", "/web2"), 0);
	CHECK_EQ_INT(dfilters_regex("^/w.b", "/wxb"), 1);
	CHECK_EQ_INT(dfilters_regex("a.*z", "a123z"), 1);
	CHECK_EQ_INT(dfilters_regex("^ab+c$", "abbbc"), 1);
	CHECK_EQ_INT(dfilters_regex("^ab+c$", "ac"), 0);
	CHECK_EQ_INT(dfilters_regex("^ab?c$", "ac"), 1);
	CHECK_EQ_INT(dfilters_regex("a\\.b", "a.b"), 1);
	CHECK_EQ_INT(dfilters_regex("a\\.b", "axb"), 0);
	CHECK_EQ_INT(dfilters_regex("[ab]", "a"), -1);
	CHECK_EQ_INT(dfilters_regex("(a|b)", "a"), -1);
	CHECK_EQ_INT(dfilters_regex("*a", "a"), -1);
	CHECK_EQ_INT(dfilters_regex("\\d", "1"), -1);
	char s[2001];
	memset(s, 'a', 2000);
	s[2000] = '\0';
	CHECK_EQ_INT(dfilters_regex("a*a*a*a*a*a*a*a*a*a*a*a*b", s), 0);  /* linear, no blow-up */
}

static void test_names(void)
{
	char out[DN_NAME_MAX + 1];
	struct k8_err e = { 0 };

	CHECK_EQ_INT(dn_name_check("/web-1", out, &e), 0);
	CHECK_STR(out, "web-1");
	CHECK_EQ_INT(dn_name_check("a.b_c-d", out, &e), 0);
	CHECK_EQ_INT(dn_name_check("w", out, &e), -EINVAL);        /* two characters at least */
	CHECK(strstr(e.msg, "Invalid container name (w), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"));
	CHECK_EQ_INT(dn_name_check("-web", out, &e), -EINVAL);
	CHECK_EQ_INT(dn_name_check("we b", out, &e), -EINVAL);
	CHECK_EQ_INT(dn_name_check("a/b", out, &e), -EINVAL);
	CHECK_EQ_INT(dn_name_check("", out, &e), -EINVAL);
	char longname[DN_NAME_MAX + 3];
	memset(longname, 'a', DN_NAME_MAX + 1);
	longname[DN_NAME_MAX + 1] = '\0';
	CHECK_EQ_INT(dn_name_check(longname, out, &e), -EINVAL);

	char id[DN_ID_LEN + 1], id2[DN_ID_LEN + 1];
	CHECK_EQ_INT(dn_new_id(id), 0);
	CHECK_EQ_INT(dn_new_id(id2), 0);
	CHECK(dn_is_full_id(id));
	CHECK(strcmp(id, id2) != 0);
	CHECK(!dn_is_full_id("abc"));
	CHECK(!dn_is_full_id("ABCDEF0000000000000000000000000000000000000000000000000000000000"));

	const char *ids[] = {
		"abc1230000000000000000000000000000000000000000000000000000000000",
		"abc4560000000000000000000000000000000000000000000000000000000000",
		"def0000000000000000000000000000000000000000000000000000000000000",
	};
	const char *names[] = { "/web", "/abc", NULL };
	CHECK_EQ_INT(dn_lookup(ids, names, 3, ids[1]), 1);
	CHECK_EQ_INT(dn_lookup(ids, names, 3, "web"), 0);
	CHECK_EQ_INT(dn_lookup(ids, names, 3, "/web"), 0);
	CHECK_EQ_INT(dn_lookup(ids, names, 3, "abc"), 1);      /* a name wins over a prefix */
	CHECK_EQ_INT(dn_lookup(ids, names, 3, "abc4"), 1);
	CHECK_EQ_INT(dn_lookup(ids, names, 3, "ab"), -EINVAL);  /* ambiguous */
	CHECK_EQ_INT(dn_lookup(ids, names, 3, "d"), 2);
	CHECK_EQ_INT(dn_lookup(ids, names, 3, "x"), -ENOENT);
	CHECK_EQ_INT(dn_lookup(ids, names, 3, ""), -ENOENT);
	CHECK_EQ_INT(dn_lookup(ids, NULL, 3, "web"), -ENOENT);
}

static void test_ports(void)
{
	struct dn_port p, ps[8];
	struct k8_err e = { 0 };

	CHECK_EQ_INT(dn_port_spec("127.0.0.1::8888", &p, &e), 0);
	CHECK(p.ctr_port == 8888 && p.host_port == 0 && p.proto == DN_TCP && !p.host_any);
	CHECK_STR(p.host_ip, "127.0.0.1");
	CHECK_EQ_INT(dn_port_spec("8888/tcp", &p, &e), 0);
	CHECK(p.ctr_port == 8888 && p.host_port == 0 && p.host_any);
	CHECK_EQ_INT(dn_port_spec("8080:80", &p, &e), 0);
	CHECK(p.ctr_port == 80 && p.host_port == 8080 && p.host_any);
	CHECK_EQ_INT(dn_port_spec("127.0.0.1:5353:53/udp", &p, &e), 0);
	CHECK(p.proto == DN_UDP && p.host_port == 5353);
	CHECK_EQ_INT(dn_port_spec("[::1]:8080:80", &p, &e), 0);
	CHECK_STR(p.host_ip, "::1");
	CHECK_EQ_INT(dn_port_spec("0.0.0.0:80:80", &p, &e), 0);
	CHECK(p.host_any);
	CHECK_EQ_INT(dn_port_spec("::1:8080:80", &p, &e), -EINVAL);
	CHECK_EQ_INT(dn_port_spec("8000-8010:80-90", &p, &e), -ENOTSUP);
	CHECK_EQ_INT(dn_port_spec("80/sctp", &p, &e), -ENOTSUP);
	CHECK_EQ_INT(dn_port_spec("80/icmp", &p, &e), -EINVAL);
	CHECK_EQ_INT(dn_port_spec("0", &p, &e), -EINVAL);
	CHECK_EQ_INT(dn_port_spec("65536", &p, &e), -EINVAL);
	CHECK_EQ_INT(dn_port_spec("1.2.3:80:80", &p, &e), -EINVAL);
	CHECK_EQ_INT(dn_port_spec("x:80", &p, &e), -EINVAL);

	json_error_t je;
	json_t *b = json_loads("{\"8888/tcp\": [{\"HostIp\": \"127.0.0.1\", \"HostPort\": \"\"}],"
			       " \"53/udp\": [{\"HostIp\": \"\", \"HostPort\": \"5353\"},"
			       " {\"HostPort\": \"5354\"}], \"9000\": null}", 0, &je);
	CHECK_EQ_INT(dn_port_bindings(b, ps, 8, &e), 4);
	CHECK(ps[0].ctr_port == 8888 && ps[0].host_port == 0 && !ps[0].host_any);
	CHECK(ps[1].proto == DN_UDP && ps[1].host_port == 5353 && ps[1].host_any);
	CHECK(ps[2].host_port == 5354);
	CHECK(ps[3].ctr_port == 9000 && ps[3].host_any && ps[3].host_port == 0);
	CHECK_EQ_INT(dn_port_bindings(b, ps, 2, &e), -E2BIG);
	json_decref(b);
	b = json_loads("{\"80/tcp\": [{\"HostIp\": \"localhost\"}]}", 0, &je);
	CHECK_EQ_INT(dn_port_bindings(b, ps, 8, &e), -EINVAL);
	json_decref(b);
	b = json_loads("{\"80/tcp\": [{\"HostPort\": 80}]}", 0, &je);
	CHECK_EQ_INT(dn_port_bindings(b, ps, 8, &e), -EINVAL);
	json_decref(b);
	b = json_loads("{\"80/tcp\": {}}", 0, &je);
	CHECK_EQ_INT(dn_port_bindings(b, ps, 8, &e), -EINVAL);
	json_decref(b);
	CHECK_EQ_INT(dn_port_bindings(NULL, ps, 8, &e), 0);

	b = json_loads("{\"8888/tcp\": {}, \"53/udp\": {}}", 0, &je);
	CHECK_EQ_INT(dn_exposed_ports(b, ps, 8, &e), 2);
	CHECK(ps[0].ctr_port == 8888 && ps[1].proto == DN_UDP);
	json_decref(b);
	b = json_loads("{\"http\": {}}", 0, &je);
	CHECK_EQ_INT(dn_exposed_ports(b, ps, 8, &e), -EINVAL);
	json_decref(b);
}

/* until= of the prune endpoints, as moby's timetypes.GetTimestamp reads it. */
static int64_t until_of(const char *val, int *rc)
{
	static const char *const allowed[] = { "until", "label", NULL };
	struct dfilters f;
	struct k8_err e = { 0 };
	char json[512];
	int64_t at = -1;

	snprintf(json, sizeof(json), "{\"until\":[\"%s\"]}", val);
	*rc = dfilters_parse(json, allowed, &f, &e);
	if (*rc == 0)
		*rc = dfilters_until(&f, 1000LL * 1000000000, &at, &e);
	dfilters_free(&f);
	return at;
}

static void test_until(void)
{
	static const char *const allowed[] = { "until", "label", NULL };
	struct dfilters f;
	struct k8_err e = { 0 };
	int64_t at;
	int rc;

	/* absent: no bound */
	CHECK_EQ_INT(dfilters_parse("{\"label\":[\"a\"]}", allowed, &f, &e), 0);
	CHECK_EQ_INT(dfilters_until(&f, 5, &at, &e), 0);
	CHECK(at == INT64_MAX);
	dfilters_free(&f);
	/* Go durations, back from now (1000 s here) */
	CHECK(until_of("10s", &rc) == 990LL * 1000000000 && rc == 0);
	CHECK(until_of("1m30s", &rc) == 910LL * 1000000000 && rc == 0);
	CHECK(until_of("0.5h", &rc) == -800LL * 1000000000 && rc == 0);
	CHECK(until_of("1500ms", &rc) == 998500000000LL && rc == 0);
	CHECK(until_of("-10s", &rc) == 1010LL * 1000000000 && rc == 0);
	/* Unix times, RFC 3339 */
	CHECK(until_of("1700000000", &rc) == 1700000000LL * 1000000000 && rc == 0);
	CHECK(until_of("1700000000.25", &rc) == 1700000000250000000LL && rc == 0);
	CHECK(until_of("2023-11-14T22:13:20Z", &rc) == 1700000000LL * 1000000000 && rc == 0);
	CHECK(until_of("2023-11-14T23:13:20+01:00", &rc) == 1700000000LL * 1000000000 &&
	      rc == 0);
	/* a date without a zone: the host's local time */
	struct tm tm = { .tm_year = 123, .tm_mon = 10, .tm_mday = 14, .tm_isdst = -1 };
	CHECK(until_of("2023-11-14", &rc) == (int64_t)mktime(&tm) * 1000000000 && rc == 0);
	/* refused */
	for (const char *const *b = (const char *const[]){ "", "h", "10x", "1.2.3s",
							   "2023-13-01", "2023-11-14T", "1e9",
							   "99999999999999999999", "3000000h", "s10",
							   "1700000000.", NULL }; *b; b++) {
		until_of(*b, &rc);
		CHECK_EQ_INT(rc, -EINVAL);
	}
	CHECK(until_of("10", &rc) == 10LL * 1000000000 && rc == 0);  /* a Unix time */
	/* past what int64 nanoseconds hold: after (or before) everything, never a wrap
	 * (fuzz_dstream found the Unix time's) */
	CHECK(until_of("83484566900", &rc) == INT64_MAX && rc == 0);
	CHECK(until_of("9999-12-31T23:59:59Z", &rc) == INT64_MAX && rc == 0);
	CHECK_EQ_INT(dfilters_parse("{\"until\":[\"-2500000h\"]}", allowed, &f, &e), 0);
	CHECK_EQ_INT(dfilters_until(&f, 2000000000LL * 1000000000, &at, &e), 0);
	CHECK(at == INT64_MAX);
	dfilters_free(&f);
	memset(&e, 0, sizeof(e));
	CHECK_EQ_INT(dfilters_parse("{\"until\":[\"1h\",\"2h\"]}", allowed, &f, &e), 0);
	CHECK_EQ_INT(dfilters_until(&f, 0, &at, &e), -EINVAL);
	CHECK(strstr(e.msg, "more than one until"));
	dfilters_free(&f);
}

/* The image routes' name rule and familiar names (src/docker: no daemon needed). */
static void test_image_paths(void)
{
	char seg[6][32], msg[128], fam[64];
	int n;

	memset(seg, 0, sizeof(seg));
	n = 5;
	strcpy(seg[0], "images"); strcpy(seg[1], "127.0.0.1:5000"); strcpy(seg[2], "a");
	strcpy(seg[3], "py:1"); strcpy(seg[4], "json");
	CHECK_EQ_INT(dq_image_segments(&seg[0][0], sizeof(seg[0]), &n, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(n, 3);
	CHECK_STR(seg[1], "127.0.0.1:5000/a/py:1");
	CHECK_STR(seg[2], "json");
	n = 3;                          /* DELETE /images/a/b:1: every segment is the name */
	strcpy(seg[0], "images"); strcpy(seg[1], "a"); strcpy(seg[2], "b:1");
	CHECK_EQ_INT(dq_image_segments(&seg[0][0], sizeof(seg[0]), &n, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(n, 2);
	CHECK_STR(seg[1], "a/b:1");
	n = 3;                          /* not an image route: untouched */
	strcpy(seg[0], "containers"); strcpy(seg[1], "x"); strcpy(seg[2], "json");
	CHECK_EQ_INT(dq_image_segments(&seg[0][0], sizeof(seg[0]), &n, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(n, 3);
	n = 6;                          /* a joined name longer than one segment */
	strcpy(seg[0], "images");
	for (int i = 1; i < 5; i++)
		strcpy(seg[i], "0123456789");
	strcpy(seg[5], "json");
	CHECK_EQ_INT(dq_image_segments(&seg[0][0], sizeof(seg[0]), &n, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "longer than 31 bytes") != NULL);
	dn_familiar("docker.io/library/python:3", fam, sizeof(fam));
	CHECK_STR(fam, "python:3");
	dn_familiar("docker.io/x/y:1", fam, sizeof(fam));
	CHECK_STR(fam, "x/y:1");
	dn_familiar("127.0.0.1:5000/library/py:1", fam, sizeof(fam));
	CHECK_STR(fam, "127.0.0.1:5000/library/py:1");
}

int main(void)
{
	test_query();
	test_image_paths();
	test_filters();
	test_until();
	test_regex();
	test_names();
	test_ports();
	return T_DONE();
}
