/* SPDX-License-Identifier: Apache-2.0 */
/* sidecar.h - the skeleton the per-sandbox helper processes share (kosa8-net, kosa8-fs,
 * kosa8-broker): log lines, the start-up contract, signals, the unix-socket listener,
 * the JSON-lines control server and the seccomp helpers.
 *
 * Start-up contract (the daemon's src/daemon/sidecar.c reads it): the process prints
 * exactly one line on stdout, "ready\n" once it is listening, jailed and filtered, or
 * "error: <message>\n" and exits 1 (sc_die). After "ready" stdout is /dev/null, so the
 * starter sees EOF; from then on a failure is only in the log (stderr, which the daemon
 * appends to a file). A sidecar does not die with its parent: it runs in its own
 * session and the next daemon connects to it again.
 *
 * Log line (docs/design.md, "Sidecars"): one line each,
 *   2026-12-01T14:18:04Z kosa8-net[SANDBOX] info: message
 * UTC timestamp, program, the sandbox id (or "?"), the level (info, warn, error).
 *
 * Control server: one JSON object per line both ways. A request is an object with "op"
 * and usually an integer "id"; the reply carries the same "id" (none when the request
 * had none) and "ok": true, or "ok": false with "error": "<message>" (a string: the
 * daemon shows it as it is). Lines without "id" from the server are events. A line
 * longer than the server's limit drops the connection; so does a client that leaves
 * more than SC_CTL_OUT_MAX bytes of replies unread. The socket is 0600 and the daemon
 * is its only client: the limits keep a confused client from growing the process. */
#ifndef K8_COMMON_SIDECAR_H
#define K8_COMMON_SIDECAR_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>
#include <seccomp.h>

#include "common/outq.h"
#include "common/util.h"

/* ---- log lines, start-up, signals ---- */

/* Name the process for its log lines (`prog` like "kosa8-net", `id` the sandbox's, may
 * be NULL) and open /dev/null for sc_ready() while paths still resolve (before a jail
 * empties the mount namespace). Both strings must outlive the process's use of them. */
void sc_init(const char *prog, const char *id);
/* Change the id shown in log lines (after argument parsing). */
void sc_set_id(const char *id);
/* One log line on stderr at level info / warn; errno is preserved. */
void sc_log(const char *fmt, ...) K8_PRINTF(1, 2);
void sc_warn(const char *fmt, ...) K8_PRINTF(1, 2);
/* Start-up failure: "error: <message>" on stdout for the starter, the same as an error
 * log line, exit 1. Also fine after "ready" (stdout is /dev/null then). */
void sc_die(const char *fmt, ...) K8_PRINTF(1, 2) __attribute__((noreturn));
/* "ready\n" on stdout, then stdout becomes /dev/null (the starter sees EOF). 0 or a
 * negative errno. */
int sc_ready(void);

/* SIGPIPE ignored; SIGTERM and SIGINT set the stop flag and are blocked, `orig` gets
 * the mask to hand ppoll() so they are delivered only while the loop waits. */
void sc_signals(sigset_t *orig);
bool sc_stopping(void);

/* "UID:GID" (decimal). 0 or -EINVAL. */
int sc_parse_ids(const char *spec, uid_t *uid, gid_t *gid);

/* A listening unix stream socket at `path`, 0600 from the start (bound under umask
 * 0177). A socket left at the path by an earlier run is removed; anything else there
 * is left alone and the call fails with -EEXIST. `nonblock`: the listening fd and so
 * the accepted ones' default. Returns the fd or a negative errno. */
int sc_listen(const char *path, int backlog, bool nonblock);

/* ---- the JSON-lines control server ---- */

#define SC_CTL_MAX_CLIENTS 8
#define SC_CTL_OUT_MAX (4u << 20)    /* unread replies and events per client */

/* Handle one request (a JSON object, borrowed). Returns the reply's fields as a new
 * object ("ok": true is added unless the handler set "ok"), or NULL with `err` set for
 * {"ok": false, "error": err->msg}. `*fd` is the descriptor that came with the line
 * (SCM_RIGHTS) or -1: a handler that keeps it sets *fd = -1, else the server closes it. */
