/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.c - sandbox lifecycle: create, boot, adopt after a daemon restart, pull, rm.
 *
 * A sandbox is a directory $KOSA8_HOME/sandboxes/<name>/ holding sandbox.json (its
 * record, written atomically), its scratch disk and image slots, and QEMU's log. Its
 * sockets live in $KOSA8_HOME/run/<id>.{qmp,agent} (short paths: sun_path is 108 bytes).
 * QEMU runs in its own session, so a daemon killed with SIGKILL leaves its VMs running;
 * the next daemon finds each VM by pid and start time and reconnects (adoption).
 */
#include "common/proto.h"
#include "daemon/sandbox.h"
#include "daemon/accel.h"
#include "daemon/broker.h"
#include "daemon/egress.h"
#include "daemon/mounts.h"
#include "daemon/ports.h"
#include "daemon/api_route.h"
#include "daemon/audit.h"
#include "daemon/layers.h"
#include "daemon/memfile.h"
#include "daemon/spare.h"
#include "image/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define BOOT_TIMEOUT_MS 90000
#define ADOPT_TIMEOUT_MS 15000
#define REQ_TIMEOUT_MS 30000

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

/* ---- the record on disk ---- */

static struct sandbox *sb_new(struct daemon *d, const char *name)
{
	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	unsigned char rnd[8];

	sb->d = d;
	pthread_mutex_init(&sb->lock, NULL);
	pthread_mutex_init(&sb->audit_mu, NULL);
	pthread_cond_init(&sb->cond, NULL);
	snprintf(sb->name, sizeof(sb->name), "%s", name);
	snprintf(sb->dir, sizeof(sb->dir), "%s/sandboxes/%s", d->home, name);
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		memset(rnd, 0x5a, sizeof(rnd));
	k8_hex(rnd, 8, sb->id);
	sb->qmp.fd = -1;
	sb->link.fd = -1;
	sb->mem_fd = -1;
	sb->state = SB_STOPPED;
	sb->jail_index = -1;
	sb->idle_pause_s = -1;
	sb->last_use_ns = now_mono_ns();
	snprintf(sb->egress_mode, sizeof(sb->egress_mode), "deny");
	sb->egress_rules = json_array();
	sidecar_init(&sb->net, "kosa8-net");
	sidecar_init(&sb->fs, "kosa8-fs");
	return sb;
}

static void sb_free(struct sandbox *sb)
{
	ports_release(sb);
	json_decref(sb->egress_rules);
	json_decref(sb->net.replies);
	json_decref(sb->fs.replies);
	broker_free(sb);
	pthread_mutex_destroy(&sb->lock);
	pthread_mutex_destroy(&sb->audit_mu);
	pthread_cond_destroy(&sb->cond);
	spare_free(sb);
	json_decref(sb->listing);
	json_decref(sb->owner);
	if (sb->mem_fd >= 0)
		close(sb->mem_fd);
	free(sb);
}

struct sandbox *sb_detached(struct daemon *d, const char *name, const char *dir)
{
	struct sandbox *sb = sb_new(d, name);

	snprintf(sb->dir, sizeof(sb->dir), "%s", dir);
	return sb;
}

void sb_detached_free(struct sandbox *sb)
{
	if (sb)
		sb_free(sb);
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
	spare_drop(d, sb);              /* a stopped or removed sandbox keeps no spare */
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
	sb->paused = false;
	sb->pid = 0;
	sb->pid_start = 0;
	sb->child = false;
	for (int i = 0; i < sb->nimages; i++)
		sb->images[i].mounted = false;
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

static int sb_mount_images(struct sandbox *sb, struct k8_err *err)
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

/* Boot the VM of a sandbox. Caller holds sb->busy (not the lock). */
static int sb_boot(struct daemon *d, struct sandbox *sb, struct k8_err *err)
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
};

/* A restored VM is known on disk before QEMU runs (vm_spawn's `spawned`): its pid, and
 * "init_pending" until its init is in, so a daemon that dies before the init leaves a VM
 * the next one ends (sb_load_all) rather than one nobody knows. */
