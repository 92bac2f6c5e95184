/* SPDX-License-Identifier: Apache-2.0 */
/* kclient.h - the shim's side of kosa8d's API (docs/reference/api.md): HTTP/1.1 with JSON over the
 * daemon's unix socket, the same socket and routes the CLI uses.
 *
 * One connection per request (Connection: close). Answers are read whole, at most
 * KC_MAX_ANSWER bytes, and parsed by kc_answer_parse(), a pure function over the bytes
 * (the fuzzer's entry): the head by the broker's strict HTTP parser (src/broker/http.c),
 * the body by its framing (Content-Length, chunked, or the connection's end), then JSON;
 * a progress stream (NDJSON) yields its final result or error line.
 *
 * Errors: a negative errno and a message in err. The daemon's error codes map to
 * errnos as the CLI maps them (bad_request -EINVAL, not_found -ENOENT, conflict -EBUSY,
 * unavailable -EHOSTDOWN, internal -EIO); no daemon on the socket is -ECONNREFUSED.
 */
#ifndef K8_SHIM_KCLIENT_H
#define K8_SHIM_KCLIENT_H

#include "common/util.h"

#include <jansson.h>
#include <stddef.h>

#define KC_MAX_ANSWER (64u << 20)     /* a whole answer, head and body */
#define KC_MAX_HEAD (64u << 10)

struct kc {
	char sock[108];               /* $KOSA8_HOME/kosa8d.sock */
	int timeout_ms;               /* per read or write; 0: none */
};

/* 0, or -ENAMETOOLONG when the socket path does not fit a sockaddr_un. */
int kc_init(struct kc *k, const char *home, struct k8_err *err);

/* METHOD path with `body` (NULL: none). On 2xx: 0 and *out (the JSON answer, or a
 * progress stream's result; {} for an empty body) when out is not NULL. */
int kc_call(const struct kc *k, const char *method, const char *path, json_t *body,
	    json_t **out, struct k8_err *err);

/* POST path with `body`, upgraded to an exec stream (docs/reference/api.md "Exec streams"): 0 with
 * the socket in *fd and the frame bytes that came with the 101 in *extra (malloc'd,
 * *nextra bytes, possibly none). A refusal: its errno and message; *exit_hint gets the
 * error's exit_code (127 not found, 126 not executable, 125 otherwise; 0 when none). */
int kc_upgrade(const struct kc *k, const char *path, json_t *body, int *fd,
	       unsigned char **extra, size_t *nextra, int *exit_hint, struct k8_err *err);

/* Parse a whole answer (head and body, as read until the connection ended). 0 with
 * *status and *json (the body's JSON; a progress stream's final "result"; NULL when the
 * body is empty), or -EPROTO with a message for bytes that are not such an answer. An
 * error answer or a stream's final "error" also gives 0: *status is the HTTP status (a
 * stream's error line: 500 unless its code says otherwise) and *json the error object.
 * Pure: the fuzzer calls it. */
int kc_answer_parse(const char *buf, size_t len, int *status, json_t **json, struct k8_err *err);

/* The errno for an {"error":{"code",...}} object and HTTP status, with its message in err. */
int kc_error(const json_t *body, int status, struct k8_err *err);

/* path components percent-encoded for a URL path segment, into out (outlen bytes);
 * -ENAMETOOLONG when it does not fit. */
int kc_escape(const char *s, char *out, size_t outlen);

#endif
