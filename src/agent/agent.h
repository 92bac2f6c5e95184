/* SPDX-License-Identifier: Apache-2.0 */
/* agent.h - kosa8-agent (guest PID 1): the one context struct and each module's interface.
 *
 * Modules (one concern each):
 *   main.c    PID 1 duties (boot mounts, reaping, never exiting) and the epoll loop
 *   chan.c    the virtio-serial control channel: framing, outgoing queue, (re)connects
 *   req.c     REQ parsing and validation, one handler per op
 *   ctr.c     containers: create, stop, remove, list, limit events
 *   proc.c    processes and their streams: pipes, flow-control windows, stdin, EXIT
 *   launch.c  what runs between fork() and execve(): namespaces, rootfs, user, exec
 *   mount.c   guest mounts: boot file systems, disks by serial, image slots, rootfs
 *   cgroup.c  cgroup v2: the kosa8 subtree, one cgroup per container, events
 *   fs.c      shared folders: the FUSE shuttle to the "kosa8.fs" port (threads), the
 *             folders' mounts in the VM and in each container
 *   net.c     eth0 (address, routes), /etc/resolv.conf, containers' resolv.conf/hosts
 *   sec.c     the containers' seccomp filter (Docker's default profile's intent)
 *   stats.c   a container's usage and process table for the host (Docker's stats, top)
 *
 * Errors: functions return 0 (or a count) or a negative errno; those that answer a
 * request take a struct k8_err * for the message sent back to the host.
 */
#ifndef K8_AGENT_H
#define K8_AGENT_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/guest.h"
#include "common/proto.h"
#include "common/util.h"
#include "common/version.h"

#define AGENT_VERSION KOSA8_VERSION

/* The protocol versions this agent speaks (docs/protocol.md, "Versions"). A build may
 * narrow them (`make proto-variants`: guests whose agent speaks another version, for
 * the tests of the handshake); an agent whose maximum is 1 behaves exactly as the
 * agents built before the handshake existed. */
#ifndef AGENT_PROTO_MIN
#define AGENT_PROTO_MIN PROTO_VERSION_MIN
#endif
#ifndef AGENT_PROTO_MAX
#define AGENT_PROTO_MAX PROTO_VERSION_MAX
#endif

/* Output is read from pipes in pieces that, with the 12-byte header, fit one 32 KiB
 * virtio-serial write (the guest driver splits larger writes). */
#define AGENT_OUT_CHUNK (32768u - PROTO_HDR_LEN)
#define AGENT_LOG_CAP (16ull << 20)        /* detached container log, then dropped */
#define AGENT_EXIT_GRACE_MS 250            /* output EOF wait after an exec'd process exits */
#define AGENT_DEF_PIDS 1024
#define AGENT_DEF_RESERVE_MIB 64
#define AGENT_STOP_TIMEOUT_MS 10000
#define AGENT_SCRATCH "/scratch"
#define AGENT_CTR_DIR "/scratch/containers"
#define AGENT_TRASH_DIR "/scratch/.trash"
#define AGENT_IMAGES_DIR "/images"
/* The VM's generation (the init's "generation", new on every boot, rewind, fork and
 * resume from disk): 32 hex digits and a newline, rewritten in place so that every
 * container's read-only bind of it (/dev/kosa8/generation, mount.c) shows the new one. */
#define AGENT_GEN_FILE "/run/kosa8-generation"
#define AGENT_CG_ROOT "/sys/fs/cgroup"
#define AGENT_CG_DIR "/sys/fs/cgroup/kosa8"
#define AGENT_SLOTS GUEST_MMIO_TRANSPORTS   /* slot indexes accepted (common/guest.h) */

/* Limits on what one request may carry (defence in depth: the host is trusted, but a
 * bug there must not become a crash here). */
#define REQ_MAX_ARGV 4096
#define REQ_MAX_STRV_BYTES (1u << 20)
#define REQ_MAX_PATH 4096

