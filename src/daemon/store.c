/* SPDX-License-Identifier: Apache-2.0 */
/* store.c - snapshot stores: settings, keys, and checkpoints and paused sandboxes moved
 * to and from them (store.h, docs/stores.md).
 *
 * $KOSA8_HOME/stores/ (0700) holds per store NAME.json (endpoint, bucket, region,
 * addressing, CA file, encryption: settings only), NAME.cred (the access key id and
 * secret key) and, for an encrypted store, NAME.key (32 random bytes): every one 0600,
 * written atomically; the secrets never reach an answer, a log or the audit log (a key
 * leaves only through `store key`, which is audited), and `store rm` overwrites them
 * before it unlinks them (secret_wipe_file).
 *
 * A push takes the files of a checkpoint (or of a sandbox paused to disk) from
 * checkpoint.c (ckpt_export: descriptors, so the files stay whatever happens to their
 * names meanwhile) and hands them to xfer_push. A pull makes each of the manifest's files
 * where checkpoint.c says it goes (ckpt_snapshot_local: nothing else is accepted), fills
 * them with xfer_pull (every chunk checked against its id first), and only then does
 * checkpoint.c build a fork or a paused sandbox of them: nothing boots from bytes that
 * were not checked. The manifest itself is read in a jailed worker (store/jobs.c); its
 * settings object (at most 64 KiB, re-written by that worker) is then read here field by
 * field as an API body is (ckpt_settings_read). */
#include "daemon/store.h"
#include "daemon/checkpoint.h"
#include "daemon/daemon.h"
#include "daemon/record.h"
#include "daemon/sandbox.h"
#include "daemon/secret.h"
#include "image/image.h"
#include "store/jobs.h"
#include "store/xfer.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_THREADS_DEFAULT 4
#define STORE_GRACE_DEFAULT 3600        /* gc leaves younger unnamed chunks: a push's */

struct store_cfg {
	char name[SECRET_NAME_MAX + 1];
	char endpoint[S3_ENDPOINT_MAX + 1];
	char bucket[S3_BUCKET_MAX + 1];
	char region[S3_REGION_MAX + 1];
	bool path_style;
	char ca_file[4096];
	bool encrypted;
	int chunk_kib;
	int threads;
	char added[K8_TIME_LEN];
};

struct store {
	struct store_cfg cfg;
	struct xfer x;
};

static char *store_file(struct daemon *d, const char *name, const char *ext)
{
	return xasprintf("%s/stores/%s.%s", d->home, name, ext);
}

static int store_name_check(const char *name, struct k8_err *err)
{
	if (!name || !secret_name_ok(name))
		return k8_err_set(err, -EINVAL, "bad store name '%.80s': a letter or digit, then "
				  "letters, digits, '-', '_' or '.', at most %d characters",
				  name ? name : "", SECRET_NAME_MAX);
	return 0;
}

static void cfg_fill(struct store_cfg *c, const char *name, const char *endpoint,
		     const char *bucket, const char *region, const char *ca, const char *added,
		     bool path_style, bool encrypted, int chunk_kib, int threads)
{
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(c->endpoint, sizeof(c->endpoint), "%s", endpoint);
	snprintf(c->bucket, sizeof(c->bucket), "%s", bucket);
	snprintf(c->region, sizeof(c->region), "%s", region);
	snprintf(c->ca_file, sizeof(c->ca_file), "%s", ca);
	snprintf(c->added, sizeof(c->added), "%s", added);
	c->path_style = path_style;
	c->encrypted = encrypted;
	c->chunk_kib = chunk_kib;
	c->threads = threads;
}

static json_t *cfg_json(const struct store_cfg *c)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:b,s:s,s:b,s:i,s:i,s:s}", "name", c->name, "type",
			 "s3", "endpoint", c->endpoint, "bucket", c->bucket, "region", c->region,
			 "path_style", c->path_style, "ca_file", c->ca_file, "encrypted",
			 c->encrypted, "chunk_kib", c->chunk_kib, "threads", c->threads, "added",
			 c->added);
}

/* NAME.json: written by store_api_add, read here; our own file, still read with care. */
static int cfg_load(struct daemon *d, const char *name, struct store_cfg *c,
		    struct k8_err *err)
{
	cleanup_free char *path = NULL, *text = NULL;
	json_auto_t *o = NULL;
	const char *ep, *bk, *rg, *ca, *added;
	int ps, enc, ck, th;

	memset(c, 0, sizeof(*c));
	if (store_name_check(name, err))
		return err->code;
	path = store_file(d, name, "json");
	if (read_file(path, 64 << 10, &text, NULL) < 0)
		return k8_err_set(err, -ENOENT, "no store '%s'; list them with `kosa8 store ls`",
				  name);
	o = json_loads(text, 0, NULL);
	if (!o || json_unpack(o, "{s:s,s:s,s:s,s:b,s:s,s:b,s:i,s:i,s:s}", "endpoint", &ep,
			      "bucket", &bk, "region", &rg, "path_style", &ps, "ca_file", &ca,
			      "encrypted", &enc, "chunk_kib", &ck, "threads", &th, "added",
			      &added) < 0 ||
	    strlen(ep) > S3_ENDPOINT_MAX || strlen(bk) > S3_BUCKET_MAX ||
	    strlen(rg) > S3_REGION_MAX || strlen(ca) >= sizeof(c->ca_file))
		return k8_err_set(err, -EINVAL, "%s is damaged; `kosa8 store rm %s` and add it "
				  "again", path, name);
	cfg_fill(c, name, ep, bk, rg, ca, added, ps, enc, ck, th);
	return 0;
}

static void store_close(struct store *st)
{
	OPENSSL_cleanse(st, sizeof(*st));
}

static void store_progress(void *job, const char *phase, const char *what, uint64_t done,
			   uint64_t total)
{
	api_job_progress(job, json_pack("{s:s,s:s,s:I,s:I}", "phase", phase, "what", what,
					"done", (json_int_t)done, "total", (json_int_t)total));
}

/* Offline (--offline, KOSA8_OFFLINE, config.json "offline"): the daemon opens no network
 * connection, a store's included. */
