/* SPDX-License-Identifier: Apache-2.0 */
/* docker_api.c - the Docker-compatible Engine API on docker.sock (docs/docker.md): its
 * route table and how it speaks, as api.c is kosa8d.sock's.
 *
 * api.c serves this table with the same HTTP code path as kosa8d.sock's; what differs is
 * the dialect below: moby's paths (bare or under /v1.24/../v1.47/, an image name may
 * span segments), its error body {"message": ...} with the wording clients match on
 * ("No such image: X"), its pull stream ({"status": ...} lines, {"errorDetail": ...} on
 * failure) and the headers of every reply (Api-Version, Ostype). The handlers live in the
 * modules that own what they touch: docker_system.c (ping, version, info),
 * docker_images.c, docker_ctr.c (records, archive), docker_run.c, docker_logs.c,
 * docker_exec.c, docker_stats.c, docker_build.c. Known endpoints kosa8 does not serve
 * answer 501 with a message that says so; anything else is moby's 404 "page not found".
 */
#include "daemon/docker_api.h"
#include "daemon/docker_build.h"
#include "daemon/docker_ctr.h"
#include "daemon/docker_exec.h"
#include "daemon/docker_images.h"
#include "daemon/docker_logs.h"
#include "daemon/docker_run.h"
#include "daemon/docker_stats.h"
#include "daemon/docker_system.h"
#include "docker/query.h"

#include <stdio.h>
#include <string.h>

/* ---- the dialect: errors, streams, paths ---- */

/* {"message": m}, or the stream's error line; a message that is not UTF-8 (it may echo
 * a client's path) is replaced, never dropped. */
static json_t *docker_failed_text(const char *m, bool line)
{
	json_t *v = line ? json_pack("{s:{s:s},s:s}", "errorDetail", "message", m, "error", m)
			 : json_pack("{s:s}", "message", m);
	if (!v)
		v = docker_failed_text("(the error message is not valid UTF-8)", line);
	return v;
}

static json_t *docker_error(const struct k8_err *err, unsigned *http)
{
	switch (err->code) {
	case -ENOSYS:
		*http = 501;
		break;
	case -ENOENT:
		*http = 404;
		break;
	case -EINVAL: case -E2BIG: case -ENAMETOOLONG: case -ENOTSUP: case -EBADMSG:
	case -EPERM:
		*http = 400;
		break;
	case -EEXIST: case -EBUSY:
		*http = 409;
		break;
	case -EBADRQC:
		*http = 405;
		break;
	default:
		*http = 500;
		break;
	}
	return docker_failed_text(err->msg[0] ? err->msg : strerror(-err->code), false);
}

/* The handlers write Docker's progress lines themselves (dki_pull_progress). */
static json_t *docker_progress(json_t *p)
{
	return p;
}

/* The pull's last status line is written by its job: nothing more on success. */
static json_t *docker_done(json_t *result)
{
	json_decref(result);
	return NULL;
}

/* moby's stream error: the CLI prints `error` and exits 1; docker-py raises. */
static json_t *docker_failed(const struct k8_err *err)
{
	return docker_failed_text(err->msg[0] ? err->msg : strerror(-err->code), true);
}

static void docker_unmatched(struct api_call *call)
{
	/* Families of moby's API this stage does not serve: say so rather than 404. */
	static const char *const known[] = {
		"containers", "exec", "images", "build", "commit", "volumes", "networks",
		"plugins", "swarm", "nodes", "services", "tasks", "secrets", "configs",
		"events", "system", "session", "distribution", "auth", "grpc",
	};

	for (size_t i = 0; call->path.n > 0 && i < ARRAY_SIZE(known); i++)
		if (!strcmp(call->path.seg[0], known[i])) {
			k8_err_set(&call->err, -ENOSYS, "%s %.200s is not supported by kosa8 (see "
				   "docs/docker.md)", call->method, call->url);
			return;
		}
	k8_err_set(&call->err, -ENOENT, "page not found");
}

