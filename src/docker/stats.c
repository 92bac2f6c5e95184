/* SPDX-License-Identifier: Apache-2.0 */
/* stats.c - Docker's stats object from kosa8-agent's ctr.stats sample (stats.h).
 *
 * The shape is moby's types.StatsJSON as docker-py, dockerode and the docker CLI read it:
 * the CLI's CPU % is (cpu delta / system delta) x online CPUs from cpu_stats and
 * precpu_stats, its memory use is memory_stats.usage less stats.inactive_file (cgroup v2)
 * over memory_stats.limit. The guest's cgroup v2 counts in microseconds; Docker in ns.
 */
#include "docker/stats.h"
#include "docker/stream.h"

#include <stdio.h>
#include <string.h>

/* A non-negative integer field of o, else 0. */
static uint64_t dstats_u64(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

/* Times 1000, saturating (microseconds to ns). */
static uint64_t dstats_us_ns(uint64_t us)
{
	return us > UINT64_MAX / 1000 ? UINT64_MAX : us * 1000;
}

/* A name the guest chose, kept when it is 1..max bytes of [A-Za-z0-9_.-]. */
static int dstats_name_ok(const char *k, size_t max)
{
	size_t n = strlen(k);

	if (!n || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z') ||
		      (k[i] >= '0' && k[i] <= '9') || k[i] == '_' || k[i] == '.' || k[i] == '-'))
			return 0;
	return 1;
}

/* {name: number} with checked names and non-negative numbers, at most max entries. */
static json_t *dstats_numbers(const json_t *o, size_t max)
{
	json_t *out = json_object();
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)o, k, v) {
		if (json_object_size(out) >= max)
			break;
		if (dstats_name_ok(k, 63) && json_is_integer(v) && json_integer_value(v) >= 0)
			json_object_set_new(out, k, json_integer(json_integer_value(v)));
	}
	return out;
}

void dstats_from_agent(const json_t *ans, int64_t read_ns, struct dstats_sample *s)
{
	const json_t *cpu = json_object_get(ans, "cpu"), *mem = json_object_get(ans, "memory");
	const json_t *pids = json_object_get(ans, "pids"), *net = json_object_get(ans, "net");
	const char *k;
	json_t *v;

	memset(s, 0, sizeof(*s));
	s->read_ns = read_ns;
	s->cpu_total_ns = dstats_us_ns(dstats_u64(cpu, "usage_usec"));
	s->cpu_user_ns = dstats_us_ns(dstats_u64(cpu, "user_usec"));
	s->cpu_kernel_ns = dstats_us_ns(dstats_u64(cpu, "system_usec"));
	s->periods = dstats_u64(cpu, "nr_periods");
	s->throttled_periods = dstats_u64(cpu, "nr_throttled");
	s->throttled_ns = dstats_us_ns(dstats_u64(cpu, "throttled_usec"));
	s->system_ns = dstats_u64(ans, "system_ns");
	s->online_cpus = dstats_u64(ans, "online_cpus");
	if (s->online_cpus > 4096)
		s->online_cpus = 0;
	s->mem_usage = dstats_u64(mem, "current");
	s->mem_limit = dstats_u64(mem, "max");
	if (!s->mem_limit || s->mem_limit > dstats_u64(ans, "mem_total"))
		s->mem_limit = dstats_u64(ans, "mem_total");
	s->pids = dstats_u64(pids, "current");
	s->pids_limit = dstats_u64(pids, "max");
	s->mem_stat = dstats_numbers(json_object_get(mem, "stat"), DSTATS_MEMSTAT_MAX);
	s->net = json_object();
	json_object_foreach((json_t *)net, k, v) {
		if (json_object_size(s->net) >= DSTATS_NET_MAX)
			break;
		if (dstats_name_ok(k, 15) && json_is_object(v))
			json_object_set_new(s->net, k, dstats_numbers(v, 8));
	}
}

void dstats_clear(struct dstats_sample *s)
{
	json_decref(s->mem_stat);
	json_decref(s->net);
	memset(s, 0, sizeof(*s));
}

static json_t *dstats_time(int64_t ns)
{
	char buf[48];

	if (ns <= 0)
		return json_string("0001-01-01T00:00:00Z");
	ds_rfc3339(ns / 1000000000, (int32_t)(ns % 1000000000), buf);
	return json_string(buf);
}

static json_t *dstats_cpu(const struct dstats_sample *s)
{
	return json_pack("{s:{s:I,s:I,s:I},s:I,s:I,s:{s:I,s:I,s:I}}",
			 "cpu_usage", "total_usage", (json_int_t)s->cpu_total_ns,
			 "usage_in_kernelmode", (json_int_t)s->cpu_kernel_ns,
			 "usage_in_usermode", (json_int_t)s->cpu_user_ns,
			 "system_cpu_usage", (json_int_t)s->system_ns,
			 "online_cpus", (json_int_t)s->online_cpus,
			 "throttling_data", "periods", (json_int_t)s->periods,
			 "throttled_periods", (json_int_t)s->throttled_periods,
			 "throttled_time", (json_int_t)s->throttled_ns);
}

/* One device's counters in Docker's names, each present (0 when the guest had none). */
static json_t *dstats_dev(const json_t *d)
{
	static const char *const keys[] = { "rx_bytes", "rx_packets", "rx_errors", "rx_dropped",
					    "tx_bytes", "tx_packets", "tx_errors", "tx_dropped" };
	json_t *o = json_object();

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		json_object_set_new(o, keys[i], json_integer((json_int_t)dstats_u64(d, keys[i])));
	return o;
}

json_t *dstats_json(const struct dstats_sample *cur, const struct dstats_sample *pre,
		    const char *id, const char *name)
{
	static const struct dstats_sample zero;
	json_t *o, *nets = json_object(), *v;
	json_t *ms = cur->mem_stat ? json_incref(cur->mem_stat) : json_object();
	const char *k;
	char slash[260];

	if (!pre || !pre->read_ns)
		pre = &zero;
	snprintf(slash, sizeof(slash), "/%s", name);
	json_object_foreach(cur->net, k, v)
		json_object_set_new(nets, k, dstats_dev(v));
	o = json_pack("{s:o,s:o,s:{s:I,s:I},s:{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n},s:i,s:{},"
		      "s:o,s:o,s:{s:I,s:o,s:I},s:s,s:s}",
		      "read", dstats_time(cur->read_ns), "preread", dstats_time(pre->read_ns),
		      "pids_stats", "current", (json_int_t)cur->pids, "limit",
		      (json_int_t)cur->pids_limit,
		      "blkio_stats", "io_service_bytes_recursive", "io_serviced_recursive",
		      "io_queue_recursive", "io_service_time_recursive", "io_wait_time_recursive",
		      "io_merged_recursive", "io_time_recursive", "sectors_recursive",
		      "num_procs", 0, "storage_stats",
		      "cpu_stats", dstats_cpu(cur), "precpu_stats", dstats_cpu(pre),
		      "memory_stats", "usage", (json_int_t)cur->mem_usage, "stats", ms, "limit",
		      (json_int_t)cur->mem_limit,
		      "name", slash, "id", id);
	if (!o) {                       /* jansson refuses only a name that is not UTF-8 */
		json_decref(nets);
		return NULL;
	}
	json_object_set_new(o, "networks", nets);
	return o;
}
