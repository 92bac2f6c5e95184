/* SPDX-License-Identifier: Apache-2.0 */
/* idle.c - the idle pause: a sandbox nobody has used for its idle time is paused to disk.
 *
 * Theory of operation. Each sandbox has an idle time: its own (`--idle-pause` at create,
 * sandbox.json "idle_pause_s") or the daemon's (config.json "idle_pause", read every few
 * seconds, off unless set). Use is any API request that names the sandbox and holds it
 * (record.c: sb_get .. sb_put, the time of the sb_put is the last use), except inspect,
 * which only looks, and `sandbox ls`, which names none; a request still in progress (an
 * exec's stream, a pull) holds it, so it is never idle meanwhile. Once a running sandbox
 * has gone its idle time without use, the guest is asked how many containers still run
 * (the agent's "stat"): a running container is a job, and counts as use (the next look is
 * one idle time later). Otherwise the sandbox is paused to disk (checkpoint.c,
 * sb_pause_idle), which checks again with the busy token held, so a request that arrived
 * meanwhile wins: the request resumes nothing and runs on the VM as it was. Any later
 * use resumes by itself (sb_ensure_running). A sandbox paused in memory by its user is
 * left as it is. One thread, waking once a second, does it all; the check under the
 * table's lock is a few comparisons per sandbox, so hundreds cost nothing.
 */
#include "daemon/idle.h"
#include "daemon/checkpoint.h"
#include "daemon/daemon.h"
#include "daemon/record.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IDLE_TICK_US 1000000
#define IDLE_CONFIG_EVERY_NS 5000000000ull
#define IDLE_STAT_TIMEOUT_MS 5000

void idle_read_config(struct daemon *d)
{
	static char bad_seen[64];
	static struct timespec seen_mtime;
	static off_t seen_size = -1;
	cleanup_free char *path = xasprintf("%s/config.json", d->home);
	struct stat st;
	json_t *cfg, *v;
	uint64_t secs = 0;
	char buf[64] = "";

	/* Read again only when it changed (a bad file would be logged every time). */
	if (stat(path, &st) < 0)
		memset(&st, 0, sizeof(st));
	if (seen_size == st.st_size && seen_mtime.tv_sec == st.st_mtim.tv_sec &&
	    seen_mtime.tv_nsec == st.st_mtim.tv_nsec)
		return;
	seen_size = st.st_size;
	seen_mtime = st.st_mtim;
	cfg = daemon_config(d);
	v = json_object_get(cfg, "idle_pause");

	if (json_is_string(v))
		snprintf(buf, sizeof(buf), "%s", json_string_value(v));
	else if (json_is_integer(v) && json_integer_value(v) >= 0)
		snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
	else if (v && !json_is_null(v) && !json_is_false(v))
		snprintf(buf, sizeof(buf), "?");
	if (buf[0] && k8_duration_parse(buf, K8_IDLE_PAUSE_MAX_S, &secs) < 0) {
		if (strcmp(bad_seen, buf))      /* said once, not every few seconds */
			daemon_log("WARNING: config.json \"idle_pause\" '%s' is not a duration of "
				   "at most 30 days (e.g. \"15m\", \"off\"); idle pause is off", buf);
		snprintf(bad_seen, sizeof(bad_seen), "%s", buf);
		secs = 0;
	}
	json_decref(cfg);
	__atomic_store_n(&d->idle_pause_s, (int)secs, __ATOMIC_RELAXED);
}

/* The sandbox's idle time in ns, 0: never. Caller holds sb->lock. */
static uint64_t idle_after_ns(struct sandbox *sb)
{
	int s = sb->idle_pause_s >= 0 ? sb->idle_pause_s
				      : __atomic_load_n(&sb->d->idle_pause_s, __ATOMIC_RELAXED);

	return (uint64_t)s * 1000000000ull;
}

/* Idle now? Caller holds sb->lock; `self`: references the caller holds. */
static bool idle_due(struct sandbox *sb, int self, uint64_t now)
{
	uint64_t after = idle_after_ns(sb);

	return after && !sb->d->stopping && sb->state == SB_RUNNING && !sb->paused &&
	       sb->users <= self && now - sb->last_use_ns >= after;
}

/* sb_pause_idle's last look, with the busy token: the idle thread holds one reference. */
static bool idle_still(struct sandbox *sb)
{
	return idle_due(sb, 1, now_mono_ns());
}

/* Containers still running in the guest, or -1 if it does not answer. */
static int idle_running(struct sandbox *sb)
{
	struct k8_err err = { 0 };
	json_t *resp = NULL;
	int n = -1;

	if (sb_wait_connected(sb, &err) == 0 &&     /* a rewind's init first */
	    link_request(&sb->link, json_pack("{s:s}", "op", "stat"), IDLE_STAT_TIMEOUT_MS,
			 &resp, NULL, &err) == 0) {
		json_t *r = json_object_get(resp, "running");
		n = json_is_integer(r) && json_integer_value(r) >= 0 ? (int)json_integer_value(r)
								   : -1;
	}
	json_decref(resp);
	return n;
}

