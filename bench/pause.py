# SPDX-License-Identifier: Apache-2.0
# pause.py - pause and resume (issue 15): to disk (QEMU ends, paused/ keeps the machine:
# its memory file and devices' state) against in memory (vCPUs stopped), side by side on one 512 MiB sandbox with
# ~64 MiB touched by a Python process, and the host RSS of the sandbox's processes
# (QEMU, kosa8-net, kosa8-fs) before and while paused.
import json
import os
import statistics
import tempfile
import time

from k8cli import end_home, out, rss_kib, test_image, touch_memory

N = int(os.environ.get("BENCH_N", "5"))
TOUCH_MIB = int(os.environ.get("BENCH_TOUCH_MIB", "64"))


def procs(home, name):
    """{role: pid} of the sandbox's live host processes, from sandbox.json."""
    with open(os.path.join(home, "sandboxes", name, "sandbox.json")) as f:
        rec = json.load(f)
    pids = {"qemu": rec.get("pid", 0)}
    for role, sc in (rec.get("sidecars") or {}).items():
        pids[role] = sc.get("pid", 0)
    return {r: p for r, p in pids.items() if p and os.path.exists("/proc/%d" % p)}


def rss(home, name):
    """{role: RSS MiB} and their sum."""
    per = {r: rss_kib(p) / 1024 for r, p in procs(home, name).items()}
    return per, sum(per.values())


def paused_size(d):
    """What paused/ takes on disk: a memory file's data and its devices' state, or one
    migration stream (config.json "checkpoint_memory": "stream")."""
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for f in os.listdir(d))


def timed(home, *args):
    t0 = time.time()
    r = json.loads(out(home, *args, "--json"))
    return r["ms"], 1000 * (time.time() - t0)


def main():
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8p-", dir="/tmp")
    name = "p"
    try:
        out(home, "daemon", "start")
        out(home, "image", "load", layout, "--tag", "python:3.12-slim")
        out(home, "sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2")
        out(home, "sandbox", "pull", name, "python:3.12-slim")
        used = touch_memory(home, name, TOUCH_MIB)
        time.sleep(2)
        per0, tot0 = rss(home, name)
        res = {"disk": ([], [], [], []), "memory": ([], [], [], [])}
        paused_rss = {}
        size = 0
        for _ in range(N):
            for where in ("disk", "memory"):
                flags = ("--in-memory",) if where == "memory" else ()
                pd, pw = timed(home, "sandbox", "pause", name, *flags)
                paused_rss[where] = rss(home, name)
                if where == "disk":
                    size = paused_size(os.path.join(home, "sandboxes", name, "paused"))
                rd, rw = timed(home, "sandbox", "resume", name)
                for lst, v in zip(res[where], (pd, pw, rd, rw)):
                    lst.append(v)
        print("512 MiB sandbox, ~%d MiB touched (guest uses %d MiB), median of %d:"
              % (TOUCH_MIB, used // 1024, N))
        for where in ("disk", "memory"):
            pd, pw, rd, rw = (statistics.median(x) for x in res[where])
            print("  pause to %-6s: pause %4d ms (CLI %4d), resume %4d ms (CLI %4d)"
                  % (where, pd, pw, rd, rw))
        print("  paused/ takes %d MiB on disk" % (size >> 20))
        print("  host RSS running: %d MiB (%s)"
              % (tot0, ", ".join("%s %d" % kv for kv in sorted(per0.items()))))
        for where in ("disk", "memory"):
            per, tot = paused_rss[where]
            print("  host RSS paused to %s: %d MiB (%s)"
                  % (where, tot, ", ".join("%s %d" % kv for kv in sorted(per.items()))))
        out(home, "sandbox", "rm", name)
        out(home, "daemon", "stop")
    finally:
        end_home(home)


if __name__ == "__main__":
    main()