struct agent;

/* What an epoll registration points at: every fd in the loop is embedded in one. */
enum watch_kind { W_CHAN, W_SIGNAL, W_OUT, W_ERR, W_IN, W_CGEV, W_FS };

struct watch {
	enum watch_kind kind;
	int fd;            /* -1 once closed */
	int registered;    /* in the epoll set */
	uint32_t events;   /* interest while registered */
	void *owner;       /* struct proc / struct ctr / NULL */
};

/* ---- channel (chan.c) ---- */
struct outbuf {
	struct outbuf *next;
	size_t len, off;
	unsigned char data[];
};

#define CHAN_HIGH (4u << 20)  /* queued bytes: stop reading pipes and the port above this */
#define CHAN_LOW (1u << 20)   /* ... and resume below this */

struct chan {
	struct watch w;
	char dev[64];
	int connected;     /* host end open (as the guest driver reports it) */
	int broken;        /* a bad header arrived: input is dropped until the next connect */
	int congested;
	int in_pending;    /* the port may hold input we did not read (congested) */
	struct proto_reader rd;
	struct outbuf *head, *tail;
	size_t queued;
	uint64_t connects;
};

/* ---- processes (proc.c) ---- */
struct proc {
	struct proc *next;
	pid_t pid;
	uint32_t stream;       /* REQ id of its run/exec; 0: no stream (detached, host gone) */
	struct ctr *ctr;       /* NULL once the container record is gone */
	int is_init;           /* the container's first process */
	struct watch out, err, in;
	uint32_t window;       /* output bytes the host still accepts */
	unsigned char *ibuf;   /* stdin bytes received, not yet written to the pipe */
	size_t ilen;
	int in_eof;            /* host closed stdin: close the pipe once ibuf is drained */
	int exited;
	int status;            /* wait status */
	int oom;
	uint64_t exit_at;      /* monotonic ns of the exit */
	int force_eof;         /* grace over: an empty pipe counts as EOF */
	int killed;            /* the host sent SIGKILL or SIGTERM: its exit cuts the pipes */
	uint64_t oom_base;     /* memory.events oom_kill when it started */
	int helper;            /* an archive helper (archive.c): killed when the host goes */
	int tty;               /* out.fd (and in.fd) are a pty master: no separate stderr */
	int dead;
};

/* ---- containers (ctr.c) ---- */
enum waiter_op { WAIT_STOP, WAIT_RM };

struct waiter {
	struct waiter *next;
	uint32_t id;
	enum waiter_op op;
};

struct ctr {
	struct ctr *next;
	char id[13];
	char image[72];        /* "sha256:<hex>" */
	char image_hex[65];
	json_t *argv;
	pid_t pid;
	struct proc *init;
	int running;
	int created;           /* made by `create`, its process not started yet */
	int exit_code, exit_signal, oom;
	uint64_t started_ns;
	int auto_rm, detach;
	int remove_on_exit;    /* rm arrived while running */
	int log_fd;
	uint64_t log_bytes;
	int log_full;
	struct watch memev, pidsev;
	uint64_t oom_kills, pids_hits;
	uint64_t pids_event_at; /* monotonic ns of the last pids-limit EVENT */
	uint64_t kill_at;      /* monotonic ns: SIGKILL the init then (0 = none) */
	struct waiter *waiters;
	int no_new_privs;      /* run asked for it: exec'd processes get it too */
	uint64_t cap_drop;     /* run's cap_drop: exec'd processes lose them too */
	int netns_fd;          /* its own network namespace, held until its exit is told
				  (net_ns_retire); -1 */
	int pk_fd;             /* its spare's packet socket, the same way; -1 */
	int own_netns, own_ip; /* a network namespace of its own; with an address ("own") */
	int dead;
};

/* ---- cgroup removal retries (cgroup.c) ---- */
struct cg_pending {
	struct cg_pending *next;
	char id[13];
	int tries;
	uint64_t at;
};

