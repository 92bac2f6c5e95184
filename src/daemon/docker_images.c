/* SPDX-License-Identifier: Apache-2.0 */
/* docker_images.c - docker.sock's image endpoints (docker_images.h, docs/docker.md
 * "Images"): the list and its filters, inspect, pull (POST /images/create, with
 * X-Registry-Auth), tag, rm and prune, over the image store, the daemon's pull and the
 * audit log the kosa8 API uses too. */
#include "daemon/docker_images.h"
#include "daemon/docker_ctr.h"
#include "daemon/daemon.h"
#include "daemon/sandbox.h"
#include "docker/filters.h"
#include "docker/names.h"
#include "docker/query.h"
#include "docker/stream.h"
#include "image/image.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* "repo@digest" of a kosa8 ref: the ref without its tag or pin, in Docker's form. */
static json_t *dki_repo_digest(const char *ref, const char *digest)
{
	char fam[512];
	const char *at = strchr(ref, '@'), *slash = strrchr(ref, '/');
	const char *colon = strrchr(slash ? slash : ref, ':');
	size_t n = at ? (size_t)(at - ref) : colon ? (size_t)(colon - ref) : strlen(ref);
	char repo[512];

	snprintf(repo, sizeof(repo), "%.*s", (int)n, ref);
	dn_familiar(repo, fam, sizeof(fam));
	return json_sprintf("%s@%s", fam, digest);
}

/* RFC 3339 "2024-05-01T12:00:00.123Z" (UTC) -> seconds; 0 when absent or malformed. */
static json_int_t dki_time(const char *s)
{
	struct tm tm = { 0 };

	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			 &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (json_int_t)timegm(&tm);
}

static int dki_no_such_image(struct api_call *call, const char *name, int r)
{
	if (r != -ENOENT)
		return r;
	k8_err_clear(&call->err);       /* Docker's wording, which clients match on */
	return k8_err_set(&call->err, -ENOENT, "No such image: %s", name);
}

/* Every image (by manifest digest) in Docker's list shape, with two private fields
 * (kosa8_digest, kosa8_created) for inspect; NULL with err filled on failure. */
json_t *dki_images(struct daemon *d, struct k8_err *err)
{
	json_t *list = NULL, *by = json_object(), *v, *out;
	const char *k;
	size_t i;

	if (image_list(d->images, &list, err)) {
		json_decref(by);
		return NULL;
	}
	json_array_foreach(list, i, v) {
		const char *ref = json_string_value(json_object_get(v, "ref"));
		const char *dg = json_string_value(json_object_get(v, "digest"));
		const char *cd = json_string_value(json_object_get(v, "config_digest"));
		json_t *labels = json_object_get(v, "labels");
		json_t *e;
		char fam[512];

		if (!ref || !dg || json_is_string(json_object_get(v, "error")))
			continue;
		e = json_object_get(by, dg);
		if (!e) {
			json_int_t size = json_integer_value(json_object_get(v, "size"));
			e = json_pack("{s:s,s:s,s:[],s:[],s:I,s:I,s:I,s:i,s:o,s:i,s:s,s:O}",
				      "Id", cd ? cd : dg, "ParentId", "", "RepoTags", "RepoDigests",
				      "Created", dki_time(json_string_value(
						     json_object_get(v, "created"))),
				      "Size", size, "VirtualSize", size, "SharedSize", -1,
				      "Labels", json_is_object(labels) ? json_deep_copy(labels)
								       : json_object(),
				      "Containers", -1, "kosa8_digest", dg, "kosa8_created",
				      json_object_get(v, "created"));
			json_object_set_new(by, dg, e);
		}
		dn_familiar(ref, fam, sizeof(fam));
		if (!strchr(ref, '@'))
			json_array_append_new(json_object_get(e, "RepoTags"), json_string(fam));
		json_t *rd = dki_repo_digest(ref, dg), *x;
		bool have = false;
		size_t j;
		json_array_foreach(json_object_get(e, "RepoDigests"), j, x)
			have = have || json_equal(x, rd);
		if (!have)
			json_array_append(json_object_get(e, "RepoDigests"), rd);
		json_decref(rd);
	}
	json_decref(list);
	out = json_array();
	json_object_foreach(by, k, v)
		json_array_append(out, v);
	json_decref(by);
	return out;
}

/* Does image `v` (dki_images' shape) pass the filters? before/since compare with
 * `mark`'s Created (resolved by the caller). */