static int store_offline(struct daemon *d, const char *name, struct k8_err *err)
{
	if (daemon_offline(d, NULL))
		return k8_err_set(err, -ENETUNREACH, "the daemon is offline: store '%s' is not "
				  "reached", name);
	return 0;
}

/* The xfer of a store from its settings and secrets (job: where progress goes, or NULL). */
static int store_setup(struct store *st, const uint8_t *key, const char *access,
		       const char *secret, void *job, struct k8_err *err)
{
	struct xfer *x = &st->x;

	memset(x, 0, sizeof(*x));
	snprintf(x->conf.endpoint, sizeof(x->conf.endpoint), "%s", st->cfg.endpoint);
	snprintf(x->conf.bucket, sizeof(x->conf.bucket), "%s", st->cfg.bucket);
	snprintf(x->conf.region, sizeof(x->conf.region), "%s", st->cfg.region);
	snprintf(x->conf.ca_file, sizeof(x->conf.ca_file), "%s", st->cfg.ca_file);
	if (strlen(access) > S3_ACCESS_MAX || strlen(secret) > S3_SECRET_MAX)
		return k8_err_set(err, -EINVAL, "the access key id or secret key is too long");
	snprintf(x->conf.access_key, sizeof(x->conf.access_key), "%s", access);
	snprintf(x->conf.secret_key, sizeof(x->conf.secret_key), "%s", secret);
	x->conf.path_style = st->cfg.path_style;
	x->conf.retries = -1;
	x->userns = -1;
	x->conf.xml = store_job_xml;
	x->conf.xml_ctx = &x->userns;
	x->chunk_size = (uint32_t)st->cfg.chunk_kib << 10;
	x->threads = st->cfg.threads;
	x->level = 3;
	if (job) {
		x->progress = store_progress;
		x->pctx = job;
	}
	if (st->cfg.encrypted && (!key || chunk_keys_derive(key, &x->keys)))
		return k8_err_set(err, -EIO, "store '%s': its key could not be used", st->cfg.name);
	return s3_conf_check(&x->conf, err);
}

/* Open store `name`: its settings, secrets and key. */
static int store_open(struct daemon *d, const char *name, struct store *st, void *job,
		      struct k8_err *err)
{
	int ns = -1;
	cleanup_free char *cpath = NULL, *kpath = NULL;
	char *cred = NULL, *keyb = NULL, *nl;
	size_t cn = 0, kn = 0;
	int r;

	memset(st, 0, sizeof(*st));
	if ((r = store_offline(d, name, err)) || (r = cfg_load(d, name, &st->cfg, err)))
		return r;
	cpath = store_file(d, name, "cred");
	kpath = store_file(d, name, "key");
	if (read_file(cpath, 1024, &cred, &cn) < 0 || !(nl = memchr(cred, '\n', cn))) {
		secret_wipe(cred, cn);
		return k8_err_set(err, -ENOENT, "store '%s' has no credentials; add it again",
				  name);
	}
	*nl = '\0';
	if (cn && cred[cn - 1] == '\n')
		cred[cn - 1] = '\0';
	if (st->cfg.encrypted && (read_file(kpath, 64, &keyb, &kn) < 0 || kn != CHUNK_KEY_LEN)) {
		secret_wipe(cred, cn);
		secret_wipe(keyb, kn);
		return k8_err_set(err, -ENOENT, "store '%s' is encrypted and its key %s is missing "
				  "or damaged", name, kpath);
	}
	r = store_setup(st, (const uint8_t *)keyb, cred, nl + 1, job, err);
	secret_wipe(cred, cn);
	secret_wipe(keyb, kn);
	/* the workers that read the bucket's bytes: in the image store's user namespace, so
	 * never root of the host (docs/threat-model.md "Workers") */
	if (!r && !(r = image_store_userns(d->images, &ns, err)))
		st->x.userns = ns;
	if (r)
		store_close(st);
	return r;
}

static double mbps(uint64_t bytes, uint64_t ms)
{
	return ms ? (double)bytes / 1e6 / ((double)ms / 1000.0) : 0.0;
}

static json_t *result_json(const char *store, const struct xfer_result *res)
{
	return json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "store", store,
			 "manifest", res->manifest, "files", (json_int_t)res->files, "bytes",
			 (json_int_t)res->bytes, "data", (json_int_t)res->data, "chunks",
			 (json_int_t)res->chunks, "chunks_sent", (json_int_t)res->chunks_sent, "sent",
			 (json_int_t)res->sent, "requests", (json_int_t)res->requests, "ms",
			 (json_int_t)res->ms, "mb_per_s", mbps(res->data, res->ms));
}

/* ---- pushing ---- */

/* The export ex of sandbox `sandbox` (label NULL: paused) into store st. */
static int push_export(struct daemon *d, struct store *st, const char *sandbox,
		       const char *label, struct ckpt_export *ex, json_t *settings_extra,
		       struct xfer_result *res, struct k8_err *err)
{
	struct manifest *m = xcalloc(1, sizeof(*m));
	int fds[CKPT_X_FILES];
	char *cfg;
	int r;

	snprintf(m->kind, sizeof(m->kind), "%s", label ? "checkpoint" : "paused");
	snprintf(m->sandbox, sizeof(m->sandbox), "%s", sandbox);
	snprintf(m->label, sizeof(m->label), "%s", label ? label : "");
	snprintf(m->guest_digest, sizeof(m->guest_digest), "%s", d->guest.digest);
	if (settings_extra)
		json_object_update(ex->settings, settings_extra);
	cfg = json_dumps(ex->settings, JSON_COMPACT);
	if (!cfg || strlen(cfg) > MF_CONFIG_MAX) {
		free(cfg);
		free(m);
		return k8_err_set(err, -E2BIG, "the sandbox's settings are over %u bytes",
				  MF_CONFIG_MAX);
	}
	memcpy(m->config, cfg, strlen(cfg) + 1);
	free(cfg);
	m->chunk_size = st->x.chunk_size;
	for (int i = 0; i < ex->nfiles; i++) {
		manifest_file(m, ex->files[i].path, ex->files[i].size, ex->files[i].mode);
		fds[i] = ex->files[i].fd;
	}
	for (int i = 0; i < ex->nimages && i < MF_IMAGES_MAX; i++) {
		struct mf_image *im = &m->images[m->nimages++];
		snprintf(im->ref, sizeof(im->ref), "%s", ex->images[i].ref);
		snprintf(im->digest, sizeof(im->digest), "%s", ex->images[i].digest);
		snprintf(im->file, sizeof(im->file), "%s", ex->images[i].disk);
		im->slot = ex->images[i].slot;
	}
	st->x.what = label ? label : sandbox;
	r = xfer_push(&st->x, m, fds, res, err);
	manifest_free(m);
	free(m);
	return r;
}