typedef json_t *(*sc_ctl_fn)(void *ctx, json_t *req, int *fd, struct k8_err *err);

struct sc_ctl_conf {
	size_t line_max;         /* longest request line, '\n' included */
	int max_clients;         /* 1..SC_CTL_MAX_CLIENTS; at 1 a new client replaces the old */
	bool take_fds;           /* accept descriptors passed along a line (SCM_RIGHTS) */
	bool wipe;               /* zero request bytes once handled (they may hold secrets) */
	sc_ctl_fn handle;
	void *ctx;
};

struct sc_ctl_client {
	int fd;
	char *in;                /* line_max bytes */
	size_t inlen;
	int passed_fd;           /* came with byte passed_pos of `in`, or -1 */
	size_t passed_pos;
	bool dead;               /* its replies could not be queued: dropped by the loop */
	struct outq out;
};

struct sc_ctl {
	int lfd;
	struct sc_ctl_conf conf;
	struct sc_ctl_client cl[SC_CTL_MAX_CLIENTS];
};

/* `lfd` (may be -1: clients only through sc_ctl_adopt) becomes the server's. */
void sc_ctl_init(struct sc_ctl *c, int lfd, const struct sc_ctl_conf *conf);
/* Take a connected socket as a client (made non-blocking). 0, or a negative errno
 * (the fd is closed then). */
int sc_ctl_adopt(struct sc_ctl *c, int fd);
/* The number of pollfd entries the server uses: 1 + max_clients, fixed for its life. */
int sc_ctl_nfds(const struct sc_ctl *c);
/* Fill sc_ctl_nfds() entries (unused slots get fd -1), then after poll hand the same
 * entries back: accepts, reads and handles requests, writes what is queued. */
void sc_ctl_poll_fill(const struct sc_ctl *c, struct pollfd *p);
void sc_ctl_poll_done(struct sc_ctl *c, const struct pollfd *p);
/* Queue one event object (consumed) to every client; dropped when there is none. */
void sc_ctl_event(struct sc_ctl *c, json_t *ev);
/* Write what every client's queue holds and the socket takes now. */
void sc_ctl_flush(struct sc_ctl *c);
/* Close every client and the listener. */
void sc_ctl_free(struct sc_ctl *c);

/* ---- seccomp (libseccomp) ---- */

/* A filter whose default is EPERM (a call nobody foresaw degrades, it does not kill),
 * which already allows what every sidecar's loop needs (reads and writes on fds, poll,
 * accept4, socket options, clocks, memory never executable, signals' return, exit) and
 * kills the process at once on calls only an attacker makes (exec, ptrace, mount and
 * namespaces, modules, kexec, BPF, keyrings, userfaultfd, perf, handle opens, id
 * changes). NULL on allocation failure. */
scmp_filter_ctx sc_seccomp_new(void);
/* Add unconditional rules: `action` (SCMP_ACT_ALLOW, SCMP_ACT_KILL_PROCESS) for each. */
int sc_seccomp_add(scmp_filter_ctx ctx, uint32_t action, const int *nrs, size_t n);
/* The calls that would leave a jail (exec, ptrace, mount, namespaces, modules, keyrings,
 * id changes), each killing the process; sc_seccomp_new adds them too. */
int sc_seccomp_kill_escapes(scmp_filter_ctx ctx);
/* For a filter that allows by default: signals to its own process only. kill,
 * tgkill and the sigqueue calls naming another process (or a group: 0, -1, -pgid) fail
 * with EPERM, and tkill and the pidfd calls always do (a process of the same uid could
 * otherwise be signalled: kill(-1) reaches every one). Call it in the process the filter
 * is loaded in: it reads getpid(). */
int sc_seccomp_signal_self(scmp_filter_ctx ctx);
/* socket() for these address families only. */
int sc_seccomp_socket(scmp_filter_ctx ctx, const int *families, size_t n);
/* Load the filter and release `ctx` (also on error). 0 or a negative errno. */
int sc_seccomp_load(scmp_filter_ctx ctx);

#endif
