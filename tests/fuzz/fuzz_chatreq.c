/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_chatreq.c - API request bodies (OpenAI chat, completions, Anthropic messages) through
 * the parser and both chat templates, and generated text through the tool-call parser:
 * nothing may crash, leak or read out of bounds. The first byte picks the API. */
#include <stdint.h>
#include <string.h>

#include "model/chatreq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	enum api api = (enum api)(data[0] % 3);
	const char *body = (const char *)data + 1;
	size_t n = size - 1;
	struct gen_req r;
	struct k8_err err = { 0 };
	if (chatreq_parse(api, body, n, &r, &err) == 0) {
		struct chat_tmpl tm[3] = {
			{ .kind = CHAT_CHATML, .qwen_default_system = true, .name = "qwen2.5" },
			{ .kind = CHAT_LLAMA3, .llama_dates = true, .name = "llama3.1" },
			{ .kind = CHAT_LLAMA3, .name = "llama3" },
		};
		for (int i = 0; i < 3; i++) {
			struct chat_prompt p;
			struct k8_err e2 = { 0 };
			if (chat_render(&tm[i], &r.conv, &p, &e2) == 0) {
				size_t l;
				free(chat_prompt_text(&p, &l));
				chat_prompt_free(&p);
			}
		}
		chatreq_free(&r);
	}
	/* The same bytes as a model's reply. */
	for (int k = 0; k < 2; k++) {
		struct chat_tmpl t = { .kind = k ? CHAT_LLAMA3 : CHAT_CHATML };
		struct chat_call *calls;
		size_t cl;
		int nc = chat_parse_calls(&t, body, n, &cl, &calls);
		if (nc >= 0)
			chat_calls_free(calls, nc);
		bool begun;
		size_t safe = chat_stream_safe(&t, body, n, &begun);
		if (safe > n)
			__builtin_trap();
	}
	json_decref(chat_json_bytes(body, n));
	return 0;
}
