/* SPDX-License-Identifier: Apache-2.0 */
/* jail.h - the unprivileged identities of a sandbox's host processes.
 *
 * Every sandbox gets a block of JAIL_ROLES consecutive uids from the daemon's range
 * (config key "jail_uids", default JAIL_DEFAULT_RANGE): one for QEMU, one for kosa8-net,
 * one for kosa8-fs, one spare; gid = uid. Distinct uids per process keep a compromised
 * QEMU from signalling or tracing its own sidecars, and distinct blocks keep sandboxes
 * apart. A block is claimed by a file /run/kosa8/jail/<first uid> naming the sandbox's
 * directory, so two daemons with different homes never hand out the same block; a claim
 * whose sandbox directory no longer holds a sandbox.json is stale and taken over.
 */
#ifndef KOSA8_DAEMON_JAIL_H
#define KOSA8_DAEMON_JAIL_H

#include <sys/types.h>

#include "common/util.h"

enum jail_role { JAIL_QEMU = 0, JAIL_NET = 1, JAIL_FS = 2 };
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

#endif
