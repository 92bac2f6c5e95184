# SPDX-License-Identifier: Apache-2.0
# Pause to disk (QEMU ends, the machine is saved under the sandbox's paused/) and resume,
# by `resume` and by use; across a daemon kill -9; --in-memory still only stops vCPUs.
import json
import os
import signal

import pytest

from conftest import daemon_pid, host_cgroup_limits, wait_for

# Counts in memory and appends each count as a line: after a resume the count goes on
# from where it was (its memory survived) and the file holds 1..N with no gap or repeat.
COUNTER = ("import os, time\n"
           "n = 0\n"
           "f = open('/count', 'a')\n"
           "while True:\n"
           "    n += 1; f.write('%d\\n' % n); f.flush(); time.sleep(0.1)\n")


@pytest.fixture(scope="module")
def psb(home, loaded):
    name = "pz"
    home("sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2",
         check=True, timeout=300)
    home("sandbox", "pull", name, loaded, check=True, timeout=600)
    yield name
    home("sandbox", "rm", name, timeout=120)


def me(home, name):
    return [s for s in home.json("sandbox", "ls") if s["name"] == name][0]


def lines(home, sb, cid, strict=True):
    p = home("sandbox", "exec", sb, cid, "cat", "/count")
    if not strict and "No such file" in p.stderr:     # not written yet
        return []
    assert p.returncode == 0, p.stderr
    return [int(x) for x in p.stdout.split()]


def whole(seq):
    return seq == list(range(1, len(seq) + 1))


def start_counter(home, sb, loaded):
    cid = home("sandbox", "start", sb, loaded, "python3", "-c", COUNTER,
               check=True).stdout.strip()
    assert wait_for(lambda: len(lines(home, sb, cid, False)) > 5, 60), "the counter never started"
    return cid


def test_pause_to_disk_ends_qemu_and_resume_continues(home, psb, loaded):
    cid = start_counter(home, psb, loaded)
    before = home.json("sandbox", "inspect", psb)
    qpid = before["pid"]
    limits = host_cgroup_limits(home, qpid, skip=False)
    out = home.json("sandbox", "pause", psb)
    assert out["to"] == "disk", out
    assert not os.path.exists("/proc/%d" % qpid), "QEMU still runs while paused to disk"
    s = me(home, psb)
    assert s["state"] == "paused" and s["paused_to"] == "disk" and s["pid"] == 0, s
    # the guest's RAM as a memory file with its devices' state (docs/design.md "Memory as
    # a file"): data in it, holes for the rest
    paused = os.path.join(home.path, "sandboxes", psb, "paused")
    assert os.path.getsize(os.path.join(paused, "devices")) > 0
    assert os.stat(os.path.join(paused, "memory")).st_blocks > 0
    out = home.json("sandbox", "resume", psb)
    assert out["from"] == "disk", out
    s = me(home, psb)
    assert s["state"] == "running" and "paused_to" not in s, s
    assert not os.path.exists(os.path.join(home.path, "sandboxes", psb, "paused"))
    after = home.json("sandbox", "inspect", psb)
    assert after["pid"] != qpid
    # the same limits on the new QEMU
    assert after["limits"] == before["limits"], (before["limits"], after["limits"])
    assert host_cgroup_limits(home, after["pid"], skip=False) == limits
    seen = lines(home, psb, cid)
    assert wait_for(lambda: len(lines(home, psb, cid)) > len(seen) + 3, 30), \
        "it did not count on after the resume"
    seq = lines(home, psb, cid)
    assert whole(seq), "the count restarted or lost lines: %s" % seq[-40:]
    recs = [r for r in home.json("audit", "ls", "--sandbox", psb)
            if r["action"] in ("sandbox.pause", "sandbox.resume")]
    assert recs[-2]["details"]["to"] == "disk" and recs[-1]["details"]["from"] == "disk", recs
    home("sandbox", "stop", psb, cid)


