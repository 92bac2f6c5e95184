/* SPDX-License-Identifier: Apache-2.0 */
/* fs.c - shared folders: the FUSE shuttle between /dev/fuse and the virtio-serial port
 * "kosa8.fs" (kosa8-fs on the host answers), and the mounts that put each folder at its
 * guest path in the VM and in every container.
 *
 * Theory of operation
 *
 * The init request lists the folders. fs_start (main thread) opens /dev/fuse and the
 * port, mounts FUSE at K8FS_GUEST_ROOT (returns at once: the kernel queues FUSE_INIT)
 * and starts four threads. Nothing here runs on the main loop, which never touches a
 * FUSE path (a lookup would wait for the host, who may be away for minutes):
 *
 *   reader   read()s requests from /dev/fuse, remembers each by `unique` (unless the
 *            kernel expects no reply: FORGET, BATCH_FORGET, INTERRUPT, NOTIFY_REPLY) and,
 *            when nothing is queued and no one is writing the port, writes it to the port
 *            itself (a hand-over to the writer costs a wake-up and a context switch per
 *            request, much under TCG); else it queues it for the writer. A request of
 *            FS_BIG bytes or more (a WRITE's data) keeps the buffer it was read into (no
 *            copy; freed ones are kept for reuse). FLUSH and IOCTL are answered here,
 *            never sent; RELEASE and RELEASEDIR are answered here and sent without
 *            a unique, for the host to close its handle (fs_local). Above FS_CAP_BYTES of remembered + queued bytes it
 *            stops reading: the kernel's callers wait.
 *   writer   writes what is queued and, after a RESYNC, the SYNC and the resend. One
 *            thread at a time writes the port (`sending`), one whole message at a time.
 *            The port is O_NONBLOCK (for the port thread's readv): a writer waits in
 *            poll(); with no host (POLLHUP) it waits for the host's RESYNC instead (what
 *            QEMU passes on before the host's SYNC is discarded by the host, see below).
 *            Messages over FS_SMALL_WRITE go through a pipe: write() to the pipe, then
 *            splice() into the port, which hands the driver all the pages as one buffer
 *            (one virtqueue entry, one kick); write() to the port takes 32 KiB a call.
 *            The message itself stays in memory for a resend. A WRITE read into a
 *            big buffer (mlock'd, its guest-physical frames known) goes as a
 *            K8FS_OP_WRITEREF while the host's HELLO answer offers it: the payload
 *            stays in guest RAM and kosa8-fs reads it there (docs/shared-folders.md
 *            "The RAM data path"); one the host refuses goes again, whole.
 *   port     readv()s the port with page-sized iovecs (the driver hands out one page
 *            buffer per read(); readv on the non-blocking port takes all filled ones),
 *            splits it into messages by fuse_out_header.len
 *            and hands each reply to /dev/fuse after forgetting its request. It never
 *            writes the port, so a host blocked writing replies cannot deadlock us.
 *            Before an OPEN's reply it tells the kernel to drop the file's cached
 *            attributes (FUSE_NOTIFY_INVAL_INODE): kosa8-fs lets them be cached for
 *            K8FS_ATTR_TIMEOUT, and a host change must be seen on the next open.
 *            - unique 0, error K8FS_NOTIFY_RESYNC: a host (re)connected. The writer then
 *              sends K8FS_SYNC with the nonce, then every remembered request again, in
 *              the order they first came, then the untracked messages still queued.
 *            - unique 0, other: a FUSE notification, passed to /dev/fuse as it is.
 *            - unique K8FS_HELLO_UNIQUE: the host's answer to our HELLO (ENOSYS from
 *              an older one): whether, and how far, it reads guest RAM.
 *            - the answer ENXIO or EFAULT to a WRITE we sent by reference: no more
 *              references until the next HELLO; that WRITE is queued again, whole.
 *            - a reply whose request is not remembered (answered twice after a resend):
 *              dropped. The kernel never reuses a unique, so this is safe.
 *            - a header that cannot be right (len out of 16..K8FS_MAX_MSG, an error
 *              outside -511..0): the stream is out of step. Bytes are dropped until the
 *              next RESYNC header, searched for byte by byte. A message left incomplete
 *              for FS_STALE_MS (a host that died mid-write and a new one whose
 *              reconnect we did not see) gets the same search.
 *            No host (read() returns 0, poll says POLLHUP): buffered bytes are dropped
 *            and the thread sleeps FS_IDLE_MS between looks, never spinning.
 *   mounter  mkdir -p each guest path in the VM root and bind-mounts
 *            K8FS_GUEST_ROOT/<index> on it (read-only ones remounted MS_RDONLY), then
 *            raises the mount's readahead from the kernel's 128 KiB to 1 MiB. That
 *            needs the host's INIT and LOOKUP answers, hence a thread. It then sets the
 *            state (READY or FAILED) and wakes the main loop through an eventfd:
 *            run/exec requests that arrived meanwhile wait there (req.c, at most
 *            FS_READY_WAIT_MS each).
 *
 * Containers: the child of a `run` takes detached copies of the VM's folder mounts
 * (open_tree OPEN_TREE_CLONE, read-only ones made so with mount_setattr) before its
 * root is assembled, and attaches them (move_mount) after pivot_root, at the same guest
 * paths created inside its own root. Doing the attach after pivot_root means a symlink
 * in the image is resolved inside the container's root, never the VM's.
 *
 * Checkpoint and rewind freeze the whole VM, these threads included; after a rewind
 * the host sends RESYNC and the resend completes whatever was in flight.
 */
#include "agent.h"

#include "fs/proto.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <linux/openat2.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>

#define FS_CAP_BYTES (32u << 20)   /* remembered + queued request bytes */
#define FS_CAP_COUNT 8192          /* remembered requests */
#define FS_IDLE_MS 100             /* no host: look again this often */
#define FS_STALE_MS 1000           /* an incomplete message this old: search for RESYNC */
#define FS_MAX_READ (1u << 20)     /* max_read; kosa8-fs's messages are <= K8FS_MAX_MSG */
#define FS_PORT_WAIT_MS 2000
#define FS_BIG 16384               /* a request this long keeps its read buffer (no copy) */
#define FS_BIG_KEEP 4              /* spare read buffers kept for reuse */
#define FS_SMALL_WRITE 32768       /* longer messages go through the pipe and splice() */
#define FS_PIPE_SIZE (2u << 20)    /* holds a whole K8FS_MAX_MSG */
#define FS_RX_PAGES 256            /* iovecs of one page per readv() of the port */
#define FS_READ_AHEAD_KB 1024      /* the FUSE mount's readahead (the kernel caps it at 128) */
#define FS_BIG_MAP (((sizeof(struct fs_msg) + K8FS_MAX_MSG) + 4095) & ~(size_t)4095)
#define FS_PFN_MASK ((1ull << 55) - 1)   /* /proc/self/pagemap: bits 0-54, 63 present */

struct fs_msg {
	struct fs_msg *pnext, *pprev;  /* remembered (tracked only) */
	struct fs_msg *qnext;          /* in the writer's queue */
	int refs;                      /* remembered + queued + being written */
	int tracked;
	int big;                       /* a K8FS_MAX_MSG buffer, kept for reuse when freed */
	/* big buffers are mmap'd and mlock'd: pfn[i] is the guest-physical frame of page i
	 * of the mapping (the kernel has no compaction or migration: it stays put), NULL if
	 * that could not be found; a WRITE in it can go by reference (K8FS_OP_WRITEREF) */
	uint64_t *pfn;
	size_t npfn;
	atomic_int sent_ref;           /* last sent as a WRITEREF */
	uint32_t opcode;
	uint64_t unique, nodeid;
	size_t len;
	unsigned char data[];
};

