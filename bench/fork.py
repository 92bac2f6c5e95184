# SPDX-License-Identifier: Apache-2.0
# fork.py - `sandbox fork` from a checkpoint against a cold rewind to the same checkpoint
# (issue 15), side by side in one run, at ~64 and ~512 MiB touched in a 1 GiB sandbox; and
# what a fork shares with its source: disk layers (hard links: the link count of each of
# the checkpoint's layer files) and memory (the fork's QEMU RSS and how much of it is
# file-backed or shared, from /proc/PID/status; a fork reads the state file into its own
# anonymous memory, so only KSM, where the host turns it on, would share pages).
import json
import os
import statistics
import tempfile
import time

from k8cli import end_home, out as k, test_image, touch_memory
from spare import phases

N = int(os.environ.get("BENCH_N", "3"))
SIZES = [int(x) for x in os.environ.get("BENCH_MIBS", "64,512").split(",")]


def status_kib(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def layer_links(home, name, label):
    """(file, st_nlink) of each layer a checkpoint's chain names, from layers.json."""
    d = os.path.join(home, "sandboxes", name)
    with open(os.path.join(d, "checkpoints", label, "meta.json")) as f:
        layer = json.load(f)["layer"]
    try:
        with open(os.path.join(d, "layers.json")) as f:
            parents = json.load(f)
    except OSError:
        parents = {}
    parents = parents.get("parents", parents) if isinstance(parents, dict) else {}
    out, seen = [], set()
    while layer and layer not in seen:
        seen.add(layer)
        p = os.path.join(d, layer)
        if os.path.exists(p):
            out.append((layer, os.stat(p).st_nlink))
        nxt = parents.get(layer)
        layer = nxt if isinstance(nxt, str) else None
    return out


def main():
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8f-", dir="/tmp")
    try:
        k(home, "daemon", "start")
        k(home, "image", "load", layout, "--tag", "python:3.12-slim")
        for mib in SIZES:
            name = "m%d" % mib
            k(home, "sandbox", "create", name, "--cpus", "1", "--memory", "1024", "--disk", "2",
              "--rewind-spare", "off")
            k(home, "sandbox", "pull", name, "python:3.12-slim")
            used = touch_memory(home, name, mib)
            ck = json.loads(k(home, "checkpoint", name, "--label", "c0", "--json"))
            rw, rw_wall, fk, fk_wall = [], [], [], []
            for i in range(N):          # alternated, so both see the same host load
                t0 = time.time()
                r = json.loads(k(home, "rewind", name, "--to", "c0", "-y", "--json"))
                rw_wall.append(1000 * (time.time() - t0))
                rw.append(r["ms"])
                t0 = time.time()
                r = json.loads(k(home, "sandbox", "fork", name, "--from", "c0", "--name",
                                 "%s-f%d" % (name, i), "--json"))
                fk_wall.append(1000 * (time.time() - t0))
                fk.append(r.get("ms", 0))
            src = json.loads(k(home, "sandbox", "inspect", name, "--json"))["pid"]
            f0 = json.loads(k(home, "sandbox", "inspect", "%s-f0" % name, "--json"))["pid"]
            links = layer_links(home, name, "c0")
            print("1 GiB sandbox, ~%d MiB touched (guest uses %d MiB), state file %d MiB, n=%d:"
                  % (mib, used // 1024, ck.get("size", 0) >> 20, N))
            print("  cold rewind: median %d ms in the daemon, %d ms seen by the CLI"
                  % (statistics.median(rw), statistics.median(rw_wall)))
            print("  fork:        median %d ms in the daemon, %d ms seen by the CLI"
                  % (statistics.median(fk), statistics.median(fk_wall)))
            print("  disk shared: %s (link count: source + checkpoint + forks)"
                  % ", ".join("%s x%d" % (l, n) for l, n in links))
            print("  memory: source QEMU RSS %d MiB; fork QEMU RSS %d MiB, of which file %d "
                  "MiB and shmem %d MiB (none of its guest memory shared with the source)"
                  % (status_kib(src, "VmRSS") >> 10, status_kib(f0, "VmRSS") >> 10,
                     status_kib(f0, "RssFile") >> 10, status_kib(f0, "RssShmem") >> 10))
            for i in range(N):
                k(home, "sandbox", "rm", "%s-f%d" % (name, i))
            k(home, "sandbox", "rm", name)
        phases(home)    # where a restore's time goes, the rewinds' (mN) and forks' (mN_fI)
        k(home, "daemon", "stop")
    finally:
        end_home(home)


if __name__ == "__main__":
    main()
