/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_interp.c - libFuzzer target: what a sandbox's container may send back to kosa8d
 * as a cell's output (src/daemon/interp_event.c): the bytes of the cell client's stdout,
 * cut into bounded lines and each line checked and rebuilt.
 *
 * Input: the raw stdout bytes, fed in pieces whose sizes come from the input itself.
 * Any abort() below is a broken invariant: a line longer than its bound handed on, an
 * event of an unknown type or with a field of the wrong type let through, a string past
 * its cut, a context id that parses but does not look like one. */
#include "daemon/interp_event.h"

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXLINE 4096

static void check_str(json_t *ev, const char *k, size_t max, int required)
{
	json_t *v = json_object_get(ev, k);
	if (!v && !required)
		return;
	if (!json_is_string(v) || json_string_length(v) > max + 64)
		abort();
}

static int on_line(void *ctx, const char *p, size_t n)
{
	json_t *ev = NULL;
	int kind;
	char c[13];

	(void)ctx;
	if (n + 1 > MAXLINE)
		abort();
	kind = interp_event_check(p, n, &ev);
	if (kind < 0) {
		if (ev)
			abort();
		return 0;
	}
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type)
		abort();
	switch (kind) {
	case INTERP_EV_CONNECTED:
		if (strcmp(type, "connected") || json_object_size(ev) != 1)
			abort();
		break;
	case INTERP_EV_START:
	case INTERP_EV_END:
		if (!json_is_integer(json_object_get(ev, "execution_count")) ||
		    json_integer_value(json_object_get(ev, "execution_count")) < 0)
			abort();
		if (kind == INTERP_EV_END && !json_is_boolean(json_object_get(ev, "ok")))
			abort();
		break;
	case INTERP_EV_STDOUT:
	case INTERP_EV_STDERR:
		check_str(ev, "text", MAXLINE, 1);
		if (json_object_size(ev) != 2)
			abort();
		break;
	case INTERP_EV_RESULT: {
		json_t *d = json_object_get(ev, "data"), *v;
		const char *k;
		if (!json_is_object(d) || json_object_size(d) > INTERP_MIME_MAX ||
		    !json_is_boolean(json_object_get(ev, "is_main_result")))
			abort();
		json_object_foreach(d, k, v)
			if (!json_is_string(v) || !strchr(k, '/') || strlen(k) > 100)
				abort();
		break;
	}
	case INTERP_EV_ERROR:
		check_str(ev, "name", INTERP_NAME_MAX, 1);
		check_str(ev, "value", INTERP_VALUE_MAX, 1);
		check_str(ev, "traceback", INTERP_TB_MAX, 1);
		if (json_object_size(ev) != 4)
			abort();
		break;
	default:
		abort();
	}
	/* what is handed on serialises */
	char *t = json_dumps(ev, JSON_COMPACT);
	if (!t)
		abort();
	free(t);
	json_decref(ev);
	/* the same bytes as a context id */
	char id[64];
	snprintf(id, sizeof(id), "%.*s", (int)(n < 63 ? n : 63), p);
	if (interp_id_parse(id, c) == 0 && (strlen(c) != 12 || id[12] != '-'))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct interp_lines lr;
	size_t off = 0;

	interp_lines_init(&lr, MAXLINE);
	while (off < size) {
		size_t piece = 1 + (data[off] % 97) * 53;
		if (piece > size - off)
			piece = size - off;
		if (interp_lines_feed(&lr, data + off, piece, on_line, NULL) < 0)
			abort();
		off += piece;
	}
	interp_lines_free(&lr);
	return 0;
}
