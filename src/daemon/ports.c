/* SPDX-License-Identifier: Apache-2.0 */
/* ports.c - a sandbox's published ports: the daemon binds each host listener (loopback
 * unless public ports are allowed) and hands it to the sandbox's kosa8-net over its
 * control socket (SCM_RIGHTS), which forwards each connection to the guest's port
 * through libslirp (src/net/inbound.c). The daemon never reads a guest byte here.
 *
 * Who holds the listener: the daemon from publish until kosa8-net has it (a stopped
 * sandbox's ports are bound and held, so the number stays reserved), then kosa8-net
 * alone: the port closes when kosa8-net stops (sandbox stopped), and is bound again at
 * the same number at the next boot (ports_up). A rewind or a pause keeps kosa8-net,
 * and so the listeners and their numbers. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "daemon/ports.h"
#include "daemon/record.h"
#include "daemon/sidecar.h"

#define PORTS_BACKLOG 128

/* "127.0.0.1", "::1", "localhost", "" (loopback v4), or another address: its canonical
 * text and family. 0 or -EINVAL. */
int port_ip_parse(const char *in, char *out, size_t outlen, int *family, bool *loopback,
		  struct k8_err *err)
{
	unsigned char a[16];

	if (!in || !*in || !strcmp(in, "localhost"))
		in = "127.0.0.1";
	if (inet_pton(AF_INET, in, a) == 1) {
		*family = AF_INET;
		*loopback = a[0] == 127;
	} else if (inet_pton(AF_INET6, in, a) == 1) {
		static const unsigned char lo6[16] = { [15] = 1 };
		*family = AF_INET6;
		*loopback = !memcmp(a, lo6, 16);
		if (IN6_IS_ADDR_V4MAPPED((struct in6_addr *)a))
			return k8_err_set(err, -EINVAL, "host address '%s': give the IPv4 "
					  "address itself, not its IPv6-mapped form", in);
	} else {
		return k8_err_set(err, -EINVAL, "host address '%.80s' is not an IPv4 or IPv6 "
				  "address (e.g. 127.0.0.1 or ::1)", in);
	}
	inet_ntop(*family, a, out, (socklen_t)outlen);
	return 0;
}

bool ports_public_allowed(struct daemon *d)
{
	if (d->allow_public_ports)
		return true;
	json_t *cfg = daemon_config(d);
	bool ok = json_is_true(json_object_get(cfg, "allow_public_ports"));
	json_decref(cfg);
	return ok;
}

/* One line of /proc/net/tcp or tcp6: a socket listening on `port`? Its owner's uid and
 * its inode then. */
static bool ports_tcp_listener(const char *line, int port, unsigned *uid, unsigned long *ino)
{
	unsigned lport, st;

	return sscanf(line, " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*s %*s %*s %u %*d %lu",
		      &lport, &st, uid, ino) == 4 && st == 0x0A && (int)lport == port;
}

/* The process holding socket inode `ino` (scanning /proc/PID/fd), 0 when none is seen. */
static pid_t ports_socket_pid(unsigned long ino)
{
	char want[48], path[64], link[48];
	DIR *proc = opendir("/proc");
	struct dirent *pe;
	pid_t found = 0;

	snprintf(want, sizeof(want), "socket:[%lu]", ino);
	while (proc && !found && (pe = readdir(proc))) {
		pid_t pid = (pid_t)atoi(pe->d_name);
		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
		DIR *fds = opendir(path);
		struct dirent *fe;
		while (fds && !found && (fe = readdir(fds))) {
			snprintf(path, sizeof(path), "/proc/%d/fd/%.16s", (int)pid, fe->d_name);
			ssize_t n = readlink(path, link, sizeof(link) - 1);
			if (n > 0 && (link[n] = '\0', !strcmp(link, want)))
				found = pid;
		}
		if (fds)
			closedir(fds);
	}
	if (proc)
		closedir(proc);
	return found;
}

