/* SPDX-License-Identifier: Apache-2.0 */
/* registry.c - `image pull`: an OCI distribution (registry v2) client over libcurl.
 *
 * Theory of operation. A pull is: resolve the reference (docker.io is served by
 * registry-1.docker.io, or by configured mirrors tried first), GET the manifest (at most
 * IMAGE_JSON_MAX bytes, hashed; a digest-pinned reference must match), pick linux/amd64
 * from an index or a Docker manifest list, then GET the config and the layers, REG_PARALLEL
 * at a time (a thread and a curl handle each), into a staging directory under tmp/
 * through the store's blob writer, which hashes while it writes and refuses more than
 * the declared size. Each verified blob moves (rename) into blobs/sha256/ at once, where
 * nothing references it yet; the first failure cancels the other downloads. Only when
 * every blob is there do the manifest and the name land (refs.json); a failed pull marks
 * a GC pending, which collects what it landed once no pull, load or disk build is busy,
 * so the store ends as it was. Blobs the store already has are not fetched.
 *
 * Single flight: concurrent pulls of one name in one store do the work once (the others
 * wait and share the result), and each blob is downloaded by one pull at a time (see
 * "single flight" below).
 *
 * Network: https, except for loopback registries (127.0.0.0/8, localhost, [::1]) and those
 * the caller lists as insecure. Redirects are followed (5 at most; blob downloads often
 * redirect to object storage) and never from https to http; credentials are not sent
 * to another host. A 401 is answered by its WWW-Authenticate challenge: Bearer (get a
 * token from the realm, anonymously or with Basic credentials) or Basic. Transport errors,
 * 429 and 5xx are retried three times with backoff; an interrupted blob resumes with a
 * Range request (the writer keeps its hash state), or restarts when the server ignores it.
 */
#include "common/httpretry.h"
#include "image/image_int.h"
#include "common/sha.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define MT_OCI_INDEX    "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MT_DKR_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DKR_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define REG_ACCEPT "Accept: " MT_OCI_INDEX ", " MT_OCI_MANIFEST ", " MT_DKR_LIST ", " \
	MT_DKR_MANIFEST
#define REG_TRIES      3
#define REG_ERRBODY    4096      /* bytes of an error response kept for the message */
#define REG_TOKEN_MAX  (64u << 10)
#define REG_LAYERS_MAX 1000
#define REG_PARALLEL   3         /* blobs downloaded at once by one pull */

enum reg_sink { SINK_MEM, SINK_BLOB };

struct reg_xfer {
	enum reg_sink sink;
	/* SINK_MEM */
	char *buf;
	size_t len, cap, max;
	/* SINK_BLOB */
	struct blob_writer *w;
	int stagefd;
	uint64_t max_blob;
	const char *what;
	/* response */
	char *errbody;
	size_t errlen;
	char challenge[2048];
	char ctype[256];
	char dcd[80];              /* Docker-Content-Digest */
	int fatal;                 /* an error our callbacks raised (do not retry) */
	struct k8_err ferr;
	bool checked;              /* the status of this response was looked at */
	uint64_t next_progress;
};

struct reg {
	struct image_store *st;
	const struct pull_opts *opts;
	image_progress_fn progress;
	void *ctx;
	struct k8_err *err;
	struct ref_parts rp;
	char norm[512];
	char base[320];            /* "https://host[:port]" of the endpoint in use */
	char host[300];            /* that endpoint's host[:port], for messages */
	bool plain_ok;             /* http allowed for this endpoint */
	char basic[1024];          /* "user:pass" for this registry, or "" */
	char *authz;               /* "Authorization: ..." header to send, or NULL */
	CURL *curl;                /* each download thread has its own (and its own authz) */
	uint64_t *fetched;         /* bytes received in this pull (shared, atomic) */
	int *cancel;               /* set when a sibling download failed (shared, atomic) */
	pthread_mutex_t *plock;    /* serializes progress calls from the download threads */
	int stagefd;
	char stagename[96];
	json_t *staged;            /* hex -> true */
};

static pthread_once_t reg_curl_once = PTHREAD_ONCE_INIT;

static void reg_curl_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void reg_progress(struct reg *g, const char *what, uint64_t done, uint64_t total)
{
	if (!g->progress)
		return;
	pthread_mutex_lock(g->plock);
	g->progress(g->ctx, "pull", what, done, total);
	pthread_mutex_unlock(g->plock);
}

static bool reg_cancelled(struct reg *g)
{
	return g->cancel && __atomic_load_n(g->cancel, __ATOMIC_ACQUIRE);
}

/* ---------------------------------------------------------------- single flight
 *
 * Pulls of one name in one store at once: the first (the leader) does the work, the
 * others wait for it and return its result, or pull themselves when it failed. Blobs:
 * one download per digest per store at a time; a pull that needs a blob another one is
 * downloading waits until it has landed in the store (or the download failed, and then
 * fetches it itself). A download thread holds at most one blob and never waits while
 * holding one, so pulls sharing blobs cannot deadlock. */
struct reg_flight {
	struct reg_flight *next;
	const struct image_store *st;
	char key[512];
	bool done;
	int r;
	json_t *result;
	unsigned refs;
};

static pthread_mutex_t reg_fl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_fl_cond = PTHREAD_COND_INITIALIZER;   /* flights and blobs */
static struct reg_flight *reg_flights;
static json_t *reg_fl_blobs;   /* "<store>:<hex>" -> true while a pull downloads it */

static void reg_flight_put_locked(struct reg_flight *f)
{
	if (--f->refs == 0) {
		json_decref(f->result);
		free(f);
	}
}

/* NULL when another pull of `key` was under way and succeeded (*result is a copy of its
 * result); else the flight this pull leads, for reg_flight_end. */
static struct reg_flight *reg_flight_begin(const struct image_store *st, const char *key,
					   json_t **result)
{
	struct reg_flight *f;

	pthread_mutex_lock(&reg_fl_lock);
	for (;;) {
		bool ok;

		for (f = reg_flights; f; f = f->next)
			if (f->st == st && !strcmp(f->key, key))
				break;
		if (!f)
			break;
		f->refs++;
		while (!f->done)
			pthread_cond_wait(&reg_fl_cond, &reg_fl_lock);
		ok = f->r == 0 && f->result;
		if (ok)
			*result = json_deep_copy(f->result);
		reg_flight_put_locked(f);
		if (ok && *result) {
			pthread_mutex_unlock(&reg_fl_lock);
			return NULL;
		}
		/* It failed: lead a pull of our own (or join the next one). */
	}
	f = xcalloc(1, sizeof(*f));
	f->st = st;
	snprintf(f->key, sizeof(f->key), "%s", key);
	f->refs = 1;
	f->next = reg_flights;
	reg_flights = f;
	pthread_mutex_unlock(&reg_fl_lock);
	return f;
}

