/* SPDX-License-Identifier: Apache-2.0 */
/* gguf.c - GGUF v2/v3 reader: one bounds-checked pass over the header, then typed lookups.
 *
 * Layout (little endian): "GGUF", u32 version, u64 tensor count, u64 kv count, the kv pairs
 * (string key, u32 type, value), the tensor directory (string name, u32 n_dims, u64 ne[],
 * u32 type, u64 offset), padding to `general.alignment` (default 32), the tensor data.
 * Every read goes through rd_take(), which refuses to step past the end.
 */
#include "model/gguf.h"

#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "model/quant.h"

#define GGUF_MAGIC 0x46554747u   /* "GGUF" */
#define GGUF_MAX_KEY 65535
#define GGUF_DEFAULT_ALIGN 32

struct rd {
	const uint8_t *p;
	size_t n, off;
};

static const void *rd_take(struct rd *r, size_t n)
{
	if (n > r->n - r->off)
		return NULL;
	const void *p = r->p + r->off;
	r->off += n;
	return p;
}

static int rd_u32(struct rd *r, uint32_t *v)
{
	const void *p = rd_take(r, 4);
	if (!p)
		return -1;
	memcpy(v, p, 4);
	return 0;
}

static int rd_u64(struct rd *r, uint64_t *v)
{
	const void *p = rd_take(r, 8);
	if (!p)
		return -1;
	memcpy(v, p, 8);
	return 0;
}

static int rd_str(struct rd *r, struct gguf_str *s)
{
	uint64_t n;
	if (rd_u64(r, &n) || n > r->n - r->off)
		return -1;
	s->n = n;
	s->p = rd_take(r, n);
	return 0;
}

static size_t vtype_size(uint32_t t)
{
	switch (t) {
	case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
	case GGUF_U16: case GGUF_I16: return 2;
	case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
	case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
	default: return 0;
	}
}

/* Skip over one value of scalar type t (not an array). */
static int rd_skip_scalar(struct rd *r, uint32_t t)
{
	if (t == GGUF_STR) {
		struct gguf_str s;
		return rd_str(r, &s);
	}
	size_t sz = vtype_size(t);
	return sz && rd_take(r, sz) ? 0 : -1;
}

bool gguf_str_eq(struct gguf_str s, const char *c)
{
	size_t n = strlen(c);
	return s.n == n && !memcmp(s.p, c, n);
}