void ports_holder(int port, char *out, size_t n)
{
	static const char *const tables[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	size_t len = 0;

	out[0] = '\0';
	for (size_t t = 0; t < ARRAY_SIZE(tables); t++) {
		FILE *f = fopen(tables[t], "re");
		char line[512];
		unsigned uid;
		unsigned long ino;
		while (f && len + 1 < n && fgets(line, sizeof(line), f)) {
			if (!ports_tcp_listener(line, port, &uid, &ino))
				continue;
			char comm[32] = "?", user[64] = "", pwbuf[1024];
			struct passwd pw, *pwp = NULL;
			pid_t pid = ports_socket_pid(ino);
			if (pid > 0) {
				char path[64];
				snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
				FILE *c = fopen(path, "re");
				if (c && fgets(comm, sizeof(comm), c))
					comm[strcspn(comm, "\n")] = '\0';
				if (c)
					fclose(c);
				for (char *p = comm; *p; p++)  /* another user's name for it */
					if (*p < 0x21 || *p > 0x7e)
						*p = '?';
			}
			if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &pwp) == 0 && pwp)
				snprintf(user, sizeof(user), " (%.40s)", pw.pw_name);
			int w = pid > 0 ? snprintf(out + len, n - len, "%spid %d (%s), uid %u%s",
						   len ? "; " : "", (int)pid, comm, uid, user)
					: snprintf(out + len, n - len, "%suid %u%s", len ? "; " : "",
						   uid, user);
			len = w < 0 ? len : len + (size_t)w < n ? len + (size_t)w : n - 1;
		}
		if (f)
			fclose(f);
	}
}

int ports_bind(const char *ip, int family, int port, int *bound, struct k8_err *err)
{
	union { struct sockaddr sa; struct sockaddr_in s4; struct sockaddr_in6 s6; } a = { 0 };
	socklen_t al;
	int one = 1, fd, e;

	fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET6) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		a.s6.sin6_family = AF_INET6;
		a.s6.sin6_port = htons((uint16_t)port);
		inet_pton(AF_INET6, ip, &a.s6.sin6_addr);
		al = sizeof(a.s6);
	} else {
		a.s4.sin_family = AF_INET;
		a.s4.sin_port = htons((uint16_t)port);
		inet_pton(AF_INET, ip, &a.s4.sin_addr);
		al = sizeof(a.s4);
	}
	if (bind(fd, &a.sa, al) < 0 || listen(fd, PORTS_BACKLOG) < 0 ||
	    getsockname(fd, &a.sa, &al) < 0) {
		e = errno;
		close(fd);
		if (e == EADDRINUSE) {
			char who[256];
			ports_holder(port, who, sizeof(who));
			return k8_err_set(err, -EEXIST, "host port %s:%d is in use%s%s", ip, port,
					  who[0] ? " by " : "", who);
		}
		if (e == EADDRNOTAVAIL)
			return k8_err_set(err, -EINVAL, "%s is not an address of this host", ip);
		return k8_err_set(err, -e, "binding %s:%d: %s", ip, port, strerror(e));
	}
	*bound = ntohs(family == AF_INET6 ? a.s6.sin6_port : a.s4.sin_port);
	return fd;
}

/* kosa8-net is there to take a listener now. */
static bool ports_live(struct sandbox *sb)
{
	return (sb->state == SB_RUNNING || sb->state == SB_PAUSED) && sidecar_connected(&sb->net);
}

/* Hand fd to kosa8-net for guest_ip:guest_port (guest_ip "": the VM's address). The
 * daemon's copy stays open (the caller closes). */
static int port_pass(struct sandbox *sb, int fd, const char *guest_ip, int guest_port,
		     struct k8_err *err)
{
	json_t *req = json_pack("{s:s,s:i}", "op", "publish", "guest_port", guest_port);

	if (guest_ip && *guest_ip)
		json_object_set_new(req, "guest_ip", json_string(guest_ip));
	return sidecar_request_fd(&sb->net, req, fd, 5000, NULL, err);
}

