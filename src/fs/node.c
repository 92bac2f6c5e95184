/* SPDX-License-Identifier: Apache-2.0 */
/* node.c - kosa8-fs node and handle tables, beneath-the-root resolution, save and load.
 *
 * Node ids: 1 is the synthetic root, 2 + i is the root of mount i (never freed), later
 * ids count up from next_id and are never reused, not even across `load` (next_id only
 * grows). A node holds an O_PATH fd; while it does, the host cannot reuse its inode
 * number, so the (mount, dev, ino) index never confuses two files.
 */
#include "fs/fs.h"
#include "common/util.h"

#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define RESOLVE_STRICT (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS)

static size_t node_hash_id(uint64_t id, size_t nb)
{
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 17) & (nb - 1);
}

static size_t node_hash_ino(uint32_t mount, dev_t dev, ino_t ino, size_t nb)
{
	uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev * 0xc2b2ae3d27d4eb4full
		     ^ mount;
	return (size_t)(h >> 17) & (nb - 1);
}

char *fs_path_join(const char *dir, const char *name)
{
	return dir[0] ? xasprintf("%s/%s", dir, name) : xstrdup(name);
}

static void node_link(struct fs_ctx *c, struct fs_node *n, bool ino_index)
{
	size_t h = node_hash_id(n->id, c->nbuckets);

	n->next_id = c->by_id[h];
	c->by_id[h] = n;
	n->next_ino = NULL;
	if (ino_index && n->fd >= 0) {
		h = node_hash_ino(n->mount, n->dev, n->ino, c->nbuckets);
		n->next_ino = c->by_ino[h];
		c->by_ino[h] = n;
	}
	c->nnodes++;
}

static void node_grow(struct fs_ctx *c)
{
	size_t nb = c->nbuckets * 2;
	struct fs_node **old = c->by_id, **old_ino = c->by_ino;
	size_t onb = c->nbuckets;
	struct fs_node *all = NULL;

	/* collect every node, then relink into the bigger table */
	for (size_t i = 0; i < onb; i++) {
		for (struct fs_node *n = old[i], *nx; n; n = nx) {
			nx = n->next_id;
			n->next_id = all;
			all = n;
		}
	}
	/* the ino index keeps its membership (duplicates stay out): rehash its chains */
	c->by_ino = xcalloc(nb, sizeof(*c->by_ino));
	for (size_t i = 0; i < onb; i++) {
		for (struct fs_node *n = old_ino[i], *nx; n; n = nx) {
			size_t h = node_hash_ino(n->mount, n->dev, n->ino, nb);
			nx = n->next_ino;
			n->next_ino = c->by_ino[h];
			c->by_ino[h] = n;
		}
	}
	free(old_ino);
	free(old);
	c->by_id = xcalloc(nb, sizeof(*c->by_id));
	c->nbuckets = nb;
	for (struct fs_node *n = all, *nx; n; n = nx) {
		size_t h = node_hash_id(n->id, nb);
		nx = n->next_id;
		n->next_id = c->by_id[h];
		c->by_id[h] = n;
	}
}

struct fs_node *fs_node_get(struct fs_ctx *c, uint64_t id)
{
	if (!c->by_id)
		return NULL;
	for (struct fs_node *n = c->by_id[node_hash_id(id, c->nbuckets)]; n; n = n->next_id)
		if (n->id == id)
			return n;
	return NULL;
}

static void node_unlink(struct fs_ctx *c, struct fs_node *n)
{
	struct fs_node **pp = &c->by_id[node_hash_id(n->id, c->nbuckets)];

	for (; *pp; pp = &(*pp)->next_id)
		if (*pp == n) {
			*pp = n->next_id;
			break;
		}
	if (n->fd >= 0) {
		pp = &c->by_ino[node_hash_ino(n->mount, n->dev, n->ino, c->nbuckets)];
		for (; *pp; pp = &(*pp)->next_ino)
			if (*pp == n) {
				*pp = n->next_ino;
				break;
			}
	}
	c->nnodes--;
}

static void node_free(struct fs_ctx *c, struct fs_node *n)
{
	if (!n)
		return;
	if (n->fd >= 0)
		close(n->fd);
	c->path_bytes -= strlen(n->path) + 1;
	free(n->path);
	free(n);
}

