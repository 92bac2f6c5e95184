/* SPDX-License-Identifier: Apache-2.0 */
/* test_util_sha.c - the SHA-256 helpers (common/sha.c) and k8_hex: known digests whole,
 * streamed in pieces and read from a file (sha256_fd leaves the fd's offset alone). */
#include "common/sha.h"
#include "common/util.h"
#include "t.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ABC_SHA "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

int main(void)
{
	char h[65], hx[9];
	uint64_t size = 99;

	k8_hex("\x00\x7f\xa5\xff", 4, hx);
	CHECK_STR(hx, "007fa5ff");
	k8_hex("", 0, hx);
	CHECK_STR(hx, "");

	sha256_hex("abc", 3, h);
	CHECK_STR(h, ABC_SHA);
	sha256_ctx c = sha256_begin();
	sha256_add(c, "a", 1);
	sha256_add(c, "", 0);
	sha256_add(c, "bc", 2);
	sha256_end(c, h);
	CHECK_STR(h, ABC_SHA);
	sha256_end(sha256_begin(), NULL);   /* freed without a digest */

	FILE *f = tmpfile();
	CHECK(f != NULL);
	int fd = fileno(f);
	CHECK_EQ_INT(sha256_fd(fd, h, &size), 0);
	CHECK_STR(h, EMPTY_SHA);
	CHECK_EQ_INT(size, 0);
	CHECK_EQ_INT(write(fd, "abc", 3), 3);
	CHECK_EQ_INT(sha256_fd(fd, h, &size), 0);
	CHECK_STR(h, ABC_SHA);
	CHECK_EQ_INT(size, 3);
	CHECK_EQ_INT(lseek(fd, 0, SEEK_CUR), 3);
	CHECK(sha256_fd(-1, h, NULL) < 0);
	fclose(f);
	return T_DONE();
}
