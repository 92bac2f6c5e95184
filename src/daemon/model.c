/* SPDX-License-Identifier: Apache-2.0 */
/* model.c - the model store ($KOSA8_HOME/models) and the model servers kosa8d runs.
 *
 * Store: blobs/sha256-<hex> (content addressed), names/<name>.json ({name, sha256, size,
 * source, created}), partial/sha256-<hex>.part (a download in progress, resumed by digest).
 * Pull: a Hugging Face-compatible hub (hf_endpoint in config.json, KOSA8_HF_ENDPOINT, default
 * https://huggingface.co): the repo's file list (/api/models/REPO/tree/main, else
 * /api/models/REPO?blobs=true) gives each .gguf file's LFS SHA-256 and size; REPO:QUANT picks
 * one file by its quant tag, case-insensitively; the download resumes with a Range request
 * and is hashed as it arrives; nothing is named until the digest matches. Everything the hub
 * sends is hostile: list size capped, paths checked, sizes bounded, bodies never trusted.
 * Servers: `kosa8-model serve BLOB --name NAME` children, ready once /health answers; listed
 * by `ps`, stopped by `stop` or with the daemon.
 */
#include "daemon/model.h"
#include "daemon/broker.h"
#include "daemon/daemon.h"
#include "daemon/ports.h"
#include "daemon/sidecar.h"
#include "daemon/vm.h"
#include "daemon/api_route.h"
#include "daemon/fetch.h"
#include "common/sha.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#define HF_DEFAULT "https://huggingface.co"
#define LIST_MAX (8u << 20)               /* bytes of a repo's file list */
#define MODEL_MAX_SIZE (1ull << 40)

/* ---- names and paths ---- */

static bool name_ok(const char *n)
{
	size_t l = strlen(n);
	if (l == 0 || l > 128 || !(islower((unsigned char)n[0]) || isdigit((unsigned char)n[0])))
		return false;
	for (size_t i = 0; i < l; i++)
		if (!(islower((unsigned char)n[i]) || isdigit((unsigned char)n[i]) || strchr("._-", n[i])))
			return false;
	return true;
}

/* The store's name for a file: its base name, lower case, without ".gguf". */
static int name_from_file(const char *file, char *out, size_t cap, struct k8_err *err)
{
	const char *b = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
	size_t l = strlen(b);
	if (l > 5 && !strcasecmp(b + l - 5, ".gguf"))
		l -= 5;
	if (l == 0 || l >= cap)
		return k8_err_set(err, -EINVAL, "cannot make a model name from '%s'; give one with --name", file);
	for (size_t i = 0; i < l; i++)
		out[i] = (char)tolower((unsigned char)b[i]);
	out[l] = 0;
	if (!name_ok(out))
		return k8_err_set(err, -EINVAL, "'%s' is not a usable model name (lower-case letters, "
				  "digits, '.', '_', '-'); give one with --name", out);
	return 0;
}

K8_PRINTF(2, 3) static char *mpath(struct daemon *d, const char *fmt, ...)
{
	va_list ap;
	char *rel = NULL;
	va_start(ap, fmt);
	if (vasprintf(&rel, fmt, ap) < 0)
		rel = NULL;
	va_end(ap);
	if (!rel)
		abort();   /* as xasprintf: small and bounded */
	char *p = xasprintf("%s/models/%s", d->home, rel);
	free(rel);
	return p;
}

