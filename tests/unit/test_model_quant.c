/* SPDX-License-Identifier: Apache-2.0 */
/* test_model_quant.c - quant kernels: hand-built blocks dequantize to the values the GGUF
 * layouts define, and the AVX2 dot products agree with the scalar reference. */
#include <math.h>
#include <stdlib.h>

#include "model/quant.h"
#include "t.h"

static uint32_t rng = 12345;
static uint8_t rnd8(void)
{
	rng = rng * 1103515245u + 12345u;
	return (uint8_t)(rng >> 16);
}

static void test_f16(void)
{
	CHECK(quant_f16_to_f32(0x3c00) == 1.0f);
	CHECK(quant_f16_to_f32(0xc000) == -2.0f);
	CHECK(quant_f16_to_f32(0x0001) == 5.9604645e-08f);   /* smallest subnormal */
	CHECK(isinf(quant_f16_to_f32(0x7c00)));
	CHECK_EQ_INT(quant_f32_to_f16(1.0f), 0x3c00);
	CHECK_EQ_INT(quant_f32_to_f16(65504.0f), 0x7bff);
	CHECK_EQ_INT(quant_f32_to_f16(1e6f), 0x7c00);
	for (uint32_t h = 0; h < 0x7c00; h += 7)   /* round trip of every 7th finite half */
		if (quant_f32_to_f16(quant_f16_to_f32((uint16_t)h)) != h) {
			CHECK_EQ_INT(quant_f32_to_f16(quant_f16_to_f32((uint16_t)h)), h);
			break;
		}
}

static void test_dequant_values(void)
{
	float y[256];
	/* Q8_0: d = 0.5, q = j - 16 */
	uint8_t q8[34] = { 0x00, 0x38 };   /* 0x3800 = 0.5 */
	for (int j = 0; j < 32; j++)
		q8[2 + j] = (uint8_t)(int8_t)(j - 16);
	quant_dequant(GT_Q8_0, q8, y, 32);
	CHECK(y[0] == -8.0f && y[31] == 7.5f);
	/* Q4_0: d = 2, qs[j] = lo j, hi 15 - j: x[j] = 2(j-8), x[j+16] = 2(7-j) */
	uint8_t q4[18] = { 0x00, 0x40 };   /* 0x4000 = 2.0 */
	for (int j = 0; j < 16; j++)
		q4[2 + j] = (uint8_t)(j | ((15 - j) << 4));
	quant_dequant(GT_Q4_0, q4, y, 32);
	CHECK(y[0] == -16.0f && y[15] == 14.0f && y[16] == 14.0f && y[31] == -16.0f);
	/* Q5_0: d = 1, qh bit 0 and bit 16 set, qs = 0: x[0] = 16 - 16 = 0, x[1] = -16, x[16] = 0 */
	uint8_t q5[22] = { 0x00, 0x3c, 0x01, 0x00, 0x01, 0x00 };
	quant_dequant(GT_Q5_0, q5, y, 32);
	CHECK(y[0] == 0.0f && y[1] == -16.0f && y[16] == 0.0f && y[17] == -16.0f);
	/* Q4_K: d = 1, dmin = 0.5, sub-block 0 scale 3 min 2; sub-block 4 scale from the high
	 * bits: scales[8] low nibble 5 | (scales[0] >> 6) << 4 -> 5 + 16 = 21, min 1 + 16 = 17 */
	uint8_t k4[144] = { 0x00, 0x3c, 0x00, 0x38 };
	k4[4 + 0] = 3 | (1 << 6);
	k4[4 + 4] = 2 | (1 << 6);
	k4[4 + 8] = 5 | (1 << 4);
	for (int l = 0; l < 128; l++)
		k4[16 + l] = 0x21;   /* low nibble 1, high nibble 2 */
	quant_dequant(GT_Q4_K, k4, y, 256);
	CHECK(y[0] == 3 * 1 - 0.5f * 2);            /* sub-block 0 */
	CHECK(y[128] == 21 * 1 - 0.5f * 17);        /* sub-block 4, chunk 2 low nibble */
	/* Q6_K: d = 1, scale[0] = 2, ql[0] = 0x1, qh[0] = 0x2 (bits 0-1 = 2): q = 1 | 2<<4 = 33 */
	uint8_t k6[210] = { 0 };
	k6[0] = 0x01;
	k6[128] = 0x02;
	k6[192] = 2;
	k6[208] = 0x00;
	k6[209] = 0x3c;
	quant_dequant(GT_Q6_K, k6, y, 256);
	CHECK(y[0] == 2 * (33 - 32));
	CHECK(y[1] == 2 * (0 - 32));
	/* BF16 */
	uint16_t bf[2] = { 0x3f80, 0xc040 };
	quant_dequant(GT_BF16, bf, y, 2);
	CHECK(y[0] == 1.0f && y[1] == -3.0f);
}

/* Random rows of each type: AVX2 equals scalar; and both equal dot(dequant(row), x) within
 * the activation's quantization error. */
