/* SPDX-License-Identifier: Apache-2.0 */
/* docker_ctr.c - the Docker API's container records: create, rm, list, inspect, archive,
 * prune (docker_ctr.h; the shared parts: docker_int.h; docs/docker.md "Containers").
 *
 * A Docker container is a record here (id, name, Docker's Config and HostConfig, state)
 * kept in $KOSA8_HOME/docker/containers/<id>/state.json, and, while it runs, an agent
 * container (the first 12 hex digits of its id) in the engine sandbox (docker_engine.c),
 * which docker_run.c starts and whose stream its pump owns. What a create request means
 * is src/docker/spec.c's; how a record is shown is src/docker/ps.c's.
 */
#include "daemon/docker_ctr.h"
#include "daemon/docker_int.h"
#include "daemon/archive.h"
#include "daemon/docker_engine.h"
#include "docker/query.h"
#include "image/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void *docker_make(struct daemon *d)
{
	struct docker *dk = xcalloc(1, sizeof(*dk));

	dk->d = d;
	pthread_mutex_init(&dk->lock, NULL);
	pthread_cond_init(&dk->cond, NULL);
	return dk;
}

struct docker *docker_of(struct daemon *d)
{
	return daemon_state(d, (void **)&d->docker, docker_make);
}

int64_t dk_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* moby's booleans in a query ("1", "True", "false" ...); absent: def. */
bool dk_qbool(struct api_call *call, const char *key, bool def)
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

void dkc_unref(struct dkc *c)
{
	struct docker *dk = c ? c->dk : NULL;

	if (!c)
		return;
	pthread_mutex_lock(&dk->lock);
	dkc_unref_locked(c);
	pthread_mutex_unlock(&dk->lock);
}

/* Tell followers something changed (caller holds dk->lock). */
void dkc_notify_locked(struct dkc *c)
{
	struct docker *dk = c->dk;
	uint64_t one = 1;
	for (int i = 0; i < DKC_WAITERS; i++)
		if (c->waiters[i] >= 0)
			(void)!write(c->waiters[i], &one, sizeof(one));
	pthread_cond_broadcast(&dk->cond);
}

int dkc_waiter_add(struct dkc *c)
{
	struct docker *dk = c->dk;
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	if (fd < 0)
		return -1;
	pthread_mutex_lock(&dk->lock);
	for (int i = 0; i < DKC_WAITERS; i++)
		if (c->waiters[i] < 0) {
			c->waiters[i] = fd;
			pthread_mutex_unlock(&dk->lock);
			return fd;
		}
	pthread_mutex_unlock(&dk->lock);
	close(fd);
	return -1;
}

void dkc_waiter_del(struct dkc *c, int fd)
{
	struct docker *dk = c->dk;
	pthread_mutex_lock(&dk->lock);
	for (int i = 0; i < DKC_WAITERS; i++)
		if (c->waiters[i] == fd)
			c->waiters[i] = -1;
	pthread_mutex_unlock(&dk->lock);
	close(fd);
}

/* The stdin pipe of a container with OpenStdin, made before the first attach or start
 * so stdin sent before the process runs waits in it (64 KiB). Caller holds dk->lock. */
void dkc_stdin_pipe_locked(struct dkc *c)
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

static struct dkc *dkc_new(struct docker *dk)
{
	struct dkc *c = xcalloc(1, sizeof(*c));

	c->dk = dk;
	c->refs = 1;
	c->stdin_r = c->stdin_w = -1;
	c->exit_code = 0;
	for (int i = 0; i < DKC_WAITERS; i++)
		c->waiters[i] = -1;
	return c;
}

/* state.json: everything but the live parts (pump, pipes, waiters). */
void dkc_save_locked(struct dkc *c)
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
static struct dkc *dkc_load_one(struct docker *dk, const char *dir)
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
	c = dkc_new(dk);
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

