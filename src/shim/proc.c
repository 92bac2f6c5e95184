/* SPDX-License-Identifier: Apache-2.0 */
/* proc.c - a process's exec stream between containerd's FIFOs and kosa8d (shim.h).
 *
 * Theory of operation. proc_start() posts kosa8d's run (a task's init) or exec (an exec)
 * with the Upgrade header; kosa8d answers 101 once the process runs, and its first frame
 * is the "started" event naming the container. From then on two threads pump:
 *
 *   out: stream -> STDOUT to the stdout FIFO, STDERR to the stderr FIFO, until EXIT,
 *        whose code becomes the exit status (128+N for signal N, as runc reports);
 *   in:  the stdin FIFO -> STDIN frames, and EOF -> STDIN with the EOF flag.
 *
 * Output FIFOs are opened read-write: the open never waits for a reader and a reader
 * that goes away (ctr run -d) is no EPIPE; as with runc, a FIFO nobody reads fills and
 * then holds the process's output (and so the process) until someone reads it. The
 * stdin FIFO is opened non-blocking and polled with an eventfd beside it, so the pump
 * can be stopped whether or not containerd ever opened its end (a FIFO whose writer
 * never came reports nothing to poll; one whose writer left reports POLLHUP).
 *
 * A stream that ends without EXIT means kosa8d went away (a restart): the process's
 * output has nowhere to go, so the shim waits for kosa8d to answer again (up to
 * PROC_LOST_WAIT_S), stops the container if it still runs, and reports it exited 255
 * (its own code when it had already exited): cleanly failed, never left hanging.
 * Every frame goes through proto_hdr_check (src/common/proto.c) before its length is
 * believed; an EXIT's JSON is at most PROTO_MAX_JSON bytes.
 */
#include "shim/shim.h"
#include "shim/log.h"
#include "common/proto.h"
#include "events.pb-c.h"

#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>

#define PROC_START_TIMEOUT_MS 120000
#define PROC_LOST_WAIT_S 120

/* Bytes of the stream: what came with the 101 first, then the socket. */
struct proc_stream {
	int fd;
	unsigned char *extra;
	size_t nextra, off;
	struct proto_reader rd;
	int stop_fd;                  /* the in pump's eventfd */
};

struct pump_arg {
	struct shim *s;
	struct proc *p;
	struct proc_stream st;
};

