/* SPDX-License-Identifier: Apache-2.0 */
/* api_route.h - what an API handler sees: the call, its checked fields, and the ways to answer.
 *
 * A listener (api.c's kosa8d.sock today; a docker.sock later, with its own table and
 * error format) owns the HTTP server. For each request it splits the path into decoded
 * segments (api_path_split), finds the route in its table (api_match), parses the body
 * into a JSON object and calls the route's handler with a `struct api_call`. Nothing here
 * names libmicrohttpd: a handler reads fields through the getters below, which check them
 * and name the field in the 400 they produce, and answers by
 *   - returning 0 with call->out set (or left NULL for `{}`): a JSON result, 200;
 *   - returning a negative errno with call->err filled: the listener's error reply
 *     (docs/reference/api.md, docs/errors.md); set call->exit_code for run/exec's `exit_code`;
 *   - api_reply_job(): a progress stream whose worker runs an api_job_fn;
 *   - api_reply_upgrade(): 101 and a framed exec stream (exec.c).
 * Route tables are arrays of struct api_route; the matcher is shared by every table.
 * Each module declares its handlers (`<prefix>_api_<verb>`) in its own header; this one
 * sits on the lowest layer (scripts/check-layers.sh) so every module may include it.
 */
#ifndef K8_DAEMON_API_ROUTE_H
#define K8_DAEMON_API_ROUTE_H

#include "common/util.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct daemon;
struct exec_ctx;
struct api_call;
struct api_job;

/* Bounds on a request path: segments, and bytes in one decoded segment (names, image
 * references and labels are far shorter; a longer segment is a 400, more segments a 404). */
#define API_SEG_MAX 10
#define API_SEG_LEN 512
#define API_PARAM_MAX 4

/* A route: method ("GET", "POST", ...), a pattern of literal segments and "{name}"
 * parameters (one whole segment each), and its handler. */
typedef int (*api_handler)(struct api_call *call);
struct api_route {
	const char *method;
	const char *pattern;
	api_handler fn;
};

struct api_path {
	int n;
	char seg[API_SEG_MAX][API_SEG_LEN];
};

struct api_param {
	const char *name;      /* points into the pattern, not NUL-terminated at the '}' */
	size_t name_len;
	const char *value;     /* points into struct api_path */
};

struct api_match {
	const struct api_route *route;
	int nparams;
	struct api_param params[API_PARAM_MAX];
};

/* Split a URL path (no query) into segments, each percent-decoded on its own, so an
 * encoded '/' stays inside its segment. Repeated and trailing slashes are ignored.
 * Returns 0, or -ENOENT (more than API_SEG_MAX segments) or -EINVAL (a segment longer
 * than API_SEG_LEN - 1 bytes, or one that decodes to a NUL byte) with err filled. */
int api_path_split(const char *url, struct api_path *p, struct k8_err *err);
/* docker.sock's paths (docker_api.c's dialect; here, pure, so fuzz_api reaches the one
 * the daemon runs): strip an optional /v1.NN/ prefix (-EINVAL with moby's wording outside
 * 1.24..1.47), split like api_path_split, and join an image name that spans segments
 * (src/docker/query.c dq_image_segments: "/images/127.0.0.1:5000/py:1/json" -> images,
 * "127.0.0.1:5000/py:1", json). Returns 0, or a negative errno with err filled. */
int api_path_split_docker(const char *url, struct api_path *p, struct k8_err *err);

/* Find the route for `method` and `p` in `table[0..n)`. Returns 0 with *m filled;
 * -ENOENT when no pattern matches the path; -EBADRQC when some pattern matches the path
 * but not with this method: `allow` then lists the methods that do ("GET, DELETE"). */
int api_match(const struct api_route *table, size_t n, const char *method,
	      const struct api_path *p, struct api_match *m, char *allow, size_t allowlen);

/* ---- the call ---- */

/* A reply whose body a callback produces while the client reads it (GET .../archive). */
struct api_reader {
	/* > 0: bytes put in buf; 0: the body is complete; < 0: failed, the reply is cut */
	ssize_t (*read)(void *ctx, char *buf, size_t max);
	void (*free)(void *ctx);        /* once the reply is over (or never started), always */
	void *ctx;
	const char *type;               /* Content-Type */
	const char *hname;              /* an extra header, or NULL */
	char *hvalue;                   /* its value, malloc'd; the listener frees it */
};

