/* SPDX-License-Identifier: Apache-2.0 */
/* fs.h - kosa8-fs internals: mounts, node and handle tables, the FUSE connection state.
 *
 * Theory of operation (docs/shared-folders.md has the long form): the guest kernel's
 * FUSE requests arrive raw over a virtio-serial port. Each node the guest knows (a FUSE
 * nodeid) holds an O_PATH fd to one host inode, found one component at a time with
 * openat2(parent_fd, name, O_PATH|O_NOFOLLOW, RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
 * RESOLVE_NO_MAGICLINKS). Contents are opened only for regular files and directories,
 * by re-opening that exact inode through /proc/self/fd/N. Nothing on the host is ever
 * reached by a multi-component path except at `load`, and then with the same flags.
 */
#ifndef K8_FS_H
#define K8_FS_H

#include "common/rate.h"
#include "fs/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <sys/types.h>

#define K8FS_MAX_WRITE      (1024 * 1024)     /* max_write and max_read we offer */
#define K8FS_MAX_PAGES      256               /* K8FS_MAX_WRITE / 4096 */
#define K8FS_MAX_READDIR    (128 * 1024)      /* cap on one READDIR reply */
#define K8FS_IO_BLKSIZE     K8FS_MAX_WRITE    /* st_blksize the guest sees: the buffer size
						 * Python, coreutils pick, so a buffered
						 * write is one WRITE (QEMU's 9p reports its
						 * iounit, ~msize, likewise) */
#define K8FS_MAX_NODES      (1u << 18)        /* each holds an fd: ~300 B of kernel memory */
#define K8FS_MAX_HANDLES    65536
#define K8FS_MAX_MOUNTS     64
#define K8FS_MAX_PATH_BYTES (64u << 20)       /* all nodes' paths together: ENOMEM beyond */
#define K8FS_ROOT_ID        1                 /* the synthetic root */
#define K8FS_ENTRY_TIMEOUT  1                 /* seconds a name -> node answer is cached */
#define K8FS_ATTR_TIMEOUT   1                 /* seconds attributes are cached; the guest
						 * agent invalidates a file's on each open */

struct fs_mount {
	char *path;          /* realpath of HOSTDIR */
	int fd;              /* O_PATH|O_DIRECTORY */
	bool ro;
};

struct fs_node {
	uint64_t id;
	int fd;              /* O_PATH|O_NOFOLLOW fd, -1 when stale */
	uint32_t mount;
	mode_t type;         /* S_IFMT bits (immutable for an inode) */
	dev_t dev;
	ino_t ino;
	uint64_t nlookup;
	char *path;          /* relative to the mount root, "" for the root itself */
	struct fs_node *next_id, *next_ino;
};

struct fs_handle {
	bool used;
	bool dir;
	int fd;              /* opened file or directory; -1 for the synthetic root or stale */
	uint32_t mount;      /* UINT32_MAX for the synthetic root */
	uint64_t nodeid;
	uint32_t flags;      /* open flags as the guest sent them */
};

struct fs_stats {
	uint64_t requests, bytes_read, bytes_written, errors, protocol_errors, connects;
	uint64_t limit_hits, enospc;
	uint64_t ram_writes, ram_errors;     /* WRITEREFs served, refused (bad segments, no RAM) */
};

struct fs_ctx {
	struct fs_mount mounts[K8FS_MAX_MOUNTS];
	uint32_t nmounts;
	int proc_fd;                 /* /proc/self/fd, O_PATH|O_DIRECTORY */

	/* nodes: two chained hash tables, by nodeid and by (mount, dev, ino) */
	struct fs_node **by_id, **by_ino;
	size_t nbuckets, nnodes;
	uint64_t next_id;

	struct fs_handle *handles;   /* index = fh; slot 0 unused */
	size_t nhandles_cap, nhandles;

	/* connection */
	bool connected, synced;
	uint8_t nonce[K8FS_NONCE_LEN];
	uint8_t *in;                 /* K8FS_MAX_MSG bytes */
	size_t in_start, in_len;     /* unparsed bytes are in[in_start .. in_start+in_len) */
	uint8_t *out;                /* K8FS_MAX_MSG bytes: the reply being sent */
	size_t out_off, out_len;
	uint8_t *scratch;            /* K8FS_MAX_MSG bytes: an unaligned request, realigned */
	uint8_t *dents;              /* getdents64 scratch */

