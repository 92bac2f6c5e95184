/* SPDX-License-Identifier: Apache-2.0 */
/* quant.c - ggml block formats (the published GGUF layouts), scalar reference kernels and the
 * AVX2/FMA/F16C kernels, chosen once at run time.
 *
 * Block layouts (little endian, d/dmin are IEEE half floats):
 *   Q4_0  32 elts, 18 B: d, qs[16]            x = d * (nibble - 8); low nibbles are 0..15,
 *                                              high nibbles 16..31
 *   Q5_0  32 elts, 22 B: d, qh[4], qs[16]     as Q4_0 with a fifth bit from qh (bit j for
 *                                              element j), x = d * (q - 16)
 *   Q8_0  32 elts, 34 B: d, qs[32] (int8)     x = d * q
 *   Q4_K 256 elts, 144 B: d, dmin, scales[12], qs[128]: 8 sub-blocks of 32 with 6-bit
 *         scale and min; x = d*sc*q - dmin*m. Chunk j of 32 bytes holds sub-block 2j in its
 *         low nibbles and 2j+1 in its high nibbles.
 *   Q5_K 256 elts, 176 B: d, dmin, scales[12], qh[32], qs[128]: Q4_K plus a fifth bit,
 *         bit 2j (low) / 2j+1 (high) of qh[l].
 *   Q6_K 256 elts, 210 B: ql[128], qh[64], scales[16] (int8), d: 16 sub-blocks of 16,
 *         x = d * sc * (q - 32), q = 4 low bits from ql and 2 high bits from qh.
 * The dot products multiply weight blocks with 8-bit activation blocks of 32 (struct
 * q8_block) in integers and scale per block in float.
 */
#include "model/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cpuid.h>
#include <immintrin.h>

struct blk_q4_0 { uint16_t d; uint8_t qs[16]; };
struct blk_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct blk_q8_0 { uint16_t d; int8_t qs[32]; };
struct blk_q4_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct blk_q5_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct blk_q6_k { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };

_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0");
_Static_assert(sizeof(struct blk_q5_0) == 22, "q5_0");
_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0");
_Static_assert(sizeof(struct blk_q4_k) == 144, "q4_k");
_Static_assert(sizeof(struct blk_q5_k) == 176, "q5_k");
_Static_assert(sizeof(struct blk_q6_k) == 210, "q6_k");

static const struct { uint32_t type, blck, bytes; const char *name; } types[] = {
	{ GT_F32, 1, 4, "F32" }, { GT_F16, 1, 2, "F16" }, { GT_BF16, 1, 2, "BF16" },
	{ GT_Q4_0, 32, 18, "Q4_0" }, { GT_Q5_0, 32, 22, "Q5_0" }, { GT_Q8_0, 32, 34, "Q8_0" },
	{ GT_Q4_K, 256, 144, "Q4_K" }, { GT_Q5_K, 256, 176, "Q5_K" }, { GT_Q6_K, 256, 210, "Q6_K" },
};

static int type_idx(uint32_t t)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (types[i].type == t)
			return (int)i;
	return -1;
}

bool quant_supported(uint32_t t) { return type_idx(t) >= 0; }
uint32_t quant_blck(uint32_t t) { int i = type_idx(t); return i < 0 ? 0 : types[i].blck; }
uint32_t quant_bytes(uint32_t t) { int i = type_idx(t); return i < 0 ? 0 : types[i].bytes; }

const char *quant_name(uint32_t t)
{
	static __thread char buf[24];
	int i = type_idx(t);
	if (i >= 0)
		return types[i].name;
	snprintf(buf, sizeof(buf), "type %u", t);
	return buf;
}

bool quant_wants_q8(uint32_t t) { return t != GT_F32 && t != GT_F16 && t != GT_BF16; }

/* ---- half and bfloat16 ---- */

float quant_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
	if (exp == 0) {
		if (man == 0) {
			u = sign;
		} else {  /* subnormal: normalise */
			exp = 127 - 15 + 1;
			while (!(man & 0x400)) {
				man <<= 1;
				exp--;
			}
			u = sign | (exp << 23) | ((man & 0x3ff) << 13);
		}
	} else if (exp == 31) {
		u = sign | 0x7f800000 | (man << 13);
	} else {
		u = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t quant_f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t sign = (u >> 16) & 0x8000;
	int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
	uint32_t man = u & 0x7fffff;
	if (((u >> 23) & 0xff) == 0xff)
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		if (exp < -10)
			return (uint16_t)sign;
		man |= 0x800000;
		uint32_t shift = (uint32_t)(14 - exp);
		uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
		if (rem > mid || (rem == mid && (half & 1)))
			half++;
		return (uint16_t)(sign | half);
	}
	uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
		half++;   /* may carry into the exponent, which is the right rounding */
	return (uint16_t)half;
}