def test_run_resumes_a_sandbox_paused_to_disk(home, psb, loaded):
    cid = start_counter(home, psb, loaded)
    home("sandbox", "pause", psb, check=True)
    assert me(home, psb)["state"] == "paused"
    # kosa8-net stays while paused: a policy change reaches it, not only the record
    eg = home.json("sandbox", "egress", psb, "--allow", "example.org")
    assert eg["applied"] == "live", eg
    p = home("sandbox", "run", psb, loaded, "python3", "-c", "print('back')")
    assert p.returncode == 0 and p.stdout == "back\n", p.stderr
    assert me(home, psb)["state"] == "running"
    eg = home.json("sandbox", "egress", psb)
    assert eg["network"] == "up" and "example.org" in eg["rules"], eg
    home("sandbox", "egress", psb, "--remove", "example.org", check=True)
    # exec (on the counter) resumes by itself too: pause again and use it
    home("sandbox", "pause", psb, check=True)
    seq = lines(home, psb, cid)
    assert me(home, psb)["state"] == "running"
    assert whole(seq), seq[-40:]
    recs = [r for r in home.json("audit", "ls", "--sandbox", psb)
            if r["action"] == "sandbox.resume"]
    assert recs[-1]["details"]["by"] == "use", recs[-1]
    home("sandbox", "stop", psb, cid)


def test_paused_sandbox_survives_daemon_kill9(home, psb, loaded):
    cid = start_counter(home, psb, loaded)
    home("sandbox", "pause", psb, check=True)
    pid = daemon_pid(home.path)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10), "kill -9 did not end it"
    home.start()
    s = me(home, psb)
    assert s["state"] == "paused" and s["paused_to"] == "disk", s
    home("sandbox", "resume", psb, check=True)
    seq = lines(home, psb, cid)
    n0 = len(seq)
    assert wait_for(lambda: len(lines(home, psb, cid)) > n0 + 3, 30), "it did not count on"
    seq = lines(home, psb, cid)
    assert whole(seq), "the count restarted or lost lines: %s" % seq[-40:]
    home("sandbox", "stop", psb, cid)


def test_in_memory_pause_keeps_qemu(home, psb, loaded):
    cid = start_counter(home, psb, loaded)
    qpid = home.json("sandbox", "inspect", psb)["pid"]
    out = home.json("sandbox", "pause", psb, "--in-memory")
    assert out["to"] == "memory", out
    s = me(home, psb)
    assert s["state"] == "paused" and s["paused_to"] == "memory", s
    assert os.path.exists("/proc/%d" % qpid)
    p = home("sandbox", "exec", psb, cid, "cat", "/count")
    assert p.returncode != 0 and "paused" in p.stderr
    # from memory to disk, then back
    assert home.json("sandbox", "pause", psb)["to"] == "disk"
    assert not os.path.exists("/proc/%d" % qpid)
    home("sandbox", "resume", psb, check=True)
    assert whole(lines(home, psb, cid))
    home("sandbox", "stop", psb, cid)


def test_paused_sandbox_survives_daemon_stop_as_after_a_reboot(home, psb, loaded):
    """A daemon stop ends the paused sandbox's sidecars too, which leaves what a host
    reboot leaves: sandbox.json and paused/ on disk, no process. Resume starts anew."""
    cid = start_counter(home, psb, loaded)
    home("sandbox", "pause", psb, check=True)
    with open(os.path.join(home.path, "sandboxes", psb, "sandbox.json")) as f:
        sc = json.load(f)["sidecars"]
    # The daemon stop stops every VM of this session's home: the shared sandbox boots again
    # below, so the tests after this one find it as they expect (running).
    others = [s["name"] for s in home.json("sandbox", "ls")
              if s["state"] == "running" and s["name"] != psb]
    home.stop()
    try:
        for role in ("net", "fs"):
            pid = sc[role]["pid"]
            assert not pid or wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10), role
        home.start()
        s = me(home, psb)
        assert s["state"] == "paused" and s["paused_to"] == "disk", s
        home("sandbox", "resume", psb, check=True)
        n0 = len(lines(home, psb, cid))
        assert wait_for(lambda: len(lines(home, psb, cid)) > n0 + 3, 30), "it did not count on"
        assert whole(lines(home, psb, cid))
        assert home.json("sandbox", "egress", psb)["network"] == "up"
        home("sandbox", "stop", psb, cid)
    finally:
        home.start()
        for name in others:   # a pull boots a stopped sandbox (docs/reference/cli.md)
            home("sandbox", "pull", name, loaded, check=True, timeout=600)
