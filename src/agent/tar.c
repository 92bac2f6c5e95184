/* SPDX-License-Identifier: Apache-2.0 */
/* tar.c - the archive ops' tar reader (hostile input, bounded) and header writer.
 *
 * Theory of operation (reader): bytes arrive in pieces of any size. A state machine
 * collects 512-byte header blocks, checks each one's checksum, and either reads a meta
 * record (pax 'x', GNU 'L'/'K': at most TAR_PAX_MAX bytes, kept for the next entry),
 * skips one (pax 'g'), or reports an entry and streams its data to the caller without
 * buffering it. Names are cleaned here (tar_name_clean), so a caller never sees an
 * absolute name or a `..`. Nothing here trusts a size: an announced size only says how
 * many bytes to pass on or skip, and the input simply ends early when it lies
 * (tar_finish then says "truncated").
 */
#include "agent/tar.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tar_reader_init(struct tar_reader *r)
{
	memset(r, 0, sizeof(*r));
	r->st = TAR_S_HDR;
}

void tar_reader_free(struct tar_reader *r)
{
	free(r->meta);
	r->meta = NULL;
}

int tar_name_clean(const char *in, char *out, struct k8_err *err)
{
	size_t o = 0;
	const char *p = in;

	if (*p == '/')
		return k8_err_set(err, -EPERM, "archive entry '%.200s' has an absolute name", in);
	while (*p) {
		const char *s = p;
		size_t n;

		while (*p && *p != '/')
			p++;
		n = (size_t)(p - s);
		while (*p == '/')
			p++;
		if (n == 0 || (n == 1 && s[0] == '.'))
			continue;
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return k8_err_set(err, -EPERM, "archive entry '%.200s' has a '..' component", in);
		if (o + (o ? 1 : 0) + n > TAR_NAME_MAX)
			return k8_err_set(err, -ENAMETOOLONG, "archive entry name longer than %d bytes",
					  TAR_NAME_MAX);
		if (o)
			out[o++] = '/';
		memcpy(out + o, s, n);
		o += n;
	}
	out[o] = '\0';
	if (!o && strcmp(in, ".") && strcmp(in, "./"))
		return k8_err_set(err, -EINVAL, "archive entry with an empty name");
	return 0;
}

/* An octal or base-256 numeric field. 0 or -EBADMSG. */
static int tar_num(const unsigned char *f, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] & 0x80) {
		if (f[0] != 0x80)
			return -EBADMSG; /* negative, or too large for 63 bits */
		for (i = 1; i < len; i++) {
			if (v >> 55)
				return -EBADMSG;
			v = (v << 8) | f[i];
		}
		*out = v;
		return 0;
	}
	while (i < len && (f[i] == ' ' || f[i] == '\0'))
		i++;
	for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 60)
			return -EBADMSG;
		v = (v << 3) | (uint64_t)(f[i] - '0');
	}
	for (; i < len; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return -EBADMSG;
	*out = v;
	return 0;
}

/* A NUL-terminated copy of a fixed-size string field. */
static void tar_field(const unsigned char *f, size_t len, char *out)
{
	size_t n = strnlen((const char *)f, len);

	memcpy(out, f, n);
	out[n] = '\0';
}

static int tar_checksum_ok(const unsigned char *b)
{
	uint64_t want;
	unsigned long su = 0;
	long ss = 0;

	if (tar_num(b + 148, 8, &want) < 0)
		return 0;
	for (size_t i = 0; i < TAR_BLOCK; i++) {
		unsigned char c = (i >= 148 && i < 156) ? ' ' : b[i];
		su += c;
		ss += (signed char)c;
	}
	return want == su || (long long)want == (long long)ss;
}

static int tar_dec(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!n)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > (max - (uint64_t)(s[i] - '0')) / 10)
			return -EBADMSG;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* "123.456789" or "-12.5" (pax mtime). */