/* Publish without taking the busy token (the caller holds it). `audit`: write the record. */
static int port_publish_held(struct daemon *d, struct sandbox *sb, const char *host_ip,
			     int host_port, const char *guest_ip, int guest_port, int *bound,
			     bool audit, struct k8_err *err)
{
	char ip[INET6_ADDRSTRLEN];
	int family, fd, got = 0, r;
	bool loopback, live;

	if ((r = port_ip_parse(host_ip, ip, sizeof(ip), &family, &loopback, err)))
		return r;
	if (guest_port < 1 || guest_port > 65535)
		return k8_err_set(err, -EINVAL, "guest port %d: expected 1-65535", guest_port);
	if (!guest_ip)
		guest_ip = "";
	if (*guest_ip && (strlen(guest_ip) >= sizeof(sb->ports[0].guest_ip) ||
			  inet_pton(AF_INET, guest_ip, &(struct in_addr){ 0 }) != 1))
		return k8_err_set(err, -EINVAL, "guest address '%.40s' is not an IPv4 address",
				  guest_ip);
	if (host_port < 0 || host_port > 65535)
		return k8_err_set(err, -EINVAL, "host port %d: expected 0-65535 (0: any free port)",
				  host_port);
	if (!loopback && !ports_public_allowed(d))
		return k8_err_set(err, -EPERM, "publishing on %s reaches beyond this host: only "
				  "loopback (127.0.0.1, ::1) is allowed unless the daemon runs with "
				  "--allow-public-ports (config.json \"allow_public_ports\": true)", ip);
	pthread_mutex_lock(&sb->lock);
	r = sb->nports >= K8_MAX_PORTS ? -ENOSPC : 0;
	for (int i = 0; i < sb->nports && !r; i++)
		if (host_port && sb->ports[i].host_port == host_port &&
		    !strcmp(sb->ports[i].host_ip, ip))
			r = -EEXIST;
	pthread_mutex_unlock(&sb->lock);
	if (r == -ENOSPC)
		return k8_err_set(err, r, "sandbox '%s' has %d published ports, the most it may have",
				  sb->name, K8_MAX_PORTS);
	if (r)
		return k8_err_set(err, r, "%s:%d is published already by sandbox '%s'", ip,
				  host_port, sb->name);
	if ((fd = ports_bind(ip, family, host_port, &got, err)) < 0)
		return fd;
	live = ports_live(sb);
	if (live && (r = port_pass(sb, fd, guest_ip, guest_port, err))) {
		close(fd);
		return k8_err_wrap(err, "kosa8-net did not take the port");
	}
	if (live) {
		close(fd);
		fd = -1;
	}
	pthread_mutex_lock(&sb->lock);
	struct sb_port *p = &sb->ports[sb->nports++];
	snprintf(p->host_ip, sizeof(p->host_ip), "%s", ip);
	p->host_port = got;
	p->guest_port = guest_port;
	snprintf(p->guest_ip, sizeof(p->guest_ip), "%s", guest_ip);
	p->fd = fd;
	if (audit)
		sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	if (audit)
		daemon_audit(d, "sandbox.port.publish", sb->name,
			     json_pack("{s:s,s:i,s:i,s:b}", "host_ip", ip, "host_port", got,
				       "guest_port", guest_port, "live", live));
	if (bound)
		*bound = got;
	return 0;
}

int port_publish_to(struct daemon *d, struct sandbox *sb, const char *host_ip, int host_port,
		    const char *guest_ip, int guest_port, int *bound, struct k8_err *err)
{
	int r;

	sb_busy_enter(sb);
	if (sb->state == SB_REMOVING)
		r = k8_err_set(err, -ENOENT, "sandbox '%s' is being removed", sb->name);
	else
		r = port_publish_held(d, sb, host_ip, host_port, guest_ip, guest_port, bound, true,
				      err);
	sb_busy_leave(sb);
	return r;
}

int port_publish(struct daemon *d, struct sandbox *sb, const char *host_ip, int host_port,
		 int guest_port, int *bound, struct k8_err *err)
{
	return port_publish_to(d, sb, host_ip, host_port, NULL, guest_port, bound, err);
}

int port_unpublish(struct daemon *d, struct sandbox *sb, const char *host_ip, int host_port,
		   struct k8_err *err)
{
	char ip[INET6_ADDRSTRLEN] = "";
	int family, at = -1, r = 0;
	bool loopback;

