/* SPDX-License-Identifier: Apache-2.0 */
/* sidecar.c - the skeleton kosa8-net, kosa8-fs and kosa8-broker share: log lines, the
 * ready/error start-up line, signals, the listener, the JSON-lines control server and
 * the seccomp helpers in sidecar_seccomp.c (sidecar.h has the contracts). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include "common/sidecar.h"

static const char *sc_prog = "kosa8-sidecar", *sc_id;
static int sc_devnull = -1;
static volatile sig_atomic_t sc_stop;

/* ---- log lines, start-up, signals ---- */

void sc_init(const char *prog, const char *id)
{
	sc_prog = prog;
	sc_id = id;
	if (sc_devnull < 0)
		sc_devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
}

void sc_set_id(const char *id)
{
	sc_id = id;
}

static void sc_vlog(const char *level, const char *fmt, va_list ap)
{
	int saved = errno;
	char ts[K8_TIME_LEN], msg[2048];

	k8_time_now(ts, 0);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* one write, so lines of threads (the broker's workers) do not interleave */
	fprintf(stderr, "%s %s[%s] %s: %s\n", ts, sc_prog, sc_id ? sc_id : "?", level, msg);
	errno = saved;
}

void sc_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sc_vlog("info", fmt, ap);
	va_end(ap);
}

void sc_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sc_vlog("warn", fmt, ap);
	va_end(ap);
}

void sc_die(const char *fmt, ...)
{
	char msg[1200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dprintf(STDOUT_FILENO, "error: %s\n", msg);
	va_start(ap, fmt);
	sc_vlog("error", fmt, ap);
	va_end(ap);
	exit(1);
}

int sc_ready(void)
{
	int r = write_full(STDOUT_FILENO, "ready\n", 6);

	if (r < 0)
		return r;
	if (sc_devnull >= 0) {
		/* closes the pipe: the starter sees EOF. dup3, not dup2: kosa8-fs is already
		 * under its filter here, which allows only the former. */
		dup3(sc_devnull, STDOUT_FILENO, 0);
		close(sc_devnull);
		sc_devnull = -1;
	}
	return 0;
}

static void sc_on_signal(int sig)
{
	(void)sig;
	sc_stop = 1;
}

void sc_signals(sigset_t *orig)
{
	struct sigaction sa = { .sa_handler = sc_on_signal };
	sigset_t block;

	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, orig);
}

bool sc_stopping(void)
{
	return sc_stop != 0;
}

int sc_parse_ids(const char *spec, uid_t *uid, gid_t *gid)
{
	unsigned long u, g;
	const char *gs;
	char *e;

	errno = 0;
	u = strtoul(spec, &e, 10);
	if (e == spec || *e != ':' || errno || u > 0xfffffffful)
		return -EINVAL;
	gs = e + 1;
	g = strtoul(gs, &e, 10);
	if (e == gs || *e || errno || g > 0xfffffffful)
		return -EINVAL;
	*uid = (uid_t)u;
	*gid = (gid_t)g;
	return 0;
}

int sc_listen(const char *path, int backlog, bool nonblock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
	if (fd < 0)
		return -errno;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			close(fd);
			return -EEXIST;         /* never remove anything but a stale socket */
		}
		unlink(path);
	}
	old = umask(0177);
	rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc < 0 || chmod(path, 0600) < 0 || listen(fd, backlog) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* ---- the JSON-lines control server ---- */

void sc_ctl_init(struct sc_ctl *c, int lfd, const struct sc_ctl_conf *conf)
{
	memset(c, 0, sizeof(*c));
	c->lfd = lfd;
	c->conf = *conf;
	if (c->conf.max_clients < 1)
		c->conf.max_clients = 1;
	if (c->conf.max_clients > SC_CTL_MAX_CLIENTS)
		c->conf.max_clients = SC_CTL_MAX_CLIENTS;
	for (int i = 0; i < SC_CTL_MAX_CLIENTS; i++)
		c->cl[i] = (struct sc_ctl_client){ .fd = -1, .passed_fd = -1,
						   .out.max = SC_CTL_OUT_MAX };
}

