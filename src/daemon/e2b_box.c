/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_box.c - E2B sandboxes as kosa8 keeps them: the table, e2b.json, settings, the
 * timeout reaper, pause/resume/kill (e2b_box.h, docs/e2b.md).
 *
 * Theory of operation. An E2B sandbox is a kosa8 sandbox "e2b-<id>" (owner kind "e2b")
 * running one container of the template's image that does nothing but keep the
 * container's namespaces alive; every envd process is an exec in it. What E2B adds (its
 * tokens, metadata, envVars, timeout, snapshots) is in <sandbox dir>/e2b.json, read back
 * at the daemon's start, and in the table below. Locks: the table's lock guards the list
 * and every box's fields; a box's `op` mutex serialises its lifecycle operations
 * (pause, resume, kill, snapshot, fork, timeout), which run without the table's lock.
 * The reaper wakes every second and ends the boxes whose time is up: killed, or paused
 * to disk with autoPause. */
#include "daemon/e2b_box.h"
#include "daemon/checkpoint.h"
#include "daemon/exec.h"
#include "daemon/broker.h"
#include "daemon/sandbox.h"
#include "daemon/secret.h"
#include "common/proto.h"
#include "docker/stream.h"
#include "e2b/connect.h"
#include "image/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t e2b_init_lock = PTHREAD_MUTEX_INITIALIZER;

struct e2b *e2b_of(struct daemon *d)
{
	struct e2b *e = __atomic_load_n(&d->e2b, __ATOMIC_ACQUIRE);

	if (e)
		return e;
	pthread_mutex_lock(&e2b_init_lock);
	if (!d->e2b) {
		e = xcalloc(1, sizeof(*e));
		e->d = d;
		pthread_mutex_init(&e->lock, NULL);
		pthread_cond_init(&e->cond, NULL);
		__atomic_store_n(&d->e2b, e, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&e2b_init_lock);
	return d->e2b;
}

/* ---- settings ---- */

int e2b_template_image(struct daemon *d, const char *template_id, char *out, size_t n,
		       struct k8_err *err)
{
	json_t *cfg = daemon_config(d);
	json_t *tpl = json_object_get(json_object_get(json_object_get(cfg, "e2b"), "templates"),
				      template_id);
	const char *ref = json_is_string(tpl) ? json_string_value(tpl) : template_id;
	struct image_info info;
	int r;

	r = image_resolve(d->images, ref, &info, err);
	if (r == 0) {
		snprintf(out, n, "%s", info.ref);
		image_info_clear(&info);
	} else if (r == -ENOENT && !json_is_string(tpl)) {
		k8_err_clear(err);
		r = k8_err_set(err, -ENOENT, "template '%.200s' names no image: map it to one in "
			       "config.json (\"e2b\": {\"templates\": {\"%.200s\": \"IMAGE\"}}) or "
			       "load an image by that name (kosa8 image load)", template_id,
			       template_id);
	}
	json_decref(cfg);
	return r;
}

static int cfg_int(json_t *e, const char *key, int dflt, int min, int max)
{
	json_t *v = json_object_get(e, key);
	json_int_t x = json_is_integer(v) ? json_integer_value(v) : dflt;

	return x < min || x > max ? dflt : (int)x;
}

void e2b_sizes(struct daemon *d, int *cpus, int *memory_mib, int *disk_gb)
{
	json_t *cfg = daemon_config(d), *e = json_object_get(cfg, "e2b");

	*cpus = cfg_int(e, "cpus", 1, 1, 64);
	*memory_mib = cfg_int(e, "memory_mib", 512, 128, 65536);
	*disk_gb = cfg_int(e, "disk_gb", 2, 1, 1024);
	json_decref(cfg);
}

uint64_t e2b_upload_max(struct daemon *d)
{
	json_t *cfg = daemon_config(d);
	int mib = cfg_int(json_object_get(cfg, "e2b"), "upload_max_mib", 1024, 1, 1 << 20);

	json_decref(cfg);
	return (uint64_t)mib << 20;
}

void e2b_home(const char *user, char *out, size_t n)
{
	char name[64];
	size_t len = strcspn(user ? user : "", ":");

	snprintf(name, sizeof(name), "%.*s", (int)(len < sizeof(name) ? len : sizeof(name) - 1),
		 user ? user : "");
	if (!name[0] || !strcmp(name, "root") || !strcmp(name, "0"))
		snprintf(out, n, "/root");
	else
		snprintf(out, n, "/home/%s", name);
}

/* ---- the table ---- */

/* Drop b's JSON fields (all set to NULL). */
static void box_json_drop(struct e2b_box *b)
{
	json_t **f[] = { &b->image_env, &b->env_vars, &b->metadata, &b->network, &b->secrets,
			 &b->snapshots };

	for (size_t i = 0; i < ARRAY_SIZE(f); i++) {
		json_decref(*f[i]);
		*f[i] = NULL;
	}
}

static void box_free(struct e2b_box *b)
{
	box_json_drop(b);
	explicit_bzero(b->token, sizeof(b->token));
	explicit_bzero(b->traffic, sizeof(b->traffic));
	pthread_mutex_destroy(&b->op);
	free(b);
}

static struct e2b_box *box_alloc(void)
{
	struct e2b_box *b = xcalloc(1, sizeof(*b));

