/* SPDX-License-Identifier: Apache-2.0 */
/* qmp.c - a small synchronous QMP client: one command at a time, events skipped.
 *
 * QEMU is trusted less than the daemon but more than the guest; still, every line is
 * bounded (1 MiB) and every read has a deadline, so a QEMU that hangs or babbles cannot
 * hang or grow the daemon.
 */
#include "daemon/qmp.h"

#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#define QMP_LINE_MAX (1u << 20)

static int qmp_read_line(struct qmp *q, json_t **out, uint64_t deadline, struct k8_err *err)
{
	for (;;) {
		char *nl = q->have ? memchr(q->buf, '\n', q->have) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - q->buf);
			json_error_t je;
			json_t *v = json_loadb(q->buf, n, 0, &je);
			memmove(q->buf, nl + 1, q->have - n - 1);
			q->have -= n + 1;
			if (!v)
				return k8_err_set(err, -EPROTO, "QMP: unparsable line: %s", je.text);
			*out = v;
			return 0;
		}
		if (q->have >= QMP_LINE_MAX)
			return k8_err_set(err, -EPROTO, "QMP: line longer than %u bytes", QMP_LINE_MAX);
		uint64_t now = now_mono_ns();
		if (now >= deadline)
			return k8_err_set(err, -ETIMEDOUT, "QMP: QEMU did not answer in time");
		struct pollfd pfd = { .fd = q->fd, .events = POLLIN };
		int r = poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1);
		if (r < 0 && errno != EINTR)
			return k8_err_set(err, -errno, "QMP: poll: %s", strerror(errno));
		if (r <= 0)
			continue;
		ssize_t got = read(q->fd, q->buf + q->have, QMP_LINE_MAX - q->have);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0)
			return k8_err_set(err, -ECONNRESET, "QMP: QEMU closed its monitor (did it exit?)");
		q->have += (size_t)got;
	}
}

int qmp_connect(struct qmp *q, const char *path, int timeout_ms, struct k8_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t t0 = now_mono_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000ull;
	json_t *greet = NULL;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return k8_err_set(err, -ENAMETOOLONG, "socket path too long: %s", path);
	strcpy(sa.sun_path, path);
	pthread_mutex_init(&q->lock, NULL);
	q->buf = xmalloc(QMP_LINE_MAX);
	q->have = 0;
	for (;;) {
		q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (q->fd < 0)
			return k8_err_set(err, -errno, "socket: %s", strerror(errno));
		if (connect(q->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		r = -errno;
		close(q->fd);
		q->fd = -1;
		if (now_mono_ns() >= deadline)
			return k8_err_set(err, r, "QMP: cannot connect to %s: %s", path, strerror(-r));
		/* A starting QEMU listens within tens of milliseconds: looked for every
		 * millisecond the first second (at 10 ms, 5 ms of each start were lost) */
		usleep(now_mono_ns() - t0 < 1000000000ull ? 1000 : 10000);
	}
	r = qmp_read_line(q, &greet, deadline, err);
	if (r < 0)
		goto fail;
	if (!json_object_get(greet, "QMP")) {
		json_decref(greet);
		r = k8_err_set(err, -EPROTO, "QMP: no greeting from QEMU");
		goto fail;
	}
	json_decref(greet);
	r = qmp_exec(q, "qmp_capabilities", NULL, NULL, timeout_ms, err);
	if (r < 0)
		goto fail;
	return 0;
fail:
	qmp_close(q);
	return r;
}

void qmp_close(struct qmp *q)
{
	if (q->fd >= 0)
		close(q->fd);
	q->fd = -1;
	free(q->buf);
	q->buf = NULL;
}

/* Write one command line, with `fd` attached (SCM_RIGHTS) when it is >= 0. */
static int qmp_send_line(struct qmp *q, const char *line, int fd)
{
	struct iovec iov = { .iov_base = (void *)line, .iov_len = strlen(line) };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (fd < 0)
		return write_full(q->fd, line, strlen(line));
	memset(&u, 0, sizeof(u));
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	do
		n = sendmsg(q->fd, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if ((size_t)n < iov.iov_len)
		return write_full(q->fd, line + n, iov.iov_len - (size_t)n);
	return 0;
}

int qmp_exec(struct qmp *q, const char *cmd, json_t *args, json_t **ret, int timeout_ms,
	     struct k8_err *err)
{
	return qmp_exec_fd(q, cmd, args, -1, ret, timeout_ms, err);
}

int qmp_exec_fd(struct qmp *q, const char *cmd, json_t *args, int fd, json_t **ret,
		int timeout_ms, struct k8_err *err)
{
	uint64_t deadline = now_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
	json_t *req = json_pack("{s:s}", "execute", cmd);
	char *line;
	int r;

	if (args)
		json_object_set_new(req, "arguments", args);
	{
		char *t = json_dumps(req, JSON_COMPACT);
		line = xasprintf("%s\n", t ? t : "{}");
		free(t);
	}
	json_decref(req);
	pthread_mutex_lock(&q->lock);
	if (q->fd < 0) {
		pthread_mutex_unlock(&q->lock);
		free(line);
		return k8_err_set(err, -ENOTCONN, "QMP: not connected");
	}
	r = qmp_send_line(q, line, fd);
	free(line);
	if (r) {
		pthread_mutex_unlock(&q->lock);
		return k8_err_set(err, r, "QMP: write: %s", strerror(-r));
	}
	for (;;) {
		json_t *v = NULL;
		r = qmp_read_line(q, &v, deadline, err);
		if (r < 0)
			break;
		if (json_object_get(v, "event")) {
			json_decref(v);
			continue;
		}
		json_t *e = json_object_get(v, "error");
		if (e) {
			r = k8_err_set(err, -EIO, "QEMU refused %s: %s", cmd,
				       json_string_value(json_object_get(e, "desc")) ?: "(no description)");
			json_decref(v);
			break;
		}
		if (ret) {
			*ret = json_incref(json_object_get(v, "return"));
		}
		json_decref(v);
		r = 0;
		break;
	}
	pthread_mutex_unlock(&q->lock);
	return r;
}
