/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.h - kosa8d's shared types: the daemon context, sandboxes, the agent link.
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
#include <sys/types.h>

#include "common/proto.h"
#include "common/util.h"
#include "daemon/jail.h"
#include "daemon/audit.h"

struct image_store;
struct audit;
struct MHD_Daemon;

#define K8_MAX_SLOTS 4          /* image slots per VM: microvm has 8 virtio-mmio transports */
#define K8_NAME_MAX 63

/* ---- host limits (cgroup.c) ---- */
struct cgroup_info {
	int version;            /* 2, 1, or 0 when neither is usable */
	char note[256];         /* human-readable: what is used, or why nothing is */
};
int cgroup_probe(struct cgroup_info *ci);
/* Put `pid` into a cgroup for sandbox `name` with cpu/memory/pids limits. On hosts
 * without usable cgroups returns -ENOTSUP and the note says why. */
int cgroup_apply(const struct cgroup_info *ci, const char *name, pid_t pid, int cpus,
		 uint64_t mem_bytes, char *desc, size_t desclen);
/* The same without a pid: create and limit the cgroups and open their cgroup.procs
 * files (up to 3, O_CLOEXEC) for a child to write "0" to before it execs. */
int cgroup_prepare(const struct cgroup_info *ci, const char *name, int cpus, uint64_t mem_bytes,
		   int fds[3], int *nfds, char *desc, size_t desclen);
void cgroup_remove(const struct cgroup_info *ci, const char *name);
/* The sandbox's cgroup.procs files (made if missing) a sidecar joins; how many (<= max). */
int cgroup_procs_paths(const struct cgroup_info *ci, const char *name, char out[][512], int max);

/* ---- QMP client (qmp.c) ---- */
struct qmp {
	int fd;
	pthread_mutex_t lock;
	char *buf;              /* line buffer, bounded */
	size_t have;
};
int qmp_connect(struct qmp *q, const char *path, int timeout_ms, struct k8_err *err);
void qmp_close(struct qmp *q);
/* Run a command; *ret (may be NULL) receives the "return" value. Events are skipped.
 * Returns -EIO with the QMP error's desc in err. */
int qmp_exec(struct qmp *q, const char *cmd, json_t *args /* stolen, may be NULL */,
	     json_t **ret, int timeout_ms, struct k8_err *err);
/* The same, passing `fd` to QEMU with the command (for getfd). */
int qmp_exec_fd(struct qmp *q, const char *cmd, json_t *args, int fd, json_t **ret,
		int timeout_ms, struct k8_err *err);

/* ---- agent link (agentlink.c) ---- */
struct stream;

struct agentlink {
	int fd;                         /* connected agent.sock, -1 when down */
	pthread_t reader;
	bool reader_running;
	pthread_mutex_t lock;           /* guards everything below */
	pthread_mutex_t wlock;          /* serializes writes to fd */
	pthread_cond_t cond;
	bool hello;                     /* a HELLO arrived on this connection */
	json_t *hello_info;
	bool broken;                    /* protocol violation or EOF: no more frames */
	char broken_why[256];
	uint32_t next_id;
	struct pending *pending;        /* outstanding REQs waiting for RESP */
	struct stream *streams;         /* open exec streams */
	uint64_t dropped_frames;        /* frames for unknown ids, counted not trusted */
	void (*on_event)(void *ctx, json_t *ev);
	void *ctx;
};

struct stream {
	struct stream *next;
	uint32_t id;
	int efd;                        /* eventfd: readable when there is something to do */
	/* output from the agent, queued for the client connection */
	struct sframe *head, *tail;
	size_t queued;                  /* output bytes queued, <= PROTO_WINDOW + slack */
	uint32_t stdin_credit;          /* stdin bytes we may still send */
	bool exited;
	json_t *exit_info;
	bool closed_by_agent;
};

struct sframe {
	struct sframe *next;
	uint16_t type, flags;
	size_t len;
	unsigned char data[];
};

int link_connect(struct agentlink *l, const char *path, void (*on_event)(void *, json_t *),
		 void *ctx, struct k8_err *err);
void link_close(struct agentlink *l);
int link_wait_hello(struct agentlink *l, int timeout_ms, struct k8_err *err);
/* Send a REQ and wait for its RESP. *resp gets the whole RESP object (caller decrefs).
 * An "ok":false answer becomes an error with the agent's message and errno. If `stream`
 * is non-NULL a stream with the REQ's id is opened first (so no output is lost) and
 * returned; on failure it is closed. */