	pthread_mutex_init(&b->op, NULL);
	b->refs = 1;
	b->image_env = json_array();
	b->env_vars = json_object();
	b->metadata = json_object();
	b->network = json_object();
	b->secrets = json_array();
	b->snapshots = json_array();
	return b;
}

struct e2b_box *e2b_box_get(struct daemon *d, const char *id, bool killed)
{
	struct e2b *e = e2b_of(d);
	struct e2b_box *b;

	if (!e2b_id_ok(id))
		return NULL;
	pthread_mutex_lock(&e->lock);
	for (b = e->boxes; b; b = b->next)
		if (!strcmp(b->id, id) && (killed || b->state != E2B_KILLED)) {
			b->refs++;
			break;
		}
	pthread_mutex_unlock(&e->lock);
	return b;
}

void e2b_box_put(struct daemon *d, struct e2b_box *b)
{
	struct e2b *e = e2b_of(d);
	bool last;

	if (!b)
		return;
	pthread_mutex_lock(&e->lock);
	last = --b->refs == 0;
	pthread_mutex_unlock(&e->lock);
	if (last)
		box_free(b);
}

struct e2b_box **e2b_box_all(struct daemon *d, size_t *n)
{
	struct e2b *e = e2b_of(d);
	struct e2b_box *b, **out;
	size_t k = 0;

	pthread_mutex_lock(&e->lock);
	for (b = e->boxes; b; b = b->next)
		k++;
	out = xcalloc(k + 1, sizeof(*out));
	k = 0;
	for (b = e->boxes; b; b = b->next) {
		b->refs++;
		out[k++] = b;
	}
	pthread_mutex_unlock(&e->lock);
	*n = k;
	return out;
}

struct e2b_box *e2b_box_new(struct daemon *d, struct k8_err *err)
{
	struct e2b *e = e2b_of(d);
	struct e2b_box *b = box_alloc();
	struct timespec now;

	if (e2b_id_new(b->id) || e2b_token_new(b->token) || e2b_token_new(b->traffic)) {
		box_free(b);
		k8_err_set(err, -EIO, "cannot make an id: getrandom failed");
		return NULL;
	}
	snprintf(b->sandbox, sizeof(b->sandbox), E2B_SB_PREFIX "%s", b->id);
	clock_gettime(CLOCK_REALTIME, &now);
	b->started_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	pthread_mutex_lock(&e->lock);
	b->next = e->boxes;
	e->boxes = b;
	b->refs++;              /* the caller's */
	pthread_mutex_unlock(&e->lock);
	return b;
}

void e2b_box_forget(struct daemon *d, struct e2b_box *b)
{
	struct e2b *e = e2b_of(d);
	struct e2b_box **pp;
	bool found = false;

	pthread_mutex_lock(&e->lock);
	for (pp = &e->boxes; *pp; pp = &(*pp)->next)
		if (*pp == b) {
			*pp = b->next;
			found = true;
			break;
		}
	pthread_mutex_unlock(&e->lock);
	if (found)
		e2b_box_put(d, b);
}

/* ---- e2b.json: its one writer and its one reader ---- */

static const char *const state_names[] = { "running", "paused", "killed" };

static json_t *box_record(struct e2b_box *b)
{
	return json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:O,s:O,s:O,s:O,s:O,s:O,s:I,"
			 "s:I,s:b,s:b,s:s}", "version", 1, "id", b->id, "token", b->token,
			 "traffic", b->traffic, "template_id", b->template_id, "image", b->image,
			 "container", b->container, "user", b->user, "workdir", b->workdir,
			 "image_env", b->image_env, "env_vars", b->env_vars, "metadata",
			 b->metadata, "network", b->network, "secrets", b->secrets, "snapshots",
			 b->snapshots, "started_ns", (json_int_t)b->started_ns, "end_ns",
			 (json_int_t)b->end_ns, "auto_pause", b->auto_pause, "auto_resume",
			 b->auto_resume, "state", state_names[b->state]);
}

