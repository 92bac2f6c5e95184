/* SPDX-License-Identifier: Apache-2.0 */
/* docker_exec.c - exec in a Docker API container: create, start, inspect, resize
 * (docker_exec.h; docs/docker.md "Containers", "Streams").
 *
 * An exec is bridged directly (no log): its stream goes to the client (the hijacked
 * socket, or a 200's pipe), framed without a TTY, and its exit code is recorded before
 * the stream closes (clients inspect right after EOF).
 */
#include "daemon/docker_exec.h"
#include "daemon/docker_int.h"
#include "daemon/broker.h"
#include "common/proto.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- exec ---- */

static void dkx_free(struct dkx *x)
{
	dspec_exec_clear(&x->spec);
	free(x);
}

/* Find an exec by id (full, or a unique prefix); copies it out under the lock. */
static struct dkx *dkx_find_locked(struct docker *dk, const char *id)
{
	struct dkx *x, *hit = NULL;
	size_t n = strlen(id);

	if (!n)
		return NULL;
	for (x = dk->execs; x; x = x->next) {
		if (!strcmp(x->id, id))
			return x;
		if (!strncmp(x->id, id, n)) {
			if (hit)
				return NULL;
			hit = x;
		}
	}
	return hit;
}

int dkx_api_create(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	struct dkx *x, **pp;
	struct dkc *c;
	int r;

	x = xcalloc(1, sizeof(*x));
	x->exit_code = -1;
	if ((r = dspec_exec(call->body, &x->spec, &call->err)) || (r = dkc_find_call(call, &c))) {
		dkx_free(x);
		return r;
	}
	if ((r = dspec_exec_inherit(&x->spec, c->config, &call->err)) ||
	    (r = dn_new_id(x->id))) {
		if (!call->err.code)
			k8_err_set(&call->err, r, "cannot make an exec id");
		dkx_free(x);
		dkc_unref(c);
		return r;
	}
	snprintf(x->ctr, sizeof(x->ctr), "%s", c->id);
	pthread_mutex_lock(&dk->lock);
	if (c->state != DPS_RUNNING) {
		pthread_mutex_unlock(&dk->lock);
		r = k8_err_set(&call->err, -EBUSY, "Container %s is not running", c->id);
		dkx_free(x);
		dkc_unref(c);
		return r;
	}
	x->next = dk->execs;
	dk->execs = x;
	if (++dk->nexecs > DKX_MAX) {
		/* forget the oldest finished exec */
		struct dkx **last = NULL;
		for (pp = &dk->execs; *pp; pp = &(*pp)->next)
			if (!(*pp)->running && *pp != x)
				last = pp;
		if (last) {
			struct dkx *old = *last;
			*last = old->next;
			dkx_free(old);
			dk->nexecs--;
		}
	}
	pthread_mutex_unlock(&dk->lock);
	dkc_unref(c);
	call->status = 201;
	call->out = json_pack("{s:s}", "Id", x->id);
	return 0;
}

struct dkx_run {
	struct daemon *d;
	struct sandbox *sb;
	struct stream *s;
	char id[DN_ID_LEN + 1];
	bool tty, in, out_stdout, out_stderr;
};

static void dkx_run_free(void *ctx)
{
	struct dkx_run *xr = ctx;

	if (xr->s)
		link_stream_close(&xr->sb->link, xr->s);
	if (xr->sb)
		sb_put(xr->d, xr->sb);
	free(xr);
}

static void dkx_finish(struct docker *dk, const char *id, int code)
{
	struct dkx *x;

	pthread_mutex_lock(&dk->lock);
	x = dkx_find_locked(dk, id);
	if (x) {
		x->running = false;
		x->exit_code = code;
	}
	pthread_cond_broadcast(&dk->cond);
	pthread_mutex_unlock(&dk->lock);
}

/* The exec's stream to the client: output framed (raw with a TTY), the client's bytes to
 * its stdin within the agent's window, a half-close ends stdin. The exit code is recorded
 * before the socket closes (clients inspect right after EOF). A client that vanishes
 * gets its process killed: nobody would read its output. out is the hijacked socket, or
 * the pipe of a plain 200 (no stdin then). */