/* A `sync` running in a child: answered when the child is reaped (req.c). */
struct sync_wait {
	struct sync_wait *next;
	pid_t pid;
	uint32_t id;
	int answer;            /* 0 once the host that asked went away */
};

/* ---- networking (net.c) ---- */
#define NET_MAX_DNS 3          /* glibc's resolver reads at most three */
#define NET_ADDR_LEN 46        /* INET6_ADDRSTRLEN */

#define NET_CA_MAX 8192           /* bytes of the broker CA's PEM, with its NUL */
struct net_cfg {
	char ip[NET_ADDR_LEN];     /* IPv4, dotted */
	int prefix;                /* 1..32 */
	char gateway[NET_ADDR_LEN]; /* "" if none */
	char dns[NET_MAX_DNS][NET_ADDR_LEN];
	int ndns;
	char ip6[NET_ADDR_LEN];    /* "" if none */
	int prefix6;               /* 1..128 */
	char gateway6[NET_ADDR_LEN];
	/* the sandbox broker's CA (interception mode, docs/broker.md): a PEM certificate
	 * that containers trust; "" for none */
	char broker_ca[NET_CA_MAX];
};

/* A network namespace made ahead for a "netns":"own" container (net.c): the namespace,
 * links up and routes in place, and a packet socket in it (to announce the address);
 * both -1 when there is none. */
struct net_spare {
	int ns, pk;
};

/* ---- shared folders (fs.c) ---- */
#define FS_MAX_MOUNTS 16
#define FS_MAX_GUEST 1024      /* bytes of a guest path */
#define FS_READY_WAIT_MS 10000 /* run/exec wait this long for the folders' mounts */

struct fs_mount {
	int index;                 /* entry "<index>" of the FUSE root */
	int ro;
	char guest[FS_MAX_GUEST + 1];
};

struct fs_cfg {
	int n;
	struct fs_mount m[FS_MAX_MOUNTS];
};

/* A Docker bind (run's `binds`): a sub-path of one shared folder, mounted at `dst` in
 * the container instead of the folders themselves (docs/agent.md). */
struct fs_bind {
	int folder;                /* index into fs_cfg.m */
	int ro;
	char sub[FS_MAX_GUEST + 1];   /* relative, "" for the folder itself */
	char dst[FS_MAX_GUEST + 1];   /* absolute, normalised, in the container */
};

enum fs_state { FS_NONE, FS_PENDING, FS_READY, FS_FAILED };

/* A run/exec waiting for the shared folders' mounts (req.c). */
struct req_defer {
	struct req_defer *next;
	uint32_t id;
	json_t *req;
	uint64_t deadline;     /* monotonic ns */
};

struct fs;

struct agent {
	int epfd;
	int self_pidns;        /* /proc/self/ns/pid: restored after forking into another */
	struct watch sig;
	struct chan chan;
	int proto;             /* version the host chose for this session; 0: none yet (1) */
	struct proc *procs, *dead_procs;
	struct ctr *ctrs, *dead_ctrs;
	struct cg_pending *cg_pending;
	struct sync_wait *syncs;
	char slot_image[AGENT_SLOTS][65]; /* hex digest mounted from slot N, "" if none */
	int scratch_ok;
	int cgroup_ok;
	long pids_max;
	long reserve_mib;
	uint64_t boot_ms;      /* CLOCK_BOOTTIME when the agent was ready */
	char kernel[65];
	int disk_full;         /* disk-full EVENT sent, re-armed when space returns */
	uint64_t disk_check_at;
	int net_up;            /* the init's "net" was applied */
	struct net_cfg net;
	char ifname[16];
	char *resolv_conf;     /* what containers get as /etc/resolv.conf; NULL: no network */
	struct fs *fs;         /* NULL: no shared folders */
	struct watch fsev;     /* eventfd: the shuttle's mount thread finished */
	struct req_defer *defers;
	struct sock_filter *sec_prog; /* the containers' seccomp filter (sec.c), built once */
	unsigned short sec_len;
	unsigned char iobuf[64 * 1024];
};

