/* SPDX-License-Identifier: Apache-2.0 */
/* tok.c - tokenizers from GGUF metadata, following llama.cpp's observable behaviour.
 *
 * Theory of operation:
 *  1. Special-token partition: the text is cut at every occurrence of each special token
 *     (longest first); the pieces between are raw text.
 *  2. BPE (tokenizer.ggml.model "gpt2"): each raw piece is split by the pre-tokenizer's regex
 *     (hand-coded below, per alternative), each word's bytes are mapped to printable code points
 *     (GPT-2's bytes_to_unicode), then adjacent symbols are merged lowest merge rank first.
 *     llama-bpe (Llama 3) takes a word that is itself a token without merging.
 *  3. SPM ("llama"): spaces become U+2581, a leading one is added, adjacent symbols are merged
 *     highest score first while the merge is a token; symbols that are not tokens fall back
 *     to <0xAB> byte tokens.
 * Merging takes pairs from a priority queue (lowest rank, then leftmost): O(n log n) in a
 * word's length, and the special-token partition is linear per special token, since API
 * clients choose the text.
 */
#include "model/tok.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/unicode_tab.h"

/* ---- string -> int hash map (open addressing, keys point into the mapping or into owned
 * storage) ---- */

struct tok_map {
	size_t cap;
	struct { const char *p; uint32_t n; int32_t v; } *e;
};

static uint64_t hash(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
	return h;
}

static struct tok_map *map_new(size_t n)
{
	struct tok_map *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->cap = 16;
	while (m->cap < 2 * n)
		m->cap *= 2;
	m->e = calloc(m->cap, sizeof(*m->e));
	if (!m->e) {
		free(m);
		return NULL;
	}
	return m;
}

static void map_free(struct tok_map *m)
{
	if (m)
		free(m->e);
	free(m);
}

/* Insert or overwrite: the last id of a duplicated text wins, as in llama.cpp. */
static void map_put(struct tok_map *m, const char *p, size_t n, int32_t v)
{
	for (size_t i = hash(p, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->e[i].p) {
			m->e[i].p = p;
			m->e[i].n = (uint32_t)n;
			m->e[i].v = v;
			return;
		}
		if (m->e[i].n == n && !memcmp(m->e[i].p, p, n)) {
			m->e[i].v = v;
			return;
		}
	}
}

static int32_t map_get(const struct tok_map *m, const char *p, size_t n)
{
	for (size_t i = hash(p, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->e[i].p)
			return -1;
		if (m->e[i].n == n && !memcmp(m->e[i].p, p, n))
			return m->e[i].v;
	}
}

/* ---- UTF-8 and Unicode classes ---- */

static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cp < r[mid][0])
			hi = mid;
		else if (cp > r[mid][1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

static bool is_letter(uint32_t c) { return in_ranges(uni_letter, sizeof(uni_letter) / sizeof(uni_letter[0]), c); }
static bool is_number(uint32_t c) { return in_ranges(uni_number, sizeof(uni_number) / sizeof(uni_number[0]), c); }

static bool is_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

/* Decode one code point; invalid or truncated sequences give U+FFFD and consume one byte. */
static uint32_t utf8_next(const uint8_t *s, size_t n, size_t *i)
{
	uint8_t c = s[*i];
	uint32_t cp;
	int len;
	if (c < 0x80) { (*i)++; return c; }
	if ((c & 0xe0) == 0xc0) { cp = c & 0x1f; len = 2; }
	else if ((c & 0xf0) == 0xe0) { cp = c & 0x0f; len = 3; }
	else if ((c & 0xf8) == 0xf0) { cp = c & 0x07; len = 4; }
	else { (*i)++; return 0xfffd; }
	if (*i + (size_t)len > n) { (*i)++; return 0xfffd; }
	for (int k = 1; k < len; k++) {
		if ((s[*i + k] & 0xc0) != 0x80) { (*i)++; return 0xfffd; }
		cp = (cp << 6) | (s[*i + k] & 0x3f);
	}
	*i += (size_t)len;
	return cp;
}

static size_t utf8_put(uint32_t cp, char *o)
{
	if (cp < 0x80) { o[0] = (char)cp; return 1; }
	if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f)); return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest map to 256+k. */
static uint32_t byte_cp(uint8_t b)
{
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
		return b;
	int k = 0;
	for (int x = 0; x < b; x++)
		if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
			k++;
	return 256u + (uint32_t)k;
}

static int cp_byte(uint32_t cp)
{
	if (cp < 256)
		return ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174) ? (int)cp : -1;
	for (int b = 0; b < 256; b++)
		if (byte_cp((uint8_t)b) == cp)
			return b;
	return -1;
}

