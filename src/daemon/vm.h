/* SPDX-License-Identifier: Apache-2.0 */
/* vm.h - QEMU: spawn a VM, its disks, the helper programs (vm.c). Mechanism: knows no
 * sandbox; the caller fills a vm_spec. */
#ifndef K8_VM_H
#define K8_VM_H

#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

#include "common/guest.h"
#include "common/util.h"
#include "daemon/cgroup.h"
#include "daemon/qmp.h"

#define K8_MAX_SLOTS GUEST_IMAGE_SLOTS   /* image slots per VM (common/guest.h) */

/* The machine's device set, which its migration stream holds: a VM restored from a saved
 * state starts with the set that saved it (checkpoint meta.json "machine"; the running
 * VM's in sandbox.json, which paused/ uses). docs/design.md "Free page reporting". */
struct vm_machine {
	/* The 8th virtio-mmio transport: a virtio-balloon with free page reporting (the
	 * guest's RNG is then seeded by the host alone, at every init), else virtio-rng. */
	bool balloon;
	/* microvm's CMOS RTC. Without one the guest kernel polls the absent chip for the
	 * whole second mc146818_get_time allows at boot (timed right since the guest knows
	 * its TSC rate: docs/design.md "Guest image"). */
	bool rtc;
};
/* The set of every VM before it was recorded (and of a record that does not say). */
#define VM_MACHINE_V1 ((struct vm_machine){ .balloon = false, .rtc = false })
/* {"balloon":bool,"rtc":bool}, new reference. */
json_t *vm_machine_json(const struct vm_machine *m);
/* Read what vm_machine_json wrote; NULL: VM_MACHINE_V1. -EINVAL when it is not one. */
int vm_machine_from_json(const json_t *j, struct vm_machine *m);

/* An image disk attached to a slot of the VM (the sandbox keeps the list). */
struct vm_image {
	char ref[512];
	char digest[80];
	char disk[4096];
	int slot;
	bool mounted;                   /* mounted in the guest since the last boot */
	int64_t used_ns;                /* last resolved for a run (LRU eviction); not saved */
};

struct vm_spec {
	const char *accel;              /* "kvm" or "tcg" */
	int cpus, memory_mib;
	const char *dir;                /* sandbox dir: disks, logs */
	const char *qmp_path, *agent_path;
	const char *net_path;           /* kosa8-net's frames socket (QEMU connects) */
	const char *fs_path;            /* the kosa8.fs port's socket (QEMU listens) */
	int kernel_fd, initramfs_fd;
	const struct vm_image *images;  /* attached at boot (backing of their slots) */
	int nimages;
	const char *scratch;            /* the writable top layer; NULL: <dir>/scratch.qcow2 */
	int incoming_fd;                /* >= 0: restore from this migration stream */
	bool no_thp;                    /* QEMU without transparent huge pages (a fork:
					 * docs/design.md "Fork") */
	/* Optional: the scratch layer's backing chain, its parent first, the root last
	 * (absolute paths). Set, QEMU opens exactly these instead of following the
	 * paths in the qcow2 headers. */
	const char *const *chain;
	int nchain;
	uid_t jail_uid;                 /* QEMU's uid in its jail (jail.h); 0: unjailed */
	const struct cgroup_info *cg;   /* with cg_name: QEMU enters this cgroup before exec */
	const char *cg_name;
	int tb_mib;                     /* TCG's translation cache (MiB); 0: 128 */
	struct vm_machine machine;      /* for a restore: the state's (vm_machine_from_json) */
	/* A spare (spare.c): its own log instead of <dir>/qemu.log, and its NIC on `net_fd`
	 * (> 0: one end of a socket pair, duplicated for QEMU) instead of net_path. */
	const char *log;
	int net_fd;
	/* A restore of a memory file (memfile.h, docs/design.md "Memory as a file"): > 0,
	 * the read-only descriptor of the file the guest's RAM maps private (copy on write),
	 * and incoming_fd then holds the devices' state alone (vm_save_devices). QEMU names
	 * it /proc/self/fd/VM_RAM_FD and preloads kosa8-qemu-ram.so, which lets QEMU 7.2 map
	 * it from a read-only descriptor (src/preload/qemu_ram.c). */
	int ram_fd;
	/* Optional: called in the daemon once QEMU's process exists, before that process may
	 * exec QEMU (it waits, and exits if the daemon dies first): the caller records the
	 * pid, so no QEMU runs that a later daemon cannot find. */
	void (*spawned)(void *ctx, pid_t pid);
	void *spawned_ctx;
};
/* The memory file's number in a restoring QEMU: after the kernel (3), the initramfs (4)
 * and the incoming stream (5). A daemon that adopts the VM opens it again there. */
#define VM_RAM_FD 6
/* Spawn QEMU detached from the daemon (own session), returns its pid. Every file and
 * socket it uses is opened here and passed as a descriptor (the qmp, agent and fs
 * sockets are bound here, at their paths, and served by QEMU); with jail_uid it runs
 * jailed (jail.h). */
int vm_spawn(const struct vm_spec *spec, pid_t *pid, struct k8_err *err);
/* Prepare a sandbox's disks: scratch (ext4, qcow2, disk_gb) and K8_MAX_SLOTS slots. */
int vm_make_disks(const char *home, const char *dir, int disk_gb, struct k8_err *err);
bool vm_alive(pid_t pid, unsigned long long start);
unsigned long long vm_proc_start(pid_t pid);
/* Save the state of a QEMU's devices, its RAM left out, to `fd` (open for writing), its
 * vCPUs stopped: what a restore loads with ram_fd (QMP xen-save-devices-state, which
 * saves the devices as a migration does, through an fd set: QEMU opens no path). With
 * `release_disks` QEMU then lets go of its disks as the end of a migration does (their
 * file locks too; `cont` takes them back): a checkpoint does that once before it freezes
 * the disk layer, which QEMU then reopens read-only with no lock left behind for a fork
 * to trip on. Twice without a `cont` between aborts QEMU 7.2. */
int vm_save_devices(struct qmp *q, int fd, bool release_disks, struct k8_err *err);
/* Where the guest's RAM starts in QEMU's address space (HMP gpa2hva of address 0). */
int vm_ram_hva(struct qmp *q, uint64_t *hva, struct k8_err *err);
/* Attach image disk `disk` as the backing of slot `slot` of a running VM. */
int vm_attach_image(struct qmp *q, int slot, const char *disk, struct k8_err *err);
/* What QEMU wrote to <dir>/qemu.log after the command line that opens it: the whole
 * rest, or only its first line; false when it wrote nothing. */
bool vm_qemu_said(const char *dir, bool first_line, char *out, size_t n);
/* The host's TSC rate (kHz) that a TCG guest is told at boot, 0 if unknown (vm.c). */
unsigned vm_tsc_khz(void);
/* Run a helper program (no shell); its output's tail goes into err on failure. */
int vm_run_cmd(const char *const argv[], struct k8_err *err);

#endif
