# SPDX-License-Identifier: Apache-2.0
# idlecpu.py - what running, idle sandboxes cost the host in CPU and memory (issue 15),
# side by side in one run:
#  1. host CPU of IDLECPU_N (default 10) idle sandboxes (512 MiB, 1 vCPU, no image, only
#     the agent) under each guest kernel: IDLECPU_OLD_VMLINUX (a kernel built before
#     NO_HZ_IDLE, e.g. /var/cache/kosa8/kernel-6.1.192-3-<key>/vmlinux; the part is
#     skipped without it) against the build's guest image. Same daemon, same machine, only
#     the kernel differs. CPU is QEMU's utime+stime over IDLECPU_WINDOW_S.
#  2. host RSS of one idle sandbox after a run that allocated and freed ~200 MiB of heap,
#     with free page reporting (config.json "free_page_reporting", the default) and
#     without, and what the balloon costs a CPU-bound run.
import json
import os
import shutil
import statistics
import tempfile
import time

from k8cli import GUEST, cpu_seconds, end_home, k, out, test_image

N = int(os.environ.get("IDLECPU_N", "10"))
WINDOW = float(os.environ.get("IDLECPU_WINDOW_S", "20"))
SETTLE = float(os.environ.get("IDLECPU_SETTLE_S", "10"))
OLD = os.environ.get("IDLECPU_OLD_VMLINUX", "")
PARTS = os.environ.get("IDLECPU_PARTS", "cpu,free").split(",")
HEAP = ("b = bytearray(200 << 20)\n"     # 200 MiB, touched, then freed at exit
        "for i in range(0, len(b), 4096):\n"
        "    b[i] = 1\n"
        "print(len(b) >> 20)\n")
WORK = ("s = 0\n"
        "for i in range(200000):\n"
        "    s += len(str(i * i)) % 7\n"
        "print(s)\n")


def guest_with_kernel(vmlinux, where):
    """A copy of the build's guest image with another kernel (its manifest rewritten)."""
    import hashlib
    os.makedirs(where, exist_ok=True)
    shutil.copy(os.path.join(GUEST, "initramfs.cpio"), where)
    shutil.copy(vmlinux, os.path.join(where, "vmlinux"))
    with open(os.path.join(GUEST, "manifest.json")) as f:
        m = json.load(f)
    with open(vmlinux, "rb") as f:
        m["kernel"]["sha256"] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(where, "manifest.json"), "w") as f:
        json.dump(m, f)
    return where


def qemu_pid(home, name):
    return json.loads(out(home, "sandbox", "inspect", name)).get("pid") or 0


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def idle_cpu(label, guest):
    """N idle sandboxes under the kernel in `guest`: CPU % of one core, each and total."""
    home = tempfile.mkdtemp(prefix="k8c-", dir="/tmp")
    env_before = os.environ.get("KOSA8_GUEST_DIR")
    os.environ["KOSA8_GUEST_DIR"] = guest
    try:
        k(home, "daemon", "start")
        boots = []
        for i in range(N):
            t0 = time.monotonic()
            k(home, "sandbox", "create", "c%02d" % i, "--cpus", "1", "--memory", "512",
              "--disk", "2")
            boots.append(time.monotonic() - t0)
        pids = [qemu_pid(home, "c%02d" % i) for i in range(N)]
        time.sleep(SETTLE)
        c0, t0 = sum(cpu_seconds(p) for p in pids), time.monotonic()
        load0 = loadavg()
        time.sleep(WINDOW)
        c1, t1 = sum(cpu_seconds(p) for p in pids), time.monotonic()
        pct = 100 * (c1 - c0) / (t1 - t0)
        print("%-34s %4d %9.1f %9.2f %9.1f   load %s-%s"
              % (label, N, statistics.median(boots), pct / N, pct, load0, loadavg()))
        k(home, "daemon", "stop")
    finally:
        if env_before is None:
            os.environ.pop("KOSA8_GUEST_DIR", None)
        else:
            os.environ["KOSA8_GUEST_DIR"] = env_before
        end_home(home)


def rss_mib(pid):
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1]) / 1024
    return 0


def freed_heap():
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8f-", dir="/tmp")
    try:
        k(home, "daemon", "start")
        k(home, "image", "load", layout, "--tag", "python:3.12-slim")
        print("%-26s %8s %9s %9s %9s %9s" % ("512 MiB sandbox", "run_ms", "rss_boot",
                                             "rss_heap", "rss_idle", "guest_free"))
        for fpr in (False, True):
            with open(os.path.join(home, "config.json"), "w") as f:
                json.dump({"free_page_reporting": fpr}, f)
            name = "fpr1" if fpr else "fpr0"
            k(home, "sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2")
            k(home, "sandbox", "pull", name, "python:3.12-slim")
            pid = qemu_pid(home, name)
            time.sleep(SETTLE)
            boot = rss_mib(pid)
            runs = []
            for _ in range(3):
                t0 = time.monotonic()
                k(home, "sandbox", "run", name, "python:3.12-slim", "python3", "-c", WORK)
                runs.append(1000 * (time.monotonic() - t0))
            k(home, "sandbox", "run", name, "python:3.12-slim", "python3", "-c", HEAP)
            heap = rss_mib(pid)
            time.sleep(SETTLE)
            st = json.loads(out(home, "sandbox", "inspect", name)).get("stat") or {}
            print("%-26s %8.0f %9.0f %9.0f %9.0f %9.0f"
                  % ("free page reporting " + ("on" if fpr else "off"),
                     statistics.median(runs), boot, heap, rss_mib(pid),
                     st.get("mem_free_kib", 0) / 1024))
            k(home, "sandbox", "rm", name)
        k(home, "daemon", "stop")
    finally:
        end_home(home)


def main():
    if "cpu" in PARTS:
        print("%-34s %4s %9s %9s %9s" % ("idle sandboxes, guest kernel", "n", "create_s",
                                         "cpu%/sb", "cpu%_all"))
        if OLD:
            tmp = tempfile.mkdtemp(prefix="k8g-", dir="/tmp")
            try:
                idle_cpu("periodic 250 Hz tick (before)", guest_with_kernel(OLD, tmp))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("(no IDLECPU_OLD_VMLINUX: the kernel before NO_HZ_IDLE is not measured)")
        idle_cpu("NO_HZ_IDLE, TSC rate told (the build)", GUEST)
    if "free" in PARTS:
        freed_heap()


if __name__ == "__main__":
    main()
