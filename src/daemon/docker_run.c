/* SPDX-License-Identifier: Apache-2.0 */
/* docker_run.c - a Docker API container's run: start, stop, kill, restart, wait, resize,
 * and the pump (docker_run.h; docs/docker.md "Containers").
 *
 * `start` asks the agent for a `run` with a stream (src/docker/spec.c builds it), and a
 * pump thread owns that stream for the container's whole life: it appends every output
 * chunk to the container's log file (docker_int.h), returns the credit at once (so the
 * process never waits for a client), forwards stdin from a pipe within the agent's stdin
 * window, and records the exit. Everything a client reads (attach, logs: docker_logs.c)
 * is read from that file, so output is kept from the moment the process starts. The log
 * is capped (DKC_LOG_MAX); past the cap output is dropped and a note is written once.
 * `wait` sleeps on the state's condition variable. Clients never block the pump.
 */
#include "daemon/docker_run.h"
#include "daemon/docker_int.h"
#include "daemon/broker.h"
#include "daemon/docker_engine.h"
#include "daemon/ports.h"
#include "daemon/slots.h"
#include "image/image.h"
#include "common/guest.h"
#include "common/proto.h"

#include <ctype.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the pump: one thread per running container, owner of its agent stream ---- */

static void dkr_ports_down(struct daemon *d, struct sandbox *sb, struct dkc *c);

struct dkr_pump {
	struct daemon *d;
	struct dkc *c;
	struct sandbox *sb;
	struct stream *s;
	int stdin_r;                    /* -1: no stdin (or it ended) */
	int logfd;
};

/* Append one output chunk to the log (caller holds no lock; only the pump writes). */
static void dkr_log_append(struct dkr_pump *p, uint16_t type, const void *data, size_t len)
{
	struct docker *dk = p->c->dk;
	struct dkc *c = p->c;
	unsigned char hdr[DKC_REC_HDR];
	uint64_t ts = (uint64_t)dk_now_ns();
	bool full;

	pthread_mutex_lock(&dk->lock);
	full = c->log_full;
	if (!full && c->log_size + len + 2 * DKC_REC_HDR + 64 > DKC_LOG_MAX)
		c->log_full = true;
	pthread_mutex_unlock(&dk->lock);
	if (full)
		return;
	if (c->log_full) {
		static const char note[] = "kosa8: the container's log reached its cap; "
					   "further output is dropped\n";
		type = PROTO_STDERR;
		data = note;
		len = sizeof(note) - 1;
	}
	ds_header(hdr, type == PROTO_STDERR ? DS_STDERR : DS_STDOUT, (uint32_t)len);
	for (int i = 0; i < 8; i++)
		hdr[8 + i] = (unsigned char)(ts >> (56 - 8 * i));
	if (write_full(p->logfd, hdr, sizeof(hdr)) < 0 || write_full(p->logfd, data, len) < 0)
		return;
	pthread_mutex_lock(&dk->lock);
	c->log_size += sizeof(hdr) + len;
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk->lock);
}

/* The pump's sink: every output chunk into the log; the credit goes back at once. */
static int dkr_pump_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
			   size_t n)
{
	(void)flags;
	if (n && (type == PROTO_STDOUT || type == PROTO_STDERR))
		dkr_log_append(ctx, type, p, n);
	return 0;
}

