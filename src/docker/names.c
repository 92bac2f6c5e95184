/* SPDX-License-Identifier: Apache-2.0 */
/* names.c - container names, ids and port publishing specs (names.h). */
#include "docker/names.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

static bool dn_name_char(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
}

int dn_name_check(const char *name, char out[DN_NAME_MAX + 1], struct k8_err *err)
{
	const char *n = name;
	size_t len;

	if (*n == '/')
		n++;
	len = strlen(n);
	if (len > DN_NAME_MAX)
		return k8_err_set(err, -EINVAL, "Invalid container name: longer than %d characters",
				  DN_NAME_MAX);
	bool ok = len >= 2 && isalnum((unsigned char)n[0]);
	for (size_t i = 1; ok && i < len; i++)
		ok = dn_name_char(n[i]);
	if (!ok)
		return k8_err_set(err, -EINVAL, "Invalid container name (%s), only "
				  "[a-zA-Z0-9][a-zA-Z0-9_.-] are allowed", name);
	memcpy(out, n, len + 1);
	return 0;
}

void dn_familiar(const char *ref, char *out, size_t len)
{
	const char *s = ref;

	if (!strncmp(s, "docker.io/library/", 18) && !strchr(s + 18, '/'))
		s += 18;
	else if (!strncmp(s, "docker.io/", 10))
		s += 10;
	snprintf(out, len, "%s", s);
}

bool dn_is_full_id(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return i == DN_ID_LEN;
}

int dn_new_id(char out[DN_ID_LEN + 1])
{
	unsigned char r[DN_ID_LEN / 2];

	for (;;) {
		ssize_t got = getrandom(r, sizeof(r), 0);
		if (got < 0)
			return -errno;
		if ((size_t)got != sizeof(r))
			return -EIO;
		k8_hex(r, sizeof(r), out);
		bool digits = true;
		for (int i = 0; i < 12; i++)
			digits = digits && isdigit((unsigned char)out[i]);
		if (!digits)
			return 0;
	}
}

long dn_lookup(const char *const *ids, const char *const *names, size_t n, const char *ref)
{
	const char *nm = ref[0] == '/' ? ref + 1 : ref;
	size_t len = strlen(ref);
	long found = -ENOENT;

	if (!*ref)
		return -ENOENT;
	for (size_t i = 0; i < n; i++)
		if (ids[i] && !strcmp(ids[i], ref))
			return (long)i;
	for (size_t i = 0; names && *nm && i < n; i++)
		if (names[i] && !strcmp(names[i][0] == '/' ? names[i] + 1 : names[i], nm))
			return (long)i;
	for (size_t i = 0; i < n; i++) {
		if (!ids[i] || strncmp(ids[i], ref, len))
			continue;
		if (found >= 0)
			return -EINVAL;
		found = (long)i;
	}
	return found;
}

/* A decimal port 1..65535 made of exactly the n bytes at s. */
static int dn_port_num(const char *s, size_t n, uint16_t *out)
{
	unsigned v = 0;

	if (n == 0 || n > 5)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -EINVAL;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -EINVAL;
	*out = (uint16_t)v;
	return 0;
}

int dn_port_key(const char *key, uint16_t *port, enum dn_proto *proto, struct k8_err *err)
{
	const char *slash = strchr(key, '/');
	size_t n = slash ? (size_t)(slash - key) : strlen(key);

	*proto = DN_TCP;
	if (slash) {
		if (!strcmp(slash + 1, "udp"))
			*proto = DN_UDP;
		else if (!strcmp(slash + 1, "sctp"))
			return k8_err_set(err, -ENOTSUP, "port %s: sctp is not supported by kosa8; "
					  "use tcp or udp", key);
		else if (strcmp(slash + 1, "tcp"))
			return k8_err_set(err, -EINVAL, "invalid proto: %.16s", slash + 1);
	}
	if (memchr(key, '-', n))
		return k8_err_set(err, -ENOTSUP, "port %.32s: port ranges are not supported by "
				  "kosa8; publish each port on its own", key);
	if (dn_port_num(key, n, port))
		return k8_err_set(err, -EINVAL, "invalid containerPort: %.32s", key);
	return 0;
}

/* Record a host address: "" (all), a literal IPv4 or IPv6 address. */
static int dn_host_ip(struct dn_port *p, const char *ip, size_t n, struct k8_err *err)
{
	unsigned char a[16];
	char buf[sizeof(p->host_ip)];

	if (n >= sizeof(buf))
		return k8_err_set(err, -EINVAL, "invalid IP address: %.64s", ip);
	memcpy(buf, ip, n);
	buf[n] = '\0';
	if (n && inet_pton(AF_INET, buf, a) != 1 && inet_pton(AF_INET6, buf, a) != 1)
		return k8_err_set(err, -EINVAL, "invalid IP address: %s", buf);
	memcpy(p->host_ip, buf, n + 1);
	p->host_any = !n || !strcmp(buf, "0.0.0.0") || !strcmp(buf, "::");
	return 0;
}

