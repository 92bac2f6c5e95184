/* SPDX-License-Identifier: Apache-2.0 */
/* ctr.c - containers: records, run/exec, stop/rm with their delayed answers, the
 * detached log, limit events, and removal (cgroup, writable layer).
 *
 * A container lives from `run` until `rm` (or, with rm:true, until its first process
 * exited and its stream was flushed). Its writable layer is
 * /scratch/containers/<id>/{upper,work} under an overlay mounted in the container's own
 * mount namespace; removing it renames the directory into /scratch/.trash (instant) and
 * a forked helper deletes it, so a big layer never stalls the event loop.
 */
#include "agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

struct ctr *ctr_find(struct agent *a, const char *id)
{
	struct ctr *c;

	for (c = a->ctrs; c; c = c->next)
		if (!strcmp(c->id, id))
			return c;
	return NULL;
}

int ctr_count(struct agent *a)
{
	struct ctr *c;
	int n = 0;

	for (c = a->ctrs; c; c = c->next)
		n++;
	return n;
}

int ctr_running_count(struct agent *a)
{
	struct ctr *c;
	int n = 0;

	for (c = a->ctrs; c; c = c->next)
		n += c->running;
	return n;
}

const char *ctr_image_user(struct agent *a, const char *hex)
{
	struct ctr *c;

	for (c = a->ctrs; c; c = c->next)
		if ((c->running || c->created) && !strcmp(c->image_hex, hex))
			return c->id;
	return NULL;
}

/* A created container counts: its root is the image (a later run starts in it). */
int ctr_image_in_use(struct agent *a, const char *hex)
{
	return ctr_image_user(a, hex) != NULL;
}