/* Load the records once (caller holds dk->lock). */
static void dk_load_locked(struct docker *dk)
{
	DIR *dh;
	struct dirent *e;

	if (dk->loaded)
		return;
	dk->loaded = true;
	snprintf(dk->dir, sizeof(dk->dir), "%s/docker/containers", dk->d->home);
	mkdir_p(dk->dir, 0700);
	dh = opendir(dk->dir);
	if (!dh)
		return;
	while ((e = readdir(dh))) {
		char sub[4400];
		struct dkc *c;
		if (!dn_is_full_id(e->d_name))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dk->dir, e->d_name);
		c = dkc_load_one(dk, sub);
		if (!c)
			continue;
		if (c->state == DPS_EXITED && c->error[0] && !c->finished_ns)
			c->finished_ns = dk_now_ns();
		dkc_save_locked(c);
		c->next = dk->ctrs;
		dk->ctrs = c;
	}
	closedir(dh);
}

/* Find a container by full id, name or unique id prefix (names.c's order). Returns it
 * with a reference, or NULL with Docker's 404 (or moby's 400 for an ambiguous prefix). */
struct dkc *dkc_find(struct daemon *d, const char *ref, struct k8_err *err)
{
	struct docker *dk = docker_of(d);
	const char **ids, **names;
	struct dkc *c, *found = NULL;
	size_t n = 0, i = 0;
	long at;

	pthread_mutex_lock(&dk->lock);
	dk_load_locked(dk);
	for (c = dk->ctrs; c; c = c->next)
		n++;
	ids = xcalloc(n + 1, sizeof(*ids));
	names = xcalloc(n + 1, sizeof(*names));
	for (c = dk->ctrs; c; c = c->next, i++) {
		ids[i] = c->id;
		names[i] = c->name;
	}
	at = dn_lookup(ids, names, n, ref);
	if (at >= 0) {
		for (c = dk->ctrs, i = 0; c && i < (size_t)at; c = c->next, i++)
			;
		found = c;
		found->refs++;
	}
	pthread_mutex_unlock(&dk->lock);
	free(ids);
	free(names);
	if (at == -EINVAL)
		k8_err_set(err, -EINVAL, "multiple IDs found with provided prefix: %.100s", ref);
	else if (!found)
		k8_err_set(err, -ENOENT, "No such container: %.200s", ref);
	return found;
}

int dkc_find_call(struct api_call *call, struct dkc **out)
{
	*out = dkc_find(call->d, api_param(call, "id"), &call->err);
	return *out ? 0 : call->err.code;
}

/* ---- create ---- */

static int dkc_binds(struct daemon *d, struct dkc *c, const json_t *hc, struct k8_err *err);

