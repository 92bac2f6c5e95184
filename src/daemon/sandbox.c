/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.c - sandbox lifecycle: create, boot and adopt after a daemon restart (their VM
 * work is boot.c's), resume, pull, rm.
 *
 * A sandbox is a directory $KOSA8_HOME/sandboxes/<name>/ holding sandbox.json (its
 * record, written atomically), its scratch disk and image slots, and QEMU's log. Its
 * sockets live in $KOSA8_HOME/run/<id>.{qmp,agent} (short paths: sun_path is 108 bytes).
 * QEMU runs in its own session, so a daemon killed with SIGKILL leaves its VMs running;
 * the next daemon finds each VM by pid and start time and reconnects (adoption).
 */
#include "common/proto.h"
#include "daemon/sandbox.h"
#include "daemon/accel.h"
#include "daemon/broker.h"
#include "daemon/egress.h"
#include "daemon/mounts.h"
#include "daemon/ports.h"
#include "daemon/api_route.h"
#include "daemon/audit.h"
#include "daemon/layers.h"
#include "daemon/spare.h"
#include "image/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

/* ---- the record on disk ---- */

static struct sandbox *sb_new(struct daemon *d, const char *name)
{
	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	unsigned char rnd[8];

	sb->d = d;
	pthread_mutex_init(&sb->lock, NULL);
	pthread_mutex_init(&sb->audit_mu, NULL);
	pthread_cond_init(&sb->cond, NULL);
	snprintf(sb->name, sizeof(sb->name), "%s", name);
	snprintf(sb->dir, sizeof(sb->dir), "%s/sandboxes/%s", d->home, name);
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		memset(rnd, 0x5a, sizeof(rnd));
	k8_hex(rnd, 8, sb->id);
	pthread_rwlock_init(&sb->slots_lock, NULL);
	sb->qmp.fd = -1;
	sb->link.fd = -1;
	sb->mem_fd = -1;
	sb->state = SB_STOPPED;
	sb->jail_index = -1;
	sb->idle_pause_s = -1;
	sb->spare_drop = spare_drop;
	sb->last_use_ns = now_mono_ns();
	snprintf(sb->egress_mode, sizeof(sb->egress_mode), "deny");
	sb->egress_rules = json_array();
	sidecar_init(&sb->net, "kosa8-net");
	sidecar_init(&sb->fs, "kosa8-fs");
	return sb;
}

static void sb_free(struct sandbox *sb)
{
	ports_release(sb);
	json_decref(sb->egress_rules);
	json_decref(sb->net.replies);
	json_decref(sb->fs.replies);
	broker_free(sb);
	pthread_mutex_destroy(&sb->lock);
	pthread_mutex_destroy(&sb->audit_mu);
	pthread_cond_destroy(&sb->cond);
	pthread_rwlock_destroy(&sb->slots_lock);
	spare_free(sb);
	json_decref(sb->listing);
	json_decref(sb->owner);
	if (sb->mem_fd >= 0)
		close(sb->mem_fd);
	free(sb);
}

struct sandbox *sb_detached(struct daemon *d, const char *name, const char *dir)
{
	struct sandbox *sb = sb_new(d, name);

	snprintf(sb->dir, sizeof(sb->dir), "%s", dir);
	return sb;
}

void sb_detached_free(struct sandbox *sb)
{
	if (sb)
		sb_free(sb);
}

/* ---- resume, keep running, stop (the VM's own start and connection: boot.c) ---- */

bool sb_paused_on_disk(struct sandbox *sb)
{
	cleanup_free char *p = xasprintf("%s/paused/state", sb->dir);
	cleanup_free char *dev = xasprintf("%s/paused/devices", sb->dir);
	cleanup_free char *mem = xasprintf("%s/paused/memory", sb->dir);

	return access(p, F_OK) == 0 || (access(dev, F_OK) == 0 && access(mem, F_OK) == 0);
}

/* Bring a sandbox paused to disk back. Caller holds the busy token and sb->state is
 * SB_PAUSED. A failure before QEMU starts leaves it paused (try again); once QEMU was
 * started the sandbox is failed, its disk as it was, and the next use boots it. */
int sb_resume_paused(struct daemon *d, struct sandbox *sb, const char *by, bool behind,
		     struct k8_err *err)
{
	cleanup_free char *dir = xasprintf("%s/paused", sb->dir);
	cleanup_free char *mem = xasprintf("%s/memory", dir);
	cleanup_free char *top = xasprintf("%s/%s", sb->dir, layers_top(sb->disk));
	cleanup_close int kfd = -1, ifd = -1, sfd = -1, mfd = -1;
	cleanup_free char *handed = xasprintf("%s/%s", dir, SB_PAUSED_HANDED);
	uint64_t t0 = now_mono_ns();
	struct sb_behind *bg = NULL;
	pid_t pid = 0;
	int r;

	if (access(handed, F_OK) == 0)
		return k8_err_set(err, -EBUSY, "sandbox '%s' was paused to a store, whose copy is "
				  "the one that counts: `kosa8 sandbox resume %s` takes it back from "
				  "the store and resumes it", sb->name, sb->name);
	if ((r = guest_verify_open(&d->guest, &kfd, &ifd, err)))
		return k8_err_wrap(err, "sandbox '%s' stays paused", sb->name);
	/* paused/ holds a memory file and its devices' state, or one migration stream */
	if ((r = sb_saved_open(dir, access(mem, F_OK) == 0, sb->memory_mib, &sfd, &mfd, err)))
		return k8_err_wrap(err, "sandbox '%s' is paused but what it saved cannot be "
				   "used; `kosa8 sandbox rm %s` removes it", sb->name, sb->name);
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_BOOTING;
	pthread_mutex_unlock(&sb->lock);
	bg = xcalloc(1, sizeof(*bg));
	sb_connecting(sb, true);
	r = sb_spawn_restored(d, sb, dir, layers_top(sb->disk), top, kfd, ifd, sfd, mfd, false,
			      &pid, err);
	if (!r)
		r = sb_connect_vm_start(d, sb, pid, true, &bg->conn, err);
	if (!r && !behind)
		r = sb_connect_vm_finish(d, sb, &bg->conn, err);
	if (r || !behind)
		sb_connecting(sb, false);
	pthread_mutex_lock(&sb->lock);
	if (r) {
		sb->state = SB_FAILED;
		snprintf(sb->error, sizeof(sb->error), "resume failed: %s", err->msg);
	} else {
		sb->state = SB_RUNNING;
		sb->error[0] = '\0';
	}
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	rm_rf(dir);                     /* used, or useless after a failed restore */
	if (r) {
		k8_err_wrap(err, "resuming sandbox '%s' (its processes are lost; its disk is "
			    "kept and boots when next used)", sb->name);
		daemon_audit(d, "sandbox.resume.failed", sb->name,
			     json_pack("{s:s,s:s}", "from", "disk", "error", err->msg));
		free(bg);
		return r;
	}
	daemon_audit(d, "sandbox.resume", sb->name,
		     json_pack("{s:s,s:s,s:I}", "from", "disk", "by", by, "ms",
			       (json_int_t)((now_mono_ns() - t0) / 1000000)));
	if (!behind) {
		free(bg);
		return 0;
	}
	/* Its HELLO and init behind the answer, as a rewind's (checkpoint.c). */
	bg->d = d;
	bg->sb = sb;
	snprintf(bg->what, sizeof(bg->what), "resume");
	bg->fail_action = "sandbox.resume.failed";
	bg->fail_detail = json_pack("{s:s}", "from", "disk");
	sb_connect_behind(bg);
	return 0;
}

/* Is the running VM still there? Marks the sandbox failed when it is gone. Caller holds
 * the busy token. */
static bool sb_check_alive(struct daemon *d, struct sandbox *sb)
{
	bool ok;

	pthread_mutex_lock(&sb->lock);
	if (sb->child && sb->pid > 0)
		waitpid(sb->pid, NULL, WNOHANG);
	ok = sb->state == SB_RUNNING && vm_alive(sb->pid, sb->pid_start) && !sb->link.broken;
	if (sb->state == SB_RUNNING && !ok) {
		snprintf(sb->error, sizeof(sb->error), "%s",
			 !vm_alive(sb->pid, sb->pid_start) ? "the VM exited"
							   : sb->link.broken_why);
		sb->state = SB_FAILED;
		sb_kill_vm(d, sb);
		sb_save(sb);
	}
	pthread_mutex_unlock(&sb->lock);
	return ok;
}

int sb_ensure_running(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	int r = 0;

	sb_busy_enter(sb);
	if (sb->state == SB_REMOVING) {
		r = k8_err_set(err, -ENOENT, "sandbox '%s' is being removed", sb->name);
	} else if (sb->state == SB_PAUSED) {     /* paused to disk: any use resumes it */
		r = sb_resume_paused(d, sb, "use", false, err);
	} else if (!sb_check_alive(d, sb)) {
		const char *why = sb->state == SB_FAILED ? sb->error : "it was stopped";
		daemon_log("sandbox %s: booting (%s)", sb->name, why);
		pthread_mutex_lock(&sb->lock);
		sb->state = SB_BOOTING;
		pthread_mutex_unlock(&sb->lock);
		r = sb_boot(d, sb, err);
		pthread_mutex_lock(&sb->lock);
		sb->state = r ? SB_FAILED : SB_RUNNING;
		if (r)
			snprintf(sb->error, sizeof(sb->error), "%s", err->msg);
		else
			sb->error[0] = '\0';
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		daemon_audit(d, r ? "sandbox.boot.failed" : "sandbox.boot", sb->name,
			     json_pack("{s:s,s:s}", "accel", d->accel, "reason", r ? err->msg : why));
	}
	sb_busy_leave(sb);
	return r;
}

/* What `sandbox ls` shows of a sandbox, and the start of what inspect does. Caller holds
 * sb->lock. */
static json_t *sb_summary_locked(struct sandbox *sb)
{
	json_t *o, *imgs = json_array();

	for (int i = 0; i < sb->nimages; i++)
		json_array_append_new(imgs, json_pack("{s:s,s:s,s:i}", "ref", sb->images[i].ref,
						      "digest", sb->images[i].digest, "slot",
						      sb->images[i].slot));
	o = json_pack("{s:s,s:s,s:i,s:i,s:i,s:s,s:s,s:I,s:o,s:s}", "name", sb->name, "state",
		      (sb->state == SB_RUNNING && sb->paused) ? "paused" : sb_state_name(sb->state), "cpus", sb->cpus, "memory_mib", sb->memory_mib,
		      "disk_gb", sb->disk_gb, "created", sb->created, "accel", sb->accel, "pid",
		      (json_int_t)sb->pid, "images", imgs, "egress", sb->egress_mode);
	json_object_set_new(o, "mounts", sb_mounts_json(sb, false));
	json_object_set_new(o, "ports", sb_ports_json(sb));
	if (sb->owner)
		json_object_set(o, "owner", sb->owner);
	if (sb->state == SB_PAUSED || (sb->state == SB_RUNNING && sb->paused))
		json_object_set_new(o, "paused_to",
				    json_string(sb->state == SB_PAUSED ? "disk" : "memory"));
	if (sb->error[0])
		json_object_set_new(o, "error", json_string(sb->error));
	return o;
}

json_t *sb_to_json(struct sandbox *sb, bool detail)
{
	json_t *o;

	pthread_mutex_lock(&sb->lock);
	o = sb_summary_locked(sb);
	if (detail)
		json_object_set_new(o, "network", egress_summary(sb));
	if (detail && sb->broker)
		json_object_set_new(o, "broker", broker_summary(sb));
	if (detail) {
		json_object_set_new(o, "dir", json_string(sb->dir));
		json_object_set_new(o, "limits", json_pack("{s:s}", "host",
			sb->limits_desc[0] ? sb->limits_desc : "not applied (VM not running)"));
		if (sb->boot_ms)
			json_object_set_new(o, "boot_ms", json_integer((json_int_t)sb->boot_ms));
		json_object_set_new(o, "agent_dropped_frames",
				    json_integer((json_int_t)sb->link.dropped_frames));
		if (sb->state == SB_RUNNING && sb->link.proto)  /* docs/protocol.md, Versions */
			json_object_set_new(o, "agent_proto", json_integer(sb->link.proto));
		json_object_set_new(o, "forked", json_boolean(sb->forked));
		json_object_set_new(o, "disk_top", json_string(sb->disk[0] ? sb->disk : "scratch.qcow2"));
		json_object_set_new(o, "paused", json_boolean(sb->paused || sb->state == SB_PAUSED));
		json_object_set_new(o, "idle_pause", json_pack("{s:i,s:s}", "after_s",
			sb->idle_pause_s >= 0 ? sb->idle_pause_s : sb->d->idle_pause_s,
			"from", sb->idle_pause_s >= 0 ? "sandbox" : "daemon"));
		json_object_set_new(o, "rewind_spare", json_string(sb->rewind_spare[0]
			? sb->rewind_spare : SPARE_LATEST));
		json_t *spj = spare_json(sb);
		if (spj)
			json_object_set_new(o, "spare", spj);
	}
	pthread_mutex_unlock(&sb->lock);
	struct k8_err werr = { 0 };     /* a rewind's init first (checkpoint.c) */
	if (detail && sb_wait_connected(sb, &werr) == 0 && sb->state == SB_RUNNING &&
	    !sb->paused) {
		struct k8_err err = { 0 };
		json_t *resp = NULL;
		if (link_request(&sb->link, json_pack("{s:s}", "op", "ps"), 10000, &resp, NULL,
				 &err) == 0) {
			json_object_set_new(o, "containers",
					    sb_containers_json(sb, json_object_get(resp, "containers")));
		}
		json_decref(resp);
		resp = NULL;
		if (link_request(&sb->link, json_pack("{s:s}", "op", "stat"), 10000, &resp, NULL,
				 &err) == 0) {
			json_object_del(resp, "ok");
			json_object_set(o, "stat", resp);
		}
		json_decref(resp);
	}
	return o;
}

/* `sandbox ls` waits at most this long in all for sandboxes' locks (held across a
 * record's fsync, a QMP exchange or a QEMU's end); past it, a sandbox whose lock is still
 * held is shown as ls last saw it. */
#define SB_LIST_WAIT_MS 20
#define SB_LIST_SLOW_NS (50 * 1000000ull)       /* a listing this slow is logged */

/* The listing: each sandbox's summary, read under its lock. The table lock is held
 * throughout (it guards the list and each sb->listing), so the wait is bounded: a
 * sandbox whose lock is held past SB_LIST_WAIT_MS (a state change under way) is shown as
 * the previous ls saw it, or by name and state alone if none did; the change shows in the
 * next ls. */
json_t *sb_list_json(struct daemon *d)
{
	json_t *arr = json_array();
	uint64_t t0 = now_mono_ns(), t_table, t_end;
	int n = 0, stale = 0;
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += SB_LIST_WAIT_MS * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&d->lock);
	t_table = now_mono_ns();
	for (struct sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		json_t *o;
		if (sb->state == SB_REMOVING)
			continue;
		n++;
		if (pthread_mutex_timedlock(&sb->lock, &dl) == 0) {
			o = sb_summary_locked(sb);
			pthread_mutex_unlock(&sb->lock);
			json_decref(sb->listing);
			sb->listing = json_deep_copy(o);
		} else {
			stale++;
			o = sb->listing ? json_deep_copy(sb->listing)
					: json_pack("{s:s,s:s}", "name", sb->name, "state",
						    sb_state_name(__atomic_load_n(&sb->state,
										  __ATOMIC_RELAXED)));
		}
		json_array_append_new(arr, o);
	}
	pthread_mutex_unlock(&d->lock);
	/* Where a slow listing waited: the density bench reads these lines (issue 15). */
	t_end = now_mono_ns();
	if (t_end - t0 >= SB_LIST_SLOW_NS)
		daemon_log("sandbox ls took %llu ms: table lock %llu ms, %d sandboxes, %d shown "
			   "as before", (unsigned long long)((t_end - t0) / 1000000),
			   (unsigned long long)((t_table - t0) / 1000000), n, stale);
	return arr;
}

