/* SPDX-License-Identifier: Apache-2.0 */
/* fs.c - paths, listings, EntryInfo and watch events of envd's filesystem service (fs.h). */
#include "e2b/fs.h"
#include "e2b/envd.h"
#include "docker/stream.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int e2b_path(const char *in, const char *home, char *out, size_t n, struct k8_err *err)
{
	char *buf, *save = NULL, *seg;
	size_t len = 0;

	if (!in || !*in)
		return k8_err_set(err, -EINVAL, "the path is empty");
	if (strlen(in) > E2B_PATH_MAX)
		return k8_err_set(err, -EINVAL, "the path is longer than %d bytes", E2B_PATH_MAX);
	if (in[0] == '~' && (in[1] == '/' || !in[1]))
		buf = xasprintf("%s/%s", home, in + 1);
	else if (in[0] != '/')
		buf = xasprintf("%s/%s", home, in);
	else
		buf = xstrdup(in);
	if (n < 2) {
		free(buf);
		return k8_err_set(err, -EINVAL, "no room for the path");
	}
	out[0] = '\0';
	for (seg = strtok_r(buf, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
		size_t sl = strlen(seg);
		if (!strcmp(seg, "."))
			continue;
		if (!strcmp(seg, "..")) {
			char *slash = strrchr(out, '/');
			len = slash ? (size_t)(slash - out) : 0;
			out[len] = '\0';
			continue;
		}
		if (len + 1 + sl >= n || len + 1 + sl > E2B_PATH_MAX) {
			free(buf);
			return k8_err_set(err, -EINVAL, "the path is longer than %d bytes", E2B_PATH_MAX);
		}
		out[len++] = '/';
		memcpy(out + len, seg, sl);
		len += sl;
		out[len] = '\0';
	}
	free(buf);
	if (!len) {
		out[0] = '/';
		out[1] = '\0';
	}
	return 0;
}

int e2b_user_check(const char *name, struct k8_err *err)
{
	size_t len = strlen(name);

	if (!len || len > E2B_USER_MAX || name[0] == '-')
		goto bad;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("_.-", name[i]))
			goto bad;
	return 0;
bad:
	return k8_err_set(err, -EINVAL, "the user must be a name or a number (letters, digits, "
			  "'_', '.', '-'; at most %d)", E2B_USER_MAX);
}

void e2b_entry_clear(struct e2b_entry *e)
{
	free(e->rel);
	free(e->link);
	e->rel = e->link = NULL;
}

void e2b_entries_free(struct e2b_entry *e, size_t n)
{
	for (size_t i = 0; e && i < n; i++)
		e2b_entry_clear(&e[i]);
	free(e);
}

/* Digits only (no sign, no space), at most max. */
static bool parse_u64(const char *s, size_t len, int base, uint64_t max, uint64_t *out)
{
	uint64_t x = 0;

	if (!len || len > 20)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (d >= (unsigned)base)
			return false;
		if (x > (max - d) / (uint64_t)base)
			return false;
		x = x * (uint64_t)base + d;
	}
	*out = x;
	return true;
}

/* %T@: "1700000000.1234567890" (GNU find prints ten fraction digits; any 0-10 taken). */
static bool parse_mtime(const char *s, size_t len, int64_t *sec, int32_t *ns)
{
	const char *dot = memchr(s, '.', len);
	size_t il = dot ? (size_t)(dot - s) : len, fl = dot ? len - il - 1 : 0;
	uint64_t v, f = 0;
	bool neg = il && s[0] == '-';

	if (!parse_u64(s + neg, il - neg, 10, (uint64_t)INT64_MAX / 2, &v))
		return false;
	if (dot && fl) {
		size_t take = fl > 9 ? 9 : fl;
		if (!parse_u64(dot + 1, take, 10, 999999999, &f))
			return false;
		for (size_t i = take; i < 9; i++)
			f *= 10;
		for (size_t i = 9; i < fl; i++)     /* the digits past ns: checked, dropped */
			if (dot[1 + i] < '0' || dot[1 + i] > '9')
				return false;
	}
	*sec = neg ? -(int64_t)v : (int64_t)v;
	*ns = (int32_t)f;
	if (neg && f) {         /* -1.25 is 1.25 s before the epoch */
		*sec -= 1;
		*ns = (int32_t)(1000000000 - f);
	}
	return true;
}

