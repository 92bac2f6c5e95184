/* SPDX-License-Identifier: Apache-2.0 */
/* stream.c - multiplexed stream framing, container path-stat header, FileMode (stream.h).
 *
 * The decoder is a two-state machine: collect an 8-byte header, then pass `left` payload
 * bytes through. It never holds payload, so a hostile peer announcing a 4 GiB frame costs
 * nothing but is refused when above max_frame. */
#include "docker/stream.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

void ds_header(uint8_t out[DS_HDR_LEN], enum ds_type type, uint32_t len)
{
	out[0] = (uint8_t)type;
	out[1] = out[2] = out[3] = 0;
	out[4] = (uint8_t)(len >> 24);
	out[5] = (uint8_t)(len >> 16);
	out[6] = (uint8_t)(len >> 8);
	out[7] = (uint8_t)len;
}

size_t ds_encode(uint8_t *out, enum ds_type type, const void *data, uint32_t len)
{
	ds_header(out, type, len);
	if (len)
		memcpy(out + DS_HDR_LEN, data, len);
	return DS_HDR_LEN + (size_t)len;
}

void ds_decoder_init(struct ds_decoder *d, uint32_t max_frame, unsigned accept)
{
	memset(d, 0, sizeof(*d));
	d->max_frame = max_frame;
	d->accept = accept ? accept : (1u << DS_STDOUT) | (1u << DS_STDERR);
}

bool ds_decoder_idle(const struct ds_decoder *d)
{
	return !d->failed && d->hdr_have == 0 && d->left == 0;
}

int ds_decode(struct ds_decoder *d, const uint8_t *p, size_t n, ds_payload_fn fn, void *ctx,
	      struct k8_err *err)
{
	int rc;

	if (d->failed)
		return k8_err_set(err, -EBADMSG, "stream: input after a framing error");
	while (n) {
		if (d->left == 0) {
			size_t take = DS_HDR_LEN - d->hdr_have;
			if (take > n)
				take = n;
			memcpy(d->hdr + d->hdr_have, p, take);
			d->hdr_have += take;
			p += take;
			n -= take;
			if (d->hdr_have < DS_HDR_LEN)
				break;
			d->hdr_have = 0;
			uint32_t len = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16 |
				       (uint32_t)d->hdr[6] << 8 | d->hdr[7];
			if (d->hdr[0] > 31 || !(d->accept & (1u << d->hdr[0])) || d->hdr[1] ||
			    d->hdr[2] || d->hdr[3] || len > d->max_frame) {
				d->failed = true;
				return k8_err_set(err, -EBADMSG, "stream: bad frame header (type %u, "
						  "length %u, limit %u)", d->hdr[0], len, d->max_frame);
			}
			d->type = (enum ds_type)d->hdr[0];
			d->left = len;
			if (len == 0 && (rc = fn(ctx, d->type, p, 0, true)) < 0)
				return rc;
			continue;
		}
		size_t take = n < d->left ? n : d->left;
		d->left -= (uint32_t)take;
		if ((rc = fn(ctx, d->type, p, take, d->left == 0)) < 0)
			return rc;
		p += take;
		n -= take;
	}
	return 0;
}

uint32_t ds_gomode_from_posix(mode_t m)
{
	uint32_t g = m & GO_MODE_PERM;

	switch (m & S_IFMT) {
	case S_IFBLK: g |= GO_MODE_DEVICE; break;
	case S_IFCHR: g |= GO_MODE_DEVICE | GO_MODE_CHARDEVICE; break;
	case S_IFDIR: g |= GO_MODE_DIR; break;
	case S_IFIFO: g |= GO_MODE_NAMEDPIPE; break;
	case S_IFLNK: g |= GO_MODE_SYMLINK; break;
	case S_IFSOCK: g |= GO_MODE_SOCKET; break;
	default: break;
	}
	if (m & S_ISUID)
		g |= GO_MODE_SETUID;
	if (m & S_ISGID)
		g |= GO_MODE_SETGID;
	if (m & S_ISVTX)
		g |= GO_MODE_STICKY;
	return g;
}

