/* SPDX-License-Identifier: Apache-2.0 */
/* memfile.c - a VM's RAM as a file: written from a stopped QEMU, mapped by restores.
 *
 * Theory of operation. A checkpoint's memory is a sparse file as large as the guest's RAM,
 * each guest page at its own offset, holes where the guest has only zeros. A restored
 * QEMU maps it private (copy on write: docs/design.md "Memory as a file"), so a restore
 * reads nothing up front and every copy of one checkpoint shares the pages it has not
 * written. Writing one (memfile_write) walks the RAM in windows of MF_WIN bytes:
 *   - /proc/PID/pagemap says which pages QEMU holds privately: anonymous memory of a VM
 *     that booted, and the pages a restored VM wrote since (copied on write out of its
 *     base file). Those are read out of QEMU with process_vm_readv; nothing that is not
 *     present is touched, so the read faults nothing in;
 *   - every other page is the base file's (a restored VM's own checkpoint): what the page
 *     cache holds of it (mincore) is copied from there, the rest read from the disk with
 *     O_DIRECT, so reading it costs no fresh page cache either (a buffered read would
 *     fill the cache ahead of itself: about a millisecond per MiB on this host);
 *   - pages that are all zero are not written, and stay holes.
 * One thread reads the next window while another writes the last (O_DIRECT where the
 * file system allows it: on a host that is itself a VM, fresh page cache costs more than
 * the disk write). The QEMU's vCPUs are stopped, so its memory does not change meanwhile;
 * everything read from it is the guest's bytes, copied, never parsed.
 */
#include "daemon/memfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MF_PAGE 4096u
#define MF_WIN (4u << 20)
#define MF_PAGES (MF_WIN / MF_PAGE)
#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
#define PM_FILE (1ull << 61)            /* a file page, or shared anonymous memory */

int memfile_create(const char *path, uint64_t size, struct k8_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);

	if (fd < 0 && errno == EINVAL)  /* a file system without O_DIRECT */
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return k8_err_set(err, -errno, "create %s: %s", path, strerror(errno));
	if (ftruncate(fd, (off_t)size) < 0) {
		int e = errno;
		close(fd);
		return k8_err_set(err, -e, "size %s: %s", path, strerror(e));
	}
	return fd;
}

int memfile_open(const char *path, uint64_t size, struct k8_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;

	if (fd < 0)
		return k8_err_set(err, -errno, "open %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
		close(fd);
		return k8_err_set(err, -EINVAL, "%s is not a memory file of %llu MiB", path,
				  (unsigned long long)(size >> 20));
	}
	/* Every VM restored from it maps it: a file anyone else could write (or open again
	 * as its owner) would change them all, and what a later rewind loads. */
	if (st.st_uid != geteuid() || (st.st_mode & 077)) {
		close(fd);
		return k8_err_set(err, -EPERM, "%s is not kosa8d's alone (owner %u, mode %04o, "
				  "memory files are 0600 and kosa8d's); it is not used", path,
				  (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	}
	return fd;
}

static void *mf_closer(void *arg)
{
	close((int)(intptr_t)arg);
	return NULL;
}

void memfile_close(int fd)
{
	struct stat st;
	pthread_t t;

	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_nlink == 0 && st.st_blocks > 0 &&
	    pthread_create(&t, NULL, mf_closer, (void *)(intptr_t)fd) == 0) {
		pthread_detach(t);
		return;
	}
	close(fd);
}

static void *mf_warmer(void *arg)
{
	int fd = (int)(intptr_t)arg;
	off_t off = 0, end;

	/* Behind everything else: fresh page cache costs CPU on this host (about a
	 * millisecond per MiB), and the restore it serves must not wait for it. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
	/* and its reads behind every other on the disk where the scheduler knows classes
	 * (mq-deadline, bfq): ioprio_set(IOPRIO_WHO_PROCESS, this thread, IDLE) */
	syscall(SYS_ioprio_set, 1, (int)syscall(SYS_gettid), 3 << 13);
	while ((off = lseek(fd, off, SEEK_DATA)) >= 0) {
		if ((end = lseek(fd, off, SEEK_HOLE)) < 0)
			break;
		for (; off < end; off += MF_WIN) {
			off_t n = end - off < MF_WIN ? end - off : MF_WIN;
			char last;
			/* One window in the disk's queue at a time: its last byte read waits
			 * for it. Queued all at once (the advice does not wait), the whole
			 * file stood before every other read and sync on the disk: the
			 * restored VM's own start and its record's fsync waited 219-315 ms
			 * behind 559 MiB of it. */
			posix_fadvise(fd, off, n, POSIX_FADV_WILLNEED);
			if (pread(fd, &last, 1, off + n - 1) < 0)
				break;
		}
	}
	close(fd);
	return NULL;
}

void memfile_warm(int fd)
{
	int own = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
	pthread_t t;

	if (own < 0)
		return;
	if (pthread_create(&t, NULL, mf_warmer, (void *)(intptr_t)own) == 0)
		pthread_detach(t);
	else
		close(own);
}

/* ---- the writer thread: one window written while the next is read ---- */

struct mf_win {
	uint8_t *data;
	uint64_t off;                   /* in the file */
	size_t len;
	bool full;
};

struct mf_pipe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct mf_win win[2];
	int next_w;                     /* the window the writer takes next */
	bool end;                       /* no more windows */
	int out_fd;
	int werr;                       /* the writer's errno, 0 */
	uint64_t written, write_ns;
};