static bool hex64(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (int i = 0; i < 64; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return false;
	return true;
}

static json_t *meta_read(struct daemon *d, const char *name)
{
	if (!name_ok(name))
		return NULL;
	cleanup_free char *p = mpath(d, "names/%s.json", name);
	cleanup_free char *t = NULL;
	size_t n;
	if (read_file(p, 1 << 16, &t, &n))
		return NULL;
	json_t *j = json_loadb(t, n, 0, NULL);
	if (!json_is_object(j) || !hex64(json_string_value(json_object_get(j, "sha256")))) {
		json_decref(j);
		return NULL;
	}
	return j;
}

static int meta_write(struct daemon *d, const char *name, json_t *meta, struct k8_err *err)
{
	cleanup_free char *dir = mpath(d, "%s", "names");
	cleanup_free char *p = mpath(d, "names/%s.json", name);
	cleanup_free char *t = json_dumps(meta, JSON_INDENT(2));
	int r;
	if ((r = mkdir_p(dir, 0700)) || (r = write_file_atomic(p, t, strlen(t), 0600)))
		return k8_err_set(err, r, "writing %s: %s", p, strerror(-r));
	return 0;
}

/* ---- the hub ---- */

struct hub_file {
	char path[512];
	char sha256[65];
	uint64_t size;
};

/* A path from the hub we are willing to fetch and show: relative, no "..", printable. */
static bool path_ok(const char *p)
{
	size_t l = strlen(p);
	if (l == 0 || l >= 512 || p[0] == '/' || strstr(p, ".."))
		return false;
	for (size_t i = 0; i < l; i++)
		if (!isalnum((unsigned char)p[i]) && !strchr("._-/+", p[i]))
			return false;
	return true;
}

/* Both listing shapes: tree entries {path, size, lfs:{oid, size}} and model info
 * {siblings: [{rfilename, lfs:{sha256, size}}]}. Keeps the .gguf files with an LFS digest. */
static int hub_files(json_t *j, struct hub_file **out, int *n)
{
	json_t *arr = json_is_array(j) ? j : json_object_get(j, "siblings");
	size_t i;
	json_t *e;
	*out = NULL;
	*n = 0;
	if (!json_is_array(arr))
		return -EPROTO;
	json_array_foreach(arr, i, e) {
		const char *p = json_string_value(json_object_get(e, "path"));
		if (!p)
			p = json_string_value(json_object_get(e, "rfilename"));
		json_t *lfs = json_object_get(e, "lfs");
		const char *sha = json_string_value(json_object_get(lfs, "oid"));
		if (!sha)
			sha = json_string_value(json_object_get(lfs, "sha256"));
		if (sha && !strncmp(sha, "sha256:", 7))
			sha += 7;
		json_t *sz = json_object_get(lfs, "size");
		size_t l = p ? strlen(p) : 0;
		if (!p || l < 6 || strcasecmp(p + l - 5, ".gguf") || !path_ok(p) || !hex64(sha) ||
		    !json_is_integer(sz) || json_integer_value(sz) <= 0 ||
		    (uint64_t)json_integer_value(sz) > MODEL_MAX_SIZE || *n >= 4096)
			continue;
		struct hub_file *v = realloc(*out, (size_t)(*n + 1) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		*out = v;
		snprintf(v[*n].path, sizeof(v[*n].path), "%s", p);
		memcpy(v[*n].sha256, sha, 65);
		v[*n].size = (uint64_t)json_integer_value(sz);
		(*n)++;
	}
	return 0;
}

/* The quant tag of a file name: what follows its last '-' or '.' before ".gguf". */
static void quant_tag(const char *path, char *out, size_t cap)
{
	const char *b = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t l = strlen(b) - 5, s = l;
	while (s > 0 && b[s - 1] != '-' && b[s - 1] != '.')
		s--;
	snprintf(out, cap, "%.*s", (int)(l - s), b + s);
}

static int pick_file(const char *repo, const char *quant, struct hub_file *f, int n, int *which,
		     struct k8_err *err)
{
	char choices[1024] = "";
	int hit = -1, nhit = 0;
	for (int i = 0; i < n; i++) {
		char tag[128];
		quant_tag(f[i].path, tag, sizeof(tag));
		if (strstr(f[i].path, "-of-"))
			continue;   /* split files: not supported */
		size_t cl = strlen(choices);
		if (cl + strlen(tag) + 3 < sizeof(choices) && !strcasestr(choices, tag))
			snprintf(choices + cl, sizeof(choices) - cl, "%s%s", cl ? ", " : "", tag);
		if (quant ? !strcasecmp(tag, quant) : n == 1) {
			if (hit < 0 || strlen(f[i].path) < strlen(f[hit].path))
				hit = i;
			nhit++;
		}
	}
	if (hit < 0 && !choices[0])
		return k8_err_set(err, -ENOENT, "%s has no single-file .gguf model with a published "
				  "SHA-256", repo);
	if (hit < 0 && !quant)
		return k8_err_set(err, -EINVAL, "%s has several models; name one as %s:QUANT, one of: %s",
				  repo, repo, choices);
	if (hit < 0)
		return k8_err_set(err, -ENOENT, "%s has no '%s' file; the choices are: %s", repo, quant,
				  choices);
	*which = hit;
	return 0;
}

/* ---- download ---- */

struct dl {
	int fd;
	sha256_ctx md;
	uint64_t off, want, done;
	long status;
	bool decided, bad_range;
	struct fetch_buf errbody;
	void (*progress)(void *, json_t *);
	void *pctx;
	const char *what;
	uint64_t last_ns;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void dl_progress(struct dl *x, bool force)
{
	uint64_t now = mono_ns();
	if (!x->progress || (!force && now - x->last_ns < 200000000ull))
		return;
	x->last_ns = now;
	x->progress(x->pctx, json_pack("{s:s,s:s,s:I,s:I}", "phase", "download", "what", x->what,
				       "done", (json_int_t)x->done, "total", (json_int_t)x->want));
}

static size_t dl_header(char *p, size_t sz, size_t nm, void *ud)
{
	struct dl *x = ud;
	size_t n = sz * nm;
	long st = fetch_status_line(p, n);
	if (st >= 0) {
		x->decided = false;   /* a new response (after a redirect) */
		x->status = st;
	} else if (n > 14 && !strncasecmp(p, "Content-Range:", 14) && x->status == 206) {
		const char *b = memmem(p, n, "bytes ", 6);
		if (!b || strtoull(b + 6, NULL, 10) != x->off)
			x->bad_range = true;
	}
	return n;
}

static size_t dl_write(char *p, size_t sz, size_t nm, void *ud)
{
	struct dl *x = ud;
	size_t n = sz * nm;
	if (x->status != 200 && x->status != 206)
		return fetch_buf_write(p, sz, nm, &x->errbody);
	if (!x->decided) {
		x->decided = true;
		if (x->status == 206 && x->bad_range)
			return 0;
		if (x->status == 200 && x->off) {   /* the server ignored Range: start over */
			if (ftruncate(x->fd, 0) || lseek(x->fd, 0, SEEK_SET) < 0)
				return 0;
			sha256_end(x->md, NULL);
			x->md = sha256_begin();
			x->off = x->done = 0;
		}
	}
	if (x->done + n > x->want)
		return 0;   /* longer than the hub said: refuse */
	if (write_full(x->fd, p, n) < 0)
		return 0;
	sha256_add(x->md, p, n);
	x->done += n;
	dl_progress(x, false);
	return n;
}

/* Fetch url into the partial file for f (resuming), check size and digest, move it into
 * blobs/. 0 or -errno with a message; a corrupt download is deleted. */
static int download(struct daemon *d, const char *url, struct curl_slist *hdrs,
		    const struct hub_file *f, void (*progress)(void *, json_t *), void *pctx,
		    struct k8_err *err)
{
	cleanup_free char *pdir = mpath(d, "%s", "partial");
	cleanup_free char *bdir = mpath(d, "%s", "blobs");
	cleanup_free char *part = mpath(d, "partial/sha256-%s.part", f->sha256);
	cleanup_free char *blob = mpath(d, "blobs/sha256-%s", f->sha256);
	int r;
	if ((r = mkdir_p(pdir, 0700)) || (r = mkdir_p(bdir, 0700)))
		return k8_err_set(err, r, "creating %s: %s", pdir, strerror(-r));
	cleanup_close int fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", part, strerror(errno));
	struct dl x = { .fd = fd, .want = f->size, .progress = progress, .pctx = pctx,
			.what = f->path, .errbody = { .max = 4096 } };
	x.md = sha256_begin();
	/* Resume: hash what is there (a partial longer than the file is garbage). */
	struct stat st;
	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size <= f->size) {
		char b[1 << 16];
		ssize_t k;
		while ((k = read(fd, b, sizeof(b))) > 0) {
			sha256_add(x.md, b, (size_t)k);
			x.off += (uint64_t)k;
		}
	} else if (ftruncate(fd, 0) || lseek(fd, 0, SEEK_SET) < 0) {
		sha256_end(x.md, NULL);
		return k8_err_set(err, -errno, "%s: %s", part, strerror(errno));
	}
	x.done = x.off;
	if (x.off)
		daemon_log("model pull: resuming %s at %llu of %llu bytes", f->path,
			   (unsigned long long)x.off, (unsigned long long)f->size);
	dl_progress(&x, true);
	if (x.off < f->size) {
		CURL *c = fetch_curl(url, hdrs);
		char range[64];
		snprintf(range, sizeof(range), "%llu-", (unsigned long long)x.off);
		if (x.off)
			curl_easy_setopt(c, CURLOPT_RANGE, range);
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, dl_header);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, dl_write);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
		CURLcode cc = curl_easy_perform(c);
		curl_easy_cleanup(c);
		free(x.errbody.p);
		if (x.status != 200 && x.status != 206) {
			sha256_end(x.md, NULL);
			if (cc != CURLE_OK && !x.status)
				return k8_err_set(err, -EHOSTUNREACH, "downloading %s: %s", f->path,
						  curl_easy_strerror(cc));
			return k8_err_set(err, x.status == 404 ? -ENOENT : x.status == 401 || x.status == 403 ?
					  -EPERM : -EPROTO, "downloading %s: HTTP %ld%s", f->path, x.status,
					  x.status == 401 || x.status == 403 ? " (a gated or private repo needs "
					  "a token: HF_TOKEN, or kosa8 login HOST)" : "");
		}
		if (x.bad_range) {
			sha256_end(x.md, NULL);
			unlink(part);
			return k8_err_set(err, -EPROTO, "downloading %s: the hub answered a different "
					  "range than asked; the partial file was removed, pull again", f->path);
		}
		if (cc != CURLE_OK && x.done < f->size) {
			sha256_end(x.md, NULL);
			if (cc == CURLE_WRITE_ERROR) {
				unlink(part);
				return k8_err_set(err, -EPROTO, "downloading %s: more bytes than the %llu "
						  "the hub published; removed", f->path,
						  (unsigned long long)f->size);
			}
			return k8_err_set(err, -ECONNRESET, "downloading %s: %s after %llu of %llu bytes; "
					  "pull again to resume", f->path, curl_easy_strerror(cc),
					  (unsigned long long)x.done, (unsigned long long)f->size);
		}
	}
	dl_progress(&x, true);
	char hex[65];
	sha256_end(x.md, hex);
	if (x.done != f->size || strcmp(hex, f->sha256)) {
		unlink(part);
		return k8_err_set(err, -EBADMSG, "downloading %s: got %llu bytes with SHA-256 %s; the hub "
				  "published %llu bytes with %s. The download was removed; pull again",
				  f->path, (unsigned long long)x.done, hex, (unsigned long long)f->size,
				  f->sha256);
	}
	if (fsync(fd) || rename(part, blob))
		return k8_err_set(err, -errno, "%s: %s", blob, strerror(errno));
	return 0;
}