static bool dki_match(json_t *v, const struct dfilters *f, json_int_t before,
			       json_int_t since)
{
	json_t *tags = json_object_get(v, "RepoTags"), *labels = json_object_get(v, "Labels");
	json_int_t created = json_integer_value(json_object_get(v, "Created"));
	const char *names[64], *keys[256], *vals[256];
	size_t n = 0, nl = 0, i;
	const char *k;
	json_t *x;

	if (dfilters_has(f, "dangling") && dfilters_match_exact(f, "dangling", "true"))
		return false;   /* kosa8 keeps no untagged images: none dangles */
	if ((before && created >= before) || (since && created <= since))
		return false;
	json_array_foreach(tags, i, x)
		if (n < 64)
			names[n++] = json_string_value(x);
	if (!dfilters_match_reference(f, names, n))
		return false;
	json_object_foreach(labels, k, x)
		if (nl < 256 && json_is_string(x)) {
			keys[nl] = k;
			vals[nl++] = json_string_value(x);
		}
	return dfilters_match_labels(f, keys, vals, nl);
}

/* before=/since=: the Created of the image the (single) value names; 0 when absent. */
static int dki_mark(struct api_call *call, const struct dfilters *f,
			     const char *name, json_t *imgs, json_int_t *at)
{
	size_t n, i;
	char *const *v = dfilters_get(f, name, &n);
	struct image_info info;
	json_t *x;

	*at = 0;
	if (!v)
		return 0;
	if (n != 1)
		return k8_err_set(&call->err, -EINVAL, "filter %s takes one image", name);
	if (image_resolve(call->d->images, v[0], &info, &call->err))
		return dki_no_such_image(call, v[0], -ENOENT);
	json_array_foreach(imgs, i, x)
		if (!strcmp(json_string_value(json_object_get(x, "kosa8_digest")) ?: "",
			    info.digest))
			*at = json_integer_value(json_object_get(x, "Created"));
	image_info_clear(&info);
	return 0;
}

int dki_api_list(struct api_call *call)
{
	static const char *const allowed[] = { "reference", "label", "dangling", "before",
					       "since", NULL };
	char fbuf[DF_FILTER_JSON_MAX + 1];
	const char *fj = NULL;
	struct dfilters f = { 0 };
	json_int_t before = 0, since = 0;
	json_t *v, *all;
	size_t i, nd;
	char *const *dv;
	int r;

	if ((r = api_query_str(call, "filters", fbuf, sizeof(fbuf), &fj)))
		return r;
	if (fj && (r = dfilters_parse(fj, allowed, &f, &call->err)))
		goto out;
	dv = dfilters_get(&f, "dangling", &nd);
	for (i = 0; dv && i < nd; i++)
		if (strcmp(dv[i], "true") && strcmp(dv[i], "false")) {
			r = k8_err_set(&call->err, -EINVAL, "Invalid filter 'dangling=%s'", dv[i]);
			goto out;
		}
	all = dki_images(call->d, &call->err);
	if (!all) {
		r = call->err.code ? call->err.code : -EIO;
		goto out;
	}
	if ((r = dki_mark(call, &f, "before", all, &before)) ||
	    (r = dki_mark(call, &f, "since", all, &since))) {
		json_decref(all);
		goto out;
	}
	call->out = json_array();
	json_array_foreach(all, i, v) {
		if (!dki_match(v, &f, before, since))
			continue;
		json_object_del(v, "kosa8_digest");
		json_object_del(v, "kosa8_created");
		json_array_append(call->out, v);
	}
	json_decref(all);
out:
	dfilters_free(&f);
	return r;
}

/* POST /images/prune. kosa8 keeps no untagged images, so the default (dangling only)
 * deletes nothing; `filters={"dangling":["false"]}` (`docker image prune -a`) removes
 * every name of each image no container of the Docker API uses (any state) and no
 * sandbox has attached; filter `label` as for the list, `until` on the image's Created. Each name removed is audited
 * as image.rm with "via": "docker". */
