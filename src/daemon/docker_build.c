/* SPDX-License-Identifier: Apache-2.0 */
/* docker_build.c - docker.sock's POST /build, the classic builder (docs/docker.md,
 * "Build").
 *
 * Theory of operation. The request body (a tar of the build context, maybe compressed)
 * streams into $KOSA8_HOME/docker/build/<n>/context.tar, capped; then a job unpacks it
 * with the image store's own layer unpacker (the same checks as a pulled layer: no
 * absolute or `..` paths, nothing through a symlink, no device nodes) into ctx/, parses
 * the Dockerfile (src/docker/dockerfile.c) and runs the steps one by one, writing
 * Docker's JSON-lines stream ({"stream": "Step 1/4 : ..."}). Every step that changes
 * the image makes a new image in the store (a new config over the parent's layers, plus
 * a layer for COPY/ADD/RUN) and names it IMAGE_CACHE_REPO:<step key>, which is the
 * build cache: the next build computes the same key and takes that image. The last
 * image gets the requested tag. Nothing of the context is followed out of ctx/: sources
 * are opened with openat2(RESOLVE_IN_ROOT), the walk never follows a symlink (a symlink
 * in the context is copied as a symlink).
 */
#include "daemon/docker_build.h"
#include "daemon/agentlink.h"
#include "daemon/archive.h"
#include "daemon/docker_engine.h"
#include "daemon/daemon.h"
#include "daemon/sandbox.h"
#include "daemon/slots.h"
#include "common/proto.h"
#include "common/sha.h"
#include "common/uarchive.h"
#include "common/worker.h"
#include "docker/copy.h"
#include "docker/dockerfile.h"
#include "docker/dockerignore.h"
#include "docker/names.h"
#include "docker/query.h"
#include "docker/runlayer.h"
#include "image/image.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <stdarg.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DKB_CONTEXT_MAX  (1ull << 30)   /* bytes of the context as sent (maybe compressed) */
#define DKB_UNPACK_MAX   (2ull << 30)   /* bytes of the context unpacked */
#define DKB_QUERY_JSON   (64u << 10)    /* buildargs / labels query values */
#define DKB_LAYER_MAX    (4ull << 30)   /* bytes of the layer one RUN makes */
#define DKB_LAYER_ENTRIES 1000000u      /* entries in it (the store's own cap) */
#define DKB_RUN_START_MS 120000         /* the agent starts a RUN's process within this */

/* ---- the request: query, body into a file ---- */

struct dkb_upload {
	int fd;
	uint64_t size;
	char *dir;                  /* the build's directory; NULL once the job owns it */
};

static int dkb_upload_write(void *ctx, const void *p, size_t n, struct k8_err *err)
{
	struct dkb_upload *u = ctx;
	int r;

	if (u->size + n > DKB_CONTEXT_MAX)
		return k8_err_set(err, -E2BIG, "the build context is larger than %llu bytes "
				  "(kosa8's limit; see docs/docker.md)",
				  (unsigned long long)DKB_CONTEXT_MAX);
	r = write_full(u->fd, p, n);
	if (r)
		return k8_err_set(err, r, "writing the build context: %s", strerror(-r));
	u->size += n;
	return 0;
}

static int dkb_job(struct api_job *j, json_t **result, struct k8_err *err);

static int dkb_upload_done(struct api_call *call, void *ctx)
{
	struct dkb_upload *u = ctx;
	int r;

	if (fsync(u->fd) < 0)
		return k8_err_set(&call->err, -errno, "writing the build context: %s",
				  strerror(errno));
	json_object_set_new(call->body, "dir", json_string(u->dir));
	r = api_reply_job(call, dkb_job, NULL);
	if (!r) {
		free(u->dir);   /* the job removes the directory */
		u->dir = NULL;
	}
	return r;
}

static void dkb_upload_free(void *ctx)
{
	struct dkb_upload *u = ctx;

	if (u->fd >= 0)
		close(u->fd);
	if (u->dir)
		rm_rf(u->dir);
	free(u->dir);
	free(u);
}

/* A JSON object of strings (or null values for buildargs) from a query argument. */
static int dkb_query_map(struct api_call *call, const char *key, bool nulls, json_t **out)
{
	cleanup_free char *buf = xmalloc(DKB_QUERY_JSON);
	const char *v = NULL, *k;
	json_t *m, *x;

	*out = json_object();
	if (api_query_str(call, key, buf, DKB_QUERY_JSON, &v))
		return call->err.code;
	if (!v)
		return 0;
	m = json_loads(v, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(m) || json_object_size(m) > DF_MAX_ARGS) {
		json_decref(m);
		return k8_err_set(&call->err, -EINVAL, "%s must be a JSON object of at most %d "
				  "strings", key, DF_MAX_ARGS);
	}
	json_object_foreach(m, k, x)
		if (!json_is_string(x) && !(nulls && json_is_null(x))) {
			json_decref(m);
			return k8_err_set(&call->err, -EINVAL, "%s: the value of '%.64s' is not "
					  "a string", key, k);
		}
	json_decref(*out);
	*out = m;
	return 0;
}