/* Its stdin: the container's stdin pipe (non-blocking); its end, or an error, is EOF. */
static ssize_t dkr_pump_input(void *ctx, unsigned char *buf, size_t max, unsigned *flags)
{
	struct dkr_pump *p = ctx;
	ssize_t got = read(p->stdin_r, buf, max);

	if (got > 0)
		return got;
	if (got < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	*flags |= STREAM_IN_EOF;
	return 0;
}

static void *dkr_pump_thread(void *arg)
{
	struct docker *dk = ((struct dkr_pump *)arg)->c->dk;
	struct dkr_pump *p = arg;
	struct dkc *c = p->c;
	struct agentlink *l = &p->sb->link;
	struct stream *s = p->s;
	struct stream_ops ops = { .output = dkr_pump_output, .input_fd = p->stdin_r,
				  .input = p->stdin_r >= 0 ? dkr_pump_input : NULL, .gone_fd = -1 };
	json_t *exit_info = NULL, *exit_rec;
	bool autorm, lost;

	/* its exit, or the link's loss: LINK_LOST_EXIT and its error (agentlink.h) */
	lost = link_stream_run(l, s, &ops, p, &exit_info) == -ECONNRESET;
	if (p->stdin_r >= 0)
		close(p->stdin_r);
	close(p->logfd);
	/* before the exit is told (stop, wait): once `docker stop` returns, its ports are shut */
	dkr_ports_down(p->d, p->sb, c);

	pthread_mutex_lock(&dk->lock);
	c->ip[0] = '\0';               /* the address goes with the run */
	c->exit_code = (int)json_integer_value(json_object_get(exit_info, "code"));
	if (json_is_true(json_object_get(exit_info, "oom")))
		snprintf(c->error, sizeof(c->error), "OOMKilled");
	else if (lost)
		snprintf(c->error, sizeof(c->error), "%s", LINK_LOST_WHY);
	c->state = DPS_EXITED;
	c->finished_ns = dk_now_ns();
	c->pid = 0;
	c->stream_id = 0;
	c->exits++;
	if (c->stdin_w >= 0) {
		close(c->stdin_w);
		c->stdin_w = -1;
	}
	autorm = json_is_true(json_object_get(c->host, "AutoRemove")) && !c->removing;
	if (!autorm)    /* one removed next needs no durable exit: its files go */
		dkc_save_locked(c);
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk->lock);
	exit_rec = json_pack("{s:s,s:s,s:i,s:O?}", "via", "docker", "id", c->id, "code",
			     c->exit_code, "oom", json_object_get(exit_info, "oom"));
	json_decref(exit_info);
	if (!autorm) {
		daemon_audit(p->d, "container.exit", c->sandbox, exit_rec);
		exit_rec = NULL;
	}
	link_stream_close(l, s);

	pthread_mutex_lock(&dk->lock);
	c->pumping = false;
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk->lock);
	/* the reference goes first: removing a container's own sandbox waits for its users */
	sb_put(p->d, p->sb);
	if (autorm)     /* records the exit once the removal is told (docs/docker.md) */
		dkc_rm_now(p->d, c, NULL, exit_rec);
	dkc_unref(c);
	free(p);
	return NULL;
}

/* ---- start, stop, kill, restart ---- */

/* ---- published ports (HostConfig.PortBindings through ports.c) ---- */

/* Close what c published (its run ended or it failed to start). */
static void dkr_ports_down(struct daemon *d, struct sandbox *sb, struct dkc *c)
{
	struct docker *dk = c->dk;
	json_t *pub, *v;
	size_t i;

	pthread_mutex_lock(&dk->lock);
	pub = c->published;
	c->published = NULL;
	pthread_mutex_unlock(&dk->lock);
	json_array_foreach(pub, i, v) {
		struct k8_err e = { 0 };
		if (port_unpublish(d, sb, json_string_value(json_object_get(v, "HostIp")),
				   (int)json_integer_value(json_object_get(v, "HostPort")), &e))
			daemon_log("docker: %s: closing port %d: %s", c->id,
				   (int)json_integer_value(json_object_get(v, "HostPort")), e.msg);
	}
	json_decref(pub);
}

/* Publish c's PortBindings on its sandbox, towards c's own address (an engine container's
 * netns) or the VM's (a sandbox of its own), on the container's port. A binding on all
 * interfaces (Docker's default for `-p 8000:8000`) binds loopback unless the daemon
 * allows public ports (docs/docker.md). */
static int dkr_ports_up(struct daemon *d, struct sandbox *sb, struct dkc *c, struct k8_err *err)
{
	struct docker *dk = c->dk;
	struct dn_port pt[DKC_PORTS_MAX];
	json_t *pub = json_array();
	int n, r = 0;

	n = dn_port_bindings(json_object_get(c->host, "PortBindings"), pt, DKC_PORTS_MAX, err);
	if (n < 0) {
		json_decref(pub);
		return n;
	}
	for (int i = 0; i < n && !r; i++) {
		const char *ip = pt[i].host_any ? (d->allow_public_ports ? "0.0.0.0" : "127.0.0.1")
						: pt[i].host_ip;
		int bound = 0;
		if (pt[i].proto != DN_TCP) {
			r = k8_err_set(err, -ENOTSUP, "port %u/udp: kosa8 publishes TCP ports only",
				       pt[i].ctr_port);
			break;
		}
		r = port_publish_to(d, sb, ip, pt[i].host_port, c->own_sandbox ? NULL : c->ip,
				    pt[i].ctr_port, &bound, err);
		if (!r)
			json_array_append_new(pub, json_pack("{s:s,s:i,s:i}", "HostIp", ip,
							     "HostPort", bound, "Port",
							     pt[i].ctr_port));
	}
	pthread_mutex_lock(&dk->lock);
	json_decref(c->published);
	c->published = pub;
	pthread_mutex_unlock(&dk->lock);
	if (r)
		dkr_ports_down(d, sb, c);
	return r;
}

