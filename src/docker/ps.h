/* SPDX-License-Identifier: Apache-2.0 */
/* ps.h - how a container of the Docker API is shown: `docker ps`'s entries
 * (GET /containers/json) and their filters, and inspect's object (GET
 * /containers/{id}/json), from a plain view of the daemon's record (docs/docker.md
 * "Containers"). Pure: no daemon, no I/O; unit-tested (test_docker_ps). */
#ifndef K8_DOCKER_PS_H
#define K8_DOCKER_PS_H

#include "docker/filters.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

enum dps_state { DPS_CREATED, DPS_RUNNING, DPS_EXITED, DPS_DEAD };

/* Docker's names of the states ("created", "running", "exited", "dead"). */
const char *dps_state_name(enum dps_state s);

/* A container as the daemon holds it (borrowed for the call). */
struct dps_ctr {
	const char *id, *name, *image, *image_id, *sandbox;
	const char *error;              /* "OOMKilled" when the kernel's OOM killer ended it */
	const char *ip;                 /* its address while it runs with a network, else "" */
	const json_t *config, *host, *mounts;
	const json_t *published;        /* while it runs: [{"HostIp","HostPort","Port"}] */
	enum dps_state state;
	int exit_code, pid;
	bool removing;
	int64_t created_ns, started_ns, finished_ns;
};

/* The filters `docker ps` takes (id, name, label, status, ancestor, exited) from the
 * `filters` parameter (NULL: none): 0, or -EINVAL with err (moby's words). *all becomes
 * true when status or exited is given (moby lists stopped ones then). */
int dps_filters(const char *json, struct dfilters *f, bool *all, struct k8_err *err);

/* Does c pass the filters? id and name are moby's unanchored regular expressions (name
 * with its '/'), status and exited exact, ancestor the image or its id, label all. */
bool dps_match(const struct dps_ctr *c, const struct dfilters *f);

/* One entry of `docker ps` (Created in seconds, Status in words against `now_ns`:
 * "Up 5 minutes", "Exited (0) 2 hours ago"). A new reference. */
json_t *dps_list_entry(const struct dps_ctr *c, int64_t now_ns);

/* inspect's object: State, Config and HostConfig as the client gave them (merged),
 * NetworkSettings (Ports with what is published, the address while it runs). */
json_t *dps_inspect(const struct dps_ctr *c);

#endif
