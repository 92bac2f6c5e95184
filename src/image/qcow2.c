/* SPDX-License-Identifier: Apache-2.0 */
/* qcow2.c - an empty qcow2 layer over another, without spawning qemu-img.
 *
 * A rewind, a fork, a spare and a checkpoint each need a new top layer, and `qemu-img
 * create` cost a process start each (15-92 ms on a busy host). An empty overlay is four
 * clusters of fixed shape: the header with its extensions and the backing file's name
 * (cluster 0), the refcount table (1), one refcount block (2) and the L1 table (3), all
 * zero but the header, one table entry and four refcounts. This writes exactly what QEMU
 * 7.2's qemu-img writes (tests/unit/test_qcow2.c compares the two), so QEMU opens it as
 * it opened qemu-img's. The format: docs/interop/qcow2.txt of QEMU. */
#include "image/qcow2.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define QCOW2_CLUSTER      65536u
#define QCOW2_L2_COVERS    ((uint64_t)QCOW2_CLUSTER * (QCOW2_CLUSTER / 8))  /* 512 MiB */
#define QCOW2_HEADER_LEN   112u         /* version 3 with the compression type byte */
#define QCOW2_EXT_BACKFMT  0xe2792acau
#define QCOW2_EXT_FEATURES 0x6803f857u

/* The feature name table qemu-img writes (type, bit, name): only read to name a
 * feature in a message, kept so the bytes are qemu-img's. */
static const struct { uint8_t type, bit; const char *name; } qcow2_features[] = {
	{ 0, 0, "dirty bit" }, { 0, 1, "corrupt bit" }, { 0, 2, "external data file" },
	{ 0, 3, "compression type" }, { 0, 4, "extended L2 entries" },
	{ 1, 0, "lazy refcounts" }, { 2, 0, "bitmaps" }, { 2, 1, "raw external data" },
};

static void put32(uint8_t *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htobe64(v); memcpy(p, &v, 8); }

/* Cluster 0: the header, its extensions (backing format, feature names, end) and the
 * backing file's name after them. Returns the bytes used. */
static size_t qcow2_header(uint8_t *h, const char *backing, size_t blen, uint64_t size,
			   uint32_t l1_size)
{
	size_t o = QCOW2_HEADER_LEN, nf = sizeof(qcow2_features) / sizeof(qcow2_features[0]);

	memcpy(h, "QFI\xfb", 4);
	put32(h + 4, 3);                        /* version */
	/* backing_file_offset (8) and _size (16) once known, below */
	put32(h + 20, 16);                      /* cluster_bits */
	put64(h + 24, size);
	put32(h + 32, 0);                       /* crypt_method */
	put32(h + 36, l1_size);
	put64(h + 40, 3 * QCOW2_CLUSTER);       /* l1_table_offset */
	put64(h + 48, 1 * QCOW2_CLUSTER);       /* refcount_table_offset */
	put32(h + 56, 1);                       /* refcount_table_clusters */
	/* nb_snapshots, snapshots_offset, the three feature masks: 0 */
	put32(h + 96, 4);                       /* refcount_order: 16 bits */
	put32(h + 100, QCOW2_HEADER_LEN);
	/* 104: compression type 0 (zlib) and padding */

	put32(h + o, QCOW2_EXT_BACKFMT);
	put32(h + o + 4, 5);
	memcpy(h + o + 8, "qcow2", 5);
	o += 16;
	put32(h + o, QCOW2_EXT_FEATURES);
	put32(h + o + 4, (uint32_t)(nf * 48));
	o += 8;
	for (size_t i = 0; i < nf; i++, o += 48) {
		h[o] = qcow2_features[i].type;
		h[o + 1] = qcow2_features[i].bit;
		memcpy(h + o + 2, qcow2_features[i].name, strlen(qcow2_features[i].name));
	}
	o += 8;                                 /* the end of the extensions: type 0, 0 */
	put64(h + 8, o);                        /* backing_file_offset */
	put32(h + 16, (uint32_t)blen);
	memcpy(h + o, backing, blen);
	return o + blen;
}

int qcow2_overlay(const char *path, const char *backing, uint64_t size)
{
	size_t blen = backing ? strlen(backing) : 0;
	uint64_t l1 = (size + QCOW2_L2_COVERS - 1) / QCOW2_L2_COVERS;
	size_t total = 3 * QCOW2_CLUSTER + l1 * 8;
	uint8_t *img;
	int fd, r = 0;

	if (!blen || blen > 1023 || !size || size % 512 || size > QCOW2_OVERLAY_MAX)
		return -EINVAL;
	if (!(img = calloc(1, total)))
		return -ENOMEM;
	qcow2_header(img, backing, blen, size, (uint32_t)l1);
	put64(img + 1 * QCOW2_CLUSTER, 2 * QCOW2_CLUSTER);     /* refcount table[0] */
	for (int c = 0; c < 4; c++)                             /* clusters 0-3 used once */
		img[2 * QCOW2_CLUSTER + 2 * c + 1] = 1;
	/* The L1 table (cluster 3) is all zero: nothing allocated, all from the backing. */
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		free(img);
		return -errno;
	}
	for (size_t off = 0; off < total && !r;) {
		ssize_t n = pwrite(fd, img + off, total - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			r = n < 0 ? -errno : -EIO;
		else
			off += (size_t)n;
	}
	if (close(fd) < 0 && !r)
		r = -errno;
	if (r)
		unlink(path);
	free(img);
	return r;
}
