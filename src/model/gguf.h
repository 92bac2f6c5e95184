/* SPDX-License-Identifier: Apache-2.0 */
/* gguf.h - GGUF v2/v3 model file reader: a checked view over an mmap'ed (or in-memory) file.
 *
 * gguf_parse() walks the whole header once and refuses the file unless every count, length,
 * type, dimension, offset and alignment is in range; afterwards every accessor only reads
 * what was validated. Strings point into the mapping and are NOT NUL-terminated.
 */
#ifndef K8_GGUF_H
#define K8_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

enum gguf_vtype {
	GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
	GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10, GGUF_I64 = 11,
	GGUF_F64 = 12, GGUF_NTYPES
};

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_TENSORS 65536
#define GGUF_MAX_KV 65536

struct gguf_str {
	const char *p;
	uint64_t n;
};

struct gguf_kv {
	struct gguf_str key;
	uint32_t type;          /* enum gguf_vtype */
	uint32_t arr_type;      /* element type when type == GGUF_ARR */
	uint64_t arr_n;         /* element count when type == GGUF_ARR */
	const uint8_t *val;     /* the value (for arrays: the first element) */
};

struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS];   /* unused dims are 1; ne[0] is the row length */
	uint32_t type;                /* ggml type, see quant.h */
	uint64_t offset;              /* from the start of the data section */
	uint64_t nbytes;
	const void *data;
};

struct gguf {
	const uint8_t *base;
	size_t size;
	bool mapped;
	uint32_t version;
	uint64_t n_kv, n_tensors;
	struct gguf_kv *kv;
	struct gguf_tensor *t;
	uint64_t alignment;
	uint64_t data_off;
};

/* Parse a file already in memory (the fuzzer's entry). `buf` must outlive `g`. */
int gguf_parse(struct gguf *g, const void *buf, size_t size, struct k8_err *err);
/* mmap `path` read-only and parse it. */
int gguf_open(struct gguf *g, const char *path, struct k8_err *err);
/* The two halves of gguf_open: map `path` without reading a byte of it (kosa8-model
 * serve maps before its jail and parses inside it), then parse the mapping. After a
 * failed parse the mapping stays until gguf_close. */
int gguf_map(struct gguf *g, const char *path, struct k8_err *err);
int gguf_parse_mapped(struct gguf *g, struct k8_err *err);
/* Free what parse/open allocated and unmap; accepts a zeroed struct. */
void gguf_close(struct gguf *g);

const struct gguf_kv *gguf_find(const struct gguf *g, const char *key);
const struct gguf_tensor *gguf_tensor(const struct gguf *g, const char *name);
bool gguf_str_eq(struct gguf_str s, const char *c);

/* Typed access. Each returns 0, -ENOENT when the key is absent, -EINVAL when it has another
 * type or does not fit. Integers accept any integer type whose value fits. */
int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out);
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
int gguf_get_f32(const struct gguf *g, const char *key, float *out);
int gguf_get_bool(const struct gguf *g, const char *key, bool *out);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);
/* An array of `type`; *n gets its length and *kv the entry. */
int gguf_get_arr(const struct gguf *g, const char *key, uint32_t type, const struct gguf_kv **kv);
/* Walk a string array (validated at parse time): fills out[0..kv->arr_n). */
void gguf_arr_strs(const struct gguf_kv *kv, struct gguf_str *out);
/* Numeric array element i as double (i < arr_n, numeric arr_type). */
double gguf_arr_num(const struct gguf_kv *kv, uint64_t i);

#endif
