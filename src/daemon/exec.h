/* SPDX-License-Identifier: Apache-2.0 */
/* exec.h - run and exec: bridges an upgraded API connection and an agent stream (exec.c). */
#ifndef K8_EXEC_H
#define K8_EXEC_H

#include "daemon/api_route.h"
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/util.h"

struct daemon;

/* exec.c: bridges an upgraded API connection and an agent stream */
struct exec_ctx;
/* On failure *exit_code is the exit status the CLI should use (127 command not found,
 * 126 not executable, 125 anything else). */
int exec_prepare(struct daemon *d, const char *sbname, const char *container, json_t *body,
		 bool is_run, struct exec_ctx **out, int *exit_code, struct k8_err *err);
json_t *exec_detached(struct daemon *d, const char *sbname, json_t *body, int *exit_code,
		      struct k8_err *err);
void exec_bridge(struct exec_ctx *x, int sock, const char *extra, size_t extra_len);
void exec_free(struct exec_ctx *x);

/* API handlers (api_route.h; the table is in api.c): run and exec */
int exec_api_run(struct api_call *call);
int exec_api_exec(struct api_call *call);

#endif
