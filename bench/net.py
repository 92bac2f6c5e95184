# SPDX-License-Identifier: Apache-2.0
# net.py - network egress throughput (issue 4), measured side by side in one run (shared,
# noisy machines: compare ratios, not absolute numbers).
#
# TCP bulk transfer from a container in the guest to a sink on the host's 127.0.0.1:
#   kosa8:        `kosa8 sandbox run` in a sandbox created with --egress-allow 127.0.0.1:PORT;
#                 frames go virtio-net -> QEMU -netdev stream -> kosa8-net (policy + libslirp)
#   netdev user:  the same kernel, initramfs and agent booted by hand with QEMU's own
#                 `-netdev user` (libslirp inside QEMU), the same init "net" field and the
#                 same python3 command in a container of the same image.
# The sink times first to last byte. Both QEMUs run under the same CPU quota (kosa8d puts
# a sandbox's QEMU in a cgroup of `--cpus` CPUs; the bare one is put in an equal one).
#
# Environment: BENCH_N (repetitions, default 4; the order alternates each repetition), BENCH_NET_MIB (MiB per transfer, default
# 128), KOSA8_BIN (default build/bin), BENCH_NET_NOCG=1 (bare VM without a CPU quota).
import json
import os
import queue
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from k8cli import (k, test_image, qemu_vm, image_disk, cpu_cgroup, cgroup_rm,  # noqa: E402
                   cpu_seconds)

N = int(os.environ.get("BENCH_N", "4"))
MIB = int(os.environ.get("BENCH_NET_MIB", "128"))
MEM = 512
ENV = ["PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"]
NET = {"ip": "10.0.2.15", "prefix": 24, "gateway": "10.0.2.2", "dns": ["10.0.2.3"]}

SENDER = r'''
import socket, sys, time
port, mib = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("10.0.2.2", port))
b = b"\x5a" * 65536
t = time.monotonic()
for _ in range(mib * 16):
    s.sendall(b)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print("%.3f" % (time.monotonic() - t))
'''


class Sink:
    """Accepts connections on 127.0.0.1:<free port>; per connection, puts (bytes, seconds
    from first to last byte) on self.results."""

    def __init__(self):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.results = queue.Queue()
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            c, _ = self.ls.accept()
            n, t0, t1 = 0, None, None
            buf = bytearray(1 << 20)
            while True:
                r = c.recv_into(buf)
                if not r:
                    break
                t1 = time.monotonic()
                if t0 is None:
                    t0 = t1
                n += r
            c.close()
            self.results.put((n, (t1 - t0) if t0 is not None else 0.0))

    def take(self, timeout=300):
        n, secs = self.results.get(timeout=timeout)
        if n != MIB << 20:
            raise SystemExit("sink got %d bytes, expected %d" % (n, MIB << 20))
        return n / secs / 1e6


def med(xs):
    return statistics.median(xs)


def spread(xs):
    """median [min-max] of a list of rates"""
    return "%.1f [%.1f-%.1f]" % (med(xs), min(xs), max(xs))


def netctl(home, sid, req):
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.path.join(home, "run", "%s.netctl" % sid))
    s.sendall((json.dumps(dict(req, id=1)) + "\n").encode())
    f = s.makefile()
    while True:
        r = json.loads(f.readline())
        if r.get("id") == 1:
            s.close()
            return r


def main():
    home = tempfile.mkdtemp(prefix="k8bnet-", dir="/tmp")
    sink = Sink()
    k(home, "daemon", "start")
    bare_vm = []
    try:
        bench(home, sink, bare_vm)
    finally:
        for proc, cg in bare_vm:
            proc.kill()
            proc.wait()
            cgroup_rm(cg)
        k(home, "daemon", "stop", check=False)
        shutil.rmtree(home, ignore_errors=True)