static void sb_spawned_restore(void *ctx, pid_t pid)
{
	struct sb_spawn_rec *rec = ctx;
	struct sandbox *sb = rec->sb;

	if (rec->mfd > 0)
		memfile_warm(rec->mfd);  /* the guest's first touches find it cached */
	pthread_mutex_lock(&sb->lock);
	if (rec->mfd > 0)
		sb_mem_set(sb, fcntl(rec->mfd, F_DUPFD_CLOEXEC, 3));
	sb->pid = pid;
	sb->pid_start = vm_proc_start(pid);
	sb->child = true;
	sb->restoring = true;
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
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
	char **chain = NULL;
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
	spec.spawned_ctx = &(struct sb_spawn_rec){ .sb = sb, .mfd = mfd };
	r = vm_spawn(&spec, pid, err);
	layers_chain_free(chain, spec.nchain);
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

bool sb_paused_on_disk(struct sandbox *sb)
{
	cleanup_free char *p = xasprintf("%s/paused/state", sb->dir);
	cleanup_free char *dev = xasprintf("%s/paused/devices", sb->dir);
	cleanup_free char *mem = xasprintf("%s/paused/memory", sb->dir);

	return access(p, F_OK) == 0 || (access(dev, F_OK) == 0 && access(mem, F_OK) == 0);
}

/* Bring a sandbox paused to disk back. Caller holds the busy token and sb->state is
 * SB_PAUSED. A failure before QEMU starts leaves it paused (try again); once QEMU was
 * started the sandbox is failed, its disk as it was, and the next use boots it. */
int sb_resume_paused(struct daemon *d, struct sandbox *sb, const char *by, struct k8_err *err)
{
	cleanup_free char *dir = xasprintf("%s/paused", sb->dir);
	cleanup_free char *mem = xasprintf("%s/memory", dir);
	cleanup_free char *top = xasprintf("%s/%s", sb->dir, layers_top(sb->disk));
	cleanup_close int kfd = -1, ifd = -1, sfd = -1, mfd = -1;
	cleanup_free char *handed = xasprintf("%s/%s", dir, SB_PAUSED_HANDED);
	uint64_t t0 = now_mono_ns();
	pid_t pid = 0;
	int r;

	if (access(handed, F_OK) == 0)
		return k8_err_set(err, -EBUSY, "sandbox '%s' was paused to a store, whose copy is "
				  "the one that counts: `kosa8 sandbox resume %s` takes it back from "
				  "the store and resumes it", sb->name, sb->name);
	if ((r = guest_verify_open(&d->guest, &kfd, &ifd, err)))
		return k8_err_wrap(err, "sandbox '%s' stays paused", sb->name);
	/* paused/ holds a memory file and its devices' state, or one migration stream */
	if ((r = sb_saved_open(dir, access(mem, F_OK) == 0, sb->memory_mib, &sfd, &mfd, err)))
		return k8_err_wrap(err, "sandbox '%s' is paused but what it saved cannot be "
				   "used; `kosa8 sandbox rm %s` removes it", sb->name, sb->name);
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_BOOTING;
	pthread_mutex_unlock(&sb->lock);
	r = sb_spawn_restored(d, sb, dir, layers_top(sb->disk), top, kfd, ifd, sfd, mfd, false,
			      &pid, err);
	if (!r)
		r = sb_connect_vm(d, sb, pid, true, err);
	pthread_mutex_lock(&sb->lock);
	if (r) {
		sb->state = SB_FAILED;
		snprintf(sb->error, sizeof(sb->error), "resume failed: %s", err->msg);
	} else {
		sb->state = SB_RUNNING;
		sb->error[0] = '\0';
	}
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	rm_rf(dir);                     /* used, or useless after a failed restore */
	if (r) {
		k8_err_wrap(err, "resuming sandbox '%s' (its processes are lost; its disk is "
			    "kept and boots when next used)", sb->name);
		daemon_audit(d, "sandbox.resume.failed", sb->name,
			     json_pack("{s:s,s:s}", "from", "disk", "error", err->msg));
		return r;
	}
	daemon_audit(d, "sandbox.resume", sb->name,
		     json_pack("{s:s,s:s,s:I}", "from", "disk", "by", by, "ms",
			       (json_int_t)((now_mono_ns() - t0) / 1000000)));
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
static int sb_adopt(struct daemon *d, struct sandbox *sb, struct k8_err *err)
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

/* Is the running VM still there? Marks the sandbox failed when it is gone. Caller holds
 * the busy token. */
static bool sb_check_alive(struct daemon *d, struct sandbox *sb)
{
	bool ok;

	pthread_mutex_lock(&sb->lock);
	if (sb->child && sb->pid > 0)
		waitpid(sb->pid, NULL, WNOHANG);
	ok = sb->state == SB_RUNNING && vm_alive(sb->pid, sb->pid_start) && !sb->link.broken;
	if (sb->state == SB_RUNNING && !ok) {
		snprintf(sb->error, sizeof(sb->error), "%s",
			 !vm_alive(sb->pid, sb->pid_start) ? "the VM exited"
							   : sb->link.broken_why);
		sb->state = SB_FAILED;
		sb_kill_vm(d, sb);
		sb_save(sb);
	}
	pthread_mutex_unlock(&sb->lock);
	return ok;
}

int sb_ensure_running(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	int r = 0;

	sb_busy_enter(sb);
	if (sb->state == SB_REMOVING) {
		r = k8_err_set(err, -ENOENT, "sandbox '%s' is being removed", sb->name);
	} else if (sb->state == SB_PAUSED) {     /* paused to disk: any use resumes it */
		r = sb_resume_paused(d, sb, "use", err);
	} else if (!sb_check_alive(d, sb)) {
		const char *why = sb->state == SB_FAILED ? sb->error : "it was stopped";
		daemon_log("sandbox %s: booting (%s)", sb->name, why);
		pthread_mutex_lock(&sb->lock);
		sb->state = SB_BOOTING;
		pthread_mutex_unlock(&sb->lock);
		r = sb_boot(d, sb, err);
		pthread_mutex_lock(&sb->lock);
		sb->state = r ? SB_FAILED : SB_RUNNING;
		if (r)
			snprintf(sb->error, sizeof(sb->error), "%s", err->msg);
		else
			sb->error[0] = '\0';
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		daemon_audit(d, r ? "sandbox.boot.failed" : "sandbox.boot", sb->name,
			     json_pack("{s:s,s:s}", "accel", d->accel, "reason", r ? err->msg : why));
	}
	sb_busy_leave(sb);
	return r;
}

/* What `sandbox ls` shows of a sandbox, and the start of what inspect does. Caller holds
 * sb->lock. */
static json_t *sb_summary_locked(struct sandbox *sb)
{
	json_t *o, *imgs = json_array();

	for (int i = 0; i < sb->nimages; i++)
		json_array_append_new(imgs, json_pack("{s:s,s:s,s:i}", "ref", sb->images[i].ref,
						      "digest", sb->images[i].digest, "slot",
						      sb->images[i].slot));
	o = json_pack("{s:s,s:s,s:i,s:i,s:i,s:s,s:s,s:I,s:o,s:s}", "name", sb->name, "state",
		      (sb->state == SB_RUNNING && sb->paused) ? "paused" : sb_state_name(sb->state), "cpus", sb->cpus, "memory_mib", sb->memory_mib,
		      "disk_gb", sb->disk_gb, "created", sb->created, "accel", sb->accel, "pid",
		      (json_int_t)sb->pid, "images", imgs, "egress", sb->egress_mode);
	json_object_set_new(o, "mounts", sb_mounts_json(sb, false));
	json_object_set_new(o, "ports", sb_ports_json(sb));
	if (sb->owner)
		json_object_set(o, "owner", sb->owner);
	if (sb->state == SB_PAUSED || (sb->state == SB_RUNNING && sb->paused))
		json_object_set_new(o, "paused_to",
				    json_string(sb->state == SB_PAUSED ? "disk" : "memory"));
	if (sb->error[0])
		json_object_set_new(o, "error", json_string(sb->error));
	return o;
}

json_t *sb_to_json(struct sandbox *sb, bool detail)
{
	json_t *o;

	pthread_mutex_lock(&sb->lock);
	o = sb_summary_locked(sb);
	if (detail)
		json_object_set_new(o, "network", egress_summary(sb));
	if (detail && sb->broker)
		json_object_set_new(o, "broker", broker_summary(sb));
	if (detail) {
		json_object_set_new(o, "dir", json_string(sb->dir));
		json_object_set_new(o, "limits", json_pack("{s:s}", "host",
			sb->limits_desc[0] ? sb->limits_desc : "not applied (VM not running)"));
		if (sb->boot_ms)
			json_object_set_new(o, "boot_ms", json_integer((json_int_t)sb->boot_ms));
		json_object_set_new(o, "agent_dropped_frames",
				    json_integer((json_int_t)sb->link.dropped_frames));
		if (sb->state == SB_RUNNING && sb->link.proto)  /* docs/protocol.md, Versions */
			json_object_set_new(o, "agent_proto", json_integer(sb->link.proto));
		json_object_set_new(o, "forked", json_boolean(sb->forked));
		json_object_set_new(o, "disk_top", json_string(sb->disk[0] ? sb->disk : "scratch.qcow2"));
		json_object_set_new(o, "paused", json_boolean(sb->paused || sb->state == SB_PAUSED));
		json_object_set_new(o, "idle_pause", json_pack("{s:i,s:s}", "after_s",
			sb->idle_pause_s >= 0 ? sb->idle_pause_s : sb->d->idle_pause_s,
			"from", sb->idle_pause_s >= 0 ? "sandbox" : "daemon"));
		json_object_set_new(o, "rewind_spare", json_string(sb->rewind_spare[0]
			? sb->rewind_spare : SPARE_LATEST));
		json_t *spj = spare_json(sb);
		if (spj)
			json_object_set_new(o, "spare", spj);
	}
	pthread_mutex_unlock(&sb->lock);
	struct k8_err werr = { 0 };     /* a rewind's init first (checkpoint.c) */
	if (detail && sb_wait_connected(sb, &werr) == 0 && sb->state == SB_RUNNING &&
	    !sb->paused) {
		struct k8_err err = { 0 };
		json_t *resp = NULL;
		if (link_request(&sb->link, json_pack("{s:s}", "op", "ps"), 10000, &resp, NULL,
				 &err) == 0) {
			json_object_set_new(o, "containers",
					    sb_containers_json(sb, json_object_get(resp, "containers")));
		}
		json_decref(resp);
		resp = NULL;
		if (link_request(&sb->link, json_pack("{s:s}", "op", "stat"), 10000, &resp, NULL,
				 &err) == 0) {
			json_object_del(resp, "ok");
			json_object_set(o, "stat", resp);
		}
		json_decref(resp);
	}
	return o;
}

/* `sandbox ls` waits at most this long in all for sandboxes' locks (held across a
 * record's fsync, a QMP exchange or a QEMU's end); past it, a sandbox whose lock is still
 * held is shown as ls last saw it. */
#define SB_LIST_WAIT_MS 20
#define SB_LIST_SLOW_NS (50 * 1000000ull)       /* a listing this slow is logged */

/* The listing: each sandbox's summary, read under its lock. The table lock is held
 * throughout (it guards the list and each sb->listing), so the wait is bounded: a
 * sandbox whose lock is held past SB_LIST_WAIT_MS (a state change under way) is shown as
 * the previous ls saw it, or by name and state alone if none did; the change shows in the
 * next ls. */
json_t *sb_list_json(struct daemon *d)
{
	json_t *arr = json_array();
	uint64_t t0 = now_mono_ns(), t_table, t_end;
	int n = 0, stale = 0;
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += SB_LIST_WAIT_MS * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&d->lock);
	t_table = now_mono_ns();
	for (struct sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		json_t *o;
		if (sb->state == SB_REMOVING)
			continue;
		n++;
		if (pthread_mutex_timedlock(&sb->lock, &dl) == 0) {
			o = sb_summary_locked(sb);
			pthread_mutex_unlock(&sb->lock);
			json_decref(sb->listing);
			sb->listing = json_deep_copy(o);
		} else {
			stale++;
			o = sb->listing ? json_deep_copy(sb->listing)
					: json_pack("{s:s,s:s}", "name", sb->name, "state",
						    sb_state_name(__atomic_load_n(&sb->state,
										  __ATOMIC_RELAXED)));
		}
		json_array_append_new(arr, o);
	}
	pthread_mutex_unlock(&d->lock);
	/* Where a slow listing waited: the density bench reads these lines (issue 15). */
	t_end = now_mono_ns();
	if (t_end - t0 >= SB_LIST_SLOW_NS)
		daemon_log("sandbox ls took %llu ms: table lock %llu ms, %d sandboxes, %d shown "
			   "as before", (unsigned long long)((t_end - t0) / 1000000),
			   (unsigned long long)((t_table - t0) / 1000000), n, stale);
	return arr;
}

static int sb_from_record(struct daemon *d, const char *name, struct sandbox **out)
{
	cleanup_free char *path = xasprintf("%s/sandboxes/%s/sandbox.json", d->home, name);
	cleanup_free char *text = NULL;
	json_t *rec;
	struct sandbox *sb;
	const char *id, *created, *accel, *state;
	json_int_t pid = 0, start = 0;

	if (read_file(path, 1 << 20, &text, NULL))
		return -ENOENT;
	rec = json_loads(text, 0, NULL);
	if (!rec)
		return -EINVAL;
	sb = sb_new(d, name);
	if (json_unpack(rec, "{s:s,s:i,s:i,s:i,s:s,s:s,s:s,s?I,s?I}", "id", &id, "cpus",
			&sb->cpus, "memory_mib", &sb->memory_mib, "disk_gb", &sb->disk_gb,
			"created", &created, "accel", &accel, "state", &state, "pid", &pid,
			"pid_start", &start) < 0 ||
	    strlen(id) != 16) {
		json_decref(rec);
		sb_free(sb);
		return -EINVAL;
	}
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	snprintf(sb->created, sizeof(sb->created), "%s", created);
	snprintf(sb->accel, sizeof(sb->accel), "%s", accel);
	if (!strcmp(state, "paused"))   /* paused to disk; sb_load_all checks its state file */
		sb->state = SB_PAUSED;
	{
		const char *disk = json_string_value(json_object_get(rec, "disk"));
		if (disk && !strchr(disk, '/') && strlen(disk) < sizeof(sb->disk))
			snprintf(sb->disk, sizeof(sb->disk), "%s", disk);
	}
	sb->forked = json_is_true(json_object_get(rec, "forked"));
	{
		json_t *mf = json_object_get(rec, "memory_file");
		sb->mem_dev = (unsigned long long)json_integer_value(json_object_get(mf, "dev"));
		sb->mem_ino = (unsigned long long)json_integer_value(json_object_get(mf, "ino"));
	}
	/* sb_load_all reads it and clears it */
	sb->connecting = json_is_true(json_object_get(rec, "init_pending"));
	/* A record without it is older than the balloon: its VM (or paused/) has neither. */
	if (vm_machine_from_json(json_object_get(rec, "machine"), &sb->machine))
		daemon_log("sandbox %s: sandbox.json has a damaged \"machine\"; taking the "
			   "one without ACPI and balloon", sb->name);
	broker_load(sb);
	{
		json_t *ip = json_object_get(rec, "idle_pause_s");
		if (json_is_integer(ip) && json_integer_value(ip) >= 0 &&
		    json_integer_value(ip) <= K8_IDLE_PAUSE_MAX_S)
			sb->idle_pause_s = (int)json_integer_value(ip);
	}
	{
		const char *rs = json_string_value(json_object_get(rec, "rewind_spare"));
		if (rs && spare_setting_valid(rs))
			snprintf(sb->rewind_spare, sizeof(sb->rewind_spare), "%s", rs);
	}
	{
		json_t *ow = json_object_get(rec, "owner");
		struct k8_err oerr = { 0 };
		if (ow && sb_owner_check(ow, &oerr) == 0)
			sb->owner = json_deep_copy(ow);
	}
	{
		json_t *ji = json_object_get(rec, "jail_index");
		struct k8_err jerr = { 0 };
		sb->jail_index = json_is_integer(ji) ? (int)json_integer_value(ji) : -1;
		if (jail_claim(&d->jail, sb->dir, &sb->jail_index, &jerr)) {
			daemon_log("sandbox %s: %s", name, jerr.msg);
			json_decref(rec);
			sb_free(sb);
			return -ENOSPC;
		}
	}
	{
		json_t *eg = json_object_get(rec, "egress"), *sc = json_object_get(rec, "sidecars");
		const char *m = json_string_value(json_object_get(eg, "mode"));
		json_t *rl = json_object_get(eg, "rules");
		if (m && strlen(m) < sizeof(sb->egress_mode))
			snprintf(sb->egress_mode, sizeof(sb->egress_mode), "%s", m);
		if (json_is_array(rl)) {
			json_decref(sb->egress_rules);
			sb->egress_rules = json_incref(rl);
		}
		struct sidecar *sides[2] = { &sb->net, &sb->fs };
		const char *keys[2] = { "net", "fs" };
		for (int k = 0; k < 2; k++) {
			json_t *o = json_object_get(sc, keys[k]);
			sides[k]->pid = (pid_t)json_integer_value(json_object_get(o, "pid"));
			sides[k]->pid_start =
				(unsigned long long)json_integer_value(json_object_get(o, "pid_start"));
		}
		json_t *ml = json_object_get(rec, "mounts"), *mi;
		size_t k;
		json_array_foreach(ml, k, mi) {
			const char *h = json_string_value(json_object_get(mi, "host"));
			const char *g = json_string_value(json_object_get(mi, "guest"));
			if (sb->nmounts >= K8_MAX_MOUNTS || !h || !g ||
			    strlen(h) >= sizeof(sb->mounts[0].host) ||
			    strlen(g) >= sizeof(sb->mounts[0].guest))
				continue;
			struct sb_mount *mm = &sb->mounts[sb->nmounts++];
			snprintf(mm->host, sizeof(mm->host), "%s", h);
			snprintf(mm->guest, sizeof(mm->guest), "%s", g);
			mm->ro = json_is_true(json_object_get(mi, "ro"));
			json_t *pin = json_object_get(mi, "pin");
			mm->pinned = json_is_object(pin);
			mm->dev = (unsigned long long)json_integer_value(json_object_get(pin, "dev"));
			mm->ino = (unsigned long long)json_integer_value(json_object_get(pin, "ino"));
			mm->btime = json_integer_value(json_object_get(pin, "btime"));
		}
	}
	sb_ports_from_json(sb, json_object_get(rec, "ports"));
	sb->pid = (pid_t)pid;
	sb->pid_start = (unsigned long long)start;
	sb->nimages = sb_images_from_json(json_object_get(rec, "images"), sb->images);
	json_decref(rec);
	*out = sb;
	return 0;
}

int sb_load_all(struct daemon *d)
{
	cleanup_free char *dir = xasprintf("%s/sandboxes", d->home);
	DIR *dd;
	struct dirent *de;

	mkdir_p(dir, 0700);
	dd = opendir(dir);
	if (!dd)
		return -errno;
	while ((de = readdir(dd))) {
		struct sandbox *sb = NULL;
		struct k8_err err = { 0 };
		if (de->d_name[0] == '.' || !sb_name_valid(de->d_name))
			continue;
		if (sb_from_record(d, de->d_name, &sb)) {
			daemon_log("skipping %s/%s: no readable sandbox.json", dir, de->d_name);
			continue;
		}
		spare_reap(d, sb);      /* spares are not adopted */
		if (sb->connecting && sb->state != SB_PAUSED && vm_alive(sb->pid, sb->pid_start)) {
			/* A rewind through the spare answered and the daemon died before the
			 * guest had its init (clock, RNG seed): never adopted, it would run on
			 * with the checkpoint's. It is stopped as a VM that is gone; its disk,
			 * the rewound one, boots when next used. */
			daemon_log("sandbox %s: VM pid %d never had its init after a rewind; "
				   "stopping it", sb->name, (int)sb->pid);
			kill(sb->pid, SIGKILL);
			for (int i = 0; i < 100 && vm_alive(sb->pid, sb->pid_start); i++)
				usleep(10000);
			sb->pid = 0;
		}
		if (sb->state == SB_PAUSED && sb_paused_on_disk(sb)) {
			/* A daemon killed between the save and QEMU's end leaves it. */
			if (vm_alive(sb->pid, sb->pid_start))
				kill(sb->pid, SIGKILL);
			sb->pid = 0;
			sb->pid_start = 0;
			/* Its sidecars, if they outlived the daemon, serve the resume. */
			broker_adopt(d, sb);
			if (sidecar_alive(&sb->net))
				net_adopt(d, sb);
			if (sidecar_alive(&sb->fs))
				fs_adopt(d, sb);
			daemon_log("sandbox %s: paused to disk", sb->name);
		} else if (vm_alive(sb->pid, sb->pid_start)) {
			if (sb_adopt(d, sb, &err) == 0) {
				sb->state = SB_RUNNING;
				daemon_log("sandbox %s: adopted running VM (pid %d)", sb->name, (int)sb->pid);
			} else {
				daemon_log("sandbox %s: VM pid %d is alive but not usable (%s); stopping it",
					   sb->name, (int)sb->pid, err.msg);
				sb_kill_vm(d, sb);
				sb->state = SB_FAILED;
				snprintf(sb->error, sizeof(sb->error), "adoption failed: %s", err.msg);
			}
		} else {
			sb->pid = 0;
			sb->state = SB_STOPPED;
			/* Sidecars of a VM that is gone have nothing to serve. */
			sidecar_stop(&sb->net);
			sidecar_stop(&sb->fs);
			broker_adopt(d, sb);
			broker_down(d, sb);
		}
		pthread_mutex_lock(&sb->lock);
		sb->connecting = false;
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		pthread_mutex_lock(&d->lock);
		sb->next = d->sandboxes;
		d->sandboxes = sb;
		pthread_mutex_unlock(&d->lock);
	}
	closedir(dd);
	return 0;
}

static int body_int(json_t *body, const char *key, int def, int lo, int hi, int *out,
		    struct k8_err *err)
{
	json_t *v = json_object_get(body, key);

	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return k8_err_set(err, -EINVAL, "%s must be a whole number from %d to %d", key, lo, hi);
	*out = (int)json_integer_value(v);
	return 0;
}

/* Take a name in the table: a new sandbox, BOOTING, whose busy token and one user
 * reference the caller holds. NULL (err set) if the name is invalid or taken. */
/* Take sb out of the table (a lookup no longer finds it). */
static void sb_unlink(struct daemon *d, struct sandbox *sb)
{
	pthread_mutex_lock(&d->lock);
	for (struct sandbox **pp = &d->sandboxes; *pp; pp = &(*pp)->next)
		if (*pp == sb) {
			*pp = sb->next;
			break;
		}
	pthread_mutex_unlock(&d->lock);
}

/* End a reservation already out of the table: drop its busy token and reference, wait
 * for whoever looked it up meanwhile, free it. */
static void sb_drop_reserved_unlinked(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_REMOVING;
	sb->busy = 0;
	sb->users--;
	pthread_cond_broadcast(&sb->cond);
	while (sb->users > 0)
		pthread_cond_wait(&sb->cond, &sb->lock);
	pthread_mutex_unlock(&sb->lock);
	sb_free(sb);
}

static void sb_drop_reserved(struct daemon *d, struct sandbox *sb)
{
	sb_unlink(d, sb);
	sb_drop_reserved_unlinked(sb);
}

struct sandbox *sb_reserve(struct daemon *d, const char *name, struct k8_err *err)
{
	struct sandbox *sb, *it;

	if (!name || !sb_name_valid(name)) {
		k8_err_set(err, -EINVAL,
			   "invalid sandbox name '%.80s': use 1-63 characters a-z, 0-9, '-', "
			   "'_' or '.', starting with a letter or digit", name ? name : "");
		return NULL;
	}
	pthread_mutex_lock(&d->lock);
	for (it = d->sandboxes; it; it = it->next)
		if (!strcmp(it->name, name))
			break;
	if (it) {
		pthread_mutex_unlock(&d->lock);
		k8_err_set(err, -EEXIST,
			   "a sandbox named '%s' already exists; pick another name or remove "
			   "it with `kosa8 sandbox rm %s`", name, name);
		return NULL;
	}
	sb = sb_new(d, name);
	sb->state = SB_BOOTING;
	sb->busy = 1;
	sb->users = 1;
	k8_time_now(sb->created, 0);
	snprintf(sb->accel, sizeof(sb->accel), "%s", d->accel);
	sb->next = d->sandboxes;
	d->sandboxes = sb;
	pthread_mutex_unlock(&d->lock);
	/* The uid block is claimed outside the table lock: the claim takes a host-wide
	 * flock and fsyncs a file, and the table lock holds up every lookup and `sandbox
	 * ls` meanwhile (issue 15's density run). The name is ours already; a request
	 * that finds it waits for the busy token. */
	if (jail_claim(&d->jail, sb->dir, &sb->jail_index, err)) {
		sb_drop_reserved(d, sb);
		return NULL;
	}
	return sb;
}

/* Undo sb_reserve after a failed create: nothing half-made stays behind, the name is
 * free again. Frees sb. */
void sb_unreserve(struct daemon *d, struct sandbox *sb)
{
	sb_unlink(d, sb);
	sidecar_stop(&sb->net);
	sidecar_stop(&sb->fs);
	broker_down(d, sb);
	rm_rf(sb->dir);
	jail_release(&d->jail, sb->dir, sb->jail_index);
	sb_drop_reserved_unlinked(sb);
}

int sb_create(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
	      json_t **out, struct k8_err *err)
{
	const char *name = json_string_value(json_object_get(body, "name"));
	json_t *mounts = json_object_get(body, "mounts"), *rules = NULL;
	struct sb_mount *mnt = NULL;
	char mode[16];
	struct sandbox *sb;
	json_t *brules = NULL;
	int cpus, mem, disk, idle, nmnt = 0, r;

	if (!name)
		return k8_err_set(err, -EINVAL, "a sandbox name is required");
	if (!sb_name_valid(name))
		return k8_err_set(err, -EINVAL,
				  "invalid sandbox name '%.80s': use 1-63 characters a-z, 0-9, '-', "
				  "'_' or '.', starting with a letter or digit", name);
	if ((r = body_int(body, "cpus", 2, 1, 64, &cpus, err)) ||
	    (r = body_int(body, "memory_mib", 1024, 128, 65536, &mem, err)) ||
	    (r = body_int(body, "disk_gb", 4, 1, 1024, &disk, err)) ||
	    (r = body_int(body, "idle_pause_s", -1, 0, K8_IDLE_PAUSE_MAX_S, &idle, err)))
		return r;
	const char *spare = json_string_value(json_object_get(body, "rewind_spare"));
	if ((json_object_get(body, "rewind_spare") && !spare) || (spare && !spare_setting_valid(spare)))
		return k8_err_set(err, -EINVAL, "rewind_spare: give \"latest\", \"off\" or a "
				  "checkpoint label (1-63 letters, digits, '-', '_', '.')");
	json_t *owner = json_object_get(body, "owner");
	if (owner && !json_is_null(owner) && (r = sb_owner_check(owner, err)))
		return r;
	if (!d->guest.kernel[0])
		return k8_err_set(err, -ENOENT,
				  "the guest image is missing, so no VM can boot; build it with `make`");
	if ((r = egress_from_body(body, mode, sizeof(mode), &rules, err)))
		return r;
	if ((r = broker_from_body(d, body, &brules, err))) {
		json_decref(rules);
		return r;
	}
	mnt = xcalloc(K8_MAX_MOUNTS, sizeof(*mnt));
	if (mounts && !json_is_null(mounts) &&
	    (r = mounts_from_body(d, mounts, mnt, &nmnt, err))) {
		free(mnt);
		json_decref(rules);
		json_decref(brules);
		return r;
	}

	sb = sb_reserve(d, name, err);
	if (!sb) {
		json_decref(rules);
		json_decref(brules);
		free(mnt);
		return -EEXIST;
	}
	sb->cpus = cpus;
	sb->memory_mib = mem;
	sb->disk_gb = disk;
	sb->idle_pause_s = idle;
	if (owner && !json_is_null(owner)) {
		pthread_mutex_lock(&d->lock);
		sb->owner = json_deep_copy(owner);
		pthread_mutex_unlock(&d->lock);
	}
	if (spare)
		snprintf(sb->rewind_spare, sizeof(sb->rewind_spare), "%s", spare);
	snprintf(sb->egress_mode, sizeof(sb->egress_mode), "%s", mode);
	json_decref(sb->egress_rules);
	sb->egress_rules = rules;
	if (nmnt)
		memcpy(sb->mounts, mnt, sizeof(mnt[0]) * (size_t)nmnt);
	sb->nmounts = nmnt;
	free(mnt);
	if ((r = ports_from_body(d, sb, json_object_get(body, "ports"), err))) {
		daemon_audit(d, "sandbox.create.failed", name, json_pack("{s:s}", "error", err->msg));
		sb_unreserve(d, sb);
		return r;
	}

	if (progress)
		progress(pctx, json_pack("{s:s,s:s}", "phase", "disks", "what", name));
	r = mkdir_p(sb->dir, 0700);
	if (r)
		k8_err_set(err, r, "mkdir %s: %s", sb->dir, strerror(-r));
	if (!r)
		r = vm_make_disks(d->home, sb->dir, disk, err);
	if (!r)
		r = broker_create(sb, steal_pointer(&brules), err);
	if (!r) {
		pthread_mutex_lock(&sb->lock);
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		if (progress)
			progress(pctx, json_pack("{s:s,s:s}", "phase", "boot", "what", d->accel));
		r = sb_boot(d, sb, err);
	}
	json_decref(brules);            /* NULL unless the disks failed first */
	if (r) {
		daemon_audit(d, "sandbox.create.failed", name, json_pack("{s:s}", "error", err->msg));
		sb_unreserve(d, sb);
		return r;
	}
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_RUNNING;
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	daemon_audit(d, "sandbox.create", name,
		     json_pack("{s:i,s:i,s:i,s:s,s:s,s:I,s:s,s:O}", "cpus", cpus, "memory_mib", mem,
			       "disk_gb", disk, "accel", d->accel, "limits", sb->limits_desc,
			       "boot_ms", (json_int_t)sb->boot_ms, "egress", sb->egress_mode,
			       "egress_allow", sb->egress_rules));
	if (sb->owner)
		daemon_audit(d, "sandbox.owner", name, json_deep_copy(sb->owner));
	if (sb->broker)
		daemon_audit(d, "sandbox.broker", name,
			     json_pack("{s:O,s:b}", "rules", sb->broker->rules, "intercept",
				       sb->broker->intercept));
	for (int i = 0; i < sb->nmounts; i++)
		daemon_audit(d, "sandbox.mount", name,
			     json_pack("{s:s,s:s,s:b}", "host", sb->mounts[i].host, "guest",
				       sb->mounts[i].guest, "ro", sb->mounts[i].ro));
	ports_audit_created(d, sb);
	sb_busy_leave(sb);
	*out = sb_to_json(sb, false);
	if (!strcmp(sb->accel, "tcg"))
		json_object_set_new(*out, "tcg_note", json_string(ACCEL_TCG_NOTE));
	sb_put(d, sb);
	return 0;
}

static int wipe_file(const char *path, const struct stat *sbuf, int type, struct FTW *ftw)
{
	cleanup_close int fd = -1;
	struct stat st;
	static const char zero[65536];

	(void)sbuf;
	(void)ftw;
	if (type != FTW_F)
		return 0;
	fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	/* A disk layer or memory file shared with a fork (hard link) still holds the
	 * fork's data. */
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1)
		return 0;
	/* Only where the file has data: a hole holds nothing to wipe (a memory file is
	 * mostly holes, as large as the guest's RAM). */
	for (off_t off = 0, end; off < st.st_size; off = end) {
		if ((off = lseek(fd, off, SEEK_DATA)) < 0)
			break;          /* ENXIO: no data past off */
		if ((end = lseek(fd, off, SEEK_HOLE)) < 0)
			end = st.st_size;
		for (off_t at = off; at < end; at += (off_t)sizeof(zero)) {
			size_t n = (size_t)(end - at) < sizeof(zero) ? (size_t)(end - at)
								     : sizeof(zero);
			if (pwrite(fd, zero, n, at) < 0)
				return 0;
		}
	}
	fdatasync(fd);
	return 0;
}

