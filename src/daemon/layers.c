/* SPDX-License-Identifier: Apache-2.0 */
/* layers.c - layers.json: child -> parent of a sandbox's disk layer files (layers.h). */
#include "daemon/layers.h"
#include "image/qcow2.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LAYERS_FILE_MAX (1 << 20)

/* The record, or one naming only the root when it is missing or damaged. */
static json_t *layers_load(const char *dir)
{
	cleanup_free char *p = xasprintf("%s/layers.json", dir);
	cleanup_free char *t = NULL;
	json_t *v = NULL;

	if (read_file(p, LAYERS_FILE_MAX, &t, NULL) == 0)
		v = json_loads(t, 0, NULL);
	if (!json_is_object(v)) {
		json_decref(v);
		v = json_pack("{s:n}", LAYERS_ROOT);
	}
	return v;
}

static int layers_save(const char *dir, json_t *v)
{
	cleanup_free char *p = xasprintf("%s/layers.json", dir);
	cleanup_free char *t = json_dumps(v, JSON_INDENT(1) | JSON_SORT_KEYS);

	return t ? write_file_atomic(p, t, strlen(t), 0600) : -ENOMEM;
}

static const char *layers_parent(json_t *layers, const char *l)
{
	return json_string_value(json_object_get(layers, l));
}

int layers_set(const char *dir, const char *child, const char *parent)
{
	json_auto_t *layers = layers_load(dir);

	json_object_set_new(layers, child, json_string(parent));
	return layers_save(dir, layers);
}

int layers_chain(const char *dir, const char *layer, char ***out)
{
	json_auto_t *layers = layers_load(dir);
	const char *l = layers_parent(layers, layer);
	char **v = NULL;
	int n = 0;

	for (; l && !strchr(l, '/') && n < LAYERS_MAX_DEPTH; l = layers_parent(layers, l)) {
		v = realloc(v, (size_t)(n + 1) * sizeof(*v));
		if (!v)
			abort();
		v[n++] = xasprintf("%s/%s", dir, l);
	}
	*out = v;
	return n;
}

void layers_chain_free(char **chain, int n)
{
	for (int i = 0; i < n; i++)
		free(chain[i]);
	free(chain);
}

static void mark_chain(json_t *layers, json_t *keep, const char *l)
{
	for (int depth = 0; l && depth < LAYERS_MAX_DEPTH && !json_object_get(keep, l); depth++) {
		json_object_set_new(keep, l, json_true());
		l = layers_parent(layers, l);
	}
}

void layers_gc(const char *dir, const char *const *roots, int nroots)
{
	json_auto_t *layers = layers_load(dir);
	json_auto_t *keep = json_object();
	const char *k;
	json_t *v;
	void *tmp;

	for (int i = 0; i < nroots; i++)
		mark_chain(layers, keep, roots[i]);
	json_object_foreach_safe(layers, tmp, k, v) {
		if (json_object_get(keep, k) || !strcmp(k, LAYERS_ROOT))
			continue;
		if (!strchr(k, '/')) {  /* a name, never a path out of the directory */
			cleanup_free char *f = xasprintf("%s/%s", dir, k);
			unlink(f);
		}
		json_object_del(layers, k);
	}
	layers_save(dir, layers);
}

int layers_link(const char *src_dir, const char *dst_dir, const char *layer,
		struct k8_err *err)
{
	json_auto_t *srcl = layers_load(src_dir);
	json_auto_t *dst = json_object();
	const char *l;
	int depth, r;

	for (l = layer, depth = 0; l; depth++) {
		const char *parent = layers_parent(srcl, l);
		cleanup_free char *from = xasprintf("%s/%s", src_dir, l);
		cleanup_free char *to = xasprintf("%s/%s", dst_dir, l);
		if (strchr(l, '/') || depth >= LAYERS_MAX_DEPTH || json_object_get(dst, l))
			return k8_err_set(err, -EINVAL, "the disk layers in %s are damaged "
					  "(layers.json)", src_dir);
		if (link(from, to) < 0)
			return k8_err_set(err, -errno, "link %s to %s: %s%s", from, to,
					  strerror(errno), errno == EXDEV ?
					  " (sandboxes must be on one file system)" : "");
		json_object_set_new(dst, l, parent ? json_string(parent) : json_null());
		l = parent;
	}
	if ((r = layers_save(dst_dir, dst)))
		return k8_err_set(err, r, "writing %s/layers.json: %s", dst_dir, strerror(-r));
	return 0;
}

int layers_new_top(const char *base, const char *top, int disk_gb, struct k8_err *err)
{
	int r = qcow2_overlay(top, base, (uint64_t)disk_gb << 30);

	return r ? k8_err_set(err, r, "creating the disk layer %s: %s", top, strerror(-r)) : 0;
}
