/* SPDX-License-Identifier: Apache-2.0 */
/* ops.c - thread pool and the numeric kernels around the quantized dot products.
 *
 * The pool keeps its workers parked on a condition variable between jobs; a job is a
 * function called once per thread with (ith, nth). The caller runs share 0 itself. Each
 * matmul splits the output rows evenly, so there is no work queue to contend on.
 */
#include "model/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct pool {
	int n;
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	void (*fn)(void *, int, int);
	void *arg;
	unsigned gen;      /* bumped per job */
	int pending;       /* workers still running the current job */
	int stop;
};

struct worker_arg {
	struct pool *p;
	int ith;
};

static void *pool_main(void *a)
{
	struct worker_arg *wa = a;
	struct pool *p = wa->p;
	int ith = wa->ith;
	free(wa);
	unsigned seen = 0;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (p->gen == seen && !p->stop)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		seen = p->gen;
		void (*fn)(void *, int, int) = p->fn;
		void *arg = p->arg;
		pthread_mutex_unlock(&p->mu);
		fn(arg, ith, p->n);
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
}

struct pool *pool_new(int n)
{
	if (n < 1)
		n = 1;
	struct pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->n = n;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	p->th = calloc((size_t)n, sizeof(*p->th));
	if (!p->th)
		goto fail;
	for (int i = 1; i < n; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		if (!wa)
			goto fail_threads;
		wa->p = p;
		wa->ith = i;
		if (pthread_create(&p->th[i], NULL, pool_main, wa)) {
			free(wa);
			goto fail_threads;
		}
		continue;
fail_threads:
		p->n = i;
		pool_free(p);
		return NULL;
	}
	return p;
fail:
	free(p);
	return NULL;
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->th[i], NULL);
	free(p->th);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p);
}

int pool_threads(const struct pool *p) { return p ? p->n : 1; }

