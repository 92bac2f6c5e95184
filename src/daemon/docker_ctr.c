/* SPDX-License-Identifier: Apache-2.0 */
/* docker_ctr.c - Docker API containers and execs (docker_ctr.h, docs/docker.md).
 *
 * Theory of operation. A Docker container is a record here (id, name, Docker's Config
 * and HostConfig, state) kept in $KOSA8_HOME/docker/containers/<id>/state.json, and,
 * while it runs, an agent container (the first 12 hex digits of its id) in the engine
 * sandbox (docker_engine.c). `start` asks the agent for a `run` with a stream, and a
 * pump thread owns that stream for the container's whole life: it appends every output
 * chunk to the container's log file (its own 16-byte record header: the 8-byte Docker
 * frame header plus a big-endian nanosecond timestamp), returns the credit at once (so
 * the process never waits for a client), forwards stdin from a pipe within the agent's
 * stdin window, and records the exit. Everything a client reads (attach, logs) is read
 * from that file, so output is kept from the moment the process starts: an attach made
 * before `start` or a `logs` after the exit misses nothing. The log is capped
 * (DKC_LOG_MAX); past the cap output is dropped and a note is written once.
 *
 * Followers (attach, logs -f) register an eventfd the pump writes to on new output and
 * on exit; `wait` sleeps on the condition variable. Clients never block the pump.
 * Attach's stdin is the write end of the container's stdin pipe: a client's half-close
 * closes it, the pump sees EOF and closes the process's stdin, and output keeps flowing
 * until the process exits.
 *
 * An exec is bridged directly (no log): its stream goes to the hijacked client, framed
 * without a TTY, and its exit code is recorded before the socket closes.
 *
 * Locking: one mutex for every record (dk.lock); never held across an agent request or
 * a client write. A record is reference counted: the list holds one, each user another.
 */
#include "daemon/docker_ctr.h"
#include "daemon/archive.h"
#include "daemon/broker.h"
#include "daemon/ports.h"
#include "daemon/docker_engine.h"
#include "daemon/daemon.h"
#include "daemon/record.h"
#include "daemon/sandbox.h"
#include "common/guest.h"
#include "common/proto.h"
#include "docker/filters.h"
#include "docker/names.h"
#include "docker/ps.h"
#include "docker/query.h"
#include "docker/spec.h"
#include "docker/stats.h"
#include "docker/stream.h"
#include "docker/top.h"
#include "image/image.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DKC_LOG_MAX (16u << 20)
#define DKC_REC_HDR 16
#define DKC_WAITERS 32
#define DKC_START_TIMEOUT_MS 60000
#define DKC_MAX 4096                    /* containers the Docker API keeps */
#define DKC_PORTS_MAX 32                /* published ports per container */
#define DKX_MAX 1024                    /* execs remembered (oldest finished dropped) */


struct dkc {
	struct dkc *next;
	int refs;
	char id[DN_ID_LEN + 1], name[DN_NAME_MAX + 1], agent_id[13];
	char image[512], image_id[80], sandbox[64];
	json_t *config, *host;          /* Docker's Config and HostConfig, as inspect shows */
	json_t *mounts;                 /* Docker's Mounts, as inspect shows */
	json_t *binds;                  /* the agent's bind list: [{"src","dst","ro"}] */
	json_t *published;              /* while it runs: [{"HostIp","HostPort","Port"}] */
	char ip[16];                    /* while it runs with a network: its address ("own":
	                                 * its netns, GUEST_CTR4_*; own sandbox: the VM's) */
	enum dps_state state;
	bool removing, removed, pumping, own_sandbox;
	bool prepared;                  /* its root made in the agent before a first start */
	bool agent_rm;                  /* AutoRemove: the agent removes it as it exits */
	int exit_code, pid;
	char error[256];
	int64_t created_ns, started_ns, finished_ns;
	unsigned starts, exits;
	uint32_t stream_id;             /* of the running init, for kill */
	int stdin_r, stdin_w;           /* the stdin pipe while it may be used; -1 */
	uint64_t log_size;
	bool log_full;
	int waiters[DKC_WAITERS];
	char dir[4300];
};

struct dkx {
	struct dkx *next;
	char id[DN_ID_LEN + 1], ctr[DN_ID_LEN + 1];
	struct dspec_exec spec;         /* its tty's size: ConsoleSize, or a resize before start */
	bool started, running;
	int exit_code, pid;             /* exit_code -1: none yet */
	char sandbox[64];               /* while running: where, and its agent stream */
	uint32_t stream_id;
};

/* One daemon per process: the Docker API's records live here (loaded on first use). */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool loaded;
	struct dkc *ctrs;
	unsigned ip_next;               /* dkc_ip_pick's cursor */
	struct dkx *execs;
	int nexecs;
	char dir[4200];
} dk = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int64_t dk_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* moby's booleans in a query ("1", "True", "false" ...); absent: def. */
static bool dk_qbool(struct api_call *call, const char *key, bool def)
{
	const char *v = call->query ? call->query(call->query_ctx, key) : NULL;
	return v ? dq_bool_default(v, def) : def;
}

/* ---- records ---- */

static void dkc_unref_locked(struct dkc *c)
{
	if (--c->refs > 0)
		return;
	json_decref(c->config);
	json_decref(c->host);
	json_decref(c->mounts);
	json_decref(c->binds);
	json_decref(c->published);
	if (c->stdin_r >= 0)
		close(c->stdin_r);
	if (c->stdin_w >= 0)
		close(c->stdin_w);
	free(c);
}

static void dkc_unref(struct dkc *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&dk.lock);
	dkc_unref_locked(c);
	pthread_mutex_unlock(&dk.lock);
}

/* Tell followers something changed (caller holds dk.lock). */
static void dkc_notify_locked(struct dkc *c)
{
	uint64_t one = 1;
	for (int i = 0; i < DKC_WAITERS; i++)
		if (c->waiters[i] >= 0)
			(void)!write(c->waiters[i], &one, sizeof(one));
	pthread_cond_broadcast(&dk.cond);
}

static int dkc_waiter_add(struct dkc *c)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	if (fd < 0)
		return -1;
	pthread_mutex_lock(&dk.lock);
	for (int i = 0; i < DKC_WAITERS; i++)
		if (c->waiters[i] < 0) {
			c->waiters[i] = fd;
			pthread_mutex_unlock(&dk.lock);
			return fd;
		}
	pthread_mutex_unlock(&dk.lock);
	close(fd);
	return -1;
}

static void dkc_waiter_del(struct dkc *c, int fd)
{
	pthread_mutex_lock(&dk.lock);
	for (int i = 0; i < DKC_WAITERS; i++)
		if (c->waiters[i] == fd)
			c->waiters[i] = -1;
	pthread_mutex_unlock(&dk.lock);
	close(fd);
}

/* The stdin pipe of a container with OpenStdin, made before the first attach or start
 * so stdin sent before the process runs waits in it (64 KiB). Caller holds dk.lock. */
static void dkc_stdin_pipe_locked(struct dkc *c)
{
	int p[2];

	if (c->stdin_r >= 0)
		return;
	if (c->stdin_w >= 0)
		close(c->stdin_w);
	c->stdin_w = -1;
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	c->stdin_r = p[0];
	c->stdin_w = p[1];
}

static struct dkc *dkc_new(void)
{
	struct dkc *c = xcalloc(1, sizeof(*c));
	c->refs = 1;
	c->stdin_r = c->stdin_w = -1;
	c->exit_code = 0;
	for (int i = 0; i < DKC_WAITERS; i++)
		c->waiters[i] = -1;
	return c;
}

/* state.json: everything but the live parts (pump, pipes, waiters). */
static void dkc_save_locked(struct dkc *c)
{
	json_t *v = json_pack("{s:s,s:s,s:s,s:s,s:s,s:O,s:O,s:O?,s:O?,s:s,s:i,s:i,s:s,s:I,s:I,"
			      "s:I,s:i,s:b,s:b}",
			      "Id", c->id, "Name", c->name, "Image", c->image, "ImageID",
			      c->image_id, "Sandbox", c->sandbox, "Config", c->config,
			      "HostConfig", c->host, "Mounts", c->mounts, "Binds", c->binds,
			      "State", dps_state_name(c->state), "ExitCode", c->exit_code,
			      "Pid", c->pid, "Error", c->error, "Created", (json_int_t)c->created_ns,
			      "Started", (json_int_t)c->started_ns, "Finished",
			      (json_int_t)c->finished_ns, "Starts", (int)c->starts, "OwnSandbox",
			      c->own_sandbox, "Prepared", c->prepared);
	if (v && c->ip[0])      /* held while it runs, and after a daemon restart (load) */
		json_object_set_new(v, "IP", json_string(c->ip));
	char *t = v ? json_dumps(v, JSON_COMPACT) : NULL;
	char path[4400];

	json_decref(v);
	if (!t)
		return;
	snprintf(path, sizeof(path), "%s/state.json", c->dir);
	if (write_file_atomic(path, t, strlen(t), 0600))
		daemon_log("docker: cannot save %s", path);
	free(t);
}

static void dkc_copy(char *dst, size_t n, json_t *v)
{
	snprintf(dst, n, "%s", json_is_string(v) ? json_string_value(v) : "");
}

/* A record from state.json; NULL when the file is not one of ours. A container that ran
 * when the daemon went away lost its stream: it is `exited` (255), its agent container
 * is removed when it starts again (docs/docker.md). */
static struct dkc *dkc_load_one(const char *dir)
{
	char path[4400];
	char *t = NULL;
	json_t *v;
	struct dkc *c;
	const char *st;
	struct stat sbuf;