int dn_port_spec(const char *spec, struct dn_port *out, struct k8_err *err)
{
	const char *ip = "", *hostp = "", *ctr;
	size_t iplen = 0, hostlen = 0;
	const char *p = spec;

	memset(out, 0, sizeof(*out));
	if (strlen(spec) > 128)
		return k8_err_set(err, -EINVAL, "invalid port spec: too long");
	if (*p == '[') {                        /* [v6]:host:ctr */
		const char *close = strchr(p, ']');
		if (!close || close[1] != ':')
			return k8_err_set(err, -EINVAL, "invalid port spec %s: unclosed '[' or no "
					  "port after the address", spec);
		ip = p + 1;
		iplen = (size_t)(close - ip);
		p = close + 2;
		const char *c = strchr(p, ':');
		if (!c)
			return k8_err_set(err, -EINVAL, "invalid port spec %s: expected "
					  "[ip]:hostPort:containerPort", spec);
		hostp = p;
		hostlen = (size_t)(c - p);
		ctr = c + 1;
	} else {
		const char *c1 = strchr(p, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2 && strchr(c2 + 1, ':'))
			return k8_err_set(err, -EINVAL, "invalid port spec %s: an IPv6 address goes "
					  "in brackets: [::1]:8080:80", spec);
		if (c2) {
			ip = p;
			iplen = (size_t)(c1 - p);
			hostp = c1 + 1;
			hostlen = (size_t)(c2 - hostp);
			ctr = c2 + 1;
		} else if (c1) {
			hostp = p;
			hostlen = (size_t)(c1 - p);
			ctr = c1 + 1;
		} else {
			ctr = p;
		}
	}
	int rc = dn_port_key(ctr, &out->ctr_port, &out->proto, err);
	if (rc)
		return rc;
	if (memchr(hostp, '-', hostlen))
		return k8_err_set(err, -ENOTSUP, "port spec %s: host port ranges are not supported "
				  "by kosa8", spec);
	if (hostlen && dn_port_num(hostp, hostlen, &out->host_port))
		return k8_err_set(err, -EINVAL, "invalid hostPort in %s", spec);
	return dn_host_ip(out, ip, iplen, err);
}

int dn_port_bindings(const json_t *bindings, struct dn_port *out, size_t max,
		     struct k8_err *err)
{
	const char *key;
	json_t *val;
	size_t n = 0;

	if (!bindings || json_is_null(bindings))
		return 0;
	if (!json_is_object(bindings))
		return k8_err_set(err, -EINVAL, "HostConfig.PortBindings must be an object");
	json_object_foreach((json_t *)bindings, key, val) {
		struct dn_port base = { 0 };
		int rc = dn_port_key(key, &base.ctr_port, &base.proto, err);
		if (rc)
			return rc;
		base.host_any = true;
		if (json_is_null(val) || (json_is_array(val) && json_array_size(val) == 0)) {
			if (n >= max)
				goto full;
			out[n++] = base;
			continue;
		}
		if (!json_is_array(val))
			return k8_err_set(err, -EINVAL, "PortBindings[%s] must be a list", key);
		size_t i;
		json_t *b;
		json_array_foreach(val, i, b) {
			struct dn_port p = base;
			const json_t *hip = json_object_get(b, "HostIp");
			const json_t *hport = json_object_get(b, "HostPort");
			if (!json_is_object(b) || (hip && !json_is_null(hip) && !json_is_string(hip)) ||
			    (hport && !json_is_null(hport) && !json_is_string(hport)))
				return k8_err_set(err, -EINVAL, "PortBindings[%s]: each binding is "
						  "{\"HostIp\": string, \"HostPort\": string}", key);
			const char *ip = json_is_string(hip) ? json_string_value(hip) : "";
			const char *hp = json_is_string(hport) ? json_string_value(hport) : "";
			if ((rc = dn_host_ip(&p, ip, strlen(ip), err)))
				return rc;
			if (strchr(hp, '-'))
				return k8_err_set(err, -ENOTSUP, "PortBindings[%s]: host port ranges "
						  "are not supported by kosa8", key);
			if (*hp && dn_port_num(hp, strlen(hp), &p.host_port))
				return k8_err_set(err, -EINVAL, "invalid hostPort: %.32s", hp);
			if (n >= max)
				goto full;
			out[n++] = p;
		}
	}
	return (int)n;
full:
	return k8_err_set(err, -E2BIG, "too many port bindings (at most %zu)", max);
}

int dn_exposed_ports(const json_t *exposed, struct dn_port *out, size_t max,
		     struct k8_err *err)
{
	const char *key;
	json_t *val;
	size_t n = 0;

	if (!exposed || json_is_null(exposed))
		return 0;
	if (!json_is_object(exposed))
		return k8_err_set(err, -EINVAL, "Config.ExposedPorts must be an object");
	json_object_foreach((json_t *)exposed, key, val) {
		if (n >= max)
			return k8_err_set(err, -E2BIG, "too many exposed ports (at most %zu)", max);
		memset(&out[n], 0, sizeof(out[n]));
		int rc = dn_port_key(key, &out[n].ctr_port, &out[n].proto, err);
		if (rc)
			return rc;
		n++;
	}
	return (int)n;
}
