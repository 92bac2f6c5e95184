/* SPDX-License-Identifier: Apache-2.0 */
/* task.c - containerd's Task service over kosa8 sandboxes (shim.h).
 *
 * Every handler decodes its request with protobuf-c within a budget (ttrpc.h), checks
 * each string it uses (ids at most SHIM_ID_MAX bytes, paths absolute and at most 4095),
 * and answers with a packed response or a gRPC code: containerd turns NotFound,
 * AlreadyExists, FailedPrecondition, Unimplemented, Unavailable ... into its errdefs, so
 * `ctr` prints the message as it is. RPCs without a meaning here (Checkpoint, Update,
 * Stats) answer Unimplemented, as the contract asks.
 */
#include "shim/shim.h"
#include "shim/log.h"
#include "shim/rootfs.h"
#include "shim/ttrpc.h"
#include "events.pb-c.h"
#include "task.pb-c.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define SANDBOX_TIMEOUT_MS (10 * 60 * 1000)

int shim_code(int e)
{
	switch (e) {
	case -ENOENT: case -ESRCH: return TTRPC_NOT_FOUND;
	case -EEXIST: return TTRPC_ALREADY_EXISTS;
	case -EBUSY: case -EPERM: case -EACCES: return TTRPC_FAILED_PRECONDITION;
	case -EINVAL: case -E2BIG: case -ENAMETOOLONG: case -EFBIG: return TTRPC_INVALID_ARGUMENT;
	case -ECONNREFUSED: case -EAGAIN: case -EHOSTDOWN: return TTRPC_UNAVAILABLE;
	case -ENOSYS: case -EOPNOTSUPP: return TTRPC_UNIMPLEMENTED;
	case -ETIMEDOUT: return TTRPC_DEADLINE_EXCEEDED;
	default: return TTRPC_UNKNOWN;
	}
}

void call_fail(struct call *c, int code, const char *fmt, ...)
{
	va_list ap;

	c->code = code ? code : TTRPC_UNKNOWN;
	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
	va_end(ap);
}

static void call_err(struct call *c, const struct k8_err *err)
{
	call_fail(c, shim_code(err->code), "%s", err->msg);
}

static void call_answer(struct call *c, const ProtobufCMessage *m)
{
	c->out = ttrpc_pack(m, &c->out_len);
	c->code = TTRPC_OK;
}

static void call_empty(struct call *c)
{
	K8task__Empty e = K8TASK__EMPTY__INIT;

	call_answer(c, &e.base);
}

/* An id containerd sent: non-empty, at most SHIM_ID_MAX bytes. */
static bool id_ok(const char *s)
{
	return s && *s && strlen(s) <= SHIM_ID_MAX;
}

static bool path_ok(const char *s, bool may_be_empty)
{
	if (!s || !*s)
		return may_be_empty;
	return s[0] == '/' && strlen(s) < 4096;
}

/* ---- the table (callers hold s->mu) ---- */

static struct task *task_find(struct shim *s, const char *id)
{
	for (struct task *t = s->tasks; t; t = t->next)
		if (!strcmp(t->id, id))
			return t;
	return NULL;
}

static struct proc *proc_find(struct task *t, const char *exec_id)
{
	if (!exec_id || !*exec_id)
		return &t->init;
	for (struct proc *p = t->execs; p; p = p->next)
		if (!strcmp(p->exec_id, exec_id))
			return p;
	return NULL;
}

static void proc_init(struct proc *p, struct task *t)
{
	p->t = t;
	p->sock = -1;
	p->stop_fd = -1;
	p->closeio_fd = -1;
	pthread_mutex_init(&p->wmu, NULL);
}

/* The task and process a request names, ready, with a user reference on the process
 * (drop it with proc_put). NULL with c failed otherwise. */
static struct proc *proc_get(struct shim *s, const char *id, const char *exec_id, struct call *c)
{
	struct task *t;
	struct proc *p;

	if (!id_ok(id)) {
		call_fail(c, TTRPC_INVALID_ARGUMENT, "a task id is required");
		return NULL;
	}
	pthread_mutex_lock(&s->mu);
	t = task_find(s, id);
	while (t && !t->ready) {
		pthread_cond_wait(&s->cond, &s->mu);
		t = task_find(s, id);
	}
	p = t ? proc_find(t, exec_id) : NULL;
	if (p)
		p->users++;
	pthread_mutex_unlock(&s->mu);
	if (!t)
		call_fail(c, TTRPC_NOT_FOUND, "task %s: not found", id);
	else if (!p)
		call_fail(c, TTRPC_NOT_FOUND, "task %s: exec %s: not found", id, exec_id);
	return p;
}

static void proc_put(struct shim *s, struct proc *p)
{
	pthread_mutex_lock(&s->mu);
	p->users--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mu);
}

static K8task__Timestamp *ts_of(struct proc *p, K8task__Timestamp *ts)
{
	k8task__timestamp__init(ts);
	ts->seconds = p->exited_s;
	ts->nanos = p->exited_ns;
	return ts;
}

