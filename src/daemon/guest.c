/* SPDX-License-Identifier: Apache-2.0 */
/* guest.c - find the guest image (kernel + initramfs) and check it against its manifest.
 *
 * The manifest (manifest.json, written by scripts/guest.sh) names each file and its
 * SHA-256. The daemon hashes the exact open file descriptors it then hands to QEMU as
 * /proc/self/fd/N, so a file changed between the check and the boot is never booted.
 */
#include "daemon/guest.h"
#include "common/sha.h"

#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int guest_try_dir(struct guest_image *g, const char *dir, struct k8_err *err)
{
	cleanup_free char *mpath = xasprintf("%s/manifest.json", dir);
	cleanup_free char *text = NULL;
	json_error_t je;
	json_t *m;
	const char *kf, *ks, *inf, *is, *src;
	size_t n;
	int r;

	r = read_file(mpath, 1 << 16, &text, &n);
	if (r)
		return r;
	m = json_loadb(text, n, 0, &je);
	if (!m)
		return k8_err_set(err, -EINVAL, "%s is not valid JSON: %s", mpath, je.text);
	if (json_unpack(m, "{s:{s:s,s:s},s:{s:s,s:s}}", "kernel", "file", &kf, "sha256", &ks,
			"initramfs", "file", &inf, "sha256", &is) < 0 ||
	    strchr(kf, '/') || strchr(inf, '/') || strlen(ks) != 64 || strlen(is) != 64) {
		json_decref(m);
		return k8_err_set(err, -EINVAL, "%s lacks kernel/initramfs file and sha256", mpath);
	}
	snprintf(g->dir, sizeof(g->dir), "%s", dir);
	snprintf(g->kernel, sizeof(g->kernel), "%s/%s", dir, kf);
	snprintf(g->initramfs, sizeof(g->initramfs), "%s/%s", dir, inf);
	snprintf(g->kernel_sha, sizeof(g->kernel_sha), "%s", ks);
	snprintf(g->initramfs_sha, sizeof(g->initramfs_sha), "%s", is);
	char msha[65];
	sha256_hex(text, n, msha);
	snprintf(g->digest, sizeof(g->digest), "sha256:%s", msha);
	src = json_string_value(json_object_get(m, "kernel_source"));
	snprintf(g->source, sizeof(g->source), "%s", src ? src : "");
	json_decref(m);
	return 0;
}

int guest_find_dir(struct guest_image *g, const char *dir, struct k8_err *err)
{
	memset(g, 0, sizeof(*g));
	int r = guest_try_dir(g, dir, err);
	if (r && err && !err->code)
		k8_err_set(err, r, "%s/manifest.json: %s", dir, strerror(-r));
	return r;
}

int guest_find(struct guest_image *g, struct k8_err *err)
{
	const char *env = getenv("KOSA8_GUEST_DIR");
	char exe[PATH_MAX];
	ssize_t n;

	memset(g, 0, sizeof(*g));
	if (env && *env) {
		if (guest_try_dir(g, env, err) == 0)
			return 0;
		return k8_err_set(err, -ENOENT, "no guest image at KOSA8_GUEST_DIR=%s (manifest.json missing)", env);
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			cleanup_free char *d1 = xasprintf("%s/../guest", exe);
			cleanup_free char *d2 = xasprintf("%s/../share/kosa8/guest", exe);
			char real[PATH_MAX];
			if (realpath(d1, real) && guest_try_dir(g, real, err) == 0)
				return 0;
			if (realpath(d2, real) && guest_try_dir(g, real, err) == 0)
				return 0;
		}
	}
	if (err && err->code)
		return err->code;
	return k8_err_set(err, -ENOENT,
			  "the guest image (kernel + initramfs) was not found next to kosa8d; "
			  "fetch the release's with `kosa8 guest fetch`, build it with `make`, set "
			  "KOSA8_GUEST_DIR, or on a machine that is never online import one: "
			  "kosa8 bundle import FILE");
}

int guest_find_home(struct guest_image *g, const char *home, struct k8_err *err)
{
	const char *env = getenv("KOSA8_GUEST_DIR");
	if (!(env && *env)) {
		cleanup_free char *dir = xasprintf("%s/guest", home);
		struct k8_err e = { 0 };
		memset(g, 0, sizeof(*g));
		if (access(dir, F_OK) == 0 && guest_try_dir(g, dir, &e) == 0)
			return 0;
	}
	return guest_find(g, err);
}

int guest_install(struct guest_image *g, const char *home, struct k8_err *err)
{
	cleanup_free char *man = xasprintf("%s/manifest.json", g->dir);
	cleanup_free char *dst = xasprintf("%s/guest", home);
	cleanup_free char *old = xasprintf("%s/guest.old", home);
	const char *files[] = { man, g->kernel, g->initramfs };

	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		if (chmod(files[i], 0644) < 0)
			return k8_err_set(err, -errno, "%s: %s", files[i], strerror(errno));
	rm_rf(old);
	if (rename(dst, old) && errno != ENOENT)
		return k8_err_set(err, -errno, "%s: %s", dst, strerror(errno));
	if (rename(g->dir, dst)) {
		int e = errno;
		rename(old, dst);
		return k8_err_set(err, -e, "%s: %s", dst, strerror(e));
	}
	rm_rf(old);
	return guest_find_dir(g, dst, err);
}

