/* SPDX-License-Identifier: Apache-2.0 */
/* cgroup.c - cgroup v2 in the guest: /sys/fs/cgroup/kosa8 holds one cgroup per
 * container with pids.max and memory.max, and the whole subtree's memory is capped
 * below the VM's RAM so the agent (oom_score_adj -1000, in the root cgroup) always has
 * room to answer.
 */
#include "agent.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/stat.h>

static int cg_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		r = -errno;
	close(fd);
	return r;
}

static int cg_writef(const char *id, const char *file, const char *val)
{
	char path[256];

	if (id)
		snprintf(path, sizeof(path), "%s/%s/%s", AGENT_CG_DIR, id, file);
	else
		snprintf(path, sizeof(path), "%s/%s", AGENT_CG_DIR, file);
	return cg_write(path, val);
}

uint64_t cg_mem_total_kib(void)
{
	char *buf = NULL, *p;
	uint64_t v = 0;

	if (read_file("/proc/meminfo", 1 << 16, &buf, NULL) < 0)
		return 0;
	p = strstr(buf, "MemTotal:");
	if (p)
		v = strtoull(p + 9, NULL, 10);
	free(buf);
	return v;
}

/* What all containers together (and each one) may use: RAM minus the reserve. */
static uint64_t cg_mem_limit(struct agent *a)
{
	uint64_t total = cg_mem_total_kib() * 1024u, reserve = (uint64_t)a->reserve_mib << 20;
	uint64_t floor = 32u << 20;

	if (total < reserve + floor)
		return floor;
	return total - reserve;
}

void cg_apply_limits(struct agent *a)
{
	char v[32];

	if (!a->cgroup_ok)
		return;
	snprintf(v, sizeof(v), "%llu", (unsigned long long)cg_mem_limit(a));
	if (cg_writef(NULL, "memory.max", v) < 0)
		agent_log("kosa8/memory.max: %s", strerror(errno));
}