static int push_checkpoint(struct daemon *d, const char *store, const char *sandbox,
			   const char *label, const char *by, void *job, json_t **out,
			   struct k8_err *err)
{
	struct store st;
	struct ckpt_export ex;
	struct xfer_result res = { 0 };
	struct sandbox *sb;
	int r;

	if (!(sb = sb_get(d, sandbox, err)))
		return err->code;
	if ((r = store_open(d, store, &st, job, err))) {
		sb_put(d, sb);
		return r;
	}
	r = ckpt_export(d, sb, label, &ex, err);
	sb_put(d, sb);
	if (!r) {
		r = push_export(d, &st, sandbox, label, &ex, NULL, &res, err);
		ckpt_export_end(&ex);
	}
	store_close(&st);
	if (r) {
		daemon_audit(d, "store.push.failed", sandbox,
			     json_pack("{s:s,s:s,s:s,s:s}", "store", store, "label", label, "by", by,
				       "error", err->msg));
		return r;
	}
	daemon_audit(d, "store.push", sandbox,
		     json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "store", store, "kind",
			       "checkpoint", "label", label, "by", by, "manifest", res.manifest,
			       "bytes", (json_int_t)res.bytes, "chunks", (json_int_t)res.chunks,
			       "chunks_sent", (json_int_t)res.chunks_sent, "sent",
			       (json_int_t)res.sent, "ms", (json_int_t)res.ms));
	if (out) {
		*out = result_json(store, &res);
		json_object_set_new(*out, "sandbox", json_string(sandbox));
		json_object_set_new(*out, "label", json_string(label));
		json_object_set_new(*out, "kind", json_string("checkpoint"));
	}
	return 0;
}

static int job_push(struct api_job *j, json_t **out, struct k8_err *err)
{
	const char *label = json_string_value(json_object_get(j->body, "label"));
	const char *to = json_string_value(json_object_get(j->body, "to"));

	return push_checkpoint(j->d, to, j->arg, label, "user", j, out, err);
}

int store_api_push(struct api_call *call)
{
	const char *to = NULL;
	const char *label = api_param(call, "label");

	if (api_body_str(call, "to", API_REQUIRED, SECRET_NAME_MAX, &to))
		return call->err.code;
	if (store_name_check(to, &call->err))
		return call->err.code;
	json_object_set_new(call->body, "label", json_string(label));
	return api_reply_job(call, job_push, api_param(call, "name"));
}

struct auto_push {
	struct daemon *d;
	char store[SECRET_NAME_MAX + 1], sandbox[K8_NAME_MAX + 1], label[64];
};

static void *auto_push_thread(void *arg)
{
	struct auto_push *a = arg;
	struct k8_err err = { 0 };

	if (push_checkpoint(a->d, a->store, a->sandbox, a->label, "auto", NULL, NULL, &err))
		daemon_log("sandbox %s: pushing checkpoint %s to store %s failed: %s", a->sandbox,
			   a->label, a->store, err.msg);
	else
		daemon_log("sandbox %s: checkpoint %s pushed to store %s", a->sandbox, a->label,
			   a->store);
	free(a);
	return NULL;
}

const char *store_after_checkpoint(struct daemon *d, struct sandbox *sb, const char *label)
{
	json_auto_t *cfg = daemon_config(d);
	const char *to = json_string_value(json_object_get(cfg, "push_checkpoints"));
	static __thread char name[SECRET_NAME_MAX + 1];
	struct auto_push *a;
	pthread_t t;

	if (!to || !secret_name_ok(to))
		return NULL;
	a = xcalloc(1, sizeof(*a));
	a->d = d;
	snprintf(a->store, sizeof(a->store), "%s", to);
	snprintf(a->sandbox, sizeof(a->sandbox), "%s", sb->name);
	snprintf(a->label, sizeof(a->label), "%s", label);
	snprintf(name, sizeof(name), "%s", to);
	if (pthread_create(&t, NULL, auto_push_thread, a)) {
		free(a);
		return NULL;
	}
	pthread_detach(t);
	return name;
}

/* ---- pulling ---- */

/* Every file of m made under dir (label: a checkpoint's; NULL: paused/) and filled from
 * the store; imgs[] the manifest's images with their disks' paths there. The files are
 * the daemon's, 0600, made new (O_EXCL: nothing there is reused or followed). */
static int pull_into(struct store *st, const struct manifest *m, const char *dir,
		     const char *label, struct vm_image *imgs, int *nimgs,
		     struct xfer_result *res, struct k8_err *err)
{
	int fds[MF_FILES_MAX], n = 0, r = 0;

