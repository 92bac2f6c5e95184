/* SPDX-License-Identifier: Apache-2.0 */
/* layers.h - a sandbox's disk layers and layers.json, the record of which layer file
 * sits on which.
 *
 * Mechanism below the resource modules: it knows a directory and file names, not
 * sandboxes or checkpoints. layers.c is the one reader and the one writer of
 * <dir>/layers.json, an object {"<child file>": "<parent file>" | null}. The root layer
 * is LAYERS_ROOT (made with the sandbox); a checkpoint puts a new empty layer on top, so
 * the current top and each checkpoint's frozen layer name a chain down to the root.
 * Layer names are file names in the directory (no '/'); a name with one ends a chain.
 */
#ifndef K8_DAEMON_LAYERS_H
#define K8_DAEMON_LAYERS_H

#include "common/util.h"

#define LAYERS_ROOT "scratch.qcow2"
#define LAYERS_MAX_DEPTH 4096

/* The top layer of a sandbox whose record says `disk` ("" before the first checkpoint). */
static inline const char *layers_top(const char *disk)
{
	return disk && disk[0] ? disk : LAYERS_ROOT;
}

/* Record that `child` sits on `parent`. 0 or -errno (the file could not be written). */
int layers_set(const char *dir, const char *child, const char *parent);
/* The backing chain under `layer` as absolute paths, its parent first, the root last;
 * returns how many (0: none, *out NULL). Free with layers_chain_free. */
int layers_chain(const char *dir, const char *layer, char ***out);
void layers_chain_free(char **chain, int n);
/* Delete every layer file that none of `roots` (and LAYERS_ROOT) reaches, and forget it. */
void layers_gc(const char *dir, const char *const *roots, int nroots);
/* A fork: hard-link `layer` and the chain under it from `src_dir` into `dst_dir` (same
 * names) and write `dst_dir`'s layers.json with that chain. -EINVAL for a damaged record
 * (a loop, a path, too deep), -errno from link (EXDEV: another file system). */
int layers_link(const char *src_dir, const char *dst_dir, const char *layer,
		struct k8_err *err);
/* A new empty layer file `top` (a path) of disk_gb GiB over the layer file `base` (a
 * path, written in its header, never opened: the chain QEMU gets comes from layers.json,
 * and a layer's own header was written by QEMU). Written by kosa8d (image/qcow2.c), not
 * by a qemu-img process. 0 or -errno with err. */
int layers_new_top(const char *base, const char *top, int disk_gb, struct k8_err *err);

#endif
