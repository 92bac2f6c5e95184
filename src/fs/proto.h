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
#define K8FS_PORT_NAME      "kosa8.fs"
#define K8FS_GUEST_ROOT     "/run/kosa8/fs"

#define K8FS_NOTIFY_RESYNC  0x4b38
#define K8FS_OP_SYNC        0x4b38
#define K8FS_NONCE_LEN      16

/* Largest message either way; a request longer than this, or shorter than
 * a struct fuse_in_header, is a protocol error (the host drops the link). */
#define K8FS_MAX_MSG        (1024 * 1024 + 4096)

#endif
