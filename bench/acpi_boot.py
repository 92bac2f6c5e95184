# SPDX-License-Identifier: Apache-2.0
"""microvm with and without ACPI, booted side by side (docs/design.md "Forks, rewinds and
randomness": why there is no vmgenid device). Boots the built guest directly with QEMU
(no daemon, no jail), alternating acpi=off and acpi=on with `-device vmgenid`, and times
each boot to the agent's first console line, with QEMU's RSS at that moment. A boot that
does not get there within BENCH_LIMIT seconds (default 30) counts as not booted.

    python3 bench/acpi_boot.py [GUEST_DIR]      # BENCH_N=5 by default
Not run by bench/run.sh: the hung boots take the machine for minutes."""
import os
import select
import statistics
import subprocess
import sys
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
GUEST = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "build", "guest")
N = int(os.environ.get("BENCH_N", "5"))
LIMIT = float(os.environ.get("BENCH_LIMIT", "30"))
MARK = b"kosa8-agent: "


def boot(acpi):
    cmd = ["qemu-system-x86_64", "-M", "microvm,acpi=%s,pit=on,pic=on,rtc=off" % acpi,
           "-m", "256", "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none",
           "-serial", "stdio", "-kernel", os.path.join(GUEST, "vmlinux"),
           "-initrd", os.path.join(GUEST, "initramfs.cpio"),
           "-append", "console=ttyS0 acpi=%s" % acpi, "-device", "vmgenid,guid=auto"]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, ok = b"", False
    try:
        while time.monotonic() - t0 < LIMIT and not ok:
            if select.select([p.stdout], [], [], 0.5)[0]:
                d = os.read(p.stdout.fileno(), 65536)
                if not d:
                    break
                out += d
                ok = MARK in out
        dt = time.monotonic() - t0
        with open("/proc/%d/status" % p.pid) as f:
            rss = int([l for l in f if l.startswith("VmRSS")][0].split()[1]) // 1024
    finally:
        p.kill()
        p.wait()
    last = (out.strip().splitlines() or [b""])[-1].decode(errors="replace")[:70]
    return ok, dt, rss, last


def main():
    res = {"off": [], "on": []}
    print("load %.1f" % os.getloadavg()[0])
    for i in range(N):
        for acpi in ("off", "on"):
            ok, dt, rss, last = boot(acpi)
            res[acpi].append((ok, dt, rss))
            print("acpi=%-3s %-9s %6.2f s  %3d MiB  %s" % (acpi, "booted" if ok else "NO BOOT",
                                                        dt, rss, last), flush=True)
    for acpi, v in res.items():
        oks = [d for o, d, _ in v if o]
        print("acpi=%s: booted %d of %d%s, RSS %s MiB" % (
            acpi, len(oks), len(v), ", median %.2f s" % statistics.median(oks) if oks else "",
            "/".join(str(r) for _, _, r in v)))


if __name__ == "__main__":
    main()
