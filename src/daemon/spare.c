/* SPDX-License-Identifier: Apache-2.0 */
/* spare.c - a sandbox's spare: a QEMU restored from a checkpoint ahead of time, so that
 * a rewind to it is a swap instead of a restore.
 *
 * Theory of operation. A cold rewind (checkpoint.c) kills the VM, then starts a QEMU
 * with -incoming from the checkpoint's state and waits for the memory to load: most of
 * its time. A spare does that load before it is needed: a QEMU started the same way,
 * on its own new top layer over the checkpoint's frozen one, whose migration finished
 * and whose vCPUs stay stopped (a checkpoint is saved stopped, and QEMU keeps a
 * restored machine so). Its devices' backends are connected at start, so it cannot use
 * the running VM's sockets:
 *   - QMP, the agent port and the kosa8.fs port listen at their own paths
 *     (run/<id>.spare-qmp, .spare-agent, .spare-fs); at the swap they are renamed over
 *     the VM's paths, so everything after (sb_connect_vm, a daemon adopting the VM)
 *     finds them where it always does;
 *   - the NIC is one end of a socket pair; the daemon keeps the other end and, at the
 *     swap, hands it to kosa8-net ("frames" on its control socket), which drops the old
 *     VM's connection and with it every open flow, exactly as when a QEMU ends, while
 *     its policy and egress counts stay;
 *   - kosa8-fs is given the checkpoint's tables and a connection to the spare's port,
 *     as after a cold rewind.
 * A swap is then: the NIC handed over, the old QEMU killed, the sockets renamed, and
 * the first half of sb_connect_vm as for any restored VM (cont, the agent's port
 * connected and greeted). The rewind's caller records the layer and answers; the
 * second half (the agent's HELLO, clock, RNG reseed, image mounts) and then the next
 * spare run on a thread of its own (checkpoint.c).
 *
 * One spare per sandbox at most, of the label its setting names ("latest": the label
 * rewound to most recently). It runs in its own cgroup (<name>+spare: '+' is in no
 * sandbox name) with the sandbox's limits until the swap moves it into the sandbox's.
 * <dir>/spare.json names its pid, start time and layer from the moment it is spawned,
 * so a daemon that died leaves nothing a new one cannot find and end (spare_reap).
 *
 * Concurrency. The preparation runs on its own thread without the busy token (it only
 * reads the checkpoint and writes files no one else names: its layer is in no
 * layers.json until the swap, so a layer gc leaves it). struct spare's mutex guards the
 * ready spare, the wanted label and a generation that every drop bumps: a preparation
 * that finds the generation moved ends its QEMU instead of installing it. The thread
 * holds a user reference, so sb_remove waits for it.
 */
#include "daemon/spare.h"
#include "daemon/cgroup.h"
#include "daemon/egress.h"
#include "daemon/layers.h"
#include "daemon/mounts.h"
#include "daemon/boot.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define SPARE_LOAD_TIMEOUT_MS 120000

struct spare_vm {
	char label[64];
	char layer[64];                 /* its top layer, a file in sb->dir */
	pid_t pid;
	unsigned long long start;
	int net_fd;                     /* the daemon's end of its NIC's socket pair */
	int mem_fd;                     /* the memory file its RAM maps (sb_mem_set), or -1 */
	/* the checkpoint's machine, which the sandbox has once the spare is swapped in */
	struct vm_image images[K8_MAX_SLOTS];
	int nimages, memory_mib, cpus;
	struct vm_machine machine;
};

struct spare {
	pthread_mutex_t mu;
	pthread_cond_t idle;            /* broadcast when spare_thread ends (spare_wait_idle) */
	unsigned gen;                   /* bumped by every drop */
	bool preparing;                 /* a thread runs spare_thread */
	char want[64];                  /* the label to keep a spare of; "" none */
	char loading[64];               /* the label being prepared */
	pid_t loading_pid;              /* its QEMU while it loads (spare_drop ends it) */
	unsigned long long loading_start;
	struct spare_vm *ready;
};

static pthread_mutex_t spare_alloc_mu = PTHREAD_MUTEX_INITIALIZER;

