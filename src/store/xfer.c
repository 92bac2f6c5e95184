/* SPDX-License-Identifier: Apache-2.0 */
/* xfer.c - snapshots in and out of a bucket (xfer.h).
 *
 * Theory of operation. A push first lists "chunks/" once into a set of ids (the index:
 * one listing instead of a HEAD per chunk), then cuts every file in chunk_size slots.
 * Slots that lie in a hole of the file (SEEK_DATA/SEEK_HOLE) are never read; a slot read
 * as all zeros is a hole too. Up to `threads` threads take slots in turn, each with its
 * own connection, compressor and buffers: read, id, and when the id is neither in the
 * index nor taken by another thread of this push, seal and PUT. The manifest goes last,
 * so a push stopped half-way leaves chunks and no manifest: the next push finds them in
 * the index and sends only the rest (that is how an interrupted push is resumed), and a
 * gc after the grace time removes them if none comes.
 *
 * A pull is the other way: every chunk of the manifest fetched, opened (header, and the
 * AEAD tag when encrypted: chunk_unseal), decompressed in the thread's jailed decoder
 * (store/jobs.h), its id computed again here and compared, and only then written at its
 * offset. Any mismatch fails the pull with the chunk's id, file and offset in the message;
 * the caller removes what was written. */
#include "store/xfer.h"
#include "store/jobs.h"
#include "common/version.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

/* ---- a set of ids ---- */

struct idset {
	pthread_mutex_t mu;
	uint8_t (*k)[CHUNK_ID_LEN];
	uint8_t *used;
	size_t cap, n;
};

static void idset_init(struct idset *s)
{
	pthread_mutex_init(&s->mu, NULL);
	s->cap = 1024;
	s->n = 0;
	s->k = xcalloc(s->cap, CHUNK_ID_LEN);
	s->used = xcalloc(s->cap, 1);
}

static void idset_free(struct idset *s)
{
	free(s->k);
	free(s->used);
	pthread_mutex_destroy(&s->mu);
}

static size_t idset_slot(const struct idset *s, const uint8_t id[CHUNK_ID_LEN])
{
	uint64_t h;

	memcpy(&h, id, sizeof(h));      /* ids are hashes: their first bytes are uniform */
	for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1))
		if (!s->used[i] || !memcmp(s->k[i], id, CHUNK_ID_LEN))
			return i;
}

/* Add id; true when it was not there. */
static bool idset_add(struct idset *s, const uint8_t id[CHUNK_ID_LEN])
{
	size_t i;
	bool added = false;

	pthread_mutex_lock(&s->mu);
	if ((s->n + 1) * 2 > s->cap) {
		struct idset g = { .cap = s->cap * 2 };
		g.k = xcalloc(g.cap, CHUNK_ID_LEN);
		g.used = xcalloc(g.cap, 1);
		for (size_t j = 0; j < s->cap; j++)
			if (s->used[j]) {
				size_t t = idset_slot(&g, s->k[j]);
				memcpy(g.k[t], s->k[j], CHUNK_ID_LEN);
				g.used[t] = 1;
			}
		free(s->k);
		free(s->used);
		s->k = g.k;
		s->used = g.used;
		s->cap = g.cap;
	}
	i = idset_slot(s, id);
	if (!s->used[i]) {
		memcpy(s->k[i], id, CHUNK_ID_LEN);
		s->used[i] = 1;
		s->n++;
		added = true;
	}
	pthread_mutex_unlock(&s->mu);
	return added;
}

static bool idset_has(struct idset *s, const uint8_t id[CHUNK_ID_LEN])
{
	bool has;

	pthread_mutex_lock(&s->mu);
	has = s->used[idset_slot(s, id)];
	pthread_mutex_unlock(&s->mu);
	return has;
}

/* ---- small helpers ---- */

static void xfer_key(const char *dir, const uint8_t id[CHUNK_ID_LEN], char *out, size_t n)
{
	char hex[2 * CHUNK_ID_LEN + 1];

	chunk_hex(id, hex);
	snprintf(out, n, "%s/%s", dir, hex);
}

