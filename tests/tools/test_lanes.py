# SPDX-License-Identifier: Apache-2.0
"""tests/integration/lanes.py: lanes.txt names every end-to-end file once, and the plan
runs each file once, a group's files in one lane, with the lanes' loads balanced."""
import os
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
import lanes  # noqa: E402


def test_table_names_every_file_once():
    rows = lanes.read_table()
    names = [r[0] for r in rows]
    assert sorted(names) == lanes.test_files(), \
        "lanes.txt and tests/integration differ: add or remove the file's line"
    assert len(set(names)) == len(names), "a file is named twice"


def test_plan_keeps_groups_together_and_balances():
    rows = [("a.py", 100, "plain", "g"), ("b.py", 100, "san", "g"), ("c.py", 150, "plain", "-"),
            ("d.py", 40, "plain", "-"), ("e.py", 10, "san", "-")]
    plan, load = lanes.plan(rows, 2)
    placed = [f for lane in plan for f, _ in lane]
    assert sorted(placed) == ["a.py", "b.py", "c.py", "d.py", "e.py"]
    lane_of = {f: n for n, lane in enumerate(plan) for f, _ in lane}
    assert lane_of["a.py"] == lane_of["b.py"]
    assert sorted(load) == [200, 200]
    # within a lane, the table's order
    for lane in plan:
        assert [f for f, _ in lane] == sorted(f for f, _ in lane)
    assert lanes.plan(rows, 1)[1] == [400]