static struct spare *spare_of(struct sandbox *sb)
{
	pthread_mutex_lock(&spare_alloc_mu);
	if (!sb->spare) {
		sb->spare = xcalloc(1, sizeof(*sb->spare));
		pthread_mutex_init(&sb->spare->mu, NULL);
		pthread_cond_init(&sb->spare->idle, NULL);
	}
	pthread_mutex_unlock(&spare_alloc_mu);
	return sb->spare;
}

bool spare_setting_valid(const char *v)
{
	size_t n = v ? strlen(v) : 0;

	if (n == 0 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = v[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      (i > 0 && (c == '-' || c == '_' || c == '.'))))
			return false;
	}
	return true;
}

static void spare_paths(struct daemon *d, struct sandbox *sb, char qmp[4200], char agent[4200],
			char fs[4200])
{
	sb_sock_path(d, sb, "spare-qmp", qmp, 4200);
	sb_sock_path(d, sb, "spare-agent", agent, 4200);
	sb_sock_path(d, sb, "spare-fs", fs, 4200);
}

static char *spare_cgroup(struct sandbox *sb)
{
	return xasprintf("%s+spare", sb->name);
}

static void spare_end_pid(pid_t pid, unsigned long long start, bool child)
{
	if (pid <= 0)
		return;
	if (vm_alive(pid, start))
		kill(pid, SIGKILL);
	if (child)
		waitpid(pid, NULL, 0);
}

/* The QEMU of the spare being loaded now (pid 0: none), for spare_drop. A drop that came
 * before the pid was known ends it here. */
static void spare_loading(struct sandbox *sb, pid_t pid, unsigned long long start, unsigned gen)
{
	struct spare *sp = spare_of(sb);
	bool dropped;

	pthread_mutex_lock(&sp->mu);
	sp->loading_pid = pid;
	sp->loading_start = start;
	dropped = sp->gen != gen;
	pthread_mutex_unlock(&sp->mu);
	if (pid > 0 && dropped && vm_alive(pid, start))
		kill(pid, SIGKILL);
}

/* Whether the spare being made (of drop generation `gen`) was dropped meanwhile. */
static bool spare_dropped(struct sandbox *sb, unsigned gen)
{
	struct spare *sp = spare_of(sb);
	bool r;

	pthread_mutex_lock(&sp->mu);
	r = sp->gen != gen;
	pthread_mutex_unlock(&sp->mu);
	return r;
}

/* End a spare that was not swapped in and remove its files. */
static void spare_vm_destroy(struct daemon *d, struct sandbox *sb, struct spare_vm *v)
{
	char qmp[4200], agent[4200], fs[4200];

	if (!v)
		return;
	spare_end_pid(v->pid, v->start, true);
	if (v->net_fd >= 0)
		close(v->net_fd);
	if (v->mem_fd >= 0)
		close(v->mem_fd);
	if (v->layer[0]) {
		cleanup_free char *p = xasprintf("%s/%s", sb->dir, v->layer);
		unlink(p);
	}
	spare_paths(d, sb, qmp, agent, fs);
	unlink(qmp);
	unlink(agent);
	unlink(fs);
	{
		cleanup_free char *cg = spare_cgroup(sb);
		cleanup_free char *rec = xasprintf("%s/spare.json", sb->dir);
		cleanup_free char *log = xasprintf("%s/qemu-spare.log", sb->dir);
		cgroup_remove(&d->cg, cg);
		unlink(rec);
		unlink(log);
	}
	free(v);
}

/* What a checkpoint's meta.json says the spare needs; 0 or -errno. */
static int spare_meta(struct sandbox *sb, const char *label, char *frozen, size_t n,
		      struct vm_image imgs[K8_MAX_SLOTS], int *nimgs, int *mem, int *cpus,
		      struct vm_machine *machine, bool *memfile)
{
	cleanup_free char *p = xasprintf("%s/checkpoints/%s/meta.json", sb->dir, label);
	cleanup_free char *t = NULL;
	json_auto_t *m = NULL;
	const char *l;

