/* SPDX-License-Identifier: Apache-2.0 */
/* test_api_route.c - the API's matcher and field checkers (src/daemon/api_route.c), and
 * kosa8d.sock's route table (api.c) checked for shape. */
#include "daemon/api.h"
#include "daemon/api_route.h"
#include "daemon/images.h"
#include "daemon/docker_api.h"
#include "docker/names.h"
#include "t.h"

#include <stdio.h>

static int h_a(struct api_call *c) { (void)c; return 1; }
static int h_b(struct api_call *c) { (void)c; return 2; }
static int h_c(struct api_call *c) { (void)c; return 3; }
static int h_d(struct api_call *c) { (void)c; return 4; }

static const struct api_route table[] = {
	{ "GET", "/v1/status", h_a },
	{ "POST", "/v1/images/pull", h_b },
	{ "DELETE", "/v1/images/{ref}", h_c },
	{ "POST", "/v1/sandboxes/{name}/containers/{id}/exec", h_d },
	{ "DELETE", "/v1/sandboxes/{name}/containers/{id}", h_c },
	{ "POST", "/v1/sandboxes/{name}/containers/{id}/stop", h_b },
};

/* Split and match; returns the handler's number, or the errno the matcher gave. */
static int route(const char *method, const char *url, struct api_call *call, char *allow)
{
	struct k8_err err = { 0 };
	int r;

	memset(call, 0, sizeof(*call));
	r = api_path_split(url, &call->path, &err);
	if (r)
		return r;
	r = api_match(table, ARRAY_SIZE(table), method, &call->path, &call->match, allow, 64);
	return r ? r : call->match.route->fn(call);
}

static void test_match(void)
{
	static struct api_call c;
	char allow[64];

	CHECK_EQ_INT(route("GET", "/v1/status", &c, allow), 1);
	CHECK_EQ_INT(route("GET", "/v1/status/", &c, allow), 1);        /* trailing slash */
	CHECK_EQ_INT(route("GET", "//v1//status", &c, allow), 1);       /* repeated slashes */
	CHECK_EQ_INT(route("GET", "/v1/statu", &c, allow), -ENOENT);
	CHECK_EQ_INT(route("GET", "/v1/status/x", &c, allow), -ENOENT);
	CHECK_EQ_INT(route("GET", "/v1", &c, allow), -ENOENT);
	CHECK_EQ_INT(route("GET", "/", &c, allow), -ENOENT);
	CHECK_EQ_INT(route("GET", "", &c, allow), -ENOENT);
	CHECK_EQ_INT(route("GET", "/v2/status", &c, allow), -ENOENT);

	/* a literal route wins for its method; another method falls to the parameter */
	CHECK_EQ_INT(route("POST", "/v1/images/pull", &c, allow), 2);
	CHECK_EQ_INT(route("DELETE", "/v1/images/pull", &c, allow), 3);
	CHECK_STR(api_param(&c, "ref"), "pull");

	/* method mismatch: 405 with the methods the path takes, each once */
	CHECK_EQ_INT(route("GET", "/v1/images/pull", &c, allow), -EBADRQC);
	CHECK_STR(allow, "POST, DELETE");
	CHECK_EQ_INT(route("POST", "/v1/status", &c, allow), -EBADRQC);
	CHECK_STR(allow, "GET");
	CHECK_EQ_INT(route("PUT", "/v1/sandboxes/a/containers/b", &c, allow), -EBADRQC);
	CHECK_STR(allow, "DELETE");

	/* parameters by name, each decoded on its own: an encoded '/' stays inside */
	CHECK_EQ_INT(route("POST", "/v1/sandboxes/box%2d1/containers/abc/exec", &c, allow), 4);
	CHECK_STR(api_param(&c, "name"), "box-1");
	CHECK_STR(api_param(&c, "id"), "abc");
	CHECK_STR(api_param(&c, "nope"), "");
	CHECK_EQ_INT(route("DELETE", "/v1/images/ghcr.io%2Fa%2fb:1", &c, allow), 3);
	CHECK_STR(api_param(&c, "ref"), "ghcr.io/a/b:1");
	CHECK_EQ_INT(c.path.n, 3);
	/* bad escapes stay literal, as libmicrohttpd's lenient decoder left them */
	CHECK_EQ_INT(route("DELETE", "/v1/images/a%zz%4", &c, allow), 3);
	CHECK_STR(api_param(&c, "ref"), "a%zz%4");
	CHECK_EQ_INT(route("DELETE", "/v1/images/%", &c, allow), 3);
	CHECK_STR(api_param(&c, "ref"), "%");
	/* a NUL byte is refused, not cut short */
	CHECK_EQ_INT(route("DELETE", "/v1/images/a%00b", &c, allow), -EINVAL);
	/* a pattern's parameters are whole segments: "" never matches */
	CHECK_EQ_INT(route("DELETE", "/v1/images/", &c, allow), -ENOENT);
}

