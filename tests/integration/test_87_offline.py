# SPDX-License-Identifier: Apache-2.0
"""Offline (issue 13): a daemon told to stay offline refuses, at once and by name, whatever
would need the network and says it is offline; and the guide's whole interpreter loop runs
in a network namespace that has no network at all (offline_loop.py says what is real)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BIN, TOP, Home, new_home

sys.path.insert(0, os.path.join(TOP, "tests", "model"))
import scripted  # noqa: E402

# The scripted model's one answer: a run_code call whose code leaves a mark on the
# sandbox's disk, tries the network, and prints 42.
CODE = ("import socket\n"
        "open('/k8-mark', 'w').write('ran')\n"
        "try:\n"
        "    socket.create_connection(('10.9.9.9', 80), timeout=5)\n"
        "    print('network: reached')\n"
        "except OSError as e:\n"
        "    print('network: ' + type(e).__name__)\n"
        "print(6 * 7)\n")
TOOL = ["<tool_call>", "\n" + json.dumps({"name": "run_code", "arguments": {"code": CODE}}) + "\n",
        "</tool_call>"]


def offline_msg(p, what):
    return p.returncode == 6 and "KOSA8_OFFLINE is set: not fetching" in p.stderr and what in p.stderr


@pytest.fixture(scope="module")
def off_home():
    """A daemon offline by config.json alone (no flag, no environment)."""
    h = Home(new_home("k8off-"))
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump({"offline": True}, f)
    env_off = os.environ.pop("KOSA8_OFFLINE", None)
    try:
        h.start()
    finally:
        if env_off is not None:
            os.environ["KOSA8_OFFLINE"] = env_off
    yield h
    h.stop()
    shutil.rmtree(h.path, ignore_errors=True)


def test_offline_daemon_says_so_and_refuses_fetches(off_home):
    h = off_home
    assert h.json("daemon", "status")["offline"] is True
    assert "network:    offline" in h("daemon", "status", check=True).stdout
    p = h("image", "pull", "registry.example:5000/python:3.13", timeout=60)
    assert offline_msg(p, "kosa8 image load"), (p.returncode, p.stderr)
    p = h("model", "pull", "Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m", timeout=60)
    assert offline_msg(p, "model import"), (p.returncode, p.stderr)
    # login only writes credentials: it needs no network and works offline.
    p = h("login", "registry.example:5000", "-u", "me", "--password-stdin", input="pw\n")
    assert p.returncode == 0, p.stderr
    # Turned off in config.json, the daemon is online again without a restart.
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump({"offline": False}, f)
    if not os.environ.get("KOSA8_OFFLINE"):
        assert h.json("daemon", "status")["offline"] is False


@pytest.fixture(scope="module")
def bundle(python_layout):
    """A bundle made on a machine that was online: guest image, python image, model."""
    h = Home(new_home("k8b-"))
    h.start()
    try:
        h("image", "load", python_layout, "--tag", "python:3.12-slim", check=True, timeout=600)
        model = os.path.join(h.path, "tool.gguf")
        scripted.make_scripted(model, script=TOOL, vocab="bpe-qwen2")
        h("model", "import", model, "--name", "tool", check=True, timeout=120)
        out = os.path.join(h.path, "offline.k8b")
        h("bundle", "export", out, "--image", "python:3.12-slim", "--model", "tool", check=True,
          timeout=900)
    finally:
        h.stop()
    yield out
    shutil.rmtree(h.path, ignore_errors=True)


def test_guide_loop_in_a_namespace_without_network(bundle):
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("host: needs root, unshare and ip for a network namespace")
    home = new_home("k8air-")
    out = os.path.join(home, "..", os.path.basename(home) + ".json")
    env = dict(os.environ, KOSA8_BIN=BIN)
    env.pop("KOSA8_OFFLINE", None)      # the daemon is told by --offline
    p = subprocess.run(["unshare", "-n", sys.executable,
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "offline_loop.py"),
                        bundle, home, out], capture_output=True, text=True, timeout=3600, env=env)
    with open(out) as f:
        r = json.load(f)
    os.unlink(out)
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(home, ignore_errors=True)
    assert p.returncode == 0, p.stderr
    assert r.get("ok"), "%s\n%s" % (r.get("error"), json.dumps(r["steps"][-3:], indent=1))

    # The namespace: loopback only, no route anywhere.
    for name, i in r["net_before"]["ifs"].items():
        assert name == "lo" or not i["up"], r["net_before"]
    assert r["net_before"]["routes4"] == [] and r["net_before"]["routes6"] == [], r["net_before"]
    # Offline, and saying so; fetches refused by name.
    assert r["status"]["offline"] is True and "network:    offline" in r["status_text"]
    assert offline_msg(type("P", (), {"returncode": r["image_pull"]["returncode"],
                                      "stderr": r["image_pull"]["stderr"]}), "kosa8 image load")
    assert offline_msg(type("P", (), {"returncode": r["model_pull"]["returncode"],
                                      "stderr": r["model_pull"]["stderr"]}), "model import")
    for what in ("sandbox_pull_remote", "sandbox_run_remote"):
        q = r[what]
        assert q["returncode"] != 0 and "KOSA8_OFFLINE is set: not fetching" in q["stderr"], (what, q)
    # The guest image came from the bundle, into the home.
    assert r["status_after"]["guest"]["dir"].startswith(home), r["status_after"]["guest"]
    assert [m["name"] for m in r["models"]] == ["tool"]

    # The model's answer is a run_code call, parsed by the server...
    c1 = r["reply1"]["choices"][0]
    assert c1["finish_reason"] == "tool_calls", c1
    call = c1["message"]["tool_calls"][0]["function"]
    assert call["name"] == "run_code" and json.loads(call["arguments"]) == {"code": CODE}
    # ...the code ran in the sandbox, whose --egress deny refused its connection...
    assert r["ran"] == {"rc": 0, "out": "network: ConnectionRefusedError\n42\n", "err": ""}, r["ran"]
    assert r["egress"]["mode"] == "deny", r["egress"]
    refused = [d for d in r["egress"].get("destinations") or [] if "10.9.9.9" in d.get("dest", "")]
    assert refused and sum(d.get("refused", 0) for d in refused) >= 1, r["egress"]
    # ...the server took the tool result back (the prompt grew by the exchange)...
    assert r["reply2"]["usage"]["prompt_tokens"] > r["reply1"]["usage"]["prompt_tokens"]
    # ...and the rewind took the code's mark off the disk.
    assert r["mark_before_rewind"] == "0" and r["mark_after_rewind"] == "1"

    # Nothing left through any interface but loopback, none of which was ever up.
    for name, i in r["net_after"]["ifs"].items():
        if name != "lo":
            assert not i["up"] and i["rx"] == 0 and i["tx"] == 0, (name, i)
    assert r["net_after"]["routes4"] == [] and r["net_after"]["routes6"] == []
