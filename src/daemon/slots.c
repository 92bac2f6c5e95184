/* SPDX-License-Identifier: Apache-2.0 */
/* slots.c - a sandbox's image slots (slots.h; docs/design.md "Images in a running VM").
 *
 * A VM has K8_MAX_SLOTS read-only disks whose backing files the host swaps over QMP; an
 * image pulled into a sandbox takes the next free one, is attached and mounted in the
 * guest. A run resolves its image to a slot and starts its container in one hold of the
 * sandbox's slot lock (sb->slots_lock, for reading), so that an eviction (for writing;
 * only the Docker engine evicts) never takes the slot between the two; the agent
 * unmounts an image before its slot is given up, and refuses while a container uses it,
 * and those refusals come back as data (struct slot_busy) for the caller's own words.
 * Slot lock first, then the sandbox's busy token (which an attach and an eviction take).
 */
#include "daemon/slots.h"
#include "daemon/daemon.h"
#include "daemon/sandbox.h"
#include "image/image.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define REQ_TIMEOUT_MS 30000

static struct vm_image *slot_find(struct sandbox *sb, const char *digest)
{
	for (int i = 0; i < sb->nimages; i++)
		if (!strcmp(sb->images[i].digest, digest))
			return &sb->images[i];
	return NULL;
}

int slot_pull(struct daemon *d, struct sandbox *sb, const char *image,
	    void (*progress)(void *, json_t *), void *pctx, json_t **out, struct k8_err *err)
{
	struct image_info info = { 0 };
	struct sb_progress pp = { progress, pctx };
	cleanup_free char *disk = NULL;
	struct vm_image *img;
	int r, slot;

	r = image_resolve(d->images, image, &info, err);
	if (r == -ENOENT) {
		/* Not in the store: fetch it (image_pull fails fast when offline). */
		json_t *pulled = NULL;
		struct k8_err pe = { 0 };
		r = sb_image_pull(d, image, progress, pctx, &pulled, &pe);
		if (!r)
			r = image_resolve(d->images, json_string_value(json_object_get(pulled, "ref")),
					  &info, &pe);
		json_decref(pulled);
		if (r) {
			k8_err_clear(err);
			return k8_err_set(err, r, "%s", pe.msg);
		}
	} else if (r) {
		return r;
	}
	r = sb_ensure_running(d, sb, err);
	if (r)
		goto out;
	r = image_disk(d->images, info.digest, sb_progress, &pp, &disk, err);
	if (r)
		goto out;
	sb_busy_enter(sb);
	img = slot_find(sb, info.digest);
	if (!img) {
		bool used[K8_MAX_SLOTS] = { 0 };
		for (int i = 0; i < sb->nimages; i++)
			used[sb->images[i].slot] = true;
		for (slot = 0; slot < K8_MAX_SLOTS && used[slot]; slot++)
			;
		if (slot == K8_MAX_SLOTS) {
			r = k8_err_set(err, -ENOSPC,
				       "sandbox '%s' already has %d images, the most one VM can hold; "
				       "create another sandbox for this one", sb->name, K8_MAX_SLOTS);
			goto leave;
		}
		if (progress)
			progress(pctx, json_pack("{s:s,s:s}", "phase", "attach", "what", info.digest));
		r = vm_attach_image(&sb->qmp, slot, disk, err);
		if (r)
			goto leave;
		pthread_mutex_lock(&sb->lock);
		img = &sb->images[sb->nimages++];
		memset(img, 0, sizeof(*img));
		snprintf(img->ref, sizeof(img->ref), "%s", info.ref);
		snprintf(img->digest, sizeof(img->digest), "%s", info.digest);
		snprintf(img->disk, sizeof(img->disk), "%s", disk);
		img->slot = slot;
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
	}
	r = sb_mount_images(sb, err);
	if (!r) {
		daemon_audit(d, "sandbox.pull", sb->name,
			     json_pack("{s:s,s:s,s:i}", "image", info.ref, "digest", info.digest,
				       "slot", img->slot));
		*out = json_pack("{s:s,s:s,s:i}", "ref", info.ref, "digest", info.digest, "slot",
				 img->slot);
	}
leave:
	sb_busy_leave(sb);
out:
	image_info_clear(&info);
	return r;
}

/* slot_evict under the write lock (held by the caller). */
static int slot_evict_locked(struct daemon *d, struct sandbox *sb, const char *digest,
			     struct slot_busy *busy, struct k8_err *err)
{
	struct vm_image order[K8_MAX_SLOTS];
	char held[1024] = "";
	size_t hl = 0;
	int n, r = -ENOSPC;

