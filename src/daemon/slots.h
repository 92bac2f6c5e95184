/* SPDX-License-Identifier: Apache-2.0 */
/* slots.h - a sandbox's image slots (slots.c; docs/design.md "Images in a running VM",
 * docs/docker.md "Images: four slots, evicted LRU"): an image pulled into a running
 * sandbox, an image used by a run, a slot given up. */
#ifndef K8_SLOTS_H
#define K8_SLOTS_H

#include "daemon/api_route.h"
#include "daemon/record.h"

/* An image whose slot could not be given up, and the agent's words why (the container
 * that uses it). */
struct slot_holder {
	char ref[512];
	char why[256];
};
struct slot_busy {
	int n;
	struct slot_holder h[K8_MAX_SLOTS];
};

/* Attach `image` (pulled into the store first when it is not there) to sb's next free
 * slot and mount it in the guest; sb boots if it does not run. *out {"ref","digest",
 * "slot"}; audited as sandbox.pull. -ENOSPC when all slots are taken. */
int slot_pull(struct daemon *d, struct sandbox *sb, const char *image,
	      void (*progress)(void *, json_t *), void *pctx, json_t **out, struct k8_err *err);

/* What a run of an image is given: its slot, and its config {"env","entrypoint","cmd",
 * "workdir","user"}. fn's return is slot_use's. */
typedef int (*slot_use_fn)(void *ctx, const struct vm_image *img, const json_t *config,
			   struct k8_err *err);

/* Resolve `image` in the store, attach and mount it in sb (as `docker run`, pulling it
 * into the sandbox when it is not there) and call fn with its slot, holding sb's slot
 * lock for reading around both: no eviction changes the slot between this resolution and
 * fn's agent request (the run or create that mounts the image in a container). With
 * `evict` (the Docker engine), a sandbox whose slots are all taken gives up the least
 * recently used image the agent lets go (slot_evict) and tries again, three times at
 * most; -ENOSPC then, with *busy (may be NULL) the images held and why. */
int slot_use(struct daemon *d, struct sandbox *sb, const char *image, bool evict,
	     struct slot_busy *busy, slot_use_fn fn, void *ctx, struct k8_err *err);

/* Give up the least recently used slot of sb whose image the guest agent lets go (no
 * running or created container uses it: the agent unmounts it before the host ever
 * swaps the slot's backing file); with `digest`, only that image's slot. Holds sb's slot
 * lock for writing, and its busy token. 0, or -ENOSPC with *busy (may be NULL) filled and
 * err saying what holds the slots. Audited as sandbox.image.evict. */
int slot_evict(struct daemon *d, struct sandbox *sb, const char *digest,
	       struct slot_busy *busy, struct k8_err *err);

/* POST /v1/sandboxes/{name}/pull (api.h's table). */
int slot_api_pull(struct api_call *call);

#endif
