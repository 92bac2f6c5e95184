/* SPDX-License-Identifier: Apache-2.0 */
/* guestfetch.c - the release's guest image, fetched when it is missing (at start, or by
 * `kosa8 guest fetch`) and checked against the digest built into kosa8d.
 *
 * Theory of operation. A release publishes its guest image as a folder: manifest.json
 * (which names the kernel and the initramfs by their SHA-256) and those two files. This
 * kosa8d was built with that manifest's SHA-256 (src/common/guest_digest.h, the release's
 * published checksum), so the manifest is fetched first, into memory under a cap, and
 * refused unless its bytes have that digest: nothing of it is parsed before. Then each file
 * it names is streamed into a staging folder under a cap while hashed, and refused unless
 * it has the manifest's SHA-256. The staged image is then checked once more by the code
 * every boot uses (guest_verify_open) and installed as $KOSA8_HOME/guest (guest_install,
 * shared with `bundle import`). The server, the mirror and the network are never trusted:
 * only the digest is.
 */
#include "daemon/guestfetch.h"
#include "daemon/daemon.h"
#include "daemon/fetch.h"
#include "daemon/guest.h"
#include "common/sha.h"
#include "common/version.h"

#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GUEST_URL_MAX 2048

static pthread_mutex_t fetch_lock = PTHREAD_MUTEX_INITIALIZER;

/* The folder URL to fetch from, ending in '/': the caller's, config.json's "guest_url",
 * else this release's. */
static int guest_url(struct daemon *d, const char *given, char out[GUEST_URL_MAX + 2],
		     struct k8_err *err)
{
	json_t *cfg = NULL;
	const char *u = given;

	if (!u || !*u) {
		cfg = daemon_config(d);
		u = json_string_value(json_object_get(cfg, "guest_url"));
		if (!u || !*u)
			u = KOSA8_GUEST_URL;
	}
	size_t n = strlen(u);
	int r = 0;
	if ((strncmp(u, "http://", 7) && strncmp(u, "https://", 8)) || n > GUEST_URL_MAX ||
	    strpbrk(u, " \t\r\n"))
		r = k8_err_set(err, -EINVAL, "the guest image's URL must be http:// or https:// "
			       "and at most %d bytes without spaces (got '%.200s')", GUEST_URL_MAX, u);
	else
		snprintf(out, GUEST_URL_MAX + 2, "%s%s", u, u[n - 1] == '/' ? "" : "/");
	json_decref(cfg);
	return r;
}

static int refuse(struct daemon *d, const char *url, const char *what, const char *got,
		  const char *want, struct k8_err *err)
{
	daemon_audit(d, "guest.fetch.refused", NULL,
		     json_pack("{s:s,s:s,s:s,s:s}", "url", url, "file", what, "got", got, "want", want));
	return k8_err_set(err, -EPERM, "the guest image at %s is not the one this kosa8 was "
			  "released with: its %s has %s, the release's %s; refusing it, nothing was "
			  "installed", url, what, got, want);
}

/* One file the (checked) manifest names, fetched into dir and checked. */
static int fetch_one(struct daemon *d, const char *url, const char *path, const char *want,
		     uint64_t *total, struct k8_err *err)
{
	const char *base = strrchr(path, '/') + 1;
	cleanup_free char *src = xasprintf("%s%s", url, base);
	char hex[65];
	uint64_t n = 0;
	int r;
	cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if ((r = fetch_file(src, base, fd, GUEST_FILE_MAX, hex, &n, err)))
		return r;
	if (strcmp(hex, want)) {
		char got[80], exp[80];
		snprintf(got, sizeof(got), "sha256:%s", hex);
		snprintf(exp, sizeof(exp), "sha256:%s", want);
		return refuse(d, url, base, got, exp, err);
	}
	if (fsync(fd) < 0)
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	*total += n;
	return 0;
}

/* Is the guest in use the release's, and does it match its manifest (hashed now)? */
static bool guest_is_release(struct daemon *d, struct k8_err *err)
{
	int kfd = -1, ifd = -1;

	if (!d->guest.kernel[0] || !d->guest_release || strcmp(d->guest.digest, d->guest_release))
		return false;
	if (guest_verify_open(&d->guest, &kfd, &ifd, err))
		return false;
	close(kfd);
	close(ifd);
	return true;
}

static int fetch_locked(struct daemon *d, const char *url, const char *stage, uint64_t *bytes,
			struct k8_err *err)
{
	cleanup_free char *murl = xasprintf("%smanifest.json", url);
	cleanup_free char *mpath = xasprintf("%s/manifest.json", stage);
	struct fetch_buf b = { .max = GUEST_MANIFEST_MAX };
	struct guest_image g;
	char hex[65], got[80];
	int kfd = -1, ifd = -1, r;
	long st;

