/* SPDX-License-Identifier: Apache-2.0 */
/* sidecar.h - the daemon's end of a sidecar process, kosa8-net or kosa8-fs (sidecar.c).
 * Mechanism: spawn, control connection, requests; knows no sandbox. */
#ifndef K8_DAEMON_SIDECAR_H
#define K8_DAEMON_SIDECAR_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"

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

#endif