/* `rm --wipe`: zero every file of the sandbox that no fork shares before it is unlinked:
 * the scratch disk, every disk layer written since a checkpoint, and the checkpoints'
 * memory files and states, and paused/'s (the guest's RAM holds what it wrote too). */
static void wipe_tree(const char *dir)
{
	nftw(dir, wipe_file, 16, FTW_PHYS | FTW_MOUNT);
}

int sb_remove(struct daemon *d, const char *name, bool wipe, struct k8_err *err)
{
	struct sandbox *sb;
	int r;

	sb = sb_get(d, name, err);
	if (!sb)
		return -ENOENT;
	sb_busy_enter(sb);
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_REMOVING;
	sb_kill_vm(d, sb);
	pthread_mutex_unlock(&sb->lock);
	/* a spare still being prepared makes files in the directory: it ends first */
	spare_wait_idle(sb);
	sb_unlink(d, sb);
	if (wipe)
		wipe_tree(sb->dir);
	r = rm_rf(sb->dir);
	if (r)
		k8_err_set(err, r, "could not remove %s: %s", sb->dir, strerror(-r));
	jail_release(&d->jail, sb->dir, sb->jail_index);
	daemon_audit(d, "sandbox.rm", name, json_pack("{s:b}", "wipe", wipe));
	/* Wait for the API threads still holding it (their VM is gone, they end soon). */
	pthread_mutex_lock(&sb->lock);
	sb->busy = 0;
	sb->users--;
	while (sb->users > 0)
		pthread_cond_wait(&sb->cond, &sb->lock);
	pthread_mutex_unlock(&sb->lock);
	sb_free(sb);
	return r;
}