	if (host_ip && *host_ip && (r = port_ip_parse(host_ip, ip, sizeof(ip), &family,
						      &loopback, err)))
		return r;
	sb_busy_enter(sb);
	pthread_mutex_lock(&sb->lock);
	for (int i = 0; i < sb->nports && at < 0; i++)
		if (sb->ports[i].host_port == host_port && (!ip[0] || !strcmp(ip, sb->ports[i].host_ip)))
			at = i;
	struct sb_port p = at >= 0 ? sb->ports[at] : (struct sb_port){ .fd = -1 };
	pthread_mutex_unlock(&sb->lock);
	if (at < 0) {
		r = k8_err_set(err, -ENOENT, "sandbox '%s' has no published port %s%s%d", sb->name,
			       ip, ip[0] ? ":" : "", host_port);
		goto out;
	}
	if (ports_live(sb)) {
		struct k8_err e2 = { 0 };
		/* Not served (a port kosa8-net could not bind at boot) is fine: it is gone. */
		if (sidecar_request(&sb->net, json_pack("{s:s,s:s,s:i}", "op", "unpublish",
							"host_ip", p.host_ip, "host_port",
							p.host_port), 5000, NULL, &e2) &&
		    e2.code != -ENOENT) {
			r = k8_err_set(err, e2.code, "kosa8-net did not close the port: %s", e2.msg);
			goto out;
		}
	}
	pthread_mutex_lock(&sb->lock);
	if (sb->ports[at].fd >= 0)
		close(sb->ports[at].fd);
	memmove(&sb->ports[at], &sb->ports[at + 1], sizeof(sb->ports[0]) * (size_t)(sb->nports - at - 1));
	sb->nports--;
	sb_save(sb);
	pthread_mutex_unlock(&sb->lock);
	daemon_audit(d, "sandbox.port.unpublish", sb->name,
		     json_pack("{s:s,s:i,s:i}", "host_ip", p.host_ip, "host_port", p.host_port,
			       "guest_port", p.guest_port));
out:
	sb_busy_leave(sb);
	return r;
}

/* "[IP:]HOST:GUEST", IPv6 in brackets: "[::1]:8080:80". 0 or -EINVAL. */
static int port_spec_parse(const char *s, char *ip, size_t iplen, int *host, int *guest,
			   struct k8_err *err)
{
	const char *rest = s, *c;
	char *e1, *e2;
	long h, g;

	ip[0] = 0;
	if (*s == '[') {
		c = strchr(s, ']');
		if (!c || c[1] != ':' || (size_t)(c - s - 1) >= iplen)
			goto bad;
		snprintf(ip, iplen, "%.*s", (int)(c - s - 1), s + 1);
		rest = c + 2;
	} else if ((c = strchr(s, ':')) && strchr(c + 1, ':')) {
		if ((size_t)(c - s) >= iplen)
			goto bad;
		snprintf(ip, iplen, "%.*s", (int)(c - s), s);
		rest = c + 1;
	}
	h = strtol(rest, &e1, 10);
	if (e1 == rest || *e1 != ':')
		goto bad;
	g = strtol(e1 + 1, &e2, 10);
	if (e2 == e1 + 1 || *e2 || h < 0 || h > 65535 || g < 1 || g > 65535)
		goto bad;
	*host = (int)h;
	*guest = (int)g;
	return 0;
bad:
	return k8_err_set(err, -EINVAL, "port '%.80s': expected [IP:]HOSTPORT:GUESTPORT, e.g. "
			  "8080:80, 127.0.0.1:0:8000 or [::1]:8080:80 (HOSTPORT 0: any free port)",
			  s);
}

