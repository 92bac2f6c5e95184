/* SPDX-License-Identifier: Apache-2.0 */
/* s3xml.h - the XML of S3's answers, read as hostile input: a bounded reader of the small
 * subset S3 speaks (elements, text, the five entities and character references; no DTD,
 * no CDATA, no processing instruction but the declaration) and the five answers kosa8's
 * S3 client reads: an error, a page of ListObjectsV2, a multipart upload's id, a page of
 * its parts, and the answer to its completion (which S3 may send as 200 with an error).
 *
 * Every result is a plain struct of fixed arrays, no pointer: a jailed worker writes it
 * as it is on a pipe and its reader checks it with s3xml_*_check (store/jobs.c). Pure: no
 * I/O, no allocation but the caller's struct; fuzzed (tests/fuzz/fuzz_s3xml.c). */
#ifndef K8_STORE_S3XML_H
#define K8_STORE_S3XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define S3XML_MAX_BYTES (8u << 20)      /* an answer longer than this is refused */
#define S3XML_MAX_DEPTH 8
#define S3XML_KEY_MAX 1024              /* S3's own limit on a key, in bytes */
#define S3XML_ETAG_MAX 128
#define S3XML_TOKEN_MAX 1024            /* continuation tokens, upload ids */
#define S3XML_LIST_MAX 1000             /* keys in one page: S3's own maximum */
#define S3XML_PARTS_MAX 1000

enum s3xml_kind {
	S3XML_ERROR = 1,
	S3XML_LIST,
	S3XML_UPLOAD_ID,
	S3XML_PARTS,
	S3XML_COMPLETE,
};

struct s3xml_error {
	char code[64];
	char message[256];
};

struct s3xml_obj {
	char key[S3XML_KEY_MAX + 1];
	uint64_t size;
	int64_t mtime;                          /* LastModified, seconds since 1970 (UTC) */
	char etag[S3XML_ETAG_MAX + 1];
};

struct s3xml_list {
	uint32_t n;
	bool truncated;
	char next[S3XML_TOKEN_MAX + 1];         /* NextContinuationToken */
	struct s3xml_obj o[S3XML_LIST_MAX];
};

struct s3xml_part {
	uint32_t number;
	uint64_t size;
	char etag[S3XML_ETAG_MAX + 1];
};

struct s3xml_parts {
	uint32_t n;
	bool truncated;
	uint32_t next_marker;                   /* NextPartNumberMarker */
	struct s3xml_part p[S3XML_PARTS_MAX];
};

struct s3xml_upload {
	char id[S3XML_TOKEN_MAX + 1];
};

/* CompleteMultipartUpload's answer: its ETag, or the error it carried. */
struct s3xml_complete {
	bool failed;
	char etag[S3XML_ETAG_MAX + 1];
	struct s3xml_error error;
};

/* Each reader fills `out` (zeroed first) from n bytes at p: 0, or -EBADMSG (not XML of
 * the subset, or not the answer expected) / -E2BIG (past a bound) with a message. */
int s3xml_error(const char *p, size_t n, struct s3xml_error *out, struct k8_err *err);
int s3xml_list(const char *p, size_t n, struct s3xml_list *out, struct k8_err *err);
int s3xml_upload_id(const char *p, size_t n, struct s3xml_upload *out, struct k8_err *err);
int s3xml_parts(const char *p, size_t n, struct s3xml_parts *out, struct k8_err *err);
int s3xml_complete(const char *p, size_t n, struct s3xml_complete *out, struct k8_err *err);

/* The size of kind's struct; 0 for an unknown kind. */
size_t s3xml_size(enum s3xml_kind kind);
/* Read an answer of `kind` into out (s3xml_size(kind) bytes). */
int s3xml_parse(enum s3xml_kind kind, const char *p, size_t n, void *out, struct k8_err *err);
/* A result of `kind` that crossed a trust boundary (a worker's pipe): its counts within
 * bounds and every string terminated within its array. 0 or -EBADMSG. */
int s3xml_check(enum s3xml_kind kind, void *res);

#endif