/* Replace a node's path (ownership of p passes in), keeping path_bytes right. */
static void node_set_path(struct fs_ctx *c, struct fs_node *n, char *p)
{
	c->path_bytes -= strlen(n->path) + 1;
	free(n->path);
	n->path = p;
	c->path_bytes += strlen(p) + 1;
}

static struct fs_node *node_new(struct fs_ctx *c, uint64_t id, uint32_t mount, int fd,
				const struct stat *st, char *path)
{
	struct fs_node *n = xcalloc(1, sizeof(*n));

	n->id = id;
	n->fd = fd;
	n->mount = mount;
	n->path = path;
	c->path_bytes += strlen(path) + 1;
	if (st) {
		n->type = st->st_mode & S_IFMT;
		n->dev = st->st_dev;
		n->ino = st->st_ino;
	}
	if (c->nnodes >= c->nbuckets)
		node_grow(c);
	return n;
}

int fs_mount_add(struct fs_ctx *c, const char *hostdir, bool ro)
{
	struct stat st;
	cleanup_free char *real = NULL;
	int fd;

	if (c->nmounts >= K8FS_MAX_MOUNTS)
		return -E2BIG;
	real = realpath(hostdir, NULL);
	if (!real)
		return -errno;
	fd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		close(fd);
		return -ENOTDIR;
	}
	c->mounts[c->nmounts].path = steal_pointer(&real);
	c->mounts[c->nmounts].fd = fd;
	c->mounts[c->nmounts].ro = ro;
	c->nmounts++;
	return 0;
}

int fs_mount_add_fd(struct fs_ctx *c, int fd, bool ro)
{
	struct stat st;

	if (c->nmounts >= K8FS_MAX_MOUNTS)
		return -E2BIG;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	c->mounts[c->nmounts].path = xasprintf("fd %d", fd);
	c->mounts[c->nmounts].fd = fd;
	c->mounts[c->nmounts].ro = ro;
	c->nmounts++;
	return 0;
}

/* The mount roots are nodes 2 .. nmounts+1 with their own dup'd fds. */
int fs_ctx_init(struct fs_ctx *c)
{
	c->proc_fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (c->proc_fd < 0)
		return -errno;
	c->nbuckets = 1024;
	c->by_id = xcalloc(c->nbuckets, sizeof(*c->by_id));
	c->by_ino = xcalloc(c->nbuckets, sizeof(*c->by_ino));
	c->nhandles_cap = 64;
	c->handles = xcalloc(c->nhandles_cap, sizeof(*c->handles));
	c->in = xmalloc(K8FS_MAX_MSG);
	c->out = xmalloc(K8FS_MAX_MSG);
	c->scratch = xmalloc(K8FS_MAX_MSG);
	c->dents = xmalloc(32768);
	c->ram_buf = xmalloc(K8FS_MAX_MSG);
	c->ram_fd = -1;
	for (uint32_t i = 0; i < c->nmounts; i++) {
		struct stat st;
		int fd = fcntl(c->mounts[i].fd, F_DUPFD_CLOEXEC, 3);

		if (fd < 0)
			return -errno;
		if (fstat(fd, &st) < 0) {
			close(fd);
			return -errno;
		}
		struct fs_node *n = node_new(c, 2 + (uint64_t)i, i, fd, &st, xstrdup(""));
		n->nlookup = 0;
		node_link(c, n, true);
	}
	c->next_id = 2 + (uint64_t)c->nmounts;
	return 0;
}

void fs_ctx_free(struct fs_ctx *c)
{
	if (c->by_id) {
		for (size_t i = 0; i < c->nbuckets; i++)
			for (struct fs_node *n = c->by_id[i], *nx; n; n = nx) {
				nx = n->next_id;
				node_free(c, n);
			}
	}
	free(c->by_id);
	free(c->by_ino);
	c->by_id = c->by_ino = NULL;
	for (size_t i = 1; c->handles && i < c->nhandles_cap; i++)
		if (c->handles[i].used && c->handles[i].fd >= 0)
			close(c->handles[i].fd);
	free(c->handles);
	c->handles = NULL;
	for (uint32_t i = 0; i < c->nmounts; i++) {
		if (c->mounts[i].fd >= 0)
			close(c->mounts[i].fd);
		free(c->mounts[i].path);
	}
	c->nmounts = 0;
	if (c->proc_fd > 0)
		close(c->proc_fd);
	free(c->in);
	free(c->out);
	free(c->dents);
	free(c->scratch);
	if (c->ram_buf)                  /* else a zeroed ctx: ram_fd was never set */
		fs_ram_set(c, -1, 0, 0);
	free(c->ram_buf);
	c->in = c->out = c->dents = c->scratch = c->ram_buf = NULL;
}