static void dkx_bridge(void *ctx, const struct api_conn *conn)
{
	struct dkx_run *xr = ctx;
	struct agentlink *l = &xr->sb->link;
	struct stream *s = xr->s;
	unsigned char *ibuf = xmalloc(65536);
	size_t ib_have = 0, ib_off = 0;
	int out = conn->fd;
	bool duplex = conn->duplex;
	bool client_eof = !xr->in || !duplex, gone = false, stdin_sent_eof = false;
	json_t *exit_info = NULL;
	struct dkl_reader rd = { .tty = xr->tty };
	int code;

	if (duplex) {
		int fl = fcntl(out, F_GETFL);
		if (fl >= 0)
			fcntl(out, F_SETFL, fl & ~O_NONBLOCK);
		dkl_wait_head_read(out);
	}
	if (xr->in && duplex && conn->extra_len) {
		size_t n = conn->extra_len < 65536 ? conn->extra_len : 65536;
		memcpy(ibuf, conn->extra, n);
		ib_have = n;
	}
	/* Without stdin the process's stdin ends at once; a terminal stays open instead
	 * (the agent would type ^D on it), as in Docker. */
	if (!xr->in) {
		if (!xr->tty)
			link_send(l, PROTO_STDIN, PROTO_F_EOF, s->id, NULL, 0);
		stdin_sent_eof = true;
	}
	for (;;) {
		struct sframe *f;
		struct pollfd pfd[2];
		bool done, broken;

		/* stdin within the window */
		if (ib_off < ib_have) {
			size_t take;
			link_stdin_send(l, s, ibuf + ib_off, ib_have - ib_off, &take);
			ib_off += take;
		}
		if (client_eof && ib_off == ib_have && !stdin_sent_eof) {
			link_send(l, PROTO_STDIN, PROTO_F_EOF, s->id, NULL, 0);
			stdin_sent_eof = true;
		}
		while (!gone && (f = link_stream_pop(l, s))) {
			size_t len = f->len;
			enum ds_type t = f->type == PROTO_STDERR ? DS_STDERR : DS_STDOUT;
			bool want = (f->type == PROTO_STDOUT && xr->out_stdout) ||
				    (f->type == PROTO_STDERR && xr->out_stderr);
			if (len && want && (f->type == PROTO_STDOUT || f->type == PROTO_STDERR) &&
			    dkl_emit(&rd, out, t, 0, f->data, len, false) < 0)
				gone = true;
			free(f);
			if (len)
				link_stream_consumed(l, s, len);
		}
		if (gone)
			break;
		pthread_mutex_lock(&l->lock);
		done = s->exited && !s->head;
		broken = l->broken && !s->exited;
		if (done)
			exit_info = json_incref(s->exit_info);
		pthread_mutex_unlock(&l->lock);
		if (done || broken)
			break;
		bool want_read = !client_eof && ib_off == ib_have;
		pfd[0] = (struct pollfd){ .fd = s->efd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = out, .events = want_read ? POLLIN : 0 };
		if (poll(pfd, duplex ? 2 : 1, ib_off < ib_have ? 20 : 1000) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN) {
			uint64_t v;
			(void)!read(s->efd, &v, sizeof(v));
		}
		if (!duplex) {
			struct pollfd q = { .fd = out, .events = 0 };
			if (poll(&q, 1, 0) > 0 && (q.revents & POLLERR)) {
				gone = true;
				break;
			}
			continue;
		}
		if (want_read && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t got = read(out, ibuf, 65536);
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got < 0) {
				gone = true;
				break;
			}
			if (got == 0) {
				client_eof = true;      /* half-close: stdin ends */
				continue;
			}
			ib_have = (size_t)got;
			ib_off = 0;
		} else if (client_eof && (pfd[1].revents & (POLLHUP | POLLERR))) {
			gone = true;
			break;
		}
	}
	if (gone && !exit_info) {
		unsigned char sig[4] = { SIGKILL, 0, 0, 0 };
		link_send(l, PROTO_SIGNAL, 0, s->id, sig, 4);
	}
	code = exit_info ? (int)json_integer_value(json_object_get(exit_info, "code")) : 137;
	dkx_finish(docker_of(xr->d), xr->id, code);
	json_decref(exit_info);
	if (duplex)
		shutdown(out, SHUT_WR);
	free(ibuf);
}

