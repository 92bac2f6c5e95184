/* SPDX-License-Identifier: Apache-2.0 */
/* record.h - a sandbox's record: struct sandbox, the daemon's table of them, the busy
 * token, sandbox.json (its one writer, sb_save) and the paths of its sockets
 * (record.c). Below the sandbox's parts (egress, mounts), which read and save it, and
 * below its lifecycle (sandbox.c). Lock order: daemon.lock, then sandbox.lock. */
#ifndef K8_RECORD_H
#define K8_RECORD_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/rate.h"
#include "common/util.h"
#include "daemon/agentlink.h"
#include "daemon/daemon.h"
#include "daemon/qmp.h"
#include "daemon/sidecar.h"
#include "daemon/vm.h"

#define K8_MAX_MOUNTS 8
#define K8_MAX_PORTS 32                 /* published ports per sandbox (ports.c) */

/* A published port (ports.c, docs/network.md "Published ports"). */
struct sb_port {
	char host_ip[46];               /* as bound: 127.0.0.1, ::1, 0.0.0.0 (when allowed) */
	int host_port, guest_port;      /* host_port: the bound one, never 0 */
	char guest_ip[16];              /* an engine container's own address (Docker layer,
	                                 * "netns":"own"); "": the VM's */
	int fd;                         /* the daemon's listener until kosa8-net has it; -1 */
};

struct sb_broker;

struct sb_mount {
	char host[4096];                /* realpath of an existing directory */
	char guest[256];                /* absolute, normalised */
	bool ro;
	/* the folder pinned at create (mounts.c): its identity, checked at every start */
	bool pinned;
	unsigned long long dev, ino;
	long long btime;                /* birth time (ns), 0 if the file system has none */
};

/* SB_PAUSED: paused to disk, no QEMU (paused/state holds the machine, checkpoint.c);
 * a sandbox paused in memory is SB_RUNNING with `paused` set. */
enum sb_state { SB_STOPPED, SB_BOOTING, SB_RUNNING, SB_FAILED, SB_REMOVING, SB_PAUSED };

struct spare;

struct sandbox {
	struct sandbox *next;
	struct daemon *d;               /* the daemon that owns it (event callbacks reach it) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int busy;                       /* lifecycle operation in progress (boot, rm) */
	/* a rewind through the spare answered, and its guest's greeting, init and image
	 * mounts still run on a thread of their own, which holds the busy token
	 * (checkpoint.c): sb_wait_connected waits; sandbox.json says "init_pending" */
	bool connecting;
	/* a restored VM (cold rewind, fork, resume) is spawned and has not had its init yet:
	 * sandbox.json says "init_pending" too, with its pid, so a daemon that dies meanwhile
	 * leaves a VM the next one ends rather than one nobody knows (sandbox.c) */
	bool restoring;
	/* its memory file is to be warmed once the restored machine runs (boot.c): before,
	 * the warmer's reads stood in the way of QEMU's load of the devices' state */
	bool warm_pending;
	int users;                      /* API requests using it (rm waits) */
	char name[K8_NAME_MAX + 1];
	char id[17];                    /* short hex id: socket names */
	char dir[4096];
	int cpus;
	int memory_mib;
	int disk_gb;
	char created[32];
	enum sb_state state;
	char error[512];
	pid_t pid;                      /* QEMU */
	unsigned long long pid_start;   /* /proc/pid/stat starttime: pid identity */
	bool child;                     /* spawned by this daemon (we reap it) */
	char accel[8];
	char limits_desc[256];
	struct vm_image images[K8_MAX_SLOTS];
	int nimages;
	pthread_rwlock_t slots_lock;    /* a run's image resolution and start (read), an
	                                 * eviction (write): slots.c */
	struct qmp qmp;
	struct agentlink link;
	uint64_t boot_ms;
	char disk[256];                 /* current writable top layer (file name in dir) */
	bool paused;                    /* vCPUs stopped by `sandbox pause` */
	bool forked;                    /* made by `sandbox fork`: explicit backing chain */
	struct vm_machine machine;      /* of its VM now (and of paused/): vm.h */
	/* The memory file its VM's RAM maps private (a restore of one: docs/design.md
	 * "Memory as a file"): the daemon's read-only descriptor, -1 when its RAM is QEMU's
	 * own memory or the file is not open again yet after a restart; and the file's
	 * identity (0, 0: none), which sandbox.json keeps for a daemon that adopts the VM. */
	int mem_fd;
	unsigned long long mem_dev, mem_ino;
	/* network (egress.c) */
	char egress_mode[16];           /* "deny", "allow-list", "allow-all" */
	json_t *egress_rules;           /* array of rule strings, as normalised */
	struct sidecar net;
	/* records the guest can cause (egress refusals, limit hits): daemon_audit_guest */
	pthread_mutex_t audit_mu;
	struct rate_bucket audit_budget;
	/* shared folders (mounts.c) */
	struct sb_mount mounts[K8_MAX_MOUNTS];
	int nmounts;
	struct sidecar fs;
	struct sb_broker *broker;       /* broker.c: NULL when the sandbox has none */
	/* published ports (ports.c) */
	struct sb_port ports[K8_MAX_PORTS];
	int nports;
	/* host identities (jail.h): block in the daemon's jail_uids range, -1 until claimed */
	int jail_index;
	/* idle pause (idle.c): seconds without use before a pause to disk; -1 follows the
	 * daemon's config.json "idle_pause", 0 never. last_use: monotonic ns of the last API
	 * request that used it (sb_put), or of its creation or load. */
	int idle_pause_s;
	uint64_t last_use_ns;
	/* rewind through a spare (spare.c): which checkpoint ("latest", "off", a label; ""
	 * is "latest"), and the spare itself */
	char rewind_spare[64];
	struct spare *spare;
	/* who made it for whom, when not a user: {"kind":"containerd","namespace","id",
	 * "pod"?} from containerd-shim-kosa8-v2 (docs/containerd.md); NULL otherwise. Set
	 * under the daemon's table lock at create, never changed after. */
	json_t *owner;
	/* Ends the spare with the VM: spare_drop, set by sandbox.c when it makes the record,
	 * so that sb_kill_vm (boot.c, below spare.c) ends it as it always did. */
	void (*spare_drop)(struct daemon *d, struct sandbox *sb);
	/* `sandbox ls`'s last entry for it, guarded by the daemon's table lock: what ls shows
	 * of a sandbox whose lock stays held past its wait (sb_list_json) */
	json_t *listing;
};

