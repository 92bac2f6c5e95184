# SPDX-License-Identifier: Apache-2.0
# memkit.py - what a QEMU holds of host memory, read from the host's /proc (memory as a
# file: docs/design.md "Memory as a file"; free page reporting: "Free page reporting").
import glob
import hashlib
import os
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


def saved_memory(home_path, label):
    """The files a checkpoint LABEL (of any sandbox of the home) keeps the guest's memory
    in: its memory file and devices' state, or its one migration stream."""
    return [os.path.join(d, f)
            for d in glob.glob(os.path.join(home_path, "sandboxes", "*", "checkpoints", label))
            for f in ("memory", "devices", "state") if os.path.exists(os.path.join(d, f))]


def found_in(path, needles):
    """The needles (bytes) found in a file, read by 16 MiB, each read overlapping the last
    by the longest needle (a memory file is as large as the guest's RAM)."""
    keep, tail, found = max(len(n) for n in needles), b"", set()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(16 << 20), b""):
            data = tail + chunk
            found.update(n for n in needles if n in data)
            tail = data[-keep:]
    return found