/* sb_from_record's step for a sandbox's parts: its egress policy, its sidecars' processes
 * (ended or adopted by sb_load_all) and its shared folders with their pins. */
static void sb_parts_from_record(struct sandbox *sb, json_t *rec)
{
	json_t *eg = json_object_get(rec, "egress"), *sc = json_object_get(rec, "sidecars");
	const char *m = json_string_value(json_object_get(eg, "mode"));
	json_t *rl = json_object_get(eg, "rules");
	struct sidecar *sides[2] = { &sb->net, &sb->fs };
	const char *keys[2] = { "net", "fs" };
	json_t *ml = json_object_get(rec, "mounts"), *mi;
	size_t k;

	if (m && strlen(m) < sizeof(sb->egress_mode))
		snprintf(sb->egress_mode, sizeof(sb->egress_mode), "%s", m);
	if (json_is_array(rl)) {
		json_decref(sb->egress_rules);
		sb->egress_rules = json_incref(rl);
	}
	for (int i = 0; i < 2; i++) {
		json_t *o = json_object_get(sc, keys[i]);
		sides[i]->pid = (pid_t)json_integer_value(json_object_get(o, "pid"));
		sides[i]->pid_start =
			(unsigned long long)json_integer_value(json_object_get(o, "pid_start"));
	}
	json_array_foreach(ml, k, mi) {
		const char *h = json_string_value(json_object_get(mi, "host"));
		const char *g = json_string_value(json_object_get(mi, "guest"));
		if (sb->nmounts >= K8_MAX_MOUNTS || !h || !g ||
		    strlen(h) >= sizeof(sb->mounts[0].host) ||
		    strlen(g) >= sizeof(sb->mounts[0].guest))
			continue;
		struct sb_mount *mm = &sb->mounts[sb->nmounts++];
		snprintf(mm->host, sizeof(mm->host), "%s", h);
		snprintf(mm->guest, sizeof(mm->guest), "%s", g);
		mm->ro = json_is_true(json_object_get(mi, "ro"));
		json_t *pin = json_object_get(mi, "pin");
		mm->pinned = json_is_object(pin);
		mm->dev = (unsigned long long)json_integer_value(json_object_get(pin, "dev"));
		mm->ino = (unsigned long long)json_integer_value(json_object_get(pin, "ino"));
		mm->btime = json_integer_value(json_object_get(pin, "btime"));
	}
}