int dkb_api_build(struct api_call *call)
{
	char tbuf[API_SEG_LEN], fbuf[API_SEG_LEN], rbuf[16];
	const char *tag = NULL, *dockerfile = "Dockerfile", *remote = NULL;
	json_t *bargs = NULL, *labels = NULL;
	bool q = false, nocache = false;
	struct dkb_upload *u;
	struct api_sink sink;
	int r;

	if (api_query_str(call, "t", tbuf, sizeof(tbuf), &tag) ||
	    api_query_str(call, "dockerfile", fbuf, sizeof(fbuf), &dockerfile))
		return call->err.code;
	if (api_query_str(call, "remote", rbuf, sizeof(rbuf), &remote) == 0 && remote)
		return k8_err_set(&call->err, -ENOSYS, "a remote build context is not supported "
				  "by kosa8: send the context as a tar (see docs/docker.md)");
	k8_err_clear(&call->err);
	if (call->query) {
		q = dq_bool(call->query(call->query_ctx, "q"));
		nocache = dq_bool(call->query(call->query_ctx, "nocache"));
	}
	if (dkb_query_map(call, "buildargs", true, &bargs) ||
	    dkb_query_map(call, "labels", false, &labels)) {
		json_decref(bargs);
		json_decref(labels);
		return call->err.code;
	}
	if (tag) {
		char norm[512];
		if ((r = image_ref_normalize(tag, norm, sizeof(norm), &call->err)) ||
		    (strchr(norm, '@') && (r = k8_err_set(&call->err, -EINVAL, "invalid tag "
							   "'%s': a digest is not a tag", tag)))) {
			json_decref(bargs);
			json_decref(labels);
			return r;
		}
	}
	json_object_set_new(call->body, "t", tag ? json_string(tag) : json_null());
	json_object_set_new(call->body, "dockerfile", json_string(dockerfile));
	json_object_set_new(call->body, "buildargs", bargs);
	json_object_set_new(call->body, "labels", labels);
	json_object_set_new(call->body, "q", json_boolean(q));
	json_object_set_new(call->body, "nocache", json_boolean(nocache));

	u = xcalloc(1, sizeof(*u));
	u->fd = -1;
	cleanup_free char *base = xasprintf("%s/docker/build", call->d->home);
	if (mkdir_p(base, 0700) < 0) {
		free(u);
		return k8_err_set(&call->err, -errno, "%s: %s", base, strerror(errno));
	}
	u->dir = xasprintf("%s/b-XXXXXX", base);
	if (!mkdtemp(u->dir)) {
		r = k8_err_set(&call->err, -errno, "%s: %s", base, strerror(errno));
		free(u->dir);
		free(u);
		return r;
	}
	cleanup_free char *path = xasprintf("%s/context.tar", u->dir);
	u->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (u->fd < 0) {
		r = k8_err_set(&call->err, -errno, "%s: %s", path, strerror(errno));
		dkb_upload_free(u);
		return r;
	}
	sink.write = dkb_upload_write;
	sink.done = dkb_upload_done;
	sink.free = dkb_upload_free;
	sink.ctx = u;
	return api_take_body(call, &sink);
}

/* ---- the build ---- */

struct dkb {
	struct api_job *j;
	struct daemon *d;
	char *dir;
	int ctxfd;
	bool quiet, nocache;
	struct dignore ig;
	/* the image so far: manifest, config, its id (config digest; "" for scratch) */
	json_t *manifest, *config;
	char id[80];
	char mdg[80];               /* the image so far: its manifest digest */
	char sbname[32];            /* the build's own sandbox (RUN), "" until needed */
	bool cmd_set;               /* CMD seen in this stage (ENTRYPOINT then keeps it) */
	struct dcopy_links lk;      /* the image's symlinks after the layers listed (dkb_links) */
};

static void dkb_say(struct dkb *b, const char *fmt, ...) K8_PRINTF(2, 3);
static void dkb_say(struct dkb *b, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (b->quiet)
		return;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	if (!s)
		return;
	json_t *v = json_pack("{s:s}", "stream", s);
	if (!v)
		v = json_pack("{s:s}", "stream", "(output that is not UTF-8)\n");
	api_job_progress(b->j, v);
	free(s);
}

/* A file of the context (the Dockerfile, .dockerignore): inside ctx/ only, regular,
 * at most max bytes. -ENOENT when absent. */
static int dkb_read_ctx(struct dkb *b, const char *name, size_t max, char **out, size_t *len,
			struct k8_err *err)
{
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	cleanup_close int fd = (int)syscall(SYS_openat2, b->ctxfd, name, &how, sizeof(how));
	struct stat s;
	char *buf;
	int r;

	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", name, strerror(errno));
	if (fstat(fd, &s) < 0 || !S_ISREG(s.st_mode))
		return k8_err_set(err, -EINVAL, "%s is not a regular file", name);
	if ((uint64_t)s.st_size > max)
		return k8_err_set(err, -E2BIG, "%s is larger than %zu bytes", name, max);
	buf = xmalloc((size_t)s.st_size + 1);
	if ((r = read_full(fd, buf, (size_t)s.st_size))) {
		free(buf);
		return k8_err_set(err, r, "reading %s: %s", name, strerror(-r));
	}
	buf[s.st_size] = '\0';
	*out = buf;
	*len = (size_t)s.st_size;
	return 0;
}

static const char *dkb_now(char out[40])
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + strlen(out), 20, ".%09ldZ", ts.tv_nsec);
	return out;
}

/* The base image of FROM (pulled when the store lacks it) or scratch. */
static int dkb_from(struct dkb *b, const char *image, struct k8_err *err)
{
	char mdg[80];
	json_t *res = NULL;
	int r;

	json_decref(b->manifest);
	json_decref(b->config);
	b->manifest = b->config = NULL;
	b->cmd_set = false;
	if (!strcmp(image, "scratch")) {
		b->manifest = json_pack("{s:i,s:s,s:{s:s,s:s,s:i},s:[]}", "schemaVersion", 2,
					"mediaType", "application/vnd.oci.image.manifest.v1+json",
					"config", "mediaType", "application/vnd.oci.image.config.v1+json",
					"digest", "", "size", 0, "layers");
		b->config = json_pack("{s:s,s:s,s:{},s:{s:s,s:[]},s:[]}", "architecture", "amd64",
				      "os", "linux", "config", "rootfs", "type", "layers",
				      "diff_ids", "history");
		b->id[0] = '\0';
		b->mdg[0] = '\0';
		return 0;
	}
	r = image_read(b->d->images, image, mdg, &b->manifest, &b->config, err);
	if (r == -ENOENT) {
		k8_err_clear(err);
		dkb_say(b, "Pulling %s\n", image);
		r = sb_image_pull(b->d, image, NULL, NULL, &res, err);
		json_decref(res);
		if (!r)
			r = image_read(b->d->images, image, mdg, &b->manifest, &b->config, err);
	}
	if (r)
		return r;
	if (!json_is_object(json_object_get(b->config, "config")))
		json_object_set_new(b->config, "config", json_object());
	snprintf(b->mdg, sizeof(b->mdg), "%s", mdg);
	snprintf(b->id, sizeof(b->id), "%s",
		 json_string_value(json_object_get(json_object_get(b->manifest, "config"),
						   "digest")) ?: "");
	return 0;
}