/* The bearer token: the request's (the CLI passes HF_TOKEN), else the password kosa8 login
 * saved for the endpoint's host. Never logged. */
static void hub_token(struct daemon *d, const char *given, const char *endpoint, char *out, size_t cap)
{
	out[0] = 0;
	if (given && *given) {
		snprintf(out, cap, "%s", given);
		return;
	}
	const char *h = strstr(endpoint, "://") ? strstr(endpoint, "://") + 3 : endpoint;
	char host[256];
	snprintf(host, sizeof(host), "%.*s", (int)strcspn(h, "/"), h);
	cleanup_free char *p = xasprintf("%s/auth.json", d->home);
	cleanup_free char *t = NULL;
	size_t n;
	if (read_file(p, 1 << 20, &t, &n))
		return;
	json_t *j = json_loadb(t, n, 0, NULL);
	json_t *e = json_object_get(json_object_get(j, "auths"), host);
	const char *pw = json_string_value(json_object_get(e, "password"));
	const char *a = json_string_value(json_object_get(e, "auth"));
	if (pw) {
		snprintf(out, cap, "%s", pw);
	} else if (a && strlen(a) < 4096) {
		unsigned char dec[3100];
		int k = EVP_DecodeBlock(dec, (const unsigned char *)a, (int)strlen(a));
		if (k > 0) {
			dec[k] = 0;
			char *colon = strchr((char *)dec, ':');
			if (colon)
				snprintf(out, cap, "%s", colon + 1);
			explicit_bzero(dec, sizeof(dec));
		}
	}
	json_decref(j);
}

static bool repo_ok(const char *r)
{
	const char *s = strchr(r, '/');
	if (!s || strchr(s + 1, '/') || s == r || !s[1] || strlen(r) > 200)
		return false;
	for (const char *p = r; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("._-/", *p))
			return false;
	return !strstr(r, "..");
}