static int sb_from_record(struct daemon *d, const char *name, struct sandbox **out)
{
	cleanup_free char *path = xasprintf("%s/sandboxes/%s/sandbox.json", d->home, name);
	cleanup_free char *text = NULL;
	json_t *rec;
	struct sandbox *sb;
	const char *id, *created, *accel, *state;
	json_int_t pid = 0, start = 0;

	if (read_file(path, 1 << 20, &text, NULL))
		return -ENOENT;
	rec = json_loads(text, 0, NULL);
	if (!rec)
		return -EINVAL;
	sb = sb_new(d, name);
	if (json_unpack(rec, "{s:s,s:i,s:i,s:i,s:s,s:s,s:s,s?I,s?I}", "id", &id, "cpus",
			&sb->cpus, "memory_mib", &sb->memory_mib, "disk_gb", &sb->disk_gb,
			"created", &created, "accel", &accel, "state", &state, "pid", &pid,
			"pid_start", &start) < 0 ||
	    strlen(id) != 16) {
		json_decref(rec);
		sb_free(sb);
		return -EINVAL;
	}
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	snprintf(sb->created, sizeof(sb->created), "%s", created);
	snprintf(sb->accel, sizeof(sb->accel), "%s", accel);
	if (!strcmp(state, "paused"))   /* paused to disk; sb_load_all checks its state file */
		sb->state = SB_PAUSED;
	{
		const char *disk = json_string_value(json_object_get(rec, "disk"));
		if (disk && !strchr(disk, '/') && strlen(disk) < sizeof(sb->disk))
			snprintf(sb->disk, sizeof(sb->disk), "%s", disk);
	}
	sb->forked = json_is_true(json_object_get(rec, "forked"));
	{
		json_t *mf = json_object_get(rec, "memory_file");
		sb->mem_dev = (unsigned long long)json_integer_value(json_object_get(mf, "dev"));
		sb->mem_ino = (unsigned long long)json_integer_value(json_object_get(mf, "ino"));
	}
	/* sb_load_all reads it and clears it */
	sb->connecting = json_is_true(json_object_get(rec, "init_pending"));
	/* A record without it is older than the balloon: its VM (or paused/) has neither. */
	if (vm_machine_from_json(json_object_get(rec, "machine"), &sb->machine))
		daemon_log("sandbox %s: sandbox.json has a damaged \"machine\"; taking the "
			   "one without ACPI and balloon", sb->name);
	broker_load(sb);
	{
		json_t *ip = json_object_get(rec, "idle_pause_s");
		if (json_is_integer(ip) && json_integer_value(ip) >= 0 &&
		    json_integer_value(ip) <= K8_IDLE_PAUSE_MAX_S)
			sb->idle_pause_s = (int)json_integer_value(ip);
	}
	{
		const char *rs = json_string_value(json_object_get(rec, "rewind_spare"));
		if (rs && spare_setting_valid(rs))
			snprintf(sb->rewind_spare, sizeof(sb->rewind_spare), "%s", rs);
	}
	{
		json_t *ow = json_object_get(rec, "owner");
		struct k8_err oerr = { 0 };
		if (ow && sb_owner_check(ow, &oerr) == 0)
			sb->owner = json_deep_copy(ow);
	}
	{
		json_t *ji = json_object_get(rec, "jail_index");
		struct k8_err jerr = { 0 };
		sb->jail_index = json_is_integer(ji) ? (int)json_integer_value(ji) : -1;
		if (jail_claim(&d->jail, sb->dir, &sb->jail_index, &jerr)) {
			daemon_log("sandbox %s: %s", name, jerr.msg);
			json_decref(rec);
			sb_free(sb);
			return -ENOSPC;
		}
	}
	sb_parts_from_record(sb, rec);
	sb_ports_from_json(sb, json_object_get(rec, "ports"));
	sb->pid = (pid_t)pid;
	sb->pid_start = (unsigned long long)start;
	/* A resume from disk whose daemon died before its QEMU was spawned (the record names
	 * its sidecars, sb_prepare_spawn, and no VM yet): still paused, paused/ whole. Once
	 * a QEMU was spawned (its pid is recorded) the guest may have run and written the
	 * disk, so paused/ no longer matches it: that one is stopped, as sb_resume_paused
	 * says. */
	if (!strcmp(state, "booting") && pid == 0 && sb_paused_on_disk(sb))
		sb->state = SB_PAUSED;
	sb->nimages = sb_images_from_json(json_object_get(rec, "images"), sb->images);
	json_decref(rec);
	*out = sb;
	return 0;
}

