# SPDX-License-Identifier: Apache-2.0
# test_91_hostile_fsram.py - the RAM data path of shared folders (issue 30) against a
# hostile guest: kosa8-fs reads WRITE payloads out of guest RAM where the guest says they
# are (K8FS_OP_WRITEREF, src/fs/proto.h). The real kosa8-fs binary; the test plays QEMU
# and the guest (as test_66 does) and is the "QEMU" whose RAM kosa8-fs gets: two pages of
# this process, between a guard page and a canary page, handed over as a read-only
# /proc/self/mem fd with {"op":"ram"} (as kosa8d hands QEMU's). Addresses outside the
# RAM, wrapping and huge lengths, lists that do not add up, overlapping lists: every one
# is answered (EFAULT / EINVAL), none reads outside the two pages, and kosa8-fs serves on.
import ctypes
import errno
import mmap
import os
import struct

import pytest

from test_66_fsserver import FS, Server, create, init, name, share  # noqa: F401 (fixture)

pytestmark = [pytest.mark.hostile,
              pytest.mark.skipif(not os.access(FS, os.X_OK), reason="%s not built" % FS)]

OP_HELLO, OP_WRITEREF = 0x4b39, 0x4b3a
HELLO_UNIQUE = 1 << 63
WRITE_IN = struct.Struct("<QQIIQII")      # fh offset size write_flags lock_owner flags pad
REF = struct.Struct("<II")                # version nseg
SEG = struct.Struct("<QII")               # gpa len pad
MAX_SEGS = 260
PAGE = 4096


def hello(g):
    u = g.send(OP_HELLO, 0, struct.pack("<II", 1, 0), unique=HELLO_UNIQUE)
    uniq, err, p = g.reply()
    assert uniq == u and err == 0
    return struct.unpack("<IIQ", p[:16])


def write_ref(g, node, fh, off, size, segs, version=1, nseg=None):
    body = WRITE_IN.pack(fh, off, size, 0, 0, 0, 0)
    body += REF.pack(version, len(segs) if nseg is None else nseg)
    body += b"".join(SEG.pack(*s) if len(s) == 3 else SEG.pack(s[0], s[1], 0) for s in segs)
    return g.call(OP_WRITEREF, node, body)