int model_pull(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
	       json_t **out, struct k8_err *err)
{
	const char *spec = json_string_value(json_object_get(body, "model"));
	const char *given_name = json_string_value(json_object_get(body, "name"));
	if (!spec)
		return k8_err_set(err, -EINVAL, "a model is required: REPO:QUANT, e.g. "
				  "Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m");
	char repo[256], quant[128] = "";
	const char *colon = strchr(spec, ':');
	snprintf(repo, sizeof(repo), "%.*s", (int)(colon ? (size_t)(colon - spec) : strlen(spec)), spec);
	if (colon)
		snprintf(quant, sizeof(quant), "%s", colon + 1);
	if (!repo_ok(repo) || (colon && !quant[0]))
		return k8_err_set(err, -EINVAL, "'%s' is not REPO[:QUANT] (e.g. "
				  "Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m)", spec);
	if (given_name && !name_ok(given_name))
		return k8_err_set(err, -EINVAL, "--name %s: lower-case letters, digits, '.', '_', '-'",
				  given_name);
	json_t *cfg = daemon_config(d);
	const char *ep = getenv("KOSA8_HF_ENDPOINT");
	if (!ep || !*ep)
		ep = json_string_value(json_object_get(cfg, "hf_endpoint"));
	char endpoint[512];
	snprintf(endpoint, sizeof(endpoint), "%s", ep && *ep ? ep : HF_DEFAULT);
	size_t el = strlen(endpoint);
	while (el && endpoint[el - 1] == '/')
		endpoint[--el] = 0;
	bool off = daemon_offline(d, cfg);
	json_decref(cfg);
	if (off)
		return k8_err_set(err, -ENETUNREACH, "KOSA8_OFFLINE is set: not fetching %s from %s; "
				  "bring the model with kosa8 model import FILE or kosa8 bundle import",
				  spec, endpoint);
	if (strncmp(endpoint, "https://", 8) && strncmp(endpoint, "http://", 7))
		return k8_err_set(err, -EINVAL, "hf_endpoint %s: must be an http(s) URL", endpoint);
	char token[4096];
	hub_token(d, json_string_value(json_object_get(body, "token")), endpoint, token, sizeof(token));
	struct curl_slist *hdrs = NULL;
	if (token[0]) {
		char *h = xasprintf("Authorization: Bearer %s", token);
		hdrs = curl_slist_append(hdrs, h);
		explicit_bzero(h, strlen(h));
		free(h);
		explicit_bzero(token, sizeof(token));
	}
	struct fetch_buf b = { .max = LIST_MAX };
	cleanup_free char *u1 = xasprintf("%s/api/models/%s/tree/main", endpoint, repo);
	long st = fetch_mem(u1, hdrs, 120L, &b, err);
	if (st == 404 || st == 400) {   /* hubs without the tree API: the model info */
		struct fetch_buf b2 = { .max = LIST_MAX };
		struct k8_err e2 = { 0 };
		cleanup_free char *u2 = xasprintf("%s/api/models/%s?blobs=true", endpoint, repo);
		if (fetch_mem(u2, hdrs, 120L, &b2, &e2) == 200) {
			free(b.p);
			b = b2;
			st = 200;
		} else {
			free(b2.p);
		}
	}
	int r = 0;
	char *blob = NULL;
	struct hub_file *files = NULL;
	int nf = 0, which = -1;
	json_t *list = NULL;
	if (st < 0) {
		r = (int)st;
		goto out;
	}
	if (st != 200) {
		r = k8_err_set(err, st == 404 ? -ENOENT : st == 401 || st == 403 ? -EPERM : -EPROTO,
			       "%s: the hub answered HTTP %ld for %s%s", endpoint, st, repo,
			       st == 401 || st == 403 ? " (a gated or private repo needs a token: "
			       "HF_TOKEN, or kosa8 login HOST)" : "");
		goto out;
	}
	list = json_loadb(b.p ? b.p : "", b.n, 0, NULL);
	if (!list || hub_files(list, &files, &nf)) {
		r = k8_err_set(err, -EPROTO, "%s: the file list of %s is not the hub's JSON", endpoint, repo);
		goto out;
	}
	if ((r = pick_file(repo, quant[0] ? quant : NULL, files, nf, &which, err)))
		goto out;
	const struct hub_file *f = &files[which];
	char name[160];
	if (given_name)
		snprintf(name, sizeof(name), "%s", given_name);
	else if ((r = name_from_file(f->path, name, sizeof(name), err)))
		goto out;
	blob = mpath(d, "blobs/sha256-%s", f->sha256);
	struct stat sst;
	bool have = stat(blob, &sst) == 0 && (uint64_t)sst.st_size == f->size;
	if (!have) {
		cleanup_free char *url = xasprintf("%s/%s/resolve/main/%s", endpoint, repo, f->path);
		if ((r = download(d, url, hdrs, f, progress, pctx, err)))
			goto out;
	}
	json_t *meta = json_pack("{s:s,s:s,s:I,s:{s:s,s:s,s:s},s:I}", "name", name, "sha256",
				 f->sha256, "size", (json_int_t)f->size, "source", "endpoint", endpoint,
				 "repo", repo, "file", f->path, "created", (json_int_t)time(NULL));
	r = meta_write(d, name, meta, err);
	if (!r) {
		daemon_audit(d, "model.pull", NULL, json_pack("{s:s,s:s,s:s,s:s}", "name", name, "repo",
				 repo, "file", f->path, "sha256", f->sha256));
		json_object_set_new(meta, "cached", json_boolean(have));
		*out = meta;
	} else {
		json_decref(meta);
	}
out:
	free(blob);
	free(b.p);
	free(files);
	json_decref(list);
	curl_slist_free_all(hdrs);
	return r;
}

int model_import(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
		 json_t **out, struct k8_err *err)
{
	const char *path = json_string_value(json_object_get(body, "path"));
	const char *given = json_string_value(json_object_get(body, "name"));
	char name[160];
	int r;
	if (!path || path[0] != '/')
		return k8_err_set(err, -EINVAL, "path must be an absolute path to a .gguf file");
	if (given) {
		if (!name_ok(given))
			return k8_err_set(err, -EINVAL, "--name %s: lower-case letters, digits, '.', '_', '-'",
					  given);
		snprintf(name, sizeof(name), "%s", given);
	} else if ((r = name_from_file(path, name, sizeof(name), err))) {
		return r;
	}
	cleanup_close int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (in < 0 || fstat(in, &st) || !S_ISREG(st.st_mode))
		return k8_err_set(err, in < 0 ? -errno : -EINVAL, "%s: %s", path,
				  in < 0 ? strerror(errno) : "not a regular file");
	char magic[4];
	if (pread(in, magic, 4, 0) != 4 || memcmp(magic, "GGUF", 4))
		return k8_err_set(err, -EINVAL, "%s is not a GGUF model file", path);
	cleanup_free char *bdir = mpath(d, "%s", "blobs");
	cleanup_free char *tmp = mpath(d, "blobs/import-%s.tmp", name);
	if ((r = mkdir_p(bdir, 0700)))
		return k8_err_set(err, r, "%s: %s", bdir, strerror(-r));
	cleanup_close int o = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (o < 0)
		return k8_err_set(err, -errno, "%s: %s", tmp, strerror(errno));
	sha256_ctx md = sha256_begin();
	char b[1 << 16];
	ssize_t k;
	uint64_t done = 0, last = 0;
	while ((k = read(in, b, sizeof(b))) > 0) {
		if (write_full(o, b, (size_t)k) < 0) {
			sha256_end(md, NULL);
			unlink(tmp);
			return k8_err_set(err, -EIO, "writing %s: %s", tmp, strerror(errno));
		}
		sha256_add(md, b, (size_t)k);
		done += (uint64_t)k;
		if (progress && done - last > (64u << 20)) {
			last = done;
			progress(pctx, json_pack("{s:s,s:s,s:I,s:I}", "phase", "import", "what", name,
						 "done", (json_int_t)done, "total", (json_int_t)st.st_size));
		}
	}
	char hex[65];
	sha256_end(md, hex);
	cleanup_free char *blob = mpath(d, "blobs/sha256-%s", hex);
	if (k < 0 || fsync(o) || rename(tmp, blob)) {
		int e = errno;
		unlink(tmp);
		return k8_err_set(err, -e, "importing %s: %s", path, strerror(e));
	}
	json_t *meta = json_pack("{s:s,s:s,s:I,s:{s:s},s:I}", "name", name, "sha256", hex, "size",
				 (json_int_t)done, "source", "file", path, "created", (json_int_t)time(NULL));
	if ((r = meta_write(d, name, meta, err))) {
		json_decref(meta);
		return r;
	}
	daemon_audit(d, "model.import", NULL, json_pack("{s:s,s:s,s:s}", "name", name, "sha256", hex,
							 "source", path));
	*out = meta;
	return 0;
}