	if (read_file(p, 1 << 20, &t, NULL) || !(m = json_loads(t, 0, NULL)))
		return -ENOENT;
	l = json_string_value(json_object_get(m, "layer"));
	if (!l || strchr(l, '/') || strlen(l) >= n)
		return -EINVAL;
	snprintf(frozen, n, "%s", l);
	*nimgs = sb_images_from_json(json_object_get(m, "images"), imgs);
	*mem = (int)json_integer_value(json_object_get(m, "memory_mib"));
	*cpus = (int)json_integer_value(json_object_get(m, "cpus"));
	/* as checkpoint.c's meta_memfile: a memory file, or one migration stream */
	*memfile = !strcmp(json_string_value(json_object_get(m, "memory")) ?: "", "file");
	return vm_machine_from_json(json_object_get(m, "machine"), machine);
}

/* Wait until the spare's migration is in and its vCPUs are stopped. */
static int spare_wait_loaded(const char *qmp_path, struct k8_err *err)
{
	struct qmp q = { .fd = -1 };
	uint64_t deadline = now_mono_ns() + (uint64_t)SPARE_LOAD_TIMEOUT_MS * 1000000ull;
	int r;

	pthread_mutex_init(&q.lock, NULL);
	if ((r = qmp_connect(&q, qmp_path, 15000, err)))
		goto out;
	for (;;) {
		json_t *st = NULL;
		if ((r = qmp_exec(&q, "query-status", NULL, &st, 10000, err)))
			break;
		const char *s = json_string_value(json_object_get(st, "status"));
		bool in = s && !strcmp(s, "inmigrate");
		bool paused = s && !strcmp(s, "paused");
		r = in || paused ? 0 : k8_err_set(err, -EIO, "the spare is %s, not loaded and "
						  "stopped", s ? s : "in no state");
		json_decref(st);
		if (r || paused)
			break;
		if (now_mono_ns() > deadline) {
			r = k8_err_set(err, -ETIMEDOUT, "loading the spare took too long");
			break;
		}
		usleep(5000);
	}
out:
	qmp_close(&q);
	pthread_mutex_destroy(&q.lock);
	return r;
}

/* spare.json: the spare's QEMU, so that a daemon started later ends it. */
static void spare_record(struct sandbox *sb, const struct spare_vm *v)
{
	cleanup_free char *rec = xasprintf("%s/spare.json", sb->dir);
	cleanup_free char *t = NULL;
	json_auto_t *j = json_pack("{s:s,s:s,s:i,s:I}", "label", v->label, "layer", v->layer,
				   "pid", (int)v->pid, "pid_start", (json_int_t)v->start);

	t = json_dumps(j, 0);
	if (t)
		write_file_atomic(rec, t, strlen(t), 0600);
}

/* QEMU's own words into err, after the command line that opens its log. */
static void spare_qemu_said(const char *log, struct k8_err *err)
{
	cleanup_free char *said = NULL;
	char *msg;

	usleep(100000);
	if (!read_file(log, 16384, &said, NULL) && (msg = strchr(said, '\n')) && msg[1])
		k8_err_wrap(err, "QEMU: %.400s", msg + 1);
}

/* Start a QEMU restoring checkpoint `label` of sb, stopped once loaded. NULL on failure
 * (err says why; nothing is left). */
