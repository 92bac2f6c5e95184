/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.c - the daemon context's helpers: its settings ($KOSA8_HOME/config.json and the
 * environment variables that override its keys, docs/design.md "Settings") and its
 * audit records (daemon_audit). */
#include "daemon/audit.h"
#include "daemon/daemon.h"

#include <stdlib.h>
#include <string.h>

char **daemon_setting_list(const char *env, json_t *cfg, const char *key)
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

void daemon_setting_list_free(char **list)
{
	for (size_t i = 0; list && list[i]; i++)
		free(list[i]);
	free(list);
}

void *daemon_state(struct daemon *d, void **slot, void *(*make)(struct daemon *d))
{
	void *v = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (v)
		return v;
	pthread_mutex_lock(&d->lock);
	v = *slot;
	if (!v) {
		v = make(d);
		__atomic_store_n(slot, v, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&d->lock);
	return v;
}

/* Read at each use so an edit needs no restart; a malformed file is logged, not fatal. */
json_t *daemon_config(struct daemon *d)
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

int daemon_tcg_tb_mib(struct daemon *d, json_t *cfg)
{
	json_t *own = cfg ? NULL : daemon_config(d);
	json_t *v = json_object_get(cfg ? cfg : own, "tcg_tb_mib");
	int mib = K8_TCG_TB_MIB_DEFAULT;

	if (json_is_integer(v) && json_integer_value(v) >= 16 && json_integer_value(v) <= 1024)
		mib = (int)json_integer_value(v);
	else if (v)
		daemon_log("config.json \"tcg_tb_mib\" must be a whole number of MiB from 16 to "
			   "1024; using %d", mib);
	json_decref(own);
	return mib;
}

struct vm_machine daemon_vm_machine(struct daemon *d, json_t *cfg)
{
	json_t *own = cfg ? NULL : daemon_config(d);
	json_t *v = json_object_get(cfg ? cfg : own, "free_page_reporting");
	json_t *rtc = json_object_get(cfg ? cfg : own, "rtc");
	struct vm_machine m = { .balloon = true, .rtc = true };

	if (json_is_boolean(v))
		m.balloon = json_is_true(v);
	else if (v)
		daemon_log("config.json \"free_page_reporting\" must be true or false; using true");
	/* The RTC costs a boot nothing, its absence about a second (vm.h): "rtc": false
	 * boots the machine of before (tests of older checkpoints use it). */
	if (json_is_boolean(rtc))
		m.rtc = json_is_true(rtc);
	else if (rtc)
		daemon_log("config.json \"rtc\" must be true or false; using true");
	json_decref(own);
	return m;
}

bool daemon_memfile(struct daemon *d, json_t *cfg)
{
	json_t *own = cfg ? NULL : daemon_config(d);
	const char *v = json_string_value(json_object_get(cfg ? cfg : own, "checkpoint_memory"));
	bool file = true;

	if (v && !strcmp(v, "stream"))
		file = false;
	else if (json_object_get(cfg ? cfg : own, "checkpoint_memory") && (!v || strcmp(v, "file")))
		daemon_log("config.json \"checkpoint_memory\" must be \"file\" or \"stream\"; "
			   "using \"file\"");
	json_decref(own);
	return file;
}

/* Offline: the flag, the environment or config.json (daemon.h). */
bool daemon_offline(struct daemon *d, json_t *cfg)
{
	const char *off = getenv("KOSA8_OFFLINE");
	json_t *own = cfg ? NULL : daemon_config(d);
	bool r = d->offline || (off && *off && strcmp(off, "0")) ||
		 json_is_true(json_object_get(cfg ? cfg : own, "offline"));

	json_decref(own);
	return r;
}

/* Never fails the caller: an audit failure is logged loudly. Steals `details`. */
void daemon_audit(struct daemon *d, const char *action, const char *sandbox, json_t *details)
{
	struct k8_err err = { 0 };

	if (d && d->audit && audit_append(d->audit, action, sandbox, details, &err) < 0)
		daemon_log("AUDIT FAILURE (%s): %s", action, err.msg);
	json_decref(details);
}

/* config.json "audit": {"segment_bytes", "guest_per_minute", "guest_burst",
 * "guest_fold_seconds"} (docs/audit.md); read once at start. Out-of-range values are
 * logged and the default kept. */
void daemon_audit_settings(struct daemon *d)
{
	static const struct rate_limit def = AUDIT_RATE_DEFAULT;
	json_t *cfg = daemon_config(d), *o = json_object_get(cfg, "audit"), *v;
	static const struct {
		const char *key;
		json_int_t min, max;
	} keys[] = {
		{ "segment_bytes", AUDIT_SEGMENT_MIN, (json_int_t)1 << 40 },
		{ "guest_per_minute", 0, 1000000 },
		{ "guest_burst", 1, 1000000 },
		{ "guest_fold_seconds", 1, 86400 },
	};
	json_int_t val[4] = { (json_int_t)AUDIT_SEGMENT_DEFAULT, def.per_minute, def.burst,
			      def.fold_s };

	for (size_t i = 0; json_is_object(o) && i < ARRAY_SIZE(keys); i++) {
		v = json_object_get(o, keys[i].key);
		if (!v)
			continue;
		if (json_is_integer(v) && json_integer_value(v) >= keys[i].min &&
		    json_integer_value(v) <= keys[i].max)
			val[i] = json_integer_value(v);
		else
			daemon_log("config.json: audit.%s must be an integer from %lld to %lld; "
				   "using %lld", keys[i].key, (long long)keys[i].min,
				   (long long)keys[i].max, (long long)val[i]);
	}
	json_decref(cfg);
	audit_set_segment_bytes(d->audit, (uint64_t)val[0]);
	d->guest_audit.per_minute = (uint32_t)val[1];
	d->guest_audit.burst = (uint32_t)val[2];
	d->guest_audit.fold_s = (uint32_t)val[3];
}