/* "chunks/<64 hex>" (or manifests/): its id, or -EINVAL for any other key. */
static int xfer_key_id(const char *key, const char *dir, uint8_t id[CHUNK_ID_LEN])
{
	size_t dl = strlen(dir);

	if (strncmp(key, dir, dl) || key[dl] != '/')
		return -EINVAL;
	return chunk_unhex(key + dl + 1, id);
}

struct xfer_prog {
	pthread_mutex_t mu;
	uint64_t done, total, last_ns;
	const char *phase;
};

static void prog_add(struct xfer *x, struct xfer_prog *p, uint64_t n, bool force)
{
	uint64_t now = now_mono_ns();

	pthread_mutex_lock(&p->mu);
	p->done += n;
	if (x->progress && (force || now - p->last_ns > 250000000ull)) {
		p->last_ns = now;
		x->progress(x->pctx, p->phase, x->what ? x->what : "", p->done, p->total);
	}
	pthread_mutex_unlock(&p->mu);
}

static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += (size_t)r;
	}
	return 0;
}

static int pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += (size_t)r;
	}
	return 0;
}

/* One error for a transfer of several threads: the first wins, the others stop. */
struct xfer_fail {
	pthread_mutex_t mu;
	bool failed;
	struct k8_err err;
};

static void fail_set(struct xfer_fail *f, const struct k8_err *e)
{
	pthread_mutex_lock(&f->mu);
	if (!f->failed) {
		f->failed = true;
		f->err = *e;
	}
	pthread_mutex_unlock(&f->mu);
}

static bool fail_is(struct xfer_fail *f)
{
	bool v;

	pthread_mutex_lock(&f->mu);
	v = f->failed;
	pthread_mutex_unlock(&f->mu);
	return v;
}

/* Run fn(arg) on the transfer's threads (no more than there are items, at least one) and
 * wait for them all. A thread that cannot be made is the transfer's failure. */
static void xfer_run(const struct xfer *x, size_t nitems, void *(*fn)(void *), void *arg,
		     struct xfer_fail *fail)
{
	pthread_t th[XFER_THREADS_MAX];
	int nt = x->threads < 1 ? 1 : x->threads > XFER_THREADS_MAX ? XFER_THREADS_MAX :
		 x->threads, started = 0;

	for (; started < nt && (size_t)started < (nitems ? nitems : 1); started++)
		if (pthread_create(&th[started], NULL, fn, arg)) {
			struct k8_err e = { 0 };
			k8_err_set(&e, -EAGAIN, "no thread for the transfer");
			fail_set(fail, &e);
			break;
		}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
}

/* What every transfer reports of itself at its end. */
static void xfer_done(const struct xfer *x, struct xfer_result *res, uint64_t t0)
{
	res->requests = x->stats.requests;
	res->retries = x->stats.retries;
	res->ms = (now_mono_ns() - t0) / 1000000;
}

/* ---- the marker ---- */

static char *marker_text(const struct xfer *x)
{
	char chk[33] = "";

	if (x->keys.enc)
		chunk_key_check(&x->keys, chk);
	return xasprintf("{\"kosa8_store\":1,\"encrypted\":%s,\"key_check\":\"%s\"}\n",
			 x->keys.enc ? "true" : "false", chk);
}