static int dkc_name_taken_locked(struct docker *dk, const char *name)
{
	for (struct dkc *o = dk->ctrs; o; o = o->next)
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
	struct docker *dk = docker_of(call->d);
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

	c = dkc_new(dk);
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

	pthread_mutex_lock(&dk->lock);
	dk_load_locked(dk);
	n = 0;
	for (struct dkc *o = dk->ctrs; o; o = o->next)
		n++;
	if (!name[0])
		snprintf(name, sizeof(name), "kosa8_%.10s", c->id + 12);
	if (dkc_name_taken_locked(dk, name)) {
		struct dkc *o = dk->ctrs;
		while (o && strcmp(o->name, name))
			o = o->next;
		pthread_mutex_unlock(&dk->lock);
		r = k8_err_set(&call->err, -EEXIST, "Conflict. The container name \"/%s\" is "
			       "already in use by container \"%s\". You have to remove (or rename) "
			       "that container to be able to reuse that name.", name, o ? o->id : "");
		goto fail;
	}
	if (n >= DKC_MAX) {
		pthread_mutex_unlock(&dk->lock);
		r = k8_err_set(&call->err, -ENOSPC, "too many containers (%d); remove some",
			       DKC_MAX);
		goto fail;
	}
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(c->dir, sizeof(c->dir), "%s/%s", dk->dir, c->id);
	if ((r = mkdir_p(c->dir, 0700))) {
		pthread_mutex_unlock(&dk->lock);
		k8_err_set(&call->err, r, "mkdir %s: %s", c->dir, strerror(-r));
		goto fail;
	}
	dkc_save_locked(c);
	if (json_is_true(json_object_get(c->config, "OpenStdin")) ||
	    json_is_true(json_object_get(c->config, "Tty")))
		dkc_stdin_pipe_locked(c);
	c->next = dk->ctrs;
	dk->ctrs = c;
	pthread_mutex_unlock(&dk->lock);
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

/* The agent's `rm` of container `agent_id` in sb, its outcome not looked at (it may be
 * gone already). */
void dkc_agent_rm(struct sandbox *sb, const char *agent_id)
{
	json_t *rr = NULL;
	struct k8_err e = { 0 };

	sb_agent_request(sb, json_pack("{s:s,s:s}", "op", "rm", "container", agent_id), 30000,
			 &rr, NULL, &e);        /* takes the request */
	json_decref(rr);
}

/* ---- archive: HEAD/GET/PUT /containers/{id}/archive?path= (archive.c does the work) ---- */

/* The agent's `create` of a container's root in its image (slot_use's fn). */
struct dkc_root {
	struct dkc *c;
	struct sandbox *sb;
};

static int dkc_create_root(void *ctx, const struct vm_image *img, const json_t *icfg,
			   struct k8_err *err)
{
	struct dkc_root *k = ctx;
	json_t *resp = NULL;
	int r;

	(void)icfg;
	r = sb_agent_request(k->sb, json_pack("{s:s,s:s,s:s}", "op", "create", "container",
					      k->c->agent_id, "image", img->digest),
			     30000, &resp, NULL, err);  /* takes the request */
	json_decref(resp);
	return r;
}

/* A container never started gets its root in the agent now (the agent's `create`), so
 * files can be copied in before its first start; the start's run uses that root. */
static int dkc_prepare(struct daemon *d, struct dkc *c, struct sandbox *sb, struct k8_err *err)
{
	struct docker *dk = c->dk;
	struct dkc_root k = { c, sb };
	int r = dkr_with_image(d, sb, c, dkc_create_root, &k, err);

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
		pthread_mutex_lock(&dk->lock);
		c->prepared = true;
		dkc_save_locked(c);
		pthread_mutex_unlock(&dk->lock);
	}
	return r;
}

static int dkc_image_only(void *ctx, const struct vm_image *img, const json_t *icfg,
			  struct k8_err *err)
{
	(void)ctx, (void)img, (void)icfg, (void)err;
	return 0;
}

/* A stopped container's files are read through its image (the lower layer of the
 * overlay the agent mounts for the copy): an image the engine has given up since is
 * attached and mounted again, as for a run. The slot is not held during the copy (a
 * slow client would hold evictions back): it is the most recently used one by then. */
static int dkc_image_again(struct daemon *d, struct dkc *c, struct sandbox *sb,
			   struct k8_err *err)
{
	return dkr_with_image(d, sb, c, dkc_image_only, NULL, err);
}

/* The container's sandbox, running, with a user reference, and its id in the agent; NULL
 * with call->err filled. A container never started is prepared first (dkc_prepare); a
 * stopped one gets its image back if the engine gave it up (dkc_image_again). */
static struct sandbox *dkc_archive_target(struct api_call *call, char agent_id[13])
{
	struct docker *dk = docker_of(call->d);
	struct sandbox *sb = NULL;
	struct dkc *c;
	bool fresh, stopped;

