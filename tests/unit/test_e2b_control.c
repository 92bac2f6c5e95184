/* SPDX-License-Identifier: Apache-2.0 */
/* test_e2b_control.c - E2B's control plane shapes: ids, keys, a create request, the
 * network settings in kosa8's terms (and what is refused with a message), the list's
 * metadata filter exactly as the JS SDK encodes it. */
#include "e2b/control.h"
#include "t.h"

#include <stdlib.h>

static json_t *J(const char *s)
{
	json_t *v = json_loads(s, 0, NULL);
	if (!v)
		fprintf(stderr, "bad test JSON: %s\n", s);
	return v;
}

static void test_ids(void)
{
	char id[E2B_ID_LEN + 1], id2[E2B_ID_LEN + 1], key[E2B_KEY_LEN + 1], tok[E2B_TOKEN_LEN + 1];

	CHECK_EQ_INT(e2b_id_new(id), 0);
	CHECK_EQ_INT(e2b_id_new(id2), 0);
	CHECK(e2b_id_ok(id) && strcmp(id, id2) && id[0] >= 'a' && id[0] <= 'z');
	CHECK(!e2b_id_ok("ABC") && !e2b_id_ok("aaaaaaaaaaaaaaaaaaa-") && !e2b_id_ok(NULL));
	CHECK_EQ_INT(e2b_key_new(key), 0);
	CHECK(e2b_key_format_ok(key) && strlen(key) == E2B_KEY_LEN && !strncmp(key, "e2b_", 4));
	CHECK(!e2b_key_format_ok("e2b_") && !e2b_key_format_ok("e2b_XYZ") &&
	      !e2b_key_format_ok("sk_123") && !e2b_key_format_ok(NULL));
	CHECK_EQ_INT(e2b_token_new(tok), 0);
	CHECK(strlen(tok) == E2B_TOKEN_LEN);
	CHECK(e2b_secret_eq(tok, tok) && !e2b_secret_eq(tok, key) && !e2b_secret_eq("a", "ab"));
}

