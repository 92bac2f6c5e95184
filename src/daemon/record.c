/* SPDX-License-Identifier: Apache-2.0 */
/* record.c - a sandbox's record (record.h): names, the table, the busy token, sandbox.json. */
#include "daemon/record.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

static const char *const state_names[] = {
	[SB_STOPPED] = "stopped", [SB_BOOTING] = "booting", [SB_RUNNING] = "running",
	[SB_FAILED] = "failed", [SB_REMOVING] = "removing", [SB_PAUSED] = "paused",
};

const char *sb_state_name(enum sb_state s)
{
	return (unsigned)s < ARRAY_SIZE(state_names) && state_names[s] ? state_names[s] : "?";
}

bool sb_name_valid(const char *n)
{
	size_t len = strlen(n);

	if (len == 0 || len > K8_NAME_MAX)
		return false;
	if (!((n[0] >= 'a' && n[0] <= 'z') || (n[0] >= '0' && n[0] <= '9')))
		return false;
	for (size_t i = 1; i < len; i++) {
		char c = n[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
		      c == '.'))
			return false;
	}
	return true;
}

void sb_sock_path(struct daemon *d, struct sandbox *sb, const char *what, char *out, size_t n)
{
	snprintf(out, n, "%s/run/%s.%s", d->home, sb->id, what);
}

json_t *sb_images_json(const struct vm_image *imgs, int n)
{
	json_t *arr = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:i}", "ref", imgs[i].ref,
						     "digest", imgs[i].digest, "disk", imgs[i].disk,
						     "slot", imgs[i].slot));
	return arr;
}

int sb_images_from_json(json_t *arr, struct vm_image out[K8_MAX_SLOTS])
{
	json_t *it;
	size_t i;
	int n = 0;

	json_array_foreach(arr, i, it) {
		const char *ref, *dg, *disk;
		int slot;
		if (n >= K8_MAX_SLOTS)
			break;
		if (json_unpack(it, "{s:s,s:s,s:s,s:i}", "ref", &ref, "digest", &dg, "disk", &disk,
				"slot", &slot) < 0 || slot < 0 || slot >= K8_MAX_SLOTS)
			continue;
		memset(&out[n], 0, sizeof(out[n]));
		snprintf(out[n].ref, sizeof(out[n].ref), "%s", ref);
		snprintf(out[n].digest, sizeof(out[n].digest), "%s", dg);
		snprintf(out[n].disk, sizeof(out[n].disk), "%s", disk);
		out[n].slot = slot;
		n++;
	}
	return n;
}

static json_t *sb_record(struct sandbox *sb)
{
	json_t *imgs = sb_images_json(sb->images, sb->nimages);
	json_t *rec = json_pack("{s:i,s:s,s:s,s:i,s:i,s:i,s:s,s:s,s:I,s:I,s:s,s:o,s:s,s:b}",
				"version", 1, "name", sb->name, "id", sb->id, "cpus", sb->cpus,
				"memory_mib", sb->memory_mib, "disk_gb", sb->disk_gb, "created",
				sb->created, "state", state_names[sb->state], "pid",
				(json_int_t)sb->pid, "pid_start", (json_int_t)sb->pid_start, "accel",
				sb->accel, "images", imgs, "disk",
				sb->disk[0] ? sb->disk : "scratch.qcow2", "forked", sb->forked);
	json_object_set_new(rec, "egress", json_pack("{s:s,s:O}", "mode", sb->egress_mode,
						      "rules", sb->egress_rules));
	json_object_set_new(rec, "mounts", sb_mounts_json(sb, false));
	json_object_set_new(rec, "ports", sb_ports_json(sb));
	json_object_set_new(rec, "jail_index", json_integer(sb->jail_index));
	json_object_set_new(rec, "machine", vm_machine_json(&sb->machine));
	if (sb->idle_pause_s >= 0)
		json_object_set_new(rec, "idle_pause_s", json_integer(sb->idle_pause_s));
	if (sb->rewind_spare[0])
		json_object_set_new(rec, "rewind_spare", json_string(sb->rewind_spare));
	if (sb->owner)
		json_object_set(rec, "owner", sb->owner);
	if (sb->mem_ino)        /* its VM's RAM maps this file (sandbox.c, sb_adopt) */
		json_object_set_new(rec, "memory_file",
				    json_pack("{s:I,s:I}", "dev", (json_int_t)sb->mem_dev, "ino",
					      (json_int_t)sb->mem_ino));
	if (sb->connecting || sb->restoring)    /* no init yet: never adopted */
		json_object_set_new(rec, "init_pending", json_true());
	json_object_set_new(rec, "sidecars",
			    json_pack("{s:{s:I,s:I},s:{s:I,s:I}}", "net", "pid",
				      (json_int_t)sb->net.pid, "pid_start",
				      (json_int_t)sb->net.pid_start, "fs", "pid",
				      (json_int_t)sb->fs.pid, "pid_start",
				      (json_int_t)sb->fs.pid_start));
	return rec;
}

