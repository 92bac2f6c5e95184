/* SPDX-License-Identifier: Apache-2.0 */
/* boot.h - a sandbox's VM: spawn (a boot, a restore), connect, adopt, kill (boot.c,
 * docs/design.md "The daemon's modules"). Below sandbox.h and spare.h, which both use it. */
#ifndef K8_BOOT_H
#define K8_BOOT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"
#include "daemon/daemon.h"
#include "daemon/record.h"
#include "daemon/vm.h"

/* Boot the VM of a sandbox: its sidecars, QEMU, the agent connected and initialised.
 * Caller holds sb->busy (not the lock). */
int sb_boot(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* Reconnect to a VM that outlived the previous daemon (its QMP, its agent, its
 * sidecars). */
int sb_adopt(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* Set the guest's clock to the host's, read now (an init with time only): after time
 * went on outside it (an in-memory resume), or after an init the guest took late. */
void sb_guest_clock(struct sandbox *sb);
/* Mount every attached image the guest has not mounted yet (image.mount). */
int sb_mount_images(struct sandbox *sb, struct k8_err *err);
/* Stop QEMU and the sandbox's sidecars (kosa8-net, kosa8-fs). Caller holds sb->lock. */
void sb_kill_vm(struct daemon *d, struct sandbox *sb);
/* Stop QEMU only (a rewind keeps the sidecars: counts, pins and file handles stay). */
void sb_kill_qemu(struct daemon *d, struct sandbox *sb);
/* sb_kill_qemu for a VM whose state is discarded (a rewind): SIGKILL at once, no `quit`
 * and no wait for QEMU to end by itself (polled every 20 ms: 21 ms of each cold rewind). */
void sb_discard_qemu(struct daemon *d, struct sandbox *sb);
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
/* sb->connecting on or off: while on, every request to the agent waits
 * (sb_wait_connected); off wakes the waiters. */
void sb_connecting(struct sandbox *sb, bool on);
/* A restore that answers once the machine runs (a rewind, a resume from disk): the rest,
 * sb_connect_vm_finish, on a thread of its own holding the caller's busy token, while
 * sb->connecting (set by the caller before sb_connect_vm_start) makes every request to the
 * agent wait for it. Failed: the VM is gone, the sandbox failed with "<what> failed:
 * <why>", and `fail_action` audited with fail_detail plus "error" and "answered": true.
 * Done: then(b) on that thread (may be NULL), still holding the token. */
struct sb_behind {
	struct daemon *d;
	struct sandbox *sb;
	struct sb_connect conn;
	char what[96];                  /* "rewind to c0", "resume" */
	char label[64];                 /* for then() */
	const char *fail_action;
	json_t *fail_detail;            /* owned */
	void (*then)(struct sb_behind *b);
	uint64_t answered;              /* now_mono_ns() at the answer */
};
/* Takes b (freed at the end) and the busy token the caller holds. */
void sb_connect_behind(struct sb_behind *b);
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

#endif
