/* SPDX-License-Identifier: Apache-2.0 */
/* rootfs.c - containerd's snapshot mounts, and the kosa8 image made of them (rootfs.h).
 *
 * The tar is written by a jailed worker: the tree is an image's, so its names, links and
 * owners are someone else's choice. The worker sees the tree through a directory fd
 * (Landlock: read beneath it only), writes to one fd it was given, keeps only
 * CAP_DAC_READ_SEARCH (to read files of any owner, as containerd's own unpacker wrote
 * them), and libarchive walks the tree physically (a symlink is stored, never followed).
 */
#include "shim/rootfs.h"
#include "common/sha.h"
#include "common/worker.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define ROOTFS_OPTS_MAX 4000        /* mount(2)'s data is one page */

/* ---- mounting ---- */

static char *rootfs_join_opts(const struct rootfs_mount *m, unsigned long *flags)
{
	size_t len = 1;
	char *s;

	*flags = 0;
	for (size_t i = 0; i < m->noptions; i++)
		len += strlen(m->options[i]) + 1;
	s = xmalloc(len);
	s[0] = 0;
	for (size_t i = 0; i < m->noptions; i++) {
		const char *o = m->options[i];
		if (!strcmp(o, "ro") || !strcmp(o, "rw"))
			continue;
		if (!strcmp(o, "bind") || !strcmp(o, "rbind")) {
			*flags |= MS_BIND | (o[0] == 'r' ? MS_REC : 0);
			continue;
		}
		if (!strcmp(o, "nosuid") || !strcmp(o, "nodev") || !strcmp(o, "noexec"))
			continue;       /* the host view is read, never run */
		if (*s)
			strcat(s, ",");
		strcat(s, o);
	}
	return s;
}

/* An overlay whose lowerdir list is too long for one page: containerd's own way, the
 * directories relative to their common parent, mounted from a child that chdir()s there
 * (a chdir in this threaded process would move every thread). */
static int rootfs_mount_long(const char *dir, const char *opts, struct k8_err *err)
{
	const char *lower = strstr(opts, "lowerdir=");
	cleanup_free char *parent = NULL, *rel = NULL;
	size_t plen;
	pid_t pid;
	int st;

	if (!lower)
		return k8_err_set(err, -E2BIG, "the rootfs mount's options are over %d bytes",
				  ROOTFS_OPTS_MAX);
	/* The common parent: the first lower directory's grandparent (snapshots/). */
	parent = xstrdup(lower + 9);
	parent[strcspn(parent, ":,")] = 0;
	for (int up = 0; up < 2; up++) {
		char *sl = strrchr(parent, '/');
		if (!sl || sl == parent)
			return k8_err_set(err, -E2BIG, "the rootfs mount's options are too long");
		*sl = 0;
	}
	plen = strlen(parent);
	/* every absolute path below parent loses "parent/" */
	rel = xmalloc(strlen(opts) + 1);
	{
		const char *p = opts;
		char *o = rel;
		while (*p) {
			if ((p == opts || p[-1] == '=' || p[-1] == ':' || p[-1] == ',') &&
			    !strncmp(p, parent, plen) && p[plen] == '/')
				p += plen + 1;
			*o++ = *p++;
		}
		*o = 0;
	}
	if (strlen(rel) > ROOTFS_OPTS_MAX)
		return k8_err_set(err, -E2BIG, "the rootfs mount's options are over %d bytes, "
				  "even relative to %s", ROOTFS_OPTS_MAX, parent);
	pid = fork();
	if (pid < 0)
		return k8_err_set(err, -errno, "fork: %s", strerror(errno));
	if (pid == 0) {
		if (chdir(parent) < 0 ||
		    mount("overlay", dir, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  rel) < 0)
			_exit(errno & 0x7f);
		_exit(0);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return k8_err_set(err, -(WIFEXITED(st) ? WEXITSTATUS(st) : EIO),
				  "mounting the rootfs overlay: %s",
				  strerror(WIFEXITED(st) ? WEXITSTATUS(st) : EIO));
	return 0;
}

int rootfs_mount(const char *dir, const struct rootfs_mount *m, size_t n, struct k8_err *err)
{
	const unsigned long ro = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;

	if (mkdir(dir, 0711) < 0 && errno != EEXIST)
		return k8_err_set(err, -errno, "%s: %s", dir, strerror(errno));
	for (size_t i = 0; i < n; i++) {
		unsigned long flags;
		cleanup_free char *opts = rootfs_join_opts(&m[i], &flags);
		const char *type = m[i].type && *m[i].type ? m[i].type : "none";
		int r = 0;

		if (flags & MS_BIND) {
			/* a bind mount takes no flags but MS_REC; read-only is a remount */
			if (mount(m[i].source, dir, NULL, MS_BIND | (flags & MS_REC), NULL) < 0 ||
			    mount(NULL, dir, NULL, MS_BIND | MS_REMOUNT | ro, NULL) < 0)
				r = -errno;
		} else if (strlen(opts) > ROOTFS_OPTS_MAX && !strcmp(type, "overlay")) {
			if ((r = rootfs_mount_long(dir, opts, err))) {
				rootfs_unmount(dir);
				return r;
			}
		} else if (mount(m[i].source, dir, type, ro, opts) < 0) {
			r = -errno;
		}
		if (r) {
			rootfs_unmount(dir);
			return k8_err_set(err, r, "mounting the rootfs (%s %s at %s): %s", type,
					  m[i].source ? m[i].source : "", dir, strerror(-r));
		}
	}
	return 0;
}

int rootfs_unmount(const char *dir)
{
	int n = 0;

	while (umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 && n < 64)
		n++;
	return 0;
}

/* ---- the cache key ---- */

static const char *rootfs_opt(const struct rootfs_mount *m, const char *key)
{
	size_t kl = strlen(key);

	for (size_t i = 0; i < m->noptions; i++)
		if (!strncmp(m->options[i], key, kl) && m->options[i][kl] == '=')
			return m->options[i] + kl + 1;
	return NULL;
}

static bool rootfs_dir_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	bool empty = true;

	if (!d)
		return false;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			empty = false;
	closedir(d);
	return empty;
}

