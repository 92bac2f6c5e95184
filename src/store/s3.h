/* SPDX-License-Identifier: Apache-2.0 */
/* s3.h - an S3 client on libcurl: AWS Signature V4 (libcurl's CURLOPT_AWS_SIGV4),
 * path-style or virtual-hosted addressing, PUT/GET/HEAD/DELETE/ListObjectsV2, multipart
 * upload resumed from a journal (and the server's ListParts where it has one), ranged and
 * resumed downloads, retries with exponential backoff, HTTPS with the system's CAs or a
 * given CA file. Mechanism only: no daemon state; XML answers are read by the reader the
 * caller plugs in (kosa8d: a jailed worker, store/jobs.c), by s3xml in process otherwise.
 *
 * Errors: 0 or a negative errno with a message: -ENOENT for 404, -EACCES for 403,
 * -EHOSTUNREACH when no answer came (after the retries), -EPROTO for any other status.
 * One `struct s3` per thread: it reuses its connection between requests. */
#ifndef K8_STORE_S3_H
#define K8_STORE_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "store/s3xml.h"

#define S3_ENDPOINT_MAX 255
#define S3_BUCKET_MAX 63
#define S3_REGION_MAX 32
#define S3_ACCESS_MAX 128
#define S3_SECRET_MAX 256
#define S3_KEY_MAX 1024
#define S3_RETRIES 5                    /* attempts after the first */
#define S3_PART_MIN (5ull << 20)        /* S3's smallest part but the last */
#define S3_PARTS_MAX 10000

/* Counters, added to atomically by every thread using one connection's config. */
struct s3_stats {
	uint64_t requests, retries, bytes_up, bytes_down;
};

typedef int (*s3_xml_fn)(void *ctx, enum s3xml_kind kind, const char *p, size_t n, void *out,
			 struct k8_err *err);

struct s3_conf {
	char endpoint[S3_ENDPOINT_MAX + 1];     /* http(s)://host[:port], no path */
	char bucket[S3_BUCKET_MAX + 1];
	char region[S3_REGION_MAX + 1];
	char access_key[S3_ACCESS_MAX + 1];
	char secret_key[S3_SECRET_MAX + 1];
	bool path_style;                        /* else BUCKET.host */
	char ca_file[4096];                     /* "": the system's CAs */
	int retries;                            /* < 0: S3_RETRIES */
	unsigned backoff_ms;                    /* the first pause; 0: 200 ms */
	long timeout_s;                         /* one request, whole; 0: 600 s */
	s3_xml_fn xml;                          /* NULL: s3xml_parse in this process */
	void *xml_ctx;
	struct s3_stats *stats;                 /* may be NULL */
};

struct s3 {
	const struct s3_conf *c;
	void *curl;                             /* CURL *, created on first use */
};

/* Grammar of the settings (pure): endpoint http(s)://host[:port] (host a name or an
 * address, no user, path, query); bucket S3's DNS-compatible names (3-63 of a-z 0-9 . -,
 * starting and ending with a letter or digit; no '.' with virtual-hosted https); region
 * a-z 0-9 '-' (1-32). 0 or -EINVAL naming the setting. */
int s3_conf_check(const struct s3_conf *c, struct k8_err *err);
/* The keys kosa8 makes: 1-1024 bytes of A-Z a-z 0-9 / . _ -, no empty, "." or ".."
 * component, no leading or trailing '/'. An empty key is the bucket itself. */
bool s3_key_ok(const char *key);
/* The URL of key (may be "") with a query already in canonical form (sorted, each
 * value encoded by s3_query_enc, "name=" for a flag; may be NULL): 0, or -ENAMETOOLONG. */
int s3_url(const struct s3_conf *c, const char *key, const char *query, char *out, size_t n);
/* AWS's URI encoding of a query value into out (A-Z a-z 0-9 - _ . ~ kept, every other
 * byte %XX): 0 or -ENAMETOOLONG. */
int s3_query_enc(const char *s, char *out, size_t n);
/* How long the retry `attempt` (1, 2, ...) waits: backoff * 2^(attempt-1), at most 8 s,
 * with up to half of it random (so clients that failed together do not retry together). */
unsigned s3_backoff_ms(unsigned base_ms, int attempt, unsigned rnd);

void s3_init(struct s3 *s, const struct s3_conf *c);
void s3_fini(struct s3 *s);

/* PUT n bytes at data (their SHA-256 signed along). */
int s3_put(struct s3 *s, const char *key, const void *data, size_t n, struct k8_err *err);
/* GET into memory: at most max bytes, malloc'd into *out (NUL-terminated), *n its length;
 * -EFBIG past max. */
int s3_get(struct s3 *s, const char *key, size_t max, char **out, size_t *n,
	   struct k8_err *err);
/* HEAD: 0 with *size (may be NULL), or -ENOENT. */
int s3_head(struct s3 *s, const char *key, uint64_t *size, struct k8_err *err);
/* DELETE (S3 answers 204 for a key that is not there too). */
int s3_delete(struct s3 *s, const char *key, struct k8_err *err);
/* Every object whose key starts with prefix, page by page (ListObjectsV2): fn(ctx, o)
 * for each; a non-zero return stops the listing and is returned. */
int s3_list(struct s3 *s, const char *prefix,
	    int (*fn)(void *ctx, const struct s3xml_obj *o), void *ctx, struct k8_err *err);

/* Bytes [off, off + len) of key into fd at fd_off (pwrite): a download cut short is
 * taken up where it stopped with a Range from there (at most the retries). -EIO when
 * the server sends other than the bytes asked for. */
int s3_get_range(struct s3 *s, const char *key, uint64_t off, uint64_t len, int fd,
		 uint64_t fd_off, struct k8_err *err);

/* A file of `size` bytes from fd as key: one PUT up to part_size, else a multipart upload
 * of part_size parts (>= S3_PART_MIN, at most S3_PARTS_MAX parts). With `journal` (a
 * path), the upload id and each part's ETag are kept there as they complete, so that an
 * upload stopped half-way (a crash, a lost network) is taken up by the next call for the
 * same key and size: parts the server lists (ListParts, where it has it; else those the
 * journal names) are not sent again. `progress(ctx, bytes_done)` after each part. The
 * journal is removed once the object is complete. *sent: bytes sent by this call. */
int s3_upload_file(struct s3 *s, const char *key, int fd, uint64_t size, uint64_t part_size,
		   const char *journal, void (*progress)(void *ctx, uint64_t done), void *ctx,
		   uint64_t *sent, struct k8_err *err);
/* Give up a multipart upload (the server frees its parts); journal removed when given. */
int s3_upload_abort(struct s3 *s, const char *key, const char *upload_id, struct k8_err *err);

#endif
