# SPDX-License-Identifier: Apache-2.0
# checkpoint.py - checkpoint, cold rewind, pause to disk and resume (issues 6, 27), the
# migration stream of before against the memory file, side by side in one run: two
# daemons, one per way of keeping memory (config.json "checkpoint_memory"), each with a
# 1 GiB sandbox running a Python container at ~64 and ~512 MiB touched, their operations
# alternated so both see the same host. Then the armed spare of each: its host RSS and PSS
# against a bare QEMU process (the same machine and memory, started stopped, which never
# ran a guest). The host's load average is printed with the figures: this machine is shared.
import json
import os
import statistics
import subprocess
import time

from k8cli import (GUEST, end_home, loadavg, out as k, paths_homes, rss_kib, smaps_kib,
                   test_image, touch_memory)

N = int(os.environ.get("BENCH_N", "3"))
SIZES = [int(x) for x in os.environ.get("BENCH_MIBS", "64,512").split(",")]
MEM = 1024


def med(xs):
    return statistics.median(xs) if xs else 0


def bare_qemu_kib(mem):
    """RSS and PSS of a QEMU process with the guest kernel and `mem` MiB that never ran
    (-S): what a QEMU costs before any guest memory."""
    p = subprocess.Popen(["qemu-system-x86_64", "-M", "microvm,acpi=off,pit=on,pic=on,rtc=off",
                          "-accel", "tcg,tb-size=128", "-cpu", "max", "-m", str(mem), "-smp",
                          "1", "-nodefaults", "-no-user-config", "-nographic", "-S",
                          "-kernel", os.path.join(GUEST, "vmlinux"), "-initrd",
                          os.path.join(GUEST, "initramfs.cpio"), "-serial", "null",
                          "-device", "virtio-serial-device,max_ports=3",
                          "-device", "virtio-balloon-device,free-page-reporting=on"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        return rss_kib(p.pid), smaps_kib(p.pid, "Pss")
    finally:
        p.kill()
        p.wait()


def spare_of(home, name):
    for _ in range(600):
        s = json.loads(k(home, "sandbox", "inspect", name, "--json")).get("spare")
        if s and s["ready"]:
            return s
        time.sleep(0.2)
    raise SystemExit("the spare of %s never became ready" % name)


def main():
    layout = test_image()
    homes = paths_homes("k8c", layout)
    try:
        print("host load (1, 5, 15 min) at the start: %s" % loadavg())
        for mib in SIZES:
            name = "m%d" % mib
            for path, h in homes.items():
                k(h, "sandbox", "create", name, "--cpus", "1", "--memory", str(MEM), "--disk",
                  "2", "--rewind-spare", "off")
                k(h, "sandbox", "pull", name, "python:3.12-slim")
                used = touch_memory(h, name, mib)
            res = {p: {"cp": [], "pause": [], "size": [], "rw": [], "pd": [], "rs": []}
                   for p in homes}
            load0 = loadavg()
            for i in range(N):          # alternated, each round in the other order
                order = list(homes) if i % 2 == 0 else list(reversed(list(homes)))
                for path in order:
                    h, r = homes[path], res[path]
                    j = json.loads(k(h, "checkpoint", name, "--label", "c%d" % i, "--json"))
                    r["cp"].append(j["ms"])
                    r["pause"].append(j["pause_ms"])
                    r["size"].append(j["size"])
                for path in order:
                    h, r = homes[path], res[path]
                    j = json.loads(k(h, "rewind", name, "--to", "c%d" % i, "-y", "--json"))
                    r["rw"].append(j["ms"])
                for path in order:
                    h, r = homes[path], res[path]
                    r["pd"].append(json.loads(k(h, "sandbox", "pause", name, "--json"))["ms"])
                for path in order:
                    h, r = homes[path], res[path]
                    r["rs"].append(json.loads(k(h, "sandbox", "resume", name, "--json"))["ms"])
            print("1 GiB sandbox, ~%d MiB touched (guest uses %d MiB), median of %d, load %s "
                  "-> %s:" % (mib, used // 1024, N, load0, loadavg()))
            for path in homes:
                r = res[path]
                print("  %-6s checkpoint %5d ms (vCPUs stopped %5d, %4d MiB on disk), cold "
                      "rewind %5d ms, pause to disk %5d ms, resume %5d ms"
                      % (path, med(r["cp"]), med(r["pause"]), med(r["size"]) / (1 << 20),
                         med(r["rw"]), med(r["pd"]), med(r["rs"])))
            for h in homes.values():
                k(h, "sandbox", "rm", name)
            # The armed spare: a sandbox that keeps one (--rewind-spare latest, the default).
            spare = "s%d" % mib
            for path, h in homes.items():
                k(h, "sandbox", "create", spare, "--cpus", "1", "--memory", str(MEM), "--disk",
                  "2")
                k(h, "sandbox", "pull", spare, "python:3.12-slim")
                touch_memory(h, spare, mib)
                k(h, "checkpoint", spare, "--label", "base")
                k(h, "rewind", spare, "--to", "base", "-y")      # cold; arms the spare
            time.sleep(2)
            brss, bpss = bare_qemu_kib(MEM)
            print("  the armed spare of a 1 GiB sandbox at ~%d MiB (load %s); a bare QEMU "
                  "process (-S, never ran): RSS %d MiB, PSS %d MiB" % (mib, loadavg(),
                                                                      brss >> 10, bpss >> 10))
            for path, h in homes.items():
                s = spare_of(h, spare)
                pss = smaps_kib(s["pid"], "Pss")
                print("  %-6s spare: RSS %5d MiB, PSS %5d MiB: %+d MiB RSS over the bare "
                      "QEMU" % (path, s["rss_kib"] >> 10, pss >> 10,
                                (s["rss_kib"] - brss) >> 10))
                k(h, "sandbox", "rm", spare)
        print("host load at the end: %s" % loadavg())
    finally:
        for h in homes.values():
            end_home(h)


if __name__ == "__main__":
    main()
