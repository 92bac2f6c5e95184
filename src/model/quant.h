/* SPDX-License-Identifier: Apache-2.0 */
/* quant.h - ggml tensor types: block layouts, dequantization and dot products.
 *
 * Dot products take the activation twice: as floats (for F32/F16/BF16 weights) and quantized
 * to 8 bits in blocks of 32 (struct q8_block, for the quantized weights), so that quantized
 * weights are multiplied with integer arithmetic, as llama.cpp does. Each kernel has a scalar
 * reference and an AVX2/FMA/F16C version chosen once at run time.
 */
#ifndef K8_QUANT_H
#define K8_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ggml_type {
	GT_F32 = 0, GT_F16 = 1, GT_Q4_0 = 2, GT_Q5_0 = 6, GT_Q8_0 = 8,
	GT_Q4_K = 12, GT_Q5_K = 13, GT_Q6_K = 14, GT_BF16 = 30,
};
#define GT_COUNT 40   /* ggml type ids are below this; ours are a subset */

#define QK 32         /* elements per Q4_0/Q5_0/Q8_0 block and per activation block */
#define QK_K 256      /* elements per K-quant super-block */

/* Activation block: d * qs[i] ~ x[i]; s = d * sum(qs) (for the weight types with a min). */
struct q8_block {
	float d;
	float s;
	int8_t qs[QK];
};

/* Activation super-block for the K-quants, as llama.cpp's Q8_K: one scale per 256 and the
 * sums of each 16. Matching llama.cpp's choice here keeps our logits close to its own; it
 * fits in the space of 8 q8_blocks, so one buffer serves both. */
struct q8k_block {
	float d;
	int8_t qs[QK_K];
	int16_t bsums[QK_K / 16];
};
_Static_assert(sizeof(struct q8k_block) <= 8 * sizeof(struct q8_block), "q8k fits in 8 q8 blocks");

bool quant_supported(uint32_t type);
const char *quant_name(uint32_t type);       /* "Q4_K", or "type N" for unknown ones */
uint32_t quant_blck(uint32_t type);          /* elements per block; 0 if unsupported */
uint32_t quant_bytes(uint32_t type);         /* bytes per block; 0 if unsupported */
/* Bytes of a row of n elements (n a multiple of quant_blck). */
static inline size_t quant_row_bytes(uint32_t type, uint64_t n)
{
	return (size_t)(n / quant_blck(type)) * quant_bytes(type);
}

float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);

/* Dequantize one row of n elements. */
void quant_dequant(uint32_t type, const void *row, float *y, int n);
/* Quantize n activations (n % QK == 0) into n/QK blocks. */
void quant_q8(const float *x, struct q8_block *y, int n);
/* Quantize n activations (n % QK_K == 0) into n/QK_K super-blocks. */
void quant_q8k(const float *x, struct q8k_block *y, int n);
/* Does the dot product of `type` rows use the quantized activation, and which form? */
bool quant_wants_q8(uint32_t type);
bool quant_is_k(uint32_t type);
/* Quantize one activation row into the form quant_dot expects for `type`. */
void quant_activation(uint32_t type, const float *x, struct q8_block *xq, int n);
/* dot(row, x) over n elements; x is used for float types, xq for quantized ones (holding
 * q8k_blocks for the K-quants: see quant_activation). */
float quant_dot(uint32_t type, const void *row, const float *x, const struct q8_block *xq, int n);

/* out[t] = dot(row, token t) for 4 tokens whose activations (quant_activation's blocks)
 * start xs q8_blocks apart, reusing each unpacked weight block for the four: prompt
 * processing. Bit for bit four quant_dot calls. Only when quant_has_dot4(type): the
 * quantized types with the AVX2 kernels (the float types and the scalar kernels go token
 * by token through quant_dot). */
bool quant_has_dot4(uint32_t type);
void quant_dot4(uint32_t type, const void *row, const struct q8_block *xq, size_t xs, int n,
		float *out);
void quant_dot4_avx2(uint32_t type, const void *row, const struct q8_block *xq, size_t xs,
		     int n, float *out);
/* The same for 8 tokens. */
void quant_dot8(uint32_t type, const void *row, const struct q8_block *xq, size_t xs, int n,
		float *out);
void quant_dot8_avx2(uint32_t type, const void *row, const struct q8_block *xq, size_t xs,
		     int n, float *out);
/* The same for two rows (each activation block loaded once for both); same condition. */
void quant_dot2x4(uint32_t type, const void *row0, const void *row1, const struct q8_block *xq,
		  size_t xs, int n, float *out0, float *out1);
void quant_dot2x4_avx2(uint32_t type, const void *row0, const void *row1,
		       const struct q8_block *xq, size_t xs, int n, float *out0, float *out1);

/* Attention helpers over half-float rows: y += a * x, and f32 -> f16 conversion. */
void quant_axpy_f16(float *y, float a, const uint16_t *x, int n);
void quant_to_f16(const float *x, uint16_t *y, int n);
/* y = x rounded to the nearest half float (y may be x). */
void quant_round_f16(const float *x, float *y, int n);

/* The two implementations, for tests and benchmarks. quant_dot_avx2 may only be called when
 * quant_have_avx2() is true. */
float quant_dot_scalar(uint32_t type, const void *row, const float *x, const struct q8_block *xq, int n);
float quant_dot_avx2(uint32_t type, const void *row, const float *x, const struct q8_block *xq, int n);
bool quant_have_avx2(void);
/* Choose the kernels once (call before starting threads); true if AVX2 is in use. */
void quant_init(void);
bool quant_using_avx2(void);
/* Force the scalar kernels (KOSA8_MODEL_SCALAR=1 does the same at start-up). */
void quant_force_scalar(bool on);

#endif
