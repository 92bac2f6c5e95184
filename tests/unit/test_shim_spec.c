/* SPDX-License-Identifier: Apache-2.0 */
/* test_shim_spec.c - the shim's reading of an OCI spec (src/shim/spec.c) and its policy:
 * the node's config bounds what a pod's io.kosa8.* annotations may ask for; a pod may
 * narrow egress, never widen it; host folders are shared only below the node's roots,
 * links resolved. */
#include "shim/spec.h"
#include "t.h"

#include <stdlib.h>
#include <sys/stat.h>

static int parse(const char *s, struct spec *sp)
{
	struct k8_err err = { 0 };

	return spec_parse(s, strlen(s), sp, &err);
}

static void test_parse(void)
{
	struct spec sp;

	CHECK_EQ_INT(parse("{\"process\":{\"args\":[\"python3\",\"-c\",\"print(1)\"],"
			   "\"env\":[\"PATH=/bin\"],\"cwd\":\"/work\",\"user\":{\"uid\":1000,"
			   "\"gid\":10},\"terminal\":true,\"consoleSize\":{\"height\":24,"
			   "\"width\":80}}}", &sp), 0);
	CHECK_EQ_INT(json_array_size(sp.proc.argv), 3);
	CHECK_STR(json_string_value(json_array_get(sp.proc.env, 0)), "PATH=/bin");
	CHECK_STR(sp.proc.cwd, "/work");
	CHECK_STR(sp.proc.user, "1000:10");
	CHECK(sp.proc.terminal && sp.proc.rows == 24 && sp.proc.cols == 80);
	CHECK(sp.role == SPEC_ALONE);
	spec_free(&sp);
	/* defaults: cwd /, root */
	CHECK_EQ_INT(parse("{\"process\":{\"args\":[\"true\"]}}", &sp), 0);
	CHECK_STR(sp.proc.cwd, "/");
	CHECK_STR(sp.proc.user, "0:0");
	spec_free(&sp);
	/* CRI's roles */
	CHECK_EQ_INT(parse("{\"annotations\":{\"io.kubernetes.cri.container-type\":\"sandbox\","
			   "\"io.kubernetes.cri.sandbox-id\":\"abc\"}}", &sp), 0);
	CHECK(sp.role == SPEC_POD_SANDBOX);
	CHECK_STR(sp.pod, "abc");
	spec_free(&sp);
	CHECK_EQ_INT(parse("{\"process\":{\"args\":[\"x\"]},\"annotations\":{"
			   "\"io.kubernetes.cri.container-type\":\"container\","
			   "\"io.kubernetes.cri.sandbox-id\":\"abc\"}}", &sp), 0);
	CHECK(sp.role == SPEC_POD_CONTAINER);
	spec_free(&sp);
	/* refused */
	static const char *const bad[] = {
		"[]", "{", "{\"process\":{}}", "{\"process\":{\"args\":[]}}",
		"{\"process\":{\"args\":[1]}}", "{\"process\":{\"args\":[\"a\"],\"cwd\":\"rel\"}}",
		"{\"process\":{\"args\":[\"a\"],\"user\":{\"uid\":-1}}}",
		"{\"process\":{\"args\":[\"a\"],\"user\":{\"uid\":4294967296}}}",
		"{\"process\":{\"args\":[\"a\\u0000b\"]}}",
		"{\"process\":{\"args\":[\"a\"]},\"annotations\":{\"x\":1}}",
		"{\"process\":{\"args\":[\"a\"]},\"annotations\":[]}",
		"{\"process\":{\"args\":[\"a\"]},\"process\":{\"args\":[\"b\"]}}",
		"{\"annotations\":{\"io.kubernetes.cri.sandbox-id\":\"\"}}",
		"{\"process\":{\"args\":[\"a\"],\"consoleSize\":{\"height\":70000}}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = parse(bad[i], &sp);
		CHECK(r < 0);
		if (r >= 0)
			fprintf(stderr, "  accepted: %s\n", bad[i]);
	}
	/* too large */
	{
		size_t n = SPEC_MAX_BYTES + 10;
		char *big = malloc(n + 1);
		memset(big, ' ', n);
		big[0] = '{';
		big[n - 1] = '}';
		big[n] = 0;
		CHECK_EQ_INT(parse(big, &sp), -EFBIG);
		free(big);
	}
}

