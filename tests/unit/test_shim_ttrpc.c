/* SPDX-License-Identifier: Apache-2.0 */
/* test_shim_ttrpc.c - the shim's wire code: ttRPC frame headers (src/shim/ttrpc.c) and their
 * checks, the incremental reader at every cut, requests and answers through protobuf-c
 * within a budget, a CreateTaskRequest as containerd sends it, and kosa8d's answers as
 * the shim's client parses them (src/shim/kclient.c). */
#include "shim/kclient.h"
#include "shim/ttrpc.h"
#include "task.pb-c.h"
#include "ttrpc.pb-c.h"
#include "t.h"

#include <stdlib.h>

static void test_header(void)
{
	struct ttrpc_hdr h = { .len = 0x0102, .stream = 7, .type = TTRPC_REQUEST, .flags = 0 }, g;
	unsigned char b[TTRPC_HDR_LEN];

	ttrpc_hdr_encode(&h, b);
	/* big-endian, as ttRPC's PROTOCOL.md draws it */
	CHECK(b[0] == 0 && b[1] == 0 && b[2] == 1 && b[3] == 2 && b[7] == 7 && b[8] == 1);
	ttrpc_hdr_decode(b, &g);
	CHECK(g.len == h.len && g.stream == 7 && g.type == 1 && g.flags == 0);
	CHECK_EQ_INT(ttrpc_hdr_check(&g), 0);
	g.type = 0;
	CHECK_EQ_INT(ttrpc_hdr_check(&g), -EPROTO);
	g.type = 4;
	CHECK_EQ_INT(ttrpc_hdr_check(&g), -EPROTO);
	g.type = TTRPC_DATA;
	g.len = TTRPC_MAX_DATA;
	CHECK_EQ_INT(ttrpc_hdr_check(&g), 0);
	g.len = TTRPC_MAX_DATA + 1;
	CHECK_EQ_INT(ttrpc_hdr_check(&g), -EMSGSIZE);
	g.len = 0xffffffffu;
	CHECK_EQ_INT(ttrpc_hdr_check(&g), -EMSGSIZE);
}

static void test_reader(void)
{
	size_t l1, l2;
	unsigned char *f1 = ttrpc_frame_new(1, TTRPC_REQUEST, 0, "hello", 5, &l1);
	unsigned char *f2 = ttrpc_frame_new(3, TTRPC_REQUEST, 0, NULL, 0, &l2);
	unsigned char both[64];
	struct ttrpc_reader r;
	struct ttrpc_hdr h;
	const unsigned char *d;
	int frames = 0;

	CHECK(f1 && f2 && l1 == 15 && l2 == 10);
	/* byte by byte */
	ttrpc_reader_init(&r);
	for (size_t i = 0; i < l1; i++) {
		CHECK_EQ_INT(ttrpc_reader_feed(&r, f1 + i, 1), 1);
		if (i + 1 < l1)
			CHECK_EQ_INT(ttrpc_reader_frame(&r, &h, &d), 0);
	}
	CHECK_EQ_INT(ttrpc_reader_frame(&r, &h, &d), 1);
	CHECK(h.len == 5 && h.stream == 1 && !memcmp(d, "hello", 5));
	/* two frames in one buffer, the second empty: each cut point */
	memcpy(both, f1, l1);
	memcpy(both + l1, f2, l2);
	for (size_t cut = 0; cut <= l1 + l2; cut++) {
		size_t off = 0;
		frames = 0;
		ttrpc_reader_free(&r);
		ttrpc_reader_init(&r);
		for (int part = 0; part < 2; part++) {
			size_t end = part ? l1 + l2 : cut;
			while (off < end) {
				long u = ttrpc_reader_feed(&r, both + off, end - off);
				CHECK(u >= 0);
				if (u < 0)
					break;
				off += (size_t)u;
				while (ttrpc_reader_frame(&r, &h, &d))
					frames++;
			}
		}
		CHECK_EQ_INT(frames, 2);
	}
	CHECK_EQ_INT(h.len, 0);
	CHECK_EQ_INT(h.stream, 3);
	/* a bad header breaks the reader for good */
	ttrpc_reader_free(&r);
	ttrpc_reader_init(&r);
	unsigned char bad[TTRPC_HDR_LEN] = { 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1, 1, 0 };
	CHECK_EQ_INT(ttrpc_reader_feed(&r, bad, sizeof(bad)), -EMSGSIZE);
	CHECK_EQ_INT(ttrpc_reader_feed(&r, f1, l1), -EMSGSIZE);
	CHECK_EQ_INT(ttrpc_reader_frame(&r, &h, &d), 0);
	ttrpc_reader_free(&r);
	ttrpc_reader_init(&r);
	bad[0] = 0;
	bad[8] = 9;     /* unknown type */
	CHECK_EQ_INT(ttrpc_reader_feed(&r, bad, sizeof(bad)), -EPROTO);
	ttrpc_reader_free(&r);
	/* the writer refuses what the reader would */
	CHECK(ttrpc_frame_new(1, 1, 0, NULL, TTRPC_MAX_DATA + 1, &l1) == NULL);
	free(f1);
	free(f2);
}

