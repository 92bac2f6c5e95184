/* SPDX-License-Identifier: Apache-2.0 */
/* model.c - llama / qwen2 forward pass.
 *
 * Theory of operation: weights stay in the read-only mapping and are multiplied in their
 * stored type (quant.c); only norms and biases are copied out as floats. A batch of up to
 * n_batch tokens goes through each layer together (prompt processing reuses each weight row
 * across the batch); generation is the same path with one token. Per layer:
 *   xb = rmsnorm(x) * attn_norm; q,k,v = W xb (+ bias for qwen2); rope(q, k);
 *   k, v -> cache (f16); x += Wo softmax(q k^T / sqrt(hd)) v          (grouped-query heads)
 *   xb = rmsnorm(x) * ffn_norm; x += W_down (silu(W_gate xb) * W_up xb)
 * then logits = W_out rmsnorm(x_last) (W_out is token_embd when the file ties them).
 * llama rotates adjacent pairs, qwen2 the two halves of a head (GPT-NeoX style).
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MODEL_MAX_CTX (1 << 20)
#define MODEL_MAX_HEAD 1024   /* attention.key_length's cap in load_hp */

static int hp_u32(const struct gguf *g, const char *arch, const char *key, int *out, bool need,
		  uint32_t max, struct k8_err *err)
{
	char k[128];
	uint32_t v;
	snprintf(k, sizeof(k), "%s.%s", arch, key);
	int rc = gguf_get_u32(g, k, &v);
	if (rc == -ENOENT && !need)
		return 0;
	if (rc)
		return k8_err_set(err, -EINVAL, "%s: %s", k, rc == -ENOENT ? "missing" : "not an integer");
	if (v == 0 || v > max)
		return k8_err_set(err, -EINVAL, "%s = %u is out of range", k, v);
	*out = (int)v;
	return 0;
}