int xfer_marker(struct xfer *x, bool create, struct k8_err *err)
{
	cleanup_free char *want = marker_text(x), *got = NULL;
	struct s3 s;
	size_t n = 0;
	int r;

	s3_init(&s, &x->conf);
	r = s3_get(&s, XFER_MARKER, 4096, &got, &n, err);
	if (r == -ENOENT && create) {
		k8_err_clear(err);
		r = s3_put(&s, XFER_MARKER, want, strlen(want), err);
	} else if (r == -ENOENT) {
		k8_err_clear(err);
		r = k8_err_set(err, -ENOENT, "bucket %s holds no kosa8 store (no %s object)",
			       x->conf.bucket, XFER_MARKER);
	} else if (r == -EFBIG) {
		k8_err_clear(err);
		r = k8_err_set(err, -EBADMSG, "bucket %s's %s is not a kosa8 store's marker",
			       x->conf.bucket, XFER_MARKER);
	} else if (!r && (n != strlen(want) || memcmp(got, want, n))) {
		/* read, not parsed: which case it is, for the message */
		bool enc = memmem(got, n, "\"encrypted\":true", 16) != NULL;
		if (!memmem(got, n, "\"kosa8_store\":1,", 16))
			r = k8_err_set(err, -EBADMSG, "bucket %s's %s is not a kosa8 store's marker",
				       x->conf.bucket, XFER_MARKER);
		else if (enc && !x->keys.enc)
			r = k8_err_set(err, -EACCES, "the store in bucket %s is encrypted: give its "
				       "key (store add ... --key-file FILE; `kosa8 store key` prints "
				       "it on a host that has it)", x->conf.bucket);
		else if (!enc && x->keys.enc)
			r = k8_err_set(err, -EACCES, "the store in bucket %s is not encrypted; add it "
				       "without --encrypt or --key-file (or use another bucket)",
				       x->conf.bucket);
		else
			r = k8_err_set(err, -EACCES, "the store in bucket %s is encrypted with "
				       "another key", x->conf.bucket);
	}
	s3_fini(&s);
	return r;
}

/* ---- the index ---- */

static int index_one(void *ctx, const struct s3xml_obj *o)
{
	uint8_t id[CHUNK_ID_LEN];

	if (xfer_key_id(o->key, "chunks", id) == 0)
		idset_add(ctx, id);
	return 0;
}

static int xfer_index(struct xfer *x, struct idset *have, struct k8_err *err)
{
	struct s3 s;
	int r;

	s3_init(&s, &x->conf);
	r = s3_list(&s, "chunks/", index_one, have, err);
	s3_fini(&s);
	return r;
}

/* ---- push ---- */

struct push_item {
	uint32_t file;
	uint64_t slot;
};

struct push_slot {
	bool data;
	uint8_t id[CHUNK_ID_LEN];
};

struct push {
	struct xfer *x;
	struct manifest *m;
	const int *fds;
	struct push_item *items;
	size_t nitems, next;
	struct push_slot *slots[MF_FILES_MAX];
	struct idset have;
	struct xfer_prog prog;
	struct xfer_fail fail;
	uint64_t data, chunks, chunks_sent, sent;       /* atomics */
};

static void *push_thread(void *arg)
{
	struct push *p = arg;
	struct xfer *x = p->x;
	uint32_t cs = p->m->chunk_size;
	size_t cap = chunk_seal_bound(cs);
	uint8_t *buf = xmalloc(cs), *obj = xmalloc(cap);
	ZSTD_CCtx *z = ZSTD_createCCtx();
	struct s3 s;

	s3_init(&s, &x->conf);
	for (;;) {
		size_t i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
		struct k8_err e = { 0 };
		char key[80];
		if (i >= p->nitems || fail_is(&p->fail))
			break;
		struct push_item it = p->items[i];
		struct mf_file *f = &p->m->files[it.file];
		uint64_t off = it.slot * cs;
		uint32_t len = (uint32_t)(f->size - off < cs ? f->size - off : cs);
		struct push_slot *sl = &p->slots[it.file][it.slot];
		size_t on = 0;
		int r = pread_full(p->fds[it.file], buf, len, off);
		if (r) {
			k8_err_set(&e, r, "reading %s at %llu: %s", f->path, (unsigned long long)off,
				   strerror(-r));
			fail_set(&p->fail, &e);
			break;
		}
		prog_add(x, &p->prog, len, false);
		if (chunk_is_zero(buf, len))
			continue;
		chunk_id(&x->keys, buf, len, sl->id);
		sl->data = true;
		__atomic_add_fetch(&p->data, len, __ATOMIC_RELAXED);
		__atomic_add_fetch(&p->chunks, 1, __ATOMIC_RELAXED);
		if (!idset_add(&p->have, sl->id))
			continue;       /* in the bucket already, or another thread sends it */
		xfer_key("chunks", sl->id, key, sizeof(key));
		if ((r = chunk_seal(&x->keys, key, buf, len, x->level, z, obj, cap, &on, &e)) ||
		    (r = s3_put(&s, key, obj, on, &e))) {
			fail_set(&p->fail, &e);
			break;
		}
		__atomic_add_fetch(&p->chunks_sent, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&p->sent, on, __ATOMIC_RELAXED);
	}
	s3_fini(&s);
	ZSTD_freeCCtx(z);
	free(buf);
	free(obj);
	return NULL;
}