struct fs {
	pthread_mutex_t lock;
	pthread_cond_t wake;           /* writer: something queued or a resync */
	pthread_cond_t room;           /* reader: bytes went down */
	struct fs_msg *phead, *ptail;  /* remembered requests, oldest first */
	size_t npending;
	struct fs_msg *qhead, *qtail;  /* messages for the writer */
	size_t bytes;                  /* of all live messages */
	int resync;                    /* a RESYNC came: the writer owes a SYNC */
	int sending;                   /* a thread is writing a message into the port */
	unsigned char nonce[K8FS_NONCE_LEN];
	uint64_t resyncs, desyncs, stale_replies;
	/* the RAM data path: guest-physical bytes below this are the host's to read
	 * (its HELLO answer since the last RESYNC); 0: send payloads through the port */
	_Atomic uint64_t ram_size;
	uint64_t ram_writes, ram_fallbacks;
	struct fs_msg *spare;          /* free K8FS_MAX_MSG buffers (linked by qnext) */
	int nspare;

	int port_fd, fuse_fd, ev_fd;
	int pipe_r, pipe_w;            /* the writer's: messages go into the port by splice() */
	char port_dev[64];
	struct fs_cfg cfg;
	uint64_t started_ns;
	atomic_int state;              /* enum fs_state */
	char msg[512];                 /* why FS_FAILED (written before state) */
};

/* ---- validation (main thread) ---- */

/* A guest path the VM can take: absolute, normalised, not one of the places the agent
 * or the kernel own (a folder there would hide them in the VM: the scratch disk, the
 * images, the FUSE root under /run/kosa8). */
static int fs_guest_ok(const char *p, size_t n, struct k8_err *err, int i)
{
	static const char *const owned[] = { "/proc", "/sys", "/dev", "/run/kosa8", AGENT_SCRATCH,
					     AGENT_IMAGES_DIR };
	const char *s;

	if (n == 0 || p[0] != '/')
		return k8_err_set(err, -EINVAL, "mounts[%d].guest must be an absolute path", i);
	if (n == 1)
		return k8_err_set(err, -EINVAL, "mounts[%d].guest must not be /", i);
	if (strlen(p) != n)
		return k8_err_set(err, -EINVAL, "mounts[%d].guest holds a NUL byte", i);
	for (s = p; *s; ) {
		const char *e;
		size_t cl;

		s++; /* past '/' */
		e = strchrnul(s, '/');
		cl = (size_t)(e - s);
		if (cl == 0 || (cl == 1 && s[0] == '.') || (cl == 2 && s[0] == '.' && s[1] == '.'))
			return k8_err_set(err, -EINVAL,
					  "mounts[%d].guest must be a normalised path (no //, '.', '..' or trailing /)",
					  i);
		s = e;
	}
	for (size_t k = 0; k < ARRAY_SIZE(owned); k++) {
		size_t ol = strlen(owned[k]);

		if (!strncmp(p, owned[k], ol) && (p[ol] == '\0' || p[ol] == '/'))
			return k8_err_set(err, -EINVAL, "mounts[%d].guest: %s and below belong to the VM", i,
					  owned[k]);
	}
	return 0;
}

/* a is b, or below it. */
static int fs_path_within(const char *a, const char *b)
{
	size_t n = strlen(b);

	return !strncmp(a, b, n) && (a[n] == '\0' || a[n] == '/');
}

int fs_parse(json_t *o, struct fs_cfg *c, struct k8_err *err)
{
	json_t *e;
	size_t i;

	memset(c, 0, sizeof(*c));
	if (!o || json_is_null(o))
		return 0;
	if (!json_is_array(o))
		return k8_err_set(err, -EINVAL, "field 'mounts' must be an array");
	if (json_array_size(o) > FS_MAX_MOUNTS)
		return k8_err_set(err, -E2BIG, "field 'mounts' has more than %d entries", FS_MAX_MOUNTS);
	json_array_foreach(o, i, e) {
		struct fs_mount *m = &c->m[i];
		json_t *idx = json_object_get(e, "index"), *g = json_object_get(e, "guest"),
		       *ro = json_object_get(e, "ro");
		int k = (int)i;

		if (!json_is_object(e))
			return k8_err_set(err, -EINVAL, "mounts[%d] must be an object", k);
		if (!json_is_integer(idx) || json_integer_value(idx) < 0 ||
		    json_integer_value(idx) >= FS_MAX_MOUNTS)
			return k8_err_set(err, -EINVAL, "mounts[%d].index must be an integer in 0..%d", k,
					  FS_MAX_MOUNTS - 1);
		if (!json_is_string(g))
			return k8_err_set(err, -EINVAL, "mounts[%d].guest must be a string", k);
		if (json_string_length(g) > FS_MAX_GUEST)
			return k8_err_set(err, -ENAMETOOLONG, "mounts[%d].guest is longer than %d bytes", k,
					  FS_MAX_GUEST);
		if (ro && !json_is_null(ro) && !json_is_boolean(ro))
			return k8_err_set(err, -EINVAL, "mounts[%d].ro must be true or false", k);
		int r = fs_guest_ok(json_string_value(g), json_string_length(g), err, k);
		if (r < 0)
			return r;
		m->index = (int)json_integer_value(idx);
		m->ro = json_is_true(ro);
		memcpy(m->guest, json_string_value(g), json_string_length(g) + 1);
		for (int j = 0; j < k; j++) {
			if (c->m[j].index == m->index)
				return k8_err_set(err, -EINVAL, "mounts[%d].index %d is used twice", k, m->index);
			if (fs_path_within(m->guest, c->m[j].guest) || fs_path_within(c->m[j].guest, m->guest))
				return k8_err_set(err, -EINVAL, "mounts[%d].guest %s and mounts[%d].guest %s nest or repeat",
						  j, c->m[j].guest, k, m->guest);
		}
		c->n = k + 1;
	}
	return 0;
}

int fs_same(const struct agent *a, const struct fs_cfg *c)
{
	const struct fs_cfg *o = &a->fs->cfg;

	if (o->n != c->n)
		return 0;
	for (int i = 0; i < c->n; i++)
		if (o->m[i].index != c->m[i].index || o->m[i].ro != c->m[i].ro ||
		    strcmp(o->m[i].guest, c->m[i].guest))
			return 0;
	return 1;
}

/* ---- messages ---- */

static void fs_log_errno(const char *what)
{
	agent_log("shared folders: %s: %s", what, strerror(errno));
}

static void fs_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000u, (long)(ms % 1000u) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void fs_big_free(struct fs_msg *m)
{
	free(m->pfn);
	munmap(m, FS_BIG_MAP);
}

/* A new big buffer: mapped shared, touched and locked in memory, then its
 * pages' guest-physical frames read from /proc/self/pagemap (root sees them). Any page it cannot vouch for
 * leaves pfn NULL: that buffer's WRITEs go through the port. */