	snprintf(path, sizeof(path), "%s/state.json", dir);
	if (read_file(path, 1 << 20, &t, NULL))
		return NULL;
	v = json_loads(t, 0, NULL);
	free(t);
	if (!json_is_object(v) || !dn_is_full_id(json_string_value(json_object_get(v, "Id")))) {
		json_decref(v);
		return NULL;
	}
	c = dkc_new();
	dkc_copy(c->id, sizeof(c->id), json_object_get(v, "Id"));
	memcpy(c->agent_id, c->id, 12);
	dkc_copy(c->name, sizeof(c->name), json_object_get(v, "Name"));
	dkc_copy(c->image, sizeof(c->image), json_object_get(v, "Image"));
	dkc_copy(c->image_id, sizeof(c->image_id), json_object_get(v, "ImageID"));
	dkc_copy(c->sandbox, sizeof(c->sandbox), json_object_get(v, "Sandbox"));
	dkc_copy(c->error, sizeof(c->error), json_object_get(v, "Error"));
	c->config = json_incref(json_object_get(v, "Config"));
	c->host = json_incref(json_object_get(v, "HostConfig"));
	c->mounts = json_incref(json_object_get(v, "Mounts"));
	c->binds = json_incref(json_object_get(v, "Binds"));
	if (!json_is_object(c->config) || !json_is_object(c->host)) {
		json_decref(v);
		c->refs = 1;
		dkc_unref_locked(c);
		return NULL;
	}
	c->exit_code = (int)json_integer_value(json_object_get(v, "ExitCode"));
	c->created_ns = json_integer_value(json_object_get(v, "Created"));
	c->started_ns = json_integer_value(json_object_get(v, "Started"));
	c->finished_ns = json_integer_value(json_object_get(v, "Finished"));
	c->starts = (unsigned)json_integer_value(json_object_get(v, "Starts"));
	c->own_sandbox = json_is_true(json_object_get(v, "OwnSandbox"));
	c->prepared = json_is_true(json_object_get(v, "Prepared"));
	st = json_string_value(json_object_get(v, "State"));
	c->state = DPS_EXITED;
	if (st && !strcmp(st, "created"))
		c->state = DPS_CREATED;
	else if (st && !strcmp(st, "dead"))
		c->state = DPS_DEAD;
	if (st && !strcmp(st, "running")) {
		c->exit_code = 255;
		c->finished_ns = dk_now_ns();
		snprintf(c->error, sizeof(c->error), "kosa8d restarted while the container ran");
		/* its agent container may still run and hold the address: reserved until the
		 * next start of this one (which removes it) or its removal */
		const char *ip = json_string_value(json_object_get(v, "IP"));
		if (ip && strlen(ip) < sizeof(c->ip))
			memcpy(c->ip, ip, strlen(ip) + 1);
	}
	snprintf(c->dir, sizeof(c->dir), "%s", dir);
	snprintf(path, sizeof(path), "%s/log", dir);
	if (stat(path, &sbuf) == 0)
		c->log_size = (uint64_t)sbuf.st_size;
	json_decref(v);
	return c;
}

/* Load the records once (caller holds dk.lock). */
static void dk_load_locked(struct daemon *d)
{
	DIR *dh;
	struct dirent *e;

	if (dk.loaded)
		return;
	dk.loaded = true;
	snprintf(dk.dir, sizeof(dk.dir), "%s/docker/containers", d->home);
	mkdir_p(dk.dir, 0700);
	dh = opendir(dk.dir);
	if (!dh)
		return;
	while ((e = readdir(dh))) {
		char sub[4400];
		struct dkc *c;
		if (!dn_is_full_id(e->d_name))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dk.dir, e->d_name);
		c = dkc_load_one(sub);
		if (!c)
			continue;
		if (c->state == DPS_EXITED && c->error[0] && !c->finished_ns)
			c->finished_ns = dk_now_ns();
		dkc_save_locked(c);
		c->next = dk.ctrs;
		dk.ctrs = c;
	}
	closedir(dh);
}

/* Find a container by full id, name or unique id prefix (names.c's order). Returns it
 * with a reference, or NULL with Docker's 404 (or moby's 400 for an ambiguous prefix). */
static struct dkc *dkc_find(struct daemon *d, const char *ref, struct k8_err *err)
{
	const char **ids, **names;
	struct dkc *c, *found = NULL;
	size_t n = 0, i = 0;
	long at;

	pthread_mutex_lock(&dk.lock);
	dk_load_locked(d);
	for (c = dk.ctrs; c; c = c->next)
		n++;
	ids = xcalloc(n + 1, sizeof(*ids));
	names = xcalloc(n + 1, sizeof(*names));
	for (c = dk.ctrs; c; c = c->next, i++) {
		ids[i] = c->id;
		names[i] = c->name;
	}
	at = dn_lookup(ids, names, n, ref);
	if (at >= 0) {
		for (c = dk.ctrs, i = 0; c && i < (size_t)at; c = c->next, i++)
			;
		found = c;
		found->refs++;
	}
	pthread_mutex_unlock(&dk.lock);
	free(ids);
	free(names);
	if (at == -EINVAL)
		k8_err_set(err, -EINVAL, "multiple IDs found with provided prefix: %.100s", ref);
	else if (!found)
		k8_err_set(err, -ENOENT, "No such container: %.200s", ref);
	return found;
}

static int dkc_find_call(struct api_call *call, struct dkc **out)
{
	*out = dkc_find(call->d, api_param(call, "id"), &call->err);
	return *out ? 0 : call->err.code;
}

/* ---- create ---- */

static int dkc_binds(struct daemon *d, struct dkc *c, const json_t *hc, struct k8_err *err);

static int dkc_name_taken_locked(const char *name)
{
	for (struct dkc *o = dk.ctrs; o; o = o->next)
		if (!strcmp(o->name, name))
			return 1;
	return 0;
}

/* container.create, and a container.mount for each bind. */
static void dkc_audit_create(struct daemon *d, struct dkc *c)
{
	json_t *m;
	size_t k;

	daemon_audit(d, "container.create", c->sandbox,
		     json_pack("{s:s,s:s,s:s,s:s,s:O,s:O}", "via", "docker", "id", c->id, "name",
			       c->name, "image", c->image, "cmd", json_object_get(c->config, "Cmd"),
			       "binds", c->binds));
	json_array_foreach(c->mounts, k, m)
		daemon_audit(d, "container.mount", c->sandbox,
			     json_pack("{s:s,s:s,s:O,s:O,s:b}", "via", "docker", "id", c->id,
				       "host", json_object_get(m, "Source"), "guest",
				       json_object_get(m, "Destination"), "ro",
				       !json_is_true(json_object_get(m, "RW"))));
}

/* POST /containers/create: the spec from the request (src/docker/spec.c: checked, then
 * merged with the image's config), its binds against the daemon's roots, then the record
 * (a name of its own, a directory, state.json). */
int dkc_api_create(struct api_call *call)
{
	struct daemon *d = call->d;
	json_t *body = call->body;
	const char *image = NULL, *qname = NULL;
	char nbuf[DN_NAME_MAX + 2], name[DN_NAME_MAX + 1] = "";
	struct image_info info = { 0 };
	struct dspec_image di;
	struct dkc *c;
	int r, n;

	if ((r = dspec_check(body, &image, &call->err)))
		return r;
	if ((r = api_query_str(call, "name", nbuf, sizeof(nbuf), &qname)))
		return r;
	if (qname && (r = dn_name_check(qname, name, &call->err)))
		return r;
	r = image_resolve(d->images, image, &info, &call->err);
	if (r == -ENOENT) {
		k8_err_clear(&call->err);       /* the wording docker run pulls on */
		r = k8_err_set(&call->err, -ENOENT, "No such image: %.400s", image);
	}
	if (r)
		return r;

	c = dkc_new();
	if ((r = dn_new_id(c->id))) {
		k8_err_set(&call->err, r, "cannot make a container id");
		goto fail;
	}
	memcpy(c->agent_id, c->id, 12);
	snprintf(c->image, sizeof(c->image), "%s", image);
	snprintf(c->image_id, sizeof(c->image_id), "%s", info.config_digest);
	c->created_ns = dk_now_ns();
	c->own_sandbox = dke_require_sandbox(d);
	if (c->own_sandbox)
		snprintf(c->sandbox, sizeof(c->sandbox), "dk-%s", c->agent_id);
	else
		snprintf(c->sandbox, sizeof(c->sandbox), "%s", DKE_NAME);
	di = (struct dspec_image){ .env = info.env, .cmd = info.cmd, .entrypoint = info.entrypoint,
				   .workdir = info.workdir, .user = info.user };
	if ((r = dspec_build(body, &di, c->agent_id, &c->config, &c->host, &call->err)))
		goto fail;
	c->mounts = json_array();
	c->binds = json_array();
	if ((r = dkc_binds(d, c, json_object_get(body, "HostConfig"), &call->err)))
		goto fail;

	pthread_mutex_lock(&dk.lock);
	dk_load_locked(d);
	n = 0;
	for (struct dkc *o = dk.ctrs; o; o = o->next)
		n++;
	if (!name[0])
		snprintf(name, sizeof(name), "kosa8_%.10s", c->id + 12);
	if (dkc_name_taken_locked(name)) {
		struct dkc *o = dk.ctrs;
		while (o && strcmp(o->name, name))
			o = o->next;
		pthread_mutex_unlock(&dk.lock);
		r = k8_err_set(&call->err, -EEXIST, "Conflict. The container name \"/%s\" is "
			       "already in use by container \"%s\". You have to remove (or rename) "
			       "that container to be able to reuse that name.", name, o ? o->id : "");
		goto fail;
	}
	if (n >= DKC_MAX) {
		pthread_mutex_unlock(&dk.lock);
		r = k8_err_set(&call->err, -ENOSPC, "too many containers (%d); remove some",
			       DKC_MAX);
		goto fail;
	}
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(c->dir, sizeof(c->dir), "%s/%s", dk.dir, c->id);
	if ((r = mkdir_p(c->dir, 0700))) {
		pthread_mutex_unlock(&dk.lock);
		k8_err_set(&call->err, r, "mkdir %s: %s", c->dir, strerror(-r));
		goto fail;
	}
	dkc_save_locked(c);
	if (json_is_true(json_object_get(c->config, "OpenStdin")) ||
	    json_is_true(json_object_get(c->config, "Tty")))
		dkc_stdin_pipe_locked(c);
	c->next = dk.ctrs;
	dk.ctrs = c;
	pthread_mutex_unlock(&dk.lock);
	image_info_clear(&info);
	dkc_audit_create(d, c);
	call->status = 201;
	call->out = json_pack("{s:s,s:[]}", "Id", c->id, "Warnings");
	return 0;
fail:
	dkc_unref(c);
	image_info_clear(&info);
	return r;
}