static inline float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

#define F16(x) quant_f16_to_f32(x)

static inline void k_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* ---- dequantization (reference) ---- */

void quant_dequant(uint32_t type, const void *row, float *y, int n)
{
	switch (type) {
	case GT_F32:
		memcpy(y, row, (size_t)n * 4);
		return;
	case GT_F16: {
		const uint16_t *h = row;
		for (int i = 0; i < n; i++)
			y[i] = F16(h[i]);
		return;
	}
	case GT_BF16: {
		const uint16_t *h = row;
		for (int i = 0; i < n; i++)
			y[i] = bf16_to_f32(h[i]);
		return;
	}
	case GT_Q4_0:
		for (const struct blk_q4_0 *b = row; n > 0; n -= 32, b++, y += 32) {
			float d = F16(b->d);
			for (int j = 0; j < 16; j++) {
				y[j] = d * ((b->qs[j] & 0xf) - 8);
				y[j + 16] = d * ((b->qs[j] >> 4) - 8);
			}
		}
		return;
	case GT_Q5_0:
		for (const struct blk_q5_0 *b = row; n > 0; n -= 32, b++, y += 32) {
			float d = F16(b->d);
			uint32_t qh;
			memcpy(&qh, b->qh, 4);
			for (int j = 0; j < 16; j++) {
				int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
				y[j] = d * (((b->qs[j] & 0xf) | (h0 << 4)) - 16);
				y[j + 16] = d * (((b->qs[j] >> 4) | (h1 << 4)) - 16);
			}
		}
		return;
	case GT_Q8_0:
		for (const struct blk_q8_0 *b = row; n > 0; n -= 32, b++, y += 32) {
			float d = F16(b->d);
			for (int j = 0; j < 32; j++)
				y[j] = d * b->qs[j];
		}
		return;
	case GT_Q4_K:
		for (const struct blk_q4_k *b = row; n > 0; n -= 256, b++) {
			float d = F16(b->d), dmin = F16(b->dmin);
			for (int j = 0; j < 4; j++) {
				int sc, m;
				const uint8_t *q = b->qs + 32 * j;
				k_scale_min(2 * j, b->scales, &sc, &m);
				for (int l = 0; l < 32; l++)
					*y++ = d * sc * (q[l] & 0xf) - dmin * m;
				k_scale_min(2 * j + 1, b->scales, &sc, &m);
				for (int l = 0; l < 32; l++)
					*y++ = d * sc * (q[l] >> 4) - dmin * m;
			}
		}
		return;
	case GT_Q5_K:
		for (const struct blk_q5_k *b = row; n > 0; n -= 256, b++) {
			float d = F16(b->d), dmin = F16(b->dmin);
			for (int j = 0; j < 4; j++) {
				int sc, m;
				const uint8_t *q = b->qs + 32 * j;
				k_scale_min(2 * j, b->scales, &sc, &m);
				for (int l = 0; l < 32; l++)
					*y++ = d * sc * ((q[l] & 0xf) + (((b->qh[l] >> (2 * j)) & 1) << 4)) - dmin * m;
				k_scale_min(2 * j + 1, b->scales, &sc, &m);
				for (int l = 0; l < 32; l++)
					*y++ = d * sc * ((q[l] >> 4) + (((b->qh[l] >> (2 * j + 1)) & 1) << 4)) - dmin * m;
			}
		}
		return;
	case GT_Q6_K:
		for (const struct blk_q6_k *b = row; n > 0; n -= 256, b++) {
			float d = F16(b->d);
			const uint8_t *ql = b->ql, *qh = b->qh;
			const int8_t *sc = b->scales;
			for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8)
				for (int l = 0; l < 32; l++) {
					int is = l / 16;
					int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
					int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
					int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
					int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
					y[l] = d * sc[is] * q1;
					y[l + 32] = d * sc[is + 2] * q2;
					y[l + 64] = d * sc[is + 4] * q3;
					y[l + 96] = d * sc[is + 6] * q4;
				}
		}
		return;
	}
}

/* ---- activation quantization ---- */

static void q8_scalar(const float *x, struct q8_block *y, int n)
{
	for (int b = 0; b < n / QK; b++, x += QK) {
		float amax = 0;
		for (int j = 0; j < QK; j++)
			if (fabsf(x[j]) > amax)   /* a comparison, not fmaxf: this loop is hot */
				amax = fabsf(x[j]);
		/* As llama.cpp's quantize_row_q8_0: the multiplier is 127/amax, rounding is to
		 * nearest even, and the block's scale is kept as a half float. */
		float d = quant_f16_to_f32(quant_f32_to_f16(amax / 127)), id = amax ? 127 / amax : 0;
		int sum = 0;
		for (int j = 0; j < QK; j++) {
			int q = (int)lrintf(x[j] * id);
			y[b].qs[j] = (int8_t)q;
			sum += q;
		}
		y[b].d = d;
		y[b].s = d * (float)sum;
	}
}