mode_t ds_posix_from_gomode(uint32_t g)
{
	mode_t m = g & GO_MODE_PERM;

	if (g & GO_MODE_DIR)
		m |= S_IFDIR;
	else if (g & GO_MODE_SYMLINK)
		m |= S_IFLNK;
	else if ((g & GO_MODE_DEVICE) && (g & GO_MODE_CHARDEVICE))
		m |= S_IFCHR;
	else if (g & GO_MODE_DEVICE)
		m |= S_IFBLK;
	else if (g & GO_MODE_NAMEDPIPE)
		m |= S_IFIFO;
	else if (g & GO_MODE_SOCKET)
		m |= S_IFSOCK;
	else
		m |= S_IFREG;
	if (g & GO_MODE_SETUID)
		m |= S_ISUID;
	if (g & GO_MODE_SETGID)
		m |= S_ISGID;
	if (g & GO_MODE_STICKY)
		m |= S_ISVTX;
	return m;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t ds_b64_encode(const uint8_t *in, size_t n, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = '\0';
	return o;
}

static int b64_val(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;
	return p ? (int)(p - b64) : -1;
}

ssize_t ds_b64_decode(const char *in, size_t n, uint8_t *out)
{
	size_t o = 0;

	if (n % 4)
		return -EINVAL;
	for (size_t i = 0; i < n; i += 4) {
		int v[4], pad = 0;
		for (int k = 0; k < 4; k++) {
			if (in[i + k] == '=' && i + 4 == n && k >= 2) {
				v[k] = 0;
				pad++;
				continue;
			}
			if (pad || (v[k] = b64_val(in[i + k])) < 0)
				return -EINVAL;    /* a letter after '=' or outside the alphabet */
		}
		uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
			     (uint32_t)v[3];
		out[o++] = (uint8_t)(x >> 16);
		if (pad < 2)
			out[o++] = (uint8_t)(x >> 8);
		if (pad < 1)
			out[o++] = (uint8_t)x;
	}
	return (ssize_t)o;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

void ds_rfc3339(int64_t sec, int32_t nsec, char out[40])
{
	int64_t days = sec >= 0 ? sec / 86400 : -((-sec + 86399) / 86400);
	int64_t rem = sec - days * 86400;
	/* civil_from_days */
	int64_t z = days + 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	unsigned doe = (unsigned)(z - era * 146097);
	unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t y = (int64_t)yoe + era * 400;
	unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	unsigned mp = (5 * doy + 2) / 153;
	unsigned d = doy - (153 * mp + 2) / 5 + 1;
	unsigned m = mp < 10 ? mp + 3 : mp - 9;
	int n;

	y += m <= 2;
	if (y < 0 || y > 9999)      /* Go refuses to marshal such a time; keep the format */
		y = y < 0 ? 0 : 9999;
	n = snprintf(out, 40, "%04lld-%02u-%02uT%02lld:%02lld:%02lld", (long long)y, m, d,
		     (long long)(rem / 3600), (long long)(rem / 60 % 60), (long long)(rem % 60));
	if (nsec > 0 && nsec < 1000000000) {
		char frac[11];
		snprintf(frac, sizeof(frac), ".%09d", nsec);
		for (int k = 9; k > 0 && frac[k] == '0'; k--)
			frac[k] = '\0';
		n += snprintf(out + n, (size_t)(40 - n), "%s", frac);
	}
	snprintf(out + n, (size_t)(40 - n), "Z");
}

/* Exactly `n` digits at *s into *v. */
static int digits(const char **s, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++, (*s)++) {
		if (!isdigit((unsigned char)**s))
			return -EINVAL;
		*v = *v * 10 + (**s - '0');
	}
	return 0;
}

int ds_parse_rfc3339(const char *s, int64_t *sec, int32_t *nsec)
{
	static const unsigned mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int y, mo, d, h, mi, se, oh = 0, om = 0, sign = 0;
	int32_t ns = 0;

	if (digits(&s, 4, &y) || *s++ != '-' || digits(&s, 2, &mo) || *s++ != '-' ||
	    digits(&s, 2, &d) || (*s != 'T' && *s != 't') || !*s++ || digits(&s, 2, &h) ||
	    *s++ != ':' || digits(&s, 2, &mi) || *s++ != ':' || digits(&s, 2, &se))
		return -EINVAL;
	if (*s == '.') {
		int k = 0;
		s++;
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		for (; isdigit((unsigned char)*s); s++, k++)
			if (k < 9)
				ns = ns * 10 + (*s - '0');
		for (; k < 9; k++)
			ns *= 10;
	}
	if (*s == 'Z' || *s == 'z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		sign = *s++ == '+' ? 1 : -1;
		if (digits(&s, 2, &oh) || *s++ != ':' || digits(&s, 2, &om) || oh > 23 || om > 59)
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	if (*s || mo < 1 || mo > 12 || d < 1 || (unsigned)d > mdays[mo - 1] || h > 23 ||
	    mi > 59 || se > 60)
		return -EINVAL;
	if (mo == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
		return -EINVAL;
	*sec = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + se -
	       sign * (oh * 3600 + om * 60);
	*nsec = ns;
	return 0;
}

char *ds_path_stat_encode(const struct ds_path_stat *st)
{
	char when[40];
	const char *name = st->name ? st->name : "", *link = st->link_target ? st->link_target : "";

	if (strlen(name) > DS_STAT_NAME_MAX || strlen(link) > DS_STAT_NAME_MAX)
		return NULL;
	ds_rfc3339(st->mtime_sec, st->mtime_nsec, when);
	json_t *o = json_pack("{s:s, s:I, s:I, s:s, s:s}", "name", name, "size",
			      (json_int_t)st->size, "mode", (json_int_t)st->mode, "mtime", when,
			      "linkTarget", link);
	if (!o)
		return NULL;
	char *js = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!js)
		return NULL;
	size_t n = strlen(js);
	char *out = malloc(4 * ((n + 2) / 3) + 1);
	if (out)
		ds_b64_encode((const uint8_t *)js, n, out);
	free(js);
	return out;
}

void ds_path_stat_free(struct ds_path_stat *st)
{
	if (!st)
		return;
	free(st->name);
	free(st->link_target);
	st->name = st->link_target = NULL;
}

int ds_path_stat_decode(const char *hdr, size_t n, struct ds_path_stat *st, struct k8_err *err)
{
	json_error_t jerr;
	const json_t *v;

	memset(st, 0, sizeof(*st));
	if (n > DS_STAT_HDR_MAX)
		return k8_err_set(err, -E2BIG, "path stat header longer than %d bytes",
				  DS_STAT_HDR_MAX);
	cleanup_free uint8_t *raw = malloc(n / 4 * 3 + 1);
	if (!raw)
		return -ENOMEM;
	ssize_t len = ds_b64_decode(hdr, n, raw);
	if (len < 0)
		return k8_err_set(err, -EBADMSG, "path stat header is not valid base64");
	json_t *o = json_loadb((const char *)raw, (size_t)len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(o)) {
		json_decref(o);
		return k8_err_set(err, -EBADMSG, "path stat header is not a JSON object");
	}
	int rc = -EBADMSG;
	const char *what = "name";
	v = json_object_get(o, "name");
	if (!json_is_string(v) || json_string_length(v) > DS_STAT_NAME_MAX ||
	    strlen(json_string_value(v)) != json_string_length(v))
		goto out;
	st->name = strdup(json_string_value(v));
	what = "size";
	v = json_object_get(o, "size");
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		goto out;
	st->size = json_integer_value(v);
	what = "mode";
	v = json_object_get(o, "mode");
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > (json_int_t)UINT32_MAX)
		goto out;
	st->mode = (uint32_t)json_integer_value(v);
	what = "mtime";
	v = json_object_get(o, "mtime");
	if (!json_is_string(v) || ds_parse_rfc3339(json_string_value(v), &st->mtime_sec,
						     &st->mtime_nsec))
		goto out;
	what = "linkTarget";
	v = json_object_get(o, "linkTarget");
	if (v && !json_is_string(v))
		goto out;
	if (v && (json_string_length(v) > DS_STAT_NAME_MAX ||
		  strlen(json_string_value(v)) != json_string_length(v)))
		goto out;
	st->link_target = strdup(v ? json_string_value(v) : "");
	rc = (st->name && st->link_target) ? 0 : -ENOMEM;
	what = NULL;
out:
	json_decref(o);
	if (rc) {
		ds_path_stat_free(st);
		if (what)
			return k8_err_set(err, rc, "path stat header: missing or bad \"%s\"", what);
	}
	return rc;
}

int ds_registry_auth(const char *hdr, char *basic, size_t len, struct k8_err *err)
{
	size_t n = strlen(hdr), i;
	const char *u, *p;
	char *std;
	uint8_t *raw;
	ssize_t got;
	json_t *o;
	int r = 0;

	basic[0] = '\0';
	if (n > DS_REGISTRY_AUTH_MAX)
		return k8_err_set(err, -EINVAL, "X-Registry-Auth is longer than %d bytes",
				  DS_REGISTRY_AUTH_MAX);
	std = xmalloc(n + 4);
	for (i = 0; i < n; i++)
		std[i] = hdr[i] == '-' ? '+' : hdr[i] == '_' ? '/' : hdr[i];
	while (i % 4)
		std[i++] = '=';
	raw = xmalloc(i / 4 * 3 + 1);
	got = ds_b64_decode(std, i, raw);
	explicit_bzero(std, i);
	free(std);
	o = got < 0 ? NULL : json_loadb((const char *)raw, (size_t)got, 0, NULL);
	if (got > 0)
		explicit_bzero(raw, (size_t)got);
	free(raw);
	if (!json_is_object(o)) {
		json_decref(o);
		return k8_err_set(err, -EINVAL, "X-Registry-Auth is not base64 of a JSON object");
	}
	u = json_string_value(json_object_get(o, "username"));
	p = json_string_value(json_object_get(o, "password"));
	if (u && *u && p) {
		if (strchr(u, ':'))
			r = k8_err_set(err, -EINVAL, "X-Registry-Auth: a username has no ':'");
		else if ((size_t)snprintf(basic, len, "%s:%s", u, p) >= len)
			r = k8_err_set(err, -EINVAL, "X-Registry-Auth: credentials too long");
		if (r)
			explicit_bzero(basic, len);
	}
	if (p)
		explicit_bzero((char *)p, strlen(p));
	json_decref(o);
	return r;
}