static bool node_is_root(const struct fs_ctx *c, uint64_t id)
{
	return id >= 2 && id < 2 + (uint64_t)c->nmounts;
}

int fs_node_found(struct fs_ctx *c, struct fs_node *parent, const char *name, int fd,
		  struct stat *stp, struct fs_node **out)
{
	struct stat st;
	struct fs_node *n;

	if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	for (n = c->by_ino[node_hash_ino(parent->mount, st.st_dev, st.st_ino, c->nbuckets)]; n;
	     n = n->next_ino) {
		if (n->mount == parent->mount && n->dev == st.st_dev && n->ino == st.st_ino) {
			close(fd);
			if (!node_is_root(c, n->id)) {
				/* the most recent name is the one most likely to still resolve */
				node_set_path(c, n, fs_path_join(parent->path, name));
			}
			n->nlookup++;
			*stp = st;
			*out = n;
			return 0;
		}
	}
	if (c->nnodes >= K8FS_MAX_NODES || (c->max_nodes && c->nnodes >= c->max_nodes)) {
		close(fd);
		fs_limit_hit(c, "nodes");
		return -ENFILE;
	}
	if (c->path_bytes + strlen(parent->path) + strlen(name) + 2 > K8FS_MAX_PATH_BYTES) {
		close(fd);
		fs_limit_hit(c, "path bytes");
		return -ENOMEM;
	}
	n = node_new(c, c->next_id++, parent->mount, fd, &st, fs_path_join(parent->path, name));
	n->nlookup = 1;
	node_link(c, n, true);
	*stp = st;
	*out = n;
	return 0;
}

void fs_node_forget(struct fs_ctx *c, uint64_t id, uint64_t cnt)
{
	struct fs_node *n = fs_node_get(c, id);

	if (!n)
		return;
	n->nlookup = cnt >= n->nlookup ? 0 : n->nlookup - cnt;
	if (n->nlookup == 0 && !node_is_root(c, id) && id != K8FS_ROOT_ID) {
		node_unlink(c, n);
		node_free(c, n);
	}
}

static char *path_reprefix(const char *p, const char *from, const char *to)
{
	size_t fl = strlen(from);

	if (strncmp(p, from, fl) || (p[fl] != '\0' && p[fl] != '/'))
		return NULL;
	return xasprintf("%s%s", to, p + fl);
}

void fs_node_renamed(struct fs_ctx *c, uint32_t mount, const char *from, const char *to,
		     bool exchange)
{
	for (size_t i = 0; i < c->nbuckets; i++) {
		for (struct fs_node *n = c->by_id[i]; n; n = n->next_id) {
			char *np;

			if (n->mount != mount || node_is_root(c, n->id) || n->id == K8FS_ROOT_ID)
				continue;
			np = path_reprefix(n->path, from, to);
			if (!np && exchange)
				np = path_reprefix(n->path, to, from);
			if (np)
				node_set_path(c, n, np);
		}
	}
}

/* ---- handles ---- */

int fs_handle_new(struct fs_ctx *c, uint64_t *fh)
{
	if (c->max_handles && c->nhandles >= c->max_handles) {
		fs_limit_hit(c, "open files");
		return -ENFILE;
	}
	for (size_t i = 1; i < c->nhandles_cap; i++) {
		if (!c->handles[i].used) {
			memset(&c->handles[i], 0, sizeof(c->handles[i]));
			c->handles[i].used = true;
			c->handles[i].fd = -1;
			c->nhandles++;
			*fh = i;
			return 0;
		}
	}
	if (c->nhandles_cap >= K8FS_MAX_HANDLES)
		return -ENFILE;
	size_t ncap = c->nhandles_cap * 2, i = c->nhandles_cap;
	c->handles = realloc(c->handles, ncap * sizeof(*c->handles));
	if (!c->handles)
		abort();
	memset(c->handles + c->nhandles_cap, 0, (ncap - c->nhandles_cap) * sizeof(*c->handles));
	c->nhandles_cap = ncap;
	c->handles[i].used = true;
	c->handles[i].fd = -1;
	c->nhandles++;
	*fh = i;
	return 0;
}