int sb_load_all(struct daemon *d)
{
	cleanup_free char *dir = xasprintf("%s/sandboxes", d->home);
	DIR *dd;
	struct dirent *de;

	mkdir_p(dir, 0700);
	dd = opendir(dir);
	if (!dd)
		return -errno;
	while ((de = readdir(dd))) {
		struct sandbox *sb = NULL;
		struct k8_err err = { 0 };
		if (de->d_name[0] == '.' || !sb_name_valid(de->d_name))
			continue;
		if (sb_from_record(d, de->d_name, &sb)) {
			daemon_log("skipping %s/%s: no readable sandbox.json", dir, de->d_name);
			continue;
		}
		spare_reap(d, sb);      /* spares are not adopted */
		if (sb->connecting && sb->state != SB_PAUSED && vm_alive(sb->pid, sb->pid_start)) {
			/* A rewind through the spare answered and the daemon died before the
			 * guest had its init (clock, RNG seed): never adopted, it would run on
			 * with the checkpoint's. It is stopped as a VM that is gone; its disk,
			 * the rewound one, boots when next used. */
			daemon_log("sandbox %s: VM pid %d never had its init after a rewind; "
				   "stopping it", sb->name, (int)sb->pid);
			kill(sb->pid, SIGKILL);
			for (int i = 0; i < 100 && vm_alive(sb->pid, sb->pid_start); i++)
				usleep(10000);
			sb->pid = 0;
		}
		if (sb->state == SB_PAUSED && sb_paused_on_disk(sb)) {
			/* A daemon killed between the save and QEMU's end leaves it. */
			if (vm_alive(sb->pid, sb->pid_start))
				kill(sb->pid, SIGKILL);
			sb->pid = 0;
			sb->pid_start = 0;
			/* Its sidecars, if they outlived the daemon, serve the resume. */
			broker_adopt(d, sb);
			if (sidecar_alive(&sb->net))
				net_adopt(d, sb);
			if (sidecar_alive(&sb->fs))
				fs_adopt(d, sb);
			daemon_log("sandbox %s: paused to disk", sb->name);
		} else if (vm_alive(sb->pid, sb->pid_start)) {
			if (sb_adopt(d, sb, &err) == 0) {
				sb->state = SB_RUNNING;
				daemon_log("sandbox %s: adopted running VM (pid %d)", sb->name, (int)sb->pid);
			} else {
				daemon_log("sandbox %s: VM pid %d is alive but not usable (%s); stopping it",
					   sb->name, (int)sb->pid, err.msg);
				sb_kill_vm(d, sb);
				sb->state = SB_FAILED;
				snprintf(sb->error, sizeof(sb->error), "adoption failed: %s", err.msg);
			}
		} else {
			sb->pid = 0;
			sb->state = SB_STOPPED;
			/* Sidecars of a VM that is gone have nothing to serve. */
			sidecar_stop(&sb->net);
			sidecar_stop(&sb->fs);
			broker_adopt(d, sb);
			broker_down(d, sb);
		}
		pthread_mutex_lock(&sb->lock);
		sb->connecting = false;
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		pthread_mutex_lock(&d->lock);
		sb->next = d->sandboxes;
		d->sandboxes = sb;
		pthread_mutex_unlock(&d->lock);
	}
	closedir(dd);
	return 0;
}

