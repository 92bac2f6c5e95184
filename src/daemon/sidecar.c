/* SPDX-License-Identifier: Apache-2.0 */
/* sidecar.c - the per-sandbox helper processes (kosa8-net, kosa8-fs): start, talk, stop.
 *
 * A sidecar runs in its own session, like QEMU, so a daemon killed with -9 leaves it
 * running and the next daemon connects to it again (its pid and start time are kept in
 * sandbox.json). Its control socket carries JSON lines: replies are matched to requests
 * by "id"; anything else is an event handed to on_event from the reader thread. A
 * sidecar is a less trusted party than the daemon (it parses the guest's bytes), so its
 * lines are bounded and a garbled one breaks the connection instead of the daemon.
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/syscall.h>

#include "daemon/sidecar.h"
#include "daemon/vm.h"

#define SIDECAR_LINE_MAX (1 << 20)     /* stats of a busy sandbox stay well below */

void sidecar_init(struct sidecar *s, const char *kind)
{
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
}

bool sidecar_alive(struct sidecar *s)
{
	if (s->pid <= 0)
		return false;
	if (s->child && waitpid(s->pid, NULL, WNOHANG) == s->pid) {
		s->child = false;
		return false;
	}
	return vm_alive(s->pid, s->pid_start);
}

/* fds[i] (the caller's, left open) becomes fd 3 + i of the child; every other fd of
 * the daemon is closed in the child. */
