/* SPDX-License-Identifier: Apache-2.0 */
/* sample.c - greedy and temperature / nucleus (top-p) sampling with a seeded generator
 * (splitmix64), so that a seed reproduces a generation on the same build. */
#include "model/sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int sample_init(struct sampler *s, int n_vocab, float temperature, float top_p, uint64_t seed)
{
	s->temperature = temperature;
	s->top_p = top_p > 0 && top_p <= 1 ? top_p : 1;
	s->rng = seed;
	s->n_vocab = n_vocab;
	s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
	return s->cand ? 0 : -ENOMEM;
}

void sample_free(struct sampler *s)
{
	free(s->cand);
	s->cand = NULL;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int32_t sample_argmax(const float *logits, int n)
{
	int32_t best = 0;
	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

static int cand_desc(const void *a, const void *b)
{
	const struct sample_cand *x = a, *y = b;
	return (x->p < y->p) - (x->p > y->p);
}

int32_t sample_next(struct sampler *s, const float *logits)
{
	int n = s->n_vocab;
	if (s->temperature <= 0)
		return sample_argmax(logits, n);
	float mx = logits[sample_argmax(logits, n)];
	double sum = 0;
	for (int i = 0; i < n; i++) {
		s->cand[i].id = i;
		s->cand[i].p = expf((logits[i] - mx) / s->temperature);
		sum += s->cand[i].p;
	}
	int keep = n;
	if (s->top_p < 1) {
		qsort(s->cand, (size_t)n, sizeof(*s->cand), cand_desc);
		double acc = 0;
		for (int i = 0; i < n; i++) {
			acc += s->cand[i].p / sum;
			if (acc >= s->top_p) {
				keep = i + 1;
				break;
			}
		}
		sum = 0;
		for (int i = 0; i < keep; i++)
			sum += s->cand[i].p;
	}
	double r = (double)(splitmix(&s->rng) >> 11) / (double)(1ull << 53) * sum;
	for (int i = 0; i < keep; i++) {
		r -= s->cand[i].p;
		if (r <= 0)
			return s->cand[i].id;
	}
	return s->cand[keep - 1].id;
}