int ports_from_body(struct daemon *d, struct sandbox *sb, json_t *ports, struct k8_err *err)
{
	json_t *it;
	size_t i;
	int r;

	if (!ports || json_is_null(ports))
		return 0;
	if (!json_is_array(ports))
		return k8_err_set(err, -EINVAL, "ports must be a list");
	json_array_foreach(ports, i, it) {
		char ip[INET6_ADDRSTRLEN + 2];
		int hp = 0, gp = 0;
		if (json_is_string(it)) {
			if ((r = port_spec_parse(json_string_value(it), ip, sizeof(ip), &hp, &gp, err)))
				return r;
		} else if (json_is_object(it)) {
			const char *s = json_string_value(json_object_get(it, "host_ip"));
			json_t *h = json_object_get(it, "host_port"), *g = json_object_get(it, "guest_port");
			if ((h && !json_is_integer(h)) || !json_is_integer(g) ||
			    (s && strlen(s) >= sizeof(ip)))
				return k8_err_set(err, -EINVAL, "ports[%zu]: expected {\"host_ip\": "
						  "\"127.0.0.1\", \"host_port\": 0, \"guest_port\": N}", i);
			snprintf(ip, sizeof(ip), "%s", s ? s : "");
			hp = !h ? 0 : json_integer_value(h) < 0 || json_integer_value(h) > 65535 ? -1 :
			     (int)json_integer_value(h);
			gp = json_integer_value(g) > 65535 ? -1 : (int)json_integer_value(g);
		} else {
			return k8_err_set(err, -EINVAL, "ports[%zu]: expected \"[IP:]HOSTPORT:GUESTPORT\" "
					  "or an object", i);
		}
		if ((r = port_publish_held(d, sb, ip, hp, NULL, gp, NULL, false, err)))
			return r;
	}
	return 0;
}

void ports_audit_created(struct daemon *d, struct sandbox *sb)
{
	for (int i = 0; i < sb->nports; i++)
		daemon_audit(d, "sandbox.port.publish", sb->name,
			     json_pack("{s:s,s:i,s:i,s:b}", "host_ip", sb->ports[i].host_ip,
				       "host_port", sb->ports[i].host_port, "guest_port",
				       sb->ports[i].guest_port, "live", true));
}

/* Is ip:port in kosa8-net's list? */
static bool ports_served(json_t *list, const char *ip, int port)
{
	json_t *it;
	size_t i;

	json_array_foreach(list, i, it)
		if (json_integer_value(json_object_get(it, "host_port")) == port &&
		    !strcmp(json_string_value(json_object_get(it, "host_ip")) ?: "", ip))
			return true;
	return false;
}

void ports_up(struct daemon *d, struct sandbox *sb)
{
	struct sb_port ports[K8_MAX_PORTS];
	struct k8_err err = { 0 };
	json_t *reply = NULL, *list;
	int n;

	pthread_mutex_lock(&sb->lock);
	n = sb->nports;
	memcpy(ports, sb->ports, sizeof(ports[0]) * (size_t)n);
	pthread_mutex_unlock(&sb->lock);
	if (!n || !sidecar_connected(&sb->net))
		return;
	if (sidecar_request(&sb->net, json_pack("{s:s}", "op", "ports"), 5000, &reply, &err)) {
		daemon_log("sandbox %s: kosa8-net's published ports: %s", sb->name, err.msg);
		return;
	}
	list = json_object_get(reply, "ports");
	for (int i = 0; i < n; i++) {
		struct sb_port *p = &ports[i];
		int fd = p->fd, got = 0, family = strchr(p->host_ip, ':') ? AF_INET6 : AF_INET;
		if (ports_served(list, p->host_ip, p->host_port))
			goto taken;
		err = (struct k8_err){ 0 };
		if (fd < 0)
			fd = ports_bind(p->host_ip, family, p->host_port, &got, &err);
		if (fd < 0 || port_pass(sb, fd, p->guest_ip, p->guest_port, &err)) {
			if (fd >= 0 && p->fd < 0)
				close(fd);
			daemon_log("sandbox %s: published port %s:%d -> %d is down: %s", sb->name,
				   p->host_ip, p->host_port, p->guest_port, err.msg);
			daemon_audit(d, "sandbox.port.down", sb->name,
				     json_pack("{s:s,s:i,s:i,s:s}", "host_ip", p->host_ip,
					       "host_port", p->host_port, "guest_port", p->guest_port,
					       "why", err.msg));
			continue;
		}
		if (fd != p->fd)
			close(fd);
taken:
		/* kosa8-net holds it now: the daemon's copy goes */
		pthread_mutex_lock(&sb->lock);
		for (int k = 0; k < sb->nports; k++)
			if (sb->ports[k].host_port == p->host_port &&
			    !strcmp(sb->ports[k].host_ip, p->host_ip) && sb->ports[k].fd >= 0) {
				close(sb->ports[k].fd);
				sb->ports[k].fd = -1;
			}
		pthread_mutex_unlock(&sb->lock);
	}
	json_decref(reply);
}

