/* SPDX-License-Identifier: Apache-2.0 */
/* unpack_jail.c - the unpacker (unpack.c) run in a jailed worker, never in kosa8d itself
 * (image.h, "Unpacking in a jail"; docs/images.md "The unpacker's jail").
 *
 * Why a user namespace rather than root with CAP_CHOWN and CAP_FOWNER only: Landlock
 * rules cover opening, creating and removing files, not chmod, chown, utimes or xattrs.
 * A worker that is uid 0 of the host owns every file of root's, so without any
 * capability it could still chmod /usr/bin/su or /etc/shadow by path, and with
 * CAP_CHOWN chown anything. Root of a namespace of its own is host uid FIRST: it owns
 * nothing outside the trees it unpacks, and its capabilities act only on files whose
 * owners the namespace maps (FIRST.. on the host, which nothing else uses). It writes
 * through an idmapped clone of the tree, so what it creates as namespace uid u is uid u
 * on disk and mkfs.erofs, reading the tree as root, sees the image's own owners.
 */
#include "image/image_int.h"
#include "common/jail.h"
#include "common/worker.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <string.h>

/* What the unpacker needs of root, in its namespace: give files their owners (chown),
 * create in and set times of directories other ids own (DAC override, fowner), keep
 * setgid bits on files of other groups (fsetid). Without owners everything is its own:
 * only the DAC override, to fill a directory it made without u+w. */
#define UNPACK_CAPS (1ull << CAP_CHOWN | 1ull << CAP_DAC_OVERRIDE | 1ull << CAP_FOWNER | \
		     1ull << CAP_FSETID)
#define UNPACK_CAPS_NO_OWNERS (1ull << CAP_DAC_OVERRIDE)

int image_store_unpack_ids(struct image_store *st, const char *spec, struct k8_err *err)
{
	uint32_t first, count;

	if (jail_ids_parse(spec, IMAGE_UNPACK_IDS_COUNT, &first, &count))
		return k8_err_set(err, -EINVAL, "unpack_uids must be FIRST-LAST, at least %u "
				  "unused ids above 0, e.g. \"%s\"", IMAGE_UNPACK_IDS_COUNT,
				  IMAGE_UNPACK_IDS_DEFAULT);
	pthread_mutex_lock(&st->lock);
	st->unpack_first = first;
	st->unpack_count = count;
	k8_closep(&st->unpack_ns);
	st->unpack_ns = -1;
	pthread_mutex_unlock(&st->lock);
	return 0;
}

void image_store_unpack_range(struct image_store *st, uint32_t *first, uint32_t *count)
{
	pthread_mutex_lock(&st->lock);
	*first = st->unpack_first;
	*count = st->unpack_count;
	pthread_mutex_unlock(&st->lock);
}

int image_store_userns(struct image_store *st, int *ns, struct k8_err *err)
{
	int r = 0;

	*ns = -1;
	if (geteuid() != 0)
		return 0;
	pthread_mutex_lock(&st->lock);
	if (st->unpack_ns < 0) {
		struct jail_idmap ids = { .inside = 0, .outside = st->unpack_first,
					  .count = st->unpack_count };
		r = jail_userns(&ids, &ids, err);
		if (r >= 0) {
			st->unpack_ns = r;
			r = 0;
		}
	}
	*ns = st->unpack_ns;
	pthread_mutex_unlock(&st->lock);
	return r;
}

/* In the worker: fd[0] the tree, fd[1] the layer; str[0] its name; arg[0] the flags,
 * arg[1] the bytes it may still write. */
static int unpack_job_fn(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	return unpack_layer_fd(in->fd[0], in->fd[1], in->str[0], (unsigned)in->arg[0],
			       in->arg[1], value, err);
}
WORKER_JOB(unpack, unpack_job_fn);

int image_unpack_jailed(struct image_store *st, int rootfd, int fd, const char *name,
			bool owners, uint64_t max_bytes, uint64_t *used, struct k8_err *err)
{
	cleanup_close int tree = -1, usr = -1;
	uint64_t got = 0, max;
	unsigned flags = 0;
	int ns, r;

	if ((r = image_store_userns(st, &ns, err)))
		return k8_err_wrap(err, "the unpacker's user namespace");
	if (*used > max_bytes)
		return k8_err_set(err, -EFBIG, "the image passes %llu bytes",
				  (unsigned long long)max_bytes);
	max = max_bytes - *used;
	/* in the namespace, the tree only through its idmapped clone: what the worker makes
	 * as uid u is u on disk, and nothing of the host's is any id of its own */
	tree = ns >= 0 ? jail_idmapped_clone(rootfd, ns, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
					     MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSYMFOLLOW, err)
		       : fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
	if (tree < 0)
		return ns >= 0 ? k8_err_wrap(err, "the unpacker's view of %s/tmp", st->root)
			       : k8_err_set(err, -errno, "dup: %s", strerror(errno));
	usr = open("/usr", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (usr < 0)
		return k8_err_set(err, -errno, "/usr: %s", strerror(errno));
	if (ns >= 0)
		flags = owners ? UNPACK_OWNERS | UNPACK_MODES : UNPACK_MODES;
	struct worker w = {
		.name = "kosa8d-unpack", .job = &worker_job_unpack, .userns = ns,
		.caps = ns < 0 ? 0 : owners ? UNPACK_CAPS : UNPACK_CAPS_NO_OWNERS,
		.dirs = { { .fd = tree }, { .fd = usr, .ro = true } }, .ndirs = 2,
		.keep = { tree, fd }, .nkeep = 2, .arg = { flags, max }, .str = { name },
	};
	r = worker_run(&w, "the unpacker", &got, err);
	if (r)
		return r;
	*used += got < max ? got : max;        /* the worker's count, bounded */
	return 0;
}
