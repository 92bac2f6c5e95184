/* SPDX-License-Identifier: Apache-2.0 */
/* spec.h - what the shim reads from an OCI runtime spec (the bundle's config.json, an
 * exec's process) and the node's shim config, and the kosa8 sandbox it turns them into.
 *
 * Functions over JSON (no sockets; only the mount policy resolves paths): the unit tests
 * and a fuzzer call them.
 * Policy (docs/containerd.md "Policy"): the node's config (shim.json) sets the sandbox's
 * size, egress and which host folders may be shared; a pod's io.kosa8.* annotations may
 * ask for less, never for more. Every refusal names the annotation and the node's limit.
 */
#ifndef K8_SHIM_SPEC_H
#define K8_SHIM_SPEC_H

#include "common/util.h"

#include <jansson.h>
#include <stdbool.h>

#define SPEC_MAX_BYTES (1u << 20)       /* config.json, an exec's process spec */
#define SPEC_MAX_ARGS 4096
#define SPEC_MAX_MOUNTS 8               /* kosa8's shared folders per sandbox */

/* A process: what kosa8d's run and exec bodies take (docs/reference/api.md). */
struct spec_proc {
	json_t *argv;                   /* array of strings, at least one */
	json_t *env;                    /* array of "K=V" */
	char cwd[4096];
	char user[32];                  /* "UID:GID" */
	bool terminal;
	unsigned rows, cols;            /* consoleSize; 0 when not given */
};

/* CRI's roles: a pod's sandbox (its pause container), a container of a pod, or a
 * container on its own (ctr, nerdctl). */
enum spec_role { SPEC_ALONE, SPEC_POD_SANDBOX, SPEC_POD_CONTAINER };

struct spec {
	struct spec_proc proc;
	json_t *annotations;            /* object of strings (never NULL after spec_parse) */
	enum spec_role role;
	char pod[128];                  /* io.kubernetes.cri.sandbox-id: the pod's id */
	char image[512];                /* io.kubernetes.cri.image-name, for the record */
	char root[4096];                /* root.path as given ("rootfs": the bundle's own) */
};

/* The process object of an OCI spec ("process" of config.json, or an exec's spec). */
int spec_proc_parse(const json_t *proc, struct spec_proc *p, struct k8_err *err);
void spec_proc_free(struct spec_proc *p);
/* config.json's bytes. */
int spec_parse(const char *text, size_t len, struct spec *s, struct k8_err *err);
void spec_free(struct spec *s);

/* The node's config (shim.json, already parsed; NULL: the defaults) and the pod's
 * annotations: the fields of a kosa8 sandbox create body (cpus, memory_mib, disk_gb,
 * egress, egress_allow, mounts) into *body (a new object). Host folders in
 * io.kosa8.mounts and the node's mount_roots are resolved (realpath) before they are
 * compared, so this one reads the file system; the rest is pure. */
int spec_sandbox_body(const json_t *node, const json_t *annotations, json_t **body,
		      struct k8_err *err);

/* A kosa8 sandbox name for a task or a pod: PREFIX-<12 hex of SHA-256(ns/id)>. */
void spec_sandbox_name(const char *prefix, const char *ns, const char *id, char out[64]);

#endif
