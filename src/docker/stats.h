/* SPDX-License-Identifier: Apache-2.0 */
/* stats.h - Docker's stats object (GET /containers/{id}/stats, docs/docker.md "Stats and
 * top") from a sample of kosa8-agent's `ctr.stats` (docs/agent.md). Pure: no daemon, no
 * I/O. The sample comes from a guest: every field is checked, and one that is missing, of
 * the wrong type or out of range reads as 0 (a name as absent). */
#ifndef K8_DOCKER_STATS_H
#define K8_DOCKER_STATS_H

#include <jansson.h>
#include <stdint.h>

#define DSTATS_NET_MAX 16       /* network devices kept */
#define DSTATS_MEMSTAT_MAX 64   /* memory.stat entries kept */

/* One sample, in the units Docker reports. */
struct dstats_sample {
	int64_t read_ns;                /* when it was read (CLOCK_REALTIME); 0: none */
	uint64_t cpu_total_ns, cpu_user_ns, cpu_kernel_ns;
	uint64_t periods, throttled_periods, throttled_ns;
	uint64_t system_ns;             /* the VM's CPU time, every CPU and state */
	uint64_t online_cpus;
	uint64_t mem_usage, mem_limit;  /* the limit: memory.max, else the VM's memory */
	uint64_t pids, pids_limit;
	json_t *mem_stat;               /* {"anon": N, ...}: checked names and numbers */
	json_t *net;                    /* {"eth0": {"rx_bytes": N, ...}}: likewise */
};

/* *s from the agent's answer `ans` (any JSON value; only what checks out is kept) read
 * at read_ns. dstats_clear() frees what it holds. */
void dstats_from_agent(const json_t *ans, int64_t read_ns, struct dstats_sample *s);
void dstats_clear(struct dstats_sample *s);

/* Docker's object for container `id` named `name` (no leading '/'): `cur` and, as its
 * precpu_stats and preread, `pre` (NULL or a sample with read_ns 0: zeros, as moby sends
 * in a stream's first object and for a container that does not run). */
json_t *dstats_json(const struct dstats_sample *cur, const struct dstats_sample *pre,
		    const char *id, const char *name);

#endif
