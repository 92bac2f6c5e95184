# SPDX-License-Identifier: Apache-2.0
# Idle pause (docs/design.md "Idle sandboxes"): a sandbox created with --idle-pause that
# nobody uses is paused to disk by itself; looking at it (ls, inspect) is not use; a run
# resumes it with the same host limits; a running container keeps it awake; config.json's
# idle_pause is the default a sandbox's own setting (off included) overrides.
import json
import os
import time

import pytest

from conftest import host_cgroup_limits, make_sandbox, own_home, wait_for

IDLE = 2          # seconds
SEEN = {}


def me(home, name):
    return [s for s in home.json("sandbox", "ls") if s["name"] == name][0]


def idle_pauses(home, name):
    return [r for r in home.json("audit", "ls", "--sandbox", name)
            if r["action"] == "sandbox.pause" and r["details"].get("by") == "idle"]


@pytest.fixture(scope="module")
def isb(home, loaded):
    name = make_sandbox(home, "idl", "--idle-pause", "%ds" % IDLE, image=loaded)
    yield name
    home("sandbox", "rm", name, timeout=120)


def test_idle_pause_setting_is_shown_and_checked(home, isb):
    ins = home.json("sandbox", "inspect", isb)
    assert ins["idle_pause"] == {"after_s": IDLE, "from": "sandbox"}, ins
    p = home("sandbox", "create", "idl-bad", "--idle-pause", "3 weeks")
    assert p.returncode == 2 and "--idle-pause" in p.stderr, p.stderr
    p = home("sandbox", "create", "idl-bad", "--idle-pause", "31d")
    assert p.returncode == 2 and "30 days" in p.stderr, p.stderr
    assert not [s for s in home.json("sandbox", "ls") if s["name"] == "idl-bad"]


def test_idle_sandbox_pauses_to_disk_and_a_run_resumes_it(home, isb, loaded):
    p = home("sandbox", "run", isb, loaded, "python3", "-c", "print('ok')")
    assert p.returncode == 0, p.stderr
    ins = home.json("sandbox", "inspect", isb)
    qpid, limits = ins["pid"], ins["limits"]
    SEEN["cg"] = host_cgroup_limits(home, qpid, skip=False)
    SEEN["limits"] = limits

    # Inspect every half second: looking is not using, so it pauses all the same.
    def paused():
        s = home.json("sandbox", "inspect", isb)
        return s["state"] == "paused" and s.get("paused_to") == "disk"
    t0 = time.time()
    assert wait_for(paused, 60, 0.5), "an idle sandbox was not paused"
    waited = time.time() - t0
    assert waited >= IDLE - 1, "paused after %.1fs, before its idle time" % waited
    assert not os.path.exists("/proc/%d" % qpid), "QEMU still runs while paused to disk"
    # the guest's RAM as a memory file with its devices' state (docs/design.md "Memory as
    # a file"): data in it, holes for the rest
    paused = os.path.join(home.path, "sandboxes", isb, "paused")
    assert os.path.getsize(os.path.join(paused, "devices")) > 0
    assert os.stat(os.path.join(paused, "memory")).st_blocks > 0
    s = me(home, isb)
    assert s["state"] == "paused" and s["pid"] == 0, s
    recs = idle_pauses(home, isb)
    assert recs and recs[-1]["details"]["to"] == "disk", recs

    # Any use resumes by itself (what a resume keeps is test_62's).
    p = home("sandbox", "run", isb, loaded, "python3", "-c", "print('back')")
    assert p.returncode == 0 and p.stdout == "back\n", (p.stdout, p.stderr)
    res = [r for r in home.json("audit", "ls", "--sandbox", isb)
           if r["action"] == "sandbox.resume"]
    assert res and res[-1]["details"]["from"] == "disk" and res[-1]["details"]["by"] == "use"


def test_running_container_keeps_it_awake_and_limits_hold(home, isb, loaded):
    cid = home("sandbox", "start", isb, loaded, "sleep", "600", check=True,
               timeout=120).stdout.strip()
    s = home.json("sandbox", "inspect", isb)
    assert s["state"] == "running", s
    qpid = s["pid"]
    n0 = len(idle_pauses(home, isb))
    time.sleep(4 * IDLE + 2)
    s = home.json("sandbox", "inspect", isb)
    assert s["state"] == "running" and s["pid"] == qpid, "paused with a container running: %s" % s
    assert len(idle_pauses(home, isb)) == n0
    # the resumed QEMU has the limits the first one had, on the host too
    assert s["limits"] == SEEN["limits"], (s["limits"], SEEN["limits"])
    assert host_cgroup_limits(home, qpid, skip=False) == SEEN["cg"]
    home("sandbox", "stop", isb, cid, check=True, timeout=60)
    # nothing runs any more: idle again, paused again (the stop was the last use)
    assert wait_for(lambda: me(home, isb)["state"] == "paused", 60, 0.5), \
        "not paused once its container stopped"
    assert len(idle_pauses(home, isb)) == n0 + 1


@pytest.fixture(scope="module")
def dhome(python_layout):
    """A daemon of its own whose config.json sets the default idle pause."""
    yield from own_home("k8idle-", python_layout, config={"idle_pause": "2s"})


def test_daemon_default_applies_and_a_sandbox_may_refuse_it(dhome):
    st = dhome.json("daemon", "status")
    assert st["idle"]["idle_pause_s"] == 2, st["idle"]
    assert st["idle"]["ksm"]["run"] in ("0", "1", "2", "n/a"), st["idle"]
    dflt = make_sandbox(dhome, "dflt")
    never = make_sandbox(dhome, "never", "--idle-pause", "off")
    assert dhome.json("sandbox", "inspect", dflt)["idle_pause"] == {"after_s": 2, "from": "daemon"}
    assert dhome.json("sandbox", "inspect", never)["idle_pause"] == {"after_s": 0, "from": "sandbox"}
    qpid = me(dhome, never)["pid"]
    assert wait_for(lambda: me(dhome, dflt)["state"] == "paused", 60, 0.5), \
        "the daemon's idle_pause did not pause a sandbox without its own setting"
    s = me(dhome, never)
    assert s["state"] == "running" and s["pid"] == qpid, s
    # the record keeps the sandbox's own setting across a daemon restart
    with open(os.path.join(dhome.path, "sandboxes", never, "sandbox.json")) as f:
        assert json.load(f)["idle_pause_s"] == 0