/* ---- the pump: one thread per running container, owner of its agent stream ---- */

struct dkc_pump {
	struct daemon *d;
	struct dkc *c;
	struct sandbox *sb;
	struct stream *s;
	int stdin_r;                    /* -1: no stdin (or it ended) */
	int logfd;
};

/* Append one output chunk to the log (caller holds no lock; only the pump writes). */
static void dkc_log_append(struct dkc_pump *p, uint16_t type, const void *data, size_t len)
{
	struct dkc *c = p->c;
	unsigned char hdr[DKC_REC_HDR];
	uint64_t ts = (uint64_t)dk_now_ns();
	bool full;

	pthread_mutex_lock(&dk.lock);
	full = c->log_full;
	if (!full && c->log_size + len + 2 * DKC_REC_HDR + 64 > DKC_LOG_MAX)
		c->log_full = true;
	pthread_mutex_unlock(&dk.lock);
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
	pthread_mutex_lock(&dk.lock);
	c->log_size += sizeof(hdr) + len;
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk.lock);
}

static void dkc_rm_now(struct daemon *d, struct dkc *c, struct sandbox *sb, json_t *exit_rec);
static void dkc_ports_down(struct daemon *d, struct sandbox *sb, struct dkc *c);
static bool dkc_tty(struct dkc *c);

static void *dkc_pump_thread(void *arg)
{
	struct dkc_pump *p = arg;
	struct dkc *c = p->c;
	struct agentlink *l = &p->sb->link;
	struct stream *s = p->s;
	json_t *exit_info = NULL, *exit_rec;
	unsigned char *buf = xmalloc(PROTO_DATA_CHUNK);
	bool autorm;

	for (;;) {
		struct sframe *f;
		struct pollfd pfd[2];
		uint32_t credit;
		bool done, broken;

		while ((f = link_stream_pop(l, s))) {
			size_t len = f->len;
			if (len && (f->type == PROTO_STDOUT || f->type == PROTO_STDERR))
				dkc_log_append(p, f->type, f->data, len);
			free(f);
			if (len)
				link_stream_consumed(l, s, len);
		}
		pthread_mutex_lock(&l->lock);
		done = s->exited && !s->head;
		broken = l->broken && !s->exited;
		credit = s->stdin_credit;
		if (done)
			exit_info = json_incref(s->exit_info);
		pthread_mutex_unlock(&l->lock);
		if (done || broken)
			break;
		pfd[0] = (struct pollfd){ .fd = s->efd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = p->stdin_r, .events = credit ? POLLIN : 0 };
		if (poll(pfd, p->stdin_r >= 0 ? 2 : 1, 1000) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN) {
			uint64_t v;
			(void)!read(s->efd, &v, sizeof(v));
		}
		if (p->stdin_r >= 0 && credit && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			size_t want = credit < PROTO_DATA_CHUNK ? credit : PROTO_DATA_CHUNK;
			ssize_t got = read(p->stdin_r, buf, want);
			if (got > 0) {
				pthread_mutex_lock(&l->lock);
				s->stdin_credit -= (uint32_t)got;
				pthread_mutex_unlock(&l->lock);
				link_send(l, PROTO_STDIN, 0, s->id, buf, (size_t)got);
			} else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
				link_send(l, PROTO_STDIN, PROTO_F_EOF, s->id, NULL, 0);
				close(p->stdin_r);
				p->stdin_r = -1;
			}
		}
	}
	free(buf);
	if (p->stdin_r >= 0)
		close(p->stdin_r);
	close(p->logfd);
	/* before the exit is told (stop, wait): once `docker stop` returns, its ports are shut */
	dkc_ports_down(p->d, p->sb, c);

	pthread_mutex_lock(&dk.lock);
	c->ip[0] = '\0';               /* the address goes with the run */
	if (exit_info) {
		c->exit_code = (int)json_integer_value(json_object_get(exit_info, "code"));
		if (json_is_true(json_object_get(exit_info, "oom")))
			snprintf(c->error, sizeof(c->error), "OOMKilled");
	} else {
		c->exit_code = 255;
		snprintf(c->error, sizeof(c->error), "the engine sandbox's VM or agent went away");
	}
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
	pthread_mutex_unlock(&dk.lock);
	exit_rec = json_pack("{s:s,s:s,s:i,s:O?}", "via", "docker", "id", c->id, "code",
			     c->exit_code, "oom", json_object_get(exit_info, "oom"));
	json_decref(exit_info);
	if (!autorm) {
		daemon_audit(p->d, "container.exit", c->sandbox, exit_rec);
		exit_rec = NULL;
	}
	link_stream_close(l, s);

	pthread_mutex_lock(&dk.lock);
	c->pumping = false;
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk.lock);
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
static void dkc_ports_down(struct daemon *d, struct sandbox *sb, struct dkc *c)
{
	json_t *pub, *v;
	size_t i;

	pthread_mutex_lock(&dk.lock);
	pub = c->published;
	c->published = NULL;
	pthread_mutex_unlock(&dk.lock);
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
static int dkc_ports_up(struct daemon *d, struct sandbox *sb, struct dkc *c, struct k8_err *err)
{
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
	pthread_mutex_lock(&dk.lock);
	json_decref(c->published);
	c->published = pub;
	pthread_mutex_unlock(&dk.lock);
	if (r)
		dkc_ports_down(d, sb, c);
	return r;
}

/* The agent's "exec /x: No such file or directory" in the words of Docker's runtime:
 * the docker CLI picks `docker run`'s exit code (127, 126) from the lower-case errno text
 * ("no such file or directory", "permission denied") in the answer. */
static void dkc_runtime_wording(struct k8_err *err)
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
static void dkc_tty_refused(struct k8_err *err)
{
	if (err->code == -EINVAL && strstr(err->msg, "field 'stdin'")) {
		k8_err_clear(err);
		k8_err_set(err, -ENOSYS, "the sandbox's guest agent has no pty support (Tty): "
			   "rebuild the guest image (make guest) and remove the sandbox");
	}
}

/* An agent older than "netns":"own" refuses it: say what to do instead of its words. */
static void dkc_netns_refused(struct k8_err *err)
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
 * asynchronously in the guest) is the last one handed out again. Caller holds dk.lock.
 * -EADDRNOTAVAIL when all are taken. */
static int dkc_ip_pick_locked(struct dkc *c)
{
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

		snprintf(ip, sizeof(ip), "10.0.2.%u", GUEST_CTR4_FIRST + (dk.ip_next + k) % n);
		used = !strcmp(old, ip);
		for (struct dkc *o = dk.ctrs; o && !used; o = o->next)
			used = o != c && !strcmp(o->ip, ip) && !strcmp(o->sandbox, c->sandbox);
		if (!used) {
			memcpy(c->ip, ip, sizeof(ip));
			dk.ip_next = (dk.ip_next + k + 1) % n;
			return 0;
		}
	}
	return -EADDRNOTAVAIL;
}

/* c's image attached and mounted in sb (its slot), as `img`. Returns 0 holding the
 * engine's slot lock for reading (dke_slots_done once the agent answered); else not.
 * In the shared engine a full slot table gives up its least recently used image that
 * no running or created container uses. */
static int dkc_image(struct daemon *d, struct sandbox *sb, struct dkc *c, struct vm_image *img,
		     struct k8_err *err)
{
	json_t *icfg = NULL;
	int r;

	for (int tries = 0;; tries++) {
		dke_slots_read();
		r = sb_image_for_run(d, sb, c->image_id[0] ? c->image_id : c->image, img, &icfg,
				     err);
		if (r == -ENOENT) {
			k8_err_clear(err);
			r = sb_image_for_run(d, sb, c->image, img, &icfg, err);
		}
		json_decref(icfg);
		icfg = NULL;
		if (!r)
			return 0;
		dke_slots_done();
		if (r != -ENOSPC || c->own_sandbox || tries == 3)
			break;
		k8_err_clear(err);
		dke_slots_write();
		r = sb_image_evict(d, sb, NULL, err);
		dke_slots_done();
		if (r)
			break;
	}
	if (r == -ENOSPC && !c->own_sandbox) {
		/* sandbox.c's advice (another sandbox) is not the Docker user's */
		char held[sizeof(err->msg)];
		const char *p = strstr(err->msg, "each in use: ");
		snprintf(held, sizeof(held), "%s", p ? p + 13 : "");
		k8_err_clear(err);
		k8_err_set(err, -ENOSPC, "the docker engine sandbox '%s' holds %d images at most, "
			   "each used by a running or created container%s%s: stop or remove one "
			   "of them, or start the daemon with --require-sandbox (docs/docker.md)",
			   c->sandbox, K8_MAX_SLOTS, held[0] ? ": " : "", held);
	}
	return r;
}

/* The agent's `rm` of container `agent_id` in sb, its outcome not looked at (it may be
 * gone already). */
static void dkc_agent_rm(struct sandbox *sb, const char *agent_id)
{
	json_t *rr = NULL;
	struct k8_err e = { 0 };

	sb_agent_request(sb, json_pack("{s:s,s:s}", "op", "rm", "container", agent_id), 30000,
			 &rr, NULL, &e);        /* takes the request */
	json_decref(rr);
}

/* The agent's `run` (req, taken) of an engine container. An address still held in the
 * guest (the agent's EADDRINUSE: a stopped container's namespace goes away
 * asynchronously, or one the host does not know of) is not the container's failure: it
 * is retried with the next free address, its published ports following it, a few
 * times (docs/docker.md, "Networking"). */
