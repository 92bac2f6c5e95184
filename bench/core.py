# SPDX-License-Identifier: Apache-2.0
# core.py - sandbox-core benchmarks, measured side by side in one run (shared, noisy
# machines: compare ratios, not absolute times).
#
#  1. create-to-ready: `kosa8 sandbox create` against a bare QEMU boot of the same kernel,
#     initramfs and devices to the agent's first message (HELLO).
#  2. `run python3 -c pass` in a warm sandbox against the same exec sent to the agent
#     directly over its socket in a bare VM.
#  3. memory kosa8 adds per sandbox beyond the guest's RAM: QEMU's RSS over what the guest
#     uses, and the daemon's growth per sandbox.
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import time

sys.path.insert(0, os.path.dirname(__file__))
from k8cli import TOP, k, qemu_vm, rss_kib  # noqa: E402

N = int(os.environ.get("BENCH_N", "3"))
MEM = 512




def bare_vm(home, workdir, erofs=None):
    """Boot the guest like kosa8d does, with the same devices (a NIC, the shared-folder
    port), but by hand; returns (proc, agent, seconds to HELLO)."""
    os.makedirs(workdir, exist_ok=True)
    extra = ["-chardev", "socket,id=fs,path=%s/fs.sock,server=on,wait=off" % workdir,
             "-device", "virtserialport,chardev=fs,name=kosa8.fs",
             "-netdev", "user,id=net0,restrict=on",
             "-device", "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56"]
    return qemu_vm(home, workdir, extra=extra, erofs=erofs, mem=MEM, max_ports=3)


def med(xs):
    return statistics.median(xs)


def main():
    home = tempfile.mkdtemp(prefix="k8b-", dir="/tmp")
    layout = subprocess.run([os.path.join(TOP, "scripts", "test-image.sh")], capture_output=True,
                            text=True, check=True).stdout.strip()
    k(home, "daemon", "start")
    st = json.loads(k(home, "daemon", "status", "--json").stdout)
    print("accelerator: %s" % st["accel"])
    k(home, "image", "load", layout, "--tag", "python:3.12-slim")
    dpid = int(open(os.path.join(home, "kosa8d.lock")).read())

    # 1. create-to-ready vs bare boot, alternating
    kosa, bare = [], []
    rss_daemon = [rss_kib(dpid)]
    for i in range(N):
        t0 = time.time()
        k(home, "sandbox", "create", "b%d" % i, "--cpus", "1", "--memory", str(MEM), "--disk", "2")
        kosa.append(time.time() - t0)
        rss_daemon.append(rss_kib(dpid))
        proc, ag, t = bare_vm(home, os.path.join(home, "bare%d" % i))
        bare.append(t)
        proc.kill()
        proc.wait()
    print("create-to-ready: kosa8 %.2f s, bare QEMU boot to agent HELLO %.2f s: ratio %.2fx "
          "(kosa8 adds %+.0f%%)" % (med(kosa), med(bare), med(kosa) / med(bare),
                                    100 * (med(kosa) / med(bare) - 1)))

    # 2. run python3 -c pass: warm sandbox vs the agent alone
    k(home, "sandbox", "pull", "b0", "python:3.12-slim")
    disks = os.path.join(home, "images", "disks")
    erofs = os.path.join(disks, os.listdir(disks)[0])
    digest = "sha256:" + os.path.basename(erofs).split(".")[0]
    proc, ag, _ = bare_vm(home, os.path.join(home, "barerun"), erofs)
    ag.request({"op": "init", "time_ns": time.time_ns(), "hostname": "bare", "seed": "00" * 32,
                "limits": {"pids": 1024, "memory_reserve_mib": 64}})
    ag.request({"op": "image.mount", "slot": 0, "digest": digest})
    env = ["PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"]
    kr, ar = [], []
    k(home, "sandbox", "run", "b0", "python:3.12-slim", "python3", "-c", "pass")  # warm
    for i in range(N + 2):
        t0 = time.time()
        k(home, "sandbox", "run", "b0", "python:3.12-slim", "python3", "-c", "pass")
        kr.append(time.time() - t0)
        t0 = time.time()
        out, ex = ag.run({"op": "run", "container": "%012x" % (0xb0000 + i), "image": digest,
                          "argv": ["python3", "-c", "pass"], "env": env, "cwd": "/",
                          "user": "0", "stdin": False, "rm": True, "detach": False})
        ar.append(time.time() - t0)
        assert ex.get("code") == 0, ex
    print("run python3 -c pass: kosa8 CLI %.3f s, agent alone %.3f s: ratio %.2fx (kosa8 adds %.0f ms)"
          % (med(kr), med(ar), med(kr) / med(ar), 1000 * (med(kr) - med(ar))))
    qrss_bare = rss_kib(proc.pid)
    proc.kill()
    proc.wait()

    # 3. memory
    sb = json.loads(k(home, "sandbox", "inspect", "b0").stdout)
    st = sb.get("stat", {})
    used = (st.get("mem_total_kib", 0) - st.get("mem_free_kib", 0))
    qrss = rss_kib(sb["pid"])
    per_sb = (rss_daemon[-1] - rss_daemon[0]) / max(1, N)
    print("memory: QEMU RSS %d MiB for a %d MiB guest using %d MiB (bare QEMU, same guest: %d MiB); "
          "daemon grows %.0f KiB per sandbox" % (qrss // 1024, MEM, used // 1024,
                                                  qrss_bare // 1024, per_sb))
    print("memory kosa8 adds per sandbox beyond a bare QEMU: %+d MiB (QEMU) %+.1f MiB (daemon)"
          % ((qrss - qrss_bare) // 1024, per_sb / 1024))
    k(home, "daemon", "stop")
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