static struct fs_msg *fs_big_new(void)
{
	struct fs_msg *m = mmap(NULL, FS_BIG_MAP, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	size_t np = FS_BIG_MAP / 4096;
	uint64_t *pfn;
	int pm;

	if (m == MAP_FAILED)
		agent_fatal("shared folders: mmap %zu: %s", FS_BIG_MAP, strerror(errno));
	memset(m, 0, sizeof(*m));
	/* MAP_SHARED: the agent forks (containers, commands), and a fork makes private pages
	 * copy-on-write: our next write into the buffer would land in a new frame while the
	 * host, told the old one, reads what the child still maps (seen: a file written
	 * after a rewind held in each block the block of two WRITEs before). Shared pages
	 * stay the same frames in parent and child. (MADV_DONTFORK would do too, but the
	 * guest kernel has no madvise.) */
	if (mlock(m, FS_BIG_MAP) < 0)
		return m;
	pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (pm < 0)
		return m;
	pfn = xmalloc(np * sizeof(*pfn));
	if (pread(pm, pfn, np * sizeof(*pfn), (off_t)((uintptr_t)m / 4096 * 8)) !=
	    (ssize_t)(np * sizeof(*pfn))) {
		free(pfn);
		pfn = NULL;
	}
	close(pm);
	for (size_t i = 0; pfn && i < np; i++) {
		if (!(pfn[i] >> 63) || !(pfn[i] & FS_PFN_MASK)) {
			free(pfn);
			pfn = NULL;
			break;
		}
		pfn[i] &= FS_PFN_MASK;
	}
	m->pfn = pfn;
	m->npfn = pfn ? np : 0;
	return m;
}

/* Under fs->lock. */
static void fs_unref(struct fs *fs, struct fs_msg *m)
{
	if (--m->refs > 0)
		return;
	fs->bytes -= m->len;
	if (m->big && fs->nspare < FS_BIG_KEEP) {
		m->qnext = fs->spare;
		fs->spare = m;
		fs->nspare++;
	} else if (m->big) {
		fs_big_free(m);
	} else {
		free(m);
	}
	pthread_cond_broadcast(&fs->room);
}

/* A K8FS_MAX_MSG buffer to read a request into: a spare one (its pages are already
 * there: a fresh 1 MiB costs 256 page faults, slow under TCG) or a new one. */
static struct fs_msg *fs_big(struct fs *fs)
{
	struct fs_msg *m;

	pthread_mutex_lock(&fs->lock);
	m = fs->spare;
	if (m) {
		fs->spare = m->qnext;
		fs->nspare--;
	}
	pthread_mutex_unlock(&fs->lock);
	if (!m)
		m = fs_big_new();
	uint64_t *pfn = m->pfn;
	size_t npfn = m->npfn;

	memset(m, 0, sizeof(*m));
	m->pfn = pfn;
	m->npfn = npfn;
	m->big = 1;
	return m;
}

/* Under fs->lock: append to the writer's queue (takes a reference). */
static void fs_queue(struct fs *fs, struct fs_msg *m)
{
	m->refs++;
	m->qnext = NULL;
	if (fs->qtail)
		fs->qtail->qnext = m;
	else
		fs->qhead = m;
	fs->qtail = m;
}

/* Under fs->lock: forget a remembered request. */
static void fs_forget(struct fs *fs, struct fs_msg *m)
{
	if (m->pprev)
		m->pprev->pnext = m->pnext;
	else
		fs->phead = m->pnext;
	if (m->pnext)
		m->pnext->pprev = m->pprev;
	else
		fs->ptail = m->pprev;
	m->pnext = m->pprev = NULL;
	fs->npending--;
	fs_unref(fs, m);
}

/* Opcodes the kernel expects no reply to: never remembered, never resent. */
static int fs_tracked(uint32_t opcode)
{
	return opcode != FUSE_FORGET && opcode != FUSE_BATCH_FORGET && opcode != FUSE_INTERRUPT &&
	       opcode != FUSE_NOTIFY_REPLY;
}

/* ---- the threads ---- */

static void fs_to_kernel(struct fs *fs, const unsigned char *p, size_t n);
static int fs_send(struct fs *fs, const unsigned char *p, size_t n);
static int fs_send_msg(struct fs *fs, struct fs_msg *m);
static void fs_sent(struct fs *fs, struct fs_msg *m, int r);

/* Requests answered here, without a round trip to the host. Each request costs the guest
 * two process switches (the caller's to this thread and back), and under TCG each
 * switch flushes QEMU's whole soft TLB (some 300 us, docs/shared-folders.md
 * "Speed"), so every one kept from the host counts.
 *   FLUSH: ENOSYS, once: the kernel then stops sending FLUSH (fc->no_flush) but still
 *     writes back a file's mmap'd pages and checks their errors on every close, before
 *     it would have sent FLUSH; writes are not cached (no writeback cache), so the host
 *     has everything already, and the host's FLUSH did nothing (no locks on the host).
 *   IOCTL: ENOTTY: the host has none to offer (it answered ENOSYS, which the kernel turns
 *     into ENOTTY; the kernel does not remember it); Python asks TCGETS on every open().
 *   RELEASE, RELEASEDIR: answered at once, and still sent to the host, with unique 0 so
 *     that kosa8-fs closes the handle and answers nothing. The kernel sends them in the
 *     background after close() and only frees its side on the answer; nothing the
 *     caller sees depends on the host's. Order holds: they go into the port behind every
 *     request the kernel queued before them (the file's WRITEs).
 * FS_LOCAL_DONE if answered and done, FS_LOCAL_FORWARD if answered and still to be sent
 * (its unique now 0), 0 for the host. */
enum { FS_LOCAL_DONE = 1, FS_LOCAL_FORWARD = 2 };

static int fs_local(struct fs *fs, struct fuse_in_header *h, unsigned char *msg)
{
	struct fuse_out_header o = { .len = sizeof(o), .unique = h->unique };
	int r = FS_LOCAL_DONE;

	if (h->opcode == FUSE_FLUSH) {
		o.error = -ENOSYS;
	} else if (h->opcode == FUSE_IOCTL) {
		o.error = -ENOTTY;
	} else if (h->opcode == FUSE_RELEASE || h->opcode == FUSE_RELEASEDIR) {
		o.error = 0;
		r = FS_LOCAL_FORWARD;
	} else {
		return 0;
	}
	fs_to_kernel(fs, (const unsigned char *)&o, sizeof(o));
	if (r == FS_LOCAL_FORWARD) {
		h->unique = 0;
		memcpy(msg, h, sizeof(*h));
	}
	return r;
}

static void *fs_reader(void *arg)
{
	struct fs *fs = arg;
	struct fs_msg *big = fs_big(fs);

	for (;;) {
		struct fuse_in_header h;
		struct fs_msg *m;
		unsigned char *buf = big->data;
		ssize_t n;

		pthread_mutex_lock(&fs->lock);
		while (fs->bytes > FS_CAP_BYTES || fs->npending >= FS_CAP_COUNT)
			pthread_cond_wait(&fs->room, &fs->lock);
		pthread_mutex_unlock(&fs->lock);

		n = read(fs->fuse_fd, buf, K8FS_MAX_MSG);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ENOENT)
				continue; /* ENOENT: the request was interrupted before we read it */
			if (errno == ENODEV) {
				agent_log("shared folders: /dev/fuse: the connection ended");
				break;
			}
			fs_log_errno("read /dev/fuse");
			fs_sleep_ms(FS_IDLE_MS);
			continue;
		}
		if ((size_t)n < sizeof(h))
			continue;
		memcpy(&h, buf, sizeof(h));
		if (h.len != (uint32_t)n)
			continue; /* cannot happen: the kernel writes whole requests */
		if (fs_local(fs, &h, buf) == FS_LOCAL_DONE)
			continue;
		if ((size_t)n >= FS_BIG) {
			/* a WRITE's data: the read buffer becomes the message */
			m = big;
			big = fs_big(fs);
		} else {
			m = xmalloc(sizeof(*m) + (size_t)n);
			memset(m, 0, sizeof(*m));
			memcpy(m->data, buf, (size_t)n);
		}
		m->len = (size_t)n;
		m->unique = h.unique;
		m->nodeid = h.nodeid;
		m->opcode = h.opcode;
		m->tracked = h.unique != 0 && fs_tracked(h.opcode);
		pthread_mutex_lock(&fs->lock);
		fs->bytes += m->len;
		if (m->tracked) {
			m->refs = 1;
			m->pprev = fs->ptail;
			if (fs->ptail)
				fs->ptail->pnext = m;
			else
				fs->phead = m;
			fs->ptail = m;
			fs->npending++;
		}
		if (fs->sending || fs->qhead || fs->resync) {
			fs_queue(fs, m);
			pthread_cond_broadcast(&fs->wake);
			pthread_mutex_unlock(&fs->lock);
			continue;
		}
		/* Nothing waits and nobody writes: send it from here, sparing the hand-over
		 * to the writer (a wake-up and a context switch per request, slow under
		 * TCG). Order holds: only with an empty queue, and `sending` excludes the
		 * writer meanwhile. */
		m->refs++;
		fs->sending = 1;
		pthread_mutex_unlock(&fs->lock);
		fs_sent(fs, m, fs_send_msg(fs, m));
	}
	fs_big_free(big);
	return NULL;
}