static bool sb_want_any(struct sandbox *sb K8_UNUSED, void *arg K8_UNUSED)
{
	return true;
}

void sb_stop_all(struct daemon *d)
{
	size_t n = 0;
	struct sandbox **all = sb_collect(d, sb_want_any, NULL, &n);

	/* A rewind's init running in the background ends first (its thread would mark
	 * the sandbox failed when its VM went under it). */
	for (size_t i = 0; i < n; i++) {
		struct k8_err ignored = { 0 };
		sb_wait_connected(all[i], &ignored);
		sb_put_peek(d, all[i]);
	}
	free(all);
	pthread_mutex_lock(&d->lock);
	for (struct sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		pthread_mutex_lock(&sb->lock);
		if (sb->pid > 0) {
			sb_kill_vm(d, sb);
			sb->state = SB_STOPPED;
			sb_save(sb);
		} else {
			/* A paused or failed sandbox's sidecars; its state stays. */
			sb_kill_vm(d, sb);
		}
		pthread_mutex_unlock(&sb->lock);
	}
	pthread_mutex_unlock(&d->lock);
}

static struct vm_image *sb_find_image(struct sandbox *sb, const char *digest)
{
	for (int i = 0; i < sb->nimages; i++)
		if (!strcmp(sb->images[i].digest, digest))
			return &sb->images[i];
	return NULL;
}

