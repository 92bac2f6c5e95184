/* SPDX-License-Identifier: Apache-2.0 */
/* audit.h - kosa8d's append-only, hash-chained audit log (format and rules: docs/audit.md).
 *
 * $KOSA8_HOME/audit.log holds one JSON record per line:
 *
 *   {"seq":N,"time":"2026-11-29T12:00:00.123Z","action":"sandbox.create","sandbox":"x"|null,
 *    "details":{...},"prev":"<hex SHA-256 of the previous line's bytes, no newline>"}
 *
 * and $KOSA8_HOME/audit.head holds {"seq":N,"hash":"<hex SHA-256 of the last line>"}, so
 * a log whose tail was cut off (or which was emptied) is detected too. A full audit.log
 * is rotated into audit.log.000001, audit.log.000002, ...: the chain runs on through the
 * segments, and readers walk them, oldest first, then audit.log, as one log.
 *
 * Only the daemon writes: audit_open() takes an exclusive lock (on audit.lock) that a
 * second writer (another daemon on the same $KOSA8_HOME) cannot get. audit_query() and
 * audit_verify() read the files directly and may be called from any thread or process;
 * they take a shared lock that waits for an append in progress, so they always see the
 * log and the head in step.
 *
 * All functions return 0 or a negative errno; when they fail, `err` says what happened.
 */
#ifndef K8_AUDIT_H
#define K8_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rate.h"
#include "common/util.h"

#define AUDIT_LOG_NAME "audit.log"
#define AUDIT_HEAD_NAME "audit.head"
#define AUDIT_DETAILS_MAX (16u * 1024u)  /* serialized details above this are replaced */
#define AUDIT_STRING_MAX (4u * 1024u)    /* each string in details (and the sandbox name) */
#define AUDIT_ACTION_MAX 64u             /* actions: [a-z0-9._-], e.g. "sandbox.create" */
#define AUDIT_LOCK_NAME "audit.lock"     /* empty; carries the locks (audit.log is renamed) */
#define AUDIT_SEGMENT_DEFAULT (64ull << 20) /* audit.log is rotated once this long */
#define AUDIT_SEGMENT_MIN (4ull << 10)

struct audit;

/* Open (creating if needed, mode 0600) the log in `dir` for appending. Repairs what a
 * crash can leave behind (a partial last line; a head one record behind) and records an
 * "audit.repair" record saying so. Any other inconsistency is not repaired: the open
 * still succeeds, the chain continues from the log's actual last line and an
 * "audit.warning" record names the first bad record, so audit_verify() keeps failing.
 * Fails with -EBUSY when another process (or another open in this one) holds the log. */
int audit_open(const char *dir, struct audit **out, struct k8_err *err);
/* Rotate audit.log into a segment (audit.log.000001, ...) once it holds `bytes` bytes
 * (at least AUDIT_SEGMENT_MIN; the default is AUDIT_SEGMENT_DEFAULT). */
void audit_set_segment_bytes(struct audit *a, uint64_t bytes);
/* fdatasync + head updates made by audit_append so far: less than the records appended
 * when concurrent appends were batched (group commit). */
uint64_t audit_commits(struct audit *a);
/* Close the log and release its lock. Accepts NULL. */
void audit_close(struct audit *a);

/* Append one record. Thread-safe. `sandbox` may be NULL. `details` is borrowed, may be
 * NULL (written as {}), must otherwise be an object; its strings are capped at
 * AUDIT_STRING_MAX bytes and, when the whole serializes to more than AUDIT_DETAILS_MAX
 * bytes, it is replaced by {"truncated":true,"bytes":N,"sha256":"..."}. Returns once the
 * line is on disk (fdatasync) and the head is updated. On failure before the line was
 * written nothing is recorded; if only the head update failed the record is in the log
 * (the next append or open brings the head up to date) and -errno is still returned. */
int audit_append(struct audit *a, const char *action, const char *sandbox, json_t *details,
		 struct k8_err *err);

/* Records matching all given filters, as a new JSON array, oldest first (newest last).
 * `sandbox`: exact name, NULL or "" for any. `action`: exact action, or a prefix ending
 * in '*' ("sandbox.*"), NULL or "" for any. `since_seq`: only records with seq greater
 * than it. `limit` (0 = no limit): with since_seq 0, the newest `limit` matches; with
 * since_seq > 0, the first `limit` matches after since_seq (so a reader can page
 * forward). Lines that are not valid records are skipped (audit_verify reports them). */
int audit_query(const char *dir, const char *sandbox, const char *action, uint64_t since_seq,
		size_t limit, json_t **out, struct k8_err *err);

/* Check the whole chain, across the segments, and the head. *report:
 *   {"ok":bool,"records":N,"first_bad":seq|null,"line":N|null,"segment":"audit.log"|null,
 *    "segments":N,"reason":"..."}
 * `records` counts the complete lines; `first_bad` is the lowest seq that cannot be
 * trusted (every record before it checked out), `line` the line it is on (or would be
 * on, when it is missing) in the file `segment`; `segments` counts the files walked. Returns 0 whenever the check ran, also when ok is false;
 * a negative errno only when the files could not be read. */
int audit_verify(const char *dir, json_t **report, struct k8_err *err);

/* ---- the budget of records a sandbox can cause (docs/audit.md, "Flooding") ----
 *
 * Records whose trigger a sandbox controls (refused connections, limit hits) go through
 * one token bucket per sandbox (common/rate.h): `burst` records at once, refilled at
 * `per_minute`; what is over budget is counted and written as one folded record at most
 * every `fold_s` seconds, and when the sandbox stops (daemon_audit_guest, log.c). */
#define AUDIT_RATE_DEFAULT { .per_minute = 120, .burst = 40, .fold_s = 10 }

#endif
