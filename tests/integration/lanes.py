#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""lanes.py - the end-to-end suite in lanes: pytest processes that run side by side, each
over its share of the test files, balanced by measured durations (docs/testing.md).

lanes.txt names every test file of this folder once: its measured seconds, the build it
runs against (plain, or san: kosa8d built with ASan+UBSan) and its group. Files of one
group share something of the host that two at once would fight over (the fixed test
network of netkit.py, the model server's port 7434) and run in one lane, in order. The
plan gives the groups and the lone files to lanes longest first, each to the lane that
ends soonest. A lane runs its plain files in one pytest process, then its san files in
another (each process has its own session daemon and shared sandbox: conftest.py).

  lanes.py run [--lanes N] [--san-bin DIR] [--report DIR] [FILE...]
        run the plan (or only FILEs); each line of output is prefixed by its lane; a
        lane's whole log and JUnit XML go to the report folder; exit 1 if a lane failed
  lanes.py plan [--lanes N]      print the plan with each lane's expected seconds
  lanes.py update XML...         rewrite lanes.txt's seconds from JUnit XML of a run
"""
import argparse
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
TABLE = os.path.join(HERE, "lanes.txt")
DEFAULT_SECONDS = 60          # a file not measured yet


def read_table():
    """[(file, seconds, build, group)] in the table's order."""
    rows = []
    with open(TABLE) as f:
        for ln in f:
            w = ln.split("#", 1)[0].split()
            if not w:
                continue
            if len(w) != 4 or w[2] not in ("plain", "san"):
                raise SystemExit("%s: bad line: %s" % (TABLE, ln.rstrip()))
            rows.append((w[0], float(w[1]), w[2], w[3]))
    return rows


def test_files():
    return sorted(f for f in os.listdir(HERE) if f.startswith("test_") and f.endswith(".py"))


def plan(rows, lanes):
    """[[(file, build)]] per lane: groups and lone files, longest first, each to the lane
    that ends soonest; within a lane, files keep the table's order."""
    units = {}
    for i, (f, s, b, g) in enumerate(rows):
        k = g if g != "-" else f
        u = units.setdefault(k, [0.0, []])
        u[0] += s
        u[1].append((i, f, b))
    load = [0.0] * lanes
    out = [[] for _ in range(lanes)]
    for k, (s, members) in sorted(units.items(), key=lambda kv: (-kv[1][0], kv[0])):
        n = load.index(min(load))
        load[n] += s
        out[n].extend(members)
    return [[(f, b) for _, f, b in sorted(lane)] for lane in out], load


def cmd_plan(a):
    rows = read_table()
    lanes, load = plan(rows, a.lanes)
    for n, lane in enumerate(lanes):
        print("lane %d (%.0f s): %s" % (n + 1, load[n], " ".join(
            f + ("[san]" if b == "san" else "") for f, b in lane)))
    return 0


class Lane(threading.Thread):
    def __init__(self, n, files, a, out_lock):
        super().__init__()
        self.n, self.files, self.a, self.lock = n, files, a, out_lock
        self.rc = 0
        self.t = 0.0

    def say(self, line):
        with self.lock:
            sys.stdout.write("[%d] %s" % (self.n, line))
            sys.stdout.flush()

    def pytest(self, build, files, log):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        tag = "lane%d-%s" % (self.n, build)
        if build == "san":
            env.update(KOSA8_BIN=self.a.san_bin, KOSA8_GUEST_DIR=os.path.join(TOP, "build", "guest"),
                       ASAN_OPTIONS="log_path=/tmp/k8san-asan:detect_leaks=0",
                       UBSAN_OPTIONS="log_path=/tmp/k8san-asan:print_stacktrace=1")
        args = ["/usr/bin/python3", "-m", "pytest", "-v", "--durations=10",
                "--junitxml=%s" % os.path.join(self.a.report, tag + ".xml")] + files
        self.say("%s: %s\n" % (build, " ".join(files)))
        p = subprocess.Popen(args, cwd=HERE, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in p.stdout:
            log.write(line)
            # the live view: results and problems; the whole output is in the lane's log
            if " PASSED" in line or " FAILED" in line or " ERROR" in line or \
               " SKIPPED" in line or line.startswith(("FAILED", "ERROR", "=")):
                self.say(line)
        return p.wait()

    def run(self):
        t0 = time.time()
        with open(os.path.join(self.a.report, "lane%d.log" % self.n), "w") as log:
            for build in ("plain", "san"):
                files = [f for f, b in self.files if b == build]
                if not files:
                    continue
                if build == "san" and not self.a.san_bin:
                    build = "plain"          # no ASan build given: everything plain
                rc = self.pytest(build, files, log)
                if rc not in (0, 5):
                    self.rc = rc
        self.t = time.time() - t0


def cmd_run(a):
    rows = read_table()
    known = {r[0] for r in rows}
    if a.files:
        missing = [f for f in a.files if f not in known]
        rows = [r for r in rows if r[0] in a.files] + \
            [(f, DEFAULT_SECONDS, "plain", "-") for f in missing]
    else:
        new = [f for f in test_files() if f not in known]
        if new:
            print("lanes: not in lanes.txt (run plain, %d s assumed): %s"
                  % (DEFAULT_SECONDS, " ".join(new)))
            rows += [(f, DEFAULT_SECONDS, "plain", "-") for f in new]
    os.makedirs(a.report, exist_ok=True)
    lanes, load = plan(rows, a.lanes)
    lock = threading.Lock()
    ts = [Lane(n + 1, files, a, lock) for n, files in enumerate(lanes) if files]
    for t in ts:
        print("lane %d: %d files, %.0f s expected" % (t.n, len(t.files), load[t.n - 1]))
        t.start()
    for t in ts:
        t.join()
    for t in ts:
        print("lane %d: %s in %.0f s (log %s/lane%d.log)" % (
            t.n, "passed" if t.rc == 0 else "FAILED", t.t, a.report, t.n))
    return 1 if any(t.rc for t in ts) else 0


def cmd_update(a):
    spent = {}
    for x in a.xml:
        for tc in ET.parse(x).iter("testcase"):
            f = tc.get("classname", "").split(".")[0] + ".py"
            spent[f] = spent.get(f, 0.0) + float(tc.get("time", 0))
    lines = []
    with open(TABLE) as f:
        for ln in f:
            w = ln.split("#", 1)[0].split()
            if w and w[0] in spent:
                ln = "%-42s %5.0f  %-5s  %s\n" % (w[0], spent[w[0]], w[2], w[3])
            lines.append(ln)
    with open(TABLE + ".tmp", "w") as f:
        f.writelines(lines)
    os.rename(TABLE + ".tmp", TABLE)
    print("lanes: %d files' seconds updated" % len(spent))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    lanes_default = int(os.environ.get("E2E_LANES", "2"))
    p = sub.add_parser("run")
    p.add_argument("--lanes", type=int, default=lanes_default)
    p.add_argument("--san-bin", default="")
    p.add_argument("--report", default=os.path.join(TOP, "build", "test-report"))
    p.add_argument("files", nargs="*")
    p = sub.add_parser("plan")
    p.add_argument("--lanes", type=int, default=lanes_default)
    p = sub.add_parser("update")
    p.add_argument("xml", nargs="+")
    a = ap.parse_args()
    return {"run": cmd_run, "plan": cmd_plan, "update": cmd_update}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