/* The agent's "exec /x: No such file or directory" in the words of Docker's runtime:
 * the docker CLI picks `docker run`'s exit code (127, 126) from the lower-case errno text
 * ("no such file or directory", "permission denied") in the answer. */
static void dkr_runtime_wording(struct k8_err *err)
{
	char msg[sizeof(err->msg)];
	char *tail;
	int code = err->code;

	snprintf(msg, sizeof(msg), "%s", err->msg);
	tail = strrchr(msg, ':');
	for (tail = tail ? tail : msg; *tail; tail++)
		*tail = (char)tolower((unsigned char)*tail);
	k8_err_clear(err);
	k8_err_set(err, code, "OCI runtime create failed: %s", msg);
}

/* An agent older than the pty refuses "stdin":"tty" (its stdin is a boolean): say what
 * to do instead of its words. */
void dkr_tty_refused(struct k8_err *err)
{
	if (err->code == -EINVAL && strstr(err->msg, "field 'stdin'")) {
		k8_err_clear(err);
		k8_err_set(err, -ENOSYS, "the sandbox's guest agent has no pty support (Tty): "
			   "rebuild the guest image (make guest) and remove the sandbox");
	}
}

/* An agent older than "netns":"own" refuses it: say what to do instead of its words. */
static void dkr_netns_refused(struct k8_err *err)
{
	if (err->code == -EINVAL && strstr(err->msg, "field 'netns'")) {
		k8_err_clear(err);
		k8_err_set(err, -ENOSYS, "the sandbox's guest agent cannot give a container a "
			   "network namespace of its own: rebuild the guest image (make guest) and "
			   "remove the sandbox");
	}
}

/* c's address for this run (docs/docker.md, "Networking"): none for NetworkMode none; the
 * VM's for a container with a sandbox of its own (it has the VM's network); else the
 * next address of GUEST_CTR4_FIRST..LAST that no other container of the same engine
 * holds, round robin, so a just-stopped container's address (its namespace goes away
 * asynchronously in the guest) is the last one handed out again. Caller holds dk->lock.
 * -EADDRNOTAVAIL when all are taken. */
static int dkr_ip_pick_locked(struct dkc *c)
{
	struct docker *dk = c->dk;
	const char *nm = json_string_value(json_object_get(c->host, "NetworkMode"));
	unsigned n = GUEST_CTR4_LAST - GUEST_CTR4_FIRST + 1;
	char old[16];

	memcpy(old, c->ip, sizeof(old));  /* a restart's leftover (load): not this one again */
	c->ip[0] = '\0';
	if (nm && !strcmp(nm, "none"))
		return 0;
	if (c->own_sandbox) {
		snprintf(c->ip, sizeof(c->ip), "%s", GUEST_IP4);
		return 0;
	}
	for (unsigned k = 0; k < n; k++) {
		char ip[16];
		bool used = false;

		snprintf(ip, sizeof(ip), "10.0.2.%u", GUEST_CTR4_FIRST + (dk->ip_next + k) % n);
		used = !strcmp(old, ip);
		for (struct dkc *o = dk->ctrs; o && !used; o = o->next)
			used = o != c && !strcmp(o->ip, ip) && !strcmp(o->sandbox, c->sandbox);
		if (!used) {
			memcpy(c->ip, ip, sizeof(ip));
			dk->ip_next = (dk->ip_next + k + 1) % n;
			return 0;
		}
	}
	return -EADDRNOTAVAIL;
}

/* The reference of c's image for a run: its id (the config it was created from) while
 * the store has it, else its name (an image pulled again under that name). */
