/* SPDX-License-Identifier: Apache-2.0 */
/* stream.c - an exec stream: frames between this terminal and a process in a sandbox.
 *
 * Theory of operation. After the 101 answer the socket carries frames of
 * docs/protocol.md in both directions, all with stream id 1. One poll() loop watches
 * the socket, stdin (while we forward it) and a signalfd:
 *
 *   socket readable  -> frames: STDOUT/STDERR are written to fd 1/2 at once with
 *                       blocking writes (a reader that stalls stalls the process: that is
 *                       the flow control), EXIT ends the loop with its code.
 *   stdin readable   -> one STDIN frame of at most 32 KiB; EOF -> STDIN with EOF flag.
 *   SIGINT/SIGTERM   -> the first is sent on as a SIGNAL frame, the second disconnects.
 *
 * Writes to the socket are non-blocking and go through one pending buffer; stdin is read
 * only when that buffer is empty. So when the daemon stops taking stdin we keep reading
 * the process's output instead of deadlocking in write(), and memory stays bounded by
 * one frame.
 */
#include "cli.h"
#include "common/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define STREAM_ID 1

struct pump {
	int fd;
	int sfd;                 /* signalfd, -1 when unavailable */
	int stdin_open;          /* still reading our stdin */
	int send_closed;         /* the daemon no longer takes frames */
	unsigned char *out;      /* frames waiting to be written to the socket */
	size_t out_len, out_off, out_cap;
	int nsignals;
	int done;
	int code;
	char id[80];             /* container id from the "started" event */
	struct proto_reader rd;
};

static void pump_queue(struct pump *p, uint16_t type, uint16_t flags, const void *data,
		       size_t len)
{
	size_t flen;
	unsigned char *f;

	if (p->send_closed)
		return;
	f = proto_frame_new(type, flags, STREAM_ID, data, len, &flen);
	if (p->out_off == p->out_len)
		p->out_off = p->out_len = 0;
	if (p->out_len + flen > p->out_cap) {
		size_t ncap = p->out_len + flen;
		unsigned char *nb = realloc(p->out, ncap);
		if (!nb)
			abort();
		p->out = nb;
		p->out_cap = ncap;
	}
	memcpy(p->out + p->out_len, f, flen);
	p->out_len += flen;
	free(f);
}

static void pump_flush(struct pump *p)
{
	while (p->out_off < p->out_len && !p->send_closed) {
		ssize_t w = write(p->fd, p->out + p->out_off, p->out_len - p->out_off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			/* EPIPE/ECONNRESET: the daemon closed its side; keep reading. */
			p->send_closed = 1;
			p->out_off = p->out_len = 0;
			return;
		}
		p->out_off += (size_t)w;
	}
}

static int pump_frame(struct pump *p, const struct proto_hdr *h, const unsigned char *data,
		      struct k8_err *err)
{
	json_t *j;
	int r;

	switch (h->type) {
	case PROTO_STDOUT:
		if (h->len && (r = out_write_all(1, data, h->len)) < 0) {
			if (r == -EPIPE) {
				/* Nobody reads our output any more (`| head`): behave as a
				 * process killed by SIGPIPE would. */
				p->code = 128 + SIGPIPE;
				return -ECANCELED;
			}
			return k8_err_set(err, r, "writing the output: %s", strerror(-r));
		}
		return 0;
	case PROTO_STDERR:
		if (h->len)
			(void)out_write_all(2, data, h->len);
		return 0;
	case PROTO_EXIT: {
		json_error_t je;
		j = json_loadb((const char *)data, h->len, 0, &je);
		json_t *code = json_object_get(j, "code");
		long sig = (long)json_integer_value(json_object_get(j, "signal"));
		if (json_is_integer(code) && json_integer_value(code) >= 0)
			p->code = (int)(json_integer_value(code) & 0xff);
		else if (sig > 0)
			p->code = (int)((128 + sig) & 0xff);
		else
			p->code = 0;
		/* The daemon ends a stream it could not finish with code 125 and a reason. */
		const char *why = json_string_value(json_object_get(j, "error"));
		if (why) {
			cleanup_free char *safe = str_escape(why);   /* may come from the guest */
			fprintf(stderr, "kosa8: %s\n", safe);
		}
		if (json_is_true(json_object_get(j, "oom")))
			fprintf(stderr, "kosa8: the process was killed: out of memory (the "
				"sandbox's --memory is the limit)\n");
		json_decref(j);
		p->done = 1;
		return 0;
	}
	case PROTO_EVENT: {
		json_error_t je;
		j = json_loadb((const char *)data, h->len, 0, &je);
		const char *ev = json_string_value(json_object_get(j, "event"));
		const char *id = json_string_value(json_object_get(j, "id"));
		if (ev && !strcmp(ev, "started") && id)
			snprintf(p->id, sizeof(p->id), "%s", id);
		json_decref(j);
		return 0;
	}
	case PROTO_PING:
		pump_queue(p, PROTO_PONG, 0, data, h->len);
		return 0;
	default:
		return 0; /* CREDIT, PONG and anything the CLI has no use for */
	}
}