void cg_boot(struct agent *a)
{
	static const char *const ctl[] = { "+memory", "+pids", "+cpu" };
	char path[128];
	int r, ok = 1;

	/* favordynmods: moving a task into a cgroup (each container's and exec's first
	 * step) then needs no RCU grace period, ~10 ms of a TCG guest's start each; forks
	 * and exits pay a little more. A kernel without it (before 6.0) mounts without. */
	if (mount("cgroup2", AGENT_CG_ROOT, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "favordynmods") < 0 &&
	    mount("cgroup2", AGENT_CG_ROOT, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		agent_log("mount cgroup2: %s: containers cannot start", strerror(errno));
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(ctl); i++) {
		snprintf(path, sizeof(path), "%s/cgroup.subtree_control", AGENT_CG_ROOT);
		if ((r = cg_write(path, ctl[i])) < 0)
			agent_log("cgroup controller %s: %s", ctl[i] + 1, strerror(-r));
	}
	if (mkdir(AGENT_CG_DIR, 0755) < 0 && errno != EEXIST) {
		agent_log("mkdir %s: %s", AGENT_CG_DIR, strerror(errno));
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(ctl); i++) {
		if ((r = cg_writef(NULL, "cgroup.subtree_control", ctl[i])) < 0) {
			agent_log("kosa8 cgroup controller %s: %s", ctl[i] + 1, strerror(-r));
			if (i < 2)
				ok = 0; /* memory and pids are required, cpu is not */
		}
	}
	a->cgroup_ok = ok;
	cg_apply_limits(a);
}

#define CG_CPU_PERIOD_US 100000

int cg_create(struct agent *a, const char *id, uint64_t mem_max, uint64_t nano_cpus,
	      struct k8_err *err)
{
	uint64_t mem = cg_mem_limit(a);
	char path[128], v[32];
	int r;

	/* A retried rmdir for an earlier container of this id must not hit the new one. */
	for (struct cg_pending **pp = &a->cg_pending, *p; (p = *pp);) {
		if (!strcmp(p->id, id)) {
			*pp = p->next;
			free(p);
		} else {
			pp = &p->next;
		}
	}
	snprintf(path, sizeof(path), "%s/%s", AGENT_CG_DIR, id);
	if (mkdir(path, 0755) < 0 && (errno != EEXIST || rmdir(path) < 0 || mkdir(path, 0755) < 0))
		return k8_err_set(err, -errno, "mkdir %s: %s", path, strerror(errno));
	snprintf(v, sizeof(v), "%ld", a->pids_max);
	if ((r = cg_writef(id, "pids.max", v)) < 0)
		goto fail;
	if (mem_max && mem_max < mem)
		mem = mem_max;
	snprintf(v, sizeof(v), "%llu", (unsigned long long)mem);
	if ((r = cg_writef(id, "memory.max", v)) < 0)
		goto fail;
	if (nano_cpus) {
		/* quota per 100 ms period; the kernel's floor is 1 ms */
		uint64_t q = nano_cpus * CG_CPU_PERIOD_US / 1000000000u;

		snprintf(v, sizeof(v), "%llu %u", (unsigned long long)(q < 1000 ? 1000 : q),
			 CG_CPU_PERIOD_US);
		if ((r = cg_writef(id, "cpu.max", v)) < 0)
			goto fail;
	}
	return 0;
fail:
	rmdir(path);
	return k8_err_set(err, r, "setting the limits of cgroup %s: %s", path, strerror(-r));
}

json_t *cg_limits_json(const char *id)
{
	char path[256], *mem = NULL, *cpu = NULL;
	json_t *o;

	snprintf(path, sizeof(path), "%s/%s/memory.max", AGENT_CG_DIR, id);
	read_file(path, 64, &mem, NULL);
	snprintf(path, sizeof(path), "%s/%s/cpu.max", AGENT_CG_DIR, id);
	read_file(path, 64, &cpu, NULL);
	if (cpu)
		cpu[strcspn(cpu, "\n")] = '\0';
	o = json_pack("{s:I,s:s}", "memory_max", mem ? (json_int_t)strtoull(mem, NULL, 10) : 0,
		      "cpu_max", cpu ? cpu : "");
	free(mem);
	free(cpu);
	return o;
}

int cg_attach(const char *id, pid_t pid)
{
	char v[24];

	snprintf(v, sizeof(v), "%d", (int)pid);
	return cg_writef(id, "cgroup.procs", v);
}

static uint64_t cg_parse(const char *buf, const char *key)
{
	size_t klen = strlen(key);
	const char *p = buf;

	while (p && *p) {
		if (!strncmp(p, key, klen) && p[klen] == ' ')
			return strtoull(p + klen + 1, NULL, 10);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

uint64_t cg_counter_fd(int fd, const char *key)
{
	char buf[1024];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return cg_parse(buf, key);
}

uint64_t cg_counter(const char *id, const char *file, const char *key)
{
	char path[256], *buf = NULL;
	uint64_t v;

	snprintf(path, sizeof(path), "%s/%s/%s", AGENT_CG_DIR, id, file);
	if (read_file(path, 4096, &buf, NULL) < 0)
		return 0;
	v = cg_parse(buf, key);
	free(buf);
	return v;
}

int cg_open_events(struct agent *a, struct ctr *c)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s/memory.events", AGENT_CG_DIR, c->id);
	c->memev.fd = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/%s/pids.events", AGENT_CG_DIR, c->id);
	c->pidsev.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (c->memev.fd >= 0) {
		c->oom_kills = cg_counter_fd(c->memev.fd, "oom_kill");
		agent_watch(a, &c->memev, EPOLLPRI);
	}
	if (c->pidsev.fd >= 0) {
		c->pids_hits = cg_counter_fd(c->pidsev.fd, "max");
		agent_watch(a, &c->pidsev, EPOLLPRI);
	}
	return c->memev.fd >= 0 && c->pidsev.fd >= 0 ? 0 : -ENOENT;
}

static int cg_rmdir(const char *id)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/%s", AGENT_CG_DIR, id);
	if (rmdir(path) == 0 || errno == ENOENT)
		return 0;
	return -errno;
}

void cg_remove(struct agent *a, const char *id)
{
	struct cg_pending *p;

	/* Nothing should be left (the init's exit took its PID namespace along), but
	 * make sure before the rmdir. */
	cg_writef(id, "cgroup.kill", "1");
	if (cg_rmdir(id) == 0)
		return;
	p = xcalloc(1, sizeof(*p));
	snprintf(p->id, sizeof(p->id), "%s", id);
	p->at = now_mono_ns() + 50000000ull;
	p->next = a->cg_pending;
	a->cg_pending = p;
}

void cg_tick(struct agent *a, uint64_t now, uint64_t *next)
{
	struct cg_pending **pp = &a->cg_pending, *p;

	while ((p = *pp)) {
		if (now < p->at) {
			if (p->at < *next)
				*next = p->at;
			pp = &p->next;
			continue;
		}
		if (cg_rmdir(p->id) == 0 || ++p->tries > 100) {
			if (p->tries > 100)
				agent_log("cgroup kosa8/%s: still busy, left behind", p->id);
			*pp = p->next;
			free(p);
			continue;
		}
		p->at = now + 100000000ull;
		if (p->at < *next)
			*next = p->at;
		pp = &p->next;
	}
}