	for (uint32_t i = 0; i < m->nfiles; i++) {
		cleanup_free char *p = ckpt_snapshot_local(dir, label, m->files[i].path);
		char esc[160];
		if (!p) {
			str_escape_to(esc, sizeof(esc), m->files[i].path);
			r = k8_err_set(err, -EBADMSG, "the snapshot holds a file '%s' no snapshot "
				       "has; refused", esc);
			goto out;
		}
		{
			cleanup_free char *parent = xstrdup(p);
			*strrchr(parent, '/') = '\0';
			if ((r = mkdir_p(parent, 0700))) {
				k8_err_set(err, r, "mkdir %s: %s", parent, strerror(-r));
				goto out;
			}
		}
		fds[n] = open(p, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fds[n] < 0) {
			r = k8_err_set(err, -errno, "making %s: %s", p, strerror(errno));
			goto out;
		}
		n++;
	}
	*nimgs = 0;
	for (uint32_t i = 0; i < m->nimages; i++) {
		char want[80];
		snprintf(want, sizeof(want), "images/%s.erofs", m->images[i].digest + 7);
		if (strcmp(want, m->images[i].file) || *nimgs >= K8_MAX_SLOTS) {
			r = k8_err_set(err, -EBADMSG, "the snapshot's image %s is not in the file its "
				       "digest names; refused", m->images[i].digest);
			goto out;
		}
		struct vm_image *v = &imgs[(*nimgs)++];
		cleanup_free char *p = ckpt_snapshot_local(dir, label, m->images[i].file);
		memset(v, 0, sizeof(*v));
		snprintf(v->ref, sizeof(v->ref), "%s", m->images[i].ref);
		snprintf(v->digest, sizeof(v->digest), "%s", m->images[i].digest);
		snprintf(v->disk, sizeof(v->disk), "%s", p);
		v->slot = m->images[i].slot;
	}
	if ((r = xfer_pull(&st->x, m, fds, res, err)))
		goto out;
	for (int i = 0; i < n; i++)
		if (fsync(fds[i]) < 0) {
			r = k8_err_set(err, -errno, "fsync: %s", strerror(errno));
			goto out;
		}
out:
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return r;
}

static json_t *settings_of(const struct manifest *m, struct k8_err *err)
{
	json_t *s = json_loads(m->config, JSON_REJECT_DUPLICATES, NULL);

	if (!json_is_object(s)) {
		json_decref(s);
		k8_err_set(err, -EBADMSG, "the snapshot's settings are not an object");
		return NULL;
	}
	return s;
}

static void pull_audit(struct daemon *d, const char *store, const struct manifest *m,
		       const char *as, bool ok, const struct xfer_result *res,
		       const struct k8_err *err)
{
	if (!ok) {
		daemon_audit(d, "store.pull.failed", as,
			     json_pack("{s:s,s:s,s:s,s:s,s:s}", "store", store, "kind", m->kind,
				       "sandbox", m->sandbox, "label", m->label, "error", err->msg));
		return;
	}
	daemon_audit(d, "store.pull", as,
		     json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I}", "store", store, "kind",
			       m->kind, "sandbox", m->sandbox, "label", m->label, "kosa8_version",
			       m->kosa8_version, "bytes", (json_int_t)res->bytes, "chunks",
			       (json_int_t)res->chunks, "sent", (json_int_t)res->sent, "ms",
			       (json_int_t)res->ms));
}

static int job_fork(struct api_job *j, json_t **out, struct k8_err *err)
{
	const char *sandbox = json_string_value(json_object_get(j->body, "sandbox"));
	const char *label = json_string_value(json_object_get(j->body, "label"));
	const char *name = json_string_value(json_object_get(j->body, "name"));
	struct daemon *d = j->d;
	struct manifest *m = xcalloc(1, sizeof(*m));
	struct vm_image imgs[K8_MAX_SLOTS];
	struct xfer_result res = { 0 };
	cleanup_free char *full = xasprintf("%s/%s", sandbox, label), *mirror = NULL;
	json_auto_t *settings = NULL;
	struct store st;
	struct sandbox *exists;
	uint8_t rnd[8];
	char hex[17];
	int nimgs = 0, r;
	uint64_t t0 = now_mono_ns();

	if ((exists = sb_get(d, name, err))) {
		sb_put(d, exists);
		free(m);
		return k8_err_set(err, -EEXIST, "a sandbox named '%s' already exists; pick another "
				  "name", name);
	}
	k8_err_clear(err);
	if ((r = store_open(d, j->arg, &st, j, err))) {
		free(m);
		return r;
	}
	st.x.what = full;
	if ((r = xfer_manifest_get(&st.x, "checkpoint", full, m, err)))
		goto out;
	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		memset(rnd, 0x5a, sizeof(rnd));
	k8_hex(rnd, sizeof(rnd), hex);
	mirror = xasprintf("%s/stores/.pull-%s", d->home, hex);
	if ((r = mkdir_p(mirror, 0700))) {
		k8_err_set(err, r, "mkdir %s: %s", mirror, strerror(-r));
		goto out;
	}
	r = pull_into(&st, m, mirror, m->label, imgs, &nimgs, &res, err);
	pull_audit(d, j->arg, m, name, r == 0, &res, err);
	if (r)
		goto out;
	if (!(settings = settings_of(m, err))) {
		r = err->code;
		goto out;
	}
	r = ckpt_fork_import(d, mirror, m->sandbox, m->label, settings, imgs, nimgs, name, out,
			     err);
	if (!r) {
		json_object_set_new(*out, "pulled", result_json(j->arg, &res));
		json_object_set_new(*out, "forked_from",
				    json_pack("{s:s,s:s,s:s}", "store", j->arg, "sandbox",
					      m->sandbox, "checkpoint", m->label));
		json_object_set_new(*out, "ms",
				    json_integer((json_int_t)((now_mono_ns() - t0) / 1000000)));
	}
out:
	if (mirror)
		rm_rf(mirror);
	manifest_free(m);
	free(m);
	store_close(&st);
	return r;
}

int store_api_fork(struct api_call *call)
{
	const char *sandbox = NULL, *label = NULL, *name = NULL;

	if (store_name_check(api_param(call, "store"), &call->err) ||
	    api_body_str(call, "sandbox", API_REQUIRED, K8_NAME_MAX, &sandbox) ||
	    api_body_str(call, "label", API_REQUIRED, 63, &label) ||
	    api_body_str(call, "name", API_REQUIRED, K8_NAME_MAX, &name))
		return call->err.code;
	if (!sb_name_valid(name) || !sb_name_valid(sandbox) || strchr(label, '/'))
		return k8_err_set(&call->err, -EINVAL, "give STORE:SANDBOX/LABEL and a sandbox "
				  "name (1-63 of a-z, 0-9, '-', '_', '.')");
	return api_reply_job(call, job_fork, api_param(call, "store"));
}

/* ---- pause to a store, resume from one ---- */

static char *handed_path(struct sandbox *sb)
{
	return xasprintf("%s/paused/%s", sb->dir, SB_PAUSED_HANDED);
}