struct fs_handle *fs_handle_get(struct fs_ctx *c, uint64_t fh)
{
	if (fh == 0 || fh >= c->nhandles_cap || !c->handles[fh].used)
		return NULL;
	return &c->handles[fh];
}

void fs_handle_close(struct fs_ctx *c, uint64_t fh)
{
	struct fs_handle *h = fs_handle_get(c, fh);

	if (!h)
		return;
	if (h->fd >= 0)
		close(h->fd);
	memset(h, 0, sizeof(*h));
	h->fd = -1;
	c->nhandles--;
}

/* ---- resolution ---- */

int fs_resolve(struct fs_ctx *c, uint32_t mount, const char *rel)
{
	struct open_how how = {
		.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
		.resolve = RESOLVE_STRICT,
	};
	long fd;

	if (mount >= c->nmounts)
		return -ESTALE;
	if (!rel[0]) {
		fd = fcntl(c->mounts[mount].fd, F_DUPFD_CLOEXEC, 3);
		return fd < 0 ? -errno : (int)fd;
	}
	/* every component must be a plain name: no "", ".", "..", no leading '/' */
	for (const char *p = rel;;) {
		const char *e = strchr(p, '/');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l == 0 || l > 255 || (l == 1 && p[0] == '.') ||
		    (l == 2 && p[0] == '.' && p[1] == '.'))
			return -EINVAL;
		if (!e)
			break;
		p = e + 1;
	}
	do
		fd = syscall(SYS_openat2, c->mounts[mount].fd, rel, &how, sizeof(how));
	while (fd < 0 && (errno == EAGAIN || errno == EINTR));
	return fd < 0 ? -errno : (int)fd;
}

bool fs_node_still_named(struct fs_ctx *c, const struct fs_node *n)
{
	struct stat st;
	int fd = fs_resolve(c, n->mount, n->path);
	bool same;

	if (fd < 0)
		return false;
	same = fstat(fd, &st) == 0 && st.st_dev == n->dev && st.st_ino == n->ino;
	close(fd);
	return same;
}

int fs_reopen(struct fs_ctx *c, int opath_fd, mode_t type, int flags)
{
	char num[16];
	int fd;

	/* Only regular files and directories: opening a FIFO could block, a device could
	 * do anything, a socket cannot be opened, a symlink would be followed. The type of
	 * an inode never changes, and /proc/self/fd/N names exactly the inode of fd N. */
	if (type != S_IFREG && type != S_IFDIR)
		return -EACCES;
	snprintf(num, sizeof(num), "%d", opath_fd);
	fd = openat(c->proc_fd, num, flags | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	return fd;
}

/* ---- save / load ---- */

static char *tables_text(struct fs_ctx *c);

int fs_tables_save(struct fs_ctx *c, const char *path, struct k8_err *err)
{
	cleanup_free char *text = tables_text(c);
	int r;

	if (!text)
		return k8_err_set(err, -ENOMEM, "cannot encode the tables");
	r = write_file_atomic(path, text, strlen(text), 0600);
	if (r < 0)
		return k8_err_set(err, r, "cannot write %s: %s", path, strerror(-r));
	return 0;
}

int fs_tables_save_fd(struct fs_ctx *c, int fd, struct k8_err *err)
{
	cleanup_free char *text = tables_text(c);
	int r;

	if (!text)
		return k8_err_set(err, -ENOMEM, "cannot encode the tables");
	if ((r = write_full(fd, text, strlen(text))) < 0)
		return k8_err_set(err, r, "cannot write the tables: %s", strerror(-r));
	return 0;
}

static char *tables_text(struct fs_ctx *c)
{
	json_t *root = json_object(), *nodes = json_array(), *handles = json_array();
	json_t *mounts = json_array();
	char *text;

	for (uint32_t i = 0; i < c->nmounts; i++)
		json_array_append_new(mounts, json_pack("{s:s,s:b}", "path", c->mounts[i].path,
							"ro", c->mounts[i].ro));
	for (size_t i = 0; i < c->nbuckets; i++)
		for (struct fs_node *n = c->by_id[i]; n; n = n->next_id)
			json_array_append_new(nodes, json_pack("{s:I,s:i,s:s,s:I,s:i}",
				"nodeid", (json_int_t)n->id, "mount", (int)n->mount,
				"path", n->path, "nlookup", (json_int_t)n->nlookup,
				"type", (int)n->type));
	for (size_t i = 1; i < c->nhandles_cap; i++) {
		struct fs_handle *h = &c->handles[i];
		if (!h->used)
			continue;
		json_array_append_new(handles, json_pack("{s:I,s:I,s:I,s:b}",
			"fh", (json_int_t)i, "nodeid", (json_int_t)h->nodeid,
			"flags", (json_int_t)h->flags, "dir", h->dir));
	}
	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "next_nodeid", json_integer((json_int_t)c->next_id));
	json_object_set_new(root, "mounts", mounts);
	json_object_set_new(root, "nodes", nodes);
	json_object_set_new(root, "handles", handles);
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return text;
}

