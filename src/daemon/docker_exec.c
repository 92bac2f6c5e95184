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

/* The exec the route's {id} names in *xp, with dk->lock held; moby's 404 (the lock
 * released) when there is none. */
static int dkx_lock_find(struct api_call *call, struct docker *dk, struct dkx **xp)
{
	pthread_mutex_lock(&dk->lock);
	*xp = dkx_find_locked(dk, api_param(call, "id"));
	if (*xp)
		return 0;
	pthread_mutex_unlock(&dk->lock);
	return k8_err_set(&call->err, -ENOENT, "No such exec instance: %.100s",
			  api_param(call, "id"));
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

/* The exec's client, for link_stream_run: where its output goes, where its stdin comes
 * from (the hijacked socket, and the bytes read with the request). */
struct dkx_client {
	struct dkx_run *xr;
	struct dkl_reader rd;
	int out;
	const char *extra;
	size_t extra_len;
};

/* Output framed (raw with a TTY), the streams the exec attached only. */
static int dkx_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
		      size_t n)
{
	struct dkx_client *k = ctx;
	bool want = (type == PROTO_STDOUT && k->xr->out_stdout) ||
		    (type == PROTO_STDERR && k->xr->out_stderr);

	(void)flags;
	if (!n || !want)
		return 0;
	return dkl_emit(&k->rd, k->out, type == PROTO_STDERR ? DS_STDERR : DS_STDOUT, 0, p, n,
			false) < 0 ? -1 : 0;
}

/* The client's bytes to its stdin, those read with the request first; a half-close ends
 * stdin (output goes on), an error means the client is gone. */
static ssize_t dkx_input(void *ctx, unsigned char *buf, size_t max, unsigned *flags)
{
	struct dkx_client *k = ctx;
	ssize_t got;

	if (k->extra) {
		size_t n = k->extra_len < max ? k->extra_len : max;
		memcpy(buf, k->extra, n);
		k->extra = NULL;
		return (ssize_t)n;
	}
	got = read(k->out, buf, max);
	if (got < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (got == 0)
		*flags |= STREAM_IN_EOF;
	return got;
}

/* The exec's stream to the client (link_stream_run). Its exit code is recorded before
 * the socket closes (clients inspect right after EOF): the process's, LINK_LOST_EXIT when
 * the VM or agent went away, 137 when the client vanished and the process was killed
 * (nobody would read its output). out is the hijacked socket, or the pipe of a plain
 * 200 (no stdin then). */
static void dkx_bridge(void *ctx, const struct api_conn *conn)
{
	struct dkx_run *xr = ctx;
	struct agentlink *l = &xr->sb->link;
	struct dkx_client k = { .xr = xr, .rd = { .tty = xr->tty }, .out = conn->fd };
	bool in = xr->in && conn->duplex;
	struct stream_ops ops = { .output = dkx_output, .input = in ? dkx_input : NULL,
				  .input_fd = in ? conn->fd : -1, .gone_fd = conn->fd };
	json_t *exit_info = NULL;
	int r;

	if (conn->duplex) {
		int fl = fcntl(conn->fd, F_GETFL);
		if (fl >= 0)
			fcntl(conn->fd, F_SETFL, fl & ~O_NONBLOCK);
		dkl_wait_head_read(conn->fd);
	}
	if (in && conn->extra_len) {
		k.extra = conn->extra;
		k.extra_len = conn->extra_len;
	}
	/* Without stdin the process's stdin ends at once; a terminal stays open instead
	 * (the agent would type ^D on it), as in Docker. Stdin asked for on a 200 (no socket
	 * to read it from) ends at once too. */
	if ((!xr->in && !xr->tty) || (xr->in && !conn->duplex))
		link_stream_eof(l, xr->s);
	r = link_stream_run(l, xr->s, &ops, &k, &exit_info);
	dkx_finish(docker_of(xr->d), xr->id, r == -EPIPE ? 137 :
		   (int)json_integer_value(json_object_get(exit_info, "code")));
	json_decref(exit_info);
	if (conn->duplex)
		shutdown(conn->fd, SHUT_WR);
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
	bool detach = json_is_true(json_object_get(call->body, "Detach"));
	struct dkx_run *xr;
	struct dspec_exec spec;
	struct dkx *x;
	struct dkc *c;
	json_t *req = NULL, *resp = NULL, *benv;
	char ctr[DN_ID_LEN + 1];
	int r;

	if ((r = dkx_lock_find(call, dk, &x)))
		return r;
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
		x->stream_id = link_stream_id(xr->s);
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
	int r;

	if ((r = dkx_lock_find(call, dk, &x)))
		return r;
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
	if ((r = dkx_lock_find(call, dk, &x)))
		return r;
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