#define DKC_ADDR_TRIES 4
static int dkc_run_request(struct daemon *d, struct sandbox *sb, struct dkc *c, json_t *req,
			   json_t **resp, struct stream **s, struct k8_err *err)
{
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
		pthread_mutex_lock(&dk.lock);
		r = dkc_ip_pick_locked(c);      /* never `held` again */
		pthread_mutex_unlock(&dk.lock);
		daemon_log("docker: %s: address %s is held in the guest; %s", c->id, held,
			   r ? "no other is free" : c->ip);
		if (r) {
			json_decref(req);
			return -EADDRINUSE;     /* err: the agent's */
		}
		json_object_set_new(req, "ip", json_string(c->ip));
		k8_err_clear(err);
		dkc_ports_down(d, sb, c);
		if ((r = dkc_ports_up(d, sb, c, err))) {
			json_decref(req);
			return r;
		}
	}
}

/* The agent's `run` for c; on success the pump runs. Caller holds nothing. */
static int dkc_start(struct daemon *d, struct dkc *c, struct k8_err *err)
{
	struct sandbox *sb;
	struct vm_image img;
	json_t *req, *sent, *resp = NULL, *cfg = c->config;
	struct stream *s = NULL;
	struct dkc_pump *p;
	char path[4400];
	bool open_stdin;
	int pipefd[1] = { -1 }, logfd, r;
	pthread_attr_t attr;
	pthread_t t;
	uint64_t t0 = now_mono_ns(), t_sb, t_img;      /* the phases, for a VM of its own */

	pthread_mutex_lock(&dk.lock);
	if (c->removing || c->removed) {
		pthread_mutex_unlock(&dk.lock);
		return k8_err_set(err, -ENOENT, "No such container: %s", c->id);
	}
	if (c->state == DPS_RUNNING || c->pumping) {
		pthread_mutex_unlock(&dk.lock);
		return 1;       /* already started: 304 */
	}
	c->pumping = true;      /* claims the start */
	r = dkc_ip_pick_locked(c);
	pthread_mutex_unlock(&dk.lock);
	if (r) {
		k8_err_set(err, r, "the docker engine sandbox '%s' has no container address free "
			   "(%d containers with a network at most)", c->sandbox,
			   GUEST_CTR4_LAST - GUEST_CTR4_FIRST + 1);
		goto fail;
	}

	sb = dke_get(d, c->sandbox, err);
	if (!sb) {
		r = err->code ? err->code : -EIO;
		goto fail;
	}
	t_sb = now_mono_ns();
	if ((r = dkc_ports_up(d, sb, c, err)))
		goto fail_sb;
	/* The agent still holds the last run's container (or, after a daemon restart, a
	 * running one): a start is a fresh run (docs/docker.md). */
	if (c->starts)
		dkc_agent_rm(sb, c->agent_id);
	if ((r = dkc_image(d, sb, c, &img, err)))
		goto fail_sb;
	t_img = now_mono_ns();
	/* AutoRemove: the agent removes the container as it exits, before it reports the
	 * exit, which spares `docker run --rm` a round trip to the guest (dkc_rm_now). */
	c->agent_rm = json_is_true(json_object_get(c->host, "AutoRemove"));
	json_t *benv = broker_env(sb);  /* docker_engine_broker's variables */
	struct dspec_run run = { .agent_id = c->agent_id, .image = img.digest, .ip = c->ip,
				 .own_sandbox = c->own_sandbox, .broker_env = benv,
				 .binds = c->binds, .rm = c->agent_rm };
	req = dspec_run_request(cfg, c->host, &run);
	json_decref(benv);
	open_stdin = json_is_true(json_object_get(cfg, "OpenStdin"));
	if (open_stdin) {
		pthread_mutex_lock(&dk.lock);
		dkc_stdin_pipe_locked(c);
		pipefd[0] = c->stdin_r;         /* the pump's from now on */
		c->stdin_r = -1;
		pthread_mutex_unlock(&dk.lock);
	}
	snprintf(path, sizeof(path), "%s/log", c->dir);
	logfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (logfd < 0) {
		dke_slots_done();
		json_decref(req);
		r = k8_err_set(err, -errno, "open %s: %s", path, strerror(errno));
		goto fail_pipe;
	}
	sent = json_incref(req);
	r = dkc_run_request(d, sb, c, req, &resp, &s, err);    /* takes req */
	dke_slots_done();      /* dkc_image's: the agent has answered */
	if (r) {
		json_decref(sent);
		dkc_tty_refused(err);
		dkc_netns_refused(err);
		close(logfd);
		if (r == -ENOENT || r == -EACCES || r == -ENOEXEC)
			dkc_runtime_wording(err);
		goto fail_pipe;
	}
	if (!dspec_run_applied(sent, resp)) {
		/* an agent older than these ran it without them: refuse, never ignore */
		dkc_agent_rm(sb, c->agent_id);
		json_decref(resp);
		json_decref(sent);
		link_stream_close(&sb->link, s);
		close(logfd);
		r = k8_err_set(err, -ENOSYS, "the sandbox's guest agent cannot apply Memory, "
			       "NanoCpus or CapDrop: rebuild the guest image (make guest) and "
			       "remove the sandbox");
		goto fail_pipe;
	}
	if (pipefd[0] >= 0)
		fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
	p = xcalloc(1, sizeof(*p));
	p->d = d;
	p->c = c;
	p->sb = sb;
	p->s = s;
	p->stdin_r = pipefd[0];
	p->logfd = logfd;
	pthread_mutex_lock(&dk.lock);
	c->refs++;
	c->state = DPS_RUNNING;
	c->pid = (int)json_integer_value(json_object_get(resp, "pid"));
	c->started_ns = dk_now_ns();
	c->exit_code = 0;
	c->error[0] = '\0';
	c->starts++;
	c->stream_id = s->id;
	dkc_save_locked(c);
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk.lock);
	json_decref(resp);
	if (c->own_sandbox)     /* where a `docker run` with require_sandbox spends its time */
		daemon_log("container %s: sandbox %s created and booted in %llu ms, image "
			   "attached in %llu ms, started in the guest in %llu ms", c->agent_id,
			   c->sandbox, (unsigned long long)(t_sb - t0) / 1000000,
			   (unsigned long long)(t_img - t_sb) / 1000000,
			   (unsigned long long)(now_mono_ns() - t_img) / 1000000);
	daemon_audit(d, "container.start", c->sandbox,
		     json_pack("{s:s,s:s,s:s,s:O}", "via", "docker", "id", c->id, "name", c->name,
			       "argv", json_object_get(cfg, "Cmd")));
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, dkc_pump_thread, p) != 0)
		abort();        /* the stream would have no reader: nothing sane to do */
	pthread_attr_destroy(&attr);
	return 0;

fail_pipe:
	if (pipefd[0] >= 0)
		close(pipefd[0]);
fail_sb:
	dkc_ports_down(d, sb, c);
	sb_put(d, sb);
fail:
	pthread_mutex_lock(&dk.lock);
	c->pumping = false;
	c->ip[0] = '\0';
	pthread_mutex_unlock(&dk.lock);
	return r;
}

/* A start that failed, as moby records it: the container stays created, with the exit
 * code a shell would give (127 not found, 126 not runnable, else 128) and the error in
 * its state; one made with AutoRemove goes (`docker run --rm` waits for that, and
 * waited forever when it did not). */
static void dkc_start_failed(struct daemon *d, struct dkc *c, int r, const char *msg)
{
	bool autorm;

	pthread_mutex_lock(&dk.lock);
	if (c->state == DPS_RUNNING || c->removing || c->removed) {
		pthread_mutex_unlock(&dk.lock);
		return;
	}
	c->exit_code = r == -ENOENT ? 127 : (r == -EACCES || r == -ENOEXEC) ? 126 : 128;
	snprintf(c->error, sizeof(c->error), "%s", msg);
	autorm = json_is_true(json_object_get(c->host, "AutoRemove"));
	dkc_save_locked(c);
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk.lock);
	if (autorm)
		dkc_rm_now(d, c, NULL, NULL);
}

int dkc_api_start(struct api_call *call)
{
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	r = dkc_start(call->d, c, &call->err);
	if (r < 0)
		dkc_start_failed(call->d, c, r, call->err.msg);
	dkc_unref(c);
	if (r < 0)
		return r;
	call->status = r ? 304 : 204;
	return 0;
}

/* Ask the agent to stop c's init: `signal`, then SIGKILL after t_ms. Returns 1 when c
 * was not running. Waits for the pump to record the exit. */
