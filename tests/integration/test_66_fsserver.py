# SPDX-License-Identifier: Apache-2.0
# test_66_fsserver.py - kosa8-fs without a VM: the test plays QEMU (it listens on the port
# socket) and the guest kernel (it speaks raw FUSE), and checks the host directories.
import errno
import json
import os
import signal
import socket
import stat
import struct
import subprocess
import tempfile

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KOSA8_BIN", os.path.join(TOP, "build", "bin"))
FS = os.path.join(BIN, "kosa8-fs")

IN_HDR = struct.Struct("<IIQQIIII")     # len opcode unique nodeid uid gid pid padding
OUT_HDR = struct.Struct("<IiQ")         # len error unique
RESYNC = 0x4b38
OP_SYNC = 0x4b38
(LOOKUP, GETATTR, SETATTR, MKNOD, MKDIR, UNLINK, OPEN, READ, WRITE, RELEASE, INIT, OPENDIR,
 READDIR, RELEASEDIR, CREATE, READDIRPLUS) = (1, 3, 4, 8, 9, 10, 14, 15, 16, 18, 26, 27, 28,
                                               29, 35, 44)
ENTRY_OUT = struct.Struct("<QQQQII")    # nodeid generation entry_valid attr_valid + nsecs
ATTR = struct.Struct("<QQQQQQIIIIIIIII")  # ino size blocks [amc]time [amc]nsec mode(9) ...

pytestmark = pytest.mark.skipif(not os.access(FS, os.X_OK), reason="%s not built" % FS)


class Guest:
    """The QEMU side of the port: accepts kosa8-fs's connection and speaks FUSE."""

    def __init__(self, listener):
        self.listener = listener
        self.conn = None
        self.buf = b""
        self.unique = 100

    def accept(self, timeout=5):
        self.listener.settimeout(timeout)
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(5)
        self.buf = b""
        hdr = self.read_exact(16 + 16)
        ln, err, uniq = OUT_HDR.unpack(hdr[:16])
        assert (ln, err, uniq) == (32, RESYNC, 0)
        return hdr[16:]

    def read_exact(self, n):
        while len(self.buf) < n:
            chunk = self.conn.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def sync(self, nonce, garbage=b""):
        self.conn.sendall(garbage + IN_HDR.pack(56, OP_SYNC, 0, 0, 0, 0, 0, 0) + nonce)

    def send(self, op, nodeid, body=b"", unique=None):
        if unique is None:
            self.unique += 1
            unique = self.unique
        self.conn.sendall(IN_HDR.pack(40 + len(body), op, unique, nodeid, 0, 0, 0, 0) + body)
        return unique

    def reply(self):
        ln, err, uniq = OUT_HDR.unpack(self.read_exact(16))
        return uniq, err, self.read_exact(ln - 16)

    def call(self, op, nodeid, body=b""):
        u = self.send(op, nodeid, body)
        uniq, err, payload = self.reply()
        assert uniq == u
        return err, payload


def name(s):
    return s.encode() + b"\0"


def entry(payload):
    nodeid = ENTRY_OUT.unpack_from(payload)[0]
    attr = ATTR.unpack_from(payload, ENTRY_OUT.size)
    return nodeid, attr


