/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint.c - checkpoints of a whole sandbox (memory, devices, processes, disk), rewind
 * to them, and pause/resume.
 *
 * Theory of operation. A checkpoint stops the vCPUs, streams memory and device state to a
 * file through QEMU's migration (an fd passed over QMP: `-sandbox on` forbids QEMU to
 * open files or spawn helpers), then freezes the disk: a new empty qcow2 layer, made by
 * the daemon and passed to QEMU as an fd set (QEMU's jail holds no path of ours), is put
 * on top of the current one with `blockdev-snapshot`; the old top becomes the
 * checkpoint's read-only layer. Then the vCPUs continue. Both steps happen while the guest is stopped, so memory
 * and disk are one consistent instant.
 *
 * A rewind kills the VM and starts a fresh QEMU with `-incoming` reading the state file,
 * on a new empty layer whose backing is the checkpoint's layer; the agent is greeted,
 * the guest's clock set to now and its RNG reseeded from the host.
 *
 * On disk, per sandbox: checkpoints/<label>/{devices,memory,meta.json} (meta.json is
 * written last, so a checkpoint without it was interrupted and is never listed),
 * layers.json (each layer file's parent), and the layer files. A layer is deleted when
 * neither the current top nor any checkpoint reaches it through the parent links.
 *
 * Memory as a file (docs/design.md). `memory` is the guest's RAM, a sparse file written
 * out of the stopped QEMU (memfile.c) and `devices` the state of its devices alone
 * (vm_save_devices); a restore (rewind, fork, spare, resume) starts a QEMU whose RAM maps
 * `memory` private, copy on write, so it loads nothing up front and every copy of one
 * checkpoint shares the pages it has not written. A checkpoint of before (or with
 * config.json "checkpoint_memory": "stream") is one migration stream, `state`, which a
 * restore reads into QEMU's own memory; meta.json's "memory" says which ("file", or
 * nothing).
 */
#include "common/proto.h"
#include "daemon/broker.h"
#include "daemon/checkpoint.h"
#include "daemon/egress.h"
#include "daemon/layers.h"
#include "daemon/memfile.h"
#include "daemon/mounts.h"
#include "daemon/sandbox.h"
#include "daemon/spare.h"
#include "daemon/api_route.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#define MIGRATE_TIMEOUT_MS 120000

static bool label_valid(const char *l)
{
	size_t n = l ? strlen(l) : 0;
	if (n == 0 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = l[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      (i > 0 && (c == '-' || c == '_' || c == '.'))))
			return false;
	}
	return true;
}

static const char *top_of(struct sandbox *sb)
{
	return layers_top(sb->disk);
}

/* Can this kosa8d speak to the agent a checkpoint holds in its memory? meta.json names
 * the range that agent spoke ("agent_proto_min".."agent_proto_max"); a checkpoint
 * without them was taken before the handshake existed, by an agent of version 1.
 * -EPROTONOSUPPORT with what to do when not (checked before anything is touched). */
static int meta_agent_check(const json_t *meta, const struct sandbox *sb, const char *label,
			    struct k8_err *err)
{
	json_t *a = json_object_get(meta, "agent_proto_min");
	json_t *b = json_object_get(meta, "agent_proto_max");
	unsigned lo = 1, hi = 1, our_lo, our_hi;
	char theirs[32];

	if (a || b) {
		json_int_t x = json_integer_value(a), y = json_integer_value(b);
		if (!json_is_integer(a) || !json_is_integer(b) || x < 1 || y < x ||
		    y > PROTO_VERSION_LIMIT)
			return k8_err_set(err, -EINVAL, "checkpoint '%s' has a damaged meta.json "
					  "(agent_proto_min/max)", label);
		lo = (unsigned)x;
		hi = (unsigned)y;
	}
	link_proto_range(&our_lo, &our_hi);
	if (proto_pick(our_lo, our_hi, lo, hi) > 0)
		return 0;
	if (lo == hi)
		snprintf(theirs, sizeof(theirs), "%u", lo);
	else
		snprintf(theirs, sizeof(theirs), "%u..%u", lo, hi);
	return k8_err_set(err, -EPROTONOSUPPORT,
			  "checkpoint '%s' of sandbox '%s' was taken with agent protocol %s; this "
			  "kosa8 speaks %u..%u and cannot talk to the agent in it, so what ran in "
			  "it cannot be brought back. The sandbox is unchanged. Take a new "
			  "checkpoint with this kosa8 instead (`kosa8 checkpoint %s --label LABEL`; "
			  "a sandbox that is not running boots this kosa8's guest image first), or "
			  "start over with `kosa8 sandbox rm %s` and create",
			  label, sb->name, theirs, our_lo, our_hi, sb->name, sb->name);
}

/* Is the checkpoint's memory a memory file ("memory": "file") or one migration stream
 * (nothing: taken before issue 27, or with "checkpoint_memory": "stream")? */
static bool meta_memfile(const json_t *meta)
{
	return !strcmp(json_string_value(json_object_get(meta, "memory")) ?: "", "file");
}

/* meta_agent_check, and a "machine" this kosa8 can start (absent: an older checkpoint,
 * restored on the machine every VM had then), and a "memory" it knows. Checked before
 * anything is touched. */
static int meta_usable(const json_t *meta, const struct sandbox *sb, const char *label,
		       struct k8_err *err)
{
	struct vm_machine m;
	json_t *mem = json_object_get(meta, "memory");

	if (vm_machine_from_json(json_object_get(meta, "machine"), &m))
		return k8_err_set(err, -EINVAL, "checkpoint '%s' has a damaged meta.json "
				  "(\"machine\"); the sandbox is unchanged", label);
	if (mem && !meta_memfile(meta))
		return k8_err_set(err, -EINVAL, "checkpoint '%s' has a damaged meta.json "
				  "(\"memory\"); the sandbox is unchanged", label);
	return meta_agent_check(meta, sb, label, err);
}

static void new_layer_name(char *out, size_t n)
{
	snprintf(out, n, "layer-%llx.qcow2", (unsigned long long)now_real_ns());
}

/* A new empty top layer over `base` (a file name in sb's dir), of the sandbox's disk
 * size (a fork's layers name the source's files in their headers: nothing is opened). */
static int make_top(struct sandbox *sb, const char *base, const char *top, struct k8_err *err)
{
	cleanup_free char *bp = xasprintf("%s/%s", sb->dir, base);

	return layers_new_top(bp, top, sb->disk_gb, err);
}

static char *ckpt_dir(struct sandbox *sb, const char *label)
{
	return xasprintf("%s/checkpoints/%s", sb->dir, label);
}

static json_t *meta_load(struct sandbox *sb, const char *label)
{
	cleanup_free char *p = xasprintf("%s/checkpoints/%s/meta.json", sb->dir, label);
	cleanup_free char *t = NULL;
	json_t *m;

	if (read_file(p, 1 << 20, &t, NULL))
		return NULL;
	m = json_loads(t, 0, NULL);
	if (!json_is_object(m)) {
		json_decref(m);
		return NULL;
	}
	return m;
}

/* Write meta.json into a checkpoint's directory `dir`: the one writer (meta_load is the
 * one reader). 0 or -errno. */
static int meta_save(const char *dir, json_t *meta)
{
	cleanup_free char *p = xasprintf("%s/meta.json", dir);
	cleanup_free char *t = json_dumps(meta, JSON_INDENT(2));

	return t ? write_file_atomic(p, t, strlen(t), 0600) : -ENOMEM;
}

/* Delete the layers that neither the current top nor any checkpoint reaches. */
static void ckpt_gc_layers(struct sandbox *sb)
{
	cleanup_free char *cdir = xasprintf("%s/checkpoints", sb->dir);
	cleanup_free const char **roots = NULL;
	json_auto_t *names = json_array();
	DIR *dd = opendir(cdir);
	struct dirent *de;
	size_t i, n;
	json_t *v;

	json_array_append_new(names, json_string(top_of(sb)));
	while (dd && (de = readdir(dd))) {
		json_auto_t *m = NULL;
		if (de->d_name[0] == '.' || !(m = meta_load(sb, de->d_name)))
			continue;
		if (json_is_string(json_object_get(m, "layer")))
			json_array_append(names, json_object_get(m, "layer"));
	}
	if (dd)
		closedir(dd);
	n = json_array_size(names);
	roots = xcalloc(n, sizeof(*roots));
	json_array_foreach(names, i, v)
		roots[i] = json_string_value(v);
	layers_gc(sb->dir, roots, (int)n);
}

int ckpt_list(struct daemon *d, struct sandbox *sb, json_t **out, struct k8_err *err)
{
	cleanup_free char *cdir = xasprintf("%s/checkpoints", sb->dir);
	json_t *arr = json_array();
	DIR *dd = opendir(cdir);
	struct dirent *de;

	(void)d;
	(void)err;
	while (dd && (de = readdir(dd))) {
		json_t *m;
		if (de->d_name[0] == '.' || !label_valid(de->d_name) || !(m = meta_load(sb, de->d_name)))
			continue;
		json_array_append_new(arr, json_pack("{s:O,s:O,s:O,s:O}", "label",
						     json_object_get(m, "label"), "created",
						     json_object_get(m, "created"), "created_ns",
						     json_object_get(m, "created_ns"), "size",
						     json_object_get(m, "size")));
		json_decref(m);
	}
	if (dd)
		closedir(dd);
	/* oldest first */
	size_t n = json_array_size(arr);
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0; j--) {
			json_t *a = json_array_get(arr, j - 1), *b = json_array_get(arr, j);
			if (json_integer_value(json_object_get(a, "created_ns")) <=
			    json_integer_value(json_object_get(b, "created_ns")))
				break;
			json_incref(a);
			json_array_set(arr, j - 1, b);
			json_array_set_new(arr, j, a);
		}
	*out = arr;
	return 0;
}

static int remove_locked(struct sandbox *sb, const char *label, struct k8_err *err)
{
	cleanup_free char *dir = ckpt_dir(sb, label);
	cleanup_free char *meta = xasprintf("%s/meta.json", dir);

	if (access(meta, F_OK) < 0)
		return k8_err_set(err, -ENOENT, "sandbox '%s' has no checkpoint '%s'; list them with "
				  "`kosa8 checkpoint ls %s`", sb->name, label, sb->name);
	spare_drop_label(sb->d, sb, label);     /* its spare goes with it */
	unlink(meta);  /* first: from here on it is not listed */
	rm_rf(dir);
	ckpt_gc_layers(sb);
	return 0;
}