/* ---- the bundle's state file ---- */

static int task_save(struct shim *s, struct task *t)
{
	cleanup_free char *path = xasprintf("%s/%s", t->bundle, SHIM_STATE_FILE);
	cleanup_free char *text = NULL;
	json_t *j;

	pthread_mutex_lock(&s->mu);
	j = json_pack("{s:s,s:s,s:s,s:b,s:s,s:s,s:b,s:b,s:i}", "home", s->home, "namespace", s->ns,
		      "sandbox", t->sandbox, "owns_sandbox", t->owns_sandbox, "container",
		      t->guest_id, "image", t->image, "own_image", t->own_image,
		      "rootfs_mounted", t->rootfs_mounted, "shim_pid", (int)s->pid);
	pthread_mutex_unlock(&s->mu);
	text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return write_file_atomic(path, text, strlen(text), 0600);
}

/* ---- kosa8d calls ---- */

static void sb_path(char *out, size_t n, const char *sandbox, const char *rest)
{
	char sb[200];

	kc_escape(sandbox, sb, sizeof(sb));
	snprintf(out, n, "/v1/sandboxes/%s%s", sb, rest);
}

/* Remove what a task made in kosa8 (its sandbox or its container, its own image). Used
 * by Delete and by `delete` after a dead shim; a part already gone is no error. */
static int task_undo(const struct kc *k, const char *sandbox, bool owns, const char *guest,
		     const char *image, bool own_image, struct k8_err *err)
{
	char path[512], gid[64];
	int r = 0;

	if (sandbox && *sandbox && owns) {
		sb_path(path, sizeof(path), sandbox, "");
		r = kc_call(k, "DELETE", path, NULL, NULL, err);
	} else if (sandbox && *sandbox && guest && *guest) {
		char rest[128];
		kc_escape(guest, gid, sizeof(gid));
		snprintf(rest, sizeof(rest), "/containers/%s", gid);
		sb_path(path, sizeof(path), sandbox, rest);
		r = kc_call(k, "DELETE", path, NULL, NULL, err);
	}
	if (r == -ENOENT) {
		k8_err_clear(err);
		r = 0;
	}
	if (!r && own_image && image && *image) {
		char ref[600];
		kc_escape(image, ref, sizeof(ref));
		snprintf(path, sizeof(path), "/v1/images/%s", ref);
		r = kc_call(k, "DELETE", path, NULL, NULL, err);
		if (r == -ENOENT) {
			k8_err_clear(err);
			r = 0;
		}
	}
	return r;
}

/* The sandbox a task runs in: made now for a container on its own or a pod's sandbox
 * container; a pod's container uses its pod's (made by the pod's sandbox task). */
static int task_sandbox(struct shim *s, struct task *t, const struct spec *sp,
			struct k8_err *err)
{
	json_t *body = NULL, *res = NULL;
	char path[512];
	int r;

	if (t->role == SPEC_POD_CONTAINER) {
		sb_path(path, sizeof(path), t->sandbox, "");
		r = kc_call(&s->kc, "GET", path, NULL, &res, err);
		json_decref(res);
		if (r == -ENOENT) {
			k8_err_clear(err);
			return k8_err_set(err, -ENOENT, "pod %s has no kosa8 sandbox (%s); its sandbox "
					  "container must run with the kosa8 runtime too", sp->pod,
					  t->sandbox);
		}
		return r;
	}
	if ((r = spec_sandbox_body(s->node, sp->annotations, &body, err)))
		return r;
	json_object_set_new(body, "name", json_string(t->sandbox));
	json_object_set_new(body, "owner", json_pack("{s:s,s:s,s:s}", "kind", "containerd",
						     "namespace", s->ns, "id",
						     t->role == SPEC_POD_SANDBOX ? sp->pod : t->id));
	if (t->role == SPEC_POD_SANDBOX)
		json_object_set_new(json_object_get(body, "owner"), "pod", json_true());
	r = kc_call(&s->kc, "POST", "/v1/sandboxes", body, &res, err);
	json_decref(body);
	if (!r && json_is_string(json_object_get(res, "state")) &&
	    strcmp(json_string_value(json_object_get(res, "state")), "running")) {
		const char *why = json_string_value(json_object_get(res, "error"));
		cleanup_free char *safe = str_escape(why ? why : "");
		r = k8_err_set(err, -EIO, "kosa8 sandbox %s did not start: %s", t->sandbox, safe);
		task_undo(&s->kc, t->sandbox, true, NULL, NULL, false, &(struct k8_err){ 0 });
	}
	json_decref(res);
	return r;
}

/* The container's root: containerd's mounts at <bundle>/rootfs, made a kosa8 image,
 * pulled into the sandbox (rootfs.h). */
