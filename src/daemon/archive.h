/* SPDX-License-Identifier: Apache-2.0 */
/* archive.h - copying files in and out of a sandbox's containers (archive.c): a tar
 * stream to or from the agent's archive ops (docs/protocol.md), as a C interface the
 * Docker layer calls for GET/HEAD/PUT /containers/{id}/archive, and kosa8's own API
 * (docs/reference/api.md, "Copying files").
 *
 * The caller holds the sandbox (sb_get) for as long as a transfer is open and makes sure
 * it runs (sb_ensure_running). Every transfer is audited as sandbox.container.cp once it
 * is closed, with its direction, path and byte count.
 */
#ifndef K8_ARCHIVE_H
#define K8_ARCHIVE_H

#include "daemon/api_route.h"
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/util.h"

struct daemon;
struct sandbox;
struct archive_xfer;

#define ARCHIVE_PATH_MAX 4096
#define ARCHIVE_MAX_MIB_DEFAULT 1024   /* config.json "cp_max_mib": the largest PUT body */

/* The stat of `path` in container `ctr` (12 hex digits, the agent's id): *stat gets
 * {"name","size","mode" (st_mode),"mtime","mtime_nsec","link"} (the last component is
 * not followed; "link" is a symlink's target resolved inside the container's root).
 * -ENOENT (404) for a missing path or container. */
int archive_stat(struct sandbox *sb, const char *ctr, const char *path, json_t **stat,
		 struct k8_err *err);
/* The X-Docker-Container-Path-Stat value for such a stat (malloc'd), NULL on failure. */
char *archive_stat_header(json_t *stat);

/* Start copying `path` out as a tar (Docker's layout: the entry named after the path's
 * last component, a directory with everything below it, symlinks stored as links). The
 * path's stat comes back in *stat (may be NULL) before any byte is read. */
int archive_get_open(struct daemon *d, struct sandbox *sb, const char *ctr, const char *path,
		     json_t **stat, struct archive_xfer **out, struct k8_err *err);
/* Up to `max` bytes of the tar; 0 at its end, a negative errno with err on failure (the
 * tar is then incomplete: a reply already started must be cut, not ended). */
ssize_t archive_get_read(struct archive_xfer *x, void *buf, size_t max, struct k8_err *err);

/* Start reading the writable layer of the exited container `ctr` as an OCI layer tar
 * (overlay whiteouts as `.wh.` files; the agent's archive.layer, docs/protocol.md); read
 * it with archive_get_read. docker build's RUN. */
int archive_layer_open(struct daemon *d, struct sandbox *sb, const char *ctr,
		       struct archive_xfer **out, struct k8_err *err);

/* Start extracting a tar into the directory `path` (which must exist). With
 * no_overwrite_dir_nondir a directory never replaces a non-directory or the reverse. */
int archive_put_open(struct daemon *d, struct sandbox *sb, const char *ctr, const char *path,
		     bool no_overwrite_dir_nondir, struct archive_xfer **out, struct k8_err *err);
/* Pass n bytes of the tar on (blocks while the agent's window is full). Fails with
 * -EFBIG once the total passes the size cap, or with the extraction's error. */
int archive_put_write(struct archive_xfer *x, const void *p, size_t n, struct k8_err *err);
/* The tar ended: 0 once everything is extracted, or the extraction's error. */
int archive_put_finish(struct archive_xfer *x, struct k8_err *err);

/* Bytes passed so far. */
uint64_t archive_bytes(const struct archive_xfer *x);
/* End the transfer (the helper in the guest is killed if it still runs) and audit it. */
void archive_close(struct archive_xfer *x);

/* Replies for the sandbox sb the caller holds, running, and its container ctr (the path
 * from the query's `path`); each takes over the caller's reference to sb. The kosa8
 * routes below and the Docker layer's archive routes both end here.
 * stat: the stat as JSON; head: an empty 200 with X-Docker-Container-Path-Stat; get: the
 * tar, streamed, with that header; put: the request body extracted, {"bytes":N}. */
int archive_reply_stat(struct api_call *call, struct sandbox *sb, const char *ctr);
int archive_reply_head(struct api_call *call, struct sandbox *sb, const char *ctr);
int archive_reply_get(struct api_call *call, struct sandbox *sb, const char *ctr);
int archive_reply_put(struct api_call *call, struct sandbox *sb, const char *ctr);

/* API handlers (api_route.h; the table is in api.c) */
int archive_api_stat(struct api_call *call);
int archive_api_get(struct api_call *call);
int archive_api_put(struct api_call *call);

#endif