/* The port is O_NONBLOCK (for the port thread's readv): wait until a write can go.
 * 0: try again; 1: a RESYNC came meanwhile (the writer starts over with SYNC). With no
 * host, poll() reports POLLHUP at once and the driver would block anyway: wait for the
 * host's RESYNC (the port thread signals it) instead; what we wrote before it would be
 * thrown away by the host in any case. */
static int fs_wait_writable(struct fs *fs)
{
	struct pollfd pfd = { .fd = fs->port_fd, .events = POLLOUT };
	int r = poll(&pfd, 1, FS_IDLE_MS);

	if (r > 0 && (pfd.revents & POLLOUT))
		return 0;
	if (r < 0 && errno != EINTR) {
		fs_log_errno("poll port");
		fs_sleep_ms(FS_IDLE_MS);
	}
	if (r > 0 && (pfd.revents & (POLLHUP | POLLERR))) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += FS_IDLE_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&fs->lock);
		if (!fs->resync)
			pthread_cond_timedwait(&fs->wake, &fs->lock, &ts);
		pthread_mutex_unlock(&fs->lock);
	}
	pthread_mutex_lock(&fs->lock);
	r = fs->resync;
	pthread_mutex_unlock(&fs->lock);
	return r ? 1 : 0;
}

/* write() as much as the driver takes (at most 32 KiB a call, one copy each). */
static int fs_write_plain(struct fs *fs, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fs->port_fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				if (fs_wait_writable(fs))
					return 1;
				continue;
			}
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Empty the pipe (after a failed splice). */
static void fs_pipe_drain(struct fs *fs)
{
	unsigned char junk[4096];

	while (read(fs->pipe_r, junk, sizeof(junk)) > 0)
		;
}

/* One message into the port. Long ones go through a pipe: write() copies them into
 * pipe pages once, and splice() hands those pages to the driver as one scatter-gather
 * buffer (one virtqueue entry, one kick) instead of 32 KiB write()s, each copied
 * again into a driver buffer and kicked. 0 sent, 1 a RESYNC came (resend), -errno. */
static int fs_send(struct fs *fs, const unsigned char *p, size_t n)
{
	size_t done = 0;

	if (n <= FS_SMALL_WRITE || fs->pipe_r < 0)
		return fs_write_plain(fs, p, n);
	while (done < n) {
		ssize_t w = write(fs->pipe_w, p + done, n - done);
		size_t inpipe;

		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			break;           /* cannot happen (an empty pipe of 2 MiB); write() the rest */
		}
		inpipe = (size_t)w;
		while (inpipe) {
			ssize_t s = splice(fs->pipe_r, NULL, fs->port_fd, NULL, inpipe, 0);

			if (s > 0) {
				inpipe -= (size_t)s;
				done += (size_t)s;
				continue;
			}
			if (s < 0 && errno == EINTR)
				continue;
			if (s < 0 && errno == EAGAIN) {
				/* nothing was taken from the pipe */
				if (fs_wait_writable(fs)) {
					fs_pipe_drain(fs);
					return 1;
				}
				continue;
			}
			/* The driver failed after taking pages from the pipe (it returns 0:
			 * no room in the virtqueue for the scatter-gather list), or another
			 * error: what is left in the pipe is dropped and, from the first byte
			 * not known to be sent, the message goes by write(). */
			int e = s < 0 ? errno : 0;
			fs_pipe_drain(fs);
			if (e && e != ENOMEM && e != EINVAL)
				return -e;
			if (e == EINVAL) {       /* no splice for this port: never again */
				close(fs->pipe_r);
				close(fs->pipe_w);
				fs->pipe_r = fs->pipe_w = -1;
			}
			return fs_write_plain(fs, p + done, n - done);
		}
	}
	return done < n ? fs_write_plain(fs, p + done, n - done) : 0;
}

/* A WRITE in a pinned buffer as a K8FS_OP_WRITEREF (fs/proto.h): its payload's pages
 * as guest-physical segments (neighbouring frames merged). 0 if it cannot go so (not
 * pinned, not a whole WRITE, a frame beyond what the host reaches): send it as is. */
static size_t fs_ref_build(const struct fs_msg *m, uint64_t ram_size, unsigned char *out,
			   size_t cap)
{
	const size_t head = sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in);
	struct fuse_in_header h;
	struct fuse_write_in w;
	struct k8fs_ref ref = { .version = K8FS_WIRE_VERSION };
	struct k8fs_seg *seg = (struct k8fs_seg *)(out + head + sizeof(ref));
	size_t max = (cap - head - sizeof(ref)) / sizeof(*seg), off, end;

	if (!m->pfn || m->opcode != FUSE_WRITE || m->len < head || !ram_size)
		return 0;
	memcpy(&h, m->data, sizeof(h));
	memcpy(&w, m->data + sizeof(h), sizeof(w));
	if (!w.size || m->len != head + w.size)
		return 0;
	off = (size_t)(m->data - (const unsigned char *)m) + head;   /* in the mapping */
	end = off + w.size;
	while (off < end) {
		size_t pg = off / 4096, n = 4096 - off % 4096;
		uint64_t gpa;

		if (n > end - off)
			n = end - off;
		if (pg >= m->npfn)
			return 0;
		gpa = m->pfn[pg] * 4096 + off % 4096;
		if (gpa >= ram_size || n > ram_size - gpa)
			return 0;
		if (ref.nseg && seg[ref.nseg - 1].gpa + seg[ref.nseg - 1].len == gpa) {
			seg[ref.nseg - 1].len += (uint32_t)n;
		} else {
			if (ref.nseg == max || ref.nseg == K8FS_MAX_SEGS)
				return 0;
			seg[ref.nseg++] = (struct k8fs_seg){ .gpa = gpa, .len = (uint32_t)n };
		}
		off += n;
	}
	h.opcode = K8FS_OP_WRITEREF;
	h.len = (uint32_t)(head + sizeof(ref) + ref.nseg * sizeof(*seg));
	memcpy(out, &h, sizeof(h));
	memcpy(out + sizeof(h), &w, sizeof(w));
	memcpy(out + head, &ref, sizeof(ref));
	return h.len;
}

