/* SPDX-License-Identifier: Apache-2.0 */
/* guestfetch.h - the release's guest image, fetched and checked against the digest built
 * into kosa8d (guestfetch.c; docs/install.md "The guest image"). */
#ifndef K8_DAEMON_GUESTFETCH_H
#define K8_DAEMON_GUESTFETCH_H

#include "daemon/api_route.h"
#include "common/util.h"

#include <jansson.h>
#include <stdbool.h>

struct daemon;

/* Most bytes a guest kernel or initramfs may have (the release's: 18 and 2 MB). */
#define GUEST_FILE_MAX (512ull << 20)
#define GUEST_MANIFEST_MAX (64u << 10)

/* Fetch the guest image from `url` (a folder holding manifest.json and the files it names;
 * NULL: config.json "guest_url", else this release's, KOSA8_GUEST_URL) into
 * $KOSA8_HOME/guest and use it from now on. The manifest's SHA-256 must be the digest
 * built into kosa8d (d->guest_release) before a byte of it is parsed, and each file's
 * the manifest's; anything else is refused (audited `guest.fetch.refused`) and nothing is
 * installed. Not when offline (-ENETUNREACH). Unless `force`, a guest in use that already
 * is the release's and matches its manifest is kept ({"fetched": false}). *out:
 * {"fetched","url","digest","dir","bytes"}. Audited `guest.fetch`. */
int guest_fetch(struct daemon *d, const char *url, bool force, json_t **out, struct k8_err *err);

/* At start, when no guest image was found (and KOSA8_GUEST_DIR names none): fetch it,
 * unless offline; the outcome is logged, a failure leaves the daemon without a guest. */
void guest_fetch_at_start(struct daemon *d);

/* API handlers (api_route.h; the table is in api.c): GET /v1/guest (the guest in use,
 * hashed now, against the built-in digest), POST /v1/guest/fetch {"url"?, "force"?}. */
int guest_api_get(struct api_call *call);
int guest_api_fetch(struct api_call *call);

#endif