int ckpt_remove(struct daemon *d, struct sandbox *sb, const char *label, struct k8_err *err)
{
	int r;

	if (!label_valid(label))
		return k8_err_set(err, -ENOENT, "no checkpoint '%.80s'", label);
	sb_busy_enter(sb);
	r = remove_locked(sb, label, err);
	sb_busy_leave(sb);
	if (!r)
		daemon_audit(d, "checkpoint.rm", sb->name, json_pack("{s:s}", "label", label));
	return r;
}

/* Wait for a migration to finish; on failure err says QEMU's reason. */
static int wait_migration(struct qmp *q, struct k8_err *err)
{
	uint64_t deadline = now_mono_ns() + (uint64_t)MIGRATE_TIMEOUT_MS * 1000000ull;

	for (;;) {
		json_t *ret = NULL;
		int r = qmp_exec(q, "query-migrate", NULL, &ret, 10000, err);
		if (r)
			return r;
		const char *st = json_string_value(json_object_get(ret, "status"));
		if (st && !strcmp(st, "completed")) {
			json_decref(ret);
			return 0;
		}
		if (st && (!strcmp(st, "failed") || !strcmp(st, "cancelled"))) {
			r = k8_err_set(err, -EIO, "QEMU could not save the machine: %s",
				       json_string_value(json_object_get(ret, "error-desc")) ?: st);
			json_decref(ret);
			return r;
		}
		json_decref(ret);
		if (now_mono_ns() > deadline)
			return k8_err_set(err, -ETIMEDOUT, "saving the machine took too long");
		usleep(5000);
	}
}

/* The block node under the scratch device right now. */
static int scratch_node(struct qmp *q, char *out, size_t n, struct k8_err *err)
{
	json_t *ret = NULL, *it;
	size_t i;
	int r = qmp_exec(q, "query-block", NULL, &ret, 10000, err);

	if (r)
		return r;
	r = k8_err_set(err, -ENOENT, "QEMU shows no scratch disk");
	json_array_foreach(ret, i, it) {
		const char *qdev = json_string_value(json_object_get(it, "qdev"));
		const char *node = json_string_value(
			json_object_get(json_object_get(it, "inserted"), "node-name"));
		if (qdev && strstr(qdev, "scratchdev") && node) {
			snprintf(out, n, "%s", node);
			k8_err_clear(err);
			r = 0;
			break;
		}
	}
	json_decref(ret);
	return r;
}

/* ---- making a checkpoint ----
 *
 * ckpt_create() runs the steps below in order, on one job. Until ckpt_swap_layer() has
 * put the new layer on top nothing is committed, and ckpt_job_end() removes what the
 * steps made; from then on QEMU writes to the new layer, so the checkpoint is recorded
 * whatever happens to the `cont` after it. */

struct ckpt_job {
	struct sandbox *sb;
	const char *label;
	char *final;                    /* checkpoints/<label> */
	char *tmpdir;                   /* checkpoints/.tmp-<label>, renamed to final last */
	bool memfile;                   /* devices + memory (else one migration stream) */
	int state_fd;                   /* the migration stream's file, or the devices' */
	int mem_fd;                     /* the memory file (memfile), else -1 */
	struct memfile_stats mst;
	int tries;                      /* of the memory file (ckpt_save_memfile) */
	int dev_saves;                  /* of the devices' state, and their time */
	uint64_t dev_ns;
	char layer[64];                 /* the new top layer's file name */
	char *layer_path;               /* its path, until QEMU writes to it (then NULL) */
	int layer_fd;
	bool user_paused;               /* `sandbox pause` had stopped the vCPUs: left so */
	bool stopped;                   /* we stopped the vCPUs and owe them a `cont` */
	uint64_t t_stop, t_cont;        /* monotonic: before `stop` .. after `cont` answered */
	off_t size;                     /* of the state file */
	char created[K8_TIME_LEN];
};

