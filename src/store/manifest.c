/* SPDX-License-Identifier: Apache-2.0 */
/* manifest.c - a snapshot's manifest: written, read back as hostile input, checked, and
 * handed across a worker's pipe as fixed-size records (manifest.h). */
#include "store/manifest.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define MF_PACK_MAGIC 0x6b384d46u       /* "k8MF" */

/* -EBADMSG with fmt's one %s the escaped `what` (the manifest's own words are hostile). */
#define mf_bad(err, fmt, what) ({                                               \
	char mf_esc_[160];                                                      \
	str_escape_to(mf_esc_, sizeof(mf_esc_), (what));                        \
	k8_err_set((err), -EBADMSG, fmt, mf_esc_);                               \
})

bool manifest_path_ok(const char *p)
{
	size_t n = strlen(p), comp = 0;
	int depth = 1;

	if (n == 0 || n > MF_PATH_MAX || p[0] == '/' || p[n - 1] == '/')
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || p[i] == '/') {
			if (comp == 0 || (comp == 1 && p[i - 1] == '.') ||
			    (comp == 2 && p[i - 1] == '.' && p[i - 2] == '.'))
				return false;
			if (i < n && ++depth > MF_PATH_DEPTH)
				return false;
			comp = 0;
			continue;
		}
		if (!isalnum((unsigned char)p[i]) && p[i] != '.' && p[i] != '_' && p[i] != '-')
			return false;
		comp++;
	}
	return true;
}

/* A sandbox name or label: 1..63 of A-Z a-z 0-9 . _ -, not starting with '.' or '-'
 * (kosa8d checks its own stricter grammars after). */
static bool mf_name_ok(const char *s, bool empty_ok)
{
	size_t n = strlen(s);

	if (n == 0)
		return empty_ok;
	if (n > MF_NAME_MAX || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
			return false;
	return true;
}

static bool mf_digest_ok(const char *d)
{
	if (strncmp(d, "sha256:", 7) || strlen(d) != 71)
		return false;
	for (int i = 7; i < 71; i++)
		if (!isxdigit((unsigned char)d[i]) || isupper((unsigned char)d[i]))
			return false;
	return true;
}

static bool mf_printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

int manifest_check(const struct manifest *m, struct k8_err *err)
{
	uint64_t total = 0;

	if (strcmp(m->kind, "checkpoint") && strcmp(m->kind, "paused"))
		return mf_bad(err, "the manifest's kind '%s' is neither checkpoint nor paused", m->kind);
	if (!mf_name_ok(m->sandbox, false))
		return mf_bad(err, "the manifest's sandbox name '%s' is not a name", m->sandbox);
	if (!mf_name_ok(m->label, !strcmp(m->kind, "paused")) ||
	    (!strcmp(m->kind, "paused") && m->label[0]))
		return mf_bad(err, "the manifest's label '%s' is not a label", m->label);
	if (!mf_printable(m->created) || !mf_printable(m->kosa8_version))
		return mf_bad(err, "the manifest's %s has control characters", "created or version");
	if (m->guest_digest[0] && !mf_digest_ok(m->guest_digest))
		return mf_bad(err, "the manifest's guest digest '%s' is not sha256:<64 hex>",
			      m->guest_digest);
	if (m->chunk_size < CHUNK_SIZE_MIN || m->chunk_size > CHUNK_SIZE_MAX ||
	    (m->chunk_size & (m->chunk_size - 1)))
		return mf_bad(err, "the manifest's chunk size is not a power of two from 64 KiB to "
			      "16 MiB%s", "");
	if (m->config[0] != '{' || strlen(m->config) > MF_CONFIG_MAX)
		return mf_bad(err, "the manifest's settings are not an object%s", "");
	if (m->nfiles > MF_FILES_MAX || m->nimages > MF_IMAGES_MAX)
		return mf_bad(err, "the manifest names too many files or images%s", "");
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct mf_file *f = &m->files[i];
		uint64_t slots;
		if (!manifest_path_ok(f->path))
			return mf_bad(err, "the manifest names a file '%s' kosa8 never writes", f->path);
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(m->files[j].path, f->path))
				return mf_bad(err, "the manifest names the file '%s' twice", f->path);
		if (f->size > MF_FILE_SIZE_MAX)
			return mf_bad(err, "the manifest's file '%s' is larger than 1 TiB", f->path);
		if (f->mode & ~0777u)
			return mf_bad(err, "the manifest gives '%s' a mode beyond its permissions",
				      f->path);
		slots = (f->size + m->chunk_size - 1) / m->chunk_size;
		total += slots;
		if (total > MF_CHUNKS_MAX)
			return mf_bad(err, "the manifest's files hold more chunks than kosa8 reads%s", "");
		if (f->nchunks > slots)
			return mf_bad(err, "the manifest's file '%s' has more chunks than its size holds",
				      f->path);
		for (uint32_t c = 0; c < f->nchunks; c++) {
			const struct mf_chunk *k = &f->chunks[c];
			if (k->off % m->chunk_size || k->off >= f->size ||
			    k->len != (f->size - k->off < m->chunk_size ? f->size - k->off :
				       m->chunk_size) ||
			    (c && k->off <= f->chunks[c - 1].off))
				return mf_bad(err, "the manifest's file '%s' has a chunk at an offset or "
					      "of a length its chunking never makes", f->path);
		}
	}
	for (uint32_t i = 0; i < m->nimages; i++) {
		const struct mf_image *im = &m->images[i];
		bool found = false;
		if (!im->ref[0] || !mf_printable(im->ref) || !mf_digest_ok(im->digest) ||
		    im->slot < 0 || im->slot >= MF_IMAGES_MAX)
			return mf_bad(err, "the manifest's image '%s' is malformed", im->ref);
		for (uint32_t j = 0; j < m->nfiles; j++)
			found |= !strcmp(m->files[j].path, im->file);
		if (!found)
			return mf_bad(err, "the manifest's image '%s' names no file of it", im->ref);
	}
	return 0;
}