static void test_dot_agree(void)
{
	static const uint32_t types[] = { GT_F32, GT_F16, GT_BF16, GT_Q4_0, GT_Q5_0, GT_Q8_0,
					  GT_Q4_K, GT_Q5_K, GT_Q6_K };
	enum { N = 1024 };
	static float x[N], w[N];
	static struct q8_block xq[N / QK];
	static uint8_t row[N * 4];
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		uint32_t t = types[ti];
		for (int rep = 0; rep < 20; rep++) {
			for (size_t i = 0; i < sizeof(row); i++)
				row[i] = rnd8();
			size_t nb = quant_row_bytes(t, N);
			/* keep half-float scales and float weights finite and modest */
			if (t == GT_F32)
				for (int i = 0; i < N; i++)
					((float *)row)[i] = (float)(rnd8() - 128) / 64;
			else if (t == GT_F16 || t == GT_BF16)
				for (int i = 0; i < N; i++)
					((uint16_t *)row)[i] = t == GT_F16 ? quant_f32_to_f16((float)(rnd8() - 128) / 64)
									 : (uint16_t)(0x3c00 + rnd8());
			else
				for (size_t b = 0; b < nb; b += quant_bytes(t)) {
					size_t off = t == GT_Q6_K ? 208 : 0;
					uint16_t d = quant_f32_to_f16(0.01f + rnd8() / 5000.0f);
					memcpy(row + b + off, &d, 2);
					if (t == GT_Q4_K || t == GT_Q5_K)
						memcpy(row + b + 2, &d, 2);
				}
			for (int i = 0; i < N; i++)
				x[i] = (float)(rnd8() - 128) / 50;
			quant_activation(t, x, xq, N);
			float s = quant_dot_scalar(t, row, x, xq, N);
			quant_dequant(t, row, w, N);
			double exact = 0, mag = 0;
			for (int i = 0; i < N; i++) {
				exact += (double)w[i] * x[i];
				mag += fabs((double)w[i] * x[i]);
			}
			if (!(fabs(s - exact) <= 0.02 * mag + 1e-3)) {
				fprintf(stderr, "%s: scalar %g, exact %g\n", quant_name(t), s, exact);
				CHECK(0);
			}
			if (quant_have_avx2()) {
				float a = quant_dot_avx2(t, row, x, xq, N);
				if (!(fabsf(a - s) <= 1e-4f * (float)mag + 1e-4f)) {
					fprintf(stderr, "%s: avx2 %g, scalar %g\n", quant_name(t), a, s);
					CHECK(0);
				}
			}
			t_pass++;
		}
	}
	if (!quant_have_avx2())
		printf("test_model_quant: no AVX2 on this CPU, only the scalar kernels were checked\n");
}

/* The four- and eight-token kernels (one row, two rows) give bit for bit what one-token dot products
 * give. */
static void test_dot4_same(void)
{
	static const uint32_t types[] = { GT_Q4_0, GT_Q5_0, GT_Q8_0, GT_Q4_K, GT_Q5_K, GT_Q6_K };
	enum { N = 512, NB = N / QK };
	static float x[8][N];
	static struct q8_block xq[8 * NB];
	static uint8_t row[N * 2];
	if (!quant_have_avx2())
		return;
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		uint32_t t = types[ti];
		for (int rep = 0; rep < 10; rep++) {
			for (size_t i = 0; i < sizeof(row); i++)
				row[i] = rnd8();
			for (size_t b = 0; b < quant_row_bytes(t, N); b += quant_bytes(t)) {
				uint16_t d = quant_f32_to_f16(0.01f + rnd8() / 5000.0f);
				memcpy(row + b + (t == GT_Q6_K ? 208 : 0), &d, 2);
				if (t == GT_Q4_K || t == GT_Q5_K)
					memcpy(row + b + 2, &d, 2);
			}
			for (int k = 0; k < 8; k++) {
				for (int i = 0; i < N; i++)
					x[k][i] = (float)(rnd8() - 128) / 50;
				quant_activation(t, x[k], xq + k * NB, N);
			}
			float o[4], p0[4], p1[4], e[8];
			size_t half = quant_row_bytes(t, N / 2);
			quant_dot4_avx2(t, row, xq, NB, N / 2, o);
			quant_dot2x4_avx2(t, row + half, row, xq, NB, N / 2, p1, p0);
			quant_dot8_avx2(t, row, xq, NB, N / 2, e);
			for (int k = 0; k < 8; k++) {
				float one = quant_dot_avx2(t, row, x[k], xq + k * NB, N / 2);
				if (memcmp(&one, &e[k], sizeof(one))) {
					fprintf(stderr, "%s: dot8[%d] %.9g, dot %.9g\n", quant_name(t), k, e[k], one);
					CHECK(0);
				}
				if (k >= 4)
					continue;
				float two = quant_dot_avx2(t, row + half, x[k], xq + k * NB, N / 2);
				if (memcmp(&one, &o[k], sizeof(one)) || memcmp(&one, &p0[k], sizeof(one)) ||
				    memcmp(&two, &p1[k], sizeof(two))) {
					fprintf(stderr, "%s: dot4[%d] %.9g, 2x4 %.9g %.9g, dot %.9g %.9g\n",
						quant_name(t), k, o[k], p0[k], p1[k], one, two);
					CHECK(0);
				}
			}
			t_pass++;
		}
	}
}

int main(void)
{
	test_f16();
	test_dequant_values();
	test_dot_agree();
	test_dot4_same();
	return T_DONE();
}
