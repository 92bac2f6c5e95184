/* SPDX-License-Identifier: Apache-2.0 */
/* boot.c - a sandbox's VM: the sidecars and sockets before QEMU starts, the boot, the
 * spawn of a restored QEMU, the connections to QMP and the guest agent (events from the
 * guest included), adopting a VM an earlier daemon left, and the kill. Below both
 * sandbox.c (the lifecycle) and spare.c (a rewind's spare, which connects the VM it swaps
 * in), so neither calls the other for it (docs/design.md "The daemon's modules").
 */
#include "common/proto.h"
#include "daemon/boot.h"
#include "daemon/broker.h"
#include "daemon/egress.h"
#include "daemon/mounts.h"
#include "daemon/ports.h"
#include "daemon/audit.h"
#include "daemon/layers.h"
#include "daemon/memfile.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BOOT_TIMEOUT_MS 90000
#define ADOPT_TIMEOUT_MS 15000
#define REQ_TIMEOUT_MS 30000
#define SB_CLOCK_LATE_NS (200ull * 1000000ull)   /* an init this slow: set the clock again */

/* ---- before QEMU starts ---- */

static void sb_paths(struct daemon *d, struct sandbox *sb, char *qmp, char *agent, size_t n)
{
	sb_sock_path(d, sb, "qmp", qmp, n);
	sb_sock_path(d, sb, "agent", agent, n);
}

int sb_prepare_spawn(struct daemon *d, struct sandbox *sb, struct sb_socks *k,
		     struct vm_spec *spec, struct k8_err *err)
{
	int r;

	sb_sock_path(d, sb, "qmp", k->qmp, sizeof(k->qmp));
	sb_sock_path(d, sb, "agent", k->agent, sizeof(k->agent));
	sb_sock_path(d, sb, "net", k->net, sizeof(k->net));
	sb_sock_path(d, sb, "fs", k->fs, sizeof(k->fs));
	unlink(k->qmp);
	unlink(k->agent);
	unlink(k->fs);
	if ((r = broker_up(d, sb, err)) || (r = net_up(d, sb, err)) || (r = fs_up(d, sb, err)))
		return r;
	ports_up(d, sb);
	/* The sidecars are on disk before QEMU starts: a daemon killed in between leaves
	 * processes the next one stops (sb_load_all), not ones nobody knows (test_69). */
	pthread_mutex_lock(&sb->lock);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	*spec = (struct vm_spec){ .accel = d->accel, .cpus = sb->cpus,
				  .memory_mib = sb->memory_mib, .dir = sb->dir,
				  .qmp_path = k->qmp, .agent_path = k->agent, .net_path = k->net,
				  .fs_path = k->fs, .kernel_fd = -1, .initramfs_fd = -1,
				  .incoming_fd = -1, .cg = &d->cg, .cg_name = sb->name,
				  .tb_mib = daemon_tcg_tb_mib(d, NULL) };
	if (!d->jail_off && sb->jail_index >= 0)
		spec->jail_uid = jail_uid(&d->jail, sb->jail_index, JAIL_QEMU);
	return 0;
}

/* ---- events from the guest ---- */

/* Container ids are 12 hex digits (exec.c); the guest may name others, which are not
 * passed on. */
static bool ev_container_valid(const char *c)
{
	return c && strlen(c) == 12 && strspn(c, "0123456789abcdef") == 12;
}

static void sb_on_event(void *ctx, json_t *ev)
{
	struct sandbox *sb = ctx;
	const char *name = json_string_value(json_object_get(ev, "event"));

	if (!name)
		return;
	/* A hostile guest can send events without end: they go through its audit budget. */
	if (!strcmp(name, "oom") || !strcmp(name, "pids-limit") || !strcmp(name, "disk-full")) {
		json_t *det = json_pack("{s:s}", "limit", name);
		const char *c = json_string_value(json_object_get(ev, "container"));
		if (c)
			json_object_set_new(det, "container",
					    json_string(ev_container_valid(c) ? c : "(invalid)"));
		daemon_audit_guest(sb->d, sb, "sandbox.limit", det, 1);
	}
}

/* ---- boot, adopt, stop ---- */

