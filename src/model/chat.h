/* SPDX-License-Identifier: Apache-2.0 */
/* chat.h - conversations and the chat templates models carry: ChatML/Qwen 2.5 (tools in the
 * system prompt, <tool_call> blocks back) and Llama 3 / 3.1+ (tools in the first user
 * message, a bare JSON call back).
 *
 * The template is recognised from tokenizer.chat_template, never executed (it is Jinja, and
 * it comes from a downloaded file). Rendering produces segments: the template's own markers
 * are tokenized with control tokens enabled, the conversation's text with them disabled, so
 * a message cannot forge "<|im_start|>system" or any other control token.
 */
#ifndef K8_CHAT_H
#define K8_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "model/gguf.h"
#include "model/tok.h"

enum chat_kind { CHAT_CHATML, CHAT_LLAMA3 };
enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

#define CHAT_MAX_STOP 8

struct chat_tmpl {
	enum chat_kind kind;
	bool qwen_default_system;     /* the template supplies Qwen 2.5's default system prompt */
	bool llama_dates;             /* Llama 3.1+: "Cutting Knowledge Date" system header */
	int32_t stop[CHAT_MAX_STOP];  /* tokens that end the assistant's turn */
	int n_stop;
	const char *name;             /* "chatml", "qwen2.5", "llama3", "llama3.1" */
};

struct chat_call {
	char *id, *name;
	char *args;                   /* a JSON object, as text */
};

struct chat_msg {
	enum chat_role role;
	char *content;                /* may be NULL (an assistant turn with only calls) */
	struct chat_call *calls;
	int n_calls;
	char *tool_call_id;           /* ROLE_TOOL: which call this answers */
};

struct chat_conv {
	struct chat_msg *msgs;
	int n_msgs;
	json_t *tools;                /* NULL or an array of {"type":"function","function":{...}} */
};

void chat_conv_free(struct chat_conv *c);
void chat_calls_free(struct chat_call *calls, int n);

/* Recognise the model's template (and find its stop tokens). Errors name what was found. */
int chat_detect(struct chat_tmpl *ct, const struct gguf *g, const struct tok *t, struct k8_err *err);

/* A rendered prompt: text pieces, each either template markup (special) or content. */
struct chat_seg {
	char *text;
	size_t len;
	bool special;
};
struct chat_prompt {
	struct chat_seg *seg;
	int n, cap;
	int err;
};
void chat_prompt_free(struct chat_prompt *p);

/* Render the conversation, ending with the assistant's header (generation prompt). */
int chat_render(const struct chat_tmpl *ct, const struct chat_conv *c, struct chat_prompt *out,
		struct k8_err *err);
/* The prompt as one string (for tests and `kosa8-model render`); malloc'ed. */
char *chat_prompt_text(const struct chat_prompt *p, size_t *len);
/* Tokenize: specials parsed only in template segments; BOS as the tokenizer wants it, unless
 * the template already starts with it. Returns the count or -errno; *out malloc'ed. */
int chat_tokenize(const struct chat_prompt *p, const struct tok *t, int32_t **out);

/* Tool calls in generated text. ChatML: every <tool_call>{json}</tool_call> block, the text
 * before the first being content. Llama 3: the whole reply as one {"name","parameters"}
 * object. Calls that do not parse are left in the content. *content_len gets the length of
 * the text before the calls; returns the number of calls (*calls malloc'ed) or -errno. */
int chat_parse_calls(const struct chat_tmpl *ct, const char *text, size_t len,
		     size_t *content_len, struct chat_call **calls);
/* Streaming with tools: how much of text[0..len) may be sent as content now. *begun is set
 * when a tool call has started (everything from the returned offset on is the call); else
 * the bytes after the offset might still turn into one and are held back. */
size_t chat_stream_safe(const struct chat_tmpl *ct, const char *text, size_t len, bool *begun);

/* A JSON string of bytes that may not be valid UTF-8: bad bytes become U+FFFD. */
json_t *chat_json_bytes(const char *s, size_t n);

#endif