static int job_pause_to(struct api_job *j, json_t **out, struct k8_err *err)
{
	const char *to = json_string_value(json_object_get(j->body, "to"));
	struct daemon *d = j->d;
	struct xfer_result res = { 0 };
	struct ckpt_export ex;
	json_auto_t *paused = NULL, *extra = NULL;
	struct store st;
	struct sandbox *sb;
	uint8_t rnd[16];
	char push_id[33];
	int r;

	if (!(sb = sb_get(d, j->arg, err)))
		return err->code;
	if ((r = store_open(d, to, &st, j, err))) {
		sb_put(d, sb);
		return r;
	}
	if (sb->state != SB_PAUSED && (r = sb_pause(d, sb, true, false, &paused, err)))
		goto out;
	if ((r = ckpt_export(d, sb, NULL, &ex, err)))
		goto out;
	/* this push's own id: the claim that takes it back checks it is still this one */
	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		memset(rnd, 0x5a, sizeof(rnd));
	k8_hex(rnd, sizeof(rnd), push_id);
	extra = json_pack("{s:s}", "push_id", push_id);
	r = push_export(d, &st, sb->name, NULL, &ex, extra, &res, err);
	if (!r) {
		cleanup_free char *hp = handed_path(sb);
		json_auto_t *rec = json_pack("{s:s,s:s,s:s}", "store", to, "push_id", push_id,
					     "manifest", res.manifest);
		char *text = json_dumps(rec, JSON_COMPACT);
		r = write_file_atomic(hp, text, strlen(text), 0600);
		free(text);
		if (r)
			k8_err_set(err, r, "writing %s: %s", hp, strerror(-r));
	}
	ckpt_export_end(&ex);
out:
	store_close(&st);
	if (r) {
		daemon_audit(d, "store.push.failed", sb->name,
			     json_pack("{s:s,s:s,s:s}", "store", to, "kind", "paused", "error",
				       err->msg));
	} else {
		daemon_audit(d, "store.push", sb->name,
			     json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I}", "store", to, "kind",
				       "paused", "by", "user", "manifest", res.manifest, "bytes",
				       (json_int_t)res.bytes, "chunks", (json_int_t)res.chunks,
				       "chunks_sent", (json_int_t)res.chunks_sent, "sent",
				       (json_int_t)res.sent, "ms", (json_int_t)res.ms));
		*out = result_json(to, &res);
		json_object_set_new(*out, "to", json_string("store"));
		json_object_set_new(*out, "sandbox", json_string(sb->name));
		json_object_set_new(*out, "kind", json_string("paused"));
	}
	sb_put(d, sb);
	return r;
}

int store_api_pause(struct api_call *call)
{
	const char *to = NULL;

	if (api_body_str(call, "to", API_OPTIONAL, SECRET_NAME_MAX, &to))
		return call->err.code;
	if (!to)
		return ckpt_api_pause(call);
	if (store_name_check(to, &call->err))
		return call->err.code;
	return api_reply_job(call, job_pause_to, api_param(call, "name"));
}

/* Resume a sandbox of this host that was paused to a store: the store's copy is taken
 * back first (it must still be the one this host pushed), then this copy resumes. */
static int resume_handed(struct daemon *d, struct sandbox *sb, const char *hp, json_t **out,
			 struct k8_err *err)
{
	cleanup_free char *text = NULL;
	json_auto_t *rec = NULL, *settings = NULL;
	struct manifest *m = xcalloc(1, sizeof(*m));
	const char *store, *push_id, *got;
	struct store st;
	int r;

	if (read_file(hp, 4096, &text, NULL) < 0 || !(rec = json_loads(text, 0, NULL)) ||
	    json_unpack(rec, "{s:s,s:s}", "store", &store, "push_id", &push_id) < 0) {
		free(m);
		return k8_err_set(err, -EINVAL, "%s is damaged", hp);
	}
	if ((r = store_open(d, store, &st, NULL, err))) {
		free(m);
		return k8_err_wrap(err, "sandbox '%s' was paused to store '%s'", sb->name, store);
	}
	r = xfer_manifest_get(&st.x, "paused", sb->name, m, err);
	if (r == -ENOENT) {
		k8_err_clear(err);
		r = k8_err_set(err, -ENOENT, "sandbox '%s' was paused to store '%s' and is no "
			       "longer there: resumed on another host? This copy stays paused; "
			       "`kosa8 sandbox rm %s` removes it", sb->name, store, sb->name);
		goto out;
	}
	if (r)
		goto out;
	settings = settings_of(m, err);
	got = json_string_value(json_object_get(settings, "push_id"));
	if (!got || strcmp(got, push_id)) {
		r = k8_err_set(err, -ESTALE, "store '%s' holds a newer pause of sandbox '%s' (pushed "
			       "by another host): this copy is out of date; `kosa8 sandbox rm %s` "
			       "removes it, then `kosa8 sandbox resume %s` fetches the store's",
			       store, sb->name, sb->name, sb->name);
		goto out;
	}
	if ((r = xfer_manifest_delete(&st.x, "paused", sb->name, err)))
		goto out;
	unlink(hp);
	daemon_audit(d, "store.pull", sb->name,
		     json_pack("{s:s,s:s,s:s,s:b}", "store", store, "kind", "paused", "sandbox",
			       sb->name, "local", true));
	r = sb_pause(d, sb, false, false, out, err);
out:
	manifest_free(m);
	free(m);
	store_close(&st);
	return r;
}

