/* SPDX-License-Identifier: Apache-2.0 */
/* images.c - the image routes of the API: list, load, pull and remove what the image
 * store (src/image) holds. Whether a sandbox still uses an image is sandbox.c's to say. */
#include "daemon/images.h"
#include "daemon/daemon.h"
#include "daemon/sandbox.h"
#include "image/image.h"

#include <string.h>

/* The store's progress callback, as a progress line of the job. */
static void images_progress(void *job, const char *phase, const char *what, uint64_t done,
			    uint64_t total)
{
	api_job_progress(job, json_pack("{s:s,s:s,s:I,s:I}", "phase", phase, "what",
					what ? what : "", "done", (json_int_t)done, "total",
					(json_int_t)total));
}

int images_api_list(struct api_call *call)
{
	return image_list(call->d->images, &call->out, &call->err);
}

static int images_load_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	const char *path = json_string_value(json_object_get(j->body, "path"));
	const char *tag = json_string_value(json_object_get(j->body, "tag"));
	json_t *loaded = NULL, *v;
	size_t i;
	int r;

	if (!path || path[0] != '/')
		return k8_err_set(err, -EINVAL, "path must be an absolute path to an OCI layout, an "
				  "OCI archive or a docker save tarball");
	r = image_load(j->d->images, path, tag, images_progress, j, &loaded, err);
	if (r)
		return r;
	json_array_foreach(loaded, i, v)
		daemon_audit(j->d, "image.load", NULL,
			     json_pack("{s:O,s:O,s:s}", "ref", json_object_get(v, "ref"), "digest",
				       json_object_get(v, "digest"), "source", path));
	*result = json_pack("{s:o}", "loaded", loaded);
	return 0;
}

/* The job checks its body: a bad one is the stream's last line (docs/reference/api.md). */
int images_api_load(struct api_call *call)
{
	return api_reply_job(call, images_load_job, NULL);
}

static int images_pull_job(struct api_job *j, json_t **result, struct k8_err *err)
{
	const char *image = json_string_value(json_object_get(j->body, "image"));

	if (!image || !*image)
		return k8_err_set(err, -EINVAL, "an image is required, e.g. python:3.12-slim");
	return sb_image_pull(j->d, image, api_job_progress, j, result, err);
}

int images_api_pull(struct api_call *call)
{
	return api_reply_job(call, images_pull_job, NULL);
}

int images_api_rm(struct api_call *call)
{
	const char *ref = api_param(call, "ref");
	struct image_info info = { 0 };
	int r;

	if (image_resolve(call->d->images, ref, &info, &call->err) == 0) {
		r = sb_image_unused(call->d, info.digest, info.ref, &call->err);
		image_info_clear(&info);
		if (r)
			return r;
	}
	r = image_remove(call->d->images, ref, &call->err);
	if (r)
		return r;
	daemon_audit(call->d, "image.rm", NULL, json_pack("{s:s}", "ref", ref));
	return 0;
}
