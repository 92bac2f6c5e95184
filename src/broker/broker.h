/* SPDX-License-Identifier: Apache-2.0 */
/* broker.h - kosa8-broker: one process per sandbox that adds API keys to the sandbox's
 * model-API requests on the host. Rules and secrets (rules.c), the TLS upstream
 * (upstream.c), one client connection (proxy.c), the reflected-key guard (guard.c), the
 * process (main.c). docs/broker.md. */
#ifndef K8_BROKER_H
#define K8_BROKER_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>
#include <openssl/ssl.h>

#include "broker/http.h"
#include "common/util.h"

#define BROKER_MAX_RULES 32
#define BROKER_MAX_SECRETS 32
#define BROKER_MAX_RESOLVE 16
#define BROKER_NAME_MAX 64              /* secret names, header names */
#define BROKER_SECRET_MAX 4096          /* bytes of one secret value */
#define BROKER_PH_PREFIX "k8-ph-"
#define BROKER_PH_LEN (6 + 32)          /* "k8-ph-" and 32 hex digits */

/* RULE_LOCAL: the model server kosa8 runs on the host (--local-model ADDR), plain HTTP,
 * no key: the placeholder is checked and every credential stripped as for the others. */
enum broker_kind { RULE_OPENAI, RULE_ANTHROPIC, RULE_HEADER, RULE_LOCAL };
#define BROKER_LOCAL_HOST "local-model"  /* a RULE_LOCAL's host, as the Host header names it */

struct broker_rule {
	enum broker_kind kind;
	char host[254];                 /* lower case, no port */
	char header[BROKER_NAME_MAX];   /* the credential header sent upstream */
	char secret[BROKER_NAME_MAX];   /* the secret's name; empty for RULE_LOCAL */
};

/* Why a request was refused; the names are the keys of the stats' "refused" objects. */
enum broker_refusal {
	REF_BAD_REQUEST, REF_NO_RULE, REF_PLACEHOLDER_MISSING, REF_PLACEHOLDER_WRONG,
	REF_TOO_LARGE, REF_NO_SECRET, REF_UPSTREAM_CONNECT, REF_UPSTREAM_TLS,
	REF_UPSTREAM_PROTOCOL, REF_BUSY, REF_TIMEOUT, REF_NO_MODEL, REF_N,
};
extern const char *const broker_refusal_names[REF_N];

struct broker_hoststats {
	uint64_t requests, bytes_up, bytes_down, refused[REF_N];
};

struct broker_secret {
	char name[BROKER_NAME_MAX];
	char *value;                    /* NUL-terminated, zeroed before it is freed */
	size_t len;
};

struct broker_resolve {                 /* --resolve HOST:ADDR[:PORT] */
	char host[254];
	struct sockaddr_storage addr;
	socklen_t alen;
};

struct broker {
	struct broker_rule rules[BROKER_MAX_RULES];
	int nrules;
	char placeholder[BROKER_PH_LEN + 1];
	struct broker_resolve resolve[BROKER_MAX_RESOLVE];
	int nresolve;
	uint64_t max_body;              /* bytes of one request body */
	int connect_ms, idle_ms;        /* upstream connect+handshake; any read or write */
	SSL_CTX *ssl;
	SSL_CTX *tls;                   /* interception: the server side, picks by SNI */
	SSL_CTX *leaf[BROKER_MAX_RULES]; /* per rule host: its certificate (NULL: none) */
	bool verbose;

	pthread_mutex_t lock;           /* secrets and stats below */
	struct broker_secret secrets[BROKER_MAX_SECRETS];
	int nsecrets;
	struct broker_hoststats hs[BROKER_MAX_RULES + 1]; /* [nrules]: hosts without a rule */
	struct sockaddr_storage local;  /* the model server (RULE_LOCAL): --local-model, or the */
	socklen_t local_len;            /* control op "local-model"; 0: none runs */
	uint64_t connections;
};

/* rules.c */
/* Parse one rule: "openai[=SECRET]", "anthropic[=SECRET]", "header:HOST:HEADER=SECRET",
 * "local-model[=MODEL]" (MODEL is the daemon's business: it picks the server). */