int link_request(struct agentlink *l, json_t *req, int timeout_ms,
		 json_t **resp, struct stream **stream, struct k8_err *err);
int link_send(struct agentlink *l, uint16_t type, uint16_t flags, uint32_t id,
	      const void *data, size_t len);
/* Take the next output frame of a stream (NULL when none); the caller frees it and then
 * calls link_stream_consumed() to return the credit. */
struct sframe *link_stream_pop(struct agentlink *l, struct stream *s);
void link_stream_consumed(struct agentlink *l, struct stream *s, size_t n);
void link_stream_close(struct agentlink *l, struct stream *s);

/* ---- sidecar processes (sidecar.c): kosa8-net and kosa8-fs ----
 * One per sandbox each, started by the daemon in their own session so that they outlive
 * a daemon restart as QEMU does. A sidecar writes "ready\n" on stdout once its sockets
 * exist; the daemon then talks to it over a unix socket, one JSON object per line:
 * requests carry an "id", replies echo it, lines without one are events. */
struct sidecar {
	const char *kind;               /* "kosa8-net" or "kosa8-fs" */
	pid_t pid;
	unsigned long long pid_start;
	bool child;                     /* spawned by this daemon (we reap it) */
	int fd;                         /* control connection, -1 when none */
	pthread_t reader;
	bool reader_running;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	long long next_id;
	json_t *replies;                /* "id" -> reply, until the requester takes it */
	bool down;                      /* the connection broke (the process died) */
	bool closing;                   /* we are closing it: no "down" event */
	char why[256];
	void (*on_event)(void *ctx, json_t *ev);   /* events, and {"event":"down"} */
	void *ctx;
	uint64_t restart_ns;            /* last restart after a death (backoff, mounts.c) */
	unsigned restarts;              /* quick deaths in a row */
};
void sidecar_init(struct sidecar *s, const char *kind);
/* Start argv[0] (an absolute path) in its own session, stderr appended to `log`, and wait
 * for its "ready" line. */
int sidecar_spawn(struct sidecar *s, const char *const argv[], const char *log,
		  const int *fds, int nfds, struct k8_err *err);
/* Connect to its control socket (replacing an earlier connection). */
int sidecar_connect(struct sidecar *s, const char *path, void (*on_event)(void *, json_t *),
		    void *ctx, struct k8_err *err);
/* Spawn and connect; a sidecar that cannot be reached is stopped again. */
int sidecar_start(struct sidecar *s, const char *const argv[], const char *log,
		  const char *ctl, void (*on_event)(void *, json_t *), void *ctx,
		  struct k8_err *err);
/* The same, with fds[i] as the child's fd 3 + i. */
int sidecar_start_fds(struct sidecar *s, const char *const argv[], const char *log,
		      const int *fds, int nfds, const char *ctl,
		      void (*on_event)(void *, json_t *), void *ctx, struct k8_err *err);
bool sidecar_connected(const struct sidecar *s);
/* Send req (stolen; an "id" is added) and wait for the reply; "ok":false becomes an error
 * carrying the sidecar's message. */
int sidecar_request(struct sidecar *s, json_t *req, int timeout_ms, json_t **reply,
		    struct k8_err *err);
/* The same, passing `fd` along with the request (SCM_RIGHTS; -1: none). */
int sidecar_request_fd(struct sidecar *s, json_t *req, int fd, int timeout_ms, json_t **reply,
		       struct k8_err *err);
bool sidecar_alive(struct sidecar *s);
/* Close the control connection (the process keeps running). */
void sidecar_disconnect(struct sidecar *s);
/* Disconnect and end the process: SIGTERM, then SIGKILL after a second. */
void sidecar_stop(struct sidecar *s);
/* Path of a program installed next to kosa8d (build/bin/kosa8-net). */
char *sidecar_exe(const char *name);

/* ---- sandboxes (sandbox.c) ---- */
enum sb_state { SB_STOPPED, SB_BOOTING, SB_RUNNING, SB_FAILED, SB_REMOVING };

struct sb_image {
	char ref[512];
	char digest[80];
	char disk[4096];
	int slot;
	bool mounted;                   /* mounted in the guest since the last boot */
};