/* A name as find prints it: printable, no '/' or ':', at most E2B_NAME_MAX bytes. */
static bool name_ok(const char *s, size_t len)
{
	if (!len || len > E2B_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == '/' || s[i] == ':')
			return false;
	return true;
}

int e2b_entry_next(const uint8_t *p, size_t n, struct e2b_entry *e, size_t *used,
		   struct k8_err *err)
{
	const char *f[8];
	size_t fl[8], off = 0;
	uint64_t v;

	memset(e, 0, sizeof(*e));
	*used = 0;
	if (n && p[0] == 0) {
		*used = 1;
		return 2;
	}
	for (int i = 0; i < 8; i++) {
		const uint8_t *z = memchr(p + off, 0, n - off);
		if (!z) {
			if (n - off > 2 * (E2B_PATH_MAX + 1) + 256)
				return k8_err_set(err, -EBADMSG, "a listing field is too long");
			return 0;
		}
		f[i] = (const char *)p + off;
		fl[i] = (size_t)(z - (p + off));
		off += fl[i] + 1;
	}
	if (fl[0] != 1 || !strchr("fdlbcps", f[0][0]))
		return k8_err_set(err, -EBADMSG, "listing: bad file type");
	e->type = f[0][0];
	if (!parse_u64(f[1], fl[1], 10, INT64_MAX, &e->size))
		return k8_err_set(err, -EBADMSG, "listing: bad size");
	if (!parse_u64(f[2], fl[2], 8, 07777, &v))
		return k8_err_set(err, -EBADMSG, "listing: bad mode");
	e->perm = (unsigned)v;
	if (!name_ok(f[3], fl[3]) || !name_ok(f[4], fl[4]))
		return k8_err_set(err, -EBADMSG, "listing: bad owner or group");
	memcpy(e->owner, f[3], fl[3]);
	memcpy(e->group, f[4], fl[4]);
	if (!parse_mtime(f[5], fl[5], &e->mtime, &e->mtime_ns))
		return k8_err_set(err, -EBADMSG, "listing: bad time");
	if (fl[6] > E2B_PATH_MAX || fl[7] > E2B_PATH_MAX || (fl[7] && e->type != 'l') ||
	    (fl[6] && (f[6][0] == '/' || strstr(f[6], "//"))))
		return k8_err_set(err, -EBADMSG, "listing: bad path or link");
	/* no "." or ".." component: find never prints one below its start */
	for (const char *c = f[6]; fl[6] && c; c = strchr(c, '/')) {
		if (*c == '/')
			c++;
		if ((c[0] == '.' && (!c[1] || c[1] == '/')) ||
		    (c[0] == '.' && c[1] == '.' && (!c[2] || c[2] == '/')))
			return k8_err_set(err, -EBADMSG, "listing: bad path component");
	}
	e->rel = strndup(f[6], fl[6]);
	e->link = strndup(f[7], fl[7]);
	if (!e->rel || !e->link)
		abort();
	*used = off;
	return 1;
}

int e2b_listing_parse(const uint8_t *p, size_t n, size_t max, struct e2b_entry **out,
		      size_t *count, struct k8_err *err)
{
	struct e2b_entry *arr = NULL;
	size_t have = 0, cap = 0, off = 0, used;
	int r;

	*out = NULL;
	*count = 0;
	while (off < n) {
		struct e2b_entry e;
		r = e2b_entry_next(p + off, n - off, &e, &used, err);
		if (r == 0)
			r = k8_err_set(err, -EBADMSG, "listing: the last entry is cut short");
		if (r == 2)
			r = k8_err_set(err, -EBADMSG, "listing: a separator in a single listing");
		if (r < 0) {
			e2b_entries_free(arr, have);
			return r;
		}
		if (have == max) {
			e2b_entry_clear(&e);
			e2b_entries_free(arr, have);
			return k8_err_set(err, -E2BIG, "the listing has more than %zu entries", max);
		}
		if (have == cap) {
			cap = cap ? cap * 2 : 16;
			arr = realloc(arr, cap * sizeof(*arr));
			if (!arr)
				abort();
		}
		arr[have++] = e;
		off += used;
	}
	*out = arr;
	*count = have;
	return 0;
}

static unsigned posix_type(char t)
{
	switch (t) {
	case 'd': return S_IFDIR;
	case 'l': return S_IFLNK;
	case 'b': return S_IFBLK;
	case 'c': return S_IFCHR;
	case 'p': return S_IFIFO;
	case 's': return S_IFSOCK;
	default: return S_IFREG;
	}
}

