# SPDX-License-Identifier: Apache-2.0
# density.py - how many idle sandboxes one host holds (issue 15).
#
# Starts sandboxes (512 MiB, 1 vCPU, the python image pulled, idle) one after another
# until DENSITY_MAX (default 40) run, or the host's MemAvailable would fall under
# DENSITY_RESERVE_MIB (default 2048), or a create fails. Then, while those keep running,
# adds paused sandboxes until DENSITY_PAUSED (default 200) are paused in all: each a fork
# of a checkpoint of the first sandbox (a restore, much faster than a boot under TCG; the
# same 512 MiB python sandbox), paused to disk at once; last the running ones are paused
# too. Throughout, a thread times `sandbox ls` five times a second. Reports, as the count
# grows: create and pull times, what each sandbox costs the host (MemAvailable drop,
# QEMU's RSS), the p50/p99 of `sandbox ls` (through the CLI and straight on the API);
# fork+pause and resume times as the paused count grows; and the daemon's own slow
# listings (its log says where one waited).
# Not part of `make bench` by default (it takes the whole machine for many minutes):
# `make bench-density` or `python3 bench/density.py`.
import json
import os
import re
import socket
import statistics
import tempfile
import threading
import time

from k8cli import end_home, k, mem_available_mib, out, rss_kib, test_image

MAX = int(os.environ.get("DENSITY_MAX", "40"))
RESERVE_MIB = int(os.environ.get("DENSITY_RESERVE_MIB", "2048"))
MEM = int(os.environ.get("DENSITY_MEM_MIB", "512"))
PAUSED = int(os.environ.get("DENSITY_PAUSED", "200"))


def host_note():
    def rd(p):
        try:
            with open(p) as f:
                return f.read().strip()
        except OSError:
            return "n/a"
    return "KSM run=%s, THP %s" % (rd("/sys/kernel/mm/ksm/run"),
                                  rd("/sys/kernel/mm/transparent_hugepage/enabled"))


def api_list_ms(home):
    """GET /v1/sandboxes straight on kosa8d.sock: the daemon's share of `sandbox ls`,
    without the CLI's start-up (ms)."""
    t0 = time.monotonic()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(os.path.join(home, "kosa8d.sock"))
        c.sendall(b"GET /v1/sandboxes HTTP/1.0\r\nHost: kosa8\r\n\r\n")
        while c.recv(65536):
            pass
    finally:
        c.close()
    return 1000 * (time.monotonic() - t0)


class LsTimer(threading.Thread):
    """Times `kosa8 sandbox ls` every 200 ms until stopped, and the same list straight
    from the API (api_samples)."""

    def __init__(self, home):
        super().__init__(daemon=True)
        self.home, self.samples, self.api_samples = home, [], []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            k(self.home, "sandbox", "ls", check=False)
            self.samples.append(1000 * (time.monotonic() - t0))
            self.api_samples.append(api_list_ms(self.home))
            self.stop.wait(0.2)

    def window(self, since, api=False):
        s = sorted((self.api_samples if api else self.samples)[since:]) or [0.0]
        return statistics.median(s), s[min(len(s) - 1, int(len(s) * 0.99))], len(s)


def slow_listings(home):
    """The daemon's own word on its slow listings (sandbox.c logs one over 50 ms)."""
    took, table = [], []
    try:
        with open(os.path.join(home, "kosa8d.log"), errors="replace") as f:
            for line in f:
                m = re.search(r"sandbox ls took (\d+) ms: table lock (\d+) ms", line)
                if m:
                    took.append(int(m.group(1)))
                    table.append(int(m.group(2)))
    except OSError:
        pass
    print("the daemon's listings over 50 ms: %d (max %d ms; of which waiting for the table "
          "lock: max %d ms)" % (len(took), max(took or [0]), max(table or [0])))