#define K8_MAX_MOUNTS 8

struct sb_mount {
	char host[4096];                /* realpath of an existing directory */
	char guest[256];                /* absolute, normalised */
	bool ro;
	/* the folder pinned at create (mounts.c): its identity, checked at every start */
	bool pinned;
	unsigned long long dev, ino;
	long long btime;                /* birth time (ns), 0 if the file system has none */
};

struct sandbox {
	struct sandbox *next;
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
	struct sb_image images[K8_MAX_SLOTS];
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
	struct audit_budget audit_budget;
	/* shared folders (mounts.c) */
	struct sb_mount mounts[K8_MAX_MOUNTS];
	int nmounts;
	struct sidecar fs;
	/* host identities (jail.h): block in the daemon's jail_uids range, -1 until claimed */
	int jail_index;
};

/* ---- guest image (guest.c) ---- */
struct guest_image {
	char dir[4096];
	char kernel[4096], initramfs[4096];
	char kernel_sha[65], initramfs_sha[65];
	char source[128];
};
int guest_find(struct guest_image *g, struct k8_err *err);
/* As guest_find, but first $KOSA8_HOME/guest (where `kosa8 bundle import` installs one). */
int guest_find_home(struct guest_image *g, const char *home, struct k8_err *err);
/* Open and verify both files against the manifest; on success *kfd and *ifd are open fds of
 * exactly the bytes that were checked (QEMU is given /proc/self/fd/N, so a file swapped
 * after the check is never booted). */
int guest_verify_open(const struct guest_image *g, int *kfd, int *ifd, struct k8_err *err);

/* ---- VM (vm.c) ---- */
struct vm_spec {
	const char *accel;              /* "kvm" or "tcg" */
	int cpus, memory_mib;
	const char *dir;                /* sandbox dir: disks, logs */
	const char *qmp_path, *agent_path;
	const char *net_path;           /* kosa8-net's frames socket (QEMU connects) */
	const char *fs_path;            /* the kosa8.fs port's socket (QEMU listens) */
	int kernel_fd, initramfs_fd;
	const struct sb_image *images;  /* attached at boot (backing of their slots) */
	int nimages;
	const char *scratch;            /* the writable top layer; NULL: <dir>/scratch.qcow2 */
	int incoming_fd;                /* >= 0: restore from this migration stream */
	/* Optional: the scratch layer's backing chain, its parent first, the root last
	 * (absolute paths). Set, QEMU opens exactly these instead of following the
	 * paths in the qcow2 headers. */
	const char *const *chain;
	int nchain;
	uid_t jail_uid;                 /* QEMU's uid in its jail (jail.h); 0: unjailed */
	const struct cgroup_info *cg;   /* with cg_name: QEMU enters this cgroup before exec */
	const char *cg_name;
};
/* Spawn QEMU detached from the daemon (own session), returns its pid. Every file and
 * socket it uses is opened here and passed as a descriptor (the qmp, agent and fs
 * sockets are bound here, at their paths, and served by QEMU); with jail_uid it runs
 * jailed (jail.h). */
int vm_spawn(const struct vm_spec *spec, pid_t *pid, struct k8_err *err);
/* Prepare a sandbox's disks: scratch (ext4, qcow2, disk_gb) and K8_MAX_SLOTS slots. */
int vm_make_disks(const char *home, const char *dir, int disk_gb, struct k8_err *err);
bool vm_alive(pid_t pid, unsigned long long start);
unsigned long long vm_proc_start(pid_t pid);
/* Attach image disk `disk` as the backing of slot `slot` of a running VM. */
int vm_attach_image(struct qmp *q, int slot, const char *disk, struct k8_err *err);
/* What QEMU wrote to <dir>/qemu.log after the command line that opens it: the whole
 * rest, or only its first line; false when it wrote nothing. */
bool vm_qemu_said(const char *dir, bool first_line, char *out, size_t n);
/* Run a helper program (no shell); its output's tail goes into err on failure. */
int vm_run_cmd(const char *const argv[], struct k8_err *err);

