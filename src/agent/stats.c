/* SPDX-License-Identifier: Apache-2.0 */
/* stats.c - a container's usage and processes, for the host (Docker's stats and top):
 * its cgroup's counters (cpu.stat, memory.*, pids.*), its network devices (its init's
 * /proc/N/net/dev), the VM's CPU time and CPUs, and the process table of its cgroup.
 *
 * Every file read here is the kernel's, but what a process puts in its name and command
 * line is the container's: those are cut and made printable ASCII before they leave, and
 * the answer stays within one control frame (PROTO_MAX_JSON). The host checks it all again.
 */
#include "agent.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#define STATS_FILE_MAX (64u << 10)
#define TOP_PROCS_MAX 1024
#define TOP_CMD_MAX 512
#define TOP_BUDGET (PROTO_MAX_JSON - 4096)     /* bytes of procs, estimated */

/* A cgroup file of the container: its text (malloc'd) or NULL. */
static char *stats_cg_read(const char *id, const char *file)
{
	char path[160], *buf = NULL;

	snprintf(path, sizeof(path), "%s/%s/%s", AGENT_CG_DIR, id, file);
	if (read_file(path, STATS_FILE_MAX, &buf, NULL) < 0)
		return NULL;
	return buf;
}

/* One number of a file ("max" is 0). */
static uint64_t stats_cg_num(const char *id, const char *file)
{
	char *t = stats_cg_read(id, file);
	uint64_t v = t ? strtoull(t, NULL, 10) : 0;

	free(t);
	return v;
}

/* "key value" lines as an object (at most 64 keys, values as numbers). */
static json_t *stats_kv(const char *text)
{
	json_t *o = json_object();
	const char *p = text;

	while (p && *p && json_object_size(o) < 64) {
		char key[64];
		unsigned long long v;
		int n = 0;

		if (sscanf(p, "%63s %llu%n", key, &v, &n) == 2 && n > 0)
			json_object_set_new(o, key, json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v)));
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return o;
}

/* The VM's CPU time (all CPUs, every state, from /proc/stat's "cpu" line) in ns. */
static uint64_t stats_system_ns(void)
{
	char *t = NULL;
	uint64_t sum = 0;
	long hz = sysconf(_SC_CLK_TCK);

	if (read_file("/proc/stat", STATS_FILE_MAX, &t, NULL) < 0)
		return 0;
	if (!strncmp(t, "cpu ", 4)) {
		char *p = t + 4, *end;
		for (int i = 0; i < 10; i++) {
			unsigned long long v = strtoull(p, &end, 10);
			if (end == p)
				break;
			sum += v;
			p = end;
		}
	}
	free(t);
	return hz > 0 ? sum * (1000000000ull / (uint64_t)hz) : 0;
}

/* lo and the devices a kernel with tunnels built in puts in every network namespace
 * (sit0, tunl0, ...): not the container's, and Docker shows none of them. */
static int stats_net_skip(const char *name)
{
	static const char *const skip[] = { "lo", "sit0", "tunl0", "ip6tnl0", "gre0", "gretap0",
					    "erspan0", "ip6gre0", "ip_vti0", "ip6_vti0" };

	for (size_t i = 0; i < ARRAY_SIZE(skip); i++)
		if (!strcmp(name, skip[i]))
			return 1;
	return 0;
}

/* The container's network devices (stats_net_skip's aside), from its init's namespace. */
static json_t *stats_net(pid_t pid)
{
	static const char *const names[] = { "rx_bytes", "rx_packets", "rx_errors", "rx_dropped",
					     NULL, NULL, NULL, NULL, "tx_bytes", "tx_packets",
					     "tx_errors", "tx_dropped" };
	json_t *o = json_object();
	char path[64], *t = NULL, *line, *save = NULL;

	snprintf(path, sizeof(path), "/proc/%d/net/dev", (int)pid);
	if (pid <= 0 || read_file(path, STATS_FILE_MAX, &t, NULL) < 0)
		return o;
	for (line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':'), *name = line, *p;
		json_t *dev;

		if (!colon || json_object_size(o) >= 16)
			continue;
		*colon = '\0';
		while (*name == ' ')
			name++;
		if (!*name || strlen(name) > 15 || stats_net_skip(name))
			continue;
		dev = json_object();
		p = colon + 1;
		for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
			char *end;
			unsigned long long v = strtoull(p, &end, 10);
			if (end == p)
				break;
			p = end;
			if (names[i])
				json_object_set_new(dev, names[i], json_integer((json_int_t)(v & INT64_MAX)));
		}
		json_object_set_new(o, name, dev);
	}
	free(t);
	return o;
}

