/* SPDX-License-Identifier: Apache-2.0 */
/* mounts.c - shared folders: checking `--mount HOST:GUEST[:ro]`, and the kosa8-fs process
 * that serves them to the guest.
 *
 * The guest mounts FUSE in its agent and the FUSE messages travel over the virtio-serial
 * port `kosa8.fs` to kosa8-fs, one per sandbox, which does every file operation with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS ...) below the mount's root and refuses
 * writes to read-only mounts itself (docs/shared-folders.md). Unlike virtio-9p this
 * does not block QEMU's migration, so checkpoints keep working: at a checkpoint the
 * daemon asks kosa8-fs for its node and handle tables (saved beside the memory state),
 * and at a rewind or fork it loads them back before the guest runs again. Host files
 * are never rewound.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/daemon.h"

/* Guest paths no mount may cover: the kernel's, the agent's own, the scratch disk and
 * the image mounts (the agent refuses the same). */
static const char *const guest_reserved[] = { "/proc", "/sys", "/dev", "/run/kosa8", "/etc",
					      "/scratch", "/images" };

static int guest_path_check(const char *g, char *out, size_t n, struct k8_err *err)
{
	size_t len;

	if (!g || g[0] != '/')
		return k8_err_set(err, -EINVAL, "guest path '%.200s' must be absolute, like /data",
				  g ? g : "");
	len = strlen(g);
	while (len > 1 && g[len - 1] == '/')
		len--;
	if (len >= n || len > 200)
		return k8_err_set(err, -ENAMETOOLONG, "guest path '%.80s...' is too long", g);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)g[i];
		if (c < 0x20 || c == 0x7f || c == ':' || c == '\\')
			return k8_err_set(err, -EINVAL, "guest path '%.200s' has a character that "
					  "is not allowed (control characters, ':' and '\\')", g);
		if (c == '/' && (g[i + 1] == '/' ||
				 (g[i + 1] == '.' && (g[i + 2] == '/' || i + 2 == len)) ||
				 (g[i + 1] == '.' && g[i + 2] == '.' &&
				  (g[i + 3] == '/' || i + 3 == len))))
			return k8_err_set(err, -EINVAL, "guest path '%.200s' must be plain: no '//', "
					  "'.' or '..' parts", g);
	}
	if (len == 1)
		return k8_err_set(err, -EINVAL, "a folder cannot be mounted over the guest's /");
	memcpy(out, g, len);
	out[len] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(guest_reserved); i++) {
		size_t rl = strlen(guest_reserved[i]);
		if (!strncmp(out, guest_reserved[i], rl) && (out[rl] == '\0' || out[rl] == '/'))
			return k8_err_set(err, -EINVAL, "guest path %s is reserved (%s belongs to "
					  "the guest's system); pick another, like /data", out,
					  guest_reserved[i]);
	}
	return 0;
}

static bool path_below(const char *p, const char *root)
{
	size_t rl = strlen(root);

	if (rl == 1 && root[0] == '/')
		return true;
	return !strncmp(p, root, rl) && (p[rl] == '\0' || p[rl] == '/');
}

/* HOST must exist, be a directory, keep kosa8's own state out of reach, and lie below
 * one of the daemon's --allow-mount roots when there are any. out gets its realpath. */
static int host_path_check(struct daemon *d, const char *h, char *out, size_t n,
			   struct k8_err *err)
{
	char real[PATH_MAX], home[PATH_MAX];
	struct stat st;