static const char *dkr_image_ref(struct daemon *d, struct dkc *c)
{
	struct image_info info;
	struct k8_err e = { 0 };

	if (!c->image_id[0] || image_resolve(d->images, c->image_id, &info, &e))
		return c->image;
	image_info_clear(&info);
	return c->image_id;
}

int dkr_with_image(struct daemon *d, struct sandbox *sb, struct dkc *c, slot_use_fn fn,
		   void *ctx, struct k8_err *err)
{
	struct slot_busy busy = { 0 };
	char held[sizeof(err->msg)] = "";
	size_t o = 0;
	int r;

	r = slot_use(d, sb, dkr_image_ref(d, c), !c->own_sandbox, &busy, fn, ctx, err);
	if (r != -ENOSPC || c->own_sandbox)
		return r;
	/* slots.c's advice (another sandbox) is not the Docker user's; what holds each
	 * image comes back as data */
	for (int i = 0; i < busy.n && o < sizeof(held); i++)
		o += (size_t)snprintf(held + o, sizeof(held) - o, "%s%s (%s)", i ? ", " : "",
				      busy.h[i].ref, busy.h[i].why);
	k8_err_clear(err);
	return k8_err_set(err, -ENOSPC, "the docker engine sandbox '%s' holds %d images at most, "
			  "each used by a running or created container%s%s: stop or remove one "
			  "of them, or start the daemon with --require-sandbox (docs/docker.md)",
			  c->sandbox, K8_MAX_SLOTS, held[0] ? ": " : "", held);
}

/* The agent's `run` (req, taken) of an engine container. An address still held in the
 * guest (the agent's EADDRINUSE: a stopped container's namespace goes away
 * asynchronously, or one the host does not know of) is not the container's failure: it
 * is retried with the next free address, its published ports following it, a few
 * times (docs/docker.md, "Networking"). */
#define DKC_ADDR_TRIES 4
static int dkr_run_request(struct daemon *d, struct sandbox *sb, struct dkc *c, json_t *req,
			   json_t **resp, struct stream **s, struct k8_err *err)
{
	struct docker *dk = c->dk;
	for (int tries = 1;; tries++) {
		json_t *again = c->ip[0] && !c->own_sandbox && tries < DKC_ADDR_TRIES ?
				json_deep_copy(req) : NULL;
		char held[16];
		int r;

		r = sb_agent_request(sb, req, DKC_START_TIMEOUT_MS, resp, s, err);  /* takes req */
		if (r != -EADDRINUSE || !again) {
			json_decref(again);
			return r;
		}
		req = again;
		memcpy(held, c->ip, sizeof(held));
		pthread_mutex_lock(&dk->lock);
		r = dkr_ip_pick_locked(c);      /* never `held` again */
		pthread_mutex_unlock(&dk->lock);
		daemon_log("docker: %s: address %s is held in the guest; %s", c->id, held,
			   r ? "no other is free" : c->ip);
		if (r) {
			json_decref(req);
			return -EADDRINUSE;     /* err: the agent's */
		}
		json_object_set_new(req, "ip", json_string(c->ip));
		k8_err_clear(err);
		dkr_ports_down(d, sb, c);
		if ((r = dkr_ports_up(d, sb, c, err))) {
			json_decref(req);
			return r;
		}
	}
}

/* A start's claim on c (under its lock): 1 when it runs or starts already (304), 0 with
 * the start claimed (pumping) and its address picked, or a negative errno. */
static int dkr_start_claim(struct dkc *c, struct k8_err *err)
{
	struct docker *dk = c->dk;
	int r = 0;

	pthread_mutex_lock(&dk->lock);
	if (c->removing || c->removed)
		r = k8_err_set(err, -ENOENT, "No such container: %s", c->id);
	else if (c->state == DPS_RUNNING || c->pumping)
		r = 1;
	else if ((r = dkr_ip_pick_locked(c)) == 0)
		c->pumping = true;
	pthread_mutex_unlock(&dk->lock);
	if (r < 0 && !err->code)
		k8_err_set(err, r, "the docker engine sandbox '%s' has no container address free "
			   "(%d containers with a network at most)", c->sandbox,
			   GUEST_CTR4_LAST - GUEST_CTR4_FIRST + 1);
	return r;
}

/* A start under way: what dkr_launch hands the pump. */
struct dkr_start {
	struct daemon *d;
	struct dkc *c;
	struct sandbox *sb;
	struct stream *s;
	json_t *resp;                   /* the agent's answer to the run */
	int stdin_r, logfd;
	uint64_t t_img;                 /* its image in its slot */
};