/* ---- a file's check, remembered (open_checked, guest_verified) ---- */

/* What identifies a file's bytes without reading them: a write changes ctime (which no
 * one can set back), a replacement the inode. */
struct guest_seen {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtim, ctim;
};

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct guest_seen seen[2];
static char seen_sha[2][65];            /* what they were checked against */

static void seen_of(const struct stat *st, struct guest_seen *s)
{
	*s = (struct guest_seen){ st->st_dev, st->st_ino, st->st_size, st->st_mtim, st->st_ctim };
}

static bool seen_same(const struct guest_seen *a, const struct guest_seen *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtim.tv_sec == b->mtim.tv_sec && a->mtim.tv_nsec == b->mtim.tv_nsec &&
	       a->ctim.tv_sec == b->ctim.tv_sec && a->ctim.tv_nsec == b->ctim.tv_nsec;
}

/* Is the open file `fd` the one last hashed to `want` as file i (0 kernel, 1 initramfs),
 * unchanged since (seen_same)? Then it need not be read again. */
static bool seen_known(int i, int fd, const char *want, struct guest_seen *now)
{
	struct stat st;
	bool known;

	if (fstat(fd, &st) < 0) {
		*now = (struct guest_seen){ 0 };
		return false;
	}
	seen_of(&st, now);
	pthread_mutex_lock(&seen_lock);
	known = !strcmp(seen_sha[i], want) && seen_same(&seen[i], now);
	pthread_mutex_unlock(&seen_lock);
	return known;
}

/* Open the guest's file i (0 kernel, 1 initramfs) and check its SHA-256. The hash of a
 * file unchanged since it last matched (its inode, size, mtime and ctime: a write
 * changes the ctime, which no one can set back) is remembered: reading 22 MiB again
 * cost each restore and boot 10-16 ms. */
static int open_checked(int i, const char *path, const char *want, const char *what,
			int *fdp, struct k8_err *err)
{
	struct guest_seen before, after;
	char got[65] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return k8_err_set(err, -errno, "cannot open the guest %s %s: %s", what, path,
				  strerror(errno));
	if (seen_known(i, fd, want, &before)) {
		*fdp = fd;
		return 0;
	}
	if (sha256_fd(fd, got, NULL) == 0 && !strcmp(got, want)) {
		struct stat st;
		/* remembered only if nothing changed it while it was read */
		if (before.ino && fstat(fd, &st) == 0) {
			seen_of(&st, &after);
			pthread_mutex_lock(&seen_lock);
			bool same = seen_same(&before, &after);
			seen[i] = same ? after : (struct guest_seen){ 0 };
			snprintf(seen_sha[i], sizeof(seen_sha[i]), "%s", same ? want : "");
			pthread_mutex_unlock(&seen_lock);
		}
	}
	if (strcmp(got, want)) {
		struct guest_image now;
		struct k8_err e2 = { 0 };
		char dir[4096];
		close(fd);
		/* The manifest is pinned when the daemon starts. A rebuilt image matches the
		 * manifest now on disk: say so, rather than call it tampering. */
		snprintf(dir, sizeof(dir), "%s", path);
		if (strrchr(dir, '/'))
			*strrchr(dir, '/') = '\0';
		if (guest_try_dir(&now, dir, &e2) == 0 &&
		    (!strcmp(now.kernel_sha, got) || !strcmp(now.initramfs_sha, got)))
			return k8_err_set(err, -EBADMSG,
					  "the guest image in %s was rebuilt after kosa8d started "
					  "(its manifest changed); restart the daemon to use it: "
					  "kosa8 daemon stop && kosa8 daemon start", dir);
		return k8_err_set(err, -EBADMSG,
				  "the guest %s %s does not match its manifest (sha256 %.12s..., "
				  "expected %.12s...); refusing to boot it. Rebuild the guest image "
				  "with `make guest`, or restore the original file",
				  what, path, got, want);
	}
	*fdp = fd;
	return 0;
}

int guest_verify_open(const struct guest_image *g, int *kfd, int *ifd, struct k8_err *err)
{
	int r;

	if (!g->kernel[0])
		return k8_err_set(err, -ENOENT, "no guest image: build it with `make`");
	r = open_checked(0, g->kernel, g->kernel_sha, "kernel", kfd, err);
	if (r)
		return r;
	r = open_checked(1, g->initramfs, g->initramfs_sha, "initramfs", ifd, err);
	if (r) {
		close(*kfd);
		*kfd = -1;
	}
	return r;
}

bool guest_verified(const struct guest_image *g, struct k8_err *err)
{
	int fd[2] = { -1, -1 };

	/* open_checked reads a file only when it changed since its hash last matched */
	if (guest_verify_open(g, &fd[0], &fd[1], err))
		return false;
	close(fd[0]);
	close(fd[1]);
	return true;
}