/* A sandbox paused to a store by another host: pulled, taken from the store, resumed. */
static int job_resume_from(struct api_job *j, json_t **out, struct k8_err *err)
{
	const char *from = json_string_value(json_object_get(j->body, "from"));
	struct daemon *d = j->d;
	struct manifest *m = xcalloc(1, sizeof(*m));
	struct vm_image imgs[K8_MAX_SLOTS];
	struct xfer_result res = { 0 };
	json_auto_t *settings = NULL;
	struct sandbox *sb = NULL;
	struct store st;
	int nimgs = 0, r;
	uint64_t t0 = now_mono_ns();

	if ((r = store_open(d, from, &st, j, err))) {
		free(m);
		return r;
	}
	st.x.what = j->arg;
	if ((r = xfer_manifest_get(&st.x, "paused", j->arg, m, err)))
		goto out;
	if (!(settings = settings_of(m, err))) {
		r = err->code;
		goto out;
	}
	if (!(sb = ckpt_import_begin(d, j->arg, settings, err))) {
		r = err->code ? err->code : -EIO;
		goto out;
	}
	r = pull_into(&st, m, sb->dir, NULL, imgs, &nimgs, &res, err);
	pull_audit(d, from, m, j->arg, r == 0, &res, err);
	if (!r)
		r = ckpt_import_paused(d, sb, settings, imgs, nimgs, err);
	if (!r)         /* taken: from now on this host's copy is the one */
		r = xfer_manifest_delete(&st.x, "paused", j->arg, err);
	if (r) {
		sb_unreserve(d, sb);
		sb = NULL;
		goto out;
	}
	r = sb_resume_paused(d, sb, "store", false, err);
	sb_busy_leave(sb);
	if (!r) {
		*out = json_pack("{s:s,s:I,s:o}", "from", "store",
				 "ms", (json_int_t)((now_mono_ns() - t0) / 1000000), "pulled",
				 result_json(from, &res));
	}
	sb_put(d, sb);
out:
	manifest_free(m);
	free(m);
	store_close(&st);
	return r;
}

/* Which store holds a paused sandbox `name`: the one named, else the only one of this
 * host's stores that has it. */
static int find_paused(struct daemon *d, const char *name, char *out, size_t n,
		       struct k8_err *err)
{
	cleanup_free char *dir = xasprintf("%s/stores", d->home);
	DIR *dh = opendir(dir);
	struct dirent *de;
	int found = 0;

	while (dh && (de = readdir(dh))) {
		size_t l = strlen(de->d_name);
		char sname[SECRET_NAME_MAX + 1];
		struct manifest *m;
		struct store st;
		struct k8_err e = { 0 };
		if (l < 6 || strcmp(de->d_name + l - 5, ".json") || l - 5 > SECRET_NAME_MAX)
			continue;
		snprintf(sname, sizeof(sname), "%.*s", (int)(l - 5), de->d_name);
		if (store_open(d, sname, &st, NULL, &e))
			continue;
		m = xcalloc(1, sizeof(*m));
		if (xfer_manifest_get(&st.x, "paused", name, m, &e) == 0) {
			if (found++)
				k8_err_set(err, -EEXIST, "stores '%s' and '%s' both hold a paused "
					   "sandbox '%s': say which with --from STORE", out, sname,
					   name);
			else
				snprintf(out, n, "%s", sname);
		}
		manifest_free(m);
		free(m);
		store_close(&st);
	}
	if (dh)
		closedir(dh);
	if (found > 1)
		return -EEXIST;
	if (!found)
		return k8_err_set(err, -ENOENT, "no sandbox '%s' here, and none of this host's "
				  "stores holds one paused", name);
	return 0;
}

int store_api_resume(struct api_call *call)
{
	const char *from = NULL, *name = api_param(call, "name");
	struct sandbox *sb;
	char found[SECRET_NAME_MAX + 1];
	int r;

	if (api_body_str(call, "from", API_OPTIONAL, SECRET_NAME_MAX, &from) ||
	    (from && store_name_check(from, &call->err)))
		return call->err.code;
	if ((sb = sb_get(call->d, name, &call->err))) {
		cleanup_free char *hp = handed_path(sb);
		if (access(hp, F_OK) == 0)
			r = resume_handed(call->d, sb, hp, &call->out, &call->err);
		else
			r = sb_pause(call->d, sb, false, false, &call->out, &call->err);
		sb_put(call->d, sb);
		return r;
	}
	if (call->err.code != -ENOENT || !sb_name_valid(name))
		return call->err.code;
	k8_err_clear(&call->err);
	if (!from) {
		if ((r = find_paused(call->d, name, found, sizeof(found), &call->err)))
			return r;
		from = found;
	}
	json_object_set_new(call->body, "from", json_string(from));
	return api_reply_job(call, job_resume_from, name);
}

/* ---- the stores themselves ---- */

int store_api_list(struct api_call *call)
{
	cleanup_free char *dir = xasprintf("%s/stores", call->d->home);
	json_t *arr = json_array();
	DIR *dh = opendir(dir);
	struct dirent *de;

	while (dh && (de = readdir(dh))) {
		size_t l = strlen(de->d_name);
		char sname[SECRET_NAME_MAX + 1];
		struct store_cfg c;
		struct k8_err e = { 0 };
		if (l < 6 || strcmp(de->d_name + l - 5, ".json") || l - 5 > SECRET_NAME_MAX)
			continue;
		snprintf(sname, sizeof(sname), "%.*s", (int)(l - 5), de->d_name);
		if (cfg_load(call->d, sname, &c, &e) == 0)
			json_array_append_new(arr, cfg_json(&c));
	}
	if (dh)
		closedir(dh);
	call->out = json_pack("{s:o}", "stores", arr);
	return 0;
}

/* The secrets of a body, wiped once used (as secret_api_set does). */
static void body_wipe(json_t *body, const char *key)
{
	json_t *v = json_object_get(body, key);

	if (json_is_string(v))
		OPENSSL_cleanse((char *)json_string_value(v), json_string_length(v));
}