int e2b_box_save(struct daemon *d, struct e2b_box *b, struct k8_err *err)
{
	struct e2b *e = e2b_of(d);
	struct sandbox *sb = sb_get(d, b->sandbox, err);
	char *text, path[4200];
	int r;

	if (!sb)
		return err->code;
	snprintf(path, sizeof(path), "%s/e2b.json", sb->dir);
	sb_put_peek(d, sb);
	pthread_mutex_lock(&e->lock);
	json_t *rec = box_record(b);
	pthread_mutex_unlock(&e->lock);
	text = json_dumps(rec, JSON_COMPACT);
	json_decref(rec);
	if (!text)
		return k8_err_set(err, -ENOMEM, "cannot encode e2b.json");
	r = write_file_atomic(path, text, strlen(text), 0600);
	explicit_bzero(text, strlen(text));
	free(text);
	if (r)
		return k8_err_set(err, r, "writing %s: %s", path, strerror(-r));
	return 0;
}

static void copy_str(char *out, size_t n, json_t *rec, const char *key)
{
	const char *s = json_string_value(json_object_get(rec, key));

	snprintf(out, n, "%s", s ? s : "");
}

static json_t *take(json_t *rec, const char *key, bool array)
{
	json_t *v = json_object_get(rec, key);

	if (array ? json_is_array(v) : json_is_object(v))
		return json_incref(v);
	return array ? json_array() : json_object();
}

/* A box from its e2b.json (read back at start); NULL when it does not check out. */
static struct e2b_box *box_read(struct sandbox *sb)
{
	char path[4200], *text = NULL;
	size_t len;
	json_t *rec;
	struct e2b_box *b;
	const char *st;

	snprintf(path, sizeof(path), "%s/e2b.json", sb->dir);
	if (read_file(path, 1 << 20, &text, &len))
		return NULL;
	rec = json_loadb(text, len, 0, NULL);
	explicit_bzero(text, len);
	free(text);
	if (!json_is_object(rec) || !e2b_id_ok(json_string_value(json_object_get(rec, "id")))) {
		json_decref(rec);
		return NULL;
	}
	b = box_alloc();
	copy_str(b->id, sizeof(b->id), rec, "id");
	snprintf(b->sandbox, sizeof(b->sandbox), E2B_SB_PREFIX "%s", b->id);
	copy_str(b->token, sizeof(b->token), rec, "token");
	copy_str(b->traffic, sizeof(b->traffic), rec, "traffic");
	copy_str(b->template_id, sizeof(b->template_id), rec, "template_id");
	copy_str(b->image, sizeof(b->image), rec, "image");
	copy_str(b->container, sizeof(b->container), rec, "container");
	copy_str(b->user, sizeof(b->user), rec, "user");
	copy_str(b->workdir, sizeof(b->workdir), rec, "workdir");
	box_json_drop(b);
	b->image_env = take(rec, "image_env", true);
	b->env_vars = take(rec, "env_vars", false);
	b->metadata = take(rec, "metadata", false);
	b->network = take(rec, "network", false);
	b->secrets = take(rec, "secrets", true);
	b->snapshots = take(rec, "snapshots", true);
	b->started_ns = json_integer_value(json_object_get(rec, "started_ns"));
	b->end_ns = json_integer_value(json_object_get(rec, "end_ns"));
	b->auto_pause = json_is_true(json_object_get(rec, "auto_pause"));
	b->auto_resume = json_is_true(json_object_get(rec, "auto_resume"));
	st = json_string_value(json_object_get(rec, "state"));
	b->state = st && !strcmp(st, "paused") ? E2B_PAUSED : st && !strcmp(st, "killed")
		   ? E2B_KILLED : E2B_RUNNING;
	json_decref(rec);
	if (strcmp(sb->name, b->sandbox) || strlen(b->token) != E2B_TOKEN_LEN) {
		box_free(b);
		return NULL;
	}
	return b;
}