	if (busy)
		busy->n = 0;
	sb_busy_enter(sb);
	pthread_mutex_lock(&sb->lock);
	n = sb->nimages;
	memcpy(order, sb->images, sizeof(order));
	pthread_mutex_unlock(&sb->lock);
	for (int i = 1; i < n; i++)     /* least recently used first */
		for (int k = i; k > 0 && order[k].used_ns < order[k - 1].used_ns; k--) {
			struct vm_image t = order[k];
			order[k] = order[k - 1];
			order[k - 1] = t;
		}
	for (int i = 0; i < n; i++) {
		struct k8_err e2 = { 0 };
		json_t *resp = NULL;
		int q;

		if (digest && strcmp(order[i].digest, digest))
			continue;
		q = link_request(&sb->link,
				     json_pack("{s:s,s:i,s:s}", "op", "image.unmount", "slot",
					       order[i].slot, "digest", order[i].digest),
				     REQ_TIMEOUT_MS, &resp, NULL, &e2);
		json_decref(resp);
		if (q == -EOPNOTSUPP) {
			r = k8_err_set(err, -ENOSPC, "sandbox '%s' has %d images and its guest agent "
				       "cannot unmount one: rebuild the guest image (make guest)",
				       sb->name, K8_MAX_SLOTS);
			goto out;
		}
		if (q) {
			if (hl < sizeof(held))
				hl += (size_t)snprintf(held + hl, sizeof(held) - hl, "%s%s (%s)",
						       hl ? ", " : "", order[i].ref, e2.msg);
			if (busy && busy->n < K8_MAX_SLOTS) {
				struct slot_holder *h = &busy->h[busy->n++];
				snprintf(h->ref, sizeof(h->ref), "%s", order[i].ref);
				snprintf(h->why, sizeof(h->why), "%s", e2.msg);
			}
			continue;
		}
		pthread_mutex_lock(&sb->lock);
		for (int k = 0; k < sb->nimages; k++) {
			if (sb->images[k].slot != order[i].slot)
				continue;
			memmove(&sb->images[k], &sb->images[k + 1],
				(size_t)(sb->nimages - k - 1) * sizeof(sb->images[0]));
			sb->nimages--;
			break;
		}
		sb_save(sb);
		pthread_mutex_unlock(&sb->lock);
		daemon_audit(d, "sandbox.image.evict", sb->name,
			     json_pack("{s:s,s:s,s:i}", "image", order[i].ref, "digest",
				       order[i].digest, "slot", order[i].slot));
		r = 0;
		goto out;
	}
	r = k8_err_set(err, -ENOSPC, "sandbox '%s' holds %d images, each in use: %s", sb->name,
		       n, held);
out:
	sb_busy_leave(sb);
	return r;
}

int slot_evict(struct daemon *d, struct sandbox *sb, const char *digest,
	       struct slot_busy *busy, struct k8_err *err)
{
	int r;

	pthread_rwlock_wrlock(&sb->slots_lock);
	r = slot_evict_locked(d, sb, digest, busy, err);
	pthread_rwlock_unlock(&sb->slots_lock);
	return r;
}

/* `image` attached and mounted in sb (pulled into it when it is not: the caller holds
 * the slot lock for reading), as *img, and its config. -ENOSPC when no slot is free. */
static int slot_for_run(struct daemon *d, struct sandbox *sb, const char *image,
			struct vm_image *img, json_t **config, struct k8_err *err)
{
	struct image_info info = { 0 };
	struct vm_image *found;
	int r;

	r = image_resolve(d->images, image, &info, err);
	if (r == -ENOENT && daemon_offline(d, NULL)) {   /* the store's hint would say `image pull` */
		err->code = 0;
		return k8_err_set(err, -ENETUNREACH, "KOSA8_OFFLINE is set: not fetching %s; load "
				  "it with kosa8 image load or kosa8 bundle import", image);
	}
	if (r)
		return r;
	pthread_mutex_lock(&sb->lock);
	found = slot_find(sb, info.digest);
	if (found) {
		found->used_ns = now_mono_ns();
		*img = *found;
	}
	pthread_mutex_unlock(&sb->lock);
	if (!found || !found->mounted) {
		/* Like `docker run`: use the image if the store has it. */
		json_t *res = NULL;
		r = slot_pull(d, sb, image, NULL, NULL, &res, err);
		json_decref(res);
		if (r)
			goto out;
		pthread_mutex_lock(&sb->lock);
		found = slot_find(sb, info.digest);
		if (found) {
			found->used_ns = now_mono_ns();
			*img = *found;
		}
		pthread_mutex_unlock(&sb->lock);
		if (!found) {
			r = k8_err_set(err, -EIO, "image %s vanished from the sandbox", info.ref);
			goto out;
		}
	}
	*config = json_pack("{s:O,s:O?,s:O?,s:s,s:s}", "env", info.env, "entrypoint",
			    info.entrypoint, "cmd", info.cmd, "workdir", info.workdir, "user", info.user);
out:
	image_info_clear(&info);
	return r;
}

int slot_use(struct daemon *d, struct sandbox *sb, const char *image, bool evict,
	     struct slot_busy *busy, slot_use_fn fn, void *ctx, struct k8_err *err)
{
	for (int tries = 0;; tries++) {
		struct vm_image img = { .slot = -1 };
		json_t *cfg = NULL;
		int r;

		pthread_rwlock_rdlock(&sb->slots_lock);
		r = slot_for_run(d, sb, image, &img, &cfg, err);
		if (!r)
			r = fn(ctx, &img, cfg, err);
		pthread_rwlock_unlock(&sb->slots_lock);
		json_decref(cfg);
		if (r != -ENOSPC || !evict || tries == 3)
			return r;
		/* every slot taken: give up the least recently used one nobody uses */
		k8_err_clear(err);
		if ((r = slot_evict(d, sb, NULL, busy, err)))
			return r;
	}
}

static int slot_pull_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	const char *image = json_string_value(json_object_get(j->body, "image"));
	struct sandbox *sb;
	int r;

	if (!image)
		return k8_err_set(err, -EINVAL, "an image is required, e.g. python:3.12-slim");
	sb = sb_get(j->d, j->arg, err);
	if (!sb)
		return -ENOENT;
	r = slot_pull(j->d, sb, image, api_job_progress, j, result, err);
	sb_put(j->d, sb);
	return r;
}

/* A sandbox that does not exist is a plain 404, before the stream starts. */
int slot_api_pull(struct api_call *call)
{
	const char *name = api_param(call, "name");
	struct sandbox *sb;

	if (!sb_name_valid(name))
		return k8_err_set(&call->err, -ENOENT, "sandbox '%s' does not exist", name);
	sb = sb_get(call->d, name, &call->err);
	if (!sb)
		return call->err.code;
	sb_put(call->d, sb);
	return api_reply_job(call, slot_pull_job, name);
}