static void test_request(void)
{
	struct ttrpc_request req;
	size_t len;
	unsigned char *r = ttrpc_request_encode("containerd.task.v2.Task", "Create", "default",
						"\x0a\x02t1", 4, 5000000000ll, &len);

	CHECK(r != NULL);
	CHECK_EQ_INT(ttrpc_request_decode(r, len, &req), 0);
	CHECK_STR(req.service, "containerd.task.v2.Task");
	CHECK_STR(req.method, "Create");
	CHECK_STR(req.ns, "default");
	CHECK(req.payload_len == 4 && !memcmp(req.payload, "\x0a\x02t1", 4));
	CHECK(req.timeout_ns == 5000000000ll);
	ttrpc_request_free(&req);
	free(r);
	/* no method, garbage, a field that runs past the end */
	r = ttrpc_request_encode("containerd.task.v2.Task", "", NULL, NULL, 0, 0, &len);
	CHECK_EQ_INT(ttrpc_request_decode(r, len, &req), -EBADMSG);
	free(r);
	CHECK_EQ_INT(ttrpc_request_decode((const unsigned char *)"\xff\xff\xff", 3, &req), -EBADMSG);
	CHECK_EQ_INT(ttrpc_request_decode((const unsigned char *)"\x0a\x7f" "abc", 5, &req), -EBADMSG);
	/* more metadata pairs than a request may carry */
	{
		K8ttrpc__Request m = K8TTRPC__REQUEST__INIT;
		K8ttrpc__KeyValue kv = K8TTRPC__KEY_VALUE__INIT;
		K8ttrpc__KeyValue *kvs[TTRPC_MAX_METADATA + 1];
		for (int i = 0; i <= TTRPC_MAX_METADATA; i++)
			kvs[i] = &kv;
		kv.key = (char *)"k";
		kv.value = (char *)"v";
		m.service = (char *)"s";
		m.method = (char *)"m";
		m.metadata = kvs;
		m.n_metadata = TTRPC_MAX_METADATA + 1;
		r = ttrpc_pack(&m.base, &len);
		CHECK_EQ_INT(ttrpc_request_decode(r, len, &req), -EBADMSG);
		m.n_metadata = TTRPC_MAX_METADATA;
		free(r);
		r = ttrpc_pack(&m.base, &len);
		CHECK_EQ_INT(ttrpc_request_decode(r, len, &req), 0);
		ttrpc_request_free(&req);
		free(r);
	}
	/* the budget: a decode that would allocate more than it allows fails */
	{
		struct ttrpc_budget b;
		K8ttrpc__Request m = K8TTRPC__REQUEST__INIT, *back;
		char big[4096];
		memset(big, 'x', sizeof(big) - 1);
		big[sizeof(big) - 1] = 0;
		m.service = big;
		m.method = (char *)"m";
		r = ttrpc_pack(&m.base, &len);
		ttrpc_budget_init(&b, 1024);
		back = k8ttrpc__request__unpack(&b.alloc, len, r);
		CHECK(back == NULL);
		CHECK_EQ_INT(b.used, 0);       /* what it took, it gave back */
		ttrpc_budget_init(&b, 1 << 20);
		back = k8ttrpc__request__unpack(&b.alloc, len, r);
		CHECK(back != NULL && strlen(back->service) == sizeof(big) - 1);
		k8ttrpc__request__free_unpacked(back, &b.alloc);
		CHECK_EQ_INT(b.used, 0);
		free(r);
	}
}

