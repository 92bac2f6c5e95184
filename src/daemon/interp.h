/* SPDX-License-Identifier: Apache-2.0 */
/* interp.h - the stateful interpreter: Python contexts that live in a sandbox's
 * container and run cells (interp.c, docs/interpreter.md).
 *
 * A context is a driver process (src/interp/driver.py) in a container, listening on
 * /run/kosa8/ctx/ID.sock in it; a cell is an exec of a small client (src/interp/cell.py)
 * that relays the driver's event lines. Nothing about contexts is kept on the host: they
 * are in the guest's memory and files, so a checkpoint holds them, a rewind brings back
 * their variables and a fork continues with them. Every line the client sends is checked
 * (interp_event.h) before it goes on. */
#ifndef K8_INTERP_H
#define K8_INTERP_H

#include <jansson.h>
#include <stdbool.h>

#include "daemon/api_route.h"
#include "common/util.h"

struct daemon;
struct interp_run;

/* The Python sources run in the guest (generated from src/interp/ by the Makefile). */
extern const char interp_driver_py[];
extern const char interp_cell_py[];

/* POST .../contexts: body {"container"?, "image"?, "cwd"?, "env"?}. *out: the context
 * {"id","container","pid","cwd","created","language","alive"}. */
int interp_ctx_create(struct daemon *d, const char *sbname, json_t *body, json_t **out,
		      struct k8_err *err);
/* The contexts of one container (container not NULL) or of every running one. */
int interp_ctx_list(struct daemon *d, const char *sbname, const char *container,
		    json_t **out, struct k8_err *err);
int interp_ctx_rm(struct daemon *d, const char *sbname, const char *id, struct k8_err *err);
int interp_ctx_restart(struct daemon *d, const char *sbname, const char *id, json_t **out,
		       struct k8_err *err);

/* A cell: start it (body {"code", "env"?, "timeout_s"?, "image"?, "container"?, "cwd"?};
 * id "default": the default context of the image's interpreter container, or of
 * `container` when given, made on first use, in `cwd` (default "/")). Returns once
 * the cell client reached the context's driver, so an unknown context is an error here
 * (-ENOENT), not in the stream. `via`: the API the cell came through, named in its audit
 * records ("e2b"), or NULL. */
int interp_run_start(struct daemon *d, const char *sbname, const char *id, json_t *body,
		     const char *via, struct interp_run **out, struct k8_err *err);
/* Pump the cell's events into sink (each event taken by the sink) until it ends: the last
 * event is always one {"type":"end",...} made by kosa8d. A negative return of sink (its
 * client left) cancels the cell: the client is killed, which interrupts the cell in the
 * driver. */
typedef int (*interp_sink)(void *ctx, json_t *ev);
void interp_run_pump(struct interp_run *r, interp_sink sink, void *ctx);
void interp_run_free(struct interp_run *r);
/* Answer an API call with a started run (taken, also on failure): its events as NDJSON
 * lines, each through map first when map is not NULL (a new object for the line, or
 * NULL: no line; ev stays the caller's). The cell is cancelled when the client goes,
 * found by a failed write; with a map, an event {"type":"keepalive"} goes to it after
 * every 5 s without events, so a quiet cell's client is found too. */
typedef json_t *(*interp_map)(const json_t *ev);
int interp_reply(struct api_call *call, struct interp_run *r, interp_map map);
/* The context a started run is in (its real id, also for "default"). */
const char *interp_run_context(const struct interp_run *r);

/* API handlers (the table is in api.c) */
int interp_api_ctx_create(struct api_call *call);
int interp_api_ctx_list(struct api_call *call);
int interp_api_ctx_rm(struct api_call *call);
int interp_api_ctx_restart(struct api_call *call);
int interp_api_run(struct api_call *call);

#endif