/* Take the image a cache name holds, if any. */
static bool dkb_cached(struct dkb *b, const char *key)
{
	cleanup_free char *name = xasprintf("%s:%s", IMAGE_CACHE_REPO, key);
	json_t *m = NULL, *c = NULL;
	struct k8_err e = { 0 };
	char mdg[80];

	if (b->nocache || image_read(b->d->images, name, mdg, &m, &c, &e))
		return false;
	json_decref(b->manifest);
	json_decref(b->config);
	b->manifest = m;
	b->config = c;
	snprintf(b->mdg, sizeof(b->mdg), "%s", mdg);
	snprintf(b->id, sizeof(b->id), "%s",
		 json_string_value(json_object_get(json_object_get(m, "config"), "digest")) ?: "");
	return true;
}

/* The current config (changed by the step) and, when layer_fd >= 0, a new layer, as a
 * new image named by the step's cache key. */
static int dkb_commit(struct dkb *b, const char *created_by, int layer_fd, const char *key,
		      struct k8_err *err)
{
	cleanup_free char *ctext = NULL;
	cleanup_free char *name = xasprintf("%s:%s", IMAGE_CACHE_REPO, key);
	char chex[65], lhex[65], now[40], mdg[80];
	json_t *rootfs, *hist, *h;
	uint64_t lsize = 0;
	int r;

	dkb_now(now);
	if (layer_fd >= 0) {
		r = image_blob_add_fd(b->d->images, layer_fd, lhex, &lsize, err);
		if (r)
			return r;
		rootfs = json_object_get(b->config, "rootfs");
		if (!json_is_object(rootfs)) {
			rootfs = json_pack("{s:s,s:[]}", "type", "layers", "diff_ids");
			json_object_set_new(b->config, "rootfs", rootfs);
		}
		if (!json_is_array(json_object_get(rootfs, "diff_ids")))
			json_object_set_new(rootfs, "diff_ids", json_array());
		json_array_append_new(json_object_get(rootfs, "diff_ids"),
				      json_sprintf("sha256:%s", lhex));
		json_array_append_new(json_object_get(b->manifest, "layers"),
				      json_pack("{s:s,s:s+,s:I}", "mediaType",
						"application/vnd.oci.image.layer.v1.tar", "digest",
						"sha256:", lhex, "size", (json_int_t)lsize));
	}
	hist = json_object_get(b->config, "history");
	if (!json_is_array(hist)) {
		hist = json_array();
		json_object_set_new(b->config, "history", hist);
	}
	h = json_pack("{s:s,s:s}", "created", now, "created_by", created_by);
	if (layer_fd < 0)
		json_object_set_new(h, "empty_layer", json_true());
	json_array_append_new(hist, h);
	json_object_set_new(b->config, "created", json_string(now));
	ctext = json_dumps(b->config, JSON_COMPACT);
	if (!ctext)
		return k8_err_set(err, -ENOMEM, "the new image's config: out of memory");
	r = image_blob_add(b->d->images, ctext, strlen(ctext), chex, err);
	if (r)
		return r;
	json_object_set_new(b->manifest, "config",
			    json_pack("{s:s,s:s+,s:I}", "mediaType",
				      "application/vnd.oci.image.config.v1+json", "digest",
				      "sha256:", chex, "size", (json_int_t)strlen(ctext)));
	json_object_set_new(b->manifest, "schemaVersion", json_integer(2));
	json_object_set_new(b->manifest, "mediaType",
			    json_string("application/vnd.oci.image.manifest.v1+json"));
	r = image_commit(b->d->images, b->manifest, name, mdg, err);
	if (r)
		return r;
	snprintf(b->mdg, sizeof(b->mdg), "%s", mdg);
	snprintf(b->id, sizeof(b->id), "sha256:%s", chex);
	return 0;
}

static json_t *dkb_cfg(struct dkb *b)
{
	json_t *c = json_object_get(b->config, "config");

	if (!json_is_object(c)) {
		c = json_object();
		json_object_set_new(b->config, "config", c);
	}
	return c;
}

static json_t *dkb_argv(const struct df_step *s)
{
	json_t *a = json_array();

	if (!s->json) {
		json_array_append_new(a, json_string("/bin/sh"));
		json_array_append_new(a, json_string("-c"));
	}
	for (size_t i = 0; i < s->argv.n; i++)
		json_array_append_new(a, json_string(s->argv.v[i]));
	return a;
}

/* A metadata step: the config changes, no layer. */
static void dkb_apply_meta(struct dkb *b, const struct df_state *st, const struct df_step *s)
{
	json_t *c = dkb_cfg(b), *x;

	switch (s->kind) {
	case DF_ENV:
		x = json_array();
		for (size_t i = 0; i < st->env.n; i++)
			json_array_append_new(x, json_string(st->env.v[i]));
		json_object_set_new(c, "Env", x);
		break;
	case DF_LABEL:
		x = json_object_get(c, "Labels");
		if (!json_is_object(x)) {
			x = json_object();
			json_object_set_new(c, "Labels", x);
		}
		for (size_t i = 0; i < s->keys.n; i++)
			json_object_set_new(x, s->keys.v[i], json_string(s->vals.v[i] ?: ""));
		break;
	case DF_WORKDIR:
		json_object_set_new(c, "WorkingDir", json_string(s->argv.n ? s->argv.v[0] : "/"));
		break;
	case DF_USER:
		json_object_set_new(c, "User", json_string(s->argv.n ? s->argv.v[0] : ""));
		break;
	case DF_CMD:
		json_object_set_new(c, "Cmd", dkb_argv(s));
		b->cmd_set = true;
		break;
	case DF_ENTRYPOINT:
		json_object_set_new(c, "Entrypoint", dkb_argv(s));
		if (!b->cmd_set)  /* as Docker: an inherited CMD goes with a new ENTRYPOINT */
			json_object_set_new(c, "Cmd", json_null());
		break;
	case DF_EXPOSE:
		x = json_object_get(c, "ExposedPorts");
		if (!json_is_object(x)) {
			x = json_object();
			json_object_set_new(c, "ExposedPorts", x);
		}
		for (size_t i = 0; i < s->argv.n; i++)
			json_object_set_new(x, s->argv.v[i], json_object());
		break;
	default:
		break;
	}
}