int rootfs_key(const struct rootfs_mount *m, size_t n, char key[25])
{
	const char *lower, *upper;
	cleanup_free char *list = NULL;
	sha256_ctx c;
	char hex[65];

	if (n != 1 || !m[0].type || strcmp(m[0].type, "overlay"))
		return -ENOENT;
	lower = rootfs_opt(&m[0], "lowerdir");
	upper = rootfs_opt(&m[0], "upperdir");
	if (!lower || (upper && !rootfs_dir_empty(upper)))
		return -ENOENT;
	/* A path names a snapshot only while that snapshot lives: another containerd (or
	 * this one after a reset) reuses the numbers, so each directory's identity counts. */
	c = sha256_begin();
	sha256_add(c, "kosa8-shim-rootfs 1\n", 20);
	list = xstrdup(lower);
	for (char *save = NULL, *d = strtok_r(list, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		struct statx sx;
		char line[4200];

		if (statx(AT_FDCWD, d, AT_SYMLINK_NOFOLLOW, STATX_INO | STATX_BTIME, &sx) < 0) {
			sha256_end(c, NULL);
			return -ENOENT;
		}
		snprintf(line, sizeof(line), "%s %u:%u %llu %lld.%u\n", d, sx.stx_dev_major,
			 sx.stx_dev_minor, (unsigned long long)sx.stx_ino,
			 (sx.stx_mask & STATX_BTIME) ? (long long)sx.stx_btime.tv_sec : 0LL,
			 (sx.stx_mask & STATX_BTIME) ? sx.stx_btime.tv_nsec : 0u);
		sha256_add(c, line, strlen(line));
	}
	sha256_end(c, hex);
	snprintf(key, 25, "%.24s", hex);
	return 0;
}

/* ---- the layer, in a jailed worker ---- */

/* In the worker: the tree beneath fd[0] as a tar into fd[1]; its count of files. */
static int rootfs_tar_fn(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	struct archive *disk = archive_read_disk_new(), *w = archive_write_new();
	struct archive_entry_linkresolver *lr = archive_entry_linkresolver_new();
	struct archive_entry *e = NULL, *sparse = NULL;
	uint64_t files = 0;
	char buf[65536];
	int r = 0;

	if (!disk || !w || !lr)
		return k8_err_set(err, -ENOMEM, "libarchive: out of memory");
	if (fchdir(in->fd[0]) < 0)
		return k8_err_set(err, -errno, "entering the rootfs: %s", strerror(errno));
	archive_read_disk_set_symlink_physical(disk);
	archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
				       ARCHIVE_READDISK_NO_FFLAGS | ARCHIVE_READDISK_NO_SPARSE |
				       ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
	archive_write_set_format_pax_restricted(w);
	archive_write_set_bytes_in_last_block(w, 1);
	archive_entry_linkresolver_set_strategy(lr, archive_format(w));
	if (archive_read_disk_open(disk, ".") != ARCHIVE_OK ||
	    archive_write_open_fd(w, in->fd[1]) != ARCHIVE_OK) {
		r = k8_err_set(err, -EIO, "libarchive: %s", archive_error_string(disk) ?
			       archive_error_string(disk) : archive_error_string(w));
		goto out;
	}
	for (;;) {
		struct archive_entry *ent = archive_entry_new();
		const char *name;
		int rc = archive_read_next_header2(disk, ent);

		if (rc == ARCHIVE_EOF) {
			archive_entry_free(ent);
			break;
		}
		if (rc < ARCHIVE_WARN) {
			r = k8_err_set(err, -EIO, "reading the rootfs: %s", archive_error_string(disk));
			archive_entry_free(ent);
			goto out;
		}
		archive_read_disk_descend(disk);
		name = archive_entry_pathname(ent);
		if (!name || !strcmp(name, ".")) {
			archive_entry_free(ent);
			continue;
		}
		if (!strncmp(name, "./", 2)) {
			cleanup_free char *n2 = xstrdup(name + 2);
			archive_entry_set_pathname(ent, n2);
		}
		archive_entry_set_uname(ent, NULL);
		archive_entry_set_gname(ent, NULL);
		e = ent;
		archive_entry_linkify(lr, &e, &sparse);
		if (!e) {
			continue;       /* held by the resolver (not for tar formats) */
		}
		if (archive_entry_hardlink(e))
			archive_entry_set_size(e, 0);
		if (archive_write_header(w, e) < ARCHIVE_WARN) {
			r = k8_err_set(err, -EIO, "writing the layer: %s", archive_error_string(w));
			archive_entry_free(e);
			goto out;
		}
		if (archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e) &&
		    archive_entry_size(e) > 0) {
			ssize_t got;
			while ((got = archive_read_data(disk, buf, sizeof(buf))) > 0)
				if (archive_write_data(w, buf, (size_t)got) != got) {
					r = k8_err_set(err, -EIO, "writing the layer: %s",
						       archive_error_string(w));
					archive_entry_free(e);
					goto out;
				}
			if (got < 0) {
				r = k8_err_set(err, -EIO, "reading %s: %s",
					       archive_entry_pathname(e), archive_error_string(disk));
				archive_entry_free(e);
				goto out;
			}
		}
		files++;
		archive_entry_free(e);
	}
	if (archive_write_close(w) != ARCHIVE_OK)
		r = k8_err_set(err, -EIO, "writing the layer: %s", archive_error_string(w));
	*value = files;
out:
	archive_entry_linkresolver_free(lr);
	archive_read_free(disk);
	archive_write_free(w);
	return r;
}
WORKER_JOB(rootfs, rootfs_tar_fn);

