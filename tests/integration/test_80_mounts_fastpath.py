# SPDX-License-Identifier: Apache-2.0
# Shared folders' fast path (issue 30) through the real CLI, daemon, kosa8-fs and VM (TCG):
# write-only opens bypass the guest's page cache (FOPEN_DIRECT_IO) and still round-trip
# every byte, read and read-write opens keep the page cache (mmap works), the agent's
# own answers to RELEASE still close the host's handles, st_blksize is max_write, :ro
# refuses the new path, a rewind in the middle of a big write leaves the right file, and
# WRITEs by reference to guest RAM (the RAM data path) survive a rewind and a fork and
# fall back to the port when kosa8-fs loses the RAM.
#
# One daemon home (--allow-mount ROOT), one sandbox "ffs" with ROOT/rw at /data and
# ROOT/ro at /ro:ro, and its own sandbox for the rewind.
import ast
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import types

import pytest

from conftest import make_sandbox, own_home, wait_for

IMAGE = "python:3.12-slim"
MiB = 1 << 20


@pytest.fixture(scope="module")
def root():
    """ROOT/allowed/{rw,ro,ck}: the folders the sandboxes share (ro holds ro.txt)."""
    base = tempfile.mkdtemp(prefix="k8ff-", dir="/tmp")
    r = types.SimpleNamespace(allowed=os.path.join(base, "allowed"))
    for name, mode in (("rw", 0o777), ("ro", 0o755), ("ck", 0o777)):
        setattr(r, name, os.path.join(r.allowed, name))
        os.makedirs(getattr(r, name))
        os.chmod(getattr(r, name), mode)
    os.chmod(base, 0o755)
    with open(os.path.join(r.ro, "ro.txt"), "w") as f:
        f.write("read only\n")
    yield r
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def fhome(root, python_layout):
    for h in own_home("k8ffh-", python_layout, start_args=("--allow-mount", root.allowed)):
        yield h


@pytest.fixture(scope="module")
def fsb(fhome, root):
    name = make_sandbox(fhome, "ffs", "--mount", root.rw + ":/data", "--mount",
                        root.ro + ":/ro:ro")
    yield name
    fhome("sandbox", "rm", name)


def gpy(h, sb, code, *args, timeout=600):
    """Python code in a new container of sb; its last stdout line is a Python literal (the
    test image's python3 has no json module)."""
    p = h("sandbox", "run", sb, IMAGE, "python3", "-c", code, *args, timeout=timeout)
    assert p.returncode == 0, "guest code failed (%d): %s %s" % (p.returncode, p.stdout, p.stderr)
    return ast.literal_eval(p.stdout.strip().splitlines()[-1])


def fs_ctl(h, sb, req):
    """One request on kosa8-fs's control socket for sandbox sb."""
    with open(os.path.join(h.path, "sandboxes", sb, "sandbox.json")) as f:
        sid = json.load(f)["id"]
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.path.join(h.path, "run", "%s.fsctl" % sid))
    s.sendall(json.dumps(dict(req, id=1)).encode() + b"\n")
    line = s.makefile().readline()
    s.close()
    return json.loads(line)


def fs_stats(h, sb):
    """kosa8-fs's control op stats for sandbox sb."""
    return fs_ctl(h, sb, {"op": "stats"})