static int body_int(json_t *body, const char *key, int def, int lo, int hi, int *out,
		    struct k8_err *err)
{
	json_t *v = json_object_get(body, key);

	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return k8_err_set(err, -EINVAL, "%s must be a whole number from %d to %d", key, lo, hi);
	*out = (int)json_integer_value(v);
	return 0;
}

/* Take a name in the table: a new sandbox, BOOTING, whose busy token and one user
 * reference the caller holds. NULL (err set) if the name is invalid or taken. */
/* Take sb out of the table (a lookup no longer finds it). */
static void sb_unlink(struct daemon *d, struct sandbox *sb)
{
	pthread_mutex_lock(&d->lock);
	for (struct sandbox **pp = &d->sandboxes; *pp; pp = &(*pp)->next)
		if (*pp == sb) {
			*pp = sb->next;
			break;
		}
	pthread_mutex_unlock(&d->lock);
}

/* End a reservation already out of the table: drop its busy token and reference, wait
 * for whoever looked it up meanwhile, free it. */
static void sb_drop_reserved_unlinked(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_REMOVING;
	sb->busy = 0;
	sb->users--;
	pthread_cond_broadcast(&sb->cond);
	while (sb->users > 0)
		pthread_cond_wait(&sb->cond, &sb->lock);
	pthread_mutex_unlock(&sb->lock);
	sb_free(sb);
}

static void sb_drop_reserved(struct daemon *d, struct sandbox *sb)
{
	sb_unlink(d, sb);
	sb_drop_reserved_unlinked(sb);
}

struct sandbox *sb_reserve(struct daemon *d, const char *name, struct k8_err *err)
{
	struct sandbox *sb, *it;

