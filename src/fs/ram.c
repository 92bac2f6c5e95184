/* SPDX-License-Identifier: Apache-2.0 */
/* ram.c - kosa8-fs's window on guest RAM: WRITE payloads read where the guest left them.
 *
 * The guest names guest-physical segments (K8FS_OP_WRITEREF, fs/proto.h); every one is
 * checked against the RAM's size before a byte is read, and read through a read-only
 * /proc/<qemu>/mem fd the daemon opened (kosa8-fs, jailed, could not open it), at
 * hva + gpa. Guest RAM on microvm below 2 GiB is one range from guest-physical 0 (the
 * daemon passes at most that much), so an in-range gpa is always a RAM byte of that
 * QEMU, never anything else of its address space. A segment list may overlap itself
 * or repeat a page: it only names the guest's own bytes.
 */
#include "fs/fs.h"
#include "common/util.h"

#include <string.h>
#include <unistd.h>

int fs_ram_set(struct fs_ctx *c, int fd, uint64_t hva, uint64_t size)
{
	if (c->ram_fd >= 0)
		close(c->ram_fd);
	c->ram_fd = -1;
	c->ram_hva = c->ram_size = 0;
	if (fd < 0)
		return 0;
	if (!size || hva % 4096 || size % 4096 || hva + size < hva || hva + size > INT64_MAX) {
		close(fd);
		return -EINVAL;
	}
	c->ram_fd = fd;
	c->ram_hva = hva;
	c->ram_size = size;
	return 0;
}

int fs_ram_check(uint64_t ram_size, const struct k8fs_seg *seg, uint32_t nseg, size_t total)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < nseg; i++) {
		struct k8fs_seg s;

		memcpy(&s, &seg[i], sizeof(s));
		if (!s.len || s.pad || s.gpa >= ram_size || s.len > ram_size - s.gpa)
			return -EFAULT;
		sum += s.len;            /* nseg <= K8FS_MAX_SEGS: cannot overflow */
		if (sum > total)
			return -EFAULT;
	}
	return sum == total ? 0 : -EFAULT;
}

int fs_ram_gather(struct fs_ctx *c, const struct k8fs_seg *seg, uint32_t nseg, uint8_t *dst,
		  size_t total)
{
	int e;

	if (c->ram_fd < 0)
		return -ENXIO;
	if ((e = fs_ram_check(c->ram_size, seg, nseg, total)))
		return e;
	for (uint32_t i = 0; i < nseg; i++) {
		struct k8fs_seg s;
		size_t done = 0;

		memcpy(&s, &seg[i], sizeof(s));
		while (done < s.len) {
			ssize_t n = pread(c->ram_fd, dst + done, s.len - done,
					  (off_t)(c->ram_hva + s.gpa + done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return -ENXIO;   /* the QEMU is gone (0) or its memory unreadable */
			done += (size_t)n;
		}
		dst += s.len;
	}
	return 0;
}