json_t *model_list_json(struct daemon *d)
{
	cleanup_free char *dir = mpath(d, "%s", "names");
	json_t *a = json_array();
	DIR *dp = opendir(dir);
	struct dirent *e;
	while (dp && (e = readdir(dp))) {
		size_t l = strlen(e->d_name);
		if (l < 6 || strcmp(e->d_name + l - 5, ".json"))
			continue;
		char name[256];
		snprintf(name, sizeof(name), "%.*s", (int)(l - 5), e->d_name);
		json_t *m = meta_read(d, name);
		if (m)
			json_array_append_new(a, m);
	}
	if (dp)
		closedir(dp);
	return a;
}

/* ---- servers ----
 *
 * Who holds a server's port: kosa8d binds it (ports_bind, before the child exists) and
 * the child gets it as fd MODEL_LISTEN_FD; the daemon keeps its own copy until the
 * server has been retired, so from `model serve` until every broker has been told the
 * server is gone, the address is ours: no other local user can take it in between
 * (issue 34). A watcher thread sees a child end (pidfd) and retires it at once, whoever
 * reaped it: dead servers move from `servers` to `retired` (srv_reap, under srv_lock),
 * and srv_retire tells the brokers, then closes the port. Locks: retire_lock, then
 * srv_lock (never the other way: the brokers' push asks model_server_addr). */

#define MODEL_LISTEN_FD 3       /* the listening socket in kosa8-model (--listen-fd 3) */

struct msrv {
	char name[160];
	pid_t pid;
	int pidfd;              /* -1: the kernel has no pidfd_open; the watcher polls */
	bool starting;          /* model_serve waits for it (and alone reaps it) */
	int lfd;                /* the daemon's copy of the listening socket */
	char host[64];
	int port;
	char *pidfile;          /* run/model-NAME.pid: "PID START", for the next daemon */
	struct msrv *next;
};
static struct msrv *servers, *retired;
static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static int watch_wake[2] = { -1, -1 };  /* a byte: the list of servers changed */

static bool srv_alive(struct msrv *s)
{
	return s->pid > 0 && waitpid(s->pid, NULL, WNOHANG) == 0;
}

static struct msrv *srv_find(const char *name)
{
	for (struct msrv *s = servers; s; s = s->next)
		if (!strcmp(s->name, name))
			return s;
	return NULL;
}

/* Move the servers that ended to `retired` (srv_lock held). Their ports stay bound. One
 * still starting is model_serve's to reap (pid -1 once it has). */
static void srv_reap(void)
{
	for (struct msrv **pp = &servers; *pp;) {
		if ((*pp)->pid < 0 || (!(*pp)->starting && !srv_alive(*pp))) {
			struct msrv *s = *pp;
			*pp = s->next;
			if (s->pidfile)
				unlink(s->pidfile);
			s->next = retired;
			retired = s;
		} else {
			pp = &(*pp)->next;
		}
	}
}

/* The retired servers: tell every broker with a local-model rule where its server is
 * now, then let the ports go. Call without srv_lock (the brokers ask model_server_addr).
 * Returns how many were retired. */
static int srv_retire(struct daemon *d)
{
	/* one at a time: whoever returns from here knows the retired ports are let go */
	static pthread_mutex_t retire_lock = PTHREAD_MUTEX_INITIALIZER;

	pthread_mutex_lock(&retire_lock);
	pthread_mutex_lock(&srv_lock);
	struct msrv *r = retired;
	retired = NULL;
	pthread_mutex_unlock(&srv_lock);
	if (r)
		broker_model_changed(d);
	int n = 0;
	for (struct msrv *next; r; r = next, n++) {
		next = r->next;
		close(r->lfd);
		if (r->pidfd >= 0)
			close(r->pidfd);
		free(r->pidfile);
		free(r);
	}
	pthread_mutex_unlock(&retire_lock);
	if (!n)
		return 0;
	if (watch_wake[1] >= 0 && write(watch_wake[1], "r", 1) < 0) {
		/* the pipe is full: the watcher will rebuild anyway */
	}
	return n;
}

/* The watcher: wakes when a server ends (its pidfd) or the list changes, and retires
 * what ended, so a running broker never keeps an address whose server is gone. */
static void *srv_watch(void *arg)
{
	struct daemon *d = arg;
	struct pollfd p[65];

	for (;;) {
		int n = 0, timeout = -1;
		p[n++] = (struct pollfd){ .fd = watch_wake[0], .events = POLLIN };
		pthread_mutex_lock(&srv_lock);
		for (struct msrv *s = servers; s; s = s->next) {
			if (s->starting)
				continue;       /* model_serve watches it until it answers */
			if (s->pidfd < 0 || n == (int)ARRAY_SIZE(p))
				timeout = 500;  /* no pidfd (or too many): look twice a second */
			else
				p[n++] = (struct pollfd){ .fd = s->pidfd, .events = POLLIN };
		}
		pthread_mutex_unlock(&srv_lock);
		if (poll(p, (nfds_t)n, timeout) < 0 && errno != EINTR)
			continue;
		if (p[0].revents) {
			char buf[64];
			if (read(watch_wake[0], buf, sizeof(buf)) < 0) {
				/* EAGAIN: another woke us first */
			}
		}
		/* A pidfd that fired ended a server, or was closed under us (then the list
		 * changed): either way, reap and retire. */
		pthread_mutex_lock(&srv_lock);
		srv_reap();
		pthread_mutex_unlock(&srv_lock);
		int gone = srv_retire(d);
		if (gone)
			daemon_log("%d model server(s) ended: the brokers were told, their ports "
				   "let go", gone);
	}
	return NULL;
}