/* One message into the port: a WRITE by reference when the host reads guest RAM (its
 * payload then never crosses the port), else as it is. The message itself is kept
 * whole either way, for a resend as it is. 0, 1 or -errno as fs_send. */
static int fs_send_msg(struct fs *fs, struct fs_msg *m)
{
	unsigned char ref[sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in) +
			  sizeof(struct k8fs_ref) + K8FS_MAX_SEGS * sizeof(struct k8fs_seg)];
	size_t n = fs_ref_build(m, atomic_load(&fs->ram_size), ref, sizeof(ref));

	atomic_store(&m->sent_ref, n ? 1 : 0);
	if (n)
		return fs_write_plain(fs, ref, n);
	return fs_send(fs, m->data, m->len);
}

/* Under fs->lock: the host said RESYNC. Queue SYNC, then every remembered request in
 * its first order, then the untracked messages that were waiting (FORGETs: the host
 * must still hear them). Tracked ones that were waiting are in the resend already. */
static void fs_requeue(struct fs *fs)
{
	struct fs_msg *m, *next, *keep = NULL, **kt = &keep, *sync;
	struct fuse_in_header h = { .len = (uint32_t)(sizeof(h) + K8FS_NONCE_LEN),
				    .opcode = K8FS_OP_SYNC };

	/* Split the old queue first (queueing rewrites qnext): untracked ones stay, with
	 * their reference; tracked ones lose the queue's (the resend queues them anew). */
	for (m = fs->qhead; m; m = next) {
		next = m->qnext;
		if (m->tracked) {
			fs_unref(fs, m);
		} else {
			*kt = m;
			kt = &m->qnext;
		}
	}
	*kt = NULL;
	fs->qhead = fs->qtail = NULL;
	sync = xmalloc(sizeof(*sync) + h.len);
	memset(sync, 0, sizeof(*sync));
	sync->len = h.len;
	memcpy(sync->data, &h, sizeof(h));
	memcpy(sync->data + sizeof(h), fs->nonce, K8FS_NONCE_LEN);
	fs->bytes += sync->len;
	fs_queue(fs, sync);
	/* then ask what the host serves beyond FUSE (the RAM data path): an older host
	 * answers ENOSYS; until an answer, WRITEs go through the port */
	struct fuse_in_header hh = { .len = (uint32_t)(sizeof(hh) + sizeof(struct k8fs_hello_in)),
				     .opcode = K8FS_OP_HELLO, .unique = K8FS_HELLO_UNIQUE };
	struct k8fs_hello_in hi = { .version = K8FS_WIRE_VERSION };
	struct fs_msg *hello = xmalloc(sizeof(*hello) + hh.len);

	memset(hello, 0, sizeof(*hello));
	hello->len = hh.len;
	memcpy(hello->data, &hh, sizeof(hh));
	memcpy(hello->data + sizeof(hh), &hi, sizeof(hi));
	fs->bytes += hello->len;
	fs_queue(fs, hello);
	for (m = fs->phead; m; m = m->pnext)
		fs_queue(fs, m);
	for (m = keep; m; m = next) {
		next = m->qnext;
		m->qnext = NULL;
		fs->qtail->qnext = m; /* the queue holds SYNC at least */
		fs->qtail = m;
	}
	fs->resync = 0;
}

/* After fs_send of m by the thread that set fs->sending (holding a reference to m):
 * release both, and wake the writer if work is waiting. Takes and drops fs->lock. */
static void fs_sent(struct fs *fs, struct fs_msg *m, int r)
{
	if (r < 0) {
		/* Remembered requests go again after the next RESYNC. */
		agent_log("shared folders: write %s: %s", fs->port_dev, strerror(-r));
		fs_sleep_ms(FS_IDLE_MS);
	}
	pthread_mutex_lock(&fs->lock);
	fs->sending = 0;
	if (r == 1 && !m->tracked) {
		/* cut short by a RESYNC: a FORGET goes again after the SYNC (tracked
		 * requests are resent from the remembered list) */
		m->qnext = fs->qhead;
		fs->qhead = m;
		if (!fs->qtail)
			fs->qtail = m;
	} else {
		fs_unref(fs, m);
	}
	if (fs->qhead || fs->resync)
		pthread_cond_broadcast(&fs->wake);
	pthread_mutex_unlock(&fs->lock);
}

static void *fs_writer(void *arg)
{
	struct fs *fs = arg;

	for (;;) {
		struct fs_msg *m;

		pthread_mutex_lock(&fs->lock);
		while ((!fs->resync && !fs->qhead) || fs->sending)
			pthread_cond_wait(&fs->wake, &fs->lock);
		if (fs->resync)
			fs_requeue(fs);
		m = fs->qhead;
		fs->qhead = m->qnext;
		if (!fs->qhead)
			fs->qtail = NULL;
		fs->sending = 1;
		pthread_mutex_unlock(&fs->lock);
		fs_sent(fs, m, fs_send_msg(fs, m));
	}
	return NULL;
}

/* A header that can start a host message: a RESYNC, a notification or a reply. */
static int fs_hdr_ok(const struct fuse_out_header *h)
{
	if (h->len < sizeof(*h) || h->len > K8FS_MAX_MSG)
		return 0;
	if (h->unique == 0) {
		if (h->error == K8FS_NOTIFY_RESYNC)
			return h->len == sizeof(*h) + K8FS_NONCE_LEN;
		return h->error > 0 && h->error < 64; /* FUSE_NOTIFY_* codes */
	}
	return h->error <= 0 && h->error > -512; /* what fuse_dev_do_write accepts */
}

/* The RESYNC header, byte by byte, for finding our way back into the stream. */
static size_t fs_find_resync(const unsigned char *p, size_t n)
{
	struct fuse_out_header h = { .len = (uint32_t)(sizeof(h) + K8FS_NONCE_LEN),
				     .error = K8FS_NOTIFY_RESYNC, .unique = 0 };
	unsigned char pat[sizeof(h)];

	memcpy(pat, &h, sizeof(h));
	for (size_t i = 0; i + sizeof(pat) <= n; i++)
		if (!memcmp(p + i, pat, sizeof(pat)))
			return i;
	return n;
}

static void fs_to_kernel(struct fs *fs, const unsigned char *p, size_t n)
{
	ssize_t w;

	while ((w = write(fs->fuse_fd, p, n)) < 0 && errno == EINTR)
		;
	/* ENOENT: the request was interrupted or aborted meanwhile. */
	if (w < 0 && errno != ENOENT)
		fs_log_errno("write /dev/fuse");
}

