# SPDX-License-Identifier: Apache-2.0
# Free page reporting (docs/design.md "Free page reporting"): a VM's 8th virtio-mmio
# transport is a virtio-balloon (config.json "free_page_reporting", on by default) or the
# virtio-rng it replaces. A saved state holds its device set, so every restore (rewind,
# resume, fork) starts the machine the state was saved on, whatever the setting says now;
# a checkpoint of an older kosa8 (no "machine" in meta.json) still loads, one whose
# "machine" is damaged is refused and the sandbox keeps running. With the balloon, memory
# the guest frees goes back to the host.
import json
import os
import time

import pytest

from conftest import make_sandbox, own_home, wait_for
from memkit import rss_mib

PY = "python:3.12-slim"


@pytest.fixture(scope="module")
def bh(python_layout):
    # the machine of before: no balloon, no RTC ("rtc": docs/design.md "Guest image")
    yield from own_home("k8b-", python_layout, config={"free_page_reporting": False,
                                                       "rtc": False})


def set_reporting(h, on):
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump({"free_page_reporting": on, "rtc": on}, f)


def device(h, name):
    """The 8th transport's device on the command line that opens qemu.log."""
    with open(os.path.join(h.path, "sandboxes", name, "qemu.log")) as f:
        line = f.readline()
    has_b, has_r = "virtio-balloon-device" in line, "virtio-rng-device" in line
    assert has_b != has_r, line
    return "balloon" if has_b else "rng"


def has_rtc(h, name):
    """Whether the machine on the command line that opens qemu.log has the CMOS RTC."""
    with open(os.path.join(h.path, "sandboxes", name, "qemu.log")) as f:
        line = f.readline()
    assert ("rtc=on" in line) != ("rtc=off" in line), line
    return "rtc=on" in line


def meta_path(h, name, label):
    return os.path.join(h.path, "sandboxes", name, "checkpoints", label, "meta.json")


def edit_meta(h, name, label, fn):
    p = meta_path(h, name, label)
    with open(p) as f:
        m = json.load(f)
    fn(m)
    with open(p, "w") as f:
        json.dump(m, f)


def sh(h, name, cid, cmd):
    p = h("sandbox", "exec", name, cid, "sh", "-c", cmd, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def started(h, name):
    p = h("sandbox", "start", name, PY, "sleep", "infinity", timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


SEEN = {}


def test_restores_keep_the_machine_they_were_saved_on(bh):
    old = make_sandbox(bh, "mold", image=PY)
    assert device(bh, old) == "rng"
    cid = SEEN["cid"] = started(bh, old)
    sh(bh, old, cid, "echo one > /mark")
    bh("checkpoint", old, "--label", "c1", check=True, timeout=300)
    with open(meta_path(bh, old, "c1")) as f:
        assert json.load(f)["machine"] == {"balloon": False, "rtc": False}
    # As a kosa8 from before the balloon wrote it: no "machine" at all.
    edit_meta(bh, old, "c1", lambda m: m.pop("machine"))
    set_reporting(bh, True)
    sh(bh, old, cid, "echo two > /mark")
    p = bh("rewind", old, "--to", "c1", "-y", timeout=300)
    assert p.returncode == 0, p.stderr
    assert device(bh, old) == "rng" and not has_rtc(bh, old)
    assert sh(bh, old, cid, "cat /mark") == "one"
    # Paused to disk and back: still the machine it runs on, not the setting's.
    bh("sandbox", "pause", old, check=True, timeout=300)
    bh("sandbox", "resume", old, check=True, timeout=300)
    assert device(bh, old) == "rng"
    assert sh(bh, old, cid, "cat /mark") == "one"
    # A fork of the old checkpoint too.
    bh("sandbox", "fork", old, "--from", "c1", "--name", "mfork", check=True, timeout=300)
    assert device(bh, "mfork") == "rng"
    assert sh(bh, "mfork", cid, "cat /mark") == "one"
    bh("sandbox", "rm", "mfork", check=True, timeout=120)
    # A new boot takes the setting; its checkpoints say so and restore with it.
    new = make_sandbox(bh, "mnew", image=PY)
    assert device(bh, new) == "balloon" and has_rtc(bh, new)
    ncid = started(bh, new)
    sh(bh, new, ncid, "echo new > /mark")
    bh("checkpoint", new, "--label", "c2", check=True, timeout=300)
    with open(meta_path(bh, new, "c2")) as f:
        assert json.load(f)["machine"] == {"balloon": True, "rtc": True}
    set_reporting(bh, False)
    sh(bh, new, ncid, "echo later > /mark")
    bh("rewind", new, "--to", "c2", "-y", check=True, timeout=300)
    assert device(bh, new) == "balloon" and has_rtc(bh, new)
    assert sh(bh, new, ncid, "cat /mark") == "new"
    bh("sandbox", "rm", new, check=True, timeout=120)


def test_a_damaged_machine_record_is_refused_and_nothing_changes(bh):
    name = "mold"
    before = bh.json("sandbox", "inspect", name)
    edit_meta(bh, name, "c1", lambda m: m.update(machine={"balloon": "yes"}))
    p = bh("rewind", name, "--to", "c1", "-y", timeout=300)
    assert p.returncode != 0
    assert "machine" in p.stderr and "damaged" in p.stderr, p.stderr
    after = bh.json("sandbox", "inspect", name)
    assert after["state"] == "running" and after["pid"] == before["pid"], after
    assert sh(bh, name, SEEN["cid"], "cat /mark") == "one"
    bh("sandbox", "rm", name, check=True, timeout=120)


def test_memory_the_guest_frees_goes_back_to_the_host(bh):
    set_reporting(bh, True)
    name = make_sandbox(bh, "mfree", image=PY)
    assert device(bh, name) == "balloon"
    pid = bh.json("sandbox", "inspect", name)["pid"]
    # A process touches 200 MiB, is measured while it holds them, then exits.
    p = bh("sandbox", "start", name, PY, "python3", "-c",
           "import time\nb = bytearray(200 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
           "open('/tmp/full', 'w').close()\ntime.sleep(3600)", timeout=300)
    assert p.returncode == 0, p.stderr
    cid = p.stdout.strip()
    wait_for(lambda: rss_mib(pid) > 300, timeout=120)
    # The peak once the touching is done (RSS steady for a second), not its first reading.
    last = [0]

    def steady():
        prev, last[0] = last[0], rss_mib(pid)
        return abs(last[0] - prev) < 2
    wait_for(steady, timeout=60, step=1)
    peak = rss_mib(pid)
    bh("sandbox", "stop", name, cid, timeout=120)
    # The guest reports free blocks about 2 s after they gather; QEMU discards them. Half
    # of the 200 MiB at least (reporting works on 2 MiB blocks; without it nothing comes
    # back, bench/idlecpu.py: 387 MiB against 191).
    assert wait_for(lambda: rss_mib(pid) < peak - 100, timeout=60), \
        "QEMU's RSS stayed at %d MiB (peak %d)" % (rss_mib(pid), peak)
    bh("sandbox", "rm", name, check=True, timeout=120)
