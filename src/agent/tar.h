/* SPDX-License-Identifier: Apache-2.0 */
/* tar.h - a bounded tar reader and a tar header writer for the archive ops (archive.c).
 *
 * Pure code over buffers (no I/O, no allocation beyond the reader's pax buffer), so the
 * reader is fuzzed on the host (tests/fuzz/fuzz_tar.c) from this very source. The reader
 * takes hostile bytes (an API client's): every header is checksummed, numbers are parsed
 * with bounds, pax and GNU long-name records are capped, and each entry's name is
 * normalised by tar_name_clean() before anyone sees it (absolute names and `..`
 * components are refused, so an entry can never name a path above the extraction point
 * lexically; archive.c resolves it with openat2(RESOLVE_BENEATH) on top of that).
 */
#ifndef K8_AGENT_TAR_H
#define K8_AGENT_TAR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"

#define TAR_BLOCK 512
#define TAR_NAME_MAX 4096          /* bytes of an entry's name or link target */
#define TAR_PAX_MAX (64u << 10)    /* bytes of one pax or GNU long-name record */
#define TAR_SIZE_MAX (1ull << 62)  /* an entry's announced size */

enum tar_type {
	TAR_REG = '0',
	TAR_LINK = '1',
	TAR_SYMLINK = '2',
	TAR_CHR = '3',
	TAR_BLK = '4',
	TAR_DIR = '5',
	TAR_FIFO = '6',
};

struct tar_entry {
	char name[TAR_NAME_MAX + 1];   /* clean, relative, no trailing '/'; "" is the top */
	char link[TAR_NAME_MAX + 1];   /* symlink target as is; hard link: a clean name */
	int type;                      /* enum tar_type */
	uint32_t mode;                 /* permission bits and setuid/setgid/sticky */
	uint64_t uid, gid;
	uint64_t size;                 /* data bytes that follow (regular files only) */
	int64_t mtime;                 /* seconds */
	uint32_t nsec;
	uint32_t devmajor, devminor;
};

/* The reader calls entry() for each entry, then data() with its bytes in pieces (none
 * for an entry without data), then end(). A negative return stops the reader and is
 * returned by tar_feed(). */
struct tar_ops {
	int (*entry)(void *ctx, const struct tar_entry *e);
	int (*data)(void *ctx, const unsigned char *p, size_t n);
	int (*end)(void *ctx);
};

enum tar_state { TAR_S_HDR, TAR_S_DATA, TAR_S_PAD, TAR_S_META, TAR_S_SKIP, TAR_S_DONE };

struct tar_reader {
	enum tar_state st;
	unsigned char blk[TAR_BLOCK];
	size_t have;                   /* bytes of blk collected */
	uint64_t left;                 /* data (or meta) bytes still to come */
	uint64_t pad;                  /* padding bytes after them */
	int zeros;                     /* consecutive zero blocks seen */
	int failed;
	/* a pax ('x') or GNU long-name ('L', 'K') record being read */
	int meta_type;
	unsigned char *meta;           /* TAR_PAX_MAX + 1 bytes, allocated on first use */
	size_t meta_len;
	/* overrides for the next entry */
	char next_name[TAR_NAME_MAX + 1], next_link[TAR_NAME_MAX + 1];
	int has_name, has_link, has_size, has_mtime, has_uid, has_gid;
	uint64_t next_size, next_uid, next_gid;
	int64_t next_mtime;
	uint32_t next_nsec;
	struct tar_entry e;            /* the current entry */
	uint64_t entries;
};

void tar_reader_init(struct tar_reader *r);
void tar_reader_free(struct tar_reader *r);
/* Consume n bytes. 0, a callback's negative return, or -EBADMSG/-E2BIG/-ENAMETOOLONG/
 * -ENOTSUP with a message; after an error the reader refuses everything. */
int tar_feed(struct tar_reader *r, const unsigned char *p, size_t n, const struct tar_ops *ops,
	     void *ctx, struct k8_err *err);
/* The input ended: 0 when it ended between entries (the end-of-archive blocks are
 * optional, as in GNU tar), else -EBADMSG "truncated". */
int tar_finish(struct tar_reader *r, struct k8_err *err);

/* Normalise a name from an archive into out[TAR_NAME_MAX + 1]: leading "./" and
 * repeated, "." and trailing slashes go. 0, or -EPERM for an absolute name or one with a
 * ".." component, -ENAMETOOLONG, -EINVAL for an empty one that is not "." (or "./"). */
int tar_name_clean(const char *in, char *out, struct k8_err *err);

/* Write the header block(s) of `e` (a pax 'x' record first when the name or link is over
 * 100 bytes, or a number does not fit ustar's octal fields) into out; returns the bytes
 * written (a multiple of 512), at most TAR_HDR_MAX. `e->name` is used as given (the writer
 * adds the '/' of a directory). */
#define TAR_HDR_MAX (4 * TAR_BLOCK + 2 * TAR_NAME_MAX + 1024)
size_t tar_header(const struct tar_entry *e, unsigned char *out);

#endif
