/* SPDX-License-Identifier: Apache-2.0 */
/* proc.c - processes started by run/exec and their streams: stdout/stderr pipes read
 * within the host's window, stdin bytes written as the pipe takes them (with CREDIT
 * back), signals, and the EXIT frame.
 *
 * Order on a stream: RESP {"pid"} (req.c), then STDOUT/STDERR data, an EOF-flagged frame
 * for each of the two once its pipe closed, and EXIT last, once the wait status is
 * known too. A process that exits while a background child still holds its pipes gets
 * AGENT_EXIT_GRACE_MS; after that an empty pipe counts as closed.
 *
 * A process without a stream (detached container, or the host went away) writes its
 * output to the container's log instead, never throttled.
 */
#include "agent.h"

#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <sys/wait.h>

static void proc_interest(struct agent *a, struct proc *p)
{
	int on = !p->stream || (p->window > 0 && !chan_congested(a));

	if (p->out.fd >= 0)
		agent_watch(a, &p->out, on ? EPOLLIN : 0);
	if (p->err.fd >= 0)
		agent_watch(a, &p->err, on ? EPOLLIN : 0);
}

struct proc *proc_new(struct agent *a, pid_t pid, uint32_t stream, struct ctr *c, int in_fd,
		      int out_fd, int err_fd)
{
	struct proc *p = xcalloc(1, sizeof(*p));

	p->pid = pid;
	p->stream = stream;
	p->ctr = c;
	p->window = PROTO_WINDOW;
	p->out = (struct watch){ .kind = W_OUT, .fd = out_fd, .owner = p };
	p->err = (struct watch){ .kind = W_ERR, .fd = err_fd, .owner = p };
	p->in = (struct watch){ .kind = W_IN, .fd = in_fd, .owner = p };
	if (c)
		p->oom_base = cg_counter(c->id, "memory.events", "oom_kill");
	p->next = a->procs;
	a->procs = p;
	proc_interest(a, p);
	return p;
}

struct proc *proc_by_stream(struct agent *a, uint32_t stream)
{
	struct proc *p;

	if (!stream)
		return NULL;
	for (p = a->procs; p; p = p->next)
		if (p->stream == stream)
			return p;
	return NULL;
}

