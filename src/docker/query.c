/* SPDX-License-Identifier: Apache-2.0 */
/* query.c - API version prefix and moby's query-value parsing (query.h). */
#include "docker/query.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Parse 1..4 decimal digits at *p; -1 when there are none or too many. */
static int dq_small_num(const char **p)
{
	int v = 0, n = 0;

	while (isdigit((unsigned char)**p)) {
		if (++n > 4)
			return -1;
		v = v * 10 + (**p - '0');
		(*p)++;
	}
	return n ? v : -1;
}

int dq_split_path(const char *path, struct dq_path *out, char *msg, size_t msgsz)
{
	const char *p;
	int major, minor;

	if (msgsz)
		msg[0] = '\0';
	out->major = out->minor = 0;
	out->rest = path;
	/* moby's router matches /v{version:[0-9.]+}/...; anything else is a bare path. */
	if (path[0] != '/' || path[1] != 'v' || !isdigit((unsigned char)path[2]))
		return 0;
	p = path + 2;
	major = dq_small_num(&p);
	minor = -1;
	if (*p == '.') {
		p++;
		minor = dq_small_num(&p);
	}
	if (major < 0 || minor < 0 || (*p != '/' && *p != '\0')) {
		/* "/v1/x", "/v1.x/": moby's route does not match, so a 404 there; we say why. */
		snprintf(msg, msgsz, "malformed API version in path '%.64s'", path);
		return -EINVAL;
	}
	if (major != 1 || minor < DQ_MIN_MINOR) {
		snprintf(msg, msgsz, "client version %d.%d is too old. Minimum supported API "
			 "version is 1.%d, please upgrade your client to a newer version",
			 major, minor, DQ_MIN_MINOR);
		if (major > 1)
			snprintf(msg, msgsz, "client version %d.%d is too new. Maximum supported "
				 "API version is 1.%d", major, minor, DQ_MAX_MINOR);
		return -EINVAL;
	}
	if (minor > DQ_MAX_MINOR) {
		snprintf(msg, msgsz, "client version %d.%d is too new. Maximum supported API "
			 "version is 1.%d", major, minor, DQ_MAX_MINOR);
		return -EINVAL;
	}
	out->major = major;
	out->minor = minor;
	out->rest = *p ? p : "/";
	return 0;
}

bool dq_bool(const char *v)
{
	static const char *const no[] = { "", "0", "no", "false", "none" };
	size_t n;

	if (!v)
		return false;
	while (isspace((unsigned char)*v))
		v++;
	n = strlen(v);
	while (n && isspace((unsigned char)v[n - 1]))
		n--;
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (strlen(no[i]) == n && !strncasecmp(v, no[i], n))
			return false;
	return true;
}

bool dq_bool_default(const char *v, bool def)
{
	if (!v || !*v)
		return def;
	return dq_bool(v);
}

int dq_uint(const char *v, unsigned long long max, unsigned long long *out)
{
	unsigned long long x = 0;

	if (!v || !*v)
		return -EINVAL;
	for (; *v; v++) {
		if (!isdigit((unsigned char)*v))
			return -EINVAL;
		unsigned d = (unsigned)(*v - '0');
		if (x > max / 10 || d > max - x * 10)
			return -EINVAL;
		x = x * 10 + d;
	}
	*out = x;
	return 0;
}

/* The last segment of an image route ("/images/NAME/json"); NAME may hold '/'. */
static bool dq_image_action(const char *s)
{
	static const char *const actions[] = { "json", "tag", "push", "history", "get" };

	for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
		if (!strcmp(s, actions[i]))
			return true;
	return false;
}

int dq_image_segments(char *seg, size_t stride, int *n, char *msg, size_t msgsz)
{
	char name[4096];
	int last = *n - 1, end;
	size_t o = 0;

	if (*n < 3 || strcmp(seg, "images"))
		return 0;
	end = dq_image_action(seg + (size_t)last * stride) ? last : *n;
	if (end <= 2)
		return 0;
	for (int i = 1; i < end; i++) {
		const char *s = seg + (size_t)i * stride;
		size_t l = strlen(s);

		if (o + l + (i > 1) >= stride || o + l + 1 >= sizeof(name)) {
			snprintf(msg, msgsz, "image name longer than %zu bytes", stride - 1);
			return -EINVAL;
		}
		if (i > 1)
			name[o++] = '/';
		memcpy(name + o, s, l);
		o += l;
	}
	name[o] = '\0';
	memcpy(seg + stride, name, o + 1);
	if (end == last) {
		memmove(seg + 2 * stride, seg + (size_t)last * stride,
			strlen(seg + (size_t)last * stride) + 1);
		*n = 3;
	} else {
		*n = 2;
	}
	return 0;
}