static void test_create(void)
{
	struct e2b_create c;
	struct k8_err err = { 0 };
	json_t *b;

	/* what Sandbox.create({metadata, envs, timeoutMs}) sends */
	b = J("{\"templateID\":\"base\",\"timeout\":120,\"metadata\":{\"user\":\"u1\"},"
	      "\"envVars\":{\"FOO\":\"bar\"}}");
	CHECK_EQ_INT(e2b_create_parse(b, "base", &c, &err), 0);
	CHECK_STR(c.template_id, "base");
	CHECK_EQ_INT(c.timeout_s, 120);
	CHECK_STR(json_string_value(json_object_get(c.metadata, "user")), "u1");
	CHECK_STR(c.net.mode, "deny");          /* kosa8's default, not E2B's */
	CHECK(!c.auto_pause);
	e2b_create_clear(&c);
	json_decref(b);

	b = J("{\"autoPause\":true,\"autoResume\":{\"enabled\":true}}");
	CHECK_EQ_INT(e2b_create_parse(b, "code-interpreter-v1", &c, &err), 0);
	CHECK_STR(c.template_id, "code-interpreter-v1");
	CHECK_EQ_INT(c.timeout_s, E2B_TIMEOUT_DEFAULT);
	CHECK(c.auto_pause && c.auto_resume);
	e2b_create_clear(&c);
	json_decref(b);

	static const struct {
		const char *body;
		int code;
		const char *says;
	} bad[] = {
		{ "{\"volumeMounts\":[{\"name\":\"v\",\"path\":\"/d\"}]}", -ENOTSUP, "volumeMounts" },
		{ "{\"mcp\":{\"x\":1}}", -ENOTSUP, "mcp" },
		{ "{\"colour\":\"blue\"}", -ENOTSUP, "colour" },
		{ "{\"autoPauseMemory\":false,\"autoPause\":true}", -ENOTSUP, "memory" },
		{ "{\"timeout\":-5}", -EINVAL, "timeout" },
		{ "{\"timeout\":\"5\"}", -EINVAL, "timeout" },
		{ "{\"metadata\":{\"a\":1}}", -EINVAL, "metadata" },
		{ "{\"envVars\":{\"1X\":\"a\"}}", -EINVAL, "envVars" },
		{ "{\"templateID\":\"\"}", -EINVAL, "templateID" },
		{ "{\"network\":{\"egressProxy\":{\"address\":\"p:1080\"}}}", -ENOTSUP, "egressProxy" },
		{ "{\"network\":{\"allowOut\":[\"a.com\"],\"rules\":{\"*.a.com\":[]}}}", -ENOTSUP,
		  "wildcards" },
		{ "{\"allow_internet_access\":true,\"network\":{\"denyOut\":[\"1.1.1.1\"]}}",
		  -ENOTSUP, "deny rules" },
		{ "{\"network\":{\"rules\":{\"api.x.com\":[{\"transform\":{\"headers\":"
		  "{\"X-Key\":\"s1\"}}}]}}}", -EINVAL, "allowOut too" },
		{ "{\"network\":{\"allowPublicTraffic\":true}}", -ENOTSUP, "URLs" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		b = J(bad[i].body);
		k8_err_clear(&err);
		int rc = e2b_create_parse(b, "base", &c, &err);
		CHECK_EQ_INT(rc, bad[i].code);
		if (!strstr(err.msg, bad[i].says)) {
			CHECK(!"the message names what is refused");
			fprintf(stderr, "  %s -> %s\n", bad[i].body, err.msg);
		}
		if (rc == 0)
			e2b_create_clear(&c);
		json_decref(b);
	}
}

static void test_network(void)
{
	struct e2b_net n;
	struct k8_err err = { 0 };
	json_t *v;

	CHECK_EQ_INT(e2b_net_parse(NULL, -1, &n, &err), 0);
	CHECK_STR(n.mode, "deny");
	e2b_net_clear(&n);
	CHECK_EQ_INT(e2b_net_parse(NULL, 1, &n, &err), 0);
	CHECK_STR(n.mode, "allow-all");
	e2b_net_clear(&n);
	/* deny everything but a list: E2B's allowOut + denyOut [allTraffic] */
	v = J("{\"allowOut\":[\"example.org\",\"10.0.0.0/8\"],\"denyOut\":[\"0.0.0.0/0\"]}");
	CHECK_EQ_INT(e2b_net_parse(v, 1, &n, &err), 0);
	CHECK_STR(n.mode, "allow-list");
	CHECK_EQ_INT(json_array_size(n.rules), 2);
	e2b_net_clear(&n);
	json_decref(v);
	/* an all-traffic allowOut wins over denyOut */
	v = J("{\"allowOut\":[\"0.0.0.0/0\"],\"denyOut\":[\"1.2.3.4\"]}");
	CHECK_EQ_INT(e2b_net_parse(v, -1, &n, &err), 0);
	CHECK_STR(n.mode, "allow-all");
	e2b_net_clear(&n);
	json_decref(v);
	/* a header rule: the value without "Bearer ", never kept in the JSON */
	v = J("{\"allowOut\":[\"api.example.com\"],\"rules\":{\"API.example.com\":"
	      "[{\"transform\":{\"headers\":{\"Authorization\":\"Bearer sk-123\"}}}]}}");
	CHECK_EQ_INT(e2b_net_parse(v, -1, &n, &err), 0);
	CHECK_EQ_INT(n.nt, 1);
	CHECK_STR(n.t[0].host, "api.example.com");
	CHECK_STR(n.t[0].header, "Authorization");
	CHECK_STR(n.t[0].value, "sk-123");
	CHECK(n.t[0].bearer && n.has_rules);
	e2b_net_clear(&n);
	json_decref(v);
	v = J("{\"allowOut\":[\"a.com\"],\"rules\":{\"a.com\":[{\"transform\":{\"headers\":"
	      "{\"X-A\":\"1\",\"X-B\":\"2\"}}}]}}");
	k8_err_clear(&err);
	CHECK_EQ_INT(e2b_net_parse(v, -1, &n, &err), -ENOTSUP);    /* one header per host */
	json_decref(v);
	v = J("{\"allowOut\":[\"a.com\"],\"rules\":{\"a.com\":[{\"transform\":{\"headers\":"
	      "{\"X-A\":\"two words\"}}}]}}");
	k8_err_clear(&err);
	CHECK_EQ_INT(e2b_net_parse(v, -1, &n, &err), -ENOTSUP);
	json_decref(v);
}

static void test_list_query(void)
{
	json_t *m;
	struct k8_err err = { 0 };
	unsigned mask;

	/* {"k 1": "v&2", "user": "u1"} after the HTTP layer decoded the query once */
	CHECK_EQ_INT(e2b_metadata_query("k%25201=v%25262&user=u1", &m, &err), 0);
	CHECK_STR(json_string_value(json_object_get(m, "k 1")), "v&2");
	CHECK_STR(json_string_value(json_object_get(m, "user")), "u1");
	json_t *meta = J("{\"k 1\":\"v&2\",\"user\":\"u1\",\"other\":\"x\"}");
	CHECK(e2b_metadata_match(meta, m));
	json_object_set_new(meta, "user", json_string("u2"));
	CHECK(!e2b_metadata_match(meta, m));
	json_decref(meta);
	json_decref(m);
	CHECK_EQ_INT(e2b_metadata_query("novalue", &m, &err), -EINVAL);
	k8_err_clear(&err);
	CHECK_EQ_INT(e2b_metadata_query("a=%2", &m, &err), -EINVAL);
	k8_err_clear(&err);
	CHECK_EQ_INT(e2b_metadata_query("a=%2500", &m, &err), -EINVAL);        /* a NUL */
	CHECK_EQ_INT(e2b_state_query("running,paused", &mask, &err), 0);
	CHECK_EQ_INT(mask, E2B_STATE_RUNNING | E2B_STATE_PAUSED);
	CHECK_EQ_INT(e2b_state_query("paused", &mask, &err), 0);
	CHECK_EQ_INT(mask, E2B_STATE_PAUSED);
	CHECK_EQ_INT(e2b_state_query("gone", &mask, &err), -EINVAL);
}

int main(void)
{
	test_ids();
	test_create();
	test_network();
	test_list_query();
	return T_DONE();
}