void manifest_free(struct manifest *m)
{
	for (uint32_t i = 0; i < m->nfiles && i < MF_FILES_MAX; i++) {
		free(m->files[i].chunks);
		m->files[i].chunks = NULL;
	}
}

struct mf_file *manifest_file(struct manifest *m, const char *path, uint64_t size,
			      uint32_t mode)
{
	struct mf_file *f;

	if (m->nfiles >= MF_FILES_MAX)
		return NULL;
	f = &m->files[m->nfiles++];
	memset(f, 0, sizeof(*f));
	snprintf(f->path, sizeof(f->path), "%s", path);
	f->size = size;
	f->mode = mode & 0777u;
	/* room for every chunk the size holds, so appending never fails */
	f->chunks = xcalloc(m->chunk_size ? (size + m->chunk_size - 1) / m->chunk_size + 1 : 1,
			    sizeof(*f->chunks));
	return f;
}

void manifest_chunk(struct mf_file *f, uint64_t off, uint32_t len,
		    const uint8_t id[CHUNK_ID_LEN])
{
	struct mf_chunk *c = &f->chunks[f->nchunks++];

	c->off = off;
	c->len = len;
	memcpy(c->id, id, CHUNK_ID_LEN);
}

char *manifest_json(const struct manifest *m)
{
	json_t *files = json_array(), *images = json_array(), *o, *cfg;
	char hex[2 * CHUNK_ID_LEN + 1];
	char *text;

	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct mf_file *f = &m->files[i];
		json_t *ids = json_array();
		uint64_t slots = (f->size + m->chunk_size - 1) / m->chunk_size;
		uint32_t c = 0;
		for (uint64_t s = 0; s < slots; s++) {
			if (c < f->nchunks && f->chunks[c].off == s * m->chunk_size) {
				chunk_hex(f->chunks[c].id, hex);
				json_array_append_new(ids, json_string(hex));
				c++;
			} else {
				json_array_append_new(ids, json_null());
			}
		}
		json_array_append_new(files, json_pack("{s:s,s:I,s:i,s:o}", "path", f->path, "size",
						       (json_int_t)f->size, "mode", (int)f->mode,
						       "chunks", ids));
	}
	for (uint32_t i = 0; i < m->nimages; i++)
		json_array_append_new(images, json_pack("{s:s,s:s,s:s,s:i}", "ref", m->images[i].ref,
							"digest", m->images[i].digest, "file",
							m->images[i].file, "slot", m->images[i].slot));
	cfg = json_loads(m->config, 0, NULL);
	if (!json_is_object(cfg)) {
		json_decref(cfg);
		cfg = json_object();
	}
	o = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:b,s:o,s:o,s:o}", "kosa8_manifest",
		      MF_VERSION, "kind", m->kind, "sandbox", m->sandbox, "label", m->label,
		      "created", m->created, "kosa8_version", m->kosa8_version, "guest_digest",
		      m->guest_digest, "chunk_size", (json_int_t)m->chunk_size, "encrypted",
		      m->encrypted, "config", cfg, "images", images, "files", files);
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return text;
}