void e2b_mode_string(unsigned posix_mode, char out[24])
{
	static const char letters[] = "dalTLDpSugct?";
	static const char rwx[] = "rwxrwxrwx";
	uint32_t g = ds_gomode_from_posix((mode_t)posix_mode);
	size_t o = 0;

	for (int i = 0; i < 13; i++)
		if (g & (1u << (31 - i)))
			out[o++] = letters[i];
	if (!o)
		out[o++] = '-';
	for (int i = 0; i < 9; i++)
		out[o++] = (g & (1u << (8 - i))) ? rwx[i] : '-';
	out[o] = '\0';
}

const char *e2b_file_type(char type)
{
	switch (type) {
	case 'f': return "FILE_TYPE_FILE";
	case 'd': return "FILE_TYPE_DIRECTORY";
	case 'l': return "FILE_TYPE_SYMLINK";
	default: return "FILE_TYPE_UNSPECIFIED";
	}
}

json_t *e2b_entry_json(const struct e2b_entry *e, const char *dir)
{
	char mode[24], when[40], size[24];
	char *path = !e->rel[0] ? xstrdup(dir)
				: xasprintf("%s%s%s", dir, strcmp(dir, "/") ? "/" : "", e->rel);
	const char *slash = strrchr(path, '/');
	const char *name = slash && slash[1] ? slash + 1 : "/";
	json_t *v;

	e2b_mode_string(posix_type(e->type) | e->perm, mode);
	ds_rfc3339(e->mtime, e->mtime_ns, when);
	snprintf(size, sizeof(size), "%llu", (unsigned long long)e->size);
	v = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:s,s:s,s:{}}", "name", name, "type",
		      e2b_file_type(e->type), "path", path, "size", size, "mode",
		      (int)(e->perm & 0777), "permissions", mode, "owner", e->owner, "group",
		      e->group, "modifiedTime", when, "metadata");
	if (v && e->type == 'l')
		json_object_set_new(v, "symlinkTarget", json_string(e->link));
	if (!v)         /* a name that is not UTF-8: given as its bytes would not be JSON */
		v = json_pack("{s:s,s:s,s:s}", "name", "(not UTF-8)", "type",
			      "FILE_TYPE_UNSPECIFIED", "path", "(not UTF-8)");
	free(path);
	return v;
}

static int cmp_rel(const void *a, const void *b)
{
	return strcmp(((const struct e2b_entry *)a)->rel, ((const struct e2b_entry *)b)->rel);
}

int e2b_watch_update(struct e2b_watch *w, struct e2b_entry *next, size_t n,
		     int (*fn)(void *ctx, const char *type, const struct e2b_entry *e),
		     void *ctx)
{
	size_t i = 0, j = 0;
	int r = 0;

	if (n)
		qsort(next, n, sizeof(*next), cmp_rel);
	while (w->have && !r && (i < w->n || j < n)) {
		int c = i == w->n ? 1 : j == n ? -1 : strcmp(w->e[i].rel, next[j].rel);
		if (c < 0) {
			r = fn(ctx, "EVENT_TYPE_REMOVE", &w->e[i++]);
		} else if (c > 0) {
			r = fn(ctx, "EVENT_TYPE_CREATE", &next[j]);
			if (!r && next[j].type == 'f' && next[j].size)
				r = fn(ctx, "EVENT_TYPE_WRITE", &next[j]);
			j++;
		} else {
			const struct e2b_entry *a = &w->e[i++], *b = &next[j++];
			if (a->type != b->type) {
				r = fn(ctx, "EVENT_TYPE_REMOVE", a);
				if (!r)
					r = fn(ctx, "EVENT_TYPE_CREATE", b);
			} else if (b->type == 'f' && (a->size != b->size || a->mtime != b->mtime ||
						      a->mtime_ns != b->mtime_ns)) {
				r = fn(ctx, "EVENT_TYPE_WRITE", b);
			} else if (a->perm != b->perm || strcmp(a->owner, b->owner) ||
				   strcmp(a->group, b->group)) {
				r = fn(ctx, "EVENT_TYPE_CHMOD", b);
			}
		}
	}
	e2b_entries_free(w->e, w->n);
	w->e = next;
	w->n = n;
	w->have = true;
	return r;
}

void e2b_watch_free(struct e2b_watch *w)
{
	e2b_entries_free(w->e, w->n);
	w->e = NULL;
	w->n = 0;
	w->have = false;
}