	if (dkc_find_call(call, &c))
		return NULL;
	pthread_mutex_lock(&dk->lock);
	snprintf(agent_id, 13, "%s", c->agent_id);
	fresh = !c->starts && !c->pumping;
	stopped = c->state != DPS_RUNNING && !c->pumping;
	pthread_mutex_unlock(&dk->lock);
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
void dkc_rm_now(struct daemon *d, struct dkc *c, struct sandbox *sb, json_t *exit_rec)
{
	struct docker *dk = c->dk;
	struct k8_err err = { 0 };
	struct sandbox *own = NULL;
	struct dkc **pp;
	bool ran;

	pthread_mutex_lock(&dk->lock);
	if (c->removed) {
		pthread_mutex_unlock(&dk->lock);
		if (exit_rec)
			daemon_audit(d, "container.exit", c->sandbox, exit_rec);
		return;
	}
	c->removing = true;
	/* the agent has it, unless it ran AutoRemove and exited (agent_rm: gone already) */
	ran = (c->starts > 0 || c->prepared) && !(c->agent_rm && c->state == DPS_EXITED);
	pthread_mutex_unlock(&dk->lock);
	if (ran && !sb)
		sb = own = sb_get(d, c->sandbox, &err);
	if (ran && sb && !c->own_sandbox) {
		json_t *req = json_pack("{s:s,s:s}", "op", "rm", "container", c->agent_id), *resp = NULL;
		sb_agent_request(sb, req, 30000, &resp, NULL, &err);  /* takes req */
		json_decref(resp);
	}
	if (own)
		sb_put(d, own);
	pthread_mutex_lock(&dk->lock);
	for (pp = &dk->ctrs; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			c->refs--;      /* the list's */
			break;
		}
	pthread_mutex_unlock(&dk->lock);
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
	pthread_mutex_lock(&dk->lock);
	c->removed = true;
	dkc_notify_locked(c);
	pthread_mutex_unlock(&dk->lock);
	if (exit_rec)
		daemon_audit(d, "container.exit", c->sandbox, exit_rec);
	rm_rf(c->dir);
	daemon_audit(d, "container.rm", c->sandbox,
		     json_pack("{s:s,s:s,s:s}", "via", "docker", "id", c->id, "name", c->name));
}

int dkc_api_rm(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	bool force = dk_qbool(call, "force", false);
	struct timespec dl;
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	pthread_mutex_lock(&dk->lock);
	if (c->state == DPS_RUNNING && !force) {
		pthread_mutex_unlock(&dk->lock);
		r = k8_err_set(&call->err, -EBUSY, "You cannot remove a running container %s. "
			       "Stop the container before attempting removal or force remove",
			       c->id);
		dkc_unref(c);
		return r;
	}
	if (c->removing) {
		pthread_mutex_unlock(&dk->lock);
		r = k8_err_set(&call->err, -EBUSY, "removal of container %s is already in "
			       "progress", c->id);
		dkc_unref(c);
		return r;
	}
	c->removing = true;
	pthread_mutex_unlock(&dk->lock);
	if (force)
		dkr_stop(call->d, c, SIGKILL, 0, &call->err);
	k8_err_clear(&call->err);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 15;
	pthread_mutex_lock(&dk->lock);
	while (c->pumping)
		if (pthread_cond_timedwait(&dk->cond, &dk->lock, &dl) == ETIMEDOUT)
			break;
	c->removing = false;    /* dkc_rm_now claims it again */
	pthread_mutex_unlock(&dk->lock);
	dkc_rm_now(call->d, c, NULL, NULL);
	dkc_unref(c);
	call->status = 204;
	return 0;
}

bool dkc_tty(struct dkc *c)
{
	return json_is_true(json_object_get(c->config, "Tty"));
}

/* ---- list and inspect (src/docker/ps.c shows them) ---- */

/* c as ps.c sees it; valid while dk->lock is held. */
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
	struct docker *dk = docker_of(call->d);
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
	pthread_mutex_lock(&dk->lock);
	dk_load_locked(dk);
	/* newest first, like moby (the list is kept newest first), at most `limit` */
	for (struct dkc *c = dk->ctrs; c && (!limit || json_array_size(out) < limit); c = c->next) {
		struct dps_ctr v;

		dkc_view_locked(c, &v);
		if ((all || c->state == DPS_RUNNING) && dps_match(&v, &f))
			json_array_append_new(out, dps_list_entry(&v, now));
	}
	pthread_mutex_unlock(&dk->lock);
	dfilters_free(&f);
	call->out = out;
	return 0;
}