json_t *stats_ctr(struct agent *a, struct ctr *c)
{
	char *cpu = stats_cg_read(c->id, "cpu.stat"), *mst = stats_cg_read(c->id, "memory.stat");
	json_t *cpuo = stats_kv(cpu), *o;

	free(cpu);
	o = json_pack("{s:o,s:I,s:i,s:{s:I,s:I,s:o},s:{s:I,s:I},s:o,s:I}",
		      "cpu", cpuo, "system_ns", (json_int_t)stats_system_ns(),
		      "online_cpus", (int)sysconf(_SC_NPROCESSORS_ONLN),
		      "memory", "current", (json_int_t)stats_cg_num(c->id, "memory.current"),
		      "max", (json_int_t)stats_cg_num(c->id, "memory.max"), "stat", stats_kv(mst),
		      "pids", "current", (json_int_t)stats_cg_num(c->id, "pids.current"),
		      "max", (json_int_t)stats_cg_num(c->id, "pids.max"),
		      "net", stats_net(c->init ? c->pid : 0),
		      "mem_total", (json_int_t)(cg_mem_total_kib() * 1024u));
	free(mst);
	(void)a;
	return o;
}

/* Printable ASCII of at most max bytes: the NULs between arguments become spaces, any
 * other byte outside ' '..'~' a '?'. */
static void stats_printable(char *out, size_t max, const char *in, size_t n)
{
	size_t o = 0;

	while (n && in[n - 1] == '\0')
		n--;
	for (size_t i = 0; i < n && o + 1 < max; i++) {
		unsigned char ch = (unsigned char)in[i];
		out[o++] = ch == 0 ? ' ' : (ch < 0x20 || ch > 0x7e) ? '?' : (char)ch;
	}
	out[o] = '\0';
}

/* One process of the table, or NULL when it is gone (or not readable). */
static json_t *stats_proc(pid_t pid)
{
	char path[64], *st = NULL, *status = NULL, *cmd = NULL, *rp, *u;
	char comm[64], cmdp[TOP_CMD_MAX + 1];
	char state[2] = "?";
	int ppid = 0, tty = 0;
	unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
	long long rss = 0;
	size_t clen = 0;
	long uid = -1;
	json_t *o = NULL;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file(path, 4096, &st, NULL) < 0)
		return NULL;
	/* "pid (comm) state ...": the name may hold anything, ')' too: the last one ends it */
	rp = strrchr(st, ')');
	if (!rp || !strchr(st, '(') ||
	    sscanf(rp + 1, " %c %d %*d %*d %d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
		   "%*d %*d %llu %llu %lld", &state[0], &ppid, &tty, &utime, &stime, &start, &vsize,
		   &rss) != 8)
		goto out;
	*rp = '\0';
	stats_printable(comm, sizeof(comm), strchr(st, '(') + 1, strlen(strchr(st, '(') + 1));
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_file(path, STATS_FILE_MAX, &status, NULL) == 0 && (u = strstr(status, "\nUid:")))
		uid = strtol(u + 5, NULL, 10);
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if (read_file(path, TOP_CMD_MAX, &cmd, &clen) < 0)
		clen = 0;
	stats_printable(cmdp, sizeof(cmdp), cmd ? cmd : "", clen);
	if (state[0] < 'A' || state[0] > 'z')
		state[0] = '?';
	o = json_pack("{s:i,s:i,s:I,s:s,s:i,s:I,s:I,s:I,s:I,s:I,s:s,s:s}", "pid", (int)pid,
		      "ppid", ppid, "uid", (json_int_t)uid, "state", state, "tty", tty,
		      "utime", (json_int_t)utime, "stime", (json_int_t)stime, "start",
		      (json_int_t)start, "vsz_kib", (json_int_t)(vsize / 1024),
		      "rss_kib", (json_int_t)(rss * (sysconf(_SC_PAGESIZE) / 1024)),
		      "comm", comm, "cmd", cmdp);
out:
	free(st);
	free(status);
	free(cmd);
	return o;
}

json_t *stats_top(struct agent *a, struct ctr *c)
{
	char *procs = stats_cg_read(c->id, "cgroup.procs"), *p = procs;
	json_t *list = json_array();
	struct sysinfo si;
	size_t budget = 0;
	bool cut = false;

	(void)a;
	while (p && *p) {
		char *end;
		long pid = strtol(p, &end, 10);
		json_t *e;

		if (end == p)
			break;
		p = end + strspn(end, "\n");
		if (pid <= 0 || !(e = stats_proc((pid_t)pid)))
			continue;
		budget += 160 + strlen(json_string_value(json_object_get(e, "cmd"))) +
			  strlen(json_string_value(json_object_get(e, "comm")));
		if (json_array_size(list) >= TOP_PROCS_MAX || budget > TOP_BUDGET) {
			json_decref(e);
			cut = true;
			break;
		}
		json_array_append_new(list, e);
	}
	free(procs);
	if (sysinfo(&si) < 0)
		si.uptime = 0;
	return json_pack("{s:o,s:b,s:i,s:I,s:I}", "procs", list, "truncated", cut,
			 "hz", (int)sysconf(_SC_CLK_TCK), "uptime_s", (json_int_t)si.uptime,
			 "mem_total_kib", (json_int_t)cg_mem_total_kib());
}