/* The slots of file fd (size bytes) that hold data, appended to the items. */
static void push_slots(struct push *p, uint32_t fi, int fd, uint64_t size, size_t *cap)
{
	uint64_t cs = p->m->chunk_size, slots = (size + cs - 1) / cs;
	uint64_t pos = 0, last = UINT64_MAX;

	while (pos < size) {
		off_t d = lseek(fd, (off_t)pos, SEEK_DATA), h;
		if (d < 0)
			break;                  /* ENXIO: no data past pos */
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			h = (off_t)size;
		for (uint64_t s = (uint64_t)d / cs; s < slots && s * cs < (uint64_t)h; s++) {
			if (s == last)
				continue;
			if (p->nitems == *cap) {
				*cap *= 2;
				p->items = realloc(p->items, *cap * sizeof(*p->items));
				if (!p->items)
					abort();
			}
			p->items[p->nitems++] = (struct push_item){ .file = fi, .slot = s };
			last = s;
		}
		pos = (uint64_t)h;
	}
}

static int xfer_put_manifest(struct xfer *x, struct manifest *m, char *hex,
			     struct k8_err *err)
{
	char name[2 * MF_NAME_MAX + 2], key[80];
	uint8_t id[CHUNK_ID_LEN];
	cleanup_free char *text = manifest_json(m);
	size_t cap, on = 0;
	uint8_t *obj;
	ZSTD_CCtx *z;
	struct s3 s;
	int r;

	if (!text)
		return k8_err_set(err, -ENOMEM, "no memory for the manifest");
	snprintf(name, sizeof(name), "%s%s%s", m->sandbox, m->label[0] ? "/" : "", m->label);
	chunk_name_id(&x->keys, m->kind, name, id);
	chunk_hex(id, hex);
	snprintf(key, sizeof(key), "manifests/%s", hex);
	cap = chunk_seal_bound(strlen(text));
	obj = xmalloc(cap);
	z = ZSTD_createCCtx();
	r = chunk_seal(&x->keys, key, text, strlen(text), x->level, z, obj, cap, &on, err);
	ZSTD_freeCCtx(z);
	if (!r) {
		s3_init(&s, &x->conf);
		r = s3_put(&s, key, obj, on, err);
		s3_fini(&s);
	}
	free(obj);
	return r;
}

int xfer_push(struct xfer *x, struct manifest *m, const int *fds, struct xfer_result *res,
	      struct k8_err *err)
{
	struct push p = { .x = x, .m = m, .fds = fds };
	int r;
	size_t cap = 1024;
	uint64_t t0 = now_mono_ns();

