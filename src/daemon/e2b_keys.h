/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_keys.h - the API keys of kosa8's E2B API (e2b_keys.c, docs/e2b.md): made by
 * `kosa8 e2b key create` (shown once), kept as SHA-256 hashes in $KOSA8_HOME/e2b/keys.json
 * (0600), checked on every control-plane request, audited as e2b.key.create/.rm. */
#ifndef K8_DAEMON_E2B_KEYS_H
#define K8_DAEMON_E2B_KEYS_H

#include <stdbool.h>

struct daemon;
struct api_call;

/* 0 when `key` is one of the daemon's keys, else -EKEYREJECTED. */
int e2b_key_check(struct daemon *d, const char *key);

/* kosa8d.sock: POST /v1/e2b/keys {"name"?} -> {"id","name","key","created"} (the key
 * only here); GET /v1/e2b/keys -> {"keys":[{"id","name","prefix","created"}]};
 * DELETE /v1/e2b/keys/{id} -> {"id"}. */
int e2b_keys_api_create(struct api_call *call);
int e2b_keys_api_list(struct api_call *call);
int e2b_keys_api_rm(struct api_call *call);

#endif