static void fs_deliver(struct fs *fs, const unsigned char *p, size_t n)
{
	struct fuse_out_header h;
	struct fs_msg *m;

	memcpy(&h, p, sizeof(h));
	if (h.unique == 0 && h.error == K8FS_NOTIFY_RESYNC) {
		pthread_mutex_lock(&fs->lock);
		memcpy(fs->nonce, p + sizeof(h), K8FS_NONCE_LEN);
		atomic_store(&fs->ram_size, 0);   /* a new host: ask again (HELLO) */
		fs->resync = 1;
		fs->resyncs++;
		if (fs->resyncs <= 3 || fs->resyncs % 100 == 0)
			agent_log("shared folders: host connected (resync %llu), %zu requests to resend",
				  (unsigned long long)fs->resyncs, fs->npending);
		pthread_cond_broadcast(&fs->wake);
		pthread_mutex_unlock(&fs->lock);
		return;
	}
	if (h.unique == 0) {
		fs_to_kernel(fs, p, n);
		return;
	}
	if (h.unique == K8FS_HELLO_UNIQUE) {
		struct k8fs_hello_out o = { 0 };

		if (h.error == 0 && n >= sizeof(h) + sizeof(o))
			memcpy(&o, p + sizeof(h), sizeof(o));
		atomic_store(&fs->ram_size, (o.caps & K8FS_CAP_RAM) ? o.ram_size : 0);
		if (fs->resyncs <= 3)
			agent_log("shared folders: host wire version %u, %s", o.version,
				  (o.caps & K8FS_CAP_RAM) ? "writes by reference" : "writes through the port");
		return;
	}
	uint64_t inval = 0;

	pthread_mutex_lock(&fs->lock);
	for (m = fs->phead; m && m->unique != h.unique; m = m->pnext)
		;
	if (m && atomic_load(&m->sent_ref) && (h.error == -ENXIO || h.error == -EFAULT)) {
		/* the host could not read it where it is (its RAM went, or it disagrees
		 * about our frames): no more references until the next HELLO, and this
		 * WRITE again through the port */
		atomic_store(&fs->ram_size, 0);
		atomic_store(&m->sent_ref, 0);
		if (fs->ram_fallbacks++ < 3)
			agent_log("shared folders: the host refused a write by reference (%d); "
				  "writes go through the port", h.error);
		fs_queue(fs, m);
		pthread_cond_broadcast(&fs->wake);
		pthread_mutex_unlock(&fs->lock);
		return;
	}
	if (m) {
		if (m->opcode == FUSE_OPEN && h.error == 0)
			inval = m->nodeid;
		fs_forget(fs, m);
	} else {
		fs->stale_replies++;
	}
	pthread_mutex_unlock(&fs->lock);
	if (!m)
		return;
	if (inval) {
		/* "A file the host changes is seen on the next open": kosa8-fs lets the kernel
		 * cache attributes for K8FS_ATTR_TIMEOUT, so before the open returns, drop
		 * the cached ones (size, mtime) of this file; the next stat or read at the
		 * cached end of file asks the host. Offset -1: pages are dropped by the open
		 * itself (no FOPEN_KEEP_CACHE). */
		struct {
			struct fuse_out_header h;
			struct fuse_notify_inval_inode_out in;
		} note = { { sizeof(note), FUSE_NOTIFY_INVAL_INODE, 0 }, { inval, -1, 0 } };

		fs_to_kernel(fs, (const unsigned char *)&note, sizeof(note));
	}
	fs_to_kernel(fs, p, n);
}

static void *fs_port_reader(void *arg)
{
	struct fs *fs = arg;
	size_t cap = 2 * (size_t)K8FS_MAX_MSG, have = 0;
	unsigned char *buf = xmalloc(cap);
	uint64_t last_rx = 0;
	int desync = 0;

	int readable = 0;

	for (;;) {
		struct pollfd pfd = { .fd = fs->port_fd, .events = POLLIN };
		struct iovec iov[FS_RX_PAGES];
		size_t off = 0, room;
		ssize_t n;
		int r = readable ? 1 : poll(&pfd, 1, FS_STALE_MS), niov;

		if (r < 0) {
			if (errno != EINTR) {
				fs_log_errno("poll");
				fs_sleep_ms(FS_IDLE_MS);
			}
			continue;
		}
		if (r == 0) {
			/* A message left incomplete this long will not be completed: look for
			 * the next host's RESYNC in what we have. */
			if (have && now_mono_ns() - last_rx > FS_STALE_MS * 1000000ull && !desync) {
				agent_log("shared folders: %zu bytes of an incomplete message; looking for a resync",
					  have);
				desync = 1;
				fs->desyncs++;
				off = 1;
				goto parse;
			}
			continue;
		}
		/* The driver hands out at most one of its receive buffers (a page each) per
		 * read(); readv() with page-sized iovecs takes every filled one in one call
		 * (the port is O_NONBLOCK: it stops at the first empty one). */
		room = cap - have;
		for (niov = 0; niov < FS_RX_PAGES && room; niov++) {
			size_t l = room < 4096 ? room : 4096;

			iov[niov].iov_base = buf + have + (cap - have - room);
			iov[niov].iov_len = l;
			room -= l;
		}
		n = readv(fs->port_fd, iov, niov);
		readable = n > 0;
		if (n < 0) {
			if (errno != EINTR && errno != EAGAIN) {
				fs_log_errno("read port");
				fs_sleep_ms(FS_IDLE_MS);
			}
			continue;
		}
		if (n == 0) {
			/* No host: what an old host left unfinished means nothing to the next. */
			have = 0;
			desync = 0;
			fs_sleep_ms(FS_IDLE_MS);
			continue;
		}
		have += (size_t)n;
		last_rx = now_mono_ns();
parse:
		while (have - off >= sizeof(struct fuse_out_header)) {
			struct fuse_out_header h;

			if (desync) {
				size_t at = fs_find_resync(buf + off, have - off);

				if (at == have - off) {
					off = have - (sizeof(h) - 1); /* the pattern may straddle reads */
					break;
				}
				off += at;
				desync = 0;
			}
			memcpy(&h, buf + off, sizeof(h));
			if (!fs_hdr_ok(&h)) {
				if (fs->desyncs++ < 10)
					agent_log("shared folders: bad header from the host (len %u, error %d); "
						  "waiting for a resync", h.len, h.error);
				desync = 1;
				off++;
				continue;
			}
			if (have - off < h.len)
				break;
			fs_deliver(fs, buf + off, h.len);
			off += h.len;
		}
		if (off) {
			memmove(buf, buf + off, have - off);
			have -= off;
		}
	}
	return NULL;
}

static void fs_set_state(struct fs *fs, enum fs_state st)
{
	uint64_t one = 1;

	atomic_store(&fs->state, (int)st);
	(void)!write(fs->ev_fd, &one, sizeof(one));
}

/* The kernel caps a FUSE mount's readahead at 128 KiB (VM_READAHEAD_PAGES), so a
 * sequential read goes to the host in 128 KiB READs, a round trip each. Raise it to
 * max_read (1 MiB): the same data in 8 times fewer round trips. Best effort. */
