# SPDX-License-Identifier: Apache-2.0
# spare.py - rewind through a spare against a cold rewind (issue 15), side by side in one
# run: two 1 GiB sandboxes with ~64 MiB touched by a Python container, one keeping a
# spare (--rewind-spare latest, the default), one not (--rewind-spare off). Each rewinds
# to its checkpoint BENCH_N times, the two alternated; every rewind waits for the spare
# to be loaded first (the guide's loop: the agent thinks between runs). Reports the
# daemon's "ms" (median, p90), the wall time seen by the CLI, the spare's host RSS and
# the host's load. A spare rewind answers before the guest's init is done (it runs
# after the answer, and every agent request waits for it), so each rewind is followed
# at once by `sandbox exec NAME CID true`, and the time from the rewind's start to that
# exec's end is reported too (what the rewind costs until the guest answers), with an
# exec of an idle sandbox, measured before each rewind, for scale.
import json
import os
import re
import statistics
import sys
import tempfile
import time

from k8cli import end_home, out as k, test_image, touch_memory

N = int(os.environ.get("BENCH_N", "10"))
# Seconds between rewinds, the same for both (the agent thinking in the guide's loop).
# Compare changes within one run: the figures move between runs (docs/design.md,
# "Rewind through a spare").
THINK = float(os.environ.get("BENCH_THINK", "1"))
MIB = int(os.environ.get("BENCH_MIB", "64"))


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]


def wait_spare(home, name, label):
    for _ in range(600):
        s = json.loads(k(home, "sandbox", "inspect", name, "--json")).get("spare")
        if s and s["ready"] and s["label"] == label:
            return s
        time.sleep(0.2)
    raise SystemExit("the spare of %s never became ready" % name)


def rewinds(home, names):
    """BENCH_N rewinds of each sandbox, alternated (one of each in turn), so both see the
    same host. Before each, the spare sandbox's spare is loaded (the guide's loop: the
    agent thinks between runs), so no spare is being prepared while either rewinds."""
    res = {n: ([], [], [], [], [], []) for n in names}
    cid = {n: json.loads(k(home, "sandbox", "ps", n, "--json"))[0]["id"] for n in names}
    for n in names:
        k(home, "rewind", n, "--to", "base", "-y")      # the first to a label is cold
    for _ in range(N):
        for name in names:
            ms, wall, rss, used, ready, idle = res[name]
            s = wait_spare(home, "warm", "base")
            if name == "warm":
                rss.append(s["rss_kib"])
            time.sleep(THINK)
            t0 = time.time()
            k(home, "sandbox", "exec", name, cid[name], "true")
            idle.append(1000 * (time.time() - t0))
            t0 = time.time()
            r = json.loads(k(home, "rewind", name, "--to", "base", "-y", "--json"))
            wall.append(1000 * (time.time() - t0))
            k(home, "sandbox", "exec", name, cid[name], "true")
            ready.append(1000 * (time.time() - t0))
            ms.append(r["ms"])
            used.append(r["spare"])
    for name in names:
        used, spare = res[name][3], name == "warm"
        if any(u != spare for u in used):
            print("  note: %s took the %s path %d of %d times" % (
                name, "cold" if spare else "spare", sum(u != spare for u in used), N))
    return {n: res[n][:3] + res[n][4:] for n in names}


def phases(home):
    """Median of each phase the daemon logs for a rewind (kosa8d.log): the swap's own
    line ("through its spare") and sb_connect_vm's ("restored VM connected"), for the
    spare sandbox and the cold one apart."""
    rows = {}
    try:
        with open(os.path.join(home, "kosa8d.log")) as f:
            log = f.read().splitlines()
    except OSError:
        return
    for line in log:
        m = re.search(r"sandbox ([\w-]+): rewind to \w+: guest ready (\d+) ms after the "
                      r"answer \(HELLO, version, init and mounts (\d+) ms\)", line)
        if m:
            rows.setdefault((m.group(1), "after", "guest ready after the answer"),
                            []).append(int(m.group(2)))
            rows.setdefault((m.group(1), "after", "HELLO, version, init, mounts"),
                            []).append(int(m.group(3)))
            continue
        m = re.search(r"sandbox ([\w-]+): (rewound to \w+ through its spare|restored VM "
                      r"connected in \d+ ms|rewind to \w+ recorded): (.*)", line)
        if not m:
            continue
        what = ("swap" if "spare" in m.group(2) else
                "records" if "recorded" in m.group(2) else "connect")
        for part in m.group(3).split(","):
            pm = re.match(r"\s*(.*?) (\d+)(?: ms)?$", part)
            if pm:
                rows.setdefault((m.group(1), what, pm.group(1)), []).append(int(pm.group(2)))
    for (name, what, phase), xs in sorted(rows.items()):
        print("  %-5s %-7s %-28s median %3d ms (n=%d)" % (name, what, phase,
                                                            statistics.median(xs), len(xs)))


def main():
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8s-", dir="/tmp")
    try:
        k(home, "daemon", "start")
        k(home, "image", "load", layout, "--tag", "python:3.12-slim")
        for name, setting in (("warm", "latest"), ("cold", "off")):
            k(home, "sandbox", "create", name, "--cpus", "1", "--memory", "1024", "--disk", "2",
              "--rewind-spare", setting)
            k(home, "sandbox", "pull", name, "python:3.12-slim")
            touch_memory(home, name, MIB)
            k(home, "checkpoint", name, "--label", "base")
        load0 = open("/proc/loadavg").read().split()[0]
        res = rewinds(home, ("cold", "warm"))
        print("host load (1 min) %s before the rewinds, %s after; %g s between rewinds" % (
            load0, open("/proc/loadavg").read().split()[0], THINK))
        for name in ("cold", "warm"):
            ms, wall, rss, ready, idle = res[name]
            print("rewind %-5s (1 GiB sandbox, ~%d MiB touched, n=%d): answer median %d ms, "
                  "p90 %d ms in the daemon; %d ms median seen by the CLI%s"
                  % ("spare" if name == "warm" else "cold", MIB, N, statistics.median(ms),
                     p90(ms), statistics.median(wall),
                     "; spare's QEMU RSS %d MiB" % (statistics.median(rss) // 1024)
                     if rss else ""))
            print("  rewind + first `sandbox exec %s CID true` (CLI to CLI): median %d ms, "
                  "p90 %d ms; that exec alone in an idle sandbox: median %d ms"
                  % (name, statistics.median(ready), p90(ready), statistics.median(idle)))
        phases(home)
        k(home, "daemon", "stop")
    finally:
        end_home(home)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
