/* SPDX-License-Identifier: Apache-2.0 */
/* containers.c - the containers of a sandbox, through its agent: list, stop, remove
 * (docs/reference/api.md; run and exec are exec.c's). Issue 12's Docker API grows this file. */
#include "daemon/containers.h"
#include "daemon/daemon.h"
#include "daemon/sandbox.h"

#include <signal.h>

/* How long the agent may take to answer a listing and a removal. */
#define CTR_PS_TIMEOUT_MS 10000
#define CTR_RM_TIMEOUT_MS 30000
/* Stop: SIGTERM, then SIGKILL after the grace period the client picks (timeout_s, 0..1h:
 * the CLI's -t range and the agent's); the agent's answer may come this much later. */
#define CTR_STOP_SIGNAL SIGTERM
#define CTR_STOP_TIMEOUT_DEFAULT_S 10
#define CTR_STOP_TIMEOUT_MAX_S 3600
#define CTR_STOP_SLACK_MS 10000

/* The sandbox the path names, booted if it was stopped; NULL with call->err filled.
 * The caller gives it back with sb_put. */
static struct sandbox *ctr_sandbox(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);

	if (sb && sb_ensure_running(call->d, sb, &call->err)) {
		sb_put(call->d, sb);
		return NULL;
	}
	return sb;
}

int ctr_api_list(struct api_call *call)
{
	struct sandbox *sb = ctr_sandbox(call);
	json_t *resp = NULL;
	int r;

	if (!sb)
		return call->err.code;
	r = sb_agent_request(sb, json_pack("{s:s}", "op", "ps"), CTR_PS_TIMEOUT_MS, &resp, NULL,
			     &call->err);
	if (!r)
		call->out = sb_containers_json(sb, json_object_get(resp, "containers"));
	json_decref(resp);
	sb_put(call->d, sb);
	return r;
}

/* Stop the container (and remove it when `rm`); audited either way. */
static int ctr_stop(struct api_call *call, bool rm)
{
	const char *id = api_param(call, "id");
	int64_t t = CTR_STOP_TIMEOUT_DEFAULT_S;
	struct sandbox *sb;
	json_t *resp = NULL;
	int r;

	if (api_body_int(call, "timeout_s", API_OPTIONAL, 0, CTR_STOP_TIMEOUT_MAX_S, &t))
		return call->err.code;
	sb = ctr_sandbox(call);
	if (!sb)
		return call->err.code;
	r = sb_agent_request(sb, json_pack("{s:s,s:s,s:i,s:I}", "op", "stop", "container", id,
					   "signal", CTR_STOP_SIGNAL, "timeout_ms",
					   (json_int_t)(t * 1000)),
			     (int)(t * 1000) + CTR_STOP_SLACK_MS, &resp, NULL, &call->err);
	json_decref(resp);
	resp = NULL;
	if (!r && rm)
		r = sb_agent_request(sb, json_pack("{s:s,s:s}", "op", "rm", "container", id),
				     CTR_RM_TIMEOUT_MS, &resp, NULL, &call->err);
	json_decref(resp);
	if (!r)
		daemon_audit(call->d, rm ? "sandbox.container.rm" : "sandbox.container.stop",
			     sb->name, json_pack("{s:s}", "container", id));
	sb_put(call->d, sb);
	return r;
}

int ctr_api_stop(struct api_call *call)
{
	return ctr_stop(call, false);
}

int ctr_api_rm(struct api_call *call)
{
	return ctr_stop(call, true);
}

/* The size of a process's pty (TIOCSWINSZ in the guest; it gets SIGWINCH): the
 * container's init, or the run or exec whose "started" event named `stream`. ENOTTY from
 * the agent (no pty) is a 409, as is a process that is gone (ESRCH: 404). */
int ctr_api_resize(struct api_call *call)
{
	const char *id = api_param(call, "id");
	int64_t rows, cols, stream = 0;
	struct sandbox *sb;
	json_t *req, *resp = NULL;
	int r;

	if (api_body_int(call, "rows", API_REQUIRED, 0, 65535, &rows) ||
	    api_body_int(call, "cols", API_REQUIRED, 0, 65535, &cols) ||
	    api_body_int(call, "stream", API_OPTIONAL, 1, UINT32_MAX, &stream))
		return call->err.code;
	sb = ctr_sandbox(call);
	if (!sb)
		return call->err.code;
	req = json_pack("{s:s,s:s,s:i,s:i}", "op", "resize", "container", id, "rows", (int)rows,
			"cols", (int)cols);
	if (stream)
		json_object_set_new(req, "stream", json_integer(stream));
	r = sb_agent_request(sb, req, CTR_PS_TIMEOUT_MS, &resp, NULL, &call->err);
	json_decref(resp);
	if (r == -ENOTTY) {
		k8_err_clear(&call->err);
		r = k8_err_set(&call->err, -EBUSY, "that process has no terminal");
	}
	sb_put(call->d, sb);
	return r;
}