/* A detached exec: its output is read and dropped; its exit code recorded. */
static void *dkx_detached_thread(void *arg)
{
	struct dkx_run *xr = arg;
	struct api_conn conn = { .fd = open("/dev/null", O_WRONLY | O_CLOEXEC) };

	xr->in = false;
	dkx_bridge(xr, &conn);
	if (conn.fd >= 0)
		close(conn.fd);
	dkx_run_free(xr);
	return NULL;
}

int dkx_api_start(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	const char *id = api_param(call, "id");
	bool detach = json_is_true(json_object_get(call->body, "Detach"));
	struct dkx_run *xr;
	struct dspec_exec spec;
	struct dkx *x;
	struct dkc *c;
	json_t *req = NULL, *resp = NULL, *benv;
	char ctr[DN_ID_LEN + 1];
	int r;

	pthread_mutex_lock(&dk->lock);
	x = dkx_find_locked(dk, id);
	if (!x) {
		pthread_mutex_unlock(&dk->lock);
		return k8_err_set(&call->err, -ENOENT, "No such exec instance: %.100s", id);
	}
	if (x->started) {
		pthread_mutex_unlock(&dk->lock);
		return k8_err_set(&call->err, -EBUSY, "Error: Exec command %s is already running",
				  x->id);
	}
	x->started = true;
	x->running = true;
	snprintf(ctr, sizeof(ctr), "%s", x->ctr);
	xr = xcalloc(1, sizeof(*xr));
	xr->d = call->d;
	snprintf(xr->id, sizeof(xr->id), "%s", x->id);
	xr->tty = x->spec.tty || json_is_true(json_object_get(call->body, "Tty"));
	xr->in = x->spec.attach_stdin;
	xr->out_stdout = x->spec.attach_stdout || !x->spec.attach_stderr;
	xr->out_stderr = x->spec.attach_stderr || !x->spec.attach_stdout;
	spec = x->spec;                 /* its json_t: kept alive by the record's reference */
	json_incref(spec.cmd);
	json_incref(spec.env);
	pthread_mutex_unlock(&dk->lock);

	c = dkc_find(call->d, ctr, &call->err);
	if (!c) {
		r = call->err.code;
		goto fail;
	}
	xr->sb = sb_get(call->d, c->sandbox, &call->err);
	if (!xr->sb) {
		r = -ENOENT;
		dkc_unref(c);
		goto fail;
	}
	/* as for the container's run: the broker's variables under the exec's Env */
	benv = broker_env(xr->sb);
	req = dspec_exec_request(&spec, c->agent_id, benv, detach, xr->tty);
	json_decref(benv);
	json_decref(spec.cmd);
	json_decref(spec.env);
	spec.cmd = spec.env = NULL;
	/* the request is taken by the call: keep ours for the audit record below */
	r = sb_agent_request(xr->sb, json_incref(req), DKC_START_TIMEOUT_MS, &resp, &xr->s,
			     &call->err);
	if (r) {
		dkr_tty_refused(&call->err);
		if (call->err.code == -ENOSYS) {
			dkc_unref(c);
			dkx_finish(docker_of(xr->d), xr->id, 126);
			json_decref(req);
			dkx_run_free(xr);
			return call->err.code;
		}
		int code = r == -ENOENT ? 127 : (r == -EACCES || r == -ENOEXEC) ? 126 : 125;
		dkc_unref(c);
		dkx_finish(docker_of(xr->d), xr->id, code);
		/* moby's wording for a command that does not start */
		char msg[sizeof(call->err.msg)];
		snprintf(msg, sizeof(msg), "%s", call->err.msg);
		k8_err_clear(&call->err);
		k8_err_set(&call->err, r == -ENOENT ? -ENOENT : -EINVAL, "OCI runtime exec failed: "
			   "%s", msg);
		json_decref(req);
		dkx_run_free(xr);
		return call->err.code;
	}
	pthread_mutex_lock(&dk->lock);
	if ((x = dkx_find_locked(dk, xr->id))) {
		x->pid = (int)json_integer_value(json_object_get(resp, "pid"));
		x->stream_id = xr->s->id;
		snprintf(x->sandbox, sizeof(x->sandbox), "%s", c->sandbox);
	}
	pthread_mutex_unlock(&dk->lock);
	daemon_audit(call->d, "container.exec", c->sandbox,
		     json_pack("{s:s,s:s,s:s,s:O}", "via", "docker", "id", c->id, "exec", xr->id,
			       "argv", json_object_get(req, "argv")));
	dkc_unref(c);
	json_decref(req);
	json_decref(resp);
	if (detach) {
		pthread_attr_t attr;
		pthread_t t;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, dkx_detached_thread, xr) != 0)
			dkx_run_free(xr);
		pthread_attr_destroy(&attr);
		return 0;
	}
	return api_reply_raw(call, API_RAW_HIJACK, xr->tty ? "application/vnd.docker.raw-stream" :
			     "application/vnd.docker.multiplexed-stream", dkx_bridge,
			     dkx_run_free, xr);