static int tar_pax_time(const char *s, size_t n, int64_t *sec, uint32_t *nsec)
{
	int neg = n && s[0] == '-';
	const char *dot;
	size_t ip;
	uint64_t v;

	if (neg) {
		s++;
		n--;
	}
	dot = memchr(s, '.', n);
	ip = dot ? (size_t)(dot - s) : n;
	if (tar_dec(s, ip, (uint64_t)INT64_MAX, &v) < 0)
		return -EBADMSG;
	*sec = neg ? -(int64_t)v : (int64_t)v;
	*nsec = 0;
	if (dot) {
		uint32_t f = 0, scale = 100000000;
		for (size_t i = ip + 1; i < n; i++) {
			if (s[i] < '0' || s[i] > '9')
				return -EBADMSG;
			f += (uint32_t)(s[i] - '0') * scale;
			scale /= 10;
		}
		*nsec = neg ? 0 : f;
	}
	return 0;
}

static int tar_pax_str(const char *v, size_t n, char *out, const char *key, struct k8_err *err)
{
	if (n > TAR_NAME_MAX)
		return k8_err_set(err, -ENAMETOOLONG, "pax '%s' longer than %d bytes", key, TAR_NAME_MAX);
	if (memchr(v, '\0', n))
		return k8_err_set(err, -EBADMSG, "pax '%s' holds a NUL byte", key);
	memcpy(out, v, n);
	out[n] = '\0';
	return 0;
}

/* Records "LEN key=value\n", LEN counting the whole record. */
static int tar_pax_parse(struct tar_reader *r, struct k8_err *err)
{
	const char *b = (const char *)r->meta;
	size_t off = 0, n = r->meta_len;

	while (off < n) {
		size_t i = off, reclen = 0;
		const char *key, *eq, *val;
		size_t klen, vlen;
		uint64_t u;

		while (i < n && b[i] >= '0' && b[i] <= '9' && i - off < 8)
			reclen = reclen * 10 + (size_t)(b[i++] - '0');
		if (i == off || i >= n || b[i] != ' ' || reclen <= i - off + 1 || reclen > n - off ||
		    b[off + reclen - 1] != '\n')
			return k8_err_set(err, -EBADMSG, "malformed pax record");
		key = b + i + 1;
		eq = memchr(key, '=', (size_t)(b + off + reclen - 1 - key));
		if (!eq)
			return k8_err_set(err, -EBADMSG, "malformed pax record");
		klen = (size_t)(eq - key);
		val = eq + 1;
		vlen = (size_t)(b + off + reclen - 1 - val);
		off += reclen;
#define KEY(s) (klen == sizeof(s) - 1 && !memcmp(key, s, klen))
		if (KEY("path")) {
			if (tar_pax_str(val, vlen, r->next_name, "path", err) < 0)
				return err->code;
			r->has_name = vlen > 0;
		} else if (KEY("linkpath")) {
			if (tar_pax_str(val, vlen, r->next_link, "linkpath", err) < 0)
				return err->code;
			r->has_link = vlen > 0;
		} else if (KEY("size")) {
			if (tar_dec(val, vlen, TAR_SIZE_MAX, &u) < 0)
				return k8_err_set(err, -EBADMSG, "pax 'size' is not a number up to 2^62");
			r->next_size = u;
			r->has_size = 1;
		} else if (KEY("uid") || KEY("gid")) {
			if (tar_dec(val, vlen, UINT32_MAX, &u) < 0)
				return k8_err_set(err, -EBADMSG, "pax uid/gid out of range");
			if (key[0] == 'u') {
				r->next_uid = u;
				r->has_uid = 1;
			} else {
				r->next_gid = u;
				r->has_gid = 1;
			}
		} else if (KEY("mtime")) {
			if (tar_pax_time(val, vlen, &r->next_mtime, &r->next_nsec) < 0)
				return k8_err_set(err, -EBADMSG, "pax 'mtime' is malformed");
			r->has_mtime = 1;
		}
#undef KEY
	}
	return 0;
}

static void tar_overrides_reset(struct tar_reader *r)
{
	r->has_name = r->has_link = r->has_size = r->has_mtime = r->has_uid = r->has_gid = 0;
}

static uint64_t tar_pad(uint64_t n)
{
	return (TAR_BLOCK - n % TAR_BLOCK) % TAR_BLOCK;
}

/* A complete header block in r->blk. */
static int tar_header_block(struct tar_reader *r, const struct tar_ops *ops, void *ctx,
			    struct k8_err *err)
{
	const unsigned char *b = r->blk;
	struct tar_entry *e = &r->e;
	char raw[TAR_NAME_MAX + 1];
	uint64_t size, mode, uid, gid, mtime, maj, min;
	int type = b[156], ustar = !memcmp(b + 257, "ustar", 5), rc;
	size_t i;