/* The agent's `run` for c, its image held in its slot (slot_use's fn): the request from
 * c's spec (src/docker/spec.c), the log opened, the answer checked. */
static int dkr_launch(void *ctx, const struct vm_image *img, const json_t *icfg,
		      struct k8_err *err)
{
	struct dkr_start *st = ctx;
	struct dkc *c = st->c;
	char path[4400];
	json_t *benv = broker_env(st->sb), *req, *sent;  /* docker_engine_broker's variables */
	int r;

	(void)icfg;
	st->t_img = now_mono_ns();
	struct dspec_run run = { .agent_id = c->agent_id, .image = img->digest, .ip = c->ip,
				 .own_sandbox = c->own_sandbox, .broker_env = benv,
				 .binds = c->binds, .rm = c->agent_rm };
	req = dspec_run_request(c->config, c->host, &run);
	json_decref(benv);
	snprintf(path, sizeof(path), "%s/log", c->dir);
	st->logfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (st->logfd < 0) {
		json_decref(req);
		return k8_err_set(err, -errno, "open %s: %s", path, strerror(errno));
	}
	sent = json_incref(req);
	r = dkr_run_request(st->d, st->sb, c, req, &st->resp, &st->s, err);    /* takes req */
	if (r) {
		dkr_tty_refused(err);
		dkr_netns_refused(err);
		if (r == -ENOENT || r == -EACCES || r == -ENOEXEC)
			dkr_runtime_wording(err);
	} else if (!dspec_run_applied(sent, st->resp)) {
		/* an agent older than these ran it without them: refuse, never ignore */
		dkc_agent_rm(st->sb, c->agent_id);
		link_stream_close(&st->sb->link, st->s);
		st->s = NULL;
		r = k8_err_set(err, -ENOSYS, "the sandbox's guest agent cannot apply Memory, "
			       "NanoCpus or CapDrop: rebuild the guest image (make guest) and "
			       "remove the sandbox");
	}
	json_decref(sent);
	return r;
}

/* c runs: its state, the audit record, and the pump thread that owns its stream. */
static void dkr_pump_begin(struct dkr_start *st)
{
	struct dkc *c = st->c;
	struct docker *dk = c->dk;
	struct dkr_pump *p = xcalloc(1, sizeof(*p));
	pthread_attr_t attr;
	pthread_t t;

	if (st->stdin_r >= 0)
		fcntl(st->stdin_r, F_SETFL, O_NONBLOCK);
	*p = (struct dkr_pump){ .d = st->d, .c = c, .sb = st->sb, .s = st->s,
				.stdin_r = st->stdin_r, .logfd = st->logfd };
	pthread_mutex_lock(&dk->lock);
	c->refs++;
	c->state = DPS_RUNNING;
	c->pid = (int)json_integer_value(json_object_get(st->resp, "pid"));
	c->started_ns = dk_now_ns();
	c->exit_code = 0;
	c->error[0] = '\0';
	c->starts++;
	c->stream_id = link_stream_id(st->s);
	dkc_save_locked(c);
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk->lock);
	daemon_audit(st->d, "container.start", c->sandbox,
		     json_pack("{s:s,s:s,s:s,s:O}", "via", "docker", "id", c->id, "name", c->name,
			       "argv", json_object_get(c->config, "Cmd")));
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, dkr_pump_thread, p) != 0)
		abort();        /* the stream would have no reader: nothing sane to do */
	pthread_attr_destroy(&attr);
}

/* The agent's `run` for c; on success the pump runs (1: it ran already). Caller holds
 * nothing. */