/* ---- COPY / ADD: src/docker/copy.c makes the layer; the image's symlink maps of the
 * images seen lately are kept here, so a build (a cached one too) does not read its base
 * image's layers again: the longest cached prefix of an image's layer list is taken ---- */

#define DKB_LCACHE 8
#define DKB_LCACHE_LINKS 20000  /* a larger map is not kept */

/* The builds' state in a daemon: the symlink maps of the images seen lately. */
struct docker_build {
	pthread_mutex_t lock;
	struct dcopy_links e[DKB_LCACHE];
	unsigned next;
};

static void *dkb_make(struct daemon *d)
{
	struct docker_build *c = xcalloc(1, sizeof(*c));

	(void)d;
	pthread_mutex_init(&c->lock, NULL);
	return c;
}

static struct docker_build *dkb_of(struct daemon *d)
{
	return daemon_state(d, (void **)&d->docker_build, dkb_make);
}

static void dkb_lcache_get(struct dkb *b, const json_t *layers)
{
	struct docker_build *dkb_lc = dkb_of(b->d);
	int best = -1;

	pthread_mutex_lock(&dkb_lc->lock);
	for (int i = 0; i < DKB_LCACHE; i++)
		if (dcopy_links_prefix(dkb_lc->e[i].layers, layers) &&
		    (best < 0 || json_array_size(dkb_lc->e[i].layers) >
				 json_array_size(dkb_lc->e[best].layers)))
			best = i;
	if (best >= 0) {
		dcopy_links_clear(&b->lk);
		b->lk.links = json_deep_copy(dkb_lc->e[best].links);
		b->lk.layers = json_deep_copy(dkb_lc->e[best].layers);
		b->lk.below = json_deep_copy(dkb_lc->e[best].below);
	}
	pthread_mutex_unlock(&dkb_lc->lock);
}

static void dkb_lcache_put(struct dkb *b)
{
	struct docker_build *dkb_lc = dkb_of(b->d);
	unsigned k;

	if (!json_array_size(b->lk.layers) || json_object_size(b->lk.links) > DKB_LCACHE_LINKS)
		return;
	pthread_mutex_lock(&dkb_lc->lock);
	for (k = 0; k < DKB_LCACHE; k++)
		if (json_equal(dkb_lc->e[k].layers, b->lk.layers))
			break;
	if (k == DKB_LCACHE) {
		k = dkb_lc->next++ % DKB_LCACHE;
		dcopy_links_clear(&dkb_lc->e[k]);
		dkb_lc->e[k].layers = json_deep_copy(b->lk.layers);
		dkb_lc->e[k].links = json_deep_copy(b->lk.links);
		dkb_lc->e[k].below = json_deep_copy(b->lk.below);
	}
	pthread_mutex_unlock(&dkb_lc->lock);
}

/* The layer's entries as the links worker sends them: a 5-byte head (type: 0 other, 1
 * directory, 2 symlink; the name's length; the target's, DKB_LREC_NONE for none, both
 * little-endian), then the name and the target, without NULs. */
#define DKB_LREC_NONE 0xffffu

/* In the worker: read the layer (fd[0]), send each entry's type, name and link target
 * on fd[1]; str[0] is the layer's digest. */
static int dkb_links_scan(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	const char *digest = in->str[0];
	struct archive *a = uarchive_reader(UARCHIVE_COMPRESSED, err);
	struct archive_entry *e;
	int rr, r = 0;

	if (!a)
		return err->code;
	if (archive_read_open_fd(a, in->fd[0], 65536) != ARCHIVE_OK) {
		r = k8_err_set(err, -EINVAL, "layer %s is not a tar archive (plain, gzip, zstd, xz "
			       "or bzip2): %s", digest, archive_error_string(a) ?: "?");
		goto out;
	}
	while ((rr = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e), *tg = archive_entry_symlink(e);
		mode_t t = archive_entry_filetype(e);
		unsigned char head[5];
		size_t nl = name ? strlen(name) : 0, tl;

		if (!name || nl >= 4200 - 1)
			continue;       /* kept out of the map, as the unpacker refuses it */
		tl = t == AE_IFLNK && tg && strlen(tg) < 4096 ? strlen(tg) : DKB_LREC_NONE;
		head[0] = t == AE_IFLNK ? 2 : t == AE_IFDIR ? 1 : 0;
		head[1] = (unsigned char)nl;
		head[2] = (unsigned char)(nl >> 8);
		head[3] = (unsigned char)tl;
		head[4] = (unsigned char)(tl >> 8);
		if (write_full(in->fd[1], head, sizeof(head)) || write_full(in->fd[1], name, nl) ||
		    (tl != DKB_LREC_NONE && write_full(in->fd[1], tg, tl)))
			goto out;       /* the daemon stopped reading: it has its answer */
		++*value;
		archive_read_data_skip(a);
	}
	if (rr != ARCHIVE_EOF)
		r = k8_err_set(err, -EINVAL, "layer %s: %s", digest,
			       archive_error_string(a) ?: "?");
out:
	archive_read_free(a);
	return r;
}
WORKER_JOB(links, dkb_links_scan);

/* One record from the worker into p and tg (NUL-terminated): 1, 0 at the end, or a
 * negative errno for a record no worker of ours writes. */