void ports_release(struct sandbox *sb)
{
	for (int i = 0; i < sb->nports; i++)
		if (sb->ports[i].fd >= 0) {
			close(sb->ports[i].fd);
			sb->ports[i].fd = -1;
		}
}

/* ---- API ---- */

int ports_api_list(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);
	json_t *reply = NULL, *list, *st = NULL;
	struct k8_err e2 = { 0 };

	if (!sb)
		return call->err.code;
	pthread_mutex_lock(&sb->lock);
	list = sb_ports_json(sb);
	bool live = ports_live(sb);
	pthread_mutex_unlock(&sb->lock);
	if (live && json_array_size(list) &&
	    sidecar_request(&sb->net, json_pack("{s:s}", "op", "ports"), 5000, &reply, &e2) == 0)
		st = json_object_get(reply, "ports");
	json_t *it;
	size_t i;
	json_array_foreach(list, i, it) {
		const char *ip = json_string_value(json_object_get(it, "host_ip"));
		json_int_t hp = json_integer_value(json_object_get(it, "host_port"));
		json_t *s, *found = NULL;
		size_t k;
		json_array_foreach(st, k, s)
			if (json_integer_value(json_object_get(s, "host_port")) == hp &&
			    !strcmp(json_string_value(json_object_get(s, "host_ip")) ?: "", ip))
				found = s;
		json_object_set_new(it, "state", json_string(found ? "up" : live && st ? "down" : "off"));
		const char *keys[] = { "conns", "max_conns", "accepted", "refused", "bytes_in",
				       "bytes_out" };
		for (size_t j = 0; found && j < ARRAY_SIZE(keys); j++)
			json_object_set(it, keys[j], json_object_get(found, keys[j]));
	}
	json_decref(reply);
	call->out = json_pack("{s:o}", "ports", list);
	sb_put(call->d, sb);
	return 0;
}

int ports_api_publish(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);
	json_t *h = json_object_get(call->body, "host_port"), *g = json_object_get(call->body, "guest_port");
	json_t *ipv = json_object_get(call->body, "host_ip");
	int bound = 0, r;

	if (!sb)
		return call->err.code;
	if ((h && !json_is_integer(h)) || !json_is_integer(g) || (ipv && !json_is_null(ipv) &&
								  !json_is_string(ipv))) {
		r = k8_err_set(&call->err, -EINVAL, "expected {\"host_ip\": \"127.0.0.1\", "
			       "\"host_port\": 0, \"guest_port\": N}");
		goto out;
	}
	json_int_t hp = h ? json_integer_value(h) : 0, gp = json_integer_value(g);
	r = port_publish(call->d, sb, json_string_value(ipv),
			 hp < -1 || hp > 65535 ? -1 : (int)hp, gp < 0 || gp > 65535 ? 0 : (int)gp,
			 &bound, &call->err);
	if (!r) {
		char ip[INET6_ADDRSTRLEN] = "127.0.0.1";
		pthread_mutex_lock(&sb->lock);
		for (int i = 0; i < sb->nports; i++)
			if (sb->ports[i].host_port == bound)
				snprintf(ip, sizeof(ip), "%s", sb->ports[i].host_ip);
		pthread_mutex_unlock(&sb->lock);
		call->out = json_pack("{s:s,s:i,s:i}", "host_ip", ip, "host_port", bound,
				      "guest_port", (int)gp);
	}
out:
	sb_put(call->d, sb);
	return r;
}

int ports_api_unpublish(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);
	const char *ps = api_param(call, "port");
	char ip[INET6_ADDRSTRLEN + 2] = "";
	char *end;
	long port;
	int r;

	if (!sb)
		return call->err.code;
	port = strtol(ps ? ps : "", &end, 10);
	if (!ps || end == ps || *end || port < 1 || port > 65535) {
		r = k8_err_set(&call->err, -EINVAL, "port '%.20s': expected the host port, 1-65535",
			       ps ? ps : "");
		goto out;
	}
	const char *q = NULL;
	if ((r = api_query_str(call, "host_ip", ip, sizeof(ip), &q)) < 0)
		goto out;
	r = port_unpublish(call->d, sb, q, (int)port, &call->err);
out:
	sb_put(call->d, sb);
	return r;
}
