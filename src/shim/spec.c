/* SPDX-License-Identifier: Apache-2.0 */
/* spec.c - OCI runtime spec and node policy to kosa8 requests (see spec.h). */
#include "shim/spec.h"
#include "common/sha.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANN_PREFIX "io.kosa8."
#define ANN_MAX_VALUE 4096

void spec_proc_free(struct spec_proc *p)
{
	json_decref(p->argv);
	json_decref(p->env);
	p->argv = p->env = NULL;
}

void spec_free(struct spec *s)
{
	spec_proc_free(&s->proc);
	json_decref(s->annotations);
	s->annotations = NULL;
}

/* An array of at most `max` strings without NUL bytes; a new reference in *out. */
static int str_array(const json_t *a, const char *what, size_t max, json_t **out,
		     struct k8_err *err)
{
	size_t i;
	json_t *v;

	if (!a || json_is_null(a)) {
		*out = json_array();
		return 0;
	}
	if (!json_is_array(a) || json_array_size(a) > max)
		return k8_err_set(err, -EINVAL, "process.%s must be a list of at most %zu strings",
				  what, max);
	json_array_foreach(a, i, v)
		if (!json_is_string(v) || memchr(json_string_value(v), 0, json_string_length(v)))
			return k8_err_set(err, -EINVAL, "process.%s must hold only strings", what);
	*out = json_deep_copy(a);
	return 0;
}

static int uint_field(const json_t *o, const char *key, uint64_t max, uint64_t *v,
		      struct k8_err *err)
{
	const json_t *j = json_object_get(o, key);

	*v = 0;
	if (!j || json_is_null(j))
		return 0;
	if (!json_is_integer(j) || json_integer_value(j) < 0 ||
	    (uint64_t)json_integer_value(j) > max)
		return k8_err_set(err, -EINVAL, "process field '%s' must be an integer 0..%llu", key,
				  (unsigned long long)max);
	*v = (uint64_t)json_integer_value(j);
	return 0;
}

int spec_proc_parse(const json_t *proc, struct spec_proc *p, struct k8_err *err)
{
	const json_t *user, *cs;
	const char *cwd;
	uint64_t uid, gid, rows, cols;
	int r;

	memset(p, 0, sizeof(*p));
	if (!json_is_object(proc))
		return k8_err_set(err, -EINVAL, "the spec has no process object");
	if ((r = str_array(json_object_get(proc, "args"), "args", SPEC_MAX_ARGS, &p->argv, err)) ||
	    (r = str_array(json_object_get(proc, "env"), "env", SPEC_MAX_ARGS, &p->env, err)))
		goto fail;
	if (!json_array_size(p->argv)) {
		r = k8_err_set(err, -EINVAL, "the spec's process has no args");
		goto fail;
	}
	cwd = json_string_value(json_object_get(proc, "cwd"));
	if (!cwd || !*cwd)
		cwd = "/";
	if (cwd[0] != '/' || strlen(cwd) >= sizeof(p->cwd)) {
		r = k8_err_set(err, -EINVAL, "process.cwd must be an absolute path");
		goto fail;
	}
	snprintf(p->cwd, sizeof(p->cwd), "%s", cwd);
	user = json_object_get(proc, "user");
	if ((r = uint_field(user, "uid", 0xfffffffeu, &uid, err)) ||
	    (r = uint_field(user, "gid", 0xfffffffeu, &gid, err)))
		goto fail;
	snprintf(p->user, sizeof(p->user), "%llu:%llu", (unsigned long long)uid,
		 (unsigned long long)gid);
	p->terminal = json_is_true(json_object_get(proc, "terminal"));
	cs = json_object_get(proc, "consoleSize");
	if ((r = uint_field(cs, "height", 65535, &rows, err)) ||
	    (r = uint_field(cs, "width", 65535, &cols, err)))
		goto fail;
	p->rows = (unsigned)rows;
	p->cols = (unsigned)cols;
	return 0;
fail:
	spec_proc_free(p);
	return r;
}