static json_t *body_of(const char *node, const char *ann, int *rc, struct k8_err *err)
{
	json_error_t je;
	json_t *n = node ? json_loads(node, 0, &je) : NULL, *a = json_loads(ann, 0, &je), *b = NULL;

	k8_err_clear(err);
	*rc = spec_sandbox_body(n, a, &b, err);
	json_decref(n);
	json_decref(a);
	return b;
}

static void test_policy(void)
{
	struct k8_err err = { 0 };
	json_t *b;
	int rc;

	/* defaults: small, deny */
	b = body_of(NULL, "{}", &rc, &err);
	CHECK(rc == 0 && json_integer_value(json_object_get(b, "cpus")) == 1 &&
	      json_integer_value(json_object_get(b, "memory_mib")) == 512 &&
	      json_integer_value(json_object_get(b, "disk_gb")) == 2);
	CHECK_STR(json_string_value(json_object_get(b, "egress")), "deny");
	json_decref(b);
	/* the node's allow-list applies as it is */
	const char *node = "{\"egress_allow\":[\"pypi.org\",\"files.pythonhosted.org:443\"],"
			   "\"max_memory_mib\":1024}";
	b = body_of(node, "{}", &rc, &err);
	CHECK_STR(json_string_value(json_object_get(b, "egress")), "allow-list");
	CHECK_EQ_INT(json_array_size(json_object_get(b, "egress_allow")), 2);
	json_decref(b);
	/* a pod narrows it: deny; a subset of the list */
	b = body_of(node, "{\"io.kosa8.egress\":\"deny\"}", &rc, &err);
	CHECK(rc == 0 && !json_object_get(b, "egress_allow"));
	CHECK_STR(json_string_value(json_object_get(b, "egress")), "deny");
	json_decref(b);
	b = body_of(node, "{\"io.kosa8.egress-allow\":\" pypi.org \"}", &rc, &err);
	CHECK_EQ_INT(rc, 0);
	CHECK_EQ_INT(json_array_size(json_object_get(b, "egress_allow")), 1);
	json_decref(b);
	/* never widens it */
	b = body_of(node, "{\"io.kosa8.egress\":\"allow-all\"}", &rc, &err);
	CHECK(rc == -EPERM && b == NULL && strstr(err.msg, "never widen"));
	b = body_of(node, "{\"io.kosa8.egress-allow\":\"pypi.org,evil.example\"}", &rc, &err);
	CHECK(rc == -EPERM && strstr(err.msg, "evil.example"));
	b = body_of(NULL, "{\"io.kosa8.egress-allow\":\"pypi.org\"}", &rc, &err);
	CHECK_EQ_INT(rc, -EPERM);
	b = body_of(node, "{\"io.kosa8.egress\":\"deny\",\"io.kosa8.egress-allow\":\"pypi.org\"}",
		    &rc, &err);
	CHECK_EQ_INT(rc, -EINVAL);
	/* an allow-all node lets a pod name its own list */
	b = body_of("{\"egress\":\"allow-all\"}", "{\"io.kosa8.egress-allow\":\"x.org\"}", &rc, &err);
	CHECK(rc == 0 && json_array_size(json_object_get(b, "egress_allow")) == 1);
	json_decref(b);
	/* sizes: up to the node's max */
	b = body_of(node, "{\"io.kosa8.memory-mib\":\"1024\",\"io.kosa8.cpus\":\"2\"}", &rc, &err);
	CHECK(rc == 0 && json_integer_value(json_object_get(b, "memory_mib")) == 1024);
	json_decref(b);
	b = body_of(node, "{\"io.kosa8.memory-mib\":\"1025\"}", &rc, &err);
	CHECK(rc == -EPERM && strstr(err.msg, "max_memory_mib"));
	b = body_of(node, "{\"io.kosa8.cpus\":\"3\"}", &rc, &err);
	CHECK_EQ_INT(rc, -EPERM);
	for (const char *const *v = (const char *const[]){ "0", "-1", "2x", "", " 1",
							   "99999999999999999999", NULL }; *v; v++) {
		char ann[80];
		snprintf(ann, sizeof(ann), "{\"io.kosa8.cpus\":\"%s\"}", *v);
		b = body_of(node, ann, &rc, &err);
		CHECK(rc < 0 && b == NULL);
	}
	/* a node config out of range, an unknown io.kosa8 annotation */
	b = body_of("{\"cpus\":4,\"max_cpus\":2}", "{}", &rc, &err);
	CHECK_EQ_INT(rc, -EINVAL);
	b = body_of(NULL, "{\"io.kosa8.privileged\":\"true\"}", &rc, &err);
	CHECK(rc == -EINVAL && strstr(err.msg, "unknown annotation"));
	b = body_of(NULL, "{\"io.other\":\"x\"}", &rc, &err);
	CHECK_EQ_INT(rc, 0);
	json_decref(b);
}