void sb_kill_vm(struct daemon *d, struct sandbox *sb)
{
	if (sb->spare_drop)     /* a stopped or removed sandbox keeps no spare */
		sb->spare_drop(d, sb);
	sb_kill_qemu(d, sb);
	sidecar_stop(&sb->net);
	sidecar_stop(&sb->fs);
	broker_down(d, sb);
	ports_release(sb);              /* closed while stopped, bound again at boot */
	daemon_audit_guest_flush(d, sb);
}

void sb_mem_set(struct sandbox *sb, int fd)
{
	struct stat st;

	memfile_close(sb->mem_fd);
	sb->mem_fd = -1;
	sb->mem_dev = sb->mem_ino = 0;
	if (fd < 0)
		return;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return;
	}
	sb->mem_fd = fd;
	sb->mem_dev = (unsigned long long)st.st_dev;
	sb->mem_ino = (unsigned long long)st.st_ino;
}

void sb_mem_release(struct sandbox *sb)
{
	memfile_close(sb->mem_fd);      /* an unlinked paused/memory: freed in the background */
	sb->mem_fd = -1;
	sb->mem_dev = sb->mem_ino = 0;
	/* A fork's link to its source's memory file is for its first VM only. */
	if (sb->forked) {
		cleanup_free char *p = xasprintf("%s/%s", sb->dir, SB_FORK_MEMORY);
		unlink(p);
	}
}

void sb_kill_qemu(struct daemon *d, struct sandbox *sb)
{
	struct k8_err err = { 0 };

	if (sb->qmp.fd >= 0)
		qmp_exec(&sb->qmp, "quit", NULL, NULL, 2000, &err);
	link_close(&sb->link);
	qmp_close(&sb->qmp);
	if (sb->pid > 0) {
		for (int i = 0; i < 100 && vm_alive(sb->pid, sb->pid_start); i++) {
			if (sb->child && waitpid(sb->pid, NULL, WNOHANG) == sb->pid)
				break;
			usleep(20000);
		}
		if (vm_alive(sb->pid, sb->pid_start))
			kill(sb->pid, SIGKILL);
		if (sb->child)
			waitpid(sb->pid, NULL, 0);
	}
	cgroup_remove(&d->cg, sb->name);
	sb_mem_release(sb);
	sb->restoring = false;
	sb->warm_pending = false;
	sb->paused = false;
	sb->pid = 0;
	sb->pid_start = 0;
	sb->child = false;
	for (int i = 0; i < sb->nimages; i++)
		sb->images[i].mounted = false;
}

void sb_discard_qemu(struct daemon *d, struct sandbox *sb)
{
	if (sb->pid > 0 && vm_alive(sb->pid, sb->pid_start))
		kill(sb->pid, SIGKILL);
	if (sb->pid > 0 && sb->child)
		waitpid(sb->pid, NULL, 0);
	sb_kill_qemu(d, sb);            /* finds it gone: its sockets, cgroup and record */
}

static void console_tail(struct sandbox *sb, char *out, size_t n)
{
	struct k8_err err = { 0 };
	json_t *ret = NULL;

	out[0] = '\0';
	if (sb->qmp.fd < 0)
		return;
	if (qmp_exec(&sb->qmp, "ringbuf-read",
		     json_pack("{s:s,s:i,s:s}", "device", "console", "size", 4096, "format", "utf8"),
		     &ret, 2000, &err) == 0 && json_is_string(ret)) {
		const char *s = json_string_value(ret);
		size_t len = strlen(s);
		if (len > n - 1)
			s += len - (n - 1);
		snprintf(out, n, "%s", s);
	}
	json_decref(ret);
}

int sb_mount_images(struct sandbox *sb, struct k8_err *err)
{
	for (int i = 0; i < sb->nimages; i++) {
		struct vm_image *img = &sb->images[i];
		json_t *resp = NULL;
		if (img->mounted)
			continue;
		int r = link_request(&sb->link,
				     json_pack("{s:s,s:i,s:s}", "op", "image.mount", "slot", img->slot,
					       "digest", img->digest),
				     REQ_TIMEOUT_MS, &resp, NULL, err);
		json_decref(resp);
		if (r)
			return k8_err_wrap(err, "mounting image %s in the guest", img->ref);
		img->mounted = true;
	}
	return 0;
}

/* The init request (docs/protocol.md): the clock, a fresh RNG seed, a fresh generation,
 * the hostname and the limits; on a fresh boot also the network and the shared folders (a restored guest
 * kept its own: those are set once per boot). NULL when the host has no randomness. */