int spec_parse(const char *text, size_t len, struct spec *s, struct k8_err *err)
{
	json_error_t je;
	json_t *root, *ann, *v;
	const char *k, *type, *pod, *img;
	int r;

	memset(s, 0, sizeof(*s));
	if (len > SPEC_MAX_BYTES)
		return k8_err_set(err, -EFBIG, "config.json is over %u KiB", SPEC_MAX_BYTES >> 10);
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(root)) {
		json_decref(root);
		return k8_err_set(err, -EINVAL, "config.json is not a JSON object: %s", je.text);
	}
	ann = json_object_get(root, "annotations");
	s->annotations = json_object();
	if (ann && !json_is_null(ann) && !json_is_object(ann)) {
		r = k8_err_set(err, -EINVAL, "config.json's annotations must be an object");
		goto out;
	}
	json_object_foreach(ann, k, v) {
		if (!json_is_string(v) || json_string_length(v) > ANN_MAX_VALUE) {
			r = k8_err_set(err, -EINVAL, "annotation '%.100s' must be a string of at most "
				       "%d bytes", k, ANN_MAX_VALUE);
			goto out;
		}
		json_object_set(s->annotations, k, v);
	}
	type = json_string_value(json_object_get(s->annotations, "io.kubernetes.cri.container-type"));
	pod = json_string_value(json_object_get(s->annotations, "io.kubernetes.cri.sandbox-id"));
	img = json_string_value(json_object_get(s->annotations, "io.kubernetes.cri.image-name"));
	if (pod && (!*pod || strlen(pod) >= sizeof(s->pod))) {
		r = k8_err_set(err, -EINVAL, "io.kubernetes.cri.sandbox-id must be 1-%zu bytes",
			       sizeof(s->pod) - 1);
		goto out;
	}
	s->role = !pod ? SPEC_ALONE : (type && !strcmp(type, "sandbox")) ? SPEC_POD_SANDBOX
								       : SPEC_POD_CONTAINER;
	if (pod)
		snprintf(s->pod, sizeof(s->pod), "%s", pod);
	if (img)
		snprintf(s->image, sizeof(s->image), "%s", img);
	{
		const char *rp = json_string_value(json_object_get(json_object_get(root, "root"),
								   "path"));
		if (!rp || !*rp)
			rp = "rootfs";
		if (strlen(rp) >= sizeof(s->root) || strstr(rp, "..")) {
			r = k8_err_set(err, -EINVAL, "root.path must be at most %zu bytes, without "
				       "'..'", sizeof(s->root) - 1);
			goto out;
		}
		snprintf(s->root, sizeof(s->root), "%s", rp);
	}
	/* A pod's sandbox (pause) never runs in the VM: its process is not needed. */
	if (s->role == SPEC_POD_SANDBOX && !json_object_get(root, "process")) {
		s->proc.argv = json_array();
		s->proc.env = json_array();
		r = 0;
		goto out;
	}
	r = spec_proc_parse(json_object_get(root, "process"), &s->proc, err);
out:
	json_decref(root);
	if (r)
		spec_free(s);
	return r;
}

/* ---- policy ---- */

static const char *const known_annotations[] = {
	"io.kosa8.cpus", "io.kosa8.memory-mib", "io.kosa8.disk-gb", "io.kosa8.egress",
	"io.kosa8.egress-allow", "io.kosa8.mounts", NULL,
};

static int node_int(const json_t *node, const char *key, int def, int lo, int hi, int *v,
		    struct k8_err *err)
{
	const json_t *j = json_object_get(node, key);

	*v = def;
	if (!j || json_is_null(j))
		return 0;
	if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi)
		return k8_err_set(err, -EINVAL, "the shim's config: '%s' must be an integer %d..%d",
				  key, lo, hi);
	*v = (int)json_integer_value(j);
	return 0;
}

/* An annotation's integer, at least lo and at most the node's max. */
static int ann_int(const json_t *ann, const char *key, int lo, int max, const char *maxkey,
		   int *v, struct k8_err *err)
{
	const char *s = json_string_value(json_object_get(ann, key));
	char *end;
	long n;

	if (!s)
		return 0;
	errno = 0;
	n = strtol(s, &end, 10);
	if (*s < '0' || *s > '9' || *end || errno || n < lo)
		return k8_err_set(err, -EINVAL, "annotation %s: '%.40s' is not a whole number of "
				  "at least %d", key, s, lo);
	if (n > max)
		return k8_err_set(err, -EPERM, "annotation %s asks for %ld; this node allows at "
				  "most %d (the shim's config, '%s')", key, n, max, maxkey);
	*v = (int)n;
	return 0;
}

/* Split "a,b,c" into a JSON array of the trimmed, non-empty items. */
static json_t *split_list(const char *s)
{
	json_t *a = json_array();

	while (*s) {
		const char *e = strchr(s, ',');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		while (n && (*s == ' ' || *s == '\t'))
			s++, n--;
		while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
			n--;
		if (n)
			json_array_append_new(a, json_stringn(s, n));
		if (!e)
			break;
		s = e + 1;
	}
	return a;
}

static bool list_has(const json_t *list, const char *s)
{
	size_t i;
	json_t *v;

	json_array_foreach(list, i, v)
		if (json_is_string(v) && !strcmp(json_string_value(v), s))
			return true;
	return false;
}

static int mode_rank(const char *m)
{
	return !strcmp(m, "deny") ? 0 : !strcmp(m, "allow-list") ? 1 : !strcmp(m, "allow-all") ? 2 : -1;
}

