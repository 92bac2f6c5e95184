/* SPDX-License-Identifier: Apache-2.0 */
/* agentlink.h - the daemon's end of the agent protocol (agentlink.c, docs/protocol.md).
 * Mechanism: one connection to one guest agent; knows no sandbox. */
#ifndef K8_AGENTLINK_H
#define K8_AGENTLINK_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

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
	unsigned proto;                 /* version chosen at HELLO (link_negotiate); 0: none */
	unsigned proto_min, proto_max;  /* the range the agent's HELLO named */
	uint32_t proto_resend_id;       /* REQ id of a repeated version choice, 0: none */
	void (*on_event)(void *ctx, json_t *ev);
	void *ctx;
};

/* A process's stream (a run or exec with output; opaque: agentlink.c's). */
struct stream;

/* One output frame of a stream (STDOUT, STDERR; anything else an agent sends on a
 * stream is dropped at the door). */
struct sframe {
	struct sframe *next;
	uint16_t type, flags;
	size_t len;
	unsigned char data[];
};

/* The exit code of a process whose VM or agent went away before it exited: Docker's
 * "the engine failed, not the command" (docs/errors.md), the same for every consumer
 * (kosa8's run and exec, a Docker container, a Docker exec, a build's RUN). */
#define LINK_LOST_EXIT 125
#define LINK_LOST_WHY "the sandbox's VM or agent went away"

int link_connect(struct agentlink *l, const char *path, void (*on_event)(void *, json_t *),
		 void *ctx, struct k8_err *err);
void link_close(struct agentlink *l);
int link_wait_hello(struct agentlink *l, int timeout_ms, struct k8_err *err);
/* After link_wait_hello: choose the protocol version from the agent's HELLO and, from
 * version 2 on, tell the agent (docs/protocol.md, "Versions"). -EPROTONOSUPPORT with a
 * message naming both ranges when there is none in common or the agent refused it; the
 * caller adds what to do. */
int link_negotiate(struct agentlink *l, struct k8_err *err);
/* link_negotiate, then the request `then` (taken; NULL: none), sent right behind the
 * version's so that both are answered in one round trip; *then_resp gets its answer
 * (then_resp may be NULL), waited for up to then_timeout_ms.
 * An error of `then` is returned as link_request's would be; the version's come first
 * and, when the choice fails, `then` was not run or its answer is not looked at. */
int link_negotiate_then(struct agentlink *l, json_t *then, int then_timeout_ms,
			json_t **then_resp, struct k8_err *err);
/* The versions this kosa8d speaks. */
void link_proto_range(unsigned *min, unsigned *max);
/* Send a REQ and wait for its RESP. The request is taken (decref'ed here, whatever the
 * outcome): callers must not touch req after the call. *resp gets the whole RESP object
 * (caller decrefs).
 * An "ok":false answer becomes an error with the agent's message and errno. If `stream`
 * is non-NULL a stream with the REQ's id is opened first (so no output is lost) and
 * returned; on failure it is closed. */
int link_request(struct agentlink *l, json_t *req, int timeout_ms,
		 json_t **resp, struct stream **stream, struct k8_err *err);
int link_send(struct agentlink *l, uint16_t type, uint16_t flags, uint32_t id,
	      const void *data, size_t len);
/* Send what the agent's stdin window of stream s allows of the n bytes at p (at most
 * PROTO_DATA_CHUNK): *sent is what was taken from the window (0 when it is shut; the
 * caller waits for CREDIT, which wakes s->efd). Returns 0, or link_send's error (the
 * bytes taken are then lost with the link). */
int link_stdin_send(struct agentlink *l, struct stream *s, const void *p, size_t n,
		    size_t *sent);
/* Take the next output frame of a stream (NULL when none); the caller frees it and then
 * calls link_stream_consumed() to return the credit. */
struct sframe *link_stream_pop(struct agentlink *l, struct stream *s);
void link_stream_consumed(struct agentlink *l, struct stream *s, size_t n);
void link_stream_close(struct agentlink *l, struct stream *s);
/* The stream's id (its REQ's): what SIGNAL and resize name. */
uint32_t link_stream_id(const struct stream *s);
/* Output bytes queued and not consumed (at most a window and a chunk). */
size_t link_stream_queued(struct agentlink *l, struct stream *s);
/* The process's stdin ends (EOF), or gets a signal. */
int link_stream_eof(struct agentlink *l, struct stream *s);
int link_stream_signal(struct agentlink *l, struct stream *s, int sig);

/* What happened on a stream (link_stream_next). */
enum link_next {
	LINK_NEXT_FRAME,        /* *f is the next output frame */
	LINK_NEXT_EXIT,         /* the process exited, its output all taken: *exit_info */
	LINK_NEXT_WOKE,         /* something changed (stdin credit came back) */
	LINK_NEXT_TIMEOUT,      /* nothing within the time */
	LINK_NEXT_LOST,         /* the link broke first: *exit_info is LINK_LOST_EXIT's */
};