/* Caller holds sb->lock. */
int sb_save(struct sandbox *sb)
{
	json_t *rec = sb_record(sb);
	char *text = json_dumps(rec, JSON_INDENT(2));
	cleanup_free char *path = xasprintf("%s/sandbox.json", sb->dir);
	int r;

	json_decref(rec);
	r = write_file_atomic(path, text, strlen(text), 0600);
	free(text);
	if (r)
		daemon_log("cannot save %s: %s", path, strerror(-r));
	return r;
}

json_t *sb_mounts_json(const struct sandbox *sb, bool for_guest)
{
	json_t *a = json_array();

	for (int i = 0; i < sb->nmounts; i++)
		json_array_append_new(a, for_guest
			? json_pack("{s:i,s:s,s:b}", "index", i, "guest", sb->mounts[i].guest, "ro",
				    sb->mounts[i].ro)
			: json_pack("{s:s,s:s,s:b,s:{s:I,s:I,s:I}}", "host", sb->mounts[i].host,
				    "guest", sb->mounts[i].guest, "ro", sb->mounts[i].ro, "pin",
				    "dev", (json_int_t)sb->mounts[i].dev, "ino",
				    (json_int_t)sb->mounts[i].ino, "btime",
				    (json_int_t)sb->mounts[i].btime));
	return a;
}

json_t *sb_ports_json(const struct sandbox *sb)
{
	json_t *a = json_array();

	for (int i = 0; i < sb->nports; i++) {
		json_t *p = json_pack("{s:s,s:i,s:i}", "host_ip", sb->ports[i].host_ip,
				      "host_port", sb->ports[i].host_port,
				      "guest_port", sb->ports[i].guest_port);
		if (sb->ports[i].guest_ip[0])
			json_object_set_new(p, "guest_ip", json_string(sb->ports[i].guest_ip));
		json_array_append_new(a, p);
	}
	return a;
}

void sb_ports_from_json(struct sandbox *sb, json_t *arr)
{
	json_t *it;
	size_t i;

	json_array_foreach(arr, i, it) {
		const char *ip = json_string_value(json_object_get(it, "host_ip"));
		json_int_t hp = json_integer_value(json_object_get(it, "host_port"));
		json_int_t gp = json_integer_value(json_object_get(it, "guest_port"));
		const char *gip = json_string_value(json_object_get(it, "guest_ip"));
		struct in_addr ga;
		if (sb->nports >= K8_MAX_PORTS || !ip || strlen(ip) >= sizeof(sb->ports[0].host_ip) ||
		    hp < 1 || hp > 65535 || gp < 1 || gp > 65535 ||
		    (gip && (strlen(gip) >= sizeof(sb->ports[0].guest_ip) ||
			     inet_pton(AF_INET, gip, &ga) != 1)))
			continue;
		struct sb_port *p = &sb->ports[sb->nports++];
		snprintf(p->host_ip, sizeof(p->host_ip), "%s", ip);
		snprintf(p->guest_ip, sizeof(p->guest_ip), "%s", gip ? gip : "");
		p->host_port = (int)hp;
		p->guest_port = (int)gp;
		p->fd = -1;
	}
}

/* Take the sandbox's lifecycle token; waits for another holder. */
void sb_busy_enter(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	while (sb->busy)
		pthread_cond_wait(&sb->cond, &sb->lock);
	sb->busy = 1;
	pthread_mutex_unlock(&sb->lock);
}