static struct spare_vm *spare_start(struct daemon *d, struct sandbox *sb, const char *label,
				    unsigned gen, struct k8_err *err)
{
	struct spare_vm *v = xcalloc(1, sizeof(*v));
	struct vm_image *imgs = v->images;
	char frozen[256], qmp[4200], agent[4200], fs[4200];
	cleanup_free char *bp = NULL, *top = NULL, *cdir = NULL, *cg = NULL;
	cleanup_free char *log = xasprintf("%s/qemu-spare.log", sb->dir);
	cleanup_close int kfd = -1, ifd = -1, sfd = -1;
	char **chain = NULL;
	const char **full;
	int nbelow;
	int nimgs = 0, mem = 0, cpus = 0, sv[2] = { -1, -1 }, r;
	bool memfile = false;
	int disk_gb;
	uid_t jail = 0;

	v->net_fd = -1;
	v->mem_fd = -1;
	snprintf(v->label, sizeof(v->label), "%s", label);
	if ((r = spare_meta(sb, label, frozen, sizeof(frozen), imgs, &nimgs, &mem, &cpus,
			    &v->machine, &memfile))) {
		k8_err_set(err, r, "checkpoint '%s' cannot be read", label);
		goto fail;
	}
	pthread_mutex_lock(&sb->lock);
	disk_gb = sb->disk_gb;
	mem = mem ?: sb->memory_mib;
	cpus = cpus ?: sb->cpus;
	if (!d->jail_off && sb->jail_index >= 0)
		jail = jail_uid(&d->jail, sb->jail_index, JAIL_QEMU);
	pthread_mutex_unlock(&sb->lock);
	/* dropped already (a stop or rm is under way): no file is made in its directory */
	if (spare_dropped(sb, gen)) {
		k8_err_set(err, -ECANCELED, "dropped while it was being prepared");
		goto fail;
	}
	if ((r = guest_verify_open(&d->guest, &kfd, &ifd, err)))
		goto fail;
	cdir = xasprintf("%s/checkpoints/%s", sb->dir, label);
	if (sb_saved_open(cdir, memfile, mem, &sfd, &v->mem_fd, err))
		goto fail;
	/* Its own new top layer over the frozen one (named as rewinds name theirs). */
	snprintf(v->layer, sizeof(v->layer), "layer-%llx.qcow2", (unsigned long long)now_real_ns());
	top = xasprintf("%s/%s", sb->dir, v->layer);
	bp = xasprintf("%s/%s", sb->dir, frozen);
	if ((r = layers_new_top(bp, top, disk_gb, err)))
		goto fail;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		k8_err_set(err, -errno, "socketpair: %s", strerror(errno));
		goto fail;
	}
	spare_paths(d, sb, qmp, agent, fs);
	cg = spare_cgroup(sb);
	struct vm_spec spec = { .accel = d->accel, .cpus = cpus, .memory_mib = mem,
				.dir = sb->dir, .qmp_path = qmp, .agent_path = agent,
				.fs_path = fs, .net_fd = sv[1], .kernel_fd = kfd,
				.initramfs_fd = ifd, .images = imgs, .nimages = nimgs,
				.scratch = top, .incoming_fd = sfd, .jail_uid = jail,
				.ram_fd = v->mem_fd > 0 ? v->mem_fd : 0,
				.cg = &d->cg, .cg_name = cg, .log = log, .machine = v->machine,
				/* as every QEMU of the daemon (config.json "tcg_tb_mib") */
				.tb_mib = daemon_tcg_tb_mib(d, NULL) };
	/* The chain under its top: the frozen layer, then what is under that (its layer is
	 * in no layers.json yet, so layers_chain cannot start from it). */
	nbelow = layers_chain(sb->dir, frozen, &chain);
	full = xcalloc((size_t)nbelow + 1, sizeof(*full));
	full[0] = bp;
	for (int i = 0; i < nbelow; i++)
		full[i + 1] = chain[i];
	spec.chain = full;
	spec.nchain = nbelow + 1;
	r = vm_spawn(&spec, &v->pid, err);
	layers_chain_free(chain, nbelow);
	free(full);
	close(sv[1]);
	v->net_fd = sv[0];
	if (r)
		goto fail;
	v->start = vm_proc_start(v->pid);
	spare_loading(sb, v->pid, v->start, gen);
	v->nimages = nimgs;
	v->memory_mib = mem;
	v->cpus = cpus;
	spare_record(sb, v);
	if ((r = spare_wait_loaded(qmp, err))) {
		spare_qemu_said(log, err);
		goto fail;
	}
	spare_loading(sb, 0, 0, gen);
	return v;
fail:
	spare_loading(sb, 0, 0, gen);
	spare_vm_destroy(d, sb, v);
	return NULL;
}

/* The preparation thread: make spares until the one wanted is ready or nothing is
 * wanted. Holds a user reference on sb. */