/* Delete `path` (or, when NULL, everything in the trash) in a child process. */
static void ctr_spawn_cleaner(const char *path)
{
	pid_t pid = fork();

	if (pid < 0) {
		agent_log("fork (cleanup): %s", strerror(errno));
		return;
	}
	if (pid > 0)
		return; /* reaped by the main loop like any unknown child */
	/* Hold none of the agent's fds: a copy of a stdin pipe would keep a process
	 * from ever seeing EOF. */
	syscall(SYS_close_range, 3u, ~0u, 0u);
	setpriority(PRIO_PROCESS, 0, 10);
	if (path) {
		rm_rf(path);
	} else {
		DIR *d = opendir(AGENT_TRASH_DIR);
		struct dirent *de;

		while (d && (de = readdir(d))) {
			char p[512];

			if (de->d_name[0] == '.' &&
			    (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
				continue;
			snprintf(p, sizeof(p), "%s/%s", AGENT_TRASH_DIR, de->d_name);
			rm_rf(p);
		}
	}
	_exit(0);
}

static void ctr_trash(const char *id)
{
	char from[128], to[160];

	snprintf(from, sizeof(from), "%s/%s", AGENT_CTR_DIR, id);
	snprintf(to, sizeof(to), "%s/%s.%llu", AGENT_TRASH_DIR, id, (unsigned long long)now_mono_ns());
	if (rename(from, to) < 0) {
		if (errno != ENOENT)
			agent_log("rename %s: %s", from, strerror(errno));
		return;
	}
	ctr_spawn_cleaner(to);
}

void ctr_boot_cleanup(struct agent *a K8_UNUSED)
{
	DIR *d;
	struct dirent *de;
	int any = 0;

	mkdir_p(AGENT_CTR_DIR, 0700);
	mkdir_p(AGENT_TRASH_DIR, 0700);
	d = opendir(AGENT_CTR_DIR);
	while (d && (de = readdir(d))) {
		char from[512], to[600];

		if (de->d_name[0] == '.')
			continue;
		snprintf(from, sizeof(from), "%s/%s", AGENT_CTR_DIR, de->d_name);
		snprintf(to, sizeof(to), "%s/%s.boot", AGENT_TRASH_DIR, de->d_name);
		if (rename(from, to) == 0)
			any = 1;
	}
	if (d)
		closedir(d);
	d = opendir(AGENT_TRASH_DIR);
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.' || (de->d_name[1] && strcmp(de->d_name, "..")))
			any = 1;
	if (d)
		closedir(d);
	if (any)
		ctr_spawn_cleaner(NULL);
}

static void ctr_answer(struct agent *a, struct ctr *c, int all)
{
	struct waiter **pw = &c->waiters, *w;

	while ((w = *pw)) {
		if (!all && w->op != WAIT_STOP) {
			pw = &w->next;
			continue;
		}
		*pw = w->next;
		chan_resp_ok(a, w->id, NULL);
		free(w);
	}
}

static void ctr_add_waiter(struct ctr *c, uint32_t id, enum waiter_op op)
{
	struct waiter *w = xcalloc(1, sizeof(*w));

	w->id = id;
	w->op = op;
	w->next = c->waiters;
	c->waiters = w;
}

void ctr_drop_waiters(struct agent *a)
{
	struct ctr *c;

	for (c = a->ctrs; c; c = c->next) {
		while (c->waiters) {
			struct waiter *w = c->waiters;
			c->waiters = w->next;
			free(w);
		}
	}
}

/* Remove the container: answer whoever waits, drop its cgroup and writable layer. */
static void ctr_destroy(struct agent *a, struct ctr *c)
{
	struct ctr **pc;
	struct proc *p;

	if (c->dead)
		return;
	ctr_answer(a, c, 1);
	if (c->log_fd >= 0)
		close(c->log_fd);
	c->log_fd = -1;
	net_ns_retire(&c->netns_fd);
	net_ns_retire(&c->pk_fd);
	agent_unwatch(a, &c->memev);
	agent_unwatch(a, &c->pidsev);
	cg_remove(a, c->id);
	ctr_trash(c->id);
	for (p = a->procs; p; p = p->next)
		if (p->ctr == c)
			p->ctr = NULL;
	for (pc = &a->ctrs; *pc; pc = &(*pc)->next) {
		if (*pc == c) {
			*pc = c->next;
			break;
		}
	}
	c->dead = 1;
	c->next = a->dead_ctrs;
	a->dead_ctrs = c;
}

void ctr_gc(struct agent *a)
{
	struct ctr *c, *next;

	for (c = a->dead_ctrs; c; c = next) {
		next = c->next;
		json_decref(c->argv);
		free(c);
	}
	a->dead_ctrs = NULL;
}

/* The container's directory and its overlay's upper, work and rootfs. */
static int ctr_mkdirs(const char *dir, struct k8_err *err)
{
	char sub[160];
	int r;

	if (mkdir(dir, 0700) < 0)
		return k8_err_set(err, -errno, "mkdir %s: %s", dir, strerror(errno));
	for (const char *const *s = (const char *const[]){ "upper", "work", "rootfs", NULL }; *s; s++) {
		snprintf(sub, sizeof(sub), "%s/%s", dir, *s);
		if (mkdir(sub, 0755) < 0) {
			r = k8_err_set(err, -errno, "mkdir %s: %s", sub, strerror(errno));
			rm_rf(dir);
			return r;
		}
	}
	return 0;
}

/* A record for container `id` of image `image` (hex), not running, on the list. */
static struct ctr *ctr_new(struct agent *a, const char *id, const char *image)
{
	struct ctr *c = xcalloc(1, sizeof(*c));

	snprintf(c->id, sizeof(c->id), "%s", id);
	snprintf(c->image, sizeof(c->image), "sha256:%s", image);
	snprintf(c->image_hex, sizeof(c->image_hex), "%s", image);
	c->exit_code = -1;
	c->log_fd = -1;
	c->netns_fd = -1;
	c->pk_fd = -1;
	c->memev = (struct watch){ .kind = W_CGEV, .fd = -1, .owner = c };
	c->pidsev = (struct watch){ .kind = W_CGEV, .fd = -1, .owner = c };
	c->next = a->ctrs;
	a->ctrs = c;
	return c;
}

int ctr_create(struct agent *a, const char *id, const char *image, struct k8_err *err)
{
	char dir[128];
	struct ctr *c;
	int r;

	if (!a->scratch_ok)
		return k8_err_set(err, -ENODEV, "no scratch disk is mounted at %s", AGENT_SCRATCH);
	snprintf(dir, sizeof(dir), "%s/%s", AGENT_CTR_DIR, id);
	if ((r = ctr_mkdirs(dir, err)) < 0)
		return r;
	c = ctr_new(a, id, image);
	c->created = 1;
	c->argv = json_array();
	return 0;
}

int ctr_run(struct agent *a, uint32_t reqid, const char *id, const char *image, json_t *argv,
	    struct launch *l, int auto_rm, int detach, pid_t *pid, struct k8_err *err)
{
	char dir[128], lower[128];
	struct launch_out o;
	struct ctr *c;
	struct proc *p;
	int r;

	if (!a->scratch_ok)
		return k8_err_set(err, -ENODEV, "no scratch disk is mounted at %s", AGENT_SCRATCH);
	if (!a->cgroup_ok)
		return k8_err_set(err, -ENODEV, "cgroup v2 is not available: no limits, no containers");
	snprintf(dir, sizeof(dir), "%s/%s", AGENT_CTR_DIR, id);
	c = ctr_find(a, id);    /* a created one (req_run checked), else a new one */
	if (!c && (r = ctr_mkdirs(dir, err)) < 0)
		return r;
	if ((r = cg_create(a, id, l->mem_max, l->nano_cpus, err)) < 0) {
		if (!c)
			rm_rf(dir);
		return r;
	}
	snprintf(lower, sizeof(lower), "%s/%s", AGENT_IMAGES_DIR, image);
	l->ctr_id = id;
	l->lower = lower;
	l->target = 0;
	if ((r = launch_start(a, l, &o, err)) < 0) {
		cg_remove(a, id);
		if (!c)
			rm_rf(dir);     /* a created one keeps its root (files copied in) */
		return r;
	}
	if (!c)
		c = ctr_new(a, id, image);
	c->created = 0;
	json_decref(c->argv);
	c->argv = json_incref(argv);
	c->pid = o.pid;
	c->running = 1;
	c->exit_code = -1;
	c->started_ns = now_real_ns();
	c->auto_rm = auto_rm;
	c->detach = detach;
	c->no_new_privs = l->no_new_privs;
	c->cap_drop = l->cap_drop;
	c->log_fd = -1;
	net_ns_retire(&c->netns_fd);    /* a restarted one's last run */
	net_ns_retire(&c->pk_fd);
	/* held, so the teardown waits for an idle VM (net.c); -1 if it ended already */
	c->netns_fd = o.net.ns;
	c->pk_fd = o.net.pk;
	if (l->own_netns && c->netns_fd < 0) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)o.pid);
		c->netns_fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	c->own_netns = l->own_netns;
	c->own_ip = l->ctr_ip[0] != '\0';
	cg_open_events(a, c);
	p = proc_new(a, o.pid, detach ? 0 : reqid, c, o.in_fd, o.out_fd, o.err_fd);
	p->tty = l->tty;
	p->is_init = 1;
	c->init = p;
	*pid = o.pid;
	return 0;
}