static json_t *sb_init_req(struct sandbox *sb, bool restored)
{
	unsigned char seed[32], gen[16];
	char hex[65], genhex[33], host[K8_NAME_MAX + 1];
	json_t *req;

	if (getrandom(seed, sizeof(seed), 0) != sizeof(seed) ||
	    getrandom(gen, sizeof(gen), 0) != sizeof(gen))
		return NULL;
	k8_hex(seed, 32, hex);
	k8_hex(gen, 16, genhex);
	explicit_bzero(seed, sizeof(seed));
	/* The guest's hostname: the sandbox name with '_' (not valid there) as '-'. */
	snprintf(host, sizeof(host), "%s", sb->name);
	for (char *c = host; *c; c++)
		if (*c == '_')
			*c = '-';
	/* "generation": new for every run of this memory (boot, rewind, fork, resume from
	 * disk; not an in-memory resume, which is the same run): the VM generation ID that
	 * microvm cannot give (docs/design.md "Forks, rewinds and randomness"). */
	req = json_pack("{s:s,s:I,s:s,s:s,s:s,s:{s:i,s:i}}", "op", "init", "time_ns",
			(json_int_t)now_real_ns(), "hostname", host, "seed", hex, "generation", genhex,
			"limits", "pids", 1024, "memory_reserve_mib", 64);
	explicit_bzero(hex, sizeof(hex));
	if (!restored) {
		json_object_set_new(req, "net", net_guest_config());
		broker_guest_net(sb, json_object_get(req, "net"));
		if (sb->nmounts)
			json_object_set_new(req, "mounts", sb_mounts_json(sb, true));
	}
	return req;
}

void sb_guest_clock(struct sandbox *sb)
{
	struct k8_err err = { 0 };
	json_t *resp = NULL;

	link_request(&sb->link, json_pack("{s:s,s:I}", "op", "init", "time_ns",
					  (json_int_t)now_real_ns()), REQ_TIMEOUT_MS, &resp, NULL,
		     &err);
	json_decref(resp);
}

/* Add to the end of err's message (a k8_err_wrap the other way round). */
static void sb_err_append(struct k8_err *err, const char *fmt, ...) K8_PRINTF(2, 3);
static void sb_err_append(struct k8_err *err, const char *fmt, ...)
{
	size_t n = strlen(err->msg);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->msg + n, sizeof(err->msg) - n, fmt, ap);
	va_end(ap);
}

/* Connect to a restored agent's port and greet it at once: it believes its host is still
 * there, so it would say nothing until it noticed the port close and open (and it may
 * not notice: docs/protocol.md, "Connections"). */
static int sb_link_restored(struct sandbox *sb, const char *agent_path, struct k8_err *err)
{
	static const char hello[] = "{\"proto\":1}";
	int r = link_connect(&sb->link, agent_path, sb_on_event, sb, err);

	if (!r)
		link_send(&sb->link, PROTO_HELLO, 0, 0, hello, sizeof(hello) - 1);
	return r;
}

/* Milliseconds of a span of now_mono_ns(), for the phase log lines. */
#define SB_MS(ns) ((unsigned long long)((ns) / 1000000))

/* A failed connection: the VM is killed and err gets the guest console's tail (none
 * for -EPROTONOSUPPORT: the guest is fine, it is not ours). Returns r. */
static int sb_connect_fail(struct daemon *d, struct sandbox *sb, int r, struct k8_err *err)
{
	char tail[1024] = "";

	if (r != -EPROTONOSUPPORT)
		console_tail(sb, tail, sizeof(tail));
	if (tail[0])
		k8_err_wrap(err, "guest console: ...%s\n", tail);
	pthread_mutex_lock(&sb->lock);
	sb_kill_vm(d, sb);
	pthread_mutex_unlock(&sb->lock);
	return r;
}

int sb_connect_vm_start(struct daemon *d, struct sandbox *sb, pid_t pid, bool restored,
			struct sb_connect *c, struct k8_err *err)
{
	char qmp_path[4200], agent_path[4200];
	uint64_t *t = c->t;
	bool linked = false;
	int r;

	memset(c, 0, sizeof(*c));
	c->restored = restored;
	t[0] = now_mono_ns();
	sb_paths(d, sb, qmp_path, agent_path, sizeof(qmp_path));
	pthread_mutex_lock(&sb->lock);
	sb->pid = pid;
	sb->child = true;
	sb->pid_start = vm_proc_start(pid);
	sb->paused = false;
	snprintf(sb->accel, sizeof(sb->accel), "%s", d->accel);
	pthread_mutex_unlock(&sb->lock);