	struct fs_stats st;
	uint32_t proto_minor;        /* negotiated at INIT (0 before) */

	size_t path_bytes;           /* sum of the nodes' path strings (K8FS_MAX_PATH_BYTES) */
	size_t max_nodes;            /* what RLIMIT_NOFILE allows (0: K8FS_MAX_NODES) */
	size_t max_handles;          /* likewise (0: K8FS_MAX_HANDLES) */
	struct rate_bucket limit_log;    /* the "limit reached" line: one per 10 s */
	void (*log)(const char *fmt, ...);   /* the process's log line (NULL: silent) */
	/* host disk reserve: writes fail with ENOSPC before the host file system of a share
	 * has less than max(reserve_bytes, reserve_pct % of its size) free (0, 0: none) */
	uint64_t reserve_bytes;
	unsigned reserve_pct;
	int port_handoff;            /* a port fd the daemon passed (control "port"), or -1 */
	/* the RAM data path (ram.c): guest-physical [0, ram_size) is at ram_hva in the
	 * process whose /proc/PID/mem ram_fd is (read-only); -1 when the daemon gave none */
	int ram_fd;
	uint64_t ram_hva, ram_size;
	uint8_t *ram_buf;            /* K8FS_MAX_MSG bytes: a WRITEREF made a WRITE again */
};

/* ---- node.c: tables ---- */
/* Set up the tables and the synthetic nodes; mounts[] must be filled in. 0 or -errno. */
int fs_ctx_init(struct fs_ctx *c);
/* Close every fd and free everything (mount fds included). Accepts a zeroed ctx. */
void fs_ctx_free(struct fs_ctx *c);
/* Open HOSTDIR for mount slot c->nmounts. 0 or -errno. */
int fs_mount_add(struct fs_ctx *c, const char *hostdir, bool ro);
/* Use an inherited directory fd (ownership passes in) for mount slot c->nmounts. */
int fs_mount_add_fd(struct fs_ctx *c, int fd, bool ro);
/* A cap on nodes or memory was hit: count it, log at most every 10 s. */
void fs_limit_hit(struct fs_ctx *c, const char *what);
/* 0, or -ENOSPC when writing `need` more bytes through mount m would leave its host file
 * system under the reserve. */
int fs_space_check(struct fs_ctx *c, uint32_t m, uint64_t need);
/* Parse a reserve "SIZE[,PCT%]" / "PCT%" (SIZE with K, M, G, T). 0 or -EINVAL. */
int fs_reserve_parse(const char *spec, uint64_t *bytes, unsigned *pct);
struct fs_node *fs_node_get(struct fs_ctx *c, uint64_t id);
/* Take a fresh O_PATH fd (ownership passes in) found as `name` under `parent`, and
 * return the node for its inode (existing or new) with nlookup incremented. */
struct stat;
int fs_node_found(struct fs_ctx *c, struct fs_node *parent, const char *name, int fd,
		  struct stat *st, struct fs_node **out);
void fs_node_forget(struct fs_ctx *c, uint64_t id, uint64_t n);
/* After a rename inside one mount: re-prefix the paths of moved nodes. */
void fs_node_renamed(struct fs_ctx *c, uint32_t mount, const char *from, const char *to,
		     bool exchange);
char *fs_path_join(const char *dir, const char *name);
/* Handles */
int fs_handle_new(struct fs_ctx *c, uint64_t *fh);
struct fs_handle *fs_handle_get(struct fs_ctx *c, uint64_t fh);
void fs_handle_close(struct fs_ctx *c, uint64_t fh);
/* Resolve a relative path beneath a mount root, symlinks refused anywhere. fd or -errno. */
int fs_resolve(struct fs_ctx *c, uint32_t mount, const char *rel);
/* Does the node's last known name still lead to its inode? False once the host deleted
 * or renamed it (or a folder on the way): the guest's cached name is then stale. */