static int dkr_start(struct daemon *d, struct dkc *c, struct k8_err *err)
{
	struct docker *dk = c->dk;
	struct dkr_start st = { .d = d, .c = c, .stdin_r = -1, .logfd = -1 };
	uint64_t t0 = now_mono_ns(), t_sb;     /* the phases, for a VM of its own */
	int r = dkr_start_claim(c, err);

	if (r)
		return r;
	st.sb = dke_get(d, c->sandbox, err);
	if (!st.sb) {
		r = err->code ? err->code : -EIO;
		goto fail;
	}
	t_sb = now_mono_ns();
	if ((r = dkr_ports_up(d, st.sb, c, err)))
		goto fail_sb;
	/* The agent still holds the last run's container (or, after a daemon restart, a
	 * running one): a start is a fresh run (docs/docker.md). */
	if (c->starts)
		dkc_agent_rm(st.sb, c->agent_id);
	/* AutoRemove: the agent removes the container as it exits, before it reports the
	 * exit, which spares `docker run --rm` a round trip to the guest (dkc_rm_now). */
	c->agent_rm = json_is_true(json_object_get(c->host, "AutoRemove"));
	if (json_is_true(json_object_get(c->config, "OpenStdin"))) {
		pthread_mutex_lock(&dk->lock);
		dkc_stdin_pipe_locked(c);
		st.stdin_r = c->stdin_r;        /* the pump's from now on */
		c->stdin_r = -1;
		pthread_mutex_unlock(&dk->lock);
	}
	if ((r = dkr_with_image(d, st.sb, c, dkr_launch, &st, err)))
		goto fail_sb;
	if (c->own_sandbox)     /* where a `docker run` with require_sandbox spends its time */
		daemon_log("container %s: sandbox %s created and booted in %llu ms, image "
			   "attached in %llu ms, started in the guest in %llu ms", c->agent_id,
			   c->sandbox, (unsigned long long)(t_sb - t0) / 1000000,
			   (unsigned long long)(st.t_img - t_sb) / 1000000,
			   (unsigned long long)(now_mono_ns() - st.t_img) / 1000000);
	dkr_pump_begin(&st);
	json_decref(st.resp);
	return 0;

fail_sb:
	if (st.stdin_r >= 0)
		close(st.stdin_r);
	if (st.logfd >= 0)
		close(st.logfd);
	json_decref(st.resp);
	dkr_ports_down(d, st.sb, c);
	sb_put(d, st.sb);
fail:
	pthread_mutex_lock(&dk->lock);
	c->pumping = false;
	c->ip[0] = '\0';
	pthread_mutex_unlock(&dk->lock);
	return r;
}

/* A start that failed, as moby records it: the container stays created, with the exit
 * code a shell would give (127 not found, 126 not runnable, else 128) and the error in
 * its state; one made with AutoRemove goes (`docker run --rm` waits for that, and
 * waited forever when it did not). */
static void dkr_start_failed(struct daemon *d, struct dkc *c, int r, const char *msg)
{
	struct docker *dk = c->dk;
	bool autorm;

	pthread_mutex_lock(&dk->lock);
	if (c->state == DPS_RUNNING || c->removing || c->removed) {
		pthread_mutex_unlock(&dk->lock);
		return;
	}
	c->exit_code = r == -ENOENT ? 127 : (r == -EACCES || r == -ENOEXEC) ? 126 : 128;
	snprintf(c->error, sizeof(c->error), "%s", msg);
	autorm = json_is_true(json_object_get(c->host, "AutoRemove"));
	dkc_save_locked(c);
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk->lock);
	if (autorm)
		dkc_rm_now(d, c, NULL, NULL);
}

int dkr_api_start(struct api_call *call)
{
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	r = dkr_start(call->d, c, &call->err);
	if (r < 0)
		dkr_start_failed(call->d, c, r, call->err.msg);
	dkc_unref(c);
	if (r < 0)
		return r;
	call->status = r ? 304 : 204;
	return 0;
}

/* Ask the agent to stop c's init: `signal`, then SIGKILL after t_ms. Returns 1 when c
 * was not running. Waits for the pump to record the exit. */