int dki_api_prune(struct api_call *call)
{
	static const char *const allowed[] = { "dangling", "label", "until", NULL };
	char fbuf[DF_FILTER_JSON_MAX + 1];
	const char *fj = NULL;
	struct dfilters f = { 0 };
	uint64_t before = image_store_freed(call->d->images);
	json_t *all, *v, *x, *out = json_array();
	size_t i, j, nd;
	char *const *dv;
	bool dangling = true;
	struct timespec now;
	int64_t until;
	int r;

	clock_gettime(CLOCK_REALTIME, &now);
	if ((r = api_query_str(call, "filters", fbuf, sizeof(fbuf), &fj)) ||
	    (fj && (r = dfilters_parse(fj, allowed, &f, &call->err))) ||
	    (r = dfilters_until(&f, now.tv_sec * 1000000000LL + now.tv_nsec, &until, &call->err)))
		goto out;
	dv = dfilters_get(&f, "dangling", &nd);
	for (i = 0; dv && i < nd; i++) {
		if (strcmp(dv[i], "true") && strcmp(dv[i], "false") && strcmp(dv[i], "1") &&
		    strcmp(dv[i], "0")) {
			r = k8_err_set(&call->err, -EINVAL, "Invalid filter 'dangling=%s'", dv[i]);
			goto out;
		}
		dangling = !strcmp(dv[i], "true") || !strcmp(dv[i], "1");
	}
	if (dangling)           /* nothing dangles in kosa8's store */
		goto done;
	all = dki_images(call->d, &call->err);
	if (!all) {
		r = call->err.code ? call->err.code : -EIO;
		goto out;
	}
	json_array_foreach(all, i, v) {
		const char *id = json_string_value(json_object_get(v, "Id"));
		const char *dg = json_string_value(json_object_get(v, "kosa8_digest"));
		json_t *refs = NULL;
		struct k8_err e = { 0 };
		bool gone = true;

		json_object_del(v, "kosa8_created");
		if (!id || !dg || !dki_match(v, &f, 0, 0) || dkc_image_used(call->d, id) ||
		    json_integer_value(json_object_get(v, "Created")) > until / 1000000000)
			continue;
		if (sb_image_unused(call->d, dg, id, &e)) {
			/* the engine keeps the slot of an image a container once ran: let it go
			 * (the guest agent refuses while a container there uses it) */
			k8_err_clear(&e);
			if (dkc_image_release(call->d, dg, &e) || sb_image_unused(call->d, dg, id, &e))
				continue;
		}
		/* every name of it, the store's own spelling (RepoTags are familiar forms) */
		if (image_list(call->d->images, &refs, &e))
			continue;
		json_array_foreach(refs, j, x) {
			const char *ref = json_string_value(json_object_get(x, "ref"));
			char fam[512];
			if (!ref || strcmp(json_string_value(json_object_get(x, "digest")) ?: "", dg))
				continue;
			if (image_remove(call->d->images, ref, &e)) {
				gone = false;
				continue;
			}
			daemon_audit(call->d, "image.rm", NULL,
				     json_pack("{s:s,s:s,s:s}", "ref", ref, "via", "docker", "why",
					       "image prune"));
			dn_familiar(ref, fam, sizeof(fam));
			json_array_append_new(out, json_pack("{s:s}", "Untagged", fam));
		}
		json_decref(refs);
		if (gone)
			json_array_append_new(out, json_pack("{s:s}", "Deleted", id));
	}
	json_decref(all);
done:
	call->out = json_pack("{s:o,s:I}", "ImagesDeleted", out, "SpaceReclaimed",
			      (json_int_t)(image_store_freed(call->d->images) - before));
	out = NULL;
out:
	json_decref(out);
	dfilters_free(&f);
	return r;
}

int dki_api_inspect(struct api_call *call)
{
	const char *name = api_param(call, "name");
	struct image_info info;
	json_t *imgs, *v, *img = NULL, *cfg;
	size_t i;
	int r;

	r = image_resolve(call->d->images, name, &info, &call->err);
	if (r)
		return dki_no_such_image(call, name, r);
	imgs = dki_images(call->d, &call->err);
	json_array_foreach(imgs, i, v)
		if (!strcmp(json_string_value(json_object_get(v, "kosa8_digest")) ?: "",
			    info.digest))
			img = v;
	cfg = json_pack("{s:O,s:O?,s:O?,s:s,s:s,s:O?}", "Env", info.env, "Cmd", info.cmd,
			"Entrypoint", info.entrypoint, "WorkingDir", info.workdir, "User",
			info.user, "Labels", img ? json_object_get(img, "Labels") : NULL);
	call->out = json_pack("{s:s,s:O?,s:O?,s:s,s:s,s:O?,s:s,s:s,s:o,s:s,s:s,s:I,s:I,"
			      "s:{s:s,s:{}},s:{s:s,s:[]},s:{s:n}}",
			      "Id", info.config_digest,
			      "RepoTags", img ? json_object_get(img, "RepoTags") : NULL,
			      "RepoDigests", img ? json_object_get(img, "RepoDigests") : NULL,
			      "Parent", "", "Comment", "",
			      "Created", img ? json_object_get(img, "kosa8_created") : NULL,
			      "DockerVersion", "",
			      "Author", "", "Config", cfg, "Architecture", "amd64", "Os", "linux",
			      "Size", (json_int_t)info.size, "VirtualSize", (json_int_t)info.size,
			      "GraphDriver", "Name", "kosa8", "Data", "RootFS", "Type", "layers",
			      "Layers", "Metadata", "LastTagTime");
	json_decref(imgs);
	image_info_clear(&info);
	return 0;
}

