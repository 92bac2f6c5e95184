/* SPDX-License-Identifier: Apache-2.0 */
/* test_broker_http.c - the broker's HTTP parser (src/broker/http.c): well-formed requests
 * and responses, every smuggling shape it must refuse (CL+TE, repeated framing headers,
 * obs-fold, bare CR/LF, space before colon, TE other than chunked), head and header-count
 * limits, incremental heads, chunked framing byte by byte, bad chunk sizes and trailers;
 * and the rules and placeholder checks (src/broker/rules.c). */
#include "broker/broker.h"
#include "t.h"

#include <stdlib.h>

static int req(const char *s, struct http_msg *m, const char **why)
{
	*why = NULL;
	return http_parse_request(s, strlen(s), m, why);
}

static void test_requests(void)
{
	struct http_msg m;
	const char *why;
	const char *ok = "POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n"
			 "Authorization: Bearer x\r\nContent-Length: 12\r\n\r\n{\"a\":1}";
	CHECK_EQ_INT(req(ok, &m, &why), (int)(strstr(ok, "\r\n\r\n") - ok + 4));
	CHECK_EQ_INT(m.body, HTTP_BODY_LENGTH);
	CHECK_EQ_INT(m.clen, 12);
	CHECK(m.keep_alive);
	CHECK_EQ_INT(m.nh, 3);
	CHECK_EQ_INT(http_find(&m, "AUTHORIZATION"), 1);
	CHECK(m.mlen == 4 && !memcmp(m.method, "POST", 4));

	/* incomplete heads ask for more, at every cut */
	for (size_t n = 0; n < strlen(ok) - 7; n++) {
		int rc = http_parse_request(ok, n, &m, &why);
		if (n < (size_t)(strstr(ok, "\r\n\r\n") - ok + 4))
			CHECK_EQ_INT(rc, 0);
	}

	CHECK_EQ_INT(req("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", &m, &why) > 0, 1);
	CHECK_EQ_INT(m.body, HTTP_BODY_CHUNKED);
	CHECK(req("GET / HTTP/1.0\r\nHost: a\r\n\r\n", &m, &why) > 0 && !m.keep_alive);
	CHECK(req("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", &m, &why) > 0 && !m.keep_alive);
	CHECK(req("GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n", &m, &why) > 0 &&
	      m.expect_continue);

	/* smuggling and malformed shapes */
	static const struct { const char *s; int rc; } bad[] = {
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", -501 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", -501 },
		{ "GET / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n", -400 },          /* obs-fold */
		{ "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", -400 },                   /* bare LF */
		{ "GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n", -400 },                   /* bare CR */
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01" "b\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\n\r\n", -400 },                                    /* no Host */
		{ "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", -400 },
		{ "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", -400 },                 /* absolute form */
		{ "CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/2.0\r\nHost: a\r\n\r\n", -505 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n", -417 },
		{ "\r\n\r\n", -400 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int rc = req(bad[i].s, &m, &why);
		if (rc != bad[i].rc)
			fprintf(stderr, "case %zu: got %d (%s)\n", i, rc, why ? why : "");
		CHECK_EQ_INT(rc, bad[i].rc);
		CHECK(why != NULL);
	}

	/* limits: 101 headers; a head of 64 KiB without an end */
	char *big = malloc(HTTP_MAX_HEAD + 100);
	size_t n = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < 100; i++)
		n += (size_t)sprintf(big + n, "X-%d: v\r\n", i);
	strcpy(big + n, "\r\n");
	CHECK_EQ_INT(req(big, &m, &why), -431);
	memset(big, 'a', HTTP_MAX_HEAD + 10);
	memcpy(big, "GET /", 5);
	CHECK_EQ_INT(http_parse_request(big, HTTP_MAX_HEAD + 10, &m, &why), -431);
	CHECK_EQ_INT(http_parse_request(big, HTTP_MAX_HEAD - 10, &m, &why), 0);
	free(big);
}