void quant_q8(const float *x, struct q8_block *y, int n)
{
	q8_scalar(x, y, n);
}

/* llama.cpp's rounding: the largest-magnitude value maps to -127, the rest clamp at 127. */
void quant_q8k(const float *x, struct q8k_block *y, int n)
{
	for (int b = 0; b < n / QK_K; b++, x += QK_K) {
		float amax = 0, max = 0;
		for (int j = 0; j < QK_K; j++)
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		if (amax == 0) {
			memset(&y[b], 0, sizeof(y[b]));
			continue;
		}
		float iscale = -127.f / max;
		for (int j = 0; j < QK_K; j++) {
			long v = lrintf(iscale * x[j]);
			y[b].qs[j] = (int8_t)(v > 127 ? 127 : v);
		}
		for (int j = 0; j < QK_K / 16; j++) {
			int s = 0;
			for (int k = 0; k < 16; k++)
				s += y[b].qs[16 * j + k];
			y[b].bsums[j] = (int16_t)s;
		}
		y[b].d = 1 / iscale;
	}
}

bool quant_is_k(uint32_t t) { return t == GT_Q4_K || t == GT_Q5_K || t == GT_Q6_K; }

void quant_activation(uint32_t type, const float *x, struct q8_block *xq, int n)
{
	if (quant_is_k(type))
		quant_q8k(x, (struct q8k_block *)(void *)xq, n);
	else if (quant_wants_q8(type))
		quant_q8(x, xq, n);
}

/* ---- scalar dot products ---- */

