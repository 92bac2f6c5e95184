/* SPDX-License-Identifier: Apache-2.0 */
/* cgroup.c - host-side limits on each sandbox's QEMU process (defence in depth).
 *
 * The VM's own size (vCPUs, RAM, disk) is the first limit; a cgroup around QEMU caps
 * what the emulator itself may take from the host: CPU time (quota = vCPUs), memory
 * (guest RAM + QEMU's own overhead) and tasks. cgroup v2 (unified) is used when the host
 * has it, else v1 controllers (cpu, memory, pids), else nothing and the note says why.
 * QEMU enters its cgroups itself between fork and exec (cgroup_prepare opens the
 * cgroup.procs files, the child writes "0"), so none of it runs outside them.
 * Paths: <root>/kosa8/<home tag>/<sandbox name> (v2: <root> is /sys/fs/cgroup; v1: each
 * controller's hierarchy), one parent per daemon home (cgroup_probe).
 */
#include "common/sha.h"
#include "common/util.h"
#include "daemon/cgroup.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CG "/sys/fs/cgroup"
#define QEMU_OVERHEAD_MIB 384   /* TCG translation cache (capped at 128 MiB) + QEMU itself */

static int cg_write(const char *dir, const char *file, const char *val)
{
	char path[512];
	int fd, r = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* ci->base from the home's real path (the path itself when it cannot be resolved). */
static void cg_base(struct cgroup_info *ci, const char *home)
{
	char real[PATH_MAX], hex[65];

	if (!realpath(home, real))
		snprintf(real, sizeof(real), "%s", home);
	sha256_hex(real, strlen(real), hex);
	snprintf(ci->base, sizeof(ci->base), "kosa8/%.12s", hex);
}

int cgroup_probe(struct cgroup_info *ci, const char *home)
{
	char dir[512];

	memset(ci, 0, sizeof(*ci));
	cg_base(ci, home);
	if (access(CG "/cgroup.controllers", F_OK) == 0) {
		cleanup_free char *ctl = NULL;
		snprintf(dir, sizeof(dir), CG "/%s", ci->base);
		if (read_file(CG "/cgroup.controllers", 4096, &ctl, NULL) == 0 &&
		    strstr(ctl, "memory") && strstr(ctl, "pids") && access(CG, W_OK) == 0 &&
		    mkdir_p(dir, 0755) == 0) {
			/* each level hands the controllers down to the next */
			cg_write(CG, "cgroup.subtree_control", "+memory +pids +cpu");
			cg_write(CG "/kosa8", "cgroup.subtree_control", "+memory +pids +cpu");
			cg_write(dir, "cgroup.subtree_control", "+memory +pids +cpu");
			ci->version = 2;
			snprintf(ci->note, sizeof(ci->note), "cgroup v2 at %s", dir);
			return 0;
		}
		snprintf(ci->note, sizeof(ci->note),
			 "cgroup v2 is mounted but %s is not writable by this user; VMs run "
			 "without host-side limits (their own size still applies)", CG);
		return 0;
	}
	if (access(CG "/memory", W_OK) == 0 && access(CG "/cpu", W_OK) == 0) {
		static const char *const ctl[] = { "memory", "cpu", "pids" };
		for (size_t i = 0; i < ARRAY_SIZE(ctl); i++) {
			snprintf(dir, sizeof(dir), CG "/%s", ctl[i]);
			if (access(dir, W_OK) == 0) {
				snprintf(dir, sizeof(dir), CG "/%s/%s", ctl[i], ci->base);
				mkdir_p(dir, 0755);
			}
		}
		ci->version = 1;
		snprintf(ci->note, sizeof(ci->note), "cgroup v1 (memory, cpu%s) under %s/*/%s",
			 access(CG "/pids", W_OK) == 0 ? ", pids" : "", CG, ci->base);
		return 0;
	}
	snprintf(ci->note, sizeof(ci->note),
		 "no usable cgroups (neither a writable v2 hierarchy nor v1 memory+cpu "
		 "controllers); VMs run without host-side limits (their own size still applies)");
	return 0;
}

/* Create the sandbox's cgroups with their limits and open each cgroup.procs. */
int cgroup_prepare(const struct cgroup_info *ci, const char *name, int cpus, uint64_t mem_bytes,
		   int fds[3], int *nfds, char *desc, size_t desclen)
{
	char dir[512], val[64], path[600];
	uint64_t limit = mem_bytes + (uint64_t)QEMU_OVERHEAD_MIB * 1024 * 1024;
	int fd;

	*nfds = 0;
	if (ci->version == 2) {
		snprintf(dir, sizeof(dir), CG "/%s/%s", ci->base, name);
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return -errno;
		snprintf(val, sizeof(val), "%llu", (unsigned long long)limit);
		cg_write(dir, "memory.max", val);
		snprintf(val, sizeof(val), "%d 100000", cpus * 100000);
		cg_write(dir, "cpu.max", val);
		cg_write(dir, "pids.max", "512");
		snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
		if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
			return -errno;
		fds[(*nfds)++] = fd;
		snprintf(desc, desclen, "cgroup v2 %s: memory.max %llu MiB, cpu.max %d CPUs, pids.max 512",
			 dir, (unsigned long long)(limit >> 20), cpus);
		return 0;
	}
	if (ci->version == 1) {
		snprintf(dir, sizeof(dir), CG "/memory/%s/%s", ci->base, name);
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return -errno;
		snprintf(val, sizeof(val), "%llu", (unsigned long long)limit);
		cg_write(dir, "memory.limit_in_bytes", val);
		snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
		if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
			return -errno;
		fds[(*nfds)++] = fd;
		snprintf(dir, sizeof(dir), CG "/cpu/%s/%s", ci->base, name);
		if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
			cg_write(dir, "cpu.cfs_period_us", "100000");
			snprintf(val, sizeof(val), "%d", cpus * 100000);
			cg_write(dir, "cpu.cfs_quota_us", val);
			snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
			if ((fd = open(path, O_WRONLY | O_CLOEXEC)) >= 0)
				fds[(*nfds)++] = fd;
		}
		snprintf(dir, sizeof(dir), CG "/pids/%s/%s", ci->base, name);
		if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
			cg_write(dir, "pids.max", "512");
			snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
			if ((fd = open(path, O_WRONLY | O_CLOEXEC)) >= 0)
				fds[(*nfds)++] = fd;
		}
		snprintf(desc, desclen, "cgroup v1: memory %llu MiB, cpu quota %d CPUs, pids 512",
			 (unsigned long long)(limit >> 20), cpus);
		return 0;
	}
	snprintf(desc, desclen, "none: %s", ci->note);
	return -ENOTSUP;
}

