# SPDX-License-Identifier: Apache-2.0
"""Two homes whose jail_uids ranges overlap at an offset that is not a multiple of a
block (issue 34): claims are per uid across homes, so no uid ever serves two sandboxes.
Before, blocks were claimed by their first uid only, and the second home's block
started inside the first's: its QEMU ran as the first sandbox's kosa8-fs uid."""
import json
import os
import shutil

import pytest

from conftest import Home, new_home

pytestmark = pytest.mark.hostile

# Far from the defaults other daemons on this host use: jail_uids 720000-851071 and
# unpack_uids 851072-916607 (the image unpacker's user namespace).
A_RANGE, B_RANGE = "950000-950007", "950002-950009"      # two blocks each, 2 uids apart


def qemu_uid(h, name):
    with open(os.path.join(h.path, "sandboxes", name, "sandbox.json")) as f:
        pid = json.load(f)["pid"]
    with open("/proc/%d/status" % pid) as f:
        uid = [l.split()[1] for l in f if l.startswith("Uid:")][0]
    return int(uid)


def home_with(prefix, jail_uids):
    h = Home(new_home(prefix))
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump({"jail_uids": jail_uids}, f)
    h.start()
    return h


def create(h, name):
    return h("sandbox", "create", name, "--cpus", "1", "--memory", "256", "--disk", "1",
             timeout=300)


@pytest.fixture
def two_homes():
    a = home_with("k8ua-", A_RANGE)
    b = home_with("k8ub-", B_RANGE)
    yield a, b
    for h in (a, b):
        for s in h.json("sandbox", "ls"):
            h("sandbox", "rm", s["name"], timeout=120)
        h.stop()
        shutil.rmtree(h.path, ignore_errors=True)


def test_overlapping_ranges_never_share_a_uid(two_homes):
    a, b = two_homes
    p = create(a, "ua1")
    assert p.returncode == 0, p.stderr
    p = create(b, "ub1")
    assert p.returncode == 0, p.stderr
    qa, qb = qemu_uid(a, "ua1"), qemu_uid(b, "ub1")
    assert qa == 950000, qa
    # each sandbox holds four uids from its QEMU's on (QEMU, kosa8-net, kosa8-fs, broker)
    assert not set(range(qa, qa + 4)) & set(range(qb, qb + 4)), (qa, qb)
    assert qb == 950006, qb          # B's first block straddles A's: skipped

    # A's second block (950004-950007) holds B's sandbox's uids now: refused, naming it
    p = create(a, "ua2")
    assert p.returncode != 0, p.stdout
    assert "every uid block of jail_uids is in use" in p.stderr, p.stderr
    assert os.path.join(b.path, "sandboxes", "ub1") in p.stderr, p.stderr
    assert "overlap" in p.stderr, p.stderr
    assert not [s for s in a.json("sandbox", "ls") if s["name"] == "ua2"]

    # B's sandbox gone, its four claims go with it: A's second block is free
    b("sandbox", "rm", "ub1", check=True, timeout=120)
    p = create(a, "ua2")
    assert p.returncode == 0, p.stderr
    assert qemu_uid(a, "ua2") == 950004
