/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_api.c - the E2B-compatible API (docs/e2b.md): one TCP listener, served by api.c like
 * kosa8d.sock and docker.sock, with its own route table and error shape.
 *
 * E2B's clients, pointed here by E2B_API_URL and E2B_SANDBOX_URL, send the control plane
 * (/v2/sandboxes, /sandboxes/...), envd (/health, /files, /process.Process/..,
 * /filesystem.Filesystem/..) and the code interpreter (/execute, /contexts) to the same
 * place: the paths do not collide, and every data-plane request names its sandbox in
 * E2b-Sandbox-Id (and the port it meant in E2b-Sandbox-Port), as E2B's own shared host
 * routes them. The control plane needs an API key (X-API-Key, e2b_keys.c); the data plane
 * the sandbox's own access token (e2b_ctl.c's e2b_data_auth). An error is E2B's
 * {"code": HTTP status, "message"}; envd's Connect calls answer Connect's own shape
 * (e2b_envd.c). */
#include "daemon/e2b_api.h"
#include "daemon/api.h"
#include "daemon/api_route.h"
#include "daemon/e2b_box.h"
#include "daemon/e2b_ctl.h"
#include "daemon/e2b_envd.h"
#include "daemon/e2b_fs.h"
#include "daemon/e2b_interp.h"
#include "daemon/daemon.h"
#include "daemon/ports.h"

#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static unsigned e2b_http_of(int code)
{
	switch (code) {
	case -EKEYREJECTED:
		return 401;
	case -ENOENT:
		return 404;
	case -EINVAL: case -ENOTSUP: case -EBADMSG: case -ENAMETOOLONG: case -ENOTDIR:
	case -EISDIR:
		return 400;
	case -E2BIG: case -EFBIG:
		return 413;
	case -EEXIST: case -EBUSY:
		return 409;
	case -EBADRQC:
		return 405;
	case -ENOSPC:
		return 507;
	case -ENOSYS:
		return 501;
	case -EAGAIN: case -ETIMEDOUT: case -ECONNRESET: case -ENOTCONN: case -EPIPE:
	case -EHOSTUNREACH:
		return 502;
	default:
		return 500;
	}
}

/* E2B's error body: {"code": <HTTP status>, "message"}; a message that is not UTF-8 (it
 * may echo a client's path) is replaced. */
static json_t *e2b_error(const struct k8_err *err, unsigned *http)
{
	const char *m = err->msg[0] ? err->msg : strerror(-err->code);
	json_t *v;

	*http = e2b_http_of(err->code);
	v = json_pack("{s:i,s:s}", "code", (int)*http, "message", m);
	return v ? v : json_pack("{s:i,s:s}", "code", (int)*http, "message",
				 "(the error message is not valid UTF-8)");
}

static json_t *e2b_progress(json_t *p)
{
	return p;
}

static json_t *e2b_done(json_t *result)
{
	return result;
}

static json_t *e2b_failed(const struct k8_err *err)
{
	unsigned http;

	return e2b_error(err, &http);
}

static void e2b_unmatched(struct api_call *call)
{
	k8_err_set(&call->err, -ENOENT, "%s %.200s is not served by kosa8's E2B API (see "
		   "docs/e2b.md)", call->method, call->url);
}

