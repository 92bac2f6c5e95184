/* SPDX-License-Identifier: Apache-2.0 */
/* qemu_ram.c - kosa8-qemu-ram.so, preloaded into a QEMU whose RAM maps a memory file: QEMU
 * 7.2 with the read-only descriptor the daemon gives it.
 *
 * A restored VM's RAM is a checkpoint's memory file mapped private (copy on write), shared
 * by every copy of that checkpoint (docs/design.md "Memory as a file"). QEMU must not be
 * able to write that file: a fork could change its siblings' memory, an escaped QEMU
 * the checkpoint a later rewind loads. So the daemon opens it read-only and passes the
 * descriptor, named /proc/self/fd/N; the file is root's, 0600, and nothing else of it is
 * in QEMU's jail. QEMU 7.2, though, opens a memory backend's file itself, read-write
 * whatever its mapping (`readonly=on` maps it read-only, so the guest could not write its
 * own RAM; 8.2's `rom=off` is the fix), and on a discard (the balloon's free page
 * reporting) punches a hole in the file before it drops its private copy of the page.
 * This library, preloaded (the jail's /etc/ld.so.preload; LD_PRELOAD when QEMU runs
 * unjailed), changes two calls and nothing else:
 *   - open("/proc/self/fd/N", O_RDWR) of a descriptor N that is open read-only returns a
 *     duplicate of N: the read-only descriptor, which maps private and writable as QEMU
 *     asks (a private mapping writes nothing back);
 *   - fallocate(PUNCH_HOLE | KEEP_SIZE) on such a duplicate returns 0 without touching the
 *     file, so QEMU goes on to drop its private copy of the page (MADV_DONTNEED) as 8.2
 *     does: the memory goes back to the host, the file stays whole.
 * It is not a boundary: what keeps the file whole is the kernel (a read-only descriptor
 * of a file QEMU's uid cannot open); a QEMU that bypasses this library only loses the two
 * conveniences. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/falloc.h>

#define QR_MAX 8                        /* memory files one QEMU maps (one) */
static int qr_fds[QR_MAX] = { -1, -1, -1, -1, -1, -1, -1, -1 };

/* The descriptor /proc/self/fd/N names when N is open read-only, else -1. */
static int qr_readonly_fd(const char *path)
{
	static const char pre[] = "/proc/self/fd/";
	char *end;
	long n;
	int fl;

	if (strncmp(path, pre, sizeof(pre) - 1) || !path[sizeof(pre) - 1])
		return -1;
	errno = 0;
	n = strtol(path + sizeof(pre) - 1, &end, 10);
	if (errno || *end || n < 0 || n > 1 << 20)
		return -1;
	fl = fcntl((int)n, F_GETFL);
	return fl >= 0 && (fl & O_ACCMODE) == O_RDONLY ? (int)n : -1;
}

static int qr_open(const char *path, int flags, mode_t mode)
{
	int ro, fd;

	if (path && (flags & O_ACCMODE) == O_RDWR && !(flags & O_CREAT) &&
	    (ro = qr_readonly_fd(path)) >= 0) {
		fd = fcntl(ro, (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
		for (int i = 0; fd >= 0 && i < QR_MAX; i++) {
			int none = -1;
			if (__atomic_compare_exchange_n(&qr_fds[i], &none, fd, false,
							__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
				break;
		}
		return fd;
	}
	return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

static mode_t qr_mode(int flags, va_list ap)
{
	return (flags & (O_CREAT | __O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
}

int open(const char *path, int flags, ...);
int __open_2(const char *path, int flags);
int fallocate(int fd, int mode, off_t off, off_t len);

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = qr_mode(flags, ap);
	va_end(ap);
	return qr_open(path, flags, m);
}

/* _FORTIFY_SOURCE's open when the flags are not a constant (QEMU's file_ram_open). */
int __open_2(const char *path, int flags)
{
	return qr_open(path, flags, 0);
}

/* The 64-bit names QEMU links against (off_t is 64 bits here: the same calls). */
int open64(const char *path, int flags, ...) __attribute__((alias("open")));
int __open64_2(const char *path, int flags) __attribute__((alias("__open_2")));

static int qr_fallocate(int fd, int mode, off_t off, off_t len)
{
	if (fd >= 0 && mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
		for (int i = 0; i < QR_MAX; i++)
			if (__atomic_load_n(&qr_fds[i], __ATOMIC_SEQ_CST) == fd)
				return 0;
	return (int)syscall(SYS_fallocate, fd, mode, off, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	return qr_fallocate(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len) __attribute__((alias("fallocate")));