	for (i = 0; i < TAR_BLOCK && !b[i]; i++)
		;
	if (i == TAR_BLOCK) {
		if (++r->zeros >= 2)
			r->st = TAR_S_DONE;
		return 0;
	}
	r->zeros = 0;
	if (!tar_checksum_ok(b))
		return k8_err_set(err, -EBADMSG, "archive header %llu has a bad checksum (not a tar "
				  "archive, or a corrupt one)", (unsigned long long)r->entries + 1);
	if (tar_num(b + 124, 12, &size) < 0 || tar_num(b + 100, 8, &mode) < 0 ||
	    tar_num(b + 108, 8, &uid) < 0 || tar_num(b + 116, 8, &gid) < 0 ||
	    tar_num(b + 136, 12, &mtime) < 0 || tar_num(b + 329, 8, &maj) < 0 ||
	    tar_num(b + 337, 8, &min) < 0)
		return k8_err_set(err, -EBADMSG, "archive header %llu has a malformed number",
				  (unsigned long long)r->entries + 1);
	if (r->has_size)
		size = r->next_size;
	if (size > TAR_SIZE_MAX)
		return k8_err_set(err, -EFBIG, "archive entry announces %llu bytes (at most 2^62)",
				  (unsigned long long)size);

	if (type == 'x' || type == 'L' || type == 'K') {
		if (size > TAR_PAX_MAX)
			return k8_err_set(err, -E2BIG, "archive meta record of %llu bytes (at most %u)",
					  (unsigned long long)size, TAR_PAX_MAX);
		if (!r->meta)
			r->meta = xmalloc(TAR_PAX_MAX + 1);
		r->meta_type = type;
		r->meta_len = 0;
		r->left = size;
		r->pad = tar_pad(size);
		r->has_size = 0; /* a pax size applies to the entry, not to the next meta record */
		r->st = TAR_S_META;
		return 0;
	}
	if (type == 'g') {
		r->left = size;
		r->pad = tar_pad(size);
		r->st = TAR_S_SKIP;
		return 0;
	}

	r->entries++;
	memset(e, 0, offsetof(struct tar_entry, type));
	if (r->has_name) {
		snprintf(raw, sizeof(raw), "%s", r->next_name);
	} else {
		char name[101], prefix[156];
		tar_field(b, 100, name);
		tar_field(b + 345, 155, prefix);
		if (ustar && prefix[0])
			snprintf(raw, sizeof(raw), "%s/%s", prefix, name);
		else
			snprintf(raw, sizeof(raw), "%s", name);
	}
	if (type == '\0' || type == '7')
		type = TAR_REG;
	if (type == TAR_REG && raw[0] && raw[strlen(raw) - 1] == '/')
		type = TAR_DIR;   /* pre-POSIX archives mark directories by the slash */
	switch (type) {
	case TAR_REG: case TAR_LINK: case TAR_SYMLINK: case TAR_CHR: case TAR_BLK: case TAR_DIR:
	case TAR_FIFO:
		break;
	default:
		return k8_err_set(err, -ENOTSUP, "archive entry '%.200s' has type '%c', which is not "
				  "supported", raw, type >= 32 && type < 127 ? type : '?');
	}
	if ((rc = tar_name_clean(raw, e->name, err)) < 0)
		return rc;
	if (type == TAR_LINK || type == TAR_SYMLINK) {
		if (r->has_link)
			snprintf(raw, sizeof(raw), "%s", r->next_link);
		else
			tar_field(b + 157, 100, raw);
		if (!raw[0])
			return k8_err_set(err, -EBADMSG, "link '%.200s' has no target", e->name);
		if (type == TAR_LINK) {
			if ((rc = tar_name_clean(raw, e->link, err)) < 0)
				return rc;
			if (!e->link[0])
				return k8_err_set(err, -EPERM, "hard link '%.200s' to the top", e->name);
		} else {
			snprintf(e->link, sizeof(e->link), "%s", raw);
		}
	}
	if (!e->name[0] && type != TAR_DIR)
		return k8_err_set(err, -EINVAL, "a non-directory entry named '.'");
	e->type = type;
	e->mode = (uint32_t)(mode & 07777);
	e->uid = r->has_uid ? r->next_uid : uid;
	e->gid = r->has_gid ? r->next_gid : gid;
	if (e->uid > UINT32_MAX - 1 || e->gid > UINT32_MAX - 1)
		return k8_err_set(err, -EBADMSG, "archive entry '%.200s' has an out-of-range owner",
				  e->name);
	e->mtime = r->has_mtime ? r->next_mtime : (int64_t)mtime;
	e->nsec = r->has_mtime ? r->next_nsec : 0;
	e->devmajor = (uint32_t)(maj & 0xfff);
	e->devminor = (uint32_t)(min & 0xfffff);
	e->size = type == TAR_REG ? size : 0;
	tar_overrides_reset(r);