/* ---- main.c ---- */
void agent_log(const char *fmt, ...) K8_PRINTF(1, 2);
/* Log, then reboot the VM (with -no-reboot QEMU exits): PID 1 must never return. */
void agent_fatal(const char *fmt, ...) K8_PRINTF(1, 2) __attribute__((noreturn));
/* Add, change or drop an fd's interest; events == 0 removes it from the set (so a
 * hung-up pipe cannot spin the loop) while keeping the fd open. */
int agent_watch(struct agent *a, struct watch *w, uint32_t events);
/* Unregister and close. */
void agent_unwatch(struct agent *a, struct watch *w);
uint64_t agent_boottime_ms(void);
/* EVENT disk-full when the scratch disk is (nearly) full; once until space returns. */
void agent_disk_check(struct agent *a);

/* ---- chan.c ---- */
int chan_open(struct agent *a);
/* The /dev/vportNpM of the virtio-serial port named `want` (its number depends on the
 * device order; there is no udev): 0, or -ENOENT while it is not there. */
int chan_find_port(const char *want, char *dev, size_t len);
void chan_event(struct agent *a, uint32_t events);
/* Queue one frame for the host. Dropped (returns -ENOTCONN) when no host is connected:
 * a frame means nothing to the next host. */
int chan_send(struct agent *a, uint16_t type, uint16_t flags, uint32_t id, const void *p, size_t n);
/* Send a JSON frame; takes ownership of `obj`. */
int chan_send_json(struct agent *a, uint16_t type, uint32_t id, json_t *obj);
int chan_resp_ok(struct agent *a, uint32_t id, json_t *obj);
int chan_resp_err(struct agent *a, uint32_t id, const struct k8_err *err);
int chan_event_json(struct agent *a, json_t *obj);
int chan_congested(const struct agent *a);

/* ---- req.c ---- */
void req_handle(struct agent *a, uint32_t id, const unsigned char *payload, size_t len);
/* A child was reaped: 1 when it was a `sync` helper (then answered). */
int req_reaped(struct agent *a, pid_t pid);
/* The host went away: pending `sync` answers are dropped (the syncs go on), and so are
 * run/exec requests still waiting for the shared folders. */
void req_drop_waiters(struct agent *a);
/* The shared folders became ready or failed: deferred run/exec go on (or fail). */
void req_fs_changed(struct agent *a);
/* Deferred run/exec whose wait is over fail. */
void req_tick(struct agent *a, uint64_t now, uint64_t *next);

/* ---- proc.c ---- */
struct proc *proc_new(struct agent *a, pid_t pid, uint32_t stream, struct ctr *c, int in_fd,
		      int out_fd, int err_fd);
struct proc *proc_by_stream(struct agent *a, uint32_t stream);
void proc_event(struct agent *a, struct watch *w, uint32_t events);
void proc_stdin(struct agent *a, uint32_t stream, const unsigned char *p, size_t n, int eof);
void proc_credit(struct agent *a, uint32_t stream, uint32_t n);
void proc_signal(struct agent *a, uint32_t stream, uint32_t sig);
/* Set the window size of p's pty (TIOCSWINSZ; the kernel sends SIGWINCH). */
int proc_resize(struct proc *p, unsigned rows, unsigned cols, struct k8_err *err);
/* A child was reaped: 1 when it was one of ours. */
int proc_reaped(struct agent *a, pid_t pid, int status);
/* The host went away: streams lose their ids, output goes to the container log. */
void proc_orphan_all(struct agent *a);
void proc_resume_all(struct agent *a);
void proc_tick(struct agent *a, uint64_t now, uint64_t *next);
void proc_gc(struct agent *a);

