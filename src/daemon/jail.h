/* SPDX-License-Identifier: Apache-2.0 */
/* jail.h - the unprivileged identities of a sandbox's host processes.
 *
 * Every sandbox gets a block of JAIL_ROLES consecutive uids from the daemon's range
 * (config key "jail_uids", default JAIL_DEFAULT_RANGE): one for QEMU, one for kosa8-net,
 * one for kosa8-fs, one for kosa8-broker (broker.c); gid = uid. Distinct uids per process keep a compromised
 * QEMU from signalling or tracing its own sidecars, and distinct blocks keep sandboxes
 * apart. Each uid of a block is claimed by a file /run/kosa8/jail/<uid> naming the
 * sandbox's directory (and the block's first uid), so two daemons with different homes
 * never hand out the same uid, even when their ranges overlap at an offset that is not a
 * multiple of a block; a claim whose sandbox directory no longer holds a sandbox.json is
 * stale and taken over.
 */
#ifndef KOSA8_DAEMON_JAIL_H
#define KOSA8_DAEMON_JAIL_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/util.h"

enum jail_role { JAIL_QEMU = 0, JAIL_NET = 1, JAIL_FS = 2, JAIL_BROKER = 3 };
#define JAIL_ROLES 4
#define JAIL_DEFAULT_RANGE "720000-851071"
#define JAIL_CLAIM_DIR "/run/kosa8/jail"

struct jail_range {
	uid_t base;                     /* first uid of the range */
	unsigned blocks;                /* how many sandboxes the range holds */
};

/* Parse "FIRST-LAST" (inclusive uids; at least one block, never uid 0). */
int jail_range_parse(const char *spec, struct jail_range *r, struct k8_err *err);

/* Claim a block for the sandbox at `sbdir`. `*index` in: the block it had (from
 * sandbox.json) or -1; out: the block now held. Keeps the old block when it is free or
 * already ours. 0, or a negative errno with `err` set (-ENOSPC: the range is full). */
int jail_claim(const struct jail_range *r, const char *sbdir, int *index, struct k8_err *err);

/* Give the block back (only if the claim still names `sbdir`). */
void jail_release(const struct jail_range *r, const char *sbdir, int index);

/* The uid (= gid) of `role` in block `index`. */
static inline uid_t jail_uid(const struct jail_range *r, int index, enum jail_role role)
{
	return r->base + (uid_t)index * JAIL_ROLES + (uid_t)role;
}

/* ---- the QEMU jail (child side) ----
 *
 * QEMU is started in a jail modelled on Firecracker's jailer: its sandbox's cgroup
 * before exec, an empty network namespace, its own IPC namespace, and its own mount
 * namespace whose root is an empty read-only tmpfs holding
 * only /usr (and the /lib, /bin symlinks or read-only binds of the host), the dynamic
 * linker's cache, /dev/{null,zero,random,urandom}, /dev/kvm under KVM and a procfs that
 * shows only its own process (and, for a QEMU that maps a memory file, the library it
 * preloads: j->preload); then the sandbox's QEMU uid and gid (real gid
 * JAIL_REAL_GID, so it is not dumpable after exec; no core file) with no
 * supplementary groups, every capability set empty, no_new_privs, and our seccomp
 * filter under the one QEMU's `-sandbox on` adds. Every file it uses (disks, sockets,
 * kernel) arrives as an open descriptor, so nothing of $KOSA8_HOME is in its root.
 * Not a new pid namespace: the daemon finds, adopts and kills QEMU by host pid.
 * docs/threat-model.md "QEMU jail". */
#define JAIL_ROOT "/run/kosa8/jail-root"   /* empty mount point, used by every jail */
/* QEMU's real gid (its effective and saved gids are its uid): nogroup. A real gid other
 * than the effective one is what makes execve leave QEMU non-dumpable. */
#define JAIL_REAL_GID 65534

struct jail_spec {
	uid_t uid;                      /* QEMU's uid (= gid); 0: no jail */
	bool kvm;                       /* bind /dev/kvm */
	int cg_fds[3];                  /* cgroup.procs files the child writes "0" to */
	int ncg;
	/* filled by jail_prepare: what /lib, /lib64, /bin, /sbin are on this host */
	char link[4][64];               /* symlink target, or "" */
	bool dir[4];                    /* a real directory: bind it read-only */
	bool ldcache;                   /* /etc/ld.so.cache exists */
	dev_t kvm_dev;                  /* /dev/kvm's device number (KVM only) */
	/* A library the jail's /etc/ld.so.preload names (bound read-only at JAIL_PRELOAD):
	 * the host path of kosa8-qemu-ram.so for a QEMU whose RAM maps a memory file; NULL:
	 * none. The loader reads that file even in QEMU's secure-execution mode. */
	const char *preload;
};
#define JAIL_PRELOAD "/kosa8-qemu-ram.so"

/* Install the jail's seccomp filter on the calling thread (needs no_new_privs or
 * CAP_SYS_ADMIN). 0 or a negative errno. Async-signal-safe. */
int jail_seccomp(void);

/* Parent side, before fork: create JAIL_ROOT and look at the host's layout. */
int jail_prepare(struct jail_spec *j, struct k8_err *err);

/* Child side, after fork and before exec: async-signal-safe (raw system calls only).
 * Enters the cgroups, and with j->uid the jail. NULL on success, else a short static
 * string naming the step that failed, with errno set. */
const char *jail_qemu_enter(const struct jail_spec *j);

#endif