static bool page_zero(const uint8_t *p)
{
	const uint64_t *q = (const uint64_t *)(const void *)p;

	for (size_t i = 0; i < MF_PAGE / 8; i += 8)
		if (q[i] | q[i + 1] | q[i + 2] | q[i + 3] | q[i + 4] | q[i + 5] | q[i + 6] | q[i + 7])
			return false;
	return true;
}

static int write_all(int fd, const uint8_t *p, size_t n, off_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

/* The runs of pages of `w` that are not all zero, each with one write. */
static int mf_write_win(struct mf_pipe *p, const struct mf_win *w)
{
	size_t pages = w->len / MF_PAGE;

	for (size_t i = 0; i < pages;) {
		size_t j;
		int r;

		if (page_zero(w->data + i * MF_PAGE)) {
			i++;
			continue;
		}
		for (j = i + 1; j < pages && !page_zero(w->data + j * MF_PAGE); j++)
			;
		if ((r = write_all(p->out_fd, w->data + i * MF_PAGE, (j - i) * MF_PAGE,
				   (off_t)(w->off + i * MF_PAGE))))
			return r;
		p->written += (j - i) * MF_PAGE;
		i = j;
	}
	return 0;
}

static void *mf_writer(void *arg)
{
	struct mf_pipe *p = arg;

	for (;;) {
		struct mf_win *w = &p->win[p->next_w];
		int r;

		pthread_mutex_lock(&p->mu);
		while (!w->full && !p->end)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!w->full) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		pthread_mutex_unlock(&p->mu);
		uint64_t t0 = now_mono_ns();
		r = p->werr ? 0 : mf_write_win(p, w);
		p->write_ns += now_mono_ns() - t0;
		pthread_mutex_lock(&p->mu);
		if (r && !p->werr)
			p->werr = -r;
		w->full = false;
		p->next_w ^= 1;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
}

/* ---- the reader: one window of the RAM into a buffer ---- */

struct mf_reader {
	const struct memfile_src *src;
	int pagemap_fd;
	int direct_fd;                  /* the base again, O_DIRECT (-1: the file system has none) */
	const uint8_t *map;             /* the base, mapped (mincore and copies), or NULL */
	unsigned char resident[MF_PAGES];
	bool base_done;                 /* no data in the base past here */
	uint64_t pm[MF_PAGES];
	struct iovec local[MF_PAGES], remote[MF_PAGES];
	uint64_t from_vm, from_disk, read_ns;
};

static int pread_all(int fd, uint8_t *p, size_t n, off_t off)
{
	while (n) {
		ssize_t r = pread(fd, p, n, off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0) {           /* past the end: zeros */
			memset(p, 0, n);
			return 0;
		}
		p += r;
		n -= (size_t)r;
		off += r;
	}
	return 0;
}

/* The base's bytes of `w`: what the page cache holds, copied from it; each run of pages
 * it does not hold, read from the disk directly. */
static int mf_read_base(struct mf_reader *rd, struct mf_win *w)
{
	size_t pages = w->len / MF_PAGE;
	int fd = rd->direct_fd >= 0 ? rd->direct_fd : rd->src->base_fd;

	if (!rd->map || mincore((void *)(rd->map + w->off), w->len, rd->resident) < 0)
		memset(rd->resident, 0, pages);
	for (size_t i = 0; i < pages;) {
		bool in = rd->resident[i] & 1;
		size_t j = i + 1;
		int r;

		while (j < pages && (rd->resident[j] & 1) == in)
			j++;
		if (in) {
			memcpy(w->data + i * MF_PAGE, rd->map + w->off + i * MF_PAGE, (j - i) * MF_PAGE);
		} else {
			if ((r = pread_all(fd, w->data + i * MF_PAGE, (j - i) * MF_PAGE,
					   (off_t)(w->off + i * MF_PAGE))))
				return r;
			rd->from_disk += (j - i) * MF_PAGE;
		}
		i = j;
	}
	return 0;
}

/* Fill `w` with the window at w->off. Returns 1 when it holds nothing (no base data, no
 * private page: the caller skips it), 0 when filled, or a negative errno. */
static int mf_read_win(struct mf_reader *rd, struct mf_win *w, struct k8_err *err)
{
	const struct memfile_src *s = rd->src;
	size_t pages = w->len / MF_PAGE, niov = 0, want = 0;
	bool base = false;
	ssize_t n;
	int r;

	if (s->base_fd >= 0 && !rd->base_done) {
		off_t d = lseek(s->base_fd, (off_t)w->off, SEEK_DATA);
		if (d < 0 && errno == ENXIO)
			rd->base_done = true;
		else if (d < 0)
			return k8_err_set(err, -errno, "reading the memory file: %s", strerror(errno));
		else
			base = (uint64_t)d < w->off + w->len;
	}
	n = pread(rd->pagemap_fd, rd->pm, pages * sizeof(uint64_t),
		  (off_t)((s->hva + w->off) / MF_PAGE * sizeof(uint64_t)));
	if (n < 0)
		return k8_err_set(err, -errno, "reading QEMU's page map: %s", strerror(errno));
	for (size_t i = (size_t)n / sizeof(uint64_t); i < pages; i++)
		rd->pm[i] = 0;
	/* Runs of pages QEMU holds privately: present and not a file's, or swapped out. */
	for (size_t i = 0; i < pages;) {
		size_t j;
		uint64_t e = rd->pm[i];
		if (!((e & PM_PRESENT) && !(e & PM_FILE)) && !(e & PM_SWAPPED)) {
			i++;
			continue;
		}
		for (j = i + 1; j < pages; j++) {
			e = rd->pm[j];
			if (!((e & PM_PRESENT) && !(e & PM_FILE)) && !(e & PM_SWAPPED))
				break;
		}
		rd->local[niov] = (struct iovec){ w->data + i * MF_PAGE, (j - i) * MF_PAGE };
		rd->remote[niov] = (struct iovec){ (void *)(uintptr_t)(s->hva + w->off + i * MF_PAGE),
						   (j - i) * MF_PAGE };
		want += (j - i) * MF_PAGE;
		niov++;
		i = j;
	}
	if (!base && !niov)
		return 1;
	if (base) {
		if ((r = mf_read_base(rd, w)))
			return k8_err_set(err, r, "reading the memory file: %s", strerror(-r));
	} else {
		memset(w->data, 0, w->len);
	}
	/* At most MF_PAGES / 2 runs, under IOV_MAX: one call. */
	if (niov) {
		n = process_vm_readv(s->pid, rd->local, niov, rd->remote, niov, 0);
		if (n < 0)
			return k8_err_set(err, -errno, "reading the VM's memory: %s", strerror(errno));
		if ((size_t)n != want)
			return k8_err_set(err, -EIO, "reading the VM's memory: %zd of %zu bytes", n,
					  want);
		rd->from_vm += want;
	}
	return 0;
}

int memfile_write(const struct memfile_src *src, int out_fd, struct memfile_stats *st,
		  struct k8_err *err)
{
	struct mf_pipe p = { .out_fd = out_fd };
	struct mf_reader *rd = NULL;
	char path[64];
	pthread_t writer;
	uint64_t t0 = now_mono_ns(), off = 0;
	int r = 0, cur = 0;
	bool started = false;

	if (src->hva % MF_PAGE || src->size % MF_PAGE || !src->size)
		return k8_err_set(err, -EINVAL, "the VM's memory is not whole pages");
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv, NULL);
	rd = calloc(1, sizeof(*rd));
	if (rd)
		rd->pagemap_fd = rd->direct_fd = -1;
	p.win[0].data = aligned_alloc(MF_PAGE, MF_WIN);
	p.win[1].data = aligned_alloc(MF_PAGE, MF_WIN);
	if (!rd || !p.win[0].data || !p.win[1].data) {
		r = k8_err_set(err, -ENOMEM, "no memory for the copy");
		goto out;
	}
	rd->src = src;
	if (src->base_fd >= 0) {
		void *m = mmap(NULL, src->size, PROT_READ, MAP_SHARED, src->base_fd, 0);
		rd->map = m == MAP_FAILED ? NULL : m;
		/* Faults on it read nothing around them: the pages the cache does not hold
		 * are read with O_DIRECT, not pulled in by readahead (fresh memory). */
		if (rd->map)
			madvise(m, src->size, MADV_RANDOM);
		snprintf(path, sizeof(path), "/proc/self/fd/%d", src->base_fd);
		rd->direct_fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	}
	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)src->pid);
	rd->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (rd->pagemap_fd < 0) {
		r = k8_err_set(err, -errno, "open %s: %s", path, strerror(errno));
		goto out;
	}
	if ((r = -pthread_create(&writer, NULL, mf_writer, &p))) {
		k8_err_set(err, r, "starting the writer: %s", strerror(-r));
		goto out;
	}
	started = true;
	while (off < src->size) {
		struct mf_win *w = &p.win[cur];

		pthread_mutex_lock(&p.mu);
		while (w->full && !p.werr)
			pthread_cond_wait(&p.cv, &p.mu);
		r = -p.werr;
		pthread_mutex_unlock(&p.mu);
		if (r) {
			k8_err_set(err, r, "writing the memory file: %s", strerror(-r));
			break;
		}
		w->off = off;
		w->len = src->size - off < MF_WIN ? (size_t)(src->size - off) : MF_WIN;
		off += w->len;
		uint64_t tr = now_mono_ns();
		r = mf_read_win(rd, w, err);
		rd->read_ns += now_mono_ns() - tr;
		if (r < 0)
			break;
		if (r == 1) {           /* nothing there */
			r = 0;
			continue;
		}
		pthread_mutex_lock(&p.mu);
		w->full = true;
		pthread_cond_broadcast(&p.cv);
		pthread_mutex_unlock(&p.mu);
		cur ^= 1;
	}
out:
	if (started) {
		pthread_mutex_lock(&p.mu);
		p.end = true;
		pthread_cond_broadcast(&p.cv);
		pthread_mutex_unlock(&p.mu);
		pthread_join(writer, NULL);
		if (!r && p.werr)
			r = k8_err_set(err, -p.werr, "writing the memory file: %s", strerror(p.werr));
	}
	if (st) {
		st->written = p.written;
		st->from_vm = rd ? rd->from_vm : 0;
		st->from_disk = rd ? rd->from_disk : 0;
		st->read_ms = rd ? rd->read_ns / 1000000 : 0;
		st->write_ms = p.write_ns / 1000000;
		st->ms = (now_mono_ns() - t0) / 1000000;
	}
	if (rd && rd->pagemap_fd >= 0)
		close(rd->pagemap_fd);
	if (rd && rd->direct_fd >= 0)
		close(rd->direct_fd);
	if (rd && rd->map)
		munmap((void *)rd->map, src->size);
	free(rd);
	free(p.win[0].data);
	free(p.win[1].data);
	pthread_mutex_destroy(&p.mu);
	pthread_cond_destroy(&p.cv);
	return r;
}
