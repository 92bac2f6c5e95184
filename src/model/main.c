/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8-model: the local model engine's command line (for tests and benchmarks).
 *
 *   kosa8-model info FILE
 *   kosa8-model serve FILE [--port P] [--host H | --listen-fd N] [--threads N] [--ctx N]
 *                    [--name NAME] [--user UID:GID | --no-jail]
 *   kosa8-model render FILE [--anthropic] < request.json   (the prompt a chat request makes)
 *   kosa8-model tokenize FILE TEXT [--special] [--bos]
 *   kosa8-model run FILE (--prompt TEXT | --tokens 1,2,3) [-n N] [--greedy] [--temp T]
 *                   [--top-p P] [--seed S] [--threads T] [--ctx C] [--special]
 *                   [--dump-logits] [--no-bos] [--force 4,5,6]
 * --force feeds the given tokens instead of the chosen ones (the output still lists the
 * engine's own choices): a reference's sequence, to compare step by step.
 * Each prints one JSON object on stdout; errors go to stderr with exit status 1.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/chatreq.h"
#include "model/model.h"
#include "model/sample.h"
#include "model/server.h"
#include "model/tok.h"

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

K8_PRINTF(1, 2) static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "kosa8-model: ");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* A JSON string of bytes that may not be valid UTF-8: bad bytes become U+FFFD. */
static json_t *json_bytes(const char *s, size_t n)
{
	json_t *j = chat_json_bytes(s, n);
	return j ? j : json_null();
}

static void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
	if (!s)
		die("%s", "cannot encode the result as JSON");
	puts(s);
	free(s);
	json_decref(j);
}

static void load(struct model *m, struct tok *t, const char *path)
{
	struct k8_err err = { 0 };
	if (model_load(m, path, &err) || tok_load(t, &m->g, &err))
		die("%s", err.msg);
}

static int cmd_info(const char *path)
{
	struct model m;
	struct tok t;
	load(&m, &t, path);
	const struct model_hp *hp = &m.hp;
	json_t *types = json_object();
	for (uint64_t i = 0; i < m.g.n_tensors; i++) {
		const char *n = quant_name(m.g.t[i].type);
		json_object_set_new(types, n, json_integer(json_integer_value(json_object_get(types, n)) + 1));
	}
	print_json(json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:o,s:s,s:b,s:i}",
			     "arch", hp->arch == ARCH_LLAMA ? "llama" : "qwen2", "n_vocab", hp->n_vocab,
			     "n_embd", hp->n_embd, "n_layer", hp->n_layer, "n_head", hp->n_head,
			     "n_head_kv", hp->n_head_kv, "n_ff", hp->n_ff, "head_dim", hp->head_dim,
			     "n_ctx_train", hp->n_ctx_train, "eps", (double)hp->eps,
			     "rope_base", (double)hp->rope_base, "tensor_types", types,
			     "tokenizer", t.kind == TOK_BPE ? "bpe" : "spm", "avx2", quant_using_avx2(),
			     "version", (int)m.g.version));
	tok_free(&t);
	model_free(&m);
	return 0;
}

static json_t *ids_json(const int32_t *v, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

static int cmd_tokenize(const char *path, const char *text, bool special, bool bos)
{
	struct model m;
	struct tok t;
	load(&m, &t, path);
	int32_t *ids;
	int n = tok_encode(&t, text, strlen(text), bos, special, &ids);
	if (n < 0)
		die("tokenize: %s", strerror(-n));
	json_t *pieces = json_array();
	char buf[1024];
	for (int i = 0; i < n; i++) {
		int l = tok_piece(&t, ids[i], true, buf, sizeof(buf));
		json_array_append_new(pieces, json_bytes(buf, l > 0 ? (size_t)l : 0));
	}
	print_json(json_pack("{s:o,s:o}", "tokens", ids_json(ids, n), "pieces", pieces));
	free(ids);
	tok_free(&t);
	model_free(&m);
	return 0;
}

struct run_opts {
	const char *prompt, *tokens, *force;
	int n, threads, ctx;
	float temp, top_p;
	uint64_t seed;
	bool special, dump, no_bos;
};

static json_t *logits_json(const float *l, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_real(l[i]));
	return a;
}