static int dkc_stop(struct daemon *d, struct dkc *c, int signal, int t_ms, struct k8_err *err)
{
	struct sandbox *sb;
	json_t *req, *resp = NULL;
	struct timespec dl;
	int r;

	pthread_mutex_lock(&dk.lock);
	if (c->state != DPS_RUNNING) {
		pthread_mutex_unlock(&dk.lock);
		return 1;
	}
	pthread_mutex_unlock(&dk.lock);
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
	pthread_mutex_lock(&dk.lock);
	while (c->state == DPS_RUNNING)
		if (pthread_cond_timedwait(&dk.cond, &dk.lock, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&dk.lock);
	return 0;
}

static int dkc_query_t(struct api_call *call, int *t_ms)
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

int dkc_api_stop(struct api_call *call)
{
	struct dkc *c;
	int t_ms, r;

	if ((r = dkc_query_t(call, &t_ms)) || (r = dkc_find_call(call, &c)))
		return r;
	r = dkc_stop(call->d, c, SIGTERM, t_ms, &call->err);
	dkc_unref(c);
	if (r < 0)
		return r;
	call->status = r ? 304 : 204;
	return 0;
}

int dkc_api_restart(struct api_call *call)
{
	struct dkc *c;
	int t_ms, r;

	if ((r = dkc_query_t(call, &t_ms)) || (r = dkc_find_call(call, &c)))
		return r;
	r = dkc_stop(call->d, c, SIGTERM, t_ms, &call->err);
	if (r >= 0) {
		/* the pump may still be closing its stream */
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 10;
		pthread_mutex_lock(&dk.lock);
		while (c->pumping)
			if (pthread_cond_timedwait(&dk.cond, &dk.lock, &dl) == ETIMEDOUT)
				break;
		pthread_mutex_unlock(&dk.lock);
		r = dkc_start(call->d, c, &call->err);
	}
	dkc_unref(c);
	if (r < 0)
		return r;
	call->status = 204;
	return 0;
}

int dkc_api_kill(struct api_call *call)
{
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
	pthread_mutex_lock(&dk.lock);
	sid = c->state == DPS_RUNNING ? c->stream_id : 0;
	pthread_mutex_unlock(&dk.lock);
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

/* ---- archive: HEAD/GET/PUT /containers/{id}/archive?path= (archive.c does the work) ---- */

/* A container never started gets its root in the agent now (the agent's `create`), so
 * files can be copied in before its first start; the start's run uses that root. */
static int dkc_prepare(struct daemon *d, struct dkc *c, struct sandbox *sb, struct k8_err *err)
{
	struct vm_image img;
	json_t *req, *resp = NULL;
	int r;

	if ((r = dkc_image(d, sb, c, &img, err)))
		return r;
	req = json_pack("{s:s,s:s,s:s}", "op", "create", "container", c->agent_id, "image",
			img.digest);
	r = sb_agent_request(sb, req, 30000, &resp, NULL, err);       /* takes req */
	dke_slots_done();      /* dkc_image's */
	json_decref(resp);
	if (r == -EEXIST) {             /* made by an earlier copy, or started meanwhile */
		k8_err_clear(err);
		r = 0;
	} else if (r == -EOPNOTSUPP) {
		k8_err_clear(err);
		return k8_err_set(err, -ENOSYS, "the sandbox's guest agent cannot prepare a "
				  "container before its start: rebuild the guest image (make guest) "
				  "and remove the sandbox");
	}
	if (!r) {
		pthread_mutex_lock(&dk.lock);
		c->prepared = true;
		dkc_save_locked(c);
		pthread_mutex_unlock(&dk.lock);
	}
	return r;
}

/* A stopped container's files are read through its image (the lower layer of the
 * overlay the agent mounts for the copy): an image the engine has given up since is
 * attached and mounted again, as for a run. The slot is not held during the copy (a
 * slow client would hold evictions back): it is the most recently used one by then. */
static int dkc_image_again(struct daemon *d, struct dkc *c, struct sandbox *sb,
			   struct k8_err *err)
{
	struct vm_image img;
	int r = dkc_image(d, sb, c, &img, err);

	if (!r)
		dke_slots_done();       /* dkc_image's */
	return r;
}

/* The container's sandbox, running, with a user reference, and its id in the agent; NULL
 * with call->err filled. A container never started is prepared first (dkc_prepare); a
 * stopped one gets its image back if the engine gave it up (dkc_image_again). */
static struct sandbox *dkc_archive_target(struct api_call *call, char agent_id[13])
{
	struct sandbox *sb = NULL;
	struct dkc *c;
	bool fresh, stopped;

	if (dkc_find_call(call, &c))
		return NULL;
	pthread_mutex_lock(&dk.lock);
	snprintf(agent_id, 13, "%s", c->agent_id);
	fresh = !c->starts && !c->pumping;
	stopped = c->state != DPS_RUNNING && !c->pumping;
	pthread_mutex_unlock(&dk.lock);
	sb = fresh ? dke_get(call->d, c->sandbox, &call->err) : sb_get(call->d, c->sandbox, &call->err);
	if (sb && ((!fresh && sb_ensure_running(call->d, sb, &call->err)) ||
		   (!fresh && stopped && dkc_image_again(call->d, c, sb, &call->err)) ||
		   (fresh && dkc_prepare(call->d, c, sb, &call->err)))) {
		sb_put(call->d, sb);
		sb = NULL;
	}
	dkc_unref(c);
	return sb;
}

int dkc_api_archive_head(struct api_call *call)
{
	char agent_id[13];
	struct sandbox *sb = dkc_archive_target(call, agent_id);

	return sb ? archive_reply_head(call, sb, agent_id) : call->err.code;
}

int dkc_api_archive_get(struct api_call *call)
{
	char agent_id[13];
	struct sandbox *sb = dkc_archive_target(call, agent_id);

	return sb ? archive_reply_get(call, sb, agent_id) : call->err.code;
}

int dkc_api_archive_put(struct api_call *call)
{
	char agent_id[13];
	struct sandbox *sb = dkc_archive_target(call, agent_id);

	return sb ? archive_reply_put(call, sb, agent_id) : call->err.code;
}

/* ---- rm ---- */

/* Remove c for good: the agent's container, the record, its directory. Caller holds a
 * reference; sb may be NULL (looked up). exit_rec (taken): the details of an AutoRemove
 * container's container.exit, recorded once the removal is told, so `docker run --rm`'s
 * answer waits for one audit record fewer; the order in the log stays exit, rm. */
static void dkc_rm_now(struct daemon *d, struct dkc *c, struct sandbox *sb, json_t *exit_rec)
{
	struct k8_err err = { 0 };
	struct sandbox *own = NULL;
	struct dkc **pp;
	bool ran;

	pthread_mutex_lock(&dk.lock);
	if (c->removed) {
		pthread_mutex_unlock(&dk.lock);
		if (exit_rec)
			daemon_audit(d, "container.exit", c->sandbox, exit_rec);
		return;
	}
	c->removing = true;
	/* the agent has it, unless it ran AutoRemove and exited (agent_rm: gone already) */
	ran = (c->starts > 0 || c->prepared) && !(c->agent_rm && c->state == DPS_EXITED);
	pthread_mutex_unlock(&dk.lock);
	if (ran && !sb)
		sb = own = sb_get(d, c->sandbox, &err);
	if (ran && sb && !c->own_sandbox) {
		json_t *req = json_pack("{s:s,s:s}", "op", "rm", "container", c->agent_id), *resp = NULL;
		sb_agent_request(sb, req, 30000, &resp, NULL, &err);  /* takes req */
		json_decref(resp);
	}
	if (own)
		sb_put(d, own);
	pthread_mutex_lock(&dk.lock);
	for (pp = &dk.ctrs; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			c->refs--;      /* the list's */
			break;
		}
	pthread_mutex_unlock(&dk.lock);
	/* A sandbox of its own goes before the removal is told (wait "removed", so `docker
	 * run --rm`'s answer): once the client has it, neither `docker ps -a` nor `kosa8
	 * sandbox ls` shows the container or its VM (docs/docker.md, "require_sandbox"). */
	if (c->own_sandbox) {
		uint64_t t0 = now_mono_ns();
		k8_err_clear(&err);
		sb_remove(d, c->sandbox, false, &err);
		daemon_log("container %s: sandbox %s removed in %llu ms", c->agent_id, c->sandbox,
			   (unsigned long long)(now_mono_ns() - t0) / 1000000);
	}
	pthread_mutex_lock(&dk.lock);
	c->removed = true;
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk.lock);
	if (exit_rec)
		daemon_audit(d, "container.exit", c->sandbox, exit_rec);
	rm_rf(c->dir);
	daemon_audit(d, "container.rm", c->sandbox,
		     json_pack("{s:s,s:s,s:s}", "via", "docker", "id", c->id, "name", c->name));
}

int dkc_api_rm(struct api_call *call)
{
	bool force = dk_qbool(call, "force", false);
	struct timespec dl;
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	pthread_mutex_lock(&dk.lock);
	if (c->state == DPS_RUNNING && !force) {
		pthread_mutex_unlock(&dk.lock);
		r = k8_err_set(&call->err, -EBUSY, "You cannot remove a running container %s. "
			       "Stop the container before attempting removal or force remove",
			       c->id);
		dkc_unref(c);
		return r;
	}
	if (c->removing) {
		pthread_mutex_unlock(&dk.lock);
		r = k8_err_set(&call->err, -EBUSY, "removal of container %s is already in "
			       "progress", c->id);
		dkc_unref(c);
		return r;
	}
	c->removing = true;
	pthread_mutex_unlock(&dk.lock);
	if (force)
		dkc_stop(call->d, c, SIGKILL, 0, &call->err);
	k8_err_clear(&call->err);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 15;
	pthread_mutex_lock(&dk.lock);
	while (c->pumping)
		if (pthread_cond_timedwait(&dk.cond, &dk.lock, &dl) == ETIMEDOUT)
			break;
	c->removing = false;    /* dkc_rm_now claims it again */
	pthread_mutex_unlock(&dk.lock);
	dkc_rm_now(call->d, c, NULL, NULL);
	dkc_unref(c);
	call->status = 204;
	return 0;
}

/* ---- wait ---- */

struct dkc_wait {
	struct dkc *c;
	enum { W_NOT_RUNNING, W_NEXT_EXIT, W_REMOVED } cond;
	unsigned exits0;
};

static void dkc_wait_free(void *ctx)
{
	struct dkc_wait *w = ctx;
	dkc_unref(w->c);
	free(w);
}

/* The body {"StatusCode":N,"Error":null} once the condition holds; the headers went out
 * before (the CLI waits for them before it starts the container). */
static void dkc_wait_body(void *ctx, const struct api_conn *conn)
{
	struct dkc_wait *w = ctx;
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
		pthread_mutex_lock(&dk.lock);
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
		pthread_cond_timedwait(&dk.cond, &dk.lock, &dl);
		pthread_mutex_unlock(&dk.lock);
	}
	code = c->exit_code;
	pthread_mutex_unlock(&dk.lock);
	snprintf(out, sizeof(out), "{\"StatusCode\":%d,\"Error\":null}\n", code);
	(void)!write_full(fd, out, strlen(out));
}

int dkc_api_wait(struct api_call *call)
{
	char buf[32];
	const char *cond = NULL;
	struct dkc_wait *w;
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
	pthread_mutex_lock(&dk.lock);
	w->exits0 = c->exits;
	pthread_mutex_unlock(&dk.lock);
	return api_reply_raw(call, API_RAW_BODY, "application/json", dkc_wait_body, dkc_wait_free, w);
}

/* ---- reading the log: logs and attach ---- */

