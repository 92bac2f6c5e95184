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
 * On disk, per sandbox: checkpoints/<label>/{state,meta.json} (meta.json is written last,
 * so a checkpoint without it was interrupted and is never listed), layers.json (each
 * layer file's parent), and the layer files. A layer is deleted when neither the
 * current top nor any checkpoint reaches it through the parent links.
 */
#include "daemon/checkpoint.h"
#include "daemon/sandbox.h"
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
	return sb->disk[0] ? sb->disk : "scratch.qcow2";
}

/* ---- layers.json: child -> parent ---- */

static json_t *layers_load(struct sandbox *sb)
{
	cleanup_free char *p = xasprintf("%s/layers.json", sb->dir);
	cleanup_free char *t = NULL;
	json_t *v = NULL;

	if (read_file(p, 1 << 20, &t, NULL) == 0)
		v = json_loads(t, 0, NULL);
	if (!json_is_object(v)) {
		json_decref(v);
		v = json_pack("{s:n}", "scratch.qcow2");
	}
	return v;
}

static void layers_save(struct sandbox *sb, json_t *v)
{
	cleanup_free char *p = xasprintf("%s/layers.json", sb->dir);
	char *t = json_dumps(v, JSON_INDENT(1) | JSON_SORT_KEYS);
	write_file_atomic(p, t, strlen(t), 0600);
	free(t);
}

void ckpt_layer_set(struct sandbox *sb, const char *child, const char *parent)
{
	json_t *layers = layers_load(sb);

	json_object_set_new(layers, child, json_string(parent));
	layers_save(sb, layers);
	json_decref(layers);
}

static void mark_chain(json_t *layers, json_t *keep, const char *l)
{
	for (int depth = 0; l && depth < 4096 && !json_object_get(keep, l); depth++) {
		json_object_set_new(keep, l, json_true());
		l = json_string_value(json_object_get(layers, l));
	}
}

/* Delete layers nothing reaches any more. */
static void layers_gc(struct sandbox *sb)
{
	json_t *layers = layers_load(sb), *keep = json_object(), *v;
	cleanup_free char *cdir = xasprintf("%s/checkpoints", sb->dir);
	const char *k;
	void *tmp;
	DIR *dd;
	struct dirent *de;

	mark_chain(layers, keep, top_of(sb));
	dd = opendir(cdir);
	while (dd && (de = readdir(dd))) {
		cleanup_free char *mp = xasprintf("%s/%s/meta.json", cdir, de->d_name);
		cleanup_free char *t = NULL;
		json_t *m;
		if (de->d_name[0] == '.' || read_file(mp, 1 << 20, &t, NULL))
			continue;
		m = json_loads(t, 0, NULL);
		mark_chain(layers, keep, json_string_value(json_object_get(m, "layer")));
		json_decref(m);
	}
	if (dd)
		closedir(dd);
	json_object_foreach_safe(layers, tmp, k, v) {
		if (json_object_get(keep, k) || !strcmp(k, "scratch.qcow2"))
			continue;
		cleanup_free char *f = xasprintf("%s/%s", sb->dir, k);
		unlink(f);
		json_object_del(layers, k);
	}
	layers_save(sb, layers);
	json_decref(layers);
	json_decref(keep);
}

static void new_layer_name(char *out, size_t n)
{
	snprintf(out, n, "layer-%llx.qcow2", (unsigned long long)now_real_ns());
}

int ckpt_chain(struct sandbox *sb, const char *layer, char ***out)
{
	json_t *layers = layers_load(sb);
	const char *l = json_string_value(json_object_get(layers, layer ? layer : top_of(sb)));
	char **v = NULL;
	int n = 0;

	for (; l && !strchr(l, '/') && n < 4096; l = json_string_value(json_object_get(layers, l))) {
		v = realloc(v, (size_t)(n + 1) * sizeof(*v));
		if (!v)
			abort();
		v[n++] = xasprintf("%s/%s", sb->dir, l);
	}
	json_decref(layers);
	*out = v;
	return n;
}

