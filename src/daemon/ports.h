/* SPDX-License-Identifier: Apache-2.0 */
/* ports.h - a sandbox's published ports: host listeners that lead into the guest
 * (ports.c, docs/network.md "Published ports"). The C interface the CLI's API routes
 * and the Docker layer (PortBindings) both call. */
#ifndef K8_PORTS_H
#define K8_PORTS_H

#include <jansson.h>
#include <stdbool.h>

#include "common/util.h"
#include "daemon/api_route.h"

struct daemon;
struct sandbox;

/* A listening TCP socket (SO_REUSEADDR, close-on-exec) at ip:port, family AF_INET or
 * AF_INET6 as ip is (port 0: any); *bound gets its port. The fd, or a negative errno with
 * err set: -EEXIST when the port is in use, the message naming who holds it
 * (ports_holder); -EINVAL for an address not of this host. */
int ports_bind(const char *ip, int family, int port, int *bound, struct k8_err *err);
/* Who listens on TCP `port` on this host (any address, IPv4 or IPv6), into out: "pid N
 * (COMM), uid U (USER)" for each listener ("uid U (USER)" when no process is seen
 * holding it), "; " between them; "" when none. From /proc/net/tcp{,6} and /proc/PID/fd. */
void ports_holder(int port, char *out, size_t n);
/* "127.0.0.1", "::1", "localhost", "" (loopback v4), or another address: its canonical
 * text into out, its family, and whether it is a loopback address. 0 or -EINVAL. */
int port_ip_parse(const char *in, char *out, size_t outlen, int *family, bool *loopback,
		  struct k8_err *err);
/* May a listener take an address other than loopback? --allow-public-ports, or
 * config.json "allow_public_ports": true. */
bool ports_public_allowed(struct daemon *d);

/* Publish host_ip:host_port -> the guest's guest_port (TCP) on sb. host_ip NULL or ""
 * is 127.0.0.1; a loopback address always, any other only when the daemon allows public
 * ports (--allow-public-ports, config.json "allow_public_ports": true). host_port 0:
 * the kernel picks one; *bound (may be NULL) gets the port bound. The daemon binds the
 * socket; a running sandbox's kosa8-net gets it at once, a stopped one's at its next
 * boot. Audited (sandbox.port.publish). Takes the sandbox's busy token unless `busy_held`.
 * 0 or a negative errno with err set: -EINVAL, -EPERM (public address not allowed),
 * -EEXIST (the host port is in use, or this guest/host pair is published), -ENOSPC. */
int port_publish(struct daemon *d, struct sandbox *sb, const char *host_ip, int host_port,
		 int guest_port, int *bound, struct k8_err *err);
/* The same towards an engine container's own address (guest_ip, "netns":"own"; NULL or
 * "": the VM's). */
int port_publish_to(struct daemon *d, struct sandbox *sb, const char *host_ip, int host_port,
		    const char *guest_ip, int guest_port, int *bound, struct k8_err *err);
/* Close a published port (host_ip NULL: any address with that port); its connections
 * are cut. Audited (sandbox.port.unpublish). 0, -ENOENT, or an error from kosa8-net. */
int port_unpublish(struct daemon *d, struct sandbox *sb, const char *host_ip, int host_port,
		   struct k8_err *err);
/* A create body's "ports": [{"host_ip","host_port","guest_port"}] or
 * ["[IP:]HOST:GUEST"...]: checked and bound before the first boot (the caller holds the
 * new sandbox's busy token). */
int ports_from_body(struct daemon *d, struct sandbox *sb, json_t *ports, struct k8_err *err);
/* After kosa8-net is up (boot, rewind, resume): hand it every published port it does
 * not serve yet, binding again at the recorded number when needed. A port that cannot
 * be bound is logged and audited (sandbox.port.down); the boot goes on. */
void ports_up(struct daemon *d, struct sandbox *sb);
/* The daemon's own copies of the listeners are closed (sandbox stopped or removed). */
void ports_release(struct sandbox *sb);
/* Audit the ports a new sandbox was created with. */
void ports_audit_created(struct daemon *d, struct sandbox *sb);

/* API handlers (api_route.h; the table is in api.c):
 * GET /v1/sandboxes/{name}/ports, POST /v1/sandboxes/{name}/ports,
 * DELETE /v1/sandboxes/{name}/ports/{port} */
int ports_api_list(struct api_call *call);
int ports_api_publish(struct api_call *call);
int ports_api_unpublish(struct api_call *call);

#endif