static void sc_ctl_drop(struct sc_ctl *c, struct sc_ctl_client *cl)
{
	if (cl->fd >= 0)
		close(cl->fd);
	if (cl->passed_fd >= 0)
		close(cl->passed_fd);
	if (cl->in && c->conf.wipe)
		explicit_bzero(cl->in, c->conf.line_max);
	free(cl->in);
	outq_free(&cl->out);
	*cl = (struct sc_ctl_client){ .fd = -1, .passed_fd = -1, .out.max = SC_CTL_OUT_MAX };
}

int sc_ctl_adopt(struct sc_ctl *c, int fd)
{
	struct sc_ctl_client *cl = NULL;
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (c->conf.max_clients == 1)
		sc_ctl_drop(c, &c->cl[0]);      /* the newest client wins */
	for (int i = 0; i < c->conf.max_clients && !cl; i++)
		if (c->cl[i].fd < 0)
			cl = &c->cl[i];
	if (!cl) {
		close(fd);
		return -EMFILE;
	}
	cl->in = malloc(c->conf.line_max);
	if (!cl->in) {
		close(fd);
		return -ENOMEM;
	}
	cl->fd = fd;
	return 0;
}

int sc_ctl_nfds(const struct sc_ctl *c)
{
	return 1 + c->conf.max_clients;
}

void sc_ctl_poll_fill(const struct sc_ctl *c, struct pollfd *p)
{
	p[0] = (struct pollfd){ .fd = c->lfd, .events = POLLIN };
	for (int i = 0; i < c->conf.max_clients; i++) {
		const struct sc_ctl_client *cl = &c->cl[i];
		p[1 + i] = (struct pollfd){ .fd = cl->fd,
			.events = (short)(POLLIN | (cl->out.len ? POLLOUT : 0)) };
	}
}

/* Queue one object (consumed) as a line. 0, or -1 when the client is broken: it is
 * marked dead, not dropped, as a handler may send an event while its request's line is
 * still being read; the callers that own the loop drop it. */
static int sc_ctl_send(struct sc_ctl_client *cl, json_t *obj)
{
	char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
	int r = -ENOMEM;

	json_decref(obj);
	if (s) {
		size_t l = strlen(s);
		s[l] = '\n';    /* json_dumps leaves room for the NUL: replace it */
		r = outq_push(&cl->out, s, l + 1);
		free(s);
	}
	if (r < 0 && !cl->dead)
		sc_warn("control: %s; closing the connection",
			r == -ENOBUFS ? "the client does not read its replies" : "out of memory");
	if (r < 0)
		cl->dead = true;
	return cl->dead ? -1 : 0;
}

/* One request line (without its '\n'); `fd` came with it or is -1 (closed here unless
 * the handler keeps it). */
static int sc_ctl_request(struct sc_ctl *c, struct sc_ctl_client *cl, const char *line,
			  size_t len, int fd)
{
	json_error_t jerr;
	json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr), *reply = NULL;
	json_t *id = json_object_get(req, "id");
	struct k8_err err = { 0 };

	/* jansson's message may quote the line: not where the lines hold secrets */
	bool quote = !req && !c->conf.wipe;

	if (!json_is_object(req))
		k8_err_set(&err, -EINVAL, "not a JSON object%s%s", quote ? ": " : "",
			   quote ? jerr.text : "");
	else if (!json_is_string(json_object_get(req, "op")))
		k8_err_set(&err, -EINVAL, "missing \"op\"");
	else
		reply = c->conf.handle(c->conf.ctx, req, &fd, &err);
	if (fd >= 0)
		close(fd);                       /* not wanted by that op */
	if (!reply)
		reply = json_pack("{s:b,s:s}", "ok", 0, "error", err.msg[0] ? err.msg : "failed");
	else if (!json_object_get(reply, "ok"))
		json_object_set_new(reply, "ok", json_true());
	if (reply && id)
		json_object_set(reply, "id", id);
	json_decref(req);
	if (c->conf.wipe)
		explicit_bzero(&jerr, sizeof(jerr));
	return sc_ctl_send(cl, reply);
}

/* Receive what there is; a descriptor that came along is kept with the position of
 * the last byte of this read: the kernel ends a read on a unix stream socket right
 * after the segment that carried descriptors, and the daemon sends one with the first
 * byte of its line, so that byte is the line's. One per line: a later one replaces it. */
