# SPDX-License-Identifier: Apache-2.0
# jail.py - what QEMU's jail costs at boot: `kosa8 sandbox create` (create to ready: the
# agent answered) with QEMU jailed, against the same sandbox with QEMU unjailed
# (config.json "jail": false), side by side in one run. Two daemons, one per home, both
# up for the whole run; creates alternate between them (ABBA, so neither always goes
# first) and each sandbox is removed before the next create. Goal: within 5%.
#
#   python3 bench/jail.py            (JAIL_N=5 rounds by default, at least 5)
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from k8cli import k  # noqa: E402

N = max(5, int(os.environ.get("JAIL_N", "5")))
SIZE = ["--cpus", "1", "--memory", "256", "--disk", "1"]


def start(jail):
    home = tempfile.mkdtemp(prefix="k8bj-" if jail else "k8bn-", dir="/tmp")
    if not jail:
        with open(os.path.join(home, "config.json"), "w") as f:
            json.dump({"jail": False}, f)
    k(home, "daemon", "start")
    st = json.loads(k(home, "daemon", "status", "--json").stdout)
    assert st["jail"] is jail, st
    return home, st["accel"]


def create_s(home, name):
    t0 = time.monotonic()
    k(home, "sandbox", "create", name, *SIZE)
    dt = time.monotonic() - t0
    k(home, "sandbox", "rm", name)
    return dt


def main():
    (jh, accel), (nh, _) = start(True), start(False)
    print("accelerator: %s; %d rounds, 1 vCPU, 256 MiB" % (accel, N))
    jailed, unjailed = [], []
    try:
        # one untimed create each: templates and page cache warm for both
        create_s(jh, "warm")
        create_s(nh, "warm")
        for i in range(N):
            order = [(jh, jailed), (nh, unjailed)]
            if i % 2:
                order.reverse()
            for home, xs in order:
                xs.append(create_s(home, "b%d" % i))
    finally:
        for h in (jh, nh):
            k(h, "daemon", "stop", check=False)
            shutil.rmtree(h, ignore_errors=True)
    mj, mn = statistics.median(jailed), statistics.median(unjailed)
    print("create-to-ready jailed:   median %.3f s  (%s)" % (mj, " ".join("%.3f" % x for x in jailed)))
    print("create-to-ready unjailed: median %.3f s  (%s)" % (mn, " ".join("%.3f" % x for x in unjailed)))
    print("ratio jailed/unjailed: %.3f (goal <= 1.05)" % (mj / mn))


if __name__ == "__main__":
    main()