	r = qmp_connect(&sb->qmp, qmp_path, 15000, err);
	if (r) {
		char msg[1024];
		usleep(100000);
		if (vm_qemu_said(sb->dir, false, msg, sizeof(msg))) {
			k8_err_clear(err);   /* QEMU's own words */
			k8_err_set(err, -EIO, "QEMU did not start: %s", msg);
		}
		goto fail;
	}
	t[1] = now_mono_ns();
	if (fs_attach_port(d, sb, err))   /* kosa8-fs cannot connect itself (mounts.c) */
		goto fail;
	t[2] = now_mono_ns();
	if (restored) {
		/* A checkpoint is saved with the vCPUs stopped, and QEMU keeps a restored
		 * machine in the state it was saved in: wait for the state to be in, then
		 * start it. */
		uint64_t deadline = now_mono_ns() + 120000000000ull;
		for (;;) {
			json_t *st = NULL;
			if ((r = qmp_exec(&sb->qmp, "query-status", NULL, &st, 10000, err)))
				goto fail;
			const char *s = json_string_value(json_object_get(st, "status"));
			bool in = s && !strcmp(s, "inmigrate");
			bool running = s && !strcmp(s, "running");
			bool bad = s && (!strcmp(s, "internal-error") || !strcmp(s, "shutdown") ||
					 !strcmp(s, "guest-panicked"));
			json_decref(st);
			if (bad) {
				r = k8_err_set(err, -EIO, "QEMU could not restore the checkpoint (%s)", s);
				goto fail;
			}
			if (running)
				break;
			if (!in) {
				/* The agent's port connected before the vCPUs run: the restored
				 * guest then never sees it close and open again (QEMU compares the
				 * saved connection state with the current one when it starts), and
				 * our HELLO is the first thing its agent reads. */
				if ((r = sb_link_restored(sb, agent_path, err)))
					goto fail;
				linked = true;
				if ((r = qmp_exec(&sb->qmp, "cont", NULL, NULL, 10000, err)))
					goto fail;
				break;
			}
			if (now_mono_ns() > deadline) {
				r = k8_err_set(err, -ETIMEDOUT, "restoring the checkpoint took too long");
				goto fail;
			}
			usleep(2000);
		}
	}
	t[3] = now_mono_ns();
	if (restored && !linked)
		r = sb_link_restored(sb, agent_path, err);
	else if (!restored)
		r = link_connect(&sb->link, agent_path, sb_on_event, sb, err);
	if (r)
		goto fail;
	/* QEMU runs under the sandbox's limits from its start (vm.c puts it in its cgroup,
	 * a spare in <name>+spare with the same limits): this moves a spare's and says
	 * what they are, while the guest works on our HELLO. */
	if (cgroup_apply(&d->cg, sb->name, pid, sb->cpus,
			 (uint64_t)sb->memory_mib << 20, sb->limits_desc,
			 sizeof(sb->limits_desc)) < 0 && d->cg.version)
		daemon_log("sandbox %s: could not apply cgroup limits", sb->name);
	pthread_mutex_lock(&sb->lock);
	if (sb->warm_pending && sb->mem_fd >= 0)
		memfile_warm(sb->mem_fd);       /* it runs: the file into the page cache */
	sb->warm_pending = false;
	pthread_mutex_unlock(&sb->lock);
	c->tc = now_mono_ns();
	return 0;
fail:
	if (!r)
		r = err->code ? err->code : -EIO;
	return sb_connect_fail(d, sb, r, err);
}

int sb_connect_vm_finish(struct daemon *d, struct sandbox *sb, struct sb_connect *c,
			 struct k8_err *err)
{
	uint64_t *t = c->t;
	bool restored = c->restored;
	json_t *init;
	int r;