def block(i, size):
    """The i-th block of a test file: its index, then a pattern (cheap in the guest too)."""
    head = b"%016d" % i
    return (head + bytes(range(256)) * (size // 256 + 1))[:size]


# Shared mappings (the test image's python3 has no mmap module): "r FILE" maps FILE
# MAP_SHARED read-only and prints the FNV-1a of its bytes; "w FILE" opens FILE O_RDWR,
# maps 64 KiB MAP_SHARED writable, stores MAPPD at 100 and msyncs.
MMAP_C = r'''
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	struct stat st;
	if (argc != 3)
		return 2;
	if (argv[1][0] == 'r') {
		int fd = open(argv[2], O_RDONLY);
		if (fd < 0 || fstat(fd, &st) < 0)
			return perror("open"), 1;
		const unsigned char *p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			return perror("mmap"), 1;
		uint64_t h = 14695981039346656037ull;
		for (off_t i = 0; i < st.st_size; i++)
			h = (h ^ p[i]) * 1099511628211ull;
		printf("%016llx\n", (unsigned long long)h);
		return 0;
	}
	int fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, 65536) < 0)
		return perror("open"), 1;
	char *p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return perror("mmap"), 1;
	memcpy(p + 100, "MAPPD", 5);
	if (msync(p, 65536, MS_SYNC) < 0)
		return perror("msync"), 1;
	return munmap(p, 65536) || close(fd);
}
'''


def fnv1a(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xffffffffffffffff
    return "%016x" % h


WRITE_ODD = r'''
import hashlib, os, sys
def meminfo(key):
    for l in open("/proc/meminfo"):
        if l.startswith(key + ":"):
            return int(l.split()[1]) * 1024
def block(i, size):
    head = b"%016d" % i
    return (head + bytes(range(256)) * (size // 256 + 1))[:size]
# write-only: sizes that are not pages, one write of 3 MiB (three WRITEs of max_write),
# then appends through a second write-only fd
sizes = [(1 << 20) + 13, 4095, 3 << 20, 1, 777777, (2 << 20) - 1]
h = hashlib.sha256()
cached0 = meminfo("Cached")
fd = os.open("/data/odd.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i, n in enumerate(sizes):
    b = block(i, n)
    assert os.write(fd, b) == n
    h.update(b)
os.close(fd)
fd = os.open("/data/odd.bin", os.O_WRONLY | os.O_APPEND)
for i in range(3):
    b = block(100 + i, 5 << 20 >> 2)
    os.write(fd, b)
    h.update(b)
os.close(fd)
grew = meminfo("Cached") - cached0
total = os.stat("/data/odd.bin").st_size
# read back inside (page cache)
r = hashlib.sha256()
with open("/data/odd.bin", "rb") as f:
    while True:
        b = f.read(1 << 20)
        if not b:
            break
        r.update(b)
print(repr({"sha": h.hexdigest(), "back": r.hexdigest(), "total": total, "grew": grew,
            "blksize": os.stat("/data/odd.bin").st_blksize}))
'''


def test_write_only_bypasses_the_page_cache_and_round_trips(fhome, fsb, root):
    out = gpy(fhome, fsb, WRITE_ODD)
    want = hashlib.sha256()
    for i, n in enumerate([(1 << 20) + 13, 4095, 3 << 20, 1, 777777, (2 << 20) - 1]):
        want.update(block(i, n))
    for i in range(3):
        want.update(block(100 + i, 5 << 20 >> 2))
    p = os.path.join(root.rw, "odd.bin")
    with open(p, "rb") as f:
        data = f.read()
    assert out["sha"] == want.hexdigest() == hashlib.sha256(data).hexdigest()
    assert out["back"] == out["sha"]
    assert out["total"] == len(data)
    # some 12.6 MiB went through write-only fds: none of it was cached in the guest
    # (through the page cache it would all be, minus what the guest had to evict)
    assert out["grew"] < 2 * MiB, "the guest's page cache grew by %d bytes" % out["grew"]
    assert out["blksize"] == MiB
    # read and read-write opens keep the page cache: shared mappings work
    src = os.path.join(root.rw, "mm.c")
    with open(src, "w") as f:
        f.write(MMAP_C)
    subprocess.run(["cc", "-static", "-O1", "-o", os.path.join(root.rw, "mm"), src], check=True)
    r = fhome("sandbox", "run", fsb, IMAGE, "/data/mm", "r", "/data/odd.bin", timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == fnv1a(data), r.stdout + r.stderr
    r = fhome("sandbox", "run", fsb, IMAGE, "/data/mm", "w", "/data/mapped.bin", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(os.path.join(root.rw, "mapped.bin"), "rb") as f:
        assert f.read()[100:105] == b"MAPPD"


def test_agent_answered_releases_close_the_hosts_handles(fhome, fsb, root):
    """The agent answers RELEASE and RELEASEDIR itself and sends them on without a unique:
    kosa8-fs must still close every handle (a lost one would hold a host fd until the
    sandbox stops)."""
    os.makedirs(os.path.join(root.rw, "hd"), exist_ok=True)
    before = fs_stats(fhome, fsb)["handles"]
    out = gpy(fhome, fsb, "import os\n"
              "for i in range(300):\n"
              "    with open('/data/hd/f%d' % i, 'w') as f: f.write('x')\n"
              "    open('/data/hd/f%d' % i).read()\n"
              "    os.listdir('/data/hd')\n"
              "print(len(os.listdir('/data/hd')))")
    assert out == 300
    assert wait_for(lambda: fs_stats(fhome, fsb)["handles"] <= before, 20), \
        "kosa8-fs holds %d handles, %d before the 900 opens" % (
            fs_stats(fhome, fsb)["handles"], before)


def test_read_only_refuses_the_write_only_path(fhome, fsb, root):
    out = gpy(fhome, fsb, "import errno, os\nres = {}\n"
              "for name, path, fl in [('existing', '/ro/ro.txt', os.O_WRONLY),\n"
              "                       ('append', '/ro/ro.txt', os.O_WRONLY | os.O_APPEND),\n"
              "                       ('new', '/ro/new.txt', os.O_WRONLY | os.O_CREAT)]:\n"
              "    try:\n"
              "        fd = os.open(path, fl, 0o644); os.write(fd, b'x'); os.close(fd)\n"
              "        res[name] = 'written'\n"
              "    except OSError as e:\n"
              "        res[name] = errno.errorcode[e.errno]\n"
              "print(repr(res))")
    assert out == {"existing": "EROFS", "append": "EROFS", "new": "EROFS"}
    assert os.listdir(root.ro) == ["ro.txt"]
    assert open(os.path.join(root.ro, "ro.txt")).read() == "read only\n"


# Writes N KiB through a write-only fd in 1 KiB writes, each a round trip to the host, so
# that at almost any moment one WRITE is on its way or waits for its answer; each KiB
# says which it is. Leaves a marker when done.
KIB_WRITER = r'''
import os, sys
n = int(sys.argv[1])
fd = os.open("/data/ck/big.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(n):
    os.write(fd, (b"%016d" % i) * 64)
os.close(fd)
open("/data/ck/done", "w").write("%d\n" % n)
'''


def test_rewind_in_the_middle_of_a_big_write(fhome, root):
    """Checkpoint while a container writes 16 MiB through the direct path one KiB at a
    time, let it write on, rewind: the writer goes on from its checkpointed state (the
    WRITE it was waiting for at the checkpoint is resent after the host's RESYNC; were it
    not, the writer would wait for ever), and the host file ends whole and right."""
    n = 16 * 1024
    sb = make_sandbox(fhome, "ffck", "--mount", root.ck + ":/data/ck")
    big = os.path.join(root.ck, "big.bin")
    done = os.path.join(root.ck, "done")

    def kib():
        return os.path.getsize(big) // 1024 if os.path.exists(big) else 0
    try:
        fhome("sandbox", "start", sb, IMAGE, "python3", "-c", KIB_WRITER, str(n), check=True)
        assert wait_for(lambda: kib() >= 1024, 120), "the writer did not start"
        p = fhome("checkpoint", sb, "--label", "mid", timeout=300)
        assert p.returncode == 0, p.stderr
        at = kib()
        assert at < n and not os.path.exists(done), \
            "the write ended before the checkpoint: nothing to prove"
        assert wait_for(lambda: kib() >= min(n, at + 1024), 120)
        if os.path.exists(done):     # it must be made again, after the rewind
            os.unlink(done)
        p = fhome("rewind", sb, "--to", "mid", "-y", timeout=300)
        assert p.returncode == 0, p.stderr
        assert wait_for(lambda: os.path.exists(done), 300), \
            "the writer did not finish after the rewind (%d of %d KiB)" % (kib(), n)
        with open(big, "rb") as f:
            data = f.read()
        assert len(data) == n * 1024
        bad = [i for i in range(n) if data[i * 1024:(i + 1) * 1024] != (b"%016d" % i) * 64]
        assert not bad, "KiB blocks wrong after the rewind: %s" % bad[:10]
        # the writer's handle is closed on the host too (its RELEASE, answered by the
        # agent, went after the rewind)
        assert wait_for(lambda: fs_stats(fhome, sb)["handles"] == 0, 20), fs_stats(fhome, sb)
    finally:
        fhome("sandbox", "rm", sb)


# Writes N blocks of 32 KiB (big enough for the RAM data path: the agent sends a WRITE of
# 16 KiB or more by reference) through a write-only fd, a little slowly, so that a
# checkpoint falls in the middle; each block says which it is.
RAM_WRITER = r'''
import os, sys, time
n = int(sys.argv[1])
fd = os.open("/data/ram/big.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(n):
    os.write(fd, (b"%016d" % i) * 2048)
    time.sleep(0.004)
os.close(fd)
open("/data/ram/done", "w").write("%d\n" % n)
'''


def ram_share(fhome, root, sub, name, blk):
    """A sandbox sharing a fresh folder at /data/ram: (its name, the big file's and the
    done file's host paths, a function counting the big file's whole blocks)."""
    ram = os.path.join(root.allowed, sub)
    os.makedirs(ram, exist_ok=True)
    os.chmod(ram, 0o777)
    sb = make_sandbox(fhome, name, "--mount", ram + ":/data/ram")
    big, done = os.path.join(ram, "big.bin"), os.path.join(ram, "done")

    def blocks():
        return os.path.getsize(big) // blk if os.path.exists(big) else 0
    return sb, big, done, blocks


def test_ram_path_through_rewind_and_fork(fhome, root):
    """The RAM data path (kosa8-fs reads WRITE payloads in guest RAM) in a real VM: it is
    used, and it still is, with every byte right, in the QEMU a rewind starts and in a
    fork's (both map their RAM from the checkpoint's memory file, private), each of which
    gets its own /proc/<qemu>/mem from kosa8d."""
    n, blk = 1500, 32 * 1024
    sb, big, done, blocks = ram_share(fhome, root, "ram", "ffram", blk)

    def check(stage):
        with open(big, "rb") as f:
            data = f.read()
        assert len(data) == n * blk, stage
        bad = [i for i in range(n) if data[i * blk:(i + 1) * blk] != (b"%016d" % i) * 2048]
        assert not bad, "%s: blocks wrong: %s (%r)" % (stage, bad[:10], [
            data[i * blk:i * blk + 40] for i in bad[:2]])
    fork = None
    try:
        fhome("sandbox", "start", sb, IMAGE, "python3", "-c", RAM_WRITER, str(n), check=True)
        assert wait_for(lambda: blocks() >= 100, 120), "the writer did not start"
        st = fs_stats(fhome, sb)
        assert st["ram"] is True and st["ram_writes"] > 0 and st["ram_errors"] == 0, st
        p = fhome("checkpoint", sb, "--label", "mid", timeout=300)
        assert p.returncode == 0, p.stderr
        assert blocks() < n and not os.path.exists(done), "the write ended before the checkpoint"
        p = fhome("rewind", sb, "--to", "mid", "-y", timeout=300)
        assert p.returncode == 0, p.stderr
        before = fs_stats(fhome, sb)["ram_writes"]
        assert wait_for(lambda: os.path.exists(done), 300), \
            "the writer did not finish after the rewind (%d of %d blocks)" % (blocks(), n)
        check("after the rewind")
        st = fs_stats(fhome, sb)
        assert st["ram_writes"] > before + 100 and st["ram_errors"] == 0, (before, st)
        # a fork of the same checkpoint writes the same blocks again, by reference too
        os.unlink(done)
        p = fhome("sandbox", "fork", sb, "--from", "mid", "--name", "fframf", timeout=300)
        assert p.returncode == 0, p.stderr
        fork = "fframf"
        assert wait_for(lambda: os.path.exists(done), 300), "the fork's writer did not finish"
        check("after the fork")
        st = fs_stats(fhome, fork)
        assert st["ram_writes"] > 100 and st["ram_errors"] == 0, st
    finally:
        if fork:
            fhome("sandbox", "rm", fork)
        fhome("sandbox", "rm", sb)


def test_ram_path_falls_back_to_the_port(fhome, root):
    """kosa8-fs loses the guest's RAM in the middle of a write (here: the daemon's
    {"op":"ram"} without an fd, as when it could not open QEMU's): the next WRITE by
    reference is refused (ENXIO), and the agent sends that WRITE again through the port
    and every later one too; the writer never sees an error and every block is right."""
    n, blk = 1500, 32 * 1024
    sb, big, done, blocks = ram_share(fhome, root, "ramfb", "ffrfb", blk)
    try:
        fhome("sandbox", "start", sb, IMAGE, "python3", "-c", RAM_WRITER, str(n), check=True)
        assert wait_for(lambda: blocks() >= 100, 120), "the writer did not start"
        assert fs_ctl(fhome, sb, {"op": "ram"})["ok"] is True
        taken = fs_stats(fhome, sb)
        assert taken["ram"] is False and taken["ram_writes"] > 0, taken
        assert wait_for(lambda: os.path.exists(done), 300), \
            "the writer did not finish (%d of %d blocks)" % (blocks(), n)
        with open(big, "rb") as f:
            data = f.read()
        assert len(data) == n * blk
        bad = [i for i in range(n) if data[i * blk:(i + 1) * blk] != (b"%016d" % i) * 2048]
        assert not bad, "blocks wrong: %s" % bad[:10]
        st = fs_stats(fhome, sb)
        # one refused (the one in flight when the RAM went), then none by reference
        assert st["ram_errors"] == 1 and st["ram_writes"] == taken["ram_writes"], (taken, st)
        assert st["bytes_written"] >= n * blk
    finally:
        fhome("sandbox", "rm", sb)