/* Start the watcher once (srv_lock held). */
static void srv_watch_start(struct daemon *d)
{
	static bool started;
	pthread_t t;

	if (started)
		return;
	if (pipe2(watch_wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		daemon_log("WARNING: model servers are not watched (pipe: %s); an ended one is "
			   "noticed at the next model command", strerror(errno));
		return;
	}
	if (pthread_create(&t, NULL, srv_watch, d) != 0) {
		daemon_log("WARNING: model servers are not watched (no thread); an ended one is "
			   "noticed at the next model command");
		return;
	}
	pthread_detach(t);
	started = true;
}

static void srv_watch_poke(void)
{
	if (watch_wake[1] >= 0 && write(watch_wake[1], "s", 1) < 0) {
		/* full: a wake-up is pending anyway */
	}
}

static bool health_ok(const char *host, int port)
{
	char url[128];
	snprintf(url, sizeof(url), "http://%s%s%s:%d/health", strchr(host, ':') ? "[" : "", host,
		 strchr(host, ':') ? "]" : "", port);
	CURL *c = curl_easy_init();
	struct fetch_buf b = { .max = 4096 };
	long st = 0;
	if (!c)
		return false;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 1000L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fetch_buf_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	CURLcode cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	curl_easy_cleanup(c);
	free(b.p);
	return cc == CURLE_OK && st == 200;
}

static void srv_kill(struct msrv *s)
{
	kill(s->pid, SIGTERM);
	for (int i = 0; i < 50; i++) {
		if (waitpid(s->pid, NULL, WNOHANG) == s->pid)
			return;
		usleep(100000);
	}
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
}

/* model_serve's request: port (7434), threads, ctx, host (127.0.0.1, an IPv4 or IPv6
 * address) and its family. */
struct serve_args {
	json_int_t port, threads, ctx;
	const char *host;
	int family;
};

static int serve_args(json_t *body, struct serve_args *a, struct k8_err *err)
{
	unsigned char ab[16];

	a->port = json_integer_value(json_object_get(body, "port"));
	a->threads = json_integer_value(json_object_get(body, "threads"));
	a->ctx = json_integer_value(json_object_get(body, "ctx"));
	a->host = json_string_value(json_object_get(body, "host"));
	a->family = 0;
	if (!a->port)
		a->port = 7434;
	if (!a->host)
		a->host = "127.0.0.1";
	if (inet_pton(AF_INET, a->host, ab) == 1)
		a->family = AF_INET;
	else if (inet_pton(AF_INET6, a->host, ab) == 1)
		a->family = AF_INET6;
	if (a->port < 1 || a->port > 65535 || a->threads < 0 || a->threads > 256 || a->ctx < 0 ||
	    a->ctx > (1 << 20) || strlen(a->host) >= 64 || !a->family)
		return k8_err_set(err, -EINVAL, "port, threads, ctx or host out of range (host: an "
				  "IPv4 or IPv6 address)");
	return 0;
}

/* kosa8-model serve of `blob` on the socket lfd (handed over at MODEL_LISTEN_FD), its
 * output to `log`, in a session of its own: its pid, or -1 with err. kosa8-model jails
 * itself (src/model/jail.h) as MODEL_JAIL_UID, or config.json's "model_uid"; "jail":
 * false turns that off as it does QEMU's. */
static pid_t serve_spawn(struct daemon *d, const char *name, const char *blob,
			 const struct serve_args *a, int lfd, const char *log, struct k8_err *err)
{
	cleanup_free char *exe = k8_beside_self("kosa8-model");
	char sport[16], sth[16], sctx[16], uid[32] = "", slfd[8];
	json_t *cfg = daemon_config(d);
	json_int_t muid = json_integer_value(json_object_get(cfg, "model_uid"));
	pid_t pid;

	json_decref(cfg);
	if (muid > 0 && muid < 0xffffffffLL)
		snprintf(uid, sizeof(uid), "%lld:%lld", (long long)muid, (long long)muid);
	snprintf(sport, sizeof(sport), "%d", (int)a->port);
	snprintf(sth, sizeof(sth), "%d", a->threads ? (int)a->threads : 2);
	snprintf(sctx, sizeof(sctx), "%d", a->ctx ? (int)a->ctx : 4096);
	snprintf(slfd, sizeof(slfd), "%d", MODEL_LISTEN_FD);
	pid = fork();
	if (pid == 0) {
		/* the socket first, at its fixed number (dup2 clears close-on-exec) */
		if (lfd == MODEL_LISTEN_FD ? fcntl(lfd, F_SETFD, 0) < 0 :
		    dup2(lfd, MODEL_LISTEN_FD) < 0)
			_exit(127);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		int nul = open("/dev/null", O_RDONLY);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (nul >= 0)
			dup2(nul, 0);
		/* nothing else of the daemon's (a client's socket, another sandbox's file) */
		if (syscall(SYS_close_range, MODEL_LISTEN_FD + 1, ~0U, 0) < 0)
			_exit(127);
		setsid();
		execl(exe, "kosa8-model", "serve", blob, "--listen-fd", slfd, "--port", sport,
		      "--host", a->host, "--name", name, "--threads", sth, "--ctx", sctx,
		      d->jail_off ? "--no-jail" : uid[0] ? "--user" : (char *)NULL, uid, (char *)NULL);
		_exit(127);
	}
	if (pid < 0)
		k8_err_set(err, -errno, "fork: %s", strerror(errno));
	return pid;
}

/* The server's record (caller holds srv_lock), and its pid file: a daemon killed (kill
 * -9) leaves its servers running, and the next one stops them (model_reap_orphans), as a
 * stopping daemon does. */
static struct msrv *serve_record(struct daemon *d, const char *name, const char *host, pid_t pid,
				 int lfd, int port)
{
	struct msrv *s = xcalloc(1, sizeof(*s));
	cleanup_free char *rundir = xasprintf("%s/run", d->home);
	char t[64];
	int tn;

	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->host, sizeof(s->host), "%s", host);
	s->pid = pid;
	s->starting = true;
	s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	s->lfd = lfd;
	s->port = port;
	s->next = servers;
	servers = s;
	tn = snprintf(t, sizeof(t), "%d %llu\n", (int)pid, vm_proc_start(pid));
	mkdir_p(rundir, 0700);
	s->pidfile = xasprintf("%s/model-%s.pid", rundir, name);
	write_file_atomic(s->pidfile, t, (size_t)tn, 0600);
	return s;
}

