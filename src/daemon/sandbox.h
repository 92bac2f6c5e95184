/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.h - a sandbox: its record, its lifecycle (create, boot, stop, remove), its VM's
 * connections (sandbox.c, docs/design.md). */
#ifndef K8_SANDBOX_H
#define K8_SANDBOX_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"
#include "daemon/agentlink.h"
#include "daemon/audit.h"
#include "daemon/daemon.h"
#include "daemon/mounts.h"
#include "daemon/qmp.h"
#include "daemon/sidecar.h"
#include "daemon/vm.h"

/* SB_PAUSED: paused to disk, no QEMU (paused/state holds the machine, checkpoint.c);
 * a sandbox paused in memory is SB_RUNNING with `paused` set. */
enum sb_state { SB_STOPPED, SB_BOOTING, SB_RUNNING, SB_FAILED, SB_REMOVING, SB_PAUSED };

struct sandbox {
	struct sandbox *next;
	struct daemon *d;               /* the daemon that owns it (event callbacks reach it) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int busy;                       /* lifecycle operation in progress (boot, rm) */
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
	struct qmp qmp;
	struct agentlink link;
	uint64_t boot_ms;
	char disk[256];                 /* current writable top layer (file name in dir) */
	bool paused;                    /* vCPUs stopped by `sandbox pause` */
	bool forked;                    /* made by `sandbox fork`: explicit backing chain */
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
	/* host identities (jail.h): block in the daemon's jail_uids range, -1 until claimed */
	int jail_index;
};

int sb_load_all(struct daemon *d);
int sb_create(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
	      json_t **out, struct k8_err *err);
struct sandbox *sb_get(struct daemon *d, const char *name, struct k8_err *err);  /* users++ */
void sb_put(struct daemon *d, struct sandbox *sb);                               /* users-- */
json_t *sb_to_json(struct sandbox *sb, bool detail);
json_t *sb_list_json(struct daemon *d);
int sb_remove(struct daemon *d, const char *name, bool wipe, struct k8_err *err);
int sb_pull(struct daemon *d, struct sandbox *sb, const char *image,
	    void (*progress)(void *, json_t *), void *pctx, json_t **out, struct k8_err *err);
/* Pull `ref` from its registry into the image store (KOSA8_OFFLINE, credentials, mirrors
 * and insecure registries from the daemon's environment); audited as image.pull. */
int sb_image_pull(struct daemon *d, const char *ref, void (*progress)(void *, json_t *),
		  void *pctx, json_t **out, struct k8_err *err);
int sb_ensure_running(struct daemon *d, struct sandbox *sb, struct k8_err *err);
void sb_stop_all(struct daemon *d);
int sb_image_for_run(struct daemon *d, struct sandbox *sb, const char *image,
		     struct vm_image *img, json_t **config, struct k8_err *err);
void sb_busy_enter(struct sandbox *sb);
void sb_busy_leave(struct sandbox *sb);
int sb_save(struct sandbox *sb);
/* The images of a sandbox as kept in sandbox.json and a checkpoint's meta.json: the one
 * writer and the one reader (entries that do not check out are skipped). */
json_t *sb_images_json(const struct vm_image *imgs, int n);
int sb_images_from_json(json_t *arr, struct vm_image out[K8_MAX_SLOTS]);
/* Stop QEMU and the sandbox's sidecars (kosa8-net, kosa8-fs). Caller holds sb->lock. */
void sb_kill_vm(struct daemon *d, struct sandbox *sb);
/* Stop QEMU only (a rewind keeps the sidecars: counts, pins and file handles stay). */
void sb_kill_qemu(struct daemon *d, struct sandbox *sb);
/* Every socket of a sandbox's VM, under $KOSA8_HOME/run/<id>.* */
struct sb_socks {
	char qmp[4200], agent[4200], net[4200], fs[4200];
};
/* Before QEMU starts (boot, rewind, fork): bring the sidecars up, clear stale sockets
 * and fill the common part of the VM spec (accel, size, dir, sockets). */
int sb_prepare_spawn(struct daemon *d, struct sandbox *sb, struct sb_socks *k,
		     struct vm_spec *spec, struct k8_err *err);
void sb_sock_path(struct daemon *d, struct sandbox *sb, const char *what, char *out, size_t n);
int sb_connect_vm(struct daemon *d, struct sandbox *sb, pid_t pid, bool restored,
		  struct k8_err *err);
int sb_agent_request(struct sandbox *sb, json_t *req, int timeout_ms, json_t **resp,
		     struct stream **stream, struct k8_err *err);
bool sb_name_valid(const char *name);
json_t *sb_containers_json(struct sandbox *sb, json_t *agent_list);
/* Take / give back a name in the sandbox table (create and fork). sb_reserve returns a
 * BOOTING sandbox whose busy token and one user reference the caller holds; NULL with
 * err set if the name is invalid or taken. sb_unreserve removes its dir and frees it. */
struct sandbox *sb_reserve(struct daemon *d, const char *name, struct k8_err *err);
void sb_unreserve(struct daemon *d, struct sandbox *sb);
/* Start the QEMU that restores the migration stream `sfd` into sb on top layer `layer`
 * (file `top`); kosa8-fs gets statedir/fs-nodes.json when there is one (a rewind, a
 * fork, a resume from disk). */
int sb_spawn_restored(struct daemon *d, struct sandbox *sb, const char *statedir,
		      const char *layer, const char *top, int kfd, int ifd, int sfd, pid_t *pid,
		      struct k8_err *err);
/* Restore a sandbox paused to disk (state SB_PAUSED, its machine in paused/; the pause
 * itself is checkpoint.c's). Caller holds the busy token. `by` names what asked, for the
 * audit record ("resume", "use"). */
int sb_resume_paused(struct daemon *d, struct sandbox *sb, const char *by, struct k8_err *err);
/* Does sb's dir hold a complete paused/state? */
bool sb_paused_on_disk(struct sandbox *sb);

/* guestaudit.c */
/* daemon_audit for a record the sandbox's guest caused: within the sandbox's budget
 * (d->guest_audit), else counted into one folded "sandbox.audit.suppressed" record.
 * `weight`: how many occurrences the event stands for. Steals `details`. */
void daemon_audit_guest(struct daemon *d, struct sandbox *sb, const char *action,
			json_t *details, uint64_t weight);
/* Write the folded record for what is still counted (when the sandbox stops). */
void daemon_audit_guest_flush(struct daemon *d, struct sandbox *sb);

#endif