struct pull_progress {
	void (*fn)(void *, json_t *);
	void *ctx;
};

static void pull_progress_cb(void *ctx, const char *phase, const char *what, uint64_t done,
			     uint64_t total)
{
	struct pull_progress *p = ctx;
	if (p->fn)
		p->fn(p->ctx, json_pack("{s:s,s:s,s:I,s:I}", "phase", phase, "what", what ? what : "",
					"done", (json_int_t)done, "total", (json_int_t)total));
}

int sb_image_pull(struct daemon *d, const char *ref, void (*progress)(void *, json_t *),
		  void *pctx, json_t **out, struct k8_err *err)
{
	return sb_image_pull_as(d, ref, NULL, progress, pctx, out, err);
}

int sb_image_pull_as(struct daemon *d, const char *ref, const char *basic,
		     void (*progress)(void *, json_t *), void *pctx, json_t **out,
		     struct k8_err *err)
{
	struct pull_progress pp = { progress, pctx };
	const char *dc = getenv("DOCKER_CONFIG");
	const char *home = getenv("HOME");
	cleanup_free char *auth = xasprintf("%s/auth.json", d->home);
	cleanup_free char *docker = dc && *dc ? xasprintf("%s/config.json", dc) :
				    home && *home ? xasprintf("%s/.docker/config.json", home) : NULL;
	json_t *cfg = daemon_config(d);
	char **insecure = daemon_setting_list("KOSA8_INSECURE_REGISTRIES", cfg, "insecure_registries");
	char **mirrors = daemon_setting_list("KOSA8_REGISTRY_MIRRORS", cfg, "registry_mirrors");
	struct pull_opts o = {
		.offline = daemon_offline(d, cfg),
		.auth_file = auth,
		.docker_config = docker,
		.insecure = (const char *const *)insecure,
		.mirrors = (const char *const *)mirrors,
		.basic = basic,
	};
	int r;