class Server:
    def __init__(self, tmp, mounts):
        self.port = os.path.join(tmp, "p.fs")
        self.ctl = os.path.join(tmp, "p.fsctl")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.port)
        self.listener.listen(1)
        args = [FS, "--id", "t66", "--port", self.port, "--control", self.ctl]
        for m in mounts:
            args += ["--mount", m]
        self.log = open(os.path.join(tmp, "fs.log"), "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True)
        line = self.proc.stdout.readline()
        assert line == b"ready\n", line
        self.guest = Guest(self.listener)

    def control(self, req, fd=None):
        """One control request; fd travels with its first byte (SCM_RIGHTS), as kosa8d
        sends one."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.ctl)
            line = json.dumps(req).encode() + b"\n"
            if fd is not None:
                s.sendmsg([line[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        struct.pack("i", fd))])
                line = line[1:]
            s.sendall(line)
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                assert chunk
                data += chunk
            return json.loads(data)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
        self.listener.close()
        self.log.close()


@pytest.fixture
def share():
    tmp = tempfile.mkdtemp(prefix="k8fs-", dir="/tmp")
    rw, ro, outside = (os.path.join(tmp, d) for d in ("rw", "ro", "outside"))
    for d in (rw, ro, outside):
        os.mkdir(d)
    with open(os.path.join(ro, "in.txt"), "w") as f:
        f.write("input data")
    with open(os.path.join(outside, "secret"), "w") as f:
        f.write("SECRET")
    os.symlink(outside, os.path.join(rw, "escape"))
    srv = Server(tmp, [rw + ":rw", ro + ":ro"])
    yield tmp, rw, ro, srv
    srv.stop()
    subprocess.run(["rm", "-rf", tmp])


def init(g):
    err, p = g.call(INIT, 0, struct.pack("<IIII", 7, 37, 131072, 0xffffffff) + b"\0" * 48)
    assert err == 0
    major, minor, readahead, flags, bg, cong, max_write = struct.unpack_from("<IIIIHHI", p)
    assert major == 7 and minor >= 31
    assert max_write >= 256 * 1024
    return flags


def create(g, parent, fname, flags=os.O_RDWR, mode=0o100644):
    err, p = g.call(CREATE, parent, struct.pack("<IIII", flags, mode, 0o22, 0) + name(fname))
    if err:
        return err, None, None
    nodeid, _ = entry(p)
    fh = struct.unpack_from("<Q", p, 128)[0]
    return 0, nodeid, fh


def test_fsserver_end_to_end(share):
    tmp, rw, ro, srv = share
    g = srv.guest
    nonce = g.accept()
    g.sync(nonce, garbage=b"\x01" * 100 + b"stale half of an old message")
    init(g)
    err, p = g.call(LOOKUP, 1, name("0"))
    assert err == 0
    root_rw, attr = entry(p)
    assert stat.S_ISDIR(attr[9])
    err, p = g.call(LOOKUP, 1, name("1"))
    root_ro, _ = entry(p)
    assert g.call(LOOKUP, 1, name("2"))[0] == -errno.ENOENT

    # write through, visible on the host at once
    err, node, fh = create(g, root_rw, "hello.txt", mode=0o104755)
    assert err == 0
    data = b"x" * 300000
    err, p = g.call(WRITE, node, struct.pack("<QQIIQII", fh, 0, len(data), 0, 0, 2, 0) + data)
    assert err == 0 and struct.unpack_from("<I", p)[0] == len(data)
    host = os.path.join(rw, "hello.txt")
    with open(host, "rb") as f:
        assert f.read() == data
    st = os.lstat(host)
    assert st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) == 0o755          # set-user-ID dropped
    err, p = g.call(READ, node, struct.pack("<QQIIQII", fh, 10, 1 << 20, 0, 0, 0, 0))
    assert err == 0 and p == data[10:]
    assert g.call(RELEASE, node, struct.pack("<QIIQ", fh, 0, 0, 0))[0] == 0

    # a host change is seen by the next read
    with open(os.path.join(ro, "in.txt"), "w") as f:
        f.write("changed on the host")
    err, p = g.call(LOOKUP, root_ro, name("in.txt"))
    rnode, attr = entry(p)
    assert attr[1] == len("changed on the host")
    err, p = g.call(OPEN, rnode, struct.pack("<II", os.O_RDONLY, 0))
    assert err == 0
    rfh = struct.unpack_from("<Q", p)[0]
    err, p = g.call(READ, rnode, struct.pack("<QQIIQII", rfh, 0, 4096, 0, 0, 0, 0))
    assert p == b"changed on the host"

    # read-only mount, symlink escapes, special files
    assert g.call(OPEN, rnode, struct.pack("<II", os.O_WRONLY, 0))[0] == -errno.EROFS
    assert create(g, root_ro, "new")[0] == -errno.EROFS
    assert g.call(MKDIR, root_ro, struct.pack("<II", 0o755, 0) + name("d"))[0] == -errno.EROFS
    assert g.call(UNLINK, root_ro, name("in.txt"))[0] == -errno.EROFS
    err, p = g.call(LOOKUP, root_rw, name("escape"))
    esc, attr = entry(p)
    assert stat.S_ISLNK(attr[9])
    assert g.call(LOOKUP, esc, name("secret"))[0] == -errno.ENOTDIR
    assert g.call(LOOKUP, root_rw, name(".."))[0] == -errno.EINVAL
    assert g.call(MKNOD, root_rw, struct.pack("<IIII", 0o10644, 0, 0, 0) + name("fifo"))[0] \
        == -errno.EPERM
    assert g.call(MKNOD, root_rw, struct.pack("<IIII", 0o20644, 0x103, 0, 0) + name("null"))[0] \
        == -errno.EPERM
    assert not os.path.exists(os.path.join(rw, "fifo"))

    # readdir of the share
    err, p = g.call(OPENDIR, root_rw, struct.pack("<II", 0, 0))
    dfh = struct.unpack_from("<Q", p)[0]
    err, p = g.call(READDIR, root_rw, struct.pack("<QQIIQII", dfh, 0, 4096, 0, 0, 0, 0))
    names, off = set(), 0
    while off + 24 <= len(p):
        ino, doff, nl, typ = struct.unpack_from("<QQII", p, off)
        names.add(p[off + 24:off + 24 + nl].decode())
        off += (24 + nl + 7) & ~7
    assert {"hello.txt", "escape", ".", ".."} <= names
    g.call(RELEASEDIR, root_rw, struct.pack("<QIIQ", dfh, 0, 0, 0))

    # hostile lengths: a request shorter than its header drops the link; we resync
    g.conn.sendall(IN_HDR.pack(8, GETATTR, 5, 1, 0, 0, 0, 0))
    g.conn.close()
    nonce2 = g.accept()
    assert nonce2 != nonce
    # bytes sent before the SYNC are discarded, then a pending request is resent
    g.send(GETATTR, 1, b"\0" * 16, unique=555)   # before SYNC: ignored
    g.sync(nonce2)
    u = g.send(LOOKUP, root_rw, name("hello.txt"), unique=777)
    uniq, err, p = g.reply()
    assert (uniq, err) == (777, 0)
    assert entry(p)[0] == node

    # a replayed CREATE of a file that exists (no O_EXCL) just opens it
    err, node2, fh2 = create(g, root_rw, "hello.txt")
    assert err == 0 and node2 == node
    assert create(g, root_rw, "hello.txt", flags=os.O_RDWR | os.O_EXCL)[0] == -errno.EEXIST

    # the link goes away (a rewind): reconnect, resync, go on
    g.conn.close()
    nonce3 = g.accept()
    g.sync(nonce3)
    assert g.call(GETATTR, node, b"\0" * 16)[0] == 0

    # control: ping, stats, save, load
    assert srv.control({"id": 1, "op": "ping"}) == {"id": 1, "ok": True}
    st = srv.control({"id": 2, "op": "stats"})
    assert st["ok"] and st["connected"] is True and st["requests"] > 10
    assert st["bytes_written"] >= len(data) and st["nodes"] >= 4 and st["handles"] >= 2
    saved = os.path.join(tmp, "tables.json")
    r = srv.control({"id": 3, "op": "save", "path": saved})
    assert r["ok"], r
    with open(saved) as f:
        tables = json.load(f)
    paths = {n["path"] for n in tables["nodes"]}
    assert "hello.txt" in paths
    assert any(h["nodeid"] == node for h in tables["handles"])
    # after the save the guest goes on; a rewind brings the saved tables back
    err, newnode, fh3 = create(g, root_rw, "later.txt")
    assert err == 0
    r = srv.control({"id": 4, "op": "load", "path": saved})
    assert r["ok"], r
    assert g.call(GETATTR, node, b"\0" * 16)[0] == 0
    err, p = g.call(READ, node, struct.pack("<QQIIQII", fh2, 0, 10, 0, 0, 0, 0))
    assert err == 0 and p == data[:10]
    assert g.call(GETATTR, newnode, b"\0" * 16)[0] == -errno.ESTALE
    err, nn, _ = create(g, root_rw, "after-load.txt")
    assert nn > newnode                       # ids never reused
    assert os.path.exists(os.path.join(rw, "later.txt"))   # host files are not rewound
    bad = srv.control({"id": 5, "op": "load", "path": os.path.join(tmp, "missing")})
    assert bad["ok"] is False and bad["error"]
    assert srv.control({"id": 6, "op": "nope"})["ok"] is False

    # nothing outside the shares changed
    with open(os.path.join(tmp, "outside", "secret")) as f:
        assert f.read() == "SECRET"
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=10) == 0
    assert not os.path.exists(srv.ctl)


def test_fsserver_waits_for_port_and_bad_args():
    tmp = tempfile.mkdtemp(prefix="k8fs-", dir="/tmp")
    try:
        p = subprocess.run([FS, "--id", "x", "--port", tmp + "/p", "--control", tmp + "/c",
                            "--mount", tmp + "/nope:rw"], capture_output=True, timeout=10)
        assert p.returncode == 1 and p.stdout.startswith(b"error: ")
        p = subprocess.run([FS, "--id", "x", "--port", tmp + "/p", "--control", tmp + "/c",
                            "--mount", tmp + ":rx"], capture_output=True, timeout=10)
        assert p.returncode == 1 and p.stdout.startswith(b"error: ")
        # started before QEMU: it keeps trying, then connects
        srv = Server.__new__(Server)
        srv.port, srv.ctl = tmp + "/p.fs", tmp + "/p.ctl"
        srv.log = open(tmp + "/log", "ab")
        srv.proc = subprocess.Popen([FS, "--id", "x", "--port", srv.port, "--control", srv.ctl,
                                     "--mount", tmp + ":ro"], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=srv.log,
                                    start_new_session=True)
        assert srv.proc.stdout.readline() == b"ready\n"
        # Its loop tries the port before it serves the control socket, so this answer
        # comes after at least one failed try (no socket yet); the connect below needs a
        # later one.
        assert srv.control({"id": 1, "op": "stats"})["connected"] is False
        srv.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.listener.bind(srv.port)
        srv.listener.listen(1)
        g = Guest(srv.listener)
        nonce = g.accept()
        g.sync(nonce)
        init(g)
        assert srv.control({"id": 2, "op": "stats"})["connected"] is True
        srv.stop()
    finally:
        subprocess.run(["rm", "-rf", tmp])
