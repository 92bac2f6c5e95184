/* SPDX-License-Identifier: Apache-2.0 */
/* docker_int.h - what the Docker API's container side shares, private to its files
 * (docs/design.md "The daemon's modules"; docs/docker.md "Containers"):
 *   docker_ctr.c    the records (state.json), create, rm, list, inspect, archive, prune
 *   docker_run.c    start, stop, kill, restart, wait, resize, and the pump that owns a
 *                   running container's agent stream and writes its log
 *   docker_logs.c   logs and attach: the log read back to followers, attach's stdin
 *   docker_exec.c   exec create, start (its stream bridged to the client), inspect
 *   docker_stats.c  stats and top
 * The router (docker_api.c) sees only their public headers.
 *
 * State: the daemon's `struct docker` (d->docker, docker_of()), not a global: its list
 * of containers (struct dkc, reference counted: the list holds one, each user another)
 * and of execs (struct dkx). Locking: dk->lock for every record; never held across an
 * agent request or a client write. dk->cond is broadcast when a record changes.
 *
 * A container's log ($KOSA8_HOME/docker/containers/<id>/log): records of a 16-byte header
 * (the 8-byte Docker frame header, then a big-endian nanosecond timestamp) and the
 * payload, written by the pump alone, capped at DKC_LOG_MAX.
 */
#ifndef K8_DOCKER_INT_H
#define K8_DOCKER_INT_H

#include "daemon/api_route.h"
#include "daemon/daemon.h"
#include "daemon/record.h"
#include "daemon/sandbox.h"
#include "daemon/slots.h"
#include "docker/names.h"
#include "docker/ps.h"
#include "docker/spec.h"
#include "docker/stream.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define DKC_LOG_MAX (16u << 20)
#define DKC_REC_HDR 16
#define DKC_WAITERS 32
#define DKC_START_TIMEOUT_MS 60000
#define DKC_MAX 4096                    /* containers the Docker API keeps */
#define DKC_PORTS_MAX 32                /* published ports per container */
#define DKX_MAX 1024                    /* execs remembered (oldest finished dropped) */

/* A container of the Docker API (its record; docker_ctr.c keeps the list). */
struct dkc {
	struct docker *dk;              /* the daemon's Docker state, which holds the list */
	struct dkc *next;
	int refs;
	char id[DN_ID_LEN + 1], name[DN_NAME_MAX + 1], agent_id[13];
	char image[512], image_id[80], sandbox[64];
	json_t *config, *host;          /* Docker's Config and HostConfig, as inspect shows */
	json_t *mounts;                 /* Docker's Mounts, as inspect shows */
	json_t *binds;                  /* the agent's bind list: [{"src","dst","ro"}] */
	json_t *published;              /* while it runs: [{"HostIp","HostPort","Port"}] */
	char ip[16];                    /* while it runs with a network: its address ("own":
	                                 * its netns, GUEST_CTR4_*; own sandbox: the VM's) */
	enum dps_state state;
	bool removing, removed, pumping, own_sandbox;
	bool prepared;                  /* its root made in the agent before a first start */
	bool agent_rm;                  /* AutoRemove: the agent removes it as it exits */
	int exit_code, pid;
	char error[256];
	int64_t created_ns, started_ns, finished_ns;
	unsigned starts, exits;
	uint32_t stream_id;             /* of the running init, for kill */
	int stdin_r, stdin_w;           /* the stdin pipe while it may be used; -1 */
	uint64_t log_size;
	bool log_full;
	int waiters[DKC_WAITERS];
	char dir[4300];
};

/* An exec (docker_exec.c), remembered until DKX_MAX newer ones pushed it out. */
struct dkx {
	struct dkx *next;
	char id[DN_ID_LEN + 1], ctr[DN_ID_LEN + 1];
	struct dspec_exec spec;         /* its tty's size: ConsoleSize, or a resize before start */
	bool started, running;
	int exit_code, pid;             /* exit_code -1: none yet */
	char sandbox[64];               /* while running: where, and its agent stream */
	uint32_t stream_id;
};

/* The Docker API's state in a daemon (d->docker, made on first use by docker_of): its
 * containers (loaded from disk then) and execs. */