/* ---- the daemon ---- */
struct daemon {
	char home[4096];
	char guest_dir[4096];
	pthread_mutex_t lock;
	struct sandbox *sandboxes;
	struct image_store *images;
	struct audit *audit;
	struct cgroup_info cg;
	struct guest_image guest;
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
	bool stop_vms;
	struct jail_range jail;          /* config jail_uids: uids for QEMU and sidecars */
	struct audit_rate guest_audit;  /* config.json "audit": the budget of guest records */
	bool jail_off;                   /* QEMU unjailed: config "jail": false, or not root */
	char jail_why[256];              /* the warning, when jail_off */
};

extern struct daemon *g_daemon_for_signals;

/* model.c: the model store ($KOSA8_HOME/models) and kosa8-model servers (docs/model.md) */
int model_pull(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
	       json_t **out, struct k8_err *err);
int model_import(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
		 json_t **out, struct k8_err *err);
json_t *model_list_json(struct daemon *d);
int model_remove(struct daemon *d, const char *name, struct k8_err *err);
int model_serve(struct daemon *d, const char *name, json_t *body, json_t **out, struct k8_err *err);
json_t *model_ps_json(struct daemon *d);
int model_stop(struct daemon *d, const char *name, struct k8_err *err);
void model_stop_all(struct daemon *d);
/* bundle.c: kosa8 bundle export / import */
int bundle_export(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
		  json_t **out, struct k8_err *err);
int bundle_import(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
		  json_t **out, struct k8_err *err);

/* sandbox.c */
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
		     struct sb_image *img, json_t **config, struct k8_err *err);
void sb_busy_enter(struct sandbox *sb);
void sb_busy_leave(struct sandbox *sb);
int sb_save(struct sandbox *sb);
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
/* Daemon settings: the environment variable (comma-separated) wins over config.json's
 * key (an array of strings). NULL-terminated list, or NULL. */
char **sb_setting_list(const char *env, json_t *cfg, const char *key);
void sb_setting_list_free(char **list);
json_t *sb_daemon_config(struct daemon *d);
int sb_connect_vm(struct daemon *d, struct sandbox *sb, pid_t pid, bool restored,
		  struct k8_err *err);
int sb_agent_request(struct sandbox *sb, json_t *req, int timeout_ms, json_t **resp,
		     struct stream **stream, struct k8_err *err);
bool sb_name_valid(const char *name);
json_t *sb_containers_json(struct sandbox *sb, json_t *agent_list);
/* 0 when no sandbox has the image `digest` attached; else -EBUSY, err naming one that has
 * (`ref` is how the user named the image). */
int sb_image_unused(struct daemon *d, const char *digest, const char *ref, struct k8_err *err);
/* Take / give back a name in the sandbox table (create and fork). sb_reserve returns a
 * BOOTING sandbox whose busy token and one user reference the caller holds; NULL with
 * err set if the name is invalid or taken. sb_unreserve removes its dir and frees it. */
struct sandbox *sb_reserve(struct daemon *d, const char *name, struct k8_err *err);
void sb_unreserve(struct daemon *d, struct sandbox *sb);

/* egress.c: the network policy of a sandbox and its kosa8-net */
/* Mode and rules for a new sandbox from a create body ("egress", "egress_allow"). */
int egress_from_body(json_t *body, char *mode, size_t modelen, json_t **rules,
		     struct k8_err *err);