/* The store's pull progress {phase, what, done, total}, as moby's progress line: a
 * blob's ("layer sha256:<12 hex>") "Downloading" (with progressDetail) and "Download
 * complete" under its short id; any other note (the manifest, a mirror skipped) is a
 * status line of its own. */
static void dki_pull_progress(void *job, json_t *p)
{
	const char *what = json_string_value(json_object_get(p, "what")) ?: "";
	const char *blob = strstr(what, "sha256:");     /* "layer sha256:<12 hex>" */
	json_int_t done = json_integer_value(json_object_get(p, "done"));
	json_int_t total = json_integer_value(json_object_get(p, "total"));
	char id[16];

	if (!blob) {
		api_job_progress(job, json_pack("{s:s}", "status", what));
		json_decref(p);
		return;
	}
	snprintf(id, sizeof(id), "%.12s", blob + 7);
	api_job_progress(job, json_pack("{s:s,s:s,s:{s:I,s:I}}", "status", total && done >= total ?
					"Download complete" : "Downloading", "id", id,
					"progressDetail", "current", done, "total", total));
	json_decref(p);
}

static int dki_pull_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	json_t *res = NULL;
	char fam[512], norm[512];
	struct k8_err e = { 0 };
	const char *tag;
	int r;

	/* moby's first line: "3.12-slim: Pulling from library/python" */
	if (image_ref_normalize(j->arg, norm, sizeof(norm), &e) == 0) {
		char *cut = strchr(norm, '@');
		if (!cut) {
			char *slash = strrchr(norm, '/');
			cut = strrchr(slash ? slash : norm, ':');
		}
		tag = cut ? cut + 1 : "latest";
		if (cut)
			*cut = '\0';
		dn_familiar(norm, fam, sizeof(fam));
		api_job_progress(j, json_pack("{s:s++,s:s}", "status", "Pulling from ",
					      strchr(fam, '/') ? fam : "library/", strchr(fam, '/')
					      ? "" : fam, "id", tag));
	}
	/* X-Registry-Auth, decoded by dki_api_create: used for this pull, then wiped */
	json_t *auth = json_object_get(j->body, "kosa8_registry_auth");
	const char *basic = json_string_value(auth);
	r = sb_image_pull_as(j->d, j->arg, basic, dki_pull_progress, j, &res, err);
	if (basic)
		explicit_bzero((char *)basic, strlen(basic));
	if (r)
		return r;
	dn_familiar(json_string_value(json_object_get(res, "ref")) ?: j->arg, fam,
			sizeof(fam));
	api_job_progress(j, json_pack("{s:s+}", "status", "Digest: ",
				      json_string_value(json_object_get(res, "digest")) ?: ""));
	api_job_progress(j, json_pack("{s:s+}", "status", "Status: Downloaded newer image for ",
				      fam));
	*result = res;
	return 0;
}