/* A request body taken as a stream (PUT .../archive): see api_take_body. */
struct api_sink {
	int (*write)(void *ctx, const void *p, size_t n, struct k8_err *err);
	int (*done)(struct api_call *call, void *ctx);  /* answers like a handler */
	void (*free)(void *ctx);        /* last, in every case */
	void *ctx;
};

/* A body a handler writes itself (api_reply_raw): how it is sent. */
enum api_raw_kind {
	API_RAW_BODY,           /* a 200 with a chunked body (logs, wait) */
	API_RAW_HIJACK,         /* moby's hijacked stream (attach, exec start): see api_reply_raw */
};

/* Where a raw body goes, and where the client's bytes come from (api_reply_raw). */
struct api_conn {
	int fd;                 /* write the body here */
	bool duplex;            /* fd is the client's socket: its bytes (stdin) are read from
	                         * it too, and a half-close ends them; else fd is a pipe */
	const char *extra;      /* duplex: bytes read past the request head, the stream's first */
	size_t extra_len;
};

/* Look a query argument up by name: its raw value, or NULL when absent. */
typedef const char *(*api_query_fn)(void *ctx, const char *key);

struct api_call {
	struct daemon *d;
	const char *method;
	const char *url;
	struct api_path path;
	struct api_match match;
	json_t *body;                   /* always a JSON object ({} when there was no body) */
	api_query_fn query;             /* may be NULL: no query arguments */
	void *query_ctx;

	/* the answer */
	json_t *out;                    /* the result of a plain JSON reply; NULL is `{}` */
	struct k8_err err;              /* filled when the handler returns < 0 */
	int exit_code;                  /* >= 0: add it to the error (run/exec), else -1 */
	struct {
		int (*fn)(struct api_job *, json_t **, struct k8_err *);
		char arg[API_SEG_LEN];
	} job;                          /* set by api_reply_job */
	struct exec_ctx *exec;          /* set by api_reply_upgrade */
	void (*after_reply)(struct api_call *call);     /* run once the reply is queued */
	unsigned status;                /* of a plain reply: 0 is 200 (docker.sock: 201, 204) */
	const char *reply_hname;        /* a header of a plain JSON reply (E2B's x-next-token) */
	char *reply_hvalue;             /* its value, malloc'd; the listener frees it */
	const char *text, *text_type;   /* a static non-JSON body instead of out ("OK") */
	struct api_reader reader;       /* set by api_reply_reader */
	struct api_sink sink;           /* set by api_take_body */
	api_query_fn header;            /* request headers by name (same contract as query) */
	struct api_raw {
		void (*fn)(void *ctx, const struct api_conn *conn);
		void (*free)(void *ctx);
		void *ctx;
		const char *type;
		enum api_raw_kind kind;
	} raw;                          /* set by api_reply_raw */
};

/* How one listener speaks (api.c serves each with the same HTTP code path): its route
 * table, its error body, its progress-stream lines, its path rules and the headers on
 * every reply. kosa8d.sock's is api.c's; docker.sock's is docker_api.c's. */
struct api_dialect {
	const struct api_route *routes;
	size_t nroutes;
	/* The body of an error reply; *http gets its status. */
	json_t *(*error)(const struct k8_err *err, unsigned *http);
	/* URL -> the path the table matches; NULL is api_path_split. */
	int (*split)(const char *url, struct api_path *p, struct k8_err *err);
	/* A progress stream's lines: a progress report (takes p), the success line (takes
	 * result; may return NULL: no line) and the failure line. */
	json_t *(*progress)(json_t *p);
	json_t *(*done)(json_t *result);
	json_t *(*failed)(const struct k8_err *err);
	const char *stream_type;        /* the stream's Content-Type */
	/* A path no route matches: fill call->err (status by its code); NULL: kosa8's 404. */
	void (*unmatched)(struct api_call *call);
	const char *const *headers;     /* name, value, ..., NULL: added to every reply */
	/* Handlers that take their request body as a stream (api_take_body), NULL-ended;
	 * NULL: none. Every other route's body is read whole first (at most 1 MiB). */
	const api_handler *streamed;
};

/* The path parameter `name` of the matched pattern ("{name}" gives "name"); never NULL
 * for a name the route's pattern has (handlers only ask for those); "" otherwise. */