/* The next whole frame: 1, 0 at the end of the stream, or a negative errno. */
static int stream_frame(struct proc_stream *st, struct proto_hdr *h, const unsigned char **data,
			int timeout_ms)
{
	unsigned char buf[16384];

	for (;;) {
		if (proto_reader_frame(&st->rd, h, data))
			return 1;
		if (st->off < st->nextra) {
			long used = proto_reader_feed(&st->rd, st->extra + st->off, st->nextra - st->off);
			if (used < 0)
				return (int)used;
			st->off += (size_t)used;
			continue;
		}
		if (timeout_ms >= 0) {
			struct pollfd pf = { .fd = st->fd, .events = POLLIN };
			int r = poll(&pf, 1, timeout_ms);
			if (r == 0)
				return -ETIMEDOUT;
			if (r < 0 && errno != EINTR)
				return -errno;
		}
		ssize_t got = read(st->fd, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return 0;
		size_t off = 0;
		while (off < (size_t)got) {
			long used = proto_reader_feed(&st->rd, buf + off, (size_t)got - off);
			if (used < 0)
				return (int)used;
			off += (size_t)used;
			if (off < (size_t)got) {
				/* a frame completed inside buf: keep the rest as extra */
				size_t rest = (size_t)got - off;
				free(st->extra);
				st->extra = xmalloc(rest);
				memcpy(st->extra, buf + off, rest);
				st->nextra = rest;
				st->off = 0;
				break;
			}
		}
	}
}

static int proc_write(struct proc *p, uint16_t type, uint16_t flags, const void *data, size_t n)
{
	int r = -EPIPE;

	pthread_mutex_lock(&p->wmu);
	if (p->sock >= 0)
		r = proto_write(p->sock, type, flags, 1, data, n);
	pthread_mutex_unlock(&p->wmu);
	return r;
}

int proc_signal(struct proc *p, int sig)
{
	uint32_t v = htole32((uint32_t)sig);

	return proc_write(p, PROTO_SIGNAL, 0, &v, sizeof(v));
}

void proc_closeio(struct proc *p)
{
	uint64_t one = 1;
	bool pump;

	pthread_mutex_lock(&p->wmu);
	pump = p->in_started && p->closeio_fd >= 0;
	pthread_mutex_unlock(&p->wmu);
	if (pump)
		(void)!write(p->closeio_fd, &one, sizeof(one));
	else
		proc_close_stdin(p);
}

void proc_close_stdin(struct proc *p)
{
	bool send;

	pthread_mutex_lock(&p->wmu);
	send = !p->stdin_closed && p->sock >= 0;
	p->stdin_closed = true;
	if (send)
		(void)proto_write(p->sock, PROTO_STDIN, PROTO_F_EOF, 1, NULL, 0);
	pthread_mutex_unlock(&p->wmu);
}

/* Open an output FIFO read-write (see the top); -1 when there is none. */
static int fifo_out(const char *path)
{
	int fd;

	if (!path || !*path)
		return -1;
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		shim_log("opening %s: %s", path, strerror(errno));
	return fd;
}

static void write_out(int *fd, const unsigned char *data, size_t n, const char *what)
{
	int r;

	if (*fd < 0 || !n)
		return;
	if ((r = write_full(*fd, data, n)) < 0) {
		shim_log("writing the process's %s: %s; dropping the rest", what, strerror(-r));
		close(*fd);
		*fd = -1;
	}
}

/* The exit status of an EXIT payload: its code, else 128+signal; 255 when malformed. */
static uint32_t exit_status(const unsigned char *data, size_t n)
{
	json_error_t je;
	json_t *j = json_loadb((const char *)data, n, 0, &je);
	json_t *code = json_object_get(j, "code");
	json_int_t sig = json_integer_value(json_object_get(j, "signal"));
	const char *why = json_string_value(json_object_get(j, "error"));
	uint32_t st = 255;

	if (json_is_integer(code) && json_integer_value(code) >= 0)
		st = (uint32_t)(json_integer_value(code) & 0xff);
	else if (sig > 0 && sig < 128)
		st = (uint32_t)(128 + sig);
	if (why) {
		cleanup_free char *safe = str_escape(why);
		shim_log("kosa8d ended the stream: %s", safe);
	}
	json_decref(j);
	return st;
}

/* kosa8d went away mid-stream: see the top. Returns the exit status to report. */
static uint32_t proc_lost(struct shim *s, struct proc *p)
{
	struct task *t = p->t;
	char path[512], sb[200], id[64];
	uint32_t st = 255;
	struct k8_err err = { 0 };
	json_t *list = NULL, *v;
	size_t i;

	shim_log("task %s%s%s: the stream from kosa8d ended before the process did (kosa8d "
		 "restarted?); its output is lost, the task fails", t->id, p->exec_id[0] ? " exec " : "",
		 p->exec_id);
	if (p->exec_id[0] || !t->guest_id[0])
		return st;
	kc_escape(t->sandbox, sb, sizeof(sb));
	kc_escape(t->guest_id, id, sizeof(id));
	for (int i2 = 0; i2 < PROC_LOST_WAIT_S; i2++) {
		k8_err_clear(&err);
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/containers", sb);
		if (kc_call(&s->kc, "GET", path, NULL, &list, &err) == 0)
			break;
		sleep(1);
	}
	json_array_foreach(list, i, v) {
		if (!json_is_string(json_object_get(v, "id")) ||
		    strcmp(json_string_value(json_object_get(v, "id")), t->guest_id))
			continue;
		if (json_is_integer(json_object_get(v, "exit_code")))
			st = (uint32_t)(json_integer_value(json_object_get(v, "exit_code")) & 0xff);
		if (json_is_true(json_object_get(v, "running"))) {
			json_t *body = json_pack("{s:i}", "timeout_s", 0);
			snprintf(path, sizeof(path), "/v1/sandboxes/%s/containers/%s/stop", sb, id);
			k8_err_clear(&err);
			if (kc_call(&s->kc, "POST", path, body, NULL, &err))
				shim_log("stopping container %s: %s", t->guest_id, err.msg);
			json_decref(body);
		}
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/containers/%s", sb, id);
		k8_err_clear(&err);
		(void)kc_call(&s->kc, "DELETE", path, NULL, NULL, &err);
	}
	if (!list)
		shim_log("kosa8d did not come back within %d s: %s", PROC_LOST_WAIT_S, err.msg);
	json_decref(list);
	return st;
}

static void *pump_out(void *arg)
{
	struct pump_arg *a = arg;
	struct proc *p = a->p;
	int out = fifo_out(p->stdout_path), errfd = fifo_out(p->stderr_path);
	uint32_t status = 255;
	bool done = false;

	for (;;) {
		struct proto_hdr h;
		const unsigned char *data;
		int r = stream_frame(&a->st, &h, &data, -1);

		if (r <= 0) {
			if (r < 0)
				shim_log("task %s: the stream from kosa8d broke: %s", p->t->id,
					 strerror(-r));
			break;
		}
		if (h.type == PROTO_STDOUT)
			write_out(&out, data, h.len, "stdout");
		else if (h.type == PROTO_STDERR)
			write_out(errfd >= 0 ? &errfd : &out, data, h.len, "stderr");
		else if (h.type == PROTO_EXIT) {
			status = exit_status(data, h.len);
			done = true;
			break;
		}
	}
	if (out >= 0)
		close(out);
	if (errfd >= 0)
		close(errfd);
	pthread_mutex_lock(&p->wmu);
	close(p->sock);
	p->sock = -1;
	pthread_mutex_unlock(&p->wmu);
	if (!done)
		status = proc_lost(a->s, p);
	/* the in pump has nothing more to do */
	{
		uint64_t one = 1;
		(void)!write(a->st.stop_fd, &one, sizeof(one));
	}
	pthread_mutex_lock(&a->s->mu);
	proc_exited_locked(a->s, p, status);
	pthread_mutex_unlock(&a->s->mu);
	free(a->st.extra);
	proto_reader_free(&a->st.rd);
	free(a);
	return NULL;
}

struct in_arg {
	struct proc *p;
	int fifo, stop, closeio;
};

/* Forward what the stdin FIFO holds; with `drain`, every byte readable now, then stop.
 * Returns 1 when stdin ended (EOF sent), 0 to go on, -1 when the stream is gone. */
static int pump_in_read(struct in_arg *a, unsigned char *buf, bool drain)
{
	for (;;) {
		ssize_t got = read(a->fifo, buf, PROTO_DATA_CHUNK);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == EAGAIN && !drain)
			return 0;
		if (got <= 0) {
			proc_close_stdin(a->p);
			return 1;
		}
		if (proc_write(a->p, PROTO_STDIN, 0, buf, (size_t)got) < 0)
			return -1;
		if (!drain)
			return 0;
	}
}

