/* SPDX-License-Identifier: Apache-2.0 */
/* sha.c - SHA-256 helpers over OpenSSL (sha.h). */
#include "sha.h"
#include "util.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <unistd.h>

sha256_ctx sha256_begin(void)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();

	if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1)
		abort();
	return c;
}

void sha256_add(sha256_ctx c, const void *data, size_t n)
{
	EVP_DigestUpdate(c, data, n);
}

void sha256_end(sha256_ctx c, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (out) {
		EVP_DigestFinal_ex(c, md, &mdlen);
		k8_hex(md, 32, out);
	}
	EVP_MD_CTX_free(c);
}

void sha256_hex(const void *data, size_t n, char out[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];

	SHA256(data, n, md);
	k8_hex(md, 32, out);
}

int sha256_fd(int fd, char out[65], uint64_t *size)
{
	enum { CHUNK = 1 << 20 };
	unsigned char *buf = xmalloc(CHUNK);
	sha256_ctx c = sha256_begin();
	uint64_t off = 0;
	int r = 0;

	for (;;) {
		ssize_t n = pread(fd, buf, CHUNK, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : 0;
			break;
		}
		sha256_add(c, buf, (size_t)n);
		off += (uint64_t)n;
	}
	free(buf);
	sha256_end(c, r ? NULL : out);
	if (!r && size)
		*size = off;
	return r;
}