static void test_bounds(void)
{
	static struct api_call c;
	static char url[8192];
	char allow[64];
	struct k8_err err = { 0 };

	/* API_SEG_MAX segments split; one more does not */
	strcpy(url, "");
	for (int i = 0; i < API_SEG_MAX; i++)
		strcat(url, "/s");
	CHECK_EQ_INT(api_path_split(url, &c.path, &err), 0);
	CHECK_EQ_INT(c.path.n, API_SEG_MAX);
	strcat(url, "/s");
	CHECK_EQ_INT(api_path_split(url, &c.path, &err), -ENOENT);

	/* a segment of API_SEG_LEN - 1 bytes fits, one more byte does not */
	strcpy(url, "/v1/images/");
	memset(url + strlen(url), 'a', API_SEG_LEN - 1);
	url[11 + API_SEG_LEN - 1] = '\0';
	CHECK_EQ_INT(route("DELETE", url, &c, allow), 3);
	CHECK_EQ_INT(strlen(api_param(&c, "ref")), API_SEG_LEN - 1);
	strcat(url, "a");
	CHECK_EQ_INT(route("DELETE", url, &c, allow), -EINVAL);
	/* encoded bytes count decoded: 3 * (API_SEG_LEN - 1) bytes of "%41" fit */
	strcpy(url, "/v1/images/");
	for (int i = 0; i < API_SEG_LEN - 1; i++)
		strcat(url, "%41");
	CHECK_EQ_INT(route("DELETE", url, &c, allow), 3);
	CHECK_EQ_INT(strlen(api_param(&c, "ref")), API_SEG_LEN - 1);
}

/* query lookups from a fixed list of "key=value" strings (values raw, as sent) */
static const char *q_lookup(void *ctx, const char *key)
{
	const char *const *kv = ctx;
	size_t n = strlen(key);

	for (; *kv; kv++)
		if (!strncmp(*kv, key, n) && (*kv)[n] == '=')
			return *kv + n + 1;
	return NULL;
}

static void call_with(struct api_call *c, const char *body, const char *const *query)
{
	json_decref(c->body);
	memset(c, 0, sizeof(*c));
	c->body = json_loads(body, 0, NULL);
	c->query = q_lookup;
	c->query_ctx = (void *)query;
}