static int dot_i8(const int8_t *a, const int8_t *b, int n)
{
	int s = 0;
	for (int i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

float quant_dot_scalar(uint32_t type, const void *row, const float *x, const struct q8_block *xq, int n)
{
	float sum = 0;
	int8_t w[QK];
	switch (type) {
	case GT_F32: {
		const float *r = row;
		for (int i = 0; i < n; i++)
			sum += r[i] * x[i];
		return sum;
	}
	case GT_F16: {
		const uint16_t *r = row;
		for (int i = 0; i < n; i++)
			sum += F16(r[i]) * x[i];
		return sum;
	}
	case GT_BF16: {
		const uint16_t *r = row;
		for (int i = 0; i < n; i++)
			sum += bf16_to_f32(r[i]) * x[i];
		return sum;
	}
	case GT_Q4_0:
		for (const struct blk_q4_0 *b = row; n > 0; n -= 32, b++, xq++) {
			for (int j = 0; j < 16; j++) {
				w[j] = (int8_t)((b->qs[j] & 0xf) - 8);
				w[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
			}
			sum += F16(b->d) * xq->d * (float)dot_i8(w, xq->qs, 32);
		}
		return sum;
	case GT_Q5_0:
		for (const struct blk_q5_0 *b = row; n > 0; n -= 32, b++, xq++) {
			uint32_t qh;
			memcpy(&qh, b->qh, 4);
			for (int j = 0; j < 16; j++) {
				w[j] = (int8_t)(((b->qs[j] & 0xf) | (((qh >> j) & 1) << 4)) - 16);
				w[j + 16] = (int8_t)(((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
			}
			sum += F16(b->d) * xq->d * (float)dot_i8(w, xq->qs, 32);
		}
		return sum;
	case GT_Q8_0:
		for (const struct blk_q8_0 *b = row; n > 0; n -= 32, b++, xq++)
			sum += F16(b->d) * xq->d * (float)dot_i8(b->qs, xq->qs, 32);
		return sum;
	case GT_Q4_K:
	case GT_Q5_K: {
		const struct q8k_block *y = (const void *)xq;
		for (; n > 0; n -= 256, y++) {
			const uint8_t *scales, *qs, *qh = NULL;
			float d, dmin;
			if (type == GT_Q4_K) {
				const struct blk_q4_k *b = row;
				d = F16(b->d); dmin = F16(b->dmin); scales = b->scales; qs = b->qs;
				row = b + 1;
			} else {
				const struct blk_q5_k *b = row;
				d = F16(b->d); dmin = F16(b->dmin); scales = b->scales; qs = b->qs; qh = b->qh;
				row = b + 1;
			}
			int sumi = 0, summ = 0;
			for (int sb = 0; sb < 8; sb++) {
				int sc, m, j = sb / 2, shift = (sb & 1) * 4;
				k_scale_min(sb, scales, &sc, &m);
				for (int l = 0; l < 32; l++) {
					int q = (qs[32 * j + l] >> shift) & 0xf;
					if (qh)
						q |= ((qh[l] >> sb) & 1) << 4;
					w[l] = (int8_t)q;
				}
				sumi += sc * dot_i8(w, y->qs + 32 * sb, 32);
				summ += m * (y->bsums[2 * sb] + y->bsums[2 * sb + 1]);
			}
			sum += d * y->d * (float)sumi - dmin * y->d * (float)summ;
		}
		return sum;
	}
	case GT_Q6_K: {
		const struct q8k_block *y = (const void *)xq;
		for (const struct blk_q6_k *b = row; n > 0; n -= 256, b++, y++) {
			int8_t v[256];
			for (int half = 0; half < 2; half++) {
				const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
				int8_t *o = v + 128 * half;
				for (int l = 0; l < 32; l++) {
					o[l] = (int8_t)(((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32);
					o[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
					o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
					o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
				}
			}
			int sumi = 0;
			for (int k = 0; k < 16; k++)
				sumi += b->scales[k] * dot_i8(v + 16 * k, y->qs + 16 * k, 16);
			sum += F16(b->d) * y->d * (float)sumi;
		}
		return sum;
	}
	}
	return 0;
}

/* ---- AVX2 / FMA / F16C ---- */

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum_ps(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Sum of signed byte products in 8 int32 lanes: w signed, x signed. */
AVX2 static inline __m256i dot_s8(__m256i w, __m256i x)
{
	__m256i ax = _mm256_sign_epi8(w, w);
	__m256i sx = _mm256_sign_epi8(x, w);
	return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sx), _mm256_set1_epi16(1));
}

/* Same with w unsigned (0..63). */
AVX2 static inline __m256i dot_u8(__m256i w, __m256i x)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

AVX2 static inline float f16c(uint16_t h)
{
	return _cvtsh_ss(h);
}

/* Expand 32 bits into 32 bytes of 0xff where the bit is set. */
AVX2 static inline __m256i bits_to_bytes(uint32_t x)
{
	const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
						 0x0202020202020202, 0x0303030303030303);
	__m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
	const __m256i bit = _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeULL);
	b = _mm256_or_si256(b, bit);
	return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

AVX2 float quant_dot_avx2(uint32_t type, const void *row, const float *x, const struct q8_block *xq, int n)
{
	__m256 acc = _mm256_setzero_ps();
	const __m256i m4 = _mm256_set1_epi8(0xf);
	switch (type) {
	case GT_F32: {
		const float *r = row;
		__m256 a2 = _mm256_setzero_ps();
		int i = 0;
		for (; i + 16 <= n; i += 16) {
			acc = _mm256_fmadd_ps(_mm256_loadu_ps(r + i), _mm256_loadu_ps(x + i), acc);
			a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r + i + 8), _mm256_loadu_ps(x + i + 8), a2);
		}
		float s = hsum_ps(_mm256_add_ps(acc, a2));
		for (; i < n; i++)
			s += r[i] * x[i];
		return s;
	}
	case GT_F16:
	case GT_BF16: {
		const uint16_t *r = row;
		int i = 0;
		for (; i + 8 <= n; i += 8) {
			__m128i h = _mm_loadu_si128((const __m128i *)(r + i));
			__m256 w = type == GT_F16 ? _mm256_cvtph_ps(h)
				: _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
			acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + i), acc);
		}
		float s = hsum_ps(acc);
		for (; i < n; i++)
			s += (type == GT_F16 ? f16c(r[i]) : bf16_to_f32(r[i])) * x[i];
		return s;
	}
	case GT_Q4_0:
		for (const struct blk_q4_0 *b = row; n > 0; n -= 32, b++, xq++) {
			__m128i q = _mm_loadu_si128((const __m128i *)b->qs);
			__m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0xf)),
						     _mm_and_si128(q, _mm_set1_epi8(0xf)));
			w = _mm256_sub_epi8(w, _mm256_set1_epi8(8));
			__m256i p = dot_s8(w, _mm256_loadu_si256((const __m256i *)xq->qs));
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c(b->d) * xq->d), _mm256_cvtepi32_ps(p), acc);
		}
		return hsum_ps(acc);
	case GT_Q5_0:
		for (const struct blk_q5_0 *b = row; n > 0; n -= 32, b++, xq++) {
			__m128i q = _mm_loadu_si128((const __m128i *)b->qs);
			__m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0xf)),
						     _mm_and_si128(q, _mm_set1_epi8(0xf)));
			uint32_t qh;
			memcpy(&qh, b->qh, 4);
			w = _mm256_or_si256(w, _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
			w = _mm256_sub_epi8(w, _mm256_set1_epi8(16));
			__m256i p = dot_s8(w, _mm256_loadu_si256((const __m256i *)xq->qs));
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c(b->d) * xq->d), _mm256_cvtepi32_ps(p), acc);
		}
		return hsum_ps(acc);
	case GT_Q8_0:
		for (const struct blk_q8_0 *b = row; n > 0; n -= 32, b++, xq++) {
			__m256i w = _mm256_loadu_si256((const __m256i *)b->qs);
			__m256i p = dot_s8(w, _mm256_loadu_si256((const __m256i *)xq->qs));
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c(b->d) * xq->d), _mm256_cvtepi32_ps(p), acc);
		}
		return hsum_ps(acc);
	case GT_Q4_K:
	case GT_Q5_K: {
		const struct q8k_block *y = (const void *)xq;
		float mins = 0;
		for (; n > 0; n -= 256, y++) {
			const uint8_t *scales, *qs, *qh = NULL;
			float d, dmin;
			if (type == GT_Q4_K) {
				const struct blk_q4_k *b = row;
				d = f16c(b->d); dmin = f16c(b->dmin); scales = b->scales; qs = b->qs;
				row = b + 1;
			} else {
				const struct blk_q5_k *b = row;
				d = f16c(b->d); dmin = f16c(b->dmin); scales = b->scales; qs = b->qs; qh = b->qh;
				row = b + 1;
			}
			__m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
			__m256i isum = _mm256_setzero_si256();
			int summ = 0;
			for (int j = 0; j < 4; j++) {
				int sc0, m0, sc1, m1;
				k_scale_min(2 * j, scales, &sc0, &m0);
				k_scale_min(2 * j + 1, scales, &sc1, &m1);
				__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
				__m256i lo = _mm256_and_si256(q, m4);
				__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
				if (qh) {
					__m256i b0 = _mm256_set1_epi8((char)(1 << (2 * j)));
					__m256i b1 = _mm256_set1_epi8((char)(2 << (2 * j)));
					__m256i s = _mm256_set1_epi8(0x10);
					lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b0), b0), s));
					hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b1), b1), s));
				}
				/* maddubs pairs, then madd by the sub-block scale: int32 lanes. */
				__m256i x0 = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * j));
				__m256i x1 = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * j + 32));
				__m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_set1_epi16((short)sc0));
				__m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), _mm256_set1_epi16((short)sc1));
				isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
				summ += m0 * (y->bsums[4 * j] + y->bsums[4 * j + 1]) +
					m1 * (y->bsums[4 * j + 2] + y->bsums[4 * j + 3]);
			}
			acc = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(isum), acc);
			mins += dmin * y->d * (float)summ;
		}
		return hsum_ps(acc) - mins;
	}
	case GT_Q6_K: {
		const struct q8k_block *y = (const void *)xq;
		const __m256i m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
		for (const struct blk_q6_k *b = row; n > 0; n -= 256, b++, y++) {
			__m256i isum = _mm256_setzero_si256();
			for (int half = 0; half < 2; half++) {
				const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
				const int8_t *sc = b->scales + 8 * half;
				__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
				__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
				__m256i h = _mm256_loadu_si256((const __m256i *)qh);
				__m256i g[4];
				g[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
						       _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
				g[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
				g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
				g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
						       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
				for (int k = 0; k < 4; k++) {
					__m256i xv = _mm256_loadu_si256((const __m256i *)(y->qs + 128 * half + 32 * k));
					/* int16 lanes 0-7 cover elements 0-15 (scale sc[2k]), 8-15 the rest. */
					__m256i s16 = _mm256_setr_m128i(_mm_set1_epi16(sc[2 * k]), _mm_set1_epi16(sc[2 * k + 1]));
					__m256i pq = _mm256_maddubs_epi16(g[k], xv);
					__m256i pk = _mm256_maddubs_epi16(k32, xv);
					isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_sub_epi16(pq, pk), s16));
				}
			}
			acc = _mm256_fmadd_ps(_mm256_set1_ps(f16c(b->d) * y->d), _mm256_cvtepi32_ps(isum), acc);
		}
		return hsum_ps(acc);
	}
	}
	return 0;
}

