/* SPDX-License-Identifier: Apache-2.0 */
/* manifest.h - a snapshot's manifest (docs/stores.md): which files a checkpoint or a paused
 * sandbox is made of, each file's size, mode and chunks, the images it used by digest, the
 * guest image's digest, the kosa8 version that pushed it, and the sandbox's settings.
 * Files are cut in chunks of a fixed size (chunk_size): chunk i covers [i * chunk_size,
 * (i + 1) * chunk_size) of its file, the last one what is left; in the JSON each file's
 * "chunks" lists one id per chunk, or null for one of zeros only (a hole: never stored).
 *
 * Written by kosa8d (manifest_json), read back as hostile input: manifest_parse takes the
 * JSON under hard bounds and checks everything manifest_check checks, in a jailed worker
 * (store/jobs.c), which hands kosa8d the fixed-size records of manifest_pack; kosa8d reads
 * them with manifest_unpack and checks them again. Pure: fuzzed (fuzz_manifest). */
#ifndef K8_STORE_MANIFEST_H
#define K8_STORE_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "store/chunk.h"

#define MF_VERSION 1
#define MF_JSON_MAX (96u << 20)         /* a manifest's JSON, at most */
#define MF_FILES_MAX 64
#define MF_IMAGES_MAX 4
#define MF_CHUNKS_MAX (1u << 20)        /* ids and nulls in all files together */
#define MF_PATH_MAX 127
#define MF_PATH_DEPTH 4
#define MF_FILE_SIZE_MAX (1ull << 40)
#define MF_CONFIG_MAX (64u << 10)       /* the settings object, as compact JSON */
#define MF_NAME_MAX 63

struct mf_chunk {
	uint64_t off;
	uint32_t len;
	uint8_t id[CHUNK_ID_LEN];
};

struct mf_file {
	char path[MF_PATH_MAX + 1];
	uint64_t size;
	uint32_t mode;                  /* permission bits only */
	uint32_t nchunks;
	struct mf_chunk *chunks;        /* sorted by offset, never overlapping */
};

struct mf_image {
	char ref[512];
	char digest[80];                /* sha256:<64 hex> */
	char file[MF_PATH_MAX + 1];     /* one of the files: its disk */
	int slot;
};

struct manifest {
	char kind[16];                  /* "checkpoint" or "paused" */
	char sandbox[MF_NAME_MAX + 1];
	char label[MF_NAME_MAX + 1];    /* "" for a paused sandbox */
	char created[32];
	char kosa8_version[32];
	char guest_digest[80];          /* sha256:<64 hex> */
	uint32_t chunk_size;
	bool encrypted;
	char config[MF_CONFIG_MAX + 1]; /* the sandbox's settings: a JSON object, compact */
	uint32_t nimages;
	struct mf_image images[MF_IMAGES_MAX];
	uint32_t nfiles;
	struct mf_file files[MF_FILES_MAX];
};

/* A path of the manifest: 1..MF_PATH_DEPTH components of A-Z a-z 0-9 . _ -, none "."
 * or "..", no leading or trailing '/', at most MF_PATH_MAX bytes. */
bool manifest_path_ok(const char *p);
/* Everything a reader relies on, on a manifest from anywhere: 0 or -EBADMSG naming it. */
int manifest_check(const struct manifest *m, struct k8_err *err);
/* Free the chunk arrays (the struct itself is the caller's). */
void manifest_free(struct manifest *m);
/* Add a file (path, size, mode) and return it, to append chunks to with manifest_chunk. */
struct mf_file *manifest_file(struct manifest *m, const char *path, uint64_t size,
			      uint32_t mode);
void manifest_chunk(struct mf_file *f, uint64_t off, uint32_t len,
		    const uint8_t id[CHUNK_ID_LEN]);

/* The manifest as JSON (malloc'd, NUL-terminated). */
char *manifest_json(const struct manifest *m);
/* n bytes of JSON (hostile) into m (zeroed first; manifest_free it on success and on
 * failure). 0, or -EBADMSG / -E2BIG with a message. */
int manifest_parse(const char *p, size_t n, struct manifest *m, struct k8_err *err);

/* The fixed-size records of a checked manifest, written to fd (a worker's answer), and
 * read back (hostile: every count bounded before it is used, then manifest_check). */
int manifest_pack(const struct manifest *m, int fd);
int manifest_unpack(int fd, struct manifest *m, struct k8_err *err);

#endif
