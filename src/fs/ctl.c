/* SPDX-License-Identifier: Apache-2.0 */
/* ctl.c - kosa8-fs control requests: JSON lines from the daemon (ping, stats, save, load). */
#include "fs/fs.h"
#include "common/util.h"

#include <jansson.h>
#include <string.h>

static char *ctl_dump(json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT);
	char *line;

	json_decref(o);
	if (!s)
		return xstrdup("{\"ok\":false,\"error\":\"out of memory\"}\n");
	line = xasprintf("%s\n", s);
	free(s);
	return line;
}

static char *ctl_error(json_t *id, const char *msg)
{
	json_t *o = json_pack("{s:O?,s:b,s:s}", "id", id, "ok", 0, "error", msg);

	return ctl_dump(o);
}

char *fs_ctl_handle(struct fs_ctx *c, const char *line, size_t len, int *fd)
{
	json_error_t jerr;
	json_t *req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr), *id, *res;
	const char *op, *path;
	struct k8_err err = { 0 };
	char *out;

	if (!json_is_object(req)) {
		json_decref(req);
		return ctl_error(NULL, "request is not a JSON object");
	}
	id = json_object_get(req, "id");
	op = json_string_value(json_object_get(req, "op"));
	path = json_string_value(json_object_get(req, "path"));
	if (!op) {
		out = ctl_error(id, "missing \"op\"");
	} else if (!strcmp(op, "ping")) {
		res = json_pack("{s:O?,s:b}", "id", id, "ok", 1);
		out = ctl_dump(res);
	} else if (!strcmp(op, "stats")) {
		res = json_pack("{s:O?,s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "id", id, "ok", 1,
				"requests", (json_int_t)c->st.requests,
				"bytes_read", (json_int_t)c->st.bytes_read,
				"bytes_written", (json_int_t)c->st.bytes_written,
				"errors", (json_int_t)c->st.errors,
				"protocol_errors", (json_int_t)c->st.protocol_errors,
				"connects", (json_int_t)c->st.connects,
				"nodes", (json_int_t)c->nnodes,
				"handles", (json_int_t)c->nhandles,
				"connected", c->connected);
		json_object_set_new(res, "limit_hits", json_integer((json_int_t)c->st.limit_hits));
		json_object_set_new(res, "enospc", json_integer((json_int_t)c->st.enospc));
		json_object_set_new(res, "path_bytes", json_integer((json_int_t)c->path_bytes));
		out = ctl_dump(res);
	} else if (!strcmp(op, "port")) {
		/* the daemon connected to QEMU's chardev for us (we may not connect) */
		if (*fd < 0) {
			out = ctl_error(id, "\"port\" needs the connected socket as an fd");
		} else {
			if (c->port_handoff > 0)
				close(c->port_handoff);
			c->port_handoff = *fd;
			*fd = -1;
			out = ctl_dump(json_pack("{s:O?,s:b}", "id", id, "ok", 1));
		}
	} else if ((!strcmp(op, "save") || !strcmp(op, "load")) && *fd >= 0) {
		int r = op[0] == 's' ? fs_tables_save_fd(c, *fd, &err)
				     : fs_tables_load_fd(c, *fd, &err);
		if (r < 0)
			out = ctl_error(id, err.msg[0] ? err.msg : strerror(-r));
		else
			out = ctl_dump(json_pack("{s:O?,s:b,s:I}", "id", id, "ok", 1,
						 "nodes", (json_int_t)c->nnodes));
	} else if (!strcmp(op, "save") || !strcmp(op, "load")) {
		int r;
		if (!path || !path[0]) {
			out = ctl_error(id, "missing \"path\"");
		} else {
			r = op[0] == 's' ? fs_tables_save(c, path, &err) : fs_tables_load(c, path, &err);
			if (r < 0)
				out = ctl_error(id, err.msg[0] ? err.msg : strerror(-r));
			else
				out = ctl_dump(json_pack("{s:O?,s:b,s:I}", "id", id, "ok", 1,
							 "nodes", (json_int_t)c->nnodes));
		}
	} else {
		out = ctl_error(id, "unknown op");
	}
	json_decref(req);
	return out;
}
