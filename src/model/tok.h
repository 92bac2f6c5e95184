/* SPDX-License-Identifier: Apache-2.0 */
/* tok.h - tokenizer built from a GGUF file's tokenizer.ggml.* metadata: GPT-2 byte-level
 * BPE (pre-tokenizers "qwen2" and "llama-bpe") and SentencePiece-style BPE ("llama"). */
#ifndef K8_TOK_H
#define K8_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

enum tok_kind { TOK_BPE, TOK_SPM };
enum tok_pre { PRE_NONE, PRE_LLAMA3, PRE_QWEN2 };
enum tok_type { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

struct tok_map;   /* string -> int hash table */

struct tok {
	enum tok_kind kind;
	enum tok_pre pre;
	int n_vocab;
	struct gguf_str *text;        /* token strings (point into the model's mapping) */
	float *score;                 /* SPM scores */
	uint8_t *type;                /* enum tok_type */
	struct tok_map *vocab;        /* text -> id */
	struct tok_map *merges;       /* "left right" -> rank */
	int32_t *special;             /* ids of control/user/unknown tokens, longest text first */
	int n_special;
	int32_t byte_tok[256];        /* SPM byte fallback "<0xAB>", -1 when missing */
	int32_t bos, eos, unk;
	bool add_bos, add_space_prefix, ignore_merges;
};

int tok_load(struct tok *t, const struct gguf *g, struct k8_err *err);
void tok_free(struct tok *t);

/* The id of the token whose text is exactly s, or -1. */
int32_t tok_lookup(const struct tok *t, const char *s);

/* The longest text tok_encode takes (bytes); longer gives -E2BIG. */
#define TOK_MAX_TEXT (8u << 20)

/* Encode len bytes of text. parse_special: match control tokens in the text (user-defined
 * ones always are, as in llama.cpp). *out is malloc'ed; returns the count or -errno. */
int tok_encode(const struct tok *t, const char *text, size_t len, bool add_bos,
	       bool parse_special, int32_t **out);
/* The bytes a token stands for, written to buf (up to cap); returns the length or -EINVAL.
 * Control tokens give their text only when `special` is set. */
int tok_piece(const struct tok *t, int32_t id, bool special, char *buf, size_t cap);

#endif