int dkc_api_inspect(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
	struct dps_ctr v;
	struct dkc *c;
	int r;

	if ((r = dkc_find_call(call, &c)))
		return r;
	pthread_mutex_lock(&dk->lock);
	dkc_view_locked(c, &v);
	call->out = dps_inspect(&v);
	if (!call->out)
		k8_err_set(&call->err, -EIO, "container %s: its record is damaged", c->id);
	pthread_mutex_unlock(&dk->lock);
	dkc_unref(c);
	return call->out ? 0 : call->err.code;
}

int dkc_count(struct daemon *d, int *running, int *stopped)
{
	struct docker *dk = docker_of(d);
	int n = 0;

	*running = *stopped = 0;
	pthread_mutex_lock(&dk->lock);
	dk_load_locked(dk);
	for (struct dkc *c = dk->ctrs; c; c = c->next) {
		n++;
		if (c->state == DPS_RUNNING)
			(*running)++;
		else
			(*stopped)++;
	}
	pthread_mutex_unlock(&dk->lock);
	return n;
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
	struct docker *dk = docker_of(d);
	bool used = false;

	pthread_mutex_lock(&dk->lock);
	dk_load_locked(dk);
	for (struct dkc *c = dk->ctrs; c && !used; c = c->next)
		used = !c->removed && !strcmp(c->image_id, config_digest);
	pthread_mutex_unlock(&dk->lock);
	return used;
}

int dkc_image_release(struct daemon *d, const char *digest, struct k8_err *err)
{
	struct sandbox *sb = sb_get(d, DKE_NAME, err);
	int r;

	if (!sb)
		return err->code;
	r = slot_evict(d, sb, digest, NULL, err);
	sb_put(d, sb);
	return r;
}

/* POST /containers/prune: every container not running (moby's: created ones too), as
 * `docker container prune`; filters `label` and `until` (created before it). Each
 * removal is audited as container.rm. */
int dkc_api_prune(struct api_call *call)
{
	struct docker *dk = docker_of(call->d);
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
	pthread_mutex_lock(&dk->lock);
	dk_load_locked(dk);
	for (struct dkc *c = dk->ctrs; c && n < DKC_MAX; c = c->next) {
		if (c->state == DPS_RUNNING || c->pumping || c->removing || !dkc_match_locked(c, &f) ||
		    c->created_ns > until)
			continue;
		c->refs++;
		c->removing = true;     /* a start from now on finds it going */
		picked[n++] = c;
	}
	pthread_mutex_unlock(&dk->lock);
	dfilters_free(&f);
	for (int i = 0; i < n; i++) {
		struct dkc *c = picked[i];
		bool gone;

		pthread_mutex_lock(&dk->lock);
		space += c->log_size;   /* what the host keeps of it; the guest's layer is not counted */
		c->removing = false;    /* dkc_rm_now claims it again */
		pthread_mutex_unlock(&dk->lock);
		dkc_rm_now(call->d, c, NULL, NULL);
		pthread_mutex_lock(&dk->lock);
		gone = c->removed;
		pthread_mutex_unlock(&dk->lock);
		if (gone)
			json_array_append_new(ids, json_string(c->id));
		dkc_unref(c);
	}
	call->out = json_pack("{s:o,s:I}", "ContainersDeleted", ids, "SpaceReclaimed",
			      (json_int_t)space);
	return 0;
}