	memset(res, 0, sizeof(*res));
	memset(&x->stats, 0, sizeof(x->stats));
	x->conf.stats = &x->stats;
	m->chunk_size = x->chunk_size;
	m->encrypted = x->keys.enc;
	if (!m->kosa8_version[0])
		snprintf(m->kosa8_version, sizeof(m->kosa8_version), "%s", KOSA8_VERSION);
	if (!m->created[0])
		k8_time_now(m->created, 0);
	pthread_mutex_init(&p.prog.mu, NULL);
	pthread_mutex_init(&p.fail.mu, NULL);
	idset_init(&p.have);
	p.prog.phase = "pushing";
	p.items = xmalloc(cap * sizeof(*p.items));
	for (uint32_t i = 0; i < m->nfiles; i++) {
		uint64_t slots = (m->files[i].size + m->chunk_size - 1) / m->chunk_size;
		p.slots[i] = xcalloc(slots ? slots : 1, sizeof(struct push_slot));
		p.prog.total += m->files[i].size;
		m->files[i].nchunks = 0;
		push_slots(&p, i, fds[i], m->files[i].size, &cap);
	}
	/* what the skipped holes count for, at once */
	for (uint32_t i = 0; i < m->nfiles; i++)
		p.prog.done += m->files[i].size;
	for (size_t i = 0; i < p.nitems; i++) {
		const struct mf_file *f = &m->files[p.items[i].file];
		uint64_t off = p.items[i].slot * m->chunk_size;
		p.prog.done -= f->size - off < m->chunk_size ? f->size - off : m->chunk_size;
	}
	if (x->progress)
		x->progress(x->pctx, "listing", x->what ? x->what : "", 0, 0);
	if ((r = xfer_index(x, &p.have, err)))
		goto out;
	xfer_run(x, p.nitems, push_thread, &p, &p.fail);
	if (p.fail.failed) {
		*err = p.fail.err;
		r = err->code ? err->code : -EIO;
		goto out;
	}
	for (uint32_t i = 0; i < m->nfiles; i++) {
		uint64_t slots = (m->files[i].size + m->chunk_size - 1) / m->chunk_size;
		for (uint64_t s = 0; s < slots; s++)
			if (p.slots[i][s].data)
				manifest_chunk(&m->files[i], s * m->chunk_size,
					       (uint32_t)(m->files[i].size - s * m->chunk_size <
							  m->chunk_size ?
							  m->files[i].size - s * m->chunk_size :
							  m->chunk_size), p.slots[i][s].id);
	}
	if ((r = manifest_check(m, err)) || (r = xfer_put_manifest(x, m, res->manifest, err)))
		goto out;
	prog_add(x, &p.prog, 0, true);
out:
	res->files = m->nfiles;
	res->bytes = p.prog.total;
	res->data = p.data;
	res->chunks = p.chunks;
	res->chunks_sent = p.chunks_sent;
	res->sent = p.sent;
	xfer_done(x, res, t0);
	for (uint32_t i = 0; i < m->nfiles; i++)
		free(p.slots[i]);
	free(p.items);
	idset_free(&p.have);
	pthread_mutex_destroy(&p.prog.mu);
	pthread_mutex_destroy(&p.fail.mu);
	return r;
}

/* ---- manifests ---- */

/* Fetch, open and read the manifest at key; its name is checked against the key. */
static int xfer_manifest_at(struct xfer *x, struct s3 *s, const char *key, struct manifest *m,
			    struct k8_err *err)
{
	size_t cap = chunk_seal_bound(MF_JSON_MAX), n = 0, zn = 0;
	char *obj = NULL, name[2 * MF_NAME_MAX + 2], want[80], hex[2 * CHUNK_ID_LEN + 1];
	uint8_t *z, id[CHUNK_ID_LEN];
	int r;

	memset(m, 0, sizeof(*m));
	if ((r = s3_get(s, key, cap, &obj, &n, err)))
		return r;
	z = xmalloc(n ? n : 1);
	r = chunk_unseal(&x->keys, key, (uint8_t *)obj, n, z, n, &zn, key, err);
	free(obj);
	if (!r)
		r = store_job_manifest(z, zn, x->userns, m, err);
	free(z);
	if (r)
		return r;
	if (m->encrypted != x->keys.enc) {
		manifest_free(m);
		return k8_err_set(err, -EBADMSG, "%s says it is %sencrypted", key,
				  m->encrypted ? "" : "not ");
	}
	snprintf(name, sizeof(name), "%s%s%s", m->sandbox, m->label[0] ? "/" : "", m->label);
	chunk_name_id(&x->keys, m->kind, name, id);
	chunk_hex(id, hex);
	snprintf(want, sizeof(want), "manifests/%s", hex);
	if (strcmp(want, key)) {
		manifest_free(m);
		return k8_err_set(err, -EBADMSG, "%s holds the manifest of another snapshot", key);
	}
	return 0;
}

