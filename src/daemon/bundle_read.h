/* SPDX-License-Identifier: Apache-2.0 */
/* bundle_read.h - reading a kosa8 bundle (bundle_read.c): the manifest and the walk over the
 * members, each streamed into a staging directory and checked against the manifest. It
 * needs no daemon, so fuzz_bundle drives it on arbitrary bytes; bundle.c installs what
 * it verified (docs/model.md "Bundles"). */
#ifndef K8_BUNDLE_READ_H
#define K8_BUNDLE_READ_H

#include <archive.h>
#include <jansson.h>
#include <stdbool.h>

#include "common/util.h"

#define BUNDLE_MANIFEST_MAX (1u << 20)  /* bytes of manifest.json */
#define BUNDLE_MAX_PARTS 100000
#define BUNDLE_PATH_MAX 300              /* a member path, bytes */

struct bundle_read {
	json_t *manifest;                /* manifest.json as parsed */
	json_t *seen;                    /* member path -> true, for every verified member */
	int nparts;                      /* parts the manifest lists (all of them seen) */
};

/* A member path bundles may hold: under guest/ (no subfolder), images/ or models/, of
 * [A-Za-z0-9._-/], no "..", no "//", no trailing '/', shorter than BUNDLE_PATH_MAX. */
bool bundle_member_ok(const char *path);

/* Walk the tar archive `a` (opened by the caller; `what` names it in messages): the
 * first member must be a version 1 manifest.json; every other member a plain file the
 * manifest lists, once, of the listed size and SHA-256, written to `stage`/PATH (which
 * must be an empty directory); the archive must hold every listed part. `progress` (may
 * be NULL) gets {"phase": "verify", ...} per member. 0 with `br` filled (free it with
 * bundle_read_free, also after a failure), or -EBADMSG (a bundle that is not whole or
 * not true) or another negative errno (staging), with `err` set. */
int bundle_read(struct archive *a, const char *what, const char *stage,
		void (*progress)(void *, json_t *), void *pctx, struct bundle_read *br,
		struct k8_err *err);
void bundle_read_free(struct bundle_read *br);

#endif