fail:
	json_decref(spec.cmd);
	json_decref(spec.env);
	json_decref(req);
	dkx_finish(docker_of(xr->d), xr->id, 126);
	dkx_run_free(xr);
	return r;
}

int dkx_api_inspect(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	struct dkx *x;
	json_t *args;

	pthread_mutex_lock(&dk->lock);
	x = dkx_find_locked(dk, api_param(call, "id"));
	if (!x) {
		pthread_mutex_unlock(&dk->lock);
		return k8_err_set(&call->err, -ENOENT, "No such exec instance: %.100s",
				  api_param(call, "id"));
	}
	args = json_array();
	for (size_t i = 1; i < json_array_size(x->spec.cmd); i++)
		json_array_append(args, json_array_get(x->spec.cmd, i));
	call->out = json_pack("{s:s,s:b,s:o,s:b,s:b,s:b,s:s,s:s,s:i,s:b,s:{s:s,s:o,s:b,s:s,s:b}}",
			      "ID", x->id, "Running", x->running, "ExitCode",
			      x->exit_code >= 0 ? json_integer(x->exit_code) : json_null(),
			      "OpenStdin", x->spec.attach_stdin, "OpenStdout", x->spec.attach_stdout,
			      "OpenStderr", x->spec.attach_stderr, "ContainerID", x->ctr,
			      "DetachKeys", "",
			      "Pid", x->pid, "CanRemove", false, "ProcessConfig", "entrypoint",
			      json_string_value(json_array_get(x->spec.cmd, 0)) ?: "", "arguments",
			      args, "tty", x->spec.tty, "user", x->spec.user, "privileged", false);
	pthread_mutex_unlock(&dk->lock);
	return 0;
}

/* An exec's tty size: kept for its start when it has not started (the docker CLI may
 * resize first), else set on its pty in the guest. */
int dkx_api_resize(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	char sandbox[64], agent_id[13] = "";
	unsigned rows, cols;
	uint32_t stream = 0;
	struct dkx *x;
	struct dkc *c;
	int r;

	if ((r = dkr_query_hw(call, &rows, &cols)))
		return r;
	pthread_mutex_lock(&dk->lock);
	x = dkx_find_locked(dk, api_param(call, "id"));
	if (!x) {
		pthread_mutex_unlock(&dk->lock);
		return k8_err_set(&call->err, -ENOENT, "No such exec instance: %.100s",
				  api_param(call, "id"));
	}
	if (!x->started) {
		x->spec.rows = rows;
		x->spec.cols = cols;
	} else if (x->spec.tty && x->running && x->stream_id) {
		stream = x->stream_id;
		snprintf(sandbox, sizeof(sandbox), "%s", x->sandbox);
		for (c = dk->ctrs; c; c = c->next)
			if (!strcmp(c->id, x->ctr))
				snprintf(agent_id, sizeof(agent_id), "%s", c->agent_id);
	}
	pthread_mutex_unlock(&dk->lock);
	if (!stream || !agent_id[0])
		return 0;
	r = dkr_resize_agent(call->d, sandbox, agent_id, stream, rows, cols, &call->err);
	if (r == -ESRCH || r == -ENOENT) {      /* it exited meanwhile */
		k8_err_clear(&call->err);
		return 0;
	}
	return r;
}