int sidecar_spawn(struct sidecar *s, const char *const argv[], const char *log,
		  const int *fds, int nfds, struct k8_err *err)
{
	int pfd[2], logfd, nul;
	char line[1024];
	size_t have = 0;
	uint64_t deadline = now_mono_ns() + 10000000000ull;
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pid = fork();
	if (pid < 0) {
		int e = errno;
		close(pfd[0]);
		close(pfd[1]);
		if (logfd >= 0)
			close(logfd);
		if (nul >= 0)
			close(nul);
		return k8_err_set(err, -e, "fork: %s", strerror(e));
	}
	if (pid == 0) {
		/* Async-signal-safe calls only: the daemon is multi-threaded. */
		sigset_t none;
		setsid();
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(nul, 0);
		dup2(pfd[1], 1);
		dup2(logfd >= 0 ? logfd : nul, 2);
		/* first out of the way (a source may sit where another goes), then in place */
		for (int i = 0; i < nfds && i < 64; i++)
			if (fcntl(fds[i], F_DUPFD, 1024 + i) != 1024 + i)
				_exit(125);
		for (int i = 0; i < nfds && i < 64; i++)
			dup2(1024 + i, 3 + i);
		/* everything above them, however high (a loop to a bound missed the fds
		 * above it: every descriptor of a busy daemon's is another sandbox's or a
		 * client's) */
		if (syscall(SYS_close_range, 3 + nfds, ~0U, 0) < 0)
			_exit(125);
		execv(argv[0], (char *const *)argv);
		static const char msg[] = "error: cannot run the program\n";
		if (write(1, msg, sizeof(msg) - 1) < 0)
			_exit(126);
		_exit(127);
	}
	close(pfd[1]);
	if (logfd >= 0)
		close(logfd);
	if (nul >= 0)
		close(nul);
	s->pid = pid;
	s->child = true;
	s->pid_start = vm_proc_start(pid);
	s->down = false;
	s->why[0] = '\0';
	/* Wait for one line: "ready" or "error: ...". */
	while (have < sizeof(line) - 1 && !memchr(line, '\n', have)) {
		int left = (int)((deadline - now_mono_ns()) / 1000000);
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		if (now_mono_ns() >= deadline || poll(&p, 1, left > 0 ? left : 0) <= 0)
			break;
		ssize_t n = read(pfd[0], line + have, sizeof(line) - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	close(pfd[0]);
	line[have] = '\0';
	line[strcspn(line, "\n")] = '\0';
	if (!strcmp(line, "ready"))
		return 0;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	s->pid = 0;
	s->child = false;
	if (!strncmp(line, "error: ", 7))
		return k8_err_set(err, -EIO, "%s: %s (log: %s)", s->kind, line + 7, log);
	return k8_err_set(err, -EIO, "%s did not start%s (log: %s)", s->kind,
			  have ? "" : " within 10 s", log);
}

static void sidecar_mark_down(struct sidecar *s, const char *why)
{
	pthread_mutex_lock(&s->lock);
	if (!s->down) {
		s->down = true;
		snprintf(s->why, sizeof(s->why), "%s", why);
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void *sidecar_reader(void *arg)
{
	struct sidecar *s = arg;
	char *buf = xmalloc(SIDECAR_LINE_MAX);
	size_t have = 0;
	const char *why = "the control connection closed";

	for (;;) {
		char *nl;
		ssize_t n = read(s->fd, buf + have, SIDECAR_LINE_MAX - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		while ((nl = memchr(buf, '\n', have))) {
			json_t *o = json_loadb(buf, (size_t)(nl - buf), 0, NULL);
			json_t *id = json_object_get(o, "id");
			size_t used = (size_t)(nl - buf) + 1;
			memmove(buf, buf + used, have - used);
			have -= used;
			if (!json_is_object(o)) {
				json_decref(o);
				continue;
			}
			if (json_is_integer(id)) {
				char key[32];
				snprintf(key, sizeof(key), "%lld", (long long)json_integer_value(id));
				pthread_mutex_lock(&s->lock);
				/* Only ids we asked for, and not yet answered, are kept. */
				json_t *slot = json_object_get(s->replies, key);
				if (slot && json_is_null(slot))
					json_object_set(s->replies, key, o);
				pthread_cond_broadcast(&s->cond);
				pthread_mutex_unlock(&s->lock);
			} else if (s->on_event) {
				s->on_event(s->ctx, o);
			}
			json_decref(o);
		}
		if (have == SIDECAR_LINE_MAX) {
			why = "the sidecar sent a line longer than 1 MiB";
			break;
		}
	}
	free(buf);
	sidecar_mark_down(s, why);
	if (s->on_event) {
		json_t *ev = json_pack("{s:s,s:s}", "event", "down", "why", s->why);
		s->on_event(s->ctx, ev);
		json_decref(ev);
	}
	return NULL;
}

int sidecar_connect(struct sidecar *s, const char *path, void (*on_event)(void *, json_t *),
		    void *ctx, struct k8_err *err)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd;

	sidecar_disconnect(s);
	if (strlen(path) >= sizeof(a.sun_path))
		return k8_err_set(err, -ENAMETOOLONG, "socket path too long: %s", path);
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;
		close(fd);
		return k8_err_set(err, -e, "cannot reach %s at %s: %s", s->kind, path, strerror(e));
	}
	/* A sidecar that stops reading must not hold a daemon thread (and the lock it
	 * writes under) for ever: its requests fail instead. */
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	pthread_mutex_lock(&s->lock);
	s->fd = fd;
	s->down = false;
	s->closing = false;
	s->why[0] = '\0';
	s->on_event = on_event;
	s->ctx = ctx;
	if (!s->replies)
		s->replies = json_object();
	pthread_mutex_unlock(&s->lock);
	if (pthread_create(&s->reader, NULL, sidecar_reader, s) != 0) {
		close(fd);
		s->fd = -1;
		return k8_err_set(err, -EAGAIN, "cannot start a thread for %s", s->kind);
	}
	s->reader_running = true;
	return 0;
}

int sidecar_start(struct sidecar *s, const char *const argv[], const char *log,
		  const char *ctl, void (*on_event)(void *, json_t *), void *ctx,
		  struct k8_err *err)
{
	return sidecar_start_fds(s, argv, log, NULL, 0, ctl, on_event, ctx, err);
}

int sidecar_start_fds(struct sidecar *s, const char *const argv[], const char *log,
		      const int *fds, int nfds, const char *ctl,
		      void (*on_event)(void *, json_t *), void *ctx, struct k8_err *err)
{
	int r;

	sidecar_disconnect(s);
	if ((r = sidecar_spawn(s, argv, log, fds, nfds, err)))
		return r;
	if ((r = sidecar_connect(s, ctl, on_event, ctx, err)))
		sidecar_stop(s);
	return r;
}

bool sidecar_connected(const struct sidecar *s)
{
	return s->fd >= 0 && !s->down;
}

int sidecar_request(struct sidecar *s, json_t *req, int timeout_ms, json_t **reply,
		    struct k8_err *err)
{
	return sidecar_request_fd(s, req, -1, timeout_ms, reply, err);
}

/* The first byte of the line carries `fd` (SCM_RIGHTS); the rest follows as usual. */
static int sidecar_send_line(int sock, const char *text, int fd)
{
	char c = text[0];
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (fd < 0)
		return write_full(sock, text, strlen(text));
	memset(&u, 0, sizeof(u));
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		return n < 0 ? -errno : -EIO;
	return write_full(sock, text + 1, strlen(text + 1));
}

int sidecar_request_fd(struct sidecar *s, json_t *req, int fd, int timeout_ms, json_t **reply,
		       struct k8_err *err)
{
	char key[32], *text;
	long long id;
	json_t *got = NULL;
	struct timespec until;
	int r = 0;

	if (reply)
		*reply = NULL;
	pthread_mutex_lock(&s->lock);
	if (s->fd < 0 || s->down) {
		pthread_mutex_unlock(&s->lock);
		json_decref(req);
		return k8_err_set(err, -ENOTCONN, "%s is not running%s%s", s->kind,
				  s->why[0] ? ": " : "", s->why);
	}
	id = ++s->next_id;
	snprintf(key, sizeof(key), "%lld", id);
	json_object_set_new(s->replies, key, json_null());
	json_object_set_new(req, "id", json_integer(id));
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	/* One writer at a time: a line is written whole under the lock (they are short). */
	r = text ? sidecar_send_line(s->fd, text, fd) : -ENOMEM;
	if (!r)
		r = write_full(s->fd, "\n", 1);
	free(text);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while (!r) {
		json_t *slot = json_object_get(s->replies, key);
		if (slot && !json_is_null(slot)) {
			got = json_incref(slot);
			break;
		}
		if (s->down) {
			r = -EPIPE;
			break;
		}
		if (pthread_cond_timedwait(&s->cond, &s->lock, &until) == ETIMEDOUT) {
			r = -ETIMEDOUT;
			break;
		}
	}
	json_object_del(s->replies, key);
	pthread_mutex_unlock(&s->lock);
	if (r == -ETIMEDOUT)
		return k8_err_set(err, r, "%s did not answer within %d ms", s->kind, timeout_ms);
	if (r)
		return k8_err_set(err, r, "%s: %s", s->kind, s->why[0] ? s->why : strerror(-r));
	if (!json_is_true(json_object_get(got, "ok"))) {
		const char *m = json_string_value(json_object_get(got, "error"));
		k8_err_set(err, -EINVAL, "%s", m ? m : "request refused");
		json_decref(got);
		return -EINVAL;
	}
	if (reply)
		*reply = got;
	else
		json_decref(got);
	return 0;
}

void sidecar_disconnect(struct sidecar *s)
{
	s->closing = true;
	if (s->fd >= 0)
		shutdown(s->fd, SHUT_RDWR);
	if (s->reader_running) {
		pthread_join(s->reader, NULL);
		s->reader_running = false;
	}
	pthread_mutex_lock(&s->lock);
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	pthread_mutex_unlock(&s->lock);
}

void sidecar_stop(struct sidecar *s)
{
	sidecar_disconnect(s);
	if (s->pid > 0 && vm_alive(s->pid, s->pid_start)) {
		kill(s->pid, SIGTERM);
		for (int i = 0; i < 50 && vm_alive(s->pid, s->pid_start); i++) {
			if (s->child && waitpid(s->pid, NULL, WNOHANG) == s->pid)
				break;
			usleep(20000);
		}
		if (vm_alive(s->pid, s->pid_start))
			kill(s->pid, SIGKILL);
	}
	if (s->child && s->pid > 0)
		waitpid(s->pid, NULL, 0);
	s->pid = 0;
	s->pid_start = 0;
	s->child = false;
}