/* Drop every node and handle except the synthetic ones (mount roots keep their fds). */
static void tables_clear(struct fs_ctx *c)
{
	for (size_t i = 0; i < c->nbuckets; i++) {
		for (struct fs_node *n = c->by_id[i], *nx; n; n = nx) {
			nx = n->next_id;
			if (node_is_root(c, n->id)) {
				n->nlookup = 0;
				continue;
			}
			node_unlink(c, n);
			node_free(c, n);
		}
	}
	for (size_t i = 1; i < c->nhandles_cap; i++)
		if (c->handles[i].used)
			fs_handle_close(c, i);
}

void fs_limit_hit(struct fs_ctx *c, const char *what)
{
	static const struct rate_limit every_10s = { .per_minute = 6, .burst = 1 };
	uint64_t fold;

	c->st.limit_hits++;
	if (c->log && rate_take(&c->limit_log, &every_10s, now_mono_ns(), 1, &fold)) {
		c->log("limit reached: too many %s held for the guest (%llu times so far); "
		       "its requests get ENFILE/ENOMEM until it forgets some", what,
		       (unsigned long long)c->st.limit_hits);
	}
}

void fs_tables_reset(struct fs_ctx *c)
{
	tables_clear(c);
}

static int load_handle(struct fs_ctx *c, json_t *h)
{
	json_int_t fh = json_integer_value(json_object_get(h, "fh"));
	json_int_t nodeid = json_integer_value(json_object_get(h, "nodeid"));
	json_int_t flags = json_integer_value(json_object_get(h, "flags"));
	bool dir = json_is_true(json_object_get(h, "dir"));
	struct fs_handle *slot;
	struct fs_node *n;

	if (fh <= 0 || fh >= K8FS_MAX_HANDLES)
		return -EINVAL;
	while ((size_t)fh >= c->nhandles_cap) {
		size_t ncap = c->nhandles_cap * 2;
		c->handles = realloc(c->handles, ncap * sizeof(*c->handles));
		if (!c->handles)
			abort();
		memset(c->handles + c->nhandles_cap, 0,
		       (ncap - c->nhandles_cap) * sizeof(*c->handles));
		c->nhandles_cap = ncap;
	}
	slot = &c->handles[fh];
	if (slot->used)
		return -EEXIST;
	memset(slot, 0, sizeof(*slot));
	slot->used = true;
	slot->fd = -1;
	slot->dir = dir;
	slot->nodeid = (uint64_t)nodeid;
	slot->flags = (uint32_t)flags;
	/* UINT32_MAX marks the synthetic root's handle; a stale one must not look like it */
	slot->mount = nodeid == K8FS_ROOT_ID ? UINT32_MAX : UINT32_MAX - 1;
	c->nhandles++;
	if (nodeid == K8FS_ROOT_ID)
		return 0;
	n = fs_node_get(c, (uint64_t)nodeid);
	if (!n || n->fd < 0)
		return 0;               /* stale: requests on it get ESTALE */
	slot->mount = n->mount;
	if (dir) {
		slot->fd = fs_reopen(c, n->fd, n->type, O_RDONLY | O_DIRECTORY);
	} else {
		/* never O_TRUNC/O_CREAT again; a read-only mount only ever had O_RDONLY */
		int fl = (int)flags & (O_ACCMODE | O_APPEND | O_SYNC | O_DSYNC);
		if (c->mounts[n->mount].ro)
			fl = O_RDONLY;
		slot->fd = fs_reopen(c, n->fd, n->type, fl);
	}
	if (slot->fd < 0)
		slot->fd = -1;
	return 0;
}