struct dkc_reader {
	unsigned mask;                  /* 1 << DS_STDOUT | 1 << DS_STDERR */
	bool tty;                       /* raw bytes, no frame headers */
	bool timestamps;
	bool lines;                     /* split into lines (timestamps, tail) */
	int64_t since_ns, until_ns;     /* 0: no bound */
	uint64_t skip_lines;            /* tail: lines to leave out first */
	uint64_t line_no;
	bool at_start[3];               /* per stream: the next byte starts a line */
	bool counting;                  /* first pass of tail: count only */
};

/* Write one piece to the client: framed unless TTY, with the timestamp before a line's
 * first byte when asked. -1 when the client is gone. */
static int dkc_emit(struct dkc_reader *rd, int out, enum ds_type type, int64_t ts,
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
static int dkc_record(struct dkc_reader *rd, int out, enum ds_type type, int64_t ts,
		      const unsigned char *p, size_t n)
{
	if (!(rd->mask & (1u << type)))
		return 0;
	if ((rd->since_ns && ts < rd->since_ns) || (rd->until_ns && ts > rd->until_ns))
		return 0;
	if (!rd->lines)
		return rd->counting ? 0 : dkc_emit(rd, out, type, ts, p, n, false);
	while (n) {
		const unsigned char *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) + 1 : n;
		bool start = rd->at_start[type];

		if (start)
			rd->line_no++;
		rd->at_start[type] = nl != NULL;
		if (!rd->counting && rd->line_no > rd->skip_lines &&
		    dkc_emit(rd, out, type, ts, p, k, start) < 0)
			return -1;
		p += k;
		n -= k;
	}
	return 0;
}

/* Send the log's records from *off up to end; *off moves past what was read. -1 when
 * the client is gone. A torn record at the end waits for the next round. */
static int dkc_send_log(struct dkc_reader *rd, int logfd, uint64_t *off, uint64_t end, int out)
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
		if (dkc_record(rd, out, (enum ds_type)hdr[0], ts, buf, len) < 0) {
			r = -1;
			break;
		}
	}
	free(buf);
	return r;
}

static int dkc_open_log(struct dkc *c)
{
	char path[4400];
	snprintf(path, sizeof(path), "%s/log", c->dir);
	return open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

/* After a 101: wait (up to 2 s) until the client has read the response head. docker-py
 * reads the head through a buffered reader and then the stream from the raw socket:
 * stream bytes that arrive with the head are swallowed by that buffer and lost. On a
 * unix socket SIOCOUTQ counts the bytes the peer has not read yet. */
static void dk_wait_head_read(int sock)
{
	for (int i = 0; i < 2000; i++) {
		int n = 0;
		if (ioctl(sock, SIOCOUTQ, &n) < 0 || n <= 0)
			return;
		usleep(1000);
	}
}

struct dkc_follow {
	struct dkc *c;
	struct dkc_reader rd;
	bool logs, stream, in;          /* attach: replay the log, follow it, take stdin */
	bool follow;                    /* logs: follow */
	bool is_attach;
	unsigned exits0;
	bool done_at_start;             /* attach to a container that is not going to run */
	uint64_t start_off;
};

static void dkc_follow_free(void *ctx)
{
	struct dkc_follow *f = ctx;
	dkc_unref(f->c);
	free(f);
}

/* Client bytes for the container's stdin (attach). */
static void dkc_stdin_write(struct dkc *c, const void *p, size_t n)
{
	int fd;

	pthread_mutex_lock(&dk.lock);
	fd = c->stdin_w >= 0 ? dup(c->stdin_w) : -1;
	pthread_mutex_unlock(&dk.lock);
	if (fd < 0)
		return;
	(void)!write_full(fd, p, n);    /* EPIPE: the process is gone; the bytes too */
	close(fd);
}

static void dkc_stdin_close(struct dkc *c)
{
	pthread_mutex_lock(&dk.lock);
	if (c->stdin_w >= 0)
		close(c->stdin_w);
	c->stdin_w = -1;
	pthread_mutex_unlock(&dk.lock);
}

/* The body of logs (a pipe) and of attach (the hijacked socket when the client asked to
 * upgrade, else a pipe: output only). */
static void dkc_follow_body(void *ctx, const struct api_conn *conn)
{
	struct dkc_follow *f = ctx;
	struct dkc *c = f->c;
	int logfd = dkc_open_log(c), wfd = -1, out = conn->fd;
	uint64_t off = 0, end;
	bool duplex = conn->duplex, client_eof = !f->in || !duplex, gone = false;
	unsigned char *ibuf = NULL;

	if (duplex) {
		int fl = fcntl(out, F_GETFL);
		if (fl >= 0)
			fcntl(out, F_SETFL, fl & ~O_NONBLOCK);
		if (f->in && conn->extra_len)
			dkc_stdin_write(c, conn->extra, conn->extra_len);
		ibuf = xmalloc(65536);
		dk_wait_head_read(out);
	}
	if (f->stream || f->follow)
		wfd = dkc_waiter_add(c);
	pthread_mutex_lock(&dk.lock);
	end = c->log_size;
	pthread_mutex_unlock(&dk.lock);
	if (f->rd.skip_lines && logfd >= 0) {
		/* tail: count the lines first, then leave out all but the last N */
		uint64_t o2 = 0, want = f->rd.skip_lines;
		f->rd.counting = true;
		dkc_send_log(&f->rd, logfd, &o2, end, out);
		f->rd.counting = false;
		f->rd.skip_lines = f->rd.line_no > want ? f->rd.line_no - want : 0;
		f->rd.line_no = 0;
		memset(f->rd.at_start, 1, sizeof(f->rd.at_start));
	}
	if (!f->logs)
		off = f->start_off;
	if (logfd >= 0 && dkc_send_log(&f->rd, logfd, &off, end, out) < 0)
		gone = true;
	while (!gone && (f->stream || f->follow) && wfd >= 0) {
		struct pollfd pfd[2];
		bool fin;

		pthread_mutex_lock(&dk.lock);
		end = c->log_size;
		if (f->is_attach)
			fin = f->done_at_start || c->exits > f->exits0 || c->removed;
		else
			fin = (c->state != DPS_RUNNING && !c->pumping) || c->removed;
		pthread_mutex_unlock(&dk.lock);
		if (logfd < 0)
			logfd = dkc_open_log(c);
		if (logfd >= 0 && dkc_send_log(&f->rd, logfd, &off, end, out) < 0)
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
					dkc_stdin_close(c);
				continue;
			}
			if (f->in)
				dkc_stdin_write(c, ibuf, (size_t)got);
		} else if (client_eof && (pfd[1].revents & (POLLHUP | POLLERR))) {
			break;          /* both directions closed: the client is gone */
		}
	}
	if (duplex && f->in && json_is_true(json_object_get(c->config, "StdinOnce")))
		dkc_stdin_close(c);
	if (wfd >= 0)
		dkc_waiter_del(c, wfd);
	if (logfd >= 0)
		close(logfd);
	if (duplex)
		shutdown(out, SHUT_WR);
	free(ibuf);
}

static bool dkc_tty(struct dkc *c)
{
	return json_is_true(json_object_get(c->config, "Tty"));
}

int dkc_api_logs(struct api_call *call)
{
	char tbuf[32], sbuf[48], ubuf[48];
	const char *tail = NULL, *since = NULL, *until = NULL;
	struct dkc_follow *f;
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
			dkc_follow_free(f);
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
		pthread_mutex_lock(&dk.lock);
		f->start_off = c->log_size;
		pthread_mutex_unlock(&dk.lock);
	}
	return api_reply_raw(call, API_RAW_BODY, f->rd.tty ? "application/vnd.docker.raw-stream" :
			     "application/vnd.docker.multiplexed-stream", dkc_follow_body,
			     dkc_follow_free, f);
}

int dkc_api_attach(struct api_call *call)
{
	struct dkc_follow *f;
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
	pthread_mutex_lock(&dk.lock);
	f->exits0 = c->exits;
	f->start_off = c->log_size;
	pthread_mutex_unlock(&dk.lock);
	return api_reply_raw(call, API_RAW_HIJACK, f->rd.tty ? "application/vnd.docker.raw-stream" :
			     "application/vnd.docker.multiplexed-stream", dkc_follow_body,
			     dkc_follow_free, f);
}