/* ---- AVX2, four or eight tokens per weight row (prompt processing) ----
 * The same arithmetic per (row, token) as quant_dot_avx2, in the same order, so the results
 * are bit for bit those of one quant_dot call per token; what changes is that each weight
 * block is loaded and unpacked once for all the tokens of the pass. */

#define INLINE __attribute__((always_inline)) inline
/* Unrolled, the accumulators live in registers instead of on the stack. */
#define UNROLL _Pragma("GCC unroll 8")
#define TMAX 8   /* tokens per pass at most */

/* Block b of a Q4_0/Q5_0/Q8_0 row as 32 signed bytes, and its scale. */
AVX2 static INLINE __m256i q0_unpack(const uint32_t type, const void *row, int b, float *d)
{
	if (type == GT_Q8_0) {
		const struct blk_q8_0 *k = (const struct blk_q8_0 *)row + b;
		*d = f16c(k->d);
		return _mm256_loadu_si256((const __m256i *)k->qs);
	}
	const uint8_t *qs;
	if (type == GT_Q4_0) {
		const struct blk_q4_0 *k = (const struct blk_q4_0 *)row + b;
		*d = f16c(k->d);
		qs = k->qs;
	} else {
		const struct blk_q5_0 *k = (const struct blk_q5_0 *)row + b;
		*d = f16c(k->d);
		qs = k->qs;
	}
	__m128i q = _mm_loadu_si128((const __m128i *)qs);
	__m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0xf)),
				     _mm_and_si128(q, _mm_set1_epi8(0xf)));
	if (type == GT_Q4_0)
		return _mm256_sub_epi8(w, _mm256_set1_epi8(8));
	const struct blk_q5_0 *k = (const struct blk_q5_0 *)row + b;
	uint32_t qh;
	memcpy(&qh, k->qh, 4);
	w = _mm256_or_si256(w, _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
	return _mm256_sub_epi8(w, _mm256_set1_epi8(16));
}

