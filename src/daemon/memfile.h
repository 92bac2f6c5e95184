/* SPDX-License-Identifier: Apache-2.0 */
/* memfile.h - a VM's RAM as a file (memfile.c): written from a stopped QEMU's memory into
 * a sparse file that restores map copy-on-write (docs/design.md "Memory as a file").
 * Mechanism: knows no sandbox. */
#ifndef K8_MEMFILE_H
#define K8_MEMFILE_H

#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"

/* Where a VM's RAM is: in QEMU's address space, and the file it maps (if any). */
struct memfile_src {
	pid_t pid;                      /* the QEMU, its vCPUs stopped */
	uint64_t hva;                   /* the guest RAM's start in it (page-aligned) */
	uint64_t size;                  /* the guest RAM's size (bytes, whole pages) */
	/* The file QEMU maps the RAM from, private (a restored VM: its pages not yet
	 * written read from here); -1: QEMU's own anonymous memory (a VM that booted). */
	int base_fd;
};

struct memfile_stats {
	uint64_t written;               /* bytes written (pages that are not all zero) */
	uint64_t from_vm;               /* bytes read out of QEMU (pages it wrote itself) */
	uint64_t from_disk;             /* bytes of the base read from the disk (not cached) */
	uint64_t ms, read_ms, write_ms; /* in all; reading (the windows); writing (meanwhile) */
};

/* Write the RAM `src` describes into out_fd (made by memfile_create: its size is the
 * RAM's, all holes): every page the guest has that is not all zero, at its offset; the
 * rest stays a hole. A page QEMU holds privately (anonymous, or copied on write from the
 * base) is read out of QEMU (process_vm_readv; the caller is allowed to), any other page
 * from the base file. Only pages /proc/PID/pagemap shows present are read out of QEMU, so
 * nothing in it is faulted in. The caller syncs out_fd. 0 or a negative errno with err. */
int memfile_write(const struct memfile_src *src, int out_fd, struct memfile_stats *st,
		  struct k8_err *err);
/* A new memory file at `path` (mode 0600, O_EXCL) of `size` bytes, all holes, open for
 * memfile_write: O_DIRECT where the file system takes it (the pages go to the disk
 * without passing through the page cache: on a host that is itself a VM fresh page
 * cache costs more than the write). Returns the fd or a negative errno with err. */
int memfile_create(const char *path, uint64_t size, struct k8_err *err);
/* Open an existing memory file read-only for a restore, and check it is a regular file
 * (no symlink followed) of exactly `size` bytes (a QEMU maps it as the guest's RAM),
 * owned by the caller and 0600 (-EPERM otherwise: every VM that maps it would change with
 * it). fd or -errno with err. */
int memfile_open(const char *path, uint64_t size, struct k8_err *err);

/* Read a memory file's data into the page cache on a thread of its own (its holes are
 * skipped), for a VM that starts mapping it now: its guest's first touches then find the
 * pages cached instead of waiting for the disk one fault at a time, and the next
 * checkpoint of that VM copies its unchanged pages from the cache. The cache is
 * reclaimable and shared with every other VM that maps the file. */
void memfile_warm(int fd);
/* Close a memory file's descriptor (-1: nothing). When it is the last reference to a file
 * already unlinked (a VM resumed from paused/ mapped it), closing it frees the file's
 * blocks, which ext4 takes about a millisecond per MiB for: that happens on a thread of
 * its own, so a rewind that ended that VM does not wait for it. */
void memfile_close(int fd);

#endif
