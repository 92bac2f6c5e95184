# SPDX-License-Identifier: Apache-2.0
# memkit.py - what a QEMU holds of host memory, read from the host's /proc (memory as a
# file: docs/design.md "Memory as a file"; free page reporting: "Free page reporting").
import hashlib
import re


def rss_mib(pid):
    """The process's RSS in MiB (smaps_rollup)."""
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1]) // 1024
    return 0


def ram_vma(pid):
    """smaps of QEMU's mapping of its memory file (KiB per field), None when it has none
    (its RAM is its own anonymous memory)."""
    out, cur = None, None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                path = " ".join(line.split()[5:])
                cur = {} if re.search(r"/(memory|fork-memory)( \(deleted\))?$", path) else None
                if cur is not None:
                    out = cur
            elif cur is not None and line.split()[-1:] == ["kB"]:
                cur[line.split(":")[0]] = int(line.split()[1])
    return out


def file_sha(path_or_fd):
    """SHA-256 of a file's bytes, by path or by an open descriptor (read from its start)."""
    h = hashlib.sha256()
    f = open(path_or_fd, "rb", closefd=not isinstance(path_or_fd, int))
    f.seek(0)
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
    return h.hexdigest()
