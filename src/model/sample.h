/* SPDX-License-Identifier: Apache-2.0 */
/* sample.h - choosing the next token from logits: greedy, or temperature + top-p with a seed. */
#ifndef K8_SAMPLE_H
#define K8_SAMPLE_H

#include <stdint.h>

struct sampler {
	float temperature;    /* <= 0: greedy */
	float top_p;          /* (0, 1]; 1 keeps every token */
	uint64_t rng;         /* state, seeded by sample_init */
	int n_vocab;
	struct sample_cand { float p; int32_t id; } *cand;   /* scratch, n_vocab entries */
};

int sample_init(struct sampler *s, int n_vocab, float temperature, float top_p, uint64_t seed);
void sample_free(struct sampler *s);
/* The chosen token. logits are not modified. */
int32_t sample_next(struct sampler *s, const float *logits);
/* Index of the largest logit (lowest index on ties). */
int32_t sample_argmax(const float *logits, int n);

#endif
