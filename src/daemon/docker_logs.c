/* SPDX-License-Identifier: Apache-2.0 */
/* docker_logs.c - logs and attach: a container's log read back to its followers
 * (docker_logs.h; docs/docker.md "Containers", "Streams").
 *
 * Followers (attach, logs -f) register an eventfd the pump writes to on new output and on
 * exit, and read the log file from where they are. Attach's stdin is the write end of the
 * container's stdin pipe: a client's half-close closes it, the pump sees EOF and closes
 * the process's stdin, and output keeps flowing until the process exits.
 */
#include "daemon/docker_logs.h"
#include "daemon/docker_int.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- reading the log: logs and attach ---- */

/* Write one piece to the client: framed unless TTY, with the timestamp before a line's
 * first byte when asked. -1 when the client is gone. */
int dkl_emit(struct dkl_reader *rd, int out, enum ds_type type, int64_t ts,
		    const unsigned char *p, size_t n, bool line_start)
{
	char tsb[48] = "";
	size_t tl = 0;
	uint8_t hdr[DS_HDR_LEN];

	if (rd->timestamps && line_start) {
		ds_rfc3339(ts / 1000000000, (int32_t)(ts % 1000000000), tsb);
		tl = strlen(tsb);
		tsb[tl++] = ' ';
	}
	if (!rd->tty) {
		ds_header(hdr, type, (uint32_t)(n + tl));
		if (write_full(out, hdr, sizeof(hdr)) < 0)
			return -1;
	}
	if ((tl && write_full(out, tsb, tl) < 0) || write_full(out, p, n) < 0)
		return -1;
	return 0;
}

/* One record's payload through the reader's rules. */
static int dkl_record(struct dkl_reader *rd, int out, enum ds_type type, int64_t ts,
		      const unsigned char *p, size_t n)
{
	if (!(rd->mask & (1u << type)))
		return 0;
	if ((rd->since_ns && ts < rd->since_ns) || (rd->until_ns && ts > rd->until_ns))
		return 0;
	if (!rd->lines)
		return rd->counting ? 0 : dkl_emit(rd, out, type, ts, p, n, false);
	while (n) {
		const unsigned char *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) + 1 : n;
		bool start = rd->at_start[type];

		if (start)
			rd->line_no++;
		rd->at_start[type] = nl != NULL;
		if (!rd->counting && rd->line_no > rd->skip_lines &&
		    dkl_emit(rd, out, type, ts, p, k, start) < 0)
			return -1;
		p += k;
		n -= k;
	}
	return 0;
}

/* Send the log's records from *off up to end; *off moves past what was read. -1 when
 * the client is gone. A torn record at the end waits for the next round. */
static int dkl_send_log(struct dkl_reader *rd, int logfd, uint64_t *off, uint64_t end, int out)
{
	unsigned char hdr[DKC_REC_HDR];
	unsigned char *buf = NULL;
	size_t cap = 0;
	int r = 0;

	while (*off + DKC_REC_HDR <= end) {
		uint32_t len;
		int64_t ts = 0;
		if (pread(logfd, hdr, sizeof(hdr), (off_t)*off) != (ssize_t)sizeof(hdr))
			break;
		len = (uint32_t)hdr[4] << 24 | (uint32_t)hdr[5] << 16 | (uint32_t)hdr[6] << 8 | hdr[7];
		if (len > DKC_LOG_MAX || (hdr[0] != DS_STDOUT && hdr[0] != DS_STDERR)) {
			*off = end;     /* not ours: stop reading this log */
			break;
		}
		if (*off + DKC_REC_HDR + len > end)
			break;
		for (int i = 0; i < 8; i++)
			ts = (int64_t)((uint64_t)ts << 8 | hdr[8 + i]);
		if (len > cap) {
			free(buf);
			cap = len;
			buf = xmalloc(cap);
		}
		if (len && pread(logfd, buf, len, (off_t)(*off + DKC_REC_HDR)) != (ssize_t)len)
			break;
		*off += DKC_REC_HDR + len;
		if (dkl_record(rd, out, (enum ds_type)hdr[0], ts, buf, len) < 0) {
			r = -1;
			break;
		}
	}
	free(buf);
	return r;
}