static void reg_flight_end(struct reg_flight *f, int r, json_t *result)
{
	struct reg_flight **pp;

	pthread_mutex_lock(&reg_fl_lock);
	for (pp = &reg_flights; *pp; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	f->done = true;
	f->r = r;
	f->result = r ? NULL : json_incref(result);
	pthread_cond_broadcast(&reg_fl_cond);
	reg_flight_put_locked(f);
	pthread_mutex_unlock(&reg_fl_lock);
}

/* ---------------------------------------------------------------- pure helpers */

static const char *reg_skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == ',')
		p++;
	return p;
}

int registry_parse_challenge(const char *hdr, struct registry_challenge *c)
{
	const char *p = hdr;
	size_t n;

	memset(c, 0, sizeof(*c));
	if (!hdr)
		return -EINVAL;
	p = reg_skip_ws(p);
	n = strcspn(p, " \t");
	if (n == 0 || n >= sizeof(c->scheme))
		return -EINVAL;
	memcpy(c->scheme, p, n);
	for (size_t i = 0; i < n; i++)
		c->scheme[i] = (char)tolower((unsigned char)c->scheme[i]);
	if (strcmp(c->scheme, "bearer") && strcmp(c->scheme, "basic"))
		return -ENOTSUP;
	p += n;
	for (;;) {
		char key[32], val[1024];
		size_t kn, vn = 0;

		p = reg_skip_ws(p);
		if (!*p)
			break;
		kn = strcspn(p, "= \t,");
		if (kn == 0 || kn >= sizeof(key) || p[kn] != '=')
			return -EINVAL;
		for (size_t i = 0; i < kn; i++)
			key[i] = (char)tolower((unsigned char)p[i]);
		key[kn] = '\0';
		p += kn + 1;
		if (*p == '"') {
			p++;
			while (*p && *p != '"') {
				if (*p == '\\' && p[1])
					p++;
				if (vn + 1 >= sizeof(val))
					return -EINVAL;
				val[vn++] = *p++;
			}
			if (*p != '"')
				return -EINVAL;
			p++;
		} else {
			while (*p && *p != ',' && *p != ' ' && *p != '\t') {
				if (vn + 1 >= sizeof(val))
					return -EINVAL;
				val[vn++] = *p++;
			}
		}
		val[vn] = '\0';
		if (!strcmp(key, "realm"))
			snprintf(c->realm, sizeof(c->realm), "%s", val);
		else if (!strcmp(key, "service"))
			snprintf(c->service, sizeof(c->service), "%s", val);
		else if (!strcmp(key, "scope"))
			snprintf(c->scope, sizeof(c->scope), "%s", val);
	}
	if (!strcmp(c->scheme, "bearer") && !c->realm[0])
		return -EINVAL;
	return 0;
}

int registry_pick_platform(json_t *index, char hex[65], int64_t *size, char *avail,
			   size_t availlen)
{
	json_t *ms = json_object_get(index, "manifests"), *d;
	size_t i, used = 0;

	if (availlen)
		avail[0] = '\0';
	if (!json_is_array(ms))
		return -EINVAL;
	json_array_foreach(ms, i, d) {
		json_t *p = json_object_get(d, "platform");
		const char *os = json_string_value(json_object_get(p, "os"));
		const char *arch = json_string_value(json_object_get(p, "architecture"));
		const char *var = json_string_value(json_object_get(p, "variant"));
		json_t *sz = json_object_get(d, "size");

		if (os && arch && !strcmp(os, "linux") && !strcmp(arch, "amd64")) {
			if (!ref_digest_valid(json_string_value(json_object_get(d, "digest")), hex) ||
			    !json_is_integer(sz) || json_integer_value(sz) < 0)
				return -EINVAL;
			*size = (int64_t)json_integer_value(sz);
			return 0;
		}
		if (availlen && used + 1 < availlen) {
			int n = snprintf(avail + used, availlen - used, "%s%s/%s%s%s", used ? ", " : "",
					 os ? os : "?", arch ? arch : "?", var ? "/" : "", var ? var : "");
			if (n > 0)
				used = used + (size_t)n < availlen ? used + (size_t)n : availlen - 1;
		}
	}
	return -ENOENT;
}