def bench(home, sink, bare_vm):
    k(home, "image", "load", test_image(), "--tag", "python:3.12-slim")
    k(home, "sandbox", "create", "net", "--egress-allow", "127.0.0.1:%d" % sink.port,
      "--memory", str(MEM), "--cpus", "1", "--disk", "2")
    k(home, "sandbox", "pull", "net", "python:3.12-slim")
    sb = json.loads(k(home, "sandbox", "inspect", "net").stdout)
    sbj = json.load(open(os.path.join(sb["dir"], "sandbox.json")))
    netpid = sbj["sidecars"]["net"]["pid"]
    sid = sbj.get("id") or [f for f in os.listdir(os.path.join(home, "run"))
                            if f.endswith(".netctl")][0].split(".")[0]

    erofs, digest = image_disk(home)
    proc, ag, _ = qemu_vm(home, os.path.join(home, "bare"), erofs=erofs, mem=MEM, extra=[
        "-netdev", "user,id=net0",
        "-device", "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56"])
    cg = None if os.environ.get("BENCH_NET_NOCG") else cpu_cgroup("net%d" % os.getpid(), proc.pid, 1)
    bare_vm.append((proc, cg))
    print("bare VM CPU quota: %s" % ("1 CPU (%s), like the sandbox's QEMU" % cg if cg else "none"))
    _, r = ag.request({"op": "init", "time_ns": time.time_ns(), "hostname": "bare", "seed": "00" * 32,
                       "limits": {"pids": 1024, "memory_reserve_mib": 64}, "net": NET})
    ag.request({"op": "image.mount", "slot": 0, "digest": digest})
    argv = ["python3", "-c", SENDER, str(sink.port), str(MIB)]

    def kosa():
        c0 = (cpu_seconds(netpid), cpu_seconds(sb["pid"]))
        k(home, "sandbox", "run", "net", "python:3.12-slim", *argv)
        rate = sink.take()
        return rate, (cpu_seconds(netpid) - c0[0], cpu_seconds(sb["pid"]) - c0[1])

    def bare(i):
        c0 = cpu_seconds(proc.pid)
        out, ex = ag.run({"op": "run", "container": "%012x" % (0xe0000 + i), "image": digest,
                          "argv": argv, "env": ENV, "cwd": "/", "user": "0", "stdin": False,
                          "rm": True, "detach": False})
        assert ex.get("code") == 0, (out, ex)
        return sink.take(), cpu_seconds(proc.pid) - c0

    # warm both (page cache of the image, slirp's first connection)
    k(home, "sandbox", "run", "net", "python:3.12-slim", "python3", "-c", "pass")
    ag.run({"op": "run", "container": "%012x" % 0xdffff, "image": digest,
            "argv": ["python3", "-c", "pass"], "env": ENV, "cwd": "/", "user": "0",
            "stdin": False, "rm": True, "detach": False})
    kr, br, kcpu, bcpu = [], [], [], []
    st0 = netctl(home, sid, {"op": "stats"})
    for i in range(N):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            if which == 0:
                rate, c = kosa()
                kr.append(rate)
                kcpu.append(c)
            else:
                rate, c = bare(i)
                br.append(rate)
                bcpu.append(c)
    print("TCP guest -> host 127.0.0.1, %d MiB in 64 KiB sends, %d runs each (MB/s): kosa8 %s, "
          "netdev user %s" % (MIB, N, " ".join("%.1f" % x for x in kr),
                              " ".join("%.1f" % x for x in br)))
    # each repetition ran both back to back: their ratio is less exposed to the machine's
    # load drifting over the whole run than the ratio of the medians
    pair = [a / b for a, b in zip(kr, br)]
    print("median [min-max], MB/s: kosa8-net %s, QEMU -netdev user %s; per-repetition ratios %s "
          "(median %.2f)" % (spread(kr), spread(br), " ".join("%.2f" % x for x in pair), med(pair)))
    print("network egress throughput: kosa8-net %.1f MB/s, QEMU -netdev user %.1f MB/s: "
          "ratio %.2fx (goal >= 0.9x)" % (med(kr), med(br), med(kr) / med(br)))
    print("CPU per run (median): kosa8 QEMU %.1f s + kosa8-net %.1f s; bare QEMU (slirp inside) "
          "%.1f s" % (med([c[1] for c in kcpu]), med([c[0] for c in kcpu]), med(bcpu)))
    st = netctl(home, sid, {"op": "stats"})
    d = {k: (st.get(k) or 0) - (st0.get(k) or 0) for k in ("frames_in", "frames_out", "tcp_merged")}
    mib = MIB * N
    print("kosa8-net over the %d runs: frames_in %d (%.0f/MiB), frames_out %d (%.0f/MiB), "
          "tcp_merged %d; dropped %s malformed %s (since start)"
          % (N, d["frames_in"], d["frames_in"] / mib, d["frames_out"], d["frames_out"] / mib,
             d["tcp_merged"], st.get("dropped"), st.get("malformed")))

if __name__ == "__main__":
    main()
