# SPDX-License-Identifier: Apache-2.0
# cp.py - kosa8 sandbox cp (docs/reference/api.md "Copying files"): one 64 MiB file and a folder of
# 1000 small files, out of a running container and back in, on a 1 vCPU / 512 MiB
# sandbox; median of BENCH_N rounds, and kosa8d's RSS afterwards (the tar is streamed,
# never held whole).
import os
import statistics
import subprocess
import tempfile
import time

from k8cli import end_home, k, out, rss_kib, test_image

N = int(os.environ.get("BENCH_N", "3"))
SETUP = ("head -c 67108864 /dev/urandom > /big; mkdir -p /many; i=0; "
         "while [ $i -lt 1000 ]; do echo $i > /many/f$i; i=$((i+1)); done; "
         "touch /ready; exec sleep 100000")


def timed(home, *args):
    t0 = time.time()
    out(home, *args)
    return time.time() - t0


def main():
    layout = test_image()
    home = tempfile.mkdtemp(prefix="k8c-", dir="/tmp")
    local = tempfile.mkdtemp(prefix="k8c-l-", dir="/tmp")
    try:
        out(home, "daemon", "start")
        out(home, "image", "load", layout, "--tag", "python:3.12-slim")
        out(home, "sandbox", "create", "c", "--cpus", "1", "--memory", "512", "--disk", "2")
        out(home, "sandbox", "pull", "c", "python:3.12-slim")
        cid = out(home, "sandbox", "start", "c", "python:3.12-slim", "sh", "-c", SETUP).strip()
        while k(home, "sandbox", "exec", "c", cid, "test", "-e", "/ready", check=False).returncode:
            time.sleep(1)
        res = {"out 64 MiB": [], "in 64 MiB": [], "out 1000 files": [], "in 1000 files": []}
        for i in range(N):
            res["out 64 MiB"].append(timed(home, "sandbox", "cp", "c:%s:/big" % cid,
                                           os.path.join(local, "big")))
            res["in 64 MiB"].append(timed(home, "sandbox", "cp", os.path.join(local, "big"),
                                          "c:%s:/big%d" % (cid, i)))
            res["out 1000 files"].append(timed(home, "sandbox", "cp", "c:%s:/many" % cid, local))
            res["in 1000 files"].append(timed(home, "sandbox", "cp", os.path.join(local, "many"),
                                              "c:%s:/many%d" % (cid, i)))
            subprocess.run(["rm", "-rf", os.path.join(local, "many")], check=True)
        print("1 vCPU / 512 MiB sandbox, median of %d:" % N)
        for what, v in res.items():
            mb = 64 if "64" in what else None
            print("  %-15s %6.2f s%s" % (what, statistics.median(v),
                                         " (%.1f MiB/s)" % (mb / statistics.median(v)) if mb else ""))
        with open(os.path.join(home, "kosa8d.lock")) as f:
            print("  kosa8d RSS after: %d MiB" % (rss_kib(int(f.read().strip())) // 1024))
    finally:
        end_home(home)
        subprocess.run(["rm", "-rf", local])


if __name__ == "__main__":
    main()