static bool want_e2b(struct sandbox *sb, void *arg)
{
	(void)arg;
	return !strncmp(sb->name, E2B_SB_PREFIX, strlen(E2B_SB_PREFIX));
}

static void *reaper(void *arg);

void e2b_load(struct daemon *d)
{
	struct e2b *e = e2b_of(d);
	size_t n = 0;
	struct sandbox **all = sb_collect(d, want_e2b, NULL, &n);
	pthread_t t;

	for (size_t i = 0; i < n; i++) {
		struct e2b_box *b = box_read(all[i]);
		if (b) {
			pthread_mutex_lock(&e->lock);
			b->next = e->boxes;
			e->boxes = b;
			pthread_mutex_unlock(&e->lock);
		}
		sb_put_peek(d, all[i]);
	}
	free(all);
	if (pthread_create(&t, NULL, reaper, d) == 0) {
		pthread_detach(t);
		e->reaper = true;
	} else {
		daemon_log("WARNING: e2b: no reaper thread: E2B timeouts are not enforced");
	}
}

/* ---- lifecycle ---- */

void e2b_audit(struct daemon *d, struct e2b_box *b, const char *action, json_t *details)
{
	if (!details)
		details = json_object();
	json_object_set_new(details, "via", json_string("e2b"));
	json_object_set_new(details, "e2b_id", json_string(b->id));
	daemon_audit(d, action, b->sandbox, details);
}

static void set_state(struct daemon *d, struct e2b_box *b, enum e2b_state s)
{
	struct e2b *e = e2b_of(d);

	pthread_mutex_lock(&e->lock);
	b->state = s;
	pthread_mutex_unlock(&e->lock);
}

/* sb_pause of b's sandbox: to disk, or back. */
static int box_sb_pause(struct daemon *d, struct e2b_box *b, bool pause, struct k8_err *err)
{
	struct sandbox *sb = sb_get(d, b->sandbox, err);
	json_t *out = NULL;
	int r;

	if (!sb)
		return err->code;
	r = sb_pause(d, sb, pause, false, &out, err);
	sb_put(d, sb);
	json_decref(out);
	return r;
}

int e2b_box_pause(struct daemon *d, struct e2b_box *b, const char *by, struct k8_err *err)
{
	int r = box_sb_pause(d, b, true, err);

	if (r)
		return r;
	set_state(d, b, E2B_PAUSED);
	e2b_audit(d, b, "e2b.pause", json_pack("{s:s}", "by", by));
	return e2b_box_save(d, b, err);
}

int e2b_box_resume(struct daemon *d, struct e2b_box *b, struct k8_err *err)
{
	int r = box_sb_pause(d, b, false, err);

	if (r)
		return r;
	set_state(d, b, E2B_RUNNING);
	e2b_audit(d, b, "e2b.resume", NULL);
	return e2b_box_save(d, b, err);
}