static int cmd_run(const char *path, struct run_opts *o)
{
	double t0 = now_ms();
	struct model m;
	struct tok t;
	struct k8_err err = { 0 };
	load(&m, &t, path);
	int32_t *ids = NULL;
	int np = 0;
	if (o->tokens) {
		ids = malloc((strlen(o->tokens) / 2 + 2) * sizeof(*ids));
		for (const char *p = o->tokens; ids && *p;) {
			char *end;
			long v = strtol(p, &end, 10);
			if (end == p || v < 0 || v >= m.hp.n_vocab)
				die("--tokens: bad token id in '%s'", o->tokens);
			ids[np++] = (int32_t)v;
			p = *end == ',' ? end + 1 : end;
		}
	} else {
		np = tok_encode(&t, o->prompt, strlen(o->prompt), t.add_bos && !o->no_bos, o->special, &ids);
		if (np < 0)
			die("tokenize: %s", strerror(-np));
	}
	if (np == 0)
		die("%s", "the prompt has no tokens");
	struct model_ctx c;
	int ctx = o->ctx ? o->ctx : np + o->n + 1;
	if (model_ctx_new(&c, &m, ctx, o->threads, &err))
		die("%s", err.msg);
	struct sampler s;
	if (sample_init(&s, m.hp.n_vocab, o->temp, o->top_p, o->seed))
		die("%s", "out of memory");
	double t1 = now_ms();
	int rc = model_eval(&c, ids, np);
	if (rc)
		die("eval: %s", strerror(-rc));
	double t2 = now_ms();
	json_t *logits = o->dump ? json_array() : NULL;
	json_t *out = json_array();
	char *text = malloc(1);
	size_t tl = 0;
	int ng = 0;
	double tfirst = 0, tlast = 0;
	/* Timed as a client sees it (and as bench/model.py times llama.cpp): the first token
	 * once sampled, then each further one evaluated and sampled. */
	for (; ng < o->n; ng++) {
		if (logits)
			json_array_append_new(logits, logits_json(c.logits, m.hp.n_vocab));
		int32_t id = sample_next(&s, c.logits);
		tlast = now_ms();
		if (ng == 0)
			tfirst = tlast;
		json_array_append_new(out, json_integer(id));
		if (o->force) {   /* teacher forcing: feed the given sequence, report our own choice */
			char *end;
			long v = strtol(o->force, &end, 10);
			if (end == o->force || v < 0 || v >= m.hp.n_vocab)
				break;
			id = (int32_t)v;
			o->force = *end == ',' ? end + 1 : end;
		}
		char buf[1024];
		int l = tok_piece(&t, id, false, buf, sizeof(buf));
		if (l > 0) {
			char *nt = realloc(text, tl + (size_t)l + 1);
			if (!nt)
				die("%s", "out of memory");
			text = nt;
			memcpy(text + tl, buf, (size_t)l);
			tl += (size_t)l;
		}
		if (ng + 1 == o->n || c.pos >= c.n_ctx)
			break;
		if ((rc = model_eval(&c, &id, 1)))
			die("eval: %s", strerror(-rc));
	}
	int n_out = (int)json_array_size(out);
	json_t *timing = json_pack("{s:f,s:f,s:f,s:f,s:f,s:i}", "load_ms", t1 - t0, "prompt_ms", t2 - t1,
				   "prompt_tok_s", np / ((t2 - t1) / 1e3), "ttft_ms", tfirst - t1,
				   "gen_tok_s", n_out > 1 ? (n_out - 1) / ((tlast - tfirst) / 1e3) : 0.0,
				   "threads", pool_threads(c.pool));
	json_t *res = json_pack("{s:o,s:o,s:o,s:o,s:I}", "prompt_tokens", ids_json(ids, np),
				"tokens", out, "text", json_bytes(text, tl), "timing", timing,
				"rss_kb", (json_int_t)rss_kb());
	if (logits)
		json_object_set_new(res, "logits", logits);
	print_json(res);
	free(text);
	free(ids);
	sample_free(&s);
	model_ctx_free(&c);
	tok_free(&t);
	model_free(&m);
	return 0;
}