	r = link_wait_hello(&sb->link, BOOT_TIMEOUT_MS, err);
	t[4] = now_mono_ns();
	if (r)
		goto fail;
	/* The version's choice and the init in one round trip: the agent reads them in
	 * order (once it has said HELLO it reads what follows), answers both in one turn. */
	if (!(init = sb_init_req(sb, restored))) {
		r = k8_err_set(err, -EIO, "getrandom failed");
		goto fail;
	}
	r = link_negotiate_then(&sb->link, init, REQ_TIMEOUT_MS, NULL, err);
	t[5] = now_mono_ns();
	if (r == -EPROTONOSUPPORT && !sb->link.proto && !restored)
		sb_err_append(err, ". The guest image does not match this kosa8d: rebuild it "
			      "(`make guest`) or reinstall kosa8");
	if (r && sb->link.proto)        /* chosen: the init's own error */
		k8_err_wrap(err, "initialising the guest");
	if (r)
		goto fail;
	/* The init's clock was read before the round trip: a guest that took it late (a
	 * restored VM on a busy host) stands that much behind, so it is set again now that
	 * the agent answers at once. */
	if (t[5] - t[4] > SB_CLOCK_LATE_NS)
		sb_guest_clock(sb);
	if (restored)
		for (int i = 0; i < sb->nimages; i++)
			sb->images[i].mounted = true;
	sb->restoring = false;          /* its init is in (the caller saves the record) */
	if ((r = sb_mount_images(sb, err)))
		goto fail;
	t[6] = now_mono_ns();
	if (restored)
		daemon_log("sandbox %s: restored VM connected in %llu ms: monitor %llu, files "
			   "%llu, running %llu, HELLO %llu, cgroup meanwhile %llu, version and "
			   "init %llu", sb->name, SB_MS(t[6] - t[0]), SB_MS(t[1] - t[0]),
			   SB_MS(t[2] - t[1]), SB_MS(t[3] - t[2]), SB_MS(t[4] - t[3]),
			   SB_MS(c->tc - t[3]), SB_MS(t[5] - t[4]));
	return 0;
fail:
	return sb_connect_fail(d, sb, r, err);
}

int sb_connect_vm(struct daemon *d, struct sandbox *sb, pid_t pid, bool restored,
		  struct k8_err *err)
{
	struct sb_connect c;
	int r = sb_connect_vm_start(d, sb, pid, restored, &c, err);

	return r ? r : sb_connect_vm_finish(d, sb, &c, err);
}

void sb_connecting(struct sandbox *sb, bool on)
{
	pthread_mutex_lock(&sb->lock);
	__atomic_store_n(&sb->connecting, on, __ATOMIC_RELEASE);  /* read unlocked first */
	if (!on)
		pthread_cond_broadcast(&sb->cond);
	pthread_mutex_unlock(&sb->lock);
}

static void sb_behind_run(struct sb_behind *b)
{
	struct daemon *d = b->d;
	struct sandbox *sb = b->sb;
	struct k8_err err = { 0 };
	uint64_t t0 = now_mono_ns();
	int r = sb_connect_vm_finish(d, sb, &b->conn, &err);
	uint64_t t1 = now_mono_ns();

	pthread_mutex_lock(&sb->lock);
	if (r) {                        /* the VM is gone (sb_connect_vm_finish) */
		sb->state = SB_FAILED;
		snprintf(sb->error, sizeof(sb->error), "%s failed: %s", b->what, err.msg);
	}
	__atomic_store_n(&sb->connecting, false, __ATOMIC_RELEASE);
	sb_save(sb);                    /* init_pending goes with its init in */
	pthread_cond_broadcast(&sb->cond);
	pthread_mutex_unlock(&sb->lock);
	if (r) {
		daemon_log("sandbox %s: %s failed after its answer: %s", sb->name, b->what,
			   err.msg);
		json_object_set_new(b->fail_detail, "error", json_string(err.msg));
		json_object_set_new(b->fail_detail, "answered", json_true());
		daemon_audit(d, b->fail_action, sb->name, b->fail_detail);
		b->fail_detail = NULL;
	} else {
		daemon_log("sandbox %s: %s: guest ready %llu ms after the answer (HELLO, version, "
			   "init and mounts %llu ms)", sb->name, b->what,
			   SB_MS(t1 - b->answered), SB_MS(t1 - t0));
		if (b->then)
			b->then(b);
	}
	sb_busy_leave(sb);
}

static void *sb_behind_thread(void *arg)
{
	struct sb_behind *b = arg;
	struct daemon *d = b->d;
	struct sandbox *sb = b->sb;

	sb_behind_run(b);
	json_decref(b->fail_detail);
	free(b);
	sb_put(d, sb);
	return NULL;
}

