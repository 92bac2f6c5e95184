/* SPDX-License-Identifier: Apache-2.0 */
/* jail.h - the self-jail a sidecar (kosa8-fs, kosa8-net) enters before it reads a byte
 * from the guest, and the pieces other jails are made of (the workers of worker.h, the
 * idmapped shares of src/daemon/mounts.c).
 *
 * The daemon starts a sidecar as root with the few fds it needs already open (sockets,
 * shared-folder roots). jail_enter() then, in this order: joins the sandbox's cgroup,
 * moves into a private mount namespace whose root is an empty read-only tmpfs
 * (pivot_root; nothing of the host's tree is reachable by path any more), drops every
 * supplementary group and switches to the sandbox's unprivileged uid/gid, clears every
 * capability set (bounding and ambient included), sets no_new_privs and makes the
 * process non-dumpable, and finally applies a Landlock ruleset where the kernel has one:
 * file access only beneath the listed directory fds, read-only ones read-only. Seccomp
 * is left to the caller (each sidecar has its own allow-list) and must come after.
 *
 * The uid switch is what the rest leans on: a sidecar that is taken over holds no
 * capability, owns no file of the host and shares its uid with nothing else.
 */
#ifndef KOSA8_COMMON_JAIL_H
#define KOSA8_COMMON_JAIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"

#define JAIL_MAX_CGROUPS 4
#define JAIL_MAX_DIRS 64

struct jail_dir {
	int fd;                  /* an O_PATH or O_DIRECTORY fd of a directory */
	bool ro;                 /* read-only beneath it (Landlock) */
};

struct jail_opts {
	uid_t uid;               /* must not be 0 */
	gid_t gid;               /* must not be 0 */
	/* cgroup.procs files to write "0" into (v2: one; v1: one per controller) */
	const char *cgroups[JAIL_MAX_CGROUPS];
	int ncgroups;
	/* Landlock: file access beneath these only (none: no file access at all) */
	struct jail_dir dirs[JAIL_MAX_DIRS];
	int ndirs;
	bool landlock;           /* apply a Landlock ruleset when the kernel supports it */
};

/* What jail_enter() managed beyond the mandatory steps (for the start-up log line). */
struct jail_report {
	int landlock_abi;        /* 0: no Landlock on this kernel (or not asked for) */
};

/* Enter the jail. Every step but Landlock is mandatory: on failure the process is in
 * an unknown state and must exit. 0, or a negative errno with `err` naming the step. */
int jail_enter(const struct jail_opts *o, struct jail_report *rep, struct k8_err *err);

/* Pieces of it for a process that keeps its uid (the CLI's extraction of a container's
 * tar, src/cli/cp.c) or becomes root of a user namespace of its own (kosa8d's workers,
 * worker.h). no_new_privs, then no capability left in any set (root keeps its
 * uid and so its own files, without CAP_DAC_OVERRIDE, CAP_CHOWN and the rest). */
int jail_caps_none(struct k8_err *err);
/* The same, keeping the capabilities in `keep` (a mask of 1ull << CAP_*) in the
 * permitted, effective and bounding sets; inheritable and ambient empty. */
int jail_caps_keep(uint64_t keep, struct k8_err *err);
/* A Landlock ruleset: file access only beneath `dirs` (read-only ones read-only), never
 * execute. 0 with *abi = 0 when the kernel has no Landlock (ENOSYS / EOPNOTSUPP). */
int jail_landlock_dirs(const struct jail_dir *dirs, int ndirs, int *abi, struct k8_err *err);

/* ---- ids through a user namespace (needs root) ---- */

/* "FIRST-LAST": inclusive host ids above 0 and below 2^32-1, at least `min` of them.
 * 0 with *first and *count, or -EINVAL. */
int jail_ids_parse(const char *spec, uint32_t min, uint32_t *first, uint32_t *count);

/* `count` ids from `inside` (ids in the namespace) are `outside` (the host's). */
struct jail_idmap {
	uint32_t inside, outside, count;
};
/* A new user namespace with these uid and gid maps, held by nothing but the returned
 * fd (a child is cloned into it and waits while its maps are written, then goes). The
 * fd, or a negative errno with a message. */
int jail_userns(const struct jail_idmap *uids, const struct jail_idmap *gids,
		struct k8_err *err);
/* A detached, non-recursive clone of the directory `dirfd` (open_tree: Linux 5.12)
 * whose ids are mapped through the user namespace `userns` (a file of on-disk uid u is
 * the host's uid the namespace maps u to, and back), with `attrs` (MOUNT_ATTR_*) set
 * too. Its fd, or a negative errno with a message (a file system without idmapped
 * mounts: ext4, xfs, btrfs and tmpfs have them). */
int jail_idmapped_clone(int dirfd, int userns, uint64_t attrs, struct k8_err *err);

#endif
