# SPDX-License-Identifier: Apache-2.0
# e2b.py - E2B's official SDK against kosa8 (issue 28, docs/e2b.md) beside kosa8's own CLI
# doing the same, in one run, alternating, median of BENCH_N rounds:
#   Sandbox.create() to the end of the first commands.run('true')
#       vs  kosa8 sandbox create + kosa8 sandbox run IMG true
#   runCode('x = 6 * 7; x') round trip in a warm context (the interpreter keeps its state)
#       vs  kosa8 sandbox exec of the same code with python3 -c (a fresh interpreter each
#           time: what kosa8's CLI does without a context)
# Sandboxes 512 MiB / 1 vCPU. The SDK's side is timed inside node (its start-up is not
# counted, as it would not be in a program that makes many sandboxes); the CLI's side
# includes the CLI's start. Each timed call starts BENCH_SETTLE s (0.3) after the last.
# BENCH_E2B=cell: the cells only.
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from dockerapi import timed   # BENCH_SETTLE s before each timed call, as there
from k8cli import TOP, k, out, test_image

sys.path.insert(0, os.path.join(TOP, "scripts"))
import k8cache  # noqa: E402

N = int(os.environ.get("BENCH_N", "3"))
NCELL = int(os.environ.get("BENCH_N_CELL", "10"))
SETTLE = float(os.environ.get("BENCH_SETTLE", "0.3"))   # also dockerapi.timed's
IMG = "python:3.12-slim"
CODE = "x = 6 * 7; x"
HERE = os.path.dirname(os.path.abspath(__file__))


def node(e, *args):
    p = subprocess.run(["node", os.path.join(e["tmp"], "e2b_bench.mjs")] + list(args),
                       capture_output=True, text=True, env=e["env"], cwd=e["tmp"], timeout=900)
    if p.returncode:
        raise SystemExit("e2b_bench.mjs %s: %s" % (" ".join(args), p.stderr[-2000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def line(what, a, b, an, bn):
    ma, mb = statistics.median(a), statistics.median(b)
    print("  %-22s %-34s %7.3f s   %-40s %7.3f s   ratio %.2f" % (what, an, ma, bn, mb, ma / mb))


def create_and_run(home, e):
    """Sandbox.create() + the first commands.run('true') against kosa8 sandbox create + run."""
    sdk, cli, sdk_c, sdk_r = [], [], [], []
    for i in range(N):
        time.sleep(SETTLE)
        r = node(e, "create-run")
        sdk.append(r["total"])
        sdk_c.append(r["create"])
        sdk_r.append(r["run"])

        def kosa8(name="bk%d" % i):
            k(home, "sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2")
            k(home, "sandbox", "run", name, IMG, "true")
        cli.append(timed(kosa8))
        k(home, "sandbox", "rm", "bk%d" % i)
    line("create + first run", sdk, cli, "SDK create() + commands.run('true')",
         "kosa8 sandbox create + run IMG true")
    print("  %-22s SDK: create() %.3f s, commands.run('true') %.3f s (bash -l -c, as E2B)"
          % ("", statistics.median(sdk_c), statistics.median(sdk_r)))


def cells(home, e):
    """runCode in a warm context against sandbox exec of the same code (python3 -c)."""
    sid = node(e, "create")["id"]
    ctr = [c["id"] for c in json.loads(out(home, "sandbox", "ps", "e2b-" + sid, "--json"))
           if c["running"]][0]
    cells_t = node(e, "runcode", sid, str(NCELL), CODE)["times"]
    execs = []
    for _ in range(NCELL):
        execs.append(timed(k, home, "sandbox", "exec", "e2b-" + sid, ctr, "python3", "-c",
                           "x = 6 * 7; print(x)"))
    line("a cell", cells_t, execs, "runCode('%s'), warm context" % CODE,
         "kosa8 sandbox exec python3 -c (cold)")


def main():
    if not shutil.which("node") or not shutil.which("npm"):
        print("  skipped: node/npm missing (E2B's SDKs are npm packages)")
        return
    pkgs = k8cache.npm("e2b")
    home = tempfile.mkdtemp(prefix="k8be-", dir="/tmp")
    tmp = tempfile.mkdtemp(prefix="k8bej-", dir="/tmp")
    shutil.copy(os.path.join(HERE, "e2b_bench.mjs"), tmp)
    os.symlink(os.path.join(pkgs, "node_modules"), os.path.join(tmp, "node_modules"))
    with open(os.path.join(home, "config.json"), "w") as f:
        json.dump({"e2b": {"listen": "127.0.0.1:0", "templates": {
            "base": IMG, "code-interpreter-v1": IMG}, "cpus": 1, "memory_mib": 512,
            "disk_gb": 2}}, f)
    k(home, "daemon", "start")
    try:
        k(home, "image", "load", test_image(), "--tag", IMG)
        url = json.loads(out(home, "daemon", "status", "--json"))["e2b_api"]
        key = out(home, "e2b", "key", "create", "--name", "bench").strip()
        e = {"tmp": tmp, "env": dict(os.environ, E2B_API_URL=url, E2B_SANDBOX_URL=url,
                                     E2B_API_KEY=key)}
        print("  load %s; %d rounds, alternating" % (
            " ".join(open("/proc/loadavg").read().split()[:3]), N))

        if os.environ.get("BENCH_E2B", "create,cell") != "cell":
            create_and_run(home, e)
        cells(home, e)
    finally:
        k(home, "daemon", "stop", check=False)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