static void test_mounts(void)
{
	struct k8_err err = { 0 };
	char root[] = "/tmp/k8shim-XXXXXX", node[512], ann[1024], link[600], out[600];
	json_t *b;
	int rc;

	CHECK(mkdtemp(root) != NULL);
	snprintf(out, sizeof(out), "%s/allowed", root);
	mkdir(out, 0700);
	snprintf(out, sizeof(out), "%s/allowed/data", root);
	mkdir(out, 0700);
	snprintf(out, sizeof(out), "%s/other", root);
	mkdir(out, 0700);
	snprintf(link, sizeof(link), "%s/allowed/escape", root);
	CHECK_EQ_INT(symlink(out, link), 0);
	snprintf(node, sizeof(node), "{\"mount_roots\":[\"%s/allowed\"]}", root);
	/* without roots: none */
	snprintf(ann, sizeof(ann), "{\"io.kosa8.mounts\":\"%s/allowed/data:/data\"}", root);
	b = body_of(NULL, ann, &rc, &err);
	CHECK(rc == -EPERM && strstr(err.msg, "mount_roots"));
	/* below a root, read-only */
	snprintf(ann, sizeof(ann), "{\"io.kosa8.mounts\":\"%s/allowed/data:/data:ro\"}", root);
	b = body_of(node, ann, &rc, &err);
	CHECK_EQ_INT(rc, 0);
	json_t *m = json_array_get(json_object_get(b, "mounts"), 0);
	CHECK_STR(json_string_value(json_object_get(m, "guest")), "/data");
	CHECK(json_is_true(json_object_get(m, "ro")));
	json_decref(b);
	/* a link below the root that leads out of it; a folder beside it; .. */
	snprintf(ann, sizeof(ann), "{\"io.kosa8.mounts\":\"%s/allowed/escape:/x\"}", root);
	b = body_of(node, ann, &rc, &err);
	CHECK_EQ_INT(rc, -EPERM);
	snprintf(ann, sizeof(ann), "{\"io.kosa8.mounts\":\"%s/other:/x\"}", root);
	b = body_of(node, ann, &rc, &err);
	CHECK_EQ_INT(rc, -EPERM);
	snprintf(ann, sizeof(ann), "{\"io.kosa8.mounts\":\"%s/allowed/../other:/x\"}", root);
	b = body_of(node, ann, &rc, &err);
	CHECK_EQ_INT(rc, -EPERM);
	snprintf(ann, sizeof(ann), "{\"io.kosa8.mounts\":\"%s/allowedX:/x\"}", root);
	b = body_of(node, ann, &rc, &err);
	CHECK(rc < 0);
	/* malformed */
	for (const char *const *v = (const char *const[]){ "data:/data", "/a", "/a:rel",
							   "/a:/b:rx", ":/b", NULL }; *v; v++) {
		snprintf(ann, sizeof(ann), "{\"io.kosa8.mounts\":\"%s\"}", *v);
		b = body_of(node, ann, &rc, &err);
		CHECK(rc < 0 && b == NULL);
	}
	unlink(link);
	snprintf(out, sizeof(out), "rm -rf %s", root);
	CHECK_EQ_INT(system(out), 0);
}

static void test_names(void)
{
	char a[64], b[64], c[64];

	spec_sandbox_name("ctr", "default", "t1", a);
	spec_sandbox_name("ctr", "default", "t1", b);
	spec_sandbox_name("ctr", "k8s.io", "t1", c);
	CHECK_STR(a, b);
	CHECK(strcmp(a, c) != 0);
	CHECK(strlen(a) == 16 && !strncmp(a, "ctr-", 4));
}

int main(void)
{
	test_parse();
	test_policy();
	test_mounts();
	test_names();
	return T_DONE();
}