static int dkb_lrec_read(int fd, int *type, char p[4200], char tg[4097], bool *has_tg)
{
	unsigned char head[5];
	size_t nl, tl;
	ssize_t n;

	do
		n = read(fd, head, 1);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n == 0 ? 0 : -errno;
	if (read_full(fd, head + 1, 4))
		return -EPIPE;
	nl = head[1] | (size_t)head[2] << 8;
	tl = head[3] | (size_t)head[4] << 8;
	if (head[0] > 2 || nl >= 4200 - 1 || (tl != DKB_LREC_NONE && tl >= 4096) ||
	    (tl != DKB_LREC_NONE && head[0] != 2))
		return -EBADMSG;
	*has_tg = tl != DKB_LREC_NONE;
	if (read_full(fd, p, nl) || (*has_tg && read_full(fd, tg, tl)))
		return -EPIPE;
	p[nl] = '\0';
	tg[*has_tg ? tl : 0] = '\0';
	*type = head[0];
	return 1;
}

/* Apply one layer to the map (copy.h's dcopy_layer_read). The layer (a registry's, or a
 * RUN's: the guest's bytes) is read by a jailed worker (src/common/worker.h), which sends
 * only each entry's type, name and link target; copy.c's dcopy_links_entry applies them. */
static int dkb_links_layer(void *ctx, struct dcopy_links *lk, const char *digest,
			   struct k8_err *err)
{
	struct dkb *b = ctx;
	cleanup_close int fd = image_blob_open(b->d->images, digest, err);
	struct k8_err werr = { 0 };
	int p[2], ns, report, rr = 0, r = 0, type = 0;
	char name[4200], tg[4097];
	bool has_tg = false;
	pid_t pid;

	if (fd < 0)
		return fd;
	if (image_store_userns(b->d->images, &ns, err))
		return err->code;
	if (pipe2(p, O_CLOEXEC) < 0)
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	struct worker w = {
		.name = "kosa8d-links", .job = &worker_job_links, .userns = ns,
		.keep = { fd, p[1] }, .nkeep = 2, .str = { digest },
		.dirs = { { .fd = open("/usr", O_PATH | O_DIRECTORY | O_CLOEXEC), .ro = true } },
		.ndirs = 1,
	};
	if (w.dirs[0].fd < 0)
		pid = k8_err_set(err, -errno, "/usr: %s", strerror(errno));
	else
		pid = worker_start(&w, &report, err);
	k8_closep(&w.dirs[0].fd);
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return err->code;
	}
	while (!r && (rr = dkb_lrec_read(p[0], &type, name, tg, &has_tg)) > 0)
		r = dcopy_links_entry(lk, type, name, has_tg ? tg : NULL, err);
	if (!r && rr < 0)
		r = k8_err_set(err, -EBADMSG, "the worker reading layer %s sent a malformed "
			       "entry", digest);
	close(p[0]);            /* a worker still sending gets EPIPE and ends */
	rr = worker_wait(pid, report, "the worker reading the layer", NULL, &werr);
	close(report);
	if (!r && rr)
		r = k8_err_set(err, rr, "%s", werr.msg);
	return r;
}

/* The image so far's symlink map (copy.h's links callback): only the layers not applied
 * yet are read; NULL when it has no layers. */
static const json_t *dkb_links(void *ctx, struct k8_err *err)
{
	struct dkb *b = ctx;
	const json_t *layers = json_object_get(b->manifest, "layers");
	bool added;

	if (!json_array_size(layers))
		return NULL;
	if (!b->lk.links || !dcopy_links_prefix(b->lk.layers, layers))
		dkb_lcache_get(b, layers);
	if (dcopy_links_update(&b->lk, layers, dkb_links_layer, b, &added, err))
		return NULL;
	if (added)
		dkb_lcache_put(b);
	return b->lk.links;
}

/* The layer of a COPY/ADD step into the open file `fd`; its content digest out. */
static int dkb_copy(struct dkb *b, const struct df_state *st, const struct df_step *s, int fd,
		    char digest[65], struct k8_err *err)
{
	struct dcopy_in in = { .ctxfd = b->ctxfd, .ig = &b->ig, .workdir = st->workdir,
			       .links = dkb_links, .links_ctx = b };

	return dcopy_layer(&in, s, fd, digest, err);
}

/* ---- RUN: a container in the build's own sandbox, its writable layer taken back ---- */

/* Output of the RUN's process as stream lines; bytes that are not UTF-8 become '?'. */
static void dkb_output(struct dkb *b, const unsigned char *p, size_t n)
{
	json_t *v;

	if (b->quiet || !n)
		return;
	v = json_stringn(p ? (const char *)p : "", n);
	if (!v) {
		char *t = xmalloc(n + 1);
		for (size_t i = 0; i < n; i++)
			t[i] = p[i] < 0x80 && p[i] ? (char)p[i] : '?';
		v = json_stringn(t, n);
		free(t);
	}
	if (v)
		api_job_progress(b->j, json_pack("{s:o}", "stream", v));
}

static void dkb_rand_id(char out[13])
{
	unsigned char r[6] = { 0 };

	if (getrandom(r, sizeof(r), 0) != sizeof(r)) {
		uint64_t t = now_real_ns();
		memcpy(r, &t, sizeof(r));
	}
	k8_hex(r, sizeof(r), out);
	out[12] = '\0';
}

/* The build's sandbox, running, with the current image attached (a fresh sandbox once
 * the one in use has no free image slot). A reference for the caller (sb_put). */
/* slot_use's fn: the image's slot, copied out (the build's own sandbox evicts nothing,
 * so it stays while the build runs). */
static int dkb_slot(void *ctx, const struct vm_image *img, const json_t *icfg,
		    struct k8_err *err)
{
	(void)icfg, (void)err;
	*(struct vm_image *)ctx = *img;
	return 0;
}