int e2b_box_kill(struct daemon *d, struct e2b_box *b, const char *by, struct k8_err *err)
{
	struct e2b *e = e2b_of(d);
	size_t i;
	json_t *v;
	int r;

	pthread_mutex_lock(&e->lock);
	bool keep = json_array_size(b->snapshots) > 0;
	pthread_mutex_unlock(&e->lock);
	if (keep) {
		/* its snapshots outlive it (E2B's rule): the machine is put away, the box hidden */
		if (b->state == E2B_RUNNING && (r = box_sb_pause(d, b, true, err)))
			return r;
		set_state(d, b, E2B_KILLED);
		e2b_audit(d, b, "e2b.kill", json_pack("{s:s,s:b}", "by", by, "kept_for_snapshots", 1));
		return e2b_box_save(d, b, err);
	}
	r = sb_remove(d, b->sandbox, false, err);
	if (r && r != -ENOENT)
		return r;
	k8_err_clear(err);
	/* its broker's secrets, unless a fork of it still names them */
	pthread_mutex_lock(&e->lock);
	json_array_foreach(b->secrets, i, v) {
		struct k8_err e2 = { 0 };
		bool used = false;
		for (struct e2b_box *o = e->boxes; o && !used; o = o->next) {
			size_t j;
			json_t *w;
			json_array_foreach(o->secrets, j, w)
				used = used || (o != b && json_equal(w, v));
		}
		if (!used)
			secret_remove(d->home, json_string_value(v), &e2);
	}
	pthread_mutex_unlock(&e->lock);
	set_state(d, b, E2B_KILLED);
	e2b_audit(d, b, "e2b.kill", json_pack("{s:s}", "by", by));
	e2b_box_forget(d, b);
	return 0;
}

/* What the template image's container runs: nothing, for as long as the sandbox lives
 * (every envd process is an exec in it). A shell loop rather than `sleep infinity`, which
 * only GNU's sleep knows. */
static const char *const keepalive_argv[] = { "/bin/sh", "-c",
	"trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done" };

int e2b_box_container(struct daemon *d, struct e2b_box *b, struct k8_err *err)
{
	struct e2b *e = e2b_of(d);
	json_t *argv = json_array(), *run, *res;
	int code;

	for (size_t i = 0; i < ARRAY_SIZE(keepalive_argv); i++)
		json_array_append_new(argv, json_string(keepalive_argv[i]));
	run = json_pack("{s:s,s:o,s:o}", "image", b->image, "argv", argv, "env",
			e2b_box_env(b, NULL, NULL));
	res = exec_detached(d, b->sandbox, run, &code, err);
	json_decref(run);
	if (!res)
		return err->code ? err->code : -EIO;
	pthread_mutex_lock(&e->lock);
	snprintf(b->container, sizeof(b->container), "%s",
		 json_string_value(json_object_get(res, "id")) ?: "");
	pthread_mutex_unlock(&e->lock);
	json_decref(res);
	return 0;
}

/* The box's sandbox is put away to disk (e2b_stop): it resumes, whole. It was stopped
 * (its VM stopped without e2b_stop, or it failed): it boots again with a fresh container,
 * and what ran in the old one is gone, files included (the agent clears containers at
 * boot). Caller holds b->op. */
static int box_revive(struct daemon *d, struct e2b_box *b, struct k8_err *err)
{
	struct sandbox *sb = sb_get(d, b->sandbox, err);
	enum sb_state was;
	pid_t pid0, pid1;
	int r;

	if (!sb)
		return k8_err_set(err, -EHOSTUNREACH, "sandbox %s is gone (its kosa8 sandbox %s "
				  "was removed)", b->id, b->sandbox);
	pthread_mutex_lock(&sb->lock);
	was = sb->state;
	pid0 = sb->pid;
	pthread_mutex_unlock(&sb->lock);
	r = sb_ensure_running(d, sb, err);      /* resumes, or boots a VM that is gone */
	pthread_mutex_lock(&sb->lock);
	pid1 = sb->pid;
	pthread_mutex_unlock(&sb->lock);
	sb_put_peek(d, sb);
	if (r || was == SB_PAUSED || pid1 == pid0)
		return r;
	/* a fresh boot: the old container is gone */
	if ((r = e2b_box_container(d, b, err)))
		return r;
	e2b_audit(d, b, "e2b.revive", json_pack("{s:s}", "container", b->container));
	return e2b_box_save(d, b, err);
}

int e2b_box_ready(struct daemon *d, struct e2b_box *b, struct k8_err *err)
{
	int r = 0;

	if (b->state == E2B_RUNNING) {
		pthread_mutex_lock(&b->op);
		r = b->state == E2B_RUNNING ? box_revive(d, b, err) : 0;
		pthread_mutex_unlock(&b->op);
		if (r || b->state == E2B_RUNNING)
			return r;
	}
	if (b->state == E2B_PAUSED && b->auto_resume) {
		pthread_mutex_lock(&b->op);
		if (b->state == E2B_PAUSED)
			r = e2b_box_resume(d, b, err);
		pthread_mutex_unlock(&b->op);
		return r;
	}
	return k8_err_set(err, -EAGAIN, "sandbox %s is %s; resume it with Sandbox.connect", b->id,
			  b->state == E2B_PAUSED ? "paused" : "gone");
}