void sb_connect_behind(struct sb_behind *b)
{
	pthread_t t;

	pthread_mutex_lock(&b->sb->lock);
	b->sb->users++;                 /* the thread's reference (sb_put at its end) */
	pthread_mutex_unlock(&b->sb->lock);
	b->answered = now_mono_ns();
	if (pthread_create(&t, NULL, sb_behind_thread, b) == 0) {
		pthread_detach(t);
		return;
	}
	sb_behind_thread(b);            /* no thread: finished here, before the answer */
}

/* Boot the VM of a sandbox. Caller holds sb->busy (not the lock). */
int sb_boot(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	struct sb_socks k;
	cleanup_free char *scratch = NULL;
	char **chain = NULL;
	int kfd = -1, ifd = -1, r;
	uint64_t t0 = now_mono_ns();
	pid_t pid = 0;
	struct vm_spec spec;

	r = guest_verify_open(&d->guest, &kfd, &ifd, err);
	if (r) {
		daemon_audit(d, "sandbox.boot.refused", sb->name,
			     json_pack("{s:s}", "reason", err->msg));
		return r;
	}
	if ((r = sb_prepare_spawn(d, sb, &k, &spec, err))) {
		close(kfd);
		close(ifd);
		return r;
	}
	if (sb->disk[0])
		scratch = xasprintf("%s/%s", sb->dir, sb->disk);
	spec.kernel_fd = kfd;
	spec.initramfs_fd = ifd;
	spec.images = sb->images;
	spec.nimages = sb->nimages;
	spec.scratch = scratch;
	spec.machine = daemon_vm_machine(d, NULL);      /* a boot: today's machine */
	pthread_mutex_lock(&sb->lock);
	sb->machine = spec.machine;
	pthread_mutex_unlock(&sb->lock);
	/* QEMU gets its whole backing chain from layers.json (it opens no path itself;
	 * and a fork's layers are hard links whose headers name the source's files). */
	spec.nchain = layers_chain(sb->dir, layers_top(sb->disk), &chain);
	spec.chain = (const char *const *)chain;
	r = vm_spawn(&spec, &pid, err);
	layers_chain_free(chain, spec.nchain);
	close(kfd);
	close(ifd);
	if (r)
		return r;
	r = sb_connect_vm(d, sb, pid, false, err);
	if (!r)
		sb->boot_ms = (now_mono_ns() - t0) / 1000000;
	return r;
}

/* The machine the state in `statedir` was saved on: its meta.json's "machine" (absent:
 * taken before the balloon, VM_MACHINE_V1); paused/ has no meta.json and is the
 * sandbox's own VM, sb->machine. */
static int sb_machine_of(struct sandbox *sb, const char *statedir, struct vm_machine *m,
			 struct k8_err *err)
{
	cleanup_free char *p = xasprintf("%s/meta.json", statedir);
	cleanup_free char *t = NULL;
	json_auto_t *meta = NULL;

	if (read_file(p, 1 << 20, &t, NULL) == -ENOENT) {
		pthread_mutex_lock(&sb->lock);
		*m = sb->machine;
		pthread_mutex_unlock(&sb->lock);
		return 0;
	}
	if (!t || !(meta = json_loads(t, 0, NULL)) ||
	    vm_machine_from_json(json_object_get(meta, "machine"), m))
		return k8_err_set(err, -EINVAL, "%s is damaged (\"machine\")", p);
	return 0;
}

struct sb_spawn_rec {
	struct sandbox *sb;
	int mfd;
	uint64_t ns;                    /* the callback's time, for the log */
};

/* A restored VM is known on disk before QEMU runs (vm_spawn's `spawned`): its pid, and
 * "init_pending" until its init is in, so a daemon that dies before the init leaves a VM
 * the next one ends (sb_load_all) rather than one nobody knows. */
static void sb_spawned_restore(void *ctx, pid_t pid)
{
	struct sb_spawn_rec *rec = ctx;
	struct sandbox *sb = rec->sb;
	uint64_t t0 = now_mono_ns();

	pthread_mutex_lock(&sb->lock);
	if (rec->mfd > 0)
		sb_mem_set(sb, fcntl(rec->mfd, F_DUPFD_CLOEXEC, 3));
	sb->pid = pid;
	sb->pid_start = vm_proc_start(pid);
	sb->child = true;
	sb->restoring = true;
	/* its guest's first touches and its next checkpoint find the file cached: warmed
	 * once the machine runs (sb_connect_vm_start), so that neither this record's fsync
	 * nor QEMU's load of the devices' state waits behind the warmer's reads */
	sb->warm_pending = rec->mfd > 0;
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	rec->ns = now_mono_ns() - t0;
}

