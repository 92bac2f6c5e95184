/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.h - a sandbox's lifecycle: create, resume, keep running, stop, remove, pull
 * (sandbox.c, docs/design.md). The record itself is record.h; booting, connecting,
 * adopting and killing its VM is boot.h. */
#ifndef K8_SANDBOX_H
#define K8_SANDBOX_H

#include "daemon/api_route.h"
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"
#include "daemon/agentlink.h"
#include "daemon/boot.h"
#include "daemon/daemon.h"
#include "daemon/record.h"
#include "daemon/vm.h"

int sb_load_all(struct daemon *d);
int sb_create(struct daemon *d, json_t *body, void (*progress)(void *, json_t *), void *pctx,
	      json_t **out, struct k8_err *err);
json_t *sb_to_json(struct sandbox *sb, bool detail);
json_t *sb_list_json(struct daemon *d);
int sb_remove(struct daemon *d, const char *name, bool wipe, struct k8_err *err);
/* Pull `ref` from its registry into the image store (KOSA8_OFFLINE, credentials, mirrors
 * and insecure registries from the daemon's environment); audited as image.pull. */
int sb_image_pull(struct daemon *d, const char *ref, void (*progress)(void *, json_t *),
		  void *pctx, json_t **out, struct k8_err *err);
/* The same with "user:password" given by the client (NULL: the stored credentials). */
int sb_image_pull_as(struct daemon *d, const char *ref, const char *basic,
		     void (*progress)(void *, json_t *), void *pctx, json_t **out,
		     struct k8_err *err);
int sb_ensure_running(struct daemon *d, struct sandbox *sb, struct k8_err *err);
void sb_stop_all(struct daemon *d);
/* The progress of a pull or a disk build (image.h's callback) as {"phase","what",
 * "done","total"} to fn(ctx, ...); ctx is a struct sb_progress. */
struct sb_progress {
	void (*fn)(void *, json_t *);
	void *ctx;
};
void sb_progress(void *ctx, const char *phase, const char *what, uint64_t done,
		 uint64_t total);
/* link_request on the sandbox's agent: takes req. */
int sb_agent_request(struct sandbox *sb, json_t *req, int timeout_ms, json_t **resp,
		     struct stream **stream, struct k8_err *err);
json_t *sb_containers_json(struct sandbox *sb, json_t *agent_list);
/* Take / give back a name in the sandbox table (create and fork). sb_reserve returns a
 * BOOTING sandbox whose busy token and one user reference the caller holds; NULL with
 * err set if the name is invalid or taken. sb_unreserve removes its dir and frees it. */
struct sandbox *sb_reserve(struct daemon *d, const char *name, struct k8_err *err);
/* A sandbox record that is in no table and owns nothing but its memory: the source of a
 * fork from a snapshot pulled into `dir` (store.c; ckpt_fork reads its dir, settings and
 * checkpoint). Free it with sb_detached_free. */
struct sandbox *sb_detached(struct daemon *d, const char *name, const char *dir);
void sb_detached_free(struct sandbox *sb);
void sb_unreserve(struct daemon *d, struct sandbox *sb);
/* Restore a sandbox paused to disk (state SB_PAUSED, its machine in paused/; the pause
 * itself is checkpoint.c's). Caller holds the busy token. `by` names what asked, for the
 * audit record ("resume", "use"). With `behind`, it returns once the machine runs and
 * the guest's HELLO and init go on behind (sb_connect_behind), which takes the busy
 * token on success: the caller leaves it only on failure. */
int sb_resume_paused(struct daemon *d, struct sandbox *sb, const char *by, bool behind,
		     struct k8_err *err);
/* In paused/: the pause was handed to a store (store.c, `sandbox pause --to`), and the
 * store's copy is the one that counts: sb_resume_paused refuses (-EBUSY) while it is
 * there, so no use resumes this copy while another host may resume the store's; `sandbox
 * resume` takes it back from the store first (and removes this file). */
#define SB_PAUSED_HANDED "store.json"
/* Does sb's dir hold a complete paused/: its state, or its devices and memory file? */
bool sb_paused_on_disk(struct sandbox *sb);

/* 0 when no sandbox has the image `digest` attached; else -EBUSY, err naming one that has
 * (`ref` is how the user named the image). images.c asks before it removes one. */
int sb_image_unused(struct daemon *d, const char *digest, const char *ref, struct k8_err *err);

/* API handlers (api_route.h; the table is in api.c) */
int sb_api_list(struct api_call *call);
int sb_api_create(struct api_call *call);
int sb_api_get(struct api_call *call);
int sb_api_rm(struct api_call *call);

#endif
