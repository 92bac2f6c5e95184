# SPDX-License-Identifier: Apache-2.0
# checkpoint.py - checkpoint and rewind latency (issue 6) for a 1 GiB sandbox running a
# Python container, at two amounts of touched memory, so the growth is visible.
import json
import os
import statistics
import subprocess
import tempfile

import time

from k8cli import TOP, end_home, out as k, touch_memory

N = int(os.environ.get("BENCH_N", "3"))




def main():
    layout = subprocess.run([os.path.join(TOP, "scripts", "test-image.sh")], capture_output=True,
                            text=True, check=True).stdout.strip()
    home = tempfile.mkdtemp(prefix="k8c-", dir="/tmp")
    try:
        k(home, "daemon", "start")
        k(home, "image", "load", layout, "--tag", "python:3.12-slim")
        for mib in (64, 512):
            name = "m%d" % mib
            k(home, "sandbox", "create", name, "--cpus", "1", "--memory", "1024", "--disk", "2")
            k(home, "sandbox", "pull", name, "python:3.12-slim")
            used = touch_memory(home, name, mib)
            cp, rw, size = [], [], 0
            for i in range(N):
                r = json.loads(k(home, "checkpoint", name, "--label", "c%d" % i, "--json"))
                cp.append(r["ms"])
                size = r["size"]
                r = json.loads(k(home, "rewind", name, "--to", "c%d" % i, "-y", "--json"))
                rw.append(r["ms"])
            fk = []
            for i in range(N):
                t0 = time.time()
                k(home, "sandbox", "fork", name, "--from", "c0", "--name", "%s-f%d" % (name, i))
                fk.append(1000 * (time.time() - t0))
            print("1 GiB sandbox, ~%d MiB touched (guest uses %d MiB): checkpoint %d ms, "
                  "rewind %d ms, fork %d ms, state file %d MiB"
                  % (mib, used // 1024, statistics.median(cp), statistics.median(rw),
                     statistics.median(fk), size >> 20))
            for i in range(N):
                k(home, "sandbox", "rm", "%s-f%d" % (name, i))
            k(home, "sandbox", "rm", name)
        k(home, "daemon", "stop")
    finally:
        end_home(home)


if __name__ == "__main__":
    main()