static int store_add(struct api_call *call, struct store *st, uint8_t key[CHUNK_KEY_LEN],
		     bool *created)
{
	struct daemon *d = call->d;
	const char *name = NULL, *type = NULL, *endpoint = NULL, *bucket = NULL, *region = NULL;
	const char *ca = "", *akey = NULL, *skey = NULL, *keyhex = NULL;
	bool encrypt = false, path_style;
	int64_t chunk_kib = CHUNK_SIZE_DEFAULT >> 10, threads = STORE_THREADS_DEFAULT;
	struct store_cfg *c = &st->cfg;
	cleanup_free char *dir = xasprintf("%s/stores", d->home), *jpath = NULL;
	struct k8_err *err = &call->err;
	int r;

	if (api_body_str(call, "name", API_REQUIRED, SECRET_NAME_MAX, &name) ||
	    api_body_str(call, "type", API_REQUIRED, 8, &type) ||
	    api_body_str(call, "endpoint", API_REQUIRED, S3_ENDPOINT_MAX, &endpoint) ||
	    api_body_str(call, "bucket", API_REQUIRED, S3_BUCKET_MAX, &bucket) ||
	    api_body_str(call, "region", API_REQUIRED, S3_REGION_MAX, &region) ||
	    api_body_str(call, "ca_file", API_OPTIONAL, 4000, &ca) ||
	    api_body_str(call, "access_key", API_REQUIRED, S3_ACCESS_MAX, &akey) ||
	    api_body_str(call, "secret_key", API_REQUIRED, S3_SECRET_MAX, &skey) ||
	    api_body_str(call, "key", API_OPTIONAL, 64, &keyhex) ||
	    api_body_bool(call, "encrypt", API_OPTIONAL, &encrypt) ||
	    api_body_int(call, "chunk_kib", API_OPTIONAL, CHUNK_SIZE_MIN >> 10,
			 CHUNK_SIZE_MAX >> 10, &chunk_kib) ||
	    api_body_int(call, "threads", API_OPTIONAL, 1, XFER_THREADS_MAX, &threads))
		return err->code;
	if ((r = store_name_check(name, err)) || (r = store_offline(d, name, err)))
		return r;
	if (strcmp(type, "s3"))
		return k8_err_set(err, -EINVAL, "store type '%.20s': only s3 is known", type);
	if (chunk_kib & (chunk_kib - 1))
		return k8_err_set(err, -EINVAL, "chunk_kib must be a power of two (64 to 16384)");
	/* path-style unless said otherwise, except on AWS itself */
	path_style = !strstr(endpoint, ".amazonaws.com");
	if (api_body_bool(call, "path_style", API_OPTIONAL, &path_style))
		return err->code;
	if (ca[0]) {
		struct stat sb;
		if (ca[0] != '/' || stat(ca, &sb) < 0 || !S_ISREG(sb.st_mode))
			return k8_err_set(err, -EINVAL, "CA file '%.200s' is not an absolute path to "
					  "a file", ca);
	}
	if (keyhex) {
		if (chunk_unhex(keyhex, key))
			return k8_err_set(err, -EINVAL, "the key must be 64 hex digits (what `kosa8 "
					  "store key` prints)");
		encrypt = true;
	} else if (encrypt && RAND_bytes(key, CHUNK_KEY_LEN) != 1) {
		return k8_err_set(err, -EIO, "no random key");
	}
	{
		char added[K8_TIME_LEN];
		cfg_fill(c, name, endpoint, bucket, region, ca, k8_time_now(added, 0), path_style,
			 encrypt, (int)chunk_kib, (int)threads);
	}
	jpath = store_file(d, name, "json");
	if (access(jpath, F_OK) == 0)
		return k8_err_set(err, -EEXIST, "a store named '%s' exists; `kosa8 store rm %s` "
				  "first", name, name);
	if ((r = store_setup(st, key, akey, skey, NULL, err)) ||
	    (r = image_store_userns(d->images, &st->x.userns, err)))
		return r;
	/* the bucket answers, the credentials are good, and it holds this store or none */
	{
		struct k8_err e = { 0 };
		*created = xfer_marker(&st->x, false, &e) == -ENOENT;
	}
	if ((r = xfer_marker(&st->x, true, err)))
		return r;
	if ((r = mkdir_p(dir, 0700)))
		return k8_err_set(err, r, "mkdir %s: %s", dir, strerror(-r));
	chmod(dir, 0700);
	{
		cleanup_free char *cpath = store_file(d, name, "cred");
		cleanup_free char *kpath = store_file(d, name, "key");
		char *cred = xasprintf("%s\n%s\n", akey, skey);
		json_auto_t *cj = cfg_json(c);
		cleanup_free char *text = json_dumps(cj, JSON_INDENT(2));
		r = write_file_atomic(cpath, cred, strlen(cred), 0600);
		OPENSSL_cleanse(cred, strlen(cred));
		free(cred);
		if (!r && encrypt)
			r = write_file_atomic(kpath, key, CHUNK_KEY_LEN, 0600);
		if (!r)         /* last: a store is listed once all of it is there */
			r = write_file_atomic(jpath, text, strlen(text), 0600);
		if (r) {
			secret_wipe_file(cpath);
			secret_wipe_file(kpath);
			return k8_err_set(err, r, "writing the store's files: %s", strerror(-r));
		}
	}
	return 0;
}

int store_api_add(struct api_call *call)
{
	struct store st;
	uint8_t key[CHUNK_KEY_LEN];
	bool created = false;
	int r = store_add(call, &st, key, &created);

	body_wipe(call->body, "secret_key");
	body_wipe(call->body, "access_key");
	body_wipe(call->body, "key");
	OPENSSL_cleanse(key, sizeof(key));
	if (r) {
		store_close(&st);
		return r;
	}
	daemon_audit(call->d, "store.add", NULL,
		     json_pack("{s:s,s:s,s:s,s:s,s:b,s:b,s:b}", "name", st.cfg.name, "endpoint",
			       st.cfg.endpoint, "bucket", st.cfg.bucket, "region", st.cfg.region,
			       "path_style", st.cfg.path_style, "encrypted", st.cfg.encrypted,
			       "new_bucket_store", created));
	call->out = cfg_json(&st.cfg);
	json_object_set_new(call->out, "new", json_boolean(created));
	store_close(&st);
	return 0;
}

int store_api_rm(struct api_call *call)
{
	const char *name = api_param(call, "store");
	cleanup_free char *j = NULL, *c = NULL, *k = NULL;
	struct store_cfg cfg;

	if (cfg_load(call->d, name, &cfg, &call->err))
		return call->err.code;
	j = store_file(call->d, name, "json");
	c = store_file(call->d, name, "cred");
	k = store_file(call->d, name, "key");
	unlink(j);                      /* first: no longer listed or opened */
	secret_wipe_file(c);
	secret_wipe_file(k);
	daemon_audit(call->d, "store.rm", NULL, json_pack("{s:s,s:s,s:s}", "name", name,
							  "endpoint", cfg.endpoint, "bucket",
							  cfg.bucket));
	call->out = json_pack("{s:s}", "name", name);
	return 0;
}