static int dkl_open_log(struct dkc *c)
{
	char path[4400];
	snprintf(path, sizeof(path), "%s/log", c->dir);
	return open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

/* After a 101: wait (up to 2 s) until the client has read the response head. docker-py
 * reads the head through a buffered reader and then the stream from the raw socket:
 * stream bytes that arrive with the head are swallowed by that buffer and lost. On a
 * unix socket SIOCOUTQ counts the bytes the peer has not read yet. */
void dkl_wait_head_read(int sock)
{
	for (int i = 0; i < 2000; i++) {
		int n = 0;
		if (ioctl(sock, SIOCOUTQ, &n) < 0 || n <= 0)
			return;
		usleep(1000);
	}
}

struct dkl_follow {
	struct dkc *c;
	struct dkl_reader rd;
	bool logs, stream, in;          /* attach: replay the log, follow it, take stdin */
	bool follow;                    /* logs: follow */
	bool is_attach;
	unsigned exits0;
	bool done_at_start;             /* attach to a container that is not going to run */
	uint64_t start_off;
};

static void dkl_follow_free(void *ctx)
{
	struct dkl_follow *f = ctx;
	dkc_unref(f->c);
	free(f);
}

/* Client bytes for the container's stdin (attach). */
static void dkl_stdin_write(struct dkc *c, const void *p, size_t n)
{
	struct docker *dk = c->dk;
	int fd;

	pthread_mutex_lock(&dk->lock);
	fd = c->stdin_w >= 0 ? fcntl(c->stdin_w, F_DUPFD_CLOEXEC, 0) : -1;
	pthread_mutex_unlock(&dk->lock);
	if (fd < 0)
		return;
	(void)!write_full(fd, p, n);    /* EPIPE: the process is gone; the bytes too */
	close(fd);
}

static void dkl_stdin_close(struct dkc *c)
{
	struct docker *dk = c->dk;
	pthread_mutex_lock(&dk->lock);
	if (c->stdin_w >= 0)
		close(c->stdin_w);
	c->stdin_w = -1;
	pthread_mutex_unlock(&dk->lock);
}

/* The body of logs (a pipe) and of attach (the hijacked socket when the client asked to
 * upgrade, else a pipe: output only). */
static void dkl_follow_body(void *ctx, const struct api_conn *conn)
{
	struct docker *dk = ((struct dkl_follow *)ctx)->c->dk;
	struct dkl_follow *f = ctx;
	struct dkc *c = f->c;
	int logfd = dkl_open_log(c), wfd = -1, out = conn->fd;
	uint64_t off = 0, end;
	bool duplex = conn->duplex, client_eof = !f->in || !duplex, gone = false;
	unsigned char *ibuf = NULL;

	if (duplex) {
		int fl = fcntl(out, F_GETFL);
		if (fl >= 0)
			fcntl(out, F_SETFL, fl & ~O_NONBLOCK);
		if (f->in && conn->extra_len)
			dkl_stdin_write(c, conn->extra, conn->extra_len);
		ibuf = xmalloc(65536);
		dkl_wait_head_read(out);
	}
	if (f->stream || f->follow)
		wfd = dkc_waiter_add(c);
	pthread_mutex_lock(&dk->lock);
	end = c->log_size;
	pthread_mutex_unlock(&dk->lock);
	if (f->rd.skip_lines && logfd >= 0) {
		/* tail: count the lines first, then leave out all but the last N */
		uint64_t o2 = 0, want = f->rd.skip_lines;
		f->rd.counting = true;
		dkl_send_log(&f->rd, logfd, &o2, end, out);
		f->rd.counting = false;
		f->rd.skip_lines = f->rd.line_no > want ? f->rd.line_no - want : 0;
		f->rd.line_no = 0;
		memset(f->rd.at_start, 1, sizeof(f->rd.at_start));
	}
	if (!f->logs)
		off = f->start_off;
	if (logfd >= 0 && dkl_send_log(&f->rd, logfd, &off, end, out) < 0)
		gone = true;
	while (!gone && (f->stream || f->follow) && wfd >= 0) {
		struct pollfd pfd[2];
		bool fin;

		pthread_mutex_lock(&dk->lock);
		end = c->log_size;
		if (f->is_attach)
			fin = f->done_at_start || c->exits > f->exits0 || c->removed;
		else
			fin = (c->state != DPS_RUNNING && !c->pumping) || c->removed;
		pthread_mutex_unlock(&dk->lock);
		if (logfd < 0)
			logfd = dkl_open_log(c);
		if (logfd >= 0 && dkl_send_log(&f->rd, logfd, &off, end, out) < 0)
			break;
		if (fin && off >= end)
			break;
		pfd[0] = (struct pollfd){ .fd = wfd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = out, .events = client_eof ? 0 : POLLIN };
		if (poll(pfd, duplex ? 2 : 1, 1000) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN) {
			uint64_t v;
			(void)!read(wfd, &v, sizeof(v));
		}
		if (!duplex) {
			/* a pipe: a client that left shows as an error on it */
			struct pollfd q = { .fd = out, .events = 0 };
			if (poll(&q, 1, 0) > 0 && (q.revents & POLLERR))
				break;
			continue;
		}
		if (!client_eof && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t got = read(out, ibuf, 65536);
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got < 0) {
				gone = true;
				break;
			}
			if (got == 0) {
				/* half-close: stdin ends, output goes on */
				client_eof = true;
				if (f->in)
					dkl_stdin_close(c);
				continue;
			}
			if (f->in)
				dkl_stdin_write(c, ibuf, (size_t)got);
		} else if (client_eof && (pfd[1].revents & (POLLHUP | POLLERR))) {
			break;          /* both directions closed: the client is gone */
		}
	}
	if (duplex && f->in && json_is_true(json_object_get(c->config, "StdinOnce")))
		dkl_stdin_close(c);
	if (wfd >= 0)
		dkc_waiter_del(c, wfd);
	if (logfd >= 0)
		close(logfd);
	if (duplex)
		shutdown(out, SHUT_WR);
	free(ibuf);
}

