# SPDX-License-Identifier: Apache-2.0
# A restored VM's RAM is a checkpoint's memory file mapped copy-on-write (docs/design.md
# "Memory as a file"), one file shared by every copy of that checkpoint: its rewinds, its
# spare and its forks, which may be other sandboxes. An escaped QEMU (test_93_hostile_qemu's
# attacker) holds the descriptor of that file; root in the guest drives the balloon, whose
# discards QEMU 7.2 turns into holes punched in the file. Neither may change it: a fork
# would change its siblings' memory, and a later rewind would load the attacker's bytes.
import ctypes
import hashlib
import json
import mmap
import os
import subprocess

import pytest

from conftest import make_sandbox, wait_for

pytestmark = pytest.mark.hostile

PY = "python:3.12-slim"
JAIL_BASE = 720000


def record(home, name):
    with open(os.path.join(home.path, "sandboxes", name, "sandbox.json")) as f:
        return json.load(f)


def file_sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


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
        with open("/proc/%d/smaps" % pid) as f:
            lines = f.read().splitlines()
        for i, l in enumerate(lines):
            if l.split()[-1:] == [mem] or l.endswith(mem + " (deleted)"):
                for m in lines[i + 1:]:
                    if m.startswith("Anonymous:"):
                        return int(m.split()[1])
        raise AssertionError("QEMU does not map " + mem)
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