static int tables_load(struct fs_ctx *c, json_t *root, const char *path, struct k8_err *err);

int fs_tables_load(struct fs_ctx *c, const char *path, struct k8_err *err)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);

	if (!root)
		return k8_err_set(err, -EINVAL, "cannot read %s: %s", path, jerr.text);
	return tables_load(c, root, path, err);
}

int fs_tables_load_fd(struct fs_ctx *c, int fd, struct k8_err *err)
{
	json_error_t jerr;
	json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);

	if (!root)
		return k8_err_set(err, -EINVAL, "cannot read the tables: %s", jerr.text);
	return tables_load(c, root, "the table file", err);
}

/* Takes root. */
static int tables_load(struct fs_ctx *c, json_t *root, const char *path, struct k8_err *err)
{
	json_t *nodes, *handles, *v;
	json_int_t next;
	size_t i;

	nodes = json_object_get(root, "nodes");
	handles = json_object_get(root, "handles");
	next = json_integer_value(json_object_get(root, "next_nodeid"));
	if (!json_is_array(nodes) || !json_is_array(handles) || next <= 0) {
		json_decref(root);
		return k8_err_set(err, -EINVAL, "%s is not a kosa8-fs table file", path);
	}
	tables_clear(c);
	json_array_foreach(nodes, i, v) {
		json_int_t id = json_integer_value(json_object_get(v, "nodeid"));
		json_int_t m = json_integer_value(json_object_get(v, "mount"));
		json_int_t nl = json_integer_value(json_object_get(v, "nlookup"));
		const char *p = json_string_value(json_object_get(v, "path"));
		struct fs_node *n;
		struct stat st;
		int fd;

		if (id <= K8FS_ROOT_ID || !p || nl < 0)
			continue;
		if (node_is_root(c, (uint64_t)id)) {
			fs_node_get(c, (uint64_t)id)->nlookup = (uint64_t)nl;
			continue;
		}
		if (fs_node_get(c, (uint64_t)id) || c->nnodes >= K8FS_MAX_NODES ||
		    c->path_bytes + strlen(p) + 1 > K8FS_MAX_PATH_BYTES)
			continue;
		fd = (m >= 0 && m < c->nmounts) ? fs_resolve(c, (uint32_t)m, p) : -ESTALE;
		/* a path that now names another kind of file is stale, not that file */
		if (fd >= 0 && (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ||
				(json_is_integer(json_object_get(v, "type")) &&
				 (mode_t)json_integer_value(json_object_get(v, "type")) !=
				 (st.st_mode & S_IFMT)))) {
			close(fd);
			fd = -1;
		}
		n = node_new(c, (uint64_t)id, m >= 0 && m < c->nmounts ? (uint32_t)m : 0,
			     fd >= 0 ? fd : -1, fd >= 0 ? &st : NULL, xstrdup(p));
		n->nlookup = (uint64_t)nl;
		/* a second node for an inode already indexed stays out of the index */
		if (fd >= 0) {
			struct fs_node *o;
			bool dup = false;
			for (o = c->by_ino[node_hash_ino(n->mount, n->dev, n->ino, c->nbuckets)];
			     o; o = o->next_ino)
				if (o->mount == n->mount && o->dev == n->dev && o->ino == n->ino)
					dup = true;
			node_link(c, n, !dup);
		} else {
			node_link(c, n, false);
		}
		if ((uint64_t)id >= c->next_id)
			c->next_id = (uint64_t)id + 1;
	}
	if ((uint64_t)next > c->next_id)
		c->next_id = (uint64_t)next;
	json_array_foreach(handles, i, v)
		load_handle(c, v);
	json_decref(root);
	return 0;
}
