/* SPDX-License-Identifier: Apache-2.0 */
/* ctl.c - kosa8-fs control requests from the daemon: ping, stats, port, save, load. The
 * JSON lines, their limits, the reply's "id" and "ok" and the fds passed along are
 * src/common/sidecar.c's. */
#include "fs/fs.h"
#include "common/util.h"

#include <jansson.h>
#include <string.h>

static json_t *ctl_nodes(struct fs_ctx *c, int r, struct k8_err *err)
{
	if (r < 0) {
		if (!err->msg[0])
			k8_err_set(err, r, "%s", strerror(-r));
		return NULL;
	}
	return json_pack("{s:I}", "nodes", (json_int_t)c->nnodes);
}

json_t *fs_ctl_handle(void *ctx, json_t *req, int *fd, struct k8_err *err)
{
	struct fs_ctx *c = ctx;
	const char *op = json_string_value(json_object_get(req, "op"));
	const char *path = json_string_value(json_object_get(req, "path"));
	json_t *res;

	if (!strcmp(op, "ping"))
		return json_object();
	if (!strcmp(op, "stats")) {
		res = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b}",
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
		json_object_set_new(res, "ram_writes", json_integer((json_int_t)c->st.ram_writes));
		json_object_set_new(res, "ram_errors", json_integer((json_int_t)c->st.ram_errors));
		json_object_set_new(res, "ram", json_boolean(c->ram_fd >= 0));
		return res;
	}
	if (!strcmp(op, "port")) {
		/* the daemon connected to QEMU's chardev for us (we may not connect) */
		if (*fd < 0) {
			k8_err_set(err, -EINVAL, "\"port\" needs the connected socket as an fd");
			return NULL;
		}
		if (c->port_handoff > 0)
			close(c->port_handoff);
		c->port_handoff = *fd;
		*fd = -1;
		return json_object();
	}
	if (!strcmp(op, "ram")) {
		/* the guest's RAM (a read-only /proc/<qemu>/mem the daemon opened): hva and
		 * size say where; without an fd, none (WRITEREF then answers ENXIO) */
		json_t *hva = json_object_get(req, "hva"), *size = json_object_get(req, "size");
		int r;

		if (*fd >= 0 && (!json_is_integer(hva) || !json_is_integer(size) ||
				 json_integer_value(hva) <= 0 || json_integer_value(size) <= 0)) {
			k8_err_set(err, -EINVAL, "\"ram\" needs \"hva\" and \"size\"");
			return NULL;
		}
		r = fs_ram_set(c, *fd, *fd >= 0 ? (uint64_t)json_integer_value(hva) : 0,
			       *fd >= 0 ? (uint64_t)json_integer_value(size) : 0);
		*fd = -1;
		if (r) {
			k8_err_set(err, r, "\"ram\": hva and size must be page-aligned");
			return NULL;
		}
		return json_object();
	}
	if ((!strcmp(op, "save") || !strcmp(op, "load")) && *fd >= 0)
		return ctl_nodes(c, op[0] == 's' ? fs_tables_save_fd(c, *fd, err)
						 : fs_tables_load_fd(c, *fd, err), err);
	if (!strcmp(op, "save") || !strcmp(op, "load")) {
		if (!path || !path[0]) {
			k8_err_set(err, -EINVAL, "missing \"path\"");
			return NULL;
		}
		return ctl_nodes(c, op[0] == 's' ? fs_tables_save(c, path, err)
						 : fs_tables_load(c, path, err), err);
	}
	k8_err_set(err, -EINVAL, "unknown op");
	return NULL;
}
