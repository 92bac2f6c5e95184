# SPDX-License-Identifier: Apache-2.0
# A restored VM's RAM is a checkpoint's memory file mapped copy-on-write (docs/design.md
# "Memory as a file"), one file shared by every copy of that checkpoint: its rewinds, its
# spare and its forks, which may be other sandboxes. An escaped QEMU (test_93_hostile_qemu's
# attacker) holds the descriptor of that file; root in the guest drives the balloon, whose
# discards QEMU 7.2 turns into holes punched in the file. Neither may change it: a fork
# would change its siblings' memory, and a later rewind would load the attacker's bytes.
import json
import os
import subprocess

import pytest

from conftest import make_sandbox, wait_for
from memkit import file_sha, ram_vma

pytestmark = pytest.mark.hostile

PY = "python:3.12-slim"
JAIL_BASE = 720000


def record(home, name):
    with open(os.path.join(home.path, "sandboxes", name, "sandbox.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def restored(home, loaded):
    """A sandbox rewound to a checkpoint (its RAM maps the memory file) and a fork of it."""
    name = make_sandbox(home, "h93m")
    home("sandbox", "run", name, PY, "true", check=True, timeout=300)
    home("checkpoint", name, "--label", "m", check=True, timeout=300)
    home("rewind", name, "--to", "m", "-y", check=True, timeout=300)
    home("sandbox", "fork", name, "--from", "m", "--name", "h93mf", check=True, timeout=300)
    yield name
    home("sandbox", "rm", "h93mf", timeout=120)
    home("sandbox", "rm", name, timeout=120)


# Run as root, then as QEMU: take QEMU's own descriptor 6 (pidfd_getfd: the same open file
# QEMU holds), drop to QEMU's uid with nothing else, and try every way to write through it.
ATTACK = r'''
import ctypes, errno, json, mmap, os, sys
pid, uid = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(pid)
fd = libc.syscall(438, pidfd, 6, 0)            # pidfd_getfd
assert fd >= 0, ctypes.get_errno()
out = {"flags": os.O_ACCMODE & __import__("fcntl").fcntl(fd, __import__("fcntl").F_GETFL)}
os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
def tryit(name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
    except Exception as e:
        out[name] = type(e).__name__
tryit("write", lambda: os.pwrite(fd, b"x" * 4096, 0))
def punch():
    if libc.fallocate(fd, 3, ctypes.c_long(0), ctypes.c_long(1 << 20)) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
tryit("punch", punch)
tryit("map_shared", lambda: mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
tryit("reopen_rw", lambda: os.open("/proc/self/fd/%d" % fd, os.O_RDWR))
tryit("chmod", lambda: os.fchmod(fd, 0o666))
tryit("truncate", lambda: os.ftruncate(fd, 0))
print(json.dumps(out))
'''


def test_escaped_qemu_cannot_write_the_memory_file(home, restored):
    for name in (restored, "h93mf"):
        rec = record(home, name)
        pid, uid = rec["pid"], JAIL_BASE + 4 * rec["jail_index"]
        target = os.readlink("/proc/%d/fd/6" % pid)
        mine = os.path.join(home.path, "sandboxes", name) + "/"
        # its own name of the file: the checkpoint's, or the fork's link to its source's
        assert target.startswith(mine) and ("/checkpoints/m/memory" in target or
                                            target.endswith("/fork-memory")), target
        mem = target
        before = file_sha(mem)
        p = subprocess.run(["/usr/bin/python3", "-I", "-c", ATTACK, str(pid), str(uid)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        r = json.loads(p.stdout)
        assert r["flags"] == os.O_RDONLY, r
        assert r["write"] == "EBADF" and r["punch"] == "EBADF" and r["truncate"] in (
            "EBADF", "EINVAL"), r
        assert r["map_shared"] == "EACCES", r
        assert r["reopen_rw"] == "EACCES", r       # root's file, 0600
        assert r["chmod"] == "EPERM", r
        assert file_sha(mem) == before


def test_the_guest_cannot_punch_its_checkpoint(home, restored):
    """The restored guest writes 128 MiB and frees it: its kernel reports the blocks free
    (the balloon's free page reporting, a guest's to drive), QEMU discards them, and the
    file shared with the fork stays whole."""
    mem = os.path.join(home.path, "sandboxes", restored, "checkpoints", "m", "memory")
    before = file_sha(mem)
    blocks = os.stat(mem).st_blocks
    pid = record(home, restored)["pid"]

    def own_kib():
        """KiB of guest RAM QEMU holds privately (pages written since the restore)."""
        vma = ram_vma(pid)
        assert vma, "QEMU does not map " + mem
        return vma["Anonymous"]
    start = own_kib()
    p = home("sandbox", "run", restored, PY, "python3", "-c",
             "b = bytearray(128 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n",
             timeout=300)
    assert p.returncode == 0, p.stderr
    assert wait_for(lambda: own_kib() < start + (48 << 10), 60), \
        "the freed memory never went back (%d KiB held, %d before)" % (own_kib(), start)
    assert file_sha(mem) == before and os.stat(mem).st_blocks == blocks, \
        "a discard in the guest changed the checkpoint's memory file"
    # the fork that maps the same file still runs what the checkpoint held
    p = home("sandbox", "run", "h93mf", PY, "python3", "-c", "print('whole')", timeout=300)
    assert p.stdout == "whole\n", p.stderr


def test_a_fork_writing_its_memory_leaves_the_shared_file(home, restored):
    """The fork writes 256 MiB of its RAM (half of it) with a pattern: it gets its own
    copies of those pages, and the file it shares with its source's rewound VM stays
    byte for byte what the checkpoint wrote."""
    pid = record(home, "h93mf")["pid"]
    mem = os.readlink("/proc/%d/fd/6" % pid)
    before, blocks = file_sha(mem), os.stat(mem).st_blocks
    start = ram_vma(pid)["Anonymous"]
    p = home("sandbox", "start", "h93mf", PY, "python3", "-c",
             "import time\nb = bytearray(b'\\xa5') * (256 << 20)\n"
             "time.sleep(3600)", timeout=300)
    assert p.returncode == 0, p.stderr
    cid = p.stdout.strip()
    try:
        assert wait_for(lambda: ram_vma(pid)["Anonymous"] > start + (200 << 10), 120), \
            "the fork never wrote its own copies (%d KiB, %d before)" % (
                ram_vma(pid)["Anonymous"], start)
        assert file_sha(mem) == before and os.stat(mem).st_blocks == blocks, \
            "a fork's writes reached the memory file it shares"
    finally:
        home("sandbox", "stop", "-t", "0", "h93mf", cid, timeout=120)
    p = home("sandbox", "run", restored, PY, "python3", "-c", "print('whole')", timeout=300)
    assert p.stdout == "whole\n", p.stderr
    assert file_sha(mem) == before


# As an escaped QEMU of one sandbox (its uid, nothing else, in the host's own mount
# namespace: more than its jail shows it), read another's memory by every name it has.
READ_OTHER = r"""
import ctypes, errno, json, os, sys
uid, pid, paths = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
out = {}
for p in paths + ["/proc/%d/fd/6" % pid, "/proc/%d/mem" % pid, "/proc/%d/map_files" % pid]:
    try:
        fd = os.open(p, os.O_RDONLY)
        out[p] = "read %d" % len(os.read(fd, 4096)) if not os.path.isdir(p) else "listed"
    except OSError as e:
        out[p] = errno.errorcode.get(e.errno, str(e.errno))
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(4096)
local, remote = iovec(ctypes.addressof(buf), 4096), iovec(0x400000, 4096)
n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
out["process_vm_readv"] = n if n >= 0 else errno.errorcode.get(ctypes.get_errno())
print(json.dumps(out))
"""


def test_a_restored_vm_cannot_read_another_sandboxs_memory(home, restored):
    """The fork's QEMU (its own uid) against its source's memory after the fork: the
    source's new checkpoint (memory file and devices), its QEMU's descriptor of its memory
    file, its QEMU's memory."""
    home("checkpoint", restored, "--label", "t", check=True, timeout=300)
    ck = os.path.join(home.path, "sandboxes", restored, "checkpoints", "t")
    fork = record(home, "h93mf")
    uid = JAIL_BASE + 4 * fork["jail_index"]
    src_pid = record(home, restored)["pid"]
    paths = [os.path.join(ck, "memory"), os.path.join(ck, "devices")]
    p = subprocess.run(["/usr/bin/python3", "-I", "-c", READ_OTHER, str(uid), str(src_pid)]
                       + paths, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    for k, v in r.items():
        assert v in ("EACCES", "EPERM"), (k, v, r)


def test_a_memory_file_is_checked_before_a_vm_maps_it(home, restored):
    """What a restore maps must be the checkpoint's file as kosa8d wrote it: a regular
    file, no link, of the RAM's size, kosa8d's own and 0600. Anything else is refused
    before a QEMU starts, and the running VM stays."""
    ck = os.path.join(home.path, "sandboxes", restored, "checkpoints", "t")
    mem = os.path.join(ck, "memory")
    assert os.path.exists(mem), "test_a_restored_vm_cannot_read_another_sandboxs_memory " \
        "makes checkpoint t"
    pid = record(home, restored)["pid"]
    size = os.stat(mem).st_size
    aside = mem + ".aside"

    def refused(what, *words):
        for verb in (("rewind", restored, "--to", "t", "-y"),
                     ("sandbox", "fork", restored, "--from", "t", "--name", "h93mx")):
            p = home(*verb, timeout=300)
            assert p.returncode != 0, (what, verb, p.stdout)
            assert all(w in p.stderr for w in words), (what, verb, p.stderr)
            assert record(home, restored)["pid"] == pid, what
            assert home("sandbox", "inspect", "h93mx").returncode != 0, what

    os.truncate(mem, size - 4096)
    refused("short", "not a memory file")
    os.truncate(mem, size + (1 << 20))
    refused("long", "not a memory file")
    os.truncate(mem, size)
    os.chmod(mem, 0o644)
    refused("readable by others", "not kosa8d's alone")
    os.chmod(mem, 0o600)
    os.chown(mem, 65534, 65534)
    refused("someone else's", "not kosa8d's alone")
    os.chown(mem, 0, 0)
    os.rename(mem, aside)
    os.symlink(aside, mem)
    refused("a link", "memory")
    os.unlink(mem)
    os.rename(aside, mem)
    home("rewind", restored, "--to", "t", "-y", check=True, timeout=300)


def test_zero_pages_take_no_disk(home, restored):
    """A guest that touches 128 MiB and leaves it zero adds no data to its checkpoint's
    memory file: its pages are present in QEMU, the file has holes there (SEEK_DATA), and
    no checkpoint's file is larger than the RAM."""
    pid = record(home, restored)["pid"]
    base = os.path.join(home.path, "sandboxes", restored, "checkpoints")
    start = ram_vma(pid)["Anonymous"]
    p = home("sandbox", "start", restored, PY, "python3", "-c",
             "import time\nb = bytearray(128 << 20)\n"
             "for i in range(0, len(b), 4096): b[i] = 1\n"
             "for i in range(0, len(b), 4096): b[i] = 0\n"
             "open('/zeroed', 'w').close()\ntime.sleep(3600)", timeout=300)
    assert p.returncode == 0, p.stderr
    cid = p.stdout.strip()
    try:
        assert wait_for(lambda: home("sandbox", "exec", restored, cid, "test", "-e",
                                     "/zeroed").returncode == 0, 180)
        held = ram_vma(pid)["Anonymous"] - start
        assert held > 120 << 10, "the guest's pages are not QEMU's (%d KiB)" % held
        home("checkpoint", restored, "--label", "z", check=True, timeout=300)
    finally:
        home("sandbox", "stop", "-t", "0", restored, cid, timeout=120)

    def data(path):
        """bytes of data in the file, by SEEK_DATA/SEEK_HOLE, and its size"""
        fd = os.open(path, os.O_RDONLY)
        try:
            end, off, n = os.fstat(fd).st_size, 0, 0
            while True:
                try:
                    off = os.lseek(fd, off, os.SEEK_DATA)
                except OSError:
                    return n, end
                hole = os.lseek(fd, off, os.SEEK_HOLE)
                n, off = n + hole - off, hole
        finally:
            os.close(fd)
    t, size = data(os.path.join(base, "t", "memory"))
    z, zsize = data(os.path.join(base, "z", "memory"))
    print("checkpoint t: %d MiB of data, z: %d MiB, QEMU held %d MiB more" % (
        t >> 20, z >> 20, held >> 10))
    assert size == zsize == 512 << 20
    assert z < t + (40 << 20), (t, z)
    for label in os.listdir(base):
        st = os.stat(os.path.join(base, label, "memory"))
        assert st.st_size == 512 << 20 and st.st_blocks * 512 <= st.st_size + (1 << 20), label


def test_memory_files_are_the_daemons_alone(home, restored):
    """Every memory file and devices' state, of a checkpoint, a fork's link and a pause to
    disk, is kosa8d's and 0600, in folders no one else may enter."""
    def scan():
        found = []
        for name in (restored, "h93mf"):
            top = os.path.join(home.path, "sandboxes", name)
            for d, dirs, files in os.walk(top):
                for f in files:
                    if f in ("memory", "devices", "fork-memory", "state"):
                        st = os.lstat(os.path.join(d, f))
                        found.append(os.path.relpath(os.path.join(d, f), home.path))
                        assert st.st_uid == os.getuid() and st.st_mode & 0o7777 == 0o600, \
                            (d, f, oct(st.st_mode), st.st_uid)
                        assert os.stat(d).st_mode & 0o077 == 0, d
        return found
    found = scan()
    assert any(f.endswith("h93mf/fork-memory") for f in found), found
    assert any(f.endswith("checkpoints/m/memory") for f in found), found
    assert any(f.endswith("checkpoints/m/devices") for f in found), found
    home("sandbox", "pause", "h93mf", check=True, timeout=300)
    try:
        found = scan()
        assert any(f.endswith("h93mf/paused/memory") for f in found), found
        assert any(f.endswith("h93mf/paused/devices") for f in found), found
    finally:
        home("sandbox", "resume", "h93mf", check=True, timeout=300)