int ctr_exec(struct agent *a, uint32_t reqid, struct ctr *c, struct launch *l, pid_t *pid,
	     struct k8_err *err)
{
	struct launch_out o;
	int r;

	if (!c->running)
		return k8_err_set(err, -ESRCH, "container %s is not running", c->id);
	l->ctr_id = c->id;
	l->lower = NULL;
	l->target = c->pid;
	l->own_netns = 0;          /* joins the init's network namespace, whichever it is */
	l->no_new_privs = c->no_new_privs;
	l->cap_drop = c->cap_drop;
	if ((r = launch_start(a, l, &o, err)) < 0)
		return r;
	proc_new(a, o.pid, reqid, c, o.in_fd, o.out_fd, o.err_fd)->tty = l->tty;
	*pid = o.pid;
	return 0;
}

json_t *ctr_list(struct agent *a)
{
	json_t *arr = json_array();
	struct ctr *c;

	for (c = a->ctrs; c; c = c->next) {
		json_t *o = json_pack("{s:s,s:s,s:i,s:b,s:I,s:O,s:b}", "id", c->id, "image", c->image,
				      "pid", (int)c->pid, "running", c->running, "started_ns",
				      (json_int_t)c->started_ns, "argv", c->argv, "detach", c->detach);
		if (!o)
			continue;
		if (c->running || c->created) {
			json_object_set_new(o, "exit_code", json_null());
			if (c->created)
				json_object_set_new(o, "created", json_true());
		} else {
			json_object_set_new(o, "exit_code", json_integer(c->exit_code));
			json_object_set_new(o, "exit_signal", json_integer(c->exit_signal));
			json_object_set_new(o, "oom", json_boolean(c->oom));
		}
		json_array_append_new(arr, o);
	}
	return arr;
}

void ctr_stop(struct agent *a, uint32_t reqid, struct ctr *c, int sig, uint64_t timeout_ms)
{
	uint64_t at;

	if (!c->running) {
		chan_resp_ok(a, reqid, NULL);
		return;
	}
	kill(c->pid, sig);
	at = now_mono_ns() + timeout_ms * 1000000ull;
	if (sig == SIGKILL)
		at = 0;
	else if (!c->kill_at || at < c->kill_at)
		c->kill_at = at;
	ctr_add_waiter(c, reqid, WAIT_STOP);
}