void ckpt_chain_free(char **chain, int n)
{
	for (int i = 0; i < n; i++)
		free(chain[i]);
	free(chain);
}

/* A new empty top layer over `base` (a file name in sb's dir). A fork's layers name the
 * source's files in their headers, so there the backing is not opened (-u): its size is
 * the sandbox's disk size. */
static int make_top(struct sandbox *sb, const char *base, const char *top, struct k8_err *err)
{
	cleanup_free char *bp = xasprintf("%s/%s", sb->dir, base);
	cleanup_free char *size = xasprintf("%dG", sb->disk_gb);

	if (sb->forked) {
		const char *argv[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
				       "-u", "-b", bp, top, size, NULL };
		return vm_run_cmd(argv, err);
	}
	const char *argv[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
			       "-b", bp, top, NULL };
	return vm_run_cmd(argv, err);
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
	unlink(meta);  /* first: from here on it is not listed */
	rm_rf(dir);
	layers_gc(sb);
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
			err->code = 0;
			err->msg[0] = '\0';
			r = 0;
			break;
		}
	}
	json_decref(ret);
	return r;
}

int ckpt_create(struct daemon *d, struct sandbox *sb, const char *label, json_t **out,
		struct k8_err *err)
{
	cleanup_free char *cdir = xasprintf("%s/checkpoints", sb->dir);
	cleanup_free char *tmpdir = NULL, *final = NULL, *state = NULL;
	char layer[64], node[64], newnode[64], created[40];
	json_t *list = NULL, *ret = NULL, *imgs, *meta;
	struct statvfs vfs;
	const char *frozen;
	uint64_t t0 = now_mono_ns(), t_saved;
	struct stat st;
	int fd = -1, lfd = -1, r;
	bool stopped = false;
	const char *removed = NULL;
	cleanup_free char *lp = NULL;   /* the new layer, until QEMU writes to it */
	char removed_buf[64] = "";

