# SPDX-License-Identifier: Apache-2.0
# idle.py - what a running, idle sandbox costs the host (issue 15), side by side in one run:
# one 512 MiB sandbox per setting of TCG's translation cache (config.json "tcg_tb_mib"),
# each booted, the python image pulled, a few short runs (timed: what a smaller cache
# costs in speed), then left idle; its host processes' RSS and PSS (QEMU, kosa8-net,
# kosa8-fs) are read after IDLE_SETTLE_S. Last, the same sandbox paused to disk by the idle
# pause (--idle-pause): what is left. The host's KSM is reported, never changed.
import json
import os
import statistics
import tempfile
import time

from k8cli import end_home, k, out, test_image

SIZES = [int(x) for x in os.environ.get("IDLE_TB_MIB", "128,64,32").split(",")]
SETTLE = float(os.environ.get("IDLE_SETTLE_S", "10"))
RUNS = int(os.environ.get("IDLE_RUNS", "3"))
WORK = ("s = 0\n"          # builtins only: the test image's Python is minimal
        "for i in range(200000):\n"
        "    s += len(str(i * i)) % 7\n"
        "print(s)\n")


def mem_kib(pid):
    """(RSS, PSS) of a process in KiB, from smaps_rollup."""
    vals = {}
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] in ("Rss:", "Pss:"):
                    vals[parts[0]] = int(parts[1])
    except OSError:
        return 0, 0
    return vals.get("Rss:", 0), vals.get("Pss:", 0)


def procs(home, name):
    with open(os.path.join(home, "sandboxes", name, "sandbox.json")) as f:
        rec = json.load(f)
    pids = {"qemu": rec.get("pid", 0)}
    for role, sc in (rec.get("sidecars") or {}).items():
        pids[role] = sc.get("pid", 0)
    return {r: p for r, p in pids.items() if p and os.path.exists("/proc/%d" % p)}


def measure(home, name):
    """{role: (rss MiB, pss MiB)}."""
    return {r: tuple(v / 1024 for v in mem_kib(p)) for r, p in procs(home, name).items()}


def fmt(m):
    tot_r = sum(v[0] for v in m.values())
    tot_p = sum(v[1] for v in m.values())
    per = "  ".join("%s %.0f/%.0f" % (r, v[0], v[1]) for r, v in sorted(m.items()))
    return "%6.0f %6.0f   %s" % (tot_r, tot_p, per)


def set_config(home, cfg):
    with open(os.path.join(home, "config.json"), "w") as f:
        json.dump(cfg, f)


def main():
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8i-", dir="/tmp")
    try:
        k(home, "daemon", "start")
        k(home, "image", "load", layout, "--tag", "python:3.12-slim")
        st = json.loads(out(home, "daemon", "status", "--json"))
        print("host: KSM %s (%s); accel %s" % (st["idle"]["ksm"]["run"],
                                              st["idle"]["ksm"]["note"], st["accel"]))
        print("%-22s %8s %8s %7s %6s   %s" % ("512 MiB sandbox, idle", "create_s", "run_ms",
                                            "RSS", "PSS", "MiB each: rss/pss"))
        last = None
        for mib in SIZES:
            set_config(home, {"tcg_tb_mib": mib})
            name = "tb%d" % mib
            t0 = time.monotonic()
            k(home, "sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2")
            create_s = time.monotonic() - t0
            k(home, "sandbox", "pull", name, "python:3.12-slim")
            runs = []
            for _ in range(RUNS):
                t0 = time.monotonic()
                k(home, "sandbox", "run", name, "python:3.12-slim", "python3", "-c", WORK)
                runs.append(1000 * (time.monotonic() - t0))
            time.sleep(SETTLE)
            print("%-22s %8.1f %8.0f %s" % ("tb-size %d MiB" % mib, create_s,
                                            statistics.median(runs), fmt(measure(home, name))))
            if last:
                k(home, "sandbox", "rm", last)
            last = name
        # The last one again, paused by the idle pause: only the sidecars are left.
        set_config(home, {"idle_pause": "2s"})
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            s = json.loads(out(home, "sandbox", "inspect", last))
            if s["state"] == "paused":
                break
            time.sleep(0.5)
        print("%-22s %8s %8s %s" % ("paused by idle pause", "", "",
                                    fmt(measure(home, last))))
        set_config(home, {})
        t0 = time.monotonic()
        k(home, "sandbox", "run", last, "python:3.12-slim", "python3", "-c", "pass")
        print("first run after the idle pause (resume included): %.0f ms"
              % (1000 * (time.monotonic() - t0)))
        k(home, "sandbox", "rm", last)
        k(home, "daemon", "stop")
    finally:
        end_home(home)


if __name__ == "__main__":
    main()