static int policy_egress(const json_t *node, const json_t *ann, json_t *body, struct k8_err *err)
{
	const char *nmode = json_string_value(json_object_get(node, "egress"));
	const json_t *nrules = json_object_get(node, "egress_allow");
	const char *amode = json_string_value(json_object_get(ann, "io.kosa8.egress"));
	const char *aallow = json_string_value(json_object_get(ann, "io.kosa8.egress-allow"));
	json_t *rules;
	size_t i;
	json_t *v;

	if (!nmode)
		nmode = (nrules && json_array_size(nrules)) ? "allow-list" : "deny";
	if (mode_rank(nmode) < 0)
		return k8_err_set(err, -EINVAL, "the shim's config: 'egress' must be deny, "
				  "allow-list or allow-all");
	if (nrules && !json_is_array(nrules))
		return k8_err_set(err, -EINVAL, "the shim's config: 'egress_allow' must be a list");
	json_array_foreach(nrules, i, v)
		if (!json_is_string(v))
			return k8_err_set(err, -EINVAL, "the shim's config: 'egress_allow' must "
					  "hold strings");
	if (!amode && !aallow) {
		/* The node's policy as it is. */
		json_object_set_new(body, "egress", json_string(nmode));
		if (!strcmp(nmode, "allow-list"))
			json_object_set_new(body, "egress_allow",
					    nrules ? json_deep_copy(nrules) : json_array());
		return 0;
	}
	if (!amode)
		amode = "allow-list";
	if (mode_rank(amode) < 0)
		return k8_err_set(err, -EINVAL, "annotation io.kosa8.egress: '%.40s'; give deny, "
				  "allow-list or allow-all", amode);
	if (mode_rank(amode) > mode_rank(nmode))
		return k8_err_set(err, -EPERM, "annotation io.kosa8.egress asks for %s; this node's "
				  "egress is %s (the shim's config, 'egress'): a pod may narrow it, "
				  "never widen it", amode, nmode);
	if (strcmp(amode, "allow-list")) {
		if (aallow)
			return k8_err_set(err, -EINVAL, "annotation io.kosa8.egress-allow goes with "
					  "io.kosa8.egress=allow-list, not %s", amode);
		json_object_set_new(body, "egress", json_string(amode));
		return 0;
	}
	rules = split_list(aallow ? aallow : "");
	json_array_foreach(rules, i, v) {
		if (!strcmp(nmode, "allow-all") || list_has(nrules, json_string_value(v)))
			continue;
		k8_err_set(err, -EPERM, "annotation io.kosa8.egress-allow: '%.100s' is not in "
			   "this node's egress_allow (the shim's config); a pod may pick from that "
			   "list, never add to it", json_string_value(v));
		json_decref(rules);
		return err->code;
	}
	json_object_set_new(body, "egress", json_string(json_array_size(rules) ? "allow-list"
									  : "deny"));
	if (json_array_size(rules))
		json_object_set_new(body, "egress_allow", rules);
	else
		json_decref(rules);
	return 0;
}

/* HOST lies at or below ROOT (both absolute, resolved; ROOT without a trailing '/'). */
static bool path_below(const char *host, const char *root)
{
	size_t n = strlen(root);

	while (n > 1 && root[n - 1] == '/')
		n--;
	if (n == 1 && root[0] == '/')
		return true;
	return !strncmp(host, root, n) && (host[n] == 0 || host[n] == '/');
}