static int task_rootfs(struct shim *s, struct task *t, K8task__CreateTaskRequest *req,
		       const struct spec *sp, struct k8_err *err)
{
	/* containerd's mounts go to <bundle>/rootfs; without any, the spec's root.path is
	 * the tree (ctr run --rootfs), relative to the bundle unless absolute */
	cleanup_free char *dir = req->n_rootfs || sp->root[0] != '/'
		? xasprintf("%s/%s", t->bundle, req->n_rootfs ? "rootfs" : sp->root)
		: xstrdup(sp->root);
	cleanup_free char *work = xasprintf("%s/work", s->state_dir);
	struct rootfs_mount *m = xcalloc(req->n_rootfs + 1, sizeof(*m));
	char key[25], tag[80], path[512];
	json_t *body, *res = NULL;
	int r;

	for (size_t i = 0; i < req->n_rootfs; i++) {
		m[i].type = req->rootfs[i]->type;
		m[i].source = req->rootfs[i]->source;
		m[i].options = (const char *const *)req->rootfs[i]->options;
		m[i].noptions = req->rootfs[i]->n_options;
	}
	r = req->n_rootfs ? rootfs_mount(dir, m, req->n_rootfs, err) : 0;
	if (!r) {
		pthread_mutex_lock(&s->mu);
		t->rootfs_mounted = req->n_rootfs > 0;
		pthread_mutex_unlock(&s->mu);
		bool cached = rootfs_key(m, req->n_rootfs, key) == 0;
		spec_sandbox_name("task", s->ns, t->id, tag);
		pthread_mutex_lock(&s->mu);
		t->own_image = !cached;
		pthread_mutex_unlock(&s->mu);
		r = rootfs_image(&s->kc, dir, cached ? key : NULL, tag, work, t->image, err);
	}
	free(m);
	if (r)
		return r;
	task_save(s, t);
	body = json_pack("{s:s}", "image", t->image);
	sb_path(path, sizeof(path), t->sandbox, "/pull");
	r = kc_call(&s->kc, "POST", path, body, &res, err);
	json_decref(body);
	json_decref(res);
	return r;
}

/* ---- the RPCs ---- */

static void task_free(struct task *t)
{
	proc_release(&t->init);
	while (t->execs) {
		struct proc *p = t->execs;
		t->execs = p->next;
		proc_release(p);
		free(p);
	}
	free(t->bundle);
	free(t);
}