	if (!name || !sb_name_valid(name)) {
		k8_err_set(err, -EINVAL,
			   "invalid sandbox name '%.80s': use 1-63 characters a-z, 0-9, '-', "
			   "'_' or '.', starting with a letter or digit", name ? name : "");
		return NULL;
	}
	pthread_mutex_lock(&d->lock);
	for (it = d->sandboxes; it; it = it->next)
		if (!strcmp(it->name, name))
			break;
	if (it) {
		pthread_mutex_unlock(&d->lock);
		k8_err_set(err, -EEXIST,
			   "a sandbox named '%s' already exists; pick another name or remove "
			   "it with `kosa8 sandbox rm %s`", name, name);
		return NULL;
	}
	sb = sb_new(d, name);
	sb->state = SB_BOOTING;
	sb->busy = 1;
	sb->users = 1;
	k8_time_now(sb->created, 0);
	snprintf(sb->accel, sizeof(sb->accel), "%s", d->accel);
	sb->next = d->sandboxes;
	d->sandboxes = sb;
	pthread_mutex_unlock(&d->lock);
	/* The uid block is claimed outside the table lock: the claim takes a host-wide
	 * flock and fsyncs a file, and the table lock holds up every lookup and `sandbox
	 * ls` meanwhile (issue 15's density run). The name is ours already; a request
	 * that finds it waits for the busy token. */
	if (jail_claim(&d->jail, sb->dir, &sb->jail_index, err)) {
		sb_drop_reserved(d, sb);
		return NULL;
	}
	return sb;
}

/* Undo sb_reserve after a failed create: nothing half-made stays behind, the name is
 * free again. Frees sb. */
void sb_unreserve(struct daemon *d, struct sandbox *sb)
{
	sb_unlink(d, sb);
	sidecar_stop(&sb->net);
	sidecar_stop(&sb->fs);
	broker_down(d, sb);
	rm_rf(sb->dir);
	jail_release(&d->jail, sb->dir, sb->jail_index);
	sb_drop_reserved_unlinked(sb);
}

/* The audit records of a sandbox just created: its size, owner, broker, folders, ports. */
static void sb_audit_created(struct daemon *d, struct sandbox *sb)
{
	daemon_audit(d, "sandbox.create", sb->name,
		     json_pack("{s:i,s:i,s:i,s:s,s:s,s:I,s:s,s:O}", "cpus", sb->cpus, "memory_mib",
			       sb->memory_mib, "disk_gb", sb->disk_gb, "accel", d->accel, "limits",
			       sb->limits_desc, "boot_ms", (json_int_t)sb->boot_ms, "egress",
			       sb->egress_mode, "egress_allow", sb->egress_rules));
	if (sb->owner)
		daemon_audit(d, "sandbox.owner", sb->name, json_deep_copy(sb->owner));
	if (sb->broker)
		daemon_audit(d, "sandbox.broker", sb->name,
			     json_pack("{s:O,s:b}", "rules", sb->broker->rules, "intercept",
				       sb->broker->intercept));
	for (int i = 0; i < sb->nmounts; i++)
		daemon_audit(d, "sandbox.mount", sb->name,
			     json_pack("{s:s,s:s,s:b}", "host", sb->mounts[i].host, "guest",
				       sb->mounts[i].guest, "ro", sb->mounts[i].ro));
	ports_audit_created(d, sb);
}

int sb_create(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
	      json_t **out, struct k8_err *err)
{
	const char *name = json_string_value(json_object_get(body, "name"));
	json_t *mounts = json_object_get(body, "mounts"), *rules = NULL;
	struct sb_mount *mnt = NULL;
	char mode[16];
	struct sandbox *sb;
	json_t *brules = NULL;
	int cpus, mem, disk, idle, nmnt = 0, r;

	if (!name)
		return k8_err_set(err, -EINVAL, "a sandbox name is required");
	if (!sb_name_valid(name))
		return k8_err_set(err, -EINVAL,
				  "invalid sandbox name '%.80s': use 1-63 characters a-z, 0-9, '-', "
				  "'_' or '.', starting with a letter or digit", name);
	if ((r = body_int(body, "cpus", 2, 1, 64, &cpus, err)) ||
	    (r = body_int(body, "memory_mib", 1024, 128, 65536, &mem, err)) ||
	    (r = body_int(body, "disk_gb", 4, 1, 1024, &disk, err)) ||
	    (r = body_int(body, "idle_pause_s", -1, 0, K8_IDLE_PAUSE_MAX_S, &idle, err)))
		return r;
	const char *spare = json_string_value(json_object_get(body, "rewind_spare"));
	if ((json_object_get(body, "rewind_spare") && !spare) || (spare && !spare_setting_valid(spare)))
		return k8_err_set(err, -EINVAL, "rewind_spare: give \"latest\", \"off\" or a "
				  "checkpoint label (1-63 letters, digits, '-', '_', '.')");
	json_t *owner = json_object_get(body, "owner");
	if (owner && !json_is_null(owner) && (r = sb_owner_check(owner, err)))
		return r;
	if (!d->guest.kernel[0])
		return k8_err_set(err, -ENOENT,
				  "the guest image is missing, so no VM can boot; build it with `make`");
	if ((r = egress_from_body(body, mode, sizeof(mode), &rules, err)))
		return r;
	if ((r = broker_from_body(d, body, &brules, err))) {
		json_decref(rules);
		return r;
	}
	mnt = xcalloc(K8_MAX_MOUNTS, sizeof(*mnt));
	if (mounts && !json_is_null(mounts) &&
	    (r = mounts_from_body(d, mounts, mnt, &nmnt, err))) {
		free(mnt);
		json_decref(rules);
		json_decref(brules);
		return r;
	}

	sb = sb_reserve(d, name, err);
	if (!sb) {
		json_decref(rules);
		json_decref(brules);
		free(mnt);
		return -EEXIST;
	}
	sb->cpus = cpus;
	sb->memory_mib = mem;
	sb->disk_gb = disk;
	sb->idle_pause_s = idle;
	if (owner && !json_is_null(owner)) {
		pthread_mutex_lock(&d->lock);
		sb->owner = json_deep_copy(owner);
		pthread_mutex_unlock(&d->lock);
	}
	if (spare)
		snprintf(sb->rewind_spare, sizeof(sb->rewind_spare), "%s", spare);
	snprintf(sb->egress_mode, sizeof(sb->egress_mode), "%s", mode);
	json_decref(sb->egress_rules);
	sb->egress_rules = rules;
	if (nmnt)
		memcpy(sb->mounts, mnt, sizeof(mnt[0]) * (size_t)nmnt);
	sb->nmounts = nmnt;
	free(mnt);
	if ((r = ports_from_body(d, sb, json_object_get(body, "ports"), err))) {
		daemon_audit(d, "sandbox.create.failed", name, json_pack("{s:s}", "error", err->msg));
		sb_unreserve(d, sb);
		return r;
	}

	if (progress)
		progress(pctx, json_pack("{s:s,s:s}", "phase", "disks", "what", name));
	r = mkdir_p(sb->dir, 0700);
	if (r)
		k8_err_set(err, r, "mkdir %s: %s", sb->dir, strerror(-r));
	if (!r)
		r = vm_make_disks(d->home, sb->dir, disk, err);
	if (!r)
		r = broker_create(sb, steal_pointer(&brules), err);
	if (!r) {
		pthread_mutex_lock(&sb->lock);
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		if (progress)
			progress(pctx, json_pack("{s:s,s:s}", "phase", "boot", "what", d->accel));
		r = sb_boot(d, sb, err);
	}
	json_decref(brules);            /* NULL unless the disks failed first */
	if (r) {
		daemon_audit(d, "sandbox.create.failed", name, json_pack("{s:s}", "error", err->msg));
		sb_unreserve(d, sb);
		return r;
	}
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_RUNNING;
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	sb_audit_created(d, sb);
	sb_busy_leave(sb);
	*out = sb_to_json(sb, false);
	if (!strcmp(sb->accel, "tcg"))
		json_object_set_new(*out, "tcg_note", json_string(ACCEL_TCG_NOTE));
	sb_put(d, sb);
	return 0;
}