int net_up(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* After a daemon restart: reconnect to a kosa8-net that is still running. */
void net_adopt(struct daemon *d, struct sandbox *sb);
json_t *egress_summary(struct sandbox *sb);   /* {"mode","rules","network"}; caller locks */
int egress_status(struct daemon *d, struct sandbox *sb, json_t **out, struct k8_err *err);
int egress_update(struct daemon *d, struct sandbox *sb, json_t *body, json_t **out,
		  struct k8_err *err);
/* The guest's network settings for the agent's init. */
json_t *net_guest_config(void);

/* mounts.c: shared folders and their kosa8-fs */
int mounts_from_body(struct daemon *d, json_t *list, struct sb_mount *out, int *n,
		     struct k8_err *err);
/* Check existing mounts again (a fork, or a boot after the daemon's roots changed). */
int mounts_recheck(struct daemon *d, const struct sb_mount *m, int n, struct k8_err *err);
int fs_up(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* Connect to QEMU's kosa8.fs chardev and hand the fd to kosa8-fs (after QEMU starts). */
int fs_attach_port(struct daemon *d, struct sandbox *sb, struct k8_err *err);
/* Default host free-space reserve for writes through shares (docs/shared-folders.md). */
#define K8FS_DEFAULT_RESERVE "1G,5%"
void fs_adopt(struct daemon *d, struct sandbox *sb);
json_t *mounts_json(const struct sandbox *sb, bool for_guest);
/* kosa8-fs's node and handle tables, saved with a checkpoint and loaded at rewind/fork. */
int fs_save(struct sandbox *sb, const char *path, struct k8_err *err);
int fs_load(struct sandbox *sb, const char *path, struct k8_err *err);

/* checkpoint.c: memory, devices and disk of a running sandbox, and back */
#define K8_MAX_CHECKPOINTS 10
int ckpt_create(struct daemon *d, struct sandbox *sb, const char *label, json_t **out,
		struct k8_err *err);
int ckpt_list(struct daemon *d, struct sandbox *sb, json_t **out, struct k8_err *err);
int ckpt_remove(struct daemon *d, struct sandbox *sb, const char *label, struct k8_err *err);
int ckpt_rewind(struct daemon *d, struct sandbox *sb, const char *label, json_t **out,
		struct k8_err *err);
int sb_pause(struct daemon *d, struct sandbox *sb, bool pause, struct k8_err *err);
/* Record in layers.json that disk layer `child` sits on `parent` (file names in sb->dir). */
void ckpt_layer_set(struct sandbox *sb, const char *child, const char *parent);
/* A new sandbox `name` started from checkpoint `label` of `src`: its disk layers are hard
 * links to the checkpoint's, so it costs only what it writes. */
int ckpt_fork(struct daemon *d, struct sandbox *src, const char *label, const char *name,
	      json_t **out, struct k8_err *err);
/* The backing chain under `layer` (NULL: the current top) as absolute paths, its parent
 * first, from layers.json; returns how many (0: none, *out NULL). */
int ckpt_chain(struct sandbox *sb, const char *layer, char ***out);
void ckpt_chain_free(char **chain, int n);

/* exec.c: bridges an upgraded API connection and an agent stream */
struct exec_ctx;
/* On failure *exit_code is the exit status the CLI should use (127 command not found,
 * 126 not executable, 125 anything else). */
int exec_prepare(struct daemon *d, const char *sbname, const char *container, json_t *body,
		 bool is_run, struct exec_ctx **out, int *exit_code, struct k8_err *err);
json_t *exec_detached(struct daemon *d, const char *sbname, json_t *body, int *exit_code,
		      struct k8_err *err);
void exec_bridge(struct exec_ctx *x, int sock, const char *extra, size_t extra_len);
void exec_free(struct exec_ctx *x);

/* api.c */
int api_start(struct daemon *d, int listen_fd, struct k8_err *err);
void api_stop(struct daemon *d);

/* accel.c */
int accel_choose(struct daemon *d, struct k8_err *err);
/* Said wherever the accelerator is TCG (daemon start and status, sandbox create). */
#define ACCEL_TCG_NOTE "TCG is not a security boundary (QEMU's own security policy); what " \
	"holds then is QEMU's jail: its own uid, no capabilities, seccomp, a root with no " \
	"host files (docs/threat-model.md)"
#define JAIL_OFF_NOTE "QEMU runs NOT jailed, as root (config.json \"jail\": false); for " \
	"benchmarks only: a guest that escapes QEMU owns the host"
#define JAIL_NOROOT_NOTE "QEMU runs NOT jailed: kosa8d is not root, and only root can " \
	"give QEMU a uid of its own, namespaces and an empty root; a guest that escapes " \
	"QEMU has this user's files"

/* audit helper: never fails the caller (an audit failure is logged) */
void daemon_audit(struct daemon *d, const char *action, const char *sandbox, json_t *details);
/* daemon_audit for a record the sandbox's guest caused: within the sandbox's budget
 * (d->guest_audit), else counted into one folded "sandbox.audit.suppressed" record.
 * `weight`: how many occurrences the event stands for. Steals `details`. */
void daemon_audit_guest(struct daemon *d, struct sandbox *sb, const char *action,
			json_t *details, uint64_t weight);
/* Write the folded record for what is still counted (when the sandbox stops). */
void daemon_audit_guest_flush(struct daemon *d, struct sandbox *sb);
/* The audit settings of config.json (segment size, the guest budget). */
void daemon_audit_settings(struct daemon *d);
void daemon_log(const char *fmt, ...) K8_PRINTF(1, 2);

#endif
