/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_box.h - an E2B sandbox as kosa8 keeps it (e2b_box.c, docs/e2b.md): a kosa8 sandbox
 * named "e2b-<id>" with one long-lived container of the template's image, and what E2B
 * says about it (tokens, template, metadata, environment, lifecycle, network as asked,
 * snapshots), kept in its folder as e2b.json (0600: it holds the tokens). The table of
 * boxes, their timeouts (the reaper: kill, or pause with autoPause) and the daemon's E2B
 * settings (config.json "e2b") live here too. */
#ifndef K8_DAEMON_E2B_BOX_H
#define K8_DAEMON_E2B_BOX_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/util.h"
#include "e2b/control.h"

struct api_call;
struct daemon;
struct e2b_proc;
struct sandbox;
struct stream;

#define E2B_SB_PREFIX "e2b-"
#define E2B_ENVD_VERSION "0.5.7"        /* the envd features served (docs/e2b.md) */
#define E2B_LISTEN_DEFAULT "127.0.0.1:7435"

enum e2b_state { E2B_RUNNING, E2B_PAUSED, E2B_KILLED };

struct e2b_box {
	struct e2b_box *next;
	int refs;                       /* the table's one, and each user's */
	char id[E2B_ID_LEN + 1];
	char sandbox[E2B_ID_LEN + 8];   /* the kosa8 sandbox: "e2b-<id>" */
	char token[E2B_TOKEN_LEN + 1];  /* envdAccessToken: envd's X-Access-Token */
	char traffic[E2B_TOKEN_LEN + 1];/* trafficAccessToken: the interpreter's requests */
	char template_id[256];
	char image[512];                /* the image reference it runs */
	char container[13];             /* its long-lived container in the guest */
	char user[64];                  /* the image's user ("" : root) */
	char workdir[1024];             /* the image's working directory ("" : /) */
	json_t *image_env;              /* ["K=V"]: the image's environment */
	json_t *env_vars;               /* {K: V}: create's envVars, every process gets them */
	json_t *metadata;
	json_t *network;                /* {allowOut, denyOut, rules: {host: [header names]},
	                                 * allow_internet_access} as asked (no secret value) */
	json_t *secrets;                /* names of the broker secrets its rules made */
	json_t *snapshots;              /* [{"id","label","names","created"}] */
	int64_t started_ns, end_ns;     /* wall clock */
	bool auto_pause, auto_resume;
	enum e2b_state state;
	pthread_mutex_t op;             /* a lifecycle operation (pause, kill, fork, ...) */
	/* envd's processes (e2b_envd.c): guarded by the table's lock */
	struct e2b_proc *procs;
};

/* The daemon's E2B side: the table and its lock, the reaper. */
struct e2b {
	struct daemon *d;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct e2b_box *boxes;
	bool reaper;
	int port;                       /* the listener's port, 0: not served */
	char listen[64];                /* "127.0.0.1:7435" as bound */
};
struct e2b *e2b_of(struct daemon *d);

/* Settings from config.json "e2b" (read at each call): the image a template names
 * (templates map first, then the name itself), and the size of new sandboxes. */
int e2b_template_image(struct daemon *d, const char *template_id, char *out, size_t n,
		       struct k8_err *err);
void e2b_sizes(struct daemon *d, int *cpus, int *memory_mib, int *disk_gb);

/* Find a box by id (a reference: e2b_box_put). NULL when there is none (a killed one
 * counts as none unless `killed`). */
struct e2b_box *e2b_box_get(struct daemon *d, const char *id, bool killed);
void e2b_box_put(struct daemon *d, struct e2b_box *b);
/* Every box (references), for the list; *n is the count. */
struct e2b_box **e2b_box_all(struct daemon *d, size_t *n);
/* A new box (fresh id and tokens) in the table, not yet saved. */
struct e2b_box *e2b_box_new(struct daemon *d, struct k8_err *err);
/* Take b out of the table (its reference goes with it). */
void e2b_box_forget(struct daemon *d, struct e2b_box *b);
/* Write b's e2b.json into its sandbox's folder. Caller holds the table's lock or b->op. */
int e2b_box_save(struct daemon *d, struct e2b_box *b, struct k8_err *err);
/* The boxes of sandboxes left by an earlier daemon (called once at start); the reaper. */
void e2b_load(struct daemon *d);

/* Lifecycle (caller holds b->op): pause to disk, resume, kill (the sandbox removed, or,
 * while it has snapshots, paused to disk and hidden). `by` names who asked, for the
 * audit log ("api", "timeout"). */