static int policy_mounts(const json_t *node, const json_t *ann, json_t *body, struct k8_err *err)
{
	const char *spec = json_string_value(json_object_get(ann, "io.kosa8.mounts"));
	const json_t *roots = json_object_get(node, "mount_roots");
	json_t *items, *mounts, *v;
	size_t i, j;

	if (!spec)
		return 0;
	if (roots && !json_is_array(roots))
		return k8_err_set(err, -EINVAL, "the shim's config: 'mount_roots' must be a list");
	items = split_list(spec);
	if (json_array_size(items) > SPEC_MAX_MOUNTS) {
		json_decref(items);
		return k8_err_set(err, -EINVAL, "annotation io.kosa8.mounts: at most %d folders",
				  SPEC_MAX_MOUNTS);
	}
	mounts = json_array();
	json_array_foreach(items, i, v) {
		char host[4096], guest[4096];
		const char *s = json_string_value(v), *c1 = strchr(s, ':'), *c2;
		bool ro = false, ok = false;
		json_t *r;

		if (!c1 || c1 == s || (size_t)(c1 - s) >= sizeof(host))
			goto bad;
		memcpy(host, s, (size_t)(c1 - s));
		host[c1 - s] = 0;
		c2 = strchr(c1 + 1, ':');
		if (c2) {
			if (!strcmp(c2, ":ro"))
				ro = true;
			else if (strcmp(c2, ":rw"))
				goto bad;
		}
		if ((size_t)((c2 ? c2 : c1 + strlen(c1)) - c1 - 1) >= sizeof(guest))
			goto bad;
		snprintf(guest, sizeof(guest), "%.*s", (int)((c2 ? c2 : c1 + strlen(c1)) - c1 - 1),
			 c1 + 1);
		if (host[0] != '/' || guest[0] != '/')
			goto bad;
		/* Links resolved on both sides: a link below a root may lead anywhere. kosa8d
		 * resolves the folder the same way and pins it (docs/shared-folders.md). */
		{
			char real[PATH_MAX];
			if (!realpath(host, real)) {
				k8_err_set(err, -ENOENT, "annotation io.kosa8.mounts: %.200s: %s", host,
					   strerror(errno));
				goto fail;
			}
			snprintf(host, sizeof(host), "%s", real);
		}
		json_array_foreach(roots, j, r) {
			char real[PATH_MAX];
			if (json_is_string(r) && json_string_value(r)[0] == '/' &&
			    realpath(json_string_value(r), real) && path_below(host, real))
				ok = true;
		}
		if (!ok) {
			k8_err_set(err, -EPERM, "annotation io.kosa8.mounts: %.200s is not below a "
				   "folder this node lets pods share (the shim's config, "
				   "'mount_roots'%s)", host,
				   json_array_size(roots) ? "" : ", which is empty");
			goto fail;
		}
		json_array_append_new(mounts, json_pack("{s:s,s:s,s:b}", "host", host, "guest",
							guest, "ro", ro));
		continue;
bad:
		k8_err_set(err, -EINVAL, "annotation io.kosa8.mounts: '%.200s' is not "
			   "/HOST:/GUEST[:ro|:rw]", s);
		goto fail;
	}
	json_decref(items);
	if (json_array_size(mounts))
		json_object_set_new(body, "mounts", mounts);
	else
		json_decref(mounts);
	return 0;
fail:
	json_decref(items);
	json_decref(mounts);
	return err->code;
}

int spec_sandbox_body(const json_t *node, const json_t *ann, json_t **bodyp, struct k8_err *err)
{
	int cpus, mem, disk, maxc, maxm, maxd, r;
	const char *k;
	json_t *v, *body;

	*bodyp = NULL;
	if (node && !json_is_object(node))
		return k8_err_set(err, -EINVAL, "the shim's config must be a JSON object");
	json_object_foreach((json_t *)ann, k, v) {
		bool known = false;
		if (strncmp(k, ANN_PREFIX, strlen(ANN_PREFIX)))
			continue;
		for (const char *const *a = known_annotations; *a; a++)
			known |= !strcmp(*a, k);
		if (!known)
			return k8_err_set(err, -EINVAL, "unknown annotation %.100s; kosa8 knows "
					  "io.kosa8.cpus, memory-mib, disk-gb, egress, egress-allow "
					  "and mounts", k);
	}
	if ((r = node_int(node, "max_cpus", 2, 1, 64, &maxc, err)) ||
	    (r = node_int(node, "max_memory_mib", 2048, 128, 65536, &maxm, err)) ||
	    (r = node_int(node, "max_disk_gb", 8, 1, 1024, &maxd, err)) ||
	    (r = node_int(node, "cpus", 1, 1, maxc, &cpus, err)) ||
	    (r = node_int(node, "memory_mib", 512, 128, maxm, &mem, err)) ||
	    (r = node_int(node, "disk_gb", 2, 1, maxd, &disk, err)))
		return r;
	if ((r = ann_int(ann, "io.kosa8.cpus", 1, maxc, "max_cpus", &cpus, err)) ||
	    (r = ann_int(ann, "io.kosa8.memory-mib", 128, maxm, "max_memory_mib", &mem, err)) ||
	    (r = ann_int(ann, "io.kosa8.disk-gb", 1, maxd, "max_disk_gb", &disk, err)))
		return r;
	body = json_pack("{s:i,s:i,s:i}", "cpus", cpus, "memory_mib", mem, "disk_gb", disk);
	if ((r = policy_egress(node, ann, body, err)) || (r = policy_mounts(node, ann, body, err))) {
		json_decref(body);
		return r;
	}
	*bodyp = body;
	return 0;
}

void spec_sandbox_name(const char *prefix, const char *ns, const char *id, char out[64])
{
	char hex[65];
	cleanup_free char *key = xasprintf("%s/%s", ns, id);

	sha256_hex(key, strlen(key), hex);
	snprintf(out, 64, "%s-%.12s", prefix, hex);
}