void e2b_stop(struct daemon *d)
{
	size_t n, i;
	struct e2b_box **all = e2b_box_all(d, &n);

	for (i = 0; i < n; i++) {
		struct k8_err err = { 0 };
		if (all[i]->state == E2B_RUNNING && !pthread_mutex_trylock(&all[i]->op)) {
			/* the box stays "running" for E2B: its next use resumes it */
			if (all[i]->state == E2B_RUNNING && box_sb_pause(d, all[i], true, &err))
				daemon_log("e2b: sandbox %s: not put away (%s); its VM stops, its "
					   "container with it", all[i]->id, err.msg);
			pthread_mutex_unlock(&all[i]->op);
		}
		e2b_box_put(d, all[i]);
	}
	free(all);
}

/* ---- what processes get ---- */

/* Add or replace "K=V" in env (keyed by K). */
static void env_put(json_t *env, const char *kv)
{
	const char *eq = strchr(kv, '=');
	size_t kl = eq ? (size_t)(eq - kv) : strlen(kv), i;
	json_t *v;

	if (!eq || !kl)
		return;
	json_array_foreach(env, i, v) {
		const char *s = json_string_value(v);
		if (s && !strncmp(s, kv, kl + 1)) {
			json_array_set_new(env, i, json_string(kv));
			return;
		}
	}
	json_array_append_new(env, json_string(kv));
}

json_t *e2b_box_env(struct e2b_box *b, json_t *base, json_t *extra)
{
	json_t *env = json_array(), *v;
	const char *k;
	size_t i;

	json_array_foreach(base, i, v)
		if (json_is_string(v))
			env_put(env, json_string_value(v));
	json_array_foreach(b->image_env, i, v)
		if (json_is_string(v))
			env_put(env, json_string_value(v));
	json_object_foreach(b->env_vars, k, v) {
		char *kv = xasprintf("%s=%s", k, json_string_value(v) ?: "");
		env_put(env, kv);
		free(kv);
	}
	json_array_foreach(extra, i, v)
		if (json_is_string(v))
			env_put(env, json_string_value(v));
	return env;
}

/* ---- commands of the daemon's own in the box's container ---- */

int e2b_box_exec(struct daemon *d, struct e2b_box *b, const char *user, json_t *argv,
		 bool in, struct sandbox **sbp, struct stream **sp, struct k8_err *err)
{
	struct e2b *e = e2b_of(d);
	struct sandbox *sb = sb_get(d, b->sandbox, err);
	char ctr[sizeof(b->container)], who[sizeof(b->user)];
	json_t *req, *resp = NULL;
	int r;

	*sbp = NULL;
	*sp = NULL;
	if (!sb) {
		json_decref(argv);
		return err->code ? err->code : -EHOSTUNREACH;
	}
	pthread_mutex_lock(&e->lock);
	snprintf(ctr, sizeof(ctr), "%s", b->container);
	snprintf(who, sizeof(who), "%s", user && *user ? user : b->user);
	pthread_mutex_unlock(&e->lock);
	req = json_pack("{s:s,s:s,s:o,s:o,s:s,s:s,s:b}", "op", "exec", "container", ctr, "argv",
			argv, "env", e2b_box_env(b, NULL, NULL), "cwd", "/", "user",
			who[0] ? who : "0", "stdin", in);
	r = sb_agent_request(sb, req, E2B_EXEC_START_MS, &resp, sp, err);
	json_decref(resp);
	if (r) {
		sb_put(d, sb);
		/* the agent's "no such process" or "no such file" are not the caller's path's
		 * (a Stat would say "does not exist"): the container or the helper failed */
		if (r == -ESRCH || r == -ENOENT)
			err->code = r = r == -ESRCH ? -EHOSTUNREACH : -EIO;
		return r;
	}
	*sbp = sb;
	return 0;
}

