# SPDX-License-Identifier: Apache-2.0
# containerd-shim-kosa8-v2 from the attacker's positions (docs/containerd.md "Security"): a
# pod whose annotations ask for more than the node allows, a process that reaches the
# shim's socket and sends it garbage, and an image whose tree holds links out of it, FIFOs
# and device nodes. Each attack fails, leaves nothing behind, and the shim goes on.
import os
import socket
import stat
import struct

import pytest

from conftest import wait_for
from ctrkit import IMAGE, RUNTIME, ctrd, owned, wait_task  # noqa: F401 (ctrd: a fixture)

pytestmark = pytest.mark.hostile


# ---- a little protobuf and ttRPC, enough to speak to the shim ----

def varint(n):
    out = b""
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def request(service, method, payload=b""):
    return field(1, service.encode()) + field(2, method.encode()) + field(3, payload)


def frame(stream, typ, data, flags=0):
    return struct.pack(">IIBB", len(data), stream, typ, flags) + data


def read_frame(s):
    """(stream, type, data) of the next frame, or None at the connection's end."""
    def take(n):
        b = b""
        while len(b) < n:
            d = s.recv(n - len(b))
            if not d:
                return None
            b += d
        return b
    h = take(10)
    if h is None:
        return None
    n, stream, typ, _ = struct.unpack(">IIBB", h)
    return stream, typ, take(n)


def status_code(resp):
    """The gRPC code in a ttRPC Response (field 1: Status, its field 1: code)."""
    i = 0
    while i < len(resp):
        key = resp[i]
        i += 1
        if key & 7 != 2:
            return None
        n, shift = 0, 0
        while True:
            b = resp[i]
            i += 1
            n |= (b & 0x7f) << shift
            shift += 7
            if not b & 0x80:
                break
        if key >> 3 == 1:
            st = resp[i:i + n]
            return st[1] if st[:1] == b"\x08" else 0
        i += n
    return 0


def shim_socket(c):
    d = os.path.join(c.dir, "shim", "s")
    names = os.listdir(d)
    assert len(names) == 1, names
    return d, os.path.join(d, names[0])


def test_garbage_on_the_shim_socket(ctrd, home):
    ctrd.check("run", "-d", "--runtime", RUNTIME, IMAGE, "t-g", "sleep", "1000")
    wait_task(ctrd, "t-g", "RUNNING")
    try:
        d, path = shim_socket(ctrd)
        # only root reaches it
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        pids = ctrd.shim_pids()
        assert len(pids) == 1

        def conn():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            s.connect(path)
            return s

        # a frame over ttRPC's 4 MiB cap: the connection ends, nothing is allocated
        s = conn()
        s.sendall(struct.pack(">IIBB", 0x7fffffff, 1, 1, 0))
        assert read_frame(s) is None
        s.close()
        # an unknown frame type; a data frame (no method streams): closed
        for bad in (frame(1, 9, b"x"), frame(1, 3, b"x")):
            s = conn()
            s.sendall(bad)
            assert read_frame(s) is None
            s.close()
        # answered with an error, the connection goes on: not a Request, an unknown
        # service, Create with a payload that is not a CreateTaskRequest, Wait for a task
        # that is not there, a method that does not exist
        s = conn()
        cases = [(b"\xff\xff\xff\xff", 3),
                 (request("evil.Service", "Do"), 12),
                 (request("containerd.task.v2.Task", "Create", b"\x0a\xff\x01"), 3),
                 (request("containerd.task.v2.Task", "Wait", field(1, b"nope")), 5),
                 (request("containerd.task.v2.Task", "Explode"), 12),
                 (request("containerd.task.v2.Task", "Kill",
                          field(1, b"t-g") + bytes([0x18]) + varint(1000)), 3)]
        for i, (data, code) in enumerate(cases):
            stream = 2 * i + 1
            s.sendall(frame(stream, 1, data))
            got = read_frame(s)
            assert got is not None and got[0] == stream and got[1] == 2, (i, got)
            assert status_code(got[2]) == code, (i, got)
        s.close()
        # the same shim serves the task as before
        assert ctrd.shim_pids() == pids
        p = ctrd.ctr("task", "exec", "--exec-id", "e1", "t-g", "echo", "still")
        assert p.stdout == "still\n", p.stderr
        assert "bad frame header" in ctrd.log_text()
    finally:
        ctrd.ctr("task", "kill", "-s", "SIGKILL", "t-g")
        wait_task(ctrd, "t-g", "STOPPED")
        ctrd.check("task", "rm", "t-g")
        ctrd.check("container", "rm", "t-g")