	if (!label_valid(label))
		return k8_err_set(err, -EINVAL, "invalid checkpoint label '%.80s': use 1-63 letters, "
				  "digits, '-', '_' or '.'", label ? label : "");
	if ((r = sb_ensure_running(d, sb, err)))
		return r;
	sb_busy_enter(sb);
	final = ckpt_dir(sb, label);
	{
		cleanup_free char *m = xasprintf("%s/meta.json", final);
		if (access(m, F_OK) == 0) {
			r = k8_err_set(err, -EEXIST, "sandbox '%s' already has a checkpoint '%s'; "
				       "remove it first (kosa8 checkpoint rm %s %s) or pick another "
				       "label", sb->name, label, sb->name, label);
			goto out;
		}
	}
	mkdir_p(cdir, 0700);
	if (statvfs(cdir, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < ((uint64_t)sb->memory_mib + 256) << 20) {
		r = k8_err_set(err, -ENOSPC, "not enough free disk space under %s for a checkpoint "
			       "of a %d MiB sandbox (%llu MiB free); free some space first", cdir,
			       sb->memory_mib,
			       (unsigned long long)(((uint64_t)vfs.f_bavail * vfs.f_frsize) >> 20));
		goto out;
	}
	rm_rf(final); /* an interrupted attempt without meta.json */
	tmpdir = xasprintf("%s/.tmp-%s", cdir, label);
	rm_rf(tmpdir);
	if ((r = mkdir_p(tmpdir, 0700))) {
		k8_err_set(err, r, "mkdir %s: %s", tmpdir, strerror(-r));
		goto out;
	}
	state = xasprintf("%s/state", tmpdir);
	fd = open(state, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = k8_err_set(err, -errno, "create %s: %s", state, strerror(errno));
		goto out;
	}
	/* The next top layer, made now while the guest still runs: its header names the
	 * current top (by this sandbox's path) and has the sandbox's disk size. */
	new_layer_name(layer, sizeof(layer));
	lp = xasprintf("%s/%s", sb->dir, layer);
	{
		cleanup_free char *bp = xasprintf("%s/%s", sb->dir, top_of(sb));
		cleanup_free char *size = xasprintf("%dG", sb->disk_gb);
		const char *argv[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
				       "-u", "-b", bp, lp, size, NULL };
		if ((r = vm_run_cmd(argv, err)))
			goto out;
		lfd = open(lp, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (lfd < 0) {
			r = k8_err_set(err, -errno, "open %s: %s", lp, strerror(errno));
			goto out;
		}
	}
	/* Let the guest's file systems reach the disk: the frozen layer is then clean. */
	{
		json_t *resp = NULL;
		link_request(&sb->link, json_pack("{s:s}", "op", "sync"), 30000, &resp, NULL, err);
		json_decref(resp);
		err->code = 0;
		err->msg[0] = '\0';
	}
	if ((r = qmp_exec(&sb->qmp, "stop", NULL, NULL, 10000, err)))
		goto out;
	stopped = true;
	/* The file server's tables, as the guest's FUSE knows them at this instant. */
	if (sb->nmounts) {
		cleanup_free char *nodes = xasprintf("%s/fs-nodes.json", tmpdir);
		if ((r = fs_save(sb, nodes, err)))
			goto out;
	}
	if ((r = qmp_exec_fd(&sb->qmp, "getfd", json_pack("{s:s}", "fdname", "ckpt"), fd, NULL,
			     10000, err)))
		goto out;
	/* Migration is throttled to 128 MiB/s by default (it was made for networks); a
	 * checkpoint goes to a local file with the vCPUs stopped, so no cap. */
	if ((r = qmp_exec(&sb->qmp, "migrate-set-parameters",
			  json_pack("{s:I}", "max-bandwidth", (json_int_t)1 << 40), NULL, 10000, err)))
		goto out;
	if ((r = qmp_exec(&sb->qmp, "migrate", json_pack("{s:s}", "uri", "fd:ckpt"), NULL, 10000,
			  err)) ||
	    (r = wait_migration(&sb->qmp, err)))
		goto out;
	t_saved = now_mono_ns();
	if ((r = scratch_node(&sb->qmp, node, sizeof(node), err)))
		goto out;
	/* The node is named after its file ("layer-<hex>"): a daemon adopting this VM
	 * learns the real top layer from it (query-block shows only /dev/fdset/N). */
	snprintf(newnode, sizeof(newnode), "%.*s", (int)(strlen(layer) - strlen(".qcow2")), layer);
	{
		json_t *added = NULL;
		char fdset[32];
		json_int_t set;
		cleanup_close int rofd = open(lp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		/* Its set holds a read-only fd too, for when the next checkpoint freezes it
		 * (QEMU then reopens it read-only from the set). */
		r = qmp_exec_fd(&sb->qmp, "add-fd", NULL, lfd, &added, 10000, err);
		set = json_integer_value(json_object_get(added, "fdset-id"));
		json_decref(added);
		snprintf(fdset, sizeof(fdset), "/dev/fdset/%lld", (long long)set);
		if (!r && rofd < 0)
			r = k8_err_set(err, -errno, "open %s: %s", lp, strerror(errno));
		if (!r)
			r = qmp_exec_fd(&sb->qmp, "add-fd", json_pack("{s:I}", "fdset-id", set), rofd,
					NULL, 10000, err);
		if (!r)
			r = qmp_exec(&sb->qmp, "blockdev-add",
				     json_pack("{s:s,s:s,s:s,s:{s:s,s:s,s:s},s:n}", "driver", "qcow2",
					       "node-name", newnode, "discard", "unmap", "file",
					       "driver", "file", "filename", fdset, "discard",
					       "unmap", "backing"),
				     NULL, 10000, err);
		if (!r) {
			r = qmp_exec(&sb->qmp, "blockdev-snapshot",
				     json_pack("{s:s,s:s}", "node", node, "overlay", newnode), NULL,
				     30000, err);
			if (r)
				qmp_exec(&sb->qmp, "blockdev-del", json_pack("{s:s}", "node-name",
									    newnode), NULL, 10000, NULL);
		}
		if (r)
			goto out;
		free(lp);
		lp = NULL;
	}
	qmp_exec(&sb->qmp, "cont", NULL, NULL, 10000, err);
	stopped = false;

	/* The VM runs again; make the checkpoint durable, then visible. */
	frozen = top_of(sb);
	ckpt_layer_set(sb, layer, frozen);
	fsync(fd);
	fstat(fd, &st);
	imgs = json_array();
	for (int i = 0; i < sb->nimages; i++)
		json_array_append_new(imgs, json_pack("{s:s,s:s,s:s,s:i}", "ref", sb->images[i].ref,
						      "digest", sb->images[i].digest, "disk",
						      sb->images[i].disk, "slot", sb->images[i].slot));
	{
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	}
	meta = json_pack("{s:i,s:s,s:s,s:I,s:s,s:I,s:i,s:i,s:o}", "version", 1, "label", label,
			 "created", created, "created_ns", (json_int_t)now_real_ns(), "layer", frozen,
			 "size", (json_int_t)st.st_size, "memory_mib", sb->memory_mib, "cpus",
			 sb->cpus, "images", imgs);
	{
		char *t = json_dumps(meta, JSON_INDENT(2));
		cleanup_free char *mp = xasprintf("%s/meta.json", tmpdir);
		r = write_file_atomic(mp, t, strlen(t), 0600);
		free(t);
	}
	json_decref(meta);
	if (!r && rename(tmpdir, final) < 0)
		r = -errno;
	if (r) {
		k8_err_set(err, r, "saving checkpoint metadata: %s", strerror(-r));
		goto out;
	}
	pthread_mutex_lock(&sb->lock);
	snprintf(sb->disk, sizeof(sb->disk), "%s", layer);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);

	/* Ten kept: the eleventh removes the oldest. */
	ckpt_list(d, sb, &list, err);
	if (json_array_size(list) > K8_MAX_CHECKPOINTS) {
		const char *old = json_string_value(json_object_get(json_array_get(list, 0), "label"));
		snprintf(removed_buf, sizeof(removed_buf), "%s", old ? old : "");
		if (old && strcmp(old, label) && remove_locked(sb, removed_buf, err) == 0)
			removed = removed_buf;
	}
	json_decref(list);
	*out = json_pack("{s:s,s:s,s:I,s:I,s:I}", "label", label, "created", created, "size",
			 (json_int_t)st.st_size, "ms", (json_int_t)((now_mono_ns() - t0) / 1000000),
			 "pause_ms", (json_int_t)((now_mono_ns() - t0) / 1000000));
	(void)t_saved;
	if (removed)
		json_object_set_new(*out, "removed", json_string(removed));
	daemon_audit(d, "checkpoint.create", sb->name,
		     json_pack("{s:s,s:I,s:s?}", "label", label, "size", (json_int_t)st.st_size,
			       "removed_oldest", removed));
	r = 0;
out:
	if (stopped)
		qmp_exec(&sb->qmp, "cont", NULL, NULL, 10000, NULL);
	if (lfd >= 0)
		close(lfd);
	if (lp)
		unlink(lp);
	if (fd >= 0)
		close(fd);
	if (tmpdir && r)
		rm_rf(tmpdir);
	sb_busy_leave(sb);
	json_decref(ret);
	return r;
}

/* Start the QEMU that restores checkpoint `label` of `from` into sb (a rewind: from ==
 * sb; a fork: its source) on the new top layer `layer`: sidecars up, kosa8-fs given the
 * FUSE nodes and open files the guest had then, and -incoming from the state file. */
static int restore_spawn(struct daemon *d, struct sandbox *sb, struct sandbox *from,
			 const char *label, const char *layer, const char *top, int kfd, int ifd,
			 int sfd, pid_t *pid, struct k8_err *err)
{
	cleanup_free char *nodes = xasprintf("%s/checkpoints/%s/fs-nodes.json", from->dir, label);
	struct sb_socks k;
	struct vm_spec spec;
	char **chain = NULL;
	int r;

	if ((r = sb_prepare_spawn(d, sb, &k, &spec, err)))
		return r;
	if (sb->nmounts && access(nodes, F_OK) == 0 && (r = fs_load(sb, nodes, err)))
		return r;
	spec.kernel_fd = kfd;
	spec.initramfs_fd = ifd;
	spec.images = sb->images;
	spec.nimages = sb->nimages;
	spec.scratch = top;
	spec.incoming_fd = sfd;
	spec.nchain = ckpt_chain(sb, layer, &chain);
	spec.chain = (const char *const *)chain;
	r = vm_spawn(&spec, pid, err);
	ckpt_chain_free(chain, spec.nchain);
	return r;
}

int ckpt_rewind(struct daemon *d, struct sandbox *sb, const char *label, json_t **out,
		struct k8_err *err)
{
	cleanup_free char *state = NULL, *top = NULL;
	char layer[64];
	json_t *meta = NULL, *imgs, *it;
	const char *frozen;
	struct vm_image saved[K8_MAX_SLOTS];
	cleanup_close int kfd = -1, ifd = -1, sfd = -1;
	int nsaved = 0, r;
	uint64_t t0 = now_mono_ns();
	pid_t pid = 0;
	size_t i;

	if (!label_valid(label) || !(meta = meta_load(sb, label)))
		return k8_err_set(err, -ENOENT, "sandbox '%s' has no checkpoint '%.80s'; list them "
				  "with `kosa8 checkpoint ls %s`", sb->name, label ? label : "",
				  sb->name);
	frozen = json_string_value(json_object_get(meta, "layer"));
	if (!frozen || strchr(frozen, '/')) {
		json_decref(meta);
		return k8_err_set(err, -EINVAL, "checkpoint '%s' has a damaged meta.json", label);
	}
	if ((r = guest_verify_open(&d->guest, &kfd, &ifd, err))) {
		json_decref(meta);
		return r;
	}
	imgs = json_object_get(meta, "images");
	json_array_foreach(imgs, i, it) {
		const char *ref, *dg, *disk;
		int slot;
		if (nsaved >= K8_MAX_SLOTS ||
		    json_unpack(it, "{s:s,s:s,s:s,s:i}", "ref", &ref, "digest", &dg, "disk", &disk,
				"slot", &slot) < 0 || slot < 0 || slot >= K8_MAX_SLOTS)
			continue;
		memset(&saved[nsaved], 0, sizeof(saved[0]));
		snprintf(saved[nsaved].ref, sizeof(saved[0].ref), "%s", ref);
		snprintf(saved[nsaved].digest, sizeof(saved[0].digest), "%s", dg);
		snprintf(saved[nsaved].disk, sizeof(saved[0].disk), "%s", disk);
		saved[nsaved].slot = slot;
		nsaved++;
	}

	sb_busy_enter(sb);
	state = xasprintf("%s/checkpoints/%s/state", sb->dir, label);
	sfd = open(state, O_RDONLY | O_CLOEXEC);
	if (sfd < 0) {
		r = k8_err_set(err, -errno, "open %s: %s", state, strerror(errno));
		goto out;
	}
	/* The old machine goes; its top layer is garbage unless a checkpoint needs it. Its
	 * sidecars stay: kosa8-net keeps its counts, kosa8-fs takes the checkpoint's tables. */
	pthread_mutex_lock(&sb->lock);
	sb_kill_qemu(d, sb);
	sb->state = SB_BOOTING;
	pthread_mutex_unlock(&sb->lock);

	new_layer_name(layer, sizeof(layer));
	top = xasprintf("%s/%s", sb->dir, layer);
	if ((r = make_top(sb, frozen, top, err)))
		goto fail;
	ckpt_layer_set(sb, layer, frozen);

	pthread_mutex_lock(&sb->lock);
	memcpy(sb->images, saved, sizeof(saved));
	sb->nimages = nsaved;
	sb->memory_mib = (int)json_integer_value(json_object_get(meta, "memory_mib")) ?: sb->memory_mib;
	sb->cpus = (int)json_integer_value(json_object_get(meta, "cpus")) ?: sb->cpus;
	pthread_mutex_unlock(&sb->lock);
	if ((r = restore_spawn(d, sb, sb, label, layer, top, kfd, ifd, sfd, &pid, err)))
		goto fail;
	/* QEMU starts the guest by itself once the state is in. */
	r = sb_connect_vm(d, sb, pid, true, err);
	if (r)
		goto fail;
	pthread_mutex_lock(&sb->lock);
	snprintf(sb->disk, sizeof(sb->disk), "%s", layer);
	sb->state = SB_RUNNING;
	sb->error[0] = '\0';
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	layers_gc(sb);
	*out = json_pack("{s:s,s:I}", "label", label, "ms",
			 (json_int_t)((now_mono_ns() - t0) / 1000000));
	daemon_audit(d, "checkpoint.rewind", sb->name,
		     json_pack("{s:s,s:I}", "label", label,
			       "ms", (json_int_t)((now_mono_ns() - t0) / 1000000)));
	goto out;
fail:
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_FAILED;
	snprintf(sb->error, sizeof(sb->error), "rewind to %s failed: %s", label, err->msg);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	daemon_audit(d, "checkpoint.rewind.failed", sb->name,
		     json_pack("{s:s,s:s}", "label", label, "error", err->msg));
out:
	json_decref(meta);
	sb_busy_leave(sb);
	return r;
}

int sb_pause(struct daemon *d, struct sandbox *sb, bool pause, struct k8_err *err)
{
	int r;

	if ((r = sb_ensure_running(d, sb, err)))
		return r;
	sb_busy_enter(sb);
	r = qmp_exec(&sb->qmp, pause ? "stop" : "cont", NULL, NULL, 10000, err);
	if (!r) {
		pthread_mutex_lock(&sb->lock);
		sb->paused = pause;
		pthread_mutex_unlock(&sb->lock);
		if (!pause) {
			/* Time went on outside: tell the guest. */
			json_t *resp = NULL;
			struct k8_err e2 = { 0 };
			link_request(&sb->link, json_pack("{s:s,s:I}", "op", "init", "time_ns",
							  (json_int_t)now_real_ns()),
				     10000, &resp, NULL, &e2);
			json_decref(resp);
		}
		daemon_audit(d, pause ? "sandbox.pause" : "sandbox.resume", sb->name, NULL);
	}
	sb_busy_leave(sb);
	return r;
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
	cleanup_free char *state = NULL, *top = NULL;
	char layer[64];
	json_t *meta = NULL, *imgs, *it, *srcl = NULL, *layers = NULL;
	const char *frozen, *l;
	struct sandbox *sb = NULL;
	cleanup_close int kfd = -1, ifd = -1, sfd = -1;
	int r, depth;
	uint64_t t0 = now_mono_ns();
	bool src_busy = false;
	pid_t pid = 0;
	size_t i;

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
	sb->cpus = (int)json_integer_value(json_object_get(meta, "cpus")) ?: src->cpus;
	sb->memory_mib = (int)json_integer_value(json_object_get(meta, "memory_mib")) ?: src->memory_mib;
	sb->disk_gb = src->disk_gb;
	sb->forked = true;
	/* The fork has its source's network policy and shared folders (checked again: the
	 * daemon's --allow-mount roots may have changed since). */
	pthread_mutex_lock(&src->lock);
	snprintf(sb->egress_mode, sizeof(sb->egress_mode), "%s", src->egress_mode);
	json_decref(sb->egress_rules);
	sb->egress_rules = json_deep_copy(src->egress_rules);
	memcpy(sb->mounts, src->mounts, sizeof(sb->mounts));
	sb->nmounts = src->nmounts;
	pthread_mutex_unlock(&src->lock);
	if ((r = mounts_recheck(d, sb->mounts, sb->nmounts, err)))
		goto fail;
	imgs = json_object_get(meta, "images");
	json_array_foreach(imgs, i, it) {
		const char *ref, *dg, *disk;
		int slot;
		if (sb->nimages >= K8_MAX_SLOTS ||
		    json_unpack(it, "{s:s,s:s,s:s,s:i}", "ref", &ref, "digest", &dg, "disk", &disk,
				"slot", &slot) < 0 || slot < 0 || slot >= K8_MAX_SLOTS)
			continue;
		struct vm_image *img = &sb->images[sb->nimages++];
		snprintf(img->ref, sizeof(img->ref), "%s", ref);
		snprintf(img->digest, sizeof(img->digest), "%s", dg);
		snprintf(img->disk, sizeof(img->disk), "%s", disk);
		img->slot = slot;
	}
	state = xasprintf("%s/checkpoints/%s/state", src->dir, label);
	sfd = open(state, O_RDONLY | O_CLOEXEC);
	if (sfd < 0) {
		r = k8_err_set(err, -errno, "open %s: %s", state, strerror(errno));
		goto fail;
	}
	if ((r = mkdir_p(sb->dir, 0700))) {
		k8_err_set(err, r, "mkdir %s: %s", sb->dir, strerror(-r));
		goto fail;
	}
	/* Its own image slots (a scratch disk too, replaced by the link below). */
	if ((r = vm_make_disks(d->home, sb->dir, sb->disk_gb, err)))
		goto fail;
	{
		cleanup_free char *own = xasprintf("%s/scratch.qcow2", sb->dir);
		unlink(own);
	}
	srcl = layers_load(src);
	layers = json_object();
	for (l = frozen, depth = 0; l; depth++) {
		const char *parent = json_string_value(json_object_get(srcl, l));
		cleanup_free char *from = xasprintf("%s/%s", src->dir, l);
		cleanup_free char *to = xasprintf("%s/%s", sb->dir, l);
		if (strchr(l, '/') || depth >= 4096 || json_object_get(layers, l)) {
			r = k8_err_set(err, -EINVAL, "the layers of sandbox '%s' are damaged "
				       "(layers.json)", src->name);
			goto fail;
		}
		if (link(from, to) < 0) {
			r = k8_err_set(err, -errno, "link %s to %s: %s%s", from, to, strerror(errno),
				       errno == EXDEV ? " (sandboxes must be on one file system)" : "");
			goto fail;
		}
		json_object_set_new(layers, l, parent ? json_string(parent) : json_null());
		l = parent;
	}
	sb_busy_leave(src);
	src_busy = false;

	new_layer_name(layer, sizeof(layer));
	top = xasprintf("%s/%s", sb->dir, layer);
	json_object_set_new(layers, layer, json_string(frozen));
	layers_save(sb, layers);
	if ((r = make_top(sb, frozen, top, err)))
		goto fail;
	snprintf(sb->disk, sizeof(sb->disk), "%s", layer);
	pthread_mutex_lock(&sb->lock);
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);

	if ((r = restore_spawn(d, sb, src, label, layer, top, kfd, ifd, sfd, &pid, err)))
		goto fail;
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
	json_decref(meta);
	json_decref(srcl);
	json_decref(layers);
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

	if (api_body_str(call, "label", API_OPTIONAL, CKPT_API_NAME_MAX, &label))
		return call->err.code;
	return ckpt_create(call->d, sb, label, &call->out, &call->err);
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

static int ckpt_op_pause(struct api_call *call, struct sandbox *sb)
{
	return sb_pause(call->d, sb, true, &call->err);
}

static int ckpt_op_resume(struct api_call *call, struct sandbox *sb)
{
	return sb_pause(call->d, sb, false, &call->err);
}

int ckpt_api_create(struct api_call *call) { return ckpt_api_on(call, ckpt_op_create); }
int ckpt_api_list(struct api_call *call) { return ckpt_api_on(call, ckpt_op_list); }
int ckpt_api_rm(struct api_call *call) { return ckpt_api_on(call, ckpt_op_rm); }
int ckpt_api_rewind(struct api_call *call) { return ckpt_api_on(call, ckpt_op_rewind); }
int ckpt_api_fork(struct api_call *call) { return ckpt_api_on(call, ckpt_op_fork); }
int ckpt_api_pause(struct api_call *call) { return ckpt_api_on(call, ckpt_op_pause); }
int ckpt_api_resume(struct api_call *call) { return ckpt_api_on(call, ckpt_op_resume); }