static int wipe_file(const char *path, const struct stat *sbuf, int type, struct FTW *ftw)
{
	cleanup_close int fd = -1;
	struct stat st;
	static const char zero[65536];

	(void)sbuf;
	(void)ftw;
	if (type != FTW_F)
		return 0;
	fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	/* A disk layer or memory file shared with a fork (hard link) still holds the
	 * fork's data. */
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1)
		return 0;
	/* Only where the file has data: a hole holds nothing to wipe (a memory file is
	 * mostly holes, as large as the guest's RAM). */
	for (off_t off = 0, end; off < st.st_size; off = end) {
		if ((off = lseek(fd, off, SEEK_DATA)) < 0)
			break;          /* ENXIO: no data past off */
		if ((end = lseek(fd, off, SEEK_HOLE)) < 0)
			end = st.st_size;
		for (off_t at = off; at < end; at += (off_t)sizeof(zero)) {
			size_t n = (size_t)(end - at) < sizeof(zero) ? (size_t)(end - at)
								     : sizeof(zero);
			if (pwrite(fd, zero, n, at) < 0)
				return 0;
		}
	}
	fdatasync(fd);
	return 0;
}

/* `rm --wipe`: zero every file of the sandbox that no fork shares before it is unlinked:
 * the scratch disk, every disk layer written since a checkpoint, and the checkpoints'
 * memory files and states, and paused/'s (the guest's RAM holds what it wrote too). */
static void wipe_tree(const char *dir)
{
	nftw(dir, wipe_file, 16, FTW_PHYS | FTW_MOUNT);
}

int sb_remove(struct daemon *d, const char *name, bool wipe, struct k8_err *err)
{
	struct sandbox *sb;
	int r;

	sb = sb_get(d, name, err);
	if (!sb)
		return -ENOENT;
	sb_busy_enter(sb);
	pthread_mutex_lock(&sb->lock);
	sb->state = SB_REMOVING;
	sb_kill_vm(d, sb);
	pthread_mutex_unlock(&sb->lock);
	/* a spare still being prepared makes files in the directory: it ends first */
	spare_wait_idle(sb);
	sb_unlink(d, sb);
	if (wipe)
		wipe_tree(sb->dir);
	r = rm_rf(sb->dir);
	if (r)
		k8_err_set(err, r, "could not remove %s: %s", sb->dir, strerror(-r));
	jail_release(&d->jail, sb->dir, sb->jail_index);
	daemon_audit(d, "sandbox.rm", name, json_pack("{s:b}", "wipe", wipe));
	/* Wait for the API threads still holding it (their VM is gone, they end soon). */
	pthread_mutex_lock(&sb->lock);
	sb->busy = 0;
	sb->users--;
	while (sb->users > 0)
		pthread_cond_wait(&sb->cond, &sb->lock);
	pthread_mutex_unlock(&sb->lock);
	sb_free(sb);
	return r;
}

static bool sb_want_any(struct sandbox *sb K8_UNUSED, void *arg K8_UNUSED)
{
	return true;
}

void sb_stop_all(struct daemon *d)
{
	size_t n = 0;
	struct sandbox **all = sb_collect(d, sb_want_any, NULL, &n);

	/* A rewind's init running in the background ends first (its thread would mark
	 * the sandbox failed when its VM went under it). */
	for (size_t i = 0; i < n; i++) {
		struct k8_err ignored = { 0 };
		sb_wait_connected(all[i], &ignored);
		sb_put_peek(d, all[i]);
	}
	free(all);
	pthread_mutex_lock(&d->lock);
	for (struct sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		pthread_mutex_lock(&sb->lock);
		if (sb->pid > 0) {
			sb_kill_vm(d, sb);
			sb->state = SB_STOPPED;
			sb_save(sb);
		} else {
			/* A paused or failed sandbox's sidecars; its state stays. */
			sb_kill_vm(d, sb);
		}
		pthread_mutex_unlock(&sb->lock);
	}
	pthread_mutex_unlock(&d->lock);
}

