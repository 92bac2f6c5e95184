# SPDX-License-Identifier: Apache-2.0
# The agent protocol version across an upgrade (docs/protocol.md, "Versions"): a
# checkpoint holds the agent of the day it was taken, and a rewind brings that agent back.
#
# Guests whose agent speaks another version come from `make proto-variants`:
# build/proto/guest1 (an agent of version 1 only, as every agent before the handshake),
# build/proto/guest3 (an agent of version 3 only, a future one) and build/bin/kosa8d-proto3
# (a kosa8d that also speaks 3, to take checkpoints of that agent).
import json
import os
import shutil
import signal
import subprocess

import pytest

from conftest import BIN, TOP, Home, daemon_pid, make_sandbox, new_home, run, wait_for
from test_60_checkpoint import HOLDER, ask

GUEST1 = os.path.join(TOP, "build", "proto", "guest1")
GUEST3 = os.path.join(TOP, "build", "proto", "guest3")
KOSA8D3 = os.path.join(BIN, "kosa8d-proto3")


@pytest.fixture(scope="module", autouse=True)
def variants():
    p = subprocess.run(["make", "-s", "-C", TOP, "proto-variants"], capture_output=True,
                       text=True, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr


def start(h, **env):
    run(["daemon", "start"], h.path, check=True, timeout=200, env_extra=env)


def meta_path(h, sb, label):
    d = h.json("sandbox", "inspect", sb)["dir"]
    return os.path.join(d, "checkpoints", label, "meta.json")


def strip_agent_proto(path):
    """meta.json as a kosa8 from before the handshake wrote it."""
    with open(path) as f:
        m = json.load(f)
    for k in ("agent_proto", "agent_proto_min", "agent_proto_max"):
        m.pop(k, None)
    with open(path, "w") as f:
        json.dump(m, f)
    return m


def actions(h, sb):
    return [r["action"] for r in h.json("audit", "ls", "--sandbox", sb)]


@pytest.fixture
def home3():
    h = Home(new_home("k8v-"))
    yield h
    h.stop()
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(h.path, ignore_errors=True)


def test_old_checkpoint_is_spoken_to_in_its_version(home3, python_layout):
    """A checkpoint taken with a version 1 agent rewinds under the upgraded kosa8, which
    speaks 1 to it; processes and `run` work."""
    h = home3
    start(h, KOSA8_GUEST_DIR=GUEST1)
    h("image", "load", python_layout, "--tag", "python:3.12-slim", check=True, timeout=600)
    sb = make_sandbox(h, "old")
    assert h.json("sandbox", "inspect", sb)["agent_proto"] == 1
    cid = h("sandbox", "start", sb, "python:3.12-slim", "python3", "-c", HOLDER,
            check=True).stdout.strip()
    before = ask(h, sb, cid)
    assert len(before) == 16
    h("checkpoint", sb, "--label", "v1", check=True, timeout=300)
    meta = strip_agent_proto(meta_path(h, sb, "v1"))
    assert meta["label"] == "v1"
    h.stop()

    start(h)                                   # the upgrade: this kosa8's own guest
    p = h("rewind", sb, "--to", "v1", "-y", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    info = h.json("sandbox", "inspect", sb)
    assert info["state"] == "running" and info["agent_proto"] == 1
    assert ask(h, sb, cid) == before, "the rewound process lost its memory"
    p = h("sandbox", "run", sb, "python:3.12-slim", "python3", "-c", "print(6 * 7)",
          timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "42", p.stdout + p.stderr
    assert "checkpoint.rewind" in actions(h, sb)


def test_agent_out_of_range_is_refused_at_boot_and_rewind(home3):
    h = home3
    # A checkpoint of an agent that speaks only 3, taken by a kosa8d that speaks 3.
    start(h, KOSA8D=KOSA8D3, KOSA8_GUEST_DIR=GUEST3)
    h("sandbox", "create", "fut", "--cpus", "1", "--memory", "256", "--disk", "1",
      check=True, timeout=300)
    assert h.json("sandbox", "inspect", "fut")["agent_proto"] == 3
    h("checkpoint", "fut", "--label", "v3", check=True, timeout=300)
    mp = meta_path(h, "fut", "v3")
    with open(mp) as f:
        meta = json.load(f)
    assert (meta["agent_proto_min"], meta["agent_proto_max"]) == (3, 3)
    vm = h.json("sandbox", "inspect", "fut")["pid"]

    # Adoption: that kosa8d dies, its VM runs on, and this kosa8d cannot speak to it.
    pid = daemon_pid(h.path)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10), "kill -9 did not end it"
    start(h, KOSA8_GUEST_DIR=GUEST3)
    info = h.json("sandbox", "inspect", "fut")
    assert info["state"] == "failed", info
    assert "speaks protocol 3; this kosa8d speaks 1..2" in info["error"], info["error"]
    assert wait_for(lambda: not os.path.exists("/proc/%d" % vm), 10), "the VM still runs"
    top = h.json("sandbox", "inspect", "fut")["disk_top"]   # adoption read it from QEMU
    assert top == "scratch.qcow2" or (top.startswith("layer-") and top.endswith(".qcow2")), top

    # Boot: this kosa8d with a guest image whose agent it cannot speak to.
    p = h("sandbox", "create", "x", "--cpus", "1", "--memory", "256", "--disk", "1",
          timeout=300)
    assert p.returncode != 0
    assert "speaks protocol 3; this kosa8d speaks 1..2" in p.stderr, p.stderr
    assert "rebuild it" in p.stderr
    assert not any(s["name"] == "x" for s in h.json("sandbox", "ls"))
    h.stop()

    # Rewind: refused before anything is touched (meta.json names the agent's version).
    start(h)
    state = h.json("sandbox", "inspect", "fut")["state"]
    p = h("rewind", "fut", "--to", "v3", "-y", timeout=300)
    assert p.returncode == 5, p.stderr           # conflict
    assert "taken with agent protocol 3; this kosa8 speaks 1..2" in p.stderr, p.stderr
    assert "take a new checkpoint" in p.stderr.lower()
    assert h.json("sandbox", "inspect", "fut")["state"] == state
    assert "checkpoint.rewind.refused" in actions(h, "fut")

    # A meta.json that does not say (a checkpoint of before the handshake, or edited):
    # the restored agent's own HELLO is refused, and the sandbox is left stopped.
    strip_agent_proto(mp)
    p = h("rewind", "fut", "--to", "v3", "-y", timeout=300)
    assert p.returncode != 0
    assert "speaks protocol 3; this kosa8d speaks 1..2" in p.stderr, p.stderr
    info = h.json("sandbox", "inspect", "fut")
    assert info["state"] == "failed" and "protocol 3" in info["error"]
    assert "agent_proto" not in info
    assert "checkpoint.rewind.failed" in actions(h, "fut")

    # Nothing was lost: the checkpoint is still there, and the sandbox boots this
    # kosa8's guest when next used, spoken to in 2.
    assert [c["label"] for c in h.json("checkpoint", "ls", "fut")] == ["v3"]
    h("sandbox", "ps", "fut", check=True, timeout=300)
    info = h.json("sandbox", "inspect", "fut")
    assert info["state"] == "running" and info["agent_proto"] == 2