/* The key of the manifest of kind and name ("manifests/<name id>"). */
static void xfer_manifest_key(struct xfer *x, const char *kind, const char *name, char *key,
			      size_t n)
{
	uint8_t id[CHUNK_ID_LEN];

	chunk_name_id(&x->keys, kind, name, id);
	xfer_key("manifests", id, key, n);
}

int xfer_manifest_get(struct xfer *x, const char *kind, const char *name, struct manifest *m,
		      struct k8_err *err)
{
	char key[80];
	struct s3 s;
	int r;

	xfer_manifest_key(x, kind, name, key, sizeof(key));
	s3_init(&s, &x->conf);
	r = xfer_manifest_at(x, &s, key, m, err);
	s3_fini(&s);
	if (r == -ENOENT) {
		k8_err_clear(err);
		r = k8_err_set(err, -ENOENT, "the store has no %s %s", kind, name);
	}
	return r;
}

int xfer_manifest_delete(struct xfer *x, const char *kind, const char *name,
			 struct k8_err *err)
{
	char key[80];
	struct s3 s;
	int r;

	xfer_manifest_key(x, kind, name, key, sizeof(key));
	s3_init(&s, &x->conf);
	r = s3_delete(&s, key, err);
	s3_fini(&s);
	return r;
}

struct list_ctx {
	struct xfer *x;
	struct s3 s;
	int (*fn)(void *ctx, const struct manifest *m);
	void *ctx;
	uint64_t bad;
	int stop;
	struct k8_err *err;
};

static int list_one(void *ctx, const struct s3xml_obj *o)
{
	struct list_ctx *l = ctx;
	static struct manifest m;       /* big: one at a time, under the caller's lock */
	struct k8_err e = { 0 };
	uint8_t id[CHUNK_ID_LEN];
	int r;

	if (xfer_key_id(o->key, "manifests", id)) {
		l->bad++;
		return 0;
	}
	if (xfer_manifest_at(l->x, &l->s, o->key, &m, &e)) {
		l->bad++;
		if (l->stop) {
			*l->err = e;
			return e.code ? e.code : -EIO;
		}
		return 0;
	}
	r = l->fn(l->ctx, &m);
	manifest_free(&m);
	return r;
}

static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;

static int xfer_list_as(struct xfer *x, int (*fn)(void *ctx, const struct manifest *m),
			void *ctx, bool stop_on_bad, uint64_t *bad, struct k8_err *err)
{
	struct list_ctx l = { .x = x, .fn = fn, .ctx = ctx, .stop = stop_on_bad, .err = err };
	struct s3 lister;
	int r;

	s3_init(&l.s, &x->conf);
	s3_init(&lister, &x->conf);
	pthread_mutex_lock(&list_mu);
	r = s3_list(&lister, "manifests/", list_one, &l, err);
	pthread_mutex_unlock(&list_mu);
	s3_fini(&lister);
	s3_fini(&l.s);
	if (bad)
		*bad = l.bad;
	return r;
}

int xfer_list(struct xfer *x, int (*fn)(void *ctx, const struct manifest *m), void *ctx,
	      uint64_t *bad, struct k8_err *err)
{
	return xfer_list_as(x, fn, ctx, false, bad, err);
}

/* ---- pull ---- */

struct pull_item {
	uint32_t file, chunk;
};

/* The items sorted by id (then length), and runs[] the start of each run of equal ones:
 * each id is fetched, opened, decoded and checked once, then written wherever the
 * manifest names it (a sandbox's memory holds many equal blocks). */
struct pull {
	struct xfer *x;
	const struct manifest *m;
	const int *fds;
	struct pull_item *items;
	size_t nitems;
	size_t *runs, nruns, next;
	struct xfer_prog prog;
	struct xfer_fail fail;
	uint64_t sent, fetched;
};

static const struct mf_chunk *pull_chunk(const struct manifest *m, const struct pull_item *it)
{
	return &m->files[it->file].chunks[it->chunk];
}

