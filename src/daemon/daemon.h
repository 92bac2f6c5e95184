/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.h - kosa8d's context (struct daemon), its settings, log and audit helpers.
 *
 * Every module gets the daemon through a pointer. The modules and the one-way order
 * of their dependencies are in docs/design.md ("The daemon's modules").
 *
 * Threads: libmicrohttpd runs one thread per API connection; each running sandbox has
 * one agent-link reader thread. Shared state is guarded by `daemon.lock` (the sandbox
 * table) and by each sandbox's own `lock` (its fields). Lock order: daemon.lock before
 * sandbox.lock before link.lock; never hold a lock across a blocking call to QEMU or
 * the agent.
 */
#ifndef K8_DAEMON_H
#define K8_DAEMON_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/util.h"
#include "daemon/audit.h"
#include "daemon/cgroup.h"
#include "daemon/guest.h"
#include "daemon/jail.h"
#include "daemon/vm.h"
#include "daemon/log.h"

struct image_store;
struct audit;
struct sandbox;
struct MHD_Daemon;
struct e2b;

#define K8_NAME_MAX 63

struct daemon {
	char home[4096];
	char guest_dir[4096];
	pthread_mutex_t lock;
	struct sandbox *sandboxes;
	struct image_store *images;
	struct audit *audit;
	struct cgroup_info cg;
	struct guest_image guest;
	const char *guest_release;      /* "sha256:...": the guest this build was released with
	                                   (main.c, src/common/guest_digest.h); bundle.c */
	char guest_fetched_from[2100];  /* the URL this daemon fetched its guest from (guestfetch.c) */
	char accel[8];
	char accel_reason[512];
	char accel_opt[8];              /* --accel: auto, kvm, tcg */
	char **allow_mounts;
	int nallow_mounts;
	char *fs_reserve;               /* --fs-reserve (mounts.c), NULL: config or default */
	uint64_t started_mono;
	struct MHD_Daemon *mhd;
	int stop_pipe[2];
	volatile int stopping;
	bool offline;                   /* --offline: never fetch (KOSA8_OFFLINE likewise) */
	bool require_sandbox;           /* --require-sandbox: a sandbox per Docker container */
	bool allow_public_ports;        /* --allow-public-ports (ports.c; or config.json) */
	bool stop_vms;
	struct jail_range jail;          /* config jail_uids: uids for QEMU and sidecars */
	struct rate_limit guest_audit;  /* config.json "audit": the budget of guest records */
	bool jail_off;                   /* QEMU unjailed: config "jail": false, or not root */
	char jail_why[256];              /* the warning, when jail_off */
	int idle_pause_s;                /* config.json "idle_pause" (idle.c), 0: off */
	/* model.c's model_server_addr, set by main.c: the broker's local-model rule (broker.c
	 * sits below model.c). "IP:PORT" of the server named (or the one running) into out;
	 * a negative errno with err when none runs. */
	int (*model_addr)(struct daemon *d, const char *name, char *out, size_t n,
			  struct k8_err *err);
	/* Modules' own state in this daemon, made on first use (daemon_state): the Docker
	 * API's records (docker_ctr.c), its engine (docker_engine.c), its builds' cache
	 * (docker_build.c). Opaque here. */
	struct docker *docker;
	struct docker_engine *docker_engine;
	struct docker_build *docker_build;
	/* The E2B API's state (e2b_box.c's e2b_of), made on first use. Opaque here. */
	struct e2b *e2b;
	/* store.c's store_after_checkpoint, set by main.c: a checkpoint just made is pushed
	 * to the store config.json's "push_checkpoints" names (checkpoint.c sits beside
	 * store.c, which uses it); that store's name, or NULL. */
	const char *(*after_checkpoint)(struct daemon *d, struct sandbox *sb, const char *label);
};

/* The longest idle pause a sandbox or config.json may ask for: 30 days. */
#define K8_IDLE_PAUSE_MAX_S 2592000

/* daemon.c: settings */
/* Daemon settings: the environment variable (comma-separated) wins over config.json's
 * key (an array of strings). NULL-terminated list, or NULL. */
char **daemon_setting_list(const char *env, json_t *cfg, const char *key);
void daemon_setting_list_free(char **list);
/* $KOSA8_HOME/config.json, read afresh each call; {} when absent or unreadable. */
json_t *daemon_config(struct daemon *d);
/* Offline: --offline, KOSA8_OFFLINE (not "0") or config.json "offline": true, read at each
 * call (cfg: the config already read, or NULL). Nothing may open a network connection. */
bool daemon_offline(struct daemon *d, json_t *cfg);

/* TCG's translation cache per VM in MiB: config.json "tcg_tb_mib" (16-1024), else
 * K8_TCG_TB_MIB_DEFAULT; read at each VM start (cfg: the config already read, or NULL). */
#define K8_TCG_TB_MIB_DEFAULT 128
int daemon_tcg_tb_mib(struct daemon *d, json_t *cfg);
/* The machine a VM booted now gets: the free-page-reporting balloon unless config.json
 * "free_page_reporting" is false, and the CMOS RTC unless "rtc" is false; read at each
 * boot (cfg as above). */
struct vm_machine daemon_vm_machine(struct daemon *d, json_t *cfg);

/* daemon.c: a module's state in this daemon, made on first use. *slot (a field of d) is
 * read once made; the first caller makes it with make(d) under d->lock, which make must
 * not take. Returns *slot. Never freed (it lives as long as the daemon). */
void *daemon_state(struct daemon *d, void **slot, void *(*make)(struct daemon *d));

/* How a checkpoint or a pause to disk saves a VM's RAM: config.json "checkpoint_memory",
 * "file" (true, the default: a memory file that restores map copy-on-write, docs/design.md
 * "Memory as a file") or "stream" (false: QEMU's migration stream into one state file,
 * as before); read at each save (cfg as above). A restore follows what was saved. */
bool daemon_memfile(struct daemon *d, json_t *cfg);

/* daemon.c: the audit helper; never fails the caller (an audit failure is logged) */
void daemon_audit(struct daemon *d, const char *action, const char *sandbox, json_t *details);
/* The audit settings of config.json (segment size, the guest budget). */
void daemon_audit_settings(struct daemon *d);

#endif
