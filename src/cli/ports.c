/* SPDX-License-Identifier: Apache-2.0 */
/* ports.c - kosa8 sandbox port NAME [-p SPEC]... [--rm [IP:]PORT]...: a sandbox's
 * published ports (docs/reference/cli.md, docs/network.md "Published ports"). */
#include "cli/cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_PUBLISH = 'p', OPT_RM = 'r' };

static void port_line(const json_t *p, const char *prefix)
{
	const char *ip = json_string_value(json_object_get(p, "host_ip"));
	bool v6 = ip && strchr(ip, ':');
	printf("%s%s%s%s:%lld -> guest port %lld", prefix, v6 ? "[" : "", ip ? ip : "?",
	       v6 ? "]" : "", json_integer_value(json_object_get(p, "host_port")),
	       json_integer_value(json_object_get(p, "guest_port")));
}

void cli_ports_print(const json_t *ports)
{
	const json_t *p;
	size_t i;

	json_array_foreach(ports, i, p) {
		port_line(p, "published ");
		printf("\n");
	}
}

static int show_ports(const json_t *res, void *ctx)
{
	const json_t *ports = json_object_get(res, "ports"), *p;
	size_t i;

	if (!json_array_size(ports)) {
		printf("sandbox %s publishes no ports\n", (const char *)ctx);
		return CLI_EXIT_OK;
	}
	json_array_foreach(ports, i, p) {
		port_line(p, "");
		const char *st = json_string_value(json_object_get(p, "state"));
		printf("  %s", st ? st : "");
		if (json_object_get(p, "conns"))
			printf("  conns %lld/%lld  accepted %lld  refused %lld  in %lld B  out %lld B",
			       json_integer_value(json_object_get(p, "conns")),
			       json_integer_value(json_object_get(p, "max_conns")),
			       json_integer_value(json_object_get(p, "accepted")),
			       json_integer_value(json_object_get(p, "refused")),
			       json_integer_value(json_object_get(p, "bytes_in")),
			       json_integer_value(json_object_get(p, "bytes_out")));
		printf("\n");
	}
	return CLI_EXIT_OK;
}

/* "[IP:]PORT" of --rm: the port, and the address when one is given ("[::1]:8080"). */
static int rm_spec(const char *s, char *ip, size_t iplen, long *port)
{
	const char *c = strrchr(s, ':');
	char *end;

	ip[0] = 0;
	if (c) {
		const char *a = s, *b = c;
		if (*a == '[' && b > a && b[-1] == ']')
			a++, b--;
		if ((size_t)(b - a) >= iplen || b == a)
			return -1;
		snprintf(ip, iplen, "%.*s", (int)(b - a), a);
		s = c + 1;
	}
	*port = strtol(s, &end, 10);
	return end == s || *end || *port < 1 || *port > 65535 ? -1 : 0;
}

int cli_cmd_port(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "publish", 'p', 1, OPT_PUBLISH }, { "rm", 0, 1, OPT_RM },
		{ "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct cli_args a;
	struct client cl;
	struct k8_err err = { 0 };
	cleanup_free char *enc = NULL, *path = NULL;
	int rc, json, acted = 0;

	if (!cli_begin(self, argc, argv, opts, 0, 1, 1, home, &a, &cl, &rc))
		return rc;
	json = cli_has_opt(&a, CLI_OPT_JSON);
	enc = cli_urlenc(a.pos[0]);
	path = xasprintf("/v1/sandboxes/%s/ports", enc);
	rc = CLI_EXIT_OK;
	for (int i = 0; i < a.nopts && rc == CLI_EXIT_OK; i++) {
		const char *v = a.opts[i].arg;
		json_t *res = NULL;
		if (a.opts[i].id != OPT_RM && a.opts[i].id != OPT_PUBLISH)
			continue;
		acted = 1;
		if (a.opts[i].id == OPT_RM) {
			char ip[64];
			long port;
			if (rm_spec(v, ip, sizeof(ip), &port) < 0) {
				rc = cli_usage(self->name, "--rm %s: expected [IP:]HOSTPORT, e.g. 8080 or "
					       "127.0.0.1:8080", v);
				break;
			}
			cleanup_free char *ipenc = ip[0] ? cli_urlenc(ip) : NULL;
			cleanup_free char *p = xasprintf("%s/%ld%s%s", path, port,
							 ipenc ? "?host_ip=" : "", ipenc ? ipenc : "");
			if (client_call(&cl, "DELETE", p, NULL, NULL, NULL, 0, &res, &err) < 0)
				rc = cli_fail(&err);
			else if (!json)
				printf("closed %s%s%ld\n", ip, ip[0] ? ":" : "port ", port);
		} else if (a.opts[i].id == OPT_PUBLISH) {
			json_t *one = NULL;
			char ip[64] = "", *e1, *e2 = NULL;
			const char *rest = v, *c;
			long hp, gp;
			if (*v == '[' && (c = strchr(v, ']')) && c[1] == ':' && (size_t)(c - v) < sizeof(ip)) {
				snprintf(ip, sizeof(ip), "%.*s", (int)(c - v - 1), v + 1);
				rest = c + 2;
			} else if ((c = strchr(v, ':')) && strchr(c + 1, ':') && (size_t)(c - v) < sizeof(ip)) {
				snprintf(ip, sizeof(ip), "%.*s", (int)(c - v), v);
				rest = c + 1;
			}
			hp = strtol(rest, &e1, 10);
			gp = e1 != rest && *e1 == ':' ? strtol(e1 + 1, &e2, 10) : -1;
			if (e1 == rest || *e1 != ':' || e2 == e1 + 1 || *e2 || hp < 0 || hp > 65535 ||
			    gp < 1 || gp > 65535) {
				rc = cli_usage(self->name, "--publish %s: expected [IP:]HOSTPORT:GUESTPORT, "
					       "e.g. 8080:80, 127.0.0.1:0:8000 or [::1]:8080:80", v);
				break;
			}
			one = json_pack("{s:s,s:i,s:i}", "host_ip", ip, "host_port", (int)hp,
					"guest_port", (int)gp);
			if (client_call(&cl, "POST", path, one, NULL, NULL, 0, &res, &err) < 0)
				rc = cli_fail(&err);
			else if (json)
				out_json(res, 0);
			else {
				port_line(res, "published ");
				printf("\n");
			}
			json_decref(one);
		}
		json_decref(res);
	}
	if (!acted)
		rc = cli_get_show(&cl, path, 0, json, show_ports, (void *)a.pos[0]);
	return cli_end(&a, &cl, rc);
}