void pool_run(struct pool *p, void (*fn)(void *arg, int ith, int nth), void *arg)
{
	if (!p || p->n == 1) {
		fn(arg, 0, 1);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->pending = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	fn(arg, 0, p->n);
	pthread_mutex_lock(&p->mu);
	while (p->pending)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

/* ---- matmul ---- */

struct mm_job {
	const struct gguf_tensor *w;
	const float *x;
	const struct q8_block *xq;
	float *y;
	int nt;
};

static void mm_quant_part(void *a, int ith, int nth)
{
	struct mm_job *j = a;
	int n_in = (int)j->w->ne[0], nb = n_in / QK;
	int t0 = j->nt * ith / nth, t1 = j->nt * (ith + 1) / nth;
	for (int t = t0; t < t1; t++)
		quant_activation(j->w->type, j->x + (size_t)t * n_in,
				 (struct q8_block *)j->xq + (size_t)t * nb, n_in);
}

static void mm_part(void *a, int ith, int nth)
{
	struct mm_job *j = a;
	int n_in = (int)j->w->ne[0], n_out = (int)j->w->ne[1], nb = n_in / QK;
	size_t rb = quant_row_bytes(j->w->type, (uint64_t)n_in);
	bool tiled = quant_has_dot4(j->w->type);
	const uint8_t *w = j->w->data;
	/* Chunks of 16 rows, dealt out evenly, keep a row's block in cache across tokens. */
	int r0 = (int)((int64_t)n_out * ith / nth), r1 = (int)((int64_t)n_out * (ith + 1) / nth);
	for (int rs = r0; rs < r1; rs += 16) {
		int re = rs + 16 < r1 ? rs + 16 : r1;
		int t = 0;
		/* Eight, then four tokens per pass over a row: each weight block is unpacked once
		 * for all of them. */
		for (; tiled && t + 8 <= j->nt; t += 8) {
			const struct q8_block *xq = j->xq + (size_t)t * nb;
			for (int r = rs; r < re; r++) {
				float o[8];
				quant_dot8(j->w->type, w + (size_t)r * rb, xq, (size_t)nb, n_in, o);
				for (int i = 0; i < 8; i++)
					j->y[(size_t)(t + i) * n_out + r] = o[i];
			}
		}
		for (; tiled && t + 4 <= j->nt; t += 4) {
			const struct q8_block *xq = j->xq + (size_t)t * nb;
			int r = rs;
			for (; r + 2 <= re; r += 2) {   /* two rows at a time share the loads */
				float o0[4], o1[4];
				quant_dot2x4(j->w->type, w + (size_t)r * rb, w + (size_t)(r + 1) * rb, xq,
					     (size_t)nb, n_in, o0, o1);
				for (int i = 0; i < 4; i++) {
					j->y[(size_t)(t + i) * n_out + r] = o0[i];
					j->y[(size_t)(t + i) * n_out + r + 1] = o1[i];
				}
			}
			for (; r < re; r++) {
				float o[4];
				quant_dot4(j->w->type, w + (size_t)r * rb, xq, (size_t)nb, n_in, o);
				for (int i = 0; i < 4; i++)
					j->y[(size_t)(t + i) * n_out + r] = o[i];
			}
		}
		for (; t < j->nt; t++)
			for (int r = rs; r < re; r++)
				j->y[(size_t)t * n_out + r] = quant_dot(j->w->type,
					(const uint8_t *)j->w->data + (size_t)r * rb,
					j->x + (size_t)t * n_in, j->xq + (size_t)t * nb, n_in);
	}
}

/* The activation form a weight type's dot product reads: 0 floats, 1 Q8_0-style, 2 Q8_K. */
static int act_form(uint32_t type)
{
	return quant_is_k(type) ? 2 : quant_wants_q8(type) ? 1 : 0;
}

void ops_matmul(struct pool *p, const struct gguf_tensor *w, const float *x, struct q8_block *xq,
		float *y, int nt)
{
	ops_matmul_after(p, w, NULL, x, xq, y, nt);
}

void ops_matmul_after(struct pool *p, const struct gguf_tensor *w, const struct gguf_tensor *prev,
		      const float *x, struct q8_block *xq, float *y, int nt)
{
	struct mm_job j = { w, x, xq, y, nt };
	if (quant_wants_q8(w->type) && !(prev && act_form(prev->type) == act_form(w->type))) {
		if (nt > 1)
			pool_run(p, mm_quant_part, &j);
		else
			mm_quant_part(&j, 0, 1);
	}
	pool_run(p, mm_part, &j);
}

void ops_get_row(const struct gguf_tensor *w, uint64_t r, float *y)
{
	size_t rb = quant_row_bytes(w->type, w->ne[0]);
	quant_dequant(w->type, (const uint8_t *)w->data + r * rb, y, (int)w->ne[0]);
}

void ops_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	float scale = (float)(1.0 / sqrt(ss / n + eps));
	for (int i = 0; i < n; i++)
		y[i] = x[i] * scale * w[i];
}

void ops_rope(float *v, int n_rot, int pos, float base, int neox, const float *ff)
{
	int half = n_rot / 2;
	/* theta_i = pos * base^(-2i/n_rot), by repeated multiplication in float as llama.cpp
	 * computes it: the angles then round alike, and so do the cached keys. */
	float step = powf(base, -2.0f / (float)n_rot), th = (float)pos;
	for (int i = 0; i < half; i++, th *= step) {
		float theta = ff ? th / ff[i] : th;
		float c = cosf(theta), s = sinf(theta);
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		float x0 = v[a], x1 = v[b];
		v[a] = x0 * c - x1 * s;
		v[b] = x0 * s + x1 * c;
	}
}

void ops_softmax(float *x, int n)
{
	float mx = -INFINITY;
	for (int i = 0; i < n; i++)
		mx = fmaxf(mx, x[i]);
	double sum = 0;
	for (int i = 0; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	float inv = (float)(1.0 / sum);
	for (int i = 0; i < n; i++)
		x[i] *= inv;
}

float ops_silu(float x) { return x / (1.0f + expf(-x)); }