static ssize_t sc_ctl_recv(struct sc_ctl *c, struct sc_ctl_client *cl)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct iovec iov = { .iov_base = cl->in + cl->inlen,
			     .iov_len = c->conf.line_max - cl->inlen };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	ssize_t n = recvmsg(cl->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);

	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (!c->conf.take_fds || n == 0) {
				close(fd);
				continue;
			}
			if (cl->passed_fd >= 0)
				close(cl->passed_fd);
			cl->passed_fd = fd;
			cl->passed_pos = cl->inlen + (size_t)n - 1;
		}
	}
	return n;
}

/* Read and handle every whole line; -1 when the client was dropped. */
static int sc_ctl_input(struct sc_ctl *c, struct sc_ctl_client *cl)
{
	for (int k = 0; k < 16; k++) {
		size_t room = c->conf.line_max - cl->inlen;
		ssize_t n = sc_ctl_recv(c, cl);
		size_t start = 0;

		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return 0;
		if (n <= 0) {
			sc_ctl_drop(c, cl);
			return -1;
		}
		cl->inlen += (size_t)n;
		for (size_t i = (size_t)(cl->inlen - (size_t)n); i < cl->inlen; i++) {
			int fd = -1;

			if (cl->in[i] != '\n')
				continue;
			if (cl->passed_fd >= 0 && cl->passed_pos <= i) {
				fd = cl->passed_fd;
				cl->passed_fd = -1;
			}
			if (i == start) {               /* an empty line: nothing to answer */
				if (fd >= 0)
					close(fd);
			} else if (sc_ctl_request(c, cl, cl->in + start, i - start, fd) < 0) {
				sc_ctl_drop(c, cl);
				return -1;
			}
			if (c->conf.wipe)
				explicit_bzero(cl->in + start, i + 1 - start);
			start = i + 1;
		}
		memmove(cl->in, cl->in + start, cl->inlen - start);
		cl->inlen -= start;
		if (c->conf.wipe)        /* the moved tail's old copy */
			explicit_bzero(cl->in + cl->inlen, start);
		cl->passed_pos -= cl->passed_fd >= 0 ? start : 0;
		if (cl->inlen == c->conf.line_max) {
			sc_warn("control: a line longer than %zu bytes; closing the connection",
				c->conf.line_max - 1);
			sc_ctl_drop(c, cl);
			return -1;
		}
		if ((size_t)n < room)
			return 0;        /* drained: poll says when there is more */
	}
	return 0;
}

void sc_ctl_poll_done(struct sc_ctl *c, const struct pollfd *p)
{
	if (c->lfd >= 0 && (p[0].revents & POLLIN)) {
		int fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0 && sc_ctl_adopt(c, fd) == -EMFILE)
			sc_warn("control: %d clients already; one more refused", c->conf.max_clients);
	}
	for (int i = 0; i < c->conf.max_clients; i++) {
		struct sc_ctl_client *cl = &c->cl[i];
		/* the entry polled this slot's fd, not one adopted since */
		if (cl->fd < 0 || p[1 + i].fd != cl->fd)
			continue;
		if (cl->dead) {
			sc_ctl_drop(c, cl);
			continue;
		}
		if ((p[1 + i].revents & (POLLIN | POLLHUP | POLLERR)) && sc_ctl_input(c, cl) < 0)
			continue;
		if (cl->out.len && outq_flush(&cl->out, cl->fd) < 0)
			sc_ctl_drop(c, cl);
	}
}

void sc_ctl_event(struct sc_ctl *c, json_t *ev)
{
	for (int i = 0; i < c->conf.max_clients; i++)
		if (c->cl[i].fd >= 0 && !c->cl[i].dead)
			sc_ctl_send(&c->cl[i], json_incref(ev));
	json_decref(ev);
}

void sc_ctl_flush(struct sc_ctl *c)
{
	for (int i = 0; i < c->conf.max_clients; i++)
		if (c->cl[i].fd >= 0 && (c->cl[i].dead ||
					 outq_flush(&c->cl[i].out, c->cl[i].fd) < 0))
			sc_ctl_drop(c, &c->cl[i]);
}

void sc_ctl_free(struct sc_ctl *c)
{
	for (int i = 0; i < SC_CTL_MAX_CLIENTS; i++)
		sc_ctl_drop(c, &c->cl[i]);
	if (c->lfd >= 0)
		close(c->lfd);
	c->lfd = -1;
}
