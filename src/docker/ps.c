/* SPDX-License-Identifier: Apache-2.0 */
/* ps.c - `docker ps` entries, their filters and inspect's object (ps.h). Moved out of
 * the daemon's docker_ctr.c, where it was static code no test could reach. */
#include "docker/ps.h"
#include "docker/stream.h"
#include "common/guest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dps_state_name(enum dps_state s)
{
	static const char *const names[] = { "created", "running", "exited", "dead" };

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "dead";
}

int dps_filters(const char *json, struct dfilters *f, bool *all, struct k8_err *err)
{
	static const char *const allowed[] = { "id", "name", "label", "status", "ancestor",
					       "exited", NULL };
	int r;

	memset(f, 0, sizeof(*f));
	if (!json)
		return 0;
	if ((r = dfilters_parse(json, allowed, f, err)))
		return r;
	if ((r = dfilters_check_status(f, err))) {
		dfilters_free(f);
		return r;
	}
	if (dfilters_has(f, "status") || dfilters_has(f, "exited"))
		*all = true;
	return 0;
}

bool dps_match(const struct dps_ctr *c, const struct dfilters *f)
{
	const json_t *labels = json_object_get(c->config, "Labels");
	size_t n = json_object_size(labels), i = 0;
	const char **keys, **vals;
	char slash[300];
	const char *k;
	json_t *v;
	bool ok;

	if (dfilters_has(f, "id") && !dfilters_match_regex(f, "id", c->id))
		return false;
	snprintf(slash, sizeof(slash), "/%s", c->name);
	if (dfilters_has(f, "name") && !dfilters_match_regex(f, "name", slash))
		return false;
	if (dfilters_has(f, "status") && !dfilters_match_exact(f, "status", dps_state_name(c->state)))
		return false;
	if (dfilters_has(f, "ancestor") && !dfilters_match_ancestor(f, c->image, c->image_id))
		return false;
	if (dfilters_has(f, "exited")) {
		char code[16];
		snprintf(code, sizeof(code), "%d", c->exit_code);
		if (c->state != DPS_EXITED || !dfilters_match_exact(f, "exited", code))
			return false;
	}
	if (!dfilters_has(f, "label"))
		return true;
	keys = calloc(n + 1, sizeof(*keys));
	vals = calloc(n + 1, sizeof(*vals));
	if (!keys || !vals)
		abort();
	json_object_foreach((json_t *)labels, k, v) {
		keys[i] = k;
		vals[i++] = json_is_string(v) ? json_string_value(v) : "";
	}
	ok = dfilters_match_labels(f, keys, vals, i);
	free(keys);
	free(vals);
	return ok;
}

/* Entrypoint and Cmd as one line. */
static json_t *dps_command(const struct dps_ctr *c)
{
	json_t *parts = json_array(), *v;
	size_t i, n = 0;
	char *out;

	json_array_extend(parts, json_object_get(c->config, "Entrypoint"));
	json_array_extend(parts, json_object_get(c->config, "Cmd"));
	json_array_foreach(parts, i, v)
		n += json_string_length(v) + 1;
	out = calloc(n + 1, 1);
	if (!out)
		abort();
	json_array_foreach(parts, i, v) {
		if (i)
			strcat(out, " ");
		strcat(out, json_string_value(v) ?: "");
	}
	json_decref(parts);
	v = json_string(out);
	free(out);
	return v ? v : json_string("");
}

/* moby's "units.HumanDuration": how long ago ns was, in words. */
static void dps_ago(int64_t ns, int64_t now_ns, char *buf, size_t n)
{
	int64_t s = (now_ns - ns) / 1000000000;

	if (s < 1)
		snprintf(buf, n, "Less than a second");
	else if (s < 60)
		snprintf(buf, n, "%lld second%s", (long long)s, s == 1 ? "" : "s");
	else if (s < 3600)
		snprintf(buf, n, "%lld minute%s", (long long)(s / 60), s / 60 == 1 ? "" : "s");
	else if (s < 86400)
		snprintf(buf, n, "%lld hour%s", (long long)(s / 3600), s / 3600 == 1 ? "" : "s");
	else
		snprintf(buf, n, "%lld days", (long long)(s / 86400));
}

static json_t *dps_status_text(const struct dps_ctr *c, int64_t now_ns)
{
	char ago[64];

	switch (c->state) {
	case DPS_RUNNING:
		dps_ago(c->started_ns, now_ns, ago, sizeof(ago));
		return json_sprintf("Up %s", ago);
	case DPS_EXITED:
		dps_ago(c->finished_ns, now_ns, ago, sizeof(ago));
		return json_sprintf("Exited (%d) %s ago", c->exit_code, ago);
	case DPS_DEAD:
		return json_string("Dead");
	default:
		return json_string("Created");
	}
}

/* `docker ps`'s Ports: [{"IP","PrivatePort","PublicPort","Type"}]. */
static json_t *dps_ps_ports(const struct dps_ctr *c)
{
	json_t *out = json_array(), *v;
	size_t i;

	json_array_foreach((json_t *)c->published, i, v)
		json_array_append_new(out, json_pack("{s:O,s:O,s:O,s:s}", "IP",
						     json_object_get(v, "HostIp"), "PrivatePort",
						     json_object_get(v, "Port"), "PublicPort",
						     json_object_get(v, "HostPort"), "Type", "tcp"));
	return out;
}