static void rpc_create(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__CreateTaskRequest *req;
	K8task__CreateTaskResponse resp = K8TASK__CREATE_TASK_RESPONSE__INIT;
	struct k8_err err = { 0 };
	struct spec sp = { 0 };
	cleanup_free char *cfgpath = NULL, *text = NULL;
	struct task *t = NULL;
	size_t len;
	int r;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	req = k8task__create_task_request__unpack(&b.alloc, c->in_len, c->in);
	if (!req)
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed CreateTaskRequest");
	if (!id_ok(req->id) || !path_ok(req->bundle, false) || !path_ok(req->stdin, true) ||
	    !path_ok(req->stdout, true) || !path_ok(req->stderr, true)) {
		call_fail(c, TTRPC_INVALID_ARGUMENT, "CreateTaskRequest: the id must be 1-%d "
			  "bytes, the bundle and the stdio paths absolute", SHIM_ID_MAX);
		goto out;
	}
	if (req->checkpoint && *req->checkpoint) {
		call_fail(c, TTRPC_UNIMPLEMENTED, "kosa8 does not restore containerd checkpoints; "
			  "use kosa8's own (kosa8 checkpoint, rewind, fork)");
		goto out;
	}
	cfgpath = xasprintf("%s/config.json", req->bundle);
	if ((r = read_file(cfgpath, SPEC_MAX_BYTES, &text, &len)) ||
	    (r = spec_parse(text, len, &sp, &err))) {
		if (!err.code)
			k8_err_set(&err, r, "%s: %s", cfgpath, strerror(-r));
		call_err(c, &err);
		goto out;
	}
	if (sp.proc.terminal && req->stderr && *req->stderr)
		shim_log("task %s: a terminal has no stderr of its own; its output goes to stdout",
			 req->id);
	t = xcalloc(1, sizeof(*t));
	t->s = s;
	snprintf(t->id, sizeof(t->id), "%s", req->id);
	t->bundle = xstrdup(req->bundle);
	t->role = sp.role;
	snprintf(t->pod, sizeof(t->pod), "%s", sp.pod);
	if (sp.role == SPEC_ALONE)
		spec_sandbox_name("ctr", s->ns, t->id, t->sandbox);
	else
		spec_sandbox_name("pod", s->ns, sp.pod, t->sandbox);
	t->owns_sandbox = sp.role != SPEC_POD_CONTAINER;
	proc_init(&t->init, t);
	t->init.stdin_path = xstrdup(req->stdin ? req->stdin : "");
	t->init.stdout_path = xstrdup(req->stdout ? req->stdout : "");
	t->init.stderr_path = xstrdup(req->stderr ? req->stderr : "");
	t->init.terminal = req->terminal || sp.proc.terminal;
	t->init.spec = sp.proc;
	memset(&sp.proc, 0, sizeof(sp.proc));
	pthread_mutex_lock(&s->mu);
	if (task_find(s, t->id)) {
		pthread_mutex_unlock(&s->mu);
		call_fail(c, TTRPC_ALREADY_EXISTS, "task %s already exists", t->id);
		task_free(t);
		t = NULL;
		goto out;
	}
	t->next = s->tasks;
	s->tasks = t;
	pthread_mutex_unlock(&s->mu);
	/* Written before anything is made, so `delete` can undo a half-made task. */
	if ((r = task_save(s, t)))
		shim_log("task %s: writing %s: %s", t->id, SHIM_STATE_FILE, strerror(-r));
	uint64_t t0 = now_mono_ns(), t1, t2;
	r = task_sandbox(s, t, &sp, &err);
	t1 = now_mono_ns();
	if (!r && t->role != SPEC_POD_SANDBOX)
		r = task_rootfs(s, t, req, &sp, &err);
	t2 = now_mono_ns();
	if (r) {
		struct k8_err uerr = { 0 };
		shim_log("task %s: create failed: %s", t->id, err.msg);
		if (t->owns_sandbox || t->own_image)
			task_undo(&s->kc, t->owns_sandbox ? t->sandbox : NULL, t->owns_sandbox,
				  NULL, t->image, t->own_image, &uerr);
		if (t->rootfs_mounted) {
			cleanup_free char *dir = xasprintf("%s/rootfs", t->bundle);
			rootfs_unmount(dir);
		}
		pthread_mutex_lock(&s->mu);
		for (struct task **pp = &s->tasks; *pp; pp = &(*pp)->next)
			if (*pp == t) {
				*pp = t->next;
				break;
			}
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->mu);
		task_free(t);
		call_err(c, &err);
		goto out;
	}
	task_save(s, t);
	{
		K8events__TaskCreate e = K8EVENTS__TASK_CREATE__INIT;
		K8events__TaskIO io = K8EVENTS__TASK_IO__INIT;
		io.stdin = req->stdin;
		io.stdout = req->stdout;
		io.stderr = req->stderr;
		io.terminal = req->terminal;
		e.container_id = req->id;
		e.bundle = req->bundle;
		e.n_rootfs = req->n_rootfs;
		e.rootfs = req->rootfs;
		e.io = &io;
		e.pid = s->pid;
		pthread_mutex_lock(&s->mu);
		t->ready = true;
		events_publish(s->ev, "/tasks/create", "TaskCreate", &e.base);
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->mu);
	}
	shim_log("task %s: created in sandbox %s%s (sandbox %llu ms, rootfs %llu ms)", t->id,
		 t->sandbox, t->role == SPEC_POD_SANDBOX ? " (the pod's sandbox)" : "",
		 (unsigned long long)((t1 - t0) / 1000000), (unsigned long long)((t2 - t1) / 1000000));
	resp.pid = s->pid;
	call_answer(c, &resp.base);
out:
	spec_free(&sp);
	k8task__create_task_request__free_unpacked(req, &b.alloc);
}

static void rpc_start(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__StartRequest *req;
	K8task__StartResponse resp = K8TASK__START_RESPONSE__INIT;
	struct k8_err err = { 0 };
	struct proc *p;
	bool go;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__start_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed StartRequest");
	if (!(p = proc_get(s, req->id, req->exec_id, c)))
		goto out;
	pthread_mutex_lock(&s->mu);
	go = p->state == PROC_CREATED && !p->sock_pending;
	if (go)
		p->sock_pending = true;
	pthread_mutex_unlock(&s->mu);
	if (!go) {
		call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s%s%s: already started", req->id,
			  *req->exec_id ? " exec " : "", req->exec_id);
	} else if (p->t->role == SPEC_POD_SANDBOX && p == &p->t->init) {
		/* The pod's sandbox container: the VM is the pod; nothing runs for it. */
		K8events__TaskStart e = K8EVENTS__TASK_START__INIT;
		pthread_mutex_lock(&s->mu);
		p->state = PROC_RUNNING;
		p->sock_pending = false;
		e.container_id = p->t->id;
		e.pid = s->pid;
		events_publish(s->ev, "/tasks/start", "TaskStart", &e.base);
		pthread_mutex_unlock(&s->mu);
		resp.pid = s->pid;
		call_answer(c, &resp.base);
	} else if (proc_start(s, p, &err)) {
		pthread_mutex_lock(&s->mu);
		p->sock_pending = false;
		pthread_mutex_unlock(&s->mu);
		shim_log("task %s: start failed: %s", req->id, err.msg);
		call_err(c, &err);
	} else {
		if (!*req->exec_id)
			task_save(s, p->t);
		resp.pid = s->pid;
		call_answer(c, &resp.base);
	}
	proc_put(s, p);
