/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_ps.c - how a Docker API container is shown (src/docker/ps.c): `docker ps`
 * entries and their filters, and inspect's object. */
#include "docker/ps.h"
#include "t.h"

static json_t *J(const char *text)
{
	json_error_t e;
	json_t *v = json_loads(text, 0, &e);
	if (!v)
		fprintf(stderr, "bad JSON in the test: %s\n", e.text);
	return v;
}

#define SEC 1000000000ll

static json_t *cfg, *host, *mounts, *pub;

static struct dps_ctr ctr(enum dps_state st)
{
	return (struct dps_ctr){ .id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				 .name = "web", .image = "python:3.12-slim",
				 .image_id = "sha256:5383e65fb01f", .sandbox = "docker-engine",
				 .error = "", .ip = "10.0.2.16", .config = cfg, .host = host,
				 .mounts = mounts, .published = st == DPS_RUNNING ? pub : NULL,
				 .state = st, .exit_code = st == DPS_EXITED ? 3 : 0, .pid = 42,
				 .created_ns = 100 * SEC, .started_ns = 200 * SEC,
				 .finished_ns = 400 * SEC };
}

static bool match(const struct dps_ctr *c, const char *filters)
{
	struct dfilters f;
	struct k8_err err = { 0 };
	bool all = false, ok;

	if (dps_filters(filters, &f, &all, &err)) {
		fprintf(stderr, "filters %s: %s\n", filters, err.msg);
		return false;
	}
	ok = dps_match(c, &f);
	dfilters_free(&f);
	return ok;
}

static void test_list(void)
{
	struct dps_ctr c = ctr(DPS_RUNNING);
	json_t *o = dps_list_entry(&c, 200 * SEC + 125 * SEC);

	CHECK_STR(json_string_value(json_array_get(json_object_get(o, "Names"), 0)), "/web");
	CHECK_STR(json_string_value(json_object_get(o, "Command")), "/e python3 -c 1");
	CHECK_EQ_INT(json_integer_value(json_object_get(o, "Created")), 100);
	CHECK_STR(json_string_value(json_object_get(o, "State")), "running");
	CHECK_STR(json_string_value(json_object_get(o, "Status")), "Up 2 minutes");
	CHECK_EQ_INT(json_array_size(json_object_get(o, "Ports")), 1);
	CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(json_object_get(o, "Ports"),
								       0), "PublicPort")), 8080);
	CHECK_STR(json_string_value(json_object_get(json_object_get(o, "HostConfig"),
						    "NetworkMode")), "default");
	json_decref(o);
	c = ctr(DPS_EXITED);
	o = dps_list_entry(&c, 400 * SEC + 3 * 3600 * SEC);
	CHECK_STR(json_string_value(json_object_get(o, "Status")), "Exited (3) 3 hours ago");
	CHECK_EQ_INT(json_array_size(json_object_get(o, "Ports")), 0);
	json_decref(o);
	c = ctr(DPS_CREATED);
	o = dps_list_entry(&c, 0);
	CHECK_STR(json_string_value(json_object_get(o, "Status")), "Created");
	json_decref(o);
}

static void test_filters(void)
{
	struct dps_ctr r = ctr(DPS_RUNNING), x = ctr(DPS_EXITED);
	struct dfilters f;
	struct k8_err err = { 0 };
	bool all = false;

	CHECK(match(&r, NULL));
	CHECK(match(&r, "{\"name\":[\"we\"]}"));               /* unanchored, as moby */
	CHECK(match(&r, "{\"name\":[\"^/web$\"]}"));
	CHECK(!match(&r, "{\"name\":[\"^web\"]}"));             /* the name has its '/' */
	CHECK(match(&r, "{\"id\":[\"0123\"]}"));
	CHECK(match(&r, "{\"label\":[\"app=k8\"]}"));
	CHECK(match(&r, "{\"label\":[\"app\"]}"));
	CHECK(!match(&r, "{\"label\":[\"app=other\"]}"));
	CHECK(!match(&r, "{\"label\":[\"app=k8\",\"missing\"]}"));
	CHECK(match(&r, "{\"status\":[\"running\"]}"));
	CHECK(!match(&x, "{\"status\":[\"running\"]}"));
	CHECK(match(&x, "{\"exited\":[\"3\"]}"));
	CHECK(!match(&r, "{\"exited\":[\"0\"]}"));              /* only exited ones */
	CHECK(match(&r, "{\"ancestor\":[\"python:3.12-slim\"]}"));
	CHECK(match(&r, "{\"ancestor\":[\"5383e65fb01f\"]}"));
	CHECK(!match(&r, "{\"ancestor\":[\"busybox\"]}"));
	/* status and exited list stopped ones; bad filters are moby's 400 */
	CHECK_EQ_INT(dps_filters("{\"status\":[\"exited\"]}", &f, &all, &err), 0);
	CHECK(all);
	dfilters_free(&f);
	CHECK_EQ_INT(dps_filters("{\"status\":[\"sleepy\"]}", &f, &all, &err), -EINVAL);
	k8_err_clear(&err);
	CHECK_EQ_INT(dps_filters("{\"volume\":[\"x\"]}", &f, &all, &err), -EINVAL);
	CHECK(strstr(err.msg, "invalid filter") != NULL);
	k8_err_clear(&err);
	CHECK_EQ_INT(dps_filters("[", &f, &all, &err), -EINVAL);
}

