/* SPDX-License-Identifier: Apache-2.0 */
/* spec.h - what a create or exec request of the Docker API means, and the guest agent's
 * requests that carry it out (docs/docker.md "Containers"): like moby's createSpec, it
 * builds a container's spec from the request and touches no container. Pure: no I/O, no
 * daemon state; unit-tested (test_docker_spec) and fuzzed (fuzz_dspec), since every byte
 * is an API client's.
 *
 * A create goes: dspec_check (before the image is looked up: refusals, bounds, shapes),
 * then dspec_build (the image's config merged in, as inspect shows it), dspec_binds (the
 * bind mounts as written; the daemon checks them against its --allow-mount roots), and at
 * each start dspec_run_request. */
#ifndef K8_DOCKER_SPEC_H
#define K8_DOCKER_SPEC_H

#include "common/util.h"

#include <jansson.h>
#include <stdbool.h>

/* Cmd + Entrypoint + Env (and an exec's Cmd + Env), as compact JSON: a start sends them to
 * the guest in one 64 KiB request, which must leave room for the rest. */
#define DSPEC_ARGV_ENV_MAX (48u << 10)
#define DSPEC_BINDS_MAX 16

/* The image's side of a create (borrowed; NULL where the image has none). */
struct dspec_image {
	const json_t *env, *cmd, *entrypoint;
	const char *workdir, *user;
};

/* A bind mount as the client wrote it (HostConfig.Binds "HOST:CTR[:opts]" or Mounts
 * {"Type":"bind"}): the host path as given (absolute, not resolved), the container path
 * (absolute, no '.', '..' or empty component, not /, trailing '/' dropped). */
struct dspec_bind {
	char src[2048];
	char dst[1024];
	bool ro;
};

/* Checks a create body before its image is looked up: Image named; HostConfig an object
 * (or absent/null) without what would lift the isolation (Privileged, CapAdd, Devices,
 * DeviceRequests, DeviceCgroupRules, MaskedPaths, ReadonlyPaths, host namespaces,
 * NetworkMode other than default/bridge/none, SecurityOpt *unconfined*) or what kosa8
 * would not honour (ReadonlyRootfs); CapDrop's names known; Memory and NanoCpus within
 * Docker's bounds; PortBindings well formed and TCP; Cmd, Entrypoint and Env lists of
 * strings; WorkingDir absolute and User at most 255 bytes. 0, or -EINVAL with the
 * field named (moby's words where clients match them). *image points into body. */
int dspec_check(const json_t *body, const char **image, struct k8_err *err);

/* Docker's Config and HostConfig for a checked body and its image, as inspect shows them
 * (new references in *config and *host): the image's Env under the request's, key by key;
 * an Entrypoint in the request drops the image's Cmd (an Entrypoint of [""] is none);
 * WorkingDir and User fall back to the image's; Hostname; Labels always an object;
 * HostConfig's NetworkMode "default" unless given ("none" with NetworkDisabled) and
 * LogConfig json-file. -EINVAL (nothing made) when there is no command or Cmd,
 * Entrypoint and Env are over DSPEC_ARGV_ENV_MAX. */
int dspec_build(const json_t *body, const struct dspec_image *img, const char *hostname,
		json_t **config, json_t **host, struct k8_err *err);

/* The bind mounts of HostConfig (Binds, then Mounts) into out[0..*n): at most
 * DSPEC_BINDS_MAX; only bind mounts of absolute host paths (no named or anonymous
 * volumes); modes ro, rw and the ones that change nothing here (z, Z, [r]private,
 * delegated, cached, consistent). 0, or -EINVAL naming what is wrong. */
int dspec_binds(const json_t *hc, struct dspec_bind *out, size_t *n, struct k8_err *err);

/* Is the absolute path `p` the absolute path `root` or below it (no trailing '/')? */
bool dspec_below(const char *p, const char *root);

/* HostConfig.CapDrop ("ALL", "CAP_X" or "X", any case) as capability numbers, the
 * agent's "cap_drop" (a new reference in *out; may be NULL to check only). -EINVAL for a
 * name Linux does not have, as Docker. */
int dspec_cap_drop(const json_t *v, json_t **out, struct k8_err *err);

/* The image's (or the container's) environment overridden key by key by `over`'s
 * "K=V" entries (a new array); entries without '=' in `over` are dropped. */
json_t *dspec_merge_env(const json_t *base, const json_t *over);

/* ConsoleSize [height, width] (each 0..65535), else 0, 0. */
void dspec_console_size(const json_t *v, unsigned *rows, unsigned *cols);

/* A signal by number (1..64) or name ("KILL", "SIGKILL", any case); absent or "" is
 * SIGKILL; 0 when unknown. */
int dspec_signal(const char *s);

/* An exec as created (POST /containers/{id}/exec), with the container's Config merged. */
struct dspec_exec {
	json_t *cmd, *env;              /* owned */
	char cwd[4096], user[256];
	bool tty, attach_stdin, attach_stdout, attach_stderr;
	unsigned rows, cols;
};

/* An exec's body checked (Privileged refused, Cmd required, WorkingDir and User as for a
 * create) into *x. 0, or -EINVAL (x left empty). */
int dspec_exec(const json_t *body, struct dspec_exec *x, struct k8_err *err);
/* Then its container's Config (`cfg`) under it: the container's Env under the exec's,
 * its WorkingDir and User where the exec names none. -EINVAL when Cmd and Env are then
 * over DSPEC_ARGV_ENV_MAX. */
int dspec_exec_inherit(struct dspec_exec *x, const json_t *cfg, struct k8_err *err);
void dspec_exec_clear(struct dspec_exec *x);

/* What a start asks of the guest agent besides the container (docs/protocol.md `run`). */
struct dspec_run {
	const char *agent_id;           /* the agent's container id (12 hex) */
	const char *image;              /* the image's manifest digest, mounted */
	const char *ip;                 /* its address, "" for none (NetworkMode none) */
	bool own_sandbox;               /* a VM of its own: the VM's network ("vm") */
	const json_t *broker_env;       /* the sandbox broker's variables, or NULL */
	const json_t *binds;            /* the agent's bind list, or NULL (none) */
	bool rm;                        /* AutoRemove: the agent removes it as it exits */
};

/* The agent's `run` for a container's Config and HostConfig: argv (Entrypoint + Cmd),
 * env (the broker's variables under Config.Env), cwd ("/") and user ("0") by default,
 * stdin (OpenStdin; "tty" with Tty, and the first size from ConsoleSize), its network
 * namespace ("none", "vm" or "own" with its address), binds, and the container's own
 * cgroup limits (Memory, NanoCpus) and CapDrop. A new reference. */
json_t *dspec_run_request(const json_t *config, const json_t *host, const struct dspec_run *r);

/* Did the agent apply what `req` asked (its answer `resp` has "limits" when the request
 * had memory_max or nano_cpus, "cap_drop" when it had cap_drop)? An agent older than
 * those runs the container without them: refused, never ignored. */
bool dspec_run_applied(const json_t *req, const json_t *resp);

/* The agent's `exec` for x in agent container `agent_id`, the broker's variables under
 * its Env; stdin when it attaches stdin and is not detached; a pty when `tty` (the exec's
 * own Tty or its start's) at the size it has. A new reference. */
json_t *dspec_exec_request(const struct dspec_exec *x, const char *agent_id,
			   const json_t *broker_env, bool detach, bool tty);

#endif
