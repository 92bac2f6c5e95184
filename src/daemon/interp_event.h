/* SPDX-License-Identifier: Apache-2.0 */
/* interp_event.h - the interpreter's wire, pure (interp_event.c): the request a cell is
 * sent as, the event lines that come back from inside the sandbox, checked and rebuilt,
 * and context ids (docs/interpreter.md). No daemon state, so the unit tests and the fuzz
 * target (tests/fuzz/fuzz_interp.c) drive it directly. */
#ifndef K8_INTERP_EVENT_H
#define K8_INTERP_EVENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/util.h"

/* One event line from the guest, newline included, at most this long; a longer one is
 * dropped whole (counted), never held. */
#define INTERP_LINE_MAX (4u << 20)
/* Bounds on what a checked event keeps (longer strings are cut, and say so). */
#define INTERP_NAME_MAX 256
#define INTERP_VALUE_MAX (64u << 10)
#define INTERP_TB_MAX (1u << 20)
#define INTERP_MIME_MAX 32              /* representations in one result */
/* A cell's code, and its environment for one cell. */
#define INTERP_CODE_MAX (1u << 20)
#define INTERP_ENV_MAX 256
/* A context id: CONTAINER-NAME, the container's 12 hex digits and 1-16 of [a-z0-9]. */
#define INTERP_ID_LEN (12 + 1 + 16)

enum interp_ev {
	INTERP_EV_CONNECTED,            /* the cell client reached the driver (not forwarded) */
	INTERP_EV_START,
	INTERP_EV_STDOUT,
	INTERP_EV_STDERR,
	INTERP_EV_RESULT,
	INTERP_EV_ERROR,
	INTERP_EV_END,
};

/* Check one line (without its newline) from the guest and rebuild it from the fields
 * kosa8 knows, so nothing else is ever passed on: returns its enum interp_ev with *out
 * the fresh object, or -EINVAL (not JSON, not an object, an unknown type, a field of the
 * wrong type) with *out NULL. */
int interp_event_check(const char *line, size_t n, json_t **out);

/* Splits a byte stream into lines of at most `max` bytes (newline included); a longer
 * line is skipped to its newline and counted in `dropped`. */
struct interp_lines {
	char *buf;
	size_t len, max;
	bool skipping;                  /* inside a line that was too long */
	unsigned long dropped;
};
void interp_lines_init(struct interp_lines *lr, size_t max);
void interp_lines_free(struct interp_lines *lr);
/* Feed n bytes: fn gets each complete line (without its newline); a negative return of
 * fn stops and is returned. Returns 0 otherwise. */
int interp_lines_feed(struct interp_lines *lr, const void *p, size_t n,
		      int (*fn)(void *ctx, const char *line, size_t n), void *ctx);

/* The request cell.py forwards to the driver: "K8CELL1\n", "code LEN\n" + the code,
 * "env LEN\n" + "K=V" for each variable, "END\n". *len gets its size. */
char *interp_request(const char *code, size_t code_len, const json_t *env, size_t *len);

/* A cell's or a context's environment from an API body: an object of string values
 * ({"K":"V"}) whose keys are [A-Za-z_][A-Za-z0-9_]* and at most INTERP_ENV_MAX of them,
 * no NUL in values. NULL is fine. 0, or -EINVAL with a message naming `field`. */
int interp_env_check(const json_t *env, const char *field, struct k8_err *err);

/* A context id "CONTAINER-NAME": 0 with the container id (12 hex + NUL) in ctr, or
 * -EINVAL. */
int interp_id_parse(const char *id, char ctr[13]);

#endif