bool fs_node_still_named(struct fs_ctx *c, const struct fs_node *n);
/* Re-open the inode behind an O_PATH fd, for S_ISREG/S_ISDIR only. fd or -errno. */
int fs_reopen(struct fs_ctx *c, int opath_fd, mode_t type, int flags);
/* Checkpoint support: write / read the tables as JSON. 0 or -errno, message in err. */
struct k8_err;
int fs_tables_save(struct fs_ctx *c, const char *path, struct k8_err *err);
int fs_tables_load(struct fs_ctx *c, const char *path, struct k8_err *err);
/* The same on an fd the daemon opened (kosa8-fs cannot open paths when jailed). */
int fs_tables_save_fd(struct fs_ctx *c, int fd, struct k8_err *err);
int fs_tables_load_fd(struct fs_ctx *c, int fd, struct k8_err *err);
/* Forget every node and handle (the mount roots stay); next_id keeps counting. */
void fs_tables_reset(struct fs_ctx *c);

/* ---- fuse.c: connection state and dispatch ---- */
/* A new connection: fresh nonce (given), RESYNC queued in out. */
void fs_conn_reset(struct fs_ctx *c, const uint8_t nonce[K8FS_NONCE_LEN]);
/* Drop the connection state (unparsed input, unsent output). */
void fs_conn_drop(struct fs_ctx *c);
/* Append input bytes (tests, fuzzing); the caller guarantees room, see fs_conn_room. */
uint8_t *fs_conn_room(struct fs_ctx *c, size_t *room);
void fs_conn_added(struct fs_ctx *c, size_t n);
/* Consume one unit of input (skipped resync garbage or one request) while out is empty.
 * 1 = progress (a reply may be in c->out), 0 = need more input, -EPROTO = drop link. */
int fs_conn_step(struct fs_ctx *c);
/* Handle one whole request msg[0..len) (len == in_header.len); reply into out.
 * Returns the reply length (0: no reply). Never fails: errors become FUSE errors. */
size_t fs_dispatch(struct fs_ctx *c, const uint8_t *msg, size_t len, uint8_t *out);

/* ---- ops.c: one function per FUSE opcode; see fuse.c for the calling convention ---- */
struct fs_req {
	struct fs_ctx *c;
	uint64_t unique, nodeid;
	uint32_t opcode;
	const uint8_t *body;     /* after fuse_in_header */
	size_t blen;
	uint8_t *out;            /* reply payload goes to out + sizeof(fuse_out_header) */
	size_t olen;             /* payload length set by the op */
};
/* Bounds-checked access to the request body: NULL when [off, off+n) is not inside. */
const void *fs_req_get(const struct fs_req *r, size_t off, size_t n);
/* A NUL-terminated string starting at *off within the body; advances *off. NULL if none. */
const char *fs_req_str(const struct fs_req *r, size_t *off);
int fs_op(struct fs_req *r);   /* 0, -errno, or K8FS_NOREPLY; fills r->olen */
#define K8FS_NOREPLY 1
bool fs_op_modifies(uint32_t opcode);

/* ---- ram.c: guest RAM, bounded ---- */
/* Use fd (ownership passes in; -1: none) as the guest's RAM: guest-physical [0, size) at
 * hva in it. 0, or -EINVAL (fd closed) for an unaligned or overflowing window. */
int fs_ram_set(struct fs_ctx *c, int fd, uint64_t hva, uint64_t size);
/* Check every segment (len >= 1, pad 0, [gpa, gpa+len) inside [0, ram_size), lengths
 * summing to total), before any byte is read. 0 or -EFAULT. */
int fs_ram_check(uint64_t ram_size, const struct k8fs_seg *seg, uint32_t nseg, size_t total);
/* Copy the segments' bytes, in order, into dst[0..total). 0, -EFAULT (a bad segment:
 * nothing read), -ENXIO (no RAM, or it could not be read: the VM is gone). */
int fs_ram_gather(struct fs_ctx *c, const struct k8fs_seg *seg, uint32_t nseg, uint8_t *dst,
		  size_t total);

/* ---- ctl.c: the control socket's requests (an sc_ctl_fn, src/common/sidecar.h) ---- */
/* Handle one request for `ctx` (a struct fs_ctx). *fd (or -1) is an fd that came with
 * the line: the op that uses it takes it (sets *fd = -1). */
json_t *fs_ctl_handle(void *ctx, json_t *req, int *fd, struct k8_err *err);

#endif
