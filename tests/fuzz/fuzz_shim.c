/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_shim.c - libFuzzer target: the other bytes containerd-shim-kosa8-v2 reads. The first
 * byte picks the reader, the rest is its input:
 *
 *   0: a bundle's config.json (an OCI spec whose annotations come from a pod) through
 *      spec_parse(), then the sandbox a fixed node policy makes of it (spec_sandbox_body:
 *      whatever the annotations say, never more than the node allows);
 *   1: an exec's process spec (spec_proc_parse);
 *   2: kosa8d's answer to a request, as kc_answer_parse() reads it.
 *
 * abort() marks a broken invariant: a sandbox over the node's limits or with an egress
 * wider than the node's, an answer that parsed without a status. */
#include "shim/kclient.h"
#include "shim/spec.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *node;

static void check_body(const json_t *b)
{
	const char *eg = json_string_value(json_object_get(b, "egress"));
	json_t *rules = json_object_get(b, "egress_allow"), *v;
	size_t i;

	if (json_integer_value(json_object_get(b, "cpus")) > 2 ||
	    json_integer_value(json_object_get(b, "memory_mib")) > 1024 ||
	    json_integer_value(json_object_get(b, "disk_gb")) > 4)
		abort();
	if (!eg || !strcmp(eg, "allow-all") || json_object_get(b, "mounts"))
		abort();    /* the node allows neither */
	json_array_foreach(rules, i, v)
		if (strcmp(json_string_value(v), "pypi.org") &&
		    strcmp(json_string_value(v), "example.org:443"))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct k8_err err = { 0 };

	if (!node)
		node = json_pack("{s:i,s:i,s:i,s:s,s:[s,s]}", "max_cpus", 2, "max_memory_mib", 1024,
				 "max_disk_gb", 4, "egress", "allow-list", "egress_allow", "pypi.org",
				 "example.org:443");
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0: {
		struct spec sp;
		json_t *body = NULL;
		if (spec_parse((const char *)data + 1, size - 1, &sp, &err) == 0) {
			if (spec_sandbox_body(node, sp.annotations, &body, &err) == 0)
				check_body(body);
			json_decref(body);
			spec_free(&sp);
		}
		break;
	}
	case 1: {
		struct spec_proc p;
		json_error_t je;
		json_t *j = json_loadb((const char *)data + 1, size - 1, 0, &je);
		if (spec_proc_parse(j, &p, &err) == 0) {
			if (!json_array_size(p.argv) || p.cwd[0] != '/')
				abort();
			spec_proc_free(&p);
		}
		json_decref(j);
		break;
	}
	default: {
		int status;
		json_t *j = NULL;
		if (kc_answer_parse((const char *)data + 1, size - 1, &status, &j, &err) == 0) {
			if (status < 200 || status > 599)
				abort();
			if (status >= 300)
				(void)kc_error(j, status, &err);
		} else if (j) {
			abort();
		}
		json_decref(j);
		break;
	}
	}
	return 0;
}