/* NT tokens (4 or 8) against one row. */
AVX2 static INLINE void dotn_q0(const uint32_t type, const int NT, const void *row,
				const struct q8_block *xq, size_t xs, int n, float *out)
{
	__m256 acc[TMAX];
	UNROLL for (int t = 0; t < NT; t++)
		acc[t] = _mm256_setzero_ps();
	for (int b = 0; b < n / 32; b++) {
		float d;
		__m256i w = q0_unpack(type, row, b, &d);
		__m256i aw = _mm256_sign_epi8(w, w);
		UNROLL for (int t = 0; t < NT; t++) {
			const struct q8_block *y = xq + (size_t)t * xs + b;
			__m256i sx = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), w);
			__m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
			acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(p), acc[t]);
		}
	}
	for (int t = 0; t < NT; t++)
		out[t] = hsum_ps(acc[t]);
}

/* Two rows by four tokens: each activation block loaded once for both rows. */
AVX2 static INLINE void dot2x4_q0(const uint32_t type, const void *row0, const void *row1,
				  const struct q8_block *xq, size_t xs, int n, float *out0, float *out1)
{
	__m256 a0[4], a1[4];
	UNROLL for (int t = 0; t < 4; t++)
		a0[t] = a1[t] = _mm256_setzero_ps();
	for (int b = 0; b < n / 32; b++) {
		float d0, d1;
		__m256i w0 = q0_unpack(type, row0, b, &d0), w1 = q0_unpack(type, row1, b, &d1);
		__m256i aw0 = _mm256_sign_epi8(w0, w0), aw1 = _mm256_sign_epi8(w1, w1);
		UNROLL for (int t = 0; t < 4; t++) {
			const struct q8_block *y = xq + (size_t)t * xs + b;
			__m256i x = _mm256_loadu_si256((const __m256i *)y->qs);
			__m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(aw0, _mm256_sign_epi8(x, w0)),
						       _mm256_set1_epi16(1));
			__m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(aw1, _mm256_sign_epi8(x, w1)),
						       _mm256_set1_epi16(1));
			a0[t] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * y->d), _mm256_cvtepi32_ps(p0), a0[t]);
			a1[t] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * y->d), _mm256_cvtepi32_ps(p1), a1[t]);
		}
	}
	for (int t = 0; t < 4; t++) {
		out0[t] = hsum_ps(a0[t]);
		out1[t] = hsum_ps(a1[t]);
	}
}