static int str_cmp(const void *a, const void *b)
{
	const struct gguf_str *x = *(const struct gguf_str *const *)a;
	const struct gguf_str *y = *(const struct gguf_str *const *)b;
	int c = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
	return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* A name that occurs twice among n strings spaced `stride` bytes apart, NULL if none, or the
 * sentinel `(void *)g` (any non-string pointer) when out of memory: sorting keeps it O(n log n). */
static const struct gguf_str *find_dup_(const struct gguf_str *first, uint64_t n, size_t stride,
					const void *oom)
{
	if (n < 2)
		return NULL;
	const struct gguf_str **v = malloc(n * sizeof(*v));
	if (!v)
		return oom;
	for (uint64_t i = 0; i < n; i++)
		v[i] = (const struct gguf_str *)((const char *)first + i * stride);
	qsort(v, n, sizeof(*v), str_cmp);
	const struct gguf_str *dup = NULL;
	for (uint64_t i = 1; i < n && !dup; i++)
		if (!str_cmp(&v[i - 1], &v[i]))
			dup = v[i];
	free(v);
	return dup;
}
#define find_dup(first, n, stride) find_dup_((first), (n), (stride), (void *)g)

static int parse_kv(struct gguf *g, struct rd *r, struct gguf_kv *kv, struct k8_err *err, uint64_t i)
{
	if (rd_str(r, &kv->key) || rd_u32(r, &kv->type))
		return k8_err_set(err, -EINVAL, "metadata entry %llu: truncated", (unsigned long long)i);
	if (kv->key.n == 0 || kv->key.n > GGUF_MAX_KEY)
		return k8_err_set(err, -EINVAL, "metadata entry %llu: key length %llu out of range",
				  (unsigned long long)i, (unsigned long long)kv->key.n);
	if (kv->type >= GGUF_NTYPES)
		return k8_err_set(err, -EINVAL, "metadata '%.*s': unknown value type %u",
				  (int)kv->key.n, kv->key.p, kv->type);
	kv->val = r->p + r->off;
	if (kv->type != GGUF_ARR) {
		if (rd_skip_scalar(r, kv->type))
			return k8_err_set(err, -EINVAL, "metadata '%.*s': value runs past the end of the file",
					  (int)kv->key.n, kv->key.p);
		if (kv->type == GGUF_BOOL && *kv->val > 1)
			return k8_err_set(err, -EINVAL, "metadata '%.*s': bool is %u",
					  (int)kv->key.n, kv->key.p, *kv->val);
		return 0;
	}
	if (rd_u32(r, &kv->arr_type) || rd_u64(r, &kv->arr_n))
		return k8_err_set(err, -EINVAL, "metadata '%.*s': truncated array header",
				  (int)kv->key.n, kv->key.p);
	if (kv->arr_type == GGUF_ARR || kv->arr_type >= GGUF_NTYPES)
		return k8_err_set(err, -EINVAL, "metadata '%.*s': array of type %u is not supported",
				  (int)kv->key.n, kv->key.p, kv->arr_type);
	kv->val = r->p + r->off;
	if (kv->arr_type == GGUF_STR) {
		/* Each string takes at least its 8-byte length: a cheap bound before the walk. */
		if (kv->arr_n > (r->n - r->off) / 8)
			return k8_err_set(err, -EINVAL, "metadata '%.*s': %llu strings cannot fit",
					  (int)kv->key.n, kv->key.p, (unsigned long long)kv->arr_n);
		for (uint64_t j = 0; j < kv->arr_n; j++)
			if (rd_skip_scalar(r, GGUF_STR))
				return k8_err_set(err, -EINVAL, "metadata '%.*s': string %llu runs past the end",
						  (int)kv->key.n, kv->key.p, (unsigned long long)j);
		return 0;
	}
	size_t esz = vtype_size(kv->arr_type);
	if (kv->arr_n > (r->n - r->off) / esz || !rd_take(r, kv->arr_n * esz))
		return k8_err_set(err, -EINVAL, "metadata '%.*s': array of %llu runs past the end",
				  (int)kv->key.n, kv->key.p, (unsigned long long)kv->arr_n);
	(void)g;
	return 0;
}

static int parse_tensor(struct rd *r, struct gguf_tensor *t, struct k8_err *err, uint64_t i)
{
	if (rd_str(r, &t->name) || rd_u32(r, &t->n_dims))
		return k8_err_set(err, -EINVAL, "tensor %llu: truncated", (unsigned long long)i);
	if (t->name.n == 0 || t->name.n > 256)
		return k8_err_set(err, -EINVAL, "tensor %llu: name length %llu out of range",
				  (unsigned long long)i, (unsigned long long)t->name.n);
	if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
		return k8_err_set(err, -EINVAL, "tensor '%.*s': %u dimensions",
				  (int)t->name.n, t->name.p, t->n_dims);
	uint64_t nel = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = 1;
		if (d < t->n_dims && rd_u64(r, &t->ne[d]))
			return k8_err_set(err, -EINVAL, "tensor '%.*s': truncated", (int)t->name.n, t->name.p);
		if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) || nel > (1ull << 40) / t->ne[d])
			return k8_err_set(err, -EINVAL, "tensor '%.*s': dimension %u is %llu",
					  (int)t->name.n, t->name.p, d, (unsigned long long)t->ne[d]);
		nel *= t->ne[d];
	}
	if (rd_u32(r, &t->type) || rd_u64(r, &t->offset))
		return k8_err_set(err, -EINVAL, "tensor '%.*s': truncated", (int)t->name.n, t->name.p);
	if (!quant_supported(t->type))
		return k8_err_set(err, -ENOTSUP, "tensor '%.*s': type %s is not supported",
				  (int)t->name.n, t->name.p, quant_name(t->type));
	if (t->ne[0] % quant_blck(t->type))
		return k8_err_set(err, -EINVAL, "tensor '%.*s': row of %llu is not a multiple of %s's block %u",
				  (int)t->name.n, t->name.p, (unsigned long long)t->ne[0],
				  quant_name(t->type), quant_blck(t->type));
	t->nbytes = quant_row_bytes(t->type, t->ne[0]) * (nel / t->ne[0]);
	return 0;
}