struct docker {
	struct daemon *d;
	pthread_mutex_t lock;           /* every record below and in them */
	pthread_cond_t cond;            /* a record changed (state, removal, an exec's end) */
	bool loaded;
	struct dkc *ctrs;               /* newest first */
	unsigned ip_next;               /* dkr_ip_pick_locked's cursor */
	struct dkx *execs;
	int nexecs;
	char dir[4200];
};

/* The reader of a log or an exec's stream (docker_logs.c): which streams, framed or raw,
 * timestamps, lines, a time window and a tail. */
struct dkl_reader {
	unsigned mask;                  /* 1 << DS_STDOUT | 1 << DS_STDERR */
	bool tty;                       /* raw bytes, no frame headers */
	bool timestamps;
	bool lines;                     /* split into lines (timestamps, tail) */
	int64_t since_ns, until_ns;     /* 0: no bound */
	uint64_t skip_lines;            /* tail: lines to leave out first */
	uint64_t line_no;
	bool at_start[3];               /* per stream: the next byte starts a line */
	bool counting;                  /* first pass of tail: count only */
};

/* ---- docker_ctr.c: the records ---- */

/* d's Docker state, made on its first use. */
struct docker *docker_of(struct daemon *d);
int64_t dk_now_ns(void);
/* moby's booleans in a query ("1", "True", "false" ...); absent: def. */
bool dk_qbool(struct api_call *call, const char *key, bool def);
void dkc_unref(struct dkc *c);
/* Tell followers something changed (caller holds dk->lock). */
void dkc_notify_locked(struct dkc *c);
/* An eventfd written on every change of c (new output, its exit), or -1; _del closes it. */
int dkc_waiter_add(struct dkc *c);
void dkc_waiter_del(struct dkc *c, int fd);
/* The stdin pipe of a container with OpenStdin (caller holds dk->lock). */
void dkc_stdin_pipe_locked(struct dkc *c);
/* state.json (caller holds dk->lock). */
void dkc_save_locked(struct dkc *c);
/* A container by full id, name or unique prefix, with a reference; NULL with Docker's
 * 404 (or 400 for an ambiguous prefix) in err. _call: the route's {id}. */
struct dkc *dkc_find(struct daemon *d, const char *ref, struct k8_err *err);
int dkc_find_call(struct api_call *call, struct dkc **out);
bool dkc_tty(struct dkc *c);
/* The agent's `rm` of `agent_id` in sb, its outcome not looked at. */
void dkc_agent_rm(struct sandbox *sb, const char *agent_id);
/* Remove c for good (the agent's container, the record, its directory); exit_rec (taken,
 * may be NULL): an AutoRemove container's container.exit, audited once the removal is. */
void dkc_rm_now(struct daemon *d, struct dkc *c, struct sandbox *sb, json_t *exit_rec);

/* ---- docker_run.c ---- */

/* fn with c's image attached and mounted in sb, held in its slot (slots.c slot_use): in
 * the shared engine a full slot table gives up its least recently used image that no
 * running or created container uses; when none can go, -ENOSPC in the Docker user's
 * words, with what holds each image. */
int dkr_with_image(struct daemon *d, struct sandbox *sb, struct dkc *c, slot_use_fn fn,
		   void *ctx, struct k8_err *err);
/* Stop c's init: `signal`, then SIGKILL after t_ms; waits for the pump to record the
 * exit. 1 when c was not running. */
int dkr_stop(struct daemon *d, struct dkc *c, int signal, int t_ms, struct k8_err *err);
/* An agent older than the pty refuses "stdin":"tty": say what to do instead. */
void dkr_tty_refused(struct k8_err *err);
/* The query's h and w (0..65535). */
int dkr_query_hw(struct api_call *call, unsigned *rows, unsigned *cols);
/* The agent's resize of a pty: agent container `ctr`'s init (stream 0) or `stream`. */
int dkr_resize_agent(struct daemon *d, const char *sandbox, const char *ctr, uint32_t stream,
		     unsigned rows, unsigned cols, struct k8_err *err);

/* ---- docker_logs.c ---- */

/* Write one piece to the client: framed unless rd->tty, with the timestamp before a
 * line's first byte when asked. -1 when the client is gone. */
int dkl_emit(struct dkl_reader *rd, int out, enum ds_type type, int64_t ts,
	     const unsigned char *p, size_t n, bool line_start);
/* After a 101: wait (up to 2 s) until the client has read the response head. */
void dkl_wait_head_read(int sock);

#endif