static void test_fields(void)
{
	static const char *const q[] = { "limit=25", "big=18446744073709551615",
					 "over=18446744073709551616", "neg=-1", "abc=abc",
					 "sp=1%202", "empty=", "t=TRUE", "f=0", "yes=yes",
					 "maybe=maybe", "enc=a%2Fb", "nul=a%00", NULL };
	static struct api_call c;
	const char *s = NULL;
	int64_t i = 7;
	uint64_t u = 7;
	bool b = false;
	char buf[16];

	call_with(&c, "{\"timeout_s\":30,\"label\":\"x\",\"flag\":true,\"n\":null,"
		  "\"str\":\"12345\",\"empty\":\"\",\"real\":1.5,\"big\":9999}", q);

	/* integers */
	CHECK_EQ_INT(api_body_int(&c, "timeout_s", API_REQUIRED, 1, 600, &i), 0);
	CHECK_EQ_INT(i, 30);
	i = 10;
	CHECK_EQ_INT(api_body_int(&c, "absent", API_OPTIONAL, 1, 600, &i), 0);
	CHECK_EQ_INT(i, 10);            /* the default stays */
	CHECK_EQ_INT(api_body_int(&c, "n", API_OPTIONAL, 1, 600, &i), 0);  /* null is absent */
	CHECK_EQ_INT(api_body_int(&c, "big", API_OPTIONAL, 1, 600, &i), -EINVAL);
	CHECK_STR(c.err.msg, "field 'big' must be an integer 1..600");
	call_with(&c, "{\"timeout_s\":\"10\",\"real\":1.5}", q);
	CHECK_EQ_INT(api_body_int(&c, "timeout_s", API_OPTIONAL, 1, 600, &i), -EINVAL);
	CHECK_STR(c.err.msg, "field 'timeout_s' must be an integer 1..600");
	call_with(&c, "{\"real\":1.5}", q);
	CHECK_EQ_INT(api_body_int(&c, "real", API_OPTIONAL, 1, 600, &i), -EINVAL);
	call_with(&c, "{}", q);
	CHECK_EQ_INT(api_body_int(&c, "x", API_REQUIRED, 0, 1, &i), -EINVAL);
	CHECK_EQ_INT(c.err.code, -EINVAL);

	/* strings */
	call_with(&c, "{\"label\":\"x\",\"str\":\"12345\",\"empty\":\"\",\"num\":5}", q);
	CHECK_EQ_INT(api_body_str(&c, "label", API_REQUIRED, 5, &s), 0);
	CHECK_STR(s, "x");
	CHECK_EQ_INT(api_body_str(&c, "str", API_REQUIRED, 5, &s), 0);
	CHECK_EQ_INT(api_body_str(&c, "empty", API_OPTIONAL, 5, &s), 0);
	CHECK_STR(s, "");
	CHECK_EQ_INT(api_body_str(&c, "str", API_REQUIRED, 4, &s), -EINVAL);
	CHECK_STR(c.err.msg, "field 'str' must be a string of 1..4 bytes");
	call_with(&c, "{\"empty\":\"\",\"num\":5}", q);
	CHECK_EQ_INT(api_body_str(&c, "empty", API_REQUIRED, 5, &s), -EINVAL);
	call_with(&c, "{\"num\":5}", q);
	CHECK_EQ_INT(api_body_str(&c, "num", API_OPTIONAL, 5, &s), -EINVAL);
	CHECK_STR(c.err.msg, "field 'num' must be a string of 0..5 bytes");
	s = NULL;
	call_with(&c, "{}", q);
	CHECK_EQ_INT(api_body_str(&c, "absent", API_OPTIONAL, 5, &s), 0);
	CHECK(s == NULL);
	CHECK_EQ_INT(api_body_str(&c, "absent", API_REQUIRED, 5, &s), -EINVAL);

	/* booleans */
	call_with(&c, "{\"flag\":true,\"off\":false,\"one\":1}", q);
	CHECK_EQ_INT(api_body_bool(&c, "flag", API_REQUIRED, &b), 0);
	CHECK(b);
	CHECK_EQ_INT(api_body_bool(&c, "off", API_OPTIONAL, &b), 0);
	CHECK(!b);
	CHECK_EQ_INT(api_body_bool(&c, "one", API_OPTIONAL, &b), -EINVAL);
	CHECK_STR(c.err.msg, "field 'one' must be true or false");

	/* query integers: digits only, checked for overflow and range */
	call_with(&c, "{}", q);
	CHECK_EQ_INT(api_query_u64(&c, "limit", 0, 100, &u), 0);
	CHECK_EQ_INT(u, 25);
	u = 7;
	CHECK_EQ_INT(api_query_u64(&c, "absent", 0, 100, &u), 0);
	CHECK_EQ_INT(u, 7);
	CHECK_EQ_INT(api_query_u64(&c, "empty", 0, 100, &u), 0);
	CHECK_EQ_INT(u, 7);
	CHECK_EQ_INT(api_query_u64(&c, "big", 0, UINT64_MAX, &u), 0);
	CHECK(u == UINT64_MAX);
	const char *bad[] = { "over", "neg", "abc", "sp", "limit" };
	for (size_t k = 0; k < ARRAY_SIZE(bad); k++) {
		call_with(&c, "{}", q);
		CHECK_EQ_INT(api_query_u64(&c, bad[k], 0, 20, &u), -EINVAL);
	}
	CHECK_STR(c.err.msg, "query argument 'limit' must be an integer 0..20");

	/* query booleans */
	call_with(&c, "{}", q);
	b = false;
	CHECK_EQ_INT(api_query_bool(&c, "t", &b), 0);
	CHECK(b);
	CHECK_EQ_INT(api_query_bool(&c, "f", &b), 0);
	CHECK(!b);
	CHECK_EQ_INT(api_query_bool(&c, "yes", &b), 0);
	CHECK(b);
	CHECK_EQ_INT(api_query_bool(&c, "absent", &b), 0);
	CHECK(b);
	CHECK_EQ_INT(api_query_bool(&c, "maybe", &b), -EINVAL);
	CHECK_STR(c.err.msg, "query argument 'maybe' must be 1, 0, true or false");

	/* query strings are decoded; too long or NUL is a 400 */
	call_with(&c, "{}", q);
	s = NULL;
	CHECK_EQ_INT(api_query_str(&c, "enc", buf, sizeof(buf), &s), 0);
	CHECK_STR(s, "a/b");
	s = NULL;
	CHECK_EQ_INT(api_query_str(&c, "empty", buf, sizeof(buf), &s), 0);
	CHECK(s == NULL);
	CHECK_EQ_INT(api_query_str(&c, "nul", buf, sizeof(buf), &s), -EINVAL);
	call_with(&c, "{}", q);
	CHECK_EQ_INT(api_query_str(&c, "enc", buf, 3, &s), -EINVAL);
	call_with(&c, "{}", NULL);
	c.query = NULL;
	s = NULL;
	CHECK_EQ_INT(api_query_str(&c, "enc", buf, sizeof(buf), &s), 0);
	CHECK(s == NULL);
	json_decref(c.body);
}

