/* SPDX-License-Identifier: Apache-2.0 */
/* shim.h - containerd-shim-kosa8-v2: containerd's shim v2 contract over kosa8 sandboxes.
 *
 * Theory of operation (docs/containerd.md has the user's view):
 *
 *   containerd --ttRPC--> this shim --HTTP on kosa8d.sock--> kosa8d --> VM, agent
 *
 * containerd runs `containerd-shim-kosa8-v2 start` in a task's bundle; that process
 * binds the shim's socket (one per pod, or per container without a pod), starts the
 * serving shim with it and prints its address. The serving shim (main.c) answers the
 * Task service over ttRPC (server.c; framing and envelopes in ttrpc.c). Each task
 * (task.c) lives in a kosa8 sandbox made through kosa8d's API: a container on its own
 * gets a sandbox of its own, a pod one for all its containers (its sandbox container,
 * "pause", never runs: the VM is the pod). The container's root is containerd's
 * snapshot, converted once into a kosa8 image (rootfs.c). Each process (the task's
 * init or an exec) is one exec stream of kosa8d's API, pumped to and from containerd's
 * FIFOs by two threads (proc.c). Task events go to containerd in order (events.c).
 *
 * State: in memory, and per task a file kosa8-shim.json in the bundle that names its
 * sandbox and container, so `containerd-shim-kosa8-v2 delete` (containerd's cleanup
 * after a shim died) can remove them without this process.
 *
 * Locking: one mutex (shim.mu) over the task table and every process's state; it is
 * never held across a call to kosa8d or a FIFO. shim.cond is broadcast whenever a
 * process exits or a task goes away.
 */
#ifndef K8_SHIM_SHIM_H
#define K8_SHIM_SHIM_H

#include "shim/events.h"
#include "shim/kclient.h"
#include "shim/spec.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define SHIM_VERSION "kosa8 containerd-shim-kosa8-v2 1"
#define SHIM_STATE_FILE "kosa8-shim.json"
#define SHIM_ID_MAX 255

enum proc_state { PROC_CREATED, PROC_RUNNING, PROC_STOPPED };

struct task;

/* One process of a task: its init (exec_id "") or an exec. */
struct proc {
	struct proc *next;             /* the task's execs */
	struct task *t;
	char exec_id[SHIM_ID_MAX + 1];
	char *stdin_path, *stdout_path, *stderr_path;   /* containerd's FIFOs ("": none) */
	bool terminal;
	struct spec_proc spec;         /* what runs (an exec's; the init's from config.json) */
	enum proc_state state;
	bool sock_pending;             /* a Start is posting it to kosa8d */
	uint32_t exit_status;
	int64_t exited_s;
	int32_t exited_ns;
	/* the exec stream (proc.c) */
	int sock;                      /* -1 before start and after the stream ended */
	pthread_mutex_t wmu;           /* writes to sock */
	bool stdin_closed;             /* STDIN EOF sent */
	int stop_fd;                   /* eventfd: tells the stdin pump to end */
	int closeio_fd;                /* eventfd: CloseIO, the pump drains, then EOF */
	pthread_t out_thr, in_thr;
	bool out_started, in_started;
	int users;                     /* handlers that hold it outside shim.mu */
};

struct task {
	struct task *next;
	struct shim *s;
	char id[SHIM_ID_MAX + 1];
	char *bundle;
	enum spec_role role;
	char pod[128];
	char sandbox[64];
	bool owns_sandbox;             /* the sandbox is this task's (rm at delete) */
	char guest_id[16];             /* the container in the sandbox, once started */
	char image[256];               /* its rootfs image in kosa8's store */
	bool own_image;                /* made for this task alone: removed at delete */
	bool rootfs_mounted;
	bool paused;
	bool ready;                    /* Create finished (until then other calls wait) */
	struct proc init;
	struct proc *execs;
};

struct shim {
	char ns[128];
	char id[SHIM_ID_MAX + 1];
	char *address;                 /* containerd's -address */
	char *state_dir;               /* sockets, locks, rootfs layouts */
	char *home;                    /* kosa8's home (kosa8d.sock) */
	json_t *node;                  /* the node's config (shim.json), {} when none */
	struct kc kc;
	struct events *ev;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct task *tasks;
	bool shutdown;                 /* Shutdown asked with no task left: exit */
	bool exit_now;                 /* ... and its answer was written */
	uint32_t pid;
};

/* A ttRPC call: its payload in, its packed answer or a gRPC code and message out. */
struct call {
	const uint8_t *in;
	size_t in_len;
	unsigned char *out;
	size_t out_len;
	int code;
	char msg[1024];
};

/* server.c: serve ttRPC on a listening socket until Shutdown leaves no task. */
int server_run(struct shim *s, int listen_fd);

/* task.c: the Task service. Returns with c->out or c->code set. */
void task_dispatch(struct shim *s, const char *method, struct call *c);
/* A task's bundle state file and the cleanup `delete` does from it (main.c). */
int task_cleanup_bundle(struct shim *s, const char *bundle, uint32_t *pid, struct k8_err *err);

/* proc.c: a process's exec stream. proc_start posts run or exec and starts the pumps;
 * proc_signal and proc_close_stdin write to the stream. */
int proc_start(struct shim *s, struct proc *p, struct k8_err *err);
int proc_signal(struct proc *p, int sig);
void proc_close_stdin(struct proc *p);
/* CloseIO: stdin ends after what the FIFO still holds has gone to the process. */
void proc_closeio(struct proc *p);
/* Record an exit (state, status, time) and publish TaskExit; caller holds s->mu. */
void proc_exited_locked(struct shim *s, struct proc *p, uint32_t status);
/* Join a process's pumps (after it stopped) and free its strings. */
void proc_release(struct proc *p);

/* errno -> gRPC code; and a call that failed with it. */
int shim_code(int neg_errno);
void call_fail(struct call *c, int code, const char *fmt, ...) K8_PRINTF(3, 4);

#endif
