# SPDX-License-Identifier: Apache-2.0
# install.py - from an empty machine to the first sandbox, from a release (issue 33; goal:
# under 2 minutes). The machine is a fresh Debian (tests/integration/installkit.py's
# FreshRoot: minbase, curl, systemd, man-db; kosa8's packages in apt's cache, not
# installed: "packages already cached by apt"); the release is this build's `make dist`,
# signed with a throwaway key, served over HTTP on 127.0.0.1. Timed, wall clock, per run:
#
#   install   curl -fsSL URL/install.sh | sh: fetch, signature, checksum, apt-get install
#             from the cache, the files, the group, the service enabled
#   start     the unit's ExecStart, run as systemd runs it (systemd does not run this
#             machine), until it says READY=1: the accelerator probe, adoption, sockets
#   create    a member of the group kosa8: kosa8 sandbox create (the VM booted, its agent
#             answering) - the first sandbox
#   image     kosa8 image load of the python test image (stands in for a registry's pull)
#   run       kosa8 sandbox pull, then sandbox run ... python3 -c 'print(6*7)'
#
# BENCH_N runs (default 3), each on a fresh machine; a run with --no-guest (the first start
# fetches the guest image) is added with BENCH_NO_GUEST=1. Medians are printed.
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import installkit as ik  # noqa: E402
from conftest import TOP  # noqa: E402

N = int(os.environ.get("BENCH_N", "3"))
NO_GUEST = os.environ.get("BENCH_NO_GUEST") == "1"


def layout():
    p = subprocess.run([os.path.join(TOP, "scripts", "test-image.sh")], capture_output=True,
                       text=True, timeout=1800, check=True)
    return p.stdout.strip().splitlines()[-1]


def one(srv, rel, lay, no_guest):
    root = ik.FreshRoot(["openssl"] + ik.depends(rel), layout=lay)
    logdir = tempfile.mkdtemp(prefix="k8bench-")
    svc = None
    t = {}
    try:
        t0 = time.time()
        p = root.sh("curl -fsSL %s/rel/install.sh | sh%s" %
                    (srv.url, " -s -- --no-guest" if no_guest else ""), timeout=900)
        assert p.returncode == 0, p.stderr
        t["install"] = time.time() - t0
        root.run(["useradd", "-m", "-G", "kosa8", "alice"], check=True)
        t1 = time.time()
        svc = ik.Service(root, os.path.join(logdir, "kosa8d.log"))
        assert svc.wait_ready(600), "no READY=1"
        t["start"] = time.time() - t1
        t1 = time.time()
        root.run(["kosa8", "sandbox", "create", "first", "--cpus", "1", "--memory", "512",
                  "--disk", "2"], user="alice", check=True)
        t["create"] = time.time() - t1
        t["first sandbox"] = time.time() - t0
        t1 = time.time()
        root.run(["kosa8", "image", "load", "/srv/python-oci", "--tag", "python:3.12-slim"],
                 user="alice", check=True)
        t["image"] = time.time() - t1
        t1 = time.time()
        root.run(["kosa8", "sandbox", "pull", "first", "python:3.12-slim"], user="alice",
                 check=True)
        p = root.run(["kosa8", "sandbox", "run", "first", "python:3.12-slim", "python3", "-c",
                      "print(6*7)"], user="alice", check=True)
        assert p.stdout.strip() == "42", p.stdout
        t["run"] = time.time() - t1
        t["first run"] = time.time() - t0
    finally:
        if svc:
            svc.stop()
        root.close()
        subprocess.run(["rm", "-rf", logdir])
    return t


def main():
    r = ik.Release()
    srv, rel = r.srv, r.dir
    lay = layout()
    with open("/proc/loadavg") as f:
        print("host load before: %s" % f.read().split()[0])
    variants = [("release tarball (guest inside)", False)]
    if NO_GUEST:
        variants.append(("--no-guest (the first start fetches it)", True))
    try:
        for name, ng in variants:
            runs = [one(srv, rel, lay, ng) for _ in range(N)]
            print("%s, N=%d, seconds (median, min-max):" % (name, N))
            for k in runs[0]:
                v = [r[k] for r in runs]
                print("  %-14s %6.1f  (%.1f-%.1f)" % (k, statistics.median(v), min(v), max(v)))
    finally:
        r.close()
    with open("/proc/loadavg") as f:
        print("host load after: %s" % f.read().split()[0])


if __name__ == "__main__":
    main()
