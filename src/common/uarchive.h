/* SPDX-License-Identifier: Apache-2.0 */
/* uarchive.h - the one way kosa8 opens a libarchive reader on bytes nobody vouches for
 * (build contexts, ADD sources, image layers and archives, RUN layers, bundles, a
 * container's tar).
 *
 * libarchive decodes some compressions by starting a program found on PATH (lrzip,
 * lzop, grzip, lz4, lzip... whenever it was built without the library):
 * archive_read_support_filter_all() lets hostile bytes that start with such a magic run
 * that program, as whoever reads them (the daemon: root). This reader knows tar only,
 * and on request the compressions the image unpacker takes, gzip, zstd, xz and bzip2,
 * each decoded by a library inside this process; a libarchive that would need a program
 * for one of them is refused. Anything else is "not an archive" to libarchive. */
#ifndef K8_COMMON_UARCHIVE_H
#define K8_COMMON_UARCHIVE_H

#include "common/util.h"

struct archive;

enum {
	UARCHIVE_COMPRESSED = 1u << 0,   /* also gzip, zstd, xz, bzip2 (detected) */
	UARCHIVE_EMPTY = 1u << 1,        /* an empty input reads as an empty archive */
};

/* A new reader for tar (ustar, pax, GNU) with the filters `flags` asks for. NULL with
 * `err` set when out of memory or when libarchive would decode one of them with an
 * external program (-ENOTSUP). The caller opens and frees it as usual. */
struct archive *uarchive_reader(unsigned flags, struct k8_err *err);

#endif