static void *pump_in(void *arg)
{
	struct in_arg *a = arg;
	unsigned char buf[PROTO_DATA_CHUNK];

	for (;;) {
		struct pollfd pf[3] = { { .fd = a->fifo, .events = POLLIN },
					{ .fd = a->stop, .events = POLLIN },
					{ .fd = a->closeio, .events = POLLIN } };
		if (poll(pf, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents)
			break;
		/* CloseIO: containerd's writer is done; what it wrote before is still in the
		 * FIFO and goes first, then the EOF (never the EOF ahead of the data). */
		if (pf[2].revents) {
			pump_in_read(a, buf, true);
			break;
		}
		if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		if (pump_in_read(a, buf, false))
			break;
	}
	close(a->fifo);
	free(a);
	return NULL;
}

/* The request body of run (init) or exec. */
static json_t *proc_body(struct proc *p)
{
	struct task *t = p->t;
	bool in = p->stdin_path && *p->stdin_path;
	json_t *b = json_pack("{s:O,s:O,s:s,s:s,s:b}", "argv", p->spec.argv, "env", p->spec.env,
			      "cwd", p->spec.cwd, "user", p->spec.user, "stdin", in);

	if (!p->exec_id[0])
		json_object_set_new(b, "image", json_string(t->image));
	if (p->terminal) {
		json_object_set_new(b, "tty", json_true());
		if (p->spec.rows && p->spec.cols)
			json_object_set_new(b, "tty_size", json_pack("[i,i]", p->spec.rows,
								     p->spec.cols));
	}
	return b;
}

int proc_start(struct shim *s, struct proc *p, struct k8_err *err)
{
	struct task *t = p->t;
	struct pump_arg *a = xcalloc(1, sizeof(*a));
	struct in_arg *ia = NULL;
	char path[512], sb[200], id[64];
	json_t *body = proc_body(p), *ev = NULL;
	struct proto_hdr h;
	const unsigned char *data;
	int hint, r;

	a->s = s;
	a->p = p;
	a->st.fd = -1;
	a->st.stop_fd = -1;
	proto_reader_init(&a->st.rd);
	kc_escape(t->sandbox, sb, sizeof(sb));
	if (p->exec_id[0]) {
		kc_escape(t->guest_id, id, sizeof(id));
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/containers/%s/exec", sb, id);
	} else {
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", sb);
	}
	r = kc_upgrade(&s->kc, path, body, &a->st.fd, &a->st.extra, &a->st.nextra, &hint, err);
	json_decref(body);
	if (r)
		goto fail;
	/* The first frame names the container. */
	r = stream_frame(&a->st, &h, &data, PROC_START_TIMEOUT_MS);
	if (r <= 0 || h.type != PROTO_EVENT) {
		r = k8_err_set(err, r < 0 ? r : -EPROTO, "kosa8d's stream did not start with the "
			       "process's start event");
		goto fail;
	}
	{
		json_error_t je;
		ev = json_loadb((const char *)data, h.len, 0, &je);
		const char *cid = json_string_value(json_object_get(ev, "id"));
		if (!p->exec_id[0]) {
			if (!cid || strlen(cid) >= sizeof(t->guest_id) ||
			    strspn(cid, "0123456789abcdef") != strlen(cid)) {
				r = k8_err_set(err, -EPROTO, "kosa8d's start event names no container");
				goto fail;
			}
			pthread_mutex_lock(&s->mu);
			snprintf(t->guest_id, sizeof(t->guest_id), "%s", cid);
			pthread_mutex_unlock(&s->mu);
		}
		json_decref(ev);
		ev = NULL;
	}
	a->st.stop_fd = eventfd(0, EFD_CLOEXEC);
	if (a->st.stop_fd < 0) {
		r = k8_err_set(err, -errno, "eventfd: %s", strerror(errno));
		goto fail;
	}
	if (p->stdin_path && *p->stdin_path) {
		ia = xcalloc(1, sizeof(*ia));
		ia->p = p;
		ia->stop = a->st.stop_fd;
		ia->closeio = p->closeio_fd = eventfd(0, EFD_CLOEXEC);
		ia->fifo = open(p->stdin_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
		if (ia->fifo < 0 || ia->closeio < 0) {
			shim_log("opening %s: %s; the process gets no stdin", p->stdin_path,
				 strerror(errno));
			if (ia->fifo >= 0)
				close(ia->fifo);
			free(ia);
			ia = NULL;
		}
	}
	pthread_mutex_lock(&p->wmu);
	p->sock = a->st.fd;
	p->stop_fd = a->st.stop_fd;
	pthread_mutex_unlock(&p->wmu);
	if (!ia)
		proc_close_stdin(p);
	/* Running, and said so, before the out pump can see the exit (TaskStart before
	 * TaskExit: the contract's order). */
	pthread_mutex_lock(&s->mu);
	p->state = PROC_RUNNING;
	p->sock_pending = false;
	if (p->exec_id[0]) {
		K8events__TaskExecStarted e = K8EVENTS__TASK_EXEC_STARTED__INIT;
		e.container_id = t->id;
		e.exec_id = p->exec_id;
		e.pid = s->pid;
		events_publish(s->ev, "/tasks/exec-started", "TaskExecStarted", &e.base);
	} else {
		K8events__TaskStart e = K8EVENTS__TASK_START__INIT;
		e.container_id = t->id;
		e.pid = s->pid;
		events_publish(s->ev, "/tasks/start", "TaskStart", &e.base);
	}
	pthread_mutex_unlock(&s->mu);
	if (ia) {
		pthread_mutex_lock(&p->wmu);
		p->in_started = pthread_create(&p->in_thr, NULL, pump_in, ia) == 0;
		pthread_mutex_unlock(&p->wmu);
		if (!p->in_started) {
			close(ia->fifo);
			free(ia);
			proc_close_stdin(p);
		}
	}
	if (pthread_create(&p->out_thr, NULL, pump_out, a)) {
		/* cannot happen short of exhaustion: end the process rather than orphan it */
		proc_signal(p, SIGKILL);
		pthread_mutex_lock(&s->mu);
		proc_exited_locked(s, p, 255);
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	p->out_started = true;
	return 0;
fail:
	json_decref(ev);
	if (a->st.fd >= 0)
		close(a->st.fd);
	if (a->st.stop_fd >= 0)
		close(a->st.stop_fd);
	free(a->st.extra);
	proto_reader_free(&a->st.rd);
	free(a);
	return r;
}

void proc_exited_locked(struct shim *s, struct proc *p, uint32_t status)
{
	K8events__TaskExit e = K8EVENTS__TASK_EXIT__INIT;
	K8task__Timestamp ts = K8TASK__TIMESTAMP__INIT;
	struct timespec now;

	if (p->state == PROC_STOPPED)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	p->state = PROC_STOPPED;
	p->exit_status = status;
	p->exited_s = now.tv_sec;
	p->exited_ns = (int32_t)now.tv_nsec;
	ts.seconds = p->exited_s;
	ts.nanos = p->exited_ns;
	e.container_id = p->t->id;
	e.id = p->exec_id[0] ? p->exec_id : p->t->id;
	e.pid = s->pid;
	e.exit_status = status;
	e.exited_at = &ts;
	events_publish(s->ev, "/tasks/exit", "TaskExit", &e.base);
	pthread_cond_broadcast(&s->cond);
}

void proc_release(struct proc *p)
{
	if (p->out_started) {
		pthread_join(p->out_thr, NULL);
		p->out_started = false;
	}
	if (p->in_started) {
		pthread_join(p->in_thr, NULL);
		p->in_started = false;
	}
	if (p->stop_fd >= 0)
		close(p->stop_fd);
	p->stop_fd = -1;
	if (p->closeio_fd >= 0)
		close(p->closeio_fd);
	p->closeio_fd = -1;
	free(p->stdin_path);
	free(p->stdout_path);
	free(p->stderr_path);
	p->stdin_path = p->stdout_path = p->stderr_path = NULL;
	spec_proc_free(&p->spec);
}