bool registry_plain_http_ok(const char *domain, const char *const *insecure)
{
	char host[256];
	const char *p;
	size_t n;
	struct in_addr a;

	for (size_t i = 0; insecure && insecure[i]; i++)
		if (!strcmp(insecure[i], domain))
			return true;
	if (domain[0] == '[') {
		p = strchr(domain, ']');
		n = p ? (size_t)(p - domain) + 1 : strlen(domain);
	} else {
		n = strcspn(domain, ":");
	}
	if (n >= sizeof(host))
		return false;
	memcpy(host, domain, n);
	host[n] = '\0';
	for (size_t i = 0; insecure && insecure[i]; i++)
		if (!strcmp(insecure[i], host))
			return true;
	if (!strcmp(host, "localhost") || !strcmp(host, "[::1]"))
		return true;
	return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

struct reg_origin {
	char scheme[8];
	char host[256];
	unsigned port;
};

static bool reg_origin_parse(const char *url, struct reg_origin *o)
{
	const char *p = url ? strstr(url, "://") : NULL, *auth, *end, *at, *colon;
	size_t n;
	char *e;

	if (!p || (size_t)(p - url) >= sizeof(o->scheme))
		return false;
	for (n = 0; url + n < p; n++)
		o->scheme[n] = (char)tolower((unsigned char)url[n]);
	o->scheme[n] = '\0';
	auth = p + 3;
	end = auth + strcspn(auth, "/?#");
	at = memchr(auth, '@', (size_t)(end - auth));
	if (at)
		auth = at + 1;
	if (*auth == '[') {
		const char *rb = memchr(auth, ']', (size_t)(end - auth));
		if (!rb)
			return false;
		colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
		n = (size_t)(rb + 1 - auth);
	} else {
		colon = memchr(auth, ':', (size_t)(end - auth));
		n = (size_t)((colon ? colon : end) - auth);
	}
	if (n == 0 || n >= sizeof(o->host))
		return false;
	for (size_t i = 0; i < n; i++)
		o->host[i] = (char)tolower((unsigned char)auth[i]);
	o->host[n] = '\0';
	if (colon && colon + 1 < end) {
		unsigned long v = strtoul(colon + 1, &e, 10);
		if (e != end || v == 0 || v > 65535)
			return false;
		o->port = (unsigned)v;
	} else if (!strcmp(o->scheme, "https")) {
		o->port = 443;
	} else if (!strcmp(o->scheme, "http")) {
		o->port = 80;
	} else {
		return false;
	}
	return true;
}

bool registry_same_origin(const char *a, const char *b)
{
	struct reg_origin x, y;

	return reg_origin_parse(a, &x) && reg_origin_parse(b, &y) && !strcmp(x.scheme, y.scheme) &&
	       !strcmp(x.host, y.host) && x.port == y.port;
}

/* ---------------------------------------------------------------- credentials */

/* The "user:pass" for `domain` in a Docker-style config file ({"auths": {...}}). */
static int reg_creds_from(const char *path, const char *domain, char *out, size_t outlen,
			  struct k8_err *err)
{
	cleanup_free char *buf = NULL;
	size_t len;
	json_t *j, *auths, *v;
	json_error_t je;
	const char *k;
	int r;
	bool dockerio = !strcmp(domain, "docker.io");

	r = read_file(path, 1u << 20, &buf, &len);
	if (r == -ENOENT)
		return 0;
	if (r)
		return k8_err_set(err, r, "reading credentials %s: %s", path, strerror(-r));
	j = json_loadb(buf, len, 0, &je);
	if (!j)
		return k8_err_set(err, -EINVAL, "credentials %s are not valid JSON: %s (line %d)",
				  path, je.text, je.line);
	auths = json_object_get(j, "auths");
	json_object_foreach(auths, k, v) {
		char key[300];
		const char *s = k, *a, *u, *pw;
		size_t n;

		if (!strncmp(s, "https://", 8))
			s += 8;
		else if (!strncmp(s, "http://", 7))
			s += 7;
		n = strcspn(s, "/");
		if (n >= sizeof(key))
			continue;
		memcpy(key, s, n);
		key[n] = '\0';
		if (strcmp(key, domain) && !(dockerio && (!strcmp(key, "index.docker.io") ||
							  !strcmp(key, "registry-1.docker.io"))))
			continue;
		a = json_string_value(json_object_get(v, "auth"));
		u = json_string_value(json_object_get(v, "username"));
		pw = json_string_value(json_object_get(v, "password"));
		if (a && *a) {
			size_t al = strlen(a);
			unsigned char *dec = xmalloc(al + 4);
			int dl = al % 4 == 0 ? EVP_DecodeBlock(dec, (const unsigned char *)a, (int)al) : -1;
			if (dl > 0) {
				while (al && a[al - 1] == '=' && dl > 0) {   /* padding decodes as zeros */
					al--;
					dl--;
				}
			}
			if (dl <= 0 || (size_t)dl >= outlen || !memchr(dec, ':', (size_t)dl)) {
				free(dec);
				json_decref(j);
				return k8_err_set(err, -EINVAL, "credentials %s: the \"auth\" of %s is not "
						  "base64 of user:password", path, k);
			}
			memcpy(out, dec, (size_t)dl);
			out[dl] = '\0';
			free(dec);
		} else if (u && pw) {
			snprintf(out, outlen, "%s:%s", u, pw);
		} else {
			continue;
		}
		break;
	}
	json_decref(j);
	return 0;
}

/* ---------------------------------------------------------------- transfers */

static size_t reg_header_cb(char *data, size_t size, size_t n, void *arg)
{
	struct reg_xfer *x = arg;
	size_t len = size * n, vl;
	const char *v;

	if (len >= 5 && !strncmp(data, "HTTP/", 5)) {   /* a new response (redirects) */
		x->challenge[0] = x->ctype[0] = x->dcd[0] = '\0';
		return len;
	}
	v = memchr(data, ':', len);
	if (!v)
		return len;
	vl = len - (size_t)(v + 1 - data);
	for (v++; vl && (*v == ' ' || *v == '\t'); v++, vl--)
		;
	while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
		vl--;
#define REG_HDR(name, field)                                                              \
	if (!strncasecmp(data, name ":", sizeof(name)) && !x->field[0] &&                  \
	    vl < sizeof(x->field)) {                                                       \
		memcpy(x->field, v, vl);                                                   \
		x->field[vl] = '\0';                                                       \
	}
	REG_HDR("WWW-Authenticate", challenge)
	REG_HDR("Content-Type", ctype)
	REG_HDR("Docker-Content-Digest", dcd)
#undef REG_HDR
	return len;
}

struct reg_wctx {
	struct reg *g;
	struct reg_xfer *x;
};

static size_t reg_write_cb(char *data, size_t size, size_t n, void *arg)
{
	struct reg_wctx *c = arg;
	struct reg_xfer *x = c->x;
	struct reg *g = c->g;
	size_t len = size * n;
	long code = 0;
	int r;

	curl_easy_getinfo(g->curl, CURLINFO_RESPONSE_CODE, &code);
	if (code < 200 || code > 299) {
		size_t k = len;
		if (!x->errbody)
			x->errbody = xmalloc(REG_ERRBODY + 1);
		if (x->errlen + k > REG_ERRBODY)
			k = REG_ERRBODY - x->errlen;
		memcpy(x->errbody + x->errlen, data, k);
		x->errlen += k;
		x->errbody[x->errlen] = '\0';
		return len;
	}
	if (reg_cancelled(g)) {
		x->fatal = k8_err_set(&x->ferr, -ECANCELED, "cancelled: another download failed");
		return 0;
	}
	if (__atomic_add_fetch(g->fetched, len, __ATOMIC_RELAXED) > IMAGE_PULL_MAX) {
		x->fatal = k8_err_set(&x->ferr, -EFBIG, "the image is larger than %llu bytes, the "
				      "most kosa8 pulls", (unsigned long long)IMAGE_PULL_MAX);
		return 0;
	}
	if (x->sink == SINK_MEM) {
		if (x->len + len > x->max) {
			x->fatal = k8_err_set(&x->ferr, -EFBIG, "%s is larger than %zu bytes", x->what,
					      x->max);
			return 0;
		}
		if (x->len + len + 1 > x->cap) {
			x->cap = (x->len + len + 1) * 2;
			if (x->cap > x->max + 1)
				x->cap = x->max + 1;
			x->buf = realloc(x->buf, x->cap);
			if (!x->buf) {
				x->fatal = k8_err_set(&x->ferr, -ENOMEM, "out of memory");
				return 0;
			}
		}
		memcpy(x->buf + x->len, data, len);
		x->len += len;
		x->buf[x->len] = '\0';
		return len;
	}
	if (!x->checked) {
		x->checked = true;
		if (code == 200 && x->w->size > 0) {   /* the server ignored our Range: restart */
			blobw_abort(x->w);
			r = blobw_open(x->w, x->stagefd, x->max_blob, &x->ferr);
			if (r) {
				x->fatal = r;
				return 0;
			}
		}
	}
	r = blobw_write(x->w, data, len, &x->ferr);
	if (r) {
		if (r == -EFBIG) {
			k8_err_clear(&x->ferr);
			k8_err_set(&x->ferr, -EFBIG, "%s is larger than its descriptor says (%llu "
				   "bytes); refused", x->what, (unsigned long long)x->max_blob);
		}
		x->fatal = r;
		return 0;
	}
	if (x->w->size >= x->next_progress) {
		reg_progress(g, x->what, x->w->size, x->max_blob);
		x->next_progress = x->w->size + (4u << 20);
	}
	return len;
}

/* The registry's own words from an error body ({"errors":[{"code","message"}]}). */
static void reg_errbody_msg(struct reg_xfer *x, char *out, size_t n)
{
	json_t *j, *e;
	const char *code, *msg;

	out[0] = '\0';
	if (!x->errbody)
		return;
	j = json_loadb(x->errbody, x->errlen, 0, NULL);
	e = json_array_get(json_object_get(j, "errors"), 0);
	code = json_string_value(json_object_get(e, "code"));
	msg = json_string_value(json_object_get(e, "message"));
	if (code || msg)
		snprintf(out, n, ": %s%s%s", msg ? msg : "", msg && code ? " - " : "",
			 code ? code : "");
	json_decref(j);
}

static void reg_xfer_reset(struct reg_xfer *x)
{
	free(x->errbody);
	x->errbody = NULL;
	x->errlen = 0;
	x->challenge[0] = x->ctype[0] = x->dcd[0] = '\0';
	x->checked = false;
	if (x->sink == SINK_MEM)
		x->len = 0;
}

/* Stops a transfer (stalled or not) once a sibling download failed. */
static int reg_xferinfo_cb(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	return reg_cancelled(arg) ? 1 : 0;
}

/* One GET; *code is the final HTTP status. Returns the curl code. */
static CURLcode reg_perform(struct reg *g, const char *url, const char *accept,
			    const char *authz, uint64_t range_from, struct reg_xfer *x, long *code)
{
	struct curl_slist *h = NULL;
	struct reg_wctx wc = { g, x };
	char range[64];
	CURLcode cc;

	reg_xfer_reset(x);
	curl_easy_reset(g->curl);
	curl_easy_setopt(g->curl, CURLOPT_URL, url);
	curl_easy_setopt(g->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(g->curl, CURLOPT_USERAGENT, "kosa8");
	curl_easy_setopt(g->curl, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(g->curl, CURLOPT_UNRESTRICTED_AUTH, 0L); /* (the default) see below */
	curl_easy_setopt(g->curl, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(g->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(g->curl, CURLOPT_REDIR_PROTOCOLS_STR, g->plain_ok ? "http,https" : "https");
	curl_easy_setopt(g->curl, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(g->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(g->curl, CURLOPT_LOW_SPEED_TIME, 60L);
	curl_easy_setopt(g->curl, CURLOPT_HEADERFUNCTION, reg_header_cb);
	curl_easy_setopt(g->curl, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(g->curl, CURLOPT_WRITEFUNCTION, reg_write_cb);
	curl_easy_setopt(g->curl, CURLOPT_WRITEDATA, &wc);
	if (g->cancel) {
		curl_easy_setopt(g->curl, CURLOPT_XFERINFOFUNCTION, reg_xferinfo_cb);
		curl_easy_setopt(g->curl, CURLOPT_XFERINFODATA, g);
		curl_easy_setopt(g->curl, CURLOPT_NOPROGRESS, 0L);
	}
	if (accept)
		h = curl_slist_append(h, accept);
	if (authz)
		h = curl_slist_append(h, authz);   /* curl drops it when redirected elsewhere */
	if (range_from) {
		snprintf(range, sizeof(range), "Range: bytes=%llu-", (unsigned long long)range_from);
		h = curl_slist_append(h, range);
	}
	if (h)
		curl_easy_setopt(g->curl, CURLOPT_HTTPHEADER, h);
	cc = curl_easy_perform(g->curl);
	*code = 0;
	curl_easy_getinfo(g->curl, CURLINFO_RESPONSE_CODE, code);
	curl_slist_free_all(h);
	return cc;
}

/* Answer a 401 challenge: sets g->authz. */
static int reg_authenticate(struct reg *g, const char *challenge)
{
	struct registry_challenge c;
	struct reg_xfer t = { .sink = SINK_MEM, .max = REG_TOKEN_MAX, .what = "a token response" };
	cleanup_free char *url = NULL, *basic_hdr = NULL;
	char scope[600], *es, *esc;
	json_t *j = NULL;
	const char *tok;
	long code;
	CURLcode cc;
	int r;

	if (registry_parse_challenge(challenge, &c))
		return k8_err_set(g->err, -EACCES, "registry %s refused access (HTTP 401) with a "
				  "challenge kosa8 does not understand: %.200s", g->host,
				  challenge[0] ? challenge : "(none)");
	if (g->basic[0]) {
		unsigned char *b64 = xmalloc(4 * (strlen(g->basic) / 3 + 2));
		EVP_EncodeBlock(b64, (const unsigned char *)g->basic, (int)strlen(g->basic));
		basic_hdr = xasprintf("Authorization: Basic %s", (char *)b64);
		free(b64);
	}
	if (!strcmp(c.scheme, "basic")) {
		if (!basic_hdr)
			return k8_err_set(g->err, -EACCES, "registry %s requires a user name and "
					  "password, and kosa8 has none for it; add them to the "
					  "credentials file (\"auths\": {\"%s\": {\"auth\": "
					  "\"base64(user:password)\"}})", g->host, g->rp.domain);
		if (g->authz && !strcmp(g->authz, basic_hdr))
			return k8_err_set(g->err, -EACCES, "registry %s refused the credentials kosa8 "
					  "has for it (HTTP 401)", g->host);
		free(g->authz);
		g->authz = steal_pointer(&basic_hdr);
		return 0;
	}
	/* Bearer: a token from the realm. */
	if (strncmp(c.realm, "https://", 8) &&
	    !(strncmp(c.realm, "http://", 7) == 0 && g->plain_ok))
		return k8_err_set(g->err, -EACCES, "registry %s sends for a token to '%s', which is "
				  "not https; refused", g->host, c.realm);
	if (c.scope[0])
		snprintf(scope, sizeof(scope), "%s", c.scope);
	else
		snprintf(scope, sizeof(scope), "repository:%s:pull", g->rp.path);
	es = curl_easy_escape(g->curl, scope, 0);
	esc = curl_easy_escape(g->curl, c.service, 0);
	url = xasprintf("%s%cscope=%s%s%s", c.realm, strchr(c.realm, '?') ? '&' : '?',
			es ? es : "", c.service[0] ? "&service=" : "", c.service[0] && esc ? esc : "");
	curl_free(es);
	curl_free(esc);
	for (int attempt = 0;; attempt++) {
		cc = reg_perform(g, url, NULL, basic_hdr, 0, &t, &code);
		if (t.fatal) {
			r = k8_err_set(g->err, t.fatal, "getting a token for %s: %s", g->host, t.ferr.msg);
			goto out;
		}
		if (attempt + 1 < REG_TRIES && http_transient(cc, code)) {
			usleep(500000u << attempt);
			continue;
		}
		break;
	}
	if (cc != CURLE_OK) {
		r = k8_err_set(g->err, -EHOSTUNREACH, "getting a token from %s for %s: %s", c.realm,
			       g->host, curl_easy_strerror(cc));
		goto out;
	}
	if (code == 401 || code == 403) {
		r = k8_err_set(g->err, -EACCES, "the token service %s refused %s (HTTP %ld)%s", c.realm,
			       basic_hdr ? "the credentials kosa8 has for this registry" :
			       "anonymous access; add credentials for this registry", code,
			       basic_hdr ? "" : " (or the image does not exist)");
		goto out;
	}
	if (code != 200) {
		r = k8_err_set(g->err, -EPROTO, "the token service %s answered HTTP %ld", c.realm,
			       code);
		goto out;
	}
	j = json_loadb(t.buf ? t.buf : "", t.len, 0, NULL);
	tok = json_string_value(json_object_get(j, "token"));
	if (!tok || !*tok)
		tok = json_string_value(json_object_get(j, "access_token"));
	if (!tok || !*tok || strpbrk(tok, "\r\n")) {
		r = k8_err_set(g->err, -EPROTO, "the token service %s sent no usable token", c.realm);
		goto out;
	}
	free(g->authz);
	g->authz = xasprintf("Authorization: Bearer %s", tok);
	r = 0;
out:
	json_decref(j);
	free(t.buf);
	free(t.errbody);
	return r;
}

/* Did the 401 just received come from the registry's own origin? Only then is it
 * answered with credentials: a redirect (a blob sent to object storage) to another host,
 * or to another port or scheme of this one, that then asks for a password gets nothing,
 * whatever its challenge (a Bearer realm it names would otherwise receive the registry's
 * user and password). curl itself drops our Authorization header on such a redirect
 * (CURLOPT_UNRESTRICTED_AUTH is off); this covers the retry that is ours. False with
 * g->err set. */
static bool reg_answered_here(struct reg *g, const char *what)
{
	char *eff = NULL;

	curl_easy_getinfo(g->curl, CURLINFO_EFFECTIVE_URL, &eff);
	if (eff && registry_same_origin(eff, g->base))
		return true;
	k8_err_set(g->err, -EACCES, "%s: fetching %s, registry %s redirected to %.200s, which "
		   "asks for credentials (HTTP 401); kosa8 sends the credentials of a registry to "
		   "that registry only; refused", g->norm, what, g->host, eff ? eff : "(unknown)");
	return false;
}

/* GET `path` (under /v2/<name>/) from the endpoint, with auth and retries. */
static int reg_get(struct reg *g, const char *path, const char *accept, struct reg_xfer *x,
		   const char *what)
{
	cleanup_free char *url = xasprintf("%s/v2/%s/%s", g->base, g->rp.path, path);
	bool authed = false;
	char emsg[512];
	long code;
	CURLcode cc;

	for (int attempt = 0;;) {
		uint64_t from = x->sink == SINK_BLOB ? x->w->size : 0;

		if (reg_cancelled(g))
			return k8_err_set(g->err, -ECANCELED, "cancelled: another download failed");
		cc = reg_perform(g, url, accept, g->authz, from, x, &code);
		if (reg_cancelled(g))
			return k8_err_set(g->err, -ECANCELED, "cancelled: another download failed");
		if (x->fatal)
			return k8_err_set(g->err, x->fatal, "%s", x->ferr.msg);
		if (cc == CURLE_OK && code == 401 && !reg_answered_here(g, what))
			return -EACCES;
		if (cc == CURLE_OK && code == 401 && !authed) {
			int r;
			authed = true;
			r = reg_authenticate(g, x->challenge);
			if (r)
				return r;
			continue;
		}
		if (cc == CURLE_OK && code == 416 && from) {   /* bad range: start over */
			blobw_abort(x->w);
			int r = blobw_open(x->w, x->stagefd, x->max_blob, g->err);
			if (r)
				return r;
			continue;
		}
		if (cc == CURLE_OK && code >= 200 && code <= 299)
			return 0;
		if (++attempt < REG_TRIES && http_transient(cc, code)) {
			usleep(500000u << (attempt - 1));
			continue;
		}
		break;
	}
	if (cc != CURLE_OK)
		return k8_err_set(g->err, -EHOSTUNREACH, "fetching %s from %s: %s (after %d tries)",
				  what, g->host, curl_easy_strerror(cc), REG_TRIES);
	reg_errbody_msg(x, emsg, sizeof(emsg));
	if (code == 404)
		return k8_err_set(g->err, -ENOENT, "%s: %s was not found on %s (HTTP 404)%s",
				  g->norm, what, g->host, emsg);
	if ((code == 401 || code == 403) && g->basic[0])
		return k8_err_set(g->err, -EACCES, "%s: registry %s refused the credentials kosa8 "
				  "has for it (HTTP %ld for %s)%s", g->norm, g->host, code, what, emsg);
	if (code == 401 || code == 403)
		return k8_err_set(g->err, -EACCES, "%s: registry %s refused access to %s (HTTP "
				  "%ld)%s; add credentials for this registry", g->norm, g->host, what,
				  code, emsg);
	return k8_err_set(g->err, -EPROTO, "%s: fetching %s from %s failed: HTTP %ld%s", g->norm,
			  what, g->host, code, emsg);
}

/* ---------------------------------------------------------------- manifests and blobs */

static int reg_stage_mem(struct reg *g, const char *data, size_t n, const char *hex,
			 const char *what)
{
	struct blob_writer w;
	char got[65];
	int r;

	if (json_object_get(g->staged, hex) || store_blob_exists(g->st, hex))
		return 0;
	r = blobw_open(&w, g->stagefd, 0, g->err);
	if (r)
		return r;
	if ((r = blobw_write(&w, data, n, g->err)) ||
	    (r = blobw_finish(&w, hex, what, hex, got, g->err))) {
		blobw_abort(&w);
		return r;
	}
	json_object_set_new(g->staged, hex, json_true());
	return 0;
}

/* Fetch a manifest (by tag or "sha256:<hex>"); verify `want_hex` when given. Its hex
 * (always the SHA-256 of the bytes received), its bytes and its parsed JSON out. */
static int reg_manifest(struct reg *g, const char *refpart, const char *want_hex,
			struct reg_xfer *x, char hex[65], json_t **out)
{
	cleanup_free char *path = xasprintf("manifests/%s", refpart);
	char what[200], desc[300];
	int r;

	snprintf(what, sizeof(what), "manifest %s", refpart);
	x->sink = SINK_MEM;
	x->max = IMAGE_JSON_MAX;
	x->what = what;
	r = reg_get(g, path, REG_ACCEPT, x, what);
	if (r)
		return r;
	sha256_hex(x->buf ? x->buf : "", x->len, hex);
	if (want_hex && strcmp(want_hex, hex))
		return k8_err_set(g->err, -EBADMSG, "%s: the manifest %s from %s hashes to "
				  "sha256:%s; the registry sent something else than was asked "
				  "for (damaged or tampered with); nothing was stored", g->norm, refpart,
				  g->host, hex);
	snprintf(desc, sizeof(desc), "the manifest %s from %s", refpart, g->host);
	return store_json_parse(x->buf ? x->buf : "", x->len, desc, out, g->err);
}

static bool reg_mt_is(json_t *o, const char *ctype, const char *a, const char *b)
{
	const char *mt = json_string_value(json_object_get(o, "mediaType"));

	if (!mt && ctype && *ctype)
		mt = ctype;
	return mt && (!strncmp(mt, a, strlen(a)) || (b && !strncmp(mt, b, strlen(b))));
}

/* A descriptor's hex and size. */
static int reg_desc(struct reg *g, json_t *d, char hex[65], int64_t *size, const char *what)
{
	json_t *sz = json_object_get(d, "size");
	const char *dg = json_string_value(json_object_get(d, "digest"));

	if (!dg || !ref_digest_valid(dg, hex))
		return k8_err_set(g->err, -EINVAL, "%s: the %s descriptor's digest '%s' is not "
				  "sha256:<64 hex> (the only algorithm kosa8 supports)", g->norm, what,
				  dg ? dg : "(none)");
	if (!json_is_integer(sz) || json_integer_value(sz) < 0)
		return k8_err_set(g->err, -EINVAL, "%s: the %s sha256:%.12s has no valid size",
				  g->norm, what, hex);
	*size = (int64_t)json_integer_value(sz);
	return 0;
}

/* The store has blob `hex`: 1 (of the right size), 0 (not there) or an error. */
static int reg_blob_stored(struct reg *g, const char *hex, int64_t size, const char *kind)
{
	struct stat s;

	if (fstatat(g->st->blobfd, hex, &s, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(s.st_mode))
		return 0;
	if (s.st_size != size)
		return k8_err_set(g->err, -EBADMSG, "%s: %s sha256:%.12s is %lld bytes in the "
				  "store, but the manifest says %lld", g->norm, kind, hex,
				  (long long)s.st_size, (long long)size);
	return 1;
}

/* Download blob `hex` of `size` bytes, verify it and move it into the store. */
static int reg_blob_download(struct reg *g, const char *hex, int64_t size, const char *what)
{
	struct blob_writer w;
	struct reg_xfer x = { .sink = SINK_BLOB, .w = &w, .stagefd = g->stagefd };
	cleanup_free char *path = xasprintf("blobs/sha256:%s", hex);
	char got[65];
	int r;

	x.what = what;
	x.max_blob = (uint64_t)size;
	r = blobw_open(&w, g->stagefd, (uint64_t)size, g->err);
	if (r)
		return r;
	r = reg_get(g, path, NULL, &x, what);
	free(x.errbody);
	if (r) {
		blobw_abort(&w);
		return r;
	}
	if (w.size != (uint64_t)size) {
		blobw_abort(&w);
		return k8_err_set(g->err, -EBADMSG, "%s: %s from %s is %llu bytes, but the manifest "
				  "says %lld; refused, nothing was stored", g->norm, what, g->host,
				  (unsigned long long)w.size, (long long)size);
	}
	r = blobw_finish(&w, hex, what, NULL, got, g->err);
	if (r)
		return r == -EBADMSG ? k8_err_wrap(g->err, "%s: from %s; nothing was stored", g->norm,
						   g->host) : r;
	/* Verified: it lands now (unreferenced until the name is recorded; a failed pull
	 * has the store collect it), so that other pulls waiting for it can use it. */
	if (renameat(g->stagefd, w.name, g->st->blobfd, hex) < 0) {
		r = -errno;
		unlinkat(g->stagefd, w.name, 0);
		return k8_err_set(g->err, r, "storing %s: %s", what, strerror(-r));
	}
	if (fsync(g->st->blobfd) < 0)
		return k8_err_set(g->err, -errno, "fsync of the blob directory: %s", strerror(errno));
	return 0;
}

/* Make sure blob `hex` of `size` bytes is in the store: there already, downloaded by
 * another pull (waited for), or downloaded here. */
static int reg_blob(struct reg *g, const char *hex, int64_t size, const char *kind)
{
	char what[128], key[128];
	int r;

	snprintf(what, sizeof(what), "%s sha256:%.12s", kind, hex);
	snprintf(key, sizeof(key), "%p:%s", (void *)g->st, hex);
	pthread_mutex_lock(&reg_fl_lock);
	for (;;) {
		r = reg_blob_stored(g, hex, size, kind);
		if (r)
			break;
		if (reg_cancelled(g)) {
			r = k8_err_set(g->err, -ECANCELED, "cancelled: another download failed");
			break;
		}
		if (!reg_fl_blobs)
			reg_fl_blobs = json_object();
		if (!json_object_get(reg_fl_blobs, key)) {
			json_object_set_new(reg_fl_blobs, key, json_true());
			break;
		}
		pthread_cond_wait(&reg_fl_cond, &reg_fl_lock);
	}
	pthread_mutex_unlock(&reg_fl_lock);
	if (r < 0)
		return r;
	if (r == 0) {   /* ours to download */
		r = reg_blob_download(g, hex, size, what);
		pthread_mutex_lock(&reg_fl_lock);
		json_object_del(reg_fl_blobs, key);
		pthread_cond_broadcast(&reg_fl_cond);
		pthread_mutex_unlock(&reg_fl_lock);
		if (r)
			return r;
	}
	reg_progress(g, what, (uint64_t)size, (uint64_t)size);
	return 0;
}

/* The config and the layers, REG_PARALLEL at a time, each thread with its own handle.
 * The first failure cancels the others and is the pull's error. */
struct reg_job {
	char hex[65];
	int64_t size;
	const char *kind;
};

struct reg_pool {
	struct reg *g;
	struct reg_job *jobs;
	size_t n, next;
	pthread_mutex_t lock;
	int cancel;
	int r;
	struct k8_err err;
};

static void *reg_worker(void *arg)
{
	struct reg_pool *p = arg;
	struct reg w = *p->g;
	struct k8_err e = { 0 };

	w.err = &e;
	w.cancel = &p->cancel;
	w.authz = p->g->authz ? xstrdup(p->g->authz) : NULL;
	w.curl = curl_easy_init();
	for (;;) {
		struct reg_job *j;
		int r;

		pthread_mutex_lock(&p->lock);
		j = !p->cancel && p->next < p->n ? &p->jobs[p->next++] : NULL;
		pthread_mutex_unlock(&p->lock);
		if (!j)
			break;
		r = w.curl ? reg_blob(&w, j->hex, j->size, j->kind) :
			k8_err_set(&e, -ENOMEM, "libcurl: cannot create a handle");
		if (!r)
			continue;
		pthread_mutex_lock(&p->lock);
		if (!p->r) {
			p->r = r;
			p->err = e;
		}
		__atomic_store_n(&p->cancel, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&p->lock);
		/* Wake the threads waiting for a blob another pull downloads. */
		pthread_mutex_lock(&reg_fl_lock);
		pthread_cond_broadcast(&reg_fl_cond);
		pthread_mutex_unlock(&reg_fl_lock);
		break;
	}
	if (w.curl)
		curl_easy_cleanup(w.curl);
	free(w.authz);
	return NULL;
}

static int reg_blobs(struct reg *g, struct reg_job *jobs, size_t n)
{
	struct reg_pool p = { .g = g, .jobs = jobs, .n = n };
	pthread_t th[REG_PARALLEL];
	size_t nt = 0;

	pthread_mutex_init(&p.lock, NULL);
	while (nt < REG_PARALLEL && nt < n && pthread_create(&th[nt], NULL, reg_worker, &p) == 0)
		nt++;
	if (nt == 0)
		reg_worker(&p);   /* no thread to be had: one at a time, here */
	for (size_t i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&p.lock);
	if (p.r)
		return k8_err_set(g->err, p.r, "%s", p.err.msg);
	return 0;
}

/* Fetch the image manifest (through an index when there is one), the config and the
 * layers. The image manifest's hex out. */
static int reg_fetch(struct reg *g, char mhex[65])
{
	struct reg_xfer x = { 0 };
	struct reg_job *jobs = NULL;
	size_t njobs = 0;
	json_t *m = NULL, *layers, *ld;
	char want[65], hex[65], avail[600];
	const char *refpart = g->rp.digest[0] ? g->rp.digest : g->rp.tag;
	int64_t size, total = 0;
	size_t i;
	int r;

	if (g->rp.digest[0])
		ref_digest_valid(g->rp.digest, want);
	r = reg_manifest(g, refpart[0] ? refpart : "latest", g->rp.digest[0] ? want : NULL, &x,
			 mhex, &m);
	if (r)
		goto out;
	if (x.dcd[0] && !strncmp(x.dcd, "sha256:", 7) && strcmp(x.dcd + 7, mhex)) {
		r = k8_err_set(g->err, -EBADMSG, "%s: the manifest from %s hashes to sha256:%s, but "
			       "the registry says %s; refused", g->norm, g->host, mhex, x.dcd);
		goto out;
	}
	if (reg_mt_is(m, x.ctype, MT_OCI_INDEX, MT_DKR_LIST) ||
	    (!json_object_get(m, "layers") && json_is_array(json_object_get(m, "manifests")))) {
		char ihex[65];
		memcpy(ihex, mhex, 65);
		r = registry_pick_platform(m, hex, &size, avail, sizeof(avail));
		if (r == -ENOENT) {
			r = k8_err_set(g->err, -ENOENT, "%s: no linux/amd64 image in the index "
				       "sha256:%.12s on %s%s%s%s; kosa8 runs linux/amd64 images only",
				       g->norm, ihex, g->host, avail[0] ? " (it has " : "", avail,
				       avail[0] ? ")" : "");
			goto out;
		}
		if (r) {
			r = k8_err_set(g->err, -EINVAL, "%s: the index sha256:%.12s on %s is malformed",
				       g->norm, ihex, g->host);
			goto out;
		}
		if (size > (int64_t)IMAGE_JSON_MAX) {
			r = k8_err_set(g->err, -EFBIG, "%s: the manifest sha256:%.12s is larger than "
				       "%u bytes", g->norm, hex, IMAGE_JSON_MAX);
			goto out;
		}
		json_decref(m);
		m = NULL;
		char dref[80];
		snprintf(dref, sizeof(dref), "sha256:%s", hex);
		r = reg_manifest(g, dref, hex, &x, mhex, &m);
		if (r)
			goto out;
		if (reg_mt_is(m, x.ctype, MT_OCI_INDEX, MT_DKR_LIST)) {
			r = k8_err_set(g->err, -EINVAL, "%s: nested image indexes are not supported",
				       g->norm);
			goto out;
		}
	}
	if (!json_is_integer(json_object_get(m, "schemaVersion")) ||
	    json_integer_value(json_object_get(m, "schemaVersion")) != 2) {
		r = k8_err_set(g->err, -EINVAL, "%s: the manifest on %s is not schema 2 (old docker "
			       "schema 1 images are not supported)", g->norm, g->host);
		goto out;
	}
	if (json_object_get(m, "mediaType") && !reg_mt_is(m, NULL, MT_OCI_MANIFEST, MT_DKR_MANIFEST)) {
		r = k8_err_set(g->err, -EINVAL, "%s: the manifest on %s has media type %s, which is "
			       "not an image manifest", g->norm, g->host,
			       json_string_value(json_object_get(m, "mediaType")));
		goto out;
	}
	if ((r = store_manifest_check(m, hex, NULL, g->err))) {
		k8_err_wrap(g->err, "%s: the manifest on %s", g->norm, g->host);
		goto out;
	}
	layers = json_object_get(m, "layers");
	if (json_array_size(layers) > REG_LAYERS_MAX) {
		r = k8_err_set(g->err, -E2BIG, "%s: the manifest lists more than %d layers", g->norm,
			       REG_LAYERS_MAX);
		goto out;
	}
	/* Sizes first: refuse what could never fit before fetching anything. */
	json_array_foreach(layers, i, ld) {
		if ((r = reg_desc(g, ld, hex, &size, "layer")))
			goto out;
		total += size;
		if ((uint64_t)total > IMAGE_PULL_MAX) {
			r = k8_err_set(g->err, -EFBIG, "%s: the image's layers add up to more than "
				       "%llu bytes, the most kosa8 pulls", g->norm,
				       (unsigned long long)IMAGE_PULL_MAX);
			goto out;
		}
	}
	if ((r = reg_desc(g, json_object_get(m, "config"), hex, &size, "config")))
		goto out;
	if (size > (int64_t)IMAGE_JSON_MAX) {
		r = k8_err_set(g->err, -EFBIG, "%s: the image config is larger than %u bytes",
			       g->norm, IMAGE_JSON_MAX);
		goto out;
	}
	jobs = xcalloc(json_array_size(layers) + 1, sizeof(*jobs));
	memcpy(jobs[0].hex, hex, 65);
	jobs[0].size = size;
	jobs[0].kind = "image config";
	njobs = 1;
	json_array_foreach(layers, i, ld) {
		const char *mt = json_string_value(json_object_get(ld, "mediaType"));
		if (mt && strstr(mt, "encrypted")) {
			r = k8_err_set(g->err, -EINVAL, "%s: layer %zu has media type %s; encrypted "
				       "layers are not supported", g->norm, i, mt);
			goto out;
		}
		reg_desc(g, ld, jobs[njobs].hex, &jobs[njobs].size, "layer");
		jobs[njobs++].kind = "layer";
	}
	if ((r = reg_blobs(g, jobs, njobs)))
		goto out;
	/* The manifest last: its blob names everything above. */
	r = reg_stage_mem(g, x.buf, x.len, mhex, "the manifest");
out:
	free(jobs);
	json_decref(m);
	free(x.buf);
	free(x.errbody);
	return r;
}

/* Move the staged blobs into the store, then record the name. */
static int reg_commit(struct reg *g, const char *mhex)
{
	const char *hex;
	json_t *v;

	json_object_foreach(g->staged, hex, v)
		if (renameat(g->stagefd, hex, g->st->blobfd, hex) < 0)
			return k8_err_set(g->err, -errno, "storing blob sha256:%s: %s", hex,
					  strerror(errno));
	if (fsync(g->st->blobfd) < 0)
		return k8_err_set(g->err, -errno, "fsync of the blob directory: %s", strerror(errno));
	return store_ref_set(g->st, g->norm, mhex, g->err);
}

/* ---------------------------------------------------------------- entry point */

static int reg_endpoint(struct reg *g, const char *base)
{
	const char *h = strstr(base, "://");

	snprintf(g->base, sizeof(g->base), "%s", base);
	while (strlen(g->base) > 1 && g->base[strlen(g->base) - 1] == '/')
		g->base[strlen(g->base) - 1] = '\0';
	snprintf(g->host, sizeof(g->host), "%s", h ? h + 3 : base);
	g->plain_ok = !strncmp(g->base, "http://", 7);
	free(g->authz);
	g->authz = NULL;
	return 0;
}

static int reg_pull_from(struct reg *g, char mhex[65])
{
	json_object_clear(g->staged);
	return reg_fetch(g, mhex) ?: reg_commit(g, mhex);
}

/* The network part of a pull, led by this call (no other pull of the name under way). */
static int reg_pull_net(struct reg *g, json_t **result)
{
	struct image_store *st = g->st;
	const struct pull_opts *opts = g->opts;
	struct k8_err *err = g->err;
	char mhex[65];
	int r;

	pthread_once(&reg_curl_once, reg_curl_init);
	g->curl = curl_easy_init();
	if (!g->curl)
		return k8_err_set(err, -ENOMEM, "libcurl: cannot create a handle");
	g->staged = json_object();
	store_busy_begin(st);
	store_tmp_name(st, "pull", g->stagename, sizeof(g->stagename));
	if (mkdirat(st->tmpfd, g->stagename, 0700) < 0 ||
	    (g->stagefd = openat(st->tmpfd, g->stagename, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
				 O_CLOEXEC)) < 0) {
		r = k8_err_set(err, -errno, "creating a staging directory in %s/tmp: %s", st->root,
			       strerror(errno));
		goto out;
	}
	r = -ENOENT;
	if (!strcmp(g->rp.domain, "docker.io")) {
		char basic[sizeof(g->basic)];
		/* Docker Hub's credentials are not for the mirrors' operators. */
		memcpy(basic, g->basic, sizeof(basic));
		g->basic[0] = '\0';
		for (size_t i = 0; opts->mirrors && opts->mirrors[i]; i++) {
			struct k8_err me = { 0 };
			g->err = &me;
			reg_endpoint(g, opts->mirrors[i]);
			r = reg_pull_from(g, mhex);
			g->err = err;
			if (!r || r == -EBADMSG) {   /* a mirror serving bad data is not skipped */
				if (r)
					k8_err_set(err, r, "mirror %s: %s", opts->mirrors[i], me.msg);
				break;
			}
			reg_progress(g, me.msg, 0, 0);   /* why this mirror was skipped */
		}
		memcpy(g->basic, basic, sizeof(basic));
		explicit_bzero(basic, sizeof(basic));
		if (r && r != -EBADMSG) {
			reg_endpoint(g, "https://registry-1.docker.io");
			r = reg_pull_from(g, mhex);
		}
	} else {
		char base[300];
		snprintf(base, sizeof(base), "%s://%s",
			 registry_plain_http_ok(g->rp.domain, opts->insecure) ? "http" : "https",
			 g->rp.domain);
		reg_endpoint(g, base);
		r = reg_pull_from(g, mhex);
	}
	if (!r) {
		char dg[72];
		snprintf(dg, sizeof(dg), "sha256:%s", mhex);
		*result = json_pack("{s:s, s:s, s:s}", "ref", g->norm, "digest", dg, "registry",
				    g->host);
	}
out:
	if (g->stagefd >= 0) {
		k8_closep(&g->stagefd);
		unpack_remove_at(st->tmpfd, g->stagename, 0);
	}
	if (r) {   /* blobs that landed before the failure go once nothing else is busy */
		pthread_mutex_lock(&st->lock);
		st->gc_pending = true;
		pthread_mutex_unlock(&st->lock);
	}
	store_busy_end(st);
	curl_easy_cleanup(g->curl);
	g->curl = NULL;
	json_decref(g->staged);
	g->staged = NULL;
	free(g->authz);
	g->authz = NULL;
	return r;
}

int image_pull(struct image_store *st, const char *ref, const struct pull_opts *opts,
	       image_progress_fn progress, void *ctx, json_t **result, struct k8_err *err)
{
	static const struct pull_opts none = { 0 };
	pthread_mutex_t plock = PTHREAD_MUTEX_INITIALIZER;
	uint64_t fetched = 0;
	struct reg g = { .st = st, .opts = opts ? opts : &none, .progress = progress, .ctx = ctx,
			 .err = err, .stagefd = -1, .fetched = &fetched, .plock = &plock };
	struct reg_flight *fl;
	struct image_info info;
	struct k8_err e = { 0 };
	int r;

	*result = NULL;
	opts = g.opts;
	if (!ref || !*ref)
		return k8_err_set(err, -EINVAL, "image pull: no image named");
	if ((r = image_ref_normalize(ref, g.norm, sizeof(g.norm), err)) ||
	    (r = ref_parse(g.norm, &g.rp, err)))
		return r;
	/* Offline, or pinned by a digest the store already has: no network. */
	if (opts->offline || g.rp.digest[0]) {
		r = image_resolve(st, g.norm, &info, &e);
		/* Found by its digest: the name given is recorded too, as a pull would. */
		if (!r && g.rp.digest[0])
			r = store_ref_set(st, g.norm, info.digest + 7, err);
		if (!r) {
			*result = json_pack("{s:s, s:s, s:s}", "ref", g.norm, "digest", info.digest,
					    "registry", g.rp.domain);
			image_info_clear(&info);
			return 0;
		}
		image_info_clear(&info);
		if (r != -ENOENT)
			return k8_err_set(err, r, "%s", e.msg);
		if (opts->offline)
			return k8_err_set(err, -ENETUNREACH, "KOSA8_OFFLINE is set: not fetching %s; "
					  "load it with kosa8 image load", g.norm);
	}
	if (opts->basic && *opts->basic &&
	    (size_t)snprintf(g.basic, sizeof(g.basic), "%s", opts->basic) >= sizeof(g.basic)) {
		r = k8_err_set(err, -EINVAL, "registry credentials longer than %zu bytes",
			       sizeof(g.basic) - 1);
		goto done;
	}
	if (!g.basic[0] && opts->auth_file && (r = reg_creds_from(opts->auth_file, g.rp.domain, g.basic,
						   sizeof(g.basic), err)))
		goto done;
	if (!g.basic[0] && opts->docker_config &&
	    (r = reg_creds_from(opts->docker_config, g.rp.domain, g.basic, sizeof(g.basic), err)))
		goto done;
	/* Another pull of this name under way: its result, once it is done. */
	fl = reg_flight_begin(st, g.norm, result);
	if (!fl) {
		r = 0;
		goto done;
	}
	r = reg_pull_net(&g, result);
	reg_flight_end(fl, r, *result);
done:
	explicit_bzero(g.basic, sizeof(g.basic));
	pthread_mutex_destroy(&plock);
	return r;
}
