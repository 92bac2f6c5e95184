/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_spec.c - what a create or exec request means (src/docker/spec.c): the
 * refusals and bounds of HostConfig, Docker's merge of the image's config, bind mounts
 * as written, exec bodies, and the agent's run and exec requests built from them. */
#include "docker/spec.h"
#include "t.h"

#include <signal.h>
#include <stdlib.h>

static json_t *J(const char *text)
{
	json_error_t e;
	json_t *v = json_loads(text, 0, &e);
	if (!v)
		fprintf(stderr, "bad JSON in the test: %s: %s\n", e.text, text);
	return v;
}

/* dspec_check on a body: its return, the message in err. */
static int check(const char *body, struct k8_err *err)
{
	json_t *b = J(body);
	const char *img = NULL;
	int r;

	k8_err_clear(err);
	r = dspec_check(b, &img, err);
	json_decref(b);
	return r;
}

static void test_check(void)
{
	struct k8_err err = { 0 };
	const struct { const char *body, *msg; } bad[] = {
		{ "{}", "Config.Image is required" },
		{ "{\"Image\":\"\"}", "Config.Image is required" },
		{ "{\"Image\":\"x\",\"HostConfig\":[]}", "HostConfig must be an object" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"Privileged\":true}}", "HostConfig.Privileged" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"CapAdd\":[\"NET_ADMIN\"]}}", "CapAdd" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"Devices\":[{}]}}", "Devices" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"DeviceRequests\":[{}]}}", "Devices" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"DeviceCgroupRules\":[\"a\"]}}", "DeviceCgroupRules" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"MaskedPaths\":[]}}", "MaskedPaths" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"ReadonlyPaths\":[]}}", "ReadonlyPaths" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"ReadonlyRootfs\":true}}", "ReadonlyRootfs" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"PidMode\":\"host\"}}", "PidMode \"host\"" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"UsernsMode\":\"host\"}}", "UsernsMode" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"NetworkMode\":\"host\"}}", "NetworkMode \"host\"" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"NetworkMode\":\"container:y\"}}", "NetworkMode" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"SecurityOpt\":[\"seccomp=unconfined\"]}}",
		  "SecurityOpt" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"CapDrop\":[\"NOPE\"]}}", "unknown capability" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"CapDrop\":\"ALL\"}}", "list of capabilities" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"Memory\":1000}}", "Minimum memory limit" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"Memory\":-1}}", "HostConfig.Memory" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"Memory\":\"1g\"}}", "HostConfig.Memory" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"NanoCpus\":1000}}", "0.01 upwards" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"PortBindings\":{\"53/udp\":[{}]}}}", "TCP" },
		{ "{\"Image\":\"x\",\"HostConfig\":{\"PortBindings\":{\"x\":[{}]}}}", "" },
		{ "{\"Image\":\"x\",\"Cmd\":[1]}", "Cmd must be a list of strings" },
		{ "{\"Image\":\"x\",\"Entrypoint\":{}}", "Entrypoint must be" },
		{ "{\"Image\":\"x\",\"Env\":[\"A=1\",null]}", "Env must be" },
		{ "{\"Image\":\"x\",\"WorkingDir\":\"rel\"}", "WorkingDir must be an absolute" },
		{ "{\"Image\":\"x\",\"WorkingDir\":7}", "WorkingDir must be an absolute" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = check(bad[i].body, &err);
		CHECK_EQ_INT(r, -EINVAL);
		if (!strstr(err.msg, bad[i].msg))
			fprintf(stderr, "  %s -> %s\n", bad[i].body, err.msg);
		CHECK(strstr(err.msg, bad[i].msg) != NULL);
	}
	const char *good[] = {
		"{\"Image\":\"x\"}",
		"{\"Image\":\"x\",\"HostConfig\":null}",
		"{\"Image\":\"x\",\"HostConfig\":{\"CapDrop\":[\"all\",\"cap_net_raw\",\"Chown\"],"
		"\"Memory\":6291456,\"NanoCpus\":10000000,\"NetworkMode\":\"bridge\","
		"\"PidMode\":\"container:y\",\"SecurityOpt\":[\"no-new-privileges\"],"
		"\"PortBindings\":{\"80/tcp\":[{\"HostPort\":\"8080\"}]}}}",
		"{\"Image\":\"x\",\"Cmd\":\"echo hi\",\"WorkingDir\":\"/w\",\"User\":\"1000:1000\"}",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK_EQ_INT(check(good[i], &err), 0);
}

static void test_build(void)
{
	struct k8_err err = { 0 };
	json_t *ienv = J("[\"PATH=/usr/bin\",\"LANG=C\",\"noequals\"]");
	json_t *icmd = J("[\"python3\"]"), *iep = J("[\"/entry\"]");
	struct dspec_image img = { .env = ienv, .cmd = icmd, .entrypoint = NULL,
				   .workdir = "/app", .user = "nobody" };
	json_t *body, *cfg, *host;

	/* the image's Cmd, its Env under the request's, its WorkingDir and User */
	body = J("{\"Image\":\"py\",\"Env\":[\"LANG=C.UTF-8\",\"X=1\",\"BAD\"],\"Labels\":[]}");
	CHECK_EQ_INT(dspec_build(body, &img, "abcdef012345", &cfg, &host, &err), 0);
	CHECK_STR(json_string_value(json_array_get(json_object_get(cfg, "Cmd"), 0)), "python3");
	CHECK(json_is_null(json_object_get(cfg, "Entrypoint")));
	CHECK_EQ_INT(json_array_size(json_object_get(cfg, "Env")), 3);   /* PATH, LANG=C.UTF-8, X */
	CHECK_STR(json_string_value(json_array_get(json_object_get(cfg, "Env"), 0)), "PATH=/usr/bin");
	CHECK_STR(json_string_value(json_array_get(json_object_get(cfg, "Env"), 1)), "LANG=C.UTF-8");
	CHECK_STR(json_string_value(json_object_get(cfg, "WorkingDir")), "/app");
	CHECK_STR(json_string_value(json_object_get(cfg, "User")), "nobody");
	CHECK_STR(json_string_value(json_object_get(cfg, "Hostname")), "abcdef012345");
	CHECK(json_is_object(json_object_get(cfg, "Labels")));
	CHECK_STR(json_string_value(json_object_get(host, "NetworkMode")), "default");
	CHECK_STR(json_string_value(json_object_get(json_object_get(host, "LogConfig"), "Type")),
		  "json-file");
	json_decref(cfg);
	json_decref(host);
	json_decref(body);

	/* an Entrypoint given drops the image's Cmd; [""] is none; NetworkDisabled */
	img.entrypoint = iep;
	body = J("{\"Image\":\"py\",\"Entrypoint\":[\"sh\"],\"NetworkDisabled\":true,"
		 "\"HostConfig\":{\"NetworkMode\":\"bridge\"}}");
	CHECK_EQ_INT(dspec_build(body, &img, "h", &cfg, &host, &err), 0);
	CHECK(json_is_null(json_object_get(cfg, "Cmd")));
	CHECK_STR(json_string_value(json_array_get(json_object_get(cfg, "Entrypoint"), 0)), "sh");
	CHECK_STR(json_string_value(json_object_get(host, "NetworkMode")), "none");
	json_decref(cfg);
	json_decref(host);
	json_decref(body);
	body = J("{\"Image\":\"py\",\"Entrypoint\":[\"\"],\"Cmd\":[\"true\"]}");
	CHECK_EQ_INT(dspec_build(body, &img, "h", &cfg, &host, &err), 0);
	CHECK(json_is_null(json_object_get(cfg, "Entrypoint")));
	CHECK_STR(json_string_value(json_array_get(json_object_get(cfg, "Cmd"), 0)), "true");
	json_decref(cfg);
	json_decref(host);
	json_decref(body);
	/* no command at all; too big */
	img.cmd = NULL;
	img.entrypoint = NULL;
	body = J("{\"Image\":\"py\"}");
	CHECK_EQ_INT(dspec_build(body, &img, "h", &cfg, &host, &err), -EINVAL);
	CHECK(strstr(err.msg, "no command specified") != NULL && !cfg && !host);
	json_decref(body);
	char *big = malloc(60000);
	memset(big, 'a', 59999);
	big[59999] = '\0';
	body = json_pack("{s:s,s:[s]}", "Image", "py", "Cmd", big);
	k8_err_clear(&err);
	CHECK_EQ_INT(dspec_build(body, &img, "h", &cfg, &host, &err), -EINVAL);
	CHECK(strstr(err.msg, "kosa8 takes at most 48 KiB") != NULL);
	json_decref(body);
	free(big);
	json_decref(ienv);
	json_decref(icmd);
	json_decref(iep);
}

static void test_binds(void)
{
	struct k8_err err = { 0 };
	struct dspec_bind b[DSPEC_BINDS_MAX];
	size_t n;
	json_t *hc;

	hc = J("{\"Binds\":[\"/srv/a:/data:ro\",\"/srv/b:/w/:rw,z\"],"
	       "\"Mounts\":[{\"Type\":\"bind\",\"Source\":\"/srv/c\",\"Target\":\"/c\","
	       "\"ReadOnly\":true}]}");
	CHECK_EQ_INT(dspec_binds(hc, b, &n, &err), 0);
	CHECK_EQ_INT(n, 3);
	CHECK_STR(b[0].src, "/srv/a");
	CHECK_STR(b[0].dst, "/data");
	CHECK(b[0].ro && !b[1].ro && b[2].ro);
	CHECK_STR(b[1].dst, "/w");                      /* trailing '/' dropped */
	json_decref(hc);
	const struct { const char *hc, *msg; } bad[] = {
		{ "{\"Binds\":[\"vol:/data\"]}", "no named volumes" },
		{ "{\"Binds\":[\"/data\"]}", "anonymous volumes" },
		{ "{\"Binds\":[\"/a:/b:rx\"]}", "invalid mode: rx" },
		{ "{\"Binds\":[\"/a:relative\"]}", "invalid mount destination" },
		{ "{\"Binds\":[\"/a:/\"]}", "invalid mount destination" },
		{ "{\"Binds\":[\"/a:/x/../etc\"]}", "invalid mount destination" },
		{ "{\"Binds\":[\"/a:/x//y\"]}", "invalid mount destination" },
		{ "{\"Binds\":[7]}", "must be strings" },
		{ "{\"Mounts\":[{\"Type\":\"volume\",\"Source\":\"v\",\"Target\":\"/v\"}]}",
		  "bind only" },
		{ "{\"Mounts\":[{\"Type\":\"bind\",\"Target\":\"/v\"}]}", "invalid mount source" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		hc = J(bad[i].hc);
		k8_err_clear(&err);
		CHECK_EQ_INT(dspec_binds(hc, b, &n, &err), -EINVAL);
		CHECK(strstr(err.msg, bad[i].msg) != NULL);
		json_decref(hc);
	}
	hc = json_pack("{s:[]}", "Binds");
	for (int i = 0; i < 17; i++)
		json_array_append_new(json_object_get(hc, "Binds"), json_sprintf("/s:/d%d", i));
	k8_err_clear(&err);
	CHECK_EQ_INT(dspec_binds(hc, b, &n, &err), -EINVAL);
	CHECK(strstr(err.msg, "at most 16 bind mounts") != NULL);
	json_decref(hc);
	CHECK(dspec_below("/srv/a/b", "/srv/a"));
	CHECK(dspec_below("/srv/a", "/srv/a"));
	CHECK(!dspec_below("/srv/ab", "/srv/a"));
	CHECK(dspec_below("/anything", "/"));
}

static void test_small_rules(void)
{
	struct k8_err err = { 0 };
	json_t *v, *out = NULL;
	unsigned r, c;

	v = J("[\"ALL\"]");
	CHECK_EQ_INT(dspec_cap_drop(v, &out, &err), 0);
	CHECK_EQ_INT(json_array_size(out), 41);
	json_decref(out);
	json_decref(v);
	v = J("[\"cap_net_raw\",\"SYS_ADMIN\"]");
	CHECK_EQ_INT(dspec_cap_drop(v, &out, &err), 0);
	CHECK_EQ_INT(json_array_size(out), 2);
	CHECK_EQ_INT(json_integer_value(json_array_get(out, 0)), 13);
	CHECK_EQ_INT(json_integer_value(json_array_get(out, 1)), 21);
	json_decref(out);
	json_decref(v);

	json_t *base = J("[\"A=1\",\"B=2\",\"C\"]"), *over = J("[\"B=3\",\"A\",\"D=4\"]");
	json_t *m = dspec_merge_env(base, over);
	CHECK_EQ_INT(json_array_size(m), 2);    /* A=1 unset by a bare "A", B=2 by B=3; D=4 */
	CHECK_STR(json_string_value(json_array_get(m, 0)), "B=3");
	json_decref(m);
	m = dspec_merge_env(NULL, over);
	CHECK_EQ_INT(json_array_size(m), 2);
	json_decref(m);
	json_decref(base);
	json_decref(over);

	v = J("[24,80]");
	dspec_console_size(v, &r, &c);
	CHECK(r == 24 && c == 80);
	json_decref(v);
	v = J("[24,70000]");
	dspec_console_size(v, &r, &c);
	CHECK(r == 0 && c == 0);
	json_decref(v);

	CHECK_EQ_INT(dspec_signal(NULL), SIGKILL);
	CHECK_EQ_INT(dspec_signal("TERM"), SIGTERM);
	CHECK_EQ_INT(dspec_signal("sigint"), SIGINT);
	CHECK_EQ_INT(dspec_signal("9"), 9);
	CHECK_EQ_INT(dspec_signal("65"), 0);
	CHECK_EQ_INT(dspec_signal("NOPE"), 0);
}

static void test_requests(void)
{
	struct k8_err err = { 0 };
	json_t *cfg = J("{\"Entrypoint\":[\"/e\"],\"Cmd\":[\"a\",\"b\"],\"Env\":[\"X=1\","
			"\"OPENAI_BASE_URL=mine\"],\"WorkingDir\":\"\",\"User\":\"\","
			"\"OpenStdin\":true,\"Tty\":true}");
	json_t *host = J("{\"Memory\":8388608,\"CapDrop\":[\"NET_RAW\"],\"ConsoleSize\":[30,100]}");
	json_t *benv = J("[\"OPENAI_BASE_URL=http://broker\",\"K=placeholder\"]");
	json_t *binds = J("[{\"folder\":\"/kosa8/bind/0\",\"sub\":\"x\",\"dst\":\"/d\",\"ro\":true}]");
	struct dspec_run run = { .agent_id = "0123456789ab", .image = "sha256:ab", .ip = "10.0.2.16",
				 .broker_env = benv, .binds = binds, .rm = true };
	json_t *req = dspec_run_request(cfg, host, &run), *resp;

	CHECK_STR(json_string_value(json_object_get(req, "op")), "run");
	CHECK_EQ_INT(json_array_size(json_object_get(req, "argv")), 3);
	CHECK_STR(json_string_value(json_array_get(json_object_get(req, "argv"), 0)), "/e");
	CHECK_STR(json_string_value(json_object_get(req, "cwd")), "/");
	CHECK_STR(json_string_value(json_object_get(req, "user")), "0");
	CHECK_STR(json_string_value(json_object_get(req, "stdin")), "tty");
	CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(req, "tty_size"), 1)), 100);
	CHECK_STR(json_string_value(json_object_get(req, "netns")), "own");
	CHECK_STR(json_string_value(json_object_get(req, "ip")), "10.0.2.16");
	CHECK(json_is_true(json_object_get(req, "rm")));
	CHECK_EQ_INT(json_integer_value(json_object_get(req, "memory_max")), 8388608);
	CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(req, "cap_drop"), 0)), 13);
	CHECK_EQ_INT(json_array_size(json_object_get(req, "binds")), 1);
	/* the container's Env wins over the broker's: the client's variable stays */
	CHECK_EQ_INT(json_array_size(json_object_get(req, "env")), 3);
	CHECK_STR(json_string_value(json_array_get(json_object_get(req, "env"), 0)), "K=placeholder");
	/* an agent that answers without limits or cap_drop did not apply them */
	resp = J("{\"pid\":5}");
	CHECK(!dspec_run_applied(req, resp));
	json_decref(resp);
	resp = J("{\"pid\":5,\"limits\":{},\"cap_drop\":8192}");
	CHECK(dspec_run_applied(req, resp));
	json_decref(resp);
	json_decref(req);
	run.ip = "";
	run.own_sandbox = true;
	json_object_del(host, "Memory");
	json_object_del(host, "CapDrop");
	req = dspec_run_request(cfg, host, &run);
	CHECK_STR(json_string_value(json_object_get(req, "netns")), "none");
	CHECK(json_object_get(req, "ip") == NULL && json_object_get(req, "cap_drop") == NULL);
	resp = J("{\"pid\":5}");
	CHECK(dspec_run_applied(req, resp));
	json_decref(resp);
	json_decref(req);

	struct dspec_exec x;
	json_t *body = J("{\"Cmd\":[\"ls\",\"-l\"],\"Env\":[\"Y=2\"],\"AttachStdin\":true,"
			 "\"Tty\":true,\"ConsoleSize\":[10,20]}");
	CHECK_EQ_INT(dspec_exec(body, &x, &err), 0);
	json_object_set_new(cfg, "WorkingDir", json_string("/w"));
	CHECK_EQ_INT(dspec_exec_inherit(&x, cfg, &err), 0);
	CHECK_STR(x.cwd, "/w");
	CHECK_EQ_INT(json_array_size(x.env), 3);        /* X, OPENAI_BASE_URL, Y */
	req = dspec_exec_request(&x, "0123456789ab", benv, false, x.tty);
	CHECK_STR(json_string_value(json_object_get(req, "op")), "exec");
	CHECK_STR(json_string_value(json_object_get(req, "stdin")), "tty");
	CHECK_STR(json_string_value(json_object_get(req, "user")), "0");
	json_decref(req);
	req = dspec_exec_request(&x, "0123456789ab", NULL, true, false);
	CHECK(json_is_false(json_object_get(req, "stdin")));   /* detached: no stdin */
	json_decref(req);
	dspec_exec_clear(&x);
	json_decref(body);
	const char *bad[] = { "{\"Cmd\":[]}", "{\"Cmd\":[\"x\"],\"Privileged\":true}",
			      "{\"Cmd\":[\"x\"],\"WorkingDir\":\"w\"}", "{\"Cmd\":[\"x\",3]}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		body = J(bad[i]);
		CHECK_EQ_INT(dspec_exec(body, &x, &err), -EINVAL);
		CHECK(x.cmd == NULL && x.env == NULL);
		json_decref(body);
	}
	json_decref(cfg);
	json_decref(host);
	json_decref(benv);
	json_decref(binds);
}

int main(void)
{
	test_check();
	test_build();
	test_binds();
	test_small_rules();
	test_requests();
	return T_DONE();
}
