/* SPDX-License-Identifier: Apache-2.0 */
/* names.h - Docker container names, 64-hex ids with unique-prefix lookup, and port
 * publishing specs (the `-p` syntax, HostConfig.PortBindings, Config.ExposedPorts).
 * Library code: no I/O except getrandom() for new ids. */
#ifndef K8_DOCKER_NAMES_H
#define K8_DOCKER_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/util.h"

#define DN_NAME_MAX 128     /* kosa8's cap; Docker has none (docs/docker.md) */
#define DN_ID_LEN 64
#define DN_PORTS_MAX 256    /* bindings or exposed ports in one request */

/* Check a container name the way moby does: an optional leading '/', then
 * [a-zA-Z0-9][a-zA-Z0-9_.-]+ (two characters at least), at most DN_NAME_MAX. On success
 * returns 0 and stores the name without its '/' in out[DN_NAME_MAX + 1]; -EINVAL with
 * moby's message ("Invalid container name (x), only [a-zA-Z0-9][a-zA-Z0-9_.-] are
 * allowed") otherwise. */
int dn_name_check(const char *name, char out[DN_NAME_MAX + 1], struct k8_err *err);

/* A new random 64-hex id into out[65]. Like moby, never one whose 12-character short
 * form is all digits (a client would read it as a number). Returns 0 or -errno. */
int dn_new_id(char out[DN_ID_LEN + 1]);
/* True for exactly 64 lowercase hex digits. */
bool dn_is_full_id(const char *s);

/* The Docker form of a kosa8 image name: "docker.io/library/python:3" -> "python:3",
 * "docker.io/x/y:1" -> "x/y:1", others unchanged (moby's FamiliarString). Writes
 * out[len]. */
void dn_familiar(const char *ref, char *out, size_t len);

/* Find what a client's reference (full id, name with or without '/', or id prefix) names
 * among n objects (ids[i], names[i]; names may be NULL or hold NULLs). moby's order: an
 * exact full id, then an exact name, then a unique id prefix. Returns the index, -ENOENT
 * when nothing matches (also for an empty reference), -EINVAL when a prefix names more
 * than one (moby: "multiple IDs found with provided prefix"). */
long dn_lookup(const char *const *ids, const char *const *names, size_t n, const char *ref);

enum dn_proto { DN_TCP, DN_UDP };

struct dn_port {
	enum dn_proto proto;
	uint16_t ctr_port;       /* in the container */
	uint16_t host_port;      /* 0: pick a free one (HostPort "" or absent) */
	char host_ip[46];        /* as given; "" when not given */
	bool host_any;           /* all interfaces: HostIp "", "0.0.0.0" or "::" */
};

/* A published port as `docker run -p` writes it: [ip:][hostPort:]containerPort[/proto],
 * ip either dotted IPv4 or bracketed IPv6 ("[::1]:8080:80"). Ranges ("8000-8010") are
 * refused with -ENOTSUP; anything malformed with -EINVAL. Each with a message. */
int dn_port_spec(const char *spec, struct dn_port *out, struct k8_err *err);

/* HostConfig.PortBindings: {"8888/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}], ...};
 * null or absent values mean one binding to a random port on all interfaces, as in
 * moby. Fills at most `max` entries; returns the count or -errno with a message. */
int dn_port_bindings(const json_t *bindings, struct dn_port *out, size_t max,
		     struct k8_err *err);

/* Config.ExposedPorts: {"8888/tcp": {}, "53/udp": {}}: ports to publish with -P and to
 * list in inspect; host fields are left empty. Returns the count or -errno. */
int dn_exposed_ports(const json_t *exposed, struct dn_port *out, size_t max,
		     struct k8_err *err);

/* Parse one "port[/proto]" key ("8888", "8888/tcp", "53/udp"). 0 or -errno. */
int dn_port_key(const char *key, uint16_t *port, enum dn_proto *proto, struct k8_err *err);

#endif
