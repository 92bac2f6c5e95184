/* SPDX-License-Identifier: Apache-2.0 */
/* config.c - the daemon's settings: $KOSA8_HOME/config.json and the environment.
 *
 * Below every resource module (sandbox, egress, mounts, images, models): it knows the
 * daemon's home, nothing of sandboxes. The functions keep their historical sb_ names
 * until daemon.h is split into per-module headers.
 */
#include "daemon/daemon.h"

#include <stdio.h>
#include <string.h>

/* A NULL-terminated list: the comma-separated environment variable `env` first, then
 * the strings of array `key` in $KOSA8_HOME/config.json (docs/images.md, "Pulling"). */
char **sb_setting_list(const char *env, json_t *cfg, const char *key)
{
	const char *v = getenv(env);
	json_t *arr = json_object_get(cfg, key), *it;
	size_t n = 0, i, cap = (v ? strlen(v) / 2 + 1 : 0) + json_array_size(arr) + 1;
	char *copy, *save = NULL, *t, **list;

	if ((!v || !*v) && !json_array_size(arr))
		return NULL;
	list = xcalloc(cap, sizeof(*list));
	if (v && *v) {
		copy = xstrdup(v);
		for (t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
			list[n++] = xstrdup(t);
		free(copy);
	}
	json_array_foreach(arr, i, it)
		if (json_is_string(it) && json_string_length(it) && json_string_length(it) < 512)
			list[n++] = xstrdup(json_string_value(it));
	return list;
}

void sb_setting_list_free(char **list)
{
	for (size_t i = 0; list && list[i]; i++)
		free(list[i]);
	free(list);
}

/* $KOSA8_HOME/config.json, read at each pull so an edit needs no restart; {} when
 * absent or unreadable (a malformed file is logged, not fatal). */
json_t *sb_daemon_config(struct daemon *d)
{
	cleanup_free char *p = xasprintf("%s/config.json", d->home);
	cleanup_free char *t = NULL;
	json_error_t je;
	json_t *cfg;

	if (read_file(p, 1 << 20, &t, NULL))
		return json_object();
	cfg = json_loads(t, 0, &je);
	if (!json_is_object(cfg)) {
		daemon_log("ignoring %s: not a JSON object (%s)", p, je.text);
		json_decref(cfg);
		return json_object();
	}
	return cfg;
}
