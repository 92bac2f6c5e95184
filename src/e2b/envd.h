/* SPDX-License-Identifier: Apache-2.0 */
/* envd.h - envd's process service on the wire (process.Process, proto3 JSON): the
 * requests a client sends, checked into C, and the events a server streams back
 * (docs/e2b.md). Pure: no daemon, no I/O.
 *
 * proto3 JSON as the clients write it: field names in lowerCamelCase (the proto names are
 * accepted too), bytes as standard base64, enums by name or number, 32-bit integers as
 * numbers or decimal strings, 64-bit ones as strings; a oneof's member appears as a plain
 * field. Unknown fields are ignored, as a proto3 parser does. */
#ifndef K8_E2B_ENVD_H
#define K8_E2B_ENVD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define E2B_ARGV_MAX 4096               /* items of args, and of envs */
#define E2B_CMD_MAX (56u * 1024u)       /* argv and environment together (one agent frame) */
#define E2B_TAG_MAX 128
#define E2B_PATH_MAX 4095
#define E2B_INPUT_MAX (1u << 20)        /* bytes of one SendInput, decoded */

/* A Start: {"process":{"cmd","args","envs","cwd"},"pty":{"size":{"cols","rows"}},"tag",
 * "stdin"}. */
struct e2b_start {
	json_t *argv;           /* [cmd, args...] */
	json_t *env;            /* ["K=V", ...] from envs, sorted by key */
	json_t *config;         /* {"cmd","args","envs","cwd"?} as List shows it */
	char cwd[E2B_PATH_MAX + 1];     /* "" when not given */
	bool pty;
	unsigned cols, rows;
	bool stdin;
	char tag[E2B_TAG_MAX + 1];      /* "" when not given */
};
int e2b_start_parse(json_t *msg, struct e2b_start *s, struct k8_err *err);
void e2b_start_clear(struct e2b_start *s);

/* A ProcessSelector under msg's "process": {"pid":N} or {"tag":"..."}. */
struct e2b_sel {
	uint32_t pid;           /* 0 with a tag */
	char tag[E2B_TAG_MAX + 1];
};
int e2b_sel_parse(json_t *msg, struct e2b_sel *sel, struct k8_err *err);

/* SendInput's "input": {"stdin":b64} or {"pty":b64}. *data is malloc'd (n may be 0). */
int e2b_input_parse(json_t *msg, uint8_t **data, size_t *n, bool *pty, struct k8_err *err);
/* SendSignal's "signal": SIGNAL_SIGKILL / SIGNAL_SIGTERM, by name or number. */
int e2b_signal_parse(json_t *msg, int *sig, struct k8_err *err);
/* A Connect-Timeout-Ms header (NULL or "": none, *ms 0): 1 to 10 ASCII digits, as
 * Connect allows; -EINVAL otherwise. envd gives a Start's process that long to live. */
int e2b_timeout_parse(const char *header, uint64_t *ms, struct k8_err *err);
/* Update's "pty":{"size":{"cols","rows"}}: -ENOENT when there is no pty field. */
int e2b_update_parse(json_t *msg, unsigned *cols, unsigned *rows, struct k8_err *err);

/* The user an envd call runs as, from its Authorization header: "Basic " + base64 of
 * "USER:" (the SDKs send no password). USER is 1..E2B_USER_MAX of [A-Za-z0-9._-], not
 * starting with '-'. 0 with out filled, or -EINVAL naming what is wrong. */
#define E2B_USER_MAX 32
int e2b_basic_user(const char *header, char out[E2B_USER_MAX + 1], struct k8_err *err);

/* A uint32 field of proto3 JSON (a number or a decimal string) into *out. Absent: -ENOENT
 * (nothing written); anything else out of range: -EINVAL. */
int e2b_json_u32(json_t *v, uint32_t *out);
/* Look a field up by its JSON name, then by its proto name (NULL: none). */
json_t *e2b_field(json_t *obj, const char *json_name, const char *proto_name);

/* The events of a process stream, each {"event":{...}}: start first, then data and
 * keepalives, end last. */
json_t *e2b_ev_start(uint32_t pid);
/* which: "stdout", "stderr" or "pty". */
json_t *e2b_ev_data(const char *which, const uint8_t *p, size_t n);
json_t *e2b_ev_keepalive(void);
/* From an agent EXIT object {"code","signal","error"?}: Go's view of a wait status as
 * envd reports it: {"exitCode":N,"exited":true,"status":"exit status N"} for an exit,
 * {"exitCode":-1,"exited":false,"status":"signal: killed"} for a signal, and "error" when
 * the sandbox lost the process. */
json_t *e2b_ev_end(json_t *exit_info);
/* Go's strings for a signal ("killed", "terminated", ...; "signal N" otherwise). */
const char *e2b_signal_text(int sig, char buf[16]);

/* A List entry: {"config":...,"pid":N,"tag"?}. */
json_t *e2b_proc_info(json_t *config, uint32_t pid, const char *tag);

#endif