static void proc_free(struct agent *a, struct proc *p)
{
	struct proc **pp;

	agent_unwatch(a, &p->out);
	agent_unwatch(a, &p->err);
	agent_unwatch(a, &p->in);
	free(p->ibuf);
	p->ibuf = NULL;
	if (p->is_init && p->ctr && p->ctr->init == p)
		p->ctr->init = NULL;
	for (pp = &a->procs; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	p->dead = 1;
	p->next = a->dead_procs;
	a->dead_procs = p;
}

void proc_gc(struct agent *a)
{
	struct proc *p, *next;

	for (p = a->dead_procs; p; p = next) {
		next = p->next;
		free(p);
	}
	a->dead_procs = NULL;
}

static void proc_maybe_finish(struct agent *a, struct proc *p)
{
	int code, sig = 0;

	if (p->dead || !p->exited || p->out.fd >= 0 || p->err.fd >= 0)
		return;
	if (WIFSIGNALED(p->status)) {
		sig = WTERMSIG(p->status);
		code = 128 + sig;
	} else {
		code = WEXITSTATUS(p->status);
	}
	/* An rm:true container goes before its EXIT, so the host never sees it in ps
	 * after the stream ended. */
	if (p->is_init && p->ctr)
		ctr_init_done(a, p->ctr);
	if (p->stream)
		chan_send_json(a, PROTO_EXIT, p->stream,
			       json_pack("{s:i,s:i,s:b}", "code", code, "signal", sig, "oom", p->oom));
	proc_free(a, p);
}

static void proc_close_stdin(struct agent *a, struct proc *p)
{
	/* Whatever the process will never read is given back, so the host's window
	 * stays consistent. */
	if (p->ilen && p->stream) {
		unsigned char c[4] = { (unsigned char)p->ilen, (unsigned char)(p->ilen >> 8),
				       (unsigned char)(p->ilen >> 16), (unsigned char)(p->ilen >> 24) };
		chan_send(a, PROTO_CREDIT, 0, p->stream, c, 4);
	}
	p->ilen = 0;
	/* A terminal's end of input is its EOF character (^D): a program reading a line
	 * sees end of file, as when a user types it; the pty itself stays open. */
	if (p->tty && p->in.fd >= 0 && !p->exited) {
		struct termios t;
		unsigned char eof = 4;

		if (tcgetattr(p->in.fd, &t) == 0 && t.c_cc[VEOF])
			eof = t.c_cc[VEOF];
		(void)!write(p->in.fd, &eof, 1);
	}
	agent_unwatch(a, &p->in);
}

/* Read one chunk from stdout or stderr (level-triggered: we come back for more). */
static void proc_pump(struct agent *a, struct proc *p, struct watch *w)
{
	uint16_t type = w->kind == W_OUT ? PROTO_STDOUT : PROTO_STDERR;
	size_t want = AGENT_OUT_CHUNK;
	ssize_t n;

	if (w->fd < 0)
		return;
	if (p->stream) {
		if (!p->window || chan_congested(a)) {
			proc_interest(a, p);
			return;
		}
		if (want > p->window)
			want = p->window;
	}
	n = read(w->fd, a->iobuf, want);
	if (n < 0) {
		if (errno == EINTR || (errno == EAGAIN && !p->force_eof))
			return;
		/* a pty master reads EIO once no process holds the slave: its EOF */
		if (errno != EAGAIN && !(p->tty && errno == EIO))
			agent_log("pid %d: read: %s", (int)p->pid, strerror(errno));
		n = 0;
	}
	if (n == 0) {
		agent_unwatch(a, w);
		if (p->stream)
			chan_send(a, type, PROTO_F_EOF, p->stream, NULL, 0);
		if (p->stream && p->tty) /* one terminal: stderr ends with it */
			chan_send(a, PROTO_STDERR, PROTO_F_EOF, p->stream, NULL, 0);
		proc_maybe_finish(a, p);
		return;
	}
	if (p->stream) {
		chan_send(a, type, 0, p->stream, a->iobuf, (size_t)n);
		p->window -= (uint32_t)n;
		if (!p->window || chan_congested(a))
			proc_interest(a, p);
	} else if (p->ctr) {
		ctr_log_write(a, p->ctr, a->iobuf, (size_t)n);
	}
}

static void proc_stdin_flush(struct agent *a, struct proc *p)
{
	size_t done = 0;
	int closed = 0;

	while (p->in.fd >= 0 && done < p->ilen) {
		ssize_t w = write(p->in.fd, p->ibuf + done, p->ilen - done);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				closed = 1; /* EPIPE: the process closed its stdin */
			break;
		}
		done += (size_t)w;
	}
	if (done) {
		memmove(p->ibuf, p->ibuf + done, p->ilen - done);
		p->ilen -= done;
		if (p->stream) {
			unsigned char c[4] = { (unsigned char)done, (unsigned char)(done >> 8),
					       (unsigned char)(done >> 16), (unsigned char)(done >> 24) };
			chan_send(a, PROTO_CREDIT, 0, p->stream, c, 4);
		}
	}
	if (p->in.fd < 0)
		return;
	if (closed || (!p->ilen && p->in_eof)) {
		proc_close_stdin(a, p);
		return;
	}
	agent_watch(a, &p->in, p->ilen ? EPOLLOUT : 0);
}

void proc_event(struct agent *a, struct watch *w, uint32_t events)
{
	struct proc *p = w->owner;

	if (p->dead)
		return;
	if (w->kind == W_IN) {
		if (events & EPOLLERR)
			proc_close_stdin(a, p);
		else
			proc_stdin_flush(a, p);
		return;
	}
	proc_pump(a, p, w);
}

void proc_stdin(struct agent *a, uint32_t stream, const unsigned char *data, size_t n, int eof)
{
	struct proc *p = proc_by_stream(a, stream);

	if (!p)
		return; /* finished; the host may still have been sending */
	if (p->in.fd < 0) {
		if (n) {
			unsigned char c[4] = { (unsigned char)n, (unsigned char)(n >> 8),
					       (unsigned char)(n >> 16), (unsigned char)(n >> 24) };
			chan_send(a, PROTO_CREDIT, 0, stream, c, 4);
		}
		return;
	}
	if (n) {
		if (p->ilen + n > PROTO_WINDOW) {
			agent_log("stream %u: host overran its stdin window; %zu bytes dropped", stream,
				  p->ilen + n - PROTO_WINDOW);
			n = PROTO_WINDOW - p->ilen;
		}
		if (!p->ibuf)
			p->ibuf = xmalloc(PROTO_WINDOW);
		memcpy(p->ibuf + p->ilen, data, n);
		p->ilen += n;
	}
	if (eof)
		p->in_eof = 1;
	proc_stdin_flush(a, p);
}