	if ((rc = ops->entry(ctx, e)) < 0)
		return rc;
	r->left = size;
	r->pad = tar_pad(size);
	if (type == TAR_REG && size) {
		r->st = TAR_S_DATA;
		return 0;
	}
	if ((rc = ops->end(ctx)) < 0)
		return rc;
	r->st = size ? TAR_S_SKIP : TAR_S_HDR; /* data of a non-file entry is skipped */
	return 0;
}

static int tar_meta_done(struct tar_reader *r, struct k8_err *err)
{
	size_t n;

	if (r->meta_type == 'x')
		return tar_pax_parse(r, err);
	n = strnlen((const char *)r->meta, r->meta_len);
	if (n > TAR_NAME_MAX)
		return k8_err_set(err, -ENAMETOOLONG, "GNU long name longer than %d bytes", TAR_NAME_MAX);
	if (r->meta_type == 'L') {
		memcpy(r->next_name, r->meta, n);
		r->next_name[n] = '\0';
		r->has_name = n > 0;
	} else {
		memcpy(r->next_link, r->meta, n);
		r->next_link[n] = '\0';
		r->has_link = n > 0;
	}
	return 0;
}

int tar_feed(struct tar_reader *r, const unsigned char *p, size_t n, const struct tar_ops *ops,
	     void *ctx, struct k8_err *err)
{
	int rc = 0;

	if (r->failed)
		return k8_err_set(err, -EBADMSG, "the archive reader stopped at an earlier error");
	while (n && rc == 0) {
		size_t take;

		switch (r->st) {
		case TAR_S_DONE:
			return 0; /* anything after the end-of-archive blocks is ignored */
		case TAR_S_HDR:
			take = TAR_BLOCK - r->have;
			if (take > n)
				take = n;
			memcpy(r->blk + r->have, p, take);
			r->have += take;
			p += take;
			n -= take;
			if (r->have == TAR_BLOCK) {
				r->have = 0;
				rc = tar_header_block(r, ops, ctx, err);
			}
			break;
		case TAR_S_DATA:
			take = r->left < n ? (size_t)r->left : n;
			rc = ops->data(ctx, p, take);
			r->left -= take;
			p += take;
			n -= take;
			if (rc == 0 && !r->left) {
				rc = ops->end(ctx);
				r->st = TAR_S_PAD;
			}
			break;
		case TAR_S_META:
			take = r->left < n ? (size_t)r->left : n;
			memcpy(r->meta + r->meta_len, p, take);
			r->meta_len += take;
			r->left -= take;
			p += take;
			n -= take;
			if (!r->left) {
				rc = tar_meta_done(r, err);
				r->st = TAR_S_PAD;
			}
			break;
		case TAR_S_SKIP:
			take = r->left < n ? (size_t)r->left : n;
			r->left -= take;
			p += take;
			n -= take;
			if (!r->left)
				r->st = TAR_S_PAD;
			break;
		case TAR_S_PAD:
			take = r->pad < n ? (size_t)r->pad : n;
			r->pad -= take;
			p += take;
			n -= take;
			break;
		}
		if (r->st == TAR_S_PAD && !r->pad)
			r->st = TAR_S_HDR;
	}
	if (rc < 0) {
		r->failed = 1;
		if (!err->code)
			k8_err_set(err, rc, "extracting: %s", strerror(-rc));
	}
	return rc;
}