/* Ready once /health answers (loading maps the file; big models take a moment): the
 * port is ours, nothing else can answer on it. A server that exits or stays silent for
 * 120 s is reaped, with its log's last line or the log's path in err. */
static int serve_ready(struct daemon *d, struct msrv *s, const char *name, const char *host,
		       int port, const char *log, struct k8_err *err)
{
	pid_t pid = s->pid;

	for (int i = 0; i < 1200; i++) {
		if (health_ok(host, port)) {
			pthread_mutex_lock(&srv_lock);
			s->starting = false;    /* the watcher's now */
			pthread_mutex_unlock(&srv_lock);
			srv_watch_poke();
			return 0;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid) {
			pthread_mutex_lock(&srv_lock);
			s->pid = -1;
			srv_reap();
			pthread_mutex_unlock(&srv_lock);
			srv_retire(d);
			cleanup_free char *t = NULL;
			size_t n = 0;
			read_file(log, 1 << 16, &t, &n);
			const char *last = t ? t : "";
			for (const char *p = t; p && *p; p++)
				if (*p == '\n' && p[1])
					last = p + 1;
			return k8_err_set(err, -EIO, "kosa8-model serve %s exited: %s", name, last);
		}
		usleep(100000);
	}
	pthread_mutex_lock(&srv_lock);
	srv_kill(s);
	s->pid = -1;
	srv_reap();
	pthread_mutex_unlock(&srv_lock);
	srv_retire(d);
	return k8_err_set(err, -ETIMEDOUT, "kosa8-model serve %s did not answer on %s:%d within "
			  "120 s; see %s", name, host, port, log);
}

int model_serve(struct daemon *d, const char *name, json_t *body, json_t **out, struct k8_err *err)
{
	json_t *meta = meta_read(d, name);
	struct serve_args a;
	struct msrv *s;
	pid_t pid;
	int r;

	if (!meta)
		return k8_err_set(err, -ENOENT, "no model '%s'; see kosa8 model ls", name);
	if ((r = serve_args(body, &a, err))) {
		json_decref(meta);
		return r;
	}
	cleanup_free char *blob = mpath(d, "blobs/sha256-%s", json_string_value(json_object_get(meta, "sha256")));
	json_decref(meta);
	srv_retire(d);          /* ports of servers that ended are let go first */
	pthread_mutex_lock(&srv_lock);
	srv_reap();
	struct msrv *old = srv_find(name);
	for (struct msrv *o = servers; o && !old; o = o->next)
		if (o->port == a.port)
			old = o;
	if (old) {
		int e = k8_err_set(err, -EBUSY, "'%s' is already served on port %d (kosa8 model stop %s)",
				   old->name, old->port, old->name);
		pthread_mutex_unlock(&srv_lock);
		return e;
	}
	/* The daemon binds: a port someone else holds is an error naming them, never a
	 * server that failed to bind while a squatter answers in its place. */
	int bound = 0, lfd = ports_bind(a.host, a.family, (int)a.port, &bound, err);
	if (lfd < 0) {
		pthread_mutex_unlock(&srv_lock);
		if (lfd != -EEXIST)
			return k8_err_wrap(err, "cannot serve '%s'", name);
		char why[sizeof(err->msg)];
		snprintf(why, sizeof(why), "%s", err->msg);
		k8_err_clear(err);
		return k8_err_set(err, lfd, "cannot serve '%s': %s; kosa8 serves a model only on a "
				  "port it holds itself: stop that process or choose another port "
				  "(--port)", name, why);
	}
	srv_watch_start(d);
	cleanup_free char *logdir = xasprintf("%s/logs", d->home);
	cleanup_free char *log = xasprintf("%s/model-%s.log", logdir, name);
	mkdir_p(logdir, 0700);
	pid = serve_spawn(d, name, blob, &a, lfd, log, err);
	if (pid < 0) {
		close(lfd);
		pthread_mutex_unlock(&srv_lock);
		return err->code;
	}
	s = serve_record(d, name, a.host, pid, lfd, (int)a.port);
	pthread_mutex_unlock(&srv_lock);
	if ((r = serve_ready(d, s, name, a.host, (int)a.port, log, err)))
		return r;
	daemon_audit(d, "model.serve", NULL, json_pack("{s:s,s:s,s:i}", "name", name, "host",
							 a.host, "port", (int)a.port));
	broker_model_changed(d);        /* sandboxes' local-model rules follow it */
	*out = json_pack("{s:s,s:i,s:s,s:i,s:s}", "name", name, "pid", (int)pid, "host", a.host,
			 "port", (int)a.port, "log", log);
	return 0;
}

json_t *model_ps_json(struct daemon *d)
{
	(void)d;
	json_t *a = json_array();
	pthread_mutex_lock(&srv_lock);
	srv_reap();
	for (struct msrv *s = servers; s; s = s->next)
		json_array_append_new(a, json_pack("{s:s,s:i,s:s,s:i}", "name", s->name, "pid", (int)s->pid,
						   "host", s->host, "port", s->port));
	pthread_mutex_unlock(&srv_lock);
	return a;
}

int model_server_addr(struct daemon *d, const char *name, char *out, size_t n,
		      struct k8_err *err)
{
	(void)d;
	struct msrv *pick = NULL;
	int running = 0, rc = 0;