int store_api_key(struct api_call *call)
{
	const char *name = api_param(call, "store");
	cleanup_free char *kpath = NULL;
	struct store_cfg cfg;
	char *keyb = NULL, hex[2 * CHUNK_KEY_LEN + 1];
	size_t kn = 0;

	if (cfg_load(call->d, name, &cfg, &call->err))
		return call->err.code;
	if (!cfg.encrypted)
		return k8_err_set(&call->err, -ENOENT, "store '%s' is not encrypted: it has no "
				  "key", name);
	kpath = store_file(call->d, name, "key");
	if (read_file(kpath, 64, &keyb, &kn) < 0 || kn != CHUNK_KEY_LEN) {
		secret_wipe(keyb, kn);
		return k8_err_set(&call->err, -ENOENT, "store '%s': its key %s is missing", name,
				  kpath);
	}
	k8_hex(keyb, CHUNK_KEY_LEN, hex);
	secret_wipe(keyb, kn);
	daemon_audit(call->d, "store.key", NULL, json_pack("{s:s}", "name", name));
	call->out = json_pack("{s:s,s:s}", "name", name, "key", hex);
	OPENSSL_cleanse(hex, sizeof(hex));
	return 0;
}

static int snap_row(void *ctx, const struct manifest *m)
{
	json_t *arr = ctx, *imgs = json_array();
	uint64_t bytes = 0, data = 0, chunks = 0;

	for (uint32_t i = 0; i < m->nfiles; i++) {
		bytes += m->files[i].size;
		chunks += m->files[i].nchunks;
		for (uint32_t c = 0; c < m->files[i].nchunks; c++)
			data += m->files[i].chunks[c].len;
	}
	for (uint32_t i = 0; i < m->nimages; i++)
		json_array_append_new(imgs, json_pack("{s:s,s:s}", "ref", m->images[i].ref,
						      "digest", m->images[i].digest));
	json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:b,s:o}",
					     "kind", m->kind, "sandbox", m->sandbox, "label",
					     m->label, "created", m->created, "kosa8_version",
					     m->kosa8_version, "guest_digest", m->guest_digest,
					     "bytes", (json_int_t)bytes, "data", (json_int_t)data,
					     "chunks", (json_int_t)chunks, "encrypted", m->encrypted,
					     "images", imgs));
	return 0;
}

int store_api_snapshots(struct api_call *call)
{
	struct store st;
	json_t *arr = json_array();
	uint64_t bad = 0;
	int r;

	if ((r = store_open(call->d, api_param(call, "store"), &st, NULL, &call->err))) {
		json_decref(arr);
		return r;
	}
	if ((r = xfer_marker(&st.x, false, &call->err)) ||
	    (r = xfer_list(&st.x, snap_row, arr, &bad, &call->err))) {
		json_decref(arr);
		store_close(&st);
		return r;
	}
	call->out = json_pack("{s:s,s:o,s:I}", "store", st.cfg.name, "snapshots", arr,
			      "unreadable", (json_int_t)bad);
	store_close(&st);
	return 0;
}

/* DELETE .../snapshots/{sandbox}/{label}: the checkpoint's manifest (its chunks go at
 * the next gc); without a label, the paused sandbox's. */
int store_api_snapshot_rm(struct api_call *call)
{
	const char *sandbox = api_param(call, "sandbox"), *label = api_param(call, "label");
	cleanup_free char *full = NULL;
	struct manifest *m = xcalloc(1, sizeof(*m));
	const char *kind = label[0] ? "checkpoint" : "paused";
	struct store st;
	int r;

	if (!sb_name_valid(sandbox) || strchr(label, '/')) {
		free(m);
		return k8_err_set(&call->err, -EINVAL, "give STORE:SANDBOX/LABEL or STORE:SANDBOX");
	}
	full = label[0] ? xasprintf("%s/%s", sandbox, label) : xstrdup(sandbox);
	if ((r = store_open(call->d, api_param(call, "store"), &st, NULL, &call->err))) {
		free(m);
		return r;
	}
	/* only what is there and reads back as this store's is removed */
	r = xfer_manifest_get(&st.x, kind, full, m, &call->err);
	if (!r)
		r = xfer_manifest_delete(&st.x, kind, full, &call->err);
	manifest_free(m);
	free(m);
	if (!r) {
		daemon_audit(call->d, "store.snapshot.rm", NULL,
			     json_pack("{s:s,s:s,s:s,s:s}", "store", st.cfg.name, "kind", kind,
				       "sandbox", sandbox, "label", label));
		call->out = json_pack("{s:s,s:s,s:s,s:s}", "store", st.cfg.name, "kind", kind,
				      "sandbox", sandbox, "label", label);
	}
	store_close(&st);
	return r;
}

static int job_gc(struct api_job *j, json_t **out, struct k8_err *err)
{
	json_t *g = json_object_get(j->body, "grace_s");
	uint64_t grace = json_is_integer(g) ? (uint64_t)json_integer_value(g) : STORE_GRACE_DEFAULT;
	struct xfer_gc res;
	struct store st;
	int r;

	if ((r = store_open(j->d, j->arg, &st, j, err)))
		return r;
	st.x.what = j->arg;
	r = xfer_marker(&st.x, false, err);
	if (!r)
		r = xfer_gc(&st.x, grace, &res, err);
	store_close(&st);
	if (r) {
		daemon_audit(j->d, "store.gc.failed", NULL,
			     json_pack("{s:s,s:s}", "store", j->arg, "error", err->msg));
		return r;
	}
	*out = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "store", j->arg, "manifests",
			 (json_int_t)res.manifests, "live_chunks", (json_int_t)res.live, "removed",
			 (json_int_t)res.removed, "removed_bytes", (json_int_t)res.removed_bytes,
			 "kept_young", (json_int_t)res.kept_young, "grace_s", (json_int_t)grace);
	daemon_audit(j->d, "store.gc", NULL, json_incref(*out));
	return 0;
}

int store_api_gc(struct api_call *call)
{
	int64_t grace = STORE_GRACE_DEFAULT;

	if (store_name_check(api_param(call, "store"), &call->err) ||
	    api_body_int(call, "grace_s", API_OPTIONAL, 0, 365 * 86400, &grace))
		return call->err.code;
	return api_reply_job(call, job_gc, api_param(call, "store"));
}
