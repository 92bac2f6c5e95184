/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_stats.c - Docker's stats object and top's columns from the agent's
 * ctr.stats and ctr.top answers (src/docker/stats.c, top.c): the shape docker-py,
 * dockerode and the docker CLI read, the units, and what a hostile guest's answer becomes. */
#include "docker/stats.h"
#include "docker/top.h"
#include "t.h"

#include <stdlib.h>

static json_t *J(const char *text)
{
	json_error_t e;
	json_t *v = json_loads(text, 0, &e);
	if (!v)
		fprintf(stderr, "bad JSON in the test: %s\n", e.text);
	return v;
}

static long long I(json_t *o, const char *path)
{
	char buf[128], *save = NULL;
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save))
		o = json_object_get(o, k);
	return json_is_integer(o) ? json_integer_value(o) : -1;
}

static const char *S(json_t *o, const char *path)
{
	char buf[128], *save = NULL;
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save))
		o = json_object_get(o, k);
	return json_string_value(o);
}

static void test_stats(void)
{
	json_t *a1 = J("{\"cpu\":{\"usage_usec\":2000,\"user_usec\":1500,\"system_usec\":500,"
		       "\"nr_periods\":3,\"nr_throttled\":1,\"throttled_usec\":40},"
		       "\"system_ns\":1000000000,\"online_cpus\":2,"
		       "\"memory\":{\"current\":31457280,\"max\":0,\"stat\":{\"anon\":25165824,"
		       "\"inactive_file\":4096}},\"pids\":{\"current\":3,\"max\":1024},"
		       "\"net\":{\"eth0\":{\"rx_bytes\":100,\"tx_bytes\":200,\"rx_packets\":2}},"
		       "\"mem_total\":469762048}");
	json_t *a2 = J("{\"cpu\":{\"usage_usec\":502000},\"system_ns\":3000000000,"
		       "\"online_cpus\":2,\"memory\":{\"current\":1000,\"max\":8388608},"
		       "\"mem_total\":469762048}");
	struct dstats_sample s1, s2;
	json_t *o;

	dstats_from_agent(a1, 1700000000123456789ll, &s1);
	dstats_from_agent(a2, 1700000001123456789ll, &s2);
	CHECK_EQ_INT(s1.cpu_total_ns, 2000000);         /* cgroup v2 counts microseconds */
	CHECK_EQ_INT(s1.cpu_kernel_ns, 500000);
	CHECK_EQ_INT(s1.mem_limit, 469762048);          /* memory.max "max": the VM's memory */
	CHECK_EQ_INT(s2.mem_limit, 8388608);            /* -m 8m */

	/* a stream's first object, and one-shot: precpu_stats all zeros, preread zero time */
	o = dstats_json(&s1, NULL, "abc", "web");
	CHECK_STR(S(o, "read"), "2023-11-14T22:13:20.123456789Z");
	CHECK_STR(S(o, "preread"), "0001-01-01T00:00:00Z");
	CHECK_STR(S(o, "name"), "/web");
	CHECK_STR(S(o, "id"), "abc");
	CHECK_EQ_INT(I(o, "cpu_stats.cpu_usage.total_usage"), 2000000);
	CHECK_EQ_INT(I(o, "cpu_stats.cpu_usage.usage_in_usermode"), 1500000);
	CHECK_EQ_INT(I(o, "cpu_stats.system_cpu_usage"), 1000000000);
	CHECK_EQ_INT(I(o, "cpu_stats.online_cpus"), 2);
	CHECK_EQ_INT(I(o, "cpu_stats.throttling_data.throttled_time"), 40000);
	CHECK_EQ_INT(I(o, "precpu_stats.cpu_usage.total_usage"), 0);
	CHECK_EQ_INT(I(o, "precpu_stats.system_cpu_usage"), 0);
	CHECK_EQ_INT(I(o, "memory_stats.usage"), 31457280);
	CHECK_EQ_INT(I(o, "memory_stats.limit"), 469762048);
	CHECK_EQ_INT(I(o, "memory_stats.stats.inactive_file"), 4096);
	CHECK_EQ_INT(I(o, "pids_stats.current"), 3);
	CHECK_EQ_INT(I(o, "networks.eth0.rx_bytes"), 100);
	CHECK_EQ_INT(I(o, "networks.eth0.tx_dropped"), 0);     /* every counter present */
	CHECK(json_is_null(json_object_get(json_object_get(o, "blkio_stats"),
					   "io_service_bytes_recursive")));
	json_decref(o);

	/* the next: precpu is the one before, so the CLI's CPU % is delta over delta */
	o = dstats_json(&s2, &s1, "abc", "web");
	CHECK_EQ_INT(I(o, "precpu_stats.cpu_usage.total_usage"), 2000000);
	CHECK_EQ_INT(I(o, "cpu_stats.cpu_usage.total_usage"), 502000000);
	CHECK_STR(S(o, "preread"), "2023-11-14T22:13:20.123456789Z");
	CHECK(json_is_object(json_object_get(o, "networks")));
	CHECK_EQ_INT(json_object_size(json_object_get(o, "networks")), 0);
	json_decref(o);
	dstats_clear(&s1);
	dstats_clear(&s2);
	json_decref(a1);
	json_decref(a2);

	/* a hostile guest: wrong types, negatives, odd names, too many entries */
	json_t *h = J("{\"cpu\":{\"usage_usec\":-5,\"user_usec\":\"many\",\"system_usec\":"
		      "9223372036854775807},\"online_cpus\":1000000,\"memory\":{\"current\":-1,"
		      "\"stat\":{\"a b\":1,\"\\u001b[2J\":2,\"ok\":-3,\"good\":4}},"
		      "\"net\":{\"eth0\\n\":{\"rx_bytes\":1},\"averyveryverylongname\":{},"
		      "\"eth1\":[1,2],\"eth2\":{\"rx_bytes\":\"x\",\"tx_bytes\":7}},"
		      "\"pids\":[]}");
	struct dstats_sample hs;
	dstats_from_agent(h, 1, &hs);
	CHECK_EQ_INT(hs.cpu_total_ns, 0);
	CHECK_EQ_INT(hs.cpu_user_ns, 0);
	CHECK(hs.cpu_kernel_ns == UINT64_MAX);          /* saturates, never wraps */
	CHECK_EQ_INT(hs.online_cpus, 0);
	CHECK_EQ_INT(hs.mem_usage, 0);
	CHECK_EQ_INT(json_object_size(hs.mem_stat), 1);
	CHECK(json_object_get(hs.mem_stat, "good") != NULL);
	CHECK_EQ_INT(json_object_size(hs.net), 1);
	CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(hs.net, "eth2"),
							"tx_bytes")), 7);
	o = dstats_json(&hs, NULL, "x", "y");
	CHECK(o != NULL);
	json_decref(o);
	dstats_clear(&hs);
	json_decref(h);

	/* not an object at all: a zero sample, still Docker's shape */
	json_t *n = J("[1,2,3]");
	dstats_from_agent(n, 0, &hs);
	o = dstats_json(&hs, &hs, "x", "y");
	CHECK_STR(S(o, "read"), "0001-01-01T00:00:00Z");
	CHECK_EQ_INT(I(o, "memory_stats.usage"), 0);
	json_decref(o);
	dstats_clear(&hs);
	json_decref(n);
	o = dstats_json(&hs, NULL, "x", "y");   /* a cleared sample */
	CHECK(o != NULL);
	json_decref(o);
}