/* POST /images/create?fromImage=&tag=: a pull (sandbox.c audits it as image.pull). */
int dki_api_create(struct api_call *call)
{
	char fbuf[API_SEG_LEN], tbuf[API_SEG_LEN], ref[API_SEG_LEN], sbuf[16];
	const char *from = NULL, *tag = NULL, *src = NULL;
	int n;

	if (api_query_str(call, "fromImage", fbuf, sizeof(fbuf), &from) ||
	    api_query_str(call, "tag", tbuf, sizeof(tbuf), &tag))
		return call->err.code;
	if (api_query_str(call, "fromSrc", sbuf, sizeof(sbuf), &src) == 0 && src)
		return k8_err_set(&call->err, -ENOSYS, "docker import (fromSrc) is not supported "
				  "by kosa8 (see docs/docker.md)");
	if (!from)
		return k8_err_set(&call->err, -EINVAL, "fromImage is required");
	const char *hdr = call->header ? call->header(call->query_ctx, "X-Registry-Auth") : NULL;
	json_object_del(call->body, "kosa8_registry_auth");     /* only from the header */
	if (hdr && *hdr) {
		char basic[1024];
		if (ds_registry_auth(hdr, basic, sizeof(basic), &call->err))
			return call->err.code;
		if (basic[0])
			json_object_set_new(call->body, "kosa8_registry_auth", json_string(basic));
		explicit_bzero(basic, sizeof(basic));
	}
	if (!tag)
		n = snprintf(ref, sizeof(ref), "%s", from);
	else
		n = snprintf(ref, sizeof(ref), "%s%s%s", from, !strncmp(tag, "sha256:", 7) ?
			     "@" : ":", tag);
	if (n < 0 || (size_t)n >= sizeof(ref))
		return k8_err_set(&call->err, -EINVAL, "image reference longer than %zu bytes",
				  sizeof(ref) - 1);
	return api_reply_job(call, dki_pull_job, ref);
}

/* POST /images/{name}/tag?repo=&tag=: 201. */
int dki_api_tag(struct api_call *call)
{
	const char *name = api_param(call, "name");
	char rbuf[API_SEG_LEN], tbuf[256], dst[API_SEG_LEN + 256];
	const char *repo = NULL, *tag = "latest";
	int r;

	if (api_query_str(call, "repo", rbuf, sizeof(rbuf), &repo) ||
	    api_query_str(call, "tag", tbuf, sizeof(tbuf), &tag))
		return call->err.code;
	if (!repo)
		return k8_err_set(&call->err, -EINVAL, "repository name (repo) is required");
	snprintf(dst, sizeof(dst), "%s:%s", repo, tag);
	r = image_tag(call->d->images, name, dst, &call->err);
	if (r)
		return dki_no_such_image(call, name, r);
	daemon_audit(call->d, "image.tag", NULL,
		     json_pack("{s:s,s:s,s:s}", "ref", name, "tag", dst, "via", "docker"));
	call->status = 201;
	return 0;
}

/* DELETE /images/{name}?force=: by name, that name; by ID, every name of the image
 * (more than one only with force, as moby). Answers moby's list of what went. */
int dki_api_rm(struct api_call *call)
{
	const char *name = api_param(call, "name");
	bool force = call->query && dq_bool(call->query(call->query_ctx, "force"));
	struct image_info info;
	char norm[512], fam[512];
	struct k8_err e = { 0 };
	json_t *list = NULL, *refs = json_array(), *v, *out;
	size_t i, nall = 0;
	int r;

	r = image_resolve(call->d->images, name, &info, &call->err);
	if (r) {
		json_decref(refs);
		return dki_no_such_image(call, name, r);
	}
	bool by_name = !image_ref_normalize(name, norm, sizeof(norm), &e) &&
		       !strcmp(norm, info.ref);
	r = image_list(call->d->images, &list, &call->err);
	json_array_foreach(list, i, v)
		if (!strcmp(json_string_value(json_object_get(v, "digest")) ?: "", info.digest)) {
			nall++;
			if (!by_name)
				json_array_append(refs, json_object_get(v, "ref"));
		}
	if (by_name)
		json_array_append_new(refs, json_string(info.ref));
	if (!r && !by_name && nall > 1 && !force)
		r = k8_err_set(&call->err, -EBUSY, "conflict: unable to delete %.12s (must be "
			       "forced) - image is referenced in multiple repositories",
			       info.config_digest + 7);
	if (!r)
		r = sb_image_unused(call->d, info.digest, info.ref, &call->err);
	out = json_array();
	json_array_foreach(refs, i, v) {
		if (r)
			break;
		r = image_remove(call->d->images, json_string_value(v), &call->err);
		if (r)
			break;
		daemon_audit(call->d, "image.rm", NULL,
			     json_pack("{s:O,s:s}", "ref", v, "via", "docker"));
		dn_familiar(json_string_value(v), fam, sizeof(fam));
		json_array_append_new(out, json_pack("{s:s}", "Untagged", fam));
	}
	if (!r && json_array_size(refs) == nall)
		json_array_append_new(out, json_pack("{s:s}", "Deleted", info.config_digest));
	json_decref(list);
	json_decref(refs);
	image_info_clear(&info);
	if (r) {
		json_decref(out);
		return dki_no_such_image(call, name, r);
	}
	call->out = out;
	return 0;
}
