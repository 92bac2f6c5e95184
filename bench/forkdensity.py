# SPDX-License-Identifier: Apache-2.0
# forkdensity.py - how many forks of one checkpoint run at once (issue 27): a 1 GiB sandbox
# with ~512 MiB touched by a Python process, one checkpoint, then forks of it, idle, until
# FORKS_MAX run or the host's MemAvailable falls under FORKS_RESERVE_MIB; every FORKS_STEP
# forks it prints the count, the host memory they took (MemAvailable's fall since the
# first), their QEMUs' PSS in all (a page several processes map counts once), the last
# fork's time, and the load. Then a few forks the way of before (config.json
# "checkpoint_memory": "stream", a second daemon), for what each of those takes. The
# count a host holds is its MemAvailable over what one fork takes: printed for 24 GiB.
# Not in `make bench`: it takes the host for many minutes (each fork is a TCG VM that
# costs its share of a core while it idles).
import json
import os
import time

from k8cli import (end_home, loadavg, mem_available_mib, out as k, paths_homes, smaps_kib,
                   test_image, touch_memory)

MAX = int(os.environ.get("FORKS_MAX", "60"))
STEP = int(os.environ.get("FORKS_STEP", "10"))
RESERVE = int(os.environ.get("FORKS_RESERVE_MIB", "3072"))
OLD = int(os.environ.get("FORKS_OLD", "4"))
MIB = int(os.environ.get("FORKS_TOUCH_MIB", "512"))
HOST_MIB = 24 * 1024


def pss_mib(home, names):
    tot = 0
    for n in names:
        pid = json.loads(k(home, "sandbox", "inspect", n, "--json"))["pid"]
        tot += smaps_kib(pid, "Pss")
    return tot / 1024


def run(home, label, limit):
    k(home, "sandbox", "create", "src", "--cpus", "1", "--memory", "1024", "--disk", "2",
      "--rewind-spare", "off")
    k(home, "sandbox", "pull", "src", "python:3.12-slim")
    touch_memory(home, "src", MIB)
    k(home, "checkpoint", "src", "--label", "c")
    time.sleep(3)
    names, avail0 = [], mem_available_mib()
    per = per_pss = 0.0
    while len(names) < limit:
        n = "f%d" % len(names)
        t0 = time.time()
        k(home, "sandbox", "fork", "src", "--from", "c", "--name", n)
        ms = 1000 * (time.time() - t0)
        names.append(n)
        if len(names) % STEP == 0 or len(names) == limit or mem_available_mib() < RESERVE:
            time.sleep(3)
            took = avail0 - mem_available_mib()
            pss = pss_mib(home, names)
            per, per_pss = took / len(names), pss / len(names)
            print("  %-6s %3d forks: host memory %6d MiB (%4d per fork), QEMU PSS %6d MiB in "
                  "all (%4d per fork), last fork %5d ms, load %s" % (
                      label, len(names), took, per, pss, per_pss, ms, loadavg()))
            if mem_available_mib() < RESERVE:
                print("  %s: MemAvailable under %d MiB: stopped" % (label, RESERVE))
                break
    for n in names:
        k(home, "sandbox", "rm", n)
    k(home, "sandbox", "rm", "src")
    return per, per_pss


def main():
    layout = test_image()
    homes = paths_homes("k8d", layout)
    try:
        print("host load at the start: %s, MemAvailable %d MiB" % (loadavg(),
                                                                    mem_available_mib()))
        file_per = run(homes["file"], "file", MAX)
        old_per = run(homes["stream"], "stream", OLD)
        # MemAvailable's fall counts everything else this shared host does meanwhile (it
        # can even rise); the QEMUs' PSS counts only theirs, a shared page once.
        for label, pers in (("memory file", file_per), ("stream", old_per)):
            for how, per in zip(("MemAvailable's fall", "QEMU PSS"), pers):
                if per > 0:
                    print("forks of one ~%d MiB checkpoint a 24 GiB host holds by %s (%d MiB "
                          "per fork, %d MiB kept free): about %d (%s)" % (
                              MIB, how, per, RESERVE, (HOST_MIB - RESERVE) / per, label))
    finally:
        for h in homes.values():
            end_home(h)


if __name__ == "__main__":
    main()