	r = image_pull(d->images, ref, &o, pull_progress_cb, &pp, out, err);
	if (!r)
		daemon_audit(d, "image.pull", NULL,
			     json_pack("{s:O,s:O,s:O}", "ref", json_object_get(*out, "ref"),
				       "digest", json_object_get(*out, "digest"),
				       "registry", json_object_get(*out, "registry")));
	daemon_setting_list_free(insecure);
	daemon_setting_list_free(mirrors);
	json_decref(cfg);
	return r;
}

int sb_pull(struct daemon *d, struct sandbox *sb, const char *image,
	    void (*progress)(void *, json_t *), void *pctx, json_t **out, struct k8_err *err)
{
	struct image_info info = { 0 };
	struct pull_progress pp = { progress, pctx };
	cleanup_free char *disk = NULL;
	struct vm_image *img;
	int r, slot;

	r = image_resolve(d->images, image, &info, err);
	if (r == -ENOENT) {
		/* Not in the store: fetch it (image_pull fails fast when offline). */
		json_t *pulled = NULL;
		struct k8_err pe = { 0 };
		r = sb_image_pull(d, image, progress, pctx, &pulled, &pe);
		if (!r)
			r = image_resolve(d->images, json_string_value(json_object_get(pulled, "ref")),
					  &info, &pe);
		json_decref(pulled);
		if (r) {
			k8_err_clear(err);
			return k8_err_set(err, r, "%s", pe.msg);
		}
	} else if (r) {
		return r;
	}
	r = sb_ensure_running(d, sb, err);
	if (r)
		goto out;
	r = image_disk(d->images, info.digest, pull_progress_cb, &pp, &disk, err);
	if (r)
		goto out;
	sb_busy_enter(sb);
	img = sb_find_image(sb, info.digest);
	if (!img) {
		bool used[K8_MAX_SLOTS] = { 0 };
		for (int i = 0; i < sb->nimages; i++)
			used[sb->images[i].slot] = true;
		for (slot = 0; slot < K8_MAX_SLOTS && used[slot]; slot++)
			;
		if (slot == K8_MAX_SLOTS) {
			r = k8_err_set(err, -ENOSPC,
				       "sandbox '%s' already has %d images, the most one VM can hold; "
				       "create another sandbox for this one", sb->name, K8_MAX_SLOTS);
			goto leave;
		}
		if (progress)
			progress(pctx, json_pack("{s:s,s:s}", "phase", "attach", "what", info.digest));
		r = vm_attach_image(&sb->qmp, slot, disk, err);
		if (r)
			goto leave;
		pthread_mutex_lock(&sb->lock);
		img = &sb->images[sb->nimages++];
		memset(img, 0, sizeof(*img));
		snprintf(img->ref, sizeof(img->ref), "%s", info.ref);
		snprintf(img->digest, sizeof(img->digest), "%s", info.digest);
		snprintf(img->disk, sizeof(img->disk), "%s", disk);
		img->slot = slot;
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
	}
	r = sb_mount_images(sb, err);
	if (!r) {
		daemon_audit(d, "sandbox.pull", sb->name,
			     json_pack("{s:s,s:s,s:i}", "image", info.ref, "digest", info.digest,
				       "slot", img->slot));
		*out = json_pack("{s:s,s:s,s:i}", "ref", info.ref, "digest", info.digest, "slot",
				 img->slot);
	}
leave:
	sb_busy_leave(sb);
out:
	image_info_clear(&info);
	return r;
}