/* The label is free and the disk has room for the memory image. */
static int ckpt_check_room(struct ckpt_job *j, struct k8_err *err)
{
	struct sandbox *sb = j->sb;
	cleanup_free char *cdir = xasprintf("%s/checkpoints", sb->dir);
	cleanup_free char *m = xasprintf("%s/meta.json", j->final);
	struct statvfs vfs;

	if (access(m, F_OK) == 0)
		return k8_err_set(err, -EEXIST, "sandbox '%s' already has a checkpoint '%s'; "
				  "remove it first (kosa8 checkpoint rm %s %s) or pick another "
				  "label", sb->name, j->label, sb->name, j->label);
	mkdir_p(cdir, 0700);
	if (statvfs(cdir, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < ((uint64_t)sb->memory_mib + 256) << 20)
		return k8_err_set(err, -ENOSPC, "not enough free disk space under %s for a "
				  "checkpoint of a %d MiB sandbox (%llu MiB free); free some space "
				  "first", cdir, sb->memory_mib,
				  (unsigned long long)(((uint64_t)vfs.f_bavail * vfs.f_frsize) >> 20));
	return 0;
}

/* The files the machine is saved to, in j->tmpdir (made): `state` (a migration stream),
 * or `devices` and `memory` (config.json "checkpoint_memory", read now). */
static int ckpt_state_files(struct ckpt_job *j, struct k8_err *err)
{
	struct sandbox *sb = j->sb;
	cleanup_free char *state = NULL, *mem = NULL;

	j->memfile = daemon_memfile(sb->d, NULL);
	state = xasprintf("%s/%s", j->tmpdir, j->memfile ? "devices" : "state");
	j->state_fd = open(state, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (j->state_fd < 0)
		return k8_err_set(err, -errno, "create %s: %s", state, strerror(errno));
	if (!j->memfile)
		return 0;
	mem = xasprintf("%s/memory", j->tmpdir);
	j->mem_fd = memfile_create(mem, (uint64_t)sb->memory_mib << 20, err);
	return j->mem_fd < 0 ? j->mem_fd : 0;
}

/* Made while the guest still runs: the state files in a fresh temporary directory, and
 * the next top layer, whose header names the current top (by this sandbox's path) and
 * has the sandbox's disk size. */
static int ckpt_make_files(struct ckpt_job *j, struct k8_err *err)
{
	struct sandbox *sb = j->sb;
	int r;

	rm_rf(j->final); /* an interrupted attempt without meta.json */
	j->tmpdir = xasprintf("%s/checkpoints/.tmp-%s", sb->dir, j->label);
	rm_rf(j->tmpdir);
	if ((r = mkdir_p(j->tmpdir, 0700)))
		return k8_err_set(err, r, "mkdir %s: %s", j->tmpdir, strerror(-r));
	if ((r = ckpt_state_files(j, err)))
		return r;
	new_layer_name(j->layer, sizeof(j->layer));
	j->layer_path = xasprintf("%s/%s", sb->dir, j->layer);
	if ((r = make_top(sb, top_of(sb), j->layer_path, err)))
		return r;
	j->layer_fd = open(j->layer_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (j->layer_fd < 0)
		return k8_err_set(err, -errno, "open %s: %s", j->layer_path, strerror(errno));
	return 0;
}

/* Let the guest's file systems reach the disk, so the frozen layer is clean. Best effort:
 * a guest that does not answer is checkpointed as it is. */
static void ckpt_guest_sync(struct sandbox *sb)
{
	json_auto_t *resp = NULL;
	struct k8_err ignored = { 0 };

	link_request(&sb->link, json_pack("{s:s}", "op", "sync"), 30000, &resp, NULL, &ignored);
}

static int ckpt_stop_vcpus(struct ckpt_job *j, struct k8_err *err)
{
	int r;

	j->t_stop = j->t_cont = now_mono_ns();
	if (j->user_paused)
		return 0;
	if ((r = qmp_exec(&j->sb->qmp, "stop", NULL, NULL, 10000, err)))
		return r;
	j->stopped = true;
	return 0;
}

/* A file's bytes (a devices' state: small), for ckpt_save_memfile's comparison. */
static char *ckpt_slurp(int fd, size_t *n)
{
	struct stat st;
	char *b;

	if (fstat(fd, &st) < 0 || st.st_size > (16 << 20) || !(b = malloc((size_t)st.st_size + 1)))
		return NULL;
	if (pread(fd, b, (size_t)st.st_size, 0) != st.st_size) {
		free(b);
		return NULL;
	}
	*n = (size_t)st.st_size;
	return b;
}

static int ckpt_restart_file(int fd)
{
	return ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0 ? 0 : -errno;
}

/* vm_save_devices, counted and timed for the checkpoint's log line. */
static int ckpt_save_devices(struct ckpt_job *j, int fd, bool release_disks,
			     struct k8_err *err)
{
	uint64_t t0 = now_mono_ns();
	int r = vm_save_devices(&j->sb->qmp, fd, release_disks, err);

	j->dev_saves++;
	j->dev_ns += now_mono_ns() - t0;
	return r;
}

/* The devices' state and the memory file, one instant. The vCPUs are stopped, but
 * QEMU's main loop runs (QMP needs it), and a device given input meanwhile (the agent's
 * or the file server's port, host to guest, into buffers the guest posted before it
 * stopped) writes guest memory and moves its own state. So the devices are saved before
 * the copy and again after, and the two must be the same bytes; if not, both again.
 * Then once more to let go of the disks as a migration does before the layer is frozen
 * (vm_save_devices). 0, -EAGAIN after three tries (the caller saves a migration stream
 * instead, which QEMU makes in one piece), or another negative errno. */
static int ckpt_save_memfile(struct ckpt_job *j, struct k8_err *err)
{
	struct sandbox *sb = j->sb;
	struct memfile_src src = { .pid = sb->pid, .size = (uint64_t)sb->memory_mib << 20,
				   .base_fd = sb->mem_fd };
	cleanup_free char *checkp = xasprintf("%s/devices.check", j->tmpdir);
	cleanup_close int check = -1;
	int r;

	if (sb->mem_ino && sb->mem_fd < 0)
		return k8_err_set(err, -ENOENT, "the memory file sandbox '%s' runs on could not be "
				  "found again after the daemon restarted, so its memory cannot be "
				  "saved; stop and start the sandbox, then take the checkpoint",
				  sb->name);
	if ((r = vm_ram_hva(&sb->qmp, &src.hva, err)))
		return r;
	check = open(checkp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (check < 0)
		return k8_err_set(err, -errno, "create %s: %s", checkp, strerror(errno));
	for (j->tries = 1; j->tries <= 3; j->tries++) {
		cleanup_free char *a = NULL, *b = NULL;
		size_t na = 0, nb = 0;

		if ((r = ckpt_restart_file(j->state_fd)) || (r = ckpt_restart_file(check)) ||
		    ftruncate(j->mem_fd, 0) < 0 ||
		    ftruncate(j->mem_fd, (off_t)src.size) < 0)
			return k8_err_set(err, r ?: -errno, "starting the saved files: %s",
					  strerror(r ? -r : errno));
		if ((r = ckpt_save_devices(j, j->state_fd, false, err)) ||
		    (r = memfile_write(&src, j->mem_fd, &j->mst, err)) ||
		    (r = ckpt_save_devices(j, check, false, err)))
			return r;
		a = ckpt_slurp(j->state_fd, &na);
		b = ckpt_slurp(check, &nb);
		if (!a || !b)
			return k8_err_set(err, -EIO, "reading the devices' state back");
		if (na == nb && !memcmp(a, b, na)) {
			r = ckpt_restart_file(check);
			if (!r)
				r = ckpt_save_devices(j, check, true, err);
			unlink(checkp);
			return r;
		}
	}
	unlink(checkp);
	return -EAGAIN;
}

/* A migration stream into state_fd (QEMU's own, all in one piece). */
static int ckpt_save_stream(struct ckpt_job *j, struct k8_err *err)
{
	struct sandbox *sb = j->sb;
	int r;

	if ((r = qmp_exec_fd(&sb->qmp, "getfd", json_pack("{s:s}", "fdname", "ckpt"),
			     j->state_fd, NULL, 10000, err)))
		return r;
	/* Migration is throttled to 128 MiB/s by default (it was made for networks); a
	 * checkpoint goes to a local file with the vCPUs stopped, so no cap. */
	if ((r = qmp_exec(&sb->qmp, "migrate-set-parameters",
			  json_pack("{s:I}", "max-bandwidth", (json_int_t)1 << 40), NULL, 10000, err)))
		return r;
	if ((r = qmp_exec(&sb->qmp, "migrate", json_pack("{s:s}", "uri", "fd:ckpt"), NULL, 10000,
			  err)))
		return r;
	return wait_migration(&sb->qmp, err);
}

/* Memory and devices into the state files (a memory file, or QEMU's migration to an
 * fd), and the file server's tables as the guest's FUSE knows them at this instant.
 * vCPUs stopped. */
static int ckpt_save_state(struct ckpt_job *j, struct k8_err *err)
{
	struct sandbox *sb = j->sb;
	cleanup_free char *devs = NULL, *state = NULL, *mem = NULL;
	int r;

	if (sb->nmounts) {
		cleanup_free char *nodes = xasprintf("%s/fs-nodes.json", j->tmpdir);
		if ((r = fs_save(sb, nodes, err)))
			return r;
	}
	if (!j->memfile)
		return ckpt_save_stream(j, err);
	r = ckpt_save_memfile(j, err);
	if (r != -EAGAIN)
		return r;
	/* Its devices moved under every copy: the one stream QEMU makes in one piece. */
	daemon_log("sandbox %s: its devices took input during all three copies of its memory; "
		   "saving it as a migration stream", sb->name);
	devs = xasprintf("%s/devices", j->tmpdir);
	state = xasprintf("%s/state", j->tmpdir);
	mem = xasprintf("%s/memory", j->tmpdir);
	close(j->mem_fd);
	j->mem_fd = -1;
	j->memfile = false;
	if (unlink(mem) < 0 || rename(devs, state) < 0 || (r = ckpt_restart_file(j->state_fd)))
		return k8_err_set(err, -errno, "saving %s: %s", state, strerror(errno));
	return ckpt_save_stream(j, err);
}

/* Freeze the disk: the new layer, passed as an fd set, goes on top of the current one
 * (blockdev-snapshot), and the old top is the checkpoint's from then on. vCPUs stopped. */
static int ckpt_swap_layer(struct ckpt_job *j, struct k8_err *err)
{
	struct qmp *q = &j->sb->qmp;
	char node[64], newnode[64], fdset[32];
	json_auto_t *added = NULL;
	json_int_t set;
	int r;

	if ((r = scratch_node(q, node, sizeof(node), err)))
		return r;
	/* The node is named after its file ("layer-<hex>"): a daemon adopting this VM
	 * learns the real top layer from it (query-block shows only /dev/fdset/N). */
	snprintf(newnode, sizeof(newnode), "%.*s", (int)(strlen(j->layer) - strlen(".qcow2")),
		 j->layer);
	cleanup_close int rofd = open(j->layer_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	/* Its set holds a read-only fd too, for when the next checkpoint freezes it (QEMU
	 * then reopens it read-only from the set). */
	if ((r = qmp_exec_fd(q, "add-fd", NULL, j->layer_fd, &added, 10000, err)))
		return r;
	set = json_integer_value(json_object_get(added, "fdset-id"));
	snprintf(fdset, sizeof(fdset), "/dev/fdset/%lld", (long long)set);
	if (rofd < 0)
		return k8_err_set(err, -errno, "open %s: %s", j->layer_path, strerror(errno));
	if ((r = qmp_exec_fd(q, "add-fd", json_pack("{s:I}", "fdset-id", set), rofd, NULL,
			     10000, err)))
		return r;
	if ((r = qmp_exec(q, "blockdev-add",
			  json_pack("{s:s,s:s,s:s,s:{s:s,s:s,s:s},s:n}", "driver", "qcow2",
				    "node-name", newnode, "discard", "unmap", "file", "driver",
				    "file", "filename", fdset, "discard", "unmap", "backing"),
			  NULL, 10000, err)))
		return r;
	if ((r = qmp_exec(q, "blockdev-snapshot",
			  json_pack("{s:s,s:s}", "node", node, "overlay", newnode), NULL, 30000,
			  err))) {
		qmp_exec(q, "blockdev-del", json_pack("{s:s}", "node-name", newnode), NULL, 10000,
			 NULL);
		return r;
	}
	free(j->layer_path);            /* QEMU writes to it now: it stays */
	j->layer_path = NULL;
	return 0;
}

/* Let the vCPUs we stopped run again. A failed `cont` is tried once more after 100 ms;
 * if that fails too the vCPUs stay stopped, the sandbox is marked paused and the error
 * says so and what to do (docs/reference/api.md). */
static int ckpt_cont(struct ckpt_job *j, struct k8_err *err)
{
	struct sandbox *sb = j->sb;
	struct k8_err first = { 0 };
	int r;

	if (!j->stopped)
		return 0;
	j->stopped = false;
	r = qmp_exec(&sb->qmp, "cont", NULL, NULL, 10000, &first);
	if (r) {
		usleep(100000);
		r = qmp_exec(&sb->qmp, "cont", NULL, NULL, 10000, NULL);
	}
	j->t_cont = now_mono_ns();
	if (!r)
		return 0;
	pthread_mutex_lock(&sb->lock);
	sb->paused = true;
	pthread_mutex_unlock(&sb->lock);
	daemon_log("sandbox %s: QEMU refused to continue after a checkpoint: %s", sb->name,
		   first.msg);
	return k8_err_set(err, r, "the VM did not continue after the checkpoint (QEMU: %s): "
			  "sandbox '%s' is paused; `kosa8 sandbox resume %s` runs it again, or "
			  "stop and start it", first.msg, sb->name, sb->name);
}

/* Make the checkpoint durable, then visible: the new layer's parent recorded, the state
 * file synced, meta.json written, the directory renamed to its label; then the new
 * layer is the sandbox's top. */
static int ckpt_commit(struct ckpt_job *j, struct k8_err *err)
{
	struct sandbox *sb = j->sb;
	const char *frozen = top_of(sb);
	json_t *imgs = sb_images_json(sb->images, sb->nimages);
	struct stat st;
	int r;

	layers_set(sb->dir, j->layer, frozen);
	fsync(j->state_fd);
	j->size = fstat(j->state_fd, &st) == 0 ? st.st_size : 0;
	if (j->memfile) {               /* what it takes on disk: the holes are free */
		fsync(j->mem_fd);
		j->size += fstat(j->mem_fd, &st) == 0 ? (off_t)st.st_blocks * 512 : 0;
	}
	k8_time_now(j->created, 0);
	json_auto_t *meta = json_pack("{s:i,s:s,s:s,s:I,s:s,s:I,s:i,s:i,s:o}", "version", 1,
				      "label", j->label, "created", j->created, "created_ns",
				      (json_int_t)now_real_ns(), "layer", frozen, "size",
				      (json_int_t)j->size, "memory_mib", sb->memory_mib, "cpus",
				      sb->cpus, "images", imgs);
	/* The machine this state runs on: a restore starts the same (sb_machine_of). */
	pthread_mutex_lock(&sb->lock);
	json_object_set_new(meta, "machine", vm_machine_json(&sb->machine));
	pthread_mutex_unlock(&sb->lock);
	if (j->memfile)                 /* devices + memory (meta_memfile) */
		json_object_set_new(meta, "memory", json_string("file"));
	/* The agent in this memory, for the rewinds of a later kosa8 (meta_agent_check). */
	pthread_mutex_lock(&sb->link.lock);
	if (sb->link.proto)
		json_object_update_new(meta, json_pack("{s:i,s:i,s:i}", "agent_proto",
						       (int)sb->link.proto, "agent_proto_min",
						       (int)sb->link.proto_min, "agent_proto_max",
						       (int)sb->link.proto_max));
	pthread_mutex_unlock(&sb->link.lock);
	r = meta_save(j->tmpdir, meta);
	if (!r && rename(j->tmpdir, j->final) < 0)
		r = -errno;
	if (r)
		return k8_err_set(err, r, "saving checkpoint metadata: %s", strerror(-r));
	free(j->tmpdir);                /* it is the checkpoint now */
	j->tmpdir = NULL;
	pthread_mutex_lock(&sb->lock);
	snprintf(sb->disk, sizeof(sb->disk), "%s", j->layer);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	return 0;
}

/* Ten kept: the eleventh removes the oldest. Its label into removed[], "" if none. */
static void ckpt_rotate(struct ckpt_job *j, char *removed, size_t n)
{
	json_auto_t *list = NULL;
	struct k8_err ignored = { 0 };

	removed[0] = '\0';
	ckpt_list(NULL, j->sb, &list, &ignored);
	if (json_array_size(list) <= K8_MAX_CHECKPOINTS)
		return;
	const char *old = json_string_value(json_object_get(json_array_get(list, 0), "label"));
	if (old && strcmp(old, j->label) && strlen(old) < n) {
		snprintf(removed, n, "%s", old);
		if (remove_locked(j->sb, removed, &ignored))
			removed[0] = '\0';
	}
}

/* Undo what was not committed; a failure leaves the vCPUs running as they were. */
static void ckpt_job_end(struct ckpt_job *j, int r, struct k8_err *err)
{
	struct k8_err ce = { 0 };

	if (j->stopped && ckpt_cont(j, &ce)) {
		char first[sizeof(err->msg)];
		snprintf(first, sizeof(first), "%s", err->msg);
		k8_err_clear(err);
		k8_err_set(err, r, "%s; and %s", first, ce.msg);
	}
	if (j->layer_fd >= 0)
		close(j->layer_fd);
	if (j->layer_path)
		unlink(j->layer_path);
	if (j->state_fd >= 0)
		close(j->state_fd);
	if (j->mem_fd >= 0)
		close(j->mem_fd);
	if (j->tmpdir && r)
		rm_rf(j->tmpdir);
	free(j->layer_path);
	free(j->tmpdir);
	free(j->final);
}

int ckpt_create(struct daemon *d, struct sandbox *sb, const char *label, json_t **out,
		struct k8_err *err)
{
	struct ckpt_job j = { .sb = sb, .label = label, .state_fd = -1, .mem_fd = -1,
			      .layer_fd = -1 };
	char removed[64];
	uint64_t t0 = now_mono_ns(), tf, ts;
	int r, cont_r;

	if (!label_valid(label))
		return k8_err_set(err, -EINVAL, "invalid checkpoint label '%.80s': use 1-63 letters, "
				  "digits, '-', '_' or '.'", label ? label : "");
	if ((r = sb_ensure_running(d, sb, err)))
		return r;
	sb_busy_enter(sb);
	j.final = ckpt_dir(sb, label);
	pthread_mutex_lock(&sb->lock);
	j.user_paused = sb->paused;
	pthread_mutex_unlock(&sb->lock);
	if ((r = ckpt_check_room(&j, err)) || (r = ckpt_make_files(&j, err)))
		goto out;
	tf = now_mono_ns();
	if (!j.user_paused)             /* a paused guest cannot answer */
		ckpt_guest_sync(sb);
	if ((r = ckpt_stop_vcpus(&j, err)) || (r = ckpt_save_state(&j, err)))
		goto out;
	ts = now_mono_ns();
	if ((r = ckpt_swap_layer(&j, err)))
		goto out;
	cont_r = ckpt_cont(&j, err);
	if ((r = ckpt_commit(&j, err)))
		goto out;
	ckpt_rotate(&j, removed, sizeof(removed));
	daemon_audit(d, "checkpoint.create", sb->name,
		     json_pack("{s:s,s:I,s:s?,s:s}", "label", label, "size", (json_int_t)j.size,
			       "removed_oldest", removed[0] ? removed : NULL, "memory",
			       j.memfile ? "file" : "stream"));
	if (j.memfile)
		daemon_log("sandbox %s: checkpoint %s in %llu ms, vCPUs stopped %llu ms: memory "
			   "file %llu MiB written in %llu ms (%llu MiB out of QEMU, %llu MiB of its "
			   "base from the disk; reading %llu ms, writing %llu ms meanwhile), %d %s; "
			   "files and layer %llu ms and guest sync %llu ms before the stop, "
			   "devices saved %d times in %llu ms, layer frozen and cont %llu ms, "
			   "committed %llu ms",
			   sb->name, label, (unsigned long long)((now_mono_ns() - t0) / 1000000),
			   (unsigned long long)((j.t_cont - j.t_stop) / 1000000),
			   (unsigned long long)(j.mst.written >> 20), (unsigned long long)j.mst.ms,
			   (unsigned long long)(j.mst.from_vm >> 20),
			   (unsigned long long)(j.mst.from_disk >> 20),
			   (unsigned long long)j.mst.read_ms, (unsigned long long)j.mst.write_ms,
			   j.tries, j.tries == 1 ? "copy" : "copies",
			   (unsigned long long)((tf - t0) / 1000000),
			   (unsigned long long)((j.t_stop - tf) / 1000000), j.dev_saves,
			   (unsigned long long)(j.dev_ns / 1000000),
			   (unsigned long long)((j.t_cont - ts) / 1000000),
			   (unsigned long long)((now_mono_ns() - j.t_cont) / 1000000));
	if ((r = cont_r))
		goto out;
	*out = json_pack("{s:s,s:s,s:I,s:I,s:I,s:s}", "label", label, "created", j.created,
			 "size", (json_int_t)j.size, "ms",
			 (json_int_t)((now_mono_ns() - t0) / 1000000), "pause_ms",
			 (json_int_t)((j.t_cont - j.t_stop) / 1000000), "memory",
			 j.memfile ? "file" : "stream");
	if (removed[0])
		json_object_set_new(*out, "removed", json_string(removed));
out:
	ckpt_job_end(&j, r, err);
	sb_busy_leave(sb);
	return r;
}

/* Today's rewind, and the fallback of one through a spare: the VM killed, a new top
 * layer over the frozen one, a QEMU with -incoming from the state file. Caller holds the
 * busy token. Its new top layer's name goes to `layer`. */
static int rewind_cold(struct daemon *d, struct sandbox *sb, const char *label,
		       const char *frozen, json_t *meta, char *layer, size_t n,
		       struct sb_connect *conn, struct k8_err *err)
{
	cleanup_free char *top = NULL, *cdir = ckpt_dir(sb, label);
	struct vm_image saved[K8_MAX_SLOTS];
	cleanup_close int kfd = -1, ifd = -1, sfd = -1, mfd = -1;
	int nsaved, r;
	int mem = (int)json_integer_value(json_object_get(meta, "memory_mib")) ?: sb->memory_mib;
	uint64_t t0 = now_mono_ns(), tf, t1, t2, t3;
	pid_t pid = 0;

	if ((r = guest_verify_open(&d->guest, &kfd, &ifd, err)))
		return r;
	nsaved = sb_images_from_json(json_object_get(meta, "images"), saved);
	if ((r = sb_saved_open(cdir, meta_memfile(meta), mem, &sfd, &mfd, err)))
		return r;
	tf = now_mono_ns();
	/* The old machine goes; its top layer is garbage unless a checkpoint needs it. Its
	 * sidecars stay: kosa8-net keeps its counts, kosa8-fs takes the checkpoint's tables. */
	pthread_mutex_lock(&sb->lock);
	sb_discard_qemu(d, sb);
	sb->state = SB_BOOTING;
	pthread_mutex_unlock(&sb->lock);
	t1 = now_mono_ns();

	new_layer_name(layer, n);
	top = xasprintf("%s/%s", sb->dir, layer);
	if ((r = make_top(sb, frozen, top, err)))
		return r;
	layers_set(sb->dir, layer, frozen);
	t2 = now_mono_ns();

	pthread_mutex_lock(&sb->lock);
	memcpy(sb->images, saved, sizeof(saved));
	sb->nimages = nsaved;
	sb->memory_mib = mem;
	sb->cpus = (int)json_integer_value(json_object_get(meta, "cpus")) ?: sb->cpus;
	pthread_mutex_unlock(&sb->lock);
	if ((r = sb_spawn_restored(d, sb, cdir, layer, top, kfd, ifd, sfd, mfd, false, &pid,
				   err)))
		return r;
	t3 = now_mono_ns();
	daemon_log("sandbox %s: cold rewind to %s: files %llu ms, old VM ended %llu ms, top layer "
		   "%llu ms, QEMU spawned %llu ms (%s)", sb->name, label,
		   (unsigned long long)((tf - t0) / 1000000),
		   (unsigned long long)((t1 - tf) / 1000000),
		   (unsigned long long)((t2 - t1) / 1000000),
		   (unsigned long long)((t3 - t2) / 1000000), mfd >= 0 ? "memory file" : "stream");
	/* Up to the machine running and its agent greeted; the caller has the rest done. */
	return sb_connect_vm_start(d, sb, pid, true, conn, err);
}

/* After a rewind's guest is ready: the layers no checkpoint needs go, then the next
 * spare is prepared, in the background. */
static void rewind_then(struct sb_behind *b)
{
	ckpt_gc_layers(b->sb);
	spare_after_rewind(b->d, b->sb, b->label);
}

/* Does meta.json name the agent's protocol range? Then the restored agent is one this
 * kosa8d speaks (meta_agent_check), and the rewind may answer before its HELLO. Without
 * it (a checkpoint of before the handshake, or an edited meta.json) the HELLO is
 * checked before the answer, so a mismatch fails the rewind itself (test_61). */
static bool meta_agent_known(const json_t *meta)
{
	return json_object_get(meta, "agent_proto_max") != NULL;
}

int ckpt_rewind(struct daemon *d, struct sandbox *sb, const char *label, json_t **out,
		struct k8_err *err)
{
	char layer[64];
	json_auto_t *meta = NULL;
	const char *frozen;
	int r;
	bool spare = false, behind;
	struct sb_behind *bg = NULL;
	uint64_t t0 = now_mono_ns(), tl, t1, t2, t3;

	if (!label_valid(label) || !(meta = meta_load(sb, label)))
		return k8_err_set(err, -ENOENT, "sandbox '%s' has no checkpoint '%.80s'; list them "
				  "with `kosa8 checkpoint ls %s`", sb->name, label ? label : "",
				  sb->name);
	frozen = json_string_value(json_object_get(meta, "layer"));
	if (!frozen || strchr(frozen, '/'))
		return k8_err_set(err, -EINVAL, "checkpoint '%s' has a damaged meta.json", label);
	if ((r = meta_usable(meta, sb, label, err))) {
		daemon_audit(d, "checkpoint.rewind.refused", sb->name,
			     json_pack("{s:s,s:s}", "label", label, "error", err->msg));
		return r;
	}

	sb_busy_enter(sb);
	/* Through the spare when one of this label is ready (spare.c); else cold. Either
	 * answers once the machine runs and the records are written; the guest's HELLO and
	 * init run after, on a thread of its own (sb_connect_behind), and every request to
	 * the agent waits for them (sb_wait_connected). A cold rewind to a checkpoint whose
	 * meta.json does not name its agent's protocol waits for them before it answers. */
	bg = xcalloc(1, sizeof(*bg));
	sb_connecting(sb, true);
	r = spare_take(d, sb, label, layer, sizeof(layer), &bg->conn, err);
	tl = now_mono_ns();
	if (r == 0) {
		spare = true;
		layers_set(sb->dir, layer, frozen);
	} else if (r == -EAGAIN) {
		k8_err_clear(err);
		r = rewind_cold(d, sb, label, frozen, meta, layer, sizeof(layer), &bg->conn, err);
		tl = now_mono_ns();     /* rewind_cold wrote layers.json before QEMU */
	}
	behind = spare || meta_agent_known(meta);
	if (!r && !behind) {
		r = sb_connect_vm_finish(d, sb, &bg->conn, err);
		sb_connecting(sb, false);
	}
	if (r)
		sb_connecting(sb, false);
	if (r == -EPROTONOSUPPORT)   /* the agent in memory is not the one meta.json named */
		k8_err_wrap(err, "checkpoint '%s' holds an agent this kosa8 cannot talk to; the "
			    "sandbox is stopped and boots its disk as it was before the rewind "
			    "when next used", label);
	if (r)
		goto fail;
	t1 = now_mono_ns();
	pthread_mutex_lock(&sb->lock);
	snprintf(sb->disk, sizeof(sb->disk), "%s", layer);
	sb->state = SB_RUNNING;
	sb->error[0] = '\0';
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	t2 = now_mono_ns();
	if (!behind)                    /* else after the guest's init (rewind_then) */
		ckpt_gc_layers(sb);
	{
		char *pd = xasprintf("%s/paused", sb->dir);  /* a rewind of one paused to disk */
		rm_rf(pd);
		free(pd);
	}
	t3 = now_mono_ns();
	json_int_t ms = (json_int_t)((t3 - t0) / 1000000);
	*out = json_pack("{s:s,s:I,s:b}", "label", label, "ms", ms, "spare", spare);
	daemon_audit(d, "checkpoint.rewind", sb->name,
		     json_pack("{s:s,s:I,s:b}", "label", label, "ms", ms, "spare", spare));
	daemon_log("sandbox %s: rewind to %s recorded: layers.json %llu ms, sandbox.json %llu "
		   "ms, layer gc %llu ms, audit %llu ms", sb->name, label,
		   (unsigned long long)((t1 - tl) / 1000000),
		   (unsigned long long)((t2 - t1) / 1000000),
		   (unsigned long long)((t3 - t2) / 1000000),
		   (unsigned long long)((now_mono_ns() - t3) / 1000000));
	if (behind) {
		bg->d = d;
		bg->sb = sb;
		snprintf(bg->what, sizeof(bg->what), "rewind to %s", label);
		snprintf(bg->label, sizeof(bg->label), "%s", label);
		bg->fail_action = "checkpoint.rewind.failed";
		bg->fail_detail = json_pack("{s:s,s:b}", "label", label, "spare", spare);
		bg->then = rewind_then;
		sb_connect_behind(bg);  /* it leaves the busy token */
		return 0;
	}
	spare_after_rewind(d, sb, label);       /* the next one, in the background */
	goto out;
fail:
	pthread_mutex_lock(&sb->lock);
	if (sb->state == SB_RUNNING && sb->pid > 0) {   /* failed before the VM went */
		pthread_mutex_unlock(&sb->lock);
		goto out;
	}
	sb->state = SB_FAILED;
	snprintf(sb->error, sizeof(sb->error), "rewind to %s failed: %s", label, err->msg);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	daemon_audit(d, "checkpoint.rewind.failed", sb->name,
		     json_pack("{s:s,s:s,s:b}", "label", label, "error", err->msg, "spare", spare));
out:
	free(bg);
	sb_busy_leave(sb);
	return r;
}

/* ---- pause ----
 *
 * In memory: the vCPUs stop (QMP `stop`) and QEMU keeps every byte. To disk (the
 * default): the vCPUs stop, memory and devices go to paused/state by the same migration
 * a checkpoint uses (and kosa8-fs's tables to paused/fs-nodes.json), then QEMU ends. The
 * disk stays on the current top layer: nothing writes it while QEMU is stopped, and the
 * completed migration has flushed it, so no layer is frozen. The sidecars stay, as in a
 * rewind (egress counts, pinned names, open files); a daemon that stops, or a host that
 * reboots, ends them, and the resume starts new ones with the saved tables. sandbox.json
 * says "paused" from the moment paused/state is complete, so a daemon killed at any
 * point finds either a VM to adopt or a state to resume. A resume is a restore
 * (sandbox.c, sb_resume_paused, which any use reaches through sb_ensure_running): QEMU
 * with -incoming from paused/state, the agent greeted, its clock set and its RNG given
 * host entropy as after a rewind (sb_connect_vm); then paused/ is removed. */

static char *paused_dir(struct sandbox *sb)
{
	return xasprintf("%s/paused", sb->dir);
}

/* Save the running (or in-memory paused) VM of sb to paused/ and end QEMU. Caller holds
 * the busy token. On failure the VM runs on as it was. */
static int pause_to_disk(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	struct ckpt_job j = { .sb = sb, .label = "paused", .state_fd = -1, .mem_fd = -1,
			      .layer_fd = -1 };
	cleanup_free char *final = paused_dir(sb);
	struct statvfs vfs;
	int r;

	if (statvfs(sb->dir, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < ((uint64_t)sb->memory_mib + 256) << 20)
		return k8_err_set(err, -ENOSPC, "not enough free disk space under %s to pause a "
				  "%d MiB sandbox to disk; free some space, or pause it with "
				  "--in-memory", sb->dir, sb->memory_mib);
	j.tmpdir = xasprintf("%s/.tmp-paused", sb->dir);
	rm_rf(j.tmpdir);
	rm_rf(final);                   /* left by a resume that failed */
	if ((r = mkdir_p(j.tmpdir, 0700))) {
		k8_err_set(err, r, "mkdir %s: %s", j.tmpdir, strerror(-r));
		goto out;
	}
	if ((r = ckpt_state_files(&j, err)))
		goto out;
	pthread_mutex_lock(&sb->lock);
	j.user_paused = sb->paused;
	pthread_mutex_unlock(&sb->lock);
	spare_drop(d, sb);              /* a sandbox on disk holds no host memory */
	if ((r = ckpt_stop_vcpus(&j, err)) || (r = ckpt_save_state(&j, err)))
		goto out;
	if (fsync(j.state_fd) < 0 || (j.memfile && fsync(j.mem_fd) < 0) ||
	    rename(j.tmpdir, final) < 0) {
		r = k8_err_set(err, -errno, "saving %s: %s", final, strerror(errno));
		goto out;
	}
	free(j.tmpdir);
	j.tmpdir = NULL;
	j.stopped = false;              /* from here QEMU goes; nothing to continue */
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_PAUSED;
	sb_save(sb);                    /* "paused" before QEMU goes (see above) */
	sb_kill_qemu(d, sb);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
out:
	ckpt_job_end(&j, r, err);
	return r;
}

static int pause_in_memory(struct sandbox *sb, bool pause, struct k8_err *err)
{
	int r = qmp_exec(&sb->qmp, pause ? "stop" : "cont", NULL, NULL, 10000, err);

	if (r)
		return r;
	pthread_mutex_lock(&sb->lock);
	sb->paused = pause;
	pthread_mutex_unlock(&sb->lock);
	if (!pause)
		sb_guest_clock(sb);     /* time went on outside: tell the guest */
	return 0;
}

int sb_pause(struct daemon *d, struct sandbox *sb, bool pause, bool in_memory, json_t **out,
	     struct k8_err *err)
{
	uint64_t t0 = now_mono_ns();
	const char *where = "memory";
	int r = 0;

	sb_busy_enter(sb);
	if (sb->state == SB_PAUSED) {
		/* On disk already: a pause has nothing to do, a resume restores. */
		where = "disk";
		if (!pause)
			r = sb_resume_paused(d, sb, "resume", true, err);
		if (pause || r)         /* a resume's init took the token (sb_connect_behind) */
			sb_busy_leave(sb);
		if (!r)
			*out = json_pack("{s:s,s:I}", pause ? "to" : "from", where, "ms",
					 (json_int_t)((now_mono_ns() - t0) / 1000000));
		return r;
	}
	sb_busy_leave(sb);
	if ((r = sb_ensure_running(d, sb, err)))
		return r;
	sb_busy_enter(sb);
	if (pause && !in_memory) {
		where = "disk";
		r = pause_to_disk(d, sb, err);
	} else {
		r = pause_in_memory(sb, pause, err);
	}
	sb_busy_leave(sb);
	if (r)
		return r;
	json_int_t ms = (json_int_t)((now_mono_ns() - t0) / 1000000);
	daemon_audit(d, pause ? "sandbox.pause" : "sandbox.resume", sb->name,
		     json_pack("{s:s,s:I}", pause ? "to" : "from", where, "ms", ms));
	*out = json_pack("{s:s,s:I}", pause ? "to" : "from", where, "ms", ms);
	return 0;
}

int sb_pause_idle(struct daemon *d, struct sandbox *sb, bool (*still_idle)(struct sandbox *),
		  struct k8_err *err)
{
	uint64_t t0 = now_mono_ns();
	bool idle;
	int r;

	sb_busy_enter(sb);
	pthread_mutex_lock(&sb->lock);
	idle = still_idle(sb);
	pthread_mutex_unlock(&sb->lock);
	r = idle ? pause_to_disk(d, sb, err) : 0;
	sb_busy_leave(sb);
	if (!idle || r)
		return r;
	daemon_audit(d, "sandbox.pause", sb->name,
		     json_pack("{s:s,s:s,s:I}", "to", "disk", "by", "idle", "ms",
			       (json_int_t)((now_mono_ns() - t0) / 1000000)));
	return 1;
}

/* A fork's own name for the memory file its first VM maps (SB_FORK_MEMORY, a hard link),
 * and *mfd opened through it (so the fork's QEMU holds none of its source's names): the
 * source's `rm --wipe` leaves a file linked elsewhere, and the fork does not depend on
 * the source's checkpoint staying. */
static int ckpt_fork_memory(struct sandbox *src, const char *label, struct sandbox *sb,
			    int *mfd, struct k8_err *err)
{
	cleanup_free char *from = xasprintf("%s/checkpoints/%s/memory", src->dir, label);
	cleanup_free char *to = xasprintf("%s/%s", sb->dir, SB_FORK_MEMORY);
	int fd;

	unlink(to);
	if (link(from, to) < 0)
		return k8_err_set(err, -errno, "link %s: %s", to, strerror(errno));
	if ((fd = memfile_open(to, (uint64_t)sb->memory_mib << 20, err)) < 0)
		return fd;
	close(*mfd);
	*mfd = fd;
	return 0;
}

/* ckpt_fork's first step: the fork's machine from the checkpoint's meta.json, its
 * source's network policy and shared folders (checked again: the daemon's --allow-mount
 * roots may have changed since), the checkpoint's images. */
static int ckpt_fork_settings(struct daemon *d, struct sandbox *src, struct sandbox *sb,
			      json_t *meta, struct k8_err *err)
{
	sb->cpus = (int)json_integer_value(json_object_get(meta, "cpus")) ?: src->cpus;
	sb->memory_mib = (int)json_integer_value(json_object_get(meta, "memory_mib")) ?: src->memory_mib;
	sb->disk_gb = src->disk_gb;
	sb->forked = true;
	pthread_mutex_lock(&src->lock);
	snprintf(sb->egress_mode, sizeof(sb->egress_mode), "%s", src->egress_mode);
	json_decref(sb->egress_rules);
	sb->egress_rules = json_deep_copy(src->egress_rules);
	memcpy(sb->mounts, src->mounts, sizeof(sb->mounts));
	sb->nmounts = src->nmounts;
	pthread_mutex_unlock(&src->lock);
	sb->nimages = sb_images_from_json(json_object_get(meta, "images"), sb->images);
	return mounts_recheck(d, sb->mounts, sb->nmounts, err);
}

/* ckpt_fork's second step, with the source's checkpoint held: its saved machine opened
 * (*sfd, *mfd), the fork's directory, image slots and broker rules, and links to the
 * checkpoint's frozen layers and memory file. */
static int ckpt_fork_files(struct daemon *d, struct sandbox *src, const char *label,
			   const char *frozen, json_t *meta, struct sandbox *sb, int *sfd,
			   int *mfd, struct k8_err *err)
{
	cleanup_free char *cdir = ckpt_dir(src, label);
	cleanup_free char *own = xasprintf("%s/scratch.qcow2", sb->dir);
	int r;

	if ((r = sb_saved_open(cdir, meta_memfile(meta), sb->memory_mib, sfd, mfd, err)))
		return r;
	if ((r = mkdir_p(sb->dir, 0700)))
		return k8_err_set(err, r, "mkdir %s: %s", sb->dir, strerror(-r));
	/* Its own image slots (a scratch disk too, replaced by the link below). */
	if ((r = vm_make_disks(d->home, sb->dir, sb->disk_gb, err)))
		return r;
	/* The source's broker rules, a placeholder of its own (the source's is refused). */
	if ((r = broker_fork(src, sb, err)))
		return r;
	unlink(own);
	if ((r = layers_link(src->dir, sb->dir, frozen, err)))
		return r;
	if (*mfd >= 0 && (r = ckpt_fork_memory(src, label, sb, mfd, err)))
		return r;
	return 0;
}

/* Fork. The checkpoint's layers are frozen (nothing writes them again), so the new
 * sandbox gets hard links to them under the same names, its own layers.json, and its
 * own empty top: N forks cost only their own writes, and removing the source (or its
 * checkpoint) leaves every fork whole. The linked files' qcow2 headers still name the
 * source's paths, and changing them would change the source's (same inode): a fork's
 * QEMU is given its backing chain explicitly instead (sandbox.json "forked"). Memory
 * comes from the checkpoint's state file, as in a rewind; the guest is then greeted,
 * its clock set, its RNG reseeded and its hostname set to the new name. */
int ckpt_fork(struct daemon *d, struct sandbox *src, const char *label, const char *name,
	      json_t **out, struct k8_err *err)
{
	cleanup_free char *top = NULL, *cdir = ckpt_dir(src, label ? label : "");
	char layer[64];
	json_auto_t *meta = NULL;
	const char *frozen;
	struct sandbox *sb = NULL;
	cleanup_close int kfd = -1, ifd = -1, sfd = -1, mfd = -1;
	int r;
	uint64_t t0 = now_mono_ns(), tfiles = 0, ttop = 0, tspawn = 0;
	bool src_busy = false;
	pid_t pid = 0;

	if (!label || !label_valid(label))
		return k8_err_set(err, -EINVAL, "which checkpoint? give --from LABEL (list them with "
				  "`kosa8 checkpoint ls %s`)", src->name);
	if (!name)
		return k8_err_set(err, -EINVAL, "a name for the new sandbox is required (--name)");
	if (!d->guest.kernel[0])
		return k8_err_set(err, -ENOENT,
				  "the guest image is missing, so no VM can boot; build it with `make`");
	if ((r = guest_verify_open(&d->guest, &kfd, &ifd, err)))
		return r;
	if (!(sb = sb_reserve(d, name, err))) {
		r = err->code ? err->code : -EEXIST;
		goto out;
	}
	/* The source's checkpoint must not go while its layers are linked. */
	sb_busy_enter(src);
	src_busy = true;
	if (!(meta = meta_load(src, label))) {
		r = k8_err_set(err, -ENOENT, "sandbox '%s' has no checkpoint '%s'; list them with "
			       "`kosa8 checkpoint ls %s`", src->name, label, src->name);
		goto fail;
	}
	frozen = json_string_value(json_object_get(meta, "layer"));
	if (!frozen || strchr(frozen, '/')) {
		r = k8_err_set(err, -EINVAL, "checkpoint '%s' has a damaged meta.json", label);
		goto fail;
	}
	if ((r = meta_usable(meta, src, label, err)))
		goto fail;
	if ((r = ckpt_fork_settings(d, src, sb, meta, err)) ||
	    (r = ckpt_fork_files(d, src, label, frozen, meta, sb, &sfd, &mfd, err)))
		goto fail;
	sb_busy_leave(src);
	src_busy = false;
	tfiles = now_mono_ns();

	new_layer_name(layer, sizeof(layer));
	top = xasprintf("%s/%s", sb->dir, layer);
	layers_set(sb->dir, layer, frozen);
	if ((r = make_top(sb, frozen, top, err)))
		goto fail;
	snprintf(sb->disk, sizeof(sb->disk), "%s", layer);
	pthread_mutex_lock(&sb->lock);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	ttop = now_mono_ns();

	r = sb_spawn_restored(d, sb, cdir, layer, top, kfd, ifd, sfd, mfd, true, &pid, err);
	if (r)
		goto fail;
	tspawn = now_mono_ns();
	daemon_log("sandbox %s: fork of %s at %s: files %llu ms (disks, broker, links), top layer "
		   "%llu ms, sidecars and QEMU spawned %llu ms (%s)", sb->name, src->name, label,
		   (unsigned long long)((tfiles - t0) / 1000000),
		   (unsigned long long)((ttop - tfiles) / 1000000),
		   (unsigned long long)((tspawn - ttop) / 1000000),
		   mfd >= 0 ? "memory file" : "stream");
	if ((r = sb_connect_vm(d, sb, pid, true, err)))
		goto fail;
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_RUNNING;
	sb->boot_ms = (now_mono_ns() - t0) / 1000000;
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	daemon_audit(d, "sandbox.fork", sb->name,
		     json_pack("{s:s,s:s,s:s,s:I}", "from", src->name, "label", label, "name",
			       sb->name, "ms", (json_int_t)sb->boot_ms));
	sb_busy_leave(sb);
	*out = sb_to_json(sb, false);
	json_object_set_new(*out, "forked_from",
			    json_pack("{s:s,s:s}", "sandbox", src->name, "checkpoint", label));
	json_object_set_new(*out, "ms", json_integer((json_int_t)sb->boot_ms));
	sb_put(d, sb);
	r = 0;
	goto out;
fail:
	if (src_busy)
		sb_busy_leave(src);
	daemon_audit(d, "sandbox.fork.failed", name,
		     json_pack("{s:s,s:s,s:s}", "from", src->name, "label", label, "error", err->msg));
	sb_unreserve(d, sb);
out:
	return r;
}

/* ---- API: checkpoints, rewind, fork, pause and resume (api.h; the table is in api.c).
 * Pause lives here: a paused VM is the first half of a checkpoint. ---- */

/* Labels and sandbox names are short; the functions below check their grammar. */
#define CKPT_API_NAME_MAX 255

/* Run `op` on the sandbox the path names, holding a user reference. */
static int ckpt_api_on(struct api_call *call,
		       int (*op)(struct api_call *call, struct sandbox *sb))
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);
	int r;

	if (!sb)
		return call->err.code;
	r = op(call, sb);
	sb_put(call->d, sb);
	return r;
}

static int ckpt_op_create(struct api_call *call, struct sandbox *sb)
{
	const char *label = NULL;       /* none: the daemon picks one */
	const char *to;
	int r;

	if (api_body_str(call, "label", API_OPTIONAL, CKPT_API_NAME_MAX, &label))
		return call->err.code;
	r = ckpt_create(call->d, sb, label, &call->out, &call->err);
	if (!r && call->d->after_checkpoint &&
	    (to = call->d->after_checkpoint(call->d, sb,
					    json_string_value(json_object_get(call->out, "label")))))
		json_object_set_new(call->out, "pushing_to", json_string(to));
	return r;
}

static int ckpt_op_list(struct api_call *call, struct sandbox *sb)
{
	return ckpt_list(call->d, sb, &call->out, &call->err);
}

static int ckpt_op_rm(struct api_call *call, struct sandbox *sb)
{
	return ckpt_remove(call->d, sb, api_param(call, "label"), &call->err);
}

static int ckpt_op_rewind(struct api_call *call, struct sandbox *sb)
{
	const char *to = NULL;

	if (api_body_str(call, "to", API_OPTIONAL, CKPT_API_NAME_MAX, &to))
		return call->err.code;
	return ckpt_rewind(call->d, sb, to, &call->out, &call->err);
}

static int ckpt_op_fork(struct api_call *call, struct sandbox *sb)
{
	const char *from = NULL, *name = NULL;

	if (api_body_str(call, "from", API_OPTIONAL, CKPT_API_NAME_MAX, &from) ||
	    api_body_str(call, "name", API_OPTIONAL, CKPT_API_NAME_MAX, &name))
		return call->err.code;
	return ckpt_fork(call->d, sb, from, name, &call->out, &call->err);
}

/* {"in_memory": true}: only the vCPUs stop (docs/reference/api.md); else the machine goes to
 * disk. */
static int ckpt_op_pause(struct api_call *call, struct sandbox *sb)
{
	bool in_memory = false;

	if (api_body_bool(call, "in_memory", API_OPTIONAL, &in_memory))
		return call->err.code;
	return sb_pause(call->d, sb, true, in_memory, &call->out, &call->err);
}

static int ckpt_op_resume(struct api_call *call, struct sandbox *sb)
{
	return sb_pause(call->d, sb, false, false, &call->out, &call->err);
}

int ckpt_api_create(struct api_call *call) { return ckpt_api_on(call, ckpt_op_create); }
int ckpt_api_list(struct api_call *call) { return ckpt_api_on(call, ckpt_op_list); }
int ckpt_api_rm(struct api_call *call) { return ckpt_api_on(call, ckpt_op_rm); }
int ckpt_api_rewind(struct api_call *call) { return ckpt_api_on(call, ckpt_op_rewind); }
int ckpt_api_fork(struct api_call *call) { return ckpt_api_on(call, ckpt_op_fork); }
int ckpt_api_pause(struct api_call *call) { return ckpt_api_on(call, ckpt_op_pause); }
int ckpt_api_resume(struct api_call *call) { return ckpt_api_on(call, ckpt_op_resume); }

/* ---- portable snapshots: a checkpoint, or a sandbox paused to disk, as files another
 * host rebuilds it from (store.c moves them; docs/stores.md). This file knows what a
 * checkpoint is on disk, so the list of its files and their names in a snapshot live
 * here:
 *   state/devices, state/memory  the saved machine (a memory file and its devices), or
 *   state/state                  one migration stream (an older checkpoint)
 *   disk/<layer>                 each disk layer of the chain, the top first, the root
 *                                (scratch.qcow2) last
 *   images/<sha256 hex>.erofs    each image's disk, as the guest had it mounted
 * and a settings object (ckpt_settings_read): sizes, the machine, the memory's kind, the
 * layer chain by name, the agent's protocol range, the egress policy. ---- */

static bool layer_name_ok(const char *l)
{
	size_t n = strlen(l);

	if (!strcmp(l, LAYERS_ROOT))
		return true;
	return n > 12 && n <= 6 + 16 + 6 && !strncmp(l, "layer-", 6) &&
	       !strcmp(l + n - 6, ".qcow2") && strspn(l + 6, "0123456789abcdef") == n - 12;
}

static bool image_digest_ok(const char *d)
{
	return !strncmp(d, "sha256:", 7) && strlen(d) == 71 &&
	       strspn(d + 7, "0123456789abcdef") == 64;
}

char *ckpt_snapshot_local(const char *dir, const char *label, const char *path)
{
	if (!strncmp(path, "state/", 6)) {
		const char *f = path + 6;
		if (strcmp(f, "devices") && strcmp(f, "memory") && strcmp(f, "state"))
			return NULL;
		return label ? xasprintf("%s/checkpoints/%s/%s", dir, label, f) :
			       xasprintf("%s/paused/%s", dir, f);
	}
	if (!strncmp(path, "disk/", 5) && layer_name_ok(path + 5))
		return xasprintf("%s/%s", dir, path + 5);
	if (!strncmp(path, "images/", 7) && strlen(path) == 7 + 64 + 6 &&
	    strspn(path + 7, "0123456789abcdef") == 64 && !strcmp(path + 71, ".erofs"))
		return xasprintf("%s/%s", dir, path);
	return NULL;
}

static int export_add(struct ckpt_export *ex, const char *spath, const char *local,
		      struct k8_err *err)
{
	struct ckpt_xfile *f;
	struct stat st;
	int fd;

	if (ex->nfiles >= CKPT_X_FILES)
		return k8_err_set(err, -E2BIG, "more than %d files to carry", CKPT_X_FILES);
	fd = open(local, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int e = fd < 0 || errno ? errno : EINVAL;
		if (fd >= 0)
			close(fd);
		return k8_err_set(err, -e, "open %s: %s", local, strerror(e));
	}
	f = &ex->files[ex->nfiles++];
	snprintf(f->path, sizeof(f->path), "%s", spath);
	f->fd = fd;
	f->mode = st.st_mode & 0777;
	f->size = (uint64_t)st.st_size;
	return 0;
}

void ckpt_export_end(struct ckpt_export *ex)
{
	for (int i = 0; i < ex->nfiles; i++)
		if (ex->files[i].fd >= 0)
			close(ex->files[i].fd);
	ex->nfiles = 0;
	json_decref(ex->settings);
	ex->settings = NULL;
	if (ex->held)
		sb_busy_leave(ex->held);
	ex->held = NULL;
}

/* ckpt_export's files: the saved machine in `statedir`, the disk from `top` down to its
 * root (each layer's name into `jchain`), the images' disks (their `disk` becomes the
 * snapshot's path). 0 or -errno with err. */
static int export_files(struct ckpt_export *ex, struct sandbox *sb, const char *statedir,
			bool memfile, const char *top, json_t *jchain, struct k8_err *err)
{
	static const char *const mf[] = { "devices", "memory" }, *const st[] = { "state" };
	const char *const *names = memfile ? mf : st;
	char **chain = NULL;
	int nchain, r = 0;

	/* the saved machine */
	for (int i = 0; i < (memfile ? 2 : 1) && !r; i++) {
		cleanup_free char *spath = xasprintf("state/%s", names[i]);
		cleanup_free char *local = xasprintf("%s/%s", statedir, names[i]);
		r = export_add(ex, spath, local, err);
	}
	/* the disk: the top (or the checkpoint's frozen layer), then what it sits on */
	{
		cleanup_free char *spath = xasprintf("disk/%s", top);
		cleanup_free char *local = xasprintf("%s/%s", sb->dir, top);
		if (!r)
			r = export_add(ex, spath, local, err);
		json_array_append_new(jchain, json_string(top));
	}
	nchain = layers_chain(sb->dir, top, &chain);
	for (int i = 0; i < nchain && !r; i++) {
		const char *name = strrchr(chain[i], '/') + 1;
		cleanup_free char *spath = xasprintf("disk/%s", name);
		if (!layer_name_ok(name)) {
			r = k8_err_set(err, -EINVAL, "sandbox '%s' has a layer '%s' kosa8 did not "
				       "name", sb->name, name);
			break;
		}
		r = export_add(ex, spath, chain[i], err);
		json_array_append_new(jchain, json_string(name));
	}
	layers_chain_free(chain, nchain);
	/* the images' disks, as the guest has them mounted */
	for (int i = 0; i < ex->nimages && !r; i++) {
		cleanup_free char *spath = NULL;
		if (!image_digest_ok(ex->images[i].digest)) {
			r = k8_err_set(err, -EINVAL, "image %s has no sha256 digest", ex->images[i].ref);
			break;
		}
		spath = xasprintf("images/%s.erofs", ex->images[i].digest + 7);
		bool seen = false;
		for (int k = 0; k < ex->nfiles; k++)
			seen |= !strcmp(ex->files[k].path, spath);
		if (!seen)
			r = export_add(ex, spath, ex->images[i].disk, err);
		snprintf(ex->images[i].disk, sizeof(ex->images[i].disk), "%s", spath);
	}
	return r;
}

/* ckpt_export's settings: the machine's size and kind, its disk chain (`jchain`, taken),
 * its egress policy, and the agent's protocol (the checkpoint's, or the running link's
 * for a pause). */
static void export_settings(struct ckpt_export *ex, struct sandbox *sb, json_t *meta,
			    bool memfile, const char *top, json_t *jchain)
{
	pthread_mutex_lock(&sb->lock);
	ex->settings = json_pack("{s:i,s:i,s:i,s:s,s:s,s:o,s:s,s:O}", "cpus",
				 meta ? (int)json_integer_value(json_object_get(meta, "cpus")) ?: sb->cpus
				      : sb->cpus,
				 "memory_mib",
				 meta ? (int)json_integer_value(json_object_get(meta, "memory_mib")) ?:
					sb->memory_mib : sb->memory_mib,
				 "disk_gb", sb->disk_gb, "memory", memfile ? "file" : "stream", "layer",
				 top, "chain", jchain, "egress", sb->egress_mode, "egress_allow",
				 sb->egress_rules);
	json_object_set_new(ex->settings, "machine",
			    meta && json_object_get(meta, "machine") ?
			    json_deep_copy(json_object_get(meta, "machine")) :
			    vm_machine_json(&sb->machine));
	pthread_mutex_unlock(&sb->lock);
	if (meta) {
		static const char *const keep[] = { "agent_proto", "agent_proto_min",
						    "agent_proto_max", "created" };
		for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
			if (json_object_get(meta, keep[i]))
				json_object_set(ex->settings, keep[i], json_object_get(meta, keep[i]));
	} else {
		pthread_mutex_lock(&sb->link.lock);
		if (sb->link.proto_min)
			json_object_update_new(ex->settings,
					       json_pack("{s:i,s:i}", "agent_proto_min",
							 (int)sb->link.proto_min, "agent_proto_max",
							 (int)sb->link.proto_max));
		pthread_mutex_unlock(&sb->link.lock);
	}
}

int ckpt_export(struct daemon *d, struct sandbox *sb, const char *label,
		struct ckpt_export *ex, struct k8_err *err)
{
	cleanup_free char *statedir = NULL;
	json_auto_t *meta = NULL;
	json_t *jchain;
	const char *top;
	int r = 0;
	bool memfile;

	memset(ex, 0, sizeof(*ex));
	broker_load(sb);
	if (sb->nmounts || sb->broker)
		return k8_err_set(err, -EOPNOTSUPP, "sandbox '%s' has %s: they are this host's, so "
				  "its snapshots stay here", sb->name,
				  sb->nmounts ? "shared folders" : "egress broker rules");
	sb_busy_enter(sb);
	if (label) {
		if (!label_valid(label) || !(meta = meta_load(sb, label))) {
			r = k8_err_set(err, -ENOENT, "sandbox '%s' has no checkpoint '%s'; list them "
				       "with `kosa8 checkpoint ls %s`", sb->name, label, sb->name);
			goto out;
		}
		if ((r = meta_usable(meta, sb, label, err)))
			goto out;
		top = json_string_value(json_object_get(meta, "layer"));
		if (!top || !layer_name_ok(top)) {
			r = k8_err_set(err, -EINVAL, "checkpoint '%s' has a damaged meta.json", label);
			goto out;
		}
		statedir = ckpt_dir(sb, label);
		memfile = meta_memfile(meta);
		ex->nimages = sb_images_from_json(json_object_get(meta, "images"), ex->images);
	} else {
		if (sb->state != SB_PAUSED || !sb_paused_on_disk(sb)) {
			r = k8_err_set(err, -EINVAL, "sandbox '%s' is not paused to disk", sb->name);
			goto out;
		}
		top = top_of(sb);
		statedir = paused_dir(sb);
		{
			cleanup_free char *mem = xasprintf("%s/memory", statedir);
			memfile = access(mem, F_OK) == 0;
		}
		pthread_mutex_lock(&sb->lock);
		memcpy(ex->images, sb->images, sizeof(ex->images));
		ex->nimages = sb->nimages;
		pthread_mutex_unlock(&sb->lock);
	}
	jchain = json_array();
	if ((r = export_files(ex, sb, statedir, memfile, top, jchain, err))) {
		json_decref(jchain);
		goto out;
	}
	export_settings(ex, sb, meta, memfile, top, jchain);
out:
	if (r) {
		sb_busy_leave(sb);
		ckpt_export_end(ex);
		return r;
	}
	if (label)
		sb_busy_leave(sb);
	else
		ex->held = sb;
	return 0;
}

/* The settings of a snapshot from another host, read as an API body is read: each field
 * checked, its bounds those of `sandbox create`. The chain must end at the root, name
 * each layer once and start at `layer`. */
struct ckpt_settings {
	int cpus, memory_mib, disk_gb;
	struct vm_machine machine;
	bool memfile;
	const char *layer;
	const char *chain[CKPT_X_FILES];
	int nchain;
	char egress_mode[16];
	json_t *egress_rules;
};

static int settings_int(const json_t *s, const char *key, int lo, int hi, int *out,
			struct k8_err *err)
{
	json_t *v = json_object_get(s, key);

	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return k8_err_set(err, -EINVAL, "the snapshot's settings: '%s' is not a whole "
				  "number from %d to %d", key, lo, hi);
	*out = (int)json_integer_value(v);
	return 0;
}

static int ckpt_settings_read(const json_t *s, struct ckpt_settings *o, struct k8_err *err)
{
	const char *mem = json_string_value(json_object_get(s, "memory"));
	json_t *chain = json_object_get(s, "chain"), *v;
	size_t i;
	int r;

	memset(o, 0, sizeof(*o));
	if (!json_is_object(s))
		return k8_err_set(err, -EINVAL, "the snapshot's settings are not an object");
	if ((r = settings_int(s, "cpus", 1, 64, &o->cpus, err)) ||
	    (r = settings_int(s, "memory_mib", 128, 65536, &o->memory_mib, err)) ||
	    (r = settings_int(s, "disk_gb", 1, 1024, &o->disk_gb, err)))
		return r;
	if (vm_machine_from_json(json_object_get(s, "machine"), &o->machine))
		return k8_err_set(err, -EINVAL, "the snapshot's settings: 'machine' is not one "
				  "this kosa8 starts");
	if (!mem || (strcmp(mem, "file") && strcmp(mem, "stream")))
		return k8_err_set(err, -EINVAL, "the snapshot's settings: 'memory' is neither "
				  "file nor stream");
	o->memfile = !strcmp(mem, "file");
	o->layer = json_string_value(json_object_get(s, "layer"));
	if (!o->layer || !layer_name_ok(o->layer))
		return k8_err_set(err, -EINVAL, "the snapshot's settings: 'layer' is not a layer's "
				  "name");
	if (!json_is_array(chain) || json_array_size(chain) < 1 ||
	    json_array_size(chain) > CKPT_X_FILES)
		return k8_err_set(err, -EINVAL, "the snapshot's settings: 'chain' is not a list "
				  "of 1 to %d layers", CKPT_X_FILES);
	json_array_foreach(chain, i, v) {
		const char *l = json_string_value(v);
		if (!l || !layer_name_ok(l))
			return k8_err_set(err, -EINVAL, "the snapshot's settings: 'chain' names "
					  "something other than layers");
		for (int k = 0; k < o->nchain; k++)
			if (!strcmp(o->chain[k], l))
				return k8_err_set(err, -EINVAL, "the snapshot's settings: 'chain' "
						  "names a layer twice");
		o->chain[o->nchain++] = l;
	}
	if (strcmp(o->chain[0], o->layer) || strcmp(o->chain[o->nchain - 1], LAYERS_ROOT))
		return k8_err_set(err, -EINVAL, "the snapshot's settings: 'chain' does not run "
				  "from its layer to %s", LAYERS_ROOT);
	{
		json_auto_t *body = json_pack("{s:O?,s:O?}", "egress", json_object_get(s, "egress"),
					      "egress_allow", json_object_get(s, "egress_allow"));
		if ((r = egress_from_body(body, o->egress_mode, sizeof(o->egress_mode),
					  &o->egress_rules, err)))
			return k8_err_wrap(err, "the snapshot's settings");
	}
	return 0;
}

/* The chain's layers.json in dir, each layer file there. */
static int settings_chain(const struct ckpt_settings *s, const char *dir, struct k8_err *err)
{
	for (int i = 0; i < s->nchain; i++) {
		cleanup_free char *p = xasprintf("%s/%s", dir, s->chain[i]);
		struct stat st;
		if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode))
			return k8_err_set(err, -ENOENT, "the snapshot has no layer %s", s->chain[i]);
		if (i + 1 < s->nchain && layers_set(dir, s->chain[i], s->chain[i + 1]))
			return k8_err_set(err, -EIO, "writing %s/layers.json failed", dir);
	}
	return 0;
}

int ckpt_fork_import(struct daemon *d, const char *mirror, const char *src_name,
		     const char *label, const json_t *settings, const struct vm_image *imgs,
		     int nimgs, const char *name, json_t **out, struct k8_err *err)
{
	struct ckpt_settings s;
	cleanup_free char *cdir = NULL;
	json_auto_t *meta = NULL;
	struct sandbox *src, *sb;
	char created[K8_TIME_LEN];
	int r;

	if (!label_valid(label))
		return k8_err_set(err, -EINVAL, "the snapshot's label '%.80s' is not a label", label);
	if ((r = ckpt_settings_read(settings, &s, err)))
		return r;
	if ((r = settings_chain(&s, mirror, err)))
		goto out;
	/* meta.json of its one checkpoint, written here from the checked settings */
	cdir = xasprintf("%s/checkpoints/%s", mirror, label);
	meta = json_pack("{s:i,s:s,s:s,s:s,s:i,s:i,s:i,s:o,s:o}", "version", 1, "label", label,
			 "created", k8_time_now(created, 0), "layer", s.layer, "size", 0,
			 "memory_mib", s.memory_mib, "cpus", s.cpus, "images",
			 sb_images_json(imgs, nimgs), "machine", vm_machine_json(&s.machine));
	if (s.memfile)
		json_object_set_new(meta, "memory", json_string("file"));
	{
		int lo = 0, hi = 0;
		if (json_object_get(settings, "agent_proto_min") &&
		    (settings_int(settings, "agent_proto_min", 1, PROTO_VERSION_LIMIT, &lo, err) ||
		     settings_int(settings, "agent_proto_max", lo, PROTO_VERSION_LIMIT, &hi, err))) {
			r = -EINVAL;
			goto out;
		}
		if (lo)
			json_object_update_new(meta, json_pack("{s:i,s:i}", "agent_proto_min", lo,
							       "agent_proto_max", hi));
	}
	if ((r = meta_save(cdir, meta))) {
		k8_err_set(err, r, "writing %s/meta.json: %s", cdir, strerror(-r));
		goto out;
	}
	src = sb_detached(d, sb_name_valid(src_name) ? src_name : "snapshot", mirror);
	src->cpus = s.cpus;
	src->memory_mib = s.memory_mib;
	src->disk_gb = s.disk_gb;
	snprintf(src->egress_mode, sizeof(src->egress_mode), "%s", s.egress_mode);
	json_decref(src->egress_rules);
	src->egress_rules = json_incref(s.egress_rules);
	r = ckpt_fork(d, src, label, name, out, err);
	sb_detached_free(src);
	if (r || !nimgs || !(sb = sb_get(d, name, err)))
		goto out;
	/* The fork keeps its images' disks by links of its own: the pulled snapshot goes. */
	{
		cleanup_free char *idir = xasprintf("%s/images", sb->dir);
		mkdir_p(idir, 0700);
		pthread_mutex_lock(&sb->lock);
		for (int i = 0; i < sb->nimages; i++) {
			const char *base = strrchr(sb->images[i].disk, '/');
			cleanup_free char *to = base ? xasprintf("%s%s", idir, base) : NULL;
			if (to && strncmp(sb->images[i].disk, idir, strlen(idir)) &&
			    (link(sb->images[i].disk, to) == 0 || errno == EEXIST))
				snprintf(sb->images[i].disk, sizeof(sb->images[i].disk), "%s", to);
		}
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		sb_put(d, sb);
	}
	k8_err_clear(err);
out:
	json_decref(s.egress_rules);
	return r;
}

struct sandbox *ckpt_import_begin(struct daemon *d, const char *name, const json_t *settings,
				  struct k8_err *err)
{
	struct ckpt_settings s;
	struct sandbox *sb;
	int r;

	if (ckpt_settings_read(settings, &s, err))
		return NULL;
	json_decref(s.egress_rules);
	if (!(sb = sb_reserve(d, name, err)))
		return NULL;
	cleanup_free char *paused = xasprintf("%s/paused", sb->dir);
	cleanup_free char *images = xasprintf("%s/images", sb->dir);
	cleanup_free char *root = xasprintf("%s/%s", sb->dir, LAYERS_ROOT);
	if ((r = mkdir_p(paused, 0700)) || (r = mkdir_p(images, 0700))) {
		k8_err_set(err, r, "mkdir %s: %s", sb->dir, strerror(-r));
		sb_unreserve(d, sb);
		return NULL;
	}
	/* its image slots; the root layer comes with the snapshot */
	if (vm_make_disks(d->home, sb->dir, s.disk_gb, err)) {
		sb_unreserve(d, sb);
		return NULL;
	}
	unlink(root);
	return sb;
}

int ckpt_import_paused(struct daemon *d, struct sandbox *sb, const json_t *settings,
		       const struct vm_image *imgs, int nimgs, struct k8_err *err)
{
	struct ckpt_settings s;
	int r;

	if ((r = ckpt_settings_read(settings, &s, err)))
		return r;
	if (!sb_paused_on_disk(sb)) {
		json_decref(s.egress_rules);
		return k8_err_set(err, -ENOENT, "the snapshot holds no saved machine");
	}
	if ((r = settings_chain(&s, sb->dir, err))) {
		json_decref(s.egress_rules);
		return r;
	}
	pthread_mutex_lock(&sb->lock);
	sb->cpus = s.cpus;
	sb->memory_mib = s.memory_mib;
	sb->disk_gb = s.disk_gb;
	snprintf(sb->disk, sizeof(sb->disk), "%s", s.layer);
	/* its layers' headers name another host's paths: never followed (make_top -u) */
	sb->forked = true;
	sb->machine = s.machine;
	snprintf(sb->egress_mode, sizeof(sb->egress_mode), "%s", s.egress_mode);
	json_decref(sb->egress_rules);
	sb->egress_rules = s.egress_rules;
	sb->nimages = nimgs < K8_MAX_SLOTS ? nimgs : K8_MAX_SLOTS;
	memcpy(sb->images, imgs, (size_t)sb->nimages * sizeof(*imgs));
	sb->state = SB_PAUSED;
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	return 0;
}
