/* SPDX-License-Identifier: Apache-2.0 */
/* fs/proto.h - wire constants shared by kosa8-fs (host) and the agent's FUSE shuttle (guest) */
#ifndef KOSA8_FS_PROTO_H
#define KOSA8_FS_PROTO_H

/*
 * Transport: the virtio-serial port K8FS_PORT_NAME. QEMU is the socket server
 * (-chardev socket,...,server=on,wait=off); kosa8-fs connects as a client and
 * reconnects after every EOF.
 *
 * Guest->host: raw FUSE requests as the guest kernel wrote them to /dev/fuse
 * (struct fuse_in_header first; its len covers the whole message).
 * Host->guest: raw FUSE replies (struct fuse_out_header first).
 *
 * Resync: after each (re)connect the host sends K8FS_RESYNC:
 *   struct fuse_out_header { len = 16 + K8FS_NONCE_LEN, error = K8FS_NOTIFY_RESYNC,
 *                            unique = 0 } + K8FS_NONCE_LEN random bytes,
 * then discards incoming bytes until it sees K8FS_SYNC:
 *   struct fuse_in_header { len = 40 + K8FS_NONCE_LEN, opcode = K8FS_OP_SYNC,
 *                           unique = 0, nodeid = 0, rest 0 } + the same nonce.
 * The guest answers RESYNC with SYNC, then resends in order every request it
 * forwarded that has not been answered yet.
 */
#include <stdint.h>

#define K8FS_PORT_NAME      "kosa8.fs"
#define K8FS_GUEST_ROOT     "/run/kosa8/fs"

#define K8FS_NOTIFY_RESYNC  0x4b38
#define K8FS_OP_SYNC        0x4b38
#define K8FS_NONCE_LEN      16

/*
 * The RAM data path (issue 30; docs/shared-folders.md "The RAM data path"): WRITE
 * payloads stay in guest RAM and kosa8-fs reads them there, through a /proc/<qemu>/mem
 * fd kosa8d hands it, bounded to the guest's RAM.
 *
 * Versioning: after each SYNC the agent sends K8FS_OP_HELLO (unique K8FS_HELLO_UNIQUE,
 * a value the guest kernel never uses; body struct k8fs_hello_in). A host that knows it
 * answers struct k8fs_hello_out; an older one answers ENOSYS (an unknown opcode), and
 * the agent then sends only plain FUSE requests. The agent uses K8FS_OP_WRITEREF only
 * while the last HELLO answer (since the last RESYNC) had K8FS_CAP_RAM, and only for
 * buffers whose every byte lies below ram_size.
 *
 * K8FS_OP_WRITEREF: struct fuse_in_header (as the WRITE's, opcode replaced) + struct
 * fuse_write_in + struct k8fs_ref + nseg x struct k8fs_seg; the segments, in order,
 * hold fuse_write_in.size bytes of guest-physical memory. The reply is the WRITE's.
 */
#define K8FS_OP_HELLO       0x4b39
#define K8FS_OP_WRITEREF    0x4b3a
#define K8FS_HELLO_UNIQUE   (1ull << 63)
#define K8FS_WIRE_VERSION   1
#define K8FS_CAP_RAM        1u
#define K8FS_MAX_SEGS       260          /* a 1 MiB payload, unaligned, in pages: 257 */

struct k8fs_hello_in {
	uint32_t version;        /* the agent's K8FS_WIRE_VERSION */
	uint32_t flags;          /* 0 */
};

struct k8fs_hello_out {
	uint32_t version;        /* the host's K8FS_WIRE_VERSION */
	uint32_t caps;           /* K8FS_CAP_RAM: WRITEREF is served */
	uint64_t ram_size;       /* guest-physical bytes [0, ram_size) it can reach */
};

struct k8fs_ref {
	uint32_t version;        /* K8FS_WIRE_VERSION */
	uint32_t nseg;           /* 1..K8FS_MAX_SEGS */
};

struct k8fs_seg {
	uint64_t gpa;            /* guest-physical address */
	uint32_t len;            /* bytes, >= 1 */
	uint32_t pad;            /* 0 */
};

/* Largest message either way; a request longer than this, or shorter than
 * a struct fuse_in_header, is a protocol error (the host drops the link). */
#define K8FS_MAX_MSG        (1024 * 1024 + 4096)

#endif