static void test_inspect(void)
{
	struct dps_ctr c = ctr(DPS_RUNNING);
	json_t *o = dps_inspect(&c), *st, *ns;

	CHECK(o != NULL);
	st = json_object_get(o, "State");
	ns = json_object_get(o, "NetworkSettings");
	CHECK_STR(json_string_value(json_object_get(o, "Name")), "/web");
	CHECK_STR(json_string_value(json_object_get(o, "Path")), "/e");
	CHECK_STR(json_string_value(json_object_get(o, "Created")), "1970-01-01T00:01:40Z");
	CHECK(json_is_true(json_object_get(st, "Running")));
	CHECK_STR(json_string_value(json_object_get(st, "FinishedAt")), "0001-01-01T00:00:00Z");
	CHECK_EQ_INT(json_integer_value(json_object_get(st, "Pid")), 42);
	CHECK_STR(json_string_value(json_object_get(ns, "IPAddress")), "10.0.2.16");
	CHECK_STR(json_string_value(json_object_get(ns, "Gateway")), "10.0.2.2");
	CHECK(json_object_get(json_object_get(ns, "Networks"), "bridge") != NULL);
	CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(
		json_object_get(ns, "Ports"), "8000/tcp"), 0), "HostPort")), "8080");
	CHECK(json_is_null(json_object_get(json_object_get(ns, "Ports"), "9000/tcp")));
	CHECK_STR(json_string_value(json_object_get(o, "Sandbox")), "docker-engine");
	json_decref(o);
	/* exited: no address; an OOM kill is OOMKilled, not an Error */
	c = ctr(DPS_EXITED);
	c.error = "OOMKilled";
	o = dps_inspect(&c);
	st = json_object_get(o, "State");
	ns = json_object_get(o, "NetworkSettings");
	CHECK(json_is_true(json_object_get(st, "OOMKilled")));
	CHECK_STR(json_string_value(json_object_get(st, "Error")), "");
	CHECK_EQ_INT(json_integer_value(json_object_get(st, "ExitCode")), 3);
	CHECK_STR(json_string_value(json_object_get(ns, "IPAddress")), "");
	CHECK_EQ_INT(json_object_size(json_object_get(ns, "Networks")), 0);
	CHECK_STR(json_string_value(json_object_get(st, "FinishedAt")), "1970-01-01T00:06:40Z");
	json_decref(o);
	CHECK_STR(dps_state_name(DPS_DEAD), "dead");
	CHECK_STR(dps_state_name((enum dps_state)99), "dead");
}

int main(void)
{
	cfg = J("{\"Entrypoint\":[\"/e\"],\"Cmd\":[\"python3\",\"-c\",\"1\"],"
		"\"Labels\":{\"app\":\"k8\",\"tier\":\"web\"},"
		"\"ExposedPorts\":{\"8000/tcp\":{},\"9000/tcp\":{}}}");
	host = J("{\"NetworkMode\":\"default\"}");
	mounts = J("[]");
	pub = J("[{\"HostIp\":\"127.0.0.1\",\"HostPort\":8080,\"Port\":8000}]");
	test_list();
	test_filters();
	test_inspect();
	json_decref(cfg);
	json_decref(host);
	json_decref(mounts);
	json_decref(pub);
	return T_DONE();
}