/* One read() per poll round, so a process that prints without pause cannot keep us
 * from seeing Ctrl-C or stdin. */
static int pump_feed(struct pump *p, const unsigned char *buf, size_t n, struct k8_err *err);

static int pump_read_socket(struct pump *p, struct k8_err *err)
{
	unsigned char buf[65536];
	ssize_t n;

	do
		n = read(p->fd, buf, sizeof(buf));
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN)
		return 0;
	if (n < 0 && errno != ECONNRESET)
		return k8_err_set(err, -errno, "reading from the daemon: %s", strerror(errno));
	if (n <= 0)
		return k8_err_set(err, -ECONNRESET, "lost the connection to the daemon");
	return pump_feed(p, buf, (size_t)n, err);
}

/* Hand n received bytes to the frame reader and act on each whole frame. */
static int pump_feed(struct pump *p, const unsigned char *buf, size_t n, struct k8_err *err)
{
	int r;

	for (size_t off = 0; off < n && !p->done;) {
		long c = proto_reader_feed(&p->rd, buf + off, n - off);
		struct proto_hdr h;
		const unsigned char *data;
		int got = 0;

		if (c < 0)
			return k8_err_set(err, -EPROTO, "the daemon sent a malformed frame");
		off += (size_t)c;
		while (!p->done && proto_reader_frame(&p->rd, &h, &data)) {
			got = 1;
			if ((r = pump_frame(p, &h, data, err)) < 0)
				return r;
		}
		if (!c && !got)
			return k8_err_set(err, -EPROTO, "the frame reader made no progress");
	}
	return 0;
}

static void pump_read_stdin(struct pump *p)
{
	unsigned char buf[PROTO_DATA_CHUNK];
	ssize_t n;

	do
		n = read(0, buf, sizeof(buf));
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN)
		return;
	if (n <= 0) {
		pump_queue(p, PROTO_STDIN, PROTO_F_EOF, NULL, 0);
		p->stdin_open = 0;
		return;
	}
	pump_queue(p, PROTO_STDIN, 0, buf, (size_t)n);
}

/* 0 to go on, -ECANCELED when the user asked twice. */
static int pump_signal(struct pump *p)
{
	struct signalfd_siginfo si;

	if (read(p->sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		return 0;
	if (++p->nsignals == 1) {
		unsigned char le[4] = { (unsigned char)si.ssi_signo, 0, 0, 0 };
		pump_queue(p, PROTO_SIGNAL, 0, le, sizeof(le));
		return 0;
	}
	p->code = 128 + (int)si.ssi_signo;
	return -ECANCELED;
}

int stream_pump(int fd, const unsigned char *extra, size_t extra_len, int forward_stdin,
		int *code, struct k8_err *err)
{
	struct pump p = { .fd = fd, .sfd = -1, .stdin_open = forward_stdin };
	sigset_t mask, old;
	int r = 0;

	*code = 0;
	proto_reader_init(&p.rd);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &old);
	p.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	if (!forward_stdin)
		pump_queue(&p, PROTO_STDIN, PROTO_F_EOF, NULL, 0);

	/* Frames that arrived together with the 101 answer. */
	if (extra_len)
		r = pump_feed(&p, extra, extra_len, err);

	while (!r && !p.done) {
		struct pollfd pfd[3];
		int n = 0, i_sock, i_in = -1, i_sig = -1;

		pump_flush(&p);
		i_sock = n;
		pfd[n].fd = fd;
		pfd[n++].events = POLLIN | (p.out_off < p.out_len ? POLLOUT : 0);
		if (p.stdin_open && p.out_off == p.out_len && !p.send_closed) {
			i_in = n;
			pfd[n].fd = 0;
			pfd[n++].events = POLLIN;
		}
		if (p.sfd >= 0) {
			i_sig = n;
			pfd[n].fd = p.sfd;
			pfd[n++].events = POLLIN;
		}
		if (poll(pfd, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = k8_err_set(err, -errno, "poll: %s", strerror(errno));
			break;
		}
		if (i_sig >= 0 && (pfd[i_sig].revents & POLLIN)) {
			r = pump_signal(&p);
			if (r < 0)
				break;
		}
		if (pfd[i_sock].revents & (POLLIN | POLLHUP | POLLERR)) {
			r = pump_read_socket(&p, err);
			if (r < 0)
				break;
		}
		if (i_in >= 0 && pfd[i_in].revents) {
			if (pfd[i_in].revents & POLLNVAL) {
				/* No stdin at all (closed fd): that is an empty one. */
				pump_queue(&p, PROTO_STDIN, PROTO_F_EOF, NULL, 0);
				p.stdin_open = 0;
			} else {
				pump_read_stdin(&p);
			}
		}
	}
	if (!r || r == -ECANCELED)
		*code = p.code;
	if (p.sfd >= 0)
		close(p.sfd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	proto_reader_free(&p.rd);
	free(p.out);
	return r;
}