out:
	k8task__start_request__free_unpacked(req, &b.alloc);
}

static void rpc_wait(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__WaitRequest *req;
	K8task__WaitResponse resp = K8TASK__WAIT_RESPONSE__INIT;
	K8task__Timestamp ts;
	struct proc *p;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__wait_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed WaitRequest");
	if ((p = proc_get(s, req->id, req->exec_id, c))) {
		pthread_mutex_lock(&s->mu);
		while (p->state != PROC_STOPPED)
			pthread_cond_wait(&s->cond, &s->mu);
		resp.exit_status = p->exit_status;
		resp.exited_at = ts_of(p, &ts);
		pthread_mutex_unlock(&s->mu);
		call_answer(c, &resp.base);
		proc_put(s, p);
	}
	k8task__wait_request__free_unpacked(req, &b.alloc);
}

static void rpc_kill(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__KillRequest *req;
	struct proc *p;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__kill_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed KillRequest");
	if (req->signal == 0 || req->signal > 64) {
		call_fail(c, TTRPC_INVALID_ARGUMENT, "signal %u is not 1..64", req->signal);
		goto out;
	}
	if (!(p = proc_get(s, req->id, req->exec_id, c)))
		goto out;
	pthread_mutex_lock(&s->mu);
	if (p->state == PROC_STOPPED) {
		call_fail(c, TTRPC_NOT_FOUND, "task %s: process already finished", req->id);
	} else if (p->state == PROC_CREATED ||
		   (p->t->role == SPEC_POD_SANDBOX && p == &p->t->init)) {
		/* Nothing runs (a created process, the pod's sandbox container): it ends. */
		if (!p->sock_pending)
			proc_exited_locked(s, p, 128 + req->signal);
		else
			call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s is starting", req->id);
	}
	bool running = p->state == PROC_RUNNING;
	pthread_mutex_unlock(&s->mu);
	if (!c->code && running) {
		int r = proc_signal(p, (int)req->signal);
		if (r < 0)
			call_fail(c, TTRPC_NOT_FOUND, "task %s: process already finished", req->id);
	}
	if (!c->code)
		call_empty(c);
	proc_put(s, p);
out:
	k8task__kill_request__free_unpacked(req, &b.alloc);
}

static void rpc_delete(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__DeleteRequest *req;
	K8task__DeleteResponse resp = K8TASK__DELETE_RESPONSE__INIT;
	K8events__TaskDelete e = K8EVENTS__TASK_DELETE__INIT;
	K8task__Timestamp ts;
	struct k8_err err = { 0 };
	struct proc *p;
	struct task *t;
	int r;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__delete_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed DeleteRequest");
	if (!(p = proc_get(s, req->id, req->exec_id, c)))
		goto out;
	t = p->t;
	pthread_mutex_lock(&s->mu);
	if (p->state == PROC_RUNNING || p->sock_pending) {
		pthread_mutex_unlock(&s->mu);
		call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s%s%s is running; kill it first",
			  req->id, *req->exec_id ? " exec " : "", req->exec_id);
		proc_put(s, p);
		goto out;
	}
	if (p == &t->init) {
		for (struct proc *x = t->execs; x; x = x->next)
			if (x->state == PROC_RUNNING) {
				pthread_mutex_unlock(&s->mu);
				call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s has running execs",
					  req->id);
				proc_put(s, p);
				goto out;
			}
	}
	if (p->state == PROC_CREATED) {
		/* never started: it ends now, as containerd's own shims report it */
		proc_exited_locked(s, p, 0);
	}
	/* Only this handler may free it: wait until nobody else holds it. */
	while (p->users > 1)
		pthread_cond_wait(&s->cond, &s->mu);
	resp.pid = s->pid;
	resp.exit_status = p->exit_status;
	resp.exited_at = ts_of(p, &ts);
	pthread_mutex_unlock(&s->mu);
	if (p == &t->init) {
		r = task_undo(&s->kc, t->sandbox, t->owns_sandbox, t->guest_id, t->image,
			      t->own_image, &err);
		if (r) {
			shim_log("task %s: removing its kosa8 parts: %s", t->id, err.msg);
			if (r != -ECONNREFUSED) {
				call_err(c, &err);
				proc_put(s, p);
				goto out;
			}
		}
		if (t->rootfs_mounted) {
			cleanup_free char *dir = xasprintf("%s/rootfs", t->bundle);
			rootfs_unmount(dir);
		}
		cleanup_free char *sf = xasprintf("%s/%s", t->bundle, SHIM_STATE_FILE);
		unlink(sf);
	}
	pthread_mutex_lock(&s->mu);
	e.container_id = t->id;
	e.pid = s->pid;
	e.exit_status = p->exit_status;
	e.exited_at = &ts;
	e.id = p->exec_id[0] ? p->exec_id : t->id;
	events_publish(s->ev, "/tasks/delete", "TaskDelete", &e.base);
	p->users--;
	if (p == &t->init) {
		for (struct task **pp = &s->tasks; *pp; pp = &(*pp)->next)
			if (*pp == t) {
				*pp = t->next;
				break;
			}
	} else {
		for (struct proc **pp = &t->execs; *pp; pp = &(*pp)->next)
			if (*pp == p) {
				*pp = p->next;
				break;
			}
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mu);
	call_answer(c, &resp.base);
	if (p == &t->init) {
		shim_log("task %s: deleted", t->id);
		task_free(t);
	} else {
		proc_release(p);
		free(p);
	}
