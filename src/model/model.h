/* SPDX-License-Identifier: Apache-2.0 */
/* model.h - llama and qwen2 decoder-only transformers over a GGUF file: hyperparameters,
 * weights (pointers into the mapping), a per-session KV cache and the forward pass. */
#ifndef K8_MODEL_H
#define K8_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/gguf.h"
#include "model/ops.h"

enum model_arch { ARCH_LLAMA, ARCH_QWEN2 };

struct model_hp {
	enum model_arch arch;
	int n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim, n_rot, n_ctx_train;
	float eps, rope_base;
	bool rope_neox;
};

struct model_layer {
	const struct gguf_tensor *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
	const float *attn_norm, *ffn_norm, *bq, *bk, *bv;   /* bq/bk/bv NULL when absent */
};

struct model {
	struct gguf g;
	struct model_hp hp;
	const struct gguf_tensor *tok_embd, *output;
	const float *out_norm;
	const float *rope_freqs;            /* NULL or n_rot/2 factors (llama 3) */
	struct model_layer *layers;
	float *vecs;                        /* norms and biases, dequantized (owned) */
};

/* Open and check a model file: architecture, hyperparameters, every tensor's shape and type. */
int model_load(struct model *m, const char *path, struct k8_err *err);
/* model_load in two steps: map the file (nothing of it read), then check it (`path` only
 * names it in errors). A failed parse frees the model. */
int model_map(struct model *m, const char *path, struct k8_err *err);
int model_parse(struct model *m, const char *path, struct k8_err *err);
void model_free(struct model *m);

/* One conversation's state: KV cache (half floats, as llama.cpp keeps it) and scratch. */
struct model_ctx {
	const struct model *m;
	struct pool *pool;
	int n_ctx, pos, n_batch;
	uint16_t *kc, *vc;                 /* [layer][pos][n_head_kv * head_dim] */
	float *x, *xb, *q, *k, *v, *att_out, *hb, *hb2, *logits, *scores;
	struct q8_block *xq;
};

int model_ctx_new(struct model_ctx *c, const struct model *m, int n_ctx, int n_threads,
		  struct k8_err *err);
void model_ctx_free(struct model_ctx *c);
/* Feed n tokens at the current position. On success c->logits holds the next-token logits
 * after the last of them. -ENOSPC when the context is full, -EINVAL for a token out of range. */
int model_eval(struct model_ctx *c, const int32_t *tok, int n);

#endif