/* ---- reading it back (hostile) ---- */

static int mf_str(json_t *o, const char *key, char *out, size_t cap, bool required,
		  struct k8_err *err)
{
	json_t *v = json_object_get(o, key);

	if (!v && !required) {
		out[0] = '\0';
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) >= cap ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return mf_bad(err, "the manifest's '%s' is not a string of the right size", key);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int mf_uint(json_t *o, const char *key, uint64_t max, uint64_t *out, struct k8_err *err)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > max)
		return mf_bad(err, "the manifest's '%s' is not a number in range", key);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int mf_parse_file(json_t *jf, struct manifest *m, uint64_t *budget, struct k8_err *err)
{
	struct mf_file *f;
	char path[MF_PATH_MAX + 1];
	uint64_t size, mode, slots;
	json_t *ids, *v;
	size_t i;
	int r;

	if (!json_is_object(jf))
		return mf_bad(err, "the manifest's files hold something other than objects%s", "");
	if ((r = mf_str(jf, "path", path, sizeof(path), true, err)) ||
	    (r = mf_uint(jf, "size", MF_FILE_SIZE_MAX, &size, err)) ||
	    (r = mf_uint(jf, "mode", 0777, &mode, err)))
		return r;
	if (!manifest_path_ok(path))
		return mf_bad(err, "the manifest names a file '%s' kosa8 never writes", path);
	ids = json_object_get(jf, "chunks");
	slots = (size + m->chunk_size - 1) / m->chunk_size;
	if (!json_is_array(ids) || json_array_size(ids) != slots)
		return mf_bad(err, "the manifest's file '%s' does not list one chunk per chunk of "
			      "its size", path);
	if (slots > *budget)
		return mf_bad(err, "the manifest's files hold more chunks than kosa8 reads%s", "");
	*budget -= slots;
	if (!(f = manifest_file(m, path, size, (uint32_t)mode)))
		return mf_bad(err, "the manifest has more than 64 files%s", "");
	json_array_foreach(ids, i, v) {
		uint8_t id[CHUNK_ID_LEN];
		uint64_t off = (uint64_t)i * m->chunk_size;
		if (json_is_null(v))
			continue;
		if (!json_is_string(v) || json_string_length(v) != 2 * CHUNK_ID_LEN ||
		    chunk_unhex(json_string_value(v), id))
			return mf_bad(err, "the manifest's file '%s' has a chunk id that is not 64 "
				      "hex digits", path);
		manifest_chunk(f, off, (uint32_t)(size - off < m->chunk_size ? size - off :
						  m->chunk_size), id);
	}
	return 0;
}

