/* SPDX-License-Identifier: Apache-2.0 */
/* util.c - error out-parameter, allocation, file and clock helpers (see util.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>


int k8_err_set(struct k8_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err || err->code)
		return code;
	err->code = code ? code : -EIO;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

void k8_err_clear(struct k8_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

int k8_err_wrap(struct k8_err *err, const char *fmt, ...)
{
	char prefix[512], old[sizeof(err->msg)];
	va_list ap;

	if (!err)
		return -EIO;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
	return err->code;
}

static void oom(void)
{
	static const char m[] = "out of memory\n";
	(void)!write(2, m, sizeof(m) - 1);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t m)
{
	void *p = calloc(n ? n : 1, m ? m : 1);
	if (!p)
		oom();
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		oom();
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		oom();
	va_end(ap);
	return s;
}

int write_full(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int read_full(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EPIPE;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int write_file_atomic(const char *path, const void *data, size_t n, int mode)
{
	cleanup_free char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
	cleanup_free char *dir = xstrdup(path);
	char *slash;
	int fd, r;

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -errno;
	r = write_full(fd, data, n);
	if (!r && fsync(fd) < 0)
		r = -errno;
	close(fd);
	if (!r && rename(tmp, path) < 0)
		r = -errno;
	if (r) {
		unlink(tmp);
		return r;
	}
	slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		fd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
	return 0;
}

int read_file(const char *path, size_t max, char **out, size_t *len)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf;
	size_t have = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISREG(st.st_mode) && (size_t)st.st_size > max)
		return -EFBIG;
	buf = xmalloc(max + 1);
	for (;;) {
		ssize_t r = read(fd, buf + have, max + 1 - have);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			free(buf);
			return -errno;
		}
		if (r == 0)
			break;
		have += (size_t)r;
		if (have > max) {
			free(buf);
			return -EFBIG;
		}
	}
	buf[have] = '\0';
	*out = buf;
	if (len)
		*len = have;
	return 0;
}

int mkdir_p(const char *path, int mode)
{
	cleanup_free char *p = xstrdup(path);
	char *s;

	for (s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int rm_rf_at(int dfd, const char *name, dev_t dev)
{
	struct stat st;
	DIR *d;
	struct dirent *de;
	int fd, r = 0;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	if (st.st_dev != dev)
		return -EXDEV;
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		int e = rm_rf_at(fd, de->d_name, dev);
		if (e && !r)
			r = e;
	}
	closedir(d);
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !r)
		r = -errno;
	return r;
}

int rm_rf(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	return rm_rf_at(AT_FDCWD, path, st.st_dev);
}

uint64_t now_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t now_real_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

char *k8_time_fmt(char out[K8_TIME_LEN], int64_t sec, int ms)
{
	time_t t = (time_t)sec;
	struct tm tm;
	size_t n;

	if (!gmtime_r(&t, &tm)) {
		t = 0;
		gmtime_r(&t, &tm);
	}
	n = strftime(out, K8_TIME_LEN, "%Y-%m-%dT%H:%M:%S", &tm);
	if (ms >= 0)
		snprintf(out + n, K8_TIME_LEN - n, ".%03dZ", ms % 1000);
	else
		snprintf(out + n, K8_TIME_LEN - n, "Z");
	return out;
}

char *k8_time_now(char out[K8_TIME_LEN], int with_ms)
{
	uint64_t ns = now_real_ns();

	return k8_time_fmt(out, (int64_t)(ns / 1000000000ull),
			   with_ms ? (int)(ns / 1000000ull % 1000ull) : -1);
}

int k8_duration_parse(const char *s, uint64_t max, uint64_t *secs)
{
	uint64_t v = 0, unit = 1;
	const char *p = s;

	if (!s || !*s)
		return -EINVAL;
	if (!strcmp(s, "off")) {
		*secs = 0;
		return 0;
	}
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p == s)
		return -EINVAL;
	switch (*p) {
	case '\0': case 's': break;
	case 'm': unit = 60; break;
	case 'h': unit = 3600; break;
	case 'd': unit = 86400; break;
	default: return -EINVAL;
	}
	if (*p && p[1])
		return -EINVAL;
	if (v > max / unit)
		return -EINVAL;
	*secs = v * unit;
	return 0;
}

/* Length of the UTF-8 sequence at s that is safe to show as is (a printable character
 * from U+00A0 up, not a bidi control or a line separator), or 0. */
static size_t utf8_printable(const unsigned char *s)
{
	uint32_t c;
	size_t n;

	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		c = s[0] & 0x1fu;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		c = s[0] & 0x0fu;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		c = s[0] & 0x07u;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3fu);
	}
	if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10ffff)))
		return 0;                                       /* overlong, too large */
	if (c < 0xa0 || (c >= 0xd800 && c <= 0xdfff))
		return 0;                                       /* C1 controls, surrogates */
	if ((c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) || c == 0x2028 ||
	    c == 0x2029 || c == 0x200e || c == 0x200f)
		return 0;                                       /* bidi, line separators */
	return n;
}

void str_escape_to(char *out, size_t outlen, const char *s)
{
	static const char hx[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t o = 0;

	if (!outlen)
		return;
	while (*p) {
		char tmp[4];
		size_t k, w;
		const char *src;
		if (*p >= 0x20 && *p < 0x7f) {
			src = (const char *)p;
			w = k = 1;
		} else if ((k = utf8_printable(p)) > 0) {
			src = (const char *)p;
			w = k;
		} else {
			tmp[0] = '\\';
			tmp[1] = 'x';
			tmp[2] = hx[*p >> 4];
			tmp[3] = hx[*p & 15];
			src = tmp;
			w = 4;
			k = 1;
		}
		if (o + w >= outlen)
			break;                  /* cut on a character (or escape) boundary */
		memcpy(out + o, src, w);
		o += w;
		p += k;
	}
	out[o] = '\0';
}

char *str_escape(const char *s)
{
	size_t n = 4 * strlen(s ? s : "") + 1;
	char *out = xmalloc(n);

	str_escape_to(out, n, s);
	return out;
}

char *k8_beside_self(const char *name)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0)
		return xstrdup(name);
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return xstrdup(name);
	*slash = '\0';
	return xasprintf("%s/%s", exe, name);
}

void k8_hex(const void *p, size_t n, char *out)
{
	static const char hx[] = "0123456789abcdef";
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hx[b[i] >> 4];
		out[2 * i + 1] = hx[b[i] & 15];
	}
	out[2 * n] = '\0';
}