/* kosa8d.sock's table: patterns well formed, few enough parameters, no route twice, and
 * every pattern matches a path made from itself. */
static void test_table(void)
{
	size_t n;
	const struct api_route *rt = api_routes(&n);
	static struct api_call c;
	char allow[64];

	CHECK(n >= 40);
	for (size_t i = 0; i < n; i++) {
		char url[512] = "";
		const char *s = rt[i].pattern;
		int params = 0;
		CHECK(s[0] == '/' && strncmp(s, "/v1/", 4) == 0);
		CHECK(rt[i].fn != NULL);
		for (const char *p = s; *p; p++)
			if (*p == '{') {
				params++;
				strcat(url, "x");
				p = strchr(p, '}');
			} else {
				strncat(url, p, 1);
			}
		CHECK(params <= API_PARAM_MAX);
		struct k8_err err = { 0 };
		CHECK_EQ_INT(api_path_split(url, &c.path, &err), 0);
		CHECK_EQ_INT(api_match(rt, n, rt[i].method, &c.path, &c.match, allow, sizeof(allow)),
			     0);
		CHECK(c.match.route == &rt[i]);         /* not shadowed by an earlier route */
		for (size_t j = 0; j < i; j++)
			CHECK(strcmp(rt[i].pattern, rt[j].pattern) || strcmp(rt[i].method, rt[j].method));
	}
	/* the parameterised image route does not shadow load and pull */
	struct k8_err err = { 0 };
	CHECK_EQ_INT(api_path_split("/v1/images/pull", &c.path, &err), 0);
	CHECK_EQ_INT(api_match(rt, n, "POST", &c.path, &c.match, allow, sizeof(allow)), 0);
	CHECK(c.match.route->fn == images_api_pull);
}