out:
	k8task__delete_request__free_unpacked(req, &b.alloc);
}

static void rpc_exec(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__ExecProcessRequest *req;
	struct k8_err err = { 0 };
	struct proc *init, *p;
	json_t *spec = NULL;
	json_error_t je;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__exec_process_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed ExecProcessRequest");
	if (!id_ok(req->exec_id) || !path_ok(req->stdin, true) || !path_ok(req->stdout, true) ||
	    !path_ok(req->stderr, true) || !req->spec || req->spec->value.len > SPEC_MAX_BYTES) {
		call_fail(c, TTRPC_INVALID_ARGUMENT, "ExecProcessRequest: an exec id of 1-%d bytes, "
			  "absolute stdio paths and a process spec are required", SHIM_ID_MAX);
		goto out;
	}
	spec = json_loadb((const char *)req->spec->value.data, req->spec->value.len, 0, &je);
	p = xcalloc(1, sizeof(*p));
	if (spec_proc_parse(spec, &p->spec, &err)) {
		call_err(c, &err);
		free(p);
		goto out;
	}
	if (!(init = proc_get(s, req->id, NULL, c))) {
		spec_proc_free(&p->spec);
		free(p);
		goto out;
	}
	proc_init(p, init->t);
	snprintf(p->exec_id, sizeof(p->exec_id), "%s", req->exec_id);
	p->stdin_path = xstrdup(req->stdin);
	p->stdout_path = xstrdup(req->stdout);
	p->stderr_path = xstrdup(req->stderr);
	p->terminal = req->terminal || p->spec.terminal;
	pthread_mutex_lock(&s->mu);
	if (proc_find(init->t, req->exec_id)) {
		call_fail(c, TTRPC_ALREADY_EXISTS, "task %s: exec %s already exists", req->id,
			  req->exec_id);
	} else if (init->state != PROC_RUNNING || init->t->role == SPEC_POD_SANDBOX) {
		call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s is not running%s", req->id,
			  init->t->role == SPEC_POD_SANDBOX ? " a process (a pod's sandbox "
			  "container)" : "");
	} else {
		K8events__TaskExecAdded e = K8EVENTS__TASK_EXEC_ADDED__INIT;
		p->next = init->t->execs;
		init->t->execs = p;
		e.container_id = init->t->id;
		e.exec_id = p->exec_id;
		events_publish(s->ev, "/tasks/exec-added", "TaskExecAdded", &e.base);
		p = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	if (p) {
		proc_release(p);
		free(p);
	} else {
		call_empty(c);
	}
	proc_put(s, init);
out:
	json_decref(spec);
	k8task__exec_process_request__free_unpacked(req, &b.alloc);
}

static K8task__Status proc_status(struct proc *p)
{
	switch (p->state) {
	case PROC_CREATED: return K8TASK__STATUS__CREATED;
	case PROC_RUNNING: return p->t->paused ? K8TASK__STATUS__PAUSED : K8TASK__STATUS__RUNNING;
	default: return K8TASK__STATUS__STOPPED;
	}
}

static void rpc_state(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__StateRequest *req;
	K8task__StateResponse resp = K8TASK__STATE_RESPONSE__INIT;
	K8task__Timestamp ts;
	struct proc *p;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__state_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed StateRequest");
	if ((p = proc_get(s, req->id, req->exec_id, c))) {
		pthread_mutex_lock(&s->mu);
		resp.id = p->exec_id[0] ? p->exec_id : p->t->id;
		resp.bundle = p->t->bundle;
		resp.pid = s->pid;
		resp.status = proc_status(p);
		resp.stdin = p->stdin_path;
		resp.stdout = p->stdout_path;
		resp.stderr = p->stderr_path;
		resp.terminal = p->terminal;
		resp.exit_status = p->exit_status;
		if (p->state == PROC_STOPPED)
			resp.exited_at = ts_of(p, &ts);
		resp.exec_id = p->exec_id;
		call_answer(c, &resp.base);
		pthread_mutex_unlock(&s->mu);
		proc_put(s, p);
	}
	k8task__state_request__free_unpacked(req, &b.alloc);
}

/* Pause and Resume: the task's VM (only a task that owns its sandbox: one container of
 * a pod cannot stop alone, its VM runs the others). */