int cgroup_apply(const struct cgroup_info *ci, const char *name, pid_t pid, int cpus,
		 uint64_t mem_bytes, char *desc, size_t desclen)
{
	char pidv[32];
	int fds[3], n = 0, r;

	r = cgroup_prepare(ci, name, cpus, mem_bytes, fds, &n, desc, desclen);
	snprintf(pidv, sizeof(pidv), "%d", (int)pid);
	for (int i = 0; i < n; i++) {
		if (!r && write(fds[i], pidv, strlen(pidv)) < 0 && i == 0)
			r = -errno;
		close(fds[i]);
	}
	return r;
}

void cgroup_remove(const struct cgroup_info *ci, const char *name)
{
	char dir[512];

	if (ci->version == 2) {
		snprintf(dir, sizeof(dir), CG "/%s/%s", ci->base, name);
		rmdir(dir);
	} else if (ci->version == 1) {
		static const char *const ctl[] = { "memory", "cpu", "pids" };
		for (size_t i = 0; i < ARRAY_SIZE(ctl); i++) {
			snprintf(dir, sizeof(dir), CG "/%s/%s/%s", ctl[i], ci->base, name);
			rmdir(dir);
		}
	}
}

int cgroup_procs_paths(const struct cgroup_info *ci, const char *name, char out[][512], int max)
{
	static const char *const v1[] = { "memory", "pids" };
	int n = 0;

	if (ci->version == 2 && max >= 1) {
		snprintf(out[0], 512, CG "/%s/%s", ci->base, name);
		if (mkdir(out[0], 0755) < 0 && errno != EEXIST)
			return 0;
		cg_write(out[0], "pids.max", "512");
		snprintf(out[0], 512, CG "/%s/%s/cgroup.procs", ci->base, name);
		return 1;
	}
	for (size_t i = 0; ci->version == 1 && i < ARRAY_SIZE(v1) && n < max; i++) {
		snprintf(out[n], 512, CG "/%s/%s/%s", v1[i], ci->base, name);
		if (mkdir(out[n], 0755) < 0 && errno != EEXIST)
			continue;
		snprintf(out[n], 512, CG "/%s/%s/%s/cgroup.procs", v1[i], ci->base, name);
		n++;
	}
	return n;
}