	if (!d->guest_release)
		return k8_err_set(err, -ENOENT, "this kosa8d has no built-in guest digest");
	st = fetch_mem(murl, NULL, 120L, &b, err);
	if (st != 200) {
		if (st >= 0)
			k8_err_set(err, st == 404 ? -ENOENT : -EPROTO, "%s answered HTTP %ld", murl, st);
		r = err->code;
		goto out;
	}
	/* The manifest's bytes are judged by their digest before anything reads them. */
	sha256_hex(b.p ? b.p : "", b.n, hex);
	snprintf(got, sizeof(got), "sha256:%s", hex);
	if (strcmp(got, d->guest_release)) {
		r = refuse(d, url, "manifest.json", got, d->guest_release, err);
		goto out;
	}
	if ((r = mkdir_p(stage, 0700)) || (r = write_file_atomic(mpath, b.p, b.n, 0600))) {
		r = k8_err_set(err, r, "%s: %s", stage, strerror(-r));
		goto out;
	}
	if ((r = guest_find_dir(&g, stage, err)) ||
	    (r = fetch_one(d, url, g.kernel, g.kernel_sha, bytes, err)) ||
	    (r = fetch_one(d, url, g.initramfs, g.initramfs_sha, bytes, err)))
		goto out;
	/* What every boot checks, once more on the staged files. */
	if ((r = guest_verify_open(&g, &kfd, &ifd, err)))
		goto out;
	close(kfd);
	close(ifd);
	*bytes += b.n;
	if ((r = guest_install(&g, d->home, err)))
		goto out;
	if (guest_find_home(&g, d->home, err) == 0)   /* KOSA8_GUEST_DIR still wins */
		d->guest = g;
	k8_err_clear(err);
out:
	free(b.p);
	return r;
}

int guest_fetch(struct daemon *d, const char *url_in, bool force, json_t **out, struct k8_err *err)
{
	char url[GUEST_URL_MAX + 2];
	struct k8_err e = { 0 };
	uint64_t bytes = 0;
	int r;

	if ((r = guest_url(d, url_in, url, err)))
		return r;
	if (daemon_offline(d, NULL))
		return k8_err_set(err, -ENETUNREACH, "KOSA8_OFFLINE is set: not fetching the guest "
				  "image from %s; copy it in with kosa8 bundle import FILE", url);
	pthread_mutex_lock(&fetch_lock);
	if (!force && guest_is_release(d, &e)) {
		pthread_mutex_unlock(&fetch_lock);
		*out = json_pack("{s:b,s:s,s:s,s:s}", "fetched", 0, "url", url, "digest",
				 d->guest.digest, "dir", d->guest.dir);
		return 0;
	}
	static unsigned seq;
	char stage[4300];
	snprintf(stage, sizeof(stage), "%s/tmp/guest-fetch-%d-%u", d->home, (int)getpid(), ++seq);
	rm_rf(stage);
	daemon_log("fetching the guest image from %s", url);
	r = fetch_locked(d, url, stage, &bytes, err);
	rm_rf(stage);
	if (r == 0) {
		snprintf(d->guest_fetched_from, sizeof(d->guest_fetched_from), "%s", url);
		daemon_audit(d, "guest.fetch", NULL, json_pack("{s:s,s:s,s:I}", "url", url, "digest",
			     d->guest.digest, "bytes", (json_int_t)bytes));
		daemon_log("guest image %s fetched from %s (%llu bytes) and installed in %s",
			   d->guest.digest, url, (unsigned long long)bytes, d->guest.dir);
		*out = json_pack("{s:b,s:s,s:s,s:s,s:I}", "fetched", 1, "url", url, "digest",
				 d->guest.digest, "dir", d->guest.dir, "bytes", (json_int_t)bytes);
	}
	pthread_mutex_unlock(&fetch_lock);
	return r;
}

void guest_fetch_at_start(struct daemon *d)
{
	struct k8_err err = { 0 };
	json_t *out = NULL;
	const char *env = getenv("KOSA8_GUEST_DIR");

	if (d->guest.kernel[0] || (env && *env))
		return;
	if (daemon_offline(d, NULL)) {
		daemon_log("no guest image, and KOSA8_OFFLINE is set: nothing fetched; copy one in "
			   "with kosa8 bundle import FILE");
		return;
	}
	if (guest_fetch(d, NULL, false, &out, &err))
		daemon_log("WARNING: no guest image: fetching it failed: %s", err.msg);
	json_decref(out);
}

/* ---- API ---- */

int guest_api_get(struct api_call *call)
{
	struct daemon *d = call->d;
	struct k8_err e = { 0 };
	struct guest_image none;
	int kfd = -1, ifd = -1;
	bool files_ok = false;

	if (d->guest.kernel[0] && guest_verify_open(&d->guest, &kfd, &ifd, &e) == 0) {
		files_ok = true;
		close(kfd);
		close(ifd);
	} else if (!d->guest.kernel[0]) {
		guest_find_home(&none, d->home, &e);      /* why there is none */
	}
	bool release = d->guest.kernel[0] && d->guest_release &&
		       !strcmp(d->guest.digest, d->guest_release);
	call->out = json_pack("{s:s?,s:s?,s:s?,s:b,s:b,s:s?,s:s?}", "dir",
			      d->guest.dir[0] ? d->guest.dir : NULL, "digest",
			      d->guest.digest[0] ? d->guest.digest : NULL, "release_digest",
			      d->guest_release, "files_ok", files_ok, "release", release, "error",
			      e.msg[0] ? e.msg : NULL, "fetched_from",
			      d->guest_fetched_from[0] ? d->guest_fetched_from : NULL);
	return 0;
}

int guest_api_fetch(struct api_call *call)
{
	const char *url = NULL;
	bool force = false;

	if (api_body_str(call, "url", API_OPTIONAL, GUEST_URL_MAX, &url) ||
	    api_body_bool(call, "force", API_OPTIONAL, &force))
		return call->err.code;
	return guest_fetch(call->d, url, force, &call->out, &call->err);
}
