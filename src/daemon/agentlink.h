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

#endif