int sb_image_evict(struct daemon *d, struct sandbox *sb, const char *digest,
		   struct k8_err *err)
{
	struct vm_image order[K8_MAX_SLOTS];
	char held[1024] = "";
	size_t hl = 0;
	int n, r = -ENOSPC;

	sb_busy_enter(sb);
	pthread_mutex_lock(&sb->lock);
	n = sb->nimages;
	memcpy(order, sb->images, sizeof(order));
	pthread_mutex_unlock(&sb->lock);
	for (int i = 1; i < n; i++)     /* least recently used first */
		for (int k = i; k > 0 && order[k].used_ns < order[k - 1].used_ns; k--) {
			struct vm_image t = order[k];
			order[k] = order[k - 1];
			order[k - 1] = t;
		}
	for (int i = 0; i < n; i++) {
		struct k8_err e2 = { 0 };
		json_t *resp = NULL;
		int q;

		if (digest && strcmp(order[i].digest, digest))
			continue;
		q = link_request(&sb->link,
				     json_pack("{s:s,s:i,s:s}", "op", "image.unmount", "slot",
					       order[i].slot, "digest", order[i].digest),
				     REQ_TIMEOUT_MS, &resp, NULL, &e2);
		json_decref(resp);
		if (q == -EOPNOTSUPP) {
			r = k8_err_set(err, -ENOSPC, "sandbox '%s' has %d images and its guest agent "
				       "cannot unmount one: rebuild the guest image (make guest)",
				       sb->name, K8_MAX_SLOTS);
			goto out;
		}
		if (q) {
			if (hl < sizeof(held))
				hl += (size_t)snprintf(held + hl, sizeof(held) - hl, "%s%s (%s)",
						       hl ? ", " : "", order[i].ref, e2.msg);
			continue;
		}
		pthread_mutex_lock(&sb->lock);
		for (int k = 0; k < sb->nimages; k++) {
			if (sb->images[k].slot != order[i].slot)
				continue;
			memmove(&sb->images[k], &sb->images[k + 1],
				(size_t)(sb->nimages - k - 1) * sizeof(sb->images[0]));
			sb->nimages--;
			break;
		}
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		daemon_audit(d, "sandbox.image.evict", sb->name,
			     json_pack("{s:s,s:s,s:i}", "image", order[i].ref, "digest",
				       order[i].digest, "slot", order[i].slot));
		r = 0;
		goto out;
	}
	r = k8_err_set(err, -ENOSPC, "sandbox '%s' holds %d images, each in use: %s", sb->name,
		       n, held);
out:
	sb_busy_leave(sb);
	return r;
}