/* Start the QEMU that restores the state saved in `statedir` (a checkpoint's directory:
 * of sb for a rewind, of its source for a fork; sb's paused/ for a resume) into sb on
 * the top layer `layer`: sidecars up, kosa8-fs given the FUSE nodes and open files the
 * guest had then, and -incoming from the state file. */
int sb_spawn_restored(struct daemon *d, struct sandbox *sb, const char *statedir,
		      const char *layer, const char *top, int kfd, int ifd, int sfd, int mfd,
		      bool fork, pid_t *pid, struct k8_err *err)
{
	cleanup_free char *nodes = xasprintf("%s/fs-nodes.json", statedir);
	struct sb_socks k;
	struct vm_spec spec;
	struct vm_machine m;
	struct sb_spawn_rec rec = { .sb = sb, .mfd = mfd };
	char **chain = NULL;
	uint64_t t0 = now_mono_ns(), t1;
	int r;

	if ((r = sb_machine_of(sb, statedir, &m, err)))
		return r;
	if ((r = sb_prepare_spawn(d, sb, &k, &spec, err)))
		return r;
	spec.machine = m;
	if (sb->nmounts && access(nodes, F_OK) == 0 && (r = fs_load(sb, nodes, err)))
		return r;
	pthread_mutex_lock(&sb->lock);
	sb->machine = spec.machine;
	pthread_mutex_unlock(&sb->lock);
	spec.kernel_fd = kfd;
	spec.initramfs_fd = ifd;
	spec.images = sb->images;
	spec.nimages = sb->nimages;
	spec.scratch = top;
	spec.incoming_fd = sfd;
	spec.ram_fd = mfd > 0 ? mfd : 0;        /* its RAM maps this memory file */
	/* A fork's memory is new to the host, not a killed VM's just freed: huge pages for
	 * it cost ~4x more than small ones on a host that returns free memory to its own
	 * hypervisor (docs/design.md "Fork"). */
	spec.no_thp = fork;
	spec.nchain = layers_chain(sb->dir, layer, &chain);
	spec.chain = (const char *const *)chain;
	spec.spawned = sb_spawned_restore;
	spec.spawned_ctx = &rec;
	t1 = now_mono_ns();
	r = vm_spawn(&spec, pid, err);
	layers_chain_free(chain, spec.nchain);
	if (!r)
		daemon_log("sandbox %s: restored VM spawned in %llu ms: sidecars and files %llu, "
			   "QEMU forked %llu (of it the record %llu)", sb->name,
			   SB_MS(now_mono_ns() - t0), SB_MS(t1 - t0), SB_MS(now_mono_ns() - t1),
			   SB_MS(rec.ns));
	return r;
}

int sb_saved_open(const char *dir, bool memfile, int memory_mib, int *sfd, int *mfd,
		  struct k8_err *err)
{
	cleanup_free char *state = xasprintf("%s/%s", dir, memfile ? "devices" : "state");
	cleanup_free char *mem = xasprintf("%s/memory", dir);

	*sfd = *mfd = -1;
	if (memfile && (*mfd = memfile_open(mem, (uint64_t)memory_mib << 20, err)) < 0)
		return *mfd;
	*sfd = open(state, O_RDONLY | O_CLOEXEC);
	if (*sfd < 0) {
		int e = errno;
		if (*mfd >= 0)
			close(*mfd);
		*mfd = -1;
		return k8_err_set(err, -e, "open %s: %s", state, strerror(e));
	}
	return 0;
}

/* A daemon killed in the middle of a checkpoint can leave its VM stopped, or with a new
 * disk layer on top that sandbox.json does not name yet. Put both right: the vCPUs run
 * (pausing is not remembered across daemons) and the record names the real top layer,
 * whose parent is the one recorded. */
