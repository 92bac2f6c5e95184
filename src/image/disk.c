/* SPDX-License-Identifier: Apache-2.0 */
/* disk.c - one read-only EROFS disk per image: unpack the layers in order (each in a
 * jailed worker, unpack_jail.c), mkfs.erofs.
 *
 * The tree is built in tmp/disk-N/root (tmp/ is 0700, so setuid files in the tree are
 * out of other users' reach), packed with mkfs.erofs (run directly, no shell; its
 * stderr becomes the error message), fsynced and renamed to disks/<hex>.erofs. A disk
 * that exists is returned at once; while one thread builds a disk, others asking for
 * the same one wait on st->cond instead of building it twice. Uncompressed EROFS: the
 * guest reads it directly, no decompression cost under TCG.
 */
#include "image/image_int.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define DISK_MKFS "mkfs.erofs"

/* Find mkfs.erofs in PATH or the sbin directories a daemon's PATH may lack. */
static int disk_find_mkfs(char *out, size_t n)
{
	const char *path = getenv("PATH");
	cleanup_free char *dirs = xasprintf("%s:/usr/sbin:/sbin:/usr/bin:/bin",
					    path && *path ? path : "");

	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		if (*d != '/')
			continue;
		snprintf(out, n, "%s/%s", d, DISK_MKFS);
		if (access(out, X_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

/* Run mkfs.erofs out src; its stderr (the tail) goes into the message on failure. */
static int disk_mkfs(const char *hex, const char *out, const char *src, struct k8_err *err)
{
	char mkfs[4096], uuid[40], msg[2048];
	char *argv[10];
	char *envp[] = { (char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LC_ALL=C", NULL };
	posix_spawn_file_actions_t fa;
	int pfd[2], argc = 0, status, r;
	size_t have = 0;
	pid_t pid;

	if (disk_find_mkfs(mkfs, sizeof(mkfs)))
		return k8_err_set(err, -ENOENT, "mkfs.erofs was not found; install erofs-utils "
				  "(apt-get install erofs-utils) to build image disks");
	/* A UUID derived from the manifest digest, so the same image gets the same UUID. */
	snprintf(uuid, sizeof(uuid), "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12,
		 hex + 16, hex + 20);
	argv[argc++] = mkfs;
	argv[argc++] = (char *)"-x-1";          /* no xattrs: the tree has only the host's */
	argv[argc++] = (char *)"--preserve-mtime";
	argv[argc++] = (char *)"-U";
	argv[argc++] = uuid;
	if (geteuid() != 0)
		argv[argc++] = (char *)"--all-root"; /* owners were not kept: see docs/images.md */
	argv[argc++] = (char *)out;
	argv[argc++] = (char *)src;
	argv[argc] = NULL;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	r = posix_spawn(&pid, mkfs, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (r) {
		close(pfd[0]);
		return k8_err_set(err, -r, "running %s: %s", mkfs, strerror(r));
	}
	for (;;) {
		char buf[512];
		ssize_t n = read(pfd[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		/* Keep the tail: the last lines say what went wrong. */
		if ((size_t)n > sizeof(msg) - 1)
			n = sizeof(msg) - 1;
		if (have + (size_t)n > sizeof(msg) - 1) {
			size_t drop = have + (size_t)n - (sizeof(msg) - 1);
			memmove(msg, msg + drop, have - drop);
			have -= drop;
		}
		memcpy(msg + have, buf, (size_t)n);
		have += (size_t)n;
	}
	close(pfd[0]);
	msg[have] = '\0';
	while (have && (msg[have - 1] == '\n' || msg[have - 1] == ' '))
		msg[--have] = '\0';
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return k8_err_set(err, -errno, "waiting for mkfs.erofs: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return k8_err_set(err, -EIO, "mkfs.erofs failed (%s %d): %s",
				  WIFEXITED(status) ? "exit" : "signal",
				  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
				  have ? msg : "no message");
	return 0;
}

static int disk_build(struct image_store *st, const char *hex, image_progress_fn progress,
		      void *ctx, struct k8_err *err)
{
	char work[96], final[80];
	cleanup_close int wfd = -1, rootfd = -1, dfd = -1;
	cleanup_free char *rootpath = NULL, *out = NULL;
	json_t *m = NULL, *l;
	char chex[65];
	uint64_t total = 0, done = 0, used = 0;
	struct stat s;
	size_t i;
	int r;

	r = store_blob_json(st, hex, &m, err);
	if (!r)
		r = store_manifest_check(m, chex, &total, err);
	if (r)
		goto out;
	store_tmp_name(st, "disk", work, sizeof(work));
	if (mkdirat(st->tmpfd, work, 0700) < 0 ||
	    (wfd = openat(st->tmpfd, work, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    mkdirat(wfd, "root", 0755) < 0 ||
	    (rootfd = openat(wfd, "root", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		r = k8_err_set(err, -errno, "creating a work directory in %s/tmp: %s", st->root,
			       strerror(errno));
		goto out;
	}
	json_array_foreach(json_object_get(m, "layers"), i, l) {
		const char *dg = json_string_value(json_object_get(l, "digest"));
		cleanup_close int lfd = openat(st->blobfd, dg + 7, O_RDONLY | O_NOFOLLOW |
					       O_CLOEXEC);
		if (progress)
			progress(ctx, "unpack", dg, done, total);
		r = lfd < 0 ? k8_err_set(err, -errno, "opening layer %s: %s", dg + 7,
					 strerror(errno))
			    : image_unpack_jailed(st, rootfd, lfd, dg + 7, true, IMAGE_UNPACK_MAX,
						  &used, err);
		if (r) {
			k8_err_wrap(err, "unpacking image sha256:%.12s", hex);
			goto out;
		}
		done += (uint64_t)json_integer_value(json_object_get(l, "size"));
	}
	if (progress) {
		progress(ctx, "unpack", "done", total, total);
		progress(ctx, "disk", "mkfs.erofs", 0, used);
	}
	rootpath = xasprintf("%s/tmp/%s/root", st->root, work);
	out = xasprintf("%s/tmp/%s/disk.erofs", st->root, work);
	r = disk_mkfs(hex, out, rootpath, err);
	if (r)
		goto out;
	dfd = openat(wfd, "disk.erofs", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0 || fchmod(dfd, 0444) < 0 || fstat(dfd, &s) < 0) {
		r = k8_err_set(err, -errno, "finishing the disk of sha256:%.12s: %s", hex,
			       strerror(errno));
		goto out;
	}
	snprintf(final, sizeof(final), "%s.erofs", hex);
	if (renameat(wfd, "disk.erofs", st->diskfd, final) < 0) {
		r = k8_err_set(err, -errno, "storing the disk of sha256:%.12s: %s", hex,
			       strerror(errno));
		goto out;
	}
	fsync(st->diskfd);
	if (progress)
		progress(ctx, "disk", "mkfs.erofs", (uint64_t)s.st_size, (uint64_t)s.st_size);
out:
	json_decref(m);
	if (wfd >= 0) {
		k8_closep(&rootfd);
		unpack_remove_at(st->tmpfd, work, 0);
	}
	return r;
}

int image_disk(struct image_store *st, const char *digest, image_progress_fn progress,
	       void *ctx, char **path, struct k8_err *err)
{
	char hex[65], ref[512], final[80];
	struct stat s;
	int r;

	*path = NULL;
	pthread_mutex_lock(&st->lock);
	r = store_lookup_locked(st, digest, hex, ref, sizeof(ref), err);
	if (r) {
		pthread_mutex_unlock(&st->lock);
		return r;
	}
	snprintf(final, sizeof(final), "%s.erofs", hex);
	for (;;) {
		if (fstatat(st->diskfd, final, &s, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(s.st_mode)) {
			pthread_mutex_unlock(&st->lock);
			*path = xasprintf("%s/disks/%s", st->root, final);
			return 0;
		}
		if (!json_object_get(st->building, hex))
			break;
		pthread_cond_wait(&st->cond, &st->lock);
	}
	json_object_set_new(st->building, hex, json_true());
	st->busy++;
	pthread_mutex_unlock(&st->lock);

	r = disk_build(st, hex, progress, ctx, err);

	pthread_mutex_lock(&st->lock);
	json_object_del(st->building, hex);
	pthread_cond_broadcast(&st->cond);
	st->busy--;
	if (st->gc_pending)
		store_gc_locked(st);
	pthread_mutex_unlock(&st->lock);
	if (!r)
		*path = xasprintf("%s/disks/%s", st->root, final);
	return r;
}