/* ---- ctr.c ---- */
struct ctr *ctr_find(struct agent *a, const char *id);
struct launch;
int ctr_run(struct agent *a, uint32_t reqid, const char *id, const char *image, json_t *argv,
	    struct launch *l, int auto_rm, int detach, pid_t *pid, struct k8_err *err);
int ctr_exec(struct agent *a, uint32_t reqid, struct ctr *c, struct launch *l, pid_t *pid,
	     struct k8_err *err);
/* A container's root (overlay directories, record) without its process: archive ops
 * work on it, a later run of the same id starts in it. */
int ctr_create(struct agent *a, const char *id, const char *image, struct k8_err *err);
json_t *ctr_list(struct agent *a);
int ctr_running_count(struct agent *a);
int ctr_count(struct agent *a);
/* Both answer the request themselves, possibly later (when the init has exited). */
void ctr_stop(struct agent *a, uint32_t reqid, struct ctr *c, int sig, uint64_t timeout_ms);
void ctr_rm(struct agent *a, uint32_t reqid, struct ctr *c);
/* The init was reaped (status known; output may still be draining). */
void ctr_init_exited(struct agent *a, struct ctr *c, int status, int oom);
/* The init's stream is complete: remove the container if it was started with rm. */
void ctr_init_done(struct agent *a, struct ctr *c);
void ctr_log_write(struct agent *a, struct ctr *c, const void *p, size_t n);
void ctr_cg_event(struct agent *a, struct watch *w);
void ctr_drop_waiters(struct agent *a);
void ctr_tick(struct agent *a, uint64_t now, uint64_t *next);
void ctr_gc(struct agent *a);
int ctr_image_in_use(struct agent *a, const char *hex);
/* The id of a running or created container that uses image `hex`, else NULL. */
const char *ctr_image_user(struct agent *a, const char *hex);
/* Move /scratch/containers leftovers of an earlier boot to the trash, empty the trash. */
void ctr_boot_cleanup(struct agent *a);

/* ---- archive.c ---- */
enum archive_op { ARCHIVE_STAT, ARCHIVE_GET, ARCHIVE_PUT, ARCHIVE_LAYER };
/* Fork the helper that copies `path` (absolute, checked by req.c) of container `c` in or
 * out, and answer REQ `id` once it resolved the path: {"stat"} (stat), {"pid","stat"}
 * and the tar on the stream (get), {"pid"} and the tar taken from the stream (put).
 * A negative errno with `err` filled when nothing was started. */
int archive_start(struct agent *a, uint32_t id, struct ctr *c, enum archive_op op,
		  const char *path, int no_overwrite, struct k8_err *err);

/* ---- launch.c ---- */
struct launch {
	char **argv;           /* NULL-terminated, argv[0] searched in the env's PATH */
	char **envp;           /* NULL-terminated, exactly what the process gets */
	const char *cwd;
	const char *user;      /* "user[:group]", names or numbers, checked by req.c; resolved
				  in the container (its /etc/passwd and /etc/group) */
	int want_stdin;        /* a pipe; else /dev/null */
	int tty;               /* "stdin":"tty": a pseudo-terminal for stdin, stdout and
				  stderr, the controlling terminal of a new session */
	unsigned short rows, cols; /* its first window size ("tty_size"); 0: the kernel's */
	int detach;            /* no stdin at all */
	/* run: a new container (namespaces, overlay root) */
	const char *ctr_id;
	const char *lower;     /* /images/<hex> */
	int own_netns;         /* run: "netns":"none" or "own", a network namespace of its own */
	char ctr_ip[16];       /* run: "netns":"own", its IPv4 address (an ipvlan link, net.c);
				  "" with "none": only lo */
	int no_new_privs;      /* PR_SET_NO_NEW_PRIVS before execve (Docker's opt-in) */
	uint64_t cap_drop;     /* capabilities taken out of Docker's default set (CapDrop) */
	struct fs_bind *binds; /* run with `binds`: only these, not the folders (fs.c) */
	int nbinds;
	int binds_given;
	/* run: the container's own limits below the VM's (0: none): memory.max in bytes,
	   cpu.max from Docker's NanoCpus (period 100 ms) */
	uint64_t mem_max, nano_cpus;
	/* exec: join the namespaces of this pid (the container's init) */
	pid_t target;
};