/* docker.sock's path rules (docker_api.c): version prefix, image names across segments,
 * and its table matched by the shared matcher. */
static void test_docker_paths(void)
{
	const struct api_dialect *dl = &docker_api_dialect;
	struct api_path p;
	struct api_match m;
	struct k8_err err = { 0 };
	char allow[64], fam[64], big[2048];

	CHECK_EQ_INT(api_path_split_docker("/v1.41/_ping", &p, &err), 0);
	CHECK(p.n == 1 && !strcmp(p.seg[0], "_ping"));
	CHECK_EQ_INT(api_path_split_docker("/_ping", &p, &err), 0);
	CHECK(p.n == 1 && !strcmp(p.seg[0], "_ping"));
	k8_err_clear(&err);
	CHECK_EQ_INT(api_path_split_docker("/v1.12/version", &p, &err), -EINVAL);
	CHECK(strstr(err.msg, "too old") != NULL);
	k8_err_clear(&err);
	CHECK_EQ_INT(api_path_split_docker("/v1.99/version", &p, &err), -EINVAL);
	k8_err_clear(&err);
	CHECK_EQ_INT(api_path_split_docker("/v1.47/images/127.0.0.1:5000/a/py:1/json", &p, &err), 0);
	CHECK(p.n == 3 && !strcmp(p.seg[1], "127.0.0.1:5000/a/py:1") && !strcmp(p.seg[2], "json"));
	CHECK_EQ_INT(api_path_split_docker("/images/a/b:1", &p, &err), 0);          /* DELETE form */
	CHECK(p.n == 2 && !strcmp(p.seg[1], "a/b:1"));
	CHECK_EQ_INT(api_path_split_docker("/images/a%2Fb/tag", &p, &err), 0);
	CHECK(p.n == 3 && !strcmp(p.seg[1], "a/b") && !strcmp(p.seg[2], "tag"));
	CHECK_EQ_INT(api_path_split_docker("/images/json", &p, &err), 0);
	CHECK(p.n == 2 && !strcmp(p.seg[1], "json"));
	CHECK_EQ_INT(api_match(dl->routes, dl->nroutes, "GET", &p, &m, allow, sizeof(allow)), 0);
	CHECK_EQ_INT(api_path_split_docker("/images/x/json", &p, &err), 0);
	CHECK_EQ_INT(api_match(dl->routes, dl->nroutes, "HEAD", &p, &m, allow, sizeof(allow)),
		     -EBADRQC);
	/* Joined names stay within one segment's bound. */
	memset(big, 'a', sizeof(big));
	memcpy(big, "/images/", 8);
	for (int i = 300; i < 1900; i += 300)
		big[i] = '/';
	memcpy(big + sizeof(big) - 6, "/json", 6);
	k8_err_clear(&err);
	CHECK_EQ_INT(api_path_split_docker(big, &p, &err), -EINVAL);
	dn_familiar("docker.io/library/python:3", fam, sizeof(fam));
	CHECK(!strcmp(fam, "python:3"));
	dn_familiar("docker.io/x/y:1", fam, sizeof(fam));
	CHECK(!strcmp(fam, "x/y:1"));
	dn_familiar("docker.io/library/a/b:1", fam, sizeof(fam));
	CHECK(!strcmp(fam, "library/a/b:1"));
	dn_familiar("127.0.0.1:5000/library/py:1", fam, sizeof(fam));
	CHECK(!strcmp(fam, "127.0.0.1:5000/library/py:1"));
}

int main(void)
{
	test_docker_paths();
	test_match();
	test_bounds();
	test_fields();
	test_table();
	return T_DONE();
}
