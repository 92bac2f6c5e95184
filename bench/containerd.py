# SPDX-License-Identifier: Apache-2.0
# containerd.py - the containerd shim (issue 31, docs/containerd.md) against kosa8's own CLI
# doing the same in the same run, alternating, median (and p90) of BENCH_N_VM rounds:
#   ctr run --rm --runtime io.containerd.kosa8.v2 IMG true
#     vs  kosa8 sandbox create (1 vCPU, 512 MiB, 2 GB) + sandbox run IMG true + sandbox rm
# Both make, boot and remove one VM. The shim's side also pays containerd's own work (its
# snapshot, the bundle, the shim's start, ttRPC, events) and ctr's start-up; its rootfs is
# converted into a kosa8 image once, by a first run that is not timed (printed apart).
# A containerd of its own (root, state, sockets in a temporary folder), as the tests run it.
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from k8cli import BIN, end_home, out, test_image

N = int(os.environ.get("BENCH_N_VM", "5"))
IMG = "docker.io/library/python:3.12-slim"
SETTLE = float(os.environ.get("BENCH_SETTLE", "0.3"))


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.9 * len(xs) + 0.5) - 1)] if xs else 0.0


def timed(fn, *args):
    time.sleep(SETTLE)
    t0 = time.time()
    fn(*args)
    return time.time() - t0


def main():
    if not shutil.which("containerd") or not shutil.which("ctr"):
        print("  skipped: no containerd (scripts/deps.sh installs Debian's)")
        return
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8bc-", dir="/tmp")
    d = tempfile.mkdtemp(prefix="k8bc-c-", dir="/tmp")
    cd = None
    try:
        out(home, "daemon", "start")
        out(home, "image", "load", layout, "--tag", "python:3.12-slim")
        with open(os.path.join(d, "config.toml"), "w") as f:
            f.write('version = 2\nroot = "%s/root"\nstate = "%s/state"\n'
                    'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                    '[grpc]\n  address = "%s/c.sock"\n[ttrpc]\n  address = "%s/c.sock.ttrpc"\n'
                    % (d, d, d, d))
        with open(os.path.join(d, "shim.json"), "w") as f:
            json.dump({"home": home, "state_dir": d + "/shim"}, f)
        env = dict(os.environ, PATH=BIN + ":" + os.environ["PATH"],
                   KOSA8_SHIM_CONFIG=d + "/shim.json")
        env.pop("KOSA8_HOME", None)
        cd = subprocess.Popen(["containerd", "--config", d + "/config.toml"],
                              stdout=subprocess.DEVNULL, stderr=open(d + "/log", "w"),
                              env=env, start_new_session=True)

        def ctr(*args):
            p = subprocess.run(["ctr", "-a", d + "/c.sock"] + list(args), capture_output=True,
                               text=True)
            if p.returncode:
                raise SystemExit("ctr %s: %s" % (" ".join(args), p.stderr))
            return p

        for _ in range(100):
            if subprocess.run(["ctr", "-a", d + "/c.sock", "version"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        tar = d + "/python.tar"
        subprocess.run(["skopeo", "copy", "-q", "oci:%s:3.12-slim" % layout,
                        "docker-archive:%s:%s" % (tar, IMG)], check=True)
        ctr("image", "import", tar)
        fifo = ["--fifo-dir", d + "/fifo"]
        n = [0]

        def shim_run():
            n[0] += 1
            ctr("run", *fifo, "--rm", "--runtime", "io.containerd.kosa8.v2", IMG,
                "b%d" % n[0], "true")

        def kosa8_run():
            out(home, "sandbox", "create", "bvm", "--cpus", "1", "--memory", "512", "--disk", "2")
            out(home, "sandbox", "run", "bvm", "python:3.12-slim", "true")
            out(home, "sandbox", "rm", "bvm")

        t0 = time.time()
        shim_run()
        print("first ctr run --rm (the rootfs made a kosa8 image): %.1f s" % (time.time() - t0))
        a, b = [], []
        for _ in range(N):
            a.append(timed(shim_run))
            b.append(timed(kosa8_run))
        ma, mb = statistics.median(a), statistics.median(b)
        print("  %-44s median %6.2f s  p90 %6.2f s" % ("ctr run --rm (kosa8 runtime) true", ma,
                                                         p90(a)))
        print("  %-44s median %6.2f s  p90 %6.2f s" % ("kosa8 sandbox create + run true + rm", mb,
                                                         p90(b)))
        print("  ratio %.3f (goal: within 10%%, i.e. at most 1.10); %d rounds, load %s" %
              (ma / mb, N, open("/proc/loadavg").read().split()[0]))
    finally:
        if cd:
            cd.send_signal(signal.SIGTERM)
            cd.wait(30)
        end_home(home)
        subprocess.run(["sh", "-c", "grep -o ' %s[^ ]*' /proc/mounts | sort -r | "
                        "xargs -r -n1 umount -l" % d], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