struct launch_out {
	pid_t pid;
	struct net_spare net;  /* the spare it joined ({-1, -1}: none), the caller's now */
	int in_fd, out_fd, err_fd; /* agent's ends, nonblocking; in_fd -1 without stdin;
				      with a tty: out_fd the master, in_fd a dup of it, err_fd -1 */
};

int launch_start(struct agent *a, const struct launch *l, struct launch_out *o, struct k8_err *err);

/* ---- sec.c ---- */
struct sock_filter;
/* Compile the seccomp filter into a->sec_prog (once; later calls return 0 at once). */
int sec_build(struct agent *a);
/* In a container's child: NO_NEW_PRIVS when asked, then load the filter. Without
 * NO_NEW_PRIVS loading needs CAP_SYS_ADMIN: call it before capabilities are dropped. */
int sec_apply(const struct agent *a, int no_new_privs);

/* ---- mount.c ---- */
/* Boot: leave the initramfs for a tmpfs root, mount /proc /sys /dev ... */
void mnt_boot(struct agent *a);
int mnt_scratch(struct agent *a);
/* /dev/vdX whose virtio-blk serial is `serial`. */
int mnt_find_disk(const char *serial, char *dev, size_t devlen);
/* Unmount the image of `slot` (the caller checked nobody uses it); 0 when empty. */
int mnt_image_drop(struct agent *a, int slot, struct k8_err *err);
int mnt_image(struct agent *a, int slot, const char *hex, struct k8_err *err);
/* In the child of a new container: overlay root, /proc, /dev, pivot_root.
 * On failure, fills msg. */
int mnt_ctr_rootfs(const char *id, const char *lower, char *msg, size_t msglen);

/* ---- net.c ---- */
/* Validate the init's "net" object into `c` (no side effects). */
int net_parse(json_t *o, struct net_cfg *c, struct k8_err *err);
/* Bring up lo and the NIC, address, default routes, /etc/resolv.conf and /etc/hosts. */
int net_apply(struct agent *a, const struct net_cfg *c, struct k8_err *err);
/* In a new container's child, after pivot_root: its /etc/resolv.conf (with a network)
 * and /etc/hosts (when the image has none). */
int net_ctr_files(const struct agent *a, const char *hostname, int own_netns, const char *ip,
		  char *msg, size_t msglen);
/* In a new container's child ("netns":"none"): its own network namespace, lo up: the
 * spare `spare` (net_spare_take without a link) when it is >= 0, else one made now. */
int net_ctr_netns(int spare, char *msg, size_t msglen);
/* In a new container's child ("netns":"own"), still root with every capability: its own
 * network namespace with lo and an ipvlan link of the VM's NIC (eth0, address `ip`/32,
 * default route via the VM's gateway): the spare `sp` when there is one, else one made
 * now. 0 or a negative errno with msg filled. */
int net_ctr_ipvlan(const struct agent *a, const char *ip, const struct net_spare *sp,
		   char *msg, size_t msglen);
/* Before forking a container with a network namespace of its own: the spare made for it
 * while the VM was idle, with the link ("own") or empty ("none"); {-1, -1} when none
 * is ready. The caller owns its fds (net_ns_retire). */
void net_spare_take(const struct agent *a, int with_link, struct net_spare *sp);
/* After such a container's exit was told: make the next spare of its kind (a thread at
 * SCHED_IDLE), unless one is ready or on its way. Not while the agent is in another PID
 * namespace. */
