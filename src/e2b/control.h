/* SPDX-License-Identifier: Apache-2.0 */
/* control.h - E2B's control plane on the wire: ids, keys and tokens, a create request
 * checked into C, the network settings mapped onto kosa8's egress policy and broker, the
 * list's query (docs/e2b.md). Pure: the daemon holds the sandboxes.
 *
 * A request that asks for what kosa8 does not do is refused with a message that names
 * it ("network.egressProxy is not supported by kosa8: ..."), never silently ignored. */
#ifndef K8_E2B_CONTROL_H
#define K8_E2B_CONTROL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define E2B_ID_LEN 20                   /* [a-z0-9]: a sandbox's id */
#define E2B_KEY_HEX 40                  /* an API key: "e2b_" + 40 hex digits */
#define E2B_KEY_LEN (4 + E2B_KEY_HEX)
#define E2B_TOKEN_LEN 48                /* access tokens: hex */
#define E2B_TIMEOUT_DEFAULT 300         /* seconds, as the SDKs' default */
#define E2B_TIMEOUT_MAX 86400           /* E2B's longest (a day) */
#define E2B_META_MAX 64                 /* metadata entries */
#define E2B_META_KEY_MAX 256
#define E2B_META_VAL_MAX 1024
#define E2B_ENV_MAX 256                 /* envVars entries */
#define E2B_TRANSFORM_MAX 8             /* header rules: kosa8's interception limit */

/* Random ids from getrandom(): a sandbox id, an API key, an access token. */
int e2b_id_new(char out[E2B_ID_LEN + 1]);
bool e2b_id_ok(const char *s);
int e2b_key_new(char out[E2B_KEY_LEN + 1]);
/* "e2b_" then 1-128 lowercase hex digits (what the Python SDK checks too). */
bool e2b_key_format_ok(const char *s);
int e2b_token_new(char out[E2B_TOKEN_LEN + 1]);
/* Constant-time equality of two NUL-terminated strings of at most 256 bytes. */
bool e2b_secret_eq(const char *a, const char *b);

/* One header-transform rule: requests to `host` get `header: value` (value without a
 * "Bearer " prefix, which `bearer` records). */
struct e2b_transform {
	char host[254];
	char header[128];
	char *value;                    /* owned; wiped by e2b_net_clear */
	bool bearer;
};

/* A network request (create's "network" and "allow_internet_access", or PUT .../network)
 * in kosa8's terms. */
struct e2b_net {
	char mode[16];                  /* "deny", "allow-list", "allow-all" */
	json_t *rules;                  /* egress rules (allowOut without the all-traffic
	                                 * entries), for kosa8's policy parser */
	json_t *allow_out, *deny_out;   /* as given, for getInfo */
	struct e2b_transform t[E2B_TRANSFORM_MAX];
	size_t nt;
	bool has_rules;                 /* a "rules" object was given (even empty) */
	int allow_internet;             /* -1 not given, 0, 1 */
};
/* `network` may be NULL; allow_internet is the request's allow_internet_access (-1 when
 * absent). Deny is the default: only allow_internet_access true or an all-traffic
 * allowOut entry opens everything. 0, or -EINVAL / -ENOTSUP with a message. */
int e2b_net_parse(json_t *network, int allow_internet, struct e2b_net *out,
		  struct k8_err *err);
void e2b_net_clear(struct e2b_net *n);

struct e2b_create {
	char template_id[256];
	int64_t timeout_s;
	json_t *metadata;               /* {string: string} */
	json_t *env_vars;               /* {NAME: string} */
	struct e2b_net net;
	bool auto_pause, auto_resume;
};
/* POST /v2/sandboxes' body. `dflt_template` when templateID is absent. */
int e2b_create_parse(json_t *body, const char *dflt_template, struct e2b_create *c,
		     struct k8_err *err);
void e2b_create_clear(struct e2b_create *c);
/* A {string: string} object of at most max entries, keys 1..kmax and values 0..vmax
 * bytes without NUL; env: keys are variable names. `what` names it in the message. */
int e2b_str_map(json_t *v, const char *what, size_t max, size_t kmax, size_t vmax, bool env,
		struct k8_err *err);
/* A "timeout" field in seconds (absent: *out stays). */
int e2b_timeout(json_t *body, int64_t *out, struct k8_err *err);

/* The list's metadata filter as the SDK sends it: a query value (decoded once by the
 * HTTP layer) of form-encoded pairs whose keys and values are percent-encoded once more.
 * *out is {key: value}. */
int e2b_metadata_query(const char *q, json_t **out, struct k8_err *err);
/* state=running,paused: bit 1 running, bit 2 paused (0: both). */
#define E2B_STATE_RUNNING 1u
#define E2B_STATE_PAUSED 2u
int e2b_state_query(const char *q, unsigned *mask, struct k8_err *err);
/* Does `meta` hold every pair of `want`? */
bool e2b_metadata_match(json_t *meta, json_t *want);

#endif