static void sb_adopt_fixups(struct sandbox *sb, struct k8_err *err)
{
	json_t *st = NULL, *blk = NULL, *it;
	size_t i;

	if (qmp_exec(&sb->qmp, "query-status", NULL, &st, 5000, err) == 0) {
		const char *s = json_string_value(json_object_get(st, "status"));
		if (s && strcmp(s, "running"))
			qmp_exec(&sb->qmp, "cont", NULL, NULL, 5000, err);
	}
	json_decref(st);
	if (qmp_exec(&sb->qmp, "query-block", NULL, &blk, 5000, err) == 0) {
		json_array_foreach(blk, i, it) {
			const char *qdev = json_string_value(json_object_get(it, "qdev"));
			json_t *ins = json_object_get(it, "inserted");
			const char *file = json_string_value(json_object_get(ins, "file"));
			const char *nn = json_string_value(json_object_get(ins, "node-name"));
			const char *base = file ? strrchr(file, '/') : NULL;
			char named[64];
			/* Disks are fd sets (/dev/fdset/N, or "json:{...,"filename":
			 * "/dev/fdset/N"}}" for a layer added with "backing": null): a
			 * checkpoint names its layer's node after the file ("layer-<hex>"). */
			if (file && (!strncmp(file, "/dev/fdset/", 11) || !strncmp(file, "json:", 5))) {
				if (!nn || strncmp(nn, "layer-", 6) || strlen(nn) > 40)
					continue;
				snprintf(named, sizeof(named), "/%s.qcow2", nn);
				base = named;
			}
			if (!qdev || !strstr(qdev, "scratchdev") || !base)
				continue;
			base++;
			const char *cur = layers_top(sb->disk);
			if (strcmp(base, cur) && strlen(base) < sizeof(sb->disk) && !strchr(base, '/')) {
				layers_set(sb->dir, base, cur);
				daemon_log("sandbox %s: its disk top is %s (a checkpoint was cut short)",
					   sb->name, base);
				snprintf(sb->disk, sizeof(sb->disk), "%s", base);
			}
		}
	}
	json_decref(blk);
	k8_err_clear(err);
}

/* A VM whose RAM maps a memory file: that file's descriptor again, out of QEMU (it keeps
 * the one it was given at VM_RAM_FD), if it is still the file sandbox.json names. The next
 * checkpoint reads it; without it that checkpoint fails (and says so), nothing else. */
static void sb_adopt_memory(struct sandbox *sb)
{
	char p[64];
	struct stat st;
	int fd;

	if (!sb->mem_ino)
		return;
	snprintf(p, sizeof(p), "/proc/%d/fd/%d", (int)sb->pid, VM_RAM_FD);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    (unsigned long long)st.st_dev == sb->mem_dev &&
	    (unsigned long long)st.st_ino == sb->mem_ino) {
		sb->mem_fd = fd;
		return;
	}
	if (fd >= 0)
		close(fd);
	daemon_log("sandbox %s: the memory file its VM maps is not at %s any more; it cannot "
		   "be checkpointed until it boots again", sb->name, p);
}

/* Reconnect to a VM that outlived the previous daemon. */
int sb_adopt(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	char qmp_path[4200], agent_path[4200];
	json_t *resp = NULL;
	int r;

	sb_paths(d, sb, qmp_path, agent_path, sizeof(qmp_path));
	r = qmp_connect(&sb->qmp, qmp_path, 5000, err);
	if (r)
		return r;
	sb_adopt_fixups(sb, err);
	sb_adopt_memory(sb);
	r = link_connect(&sb->link, agent_path, sb_on_event, sb, err);
	if (r)
		return r;
	r = link_wait_hello(&sb->link, ADOPT_TIMEOUT_MS, err);
	if (!r && (r = link_negotiate(&sb->link, err)) == -EPROTONOSUPPORT)
		sb_err_append(err, ". The VM ran the agent of another kosa8: it is stopped, and "
			      "boots this kosa8's guest image when next used");
	if (r)
		return r;
	/* The guest kept its mounts; ask it to confirm it answers requests. */
	r = link_request(&sb->link, json_pack("{s:s}", "op", "stat"), REQ_TIMEOUT_MS, &resp,
			 NULL, err);
	json_decref(resp);
	if (r)
		return r;
	for (int i = 0; i < sb->nimages; i++)
		sb->images[i].mounted = true;
	cgroup_apply(&d->cg, sb->name, sb->pid, sb->cpus, (uint64_t)sb->memory_mib << 20,
		     sb->limits_desc, sizeof(sb->limits_desc));
	broker_adopt(d, sb);
	net_adopt(d, sb);
	fs_adopt(d, sb);
	return 0;
}