void net_spare_make(const struct agent *a, int with_link);
/* An fd of a container's network namespace (*fd, then -1): its namespace or its spare's
 * packet socket, held until the container's exit was told, closed when the VM is idle,
 * so the kernel's teardown is not in anyone's wait. */
void net_ns_retire(int *fd);
/* Whether `ip` may be a container's own address: IPv4 in the VM's network, host part
 * 16..254, not the VM's, gateway's or a resolver's. */
int net_ctr_ip_ok(const struct agent *a, const char *ip);

/* ---- fs.c ---- */
/* Validate the init's "mounts" array into `c` (no side effects). */
int fs_parse(json_t *o, struct fs_cfg *c, struct k8_err *err);
/* Same folders as those already set up (a repeated init). */
int fs_same(const struct agent *a, const struct fs_cfg *c);
/* Find the port, mount FUSE at K8FS_GUEST_ROOT, start the shuttle; the folders' bind
 * mounts follow in a thread (they need the host's answers): fs_state says when. */
int fs_start(struct agent *a, const struct fs_cfg *c, struct k8_err *err);
/* FS_NONE without folders; with FS_FAILED, `msg` says why. */
enum fs_state fs_state(const struct agent *a, char *msg, size_t msglen);
/* The eventfd fired (main loop). */
void fs_event(struct agent *a);
/* In a new container's child, in its own mount namespace, before its root is
 * assembled: detached copies of each folder's mount (fds[i], -1 when none). */
int fs_ctr_clone(const struct agent *a, const struct launch *l, int fds[FS_MAX_MOUNTS], char *msg,
		 size_t msglen);
/* After pivot_root: attach the copies at their guest paths (created in the rootfs). */
int fs_ctr_attach(const struct agent *a, const struct launch *l, int fds[FS_MAX_MOUNTS], char *msg,
		  size_t msglen);
/* run's `binds` field into l (main thread). */
int fs_binds_parse(const struct agent *a, json_t *list, struct launch *l, struct k8_err *err);

/* ---- stats.c ---- */
/* A running container's usage: {"cpu": cpu.stat, "system_ns", "online_cpus", "memory":
 * {"current","max","stat"}, "pids": {"current","max"}, "net": {dev: counters},
 * "mem_total"}. */
json_t *stats_ctr(struct agent *a, struct ctr *c);
/* Its processes: {"procs": [{"pid","ppid","uid","state","tty","utime","stime","start",
 * "vsz_kib","rss_kib","comm","cmd"}], "truncated", "hz", "uptime_s", "mem_total_kib"},
 * within one control frame; names and command lines printable ASCII. */
json_t *stats_top(struct agent *a, struct ctr *c);

/* ---- cgroup.c ---- */
void cg_boot(struct agent *a);
void cg_apply_limits(struct agent *a);
/* The container's cgroup kosa8/<id>: pids.max, memory.max (the VM's limit, or mem_max
 * when lower), cpu.max from nano_cpus (0: none). */
int cg_create(struct agent *a, const char *id, uint64_t mem_max, uint64_t nano_cpus,
	      struct k8_err *err);
/* Its effective limits, for run's answer: {"memory_max":N,"cpu_max":"Q P"|"max"}. */
json_t *cg_limits_json(const char *id);
int cg_attach(const char *id, pid_t pid);
int cg_open_events(struct agent *a, struct ctr *c);
/* Counter `key` of the container's memory.events or pids.events. */
uint64_t cg_counter(const char *id, const char *file, const char *key);
/* The same through an open events file (re-reading it re-arms its EPOLLPRI). */
uint64_t cg_counter_fd(int fd, const char *key);
/* rmdir, retried later while the cgroup still holds dying tasks. */
void cg_remove(struct agent *a, const char *id);
void cg_tick(struct agent *a, uint64_t now, uint64_t *next);
uint64_t cg_mem_total_kib(void);

#endif