def main():
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8d-", dir="/tmp")
    names = []
    try:
        k(home, "daemon", "start")
        k(home, "image", "load", layout, "--tag", "python:3.12-slim")
        print("host: %d MiB available, %s; limit %d sandboxes of %d MiB, reserve %d MiB"
              % (mem_available_mib(), host_note(), MAX, MEM, RESERVE_MIB))
        ls = LsTimer(home)
        ls.start()
        base = mem_available_mib()
        mark = 0
        print("%5s %9s %8s %10s %10s %8s %8s %8s %8s" % ("n", "create_s", "pull_s",
              "host_MiB/sb", "qemu_rss", "ls_p50", "ls_p99", "api_p50", "api_p99"))
        while len(names) < MAX:
            if mem_available_mib() < RESERVE_MIB + MEM:
                print("stopped: MemAvailable %d MiB is within one sandbox of the reserve"
                      % mem_available_mib())
                break
            name = "d%03d" % len(names)
            t0 = time.monotonic()
            p = k(home, "sandbox", "create", name, "--cpus", "1", "--memory", str(MEM),
                  "--disk", "2", check=False)
            t1 = time.monotonic()
            if p.returncode:
                print("stopped: create %s failed: %s" % (name, p.stderr.strip()[:300]))
                break
            names.append(name)
            k(home, "sandbox", "pull", name, "python:3.12-slim")
            t2 = time.monotonic()
            n = len(names)
            if n in (1, 2, 5) or n % 5 == 0 or n == MAX:
                time.sleep(2)   # let the guest settle before reading memory
                rss = 0
                for nm in names:
                    pid = json.loads(out(home, "sandbox", "inspect", nm)).get("pid") or 0
                    if pid:
                        rss += rss_kib(pid)
                p50, p99, _ = ls.window(mark)
                a50, a99, _ = ls.window(mark, api=True)
                mark = len(ls.samples)
                print("%5d %9.2f %8.2f %10d %10d %8.0f %8.0f %8.0f %8.0f"
                      % (n, t1 - t0, t2 - t1, (base - mem_available_mib()) // n,
                         rss // 1024 // n, p50, p99, a50, a99))
        running = len(names)
        avail_running = mem_available_mib()
        print("running idle: %d (%d MiB of host memory for them, %d MiB each)"
              % (running, base - avail_running, (base - avail_running) // max(1, running)))
        p50, p99, total = ls.window(0)
        print("sandbox ls while they started: p50 %.0f ms, p99 %.0f ms (%d calls); API p50 "
              "%.0f, p99 %.0f" % ((p50, p99, total) + ls.window(0, api=True)[:2]))
        # Paused ones: forks of one checkpoint, each paused to disk at once.
        mark = len(ls.samples)
        paused = []
        if names and PAUSED > running:
            k(home, "checkpoint", names[0], "--label", "base")
            print("%7s %9s %9s %9s %8s %8s %8s %8s" % ("paused", "fork_ms", "pause_ms",
                  "resume_ms", "ls_p50", "ls_p99", "api_p50", "api_p99"))
            fk, pz = [], []
            while len(paused) + running < PAUSED:
                name = "p%03d" % len(paused)
                t0 = time.monotonic()
                p = k(home, "sandbox", "fork", names[0], "--from", "base", "--name", name,
                      check=False)
                t1 = time.monotonic()
                if p.returncode:
                    print("stopped: fork %s failed: %s" % (name, p.stderr.strip()[:300]))
                    break
                k(home, "sandbox", "pause", name)
                t2 = time.monotonic()
                paused.append(name)
                fk.append(1000 * (t1 - t0))
                pz.append(1000 * (t2 - t1))
                n = len(paused)
                if n % 40 == 0 or n + running >= PAUSED:
                    t0 = time.monotonic()
                    k(home, "sandbox", "resume", paused[0])
                    res_ms = 1000 * (time.monotonic() - t0)
                    k(home, "sandbox", "pause", paused[0])
                    p50, p99, _ = ls.window(mark)
                    a50, a99, _ = ls.window(mark, api=True)
                    mark = len(ls.samples)
                    print("%7d %9.0f %9.0f %9.0f %8.0f %8.0f %8.0f %8.0f"
                          % (n, statistics.median(fk), statistics.median(pz), res_ms,
                             p50, p99, a50, a99))
                    fk, pz = [], []
        # Then the running ones, and a sample resumed.
        t0 = time.monotonic()
        for nm in names:
            k(home, "sandbox", "pause", nm)
        pause_s = time.monotonic() - t0
        time.sleep(2)
        avail_paused = mem_available_mib()
        allp = names + paused
        res = []
        for nm in allp[:: max(1, len(allp) // 8)]:
            t0 = time.monotonic()
            k(home, "sandbox", "resume", nm)
            res.append(1000 * (time.monotonic() - t0))
        p50, p99, total = ls.window(0)
        ls.stop.set()
        ls.join()
        print("paused: %d (%d forks + the %d that ran; those %d paused in %.1f s); host "
              "memory while all paused: %d MiB used by them (%.1f MiB each); resume %.0f ms "
              "median (%d sampled, max %.0f)"
              % (len(allp), len(paused), running, running, pause_s, base - avail_paused,
                 (base - avail_paused) / max(1, len(allp)), statistics.median(res or [0]),
                 len(res), max(res or [0])))
        print("sandbox ls over the whole run: p50 %.0f ms, p99 %.0f ms (%d calls)"
              % (p50, p99, total))
        print("GET /v1/sandboxes (the daemon's share): p50 %.0f ms, p99 %.0f ms"
              % ls.window(0, api=True)[:2])
        slow_listings(home)
    finally:
        end_home(home)


if __name__ == "__main__":
    main()