static struct sandbox *dkb_sandbox(struct dkb *b, struct vm_image *img, struct k8_err *err)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		struct sandbox *sb;
		int r;

		if (!b->sbname[0]) {
			char id[13];
			dkb_rand_id(id);
			snprintf(b->sbname, sizeof(b->sbname), "dkb-%s", id);
			dkb_say(b, " ---> Starting build sandbox %s\n", b->sbname);
		}
		sb = dke_get(b->d, b->sbname, err);
		if (!sb)
			return NULL;
		r = slot_use(b->d, sb, b->mdg, false, NULL, dkb_slot, img, err);
		if (!r)
			return sb;
		sb_put(b->d, sb);
		if (r != -ENOSPC || attempt)
			return NULL;
		k8_err_clear(err);      /* every slot taken: a new sandbox */
		sb_remove(b->d, b->sbname, false, err);
		k8_err_clear(err);
		b->sbname[0] = '\0';
	}
	return NULL;
}

/* The check of a RUN's layer, in a jailed worker: it reads the tar from a pipe, fd[0]. */
static int dkb_check_fn(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	return drunlayer_check(in->fd[0], DKB_LAYER_MAX, DKB_LAYER_ENTRIES, err);
}
WORKER_JOB(runlayer, dkb_check_fn);

/* Start the check's worker: a user namespace's root with no capability, no file but
 * /usr read-only. Its pid and report fd; *feed is the pipe to write the layer into. */
static pid_t dkb_check_start(struct dkb *b, int *feed, int *report, struct k8_err *err)
{
	int p[2], ns;
	pid_t pid;

	if (image_store_userns(b->d->images, &ns, err))
		return -1;
	if (pipe2(p, O_CLOEXEC) < 0) {
		k8_err_set(err, -errno, "pipe: %s", strerror(errno));
		return -1;
	}
	struct worker w = {
		.name = "kosa8d-runlayer", .job = &worker_job_runlayer, .userns = ns, .caps = 0,
		.keep = { p[0] }, .nkeep = 1,
		.dirs = { { .fd = open("/usr", O_PATH | O_DIRECTORY | O_CLOEXEC), .ro = true } },
		.ndirs = 1,
	};
	if (w.dirs[0].fd < 0)
		pid = k8_err_set(err, -errno, "/usr: %s", strerror(errno));
	else
		pid = worker_start(&w, report, err);
	k8_closep(&w.dirs[0].fd);
	close(p[0]);
	if (pid < 0)
		close(p[1]);
	else
		*feed = p[1];
	return pid;
}

/* Copy the exited container's layer into fd (capped), and through a pipe to its check
 * (runlayer.h), which reads it as it comes in a jailed worker (the guest made those
 * bytes: kosa8d never parses them). */
static int dkb_take_layer(struct dkb *b, struct sandbox *sb, const char *ctr, int fd,
			  struct k8_err *err)
{
	struct archive_xfer *x = NULL;
	struct k8_err cerr = { 0 };
	int feed = -1, report = -1, r = archive_layer_open(b->d, sb, ctr, &x, err), rc;
	uint64_t total = 0;
	char *buf;
	ssize_t n;
	pid_t pid;

	if (r)
		return r;
	if ((pid = dkb_check_start(b, &feed, &report, err)) < 0) {
		archive_close(x);
		return err->code;
	}
	buf = xmalloc(65536);
	while ((n = archive_get_read(x, buf, 65536, err)) > 0) {
		if ((total += (uint64_t)n) > DKB_LAYER_MAX + (64u << 20)) {
			r = k8_err_set(err, -EFBIG, "the RUN's layer is larger than %llu bytes",
				       (unsigned long long)DKB_LAYER_MAX);
			break;
		}
		if ((r = write_full(fd, buf, (size_t)n))) {
			k8_err_set(err, r, "writing the RUN's layer: %s", strerror(-r));
			break;
		}
		/* a check that ended early (a refusal) has read enough: its report says */
		if (feed >= 0 && write_full(feed, buf, (size_t)n))
			k8_closep(&feed);
	}
	if (!r && n < 0)
		r = (int)n;
	free(buf);
	archive_close(x);
	k8_closep(&feed);
	rc = worker_wait(pid, report, "the check of the RUN's layer", NULL, &cerr);
	close(report);
	if (!r && rc)
		r = k8_err_set(err, rc, "%s", cerr.msg);
	return r;
}

/* The RUN's output, as the build's stream lines. */
static int dkb_run_output(void *ctx, uint16_t type, uint16_t flags, const unsigned char *p,
			  size_t n)
{
	(void)flags;
	if (n && (type == PROTO_STDOUT || type == PROTO_STDERR))
		dkb_output(ctx, p, n);
	return 0;
}

/* Run the step's command in a container of the current image; its layer into fd. */
static int dkb_run_cmd(struct dkb *b, const struct df_step *s, int fd, struct k8_err *err)
{
	struct stream_ops ops = { .output = dkb_run_output, .input_fd = -1, .gone_fd = -1 };
	bool lost;
	struct vm_image img;
	struct sandbox *sb = dkb_sandbox(b, &img, err);
	json_t *c, *argv, *env, *req, *resp = NULL, *exit_info = NULL, *v;
	const char *wd, *user;
	struct stream *st = NULL;
	struct agentlink *l;
	char ctr[13];
	size_t i;
	int r, code;

	if (!sb)
		return err->code ? err->code : -EIO;
	dkb_rand_id(ctr);
	c = dkb_cfg(b);
	argv = dkb_argv(s);
	env = json_array();
	json_array_foreach(json_object_get(c, "Env"), i, v)
		if (json_is_string(v))
			json_array_append(env, v);
	for (i = 0; i < s->run_env.n; i++)
		json_array_append_new(env, json_string(s->run_env.v[i]));
	wd = json_string_value(json_object_get(c, "WorkingDir"));
	user = json_string_value(json_object_get(c, "User"));
	req = json_pack("{s:s,s:s,s:s,s:o,s:o,s:s,s:s,s:b,s:b,s:b,s:s,s:[]}", "op", "run",
			"container", ctr, "image", img.digest, "argv", argv, "env", env, "cwd",
			wd && *wd ? wd : "/", "user", user && *user ? user : "0", "stdin", 0, "rm",
			0, "detach", 0, "netns", "vm", "binds");
	dkb_say(b, " ---> Running in %s\n", ctr);
	r = sb_agent_request(sb, req, DKB_RUN_START_MS, &resp, &st, err);      /* takes req */
	json_decref(resp);
	if (r) {
		sb_put(b->d, sb);
		return r;
	}
	l = &sb->link;
	lost = link_stream_run(l, st, &ops, b, &exit_info) == -ECONNRESET;
	link_stream_close(l, st);
	code = (int)json_integer_value(json_object_get(exit_info, "code"));
	if (lost) {
		r = k8_err_set(err, -EIO, "RUN: %s (exit code %d)", LINK_LOST_WHY, code);
	} else if (code != 0) {
		cleanup_free char *cmd = NULL;
		json_t *a = dkb_argv(s);
		cmd = s->json ? json_dumps(a, JSON_COMPACT) : xasprintf("/bin/sh -c %s",
									 s->argv.n ? s->argv.v[0] : "");
		json_decref(a);
		r = k8_err_set(err, -ECANCELED, "The command '%s' returned a non-zero code: %d%s",
			       cmd ? cmd : "?", code,
			       json_is_true(json_object_get(exit_info, "oom")) ? " (out of memory)"
			       : "");
	} else {
		r = dkb_take_layer(b, sb, ctr, fd, err);
	}
	json_decref(exit_info);
	req = json_pack("{s:s,s:s}", "op", "rm", "container", ctr);
	{
		struct k8_err e2 = { 0 };
		json_t *rr = NULL;
		sb_agent_request(sb, req, 30000, &rr, NULL, &e2);     /* takes req */
		json_decref(rr);
	}
	dkb_say(b, " ---> Removed intermediate container %s\n", ctr);
	sb_put(b->d, sb);
	return r;
}