int e2b_box_pause(struct daemon *d, struct e2b_box *b, const char *by, struct k8_err *err);
int e2b_box_resume(struct daemon *d, struct e2b_box *b, struct k8_err *err);
int e2b_box_kill(struct daemon *d, struct e2b_box *b, const char *by, struct k8_err *err);

/* Start b's long-lived container of its image (with b's environment), in its sandbox
 * (booted when it does not run): b->container. */
int e2b_box_container(struct daemon *d, struct e2b_box *b, struct k8_err *err);

/* The daemon stops its VMs: each running box's sandbox is paused to disk first, so its
 * memory, processes and files come back on its next use after the next start. */
void e2b_stop(struct daemon *d);

/* Data plane: is b usable? A sandbox stopped meanwhile (the daemon stopped its VMs) boots
 * again with a fresh container. A paused box resumes when it has autoResume, else -EAGAIN
 * ("paused: resume it with Sandbox.connect"). */
int e2b_box_ready(struct daemon *d, struct e2b_box *b, struct k8_err *err);

/* The environment every process of b gets: `base` (["K=V"], may be NULL: the broker's
 * variables and HOME, as exec.c's run puts them under the rest), then the image's, then
 * envVars, then `extra` (may be NULL), each overriding the one before. */
json_t *e2b_box_env(struct e2b_box *b, json_t *base, json_t *extra);
/* config.json "e2b.upload_max_mib" in bytes (default 1024 MiB): the largest /files upload. */
uint64_t e2b_upload_max(struct daemon *d);
/* The home folder of `user` ("" or "root": /root, else /home/USER). */
void e2b_home(const char *user, char *out, size_t n);

/* ---- commands of the daemon's own in b's container (envd's helpers) ----
 *
 * e2b_box_exec starts argv (taken) in b's container as `user` ("" or NULL: the image's
 * user), with cwd /, b's environment (e2b_box_env) and stdin a pipe when `in` (else
 * /dev/null). 0 with *sbp (a reference: sb_put after link_stream_close) and *sp, the
 * stream to pump with link_stream_run; or the agent's error (its message kept). */
#define E2B_EXEC_START_MS 30000
int e2b_box_exec(struct daemon *d, struct e2b_box *b, const char *user, json_t *argv,
		 bool in, struct sandbox **sbp, struct stream **sp, struct k8_err *err);
/* Keep the start of a stream (a helper's stderr, for its message): n bytes at p added to
 * buf[size] (*len so far) as far as they fit, NUL-ended. */
void e2b_keep_start(char *buf, size_t size, size_t *len, const void *p, size_t n);
/* What e2b_box_run collected. */
struct e2b_run {
	uint8_t *out;                   /* stdout (malloc'd; e2b_run_free) */
	size_t len, cap, max;
	char err[512];                  /* the start of stderr, NUL-ended */
	size_t errlen;
	int code;                       /* the exit code; -1: a signal or none */
	bool over;
};
/* Run argv (taken) in b's container with no stdin until it exits: its stdout, at most
 * max bytes (beyond: the process is killed and -E2BIG), the start of its stderr and its
 * exit code in *res, whatever the code (the caller judges it). -ECONNRESET when the VM or
 * agent went away first; e2b_box_exec's errors. Free res with e2b_run_free in any case. */
int e2b_box_run(struct daemon *d, struct e2b_box *b, const char *user, json_t *argv,
		size_t max, struct e2b_run *res, struct k8_err *err);
void e2b_run_free(struct e2b_run *res);

/* ---- Connect's error replies (envd's process and filesystem services) ----
 *
 * A unary call's failure rc (call->err says why) answered in Connect's shape: Connect's
 * HTTP status and {"code": "not_found", "message"}. Returns 0: the handler returns it. */
int e2b_connect_fail(struct api_call *call, int rc);
/* A server-streaming call's failure before its first message: 200 and one end-of-stream
 * message carrying the error, as Connect answers. Returns 0 (api_reply_raw). */
int e2b_connect_stream_fail(struct api_call *call, int rc);

/* getInfo's and list's object. Caller holds the table's lock. */
json_t *e2b_box_json(struct daemon *d, struct e2b_box *b, bool detail);
/* The audit helper for E2B actions: "via": "e2b" and the box's id in the details. */
void e2b_audit(struct daemon *d, struct e2b_box *b, const char *action, json_t *details);

#endif