/* A sandbox's owner as an API client gave it (docs/reference/api.md, POST /v1/sandboxes): 0, or
 * -EINVAL with a message. Pure. */
int sb_owner_check(const json_t *owner, struct k8_err *err);

/* "stopped", "booting", ... as in sandbox.json and the API. */
const char *sb_state_name(enum sb_state s);
bool sb_name_valid(const char *name);
/* The sandbox table: sb_get takes a user reference (rm waits for users), sb_put drops it. */
struct sandbox *sb_get(struct daemon *d, const char *name, struct k8_err *err);
void sb_put(struct daemon *d, struct sandbox *sb);
/* sb_put for a request that only looks (inspect): it does not count as use (idle.c). */
void sb_put_peek(struct daemon *d, struct sandbox *sb);
/* Every sandbox `want` accepts (asked under the table lock, so it must not block), each
 * with a reference the caller drops with sb_put(), then free()s the array. *n is the
 * count; NULL when there are none. No cap: the table is as long as it is. */
struct sandbox **sb_collect(struct daemon *d, bool (*want)(struct sandbox *sb, void *arg),
			    void *arg, size_t *n);
/* The sandbox's lifecycle token (boot, rm, policy and folder changes); waits for another
 * holder. */
void sb_busy_enter(struct sandbox *sb);
void sb_busy_leave(struct sandbox *sb);
/* Wait until no guest init runs in the background (sb->connecting). 0; or, when one ran
 * and failed, -EIO with its error (the sandbox is FAILED, its VM gone). Caller holds
 * neither sb->lock nor the busy token. */
int sb_wait_connected(struct sandbox *sb, struct k8_err *err);
/* Write sandbox.json atomically. Caller holds sb->lock. */
int sb_save(struct sandbox *sb);
/* The images of a sandbox as kept in sandbox.json and a checkpoint's meta.json: the one
 * writer and the one reader (entries that do not check out are skipped). */
json_t *sb_images_json(const struct vm_image *imgs, int n);
int sb_images_from_json(json_t *arr, struct vm_image out[K8_MAX_SLOTS]);
/* The shared folders as kept in sandbox.json (host, guest, ro, pin), or as the agent
 * gets them (index, guest, ro: never a host path). */
json_t *sb_mounts_json(const struct sandbox *sb, bool for_guest);
/* The published ports as kept in sandbox.json and shown: [{host_ip,host_port,guest_port}]
 * (the reader skips entries that do not check out; their fds start at -1). */
json_t *sb_ports_json(const struct sandbox *sb);
void sb_ports_from_json(struct sandbox *sb, json_t *arr);
/* $KOSA8_HOME/run/<id>.<what>: a socket of the sandbox's VM or sidecars. */
void sb_sock_path(struct daemon *d, struct sandbox *sb, const char *what, char *out, size_t n);

/* guestaudit.c */
/* daemon_audit for a record the sandbox's guest caused: within the sandbox's budget
 * (d->guest_audit), else counted into one folded "sandbox.audit.suppressed" record.
 * `weight`: how many occurrences the event stands for. Steals `details`. */
void daemon_audit_guest(struct daemon *d, struct sandbox *sb, const char *action,
			json_t *details, uint64_t weight);
/* Write the folded record for what is still counted (when the sandbox stops). */
void daemon_audit_guest_flush(struct daemon *d, struct sandbox *sb);

#endif
