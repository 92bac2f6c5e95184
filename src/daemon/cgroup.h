/* SPDX-License-Identifier: Apache-2.0 */
/* cgroup.h - host limits: a sandbox's cgroup (cgroup.c). Mechanism: knows no sandbox. */
#ifndef K8_CGROUP_H
#define K8_CGROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cgroup_info {
	int version;            /* 2, 1, or 0 when neither is usable */
	char base[32];          /* "kosa8/<home tag>": this daemon's cgroups, below each root */
	char note[256];         /* human-readable: what is used, or why nothing is */
};
/* What the host offers, for the daemon whose home is `home`: each home gets its own
 * parent cgroup (kosa8/<12 hex of the SHA-256 of the home's real path>), so two
 * daemons on one host with sandboxes of the same name never share a cgroup. */
int cgroup_probe(struct cgroup_info *ci, const char *home);
/* Put `pid` into a cgroup for sandbox `name` with cpu/memory/pids limits. On hosts
 * without usable cgroups returns -ENOTSUP and the note says why. */
int cgroup_apply(const struct cgroup_info *ci, const char *name, pid_t pid, int cpus,
		 uint64_t mem_bytes, char *desc, size_t desclen);
/* The same without a pid: create and limit the cgroups and open their cgroup.procs
 * files (up to 3, O_CLOEXEC) for a child to write "0" to before it execs. */
int cgroup_prepare(const struct cgroup_info *ci, const char *name, int cpus, uint64_t mem_bytes,
		   int fds[3], int *nfds, char *desc, size_t desclen);
void cgroup_remove(const struct cgroup_info *ci, const char *name);
/* The sandbox's cgroup.procs files (made if missing) a sidecar joins; how many (<= max). */
int cgroup_procs_paths(const struct cgroup_info *ci, const char *name, char out[][512], int max);

#endif