/* ---- the job ---- */

static int dkb_step(struct dkb *b, struct df_state *st, const struct df_step *s,
		    struct k8_err *err)
{
	char key[65], digest[65];
	cleanup_close int fd = -1;
	int r;

	if (s->kind == DF_RUN || s->kind == DF_COPY || s->kind == DF_ADD) {
		cleanup_free char *tmp = xasprintf("%s/layer.tar", b->dir);
		unlink(tmp);
		fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0)
			return k8_err_set(err, -errno, "%s: %s", tmp, strerror(errno));
		unlink(tmp);
	}
	if (s->kind == DF_COPY || s->kind == DF_ADD) {
		r = dkb_copy(b, st, s, fd, digest, err);
		if (r)
			return r;
	}
	if (df_step_key(b->id, s, s->kind != DF_RUN && fd >= 0 ? digest : NULL, key))
		return k8_err_set(err, -ENOMEM, "step key: out of memory");
	if (dkb_cached(b, key)) {
		dkb_say(b, " ---> Using cache\n");
		return 0;
	}
	if (s->kind == DF_RUN) {
		if (!b->mdg[0])
			return k8_err_set(err, -ENOTSUP, "Dockerfile line %u: RUN on an image FROM "
					  "scratch with no layer: there is no shell to run", s->line);
		r = dkb_run_cmd(b, s, fd, err);
		if (r)
			return r;
	}
	dkb_apply_meta(b, st, s);
	cleanup_free char *by = xasprintf("%s%.4000s", fd >= 0 ? "" : "/bin/sh -c #(nop) ",
					  s->key_text);
	return dkb_commit(b, by, fd, key, err);
}

/* FROM: the stage's image, and its Env and WorkingDir as the state's. */
static int dkb_from_step(struct dkb *b, struct df_state *st, const char *ref, struct k8_err *err)
{
	const char **env;
	json_t *cfg, *ev, *v;
	size_t ne = 0, x;
	int r = dkb_from(b, ref, err);

	if (r)
		return r;
	cfg = dkb_cfg(b);
	ev = json_object_get(cfg, "Env");
	env = xcalloc(json_array_size(ev) + 1, sizeof(*env));
	json_array_foreach(ev, x, v)
		if (json_is_string(v))
			env[ne++] = json_string_value(v);
	r = df_state_set_env(st, env, ne);
	free((void *)env);
	if (!r)
		r = df_state_set_workdir(st, json_string_value(json_object_get(cfg, "WorkingDir")));
	if (r)
		k8_err_set(err, r, "the base image's Env");
	return r;
}