/* Render a chat request (stdin) with the model's template: the text and its tokens. */
static int cmd_render(const char *path, bool anthropic)
{
	struct model m;
	struct tok t;
	struct k8_err err = { 0 };
	load(&m, &t, path);
	char *body = malloc(REQ_MAX_BODY + 1);
	size_t n = body ? fread(body, 1, REQ_MAX_BODY + 1, stdin) : 0;
	struct gen_req r;
	struct chat_tmpl ct;
	struct chat_prompt p;
	if (!body || chat_detect(&ct, &m.g, &t, &err) ||
	    chatreq_parse(anthropic ? API_ANTHROPIC : API_OPENAI_CHAT, body, n, &r, &err) ||
	    chat_render(&ct, &r.conv, &p, &err))
		die("%s", err.msg[0] ? err.msg : "out of memory");
	size_t tl;
	char *text = chat_prompt_text(&p, &tl);
	int32_t *ids;
	int ni = chat_tokenize(&p, &t, &ids);
	if (!text || ni < 0)
		die("%s", "cannot tokenize the prompt");
	print_json(json_pack("{s:s,s:o,s:o}", "template", ct.name, "text", chat_json_bytes(text, tl),
			     "tokens", ids_json(ids, ni)));
	free(ids);
	free(text);
	free(body);
	chat_prompt_free(&p);
	chatreq_free(&r);
	tok_free(&t);
	model_free(&m);
	return 0;
}

static void usage(void)
{
	fputs("usage: kosa8-model info FILE\n"
	      "       kosa8-model serve FILE [--port P] [--host H | --listen-fd N] [--threads N]\n"
	      "                         [--ctx N] [--name N] [--user UID:GID | --no-jail]\n"
	      "       kosa8-model render FILE [--anthropic] < request.json\n"
	      "       kosa8-model tokenize FILE TEXT [--special] [--bos]\n"
	      "       kosa8-model run FILE (--prompt TEXT | --tokens 1,2,3) [-n N] [--greedy]\n"
	      "                   [--temp T] [--top-p P] [--seed S] [--threads T] [--ctx C]\n"
	      "                   [--special] [--no-bos] [--dump-logits] [--force 4,5,6]\n", stderr);
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		usage();
	quant_init();
	const char *cmd = argv[1], *path = argv[2];
	if (!strcmp(cmd, "serve"))
		return server_main(argc - 2, argv + 2);
	if (!strcmp(cmd, "render"))
		return cmd_render(path, argc > 3 && !strcmp(argv[3], "--anthropic"));
	if (!strcmp(cmd, "info"))
		return cmd_info(path);
	if (!strcmp(cmd, "tokenize")) {
		const char *text = NULL;
		bool special = false, bos = false;
		for (int i = 3; i < argc; i++) {
			if (!strcmp(argv[i], "--special"))
				special = true;
			else if (!strcmp(argv[i], "--bos"))
				bos = true;
			else if (!text)
				text = argv[i];
			else
				usage();
		}
		if (!text)
			usage();
		return cmd_tokenize(path, text, special, bos);
	}
	if (strcmp(cmd, "run"))
		usage();
	struct run_opts o = { .n = 16, .threads = 2, .temp = 0.8f, .top_p = 0.95f, .seed = 1 };
	for (int i = 3; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && (v || (usage(), 0)) && ++i)
		if (ARG("--prompt")) o.prompt = v;
		else if (ARG("--tokens")) o.tokens = v;
		else if (ARG("--force")) o.force = v;
		else if (ARG("-n")) o.n = atoi(v);
		else if (ARG("--threads")) o.threads = atoi(v);
		else if (ARG("--ctx")) o.ctx = atoi(v);
		else if (ARG("--temp")) o.temp = strtof(v, NULL);
		else if (ARG("--top-p")) o.top_p = strtof(v, NULL);
		else if (ARG("--seed")) o.seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--greedy")) o.temp = 0;
		else if (!strcmp(a, "--special")) o.special = true;
		else if (!strcmp(a, "--dump-logits")) o.dump = true;
		else if (!strcmp(a, "--no-bos")) o.no_bos = true;
		else usage();
#undef ARG
	}
	if ((!o.prompt == !o.tokens) || o.n < 1 || o.n > 1 << 20 || o.threads < 1 || o.threads > 256 || o.ctx < 0)
		usage();
	return cmd_run(path, &o);
}
