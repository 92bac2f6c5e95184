/* SPDX-License-Identifier: Apache-2.0 */
/* ops.h - the model's numeric building blocks: a small thread pool, matrix times vectors,
 * RMS norm, rotary position embedding, softmax, SiLU. */
#ifndef K8_OPS_H
#define K8_OPS_H

#include <stdint.h>

#include "model/gguf.h"
#include "model/quant.h"

struct pool;

/* A pool of n threads (the caller counts as one; n >= 1). NULL on failure. */
struct pool *pool_new(int n);
void pool_free(struct pool *p);
int pool_threads(const struct pool *p);
/* Run fn(arg, i, n) for i in 0..n-1 on the pool's threads and wait for all of them. */
void pool_run(struct pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);

/* y[t][r] = dot(W row r, x[t]) for t < nt tokens; W is [n_in = ne0, n_out = ne1].
 * xq must hold nt * n_in / QK blocks (used when the type wants it). */
void ops_matmul(struct pool *p, const struct gguf_tensor *w, const float *x, struct q8_block *xq,
		float *y, int nt);
/* ops_matmul with the same x (unchanged) and xq as the call just made with prev: x is not
 * quantized again when both types read the same activation form (q, k and v; gate and up). */
void ops_matmul_after(struct pool *p, const struct gguf_tensor *w, const struct gguf_tensor *prev,
		      const float *x, struct q8_block *xq, float *y, int nt);
/* One row of a (possibly quantized) matrix, dequantized: embedding lookup. */
void ops_get_row(const struct gguf_tensor *w, uint64_t r, float *y);

void ops_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* Rotate the first n_rot dims of a head of size hd at position pos. neox: pairs (i, i+n_rot/2),
 * otherwise adjacent pairs (2i, 2i+1). freq_factors (n_rot/2 entries) may be NULL. */
void ops_rope(float *v, int n_rot, int pos, float base, int neox, const float *freq_factors);
void ops_softmax(float *x, int n);
float ops_silu(float x);

#endif