int gguf_parse(struct gguf *g, const void *buf, size_t size, struct k8_err *err)
{
	memset(g, 0, sizeof(*g));
	g->base = buf;
	g->size = size;
	struct rd r = { .p = buf, .n = size };
	uint32_t magic;
	if (rd_u32(&r, &magic) || magic != GGUF_MAGIC)
		return k8_err_set(err, -EINVAL, "not a GGUF file (bad magic)");
	if (rd_u32(&r, &g->version) || rd_u64(&r, &g->n_tensors) || rd_u64(&r, &g->n_kv))
		return k8_err_set(err, -EINVAL, "truncated GGUF header");
	if (g->version != 2 && g->version != 3)
		return k8_err_set(err, -ENOTSUP, "GGUF version %u is not supported (2 and 3 are)", g->version);
	if (g->n_tensors > GGUF_MAX_TENSORS || g->n_kv > GGUF_MAX_KV)
		return k8_err_set(err, -EINVAL, "GGUF header claims %llu tensors and %llu metadata entries",
				  (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv);
	/* Every entry takes at least 12 bytes: do not allocate for counts the file cannot hold. */
	if ((g->n_kv + g->n_tensors) * 12 > size)
		return k8_err_set(err, -EINVAL, "GGUF header counts exceed the file size");
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
	g->t = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->t));
	if (!g->kv || !g->t)
		return k8_err_set(err, -ENOMEM, "out of memory");
	int rc;
	for (uint64_t i = 0; i < g->n_kv; i++)
		if ((rc = parse_kv(g, &r, &g->kv[i], err, i)))
			return rc;
	const struct gguf_str *dup = find_dup(&g->kv[0].key, g->n_kv, sizeof(*g->kv));
	if (dup == (void *)g)
		return k8_err_set(err, -ENOMEM, "out of memory");
	if (dup)
		return k8_err_set(err, -EINVAL, "metadata key '%.*s' appears twice", (int)dup->n, dup->p);
	g->alignment = GGUF_DEFAULT_ALIGN;
	const struct gguf_kv *al = gguf_find(g, "general.alignment");
	if (al) {
		uint32_t a;
		if (al->type != GGUF_U32)
			return k8_err_set(err, -EINVAL, "general.alignment is not a u32");
		memcpy(&a, al->val, 4);
		if (a == 0 || (a & (a - 1)) || a > (1u << 16))
			return k8_err_set(err, -EINVAL, "general.alignment %u is not a power of two up to 65536", a);
		g->alignment = a;
	}
	for (uint64_t i = 0; i < g->n_tensors; i++)
		if ((rc = parse_tensor(&r, &g->t[i], err, i)))
			return rc;
	g->data_off = (r.off + g->alignment - 1) / g->alignment * g->alignment;
	if (g->data_off > size && g->n_tensors)
		return k8_err_set(err, -EINVAL, "tensor data section starts past the end of the file");
	uint64_t avail = g->data_off <= size ? size - g->data_off : 0;
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		struct gguf_tensor *t = &g->t[i];
		if (t->offset % g->alignment)
			return k8_err_set(err, -EINVAL, "tensor '%.*s': offset %llu is not aligned to %llu",
					  (int)t->name.n, t->name.p, (unsigned long long)t->offset,
					  (unsigned long long)g->alignment);
		if (t->offset > avail || t->nbytes > avail - t->offset)
			return k8_err_set(err, -EINVAL, "tensor '%.*s': data (%llu bytes at %llu) runs past the end of the file",
					  (int)t->name.n, t->name.p, (unsigned long long)t->nbytes,
					  (unsigned long long)t->offset);
		t->data = g->base + g->data_off + t->offset;
	}
	dup = find_dup(&g->t[0].name, g->n_tensors, sizeof(*g->t));
	if (dup == (void *)g)
		return k8_err_set(err, -ENOMEM, "out of memory");
	if (dup)
		return k8_err_set(err, -EINVAL, "tensor '%.*s' appears twice", (int)dup->n, dup->p);
	return 0;
}

int gguf_map(struct gguf *g, const char *path, struct k8_err *err)
{
	memset(g, 0, sizeof(*g));
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0)
		return k8_err_set(err, -errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_size < 24)
		return k8_err_set(err, -EINVAL, "%s: not a GGUF file (too small or not a regular file)", path);
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		return k8_err_set(err, -errno, "%s: mmap: %s", path, strerror(errno));
	g->base = m;
	g->size = (size_t)st.st_size;
	g->mapped = true;
	return 0;
}

int gguf_parse_mapped(struct gguf *g, struct k8_err *err)
{
	int rc = gguf_parse(g, g->base, g->size, err);
	g->mapped = true;       /* gguf_parse cleared it; base and size are kept */
	return rc;
}

int gguf_open(struct gguf *g, const char *path, struct k8_err *err)
{
	int rc = gguf_map(g, path, err);
	if (rc)
		return rc;
	if ((rc = gguf_parse_mapped(g, err))) {
		gguf_close(g);
		return k8_err_wrap(err, "%s", path), rc;
	}
	return 0;
}

void gguf_close(struct gguf *g)
{
	if (!g)
		return;
	free(g->kv);
	free(g->t);
	if (g->mapped && g->base)
		munmap((void *)g->base, g->size);
	memset(g, 0, sizeof(*g));
}

