/* SPDX-License-Identifier: Apache-2.0 */
/* top.c - `ps -ef` and `ps aux` columns from kosa8-agent's process table (top.h).
 *
 * The columns follow procps: C is the CPU time over the time since the process started,
 * in whole percent; %CPU the same to one decimal; %MEM the resident set over the VM's
 * memory; STIME/START the start's clock time when it was today, else "MonDD", else the
 * year; TIME the CPU time as [DD-]HH:MM:SS (-ef) or M:SS (aux); TTY "?" or "pts/N".
 * Names and command lines come from the guest (the agent made them printable ASCII, and
 * they are escaped again here with str_escape_to).
 */
#include "docker/top.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define DTOP_PROCS_MAX 4096

int dtop_args(const char *ps_args, enum dtop_fmt *fmt, struct k8_err *err)
{
	bool e = false, f = false, a = false, u = false, x = false;
	const char *p;

	for (p = ps_args ? ps_args : ""; *p; p++) {
		switch (*p) {
		case ' ': case '-':
			break;
		case 'e': case 'A':
			e = true;
			break;
		case 'f':
			f = true;
			break;
		case 'a':
			a = true;
			break;
		case 'u':
			u = true;
			break;
		case 'x':
			x = true;
			break;
		default:
			goto bad;
		}
	}
	if ((e || f) && (a || u || x))
		goto bad;
	if (a || u || x)
		*fmt = u ? DTOP_AUX : DTOP_AX;
	else
		*fmt = f || !e ? DTOP_EF : DTOP_E;
	return 0;
bad:
	return k8_err_set(err, -EINVAL, "ps_args \"%.60s\" is not supported by kosa8: it lists a "
			  "container's processes as `ps -ef` (-e, -f) or `ps aux` (a, u, x) would",
			  ps_args);
}

/* One process as read from the agent's table, checked. */
struct dtop_proc {
	long long pid, ppid, uid, tty, utime, stime, start, vsz, rss;
	char state;
	char comm[64], cmd[1024];
};

static bool dtop_int(const json_t *o, const char *key, long long min, long long max,
		     long long *out)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return false;
	*out = json_integer_value(v);
	return true;
}

static bool dtop_proc_read(const json_t *o, struct dtop_proc *p)
{
	const char *st = json_string_value(json_object_get(o, "state"));
	const char *comm = json_string_value(json_object_get(o, "comm"));
	const char *cmd = json_string_value(json_object_get(o, "cmd"));
	const long long big = 1ll << 53;

	if (!dtop_int(o, "pid", 1, 1 << 22, &p->pid) || !dtop_int(o, "ppid", 0, 1 << 22, &p->ppid) ||
	    !dtop_int(o, "uid", -1, 0xffffffffll, &p->uid) || !dtop_int(o, "tty", 0, 1ll << 32, &p->tty) ||
	    !dtop_int(o, "utime", 0, big, &p->utime) || !dtop_int(o, "stime", 0, big, &p->stime) ||
	    !dtop_int(o, "start", 0, big, &p->start) || !dtop_int(o, "vsz_kib", 0, big, &p->vsz) ||
	    !dtop_int(o, "rss_kib", 0, big, &p->rss) || !st || strlen(st) != 1 || !comm || !cmd)
		return false;
	p->state = (st[0] >= 'A' && st[0] <= 'Z') || (st[0] >= 'a' && st[0] <= 'z') ? st[0] : '?';
	str_escape_to(p->comm, sizeof(p->comm), comm);
	str_escape_to(p->cmd, sizeof(p->cmd), cmd);
	return true;
}

/* "?" or "pts/N" (Unix98 ptys: majors 136..143), else the device as major,minor. */
static void dtop_tty(long long dev, char *out, size_t n)
{
	unsigned major = (unsigned)((dev >> 8) & 0xfff);
	unsigned minor = (unsigned)((dev & 0xff) | ((dev >> 12) & 0xfff00));

	if (!dev)
		snprintf(out, n, "?");
	else if (major >= 136 && major <= 143)
		snprintf(out, n, "pts/%u", (major - 136) * 256 + minor);
	else
		snprintf(out, n, "%u,%u", major, minor);
}

/* procps's start column: "HH:MM" today, "MonDD" this year, else the year. */
static void dtop_start(time_t t, time_t now, char *out, size_t n)
{
	struct tm tt, tn;

	localtime_r(&t, &tt);
	localtime_r(&now, &tn);
	if (tt.tm_year == tn.tm_year && tt.tm_yday == tn.tm_yday)
		strftime(out, n, "%H:%M", &tt);
	else if (tt.tm_year == tn.tm_year)
		strftime(out, n, "%b%d", &tt);
	else
		strftime(out, n, "%Y", &tt);
}

