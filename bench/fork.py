# SPDX-License-Identifier: Apache-2.0
# fork.py - `sandbox fork` from a checkpoint (issue 27): the migration stream of before
# against the memory file, side by side in one run. Two daemons, one per way of keeping
# memory (config.json "checkpoint_memory": "stream" | "file"), each with a 1 GiB sandbox at
# ~64 and ~512 MiB touched; their forks and cold rewinds alternated, so both see the same
# host. Then ten forks of one checkpoint in each, idle ("until they write"): the host memory
# each QEMU holds as PSS (a page several processes map counts once in all), split into the
# guest's RAM and QEMU's own (TCG's code cache, its heap), and of the RAM what each fork
# holds on its own (pages it wrote since the fork). The host's load average is printed
# with the figures: this machine is shared.
import json
import os
import re
import statistics
import time

from k8cli import (end_home, loadavg, out as k, paths_homes, ram_mapping, smaps_kib,
                   test_image, touch_memory)
from spare import phases

N = int(os.environ.get("BENCH_N", "3"))
SIZES = [int(x) for x in os.environ.get("BENCH_MIBS", "64,512").split(",")]
TEN = int(os.environ.get("BENCH_TEN", "10"))
MEM = 1024


def guest_ram(pid, mib):
    """smaps (KiB) of the mapping that is the guest's RAM: the memory file a restored QEMU
    maps, else the anonymous mapping of the RAM's size (QEMU's own memory)."""
    vma = ram_mapping(pid)
    if vma:
        return vma
    best, cur = None, None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ (\d+)\s*(.*)$", line)
            if m:
                size = int(m.group(2), 16) - int(m.group(1), 16)
                cur = {} if size == mib << 20 and m.group(3) == "0" and not m.group(4) else None
                if cur is not None:
                    best = cur
            elif cur is not None and line.split()[-1:] == ["kB"]:
                cur[line.split(":")[0]] = int(line.split()[1])
    return best or {}


def med(xs):
    return statistics.median(xs) if xs else 0


def inspect_pid(home, name):
    return json.loads(k(home, "sandbox", "inspect", name, "--json"))["pid"]


def fork_memory(home, names):
    """Per fork: (QEMU PSS, its RAM's PSS, RAM pages of its own), MiB."""
    rows = []
    for n in names:
        pid = inspect_pid(home, n)
        ram = guest_ram(pid, MEM)
        own = ram.get("Anonymous", 0)
        rows.append((smaps_kib(pid, "Pss") / 1024, ram.get("Pss", 0) / 1024, own / 1024))
    return rows


def main():
    layout = test_image()
    homes = paths_homes("k8f", layout)
    try:
        print("host load (1, 5, 15 min) at the start: %s" % loadavg())
        for mib in SIZES:
            name = "m%d" % mib
            ck = {}
            for path, h in homes.items():
                k(h, "sandbox", "create", name, "--cpus", "1", "--memory", str(MEM), "--disk",
                  "2", "--rewind-spare", "off")
                k(h, "sandbox", "pull", name, "python:3.12-slim")
                used = touch_memory(h, name, mib)
                ck[path] = json.loads(k(h, "checkpoint", name, "--label", "c0", "--json"))
            res = {p: {"rw": [], "rw_wall": [], "fk": [], "fk_wall": []} for p in homes}
            forks = {p: [] for p in homes}
            load0 = loadavg()
            for i in range(N):          # alternated, each round in the other order
                order = list(homes) if i % 2 == 0 else list(reversed(list(homes)))
                for path in order:
                    h, r = homes[path], res[path]
                    t0 = time.time()
                    j = json.loads(k(h, "rewind", name, "--to", "c0", "-y", "--json"))
                    r["rw_wall"].append(1000 * (time.time() - t0))
                    r["rw"].append(j["ms"])
                for path in order:
                    h, r = homes[path], res[path]
                    f = "%s-f%d" % (name, i)
                    t0 = time.time()
                    j = json.loads(k(h, "sandbox", "fork", name, "--from", "c0", "--name", f,
                                     "--json"))
                    r["fk_wall"].append(1000 * (time.time() - t0))
                    r["fk"].append(j.get("ms", 0))
                    forks[path].append(f)
            print("1 GiB sandbox, ~%d MiB touched (guest uses %d MiB), n=%d, load %s -> %s:"
                  % (mib, used // 1024, N, load0, loadavg()))
            for path in homes:
                r = res[path]
                print("  %-6s checkpoint %4d MiB: fork %5d ms (CLI %5d), cold rewind %5d ms "
                      "(CLI %5d)" % (path, ck[path]["size"] >> 20, med(r["fk"]),
                                     med(r["fk_wall"]), med(r["rw"]), med(r["rw_wall"])))
            # Ten forks of one checkpoint, idle: what they hold.
            for i in range(N, TEN):
                for path, h in homes.items():
                    f = "%s-f%d" % (name, i)
                    k(h, "sandbox", "fork", name, "--from", "c0", "--name", f)
                    forks[path].append(f)
            time.sleep(5)
            print("  %d forks of one checkpoint, idle (load %s):" % (TEN, loadavg()))
            for path, h in homes.items():
                rows = fork_memory(h, forks[path])
                tot, ram, own = (sum(x[i] for x in rows) for i in range(3))
                src = inspect_pid(h, name)
                print("  %-6s QEMU PSS %5d MiB in all (%4d per fork): guest RAM %5d MiB, of "
                      "it pages of their own %4d MiB; QEMU's own %4d MiB; the source's QEMU "
                      "%d MiB" % (path, tot, med([x[0] for x in rows]), ram, own, tot - ram,
                                  smaps_kib(src, "Pss") // 1024))
            for path, h in homes.items():
                for f in forks[path]:
                    k(h, "sandbox", "rm", f)
                k(h, "sandbox", "rm", name)
        print("host load at the end: %s" % loadavg())
        for path, h in homes.items():
            print("phases, %s (kosa8d.log):" % path)
            phases(h)
    finally:
        for h in homes.values():
            end_home(h)


if __name__ == "__main__":
    main()