	if (!h || !h[0])
		return k8_err_set(err, -EINVAL, "a mount needs a host folder");
	if (h[0] != '/')
		return k8_err_set(err, -EINVAL, "host folder '%.200s' must be an absolute path "
				  "(the CLI makes relative ones absolute)", h);
	if (!realpath(h, real) || stat(real, &st) < 0)
		return k8_err_set(err, -ENOENT, "host folder %.200s does not exist; create it "
				  "first (mkdir -p %.200s)", h, h);
	if (!S_ISDIR(st.st_mode))
		return k8_err_set(err, -ENOTDIR, "host path %.200s is not a folder; --mount "
				  "shares folders", h);
	if (!strcmp(real, "/"))
		return k8_err_set(err, -EPERM, "the host's / cannot be shared; share a folder "
				  "below it");
	if (realpath(d->home, home) &&
	    (path_below(real, home) || path_below(home, real)))
		return k8_err_set(err, -EPERM, "host folder %s would expose kosa8's own state "
				  "(%s) to the sandbox; share another folder", real, home);
	if (d->nallow_mounts) {
		bool ok = false;
		char roots[1024] = "";
		for (int i = 0; i < d->nallow_mounts; i++) {
			if (path_below(real, d->allow_mounts[i]))
				ok = true;
			size_t l = strlen(roots);
			snprintf(roots + l, sizeof(roots) - l, "%s%s", i ? ", " : "",
				 d->allow_mounts[i]);
		}
		if (!ok)
			return k8_err_set(err, -EPERM, "host folder %s is not below the folders this "
					  "daemon allows to mount (%s); mount one of those, or "
					  "restart the daemon with --allow-mount %s", real, roots, real);
	}
	if (strlen(real) >= n)
		return k8_err_set(err, -ENAMETOOLONG, "host path too long");
	snprintf(out, n, "%s", real);
	return 0;
}

int mounts_from_body(struct daemon *d, json_t *list, struct sb_mount *out, int *n,
		     struct k8_err *err)
{
	size_t i;
	json_t *m;
	int r;

	*n = 0;
	if (!json_is_array(list))
		return k8_err_set(err, -EINVAL, "mounts must be a list");
	if (json_array_size(list) > K8_MAX_MOUNTS)
		return k8_err_set(err, -E2BIG, "at most %d --mount per sandbox", K8_MAX_MOUNTS);
	json_array_foreach(list, i, m) {
		struct sb_mount *mm = &out[*n];
		json_t *ro = json_object_get(m, "ro");
		if (!json_is_object(m))
			return k8_err_set(err, -EINVAL, "each mount must be an object "
					  "{host, guest, ro}");
		if ((r = host_path_check(d, json_string_value(json_object_get(m, "host")),
					 mm->host, sizeof(mm->host), err)) ||
		    (r = guest_path_check(json_string_value(json_object_get(m, "guest")),
					  mm->guest, sizeof(mm->guest), err)))
			return k8_err_wrap(err, "--mount %d", (int)i + 1);
		if (ro && !json_is_boolean(ro))
			return k8_err_set(err, -EINVAL, "mount 'ro' must be true or false");
		mm->ro = json_is_true(ro);
		for (int j = 0; j < *n; j++)
			if (path_below(mm->guest, out[j].guest) || path_below(out[j].guest, mm->guest))
				return k8_err_set(err, -EINVAL, "guest paths %s and %s overlap; give "
						  "each mount its own folder", out[j].guest,
						  mm->guest);
		(*n)++;
	}
	return 0;
}

int mounts_recheck(struct daemon *d, const struct sb_mount *m, int n, struct k8_err *err)
{
	char real[PATH_MAX];

	for (int i = 0; i < n; i++)
		if (host_path_check(d, m[i].host, real, sizeof(real), err))
			return k8_err_wrap(err, "shared folder %s", m[i].guest);
	return 0;
}

json_t *mounts_json(const struct sandbox *sb, bool for_guest)
{
	json_t *a = json_array();

	for (int i = 0; i < sb->nmounts; i++)
		json_array_append_new(a, for_guest
			? json_pack("{s:i,s:s,s:b}", "index", i, "guest", sb->mounts[i].guest, "ro",
				    sb->mounts[i].ro)
			: json_pack("{s:s,s:s,s:b}", "host", sb->mounts[i].host, "guest",
				    sb->mounts[i].guest, "ro", sb->mounts[i].ro));
	return a;
}

/* A kosa8-fs that died is started again from a thread of its own (the reader thread that
 * saw it go cannot join itself). The folders' roots keep their node ids (2 + index), so
 * the guest's mounts work again at once; files and directories it held open get ESTALE. */
static void *fs_restart(void *arg)
{
	char *name = arg;
	struct daemon *d = g_daemon_for_signals;
	struct k8_err err = { 0 };
	struct sandbox *sb = sb_get(d, name, &err);

	if (sb) {
		sb_busy_enter(sb);
		if (sb->state == SB_RUNNING && !sidecar_alive(&sb->fs)) {
			int r = fs_up(d, sb, &err);
			daemon_audit(d, r ? "sandbox.fs.restart.failed" : "sandbox.fs.restart", sb->name,
				     r ? json_pack("{s:s}", "error", err.msg) : NULL);
			pthread_mutex_lock(&sb->lock);
			sb_save(sb);
			pthread_mutex_unlock(&sb->lock);
		}
		sb_busy_leave(sb);
		sb_put(d, sb);
	}
	free(name);
	return NULL;
}

