#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""report.py - the table scripts/test.sh prints at its end: each stage's wall time (the
background ones beside the others), the end-to-end lanes, the ten slowest end-to-end
tests and the ten slowest files, from the run's report folder (stages.txt, JUnit XML).

    tests/report.py build/test-report
"""
import glob
import os
import sys
import xml.etree.ElementTree as ET


def main(report):
    rows = []
    if os.path.exists(os.path.join(report, "stages.txt")):
        with open(os.path.join(report, "stages.txt")) as f:
            rows = [(w[0], int(w[1]), int(w[2]), int(w[3])) for w in map(str.split, f)
                    if len(w) == 4]
    if rows:
        stage_table(rows)
    tests_table(report)
    return 0


def stage_table(rows):
    t0 = min(r[1] for r in rows)
    bg = {"kernel", "fixtures"}
    print("\n== stages (wall seconds; background stages ran beside the ones below them)")
    print("%-10s %7s %7s %7s  %s" % ("stage", "start", "end", "wall", "result"))
    for name, s, e, rc in sorted(rows, key=lambda r: (r[1], r[2], r[0])):
        print("%-10s %7d %7d %7d  %s%s" % (name, s - t0, e - t0, e - s,
                                          "ok" if rc == 0 else "FAILED (%d)" % rc,
                                          "  (background)" if name in bg else ""))
    end = max(r[2] for r in rows)
    print("%-10s %7s %7d %7d  (%.1f min)" % ("all", "", end - t0, end - t0, (end - t0) / 60.0))


def tests_table(report):
    tests, files = [], {}
    for x in sorted(glob.glob(os.path.join(report, "*.xml"))):
        lane = os.path.basename(x)[:-4]
        try:
            root = ET.parse(x).getroot()
        except ET.ParseError:
            continue
        for tc in root.iter("testcase"):
            t = float(tc.get("time", 0))
            name = "%s::%s" % (tc.get("classname", "").split(".")[0] + ".py", tc.get("name"))
            tests.append((t, name, lane))
            k = (name.split("::")[0], lane)
            files[k] = files.get(k, 0.0) + t
    if tests:
        print("\n== the ten slowest end-to-end tests (setup + call + teardown)")
        for t, name, lane in sorted(tests, reverse=True)[:10]:
            print("%7.1f s  %s  [%s]" % (t, name, lane))
        print("\n== the ten slowest end-to-end files")
        for (f, lane), t in sorted(files.items(), key=lambda kv: -kv[1])[:10]:
            print("%7.1f s  %s  [%s]" % (t, f, lane))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/test-report"))
