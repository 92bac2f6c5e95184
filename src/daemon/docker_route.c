/* SPDX-License-Identifier: Apache-2.0 */
/* docker_route.c - docker.sock's path rules and Docker's image names (docker_route.h).
 *
 * Pure, like api_route.c: the unit tests and fuzz_api drive it with hostile paths.
 */
#include "daemon/docker_route.h"
#include "docker/query.h"

#include <stdio.h>
#include <string.h>

/* The last segment of an image route ("/images/NAME/json"); NAME may hold '/'. */
static bool docker_image_action(const char *s)
{
	static const char *const actions[] = { "json", "tag", "push", "history", "get" };
	for (size_t i = 0; i < ARRAY_SIZE(actions); i++)
		if (!strcmp(s, actions[i]))
			return true;
	return false;
}

int docker_api_split(const char *url, struct api_path *p, struct k8_err *err)
{
	struct dq_path dp;
	char msg[256], name[API_SEG_LEN];
	int r, last, end;
	size_t o = 0;

	if (dq_split_path(url, &dp, msg, sizeof(msg)))
		return k8_err_set(err, -EINVAL, "%s", msg);
	r = api_path_split(dp.rest, p, err);
	if (r || p->n < 3 || strcmp(p->seg[0], "images"))
		return r;
	/* The docker CLI sends "/images/127.0.0.1:5000/py:1/json" unescaped: join the name. */
	last = p->n - 1;
	end = docker_image_action(p->seg[last]) ? last : p->n;
	if (end <= 2)
		return 0;
	for (int i = 1; i < end; i++) {
		size_t l = strlen(p->seg[i]);
		if (o + l + (i > 1) >= sizeof(name))
			return k8_err_set(err, -EINVAL, "image name longer than %d bytes",
					  API_SEG_LEN - 1);
		if (i > 1)
			name[o++] = '/';
		memcpy(name + o, p->seg[i], l);
		o += l;
	}
	name[o] = '\0';
	memcpy(p->seg[1], name, o + 1);
	if (end == last) {
		memmove(p->seg[2], p->seg[last], strlen(p->seg[last]) + 1);
		p->n = 3;
	} else {
		p->n = 2;
	}
	return 0;
}

void docker_familiar(const char *ref, char *out, size_t len)
{
	const char *s = ref;

	if (!strncmp(s, "docker.io/library/", 18) && !strchr(s + 18, '/'))
		s += 18;
	else if (!strncmp(s, "docker.io/", 10))
		s += 10;
	snprintf(out, len, "%s", s);
}