int broker_rule_parse(const char *spec, struct broker_rule *r, struct k8_err *err);
/* The rules file: {"placeholder": "k8-ph-...", "rules": ["openai=openai", ...]}. */
int broker_load_rules(struct broker *b, json_t *obj, struct k8_err *err);
bool broker_secret_name_ok(const char *name);
/* A value usable in a header: 1..4096 bytes of visible ASCII (no CR, LF, NUL, space). */
bool broker_secret_value_ok(const char *v, size_t n);
/* Set or replace (rotation) a secret; the old value is zeroed. Thread-safe. */
int broker_secret_set(struct broker *b, const char *name, const char *value, size_t n,
		      struct k8_err *err);
/* Forget a secret (`kosa8 secret rm`): its value is zeroed; rules using it answer 503
 * no_secret until it is set again. -ENOENT when it was not there. Thread-safe. */
int broker_secret_unset(struct broker *b, const char *name);
/* {"name": "value", ...}: the secrets handed over at start-up. */
int broker_secrets_load(struct broker *b, json_t *obj, struct k8_err *err);
/* Copy the current value of `name` into out[cap]; its length, or -ENOENT. */
int broker_secret_get(struct broker *b, const char *name, char *out, size_t cap);
const struct broker_rule *broker_rule_for_host(const struct broker *b, const char *host,
					       size_t n, int *idx);
bool broker_placeholder_ok(const struct broker *b, const char *v, size_t n);
void broker_count(struct broker *b, int rule, enum broker_refusal why, uint64_t up,
		  uint64_t down, bool request);
json_t *broker_stats_json(struct broker *b);
void broker_free(struct broker *b);

/* upstream.c */
struct upstream {
	int fd;
	SSL *ssl;                       /* NULL: plain TCP (RULE_LOCAL) */
	int rule;                       /* which rule's host it is connected to */
};
/* Connect to the rule's host (or its --resolve override) and verify its certificate;
 * a RULE_LOCAL to --local-model, plain TCP (REF_NO_MODEL when there is none).
 * On failure *why is REF_UPSTREAM_CONNECT or REF_UPSTREAM_TLS and err says why. */
int upstream_open(struct broker *b, int rule, struct upstream *u, enum broker_refusal *why,
		  struct k8_err *err);
void upstream_close(struct upstream *u);
/* Blocking I/O bounded by the idle timeout: bytes read (0 at EOF) or a negative errno. */
ssize_t upstream_read(struct upstream *u, char *buf, size_t n);
int upstream_write(struct upstream *u, const void *buf, size_t n);
/* Has the server closed a kept-alive connection (or sent something unasked)? */
bool upstream_stale(struct upstream *u);
SSL_CTX *upstream_ctx(const char *ca_file, struct k8_err *err);

/* guard.c: buf[0..n) is response body data not passed on yet, the bytes held back last
 * time first. -1: the key is in it (pass none of it on); else how many of its first bytes
 * may go to the client now. The rest could still become the key with the next bytes:
 * the caller keeps them in front of those. end: no more bytes follow, so none is held.
 * klen 0 (no key: the local model) passes everything. */
ssize_t guard_pass(const char *key, size_t klen, const char *buf, size_t n, bool end);

/* intercept.c: interception mode (--listen-tls). Read the sandbox CA (PEM certificate
 * and key) from fd, make every rule host's certificate, drop the CA's key. */
int intercept_init(struct broker *b, int fd, struct k8_err *err);
/* The TLS handshake on a client connection: the session, *rule the rule its SNI named;
 * NULL when the handshake failed (no SNI, no rule for it, the client gave up). */
SSL *intercept_accept(struct broker *b, int fd, int *rule);

/* proxy.c: serve one client connection until it closes; closes fd. tls: it came on the
 * interception listener (TLS, the rule fixed by the SNI). */
void proxy_serve(struct broker *b, int fd, bool tls);
/* A refusal on a fresh connection when every worker is busy. */
void proxy_refuse_busy(struct broker *b, int fd);

#endif
