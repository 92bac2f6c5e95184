/* SPDX-License-Identifier: Apache-2.0 */
/* sha.c - SHA-256 helpers over OpenSSL (host programs only; the agent does not link it). */
#include "util.h"

#include <openssl/sha.h>

void sha256_hex(const void *data, size_t n, char out[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	static const char hx[] = "0123456789abcdef";

	SHA256(data, n, md);
	for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
		out[2 * i] = hx[md[i] >> 4];
		out[2 * i + 1] = hx[md[i] & 15];
	}
	out[64] = '\0';
}
