# SPDX-License-Identifier: Apache-2.0
"""A cold rewind and a resume from disk answer once the restored machine runs (issue 27;
docs/design.md "Memory as a file", "The answer"): the guest's HELLO, version and init
(clock, RNG seed, hostname) finish behind the answer, as after a rewind through the spare,
and every request to the agent waits for them. So a command right after the answer still
finds the clock set and the RNG reseeded, and the processes of the checkpoint running."""
import json
import os
import time

import pytest

RANDOM = "import os; print(os.urandom(16).hex())"


@pytest.fixture(scope="module")
def ea(home, loaded):
    name = "ea"
    home("sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2",
         "--rewind-spare", "off", check=True, timeout=300)
    home("sandbox", "pull", name, loaded, check=True, timeout=600)
    cid = home("sandbox", "start", name, loaded, "sleep", "100000", check=True,
               timeout=300).stdout.strip()
    yield name, cid
    home("sandbox", "rm", name)


def guest_clock_off(home, name, cid):
    """(guest clock - host clock, the exec's own time), seconds: no sleep before it."""
    t0 = time.time()
    p = home("sandbox", "exec", name, cid, "date", "+%s.%N", timeout=300)
    took = time.time() - t0
    assert p.returncode == 0, p.stderr
    return float(p.stdout.strip()) - t0, took


def log_count(home, text):
    with open(os.path.join(home.path, "kosa8d.log")) as f:
        return f.read().count(text)


def test_cold_rewind_answers_before_the_init_and_a_command_waits_for_it(home, ea):
    name, cid = ea
    home("checkpoint", name, "--label", "c", check=True, timeout=300)
    time.sleep(3)       # the checkpoint's clock now stands 3 s behind the host's
    ready = log_count(home, "rewind to c: guest ready")
    randoms = []
    for _ in range(2):
        p = home("rewind", name, "--to", "c", "-y", "--json", timeout=300)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["spare"] is False       # cold: no spare kept
        # No sleep: the exec waits for the init the rewind answered before.
        off, took = guest_clock_off(home, name, cid)
        assert -1 < off < 1 + took, ("the guest's clock was not set", off, took)
        r = home("sandbox", "exec", name, cid, "python3", "-c", RANDOM, timeout=300)
        assert r.returncode == 0, r.stderr
        randoms.append(r.stdout.strip())
    assert randoms[0] != randoms[1], "the RNG was not reseeded"
    # Each answered before its guest's HELLO and init (the daemon's log says how long
    # after the answer the guest was ready); the process of the checkpoint runs on.
    assert log_count(home, "rewind to c: guest ready") == ready + 2
    info = home.json("sandbox", "inspect", name)
    assert info["state"] == "running" and info["agent_proto"] >= 1, info
    recs = [x for x in home.json("audit", "ls", "--sandbox", name)
            if x["action"] == "checkpoint.rewind"]
    assert [x["details"]["spare"] for x in recs[-2:]] == [False, False], recs[-2:]
    rec = os.path.join(home.path, "sandboxes", name, "sandbox.json")
    with open(rec) as f:
        assert "init_pending" not in json.load(f)           # the init is in, recorded


def test_resume_from_disk_answers_before_the_init(home, ea):
    name, cid = ea
    home("sandbox", "pause", name, check=True, timeout=300)
    time.sleep(3)
    ready = log_count(home, "resume: guest ready")
    p = home("sandbox", "resume", name, "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["from"] == "disk"
    off, took = guest_clock_off(home, name, cid)
    assert -1 < off < 1 + took, ("the guest's clock was not set", off, took)
    assert log_count(home, "resume: guest ready") == ready + 1
    assert home.json("sandbox", "inspect", name)["state"] == "running"
    assert not os.path.exists(os.path.join(home.path, "sandboxes", name, "paused"))
