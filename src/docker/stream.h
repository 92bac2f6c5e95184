/* SPDX-License-Identifier: Apache-2.0 */
/* stream.h - Docker's multiplexed stream framing (attach, exec, logs without a TTY), the
 * X-Docker-Container-Path-Stat header of the archive endpoints, and Go FileMode <-> POSIX
 * mode conversions. Pure functions over buffers; the daemon does the I/O. */
#ifndef K8_DOCKER_STREAM_H
#define K8_DOCKER_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"

/* Stream types of the 8-byte header [type, 0, 0, 0, len (u32 big-endian)], moby stdcopy. */
enum ds_type { DS_STDIN = 0, DS_STDOUT = 1, DS_STDERR = 2, DS_SYSERR = 3 };
#define DS_HDR_LEN 8

/* Write the header of a frame of `len` payload bytes into out[8]. */
void ds_header(uint8_t out[DS_HDR_LEN], enum ds_type type, uint32_t len);

/* Frame `len` bytes of `data` into `out` (room for len + 8); returns the bytes written.
 * A payload longer than UINT32_MAX must be split by the caller. */
size_t ds_encode(uint8_t *out, enum ds_type type, const void *data, uint32_t len);

/* Incremental decoder. Bytes come in pieces of any size; payload bytes go to the
 * callback as they arrive (a frame may be reported in several pieces; `end` marks the
 * last one of a frame, which for an empty frame is the only call, with n 0). Nothing is
 * buffered beyond the 8-byte header, so memory stays bounded whatever the input. */
struct ds_decoder {
	uint8_t hdr[DS_HDR_LEN];
	size_t hdr_have;          /* header bytes collected so far */
	uint32_t left;            /* payload bytes still to come in this frame */
	enum ds_type type;        /* of the current frame */
	uint32_t max_frame;       /* frames announcing more are refused */
	unsigned accept;          /* bit mask of stream types accepted: 1u << DS_STDOUT ... */
	bool failed;
};

typedef int (*ds_payload_fn)(void *ctx, enum ds_type type, const uint8_t *p, size_t n,
			     bool end);

/* `accept` 0 means stdout and stderr only. */
void ds_decoder_init(struct ds_decoder *d, uint32_t max_frame, unsigned accept);
/* Consume all n bytes. Returns 0, -EBADMSG (with a message) for a header with a type not
 * accepted, non-zero padding or a length above max_frame (the decoder then refuses all
 * further input), or the callback's own negative return, which stops decoding. */
int ds_decode(struct ds_decoder *d, const uint8_t *p, size_t n, ds_payload_fn fn, void *ctx,
	      struct k8_err *err);
/* True between frames: the stream may end here without losing a partial frame. */
bool ds_decoder_idle(const struct ds_decoder *d);

/* Go's os.FileMode bits (io/fs): the type bits sit above the permission bits. */
#define GO_MODE_DIR        (1u << 31)
#define GO_MODE_APPEND     (1u << 30)
#define GO_MODE_EXCLUSIVE  (1u << 29)
#define GO_MODE_TEMPORARY  (1u << 28)
#define GO_MODE_SYMLINK    (1u << 27)
#define GO_MODE_DEVICE     (1u << 26)
#define GO_MODE_NAMEDPIPE  (1u << 25)
#define GO_MODE_SOCKET     (1u << 24)
#define GO_MODE_SETUID     (1u << 23)
#define GO_MODE_SETGID     (1u << 22)
#define GO_MODE_CHARDEVICE (1u << 21)
#define GO_MODE_STICKY     (1u << 20)
#define GO_MODE_IRREGULAR  (1u << 19)
#define GO_MODE_PERM       0777u

/* st_mode -> FileMode, as Go's os.Stat fills it in on Linux. */
uint32_t ds_gomode_from_posix(mode_t m);
/* FileMode -> st_mode (type, permission, setuid/setgid/sticky bits). An irregular or
 * contradictory type maps to a regular file. */
mode_t ds_posix_from_gomode(uint32_t g);

/* The X-Docker-Container-Path-Stat header: base64 of
 * {"name":..,"size":..,"mode":FileMode,"mtime":RFC 3339,"linkTarget":..}. */
#define DS_STAT_NAME_MAX 4096
#define DS_STAT_HDR_MAX 16384       /* encoded header bytes accepted by the decoder */
struct ds_path_stat {
	char *name;                 /* base name; owned */
	int64_t size;
	uint32_t mode;              /* Go FileMode */
	int64_t mtime_sec;          /* seconds since the epoch, UTC */
	int32_t mtime_nsec;
	char *link_target;          /* "" when not a symlink; owned */
};

/* Encode as the header's value, NUL-terminated, malloc'd; NULL when out of memory or a
 * string is longer than DS_STAT_NAME_MAX. */
char *ds_path_stat_encode(const struct ds_path_stat *st);
/* Decode a header value of n bytes. 0 or -EBADMSG/-E2BIG with a message; on success the
 * caller frees with ds_path_stat_free(). Unknown JSON fields are ignored, as Go does. */
int ds_path_stat_decode(const char *hdr, size_t n, struct ds_path_stat *st, struct k8_err *err);
void ds_path_stat_free(struct ds_path_stat *st);

/* Time as Go marshals a time.Time (RFC 3339 with nanoseconds, trailing zeros dropped,
 * UTC as "Z") into out[40]. */
void ds_rfc3339(int64_t sec, int32_t nsec, char out[40]);
/* Parse RFC 3339 ("2024-01-02T03:04:05.5+01:00"); 0 or -EINVAL. */
int ds_parse_rfc3339(const char *s, int64_t *sec, int32_t *nsec);

/* Standard base64 with padding. Encode returns the length written to out (room for
 * 4 * ceil(n / 3) + 1, NUL-terminated); decode returns the length or -EINVAL, never
 * writing more than 3 * (n / 4) bytes. */
size_t ds_b64_encode(const uint8_t *in, size_t n, char *out);
ssize_t ds_b64_decode(const char *in, size_t n, uint8_t *out);

/* The X-Registry-Auth header of a pull: base64 (URL-safe, as the docker CLI and
 * docker-py send it, or standard; padding optional) of a JSON object. Fills `basic`
 * with "username:password" when both are given, else leaves it "" (an empty object,
 * or an identitytoken kosa8 does not use: the stored credentials apply). At most
 * 8 KiB of header; -EINVAL with a message for anything malformed. */
#define DS_REGISTRY_AUTH_MAX 8192
int ds_registry_auth(const char *hdr, char *basic, size_t len, struct k8_err *err);

#endif