void e2b_keep_start(char *buf, size_t size, size_t *len, const void *p, size_t n)
{
	size_t room = size - 1 - *len, take = n < room ? n : room;

	if (take)
		memcpy(buf + *len, p, take);
	*len += take;
	buf[*len] = '\0';
}

/* e2b_box_run's consumer: stdout kept up to its cap, the start of stderr. */
static int run_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
		      size_t n)
{
	struct e2b_run *res = ctx;

	(void)flags;
	if (!n)
		return 0;       /* an end of stream */
	if (type == PROTO_STDERR) {
		e2b_keep_start(res->err, sizeof(res->err), &res->errlen, p, n);
		return 0;
	}
	if (res->len + n > res->max) {
		res->over = true;
		return -1;      /* link_stream_run kills it */
	}
	if (res->len + n > res->cap) {
		res->cap = res->len + n > 2 * res->cap ? res->len + n : 2 * res->cap;
		res->out = realloc(res->out, res->cap);
		if (!res->out)
			abort();
	}
	memcpy(res->out + res->len, p, n);
	res->len += n;
	return 0;
}

int e2b_box_run(struct daemon *d, struct e2b_box *b, const char *user, json_t *argv,
		size_t max, struct e2b_run *res, struct k8_err *err)
{
	struct stream_ops ops = { .output = run_output, .input_fd = -1, .gone_fd = -1 };
	struct sandbox *sb;
	struct stream *s;
	json_t *exit_info = NULL;
	int r;

	memset(res, 0, sizeof(*res));
	res->max = max;
	res->code = -1;
	if ((r = e2b_box_exec(d, b, user, argv, false, &sb, &s, err)))
		return r;
	r = link_stream_run(&sb->link, s, &ops, res, &exit_info);
	link_stream_close(&sb->link, s);
	sb_put(d, sb);
	if (r == 0 && json_is_integer(json_object_get(exit_info, "code")))
		res->code = (int)json_integer_value(json_object_get(exit_info, "code"));
	json_decref(exit_info);
	if (res->over)
		return k8_err_set(err, -E2BIG, "the sandbox printed more than %zu bytes", max);
	if (r == -ECONNRESET)
		return k8_err_set(err, -ECONNRESET, "%s", LINK_LOST_WHY);
	return r < 0 ? k8_err_set(err, r, "the command in the sandbox failed") : 0;
}

void e2b_run_free(struct e2b_run *res)
{
	free(res->out);
	res->out = NULL;
	res->len = res->cap = 0;
}

/* ---- Connect's error replies (envd's services) ---- */

int e2b_connect_fail(struct api_call *call, int rc)
{
	enum e2bc_code c = e2bc_code_of_errno(rc);

	if (!call->err.code)
		k8_err_set(&call->err, rc, "%s", strerror(-rc));
	json_decref(call->out);
	call->out = e2bc_error(c, call->err.msg);
	if (!call->out)         /* a message that is not UTF-8 (it may echo a path) */
		call->out = e2bc_error(c, "(the error message is not valid UTF-8)");
	call->status = e2bc_code_http(c);
	return 0;
}

struct connect_end {
	uint8_t *frame;
	size_t len;
};

static void connect_end_write(void *ctx, const struct api_conn *conn)
{
	struct connect_end *ce = ctx;

	if (write_full(conn->fd, ce->frame, ce->len) < 0)
		return;         /* the client left: nothing to tell */
}

static void connect_end_free(void *ctx)
{
	struct connect_end *ce = ctx;

	free(ce->frame);
	free(ce);
}

int e2b_connect_stream_fail(struct api_call *call, int rc)
{
	struct connect_end *ce = xcalloc(1, sizeof(*ce));

	if (!call->err.code)
		k8_err_set(&call->err, rc, "%s", strerror(-rc));
	ce->frame = e2bc_end(e2bc_code_of_errno(rc), call->err.msg, &ce->len);
	if (!ce->frame)
		ce->frame = e2bc_end(e2bc_code_of_errno(rc), "(the error message is not valid "
				     "UTF-8)", &ce->len);
	return api_reply_raw(call, API_RAW_BODY, "application/connect+json", connect_end_write,
			     connect_end_free, ce);
}

/* ---- getInfo and list ---- */