int dkr_stop(struct daemon *d, struct dkc *c, int signal, int t_ms, struct k8_err *err)
{
	struct docker *dk = c->dk;
	struct sandbox *sb;
	json_t *req, *resp = NULL;
	struct timespec dl;
	int r;

	pthread_mutex_lock(&dk->lock);
	if (c->state != DPS_RUNNING) {
		pthread_mutex_unlock(&dk->lock);
		return 1;
	}
	pthread_mutex_unlock(&dk->lock);
	sb = sb_get(d, c->sandbox, err);
	if (!sb)
		return -ENOENT;
	req = json_pack("{s:s,s:s,s:i,s:i}", "op", "stop", "container", c->agent_id, "signal",
			signal, "timeout_ms", t_ms);
	r = sb_agent_request(sb, req, t_ms + 30000, &resp, NULL, err);  /* takes req */
	json_decref(resp);
	sb_put(d, sb);
	if (r && r != -ENOENT)
		return r;
	k8_err_clear(err);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10;
	pthread_mutex_lock(&dk->lock);
	while (c->state == DPS_RUNNING)
		if (pthread_cond_timedwait(&dk->cond, &dk->lock, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&dk->lock);
	return 0;
}

static int dkr_query_t(struct api_call *call, int *t_ms)
{
	uint64_t t = 10;
	const char *v = call->query ? call->query(call->query_ctx, "t") : NULL;

	if (v && !strcmp(v, "-1"))
		t = 3600;
	else if (api_query_u64(call, "t", 0, 3600, &t))
		return call->err.code;
	*t_ms = (int)t * 1000;
	return 0;
}

int dkr_api_stop(struct api_call *call)
{
	struct dkc *c;
	int t_ms, r;

	if ((r = dkr_query_t(call, &t_ms)) || (r = dkc_find_call(call, &c)))
		return r;
	r = dkr_stop(call->d, c, SIGTERM, t_ms, &call->err);
	dkc_unref(c);
	if (r < 0)
		return r;
	call->status = r ? 304 : 204;
	return 0;
}

int dkr_api_restart(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	struct dkc *c;
	int t_ms, r;

	if ((r = dkr_query_t(call, &t_ms)) || (r = dkc_find_call(call, &c)))
		return r;
	r = dkr_stop(call->d, c, SIGTERM, t_ms, &call->err);
	if (r >= 0) {
		/* the pump may still be closing its stream */
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 10;
		pthread_mutex_lock(&dk->lock);
		while (c->pumping)
			if (pthread_cond_timedwait(&dk->cond, &dk->lock, &dl) == ETIMEDOUT)
				break;
		pthread_mutex_unlock(&dk->lock);
		r = dkr_start(call->d, c, &call->err);
	}
	dkc_unref(c);
	if (r < 0)
		return r;
	call->status = 204;
	return 0;
}

int dkr_api_kill(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	char buf[32];
	const char *sname = NULL;
	struct sandbox *sb;
	struct dkc *c;
	uint32_t sid;
	int sig, r;

	if ((r = api_query_str(call, "signal", buf, sizeof(buf), &sname)))
		return r;
	if (!(sig = dspec_signal(sname)))
		return k8_err_set(&call->err, -EINVAL, "Invalid signal: %.30s", sname);
	if ((r = dkc_find_call(call, &c)))
		return r;
	pthread_mutex_lock(&dk->lock);
	sid = c->state == DPS_RUNNING ? c->stream_id : 0;
	pthread_mutex_unlock(&dk->lock);
	if (!sid) {
		r = k8_err_set(&call->err, -EBUSY, "Container %s is not running", c->id);
		dkc_unref(c);
		return r;
	}
	sb = sb_get(call->d, c->sandbox, &call->err);
	if (sb) {
		unsigned char le[4] = { (unsigned char)sig, 0, 0, 0 };
		link_send(&sb->link, PROTO_SIGNAL, 0, sid, le, 4);
		sb_put(call->d, sb);
	}
	dkc_unref(c);
	if (!sb)
		return -ENOENT;
	call->status = 204;
	return 0;
}

/* ---- wait ---- */

struct dkr_wait {
	struct dkc *c;
	enum { W_NOT_RUNNING, W_NEXT_EXIT, W_REMOVED } cond;
	unsigned exits0;
};

static void dkr_wait_free(void *ctx)
{
	struct dkr_wait *w = ctx;
	dkc_unref(w->c);
	free(w);
}

/* The body {"StatusCode":N,"Error":null} once the condition holds; the headers went out
 * before (the CLI waits for them before it starts the container). */
static void dkr_wait_body(void *ctx, const struct api_conn *conn)
{
	struct docker *dk = ((struct dkr_wait *)ctx)->c->dk;
	struct dkr_wait *w = ctx;
	struct dkc *c = w->c;
	char out[128];
	int code, fd = conn->fd;

	for (;;) {
		bool ok;
		struct timespec dl;
		struct pollfd pfd = { .fd = fd, .events = 0 };

		/* a client that left: the pipe's reader is gone */
		if (poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLERR))
			return;
		/* the check and the wait under one hold of the lock: a change told between
		 * them would otherwise wait out the second (docker run --rm answered 1 s late) */
		pthread_mutex_lock(&dk->lock);
		if (w->cond == W_REMOVED)
			ok = c->removed;
		else if (w->cond == W_NEXT_EXIT)
			ok = c->exits > w->exits0 || c->removed;
		else
			ok = c->state != DPS_RUNNING && !c->pumping;
		if (ok)
			break;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 1;
		pthread_cond_timedwait(&dk->cond, &dk->lock, &dl);
		pthread_mutex_unlock(&dk->lock);
	}
	code = c->exit_code;
	pthread_mutex_unlock(&dk->lock);
	snprintf(out, sizeof(out), "{\"StatusCode\":%d,\"Error\":null}\n", code);
	(void)!write_full(fd, out, strlen(out));
}