static int pull_cmp(const void *a, const void *b, void *ctx)
{
	const struct mf_chunk *x = pull_chunk(ctx, a), *y = pull_chunk(ctx, b);
	int c = memcmp(x->id, y->id, CHUNK_ID_LEN);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void *pull_thread(void *arg)
{
	struct pull *p = arg;
	struct xfer *x = p->x;
	size_t cap = chunk_seal_bound(CHUNK_SIZE_MAX);
	uint8_t *z = xmalloc(cap), *plain = xmalloc(CHUNK_SIZE_MAX);
	struct store_decoder dec;
	struct k8_err e = { 0 };
	struct s3 s;

	s3_init(&s, &x->conf);
	if (store_decoder_start(&dec, x->userns, &e)) {
		fail_set(&p->fail, &e);
		goto out;
	}
	for (;;) {
		size_t ri = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
		char key[80], hex[2 * CHUNK_ID_LEN + 1], what[MF_PATH_MAX + 128];
		uint8_t id[CHUNK_ID_LEN];
		char *obj = NULL;
		size_t n = 0, zn = 0, i;
		int r;
		if (ri >= p->nruns || fail_is(&p->fail))
			break;
		i = p->runs[ri];
		const struct mf_file *f = &p->m->files[p->items[i].file];
		const struct mf_chunk *c = &f->chunks[p->items[i].chunk];
		chunk_hex(c->id, hex);
		snprintf(key, sizeof(key), "chunks/%s", hex);
		snprintf(what, sizeof(what), "chunk %s (%s at %llu)", hex, f->path,
			 (unsigned long long)c->off);
		memset(&e, 0, sizeof(e));
		r = s3_get(&s, key, chunk_seal_bound(c->len), &obj, &n, &e);
		if (r == -EFBIG) {
			k8_err_clear(&e);
			k8_err_set(&e, -EBADMSG, "%s is larger than its %u bytes can make; refused",
				   what, c->len);
		}
		if (!r) {
			__atomic_add_fetch(&p->sent, n, __ATOMIC_RELAXED);
			__atomic_add_fetch(&p->fetched, 1, __ATOMIC_RELAXED);
			r = chunk_unseal(&x->keys, key, (uint8_t *)obj, n, z, cap, &zn, what, &e);
		}
		free(obj);
		if (!r)
			r = store_decoder_run(&dec, z, zn, plain, c->len, what, &e);
		if (!r) {
			chunk_id(&x->keys, plain, c->len, id);
			if (memcmp(id, c->id, CHUNK_ID_LEN))
				r = k8_err_set(&e, -EBADMSG, "%s does not match its id: the bucket "
					       "holds other bytes under its name; refused", what);
		}
		/* checked: now every place that names it */
		for (; !r && i < p->runs[ri + 1]; i++) {
			const struct mf_chunk *w = pull_chunk(p->m, &p->items[i]);
			if ((r = pwrite_full(p->fds[p->items[i].file], plain, w->len, w->off)))
				k8_err_set(&e, r, "writing %s: %s", what, strerror(-r));
			else
				prog_add(x, &p->prog, w->len, false);
		}
		if (r) {
			fail_set(&p->fail, &e);
			break;
		}
	}
	store_decoder_stop(&dec);
out:
	s3_fini(&s);
	free(z);
	free(plain);
	return NULL;
}

int xfer_pull(struct xfer *x, const struct manifest *m, const int *fds,
	      struct xfer_result *res, struct k8_err *err)
{
	struct pull p = { .x = x, .m = m, .fds = fds };
	int r = 0;
	uint64_t t0 = now_mono_ns();

	memset(res, 0, sizeof(*res));
	memset(&x->stats, 0, sizeof(x->stats));
	x->conf.stats = &x->stats;
	pthread_mutex_init(&p.prog.mu, NULL);
	pthread_mutex_init(&p.fail.mu, NULL);
	p.prog.phase = "pulling";
	for (uint32_t i = 0; i < m->nfiles; i++)
		p.nitems += m->files[i].nchunks;        /* at most MF_CHUNKS_MAX (manifest.c) */
	p.items = xmalloc((p.nitems + 1) * sizeof(*p.items));
	p.nitems = 0;
	for (uint32_t i = 0; i < m->nfiles; i++) {
		if (ftruncate(fds[i], (off_t)m->files[i].size) < 0) {
			r = k8_err_set(err, -errno, "making %s: %s", m->files[i].path, strerror(errno));
			goto out;
		}
		res->bytes += m->files[i].size;
		for (uint32_t c = 0; c < m->files[i].nchunks; c++) {
			p.items[p.nitems++] = (struct pull_item){ .file = i, .chunk = c };
			p.prog.total += m->files[i].chunks[c].len;
		}
	}
	qsort_r(p.items, p.nitems, sizeof(*p.items), pull_cmp, (void *)m);
	p.runs = xmalloc((p.nitems + 1) * sizeof(*p.runs));
	for (size_t i = 0; i < p.nitems; i++)
		if (i == 0 || pull_cmp(&p.items[i - 1], &p.items[i], (void *)m))
			p.runs[p.nruns++] = i;
	p.runs[p.nruns] = p.nitems;
	xfer_run(x, p.nruns, pull_thread, &p, &p.fail);
	if (p.fail.failed) {
		*err = p.fail.err;
		r = err->code ? err->code : -EIO;
		goto out;
	}
	prog_add(x, &p.prog, 0, true);
out:
	res->files = m->nfiles;
	res->data = p.prog.total;
	res->chunks = p.nitems;
	res->chunks_sent = p.fetched;
	res->sent = p.sent;
	xfer_done(x, res, t0);
	free(p.items);
	free(p.runs);
	pthread_mutex_destroy(&p.prog.mu);
	pthread_mutex_destroy(&p.fail.mu);
	return r;
}

/* ---- garbage collection ---- */

struct gc_ctx {
	struct xfer *x;
	struct idset live;
	struct xfer_gc *res;
	struct s3 s;
	int64_t before;
	struct k8_err *err;
};

static int gc_mark(void *ctx, const struct manifest *m)
{
	struct gc_ctx *g = ctx;

	g->res->manifests++;
	for (uint32_t i = 0; i < m->nfiles; i++)
		for (uint32_t c = 0; c < m->files[i].nchunks; c++)
			if (idset_add(&g->live, m->files[i].chunks[c].id))
				g->res->live++;
	return 0;
}

static int gc_sweep(void *ctx, const struct s3xml_obj *o)
{
	struct gc_ctx *g = ctx;
	uint8_t id[CHUNK_ID_LEN];
	int r;

	if (xfer_key_id(o->key, "chunks", id) || idset_has(&g->live, id))
		return 0;
	if (o->mtime > g->before) {
		g->res->kept_young++;
		return 0;
	}
	if ((r = s3_delete(&g->s, o->key, g->err)))
		return r;
	g->res->removed++;
	g->res->removed_bytes += o->size;
	if (g->x->progress)
		g->x->progress(g->x->pctx, "collecting", g->x->what ? g->x->what : "",
			       g->res->removed, 0);
	return 0;
}

int xfer_gc(struct xfer *x, uint64_t grace_s, struct xfer_gc *res, struct k8_err *err)
{
	struct gc_ctx g = { .x = x, .res = res, .err = err };
	struct s3 lister;
	int r;

	memset(res, 0, sizeof(*res));
	idset_init(&g.live);
	g.before = (int64_t)(now_real_ns() / 1000000000ull) - (int64_t)grace_s;
	if (x->progress)
		x->progress(x->pctx, "listing", x->what ? x->what : "", 0, 0);
	r = xfer_list_as(x, gc_mark, &g, true, NULL, err);
	if (r) {
		k8_err_wrap(err, "gc stopped, nothing removed: a manifest does not read back");
		goto out;
	}
	s3_init(&g.s, &x->conf);
	s3_init(&lister, &x->conf);
	r = s3_list(&lister, "chunks/", gc_sweep, &g, err);
	s3_fini(&lister);
	s3_fini(&g.s);
out:
	idset_free(&g.live);
	return r;
}