json_t *dps_list_entry(const struct dps_ctr *c, int64_t now_ns)
{
	const char *nm = json_string_value(json_object_get(c->host, "NetworkMode"));

	return json_pack("{s:s,s:[s+],s:s,s:s,s:o,s:I,s:o,s:O,s:s,s:o,s:{s:s},s:{s:{}},s:O}",
			 "Id", c->id, "Names", "/", c->name, "Image", c->image, "ImageID",
			 c->image_id, "Command", dps_command(c), "Created",
			 (json_int_t)(c->created_ns / 1000000000), "Ports", dps_ps_ports(c), "Labels",
			 json_object_get(c->config, "Labels"), "State", dps_state_name(c->state),
			 "Status", dps_status_text(c, now_ns), "HostConfig", "NetworkMode",
			 nm ? nm : "default", "NetworkSettings", "Networks", "Mounts", c->mounts);
}

/* RFC 3339 with nanoseconds; Go's zero time for 0. */
static json_t *dps_time(int64_t ns)
{
	char buf[40];

	if (!ns)
		return json_string("0001-01-01T00:00:00Z");
	ds_rfc3339(ns / 1000000000, (int32_t)(ns % 1000000000), buf);
	return json_string(buf);
}

/* NetworkSettings.Ports: the ExposedPorts (null: not published) and, while it runs, what
 * is published: {"8000/tcp": [{"HostIp","HostPort" (a string, as Docker)}]}. */
static json_t *dps_ports_map(const struct dps_ctr *c)
{
	json_t *out = json_object(), *v;
	const char *k;
	size_t i;

	json_object_foreach(json_object_get(c->config, "ExposedPorts"), k, v)
		json_object_set_new(out, k, json_null());
	json_array_foreach((json_t *)c->published, i, v) {
		char key[32], hp[16];
		json_t *list;

		snprintf(key, sizeof(key), "%d/tcp", (int)json_integer_value(json_object_get(v, "Port")));
		snprintf(hp, sizeof(hp), "%d", (int)json_integer_value(json_object_get(v, "HostPort")));
		list = json_object_get(out, key);
		if (!json_is_array(list)) {
			list = json_array();
			json_object_set_new(out, key, list);
		}
		json_array_append_new(list, json_pack("{s:O,s:s}", "HostIp",
						      json_object_get(v, "HostIp"), "HostPort", hp));
	}
	return out;
}

json_t *dps_inspect(const struct dps_ctr *c)
{
	bool running = c->state == DPS_RUNNING, oom = c->error && !strcmp(c->error, "OOMKilled");
	const char *ip = running && c->ip ? c->ip : "";
	const json_t *ep = json_object_get(c->config, "Entrypoint");
	const json_t *path = json_array_get(json_array_size(ep) ? ep : json_object_get(c->config,
										      "Cmd"), 0);
	char name[300];
	json_t *state, *ns, *o;

	snprintf(name, sizeof(name), "/%s", c->name);
	state = json_pack("{s:s,s:b,s:b,s:b,s:b,s:b,s:b,s:i,s:i,s:s,s:o,s:o}",
			  "Status", dps_state_name(c->state), "Running", running,
			  "Paused", false, "Restarting", false, "OOMKilled", oom,
			  "Dead", c->state == DPS_DEAD, "Removing", c->removing, "Pid", c->pid,
			  "ExitCode", c->exit_code, "Error", oom || !c->error ? "" : c->error,
			  "StartedAt", dps_time(c->started_ns),
			  "FinishedAt", dps_time(running ? 0 : c->finished_ns));
	ns = json_pack("{s:s,s:s,s:o,s:s,s:s,s:i,s:s,s:{}}", "Bridge", "", "SandboxID",
		       c->sandbox, "Ports", dps_ports_map(c), "IPAddress", ip, "Gateway",
		       ip[0] ? GUEST_GW4 : "", "IPPrefixLen", ip[0] ? 32 : 0, "MacAddress", "",
		       "Networks");
	if (ip[0])      /* a running container with a network: Docker's "bridge" entry */
		json_object_set_new(json_object_get(ns, "Networks"), "bridge",
				    json_pack("{s:s,s:s,s:s,s:i,s:s}", "NetworkID", "bridge",
					      "IPAddress", ip, "Gateway", GUEST_GW4,
					      "IPPrefixLen", 32, "MacAddress", ""));
	o = json_pack("{s:s,s:o,s:s,s:O?,s:O?,s:o,s:s,s:s,s:s,s:s,s:s,s:i,s:s,s:O,s:O,"
		      "s:O,s:o,s:{s:s,s:{}}}",
		      "Id", c->id, "Created", dps_time(c->created_ns),
		      "Path", json_string_value(path) ?: "",
		      "Args", json_object_get(c->config, "Cmd"), "Entrypoint", ep,
		      "State", state, "Image", c->image_id, "Name", name,
		      "Driver", "kosa8", "Platform", "linux", "ResolvConfPath", "",
		      "RestartCount", 0, "MountLabel", "", "Config", c->config,
		      "HostConfig", c->host, "Mounts", c->mounts, "NetworkSettings", ns,
		      "GraphDriver", "Name", "kosa8", "Data");
	if (o)
		json_object_set_new(o, "Sandbox", json_string(c->sandbox));
	return o;
}