int manifest_parse(const char *p, size_t n, struct manifest *m, struct k8_err *err)
{
	json_error_t je;
	json_t *o, *v, *cfg, *files, *images;
	uint64_t ver, cs, budget = MF_CHUNKS_MAX;
	size_t i;
	char *c;
	int r;

	memset(m, 0, sizeof(*m));
	if (n > MF_JSON_MAX)
		return k8_err_set(err, -E2BIG, "the manifest is over %u bytes", MF_JSON_MAX);
	o = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(o)) {
		json_decref(o);
		return mf_bad(err, "the manifest is not a JSON object (%s)", je.text);
	}
	if ((r = mf_uint(o, "kosa8_manifest", 1000, &ver, err)))
		goto out;
	if (ver != MF_VERSION) {
		r = k8_err_set(err, -EBADMSG, "the manifest is of version %llu; this kosa8 reads "
			       "version %d", (unsigned long long)ver, MF_VERSION);
		goto out;
	}
	if ((r = mf_str(o, "kind", m->kind, sizeof(m->kind), true, err)) ||
	    (r = mf_str(o, "sandbox", m->sandbox, sizeof(m->sandbox), true, err)) ||
	    (r = mf_str(o, "label", m->label, sizeof(m->label), false, err)) ||
	    (r = mf_str(o, "created", m->created, sizeof(m->created), false, err)) ||
	    (r = mf_str(o, "kosa8_version", m->kosa8_version, sizeof(m->kosa8_version), false,
			err)) ||
	    (r = mf_str(o, "guest_digest", m->guest_digest, sizeof(m->guest_digest), false,
			err)) ||
	    (r = mf_uint(o, "chunk_size", CHUNK_SIZE_MAX, &cs, err)))
		goto out;
	m->chunk_size = (uint32_t)cs;
	if (cs < CHUNK_SIZE_MIN || (cs & (cs - 1))) {
		r = mf_bad(err, "the manifest's chunk size is not a power of two from 64 KiB to "
			   "16 MiB%s", "");
		goto out;
	}
	v = json_object_get(o, "encrypted");
	if (!json_is_boolean(v)) {
		r = mf_bad(err, "the manifest's '%s' is not true or false", "encrypted");
		goto out;
	}
	m->encrypted = json_is_true(v);
	cfg = json_object_get(o, "config");
	if (!json_is_object(cfg)) {
		r = mf_bad(err, "the manifest's '%s' is not an object", "config");
		goto out;
	}
	c = json_dumps(cfg, JSON_COMPACT);
	if (!c || strlen(c) > MF_CONFIG_MAX) {
		free(c);
		r = k8_err_set(err, -E2BIG, "the manifest's settings are over %u bytes",
			       MF_CONFIG_MAX);
		goto out;
	}
	memcpy(m->config, c, strlen(c) + 1);
	free(c);
	files = json_object_get(o, "files");
	images = json_object_get(o, "images");
	if (!json_is_array(files) || json_array_size(files) > MF_FILES_MAX ||
	    !json_is_array(images) || json_array_size(images) > MF_IMAGES_MAX) {
		r = mf_bad(err, "the manifest's files or images are not a list of at most 64 and 4%s",
			   "");
		goto out;
	}
	json_array_foreach(files, i, v)
		if ((r = mf_parse_file(v, m, &budget, err)))
			goto out;
	json_array_foreach(images, i, v) {
		struct mf_image *im = &m->images[m->nimages];
		uint64_t slot;
		if (!json_is_object(v)) {
			r = mf_bad(err, "the manifest's images hold something other than objects%s", "");
			goto out;
		}
		if ((r = mf_str(v, "ref", im->ref, sizeof(im->ref), true, err)) ||
		    (r = mf_str(v, "digest", im->digest, sizeof(im->digest), true, err)) ||
		    (r = mf_str(v, "file", im->file, sizeof(im->file), true, err)) ||
		    (r = mf_uint(v, "slot", MF_IMAGES_MAX - 1, &slot, err)))
			goto out;
		im->slot = (int)slot;
		m->nimages++;
	}
	r = manifest_check(m, err);
