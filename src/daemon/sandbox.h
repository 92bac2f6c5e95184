/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.h - a sandbox's lifecycle: create, boot, adopt, stop, remove, pull; its VM's
 * connections (sandbox.c, docs/design.md). The record itself is record.h. */
#ifndef K8_SANDBOX_H
#define K8_SANDBOX_H

#include "daemon/api_route.h"
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"
#include "daemon/agentlink.h"
#include "daemon/daemon.h"
#include "daemon/record.h"
#include "daemon/vm.h"

int sb_load_all(struct daemon *d);
int sb_create(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
	      json_t **out, struct k8_err *err);
json_t *sb_to_json(struct sandbox *sb, bool detail);
json_t *sb_list_json(struct daemon *d);
int sb_remove(struct daemon *d, const char *name, bool wipe, struct k8_err *err);
int sb_pull(struct daemon *d, struct sandbox *sb, const char *image,
	    void (*progress)(void *, json_t *), void *pctx, json_t **out, struct k8_err *err);
/* Pull `ref` from its registry into the image store (KOSA8_OFFLINE, credentials, mirrors
 * and insecure registries from the daemon's environment); audited as image.pull. */
int sb_image_pull(struct daemon *d, const char *ref, void (*progress)(void *, json_t *),
		  void *pctx, json_t **out, struct k8_err *err);
/* The same with "user:password" given by the client (NULL: the stored credentials). */
int sb_image_pull_as(struct daemon *d, const char *ref, const char *basic,
		     void (*progress)(void *, json_t *), void *pctx, json_t **out,
		     struct k8_err *err);
int sb_ensure_running(struct daemon *d, struct sandbox *sb, struct k8_err *err);
void sb_stop_all(struct daemon *d);
/* Free the least recently used image slot of sb whose image the guest agent lets go
 * (no running or created container uses it: the agent unmounts it before the host ever
 * swaps the slot's backing file); with `digest`, only that image's slot. 0, or -ENOSPC
 * with err listing what holds the slots. Serialised with attaches by the sandbox's busy
 * token. */
int sb_image_evict(struct daemon *d, struct sandbox *sb, const char *digest,
		   struct k8_err *err);
int sb_image_for_run(struct daemon *d, struct sandbox *sb, const char *image,
		     struct vm_image *img, json_t **config, struct k8_err *err);
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
/* After QEMU was spawned (a fresh boot, or restored from a checkpoint): reach its
 * monitor and the agent (a restored agent before its vCPUs run, greeted at once),
 * confirm its cgroup, then agree on the protocol version and initialise the guest in one
 * exchange (clock, RNG seed, hostname), then mount its images. On failure the VM is
 * killed and err holds the reason with the guest console's tail; an agent of another
 * protocol gives -EPROTONOSUPPORT (and no console: the guest is fine, it is not ours). */
int sb_connect_vm(struct daemon *d, struct sandbox *sb, pid_t pid, bool restored,
		  struct k8_err *err);
/* sb_connect_vm in two halves, for a rewind through the spare that answers between them
 * (checkpoint.c): _start up to the machine running and the agent's port connected and
 * greeted, _finish the agent's HELLO, version, init and image mounts. Each fails as
 * sb_connect_vm does; `c` carries the phases' times from one to the other. */
struct sb_connect {
	bool restored;
	uint64_t t[7], tc;
};
int sb_connect_vm_start(struct daemon *d, struct sandbox *sb, pid_t pid, bool restored,
			struct sb_connect *c, struct k8_err *err);
int sb_connect_vm_finish(struct daemon *d, struct sandbox *sb, struct sb_connect *c,
			 struct k8_err *err);
/* link_request on the sandbox's agent: takes req. */
int sb_agent_request(struct sandbox *sb, json_t *req, int timeout_ms, json_t **resp,
		     struct stream **stream, struct k8_err *err);
json_t *sb_containers_json(struct sandbox *sb, json_t *agent_list);
/* Take / give back a name in the sandbox table (create and fork). sb_reserve returns a
 * BOOTING sandbox whose busy token and one user reference the caller holds; NULL with
 * err set if the name is invalid or taken. sb_unreserve removes its dir and frees it. */
struct sandbox *sb_reserve(struct daemon *d, const char *name, struct k8_err *err);
/* A sandbox record that is in no table and owns nothing but its memory: the source of a
 * fork from a snapshot pulled into `dir` (store.c; ckpt_fork reads its dir, settings and
 * checkpoint). Free it with sb_detached_free. */
struct sandbox *sb_detached(struct daemon *d, const char *name, const char *dir);
void sb_detached_free(struct sandbox *sb);
void sb_unreserve(struct daemon *d, struct sandbox *sb);
/* Start the QEMU that restores the migration stream `sfd` into sb on top layer `layer`
 * (file `top`); kosa8-fs gets statedir/fs-nodes.json when there is one (a rewind, a
 * fork, a resume from disk). With a memory file `mfd` (> 0; read-only) `sfd` holds the
 * devices' state alone and the guest's RAM maps the file private; the sandbox keeps a
 * descriptor of it (sb_mem_set). */
int sb_spawn_restored(struct daemon *d, struct sandbox *sb, const char *statedir,
		      const char *layer, const char *top, int kfd, int ifd, int sfd, int mfd,
		      bool fork, pid_t *pid, struct k8_err *err);
/* Open a saved machine (a checkpoint's directory, or paused/) for sb_spawn_restored: with
 * `memfile`, dir/devices into *sfd and dir/memory into *mfd (read-only, checked to be
 * memory_mib MiB); else dir/state into *sfd and -1 into *mfd. 0 or -errno with err
 * (nothing left open). */
int sb_saved_open(const char *dir, bool memfile, int memory_mib, int *sfd, int *mfd,
		  struct k8_err *err);
/* The memory file sb's VM maps is `fd`'s (taken; -1: none). sb_mem_release, when that VM
 * is gone (sb_kill_qemu), forgets it and unlinks a fork's SB_FORK_MEMORY. */
void sb_mem_set(struct sandbox *sb, int fd);
void sb_mem_release(struct sandbox *sb);
/* A fork's hard link to its source checkpoint's memory file, which its first VM maps:
 * `rm --wipe` of the source leaves a file that is linked elsewhere. */
#define SB_FORK_MEMORY "fork-memory"
/* Restore a sandbox paused to disk (state SB_PAUSED, its machine in paused/; the pause
 * itself is checkpoint.c's). Caller holds the busy token. `by` names what asked, for the
 * audit record ("resume", "use"). */
int sb_resume_paused(struct daemon *d, struct sandbox *sb, const char *by, struct k8_err *err);
/* In paused/: the pause was handed to a store (store.c, `sandbox pause --to`), and the
 * store's copy is the one that counts: sb_resume_paused refuses (-EBUSY) while it is
 * there, so no use resumes this copy while another host may resume the store's; `sandbox
 * resume` takes it back from the store first (and removes this file). */
#define SB_PAUSED_HANDED "store.json"
/* Does sb's dir hold a complete paused/state? */
bool sb_paused_on_disk(struct sandbox *sb);

/* 0 when no sandbox has the image `digest` attached; else -EBUSY, err naming one that has
 * (`ref` is how the user named the image). images.c asks before it removes one. */
int sb_image_unused(struct daemon *d, const char *digest, const char *ref, struct k8_err *err);

/* API handlers (api_route.h; the table is in api.c) */
int sb_api_list(struct api_call *call);
int sb_api_create(struct api_call *call);
int sb_api_get(struct api_call *call);
int sb_api_rm(struct api_call *call);
int sb_api_pull(struct api_call *call);

#endif