static void test_responses(void)
{
	struct http_msg m;
	const char *why;
	const char *r1 = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
	CHECK(http_parse_response(r1, strlen(r1), "GET", 3, &m, &why) > 0);
	CHECK(m.status == 200 && m.body == HTTP_BODY_LENGTH && m.clen == 5 && m.keep_alive);
	CHECK(http_parse_response(r1, strlen(r1), "HEAD", 4, &m, &why) > 0 && m.body == HTTP_BODY_NONE);
	const char *r2 = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";
	CHECK(http_parse_response(r2, strlen(r2), "GET", 3, &m, &why) > 0);
	CHECK(m.body == HTTP_BODY_CLOSE && !m.keep_alive);
	const char *r3 = "HTTP/1.1 204 No Content\r\n\r\n";
	CHECK(http_parse_response(r3, strlen(r3), "GET", 3, &m, &why) > 0 && m.body == HTTP_BODY_NONE);
	const char *r4 = "HTTP/1.1 100 Continue\r\n\r\n";
	CHECK(http_parse_response(r4, strlen(r4), "GET", 3, &m, &why) > 0 && m.status == 100);
	const char *bad[] = {
		"HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 200OK\r\n\r\n", "HTTQ/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 600 X\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		CHECK_EQ_INT(http_parse_response(bad[i], strlen(bad[i]), "GET", 3, &m, &why), -502);
}

/* Feed a whole chunked body one byte at a time; returns the bytes consumed or -1. */
static long feed_bytes(const char *s, bool trailers, bool *done)
{
	struct http_chunked c;
	const char *why;
	size_t n = strlen(s), i;
	http_chunked_init(&c, trailers);
	for (i = 0; i < n && !c.done; i++)
		if (http_chunked_feed(&c, s + i, 1, &why) != 1)
			return -1;
	*done = c.done;
	return (long)i;
}

static void test_chunked(void)
{
	struct http_chunked c;
	const char *why;
	bool done;
	const char *b1 = "5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\nNEXT";
	http_chunked_init(&c, false);
	CHECK_EQ_INT(http_chunked_feed(&c, b1, strlen(b1), &why), (long)strlen(b1) - 4);
	CHECK(c.done);
	CHECK_EQ_INT(feed_bytes(b1, false, &done), (long)strlen(b1) - 4);
	CHECK(done);
	/* trailers: refused in requests, skipped in responses */
	const char *b2 = "1\r\na\r\n0\r\nX-T: 1\r\n\r\n";
	CHECK_EQ_INT(feed_bytes(b2, false, &done), -1);
	CHECK_EQ_INT(feed_bytes(b2, true, &done), (long)strlen(b2));
	CHECK(done);
	const char *bad[] = {
		"\r\n", "g\r\n", "-1\r\n", " 5\r\n", "5 \r\nhello\r\n", "0x5\r\nhello\r\n",
		"1000000000000000\r\n", "5\rhello", "5\r\nhelloX\r\n", "5\r\nhello\n", "0\r\n\n",
		"1;a\x01\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		http_chunked_init(&c, false);
		CHECK_EQ_INT(http_chunked_feed(&c, bad[i], strlen(bad[i]), &why), -1);
	}
	/* a large size is fine as a number, within 15 hex digits */
	http_chunked_init(&c, false);
	CHECK_EQ_INT(http_chunked_feed(&c, "fffffffffffffff\r\n", 17, &why), 17);
	CHECK(c.left == 0xfffffffffffffffULL);
}

static void test_rules(void)
{
	struct broker_rule r;
	struct k8_err err = { 0 };
	CHECK_EQ_INT(broker_rule_parse("openai=openai", &r, &err), 0);
	CHECK(r.kind == RULE_OPENAI && !strcmp(r.host, "api.openai.com") && !strcmp(r.secret, "openai"));
	CHECK_EQ_INT(broker_rule_parse("anthropic", &r, &err), 0);
	CHECK_STR(r.header, "x-api-key");
	CHECK_EQ_INT(broker_rule_parse("header:API.Example.com:X-Api-Key=ex", &r, &err), 0);
	CHECK(r.kind == RULE_HEADER && !strcmp(r.host, "api.example.com") && !strcmp(r.header, "X-Api-Key"));
	/* the local model: no secret, no header; "=MODEL" is the daemon's */
	CHECK_EQ_INT(broker_rule_parse("local-model", &r, &err), 0);
	CHECK(r.kind == RULE_LOCAL && !strcmp(r.host, "local-model") && !r.secret[0] && !r.header[0]);
	CHECK_EQ_INT(broker_rule_parse("local-model=qwen2.5-0.5b", &r, &err), 0);
	CHECK(r.kind == RULE_LOCAL && !r.secret[0]);
	const char *bad[] = {
		"gemini=x", "header:a.com:X", "header:a.com=x", "header:a/b:X=s", "header:a.com:X Y=s",
		"openai=../x", "openai=", "header::X=s", "local-model=", "local-model=../m",
		"local-model=Big", "local-models",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct k8_err e = { 0 };
		CHECK(broker_rule_parse(bad[i], &r, &e) < 0 && e.msg[0]);
	}
	CHECK(broker_secret_value_ok("sk-abc", 6));
	CHECK(!broker_secret_value_ok("sk abc", 6));
	CHECK(!broker_secret_value_ok("sk\r\nX: y", 9));
	CHECK(!broker_secret_value_ok("", 0));

	static struct broker b;
	pthread_mutex_init(&b.lock, NULL);
	json_t *o = json_pack("{s:s,s:[s,s]}", "placeholder", "k8-ph-0123456789abcdef0123456789abcdef",
			      "rules", "openai", "header:h.example:X-K=k");
	CHECK_EQ_INT(broker_load_rules(&b, o, &err), 0);
	json_decref(o);
	int idx;
	CHECK(broker_rule_for_host(&b, "api.openai.com:8080", 19, &idx) && idx == 0);
	CHECK(broker_rule_for_host(&b, "H.EXAMPLE.", 10, &idx) && idx == 1);
	CHECK(!broker_rule_for_host(&b, "api.openai.com:443:1", 20, &idx) && idx == 2);
	CHECK(!broker_rule_for_host(&b, "api.openai.com:", 15, &idx));
	CHECK(!broker_rule_for_host(&b, "api.openai.com:123456", 21, &idx));
	CHECK(!broker_rule_for_host(&b, "x@api.openai.com", 16, &idx));
	CHECK(!broker_rule_for_host(&b, "api.openai.com.evil", 19, &idx) && idx == 2);
	/* inside a sandbox: X.broker.kosa8.internal is X; openai. and anthropic. are aliases */
	CHECK(broker_rule_for_host(&b, "openai.broker.kosa8.internal", 28, &idx) && idx == 0);
	CHECK(broker_rule_for_host(&b, "OpenAI.Broker.Kosa8.Internal.:80", 32, &idx) && idx == 0);
	CHECK(broker_rule_for_host(&b, "api.openai.com.broker.kosa8.internal", 36, &idx) && idx == 0);
	CHECK(broker_rule_for_host(&b, "h.example.broker.kosa8.internal", 31, &idx) && idx == 1);
	CHECK(!broker_rule_for_host(&b, "anthropic.broker.kosa8.internal", 31, &idx) && idx == 2);
	CHECK(!broker_rule_for_host(&b, "broker.kosa8.internal", 21, &idx) && idx == 2);
	CHECK(!broker_rule_for_host(&b, "xopenai.broker.kosa8.internal", 29, &idx));
	CHECK(!broker_rule_for_host(&b, "openaibroker.kosa8.internal", 27, &idx));
	CHECK(broker_placeholder_ok(&b, "k8-ph-0123456789abcdef0123456789abcdef", 38));
	CHECK(!broker_placeholder_ok(&b, "k8-ph-0123456789abcdef0123456789abcdee", 38));
	CHECK(!broker_placeholder_ok(&b, "k8-ph-0123456789abcdef0123456789abcdef0", 39));
	CHECK_EQ_INT(broker_secret_set(&b, "k", "v1", 2, &err), 0);
	CHECK_EQ_INT(broker_secret_set(&b, "k", "v22", 3, &err), 0);
	char out[16];
	CHECK_EQ_INT(broker_secret_get(&b, "k", out, sizeof(out)), 3);
	CHECK_STR(out, "v22");
	CHECK_EQ_INT(broker_secret_get(&b, "nope", out, sizeof(out)), -ENOENT);
	/* secret rm: gone (its rules answer no_secret), then set again */
	CHECK_EQ_INT(broker_secret_set(&b, "k2", "w", 1, &err), 0);
	CHECK_EQ_INT(broker_secret_unset(&b, "k"), 0);
	CHECK_EQ_INT(broker_secret_get(&b, "k", out, sizeof(out)), -ENOENT);
	CHECK_EQ_INT(broker_secret_unset(&b, "k"), -ENOENT);
	CHECK_EQ_INT(broker_secret_get(&b, "k2", out, sizeof(out)), 1);
	CHECK_EQ_INT(b.nsecrets, 1);
	CHECK_EQ_INT(broker_secret_set(&b, "k", "v3", 2, &err), 0);
	CHECK_EQ_INT(broker_secret_get(&b, "k", out, sizeof(out)), 2);
	CHECK_STR(out, "v3");
	o = json_pack("{s:s}", "placeholder", "k8-ph-XYZ");
	static struct broker b2;
	struct k8_err e2 = { 0 };
	CHECK(broker_load_rules(&b2, o, &e2) < 0);
	json_decref(o);
	broker_free(&b);
}

int main(void)
{
	test_requests();
	test_responses();
	test_chunked();
	test_rules();
	return T_DONE();
}