static void *spare_thread(void *arg)
{
	struct sandbox *sb = arg;
	struct daemon *d = sb->d;
	struct spare *sp = sb->spare;

	for (;;) {
		char label[64];
		unsigned gen;
		struct spare_vm *v, *old = NULL;
		struct k8_err err = { 0 };

		pthread_mutex_lock(&sp->mu);
		if (!sp->want[0] || (sp->ready && !strcmp(sp->ready->label, sp->want))) {
			sp->preparing = false;
			sp->loading[0] = '\0';
			pthread_cond_broadcast(&sp->idle);
			pthread_mutex_unlock(&sp->mu);
			break;
		}
		snprintf(label, sizeof(label), "%s", sp->want);
		snprintf(sp->loading, sizeof(sp->loading), "%s", label);
		old = sp->ready;        /* of another label: it goes first (one per sandbox) */
		sp->ready = NULL;
		gen = sp->gen;
		pthread_mutex_unlock(&sp->mu);
		spare_vm_destroy(d, sb, old);

		uint64_t t0 = now_mono_ns();
		v = spare_start(d, sb, label, gen, &err);
		if (!v) {
			daemon_log("sandbox %s: no spare of checkpoint %s: %s", sb->name, label,
				   err.msg);
			pthread_mutex_lock(&sp->mu);
			if (!strcmp(sp->want, label))
				sp->want[0] = '\0';     /* not again until the next rewind */
			pthread_mutex_unlock(&sp->mu);
			continue;
		}
		pthread_mutex_lock(&sp->mu);
		if (sp->gen == gen && !strcmp(sp->want, label)) {
			sp->ready = v;
			v = NULL;
		}
		pthread_mutex_unlock(&sp->mu);
		if (v)
			spare_vm_destroy(d, sb, v);     /* dropped meanwhile */
		else
			daemon_log("sandbox %s: spare of checkpoint %s ready in %llu ms", sb->name,
				   label, (unsigned long long)((now_mono_ns() - t0) / 1000000));
	}
	sb_put(d, sb);
	return NULL;
}

/* Keep a spare of `label` ("" none): start the thread if it is not running. */
static void spare_want(struct daemon *d, struct sandbox *sb, const char *label)
{
	struct spare *sp = spare_of(sb);
	struct spare_vm *old = NULL;
	bool start = false;
	pthread_t t;

	pthread_mutex_lock(&sp->mu);
	snprintf(sp->want, sizeof(sp->want), "%s", label);
	if (sp->ready && strcmp(sp->ready->label, label)) {
		old = sp->ready;
		sp->ready = NULL;
	}
	if (label[0] && !sp->preparing && !sp->ready)
		start = sp->preparing = true;
	pthread_mutex_unlock(&sp->mu);
	spare_vm_destroy(d, sb, old);
	if (!start)
		return;
	pthread_mutex_lock(&sb->lock);
	sb->users++;                    /* the thread's reference (sb_put at its end) */
	pthread_mutex_unlock(&sb->lock);
	if (pthread_create(&t, NULL, spare_thread, sb) != 0) {
		pthread_mutex_lock(&sp->mu);
		sp->preparing = false;
		pthread_cond_broadcast(&sp->idle);
		pthread_mutex_unlock(&sp->mu);
		sb_put(d, sb);
		return;
	}
	pthread_detach(t);
}

/* The label the setting asks for after a rewind to `rewound` ("" none). */
static void spare_wanted(struct sandbox *sb, const char *rewound, char *out, size_t n)
{
	char setting[64];
	cleanup_free char *meta = NULL;

	pthread_mutex_lock(&sb->lock);
	snprintf(setting, sizeof(setting), "%s", sb->rewind_spare[0] ? sb->rewind_spare
								    : SPARE_LATEST);
	pthread_mutex_unlock(&sb->lock);
	out[0] = '\0';
	if (!strcmp(setting, SPARE_OFF))
		return;
	if (!strcmp(setting, SPARE_LATEST)) {
		if (rewound)
			snprintf(out, n, "%s", rewound);
		return;
	}
	meta = xasprintf("%s/checkpoints/%s/meta.json", sb->dir, setting);
	if (access(meta, F_OK) == 0)    /* a label not made yet: nothing until it is */
		snprintf(out, n, "%s", setting);
}

void spare_after_rewind(struct daemon *d, struct sandbox *sb, const char *label)
{
	char want[64];

	spare_wanted(sb, label, want, sizeof(want));
	spare_want(d, sb, want);
}