int dkr_api_wait(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	char buf[32];
	const char *cond = NULL;
	struct dkr_wait *w;
	struct dkc *c;
	int r;

	if ((r = api_query_str(call, "condition", buf, sizeof(buf), &cond)))
		return r;
	if (cond && strcmp(cond, "not-running") && strcmp(cond, "next-exit") &&
	    strcmp(cond, "removed"))
		return k8_err_set(&call->err, -EINVAL, "invalid condition: \"%.30s\"", cond);
	if ((r = dkc_find_call(call, &c)))
		return r;
	w = xcalloc(1, sizeof(*w));
	w->c = c;
	w->cond = !cond || !strcmp(cond, "not-running") ? W_NOT_RUNNING :
		  !strcmp(cond, "next-exit") ? W_NEXT_EXIT : W_REMOVED;
	pthread_mutex_lock(&dk->lock);
	w->exits0 = c->exits;
	pthread_mutex_unlock(&dk->lock);
	return api_reply_raw(call, API_RAW_BODY, "application/json", dkr_wait_body, dkr_wait_free, w);
}

/* The query's h and w (0..65535; moby takes both, absent 0). */
int dkr_query_hw(struct api_call *call, unsigned *rows, unsigned *cols)
{
	uint64_t h = 0, w = 0;

	if (api_query_u64(call, "h", 0, 65535, &h) || api_query_u64(call, "w", 0, 65535, &w))
		return call->err.code;
	*rows = (unsigned)h;
	*cols = (unsigned)w;
	return 0;
}

/* Ask the agent to set the size of a pty: the init of agent container `ctr`
 * (stream 0) or the process on `stream`. */
int dkr_resize_agent(struct daemon *d, const char *sandbox, const char *ctr,
			    uint32_t stream, unsigned rows, unsigned cols, struct k8_err *err)
{
	struct sandbox *sb = sb_get(d, sandbox, err);
	json_t *req, *resp = NULL;
	int r;

	if (!sb)
		return -ENOENT;
	req = json_pack("{s:s,s:s,s:i,s:i}", "op", "resize", "container", ctr, "rows", (int)rows,
			"cols", (int)cols);
	if (stream)
		json_object_set_new(req, "stream", json_integer(stream));
	r = sb_agent_request(sb, req, 10000, &resp, NULL, err);     /* takes req */
	json_decref(resp);
	sb_put(d, sb);
	return r;
}

/* A Tty container's window size (TIOCSWINSZ on its pty in the guest; the process gets
 * SIGWINCH). Without a Tty, or not running, it is accepted and does nothing, as the
 * docker CLI resizes whatever it attached to. */
int dkr_api_resize(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	char sandbox[64], agent_id[13];
	unsigned rows, cols;
	struct dkc *c;
	bool live;
	int r;

	if ((r = dkr_query_hw(call, &rows, &cols)) || (r = dkc_find_call(call, &c)))
		return r;
	pthread_mutex_lock(&dk->lock);
	live = dkc_tty(c) && c->state == DPS_RUNNING;
	snprintf(sandbox, sizeof(sandbox), "%s", c->sandbox);
	snprintf(agent_id, sizeof(agent_id), "%s", c->agent_id);
	pthread_mutex_unlock(&dk->lock);
	dkc_unref(c);
	if (!live)
		return 0;
	r = dkr_resize_agent(call->d, sandbox, agent_id, 0, rows, cols, &call->err);
	if (r == -ESRCH || r == -ENOENT) {      /* it exited meanwhile */
		k8_err_clear(&call->err);
		return 0;
	}
	return r;
}