def test_hostile_segment_lists_never_leave_guest_ram(share):
    tmp, rw, ro, srv = share
    # guard page, two pages of "guest RAM", canary page
    mem = mmap.mmap(-1, 4 * PAGE)
    mem[:PAGE] = b"G" * PAGE
    mem[3 * PAGE:] = b"X" * PAGE
    pattern = bytes(ord("a") + i % 23 for i in range(2 * PAGE))
    mem[PAGE:3 * PAGE] = pattern
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    ram, size = base + PAGE, 2 * PAGE
    try:
        g = srv.guest
        nonce = g.accept()
        g.sync(nonce)
        init(g)
        # no RAM yet: HELLO says so, a WRITEREF is refused (ENXIO: the agent resends)
        assert hello(g)[:2] == (1, 0)
        err, node, fh = create(g, 2, "out.bin", os.O_WRONLY)
        assert err == 0
        assert write_ref(g, node, fh, 0, 10, [(0, 10)])[0] == -errno.ENXIO

        fd = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
        try:
            assert srv.control({"op": "ram", "hva": ram + 1, "size": size}, fd)["ok"] is False
            assert srv.control({"op": "ram", "hva": ram, "size": size}, fd)["ok"] is True
        finally:
            os.close(fd)
        assert hello(g) == (1, 1, size)

        # a good list: two segments, the second across the page boundary
        err, p = write_ref(g, node, fh, 0, 250, [(100, 50), (4000, 200)])
        assert err == 0 and struct.unpack("<I", p[:4])[0] == 250
        good = pattern[100:150] + pattern[4000:4200]
        with open(os.path.join(rw, "out.bin"), "rb") as f:
            assert f.read() == good
        # an overlapping, repeating list names only the guest's own bytes: allowed
        assert write_ref(g, node, fh, 250, 4096 * 2,
                         [(size - 4096, 4096), (size - 4096, 4096)])[0] == 0

        hostile = [
            (10, [(size, 10)]),                     # just past the end (the canary)
            (2, [(size - 1, 2)]),                   # across the end
            (1, [((1 << 64) - 1, 1)]),              # gpa + len wraps
            (4096, [((1 << 64) - 4096, 4096)]),
            (1 << 20, [(1, 0xffffffff)]),           # a huge length
            (10, [(0, 0), (0, 10)]),                # an empty segment
            (10, [(0, 10, 1)]),                     # padding not 0
            (10, [(base, 10)]),                     # a host address: the guard page
            (10, [(ram, 10)]),                      # the RAM's own host address
        ]
        for total, segs in hostile:
            assert write_ref(g, node, fh, 0, total, segs)[0] == -errno.EFAULT, segs
        # lengths that do not add up to the WRITE's size, either way
        assert write_ref(g, node, fh, 0, 11, [(0, 10)])[0] == -errno.EFAULT
        assert write_ref(g, node, fh, 0, 9, [(0, 10)])[0] == -errno.EFAULT
        # a huge WRITE size, a list longer than the message, none, too many, a new version
        assert write_ref(g, node, fh, 0, 0xffffffff, [(0, 10)])[0] == -errno.EINVAL
        assert write_ref(g, node, fh, 0, 10, [(0, 10)], nseg=1000)[0] == -errno.EINVAL
        assert write_ref(g, node, fh, 0, 10, [(0, 10)], nseg=0)[0] == -errno.EINVAL
        many = [(0, 1)] * (MAX_SEGS + 1)
        assert write_ref(g, node, fh, 0, len(many), many)[0] == -errno.EINVAL
        assert write_ref(g, node, fh, 0, 10, [(0, 10)], version=2)[0] == -errno.EINVAL
        # the most segments allowed, every one the same page: fine
        most = [(0, 4096)] * MAX_SEGS
        assert write_ref(g, node, fh, 0, 4096 * 256, most[:256])[0] == 0
        # read-only: the node's mount, and a read-only handle under a writable node
        err, p = g.call(1, 3, name("in.txt"))             # LOOKUP in the ro mount
        assert err == 0
        ro_node = struct.unpack_from("<Q", p)[0]
        err, p = g.call(14, ro_node, struct.pack("<II", os.O_RDONLY, 0))   # OPEN
        assert err == 0
        ro_fh = struct.unpack_from("<Q", p)[0]
        assert write_ref(g, ro_node, ro_fh, 0, 10, [(0, 10)])[0] == -errno.EROFS
        assert write_ref(g, node, ro_fh, 0, 10, [(0, 10)])[0] == -errno.EROFS
        with open(os.path.join(ro, "in.txt"), "rb") as f:
            assert f.read() == b"input data"

        # nothing outside the two pages ever reached the file
        with open(os.path.join(rw, "out.bin"), "rb") as f:
            data = f.read()
        assert b"G" not in data and b"X" not in data
        assert data[:4096] == pattern[:4096]          # the last good WRITEREF, at 0
        assert srv.proc.poll() is None
        st = srv.control({"op": "stats"})
        assert st["ok"] and st["ram"] is True and st["ram_writes"] == 4   # (the ro handle's: read, then EROFS)
        assert st["ram_errors"] == 12 and st["protocol_errors"] == 0

        # the daemon takes the RAM away (no fd): HELLO says so, WRITEREF is ENXIO again
        assert srv.control({"op": "ram"})["ok"] is True
        assert hello(g)[:2] == (1, 0)
        assert write_ref(g, node, fh, 0, 10, [(0, 10)])[0] == -errno.ENXIO
        assert srv.control({"op": "ping"})["ok"] is True
    finally:
        mem.close()
