/* SPDX-License-Identifier: Apache-2.0 */
/* chatreq.h - API request bodies (OpenAI chat/completions, Anthropic messages) parsed into one
 * generation request. Every body is hostile: sizes, counts and types are checked here, and
 * the fuzzer (tests/fuzz/fuzz_chatreq.c) drives this parser and the chat renderer. */
#ifndef K8_CHATREQ_H
#define K8_CHATREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/chat.h"

enum api { API_OPENAI_CHAT, API_OPENAI_COMPLETION, API_ANTHROPIC };

#define REQ_MAX_BODY (4u << 20)    /* bytes of one request body */
#define REQ_MAX_MSGS 4096
#define REQ_MAX_TOOLS 128
#define REQ_MAX_STOP 8             /* stop strings (OpenAI allows 4) */
#define REQ_MAX_STOP_LEN 256

struct gen_req {
	enum api api;
	struct chat_conv conv;        /* chat APIs */
	char *prompt;                 /* API_OPENAI_COMPLETION */
	int max_tokens;               /* -1: until the context is full */
	float temperature, top_p;
	uint64_t seed;
	bool has_seed, stream, include_usage;
	char *stop[REQ_MAX_STOP];
	int n_stop;
};

/* Parse a body. On failure err says what is wrong in the client's terms (which field). */
int chatreq_parse(enum api api, const char *body, size_t len, struct gen_req *r, struct k8_err *err);
void chatreq_free(struct gen_req *r);

#endif