/* Wait up to ms (0: not at all) for the next thing on stream s, for a consumer that pulls
 * (an archive's reads and writes). A frame comes before the exit; *f is the caller's to
 * free and credit (link_stream_consumed). *exit_info is a new reference:
 * {"code","signal","oom","error"} as the agent sent them (checked), or
 * {"code": LINK_LOST_EXIT, "error": LINK_LOST_WHY} when the link broke. */
enum link_next link_stream_next(struct agentlink *l, struct stream *s, int ms,
				struct sframe **f, json_t **exit_info);

/* input()'s *flags: stdin ends after these bytes; it has more bytes to give at once; the
 * client sends nothing more at all (its write side is shut: input_fd is not read again). */
#define STREAM_IN_EOF 1u
#define STREAM_IN_MORE 2u
#define STREAM_IN_SHUT 4u

/* A consumer of a stream for link_stream_run, called in the loop's thread. */
struct stream_ops {
	/* A frame of output (type PROTO_STDOUT or PROTO_STDERR, with its flags). 0 goes on;
	 * < 0: the consumer is gone. Its credit goes back to the agent after the call, so a
	 * consumer that takes its time (a slow client) holds back its own process only. */
	int (*output)(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
		      size_t n);
	/* Stdin: input() is called once before the loop waits for anything (to hand over
	 * bytes already read, such as those past a request's head: it must not block then),
	 * again whenever it said it has more (STREAM_IN_MORE), and whenever input_fd (-1:
	 * none) is readable while the loop wants more. It fills buf (max bytes) and returns
	 * >= 0 bytes for the process (0: nothing for it now, e.g. a signal was handled), with
	 * STREAM_IN_EOF in *flags when stdin ends after them (the loop sends EOF once those
	 * bytes are in), or < 0: the client is gone. The loop sends what input() gave within
	 * the agent's stdin window before it asks again. */
	int input_fd;
	ssize_t (*input)(void *ctx, unsigned char *buf, size_t max, unsigned *flags);
	/* control: input_fd carries more than stdin (kosa8's exec socket: SIGNAL frames too),
	 * so it is read after stdin's EOF as well: input() is called whenever it is readable,
	 * handles what it reads (a signal: link_stream_signal) and returns 0 (stdin bytes it
	 * still returns are dropped), until it says STREAM_IN_SHUT. Without it, input_fd is
	 * not read once stdin is over. */
	bool control;
	/* Once input_fd is not read any more (stdin over and no control, or STREAM_IN_SHUT;
	 * or no input at all), gone_fd (-1: none) is watched: a hang-up or an error on it
	 * means the client is gone. */
	int gone_fd;
};

/* Pump stream s until the process exits, the link breaks or the consumer is gone: the
 * one loop every stream consumer shares (kosa8's run and exec, a Docker container's pump
 * and exec, a build's RUN; a new API's process streams go through it too). A consumer:
 *
 *     struct stream *s;
 *     json_t *resp, *exit_info;
 *     // the agent's run or exec request, with "stdin" true when input() gives stdin;
 *     // above layer 5 through sandbox.h's sb_agent_request, which is this call
 *     if (link_request(&sb->link, req, timeout_ms, &resp, &s, err))
 *             return err->code;               // no stream was left open
 *     json_decref(resp);                       // {"ok":true,...}: the process started
 *     struct stream_ops ops = { .output = my_output, .input = my_input_or_NULL,
 *                               .input_fd = client_fd_or_-1, .gone_fd = client_fd_or_-1 };
 *     r = link_stream_run(&sb->link, s, &ops, my_ctx, &exit_info);
 *     link_stream_close(&sb->link, s);
 *     // r 0 or -ECONNRESET: report exit_info["code"] (125 for a lost link), decref it
 *
 * Threads: link_stream_run blocks the thread that calls it (one per stream; the link's
 * reader thread queues frames and wakes it), and output() and input() run in that thread,
 * never at once. From any other thread, while it runs: link_stream_signal (a client's
 * signal, a timeout's SIGKILL), link_stream_eof, link_stream_id. The sandbox must stay
 * held (sb_get's reference) until link_stream_close. Back-pressure: output() may block;
 * the agent stops sending past one window (docs/protocol.md "Flow control"). Exit
 * codes: the agent's EXIT as it was sent, but LINK_LOST_EXIT for a lost link, whoever the
 * consumer (test_agentlink, tests/integration/test_89_docker_lost.py). Returns:
 *   0             the process exited: *exit_info its EXIT (as link_stream_next's);
 *   -ECONNRESET   the link broke first: *exit_info is {"code": LINK_LOST_EXIT, "error":
 *                 LINK_LOST_WHY}, the one answer every consumer records;
 *   -EPIPE        the consumer is gone: the process is sent SIGKILL (nobody would read
 *                 it), *exit_info NULL.
 * The stream stays open (the caller closes it). */
int link_stream_run(struct agentlink *l, struct stream *s, const struct stream_ops *ops,
		    void *ctx, json_t **exit_info);

#endif