static const struct api_route e2b_routes[] = {
	/* the control plane (E2B's OpenAPI spec, as the SDKs call it) */
	{ "POST",   "/v2/sandboxes", e2b_api_create },
	{ "POST",   "/sandboxes", e2b_api_create },
	{ "GET",    "/v2/sandboxes", e2b_api_list },
	{ "GET",    "/sandboxes", e2b_api_list },
	{ "GET",    "/sandboxes/{id}", e2b_api_info },
	{ "DELETE", "/sandboxes/{id}", e2b_api_kill },
	{ "POST",   "/v2/sandboxes/{id}/connect", e2b_api_connect },
	{ "POST",   "/sandboxes/{id}/connect", e2b_api_connect },
	{ "POST",   "/sandboxes/{id}/resume", e2b_api_connect },
	{ "POST",   "/sandboxes/{id}/timeout", e2b_api_timeout },
	{ "POST",   "/sandboxes/{id}/refreshes", e2b_api_refresh },
	{ "POST",   "/sandboxes/{id}/pause", e2b_api_pause },
	{ "GET",    "/sandboxes/{id}/metrics", e2b_api_metrics },
	{ "PUT",    "/sandboxes/{id}/network", e2b_api_network },
	{ "POST",   "/sandboxes/{id}/snapshots", e2b_api_snapshot },
	{ "GET",    "/snapshots", e2b_api_snapshots },
	{ "DELETE", "/templates/{id}", e2b_api_snapshot_rm },
	{ "POST",   "/sandboxes/{id}/fork", e2b_api_fork },
	/* envd's process service, /health and /envs (e2b_envd.c); Start and Connect read
	 * their Connect envelope themselves (e2b_streamed below) */
	{ "POST",   "/process.Process/Start", e2b_api_proc_start },
	{ "POST",   "/process.Process/Connect", e2b_api_proc_connect },
	{ "POST",   "/process.Process/List", e2b_api_proc_list },
	{ "POST",   "/process.Process/SendInput", e2b_api_proc_input },
	{ "POST",   "/process.Process/SendSignal", e2b_api_proc_signal },
	{ "POST",   "/process.Process/CloseStdin", e2b_api_proc_close_stdin },
	{ "POST",   "/process.Process/Update", e2b_api_proc_update },
	{ "GET",    "/health", e2b_api_health },
	{ "GET",    "/envs", e2b_api_envs },
	/* envd's filesystem service and /files (e2b_fs.c) */
	{ "POST",   "/filesystem.Filesystem/Stat", e2b_fs_api_stat },
	{ "POST",   "/filesystem.Filesystem/ListDir", e2b_fs_api_list },
	{ "POST",   "/filesystem.Filesystem/MakeDir", e2b_fs_api_mkdir },
	{ "POST",   "/filesystem.Filesystem/Move", e2b_fs_api_move },
	{ "POST",   "/filesystem.Filesystem/Remove", e2b_fs_api_remove },
	{ "POST",   "/filesystem.Filesystem/WatchDir", e2b_fs_api_watch },
	{ "POST",   "/filesystem.Filesystem/CreateWatcher", e2b_fs_api_watcher },
	{ "POST",   "/filesystem.Filesystem/GetWatcherEvents", e2b_fs_api_watcher },
	{ "POST",   "/filesystem.Filesystem/RemoveWatcher", e2b_fs_api_watcher },
	{ "GET",    "/files", e2b_fs_api_read },
	{ "POST",   "/files", e2b_fs_api_write },
	/* the code interpreter (its port 49999): kosa8's interpreter, e2b_interp.c */
	{ "POST",   "/execute", e2b_api_execute },
	{ "POST",   "/contexts", e2b_api_ctx_create },
	{ "GET",    "/contexts", e2b_api_ctx_list },
	{ "DELETE", "/contexts/{id}", e2b_api_ctx_rm },
	{ "POST",   "/contexts/{id}/restart", e2b_api_ctx_restart },
};

/* Routes that take their request body as a stream (api_take_body): a Connect stream's
 * envelope, an upload. */
static const api_handler e2b_streamed[] = {
	/* envd's streaming calls (e2b_envd.c, e2b_fs.c) and uploads */
	e2b_api_proc_start, e2b_api_proc_connect, e2b_fs_api_write, e2b_fs_api_watch,
	NULL
};

static const struct api_dialect e2b_dialect = {
	.routes = e2b_routes,
	.nroutes = ARRAY_SIZE(e2b_routes),
	.error = e2b_error,
	.progress = e2b_progress,
	.done = e2b_done,
	.failed = e2b_failed,
	.stream_type = "application/json",
	.unmatched = e2b_unmatched,
	.streamed = e2b_streamed,
};

/* "HOST:PORT", "[V6]:PORT" or ":PORT" into its parts. */
static int listen_spec(const char *s, char *host, size_t n, int *port, struct k8_err *err)
{
	const char *colon;
	char *end;
	long p;

	if (s[0] == '[') {
		const char *rb = strchr(s, ']');
		if (!rb || rb[1] != ':')
			goto bad;
		snprintf(host, n, "%.*s", (int)(rb - s - 1), s + 1);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			goto bad;
		snprintf(host, n, "%.*s", (int)(colon - s), s);
	}
	p = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || p < 0 || p > 65535)
		goto bad;
	*port = (int)p;
	return 0;
bad:
	return k8_err_set(err, -EINVAL, "config.json e2b.listen '%.80s': expected HOST:PORT "
			  "(e.g. 127.0.0.1:7435) or \"off\"", s);
}

int e2b_listen(struct daemon *d, struct k8_err *err)
{
	struct e2b *e = e2b_of(d);
	json_t *cfg = daemon_config(d);
	const char *spec = json_string_value(json_object_get(json_object_get(cfg, "e2b"), "listen"));
	char host[64], ip[64];
	int port = 0, family = 0, bound = 0, fd, r;
	bool loopback;

	e2b_load(d);
	if (spec && !strcmp(spec, "off")) {
		json_decref(cfg);
		return k8_err_set(err, -ENOENT, "off in config.json");
	}
	r = listen_spec(spec ? spec : E2B_LISTEN_DEFAULT, host, sizeof(host), &port, err);
	json_decref(cfg);
	if (r || (r = port_ip_parse(host, ip, sizeof(ip), &family, &loopback, err)))
		return r;
	if (!loopback && !ports_public_allowed(d))
		return k8_err_set(err, -EPERM, "e2b.listen %s is not a loopback address: the E2B API "
				  "runs code for whoever holds a key, so it stays on loopback unless "
				  "the daemon runs with --allow-public-ports", ip);
	fd = ports_bind(ip, family, port, &bound, err);
	if (fd < 0)
		return fd;
	if ((r = api_listen(d, fd, &e2b_dialect, err)) < 0) {
		close(fd);
		return r;
	}
	e->port = bound;
	snprintf(e->listen, sizeof(e->listen), family == AF_INET6 ? "[%s]:%d" : "%s:%d", ip,
		 bound);
	return 0;
}
