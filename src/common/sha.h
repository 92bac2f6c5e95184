/* SPDX-License-Identifier: Apache-2.0 */
/* sha.h - SHA-256 over OpenSSL, whole or streamed, with the hex digest every caller wants
 * (host programs only; the agent does not link OpenSSL). */
#ifndef K8_SHA_H
#define K8_SHA_H

#include <stddef.h>
#include <stdint.h>

/* OpenSSL's EVP_MD_CTX, named without including OpenSSL's headers. */
struct evp_md_ctx_st;
typedef struct evp_md_ctx_st *sha256_ctx;

/* A running SHA-256. sha256_begin aborts when out of memory, like xmalloc. */
sha256_ctx sha256_begin(void);
void sha256_add(sha256_ctx c, const void *data, size_t n);
/* Finish: the hex digest into out (NULL: none) and c freed. */
void sha256_end(sha256_ctx c, char out[65]);

/* Hex SHA-256 of a buffer. */
void sha256_hex(const void *data, size_t n, char out[65]);
/* Hex SHA-256 of what fd holds from offset 0 to its end (pread: fd's offset is left
 * alone), and its size when size is not NULL. 0 or -errno. */
int sha256_fd(int fd, char out[65], uint64_t *size);

#endif