void proc_credit(struct agent *a, uint32_t stream, uint32_t n)
{
	struct proc *p = proc_by_stream(a, stream);
	uint64_t w;

	if (!p)
		return;
	w = (uint64_t)p->window + n;
	p->window = w > PROTO_WINDOW ? PROTO_WINDOW : (uint32_t)w;
	proc_interest(a, p);
	if (p->force_eof) {
		proc_pump(a, p, &p->out);
		if (!p->dead)
			proc_pump(a, p, &p->err);
	}
}

void proc_signal(struct agent *a, uint32_t stream, uint32_t sig)
{
	struct proc *p = proc_by_stream(a, stream);

	if (!p || p->exited || sig < 1 || sig > 64)
		return;
	if (sig == SIGKILL || sig == SIGTERM)
		p->killed = 1;
	kill(p->pid, (int)sig);
}

/* A process the host killed has exited: what its pipes hold now goes out (within the
 * window), and then they are closed whether or not a child it left behind still writes
 * to them (that child gets SIGPIPE). envd ends a killed command's stream so too; without
 * this, `sh -c 'yes'` killed left `yes` filling the pipe and the stream never ended. */
static void proc_cut(struct agent *a, struct proc *p)
{
	struct watch *ws[2] = { &p->out, &p->err };

	p->force_eof = 1;
	for (int i = 0; i < 2; i++) {
		for (int n = 0; n < 4 && !p->dead && ws[i]->fd >= 0; n++)
			proc_pump(a, p, ws[i]);
		if (p->dead || ws[i]->fd < 0)
			continue;
		agent_unwatch(a, ws[i]);
		if (p->stream)
			chan_send(a, i ? PROTO_STDERR : PROTO_STDOUT, PROTO_F_EOF, p->stream, NULL, 0);
		if (p->stream && p->tty) /* one terminal: stderr ends with it */
			chan_send(a, PROTO_STDERR, PROTO_F_EOF, p->stream, NULL, 0);
	}
	if (!p->dead)
		proc_maybe_finish(a, p);
}

int proc_resize(struct proc *p, unsigned rows, unsigned cols, struct k8_err *err)
{
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };

	if (!p->tty)
		return k8_err_set(err, -ENOTTY, "the process has no terminal (started without a tty)");
	if (p->out.fd < 0)
		return k8_err_set(err, -ESRCH, "the process's terminal is closed");
	if (ioctl(p->out.fd, TIOCSWINSZ, &ws) < 0)
		return k8_err_set(err, -errno, "TIOCSWINSZ: %s", strerror(errno));
	return 0;
}

int proc_reaped(struct agent *a, pid_t pid, int status)
{
	struct proc *p;

	for (p = a->procs; p; p = p->next)
		if (p->pid == pid && !p->exited)
			break;
	if (!p)
		return 0;
	p->exited = 1;
	p->status = status;
	p->exit_at = now_mono_ns();
	if (p->ctr) {
		int killed = (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ||
			     (WIFEXITED(status) && WEXITSTATUS(status) == 137);
		p->oom = killed && cg_counter(p->ctr->id, "memory.events", "oom_kill") > p->oom_base;
	}
	if (p->is_init && p->ctr)
		ctr_init_exited(a, p->ctr, status, p->oom);
	p->in_eof = 1;
	proc_close_stdin(a, p);
	if (p->killed)
		proc_cut(a, p);
	else
		proc_maybe_finish(a, p);
	return 1;
}

void proc_orphan_all(struct agent *a)
{
	struct proc *p;

	for (p = a->procs; p; p = p->next) {
		if (!p->stream)
			continue;
		if (p->helper && !p->exited)
			kill(p->pid, SIGKILL); /* a copy nobody receives */
		p->stream = 0;
		p->ilen = 0;
		agent_unwatch(a, &p->in); /* the process sees EOF on stdin */
	}
}

void proc_resume_all(struct agent *a)
{
	struct proc *p;

	for (p = a->procs; p; p = p->next)
		proc_interest(a, p);
}

void proc_tick(struct agent *a, uint64_t now, uint64_t *next)
{
	struct proc *p, *nx;

	for (p = a->procs; p; p = nx) {
		uint64_t due;

		nx = p->next;
		if (!p->exited || p->force_eof)
			continue;
		due = p->exit_at + AGENT_EXIT_GRACE_MS * 1000000ull;
		if (now < due) {
			if (due < *next)
				*next = due;
			continue;
		}
		p->force_eof = 1;
		proc_pump(a, p, &p->out);
		if (!p->dead)
			proc_pump(a, p, &p->err);
	}
}