static void dtop_time_ef(long long s, char *out, size_t n)
{
	if (s >= 86400)
		snprintf(out, n, "%lld-%02lld:%02lld:%02lld", s / 86400, s / 3600 % 24, s / 60 % 60,
			 s % 60);
	else
		snprintf(out, n, "%02lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}

static json_t *dtop_row(const struct dtop_proc *p, enum dtop_fmt fmt, long long hz,
			long long uptime, long long mem_kib, time_t now)
{
	char user[24], tty[24], start[24], tm[32], c[24], cpu[24], mem[24], state[2] = { p->state };
	long long cpu_s = (p->utime + p->stime) / hz;
	long long age = uptime - p->start / hz;
	double pcpu = age > 0 ? 100.0 * (double)(p->utime + p->stime) / (double)hz / (double)age : 0;
	const char *cmd = p->cmd[0] ? p->cmd : NULL;
	char bracket[80];

	snprintf(bracket, sizeof(bracket), "[%s]", p->comm);
	if (p->uid == 0)
		snprintf(user, sizeof(user), "root");
	else
		snprintf(user, sizeof(user), "%lld", p->uid);
	dtop_tty(p->tty, tty, sizeof(tty));
	dtop_start(now - uptime + p->start / hz, now, start, sizeof(start));
	snprintf(c, sizeof(c), "%d", (int)(pcpu > 999 ? 999 : pcpu));
	snprintf(cpu, sizeof(cpu), "%.1f", pcpu > 9999 ? 9999.0 : pcpu);
	snprintf(mem, sizeof(mem), "%.1f", mem_kib > 0 ? 100.0 * (double)p->rss / (double)mem_kib : 0);
	switch (fmt) {
	case DTOP_EF:
		dtop_time_ef(cpu_s, tm, sizeof(tm));
		return json_pack("[s,I,I,s,s,s,s,s]", user, (json_int_t)p->pid, (json_int_t)p->ppid, c,
				 start, tty, tm, cmd ? cmd : bracket);
	case DTOP_E:
		dtop_time_ef(cpu_s, tm, sizeof(tm));
		return json_pack("[I,s,s,s]", (json_int_t)p->pid, tty, tm, p->comm);
	case DTOP_AUX:
		snprintf(tm, sizeof(tm), "%lld:%02lld", cpu_s / 60, cpu_s % 60);
		return json_pack("[s,I,s,s,I,I,s,s,s,s,s]", user, (json_int_t)p->pid, cpu, mem,
				 (json_int_t)p->vsz, (json_int_t)p->rss, tty, state, start, tm,
				 cmd ? cmd : bracket);
	default:
		snprintf(tm, sizeof(tm), "%lld:%02lld", cpu_s / 60, cpu_s % 60);
		return json_pack("[I,s,s,s,s]", (json_int_t)p->pid, tty, state, tm, cmd ? cmd : bracket);
	}
}

/* moby's Processes are strings, pids too. */
static json_t *dtop_strings(json_t *row)
{
	json_t *out = json_array(), *v;
	size_t i;

	json_array_foreach(row, i, v) {
		if (json_is_integer(v))
			json_array_append_new(out, json_sprintf("%lld", (long long)json_integer_value(v)));
		else
			json_array_append(out, v);
	}
	json_decref(row);
	return out;
}

json_t *dtop_json(const json_t *ans, enum dtop_fmt fmt, time_t now)
{
	static const char *const titles[][11] = {
		[DTOP_EF] = { "UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD" },
		[DTOP_E] = { "PID", "TTY", "TIME", "CMD" },
		[DTOP_AUX] = { "USER", "PID", "%CPU", "%MEM", "VSZ", "RSS", "TTY", "STAT", "START",
			       "TIME", "COMMAND" },
		[DTOP_AX] = { "PID", "TTY", "STAT", "TIME", "COMMAND" },
	};
	const json_t *procs = json_object_get(ans, "procs"), *o;
	json_t *t = json_array(), *rows = json_array();
	long long hz = 100, uptime = 0, mem = 0;
	struct dtop_proc p;
	size_t i;

	for (i = 0; i < 11 && titles[fmt][i]; i++)
		json_array_append_new(t, json_string(titles[fmt][i]));
	if (!dtop_int(ans, "hz", 1, 100000, &hz))
		hz = 100;
	if (!dtop_int(ans, "uptime_s", 0, 1ll << 40, &uptime))
		uptime = 0;
	if (!dtop_int(ans, "mem_total_kib", 0, 1ll << 50, &mem))
		mem = 0;
	json_array_foreach((json_t *)procs, i, o) {
		json_t *row;

		if (i >= DTOP_PROCS_MAX)
			break;
		memset(&p, 0, sizeof(p));
		if (!dtop_proc_read(o, &p))
			continue;
		row = dtop_row(&p, fmt, hz, uptime, mem, now);
		if (row)
			json_array_append_new(rows, dtop_strings(row));
	}
	return json_pack("{s:o,s:o}", "Titles", t, "Processes", rows);
}