static void fs_event(void *ctx, json_t *ev)
{
	struct sandbox *sb = ctx;
	const char *name = json_string_value(json_object_get(ev, "event"));
	pthread_t t;

	if (!name || !g_daemon_for_signals)
		return;
	if (!strcmp(name, "down") && !sb->fs.closing) {
		daemon_log("sandbox %s: kosa8-fs is gone (%s); starting it again", sb->name,
			   json_string_value(json_object_get(ev, "why")));
		/* a guest that can crash kosa8-fs can repeat it: within its audit budget */
		daemon_audit_guest(g_daemon_for_signals, sb, "sandbox.fs.down",
				   json_pack("{s:s?}", "why",
					     json_string_value(json_object_get(ev, "why"))), 1);
		if (pthread_create(&t, NULL, fs_restart, xstrdup(sb->name)) == 0)
			pthread_detach(t);
	}
}

int fs_up(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	char port[4200], ctl[4200];
	cleanup_free char *exe = sidecar_exe("kosa8-fs");
	cleanup_free char *log = xasprintf("%s/fs.log", sb->dir);
	const char *argv[8 + 2 * K8_MAX_MOUNTS + 1];
	char *specs[K8_MAX_MOUNTS] = { 0 };
	int argc = 0, r;

	if (!sb->nmounts)
		return 0;
	sb_sock_path(d, sb, "fsctl", ctl, sizeof(ctl));
	if (sidecar_alive(&sb->fs))
		return sidecar_connected(&sb->fs) ? 0
						  : sidecar_connect(&sb->fs, ctl, fs_event, sb, err);
	if (access(exe, X_OK) < 0)
		return k8_err_set(err, -ENOENT, "%s is missing (it serves shared folders); build "
				  "it with `make`", exe);
	if ((r = mounts_recheck(d, sb->mounts, sb->nmounts, err)))
		return r;
	sb_sock_path(d, sb, "fs", port, sizeof(port));
	argv[argc++] = exe;
	argv[argc++] = "--id";
	argv[argc++] = sb->id;
	argv[argc++] = "--port";
	argv[argc++] = port;
	argv[argc++] = "--control";
	argv[argc++] = ctl;
	for (int i = 0; i < sb->nmounts; i++) {
		specs[i] = xasprintf("%s:%s", sb->mounts[i].host, sb->mounts[i].ro ? "ro" : "rw");
		argv[argc++] = "--mount";
		argv[argc++] = specs[i];
	}
	argv[argc] = NULL;
	r = sidecar_start(&sb->fs, argv, log, ctl, fs_event, sb, err);
	for (int i = 0; i < sb->nmounts; i++)
		free(specs[i]);
	if (r)
		return r;
	daemon_log("sandbox %s: kosa8-fs running (pid %d, %d shared folders)", sb->name,
		   (int)sb->fs.pid, sb->nmounts);
	return 0;
}

void fs_adopt(struct daemon *d, struct sandbox *sb)
{
	struct k8_err err = { 0 };

	if (!sb->nmounts)
		return;
	/* A kosa8-fs that died while no daemon watched is started again: it reconnects to
	 * the guest's port, and the guest resends what it was waiting for. */
	if (fs_up(d, sb, &err))
		daemon_log("sandbox %s: shared folders are down: %s", sb->name, err.msg);
}

int fs_save(struct sandbox *sb, const char *path, struct k8_err *err)
{
	int r = sidecar_request(&sb->fs, json_pack("{s:s,s:s}", "op", "save", "path", path),
				30000, NULL, err);
	return r ? k8_err_wrap(err, "saving the shared folders' state") : 0;
}

int fs_load(struct sandbox *sb, const char *path, struct k8_err *err)
{
	int r = sidecar_request(&sb->fs, json_pack("{s:s,s:s}", "op", "load", "path", path),
				30000, NULL, err);
	return r ? k8_err_wrap(err, "restoring the shared folders' state") : 0;
}