static void fs_readahead(void)
{
	struct stat st;
	char path[96];
	int fd;

	if (stat(K8FS_GUEST_ROOT, &st) < 0)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
		 minor(st.st_dev));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || dprintf(fd, "%u", FS_READ_AHEAD_KB) < 0)
		agent_log("shared folders: %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void *fs_mounter(void *arg)
{
	struct fs *fs = arg;

	for (int i = 0; i < fs->cfg.n; i++) {
		const struct fs_mount *m = &fs->cfg.m[i];
		char src[64];
		int r;

		snprintf(src, sizeof(src), "%s/%d", K8FS_GUEST_ROOT, m->index);
		if ((r = mkdir_p(m->guest, 0755)) < 0) {
			snprintf(fs->msg, sizeof(fs->msg), "mkdir %s: %s", m->guest, strerror(-r));
			goto fail;
		}
		/* The lookup of src waits for the host's INIT and LOOKUP answers. */
		if (mount(src, m->guest, NULL, MS_BIND, NULL) < 0) {
			snprintf(fs->msg, sizeof(fs->msg), "bind-mounting %s (host folder %d) on %s: %s", src,
				 m->index, m->guest, strerror(errno));
			goto fail;
		}
		/* A bind remount sets all per-mount flags: keep nosuid,nodev. */
		if (m->ro && mount(NULL, m->guest, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
				   NULL) < 0) {
			snprintf(fs->msg, sizeof(fs->msg), "making %s read-only: %s", m->guest, strerror(errno));
			goto fail;
		}
	}
	fs_readahead();
	agent_log("shared folders: %d mounted in %llu ms", fs->cfg.n,
		  (unsigned long long)((now_mono_ns() - fs->started_ns) / 1000000u));
	fs_set_state(fs, FS_READY);
	return NULL;
fail:
	agent_log("shared folders: %s", fs->msg);
	fs_set_state(fs, FS_FAILED);
	return NULL;
}

/* ---- start (main thread) ---- */

static int fs_thread(void *(*fn)(void *), struct fs *fs)
{
	pthread_attr_t at;
	pthread_t t;
	int r;

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	r = pthread_create(&t, &at, fn, fs);
	pthread_attr_destroy(&at);
	return -r;
}

int fs_start(struct agent *a, const struct fs_cfg *c, struct k8_err *err)
{
	void *(*const threads[])(void *) = { fs_reader, fs_writer, fs_port_reader, fs_mounter };
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	sigset_t all, old;
	char opts[160];
	struct fs *fs;
	int r, i;

	if (c->n == 0)
		return 0;
	fs = xcalloc(1, sizeof(*fs));
	fs->port_fd = fs->fuse_fd = fs->ev_fd = fs->pipe_r = fs->pipe_w = -1;
	fs->cfg = *c;
	fs->started_ns = now_mono_ns();
	/* The port comes with the agent's (same device): it is there, or about to be. */
	for (i = 0; (r = chan_find_port(K8FS_PORT_NAME, fs->port_dev, sizeof(fs->port_dev))) < 0 &&
		    i < FS_PORT_WAIT_MS / 10; i++)
		nanosleep(&ts, NULL);
	if (r < 0) {
		k8_err_set(err, -ENODEV, "shared folders: no virtio-serial port named %s", K8FS_PORT_NAME);
		goto fail;
	}
	/* Non-blocking, for the port thread's readv(); the writer waits in poll(). */
	fs->port_fd = open(fs->port_dev, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fs->port_fd < 0) {
		k8_err_set(err, -errno, "shared folders: open %s: %s", fs->port_dev, strerror(errno));
		goto fail;
	}
	fs->fuse_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fs->fuse_fd < 0) {
		k8_err_set(err, -errno, "shared folders: open /dev/fuse: %s", strerror(errno));
		goto fail;
	}
	{
		int p[2];

		/* the writer's pipe for splice(); without it, write() alone */
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
			if (fcntl(p[1], F_SETPIPE_SZ, FS_PIPE_SIZE) < 0) {
				fs_log_errno("F_SETPIPE_SZ");
				close(p[0]);
				close(p[1]);
			} else {
				fs->pipe_r = p[0];
				fs->pipe_w = p[1];
			}
		}
	}
	fs->ev_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fs->ev_fd < 0) {
		k8_err_set(err, -errno, "shared folders: eventfd: %s", strerror(errno));
		goto fail;
	}
	if ((r = mkdir_p(K8FS_GUEST_ROOT, 0755)) < 0) {
		k8_err_set(err, r, "shared folders: mkdir %s: %s", K8FS_GUEST_ROOT, strerror(-r));
		goto fail;
	}
	/* default_permissions: the guest kernel checks mode bits as for any file system
	 * (kosa8-fs acts as the daemon's user and would let every guest user through). */
	snprintf(opts, sizeof(opts),
		 "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions,"
		 "max_read=%u", fs->fuse_fd, FS_MAX_READ);
	/* Returns at once: FUSE_INIT is queued for the reader, answered when the host is. */
	if (mount("kosa8", K8FS_GUEST_ROOT, "fuse", MS_NOSUID | MS_NODEV, opts) < 0) {
		k8_err_set(err, -errno, "shared folders: mount fuse on %s: %s", K8FS_GUEST_ROOT,
			   strerror(errno));
		goto fail;
	}
	pthread_mutex_init(&fs->lock, NULL);
	pthread_cond_init(&fs->wake, NULL);
	pthread_cond_init(&fs->room, NULL);
	atomic_store(&fs->state, FS_PENDING);
	a->fsev.kind = W_FS;
	a->fsev.fd = fs->ev_fd;
	if ((r = agent_watch(a, &a->fsev, EPOLLIN)) < 0)
		agent_fatal("epoll_ctl eventfd: %s", strerror(-r)); /* the mount cannot be undone cleanly */
	a->fs = fs;
	/* The threads take no signals: SIGCHLD stays for the main loop's signalfd. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (i = 0; i < (int)ARRAY_SIZE(threads); i++)
		if ((r = fs_thread(threads[i], fs)) < 0)
			agent_fatal("shared folders: pthread_create: %s", strerror(-r));
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	agent_log("shared folders: %d, FUSE on %s, port %s", c->n, K8FS_GUEST_ROOT, fs->port_dev);
	return 0;
fail:
	if (fs->port_fd >= 0)
		close(fs->port_fd);
	if (fs->fuse_fd >= 0)
		close(fs->fuse_fd);
	if (fs->ev_fd >= 0)
		close(fs->ev_fd);
	if (fs->pipe_r >= 0) {
		close(fs->pipe_r);
		close(fs->pipe_w);
	}
	free(fs);
	return err->code;
}

enum fs_state fs_state(const struct agent *a, char *msg, size_t msglen)
{
	enum fs_state st;

	if (!a->fs)
		return FS_NONE;
	st = (enum fs_state)atomic_load(&a->fs->state);
	if (st == FS_FAILED && msg)
		snprintf(msg, msglen, "%s", a->fs->msg);
	return st;
}

void fs_event(struct agent *a)
{
	uint64_t v;

	while (read(a->fsev.fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		;
	req_fs_changed(a);
}

/* ---- in a new container's child ---- */