AVX2 static INLINE void dotn_q45k(const uint32_t type, const int NT, const void *row,
				  const struct q8_block *xq, size_t xs, int n, float *out)
{
	const __m256i m4 = _mm256_set1_epi8(0xf);
	__m256 acc[TMAX];
	float mins[TMAX];
	UNROLL for (int t = 0; t < NT; t++) {
		acc[t] = _mm256_setzero_ps();
		mins[t] = 0;
	}
	for (int sb = 0; sb < n / 256; sb++) {
		const uint8_t *scales, *qs, *qh = NULL;
		float d, dmin;
		if (type == GT_Q4_K) {
			const struct blk_q4_k *b = (const struct blk_q4_k *)row + sb;
			d = f16c(b->d); dmin = f16c(b->dmin); scales = b->scales; qs = b->qs;
		} else {
			const struct blk_q5_k *b = (const struct blk_q5_k *)row + sb;
			d = f16c(b->d); dmin = f16c(b->dmin); scales = b->scales; qs = b->qs; qh = b->qh;
		}
		const struct q8k_block *y[TMAX];
		UNROLL for (int t = 0; t < NT; t++)
			y[t] = (const struct q8k_block *)(const void *)(xq + (size_t)t * xs) + sb;
		int sc[8], m[8];
		for (int j = 0; j < 8; j++)
			k_scale_min(j, scales, &sc[j], &m[j]);
		__m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
		__m256i isum[TMAX];
		int summ[TMAX];
		UNROLL for (int t = 0; t < NT; t++) {
			isum[t] = _mm256_setzero_si256();
			summ[t] = 0;
		}
		for (int j = 0; j < 4; j++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			if (qh) {
				__m256i b0 = _mm256_set1_epi8((char)(1 << (2 * j)));
				__m256i b1 = _mm256_set1_epi8((char)(2 << (2 * j)));
				__m256i s = _mm256_set1_epi8(0x10);
				lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b0), b0), s));
				hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b1), b1), s));
			}
			__m256i s0 = _mm256_set1_epi16((short)sc[2 * j]), s1 = _mm256_set1_epi16((short)sc[2 * j + 1]);
			UNROLL for (int t = 0; t < NT; t++) {
				__m256i x0 = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 64 * j));
				__m256i x1 = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 64 * j + 32));
				__m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), s0);
				__m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), s1);
				isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
				const int16_t *bs = y[t]->bsums + 4 * j;
				summ[t] += m[2 * j] * (bs[0] + bs[1]) + m[2 * j + 1] * (bs[2] + bs[3]);
			}
		}
		UNROLL for (int t = 0; t < NT; t++) {
			acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y[t]->d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
			mins[t] += dmin * y[t]->d * (float)summ[t];
		}
	}
	for (int t = 0; t < NT; t++)
		out[t] = hsum_ps(acc[t]) - mins[t];
}

AVX2 static INLINE void dotn_q6k(const int NT, const void *row, const struct q8_block *xq,
				 size_t xs, int n, float *out)
{
	const __m256i m4 = _mm256_set1_epi8(0xf), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
	__m256 acc[TMAX];
	UNROLL for (int t = 0; t < NT; t++)
		acc[t] = _mm256_setzero_ps();
	for (int sb = 0; sb < n / 256; sb++) {
		const struct blk_q6_k *b = (const struct blk_q6_k *)row + sb;
		const struct q8k_block *y[TMAX];
		UNROLL for (int t = 0; t < NT; t++)
			y[t] = (const struct q8k_block *)(const void *)(xq + (size_t)t * xs) + sb;
		__m256i isum[TMAX];
		UNROLL for (int t = 0; t < NT; t++)
			isum[t] = _mm256_setzero_si256();
		for (int half = 0; half < 2; half++) {
			const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
			const int8_t *sc = b->scales + 8 * half;
			__m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
			__m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
			__m256i h = _mm256_loadu_si256((const __m256i *)qh);
			__m256i g[4];
			g[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
					       _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
			g[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
			g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
			g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
					       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
			for (int k = 0; k < 4; k++) {
				__m256i s16 = _mm256_setr_m128i(_mm_set1_epi16(sc[2 * k]), _mm_set1_epi16(sc[2 * k + 1]));
				UNROLL for (int t = 0; t < NT; t++) {
					__m256i xv = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 128 * half + 32 * k));
					__m256i pq = _mm256_maddubs_epi16(g[k], xv);
					__m256i pk = _mm256_maddubs_epi16(k32, xv);
					isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_sub_epi16(pq, pk), s16));
				}
			}
		}
		float d = f16c(b->d);
		UNROLL for (int t = 0; t < NT; t++)
			acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y[t]->d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
	}
	for (int t = 0; t < NT; t++)
		out[t] = hsum_ps(acc[t]);
}

AVX2 void quant_dot2x4_avx2(uint32_t type, const void *row0, const void *row1,
			    const struct q8_block *xq, size_t xs, int n, float *out0, float *out1)
{
	switch (type) {
	case GT_Q4_0: dot2x4_q0(GT_Q4_0, row0, row1, xq, xs, n, out0, out1); return;
	case GT_Q5_0: dot2x4_q0(GT_Q5_0, row0, row1, xq, xs, n, out0, out1); return;
	case GT_Q8_0: dot2x4_q0(GT_Q8_0, row0, row1, xq, xs, n, out0, out1); return;
	}
	quant_dot4_avx2(type, row0, xq, xs, n, out0);
	quant_dot4_avx2(type, row1, xq, xs, n, out1);
}