int spare_take(struct daemon *d, struct sandbox *sb, const char *label, char *layer,
	       size_t n, struct sb_connect *conn, struct k8_err *err)
{
	struct spare *sp = spare_of(sb);
	struct spare_vm *v;
	char qmp[4200], agent[4200], fs[4200], path[4200];
	struct k8_err herr = { 0 };
	int r;

	pthread_mutex_lock(&sp->mu);
	v = sp->ready;
	if (v && !strcmp(v->label, label))
		sp->ready = NULL;
	else
		v = NULL;
	pthread_mutex_unlock(&sp->mu);
	if (!v)
		return -EAGAIN;
	if (!vm_alive(v->pid, v->start) || !sidecar_connected(&sb->net) || sb->pid <= 0 ||
	    (sb->nmounts && !sidecar_connected(&sb->fs))) {
		spare_vm_destroy(d, sb, v);
		return -EAGAIN;
	}
	uint64_t t0 = now_mono_ns(), t_net, t_kill, t_conn;
	/* The NIC first: until kosa8-net takes it nothing has changed (an older kosa8-net
	 * knows no "frames": cold then). From here the old VM has no network. */
	if (sidecar_request_fd(&sb->net, json_pack("{s:s}", "op", "frames"), v->net_fd, 5000,
			       NULL, &herr)) {
		daemon_log("sandbox %s: kosa8-net did not take the spare's NIC (%s); rewinding "
			   "cold", sb->name, herr.msg);
		spare_vm_destroy(d, sb, v);
		return -EAGAIN;
	}
	close(v->net_fd);
	v->net_fd = -1;
	t_net = now_mono_ns();
	/* The old machine goes at once: its state is discarded, so no `quit`. */
	pthread_mutex_lock(&sb->lock);
	sb_discard_qemu(d, sb);
	sb->state = SB_BOOTING;
	memcpy(sb->images, v->images, sizeof(v->images));
	sb->nimages = v->nimages;
	sb->memory_mib = v->memory_mib;
	sb->cpus = v->cpus;
	sb->machine = v->machine;
	sb_mem_set(sb, v->mem_fd);      /* the memory file it maps, if any */
	v->mem_fd = -1;
	pthread_mutex_unlock(&sb->lock);
	t_kill = now_mono_ns();
	/* The spare's sockets and log take the VM's names. */
	spare_paths(d, sb, qmp, agent, fs);
	sb_sock_path(d, sb, "qmp", path, sizeof(path));
	r = rename(qmp, path) < 0 ? -errno : 0;
	sb_sock_path(d, sb, "agent", path, sizeof(path));
	if (!r && rename(agent, path) < 0)
		r = -errno;
	sb_sock_path(d, sb, "fs", path, sizeof(path));
	if (!r && rename(fs, path) < 0)
		r = -errno;
	{
		cleanup_free char *from = xasprintf("%s/qemu-spare.log", sb->dir);
		cleanup_free char *to = xasprintf("%s/qemu.log", sb->dir);
		rename(from, to);
	}
	if (r) {
		k8_err_set(err, r, "moving the spare's sockets: %s", strerror(-r));
		goto fail;
	}
	if (sb->nmounts) {
		cleanup_free char *nodes = xasprintf("%s/checkpoints/%s/fs-nodes.json", sb->dir,
						     label);
		if (access(nodes, F_OK) == 0 && (r = fs_load(sb, nodes, err)))
			goto fail;
	}
	/* sb_connect_vm moves it into the sandbox's cgroup; its own goes after. */
	t_conn = now_mono_ns();
	r = sb_connect_vm_start(d, sb, v->pid, true, conn, err);
	v->pid = 0;                     /* the sandbox's now, or ended by sb_connect_vm */
	if (r)
		goto fail;
	daemon_log("sandbox %s: rewound to %s through its spare: NIC %llu ms, old VM ended "
		   "%llu ms, files %llu ms, running and greeted %llu ms", sb->name, label,
		   (unsigned long long)((t_net - t0) / 1000000),
		   (unsigned long long)((t_kill - t_net) / 1000000),
		   (unsigned long long)((t_conn - t_kill) / 1000000),
		   (unsigned long long)((now_mono_ns() - t_conn) / 1000000));
	snprintf(layer, n, "%s", v->layer);
	v->layer[0] = '\0';             /* the sandbox's top from now on */
	spare_vm_destroy(d, sb, v);     /* only its leftovers: cgroup, spare.json */
	return 0;
fail:
	spare_vm_destroy(d, sb, v);
	return r;
}