int fs_binds_parse(const struct agent *a, json_t *list, struct launch *l, struct k8_err *err)
{
	size_t i;
	json_t *b;
	int r;

	l->binds_given = list != NULL && !json_is_null(list);
	if (!l->binds_given)
		return 0;
	if (!json_is_array(list) || json_array_size(list) > FS_MAX_MOUNTS)
		return k8_err_set(err, -EINVAL, "field 'binds' must be a list of at most %d",
				  FS_MAX_MOUNTS);
	l->binds = calloc(json_array_size(list) + 1, sizeof(*l->binds));
	if (!l->binds)
		return -ENOMEM;
	json_array_foreach(list, i, b) {
		struct fs_bind *fb = &l->binds[i];
		const char *folder = json_string_value(json_object_get(b, "folder"));
		const char *sub = json_string_value(json_object_get(b, "sub"));
		const char *dst = json_string_value(json_object_get(b, "dst"));
		int k;

		if (!folder || !sub || !dst)
			return k8_err_set(err, -EINVAL, "binds[%zu] needs folder, sub and dst", i);
		fb->folder = -1;
		for (k = 0; a->fs && k < a->fs->cfg.n; k++)
			if (!strcmp(a->fs->cfg.m[k].guest, folder))
				fb->folder = k;
		if (fb->folder < 0)
			return k8_err_set(err, -ENOENT, "binds[%zu]: %.100s is not a shared folder of "
					  "this VM", i, folder);
		/* sub: relative and normalised ("" or "a/b"); checked like a guest path */
		if (strlen(sub) > FS_MAX_GUEST - 1 || sub[0] == '/')
			return k8_err_set(err, -EINVAL, "binds[%zu].sub must be a relative path", i);
		if (sub[0]) {
			char tmp[FS_MAX_GUEST + 2];
			snprintf(tmp, sizeof(tmp), "/%s", sub);
			if ((r = fs_guest_ok(tmp, strlen(tmp), err, (int)i)) < 0 &&
			    strstr(err->msg, "normalised"))
				return r;
			k8_err_clear(err);      /* sub may name e.g. "dev": it is not a VM path */
		}
		if ((r = fs_guest_ok(dst, json_string_length(json_object_get(b, "dst")), err,
				     (int)i)) < 0) {
			/* a container path: only its form matters (its /proc is its own) */
			if (strstr(err->msg, "belong to the VM")) {
				k8_err_clear(err);
			} else {
				return r;
			}
		}
		snprintf(fb->sub, sizeof(fb->sub), "%s", sub);
		snprintf(fb->dst, sizeof(fb->dst), "%s", dst);
		fb->ro = json_is_true(json_object_get(b, "ro"));
		l->nbinds++;
	}
	return 0;
}

/* One bind's tree: the sub-path resolved beneath its folder with no symlinks (another
 * container may have written the folder), cloned, read-only when asked. */
static int fs_bind_clone(const struct agent *a, const struct fs_bind *b, char *msg, size_t msglen)
{
	const struct fs_mount *m = &a->fs->cfg.m[b->folder];
	struct open_how how = { .flags = O_PATH | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
					   RESOLVE_NO_MAGICLINKS };
	struct mount_attr at = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
					     ((m->ro || b->ro) ? MOUNT_ATTR_RDONLY : 0) };
	int dir, fd, t, e;

	dir = open(m->guest, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0) {
		e = errno;
		snprintf(msg, msglen, "bind %s: open %s: %s", b->dst, m->guest, strerror(e));
		return -e;
	}
	fd = b->sub[0] ? (int)syscall(SYS_openat2, dir, b->sub, &how, sizeof(how)) : dup(dir);
	e = errno;
	close(dir);
	if (fd < 0) {
		snprintf(msg, msglen, "bind %s: the source %s: %s", b->dst, b->sub,
			 e == ELOOP ? "a symbolic link on the way (refused)" : strerror(e));
		return -e;
	}
	t = open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	e = errno;
	close(fd);
	if (t < 0) {
		snprintf(msg, msglen, "bind %s: open_tree: %s", b->dst, strerror(e));
		return -e;
	}
	if (mount_setattr(t, "", AT_EMPTY_PATH, &at, sizeof(at)) < 0) {
		e = errno;
		close(t);
		snprintf(msg, msglen, "bind %s: mount_setattr: %s", b->dst, strerror(e));
		return -e;
	}
	return t;
}

int fs_ctr_clone(const struct agent *a, const struct launch *l, int fds[FS_MAX_MOUNTS], char *msg,
		 size_t msglen)
{
	for (int i = 0; i < FS_MAX_MOUNTS; i++)
		fds[i] = -1;
	if (!a->fs)
		return 0;
	if (l->binds_given) {
		for (int i = 0; i < l->nbinds; i++)
			if ((fds[i] = fs_bind_clone(a, &l->binds[i], msg, msglen)) < 0) {
				int e = fds[i];
				fds[i] = -1;
				return e;
			}
		return 0;
	}
	for (int i = 0; i < a->fs->cfg.n; i++) {
		const struct fs_mount *m = &a->fs->cfg.m[i];
		struct mount_attr at = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
						     (m->ro ? MOUNT_ATTR_RDONLY : 0) };

		/* The walk ends on the VM's bind mount: no request goes to the host. */
		fds[i] = open_tree(AT_FDCWD, m->guest, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (fds[i] < 0) {
			int e = errno;
			snprintf(msg, msglen, "shared folder %s: open_tree: %s", m->guest, strerror(e));
			return -e;
		}
		if (mount_setattr(fds[i], "", AT_EMPTY_PATH, &at, sizeof(at)) < 0) {
			int e = errno;
			snprintf(msg, msglen, "shared folder %s: mount_setattr: %s", m->guest, strerror(e));
			return -e;
		}
	}
	return 0;
}

/* Create what a mount will cover at `path` in the container's root: a directory, or
 * an empty file for a file bind. A shared folder is always a directory: only a bind is
 * asked (fstat on the clone is a FUSE request, which would wait while the host's file
 * server is away, and a run must start then: its requests are resent later). */
static int fs_ctr_target(const char *path, int fd, int may_be_file)
{
	struct stat st;
	char parent[FS_MAX_GUEST + 1];
	char *slash;
	int r, f;

	if (!may_be_file || fstat(fd, &st) < 0 || S_ISDIR(st.st_mode))
		return mkdir_p(path, 0755);
	snprintf(parent, sizeof(parent), "%s", path);
	slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		if ((r = mkdir_p(parent, 0755)) < 0)
			return r;
	}
	f = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (f < 0 && errno != EISDIR)
		return -errno;
	if (f >= 0)
		close(f);
	return 0;
}

int fs_ctr_attach(const struct agent *a, const struct launch *l, int fds[FS_MAX_MOUNTS], char *msg,
		  size_t msglen)
{
	int n;

	if (!a->fs)
		return 0;
	n = l->binds_given ? l->nbinds : a->fs->cfg.n;
	for (int i = 0; i < n; i++) {
		const char *guest = l->binds_given ? l->binds[i].dst : a->fs->cfg.m[i].guest;
		int r;

		/* In the container's own root now (an overlay: the directories land in its
		 * writable layer); symlinks of the image resolve inside it. */
		if ((r = fs_ctr_target(guest, fds[i], l->binds_given)) < 0) {
			snprintf(msg, msglen, "shared folder %s: mkdir in the container: %s", guest,
				 strerror(-r));
			return r;
		}
		if (move_mount(fds[i], "", AT_FDCWD, guest,
			       MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_SYMLINKS) < 0) {
			int e = errno;
			snprintf(msg, msglen, "shared folder %s: attaching it in the container: %s", guest,
				 strerror(e));
			return -e;
		}
		close(fds[i]);
		fds[i] = -1;
	}
	return 0;
}
