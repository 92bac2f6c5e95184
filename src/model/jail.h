/* SPDX-License-Identifier: Apache-2.0 */
/* jail.h - the jail `kosa8-model serve` enters once the model is mapped and its port bound.
 *
 * Model files and API clients are hostile, so the server keeps nothing it does not need:
 * it maps the file (reading none of it) and binds the listening socket as the user that
 * started it, then (src/common/jail.c) takes an empty read-only root in a private mount
 * namespace, its own uid and gid (MODEL_JAIL_UID unless --user), no capability,
 * no_new_privs, not dumpable, Landlock with no file access at all, and a seccomp
 * allow-list with no socket(), connect(), bind(), exec, fork or signal to another
 * process. Everything after that (parsing the model file, the thread pool,
 * libmicrohttpd's threads) happens inside it. docs/threat-model.md "Model server jail".
 */
#ifndef KOSA8_MODEL_JAIL_H
#define KOSA8_MODEL_JAIL_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/util.h"

/* Just below the sandboxes' default jail_uids range (daemon/jail.h): one uid for every
 * model server, whose seccomp filter lets none of them signal or trace another. */
#define MODEL_JAIL_UID 719999

struct mjail {
	bool jail;               /* enter the jail (root only); false: seccomp only */
	uid_t uid;
	gid_t gid;
};

/* Parse --user "UID:GID" (both > 0). 0 or -EINVAL. */
int mjail_parse_user(const char *spec, struct mjail *j);

/* Enter the jail (when j->jail) and install the seccomp filter. Call while the process
 * has one thread. 0, or a negative errno with `err` naming the step; on failure the
 * process must exit. */
int mjail_enter(const struct mjail *j, struct k8_err *err);

#endif