const char *api_param(const struct api_call *call, const char *name);

/* ---- checked fields: one place that parses and checks what a client sent ----
 *
 * Each getter returns 0 when the field is fine or absent-and-optional (then *out keeps
 * the caller's default), or -EINVAL with call->err naming the field:
 *   "field 'timeout_s' must be an integer 0..3600". */
enum { API_OPTIONAL = 0, API_REQUIRED = 1 };

/* A string of 0..max bytes (1..max when required); no NUL bytes. */
int api_body_str(struct api_call *call, const char *field, int required, size_t max,
		 const char **out);
int api_body_int(struct api_call *call, const char *field, int required, int64_t min,
		 int64_t max, int64_t *out);
/* JSON true or false only. */
int api_body_bool(struct api_call *call, const char *field, int required, bool *out);

/* Query arguments are percent-decoded. A string that fits buf[len] (decoded, with its
 * NUL) and holds no NUL byte: *out points at buf. An empty value reads as absent (*out
 * stays as it was). */
int api_query_str(struct api_call *call, const char *key, char *buf, size_t len,
		  const char **out);
/* Digits only, no sign or spaces, min..max. */
int api_query_u64(struct api_call *call, const char *key, uint64_t min, uint64_t max,
		  uint64_t *out);
/* 1/true/yes or 0/false/no, any case; absent leaves *out. */
int api_query_bool(struct api_call *call, const char *key, bool *out);

/* ---- replies other than a JSON result ---- */

/* A progress stream (docs/reference/api.md): the worker gets the daemon, the body and `arg` (at
 * most API_SEG_LEN - 1 bytes, e.g. the sandbox name), reports through api_job_progress and
 * ends with its result or its error. */
struct api_job {
	struct daemon *d;
	json_t *body;
	char arg[API_SEG_LEN];
};
typedef int (*api_job_fn)(struct api_job *j, json_t **result, struct k8_err *err);
int api_reply_job(struct api_call *call, api_job_fn fn, const char *arg);
/* A progress callback for a job (the `void *` is the struct api_job); takes `p`. */
void api_job_progress(void *job, json_t *p);

/* Switch to a framed exec stream once the handler has a prepared exec context. */
int api_reply_upgrade(struct api_call *call, struct exec_ctx *exec);

/* A 200 whose body `rd->read` produces as the client reads it (streamed, never held
 * whole); the listener calls rd->free when the reply is over. */
int api_reply_reader(struct api_call *call, const struct api_reader *rd);

/* For a handler listed in its dialect's `streamed`: it runs once the request head is in
 * (call->body is {}), checks what it can and either fails or takes the body with this
 * call. A failure is the reply: at once when the client waits for "100 Continue" (it
 * never sends the body), else once the body, read and dropped, is in (a client still
 * writing would miss an early answer). Each piece of the body then goes
 * to sink->write (a failure is kept, the rest of the body is read and dropped, and that
 * error is the reply); at its end sink->done answers as a handler would. */
int api_take_body(struct api_call *call, const struct api_sink *sink);
/* A body the handler writes itself (docker.sock's attach, exec start, logs, wait), with
 * Content-Type `type`, as moby answers (docs/docker.md "Streams"):
 *   API_RAW_HIJACK, and the request asked for an upgrade (an `Upgrade` header): 101 with
 *     `Upgrade: tcp` and one `Connection: Upgrade`; then fn gets the connection's socket
 *     (conn->duplex, and the bytes already read past the request head) in the
 *     connection's thread; the socket is closed when fn returns.
 *   API_RAW_HIJACK without an `Upgrade` header: 200 and the raw stream until the
 *     connection closes (no chunks, no length: moby writes it on the hijacked
 *     connection), fn writing to a pipe (conn->duplex false: no stdin).
 *   API_RAW_BODY: a 200 with a chunked body, fn writing to a pipe.
 * A 200's headers go out at once; fn runs in a thread of its own and the body ends when
 * it returns (a write fails with EPIPE once the client left). free(ctx) runs exactly
 * once, after fn or when the reply never happened. */
int api_reply_raw(struct api_call *call, enum api_raw_kind kind, const char *type,
		  void (*fn)(void *ctx, const struct api_conn *conn),
		  void (*free_fn)(void *ctx), void *ctx);

#endif