/* Named endpoints this stage knows but does not serve (others: docker_unmatched). */
static int docker_unsupported(struct api_call *call)
{
	return k8_err_set(&call->err, -ENOSYS, "%s %.200s is not supported by kosa8 (see "
			  "docs/docker.md)", call->method, call->url);
}

/* ---- the table ---- */

static const struct api_route docker_routes[] = {
	{ "GET",    "/_ping", dksys_api_ping },
	{ "HEAD",   "/_ping", dksys_api_ping },
	{ "GET",    "/version", dksys_api_version },
	{ "GET",    "/info", dksys_api_info },
	{ "GET",    "/images/json", dki_api_list },
	{ "POST",   "/images/create", dki_api_create },
	{ "GET",    "/images/search", docker_unsupported },
	{ "POST",   "/images/load", docker_unsupported },
	{ "POST",   "/images/prune", dki_api_prune },
	{ "GET",    "/images/get", docker_unsupported },
	{ "GET",    "/images/{name}/json", dki_api_inspect },
	{ "POST",   "/images/{name}/tag", dki_api_tag },
	{ "POST",   "/images/{name}/push", docker_unsupported },
	{ "GET",    "/images/{name}/history", docker_unsupported },
	{ "GET",    "/images/{name}/get", docker_unsupported },
	{ "DELETE", "/images/{name}", dki_api_rm },
	{ "POST",   "/containers/create", dkc_api_create },
	{ "GET",    "/containers/json", dkc_api_list },
	{ "GET",    "/containers/{id}/json", dkc_api_inspect },
	{ "POST",   "/containers/{id}/start", dkr_api_start },
	{ "POST",   "/containers/{id}/stop", dkr_api_stop },
	{ "POST",   "/containers/{id}/kill", dkr_api_kill },
	{ "POST",   "/containers/{id}/restart", dkr_api_restart },
	{ "POST",   "/containers/{id}/wait", dkr_api_wait },
	{ "GET",    "/containers/{id}/logs", dkl_api_logs },
	{ "POST",   "/containers/{id}/attach", dkl_api_attach },
	{ "POST",   "/containers/{id}/resize", dkr_api_resize },
	{ "GET",    "/containers/{id}/stats", dks_api_stats },
	{ "GET",    "/containers/{id}/top", dks_api_top },
	{ "DELETE", "/containers/{id}", dkc_api_rm },
	{ "HEAD",   "/containers/{id}/archive", dkc_api_archive_head },
	{ "GET",    "/containers/{id}/archive", dkc_api_archive_get },
	{ "PUT",    "/containers/{id}/archive", dkc_api_archive_put },
	{ "POST",   "/containers/{id}/exec", dkx_api_create },
	{ "POST",   "/exec/{id}/start", dkx_api_start },
	{ "GET",    "/exec/{id}/json", dkx_api_inspect },
	{ "POST",   "/exec/{id}/resize", dkx_api_resize },
	{ "POST",   "/build", dkb_api_build },
	{ "POST",   "/build/prune", dkb_api_prune },
	{ "POST",   "/containers/prune", dkc_api_prune },
};

/* Routes that take their request body as a stream (api_take_body). */
static const api_handler docker_streamed[] = { dkc_api_archive_put, dkb_api_build, NULL };

static const char *const docker_headers[] = {
	"Api-Version", DQ_API_VERSION,
	"Ostype", "linux",
	"Docker-Experimental", "false",
	"Server", "kosa8/" DOCKER_K8_VERSION " (linux)",
	"Cache-Control", "no-cache, no-store, must-revalidate",
	"Pragma", "no-cache",
	NULL,
};

const struct api_dialect docker_api_dialect = {
	.routes = docker_routes,
	.nroutes = ARRAY_SIZE(docker_routes),
	.error = docker_error,
	.split = api_path_split_docker,
	.progress = docker_progress,
	.done = docker_done,
	.failed = docker_failed,
	.stream_type = "application/json",
	.unmatched = docker_unmatched,
	.headers = docker_headers,
	.streamed = docker_streamed,
};