void ctr_rm(struct agent *a, uint32_t reqid, struct ctr *c)
{
	if (!c->running) {
		ctr_add_waiter(c, reqid, WAIT_RM);
		ctr_destroy(a, c);
		return;
	}
	/* Like docker rm -f: a running container is killed first; the answer comes
	 * once it is gone. */
	c->remove_on_exit = 1;
	ctr_add_waiter(c, reqid, WAIT_RM);
	kill(c->pid, SIGKILL);
}

void ctr_init_exited(struct agent *a, struct ctr *c, int status, int oom)
{
	c->running = 0;
	c->kill_at = 0;
	c->oom = oom;
	if (WIFSIGNALED(status)) {
		c->exit_signal = WTERMSIG(status);
		c->exit_code = 128 + c->exit_signal;
	} else {
		c->exit_signal = 0;
		c->exit_code = WEXITSTATUS(status);
	}
	chan_event_json(a, json_pack("{s:s,s:s,s:i,s:i,s:b}", "event", "container-exit", "container",
				     c->id, "code", c->exit_code, "signal", c->exit_signal, "oom", oom));
	ctr_answer(a, c, 0);
	agent_disk_check(a);
	if (c->remove_on_exit)
		ctr_destroy(a, c);
}

void ctr_init_done(struct agent *a, struct ctr *c)
{
	net_ns_retire(&c->netns_fd);
	net_ns_retire(&c->pk_fd);
	if (c->own_netns)       /* the next such container's namespace, while the VM idles */
		net_spare_make(a, c->own_ip);
	if (c->auto_rm)
		ctr_destroy(a, c);
}

void ctr_log_write(struct agent *a K8_UNUSED, struct ctr *c, const void *p, size_t n)
{
	static const char full[] = "\n[kosa8: log reached 16 MiB; later output dropped]\n";

	if (c->log_full || c->dead)
		return;
	if (c->log_fd < 0) {
		char path[128];

		snprintf(path, sizeof(path), "%s/%s/log", AGENT_CTR_DIR, c->id);
		c->log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
		if (c->log_fd < 0) {
			agent_log("open %s: %s", path, strerror(errno));
			c->log_full = 1;
			return;
		}
	}
	if (c->log_bytes + n + sizeof(full) > AGENT_LOG_CAP) {
		size_t room = AGENT_LOG_CAP - sizeof(full) - c->log_bytes;

		if (room > n)
			room = n;
		(void)!write(c->log_fd, p, room);
		(void)!write(c->log_fd, full, sizeof(full) - 1);
		c->log_full = 1;
		c->log_bytes = AGENT_LOG_CAP;
		return;
	}
	if (write_full(c->log_fd, p, n) == 0)
		c->log_bytes += n;
}

void ctr_cg_event(struct agent *a, struct watch *w)
{
	struct ctr *c = w->owner;
	uint64_t now = now_mono_ns();

	if (c->dead)
		return;
	if (w == &c->memev) {
		uint64_t k = cg_counter_fd(w->fd, "oom_kill");

		if (k > c->oom_kills) {
			c->oom_kills = k;
			chan_event_json(a, json_pack("{s:s,s:s,s:I}", "event", "oom", "container", c->id,
						     "oom_kill", (json_int_t)k));
		}
	} else {
		uint64_t k = cg_counter_fd(w->fd, "max");

		/* A fork bomb hits the limit thousands of times a second: one EVENT a
		 * second at most. */
		if (k > c->pids_hits && (!c->pids_event_at || now - c->pids_event_at > 1000000000ull)) {
			c->pids_hits = k;
			c->pids_event_at = now;
			chan_event_json(a, json_pack("{s:s,s:s,s:I,s:i}", "event", "pids-limit",
						     "container", c->id, "count", (json_int_t)k, "limit",
						     (int)a->pids_max));
		}
	}
}

void ctr_tick(struct agent *a, uint64_t now, uint64_t *next)
{
	struct ctr *c;

	for (c = a->ctrs; c; c = c->next) {
		if (!c->running || !c->kill_at)
			continue;
		if (now >= c->kill_at) {
			kill(c->pid, SIGKILL);
			c->kill_at = 0;
		} else if (c->kill_at < *next) {
			*next = c->kill_at;
		}
	}
}
