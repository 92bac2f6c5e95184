/* SPDX-License-Identifier: Apache-2.0 */
/* copy.h - COPY and ADD of the classic builder (docs/docker.md "Build"): the layer (a tar)
 * a step makes from the build context, and the image's symlinks that the destination is
 * resolved through. No daemon: the context is an open directory (the unpacked tar of an
 * API client, so every name, link and byte in it is hostile), and the image's layers
 * arrive through the caller's callback. Unit-tested (test_docker_copy) and fuzzed
 * (fuzz_dcopy).
 *
 * Nothing in the context is followed out of it: sources are opened with
 * openat2(RESOLVE_IN_ROOT), the walk below a source never follows a symlink (one is
 * copied as a symlink), .dockerignore applies again (a client may not have applied it),
 * ADD's local archives are read entry by entry with every name cleaned and kept below
 * the destination, and the caps below bound what one step may take. */
#ifndef K8_DOCKER_COPY_H
#define K8_DOCKER_COPY_H

#include "common/util.h"
#include "docker/dockerfile.h"
#include "docker/dockerignore.h"

#include <jansson.h>
#include <stdbool.h>

#define DCOPY_FILES_MAX  100000u        /* entries one COPY/ADD takes */
#define DCOPY_DEPTH_MAX  256u           /* directory depth one COPY/ADD walks */
#define DCOPY_LINKS_MAX  200000         /* symlinks tracked in one image */

/* The image's symlinks (path -> target, paths relative to / and cleaned) as they are
 * after the layers in `layers` (their digests, in order); `below` names each directory
 * that ever had a link below it. All NULL before the first dcopy_links_update. */
struct dcopy_links {
	json_t *links, *layers, *below;
};

/* Apply one layer (by digest) to lk: call dcopy_links_entry for each of its entries, in
 * order. The layer's bytes are a registry's or a RUN's, so the daemon reads them in a
 * jailed worker, which sends only each entry's type, name and link target (docker_build.c).
 * 0, or a negative errno with err filled. */
typedef int (*dcopy_layer_read)(void *ctx, struct dcopy_links *lk, const char *digest,
				struct k8_err *err);

/* Bring lk up to `layers` (a manifest's "layers" list of {"digest", ...}): when lk's
 * layers are a prefix of them only the rest are read, else it starts again. *added: some
 * layer was read. 0, or a negative errno (lk then empty). */
int dcopy_links_update(struct dcopy_links *lk, const json_t *layers, dcopy_layer_read read,
		       void *ctx, bool *added, struct k8_err *err);
/* Are the digests of `pre` (an array of strings) the first ones of `layers`? */
bool dcopy_links_prefix(const json_t *pre, const json_t *layers);

/* An entry's type for dcopy_links_entry. */
enum { DCOPY_L_OTHER, DCOPY_L_DIR, DCOPY_L_LINK };
/* Apply one entry of a layer, `name` as the tar names it (cleaned; one that leaves the
 * root, is absolute or is too long is skipped, as the unpacker refuses it), `target` a
 * symlink's (NULL: none, or not kept): a symlink is set; any other entry at its path
 * replaces it (a non-directory also what was below it); a whiteout `.wh.NAME` removes
 * NAME and below; `.wh..wh..opq` empties its directory. 0, or -E2BIG past
 * DCOPY_LINKS_MAX links. */
int dcopy_links_entry(struct dcopy_links *lk, int type, const char *name, const char *target,
		      struct k8_err *err);
void dcopy_links_clear(struct dcopy_links *lk);

/* `path` (relative to /, cleaned) with its directory components resolved through the
 * image's symlinks in the image's root (an absolute target starts again at the root,
 * `..` stops there), and its last component too when `last`; into out[n] (which may be
 * path). -ELOOP after 40 links, -ENAMETOOLONG. */
int dcopy_resolve(const json_t *links, const char *path, bool last, char *out, size_t n,
		  struct k8_err *err);

/* What a COPY/ADD step reads. */
struct dcopy_in {
	int ctxfd;                      /* the unpacked context, the root of every source */
	const struct dignore *ig;       /* its .dockerignore, or NULL */
	const char *workdir;            /* the stage's WORKDIR ("/..." or NULL: /) */
	/* The image's symlink map, asked for only when the destination is not /: a map, or
	 * NULL (no layers: nothing to resolve; or a failure, with err->code set). */
	const json_t *(*links)(void *ctx, struct k8_err *err);
	void *links_ctx;
};

/* The layer of COPY/ADD step s (s->kind DF_COPY or DF_ADD, s->argv the sources then the
 * destination, s->chown) written to out_fd as a tar, and its content digest (paths,
 * types, modes, owners, sizes, link targets and contents, not mtimes: the build cache's
 * key, docs/docker.md) into digest. 0, or a negative errno with err naming the source
 * or the line's problem in Docker's words. */
int dcopy_layer(const struct dcopy_in *in, const struct df_step *s, int out_fd,
		char digest[65], struct k8_err *err);

#endif
