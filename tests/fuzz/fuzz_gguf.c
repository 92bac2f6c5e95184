/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_gguf.c - the GGUF reader, and the tokenizer built from whatever metadata it accepted,
 * on arbitrary bytes: nothing may crash, leak or read out of bounds. */
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"
#include "model/quant.h"
#include "model/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gguf g;
	struct k8_err err = { 0 };
	if (gguf_parse(&g, data, size, &err) == 0) {
		for (uint64_t i = 0; i < g.n_tensors; i++) {
			const struct gguf_tensor *t = &g.t[i];
			/* touch the first and last byte of every tensor the reader vouched for */
			if (t->nbytes) {
				volatile uint8_t x = ((const uint8_t *)t->data)[0];
				x = ((const uint8_t *)t->data)[t->nbytes - 1];
				(void)x;
			}
			if (t->ne[0] <= 512) {
				float y[512];
				quant_dequant(t->type, t->data, y, (int)t->ne[0]);
			}
		}
		struct tok tk;
		if (tok_load(&tk, &g, &err) == 0) {
			static const char text[] = "Hello, world! It's 123 \xe2\x96\x81 <|im_start|>\n\t x\xff";
			int32_t *ids = NULL;
			int n = tok_encode(&tk, text, sizeof(text) - 1, true, true, &ids);
			char buf[256];
			for (int i = 0; i < n; i++)
				tok_piece(&tk, ids[i], true, buf, sizeof(buf));
			free(ids);
			tok_free(&tk);
		}
	}
	gguf_close(&g);
	return 0;
}