void spare_drop(struct daemon *d, struct sandbox *sb)
{
	struct spare *sp = spare_of(sb);
	struct spare_vm *v;

	pid_t loading;
	unsigned long long start;

	pthread_mutex_lock(&sp->mu);
	sp->gen++;
	sp->want[0] = '\0';
	v = sp->ready;
	sp->ready = NULL;
	loading = sp->loading_pid;
	start = sp->loading_start;
	pthread_mutex_unlock(&sp->mu);
	spare_vm_destroy(d, sb, v);
	/* One still loading ends too (its thread sees the load fail, reaps it and removes
	 * its files): a daemon that stops now would leave it running with nobody to end it
	 * once its home is gone. */
	if (loading > 0 && vm_alive(loading, start))
		kill(loading, SIGKILL);
}

void spare_wait_idle(struct sandbox *sb)
{
	struct spare *sp = spare_of(sb);

	pthread_mutex_lock(&sp->mu);
	while (sp->preparing)
		pthread_cond_wait(&sp->idle, &sp->mu);
	pthread_mutex_unlock(&sp->mu);
}

void spare_drop_label(struct daemon *d, struct sandbox *sb, const char *label)
{
	struct spare *sp = spare_of(sb);
	bool ours;

	pthread_mutex_lock(&sp->mu);
	ours = !strcmp(sp->want, label) || !strcmp(sp->loading, label) ||
	       (sp->ready && !strcmp(sp->ready->label, label));
	pthread_mutex_unlock(&sp->mu);
	if (ours)
		spare_drop(d, sb);
}

void spare_reap(struct daemon *d, struct sandbox *sb)
{
	cleanup_free char *rec = xasprintf("%s/spare.json", sb->dir);
	cleanup_free char *t = NULL;
	json_auto_t *j = NULL;
	struct spare_vm *v;
	const char *layer;

	if (read_file(rec, 4096, &t, NULL))
		return;
	j = json_loads(t, 0, NULL);
	v = xcalloc(1, sizeof(*v));
	v->net_fd = -1;
	v->mem_fd = -1;
	v->pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
	v->start = (unsigned long long)json_integer_value(json_object_get(j, "pid_start"));
	layer = json_string_value(json_object_get(j, "layer"));
	/* Its layer, unless a swap had made it the sandbox's top already. */
	if (layer && !strchr(layer, '/') && strlen(layer) < sizeof(v->layer) &&
	    strcmp(layer, layers_top(sb->disk)))
		snprintf(v->layer, sizeof(v->layer), "%s", layer);
	if (v->pid == sb->pid)          /* swapped in: the sandbox's VM, not a spare */
		v->pid = 0;
	if (v->pid > 0 && vm_alive(v->pid, v->start))
		daemon_log("sandbox %s: ending the spare QEMU (pid %d) an earlier daemon left",
			   sb->name, (int)v->pid);
	spare_end_pid(v->pid, v->start, false);
	v->pid = 0;
	spare_vm_destroy(d, sb, v);
}

json_t *spare_json(struct sandbox *sb)
{
	struct spare *sp = sb->spare;
	char label[64], path[64];
	pid_t pid = 0;
	bool ready = false;
	json_int_t rss = 0;

	if (!sp)
		return NULL;
	pthread_mutex_lock(&sp->mu);
	if (sp->ready) {
		snprintf(label, sizeof(label), "%s", sp->ready->label);
		pid = sp->ready->pid;
		ready = true;
	} else {
		snprintf(label, sizeof(label), "%s", sp->loading);
	}
	pthread_mutex_unlock(&sp->mu);
	if (!label[0])
		return NULL;
	if (pid > 0) {
		cleanup_free char *t = NULL;
		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
		if (!read_file(path, 1 << 16, &t, NULL)) {
			const char *p = strstr(t, "\nVmRSS:");
			if (p)
				rss = strtoll(p + 7, NULL, 10);
		}
	}
	return json_pack("{s:s,s:b,s:i,s:I}", "label", label, "ready", ready, "pid", (int)pid,
			 "rss_kib", rss);
}

void spare_free(struct sandbox *sb)
{
	if (!sb->spare)
		return;
	pthread_mutex_destroy(&sb->spare->mu);
	free(sb->spare);
	sb->spare = NULL;
}