/* NT = 4 or 8 (a constant at each call, so each kernel is unrolled for it). */
AVX2 static INLINE void dotn(uint32_t type, const int NT, const void *row, const struct q8_block *xq,
			     size_t xs, int n, float *out)
{
	switch (type) {
	case GT_Q4_0: dotn_q0(GT_Q4_0, NT, row, xq, xs, n, out); return;
	case GT_Q5_0: dotn_q0(GT_Q5_0, NT, row, xq, xs, n, out); return;
	case GT_Q8_0: dotn_q0(GT_Q8_0, NT, row, xq, xs, n, out); return;
	case GT_Q4_K: dotn_q45k(GT_Q4_K, NT, row, xq, xs, n, out); return;
	case GT_Q5_K: dotn_q45k(GT_Q5_K, NT, row, xq, xs, n, out); return;
	case GT_Q6_K: dotn_q6k(NT, row, xq, xs, n, out); return;
	}
	for (int t = 0; t < NT; t++)
		out[t] = 0;
}

AVX2 void quant_dot4_avx2(uint32_t type, const void *row, const struct q8_block *xq, size_t xs,
			  int n, float *out)
{
	dotn(type, 4, row, xq, xs, n, out);
}

AVX2 void quant_dot8_avx2(uint32_t type, const void *row, const struct q8_block *xq, size_t xs,
			  int n, float *out)
{
	dotn(type, 8, row, xq, xs, n, out);
}

AVX2 static void axpy_f16_avx2(float *y, float a, const uint16_t *x, int n)
{
	__m256 va = _mm256_set1_ps(a);
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, xv, _mm256_loadu_ps(y + i)));
	}
	for (; i < n; i++)
		y[i] += a * f16c(x[i]);
}

AVX2 static void to_f16_avx2(const float *x, uint16_t *y, int n)
{
	int i = 0;
	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0));
	for (; i < n; i++)
		y[i] = quant_f32_to_f16(x[i]);
}

/* Rounds the first n - n % 8 values; returns how many it did. */
AVX2 static int round_f16_avx2(const float *x, float *y, int n)
{
	int i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0)));
	return i;
}

/* ---- dispatch ---- */

static int use_avx2 = -1;   /* -1: not decided yet */

bool quant_have_avx2(void)
{
	unsigned a, b, c, d;
	__builtin_cpu_init();
	/* F16C is CPUID.1:ECX bit 29 (not every compiler's __builtin_cpu_supports knows it). */
	bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

void quant_force_scalar(bool on)
{
	use_avx2 = on ? 0 : quant_have_avx2();
}

void quant_init(void)
{
	if (use_avx2 < 0) {
		const char *e = getenv("KOSA8_MODEL_SCALAR");
		quant_force_scalar(e && *e && strcmp(e, "0"));
	}
}

bool quant_using_avx2(void)
{
	quant_init();
	return use_avx2 > 0;
}

float quant_dot(uint32_t type, const void *row, const float *x, const struct q8_block *xq, int n)
{
	return use_avx2 ? quant_dot_avx2(type, row, x, xq, n) : quant_dot_scalar(type, row, x, xq, n);
}

void quant_axpy_f16(float *y, float a, const uint16_t *x, int n)
{
	if (use_avx2 > 0) {
		axpy_f16_avx2(y, a, x, n);
		return;
	}
	for (int i = 0; i < n; i++)
		y[i] += a * F16(x[i]);
}

void quant_to_f16(const float *x, uint16_t *y, int n)
{
	if (use_avx2 > 0) {
		to_f16_avx2(x, y, n);
		return;
	}
	for (int i = 0; i < n; i++)
		y[i] = quant_f32_to_f16(x[i]);
}

void quant_round_f16(const float *x, float *y, int n)
{
	int i = 0;
	if (use_avx2 > 0)
		i = round_f16_avx2(x, y, n);
	for (; i < n; i++)
		y[i] = F16(quant_f32_to_f16(x[i]));
}

bool quant_has_dot4(uint32_t type)
{
	return use_avx2 > 0 && quant_wants_q8(type) && quant_supported(type);
}

void quant_dot4(uint32_t type, const void *row, const struct q8_block *xq, size_t xs, int n,
		float *out)
{
	quant_dot4_avx2(type, row, xq, xs, n, out);
}

void quant_dot8(uint32_t type, const void *row, const struct q8_block *xq, size_t xs, int n,
		float *out)
{
	quant_dot8_avx2(type, row, xq, xs, n, out);
}

void quant_dot2x4(uint32_t type, const void *row0, const void *row1, const struct q8_block *xq,
		  size_t xs, int n, float *out0, float *out1)
{
	quant_dot2x4_avx2(type, row0, row1, xq, xs, n, out0, out1);
}
