# SPDX-License-Identifier: Apache-2.0
# Checkpoint, rewind, pause and resume through the real CLI and VM (TCG).
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import KOSA8, daemon_pid, wait_for

HOLDER = ("import os, time\n"
          "x = os.urandom(8).hex()\n"
          "while True:\n"
          "    if os.path.exists('/ask'):\n"
          "        open('/ans.tmp', 'w').write(x); os.rename('/ans.tmp', '/ans'); os.remove('/ask')\n"
          "    time.sleep(0.05)\n")


def ask(home, sb, cid):
    """The value the holder process keeps in memory."""
    p = home("sandbox", "exec", sb, cid, "python3", "-c",
             "import os, time\n"
             "if os.path.exists('/ans'): os.remove('/ans')\n"
             "open('/ask', 'w').close()\n"
             "for i in range(200):\n"
             "    if os.path.exists('/ans'): print(open('/ans').read()); break\n"
             "    time.sleep(0.05)\n")
    return p.stdout.strip()


@pytest.fixture(scope="module")
def cksb(home, loaded):
    name = "ck"
    home("sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2", check=True)
    home("sandbox", "pull", name, loaded, check=True)
    yield name
    home("sandbox", "rm", name)


def test_rewind_restores_processes_and_disk(home, cksb, loaded):
    cid = home("sandbox", "start", cksb, loaded, "python3", "-c", HOLDER, check=True).stdout.strip()
    before = ask(home, cksb, cid)
    assert len(before) == 16
    p = home("checkpoint", cksb, "--label", "clean", "--json")
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["label"] == "clean" and info["size"] > 0
    # pause_ms is the stop..cont interval: inside the call, and not nothing (memory was saved)
    assert 0 < info["pause_ms"] <= info["ms"], info
    print("checkpoint latency: %d ms in the daemon, vCPUs stopped %d ms"
          % (info["ms"], info["pause_ms"]))
    home("sandbox", "exec", cksb, cid, "sh", "-c", "echo dirty > /dirty", check=True)
    p = home("rewind", cksb, "--to", "clean", "-y", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ms"] < 30000
    p = home("sandbox", "exec", cksb, cid, "sh", "-c", "test -e /dirty; echo $?")
    assert p.stdout.strip() == "1", "a file written after the checkpoint survived the rewind"
    assert ask(home, cksb, cid) == before, "the process lost its memory"
    ls = home.json("checkpoint", "ls", cksb)
    assert [c["label"] for c in ls] == ["clean"]
    recs = home.json("audit", "ls", "--sandbox", cksb)
    assert {"checkpoint.create", "checkpoint.rewind"} <= {r["action"] for r in recs}


def test_rewind_needs_yes_off_a_terminal(home, cksb):
    p = home("rewind", cksb, "--to", "clean")        # stdin is not a terminal here
    assert p.returncode == 2
    assert "-y" in p.stderr


def test_random_numbers_differ_after_two_rewinds(home, cksb, loaded):
    seen = set()
    for _ in range(2):
        home("rewind", cksb, "--to", "clean", "-y", check=True)
        p = home("sandbox", "run", cksb, loaded, "python3", "-c",
                 "import os; print(os.urandom(16).hex())", check=True)
        seen.add(p.stdout.strip())
    assert len(seen) == 2


def test_ten_are_kept(home, cksb):
    for i in range(10):
        p = home("checkpoint", cksb, "--label", "k%d" % i)
        assert p.returncode == 0, p.stderr
    labels = [c["label"] for c in home.json("checkpoint", "ls", cksb)]
    assert len(labels) == 10
    assert "clean" not in labels and labels[0] == "k0" and labels[-1] == "k9"
    p = home("checkpoint", cksb, "--label", "k0")
    assert p.returncode == 5 and "already has" in p.stderr
    p = home("checkpoint", "rm", cksb, "k0")
    assert p.returncode == 0
    assert len(home.json("checkpoint", "ls", cksb)) == 9
    home("rewind", cksb, "--to", "k5", "-y", check=True)


def test_pause_stops_and_resume_continues(home, cksb, loaded):
    cid = home("sandbox", "start", cksb, loaded, "python3", "-c",
               "import time\nn = 0\nwhile True:\n"
               "    n += 1; open('/n.tmp','w').write(str(n))\n"
               "    import os; os.rename('/n.tmp', '/n'); time.sleep(0.1)\n",
               check=True).stdout.strip()

    def count():
        p = home("sandbox", "exec", cksb, cid, "cat", "/n")
        return int(p.stdout) if p.returncode == 0 and p.stdout.strip().isdigit() else 0
    assert wait_for(lambda: count() > 3, 60), "the counter never started"
    c0 = count()
    # In memory: the vCPUs stop and QEMU stays (pause to disk is test_62_pause.py).
    home("sandbox", "pause", cksb, "--in-memory", check=True)
    assert [s for s in home.json("sandbox", "ls") if s["name"] == cksb][0]["state"] == "paused"
    p = home("sandbox", "exec", cksb, cid, "cat", "/n")
    assert p.returncode != 0 and "paused" in p.stderr
    # Paused for a span it would have counted ~30 in (0.1 s a step); the span is a
    # measure of the pause, not a stand-in for an event.
    time.sleep(3)
    home("sandbox", "resume", cksb, check=True)
    c1 = count()
    assert c1 - c0 < 15, "it kept counting while paused (%d -> %d)" % (c0, c1)
    assert wait_for(lambda: count() > c1 + 3, 30), "it did not count on after resume"


def test_daemon_killed_during_checkpoint_leaves_a_consistent_list(home, cksb):
    env = dict(os.environ, KOSA8_HOME=home.path)
    pid = daemon_pid(home.path)
    tmp = os.path.join(home.path, "sandboxes", cksb, "checkpoints", ".tmp-cut")
    home("checkpoint", cksb, "--label", "pre-cut", check=True)
    proc = subprocess.Popen([KOSA8, "checkpoint", cksb, "--label", "cut"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The kill must land during the checkpoint: once its memory file (or, with
    # "checkpoint_memory": "stream", its one state file) is being written (the VM
    # stopped), and before the directory was renamed into place.
    def writing():
        try:
            return os.stat(os.path.join(tmp, "memory")).st_blocks > 0
        except OSError:
            pass
        try:
            return os.path.getsize(os.path.join(tmp, "state")) > 0
        except OSError:
            return False
    assert wait_for(writing, 60, 0.002), "the checkpoint never started writing its state"
    os.kill(pid, signal.SIGKILL)
    landed_during = os.path.exists(tmp)
    out, err = proc.communicate(timeout=30)
    assert landed_during, "the checkpoint finished before the kill"
    assert proc.returncode != 0, "the CLI said the checkpoint worked: %s%s" % (out, err)
    assert err.strip(), "the CLI failed without saying why"
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10), "daemon still alive"
    home.start()
    ls = home.json("checkpoint", "ls", cksb)
    assert "pre-cut" in [c["label"] for c in ls], "a checkpoint taken before is gone: %s" % ls
    for c in ls:        # everything listed can be restored
        p = home("rewind", cksb, "--to", c["label"], "-y")
        assert p.returncode == 0, "rewind to %s: %s" % (c["label"], p.stderr)
    p = home("sandbox", "run", cksb, "python:3.12-slim", "python3", "-c", "print('ok')")
    assert p.stdout == "ok\n", p.stderr


def test_fork_is_independent_and_cheap(home, cksb, loaded):
    cid = home("sandbox", "start", cksb, loaded, "python3", "-c", HOLDER, check=True).stdout.strip()
    before = ask(home, cksb, cid)
    home("checkpoint", cksb, "--label", "fk", check=True)
    t0 = time.time()
    p = home("sandbox", "fork", cksb, "--from", "fk", "--name", "ckf1", "--json")
    wall = time.time() - t0
    assert p.returncode == 0, p.stderr
    try:
        info = json.loads(p.stdout)
        assert info["name"] == "ckf1" and info["state"] == "running"
        assert info["forked_from"] == {"sandbox": cksb, "checkpoint": "fk"}
        print("fork latency: %d ms in the daemon, %.2f s wall" % (info["ms"], wall))
        # Same memory: the held process and its value came along.
        assert ask(home, "ckf1", cid) == before
        # Independent disks, both ways.
        home("sandbox", "exec", "ckf1", cid, "sh", "-c", "echo f > /fork-only", check=True)
        home("sandbox", "exec", cksb, cid, "sh", "-c", "echo s > /source-only", check=True)
        p = home("sandbox", "exec", cksb, cid, "sh", "-c", "test -e /fork-only; echo $?")
        assert p.stdout.strip() == "1", "the source sees the fork's file"
        p = home("sandbox", "exec", "ckf1", cid, "sh", "-c", "test -e /source-only; echo $?")
        assert p.stdout.strip() == "1", "the fork sees the source's file"
        p = home("sandbox", "run", "ckf1", loaded, "python3", "-c", "print('ok')")
        assert p.stdout == "ok\n", p.stderr
        # Cheap: the frozen layers are hard links, the fork's own top holds only its writes.
        d = home.json("sandbox", "inspect", "ckf1")["dir"]
        rec = json.load(open(os.path.join(d, "sandbox.json")))
        assert rec["forked"] is True
        top = os.stat(os.path.join(d, rec["disk"]))
        layers = json.load(open(os.path.join(d, "layers.json")))
        linked = [l for l in layers if l != rec["disk"]]
        assert linked and all(os.stat(os.path.join(d, l)).st_nlink >= 2 for l in linked)
        print("fork's own top layer: %d KiB on disk" % (top.st_blocks // 2))
        assert top.st_blocks * 512 < 32 << 20
        recs = home.json("audit", "ls", "--sandbox", "ckf1")
        assert "sandbox.fork" in {r["action"] for r in recs}
    finally:
        home("sandbox", "rm", "ckf1")
    # The source still works and still has its own file.
    p = home("sandbox", "exec", cksb, cid, "sh", "-c", "cat /source-only")
    assert p.stdout.strip() == "s", p.stderr


def test_fork_errors(home, cksb):
    p = home("sandbox", "fork", cksb, "--from", "nope", "--name", "ckf2")
    assert p.returncode != 0 and "no checkpoint" in p.stderr
    p = home("sandbox", "fork", cksb, "--from", "fk", "--name", cksb)
    assert p.returncode != 0 and "already exists" in p.stderr
    p = home("sandbox", "fork", cksb, "--from", "fk")
    assert p.returncode == 2
    assert "ckf2" not in [s["name"] for s in home.json("sandbox", "ls")]


def test_fork_survives_its_source(home, loaded):
    src, fk = "fsrc", "fsrc-fork"
    home("sandbox", "create", src, "--cpus", "1", "--memory", "256", "--disk", "1", check=True)
    try:
        home("sandbox", "pull", src, loaded, check=True)
        home("sandbox", "run", src, loaded, "true", check=True)
        home("checkpoint", src, "--label", "a", check=True)
        home("checkpoint", src, "--label", "b", check=True)   # a chain of two frozen layers
        home("sandbox", "fork", src, "--from", "b", "--name", fk, check=True)
    finally:
        home("sandbox", "rm", src)
    try:
        p = home("sandbox", "run", fk, loaded, "python3", "-c", "print('ok')")
        assert p.stdout == "ok\n", p.stderr
        cid = home("sandbox", "start", fk, loaded, "sleep", "100000", check=True).stdout.strip()
        home("sandbox", "exec", fk, cid, "sh", "-c", "echo 1 > /x", check=True)
        # Checkpoint and rewind inside the fork, with its source gone.
        home("checkpoint", fk, "--label", "c", check=True)
        home("sandbox", "exec", fk, cid, "sh", "-c", "echo 2 > /x", check=True)
        home("rewind", fk, "--to", "c", "-y", check=True)
        p = home("sandbox", "exec", fk, cid, "cat", "/x")
        assert p.stdout.strip() == "1", p.stderr
    finally:
        home("sandbox", "rm", fk)