int sb_image_for_run(struct daemon *d, struct sandbox *sb, const char *image,
		     struct vm_image *img, json_t **config, struct k8_err *err)
{
	struct image_info info = { 0 };
	struct vm_image *found;
	int r;

	r = image_resolve(d->images, image, &info, err);
	if (r == -ENOENT && daemon_offline(d, NULL)) {   /* the store's hint would say `image pull` */
		err->code = 0;
		return k8_err_set(err, -ENETUNREACH, "KOSA8_OFFLINE is set: not fetching %s; load "
				  "it with kosa8 image load or kosa8 bundle import", image);
	}
	if (r)
		return r;
	pthread_mutex_lock(&sb->lock);
	found = sb_find_image(sb, info.digest);
	if (found) {
		found->used_ns = now_mono_ns();
		*img = *found;
	}
	pthread_mutex_unlock(&sb->lock);
	if (!found || !found->mounted) {
		/* Like `docker run`: use the image if the store has it. */
		json_t *res = NULL;
		r = sb_pull(d, sb, image, NULL, NULL, &res, err);
		json_decref(res);
		if (r)
			goto out;
		pthread_mutex_lock(&sb->lock);
		found = sb_find_image(sb, info.digest);
		if (found) {
			found->used_ns = now_mono_ns();
			*img = *found;
		}
		pthread_mutex_unlock(&sb->lock);
		if (!found) {
			r = k8_err_set(err, -EIO, "image %s vanished from the sandbox", info.ref);
			goto out;
		}
	}
	*config = json_pack("{s:O,s:O?,s:O?,s:s,s:s}", "env", info.env, "entrypoint",
			    info.entrypoint, "cmd", info.cmd, "workdir", info.workdir, "user", info.user);
out:
	image_info_clear(&info);
	return r;
}

int sb_agent_request(struct sandbox *sb, json_t *req, int timeout_ms, json_t **resp,
		     struct stream **stream, struct k8_err *err)
{
	int r = sb_wait_connected(sb, err);     /* a rewind's init first (checkpoint.c) */

	if (r) {
		json_decref(req);
		return r;
	}
	return link_request(&sb->link, req, timeout_ms, resp, stream, err);
}

/* The agent's container list, made readable: image digests become the references the
 * sandbox pulled them as, start times become RFC 3339. */
json_t *sb_containers_json(struct sandbox *sb, json_t *list)
{
	json_t *out = json_array(), *c;
	size_t i;

	json_array_foreach(list, i, c) {
		json_t *o;
		const char *img;
		json_int_t ns;
		char ts[K8_TIME_LEN];

		if (!json_is_object(c))
			continue;
		o = json_deep_copy(c);
		img = json_string_value(json_object_get(c, "image"));
		pthread_mutex_lock(&sb->lock);
		for (int k = 0; img && k < sb->nimages; k++) {
			const char *dg = sb->images[k].digest;
			if (!strcmp(img, dg) || (strlen(img) == 64 && !strcmp(img, dg + 7))) {
				json_object_set_new(o, "image", json_string(sb->images[k].ref));
				json_object_set_new(o, "image_digest", json_string(dg));
			}
		}
		pthread_mutex_unlock(&sb->lock);
		ns = json_integer_value(json_object_get(c, "started_ns"));
		if (ns > 0) {
			k8_time_fmt(ts, ns / 1000000000, -1);
			json_object_set_new(o, "started", json_string(ts));
		}
		json_array_append_new(out, o);
	}
	return out;
}

/* ---- API: the sandbox routes (api.h; the table is in api.c) ---- */

int sb_image_unused(struct daemon *d, const char *digest, const char *ref, struct k8_err *err)
{
	const char *user = NULL;
	int r = 0;

	pthread_mutex_lock(&d->lock);
	for (struct sandbox *sb = d->sandboxes; sb && !user; sb = sb->next)
		for (int i = 0; i < sb->nimages; i++)
			if (!strcmp(sb->images[i].digest, digest))
				user = sb->name;
	if (user)
		r = k8_err_set(err, -EBUSY, "image %s is attached to sandbox '%s'; remove the "
			       "sandbox first (kosa8 sandbox rm %s)", ref, user, user);
	pthread_mutex_unlock(&d->lock);
	return r;
}

int sb_api_list(struct api_call *call)
{
	call->out = sb_list_json(call->d);
	return 0;
}

static int sb_create_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	return sb_create(j->d, j->body, api_job_progress, j, result, err);
}

int sb_api_create(struct api_call *call)
{
	return api_reply_job(call, sb_create_job, NULL);
}

int sb_api_get(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);

	if (!sb)
		return call->err.code;
	call->out = sb_to_json(sb, true);
	sb_put_peek(call->d, sb);      /* looking is not using (idle.c) */
	return 0;
}

/* DELETE /v1/sandboxes/{name}?wipe=1 */
int sb_api_rm(struct api_call *call)
{
	bool wipe = false;

	if (api_query_bool(call, "wipe", &wipe))
		return call->err.code;
	return sb_remove(call->d, api_param(call, "name"), wipe, &call->err);
}

static int sb_pull_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	const char *image = json_string_value(json_object_get(j->body, "image"));
	struct sandbox *sb;
	int r;

	if (!image)
		return k8_err_set(err, -EINVAL, "an image is required, e.g. python:3.12-slim");
	sb = sb_get(j->d, j->arg, err);
	if (!sb)
		return -ENOENT;
	r = sb_pull(j->d, sb, image, api_job_progress, j, result, err);
	sb_put(j->d, sb);
	return r;
}

/* A sandbox that does not exist is a plain 404, before the stream starts. */
int sb_api_pull(struct api_call *call)
{
	const char *name = api_param(call, "name");
	struct sandbox *sb;

	if (!sb_name_valid(name))
		return k8_err_set(&call->err, -ENOENT, "sandbox '%s' does not exist", name);
	sb = sb_get(call->d, name, &call->err);
	if (!sb)
		return call->err.code;
	sb_put(call->d, sb);
	return api_reply_job(call, sb_pull_job, name);
}