static void test_top_args(void)
{
	enum dtop_fmt f;
	struct k8_err err = { 0 };
	const struct { const char *a; int fmt; } ok[] = {
		{ NULL, DTOP_EF }, { "", DTOP_EF }, { "-ef", DTOP_EF }, { "-fe", DTOP_EF },
		{ "-e -f", DTOP_EF }, { "-f", DTOP_EF }, { "-e", DTOP_E }, { "-A", DTOP_E },
		{ "aux", DTOP_AUX }, { "-aux", DTOP_AUX }, { "au", DTOP_AUX }, { "ax", DTOP_AX },
		{ "x", DTOP_AX },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		f = 99;
		CHECK_EQ_INT(dtop_args(ok[i].a, &f, &err), 0);
		CHECK_EQ_INT(f, ok[i].fmt);
	}
	const char *bad[] = { "-o pid", "--no-such-thing", "-eaux", "ef; rm -rf /", "-e\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		k8_err_clear(&err);
		CHECK_EQ_INT(dtop_args(bad[i], &f, &err), -EINVAL);
		CHECK(strstr(err.msg, "ps -ef") != NULL);
	}
}

static void test_top(void)
{
	/* booted 1000 s ago; a process started 500 s after boot with 12 s of CPU */
	json_t *a = J("{\"hz\":100,\"uptime_s\":1000,\"mem_total_kib\":400000,\"procs\":["
		      "{\"pid\":7,\"ppid\":1,\"uid\":0,\"state\":\"S\",\"tty\":0,\"utime\":1000,"
		      "\"stime\":200,\"start\":50000,\"vsz_kib\":2000,\"rss_kib\":4000,"
		      "\"comm\":\"sleep\",\"cmd\":\"sleep 600\"},"
		      "{\"pid\":8,\"ppid\":7,\"uid\":1000,\"state\":\"R\",\"tty\":34816,\"utime\":0,"
		      "\"stime\":0,\"start\":99000,\"vsz_kib\":0,\"rss_kib\":0,"
		      "\"comm\":\"kworker\",\"cmd\":\"\"},"
		      "{\"pid\":-1,\"ppid\":1,\"uid\":0,\"state\":\"S\",\"tty\":0,\"utime\":0,"
		      "\"stime\":0,\"start\":0,\"vsz_kib\":0,\"rss_kib\":0,\"comm\":\"x\",\"cmd\":\"x\"},"
		      "{\"pid\":9,\"ppid\":1,\"uid\":0,\"state\":\"S\",\"tty\":0,\"utime\":0,"
		      "\"stime\":0,\"start\":0,\"vsz_kib\":0,\"rss_kib\":0,\"comm\":\"x\","
		      "\"cmd\":\"evil \\u001b]0;title\\u0007 \\u001b[2J\"},"
		      "\"not a process\"]}");
	time_t now = 1700000000;
	json_t *o, *p0, *p1;

	setenv("TZ", "UTC", 1);
	tzset();
	o = dtop_json(a, DTOP_EF, now);
	CHECK_EQ_INT(json_array_size(json_object_get(o, "Titles")), 8);
	CHECK_STR(json_string_value(json_array_get(json_object_get(o, "Titles"), 7)), "CMD");
	CHECK_EQ_INT(json_array_size(json_object_get(o, "Processes")), 3);  /* bad pid, junk out */
	p0 = json_array_get(json_object_get(o, "Processes"), 0);
	p1 = json_array_get(json_object_get(o, "Processes"), 1);
	CHECK_STR(json_string_value(json_array_get(p0, 0)), "root");
	CHECK_STR(json_string_value(json_array_get(p0, 1)), "7");          /* strings, as moby */
	CHECK_STR(json_string_value(json_array_get(p0, 2)), "1");
	CHECK_STR(json_string_value(json_array_get(p0, 3)), "2");          /* 12 s over 500 s */
	CHECK_STR(json_string_value(json_array_get(p0, 4)), "22:05");      /* now - 500 s */
	CHECK_STR(json_string_value(json_array_get(p0, 5)), "?");
	CHECK_STR(json_string_value(json_array_get(p0, 6)), "00:00:12");
	CHECK_STR(json_string_value(json_array_get(p0, 7)), "sleep 600");
	CHECK_STR(json_string_value(json_array_get(p1, 0)), "1000");
	CHECK_STR(json_string_value(json_array_get(p1, 5)), "pts/0");      /* 136:0 */
	CHECK_STR(json_string_value(json_array_get(p1, 7)), "[kworker]");  /* no command line */
	/* a command line that would drive the terminal is escaped */
	const char *evil = json_string_value(json_array_get(json_array_get(
		json_object_get(o, "Processes"), 2), 7));
	CHECK(evil && !strchr(evil, 0x1b) && !strchr(evil, 0x07) && strstr(evil, "\\x1b"));
	json_decref(o);

	o = dtop_json(a, DTOP_AUX, now);
	p0 = json_array_get(json_object_get(o, "Processes"), 0);
	CHECK_EQ_INT(json_array_size(json_object_get(o, "Titles")), 11);
	CHECK_STR(json_string_value(json_array_get(p0, 2)), "2.4");        /* %CPU */
	CHECK_STR(json_string_value(json_array_get(p0, 3)), "1.0");        /* 4000 of 400000 KiB */
	CHECK_STR(json_string_value(json_array_get(p0, 4)), "2000");
	CHECK_STR(json_string_value(json_array_get(p0, 7)), "S");
	CHECK_STR(json_string_value(json_array_get(p0, 9)), "0:12");
	json_decref(o);

	o = dtop_json(a, DTOP_E, now);
	CHECK_STR(json_string_value(json_array_get(json_array_get(json_object_get(o, "Processes"),
								  0), 3)), "sleep");
	json_decref(o);
	json_decref(a);

	/* no table: titles, no processes */
	a = J("{\"procs\":{}}");
	o = dtop_json(a, DTOP_AX, now);
	CHECK_EQ_INT(json_array_size(json_object_get(o, "Titles")), 5);
	CHECK_EQ_INT(json_array_size(json_object_get(o, "Processes")), 0);
	json_decref(o);
	json_decref(a);
}

int main(void)
{
	test_stats();
	test_top_args();
	test_top();
	return T_DONE();
}
