/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_e2b.c - libFuzzer target: arbitrary bytes as what an E2B client or a sandbox sends
 * kosa8d's E2B listener (src/e2b/): a Connect request body, a stream of envelopes (whole
 * and split where the input says), every envd and control-plane request parser on the
 * JSON inside (the code interpreter's too, and its event lines), a guest's listing, a multipart upload at two splits, the list's query.
 *
 * Any abort() below is a broken invariant: the reader giving other messages for another
 * split, a parsed start without argv, a listing entry with a path it should have
 * refused, multipart parts that differ between splits. */
#include "e2b/code.h"
#include "e2b/connect.h"
#include "e2b/control.h"
#include "e2b/envd.h"
#include "e2b/fs.h"
#include "e2b/multipart.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct tally {
	size_t msgs, bytes;
};

static int count(void *ctx, uint8_t flags, const uint8_t *p, size_t n)
{
	struct tally *t = ctx;
	(void)flags;
	if (n && !p)
		abort();
	t->msgs++;
	t->bytes += n;
	return 0;
}

static void requests(json_t *m)
{
	struct k8_err err = { 0 };
	struct e2b_start s;
	struct e2b_sel sel;
	uint8_t *in;
	size_t n;
	bool pty;
	int sig;
	unsigned c, r;

	if (e2b_start_parse(m, &s, &err) == 0) {
		if (!json_array_size(s.argv) || !s.config)
			abort();
		e2b_start_clear(&s);
	}
	k8_err_clear(&err);
	e2b_sel_parse(m, &sel, &err);
	k8_err_clear(&err);
	if (e2b_input_parse(m, &in, &n, &pty, &err) == 0 && n > E2B_INPUT_MAX)
		abort();
	free(in);
	k8_err_clear(&err);
	e2b_signal_parse(m, &sig, &err);
	k8_err_clear(&err);
	e2b_update_parse(m, &c, &r, &err);
	k8_err_clear(&err);
	struct e2b_create cr;
	if (e2b_create_parse(m, "base", &cr, &err) == 0)
		e2b_create_clear(&cr);
	k8_err_clear(&err);
	struct e2b_net net;
	if (e2b_net_parse(json_object_get(m, "network"), -1, &net, &err) == 0)
		e2b_net_clear(&net);
	json_t *end = e2b_ev_end(m);
	json_decref(end);
	/* the code interpreter: /execute, /contexts, an event as E2B's line */
	const char *ctx, *cwd;
	json_t *cell;
	k8_err_clear(&err);
	if (e2b_code_exec_parse(m, &ctx, &cell, &err) == 0) {
		if (!json_is_string(json_object_get(cell, "code")) ||
		    (ctx && strlen(ctx) > E2B_CTX_ID_MAX))
			abort();
		json_decref(cell);
	}
	k8_err_clear(&err);
	e2b_code_ctx_parse(m, &cwd, &err);
	k8_err_clear(&err);
	json_decref(e2b_code_event(m, 0));
	json_decref(e2b_code_ctx(m));
}

struct mp_tally {
	size_t parts, bytes;
	char first[64];
};

static int mp_begin(void *ctx, const char *field, const char *file)
{
	struct mp_tally *t = ctx;
	if (!t->parts++)
		snprintf(t->first, sizeof(t->first), "%s|%s", field, file);
	return 0;
}

static int mp_data(void *ctx, const uint8_t *p, size_t n)
{
	struct mp_tally *t = ctx;
	(void)p;
	t->bytes += n;
	return 0;
}

static int mp_end(void *ctx)
{
	(void)ctx;
	return 0;
}

static const struct e2b_mp_ops mp_ops = { mp_begin, mp_data, mp_end };

static int mp_run(const uint8_t *p, size_t n, size_t step, struct mp_tally *t)
{
	struct k8_err err = { 0 };
	struct e2b_mp m;
	int rc = e2b_mp_init(&m, "multipart/form-data; boundary=XyZ", &err);

	for (size_t i = 0; i < n && !rc; i += step)
		rc = e2b_mp_feed(&m, p + i, i + step > n ? n - i : step, &mp_ops, t, &err);
	return rc ? rc : e2b_mp_finish(&m, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct k8_err err = { 0 };
	json_t *m = NULL;

	if (size < 1)
		return 0;
	size_t step = data[0] % 17 + 1;
	const uint8_t *p = data + 1;
	size_t n = size - 1;

	/* a request body */
	if (e2bc_unwrap(p, n, E2BC_REQ_MAX, &m, &err) == 0) {
		requests(m);
		json_decref(m);
	}
	/* the same bytes as a reply stream, whole and split */
	struct e2bc_reader a, b;
	struct tally ta = { 0 }, tb = { 0 };
	e2bc_reader_init(&a, 65536);
	e2bc_reader_init(&b, 65536);
	int ra = e2bc_reader_feed(&a, p, n, count, &ta, &err), rb = 0;
	for (size_t i = 0; i < n && !rb; i += step)
		rb = e2bc_reader_feed(&b, p + i, i + step > n ? n - i : step, count, &tb, &err);
	if ((ra < 0) != (rb < 0) || (ra == 0 && memcmp(&ta, &tb, sizeof(ta))) || ta.bytes > n)
		abort();
	e2bc_reader_free(&a);
	e2bc_reader_free(&b);

	/* plain JSON (a unary call, a control-plane body) */
	m = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, NULL);
	if (json_is_object(m))
		requests(m);
	json_decref(m);

	/* a guest's listing */
	struct e2b_entry *e;
	size_t cnt;
	k8_err_clear(&err);
	if (e2b_listing_parse(p, n, 1000, &e, &cnt, &err) == 0) {
		for (size_t i = 0; i < cnt; i++) {
			if (e[i].rel[0] == '/' || strstr(e[i].rel, "//"))
				abort();
			json_decref(e2b_entry_json(&e[i], "/w"));
		}
		struct e2b_watch w = { 0 };
		e2b_watch_update(&w, e, cnt, NULL, NULL);      /* the first reports nothing */
		e2b_watch_free(&w);
	}

	/* a multipart upload, split two ways */
	struct mp_tally t1 = { 0 }, t2 = { 0 };
	int r1 = mp_run(p, n, n ? n : 1, &t1), r2 = mp_run(p, n, step, &t2);
	if (r1 != r2 || (r1 == 0 && (t1.parts != t2.parts || t1.bytes != t2.bytes ||
				     strcmp(t1.first, t2.first))))
		abort();

	/* the list's query values and paths */
	char *s = strndup((const char *)p, n);
	if (s) {
		json_t *meta;
		unsigned mask;
		char out[4200];
		k8_err_clear(&err);
		if (e2b_metadata_query(s, &meta, &err) == 0)
			json_decref(meta);
		k8_err_clear(&err);
		e2b_state_query(s, &mask, &err);
		k8_err_clear(&err);
		char user[E2B_USER_MAX + 1];
		if (e2b_basic_user(s, user, &err) == 0 && (!user[0] || strlen(user) > E2B_USER_MAX ||
							  strchr(user, ':') || user[0] == '-'))
			abort();
		k8_err_clear(&err);
		if (e2b_path(s, "/root", out, sizeof(out), &err) == 0 &&
		    (out[0] != '/' || strstr(out, "/../") || strstr(out, "//")))
			abort();
		free(s);
	}
	return 0;
}