/* ---- growing output ---- */

struct ids {
	int32_t *v;
	size_t n, cap;
	int err;
};

static void push(struct ids *o, int32_t id)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 64;
		int32_t *v = realloc(o->v, cap * sizeof(*v));
		if (!v) {
			o->err = -ENOMEM;
			return;
		}
		o->v = v;
		o->cap = cap;
	}
	o->v[o->n++] = id;
}

/* ---- symbol merging, shared by BPE and SPM ---- */

struct sym {
	size_t off, len;
	int prev, next;
};

/* Cost of merging symbols a and b (lower is better), or INFINITY when they do not merge. */
static double pair_rank(const struct tok *t, const char *s, const struct sym *a, const struct sym *b,
			 char *scratch)
{
	if (t->kind == TOK_BPE) {
		/* Merges are "left right"; byte-level symbols never contain a space. */
		memcpy(scratch, s + a->off, a->len);
		scratch[a->len] = ' ';
		memcpy(scratch + a->len + 1, s + b->off, b->len);
		int32_t r = map_get(t->merges, scratch, a->len + 1 + b->len);
		return r < 0 ? INFINITY : r;
	}
	int32_t id = map_get(t->vocab, s + a->off, a->len + b->len);   /* adjacent in s */
	return id < 0 ? INFINITY : -(double)t->score[id];   /* highest score first */
}

/* A candidate merge of symbols l and r = l's next, as it stood when queued: it is stale once
 * either symbol has grown or gone (lengths only grow, a merged-away symbol gets length 0). */
struct bigram {
	double rank;
	int l, r;
	size_t llen, rlen;
};

/* Min-heap on (rank, position of l): the same order as rescanning for the lowest rank and
 * taking the leftmost, which is what llama.cpp's queues give. */
static bool bigram_less(const struct bigram *a, const struct bigram *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->l < b->l);
}

struct heap {
	struct bigram *v;
	size_t n, cap;
};