/* Write `text` to work/blobs/sha256/<its digest>; its hex digest in hex. */
static int rootfs_blob(int blobsfd, const char *text, char hex[65], struct k8_err *err)
{
	cleanup_close int fd = -1;
	size_t n = strlen(text);
	int r;

	sha256_hex(text, n, hex);
	fd = openat(blobsfd, hex, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return k8_err_set(err, -errno, "writing a blob: %s", strerror(errno));
	if ((r = write_full(fd, text, n)))
		return k8_err_set(err, r, "writing a blob: %s", strerror(-r));
	return 0;
}

static int rootfs_layout(const char *dir, const char *layout, const char *ref,
			 struct k8_err *err)
{
	cleanup_close int rootfd = -1, blobsfd = -1, layerfd = -1;
	cleanup_free char *blobs = xasprintf("%s/blobs/sha256", layout);
	cleanup_free char *cfg = NULL, *man = NULL, *idx = NULL, *tmp = NULL;
	char lhex[65], chex[65], mhex[65];
	uint64_t files = 0, lsize = 0;
	int r;

	if ((r = mkdir_p(blobs, 0700)))
		return k8_err_set(err, r, "%s: %s", blobs, strerror(-r));
	rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	blobsfd = open(blobs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0 || blobsfd < 0)
		return k8_err_set(err, -errno, "%s: %s", rootfd < 0 ? dir : blobs, strerror(errno));
	layerfd = openat(blobsfd, "layer.tmp", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (layerfd < 0)
		return k8_err_set(err, -errno, "%s/layer.tmp: %s", blobs, strerror(errno));
	{
		struct worker w = {
			.name = "k8shim-rootfs",
			.job = &worker_job_rootfs,
			.userns = -1,
			.caps = 1ull << CAP_DAC_READ_SEARCH,
			.dirs = { { .fd = rootfd, .ro = true } },
			.ndirs = 1,
			.keep = { rootfd, layerfd },
			.nkeep = 2,
		};
		if ((r = worker_run(&w, "the rootfs's layer", &files, err)))
			return r;
	}
	if ((r = sha256_fd(layerfd, lhex, &lsize)))
		return k8_err_set(err, r, "hashing the layer: %s", strerror(-r));
	if (renameat(blobsfd, "layer.tmp", blobsfd, lhex) < 0)
		return k8_err_set(err, -errno, "naming the layer: %s", strerror(errno));
	cfg = xasprintf("{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{},"
			"\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:%s\"]},"
			"\"history\":[{\"created_by\":\"containerd-shim-kosa8-v2: containerd's "
			"snapshot\"}]}", lhex);
	if ((r = rootfs_blob(blobsfd, cfg, chex, err)))
		return r;
	man = xasprintf("{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
			"\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
			"\"digest\":\"sha256:%s\",\"size\":%zu},\"layers\":[{\"mediaType\":"
			"\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:%s\","
			"\"size\":%llu}]}", chex, strlen(cfg), lhex, (unsigned long long)lsize);
	if ((r = rootfs_blob(blobsfd, man, mhex, err)))
		return r;
	idx = xasprintf("{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":"
			"\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:%s\","
			"\"size\":%zu,\"annotations\":{\"io.containerd.image.name\":\"%s\"}}]}",
			mhex, strlen(man), ref);
	tmp = xasprintf("%s/index.json", layout);
	if ((r = write_file_atomic(tmp, idx, strlen(idx), 0600)))
		return k8_err_set(err, r, "%s: %s", tmp, strerror(-r));
	free(tmp);
	tmp = xasprintf("%s/oci-layout", layout);
	if ((r = write_file_atomic(tmp, "{\"imageLayoutVersion\":\"1.0.0\"}", 30, 0600)))
		return k8_err_set(err, r, "%s: %s", tmp, strerror(-r));
	return 0;
}

/* Is ref in kosa8d's store? 1, 0, or a negative errno. */
static int rootfs_have(const struct kc *k, const char *ref, struct k8_err *err)
{
	json_t *list = NULL, *v;
	size_t i;
	int r, found = 0;

	if ((r = kc_call(k, "GET", "/v1/images", NULL, &list, err)))
		return r;
	json_array_foreach(list, i, v)
		if (json_is_string(json_object_get(v, "ref")) &&
		    !strcmp(json_string_value(json_object_get(v, "ref")), ref))
			found = 1;
	json_decref(list);
	return found;
}

int rootfs_image(const struct kc *k, const char *dir, const char *key, const char *own_tag,
		 const char *work, char ref[256], struct k8_err *err)
{
	cleanup_free char *layout = NULL, *lockp = NULL;
	cleanup_close int lock = -1;
	json_t *body, *res = NULL;
	int r;

	snprintf(ref, 256, "%s:%s", ROOTFS_REPO, key ? key : own_tag);
	if (key && (r = rootfs_have(k, ref, err)) != 0)
		return r < 0 ? r : 0;
	if ((r = mkdir_p(work, 0700)))
		return k8_err_set(err, r, "%s: %s", work, strerror(-r));
	/* Two tasks of one new image: the second waits for the first's load. */
	lockp = xasprintf("%s/rootfs-%s.lock", work, key ? key : own_tag);
	lock = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		return k8_err_set(err, -errno, "%s: %s", lockp, strerror(errno));
	if (key && (r = rootfs_have(k, ref, err)) != 0)
		return r < 0 ? r : 0;
	layout = xasprintf("%s/layout-%s-%d", work, key ? key : own_tag, (int)getpid());
	rm_rf(layout);
	r = rootfs_layout(dir, layout, ref, err);
	if (!r) {
		body = json_pack("{s:s,s:s}", "path", layout, "tag", ref);
		r = kc_call(k, "POST", "/v1/images/load", body, &res, err);
		json_decref(body);
		json_decref(res);
		if (r)
			k8_err_wrap(err, "loading the rootfs into kosa8");
	}
	rm_rf(layout);
	return r;
}
