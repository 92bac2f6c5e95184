/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_interp.c - E2B's code interpreter over kosa8's own (e2b_interp.h, docs/e2b.md).
 *
 * E2B's code interpreter is a Jupyter server on the sandbox's port 49999; kosa8 serves
 * its API from kosa8d with the interpreter of interp.c: a cell is interp_run_start and
 * interp_run_pump, each event written as the line E2B's server would have sent
 * (src/e2b/code.c); contexts are interp.c's. Every context of a box lives in the box's
 * one long-lived container, beside envd's processes and files (what files.write wrote,
 * a cell reads), with the container's environment (the image's and create's envVars).
 * The default context is that container's context "default", made by the first cell
 * that needs it: its id says where it is, so nothing about it is kept on the host, and
 * a snapshot, a fork or a rewind carries it and its variables with the machine. */
#include "daemon/e2b_interp.h"
#include "daemon/e2b_box.h"
#include "daemon/e2b_ctl.h"
#include "daemon/interp.h"
#include "daemon/interp_event.h"
#include "e2b/code.h"

#include <stdio.h>
#include <string.h>

#define CODE_PORT 49999

/* Where a box's contexts live, copied under the table's lock. */
struct code_where {
	char sandbox[E2B_ID_LEN + 8];
	char container[13];
	char cwd[1024];                 /* the image's working directory, or "/" */
};

/* The door of every call: the box E2b-Sandbox-Id names, asked with its own token, made
 * ready (e2b_box_ready: a paused one resumes only with autoResume), and where its
 * contexts live. The box's reference is dropped here: the kosa8 sandbox's own reference
 * (taken by interp.c) keeps what a call uses. */
static int code_begin(struct api_call *call, struct code_where *w)
{
	struct e2b *e = e2b_of(call->d);
	struct e2b_box *b;
	int r = e2b_data_auth(call, CODE_PORT, &b);

	if (r)
		return r;
	r = e2b_box_ready(call->d, b, &call->err);
	if (!r) {
		pthread_mutex_lock(&e->lock);
		snprintf(w->sandbox, sizeof(w->sandbox), "%s", b->sandbox);
		snprintf(w->container, sizeof(w->container), "%s", b->container);
		snprintf(w->cwd, sizeof(w->cwd), "%s", b->workdir[0] == '/' ? b->workdir : "/");
		pthread_mutex_unlock(&e->lock);
		if (!w->container[0])
			r = k8_err_set(&call->err, -EHOSTUNREACH, "sandbox %s has no container "
				       "running", b->id);
	}
	e2b_box_put(call->d, b);
	return r;
}

/* A context id this box's client may use: one of its container's. */
static int code_ctx_ours(struct api_call *call, const struct code_where *w, const char *id)
{
	char ctr[13];

	if (!interp_id_parse(id, ctr) && !strcmp(ctr, w->container))
		return 0;
	return k8_err_set(&call->err, -ENOENT, "context %.64s not found", id);
}

/* ---- /execute ---- */

/* An interpreter event as E2B's line, stamped now. */
static json_t *code_line(const json_t *ev)
{
	return e2b_code_event(ev, (int64_t)now_real_ns());
}

int e2b_api_execute(struct api_call *call)
{
	struct interp_run *run = NULL;
	struct code_where w;
	const char *ctx;
	json_t *cell = NULL;
	bool dflt;
	int r;

	if ((r = code_begin(call, &w)) ||
	    (r = e2b_code_exec_parse(call->body, &ctx, &cell, &call->err)))
		return r;
	dflt = !ctx || !strcmp(ctx, "default");
	if (dflt) {
		/* the container's own default context, made by the first cell */
		json_object_set_new(cell, "container", json_string(w.container));
		json_object_set_new(cell, "cwd", json_string(w.cwd));
		r = interp_run_start(call->d, w.sandbox, "default", cell, "e2b", &run,
				     &call->err);
	} else if (!(r = code_ctx_ours(call, &w, ctx))) {
		r = interp_run_start(call->d, w.sandbox, ctx, cell, "e2b", &run, &call->err);
	}
	json_decref(cell);
	if (r)
		return call->err.code ? call->err.code : -EIO;
	return interp_reply(call, run, code_line);
}

/* ---- /contexts ---- */

int e2b_api_ctx_create(struct api_call *call)
{
	struct code_where w;
	const char *cwd;
	json_t *body, *ctx = NULL;
	int r;

	if ((r = code_begin(call, &w)) || (r = e2b_code_ctx_parse(call->body, &cwd, &call->err)))
		return r;
	body = json_pack("{s:s,s:s}", "container", w.container, "cwd", cwd ? cwd : w.cwd);
	r = interp_ctx_create(call->d, w.sandbox, body, &ctx, &call->err);
	json_decref(body);
	if (!r)
		call->out = e2b_code_ctx(ctx);
	json_decref(ctx);
	return r;
}

int e2b_api_ctx_list(struct api_call *call)
{
	struct code_where w;
	json_t *list = NULL, *c;
	size_t i;
	int r;

	if ((r = code_begin(call, &w)) ||
	    (r = interp_ctx_list(call->d, w.sandbox, w.container, &list, &call->err)))
		return r;
	call->out = json_array();
	json_array_foreach(list, i, c)
		json_array_append_new(call->out, e2b_code_ctx(c));
	json_decref(list);
	return 0;
}

int e2b_api_ctx_rm(struct api_call *call)
{
	const char *id = api_param(call, "id");
	struct code_where w;
	int r;

	if ((r = code_begin(call, &w)) || (r = code_ctx_ours(call, &w, id)) ||
	    (r = interp_ctx_rm(call->d, w.sandbox, id, &call->err)))
		return r;
	call->status = 204;
	return 0;
}

int e2b_api_ctx_restart(struct api_call *call)
{
	const char *id = api_param(call, "id");
	struct code_where w;
	json_t *ctx = NULL;
	int r;

	if ((r = code_begin(call, &w)) || (r = code_ctx_ours(call, &w, id)) ||
	    (r = interp_ctx_restart(call->d, w.sandbox, id, &ctx, &call->err)))
		return r;
	json_decref(ctx);
	call->status = 204;
	return 0;
}
