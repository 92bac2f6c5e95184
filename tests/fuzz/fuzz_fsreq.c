/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_fsreq.c - libFuzzer target: arbitrary bytes as the guest->host byte stream of
 * kosa8-fs (resync scanner, request framing, every FUSE op) over a real temp share.
 *
 * Input: one control byte (bit 0: start already in sync, else the stream must carry a
 * SYNC with the fixed nonce 00 01 .. 0f; bits 1-2: how the bytes are chunked), then the
 * stream. The share lives on a 32 MiB tmpfs in a private mount namespace when we may
 * mount one (root), so file sizes and fallocate are bounded; otherwise on /tmp, with
 * RLIMIT_FSIZE and FALLOCATE turned into an unknown opcode. Tables are reset after every
 * input; the read-write share is emptied and re-populated every 256 inputs. "Guest RAM"
 * for WRITEREF (the RAM data path) is 64 KiB of ours, read through /proc/self/mem, there
 * when bit 3 of the control byte is clear. */
#include "fs/fs.h"
#include "common/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct fs_ctx ctx;
#define RAM_SIZE (64u << 10)
static uint8_t *ram;
static int ram_fd = -1;
static char top[64], rw_dir[96], ro_dir[96];
static bool ready, bounded;
static unsigned iter;

static void put(const char *dir, const char *name, const char *text)
{
	char p[160];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		write_full(fd, text, strlen(text));
		close(fd);
	}
}

static void populate(void)
{
	char p[160];

	put(rw_dir, "a", "hello");
	snprintf(p, sizeof(p), "%s/d", rw_dir);
	mkdir(p, 0755);
	put(p, "x", "inner");
	snprintf(p, sizeof(p), "%s/abs", rw_dir);
	symlink("/etc/passwd", p);
	snprintf(p, sizeof(p), "%s/rel", rw_dir);
	symlink("../../etc", p);
	snprintf(p, sizeof(p), "%s/fifo", rw_dir);
	mkfifo(p, 0644);
}

static void empty_rw(void)
{
	DIR *d = opendir(rw_dir);
	struct dirent *e;
	char p[400];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", rw_dir, e->d_name);
		rm_rf(p);
	}
	closedir(d);
}

static void cleanup(void)
{
	fs_ctx_free(&ctx);
	if (bounded)
		umount2(top, MNT_DETACH);
	else
		rm_rf(top);
	rmdir(top);
}

static void setup(void)
{
	struct rlimit rl = { 8 << 20, 8 << 20 };

	strcpy(top, "/tmp/k8fs-fuzz-XXXXXX");
	if (!mkdtemp(top))
		abort();
	bounded = unshare(CLONE_NEWNS) == 0 &&
		  mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
		  mount("k8fsfuzz", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=32m") == 0;
	signal(SIGXFSZ, SIG_IGN);
	setrlimit(RLIMIT_FSIZE, &rl);
	snprintf(rw_dir, sizeof(rw_dir), "%s/rw", top);
	snprintf(ro_dir, sizeof(ro_dir), "%s/ro", top);
	mkdir(rw_dir, 0755);
	mkdir(ro_dir, 0755);
	put(ro_dir, "r", "read only");
	populate();
	umask(0);
	ctx.proc_fd = -1;
	if (fs_mount_add(&ctx, rw_dir, false) || fs_mount_add(&ctx, ro_dir, true) ||
	    fs_ctx_init(&ctx))
		abort();
	ram = mmap(NULL, RAM_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ram_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
	if (ram == MAP_FAILED || ram_fd < 0)
		abort();
	memset(ram, 'r', RAM_SIZE);
	ready = true;
	atexit(cleanup);
}

/* Without a bounded file system, fallocate(KEEP_SIZE) could fill the disk. */
static void defuse(uint8_t *buf, size_t len)
{
	struct fuse_in_header h;

	if (bounded || len < sizeof(h))
		return;
	memcpy(&h, buf, sizeof(h));
	if (h.opcode == FUSE_FALLOCATE) {
		h.opcode = 0xfff0;
		memcpy(buf, &h, sizeof(h));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t nonce[K8FS_NONCE_LEN];
	size_t pos = 1, chunk;
	uint8_t ctl;

	if (!ready)
		setup();
	if (size < 1)
		return 0;
	ctl = data[0];
	chunk = (ctl >> 1 & 3) == 0 ? 7 : (ctl >> 1 & 3) == 1 ? 100 : (ctl >> 1 & 3) == 2 ? 4096
									     : size;
	if (++iter % 256 == 0) {
		empty_rw();
		populate();
	}
	for (int i = 0; i < K8FS_NONCE_LEN; i++)
		nonce[i] = (uint8_t)i;
	if (ctl & 8)
		fs_ram_set(&ctx, -1, 0, 0);
	else if (fs_ram_set(&ctx, dup(ram_fd), (uint64_t)(uintptr_t)ram, RAM_SIZE))
		abort();
	fs_conn_reset(&ctx, nonce);
	ctx.out_off = ctx.out_len = 0;
	if (ctl & 1)
		ctx.synced = true;
	while (pos < size) {
		size_t room, n;
		uint8_t *p = fs_conn_room(&ctx, &room);
		int r;

		n = size - pos < chunk ? size - pos : chunk;
		if (n > room)
			n = room;
		if (n == 0)
			break;
		memcpy(p, data + pos, n);
		fs_conn_added(&ctx, n);
		pos += n;
		while (1) {
			/* each whole request about to be handled is checked by defuse() */
			if (ctx.synced && ctx.in_len >= sizeof(struct fuse_in_header))
				defuse(ctx.in + ctx.in_start, ctx.in_len);
			r = fs_conn_step(&ctx);
			if (ctx.out_len) {
				struct fuse_out_header oh;
				if (ctx.out_len < sizeof(oh) || ctx.out_len > K8FS_MAX_MSG)
					abort();
				memcpy(&oh, ctx.out, sizeof(oh));
				if (oh.len != ctx.out_len || oh.error > 0 || oh.error < -4095)
					abort();
			}
			ctx.out_off = ctx.out_len = 0;
			if (r <= 0)
				break;
		}
		if (r < 0)
			break;
	}
	fs_conn_drop(&ctx);
	fs_tables_reset(&ctx);
	return 0;
}