void sb_busy_leave(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	sb->busy = 0;
	pthread_cond_broadcast(&sb->cond);
	pthread_mutex_unlock(&sb->lock);
}

int sb_wait_connected(struct sandbox *sb, struct k8_err *err)
{
	bool waited = false;
	int r = 0;

	if (!__atomic_load_n(&sb->connecting, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&sb->lock);
	while (sb->connecting) {
		waited = true;
		pthread_cond_wait(&sb->cond, &sb->lock);
	}
	if (waited && sb->state == SB_FAILED)
		r = k8_err_set(err, -EIO, "sandbox '%s' failed: %s; its next run or exec boots "
			       "its disk as it is", sb->name, sb->error);
	pthread_mutex_unlock(&sb->lock);
	return r;
}

/* ---- the table ---- */

struct sandbox *sb_get(struct daemon *d, const char *name, struct k8_err *err)
{
	struct sandbox *sb;

	pthread_mutex_lock(&d->lock);
	for (sb = d->sandboxes; sb; sb = sb->next)
		if (!strcmp(sb->name, name))
			break;
	if (sb)
		__atomic_add_fetch(&sb->users, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&d->lock);
	if (!sb)
		k8_err_set(err, -ENOENT, "sandbox '%s' does not exist; list them with `kosa8 sandbox ls`",
			   name);
	return sb;
}

struct sandbox **sb_collect(struct daemon *d, bool (*want)(struct sandbox *sb, void *arg),
			    void *arg, size_t *n)
{
	struct sandbox **list = NULL;
	size_t cap = 0;

	*n = 0;
	pthread_mutex_lock(&d->lock);
	for (struct sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		if (!want(sb, arg))
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			list = realloc(list, cap * sizeof(*list));
			if (!list)
				abort();
		}
		__atomic_add_fetch(&sb->users, 1, __ATOMIC_SEQ_CST);
		list[(*n)++] = sb;
	}
	pthread_mutex_unlock(&d->lock);
	return list;
}

static void sb_put_as(struct sandbox *sb, bool use)
{
	if (!sb)
		return;
	pthread_mutex_lock(&sb->lock);
	if (use)
		sb->last_use_ns = now_mono_ns();
	sb->users--;
	pthread_cond_broadcast(&sb->cond);
	pthread_mutex_unlock(&sb->lock);
}

void sb_put(struct daemon *d K8_UNUSED, struct sandbox *sb)
{
	sb_put_as(sb, true);
}

void sb_put_peek(struct daemon *d K8_UNUSED, struct sandbox *sb)
{
	sb_put_as(sb, false);
}

int sb_owner_check(const json_t *owner, struct k8_err *err)
{
	const char *k;
	json_t *v;

	if (!json_is_object(owner) || json_object_size(owner) > 8)
		return k8_err_set(err, -EINVAL, "field 'owner' must be an object of at most 8 fields");
	json_object_foreach((json_t *)owner, k, v) {
		if (!strcmp(k, "pod")) {
			if (!json_is_boolean(v))
				return k8_err_set(err, -EINVAL, "field 'owner.pod' must be true or false");
			continue;
		}
		if (strcmp(k, "kind") && strcmp(k, "namespace") && strcmp(k, "id"))
			return k8_err_set(err, -EINVAL, "field 'owner' takes kind, namespace, id and "
					  "pod, not '%.40s'", k);
		const char *str = json_string_value(v);
		if (!str || !*str || json_string_length(v) > 255)
			return k8_err_set(err, -EINVAL, "field 'owner.%s' must be a string of 1-255 "
					  "bytes", k);
		for (const unsigned char *c = (const unsigned char *)str; *c; c++)
			if (*c < 0x20 || *c == 0x7f)
				return k8_err_set(err, -EINVAL, "field 'owner.%s' holds a control "
						  "character", k);
	}
	v = json_object_get(owner, "kind");
	if (!json_is_string(v) || (strcmp(json_string_value(v), "containerd") &&
				   strcmp(json_string_value(v), "e2b")))
		return k8_err_set(err, -EINVAL, "field 'owner.kind' must be \"containerd\" or "
				  "\"e2b\"");
	return 0;
}