static int dkb_run(struct dkb *b, json_t *body, json_t **result, struct k8_err *err)
{
	const char *dfname = json_string_value(json_object_get(body, "dockerfile")) ?: "Dockerfile";
	const char *tag = json_string_value(json_object_get(body, "t"));
	json_t *bargs = json_object_get(body, "buildargs"), *labels = json_object_get(body, "labels");
	cleanup_free char *text = NULL, *igt = NULL, *ctxtar = xasprintf("%s/context.tar", b->dir);
	cleanup_free char *ctxdir = xasprintf("%s/ctx", b->dir);
	const char **keys, **vals, *k;
	struct dockerfile *df = NULL;
	struct df_state st;
	bool have_state = false;
	size_t len, nb = 0;
	json_t *v;
	int r;

	if (mkdir(ctxdir, 0700) < 0 ||
	    (b->ctxfd = open(ctxdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return k8_err_set(err, -errno, "%s: %s", ctxdir, strerror(errno));
	{
		/* a client's tar: in a jailed worker; its owners mean nothing to COPY (0:0
		 * unless --chown), so none are kept */
		cleanup_close int cfd = open(ctxtar, O_RDONLY | O_CLOEXEC);
		uint64_t used = 0;
		r = cfd < 0 ? k8_err_set(err, -errno, "%s: %s", ctxtar, strerror(errno))
			    : image_unpack_jailed(b->d->images, b->ctxfd, cfd, "context.tar", false,
						  DKB_UNPACK_MAX, &used, err);
	}
	unlink(ctxtar);
	if (r)
		return k8_err_wrap(err, "the build context was refused");
	r = dkb_read_ctx(b, dfname, DF_MAX_SIZE, &text, &len, err);
	if (r)
		return k8_err_wrap(err, "Cannot locate specified Dockerfile");
	if (dkb_read_ctx(b, ".dockerignore", DIGNORE_FILE_MAX, &igt, &len, err) == 0) {
		if ((r = dignore_parse(igt, len, &b->ig, err)))
			return k8_err_wrap(err, ".dockerignore");
	}
	k8_err_clear(err);
	r = df_parse(text, strlen(text), &df, err);
	if (r)
		return r;
	keys = xcalloc(json_object_size(bargs) + 1, sizeof(*keys));
	vals = xcalloc(json_object_size(bargs) + 1, sizeof(*vals));
	json_object_foreach(bargs, k, v) {
		keys[nb] = k;
		vals[nb++] = json_string_value(v);
	}
	r = df_state_init(&st, df, keys, vals, nb);
	free(keys);
	free(vals);
	if (r) {
		df_free(df);
		return k8_err_set(err, r, "too many build args");
	}
	have_state = true;
	for (size_t i = 0; i < df->n && !r; i++) {
		struct df_step s;
		dkb_say(b, "Step %zu/%zu : %s\n", i + 1, df->n, df->inst[i].original);
		r = df_step(&st, &df->inst[i], &s, err);
		if (r)
			break;
		if (s.kind == DF_FROM) {
			r = dkb_from_step(b, &st, s.argv.v[0], err);
		} else if (s.kind != DF_ARG) {
			r = dkb_step(b, &st, &s, err);
		}
		df_step_free(&s);
		if (!r)
			dkb_say(b, " ---> %.12s\n", b->id[0] ? b->id + 7 : "scratch");
	}
	if (!r && !b->id[0])
		r = k8_err_set(err, -EINVAL, "No image was generated. Is your Dockerfile empty?");
	if (!r && json_object_size(labels)) {
		json_t *c = dkb_cfg(b), *l = json_object_get(c, "Labels");
		char key[65];
		cleanup_free char *lt = json_dumps(labels, JSON_COMPACT | JSON_SORT_KEYS);
		cleanup_free char *kin = xasprintf("%s labels %s", b->id, lt ? lt : "");
		if (!json_is_object(l))
			json_object_set_new(c, "Labels", (l = json_object()));
		json_object_update(l, labels);
		sha256_hex(kin, strlen(kin), key);
		r = dkb_commit(b, "LABEL (build request)", -1, key, err);
	}
	if (!r) {
		const char *unused[8];
		size_t nu = df_state_unused(&st, unused, 8);
		for (size_t i = 0; i < nu && i < 8; i++)
			dkb_say(b, "[Warning] One or more build-args [%s] were not consumed\n",
				unused[i]);
	}
	if (have_state)
		df_state_free(&st);
	df_free(df);
	if (r)
		return r;
	api_job_progress(b->j, json_pack("{s:{s:s}}", "aux", "ID", b->id));
	dkb_say(b, "Successfully built %.12s\n", b->id + 7);
	if (tag) {
		char norm[512], fam[512];
		r = image_tag(b->d->images, b->id, tag, err);
		if (r)
			return r;
		image_ref_normalize(tag, norm, sizeof(norm), err);
		dn_familiar(norm, fam, sizeof(fam));
		dkb_say(b, "Successfully tagged %s\n", fam);
	}
	*result = json_pack("{s:s,s:s?}", "id", b->id, "tag", tag);
	return 0;
}

static int dkb_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	struct dkb b = { .j = j, .d = j->d, .ctxfd = -1 };
	const char *dir = json_string_value(json_object_get(j->body, "dir"));
	json_t *res = NULL;
	int r;

	if (!dir)
		return k8_err_set(err, -EINVAL, "no build context");
	b.dir = xstrdup(dir);
	b.quiet = json_is_true(json_object_get(j->body, "q"));
	b.nocache = json_is_true(json_object_get(j->body, "nocache"));
	image_hold(j->d->images);
	r = dkb_run(&b, j->body, &res, err);
	image_release(j->d->images);
	if (b.sbname[0]) {
		struct k8_err e2 = { 0 };
		sb_remove(j->d, b.sbname, false, &e2);
	}
	if (!r) {
		daemon_audit(j->d, "image.build", NULL,
			     json_pack("{s:O,s:O,s:s}", "id", json_object_get(res, "id"), "ref",
				       json_object_get(res, "tag"), "via", "docker"));
		*result = res;
	}
	if (b.ctxfd >= 0)
		close(b.ctxfd);
	dignore_free(&b.ig);
	json_decref(b.manifest);
	json_decref(b.config);
	dcopy_links_clear(&b.lk);
	rm_rf(b.dir);
	free(b.dir);
	return r;
}

/* POST /build/prune (`docker builder prune`): the build cache's names go (not those a
 * build sandbox has attached right now); an image a build tagged keeps its own name, so
 * only what nothing else names is deleted. `all`, `keep-storage` and filters are
 * accepted: every cache entry is unused once its build ended. Each name removed is
 * audited as image.rm with "via": "docker". */
int dkb_api_prune(struct api_call *call)
{
	struct daemon *d = call->d;
	uint64_t before = image_store_freed(d->images);
	json_t *names = NULL, *v, *ids = json_array();
	size_t i;

	image_cache_names(d->images, &names);
	json_array_foreach(names, i, v) {
		const char *ref = json_string_value(json_object_get(v, "ref"));
		const char *dg = json_string_value(json_object_get(v, "digest"));
		struct k8_err e = { 0 };

		if (!ref || !dg || sb_image_unused(d, dg, ref, &e))
			continue;
		if (image_remove(d->images, ref, &e))
			continue;
		daemon_audit(d, "image.rm", NULL, json_pack("{s:s,s:s,s:s}", "ref", ref, "via",
							    "docker", "why", "builder prune"));
		json_array_append_new(ids, json_string(ref + sizeof(IMAGE_CACHE_REPO)));
	}
	json_decref(names);
	call->out = json_pack("{s:o,s:I}", "CachesDeleted", ids, "SpaceReclaimed",
			      (json_int_t)(image_store_freed(d->images) - before));
	return 0;
}