/* A tensor of exactly ne0 x ne1 (ne1 = 1 for vectors), or NULL with an error (optional: no error). */
static const struct gguf_tensor *tensor(const struct model *m, const char *name, uint64_t ne0,
					uint64_t ne1, bool optional, struct k8_err *err)
{
	const struct gguf_tensor *t = gguf_tensor(&m->g, name);
	if (!t) {
		if (!optional)
			k8_err_set(err, -EINVAL, "tensor '%s' is missing", name);
		return NULL;
	}
	if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
		k8_err_set(err, -EINVAL, "tensor '%s' is %llux%llux%llux%llu, expected %llux%llu", name,
			   (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
			   (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
			   (unsigned long long)ne0, (unsigned long long)ne1);
		return NULL;
	}
	return t;
}

/* A matrix used in a dot product with activations: its rows must be whole activation blocks. */
static const struct gguf_tensor *matrix(const struct model *m, const char *name, uint64_t ne0,
					uint64_t ne1, struct k8_err *err)
{
	const struct gguf_tensor *t = tensor(m, name, ne0, ne1, false, err);
	if (t && quant_wants_q8(t->type) && ne0 % QK) {
		k8_err_set(err, -EINVAL, "tensor '%s': %s rows of %llu are not whole blocks of %d",
			   name, quant_name(t->type), (unsigned long long)ne0, QK);
		return NULL;
	}
	return t;
}

/* Copy a vector tensor out as floats into *pos (advancing it); NULL pointer when absent. */
static int vec(const struct model *m, const char *name, uint64_t n, bool optional,
	       float **pos, const float **out, struct k8_err *err)
{
	const struct gguf_tensor *t = tensor(m, name, n, 1, optional, err);
	*out = NULL;
	if (!t)
		return optional && !gguf_tensor(&m->g, name) ? 0 : -EINVAL;
	ops_get_row(t, 0, *pos);
	*out = *pos;
	*pos += n;
	return 0;
}

static int load_hp(struct model *m, struct k8_err *err)
{
	struct model_hp *hp = &m->hp;
	struct gguf_str a;
	if (gguf_get_str(&m->g, "general.architecture", &a))
		return k8_err_set(err, -EINVAL, "general.architecture is missing");
	char arch[16];
	if (gguf_str_eq(a, "llama")) {
		hp->arch = ARCH_LLAMA;
	} else if (gguf_str_eq(a, "qwen2")) {
		hp->arch = ARCH_QWEN2;
		hp->rope_neox = true;
	} else {
		return k8_err_set(err, -ENOTSUP, "architecture '%.*s' is not supported (llama and qwen2 are)",
				  (int)(a.n > 64 ? 64 : a.n), a.p);
	}
	snprintf(arch, sizeof(arch), "%s", hp->arch == ARCH_LLAMA ? "llama" : "qwen2");
	int rc;
	if ((rc = hp_u32(&m->g, arch, "embedding_length", &hp->n_embd, true, 1 << 16, err)) ||
	    (rc = hp_u32(&m->g, arch, "block_count", &hp->n_layer, true, 1024, err)) ||
	    (rc = hp_u32(&m->g, arch, "feed_forward_length", &hp->n_ff, true, 1 << 18, err)) ||
	    (rc = hp_u32(&m->g, arch, "attention.head_count", &hp->n_head, true, 1024, err)))
		return rc;
	hp->n_head_kv = hp->n_head;
	hp->n_ctx_train = 4096;
	if ((rc = hp_u32(&m->g, arch, "attention.head_count_kv", &hp->n_head_kv, false, 1024, err)) ||
	    (rc = hp_u32(&m->g, arch, "context_length", &hp->n_ctx_train, false, MODEL_MAX_CTX, err)))
		return rc;
	if (hp->n_embd % hp->n_head)
		return k8_err_set(err, -EINVAL, "embedding length %d is not a multiple of %d heads",
				  hp->n_embd, hp->n_head);
	hp->head_dim = hp->n_embd / hp->n_head;
	if ((rc = hp_u32(&m->g, arch, "attention.key_length", &hp->head_dim, false, MODEL_MAX_HEAD, err)))
		return rc;
	hp->n_rot = hp->head_dim;
	if ((rc = hp_u32(&m->g, arch, "rope.dimension_count", &hp->n_rot, false, 1024, err)))
		return rc;
	if (hp->n_head % hp->n_head_kv || hp->n_rot > hp->head_dim || hp->n_rot % 2 || hp->head_dim % 2 ||
	    hp->head_dim > MODEL_MAX_HEAD)
		return k8_err_set(err, -EINVAL, "inconsistent heads: %d heads, %d kv heads, head %d, rope %d",
				  hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_rot);
	char k[128];
	snprintf(k, sizeof(k), "%s.attention.layer_norm_rms_epsilon", arch);
	hp->eps = 1e-5f;
	if ((rc = gguf_get_f32(&m->g, k, &hp->eps)) && rc != -ENOENT)
		return k8_err_set(err, -EINVAL, "%s is not a float", k);
	snprintf(k, sizeof(k), "%s.rope.freq_base", arch);
	hp->rope_base = 10000.0f;
	if ((rc = gguf_get_f32(&m->g, k, &hp->rope_base)) && rc != -ENOENT)
		return k8_err_set(err, -EINVAL, "%s is not a float", k);
	if (!(hp->eps > 0 && hp->eps < 1) || !(hp->rope_base > 1))
		return k8_err_set(err, -EINVAL, "rms epsilon %g or rope base %g out of range",
				  (double)hp->eps, (double)hp->rope_base);
	const struct gguf_kv *toks;
	if (gguf_get_arr(&m->g, "tokenizer.ggml.tokens", GGUF_STR, &toks))
		return k8_err_set(err, -EINVAL, "tokenizer.ggml.tokens is missing");
	if (toks->arr_n == 0 || toks->arr_n > (1u << 22))
		return k8_err_set(err, -EINVAL, "vocabulary of %llu tokens", (unsigned long long)toks->arr_n);
	hp->n_vocab = (int)toks->arr_n;
	return 0;
}

int model_map(struct model *m, const char *path, struct k8_err *err)
{
	memset(m, 0, sizeof(*m));
	quant_init();
	return gguf_map(&m->g, path, err);
}

int model_load(struct model *m, const char *path, struct k8_err *err)
{
	int rc = model_map(m, path, err);
	return rc ? rc : model_parse(m, path, err);
}

int model_parse(struct model *m, const char *path, struct k8_err *err)
{
	int rc = gguf_parse_mapped(&m->g, err);
	if (rc)
		goto fail;
	if ((rc = load_hp(m, err)))
		goto fail;
	struct model_hp *hp = &m->hp;
	uint64_t E = (uint64_t)hp->n_embd, QD = (uint64_t)hp->n_head * hp->head_dim,
		 KD = (uint64_t)hp->n_head_kv * hp->head_dim, F = (uint64_t)hp->n_ff;
	rc = -EINVAL;
	m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
	m->vecs = malloc(((size_t)hp->n_layer * (2 * E + QD + 2 * KD) + E + hp->n_rot) * sizeof(float));
	if (!m->layers || !m->vecs) {
		rc = k8_err_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	float *pos = m->vecs;
	if (!(m->tok_embd = tensor(m, "token_embd.weight", E, (uint64_t)hp->n_vocab, false, err)))
		goto fail;
	m->output = gguf_tensor(&m->g, "output.weight")
		? matrix(m, "output.weight", E, (uint64_t)hp->n_vocab, err)
		: matrix(m, "token_embd.weight", E, (uint64_t)hp->n_vocab, err);
	if (!m->output || vec(m, "output_norm.weight", E, false, &pos, &m->out_norm, err) ||
	    vec(m, "rope_freqs.weight", (uint64_t)hp->n_rot / 2, true, &pos, &m->rope_freqs, err))
		goto fail;
	for (int l = 0; l < hp->n_layer; l++) {
		struct model_layer *L = &m->layers[l];
		char n[96];
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d.%s", l, s), n)
		if (vec(m, NAME("attn_norm.weight"), E, false, &pos, &L->attn_norm, err) ||
		    vec(m, NAME("ffn_norm.weight"), E, false, &pos, &L->ffn_norm, err) ||
		    vec(m, NAME("attn_q.bias"), QD, true, &pos, &L->bq, err) ||
		    vec(m, NAME("attn_k.bias"), KD, true, &pos, &L->bk, err) ||
		    vec(m, NAME("attn_v.bias"), KD, true, &pos, &L->bv, err) ||
		    !(L->wq = matrix(m, NAME("attn_q.weight"), E, QD, err)) ||
		    !(L->wk = matrix(m, NAME("attn_k.weight"), E, KD, err)) ||
		    !(L->wv = matrix(m, NAME("attn_v.weight"), E, KD, err)) ||
		    !(L->wo = matrix(m, NAME("attn_output.weight"), QD, E, err)) ||
		    !(L->w_gate = matrix(m, NAME("ffn_gate.weight"), E, F, err)) ||
		    !(L->w_up = matrix(m, NAME("ffn_up.weight"), E, F, err)) ||
		    !(L->w_down = matrix(m, NAME("ffn_down.weight"), F, E, err)))
			goto fail;
#undef NAME
	}
	return 0;
fail:
	model_free(m);
	return k8_err_wrap(err, "%s", path), rc ? rc : -EINVAL;
}

void model_free(struct model *m)
{
	if (!m)
		return;
	free(m->layers);
	free(m->vecs);
	gguf_close(&m->g);
	memset(m, 0, sizeof(*m));
}

#define N_BATCH 32

int model_ctx_new(struct model_ctx *c, const struct model *m, int n_ctx, int n_threads,
		  struct k8_err *err)
{
	memset(c, 0, sizeof(*c));
	const struct model_hp *hp = &m->hp;
	if (n_ctx <= 0 || n_ctx > MODEL_MAX_CTX)
		return k8_err_set(err, -EINVAL, "context size %d out of range", n_ctx);
	c->m = m;
	c->n_ctx = n_ctx;
	c->n_batch = N_BATCH;
	size_t B = N_BATCH, E = (size_t)hp->n_embd, QD = (size_t)hp->n_head * hp->head_dim,
	       KD = (size_t)hp->n_head_kv * hp->head_dim, F = (size_t)hp->n_ff;
	size_t kv = (size_t)hp->n_layer * (size_t)n_ctx * KD;
	size_t maxin = E > F ? E : F;
	if (QD > maxin)
		maxin = QD;
	c->kc = malloc(kv * 2);
	c->vc = malloc(kv * 2);
	c->x = malloc(B * E * 4);
	c->xb = malloc(B * maxin * 4);
	c->q = malloc(B * QD * 4);
	c->k = malloc(B * KD * 4);
	c->v = malloc(B * KD * 4);
	c->att_out = malloc(B * QD * 4);
	c->hb = malloc(B * F * 4);
	c->hb2 = malloc(B * F * 4);
	c->logits = malloc((size_t)hp->n_vocab * 4);
	c->xq = malloc(B * (maxin / QK + 1) * sizeof(struct q8_block));
	c->pool = pool_new(n_threads);
	c->scores = malloc((size_t)(c->pool ? pool_threads(c->pool) : 1) * (size_t)n_ctx * 4);
	if (!c->kc || !c->vc || !c->x || !c->xb || !c->q || !c->k || !c->v || !c->att_out ||
	    !c->hb || !c->hb2 || !c->logits || !c->xq || !c->pool || !c->scores) {
		model_ctx_free(c);
		return k8_err_set(err, -ENOMEM, "out of memory for a context of %d tokens", n_ctx);
	}
	return 0;
}

void model_ctx_free(struct model_ctx *c)
{
	if (!c)
		return;
	pool_free(c->pool);
	free(c->kc); free(c->vc); free(c->x); free(c->xb); free(c->q); free(c->k); free(c->v);
	free(c->att_out); free(c->hb); free(c->hb2); free(c->logits); free(c->xq); free(c->scores);
	memset(c, 0, sizeof(*c));
}

struct att_job {
	struct model_ctx *c;
	int layer, nt;
};

/* Attention for (token, head) pairs dealt out across threads. */
static void att_part(void *a, int ith, int nth)
{
	struct att_job *j = a;
	struct model_ctx *c = j->c;
	const struct model_hp *hp = &c->m->hp;
	int hd = hp->head_dim, KD = hp->n_head_kv * hd, QD = hp->n_head * hd;
	int grp = hp->n_head / hp->n_head_kv;
	float scale = 1.0f / sqrtf((float)hd);
	float *sc = c->scores + (size_t)ith * c->n_ctx;
	size_t lay = (size_t)j->layer * c->n_ctx * KD;
	int total = j->nt * hp->n_head;
	for (int w = ith; w < total; w += nth) {
		int t = w / hp->n_head, h = w % hp->n_head, kvh = h / grp;
		int n = c->pos + t + 1;   /* causal: this token sees itself and everything before */
		/* llama.cpp (without flash attention) multiplies the f16 cache with the query and
		 * the probabilities rounded to f16: the same here, so both round alike. */
		float q[MODEL_MAX_HEAD];
		quant_round_f16(c->q + (size_t)t * QD + (size_t)h * hd, q, hd);
		for (int p = 0; p < n; p++)
			sc[p] = scale * quant_dot(GT_F16, c->kc + lay + (size_t)p * KD + (size_t)kvh * hd,
						  q, NULL, hd);
		ops_softmax(sc, n);
		quant_round_f16(sc, sc, n);
		float *o = c->att_out + (size_t)t * QD + (size_t)h * hd;
		memset(o, 0, (size_t)hd * 4);
		for (int p = 0; p < n; p++)
			quant_axpy_f16(o, sc[p], c->vc + lay + (size_t)p * KD + (size_t)kvh * hd, hd);
	}
}

static void add_bias(float *y, const float *b, int nt, int n)
{
	if (!b)
		return;
	for (int t = 0; t < nt; t++)
		for (int i = 0; i < n; i++)
			y[(size_t)t * n + i] += b[i];
}

static void eval_batch(struct model_ctx *c, const int32_t *tok, int nt)
{
	const struct model *m = c->m;
	const struct model_hp *hp = &m->hp;
	int E = hp->n_embd, hd = hp->head_dim, QD = hp->n_head * hd, KD = hp->n_head_kv * hd, F = hp->n_ff;
	for (int t = 0; t < nt; t++)
		ops_get_row(m->tok_embd, (uint64_t)tok[t], c->x + (size_t)t * E);
	for (int l = 0; l < hp->n_layer; l++) {
		const struct model_layer *L = &m->layers[l];
		for (int t = 0; t < nt; t++)
			ops_rmsnorm(c->xb + (size_t)t * E, c->x + (size_t)t * E, L->attn_norm, E, hp->eps);
		ops_matmul(c->pool, L->wq, c->xb, c->xq, c->q, nt);
		ops_matmul_after(c->pool, L->wk, L->wq, c->xb, c->xq, c->k, nt);
		ops_matmul_after(c->pool, L->wv, L->wk, c->xb, c->xq, c->v, nt);
		add_bias(c->q, L->bq, nt, QD);
		add_bias(c->k, L->bk, nt, KD);
		add_bias(c->v, L->bv, nt, KD);
		size_t lay = (size_t)l * c->n_ctx * KD;
		for (int t = 0; t < nt; t++) {
			int p = c->pos + t;
			for (int h = 0; h < hp->n_head; h++)
				ops_rope(c->q + (size_t)t * QD + (size_t)h * hd, hp->n_rot, p, hp->rope_base,
					 hp->rope_neox, m->rope_freqs);
			for (int h = 0; h < hp->n_head_kv; h++)
				ops_rope(c->k + (size_t)t * KD + (size_t)h * hd, hp->n_rot, p, hp->rope_base,
					 hp->rope_neox, m->rope_freqs);
			quant_to_f16(c->k + (size_t)t * KD, c->kc + lay + (size_t)p * KD, KD);
			quant_to_f16(c->v + (size_t)t * KD, c->vc + lay + (size_t)p * KD, KD);
		}
		struct att_job aj = { c, l, nt };
		pool_run(c->pool, att_part, &aj);
		ops_matmul(c->pool, L->wo, c->att_out, c->xq, c->xb, nt);
		for (size_t i = 0; i < (size_t)nt * E; i++)
			c->x[i] += c->xb[i];
		for (int t = 0; t < nt; t++)
			ops_rmsnorm(c->xb + (size_t)t * E, c->x + (size_t)t * E, L->ffn_norm, E, hp->eps);
		ops_matmul(c->pool, L->w_gate, c->xb, c->xq, c->hb, nt);
		ops_matmul_after(c->pool, L->w_up, L->w_gate, c->xb, c->xq, c->hb2, nt);
		for (size_t i = 0; i < (size_t)nt * F; i++)
			c->hb[i] = ops_silu(c->hb[i]) * c->hb2[i];
		ops_matmul(c->pool, L->w_down, c->hb, c->xq, c->xb, nt);
		for (size_t i = 0; i < (size_t)nt * E; i++)
			c->x[i] += c->xb[i];
	}
	c->pos += nt;
}

int model_eval(struct model_ctx *c, const int32_t *tok, int n)
{
	const struct model_hp *hp = &c->m->hp;
	if (n <= 0)
		return -EINVAL;
	if (n > c->n_ctx - c->pos)
		return -ENOSPC;
	for (int i = 0; i < n; i++)
		if (tok[i] < 0 || tok[i] >= hp->n_vocab)
			return -EINVAL;
	int last = 0;
	for (int i = 0; i < n; i += c->n_batch) {
		int nt = n - i < c->n_batch ? n - i : c->n_batch;
		eval_batch(c, tok + i, nt);
		last = nt - 1;
	}
	int E = hp->n_embd;
	ops_rmsnorm(c->xb, c->x + (size_t)last * E, c->m->out_norm, E, hp->eps);
	ops_matmul(c->pool, c->m->output, c->xb, c->xq, c->logits, 1);
	return 0;
}