	pthread_mutex_lock(&srv_lock);
	srv_reap();
	for (struct msrv *s = servers; s; s = s->next) {
		running++;
		if (name ? !strcmp(s->name, name) : s->port == 7434)
			pick = s;
	}
	if (!pick && !name && running == 1)
		pick = servers;
	if (!pick && name)
		rc = k8_err_set(err, -ENOENT, "model '%s' is not being served; start it with "
				"`kosa8 model serve %s`", name, name);
	else if (!pick && running == 0)
		rc = k8_err_set(err, -ENOENT, "no model server is running; start one with "
				"`kosa8 model serve NAME`");
	else if (!pick)
		rc = k8_err_set(err, -EEXIST, "%d model servers are running and none on port 7434: "
				"name one with local-model=NAME", running);
	if (pick) {
		/* a wildcard listen address is reached on the loopback */
		const char *h = pick->host;
		if (!strcmp(h, "0.0.0.0") || !strcmp(h, "localhost"))
			h = "127.0.0.1";
		else if (!strcmp(h, "::"))
			h = "::1";
		snprintf(out, n, strchr(h, ':') ? "[%s]:%d" : "%s:%d", h, pick->port);
	}
	pthread_mutex_unlock(&srv_lock);
	return rc;
}

int model_stop(struct daemon *d, const char *name, struct k8_err *err)
{
	pthread_mutex_lock(&srv_lock);
	srv_reap();
	struct msrv *s = srv_find(name);
	if (!s) {
		pthread_mutex_unlock(&srv_lock);
		return k8_err_set(err, -ENOENT, "model '%s' is not being served (kosa8 model ps)", name);
	}
	if (s->starting) {
		pthread_mutex_unlock(&srv_lock);
		return k8_err_set(err, -EBUSY, "model '%s' is still starting (its `kosa8 model "
				  "serve` has not returned); stop it once it has", name);
	}
	srv_kill(s);
	srv_reap();
	pthread_mutex_unlock(&srv_lock);
	srv_retire(d);          /* the brokers are told, then the port is let go */
	daemon_audit(d, "model.stop", NULL, json_pack("{s:s}", "name", name));
	return 0;
}

void model_reap_orphans(struct daemon *d)
{
	cleanup_free char *rundir = xasprintf("%s/run", d->home);
	DIR *dd = opendir(rundir);
	struct dirent *de;

	if (!dd)
		return;
	while ((de = readdir(dd))) {
		size_t l = strlen(de->d_name);
		if (strncmp(de->d_name, "model-", 6) || l < 11 || strcmp(de->d_name + l - 4, ".pid"))
			continue;
		cleanup_free char *path = xasprintf("%s/%s", rundir, de->d_name);
		cleanup_free char *text = NULL;
		size_t n;
		int pid;
		unsigned long long start;
		if (read_file(path, 64, &text, &n) == 0 && sscanf(text, "%d %llu", &pid, &start) == 2 &&
		    pid > 1 && vm_alive(pid, start)) {
			daemon_log("model server pid %d (%.*s) outlived the daemon that started it: "
				   "stopping it (kosa8 model serve starts it again)", pid,
				   (int)(l - 10), de->d_name + 6);
			kill(pid, SIGTERM);
			for (int i = 0; i < 50 && vm_alive(pid, start); i++)
				usleep(100000);
			if (vm_alive(pid, start))
				kill(pid, SIGKILL);
		}
		unlink(path);
	}
	closedir(dd);
}

void model_stop_all(struct daemon *d)
{
	pthread_mutex_lock(&srv_lock);
	for (struct msrv *s = servers; s; s = s->next)
		if (!s->starting && srv_alive(s))
			srv_kill(s);
		else if (s->starting)
			kill(s->pid, SIGTERM);  /* its model_serve reaps it */
	srv_reap();
	pthread_mutex_unlock(&srv_lock);
	/* Sandboxes may outlive the daemon (stop without --stop-vms): their brokers are told
	 * no server runs before the ports are let go. */
	srv_retire(d);
}

int model_remove(struct daemon *d, const char *name, struct k8_err *err)
{
	json_t *meta = meta_read(d, name);
	if (!meta)
		return k8_err_set(err, -ENOENT, "no model '%s'; see kosa8 model ls", name);
	pthread_mutex_lock(&srv_lock);
	srv_reap();
	bool served = srv_find(name) != NULL;
	pthread_mutex_unlock(&srv_lock);
	if (served) {
		json_decref(meta);
		return k8_err_set(err, -EBUSY, "model '%s' is being served; kosa8 model stop %s first",
				  name, name);
	}
	char sha[65];
	snprintf(sha, sizeof(sha), "%s", json_string_value(json_object_get(meta, "sha256")));
	json_decref(meta);
	cleanup_free char *p = mpath(d, "names/%s.json", name);
	if (unlink(p))
		return k8_err_set(err, -errno, "%s: %s", p, strerror(errno));
	/* The blob goes when no other name points at it. */
	json_t *all = model_list_json(d);
	bool used = false;
	size_t i;
	json_t *m;
	json_array_foreach(all, i, m)
		used |= !strcmp(json_string_value(json_object_get(m, "sha256")), sha);
	json_decref(all);
	if (!used) {
		cleanup_free char *b = mpath(d, "blobs/sha256-%s", sha);
		unlink(b);
	}
	daemon_audit(d, "model.rm", NULL, json_pack("{s:s,s:s}", "name", name, "sha256", sha));
	return 0;
}

/* ---- API: the model routes (api.h; the table is in api.c). model_pull, model_import
 * and model_serve check their own bodies (docs/model.md). ---- */

int model_api_list(struct api_call *call)
{
	call->out = model_list_json(call->d);
	return 0;
}

static int model_pull_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	return model_pull(j->d, j->body, api_job_progress, j, result, err);
}

int model_api_pull(struct api_call *call)
{
	return api_reply_job(call, model_pull_job, NULL);
}

static int model_import_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	return model_import(j->d, j->body, api_job_progress, j, result, err);
}

int model_api_import(struct api_call *call)
{
	return api_reply_job(call, model_import_job, NULL);
}

int model_api_rm(struct api_call *call)
{
	return model_remove(call->d, api_param(call, "name"), &call->err);
}

int model_api_serve(struct api_call *call)
{
	return model_serve(call->d, api_param(call, "name"), call->body, &call->out, &call->err);
}

int model_api_servers(struct api_call *call)
{
	call->out = model_ps_json(call->d);
	return 0;
}

int model_api_server_stop(struct api_call *call)
{
	return model_stop(call->d, api_param(call, "name"), &call->err);
}