static void idle_try(struct daemon *d, const char *name)
{
	struct k8_err err = { 0 };
	struct sandbox *sb = sb_get(d, name, &err);
	int running, r;

	if (!sb)
		return;
	running = idle_running(sb);
	if (running != 0) {
		/* A job runs (or the guest did not say): count it as use, look again one idle
		 * time later. A guest that does not answer is the next user's to find. */
		pthread_mutex_lock(&sb->lock);
		sb->last_use_ns = now_mono_ns();
		pthread_mutex_unlock(&sb->lock);
		sb_put_peek(d, sb);
		return;
	}
	r = sb_pause_idle(d, sb, idle_still, &err);
	if (r == 1) {
		daemon_log("sandbox %s: idle, paused to disk", sb->name);
	} else if (r < 0) {
		daemon_log("sandbox %s: idle, but the pause failed: %s", sb->name, err.msg);
		daemon_audit(d, "sandbox.pause.failed", sb->name,
			     json_pack("{s:s,s:s}", "by", "idle", "error", err.msg));
		pthread_mutex_lock(&sb->lock);
		sb->last_use_ns = now_mono_ns();        /* try again one idle time later */
		pthread_mutex_unlock(&sb->lock);
	}
	sb_put_peek(d, sb);
}

static void *idle_loop(void *arg)
{
	struct daemon *d = arg;
	uint64_t cfg_at = now_mono_ns();

	while (!d->stopping) {
		char (*names)[K8_NAME_MAX + 1] = NULL;
		size_t n = 0, cap = 0;
		uint64_t now;

		usleep(IDLE_TICK_US);
		now = now_mono_ns();
		if (now - cfg_at >= IDLE_CONFIG_EVERY_NS) {
			idle_read_config(d);
			cfg_at = now;
		}
		pthread_mutex_lock(&d->lock);
		for (struct sandbox *sb = d->sandboxes; sb; sb = sb->next) {
			bool due;
			/* A sandbox whose lock is held is being worked on: not idle now. Waiting
			 * for it here would hold the table lock, and with it every request that
			 * looks a sandbox up, for as long (a record's fsync, a QEMU's end). */
			if (pthread_mutex_trylock(&sb->lock))
				continue;
			due = !sb->busy && idle_due(sb, 0, now);
			pthread_mutex_unlock(&sb->lock);
			if (!due)
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 8;
				names = realloc(names, cap * sizeof(*names));
				if (!names)
					abort();
			}
			snprintf(names[n++], sizeof(names[0]), "%s", sb->name);
		}
		pthread_mutex_unlock(&d->lock);
		for (size_t i = 0; i < n && !d->stopping; i++)
			idle_try(d, names[i]);
		free(names);
	}
	return NULL;
}

/* One line of a sysfs file, or "" when absent. */
static void idle_sysfs(const char *path, char *out, size_t n)
{
	cleanup_free char *t = NULL;

	out[0] = '\0';
	if (read_file(path, 4096, &t, NULL) == 0) {
		snprintf(out, n, "%s", t);
		out[strcspn(out, "\n")] = '\0';
	}
}

json_t *idle_status_json(struct daemon *d)
{
	char run[16], sharing[32];
	const char *note;

	idle_sysfs("/sys/kernel/mm/ksm/run", run, sizeof(run));
	idle_sysfs("/sys/kernel/mm/ksm/pages_sharing", sharing, sizeof(sharing));
	note = !run[0]	       ? "this host's kernel has no KSM"
	       : !strcmp(run, "1") ? "on: identical pages of sandboxes are merged"
				   : "off: sandboxes of one image share no memory; the host's "
				     "administrator may turn it on (docs/design.md, Idle sandboxes)";
	return json_pack("{s:i,s:i,s:b,s:s,s:{s:s,s:I,s:s}}", "idle_pause_s",
			 __atomic_load_n(&d->idle_pause_s, __ATOMIC_RELAXED), "tcg_tb_mib",
			 daemon_tcg_tb_mib(d, NULL), "free_page_reporting",
			 daemon_vm_machine(d, NULL).balloon, "checkpoint_memory",
			 daemon_memfile(d, NULL) ? "file" : "stream", "ksm", "run",
			 run[0] ? run : "n/a", "pages_sharing",
			 (json_int_t)strtoll(sharing, NULL, 10), "note", note);
}

int idle_start(struct daemon *d, struct k8_err *err)
{
	pthread_t t;
	int r;

	idle_read_config(d);
	r = pthread_create(&t, NULL, idle_loop, d);
	if (r)
		return k8_err_set(err, -r, "cannot start the idle-pause thread: %s", strerror(r));
	pthread_detach(t);
	return 0;
}