static void rpc_pause_resume(struct shim *s, struct call *c, bool pause)
{
	struct ttrpc_budget b;
	K8task__PauseRequest *req;
	struct k8_err err = { 0 };
	struct proc *p;
	char path[512];
	json_t *body;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	/* PauseRequest and ResumeRequest are both {string id = 1}. */
	if (!(req = k8task__pause_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed %sRequest",
				 pause ? "Pause" : "Resume");
	if (!(p = proc_get(s, req->id, NULL, c)))
		goto out;
	if (!p->t->owns_sandbox) {
		call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s is one container of pod %s, whose "
			  "VM runs them all; pause the pod's sandbox container instead", req->id,
			  p->t->pod);
	} else if (p->state != PROC_RUNNING) {
		call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s is not running", req->id);
	} else {
		body = pause ? json_pack("{s:b}", "in_memory", 1) : json_object();
		sb_path(path, sizeof(path), p->t->sandbox, pause ? "/pause" : "/resume");
		if (kc_call(&s->kc, "POST", path, body, NULL, &err)) {
			call_err(c, &err);
		} else {
			pthread_mutex_lock(&s->mu);
			p->t->paused = pause;
			if (pause) {
				K8events__TaskPaused e = K8EVENTS__TASK_PAUSED__INIT;
				e.container_id = p->t->id;
				events_publish(s->ev, "/tasks/paused", "TaskPaused", &e.base);
			} else {
				K8events__TaskResumed e = K8EVENTS__TASK_RESUMED__INIT;
				e.container_id = p->t->id;
				events_publish(s->ev, "/tasks/resumed", "TaskResumed", &e.base);
			}
			pthread_mutex_unlock(&s->mu);
			call_empty(c);
		}
		json_decref(body);
	}
	proc_put(s, p);
out:
	k8task__pause_request__free_unpacked(req, &b.alloc);
}

static void rpc_pids(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__PidsRequest *req;
	K8task__PidsResponse resp = K8TASK__PIDS_RESPONSE__INIT;
	K8task__ProcessInfo info = K8TASK__PROCESS_INFO__INIT, *infos[1] = { &info };
	struct k8_err err = { 0 };
	json_t *list = NULL, *v;
	struct proc *p;
	char path[512];
	size_t i;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__pids_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed PidsRequest");
	if (!(p = proc_get(s, req->id, NULL, c)))
		goto out;
	/* The container's init, by its pid in the VM (the only pid that means anything
	 * there); nothing when it does not run. */
	if (p->state == PROC_RUNNING && p->t->guest_id[0]) {
		sb_path(path, sizeof(path), p->t->sandbox, "/containers");
		if (kc_call(&s->kc, "GET", path, NULL, &list, &err) == 0) {
			json_array_foreach(list, i, v)
				if (json_is_string(json_object_get(v, "id")) &&
				    !strcmp(json_string_value(json_object_get(v, "id")), p->t->guest_id) &&
				    json_is_integer(json_object_get(v, "pid")) &&
				    json_integer_value(json_object_get(v, "pid")) > 0 &&
				    json_integer_value(json_object_get(v, "pid")) <= 0x7fffffff) {
					info.pid = (uint32_t)json_integer_value(json_object_get(v, "pid"));
					resp.processes = infos;
					resp.n_processes = 1;
				}
		}
		json_decref(list);
	}
	if (err.code)
		call_err(c, &err);
	else
		call_answer(c, &resp.base);
	proc_put(s, p);
out:
	k8task__pids_request__free_unpacked(req, &b.alloc);
}

static void rpc_close_io(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__CloseIORequest *req;
	struct proc *p;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__close_iorequest__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed CloseIORequest");
	if ((p = proc_get(s, req->id, req->exec_id, c))) {
		if (req->stdin)
			proc_closeio(p);
		call_empty(c);
		proc_put(s, p);
	}
	k8task__close_iorequest__free_unpacked(req, &b.alloc);
}

static void rpc_resize(struct shim *s, struct call *c)
{
	struct ttrpc_budget b;
	K8task__ResizePtyRequest *req;
	struct k8_err err = { 0 };
	struct proc *p;
	char path[512], rest[128], gid[64];
	json_t *body;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	if (!(req = k8task__resize_pty_request__unpack(&b.alloc, c->in_len, c->in)))
		return call_fail(c, TTRPC_INVALID_ARGUMENT, "malformed ResizePtyRequest");
	if (req->width > 65535 || req->height > 65535) {
		call_fail(c, TTRPC_INVALID_ARGUMENT, "a terminal is at most 65535 wide and high");
		goto out;
	}
	if (!(p = proc_get(s, req->id, req->exec_id, c)))
		goto out;
	if (!p->terminal) {
		call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s: the process has no terminal",
			  req->id);
	} else if (p->exec_id[0]) {
		call_fail(c, TTRPC_UNIMPLEMENTED, "resizing an exec's terminal is not supported; "
			  "the task's own terminal is");
	} else if (p->state != PROC_RUNNING || !p->t->guest_id[0]) {
		call_fail(c, TTRPC_FAILED_PRECONDITION, "task %s is not running", req->id);
	} else {
		kc_escape(p->t->guest_id, gid, sizeof(gid));
		snprintf(rest, sizeof(rest), "/containers/%s/resize", gid);
		sb_path(path, sizeof(path), p->t->sandbox, rest);
		body = json_pack("{s:i,s:i}", "rows", (int)req->height, "cols", (int)req->width);
		if (kc_call(&s->kc, "POST", path, body, NULL, &err))
			call_err(c, &err);
		else
			call_empty(c);
		json_decref(body);
	}
	proc_put(s, p);
