/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_fs.h - envd's filesystem service and its /files uploads and downloads (e2b_fs.c,
 * docs/e2b.md "The filesystem service is a shell helper"): every call is one helper in
 * the E2B sandbox's container, run as the request's user. Handlers for e2b_api.c's
 * table; POST /files and WatchDir take their bodies as streams (its `streamed` list). */
#ifndef K8_DAEMON_E2B_FS_H
#define K8_DAEMON_E2B_FS_H

#include "daemon/api_route.h"

/* filesystem.Filesystem (Connect, JSON): unary calls answer Connect's error shape. */
int e2b_fs_api_stat(struct api_call *call);
int e2b_fs_api_list(struct api_call *call);
int e2b_fs_api_mkdir(struct api_call *call);
int e2b_fs_api_move(struct api_call *call);
int e2b_fs_api_remove(struct api_call *call);
/* WatchDir, server-streaming: its body (one envelope) is taken as a stream. */
int e2b_fs_api_watch(struct api_call *call);
/* CreateWatcher, GetWatcherEvents, RemoveWatcher (the Python SDK's polled watchers):
 * refused as unimplemented, saying so. */
int e2b_fs_api_watcher(struct api_call *call);

/* GET /files?path=&username=: the file's bytes, streamed. POST /files (multipart or
 * octet-stream, streamed into the container, capped by e2b.upload_max_mib). Errors are
 * E2B's {"code": status, "message"}. */
int e2b_fs_api_read(struct api_call *call);
int e2b_fs_api_write(struct api_call *call);

#endif