static void test_response(void)
{
	size_t len;
	int code;
	char msg[64];
	unsigned char *r = ttrpc_response_encode(TTRPC_NOT_FOUND, "task x: not found", NULL, 0, &len);

	CHECK_EQ_INT(ttrpc_response_decode(r, len, &code, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(code, TTRPC_NOT_FOUND);
	CHECK_STR(msg, "task x: not found");
	free(r);
	r = ttrpc_response_encode(TTRPC_OK, NULL, "\x08\x2a", 2, &len);
	CHECK_EQ_INT(ttrpc_response_decode(r, len, &code, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(code, 0);
	{
		K8ttrpc__Response *back = k8ttrpc__response__unpack(NULL, len, r);
		CHECK(back && back->payload.len == 2 && back->payload.data[1] == 0x2a && !back->status);
		k8ttrpc__response__free_unpacked(back, NULL);
	}
	free(r);
	CHECK_EQ_INT(ttrpc_response_decode((const unsigned char *)"\x12\x05", 2, &code, msg,
					   sizeof(msg)), -EBADMSG);
}

/* A CreateTaskRequest as containerd 1.6 sends it (fields from a real ctr run). */
static void test_create_request(void)
{
	K8task__CreateTaskRequest c = K8TASK__CREATE_TASK_REQUEST__INIT, *back;
	K8task__Mount m = K8TASK__MOUNT__INIT, *ms[1] = { &m };
	char *opts[] = { (char *)"index=off", (char *)"workdir=/r/snapshots/14/work",
			 (char *)"upperdir=/r/snapshots/14/fs", (char *)"lowerdir=/r/snapshots/1/fs" };
	struct ttrpc_budget b;
	unsigned char *p;
	size_t len;

	m.type = (char *)"overlay";
	m.source = (char *)"overlay";
	m.options = opts;
	m.n_options = 4;
	c.id = (char *)"t1";
	c.bundle = (char *)"/s/io.containerd.runtime.v2.task/default/t1";
	c.rootfs = ms;
	c.n_rootfs = 1;
	c.stdin = (char *)"/f/t1-stdin";
	c.stdout = (char *)"/f/t1-stdout";
	c.stderr = (char *)"/f/t1-stderr";
	p = ttrpc_pack(&c.base, &len);
	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	back = k8task__create_task_request__unpack(&b.alloc, len, p);
	CHECK(back != NULL);
	CHECK_STR(back->id, "t1");
	CHECK(back->n_rootfs == 1 && back->rootfs[0]->n_options == 4);
	CHECK_STR(back->rootfs[0]->options[3], "lowerdir=/r/snapshots/1/fs");
	CHECK_STR(back->stdout, "/f/t1-stdout");
	CHECK(!back->terminal && !back->options);
	k8task__create_task_request__free_unpacked(back, &b.alloc);
	/* every prefix of it is refused or decodes to a smaller message, never read past */
	for (size_t n = 0; n < len; n++) {
		ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
		back = k8task__create_task_request__unpack(&b.alloc, n, p);
		if (back)
			k8task__create_task_request__free_unpacked(back, &b.alloc);
		CHECK_EQ_INT(b.used, 0);
	}
	free(p);
}

static int answer(const char *s, int *status, json_t **j)
{
	struct k8_err err = { 0 };

	*j = NULL;
	return kc_answer_parse(s, strlen(s), status, j, &err);
}

static void test_kosa8d_answers(void)
{
	int st;
	json_t *j;

	CHECK_EQ_INT(answer("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			    "Content-Length: 9\r\n\r\n{\"a\":42}\n", &st, &j), 0);
	CHECK(st == 200 && json_integer_value(json_object_get(j, "a")) == 42);
	json_decref(j);
	/* a progress stream: its final result, through chunks */
	CHECK_EQ_INT(answer("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
			    "Transfer-Encoding: chunked\r\n\r\n"
			    "1b\r\n{\"progress\":{\"phase\":\"x\"}}\n\r\n"
			    "13\r\n{\"result\":{\"b\":1}}\n\r\n0\r\n\r\n", &st, &j), 0);
	CHECK(st == 200 && json_integer_value(json_object_get(j, "b")) == 1);
	json_decref(j);
	/* its final error */
	CHECK_EQ_INT(answer("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
			    "Transfer-Encoding: chunked\r\n\r\n"
			    "35\r\n{\"error\":{\"code\":\"conflict\",\"message\":\"name taken\"}}\n\r\n"
			    "0\r\n\r\n", &st, &j), 0);
	CHECK_EQ_INT(st, 409);
	{
		struct k8_err err = { 0 };
		CHECK_EQ_INT(kc_error(j, st, &err), -EBUSY);
		CHECK_STR(err.msg, "kosa8d: name taken");
	}
	json_decref(j);
	/* an error answer; a message with control bytes is escaped */
	CHECK_EQ_INT(answer("HTTP/1.1 404 Not Found\r\nContent-Length: 56\r\n\r\n"
			    "{\"error\":{\"code\":\"not_found\",\"message\":\"no\\u001b[2J x\"}}",
			    &st, &j), 0);
	{
		struct k8_err err = { 0 };
		CHECK_EQ_INT(kc_error(j, st, &err), -ENOENT);
		CHECK(!strchr(err.msg, 0x1b));
	}
	json_decref(j);
	/* malformed: every one a -EPROTO, never a crash or a half answer */
	static const char *const bad[] = {
		"",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{x}",
		"HTTP/1.1 101 Switching Protocols\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nContent-Length: 3\r\n\r\n[]\n",
		"SSH-2.0-x\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ_INT(answer(bad[i], &st, &j), -EPROTO);
		CHECK(j == NULL);
	}
	/* a URL path segment */
	char out[32];
	CHECK_EQ_INT(kc_escape("a/b c%", out, sizeof(out)), 0);
	CHECK_STR(out, "a%2Fb%20c%25");
	CHECK_EQ_INT(kc_escape("abcdef", out, 4), -ENAMETOOLONG);
}

int main(void)
{
	test_header();
	test_reader();
	test_request();
	test_response();
	test_create_request();
	test_kosa8d_answers();
	return T_DONE();
}