out:
	k8task__resize_pty_request__free_unpacked(req, &b.alloc);
}

static void rpc_connect(struct shim *s, struct call *c)
{
	K8task__ConnectResponse resp = K8TASK__CONNECT_RESPONSE__INIT;

	resp.shim_pid = s->pid;
	resp.task_pid = s->pid;
	resp.version = (char *)SHIM_VERSION;
	call_answer(c, &resp.base);
}

static void rpc_shutdown(struct shim *s, struct call *c)
{
	pthread_mutex_lock(&s->mu);
	if (!s->tasks)
		s->shutdown = true;
	pthread_mutex_unlock(&s->mu);
	call_empty(c);
}

static void rpc_unimplemented(struct shim *s, struct call *c, const char *what)
{
	(void)s;
	call_fail(c, TTRPC_UNIMPLEMENTED, "%s is not implemented by the kosa8 runtime%s", what,
		  !strcmp(what, "Checkpoint") ? ": kosa8's own checkpoints (kosa8 checkpoint) "
		  "save the whole VM" : !strcmp(what, "Update") ? ": a kosa8 sandbox's size is set "
		  "when it is made (io.kosa8.cpus, io.kosa8.memory-mib)" : "");
}

void task_dispatch(struct shim *s, const char *m, struct call *c)
{
	if (!strcmp(m, "Create"))
		rpc_create(s, c);
	else if (!strcmp(m, "Start"))
		rpc_start(s, c);
	else if (!strcmp(m, "Wait"))
		rpc_wait(s, c);
	else if (!strcmp(m, "Kill"))
		rpc_kill(s, c);
	else if (!strcmp(m, "Delete"))
		rpc_delete(s, c);
	else if (!strcmp(m, "Exec"))
		rpc_exec(s, c);
	else if (!strcmp(m, "State"))
		rpc_state(s, c);
	else if (!strcmp(m, "Pause"))
		rpc_pause_resume(s, c, true);
	else if (!strcmp(m, "Resume"))
		rpc_pause_resume(s, c, false);
	else if (!strcmp(m, "Pids"))
		rpc_pids(s, c);
	else if (!strcmp(m, "CloseIO"))
		rpc_close_io(s, c);
	else if (!strcmp(m, "ResizePty"))
		rpc_resize(s, c);
	else if (!strcmp(m, "Connect"))
		rpc_connect(s, c);
	else if (!strcmp(m, "Shutdown"))
		rpc_shutdown(s, c);
	else if (!strcmp(m, "Checkpoint") || !strcmp(m, "Update") || !strcmp(m, "Stats"))
		rpc_unimplemented(s, c, m);
	else
		call_fail(c, TTRPC_UNIMPLEMENTED, "no method %.100s", m);
}

int task_cleanup_bundle(struct shim *s, const char *bundle, uint32_t *pid, struct k8_err *err)
{
	cleanup_free char *path = xasprintf("%s/%s", bundle, SHIM_STATE_FILE);
	cleanup_free char *text = NULL, *dir = NULL;
	json_error_t je;
	json_t *j;
	size_t len;
	int r;

	*pid = 0;
	if ((r = read_file(path, 65536, &text, &len)))
		return r == -ENOENT ? 0 : k8_err_set(err, r, "%s: %s", path, strerror(-r));
	j = json_loadb(text, len, 0, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		return k8_err_set(err, -EINVAL, "%s is not a JSON object", path);
	}
	if (json_is_integer(json_object_get(j, "shim_pid")))
		*pid = (uint32_t)json_integer_value(json_object_get(j, "shim_pid"));
	r = task_undo(&s->kc, json_string_value(json_object_get(j, "sandbox")),
		      json_is_true(json_object_get(j, "owns_sandbox")),
		      json_string_value(json_object_get(j, "container")),
		      json_string_value(json_object_get(j, "image")),
		      json_is_true(json_object_get(j, "own_image")), err);
	if (json_is_true(json_object_get(j, "rootfs_mounted"))) {
		dir = xasprintf("%s/rootfs", bundle);
		rootfs_unmount(dir);
	}
	json_decref(j);
	if (!r)
		unlink(path);
	return r;
}