out:
	json_decref(o);
	return r;
}

/* ---- across a worker's pipe ---- */

struct mf_pack_head {
	uint32_t magic, nfiles, nimages, pad;
};

struct mf_pack_file {
	char path[MF_PATH_MAX + 1];
	uint64_t size;
	uint32_t mode, nchunks;
};

int manifest_pack(const struct manifest *m, int fd)
{
	struct mf_pack_head h = { .magic = MF_PACK_MAGIC, .nfiles = m->nfiles,
				  .nimages = m->nimages };
	int r;

	/* the struct's scalars and strings, then each file and its chunks */
	if ((r = write_full(fd, &h, sizeof(h))) ||
	    (r = write_full(fd, m, offsetof(struct manifest, files))))
		return r;
	for (uint32_t i = 0; i < m->nfiles; i++) {
		struct mf_pack_file pf = { .size = m->files[i].size, .mode = m->files[i].mode,
					   .nchunks = m->files[i].nchunks };
		memcpy(pf.path, m->files[i].path, sizeof(pf.path));
		if ((r = write_full(fd, &pf, sizeof(pf))) ||
		    (r = write_full(fd, m->files[i].chunks,
				    (size_t)m->files[i].nchunks * sizeof(struct mf_chunk))))
			return r;
	}
	return 0;
}

/* Every string of the part read as it is made a terminated one. */
#define MF_TERM(s) ((s)[sizeof(s) - 1] = '\0')

int manifest_unpack(int fd, struct manifest *m, struct k8_err *err)
{
	struct mf_pack_head h;
	uint64_t budget = MF_CHUNKS_MAX;

	memset(m, 0, sizeof(*m));
	if (read_full(fd, &h, sizeof(h)) || h.magic != MF_PACK_MAGIC ||
	    h.nfiles > MF_FILES_MAX || h.nimages > MF_IMAGES_MAX ||
	    read_full(fd, m, offsetof(struct manifest, files)))
		return k8_err_set(err, -EBADMSG, "the manifest reader's answer is malformed");
	m->nfiles = 0;          /* counted as the files come */
	MF_TERM(m->kind);
	MF_TERM(m->sandbox);
	MF_TERM(m->label);
	MF_TERM(m->created);
	MF_TERM(m->kosa8_version);
	MF_TERM(m->guest_digest);
	MF_TERM(m->config);
	if (m->nimages != h.nimages)
		return k8_err_set(err, -EBADMSG, "the manifest reader's answer is malformed");
	for (uint32_t i = 0; i < m->nimages; i++) {
		MF_TERM(m->images[i].ref);
		MF_TERM(m->images[i].digest);
		MF_TERM(m->images[i].file);
	}
	if (m->chunk_size < CHUNK_SIZE_MIN || m->chunk_size > CHUNK_SIZE_MAX)
		return k8_err_set(err, -EBADMSG, "the manifest reader's answer is malformed");
	for (uint32_t i = 0; i < h.nfiles; i++) {
		struct mf_pack_file pf;
		struct mf_file *f;
		uint64_t slots;
		if (read_full(fd, &pf, sizeof(pf)))
			return k8_err_set(err, -EBADMSG, "the manifest reader's answer is cut short");
		MF_TERM(pf.path);
		slots = pf.size <= MF_FILE_SIZE_MAX ?
			(pf.size + m->chunk_size - 1) / m->chunk_size : UINT64_MAX;
		if (slots > budget || pf.nchunks > slots)
			return k8_err_set(err, -EBADMSG, "the manifest reader's answer has more chunks "
					  "than it may");
		budget -= slots;
		f = manifest_file(m, pf.path, pf.size, pf.mode);
		if (read_full(fd, f->chunks, (size_t)pf.nchunks * sizeof(struct mf_chunk)))
			return k8_err_set(err, -EBADMSG, "the manifest reader's answer is cut short");
		f->nchunks = pf.nchunks;
		f->mode = pf.mode;
	}
	return manifest_check(m, err);
}