/* The query's h and w (0..65535; moby takes both, absent 0). */
static int dkc_query_hw(struct api_call *call, unsigned *rows, unsigned *cols)
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
static int dkc_resize_agent(struct daemon *d, const char *sandbox, const char *ctr,
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
int dkc_api_resize(struct api_call *call)
{
	char sandbox[64], agent_id[13];
	unsigned rows, cols;
	struct dkc *c;
	bool live;
	int r;

	if ((r = dkc_query_hw(call, &rows, &cols)) || (r = dkc_find_call(call, &c)))
		return r;
	pthread_mutex_lock(&dk.lock);
	live = dkc_tty(c) && c->state == DPS_RUNNING;
	snprintf(sandbox, sizeof(sandbox), "%s", c->sandbox);
	snprintf(agent_id, sizeof(agent_id), "%s", c->agent_id);
	pthread_mutex_unlock(&dk.lock);
	dkc_unref(c);
	if (!live)
		return 0;
	r = dkc_resize_agent(call->d, sandbox, agent_id, 0, rows, cols, &call->err);
	if (r == -ESRCH || r == -ENOENT) {      /* it exited meanwhile */
		k8_err_clear(&call->err);
		return 0;
	}
	return r;
}

/* ---- list and inspect (src/docker/ps.c shows them) ---- */

/* c as ps.c sees it; valid while dk.lock is held. */
static void dkc_view_locked(const struct dkc *c, struct dps_ctr *v)
{
	*v = (struct dps_ctr){ .id = c->id, .name = c->name, .image = c->image,
			       .image_id = c->image_id, .sandbox = c->sandbox, .error = c->error,
			       .ip = c->ip, .config = c->config, .host = c->host,
			       .mounts = c->mounts, .published = c->published, .state = c->state,
			       .exit_code = c->exit_code, .pid = c->pid, .removing = c->removing,
			       .created_ns = c->created_ns, .started_ns = c->started_ns,
			       .finished_ns = c->finished_ns };
}

static bool dkc_match_locked(const struct dkc *c, const struct dfilters *f)
{
	struct dps_ctr v;

	dkc_view_locked(c, &v);
	return dps_match(&v, f);
}

int dkc_api_list(struct api_call *call)
{
	char fbuf[DF_FILTER_JSON_MAX + 1];
	const char *fj = NULL;
	struct dfilters f;
	bool all = dk_qbool(call, "all", false);
	uint64_t limit = 0;
	int64_t now = dk_now_ns();
	json_t *out;
	int r;

	if ((r = api_query_str(call, "filters", fbuf, sizeof(fbuf), &fj)))
		return r;
	if (api_query_u64(call, "limit", 0, 100000, &limit)) {
		const char *lv = call->query(call->query_ctx, "limit");
		if (!lv || strcmp(lv, "-1"))
			return call->err.code;
		k8_err_clear(&call->err);
	}
	if ((r = dps_filters(fj, &f, &all, &call->err)))
		return r;
	out = json_array();
	pthread_mutex_lock(&dk.lock);
	dk_load_locked(call->d);
	/* newest first, like moby (the list is kept newest first), at most `limit` */
	for (struct dkc *c = dk.ctrs; c && (!limit || json_array_size(out) < limit); c = c->next) {
		struct dps_ctr v;

		dkc_view_locked(c, &v);
		if ((all || c->state == DPS_RUNNING) && dps_match(&v, &f))
			json_array_append_new(out, dps_list_entry(&v, now));
	}
	pthread_mutex_unlock(&dk.lock);
	dfilters_free(&f);
	call->out = out;
	return 0;
}

int dkc_api_inspect(struct api_call *call)
{
	struct dps_ctr v;
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	pthread_mutex_lock(&dk.lock);
	dkc_view_locked(c, &v);
	call->out = dps_inspect(&v);
	if (!call->out)
		k8_err_set(&call->err, -EIO, "container %s: its record is damaged", c->id);
	pthread_mutex_unlock(&dk.lock);
	dkc_unref(c);
	return call->out ? 0 : call->err.code;
}

int dkc_count(struct daemon *d, int *running, int *stopped)
{
	int n = 0;

	*running = *stopped = 0;
	pthread_mutex_lock(&dk.lock);
	dk_load_locked(d);
	for (struct dkc *c = dk.ctrs; c; c = c->next) {
		n++;
		if (c->state == DPS_RUNNING)
			(*running)++;
		else
			(*stopped)++;
	}
	pthread_mutex_unlock(&dk.lock);
	return n;
}

/* ---- stats and top: the agent's ctr.stats and ctr.top, in Docker's shapes ---- */

/* An agent that predates ctr.stats/ctr.top: say what to do instead of its words. */
static void dkc_op_refused(struct k8_err *err, const char *what)
{
	if (err->code == -EOPNOTSUPP) {
		k8_err_clear(err);
		k8_err_set(err, -ENOSYS, "the sandbox's guest agent has no %s: rebuild the guest "
			   "image (make guest) and remove the sandbox", what);
	}
}

/* One sample of c's agent container (op "ctr.stats" or "ctr.top"): its answer, or NULL
 * with err filled (-ESRCH: it does not run). */
static json_t *dkc_agent_ask(struct daemon *d, struct dkc *c, const char *op,
			     struct k8_err *err)
{
	char sandbox[64], agent_id[13];
	struct sandbox *sb;
	json_t *resp = NULL;
	bool running;

	pthread_mutex_lock(&dk.lock);
	running = c->state == DPS_RUNNING;
	snprintf(sandbox, sizeof(sandbox), "%s", c->sandbox);
	snprintf(agent_id, sizeof(agent_id), "%s", c->agent_id);
	pthread_mutex_unlock(&dk.lock);
	if (!running) {
		k8_err_set(err, -ESRCH, "Container %s is not running", c->id);
		return NULL;
	}
	sb = sb_get(d, sandbox, err);
	if (!sb)
		return NULL;
	if (sb_agent_request(sb, json_pack("{s:s,s:s}", "op", op, "container", agent_id), 10000,
			     &resp, NULL, err))
		resp = NULL;
	sb_put(d, sb);
	return resp;
}

static void dkc_stats_sample(struct daemon *d, struct dkc *c, struct dstats_sample *s,
			     struct k8_err *err)
{
	json_t *ans = dkc_agent_ask(d, c, "ctr.stats", err);

	dstats_from_agent(ans, ans ? dk_now_ns() : 0, s);
	json_decref(ans);
}

struct dkc_stats {
	struct daemon *d;
	struct dkc *c;
	bool stream, one_shot;
	struct dstats_sample pre, cur;  /* cur: taken by the handler (the first) */
};

static void dkc_stats_free(void *ctx)
{
	struct dkc_stats *st = ctx;

	dstats_clear(&st->pre);
	dstats_clear(&st->cur);
	dkc_unref(st->c);
	free(st);
}

/* One object and a newline; -1 when the client left. */
static int dkc_stats_write(struct dkc_stats *st, int fd)
{
	json_t *o = dstats_json(&st->cur, &st->pre, st->c->id, st->c->name);
	char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
	int r = t && write_full(fd, t, strlen(t)) == 0 && write_full(fd, "\n", 1) == 0 ? 0 : -1;

	free(t);
	json_decref(o);
	return r;
}

/* The body: moby's rhythm, a sample a second. stream: each object with the one before as
 * its precpu_stats (the first with zeros), until the container stops or the client goes;
 * stream=false: the second object (so the CPU delta is there), or with one-shot the
 * first; a container that does not run: one object of zeros. */
static void dkc_stats_body(void *ctx, const struct api_conn *conn)
{
	struct dkc_stats *st = ctx;

	for (bool first = true;; first = false) {
		struct k8_err err = { 0 };
		struct pollfd q = { .fd = conn->fd, .events = 0 };

		if ((st->stream || st->one_shot || !first || !st->cur.read_ns) &&
		    dkc_stats_write(st, conn->fd) < 0)
			return;
		if ((!st->stream && (!first || st->one_shot)) || !st->cur.read_ns)
			return;
		/* a second apart; a client that left shows as an error on the pipe */
		if (poll(&q, 1, 1000) > 0 && (q.revents & POLLERR))
			return;
		dstats_clear(&st->pre);
		st->pre = st->cur;
		dkc_stats_sample(st->d, st->c, &st->cur, &err);
		if (!st->cur.read_ns && st->stream)
			return;         /* it stopped (or its sandbox went): the stream ends */
	}
}

/* GET /containers/{id}/stats?stream=&one-shot= (docs/docker.md "Stats and top"). */
int dkc_api_stats(struct api_call *call)
{
	struct dkc_stats *st;
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	st = xcalloc(1, sizeof(*st));
	st->d = call->d;
	st->c = c;
	st->stream = dk_qbool(call, "stream", true);
	st->one_shot = dk_qbool(call, "one-shot", false);
	/* the first sample before the answer: an agent's refusal is a status, not a cut body */
	dkc_stats_sample(call->d, c, &st->cur, &call->err);
	if (!st->cur.read_ns && call->err.code != -ESRCH) {
		dkc_op_refused(&call->err, "stats (ctr.stats)");
		r = call->err.code ? call->err.code : -EIO;
		dkc_stats_free(st);
		return r;
	}
	k8_err_clear(&call->err);
	return api_reply_raw(call, API_RAW_BODY, "application/json", dkc_stats_body,
			     dkc_stats_free, st);
}

/* GET /containers/{id}/top?ps_args=: moby's 409 when it does not run. */
int dkc_api_top(struct api_call *call)
{
	char abuf[128];
	const char *args = NULL;
	enum dtop_fmt fmt;
	struct dkc *c;
	json_t *ans;
	int r;

	if ((r = api_query_str(call, "ps_args", abuf, sizeof(abuf), &args)) ||
	    (r = dtop_args(args, &fmt, &call->err)) || (r = dkc_find_call(call, &c)))
		return r;
	ans = dkc_agent_ask(call->d, c, "ctr.top", &call->err);
	dkc_unref(c);
	if (!ans) {
		if (call->err.code == -ESRCH)
			call->err.code = -EBUSY;        /* 409, as moby */
		dkc_op_refused(&call->err, "process table (ctr.top)");
		return call->err.code ? call->err.code : -EIO;
	}
	call->out = dtop_json(ans, fmt, time(NULL));
	json_decref(ans);
	return 0;
}

/* ---- exec ---- */

static void dkx_free(struct dkx *x)
{
	dspec_exec_clear(&x->spec);
	free(x);
}

/* Find an exec by id (full, or a unique prefix); copies it out under the lock. */
static struct dkx *dkx_find_locked(const char *id)
{
	struct dkx *x, *hit = NULL;
	size_t n = strlen(id);

	if (!n)
		return NULL;
	for (x = dk.execs; x; x = x->next) {
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

int dkc_api_exec_create(struct api_call *call)
{
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
	pthread_mutex_lock(&dk.lock);
	if (c->state != DPS_RUNNING) {
		pthread_mutex_unlock(&dk.lock);
		r = k8_err_set(&call->err, -EBUSY, "Container %s is not running", c->id);
		dkx_free(x);
		dkc_unref(c);
		return r;
	}
	x->next = dk.execs;
	dk.execs = x;
	if (++dk.nexecs > DKX_MAX) {
		/* forget the oldest finished exec */
		struct dkx **last = NULL;
		for (pp = &dk.execs; *pp; pp = &(*pp)->next)
			if (!(*pp)->running && *pp != x)
				last = pp;
		if (last) {
			struct dkx *old = *last;
			*last = old->next;
			dkx_free(old);
			dk.nexecs--;
		}
	}
	pthread_mutex_unlock(&dk.lock);
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

static void dkx_finish(const char *id, int code)
{
	struct dkx *x;

	pthread_mutex_lock(&dk.lock);
	x = dkx_find_locked(id);
	if (x) {
		x->running = false;
		x->exit_code = code;
	}
	pthread_cond_broadcast(&dk.cond);
	pthread_mutex_unlock(&dk.lock);
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
	struct dkc_reader rd = { .tty = xr->tty };
	int code;

	if (duplex) {
		int fl = fcntl(out, F_GETFL);
		if (fl >= 0)
			fcntl(out, F_SETFL, fl & ~O_NONBLOCK);
		dk_wait_head_read(out);
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
			    dkc_emit(&rd, out, t, 0, f->data, len, false) < 0)
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
	dkx_finish(xr->id, code);
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

int dkc_api_exec_start(struct api_call *call)
{
	const char *id = api_param(call, "id");
	bool detach = json_is_true(json_object_get(call->body, "Detach"));
	struct dkx_run *xr;
	struct dspec_exec spec;
	struct dkx *x;
	struct dkc *c;
	json_t *req = NULL, *resp = NULL, *benv;
	char ctr[DN_ID_LEN + 1];
	int r;

	pthread_mutex_lock(&dk.lock);
	x = dkx_find_locked(id);
	if (!x) {
		pthread_mutex_unlock(&dk.lock);
		return k8_err_set(&call->err, -ENOENT, "No such exec instance: %.100s", id);
	}
	if (x->started) {
		pthread_mutex_unlock(&dk.lock);
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
	pthread_mutex_unlock(&dk.lock);

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
		dkc_tty_refused(&call->err);
		if (call->err.code == -ENOSYS) {
			dkc_unref(c);
			dkx_finish(xr->id, 126);
			json_decref(req);
			dkx_run_free(xr);
			return call->err.code;
		}
		int code = r == -ENOENT ? 127 : (r == -EACCES || r == -ENOEXEC) ? 126 : 125;
		dkc_unref(c);
		dkx_finish(xr->id, code);
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
	pthread_mutex_lock(&dk.lock);
	if ((x = dkx_find_locked(xr->id))) {
		x->pid = (int)json_integer_value(json_object_get(resp, "pid"));
		x->stream_id = xr->s->id;
		snprintf(x->sandbox, sizeof(x->sandbox), "%s", c->sandbox);
	}
	pthread_mutex_unlock(&dk.lock);
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
	dkx_finish(xr->id, 126);
	dkx_run_free(xr);
	return r;
}

int dkc_api_exec_inspect(struct api_call *call)
{
	struct dkx *x;
	json_t *args;

	pthread_mutex_lock(&dk.lock);
	x = dkx_find_locked(api_param(call, "id"));
	if (!x) {
		pthread_mutex_unlock(&dk.lock);
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
	pthread_mutex_unlock(&dk.lock);
	return 0;
}

/* An exec's tty size: kept for its start when it has not started (the docker CLI may
 * resize first), else set on its pty in the guest. */
int dkc_api_exec_resize(struct api_call *call)
{
	char sandbox[64], agent_id[13] = "";
	unsigned rows, cols;
	uint32_t stream = 0;
	struct dkx *x;
	struct dkc *c;
	int r;

	if ((r = dkc_query_hw(call, &rows, &cols)))
		return r;
	pthread_mutex_lock(&dk.lock);
	x = dkx_find_locked(api_param(call, "id"));
	if (!x) {
		pthread_mutex_unlock(&dk.lock);
		return k8_err_set(&call->err, -ENOENT, "No such exec instance: %.100s",
				  api_param(call, "id"));
	}
	if (!x->started) {
		x->spec.rows = rows;
		x->spec.cols = cols;
	} else if (x->spec.tty && x->running && x->stream_id) {
		stream = x->stream_id;
		snprintf(sandbox, sizeof(sandbox), "%s", x->sandbox);
		for (c = dk.ctrs; c; c = c->next)
			if (!strcmp(c->id, x->ctr))
				snprintf(agent_id, sizeof(agent_id), "%s", c->agent_id);
	}
	pthread_mutex_unlock(&dk.lock);
	if (!stream || !agent_id[0])
		return 0;
	r = dkc_resize_agent(call->d, sandbox, agent_id, stream, rows, cols, &call->err);
	if (r == -ESRCH || r == -ENOENT) {      /* it exited meanwhile */
		k8_err_clear(&call->err);
		return 0;
	}
	return r;
}

/* ---- bind mounts: the client's (src/docker/spec.c), checked against the roots ---- */

/* The roots, for messages: "/a, /b". */
static void dkc_roots(struct daemon *d, char *out, size_t n)
{
	size_t o = 0;
	out[0] = '\0';
	for (int i = 0; i < d->nallow_mounts && o < n; i++)
		o += (size_t)snprintf(out + o, n - o, "%s%s", i ? ", " : "", d->allow_mounts[i]);
}

/* One bind on the host: its path resolved (a symlink out of a root is refused), below an
 * --allow-mount root; into c's binds (the agent's: the root's shared folder and the
 * sub-path) and Mounts (inspect's). */
static int dkc_bind_host(struct daemon *d, struct dkc *c, const struct dspec_bind *b,
			 struct k8_err *err)
{
	char real[PATH_MAX], roots[1024], folder[64];
	const char *sub;
	int root = -1;

	if (!d->nallow_mounts)
		return k8_err_set(err, -EPERM, "bind mount %.200s: this daemon allows no bind "
				  "mounts; start it with --allow-mount DIR", b->src);
	if (!realpath(b->src, real))
		return k8_err_set(err, -EINVAL, "bind source path does not exist: %.200s", b->src);
	for (int i = 0; i < d->nallow_mounts && i < K8_MAX_MOUNTS; i++)
		if (dspec_below(real, d->allow_mounts[i]))
			root = i;
	if (root < 0) {
		dkc_roots(d, roots, sizeof(roots));
		return k8_err_set(err, -EPERM, "bind mount %.200s is not below the folders this "
				  "daemon allows to mount (%s); restart the daemon with "
				  "--allow-mount", b->src, roots);
	}
	snprintf(folder, sizeof(folder), "/kosa8/bind/%d", root);
	sub = real + strlen(d->allow_mounts[root]);
	while (*sub == '/')
		sub++;
	json_array_append_new(c->binds, json_pack("{s:s,s:s,s:s,s:b}", "folder", folder, "sub",
						  sub, "dst", b->dst, "ro", b->ro));
	json_array_append_new(c->mounts, json_pack("{s:s,s:s,s:s,s:s,s:b,s:s}", "Type", "bind",
						   "Source", real, "Destination", b->dst, "Mode",
						   b->ro ? "ro" : "", "RW", !b->ro, "Propagation",
						   "rprivate"));
	return 0;
}

static int dkc_binds(struct daemon *d, struct dkc *c, const json_t *hc, struct k8_err *err)
{
	struct dspec_bind *b = xcalloc(DSPEC_BINDS_MAX, sizeof(*b));
	size_t n = 0;
	int r = dspec_binds(hc, b, &n, err);

	for (size_t i = 0; !r && i < n; i++)
		r = dkc_bind_host(d, c, &b[i], err);
	free(b);
	return r;
}

/* ---- prune ---- */

bool dkc_image_used(struct daemon *d, const char *config_digest)
{
	bool used = false;

	pthread_mutex_lock(&dk.lock);
	dk_load_locked(d);
	for (struct dkc *c = dk.ctrs; c && !used; c = c->next)
		used = !c->removed && !strcmp(c->image_id, config_digest);
	pthread_mutex_unlock(&dk.lock);
	return used;
}

int dkc_image_release(struct daemon *d, const char *digest, struct k8_err *err)
{
	struct sandbox *sb = sb_get(d, DKE_NAME, err);
	int r;

	if (!sb)
		return err->code;
	dke_slots_write();
	r = sb_image_evict(d, sb, digest, err);
	dke_slots_done();
	sb_put(d, sb);
	return r;
}

/* POST /containers/prune: every container not running (moby's: created ones too), as
 * `docker container prune`; filters `label` and `until` (created before it). Each
 * removal is audited as container.rm. */
int dkc_api_prune(struct api_call *call)
{
	static const char *const allowed[] = { "label", "until", NULL };
	char fbuf[DF_FILTER_JSON_MAX + 1];
	const char *fj = NULL;
	struct dfilters f = { 0 };
	cleanup_free struct dkc **picked = xcalloc(DKC_MAX, sizeof(*picked));
	json_t *ids = json_array();
	uint64_t space = 0;
	int64_t until;
	int n = 0, r;

	if ((r = api_query_str(call, "filters", fbuf, sizeof(fbuf), &fj)) ||
	    (fj && (r = dfilters_parse(fj, allowed, &f, &call->err))) ||
	    (r = dfilters_until(&f, dk_now_ns(), &until, &call->err))) {
		dfilters_free(&f);
		json_decref(ids);
		return r;
	}
	pthread_mutex_lock(&dk.lock);
	dk_load_locked(call->d);
	for (struct dkc *c = dk.ctrs; c && n < DKC_MAX; c = c->next) {
		if (c->state == DPS_RUNNING || c->pumping || c->removing || !dkc_match_locked(c, &f) ||
		    c->created_ns > until)
			continue;
		c->refs++;
		c->removing = true;     /* a start from now on finds it going */
		picked[n++] = c;
	}
	pthread_mutex_unlock(&dk.lock);
	dfilters_free(&f);
	for (int i = 0; i < n; i++) {
		struct dkc *c = picked[i];
		bool gone;

		pthread_mutex_lock(&dk.lock);
		space += c->log_size;   /* what the host keeps of it; the guest's layer is not counted */
		c->removing = false;    /* dkc_rm_now claims it again */
		pthread_mutex_unlock(&dk.lock);
		dkc_rm_now(call->d, c, NULL, NULL);
		pthread_mutex_lock(&dk.lock);
		gone = c->removed;
		pthread_mutex_unlock(&dk.lock);
		if (gone)
			json_array_append_new(ids, json_string(c->id));
		dkc_unref(c);
	}
	call->out = json_pack("{s:o,s:I}", "ContainersDeleted", ids, "SpaceReclaimed",
			      (json_int_t)space);
	return 0;
}