static json_t *rfc3339(int64_t ns)
{
	char out[40];

	ds_rfc3339(ns / 1000000000, (int32_t)(ns % 1000000000), out);
	return json_string(out);
}

json_t *e2b_box_json(struct daemon *d, struct e2b_box *b, bool detail)
{
	int cpus, mem, disk;
	json_t *v;

	e2b_sizes(d, &cpus, &mem, &disk);
	{
		struct k8_err e = { 0 };
		struct sandbox *sb = sb_get(d, b->sandbox, &e);
		if (sb) {
			cpus = sb->cpus;
			mem = sb->memory_mib;
			disk = sb->disk_gb;
			sb_put_peek(d, sb);
		}
	}
	v = json_pack("{s:s,s:s,s:s,s:O,s:o,s:o,s:s,s:i,s:i,s:i,s:s,s:[]}",
		      "sandboxID", b->id, "templateID", b->template_id, "clientID", "kosa8",
		      "metadata", b->metadata, "startedAt", rfc3339(b->started_ns), "endAt",
		      rfc3339(b->end_ns), "state", b->state == E2B_PAUSED ? "paused" : "running",
		      "cpuCount", cpus, "memoryMB", mem, "diskSizeMB", disk * 1024,
		      "envdVersion", E2B_ENVD_VERSION, "volumeMounts");
	if (detail) {
		json_t *ai = json_object_get(b->network, "allow_internet_access");
		json_object_set_new(v, "allowInternetAccess", json_boolean(json_is_true(ai)));
		json_t *net = json_object();
		static const char *const keys[] = { "allowOut", "denyOut", "rules" };
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
			if (json_object_get(b->network, keys[i]))
				json_object_set(net, keys[i], json_object_get(b->network, keys[i]));
		json_object_set_new(v, "network", net);
		json_object_set_new(v, "lifecycle", json_pack("{s:s,s:b}", "onTimeout",
							       b->auto_pause ? "pause" : "kill",
							       "autoResume", b->auto_resume));
	}
	return v;
}

/* ---- the reaper ---- */

static void *reaper(void *arg)
{
	struct daemon *d = arg;

	while (!d->stopping) {
		struct timespec now;
		size_t n, i;
		struct e2b_box **all;

		sleep(1);
		clock_gettime(CLOCK_REALTIME, &now);
		int64_t t = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
		all = e2b_box_all(d, &n);
		for (i = 0; i < n; i++) {
			struct e2b_box *b = all[i];
			struct k8_err err = { 0 };
			struct sandbox *sb = sb_get(d, b->sandbox, &err);
			if (!sb && err.code == -ENOENT && !pthread_mutex_trylock(&b->op)) {
				/* its kosa8 sandbox was removed (kosa8 sandbox rm): the box goes too,
				 * and its snapshots went with the sandbox's checkpoints */
				k8_err_clear(&err);
				pthread_mutex_lock(&e2b_of(d)->lock);
				json_array_clear(b->snapshots);
				pthread_mutex_unlock(&e2b_of(d)->lock);
				e2b_box_kill(d, b, "sandbox removed", &err);
				pthread_mutex_unlock(&b->op);
				continue;
			}
			if (sb)
				sb_put_peek(d, sb);
			if (b->state != E2B_RUNNING || !b->end_ns || b->end_ns > t || d->stopping)
				continue;
			if (pthread_mutex_trylock(&b->op))
				continue;       /* busy: the next round looks again */
			if (b->state == E2B_RUNNING && b->end_ns && b->end_ns <= t) {
				int r = b->auto_pause ? e2b_box_pause(d, b, "timeout", &err)
						      : e2b_box_kill(d, b, "timeout", &err);
				if (r) {
					daemon_log("e2b: sandbox %s: its timeout's %s failed: %s; "
						   "again in 30 s", b->id, b->auto_pause ? "pause"
						   : "kill", err.msg);
					pthread_mutex_lock(&e2b_of(d)->lock);
					b->end_ns = t + 30 * 1000000000LL;
					pthread_mutex_unlock(&e2b_of(d)->lock);
				}
			}
			pthread_mutex_unlock(&b->op);
		}
		for (i = 0; i < n; i++)
			e2b_box_put(d, all[i]);
		free(all);
	}
	return NULL;
}
