/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_agentlink.c - libFuzzer target: the daemon's end of the agent link (agentlink.c)
 * reading a hostile agent. The input is the byte stream the agent writes on its port:
 * HELLO, RESP, STDOUT/STDERR, EXIT, CREDIT, EVENT, PING, frames of types the guest may
 * not send, ids nobody asked for, headers that break the framing.
 *
 * The daemon's own reader thread function (link_reader) runs on one end of a socketpair,
 * as it runs on agent.sock; a second thread plays the agent on the other end, writing
 * the input and reading what the daemon writes back (PONGs), so neither side can stall.
 * Before the bytes arrive the link holds what a busy daemon holds: requests 1-3 waiting
 * for their RESP, exec streams 2 and 3 open (stream 3 with some output already queued).
 * agentlink.c is compiled into this file, so the static reader and dispatch are the
 * ones kosa8d runs; nothing in src/ is changed for the fuzzer.
 *
 * After EOF, the link's promises are checked (abort() is a bug, not just a sanitizer
 * report): the link is broken, a stream never holds more output than its window and
 * one chunk, its queue adds up to what it counts, stdin credit stays within the window,
 * an EXIT's info carries only the four keys exit_info_clean lets through, and a RESP
 * handed to a request is a JSON object. */
#include "daemon/agentlink.c"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NPEND 3

struct agent_side {
	int fd;
	const uint8_t *data;
	size_t size;
};

/* The agent: write the input, read whatever the daemon sends, until the daemon's end
 * shuts down. Non-blocking, so a daemon writing PONGs never waits on a full buffer. */
static void *agent_thread(void *arg)
{
	struct agent_side *a = arg;
	size_t off = 0;
	bool wr_done = false;
	char sink[65536];

	fcntl(a->fd, F_SETFL, fcntl(a->fd, F_GETFL) | O_NONBLOCK);
	for (;;) {
		struct pollfd p = { .fd = a->fd, .events = POLLIN | (wr_done ? 0 : POLLOUT) };

		if (!wr_done && off == a->size) {
			shutdown(a->fd, SHUT_WR);
			wr_done = true;
			continue;
		}
		if (poll(&p, 1, 1000) < 0 && errno != EINTR)
			abort();
		if (p.revents & (POLLIN | POLLHUP)) {
			ssize_t n = read(a->fd, sink, sizeof(sink));
			if (n == 0)
				return NULL;            /* the daemon's end is gone */
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return NULL;
		}
		if (!wr_done && (p.revents & POLLOUT)) {
			ssize_t n = write(a->fd, a->data + off, a->size - off);
			if (n > 0)
				off += (size_t)n;
			else if (n < 0 && errno != EAGAIN && errno != EINTR)
				wr_done = true;         /* the reader stopped: it broke the link */
		}
	}
}

static int nevents;

static void on_event(void *ctx, json_t *ev)
{
	/* what the daemon's callback does first: the event's name, a few fields */
	(void)ctx;
	if (!json_is_object(ev))
		abort();
	(void)json_string_value(json_object_get(ev, "event"));
	(void)json_string_value(json_object_get(ev, "container"));
	nevents++;
}

static void check_stream(const struct stream *s)
{
	size_t sum = 0;

	for (const struct sframe *f = s->head; f; f = f->next) {
		if (f->type != PROTO_STDOUT && f->type != PROTO_STDERR)
			abort();
		sum += f->len;
	}
	if (sum != s->queued || s->queued > PROTO_WINDOW + PROTO_DATA_CHUNK)
		abort();
	if (s->stdin_credit > PROTO_WINDOW)
		abort();
	if (s->exited != (s->exit_info != NULL))
		abort();
	if (s->exit_info) {
		const char *k;
		json_t *v;

		json_object_foreach(s->exit_info, k, v) {
			if (strcmp(k, "code") && strcmp(k, "signal") && strcmp(k, "oom") &&
			    strcmp(k, "error"))
				abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct agentlink l = { 0 };
	struct pending pd[NPEND];
	struct stream *s2, *s3;
	struct agent_side a;
	pthread_t agent;
	int sv[2];
	static const char out[] = "already queued output";

	signal(SIGPIPE, SIG_IGN);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	pthread_mutex_init(&l.lock, NULL);
	pthread_mutex_init(&l.wlock, NULL);
	pthread_cond_init(&l.cond, NULL);
	l.fd = sv[0];
	l.on_event = on_event;
	l.next_id = 100;
	for (int i = 0; i < NPEND; i++) {
		memset(&pd[i], 0, sizeof(pd[i]));
		pd[i].id = (uint32_t)i + 1;
		pd[i].next = l.pending;
		l.pending = &pd[i];
	}
	s2 = stream_open(&l, 2);
	s3 = stream_open(&l, 3);
	{
		struct sframe *f = xmalloc(sizeof(*f) + sizeof(out));
		f->next = NULL;
		f->type = PROTO_STDOUT;
		f->flags = 0;
		f->len = sizeof(out);
		memcpy(f->data, out, sizeof(out));
		s3->head = s3->tail = f;
		s3->queued = f->len;
		s3->stdin_credit = 10;
	}

	a = (struct agent_side){ .fd = sv[1], .data = data, .size = size };
	if (pthread_create(&agent, NULL, agent_thread, &a) != 0)
		abort();
	link_reader(&l);                        /* until EOF or a broken header */
	shutdown(sv[0], SHUT_RDWR);             /* the agent thread sees the end */
	pthread_join(agent, NULL);

	if (!l.broken || !l.broken_why[0])
		abort();
	if (l.hello && !json_is_object(l.hello_info))
		abort();
	for (int i = 0; i < NPEND; i++)
		if (pd[i].done != (pd[i].resp != NULL) || (pd[i].resp && !json_is_object(pd[i].resp)))
			abort();
	check_stream(s2);
	check_stream(s3);
	/* the API thread's side: take the output, give credit back (to a closed link) */
	for (struct sframe *f; (f = link_stream_pop(&l, s3)); free(f))
		link_stream_consumed(&l, s3, f->len);

	link_stream_close(&l, s2);
	link_stream_close(&l, s3);
	if (l.streams)
		abort();
	for (int i = 0; i < NPEND; i++)
		json_decref(pd[i].resp);
	json_decref(l.hello_info);
	close(sv[0]);
	close(sv[1]);
	pthread_mutex_destroy(&l.lock);
	pthread_mutex_destroy(&l.wlock);
	pthread_cond_destroy(&l.cond);
	return 0;
}
