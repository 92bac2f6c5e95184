/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_dspec.c - libFuzzer target: arbitrary bytes as a create body and an exec body of
 * the Docker API (parsed as JSON), through what src/docker/spec.c makes of them: the
 * checks, the merge with an image's config, the bind mounts, the agent's run and exec
 * requests.
 *
 * Any abort() below is a broken invariant: a spec built with no command or over the
 * 48 KiB a start may send, a bind that is not an absolute container path, more binds
 * than the cap, or an agent request that is not a JSON object. */
#include "docker/spec.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t dumped(const json_t *v)
{
	char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	size_t n = t ? strlen(t) : 0;

	free(t);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *body = json_loadb((const char *)data, size, 0, NULL);
	json_t *ienv = json_pack("[s,s]", "PATH=/usr/bin", "LANG=C"), *icmd = json_pack("[s]", "sh");
	struct dspec_image img = { .env = ienv, .cmd = icmd, .workdir = "/", .user = "" };
	struct dspec_bind binds[DSPEC_BINDS_MAX];
	struct k8_err err = { 0 };
	struct dspec_exec x;
	const char *image;
	json_t *cfg = NULL, *host = NULL;
	size_t n = 0;

	if (!body)
		goto out;
	if (dspec_check(body, &image, &err) == 0 &&
	    dspec_build(body, &img, "0123456789ab", &cfg, &host, &err) == 0) {
		if (!json_array_size(json_object_get(cfg, "Cmd")) &&
		    !json_array_size(json_object_get(cfg, "Entrypoint")))
			abort();
		if (dumped(json_object_get(cfg, "Cmd")) + dumped(json_object_get(cfg, "Entrypoint")) +
		    dumped(json_object_get(cfg, "Env")) > DSPEC_ARGV_ENV_MAX)
			abort();
		struct dspec_run run = { .agent_id = "0123456789ab", .image = "sha256:00",
					 .ip = "10.0.2.16", .broker_env = ienv };
		json_t *req = dspec_run_request(cfg, host, &run);
		if (!json_is_object(req) || !json_is_array(json_object_get(req, "argv")))
			abort();
		dspec_run_applied(req, req);
		json_decref(req);
	}
	k8_err_clear(&err);
	if (dspec_binds(json_object_get(body, "HostConfig"), binds, &n, &err) == 0) {
		if (n > DSPEC_BINDS_MAX)
			abort();
		for (size_t i = 0; i < n; i++)
			if (binds[i].dst[0] != '/' || !binds[i].dst[1] || binds[i].src[0] != '/')
				abort();
	}
	k8_err_clear(&err);
	if (dspec_exec(body, &x, &err) == 0) {
		if (!json_array_size(x.cmd))
			abort();
		if (dspec_exec_inherit(&x, cfg ? cfg : body, &err) == 0) {
			json_t *req = dspec_exec_request(&x, "0123456789ab", ienv, false, x.tty);
			if (!json_is_object(req))
				abort();
			json_decref(req);
		}
		dspec_exec_clear(&x);
	}
	dspec_cap_drop(json_object_get(json_object_get(body, "HostConfig"), "CapDrop"), NULL, &err);
	dspec_signal(json_string_value(json_object_get(body, "Signal")));
out:
	json_decref(cfg);
	json_decref(host);
	json_decref(body);
	json_decref(ienv);
	json_decref(icmd);
	return 0;
}