int dkl_api_logs(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	char tbuf[32], sbuf[48], ubuf[48];
	const char *tail = NULL, *since = NULL, *until = NULL;
	struct dkl_follow *f;
	struct dkc *c;
	int64_t sec;
	int32_t nsec;
	int r;

	if ((r = api_query_str(call, "tail", tbuf, sizeof(tbuf), &tail)) ||
	    (r = api_query_str(call, "since", sbuf, sizeof(sbuf), &since)) ||
	    (r = api_query_str(call, "until", ubuf, sizeof(ubuf), &until)))
		return r;
	if ((r = dkc_find_call(call, &c)))
		return r;
	f = xcalloc(1, sizeof(*f));
	f->c = c;
	f->logs = true;
	f->follow = dk_qbool(call, "follow", false);
	f->rd.tty = dkc_tty(c);
	f->rd.timestamps = dk_qbool(call, "timestamps", false);
	if (dk_qbool(call, "stdout", false))
		f->rd.mask |= 1u << DS_STDOUT;
	if (dk_qbool(call, "stderr", false))
		f->rd.mask |= 1u << DS_STDERR;
	memset(f->rd.at_start, 1, sizeof(f->rd.at_start));
	if (tail && strcmp(tail, "all")) {
		char *e;
		unsigned long long n = strtoull(tail, &e, 10);
		if (*e || *tail == '-' || n > 1000000000ull) {
			dkl_follow_free(f);
			return k8_err_set(&call->err, -EINVAL, "tail must be a number or all");
		}
		f->rd.skip_lines = n ? n : 0;
		if (!n)
			f->rd.mask = 0;         /* tail=0: nothing from the past */
		f->rd.lines = true;
	}
	if (f->rd.timestamps)
		f->rd.lines = true;
	/* since/until: seconds, with an optional fraction (moby's form) or RFC 3339 */
	if (since && strcmp(since, "0")) {
		if (ds_parse_rfc3339(since, &sec, &nsec) == 0)
			f->rd.since_ns = sec * 1000000000 + nsec;
		else
			f->rd.since_ns = (int64_t)(strtod(since, NULL) * 1e9);
	}
	if (until && strcmp(until, "0")) {
		if (ds_parse_rfc3339(until, &sec, &nsec) == 0)
			f->rd.until_ns = sec * 1000000000 + nsec;
		else
			f->rd.until_ns = (int64_t)(strtod(until, NULL) * 1e9);
	}
	if (f->rd.mask == 0 && tail && !strcmp(tail, "0")) {
		/* tail=0 with follow: only what comes from now on */
		f->rd.mask = 0;
		if (dk_qbool(call, "stdout", false))
			f->rd.mask |= 1u << DS_STDOUT;
		if (dk_qbool(call, "stderr", false))
			f->rd.mask |= 1u << DS_STDERR;
		f->logs = false;
		f->rd.lines = f->rd.timestamps;
		pthread_mutex_lock(&dk->lock);
		f->start_off = c->log_size;
		pthread_mutex_unlock(&dk->lock);
	}
	return api_reply_raw(call, API_RAW_BODY, f->rd.tty ? "application/vnd.docker.raw-stream" :
			     "application/vnd.docker.multiplexed-stream", dkl_follow_body,
			     dkl_follow_free, f);
}

int dkl_api_attach(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	struct dkl_follow *f;
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	f = xcalloc(1, sizeof(*f));
	f->c = c;
	f->is_attach = true;
	f->logs = dk_qbool(call, "logs", false);
	f->stream = dk_qbool(call, "stream", false);
	f->in = dk_qbool(call, "stdin", false) && json_is_true(json_object_get(c->config, "OpenStdin"));
	f->rd.tty = dkc_tty(c);
	if (dk_qbool(call, "stdout", false))
		f->rd.mask |= 1u << DS_STDOUT;
	if (dk_qbool(call, "stderr", false))
		f->rd.mask |= 1u << DS_STDERR;
	memset(f->rd.at_start, 1, sizeof(f->rd.at_start));
	pthread_mutex_lock(&dk->lock);
	f->exits0 = c->exits;
	f->start_off = c->log_size;
	pthread_mutex_unlock(&dk->lock);
	return api_reply_raw(call, API_RAW_HIJACK, f->rd.tty ? "application/vnd.docker.raw-stream" :
			     "application/vnd.docker.multiplexed-stream", dkl_follow_body,
			     dkl_follow_free, f);
}