static int heap_push(struct heap *h, struct bigram b)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 64;
		struct bigram *v = realloc(h->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	size_t i = h->n++;
	while (i && bigram_less(&b, &h->v[(i - 1) / 2])) {
		h->v[i] = h->v[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->v[i] = b;
	return 0;
}

static struct bigram heap_pop(struct heap *h)
{
	struct bigram top = h->v[0], last = h->v[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && bigram_less(&h->v[c + 1], &h->v[c]))
			c++;
		if (!bigram_less(&h->v[c], &last))
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

/* Queue the pair (l, l's next) if it merges at all. */
static int queue_pair(const struct tok *t, const char *s, struct sym *sy, int l, struct heap *h,
		      char *scratch)
{
	if (l < 0 || sy[l].next < 0)
		return 0;
	int r = sy[l].next;
	double rank = pair_rank(t, s, &sy[l], &sy[r], scratch);
	if (rank == INFINITY)
		return 0;
	return heap_push(h, (struct bigram){ rank, l, r, sy[l].len, sy[r].len });
}

/* Split s[0..n) into symbols (UTF-8 characters) and merge them, best pair first, through a
 * priority queue: O(n log n) in the word's length, since API clients choose the words. */
static int merge_word(const struct tok *t, const char *s, size_t n, struct ids *o)
{
	struct sym *sy = malloc((n + 1) * sizeof(*sy));
	char *scratch = malloc(2 * n + 2);
	struct heap h = { 0 };
	int rc = 0;
	if (!sy || !scratch) {
		rc = -ENOMEM;
		goto out;
	}
	int ns = 0;
	for (size_t i = 0; i < n;) {
		static const uint8_t lens[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
		size_t l = lens[(uint8_t)s[i] >> 4];
		if (l > n - i)
			l = n - i;
		sy[ns] = (struct sym){ i, l, ns - 1, ns + 1 };
		ns++;
		i += l;
	}
	if (ns)
		sy[ns - 1].next = -1;
	for (int i = 0; i + 1 < ns && !rc; i++)
		rc = queue_pair(t, s, sy, i, &h, scratch);
	while (h.n && !rc) {
		struct bigram b = heap_pop(&h);
		if (sy[b.l].len != b.llen || sy[b.r].len != b.rlen || sy[b.l].next != b.r)
			continue;   /* stale */
		int nx = b.r;
		sy[b.l].len += sy[nx].len;
		sy[b.l].next = sy[nx].next;
		if (sy[nx].next >= 0)
			sy[sy[nx].next].prev = b.l;
		sy[nx].len = 0;
		rc = queue_pair(t, s, sy, sy[b.l].prev, &h, scratch);
		if (!rc)
			rc = queue_pair(t, s, sy, b.l, &h, scratch);
	}
	if (rc)
		goto out;
	for (int i = 0; i >= 0 && i < ns; i = sy[i].next) {
		int32_t id = map_get(t->vocab, s + sy[i].off, sy[i].len);
		if (id >= 0) {
			push(o, id);
			continue;
		}
		for (size_t k = 0; k < sy[i].len; k++) {
			uint8_t b = (uint8_t)s[sy[i].off + k];
			if (t->kind == TOK_SPM) {
				if (t->byte_tok[b] >= 0)
					push(o, t->byte_tok[b]);
				else if (t->unk >= 0)
					push(o, t->unk);
			} else {
				int32_t bid = map_get(t->vocab, s + sy[i].off + k, 1);
				if (bid >= 0)
					push(o, bid);
			}
		}
	}
	rc = o->err;
out:
	free(sy);
	free(scratch);
	free(h.v);
	return rc;
}

/* ---- pre-tokenizer (GPT-2 family regexes, one alternative at a time) ---- */

static inline uint32_t lc(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Length in code points of the match starting at cps[i]. */
static size_t pre_match(const struct tok *t, const uint32_t *c, size_t n, size_t i)
{
	/* (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]) */
	if (c[i] == '\'' && i + 1 < n) {
		uint32_t a = lc(c[i + 1]), b = i + 2 < n ? lc(c[i + 2]) : 0;
		if (a == 's' || a == 't' || a == 'm' || a == 'd')
			return 2;
		if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
			return 3;
	}
	/* [^\r\n\p{L}\p{N}]?\p{L}+ */
	{
		size_t j = i;
		if (!is_letter(c[j]) && c[j] != '\r' && c[j] != '\n' && !is_number(c[j]) &&
		    j + 1 < n && is_letter(c[j + 1]))
			j++;
		if (is_letter(c[j])) {
			while (j < n && is_letter(c[j]))
				j++;
			return j - i;
		}
	}
	/* \p{N}{1,3} (llama3) or \p{N} (qwen2) */
	if (is_number(c[i])) {
		size_t j = i, max = t->pre == PRE_QWEN2 ? 1 : 3;
		while (j < n && j - i < max && is_number(c[j]))
			j++;
		return j - i;
	}
	/*  ?[^\s\p{L}\p{N}]+[\r\n]* */
	{
		size_t j = i;
		if (c[j] == ' ' && j + 1 < n)
			j++;
		size_t k = j;
		while (k < n && !is_space(c[k]) && !is_letter(c[k]) && !is_number(c[k]))
			k++;
		if (k > j) {
			while (k < n && (c[k] == '\r' || c[k] == '\n'))
				k++;
			return k - i;
		}
	}
	/* whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+ */
	size_t e = i;
	while (e < n && is_space(c[e]))
		e++;
	if (e > i) {
		size_t last_nl = SIZE_MAX;
		for (size_t k = i; k < e; k++)
			if (c[k] == '\r' || c[k] == '\n')
				last_nl = k;
		if (last_nl != SIZE_MAX)
			return last_nl + 1 - i;
		if (e == n)
			return e - i;
		if (e - i > 1)
			return e - i - 1;
		return 1;
	}
	return 1;   /* not reached: every code point is a letter, number, space or other */
}

static int bpe_fragment(const struct tok *t, const char *s, size_t n, struct ids *o)
{
	uint32_t *cps = malloc((n + 1) * sizeof(*cps));
	char *word = malloc(n * 4 * 2 + 8);   /* each byte maps to a code point of up to 2 bytes */
	char *raw = malloc(n * 4 + 4);
	if (!cps || !word || !raw) {
		free(cps); free(word); free(raw);
		return -ENOMEM;
	}
	size_t nc = 0;
	for (size_t i = 0; i < n;)
		cps[nc++] = utf8_next((const uint8_t *)s, n, &i);
	int rc = 0;
	for (size_t i = 0; i < nc && !rc;) {
		size_t m = pre_match(t, cps, nc, i);
		size_t rl = 0, wl = 0;
		for (size_t k = i; k < i + m; k++)
			rl += utf8_put(cps[k], raw + rl);
		for (size_t k = 0; k < rl; k++)
			wl += utf8_put(byte_cp((uint8_t)raw[k]), word + wl);
		i += m;
		int32_t id;
		if (t->ignore_merges && (id = map_get(t->vocab, word, wl)) >= 0) {
			push(o, id);
			rc = o->err;
			continue;
		}
		rc = merge_word(t, word, wl, o);
	}
	free(cps); free(word); free(raw);
	return rc;
}

static int spm_fragment(const struct tok *t, const char *s, size_t n, bool prefix, struct ids *o)
{
	char *e = malloc(3 * n + 4);
	if (!e)
		return -ENOMEM;
	size_t l = 0;
	if (prefix) {
		memcpy(e, "\xe2\x96\x81", 3);
		l = 3;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ') {
			memcpy(e + l, "\xe2\x96\x81", 3);
			l += 3;
		} else {
			e[l++] = s[i];
		}
	}
	int rc = merge_word(t, e, l, o);
	free(e);
	return rc;
}

/* ---- special-token partition ---- */

struct frag {
	size_t off, len;
	int32_t id;   /* -1: raw text */
};

int tok_encode(const struct tok *t, const char *text, size_t len, bool add_bos,
	       bool parse_special, int32_t **out)
{
	struct ids o = { 0 };
	size_t nf = 1;
	int rc = 0;
	if (len > TOK_MAX_TEXT)
		return -E2BIG;
	struct frag *f = malloc(sizeof(*f));
	if (!f)
		return -ENOMEM;
	f[0] = (struct frag){ 0, len, -1 };
	/* Each special token rebuilds the list in one pass (no insertion in the middle), so
	 * text full of special tokens costs O(n) per special token, not O(n^2). */
	for (int si = 0; si < t->n_special; si++) {
		int32_t id = t->special[si];
		if (!parse_special && t->type[id] != TT_USER)
			continue;
		struct gguf_str st = t->text[id];
		if (st.n == 0)
			continue;
		size_t ncap = nf + 16, nn = 0;
		struct frag *g = malloc(ncap * sizeof(*g));
		if (!g)
			goto nomem;
		for (size_t fi = 0; fi < nf; fi++) {
			struct frag cur = f[fi];
			while (cur.id < 0) {
				const char *hit = memmem(text + cur.off, cur.len, st.p, st.n);
				if (nn + 2 > ncap) {
					struct frag *ng = realloc(g, 2 * ncap * sizeof(*g));
					if (!ng) {
						free(g);
						goto nomem;
					}
					g = ng;
					ncap *= 2;
				}
				if (!hit)
					break;
				size_t pre = (size_t)(hit - (text + cur.off));
				g[nn++] = (struct frag){ cur.off, pre, -1 };
				g[nn++] = (struct frag){ cur.off + pre, st.n, id };
				cur = (struct frag){ cur.off + pre + st.n, cur.len - pre - st.n, -1 };
			}
			g[nn++] = cur;
		}
		free(f);
		f = g;
		nf = nn;
	}
	if (add_bos && t->bos >= 0)
		push(&o, t->bos);
	bool prev_special = true;
	for (size_t fi = 0; fi < nf && !rc; fi++) {
		if (f[fi].id >= 0) {
			push(&o, f[fi].id);
			prev_special = true;
			continue;
		}
		if (f[fi].len == 0)
			continue;
		if (t->kind == TOK_BPE)
			rc = bpe_fragment(t, text + f[fi].off, f[fi].len, &o);
		else
			rc = spm_fragment(t, text + f[fi].off, f[fi].len, t->add_space_prefix && prev_special, &o);
		prev_special = false;
	}
	goto out;
nomem:
	rc = -ENOMEM;
out:
	free(f);
	if (rc || o.err) {
		free(o.v);
		return rc ? rc : o.err;
	}
	if (o.n > INT32_MAX) {
		free(o.v);
		return -E2BIG;
	}
	*out = o.v ? o.v : malloc(sizeof(int32_t));
	return (int)o.n;
}

int32_t tok_lookup(const struct tok *t, const char *s)
{
	return map_get(t->vocab, s, strlen(s));
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 :
	       c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The byte of a "<0xAB>" token, or -1. */
static int byte_token(struct gguf_str s)
{
	if (s.n != 6 || memcmp(s.p, "<0x", 3) || s.p[5] != '>')
		return -1;
	int h = hexval(s.p[3]), l = hexval(s.p[4]);
	return h < 0 || l < 0 ? -1 : h * 16 + l;
}

int tok_piece(const struct tok *t, int32_t id, bool special, char *buf, size_t cap)
{
	if (id < 0 || id >= t->n_vocab)
		return -EINVAL;
	struct gguf_str s = t->text[id];
	size_t l = 0;
	uint8_t ty = t->type[id];
	if (ty == TT_CONTROL || ty == TT_UNKNOWN) {
		if (!special)
			return 0;
		if (s.n > cap)
			return -ENOSPC;
		memcpy(buf, s.p, s.n);
		return (int)s.n;
	}
	if (t->kind == TOK_SPM) {
		int b;
		if (ty == TT_BYTE && (b = byte_token(s)) >= 0 && cap >= 1) {
			buf[0] = (char)b;
			return 1;
		}
		for (size_t i = 0; i < s.n; i++) {
			if (i + 3 <= s.n && !memcmp(s.p + i, "\xe2\x96\x81", 3)) {
				if (l >= cap)
					return -ENOSPC;
				buf[l++] = ' ';
				i += 2;
				continue;
			}
			if (l >= cap)
				return -ENOSPC;
			buf[l++] = s.p[i];
		}
		return (int)l;
	}
	if (ty == TT_USER) {
		if (s.n > cap)
			return -ENOSPC;
		memcpy(buf, s.p, s.n);
		return (int)s.n;
	}
	for (size_t i = 0; i < s.n;) {
		uint32_t cp = utf8_next((const uint8_t *)s.p, s.n, &i);
		int b = cp_byte(cp);
		if (l >= cap)
			return -ENOSPC;
		buf[l++] = (char)(b < 0 ? '?' : b);
	}
	return (int)l;
}

/* ---- loading ---- */



static int cmp_len_desc(const void *a, const void *b, void *arg)
{
	const struct tok *t = arg;
	uint64_t la = t->text[*(const int32_t *)a].n, lb = t->text[*(const int32_t *)b].n;
	if (la != lb)
		return la < lb ? 1 : -1;
	return *(const int32_t *)a - *(const int32_t *)b;
}

static int32_t opt_id(const struct gguf *g, const char *key, int n_vocab)
{
	uint32_t v;
	if (gguf_get_u32(g, key, &v) || v >= (uint32_t)n_vocab)
		return -1;
	return (int32_t)v;
}

int tok_load(struct tok *t, const struct gguf *g, struct k8_err *err)
{
	memset(t, 0, sizeof(*t));
	struct gguf_str model, pre = { "", 0 };
	if (gguf_get_str(g, "tokenizer.ggml.model", &model))
		return k8_err_set(err, -EINVAL, "tokenizer.ggml.model is missing");
	if (gguf_str_eq(model, "gpt2")) {
		t->kind = TOK_BPE;
		gguf_get_str(g, "tokenizer.ggml.pre", &pre);
		if (gguf_str_eq(pre, "qwen2")) {
			t->pre = PRE_QWEN2;
		} else if (gguf_str_eq(pre, "llama-bpe") || gguf_str_eq(pre, "llama3") ||
			   gguf_str_eq(pre, "llama-v3")) {
			t->pre = PRE_LLAMA3;
			t->ignore_merges = true;
		} else {
			return k8_err_set(err, -ENOTSUP, "pre-tokenizer '%.*s' is not supported (qwen2 and llama-bpe are)",
					  (int)(pre.n > 64 ? 64 : pre.n), pre.p);
		}
	} else if (gguf_str_eq(model, "llama")) {
		t->kind = TOK_SPM;
		t->add_space_prefix = true;
	} else {
		return k8_err_set(err, -ENOTSUP, "tokenizer model '%.*s' is not supported (gpt2 and llama are)",
				  (int)(model.n > 64 ? 64 : model.n), model.p);
	}
	const struct gguf_kv *toks, *types = NULL, *scores = NULL, *merges = NULL;
	if (gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STR, &toks) || toks->arr_n == 0 ||
	    toks->arr_n > (1u << 22))
		return k8_err_set(err, -EINVAL, "tokenizer.ggml.tokens is missing or has a bad size");
	t->n_vocab = (int)toks->arr_n;
	int rc = gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_I32, &types);
	if (rc == -EINVAL || (!rc && types->arr_n != toks->arr_n))
		return k8_err_set(err, -EINVAL, "tokenizer.ggml.token_type does not match the vocabulary");
	rc = gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_F32, &scores);
	if (rc == -EINVAL || (!rc && scores->arr_n != toks->arr_n))
		return k8_err_set(err, -EINVAL, "tokenizer.ggml.scores does not match the vocabulary");
	if (t->kind == TOK_BPE && gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_STR, &merges))
		return k8_err_set(err, -EINVAL, "tokenizer.ggml.merges is missing");
	size_t nv = (size_t)t->n_vocab;
	t->text = malloc(nv * sizeof(*t->text));
	t->score = calloc(nv, sizeof(*t->score));
	t->type = malloc(nv);
	t->special = malloc(nv * sizeof(*t->special));
	t->vocab = map_new(nv);
	struct gguf_str *ms = merges ? malloc(merges->arr_n * sizeof(*ms) + 1) : NULL;
	t->merges = map_new(merges ? merges->arr_n : 1);
	if (!t->text || !t->score || !t->type || !t->special || !t->vocab || !t->merges || (merges && !ms)) {
		free(ms);
		tok_free(t);
		return k8_err_set(err, -ENOMEM, "out of memory");
	}
	gguf_arr_strs(toks, t->text);
	for (size_t i = 0; i < 256; i++)
		t->byte_tok[i] = -1;
	for (size_t i = 0; i < nv; i++) {
		double ty = types ? gguf_arr_num(types, i) : TT_NORMAL;
		t->type[i] = ty >= 1 && ty <= 6 ? (uint8_t)ty : TT_NORMAL;
		t->score[i] = scores ? (float)gguf_arr_num(scores, i) : 0;
		if (t->text[i].n > 0xffffff) {
			free(ms);
			tok_free(t);
			return k8_err_set(err, -EINVAL, "token %zu is too long", i);
		}
		map_put(t->vocab, t->text[i].p, t->text[i].n, (int32_t)i);
		if (t->type[i] == TT_CONTROL || t->type[i] == TT_USER || t->type[i] == TT_UNKNOWN)
			t->special[t->n_special++] = (int32_t)i;
		int b;
		if (t->type[i] == TT_BYTE && (b = byte_token(t->text[i])) >= 0)
			t->byte_tok[b] = (int32_t)i;
	}
	qsort_r(t->special, (size_t)t->n_special, sizeof(int32_t), cmp_len_desc, t);
	if (merges) {
		gguf_arr_strs(merges, ms);
		for (uint64_t i = 0; i < merges->arr_n && i < INT32_MAX; i++)
			if (ms[i].n <= 0xffffff)
				map_put(t->merges, ms[i].p, ms[i].n, (int32_t)i);
		free(ms);
	}
	t->bos = opt_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab);
	t->eos = opt_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab);
	t->unk = opt_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab);
	t->add_bos = t->kind == TOK_SPM;
	gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
	gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
	return 0;
}

void tok_free(struct tok *t)
{
	if (!t)
		return;
	free(t->text);
	free(t->score);
	free(t->type);
	free(t->special);
	map_free(t->vocab);
	map_free(t->merges);
	memset(t, 0, sizeof(*t));
}