int tar_finish(struct tar_reader *r, struct k8_err *err)
{
	if (r->failed)
		return err->code ? err->code : -EBADMSG;
	if (r->st == TAR_S_DONE || (r->st == TAR_S_HDR && r->have == 0))
		return 0;
	if (r->st == TAR_S_PAD && !r->pad)
		return 0;
	return k8_err_set(err, -EBADMSG, "the archive is truncated (it ended inside %s)",
			  r->st == TAR_S_DATA ? "a file's data" : "a header");
}

/* ---- writer ---- */

/* value in octal into a field of len bytes (len - 1 digits, NUL); 0 when it does not fit. */
static int tar_put_oct(unsigned char *f, size_t len, uint64_t v)
{
	size_t d = len - 1;

	if (d < 22 && v >> (3 * d))
		return 0;
	f[d] = '\0';
	while (d--) {
		f[d] = (unsigned char)('0' + (v & 7));
		v >>= 3;
	}
	return 1;
}

/* Append the pax record "LEN key=value\n" at out; returns its length. */
static size_t tar_pax_rec(char *out, const char *key, const char *val)
{
	size_t body = 1 + strlen(key) + 1 + strlen(val) + 1, len = body, digits;

	for (;;) {
		char tmp[24];
		digits = (size_t)snprintf(tmp, sizeof(tmp), "%zu", len);
		if (body + digits == len)
			break;
		len = body + digits;
	}
	return (size_t)sprintf(out, "%zu %s=%s\n", len, key, val);
}

static void tar_ustar(unsigned char *h, const char *name, int type, uint32_t mode, uint64_t uid,
		      uint64_t gid, uint64_t size, uint64_t mtime, const char *link, uint32_t maj,
		      uint32_t min)
{
	unsigned sum = 0;

	memset(h, 0, TAR_BLOCK);
	memcpy(h, name, strnlen(name, 100));
	tar_put_oct(h + 100, 8, mode);
	tar_put_oct(h + 108, 8, uid);
	tar_put_oct(h + 116, 8, gid);
	tar_put_oct(h + 124, 12, size);
	tar_put_oct(h + 136, 12, mtime);
	h[156] = (unsigned char)type;
	if (link)
		memcpy(h + 157, link, strnlen(link, 100));
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	tar_put_oct(h + 329, 8, maj);
	tar_put_oct(h + 337, 8, min);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < TAR_BLOCK; i++)
		sum += h[i];
	tar_put_oct(h + 148, 7, sum);
	h[155] = ' ';
}

size_t tar_header(const struct tar_entry *e, unsigned char *out)
{
	char name[TAR_NAME_MAX + 2], num[32];
	char *pax = (char *)out + TAR_BLOCK;     /* records go after the pax header block */
	size_t plen = 0, off;
	unsigned char probe[12];
	uint64_t mtime = e->mtime < 0 ? 0 : (uint64_t)e->mtime;
	int is_link = e->type == TAR_LINK || e->type == TAR_SYMLINK;

	snprintf(name, sizeof(name), "%s%s", e->name, e->type == TAR_DIR ? "/" : "");
	if (strlen(name) > 100)
		plen += tar_pax_rec(pax + plen, "path", name);
	if (is_link && strlen(e->link) > 100)
		plen += tar_pax_rec(pax + plen, "linkpath", e->link);
	if (!tar_put_oct(probe, 12, e->size)) {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)e->size);
		plen += tar_pax_rec(pax + plen, "size", num);
	}
	if (!tar_put_oct(probe, 8, e->uid)) {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)e->uid);
		plen += tar_pax_rec(pax + plen, "uid", num);
	}
	if (!tar_put_oct(probe, 8, e->gid)) {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)e->gid);
		plen += tar_pax_rec(pax + plen, "gid", num);
	}
	if (!tar_put_oct(probe, 12, mtime)) {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)mtime);
		plen += tar_pax_rec(pax + plen, "mtime", num);
	}
	off = 0;
	if (plen) {
		size_t padded = plen + (TAR_BLOCK - plen % TAR_BLOCK) % TAR_BLOCK;
		memset(pax + plen, 0, padded - plen);
		tar_ustar(out, "PaxHeader", 'x', 0644, 0, 0, plen, mtime, NULL, 0, 0);
		off = TAR_BLOCK + padded;
	}
	tar_ustar(out + off, name, e->type, e->mode, e->uid, e->gid, e->size, mtime,
		  is_link ? e->link : NULL, e->devmajor, e->devminor);
	return off + TAR_BLOCK;
}