def test_pod_cannot_widen_the_node_policy(ctrd, home, tmp_path):
    root = tmp_path / "shared"
    (root / "data").mkdir(parents=True)
    (root / "data" / "f").write_text("from the host\n")
    os.symlink("/etc", str(root / "escape"))
    ctrd.write_shim_config({"egress_allow": ["example.org:443"], "max_memory_mib": 1024,
                            "mount_roots": [str(root)]})
    try:
        refused = [("io.kosa8.egress=allow-all", "never widen"),
                   ("io.kosa8.egress-allow=evil.example", "never add"),
                   ("io.kosa8.memory-mib=4096", "at most 1024"),
                   ("io.kosa8.cpus=64", "at most"),
                   ("io.kosa8.mounts=/etc:/x", "mount_roots"),
                   ("io.kosa8.mounts=%s/escape:/x" % root, "mount_roots"),
                   ("io.kosa8.mounts=%s/data/../../..:/x" % root, "mount_roots"),
                   ("io.kosa8.privileged=true", "unknown annotation")]
        for ann, words in refused:
            p = ctrd.run("t-w", "true", flags=("--annotation", ann))
            assert p.returncode != 0 and words in p.stderr, (ann, p.stderr)
            assert not owned(home, "t-w"), ann
            ctrd.ctr("container", "rm", "t-w")
        # what the node allows, a pod may ask for (and less): a folder below the root,
        # read-only; egress narrowed to deny
        p = ctrd.run("t-w", "sh", "-c", "cat /data/f; echo x > /data/g || echo refused",
                     flags=("--annotation", "io.kosa8.mounts=%s/data:/data:ro" % root,
                            "--annotation", "io.kosa8.egress=deny"))
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines() == ["from the host", "refused"], p.stdout
        assert not (root / "data" / "g").exists()
        ctrd.check("run", "-d", "--runtime", RUNTIME, "--annotation",
                   "io.kosa8.egress=deny", IMAGE, "t-w2", "sleep", "100")
        wait_task(ctrd, "t-w2", "RUNNING")
        assert owned(home, "t-w2")[0]["egress"] == "deny"
        ctrd.ctr("task", "kill", "-s", "SIGKILL", "t-w2")
        wait_task(ctrd, "t-w2", "STOPPED")
        ctrd.check("task", "rm", "t-w2")
        ctrd.check("container", "rm", "t-w2")
        # without an annotation, the node's own policy
        ctrd.check("run", "-d", "--runtime", RUNTIME, IMAGE, "t-w3", "sleep", "100")
        wait_task(ctrd, "t-w3", "RUNNING")
        sb = owned(home, "t-w3")[0]
        assert sb["egress"] == "allow-list" and sb["memory_mib"] == 512, sb
        ctrd.ctr("task", "kill", "-s", "SIGKILL", "t-w3")
        wait_task(ctrd, "t-w3", "STOPPED")
        ctrd.check("task", "rm", "t-w3")
        ctrd.check("container", "rm", "t-w3")
    finally:
        ctrd.write_shim_config({})


def test_image_tree_with_links_out_fifos_and_devices(ctrd, home, tmp_path):
    """ctr run --rootfs: a tree of the attacker's making becomes the container's root. The
    jailed worker stores links as links (never reads through them on the host), FIFOs and
    devices as entries (never opens them); in the VM they lead nowhere on the host."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "m").mkdir()
    # the python image's own files, exported by containerd, plus the attacker's entries
    ctrd.check("image", "mount", IMAGE, str(tmp_path / "m"))
    try:
        assert os.system("cp -a %s/. %s" % (tmp_path / "m", tree)) == 0
    finally:
        ctrd.ctr("image", "unmount", "--rm", str(tmp_path / "m"))
    secret = tmp_path / "host-secret"
    secret.write_text("HOST SECRET\n")
    os.chmod(str(secret), 0o600)
    os.symlink(str(secret), str(tree / "escape"))
    os.symlink("../../../../../../" + str(secret), str(tree / "escape2"))
    os.mkfifo(str(tree / "fifo"))
    os.mknod(str(tree / "null2"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(str(tree / "disk"), 0o600 | stat.S_IFBLK, os.makedev(8, 0))
    p = ctrd.ctr("run", "--rm", "--runtime", RUNTIME, "--rootfs", str(tree), "t-tree", "sh",
                 "-c", "readlink /escape; cat /escape /escape2 2>&1; ls -l /fifo /disk "
                 "| cut -c1; echo done", timeout=600)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "HOST SECRET" not in out, out
    assert out.splitlines()[0] == str(secret), out
    assert "done" in out
    # the tree is as it was: the worker only read it
    assert os.readlink(str(tree / "escape")) == str(secret)
    assert stat.S_ISFIFO(os.lstat(str(tree / "fifo")).st_mode)
    # the task's own image (not cacheable) went with it
    wait_for(lambda: not any("task-" in i["ref"] for i in home.json("image", "ls")), 30)
    assert not any(i["ref"].startswith("localhost/kosa8-shim-rootfs:task-")
                   for i in home.json("image", "ls"))
