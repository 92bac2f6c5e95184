/* SPDX-License-Identifier: Apache-2.0 */
/* util.h - scope-based cleanup, error out-parameter and small helpers shared by all programs.
 *
 * Convention (docs/errors.md): functions return 0 (or a count) on success and a negative
 * errno on failure. Where the caller needs a message, they take a `struct k8_err *` and
 * fill it with k8_err_set(); library code never prints.
 */
#ifndef K8_UTIL_H
#define K8_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define K8_UNUSED __attribute__((unused))
#define K8_PRINTF(a, b) __attribute__((format(printf, a, b)))

struct k8_err {
	int code;          /* negative errno, 0 when no error was recorded */
	char msg[1024];    /* what happened and, where we know it, what to do next */
};

/* Record an error (first one wins) and return `code` so callers can `return k8_err_set(...)`. */
int k8_err_set(struct k8_err *err, int code, const char *fmt, ...) K8_PRINTF(3, 4);
/* Forget a recorded error (NULL is fine): for a failure the caller has handled, or before
 * replacing a message with a better one (k8_err_set keeps the first). */
void k8_err_clear(struct k8_err *err);
/* Prefix an existing message with context: "loading image: <old message>". */
int k8_err_wrap(struct k8_err *err, const char *fmt, ...) K8_PRINTF(2, 3);

static inline void k8_freep(void *p) { free(*(void **)p); }
static inline void k8_closep(int *fd) { if (*fd >= 0) close(*fd); }
#define cleanup_free __attribute__((cleanup(k8_freep)))
#define cleanup_close __attribute__((cleanup(k8_closep)))

/* Take ownership out of a cleanup variable: `return steal_pointer(&p);` */
static inline void *k8_steal(void *pp)
{
	void **p = pp, *v = *p;
	*p = NULL;
	return v;
}
#define steal_pointer(pp) k8_steal(pp)
static inline int steal_fd(int *fd)
{
	int v = *fd;
	*fd = -1;
	return v;
}

/* Allocation that dies on failure: only for small, bounded sizes. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) K8_PRINTF(1, 2);

/* Full read/write of a file descriptor, retrying on EINTR and short counts.
 * Return 0 or a negative errno; read_full returns -EPIPE on a premature EOF. */
int write_full(int fd, const void *buf, size_t n);
int read_full(int fd, void *buf, size_t n);

/* Write `data` to `path` atomically (temp file, fsync, rename, fsync dir) with `mode`. */
int write_file_atomic(const char *path, const void *data, size_t n, int mode);
/* Read a whole file of at most `max` bytes; NUL-terminated. -EFBIG when larger. */
int read_file(const char *path, size_t max, char **out, size_t *len);

/* mkdir -p with `mode` for the directories it creates. */
int mkdir_p(const char *path, int mode);
/* rm -rf that never follows symlinks and stays on one file system. */
int rm_rf(const char *path);

/* Monotonic and wall clocks. */
uint64_t now_mono_ns(void);
uint64_t now_real_ns(void);

/* Timestamps, one format everywhere (logs, audit records, API fields): RFC 3339 in UTC,
 * "2026-12-01T14:18:04Z", or with milliseconds "2026-12-01T14:18:04.123Z" when
 * ms >= 0 (0-999). The audit log hashes these bytes: the format must not change. A time
 * gmtime cannot represent gives the epoch. Returns out. */
#define K8_TIME_LEN 32
char *k8_time_fmt(char out[K8_TIME_LEN], int64_t sec, int ms);
/* The wall clock now, with or without milliseconds. */
char *k8_time_now(char out[K8_TIME_LEN], int with_ms);

/* n bytes as 2n lower-case hex digits and a NUL into out. */
void k8_hex(const void *p, size_t n, char *out);

/* The path of `name` installed beside the running binary (build/bin/kosa8-net beside
 * build/bin/kosa8d); `name` itself when /proc/self/exe cannot be read. Allocated. */
char *k8_beside_self(const char *name);

/* A duration as people write it: "90" or "90s", "15m", "2h", "1d"; "0" and "off" are 0
 * (turned off). Stores seconds in *secs and returns 0, or -EINVAL for anything else or
 * more than `max` seconds. */
int k8_duration_parse(const char *s, uint64_t max, uint64_t *secs);


/* `s` made safe for a terminal, a log line or a table (docs/errors.md, "Bytes from a
 * sandbox"): printable ASCII and printable UTF-8 stay (a backslash too: the output is for
 * people, and a literal "\x1b" is harmless); every other byte (C0 and C1 controls, DEL,
 * bidi controls, line separators, invalid UTF-8) becomes \xNN. So a name a sandbox or a registry chose cannot move the cursor, clear the screen,
 * start a new line or a fake row. str_escape allocates (NULL gives ""); str_escape_to
 * writes at most outlen bytes with the NUL, cut between characters. */
char *str_escape(const char *s);
void str_escape_to(char *out, size_t outlen, const char *s);

#endif