void sb_progress(void *ctx, const char *phase, const char *what, uint64_t done,
		 uint64_t total)
{
	struct sb_progress *p = ctx;
	if (p->fn)
		p->fn(p->ctx, json_pack("{s:s,s:s,s:I,s:I}", "phase", phase, "what", what ? what : "",
					"done", (json_int_t)done, "total", (json_int_t)total));
}

int sb_image_pull(struct daemon *d, const char *ref, void (*progress)(void *, json_t *),
		  void *pctx, json_t **out, struct k8_err *err)
{
	return sb_image_pull_as(d, ref, NULL, progress, pctx, out, err);
}

int sb_image_pull_as(struct daemon *d, const char *ref, const char *basic,
		     void (*progress)(void *, json_t *), void *pctx, json_t **out,
		     struct k8_err *err)
{
	struct sb_progress pp = { progress, pctx };
	const char *dc = getenv("DOCKER_CONFIG");
	const char *home = getenv("HOME");
	cleanup_free char *auth = xasprintf("%s/auth.json", d->home);
	cleanup_free char *docker = dc && *dc ? xasprintf("%s/config.json", dc) :
				    home && *home ? xasprintf("%s/.docker/config.json", home) : NULL;
	json_t *cfg = daemon_config(d);
	char **insecure = daemon_setting_list("KOSA8_INSECURE_REGISTRIES", cfg, "insecure_registries");
	char **mirrors = daemon_setting_list("KOSA8_REGISTRY_MIRRORS", cfg, "registry_mirrors");
	struct pull_opts o = {
		.offline = daemon_offline(d, cfg),
		.auth_file = auth,
		.docker_config = docker,
		.insecure = (const char *const *)insecure,
		.mirrors = (const char *const *)mirrors,
		.basic = basic,
	};
	int r;

	r = image_pull(d->images, ref, &o, sb_progress, &pp, out, err);
	if (!r)
		daemon_audit(d, "image.pull", NULL,
			     json_pack("{s:O,s:O,s:O}", "ref", json_object_get(*out, "ref"),
				       "digest", json_object_get(*out, "digest"),
				       "registry", json_object_get(*out, "registry")));
	daemon_setting_list_free(insecure);
	daemon_setting_list_free(mirrors);
	json_decref(cfg);
	return r;
}

int sb_agent_request(struct sandbox *sb, json_t *req, int timeout_ms, json_t **resp,
		     struct stream **stream, struct k8_err *err)
{
	int r = sb_wait_connected(sb, err);     /* a rewind's init first (checkpoint.c) */

	if (r) {
		json_decref(req);
		return r;
	}
	return link_request(&sb->link, req, timeout_ms, resp, stream, err);
}

/* The agent's container list, made readable: image digests become the references the
 * sandbox pulled them as, start times become RFC 3339. */
json_t *sb_containers_json(struct sandbox *sb, json_t *list)
{
	json_t *out = json_array(), *c;
	size_t i;

	json_array_foreach(list, i, c) {
		json_t *o;
		const char *img;
		json_int_t ns;
		char ts[K8_TIME_LEN];

		if (!json_is_object(c))
			continue;
		o = json_deep_copy(c);
		img = json_string_value(json_object_get(c, "image"));
		pthread_mutex_lock(&sb->lock);
		for (int k = 0; img && k < sb->nimages; k++) {
			const char *dg = sb->images[k].digest;
			if (!strcmp(img, dg) || (strlen(img) == 64 && !strcmp(img, dg + 7))) {
				json_object_set_new(o, "image", json_string(sb->images[k].ref));
				json_object_set_new(o, "image_digest", json_string(dg));
			}
		}
		pthread_mutex_unlock(&sb->lock);
		ns = json_integer_value(json_object_get(c, "started_ns"));
		if (ns > 0) {
			k8_time_fmt(ts, ns / 1000000000, -1);
			json_object_set_new(o, "started", json_string(ts));
		}
		json_array_append_new(out, o);
	}
	return out;
}

/* ---- API: the sandbox routes (api.h; the table is in api.c) ---- */

int sb_image_unused(struct daemon *d, const char *digest, const char *ref, struct k8_err *err)
{
	const char *user = NULL;
	int r = 0;

	pthread_mutex_lock(&d->lock);
	for (struct sandbox *sb = d->sandboxes; sb && !user; sb = sb->next)
		for (int i = 0; i < sb->nimages; i++)
			if (!strcmp(sb->images[i].digest, digest))
				user = sb->name;
	if (user)
		r = k8_err_set(err, -EBUSY, "image %s is attached to sandbox '%s'; remove the "
			       "sandbox first (kosa8 sandbox rm %s)", ref, user, user);
	pthread_mutex_unlock(&d->lock);
	return r;
}

int sb_api_list(struct api_call *call)
{
	call->out = sb_list_json(call->d);
	return 0;
}

static int sb_create_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	return sb_create(j->d, j->body, api_job_progress, j, result, err);
}

int sb_api_create(struct api_call *call)
{
	return api_reply_job(call, sb_create_job, NULL);
}

int sb_api_get(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);

	if (!sb)
		return call->err.code;
	call->out = sb_to_json(sb, true);
	sb_put_peek(call->d, sb);      /* looking is not using (idle.c) */
	return 0;
}

/* DELETE /v1/sandboxes/{name}?wipe=1 */
int sb_api_rm(struct api_call *call)
{
	bool wipe = false;

	if (api_query_bool(call, "wipe", &wipe))
		return call->err.code;
	return sb_remove(call->d, api_param(call, "name"), wipe, &call->err);
}

