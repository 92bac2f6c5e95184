/* SPDX-License-Identifier: Apache-2.0 */
/* code.h - the code interpreter's wire (E2B's port 49999, as @e2b/code-interpreter 2.8.0
 * speaks it): /execute's and /contexts' requests checked into the terms of kosa8's
 * interpreter (daemon/interp.h), and its events written as the NDJSON lines E2B's server
 * streams (docs/e2b.md "The code interpreter is kosa8's"). Pure: no daemon, no I/O. */
#ifndef K8_E2B_CODE_H
#define K8_E2B_CODE_H

#include <jansson.h>
#include <stdint.h>

#include "common/util.h"

#define E2B_CTX_ID_MAX 64               /* a context id a client may name */

/* POST /execute {"code", "context_id"?, "language"?, "env_vars"?}; unknown fields are
 * ignored, as E2B's server does. *ctx: the context id (a pointer into req), NULL for the
 * default context; *cell: a new body for interp_run_start, {"code", "env"?}. 0; -ENOTSUP
 * for a language other than Python (the message names it); -EINVAL for a field of the
 * wrong type. The code's size and the variables' names are the interpreter's to check. */
int e2b_code_exec_parse(json_t *req, const char **ctx, json_t **cell, struct k8_err *err);

/* POST /contexts {"language"?, "cwd"?}: *cwd NULL when not given (a pointer into req).
 * 0, -ENOTSUP or -EINVAL as above. */
int e2b_code_ctx_parse(json_t *req, const char **cwd, struct k8_err *err);

/* One of interp_run_pump's events (start, stdout, stderr, result, error, end, keepalive)
 * as E2B's line (a new object), or NULL when E2B has none for it. `now_ns` (wall clock)
 * stamps output as E2B's server does. A result's MIME bundle becomes E2B's fields (text, html,
 * png, ...; JSON-valued ones parsed, what E2B has no field for in "extra"), and a text
 * that is a repr'd str loses its quotes, as E2B's server does. */
json_t *e2b_code_event(const json_t *ev, int64_t now_ns);

/* A kosa8 context ({"id", "cwd", "language", ...}) as E2B's {"id", "language", "cwd"}. */
json_t *e2b_code_ctx(const json_t *ctx);

#endif