const struct gguf_kv *gguf_find(const struct gguf *g, const char *key)
{
	for (uint64_t i = 0; i < g->n_kv; i++)
		if (gguf_str_eq(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

const struct gguf_tensor *gguf_tensor(const struct gguf *g, const char *name)
{
	for (uint64_t i = 0; i < g->n_tensors; i++)
		if (gguf_str_eq(g->t[i].name, name))
			return &g->t[i];
	return NULL;
}

/* A scalar integer of any type, as signed 128-bit-ish: *neg set for negative values. */
static int kv_int(uint32_t type, const uint8_t *v, uint64_t *mag, bool *neg)
{
	*neg = false;
	switch (type) {
	case GGUF_U8: *mag = v[0]; return 0;
	case GGUF_I8: { int8_t x; memcpy(&x, v, 1); *neg = x < 0; *mag = x < 0 ? (uint64_t)-(int64_t)x : (uint64_t)x; return 0; }
	case GGUF_U16: { uint16_t x; memcpy(&x, v, 2); *mag = x; return 0; }
	case GGUF_I16: { int16_t x; memcpy(&x, v, 2); *neg = x < 0; *mag = x < 0 ? (uint64_t)-(int64_t)x : (uint64_t)x; return 0; }
	case GGUF_U32: { uint32_t x; memcpy(&x, v, 4); *mag = x; return 0; }
	case GGUF_I32: { int32_t x; memcpy(&x, v, 4); *neg = x < 0; *mag = x < 0 ? (uint64_t)-(int64_t)x : (uint64_t)x; return 0; }
	case GGUF_U64: memcpy(mag, v, 8); return 0;
	case GGUF_I64: { int64_t x; memcpy(&x, v, 8); *neg = x < 0; *mag = x < 0 ? 0 - (uint64_t)x : (uint64_t)x; return 0; }
	default: return -EINVAL;
	}
}

int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out)
{
	const struct gguf_kv *kv = gguf_find(g, key);
	if (!kv)
		return -ENOENT;
	bool neg;
	if (kv_int(kv->type, kv->val, out, &neg) || neg)
		return -EINVAL;
	return 0;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
	uint64_t v;
	int rc = gguf_get_u64(g, key, &v);
	if (rc)
		return rc;
	if (v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
	const struct gguf_kv *kv = gguf_find(g, key);
	if (!kv)
		return -ENOENT;
	if (kv->type == GGUF_F32) {
		memcpy(out, kv->val, 4);
	} else if (kv->type == GGUF_F64) {
		double d;
		memcpy(&d, kv->val, 8);
		*out = (float)d;
	} else {
		return -EINVAL;
	}
	return isfinite(*out) ? 0 : -EINVAL;
}

int gguf_get_bool(const struct gguf *g, const char *key, bool *out)
{
	const struct gguf_kv *kv = gguf_find(g, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_BOOL)
		return -EINVAL;
	*out = kv->val[0] != 0;
	return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
	const struct gguf_kv *kv = gguf_find(g, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_STR)
		return -EINVAL;
	uint64_t n;
	memcpy(&n, kv->val, 8);
	out->n = n;
	out->p = (const char *)kv->val + 8;
	return 0;
}

int gguf_get_arr(const struct gguf *g, const char *key, uint32_t type, const struct gguf_kv **kv)
{
	*kv = gguf_find(g, key);
	if (!*kv)
		return -ENOENT;
	if ((*kv)->type != GGUF_ARR || (*kv)->arr_type != type)
		return -EINVAL;
	return 0;
}

void gguf_arr_strs(const struct gguf_kv *kv, struct gguf_str *out)
{
	const uint8_t *p = kv->val;
	for (uint64_t i = 0; i < kv->arr_n; i++) {
		uint64_t n;
		memcpy(&n, p, 8);
		out[i].n = n;
		out[i].p = (const char *)p + 8;
		p += 8 + n;
	}
}

double gguf_arr_num(const struct gguf_kv *kv, uint64_t i)
{
	const uint8_t *v = kv->val + i * vtype_size(kv->arr_type);
	if (kv->arr_type == GGUF_F32) {
		float f;
		memcpy(&f, v, 4);
		return f;
	}
	if (kv->arr_type == GGUF_F64) {
		double d;
		memcpy(&d, v, 8);
		return d;
	}
	uint64_t mag;
	bool neg;
	if (kv_int(kv->arr_type, v, &mag, &neg))
		return 0;
	return neg ? -(double)mag : (double)mag;
}
