# SPDX-License-Identifier: Apache-2.0
# test_94_hostile_broker_local.py - the broker's local-model rule and `secret rm` reaching
# running brokers (issue 14, brief broker3).
#
# One daemon of our own serves a small scripted GGUF (`kosa8 model serve`, on the host's
# loopback, a free port) and trusts the stage-1 HTTPS upstream (brokerkit.Upstream, a
# netns of our own) for api.openai.com. One sandbox, `--broker openai=openai --broker
# local-model --egress allow-all`, is the attacker: root in its guest. It reaches the model
# through the broker with its placeholder (OpenAI and Anthropic forms); it cannot reach the
# model server on the host's loopback directly (10.0.2.2:PORT is refused even under
# allow-all); a wrong placeholder is refused before the model sees anything. `secret rm
# openai` makes the running broker refuse the openai rule at once (503 no_secret naming
# the secret, counted) without a request reaching the upstream; `secret set` restores it.
import json
import os
import signal
import socket
import sys

import pytest

import brokerkit as bk
from conftest import TOP, daemon_pid, own_home, make_sandbox, wait_for

sys.path.insert(0, os.path.join(TOP, "tests", "model"))
import scripted  # noqa: E402
import squatter  # noqa: E402  (tests/integration)

KEY = "sk-REAL-local-test-key-93ab1c"
SCRIPT = ["Hello", " from", " the", " local", " model"]

pytestmark = [pytest.mark.hostile,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")]

# Inside the guest (a minimal python: no urllib, no json): one request to $ENV's base URL
# plus PATH with one credential header; prints the status and the body.
CLIENT = bk.GUEST_ANSWER + r"""
import os, socket, sys
env, path, hdr, body = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].encode()
base = os.environ[env]
assert base.startswith("http://"), base
host, _, prefix = base[7:].partition("/")
target = ("/" + prefix if prefix else "") + path
hdr = hdr.replace("PH", os.environ.get("OVERRIDE_PH", os.environ["KOSA8_BROKER_PLACEHOLDER"]))
s = socket.create_connection((host, 80), timeout=120)
s.sendall(("POST %s HTTP/1.1\r\nHost: %s\r\n%s\r\nContent-Type: application/json\r\n"
           "anthropic-version: 2023-06-01\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
           % (target, host, hdr, len(body))).encode() + body)
print(*answer(s))
"""

CHAT = json.dumps({"model": "m", "max_tokens": 16,
                   "messages": [{"role": "user", "content": "hi"}]})


tmp, up = bk.upstream_fixtures("k8bl")


@pytest.fixture(scope="module")
def h(up, python_layout):
    yield from own_home("k8bl-", python_layout, config=bk.upstream_config(up))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def model(h, tmp):
    path = os.path.join(tmp, "tiny.gguf")
    scripted.make_scripted(path, script=SCRIPT, vocab="bpe-qwen2")
    h("model", "import", path, "--name", "tiny", check=True, timeout=120)
    port = free_port()
    out = h.json("model", "serve", "tiny", "--port", str(port), "--threads", "1", "--ctx",
                 "512", timeout=200)
    yield port
    h("model", "stop", "tiny", timeout=60)


@pytest.fixture(scope="module")
def agent(h, model):
    p = h("secret", "set", "openai", "--stdin", input=KEY)
    assert p.returncode == 0, p.stderr
    return make_sandbox(h, "agentl", "--broker", "openai=openai", "--broker", "local-model",
                        "--egress", "allow-all")


def req(h, name, env, path, hdr, body=CHAT, ph=None):
    e = ["-e", "OVERRIDE_PH=" + ph] if ph else []
    p = h("sandbox", "run", *e, name, "python:3.12-slim", "python3", "-c", CLIENT, env, path,
          hdr, body, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_local_model_through_the_broker(h, agent, model):
    p = h("sandbox", "run", agent, "python:3.12-slim", "python3", "-c",
          "import os; print(os.environ['KOSA8_LOCAL_MODEL_URL'], os.environ['ANTHROPIC_BASE_URL'], "
          "os.environ['OPENAI_BASE_URL'], os.environ['ANTHROPIC_API_KEY'] == "
          "os.environ['KOSA8_BROKER_PLACEHOLDER'])", timeout=300)
    assert p.returncode == 0, p.stderr
    # the openai rule keeps the OpenAI variables; the local model takes the Anthropic ones
    assert p.stdout.split() == ["http://local-model.broker.kosa8.internal/v1",
                                "http://local-model.broker.kosa8.internal",
                                "http://openai.broker.kosa8.internal/v1", "True"], p.stdout
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "Authorization: Bearer PH")
    assert out.startswith("200 "), out
    assert "Hello from the local model" in out, out
    out = req(h, agent, "ANTHROPIC_BASE_URL", "/v1/messages", "x-api-key: PH")
    assert out.startswith("200 "), out
    assert "Hello from the local model" in out and '"type":"message"' in out.replace(" ", ""), out
    st = h.json("sandbox", "broker", agent)
    lm = st["stats"]["hosts"]["local-model"]
    assert lm["rule"] == "local-model" and lm["requests"] >= 2 and lm["refusals"] == 0, lm
    assert KEY not in json.dumps(st)


def test_wrong_placeholder_and_host_loopback_refused(h, agent, model):
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "Authorization: Bearer PH",
              ph="k8-ph-" + "0" * 32)
    assert out.startswith("403 ") and "placeholder_wrong" in out, out
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "X-Nothing: PH")
    assert out.startswith("403 ") and "placeholder_missing" in out, out
    # the model server listens on the host's loopback; the guest has no way there but the
    # broker, even with every egress allowed
    probe = ("import socket\n"
             "for a in ('10.0.2.2', '127.0.0.1'):\n"
             "    try:\n"
             "        s = socket.create_connection((a, %d), timeout=5)\n"
             "        s.sendall(b'GET /health HTTP/1.0\\r\\n\\r\\n'); print(a, 'open', s.recv(64))\n"
             "    except OSError as e:\n"
             "        print(a, 'refused', type(e).__name__)\n" % model)
    p = h("sandbox", "run", agent, "python:3.12-slim", "python3", "-c", probe, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "open" not in p.stdout and p.stdout.count("refused") == 2, p.stdout
    # no --broker-intercept: the broker's address has no TLS port
    p = h("sandbox", "run", agent, "python:3.12-slim", "python3", "-c",
          "import socket\ntry:\n    socket.create_connection(('10.0.2.4', 443), timeout=5)\n"
          "    print('open')\nexcept OSError as e:\n    print('refused', type(e).__name__)",
          timeout=300)
    assert p.returncode == 0 and p.stdout.startswith("refused"), p.stdout + p.stderr
    st = h.json("sandbox", "broker", agent)
    refused = st["stats"]["hosts"]["local-model"]["refused"]
    assert refused.get("placeholder_wrong", 0) >= 1 and refused.get("placeholder_missing", 0) >= 1


def test_secret_rm_reaches_the_running_broker(h, agent, up):
    ok = req(h, agent, "OPENAI_BASE_URL", "/chat/completions", "Authorization: Bearer PH")
    assert ok.startswith("200 "), ok
    n0 = len(up.records())
    before = h.json("sandbox", "broker", agent)["stats"]["hosts"]["api.openai.com"]
    p = h("secret", "rm", "openai", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["brokers"] == 1, p.stdout
    try:
        out = req(h, agent, "OPENAI_BASE_URL", "/chat/completions", "Authorization: Bearer PH")
        assert out.startswith("503 ") and "no_secret" in out and "'openai'" in out, out
        assert len(up.records()) == n0, "a request went upstream without its secret"
        after = h.json("sandbox", "broker", agent)
        hs = after["stats"]["hosts"]["api.openai.com"]
        assert hs["refused"].get("no_secret", 0) == before["refused"].get("no_secret", 0) + 1
        assert "openai" not in after["stats"]["secrets"]
        # the local model needs no secret: unaffected
        out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions",
                  "Authorization: Bearer PH")
        assert out.startswith("200 "), out
        # a new sandbox cannot be made with a rule whose secret is gone
        p = h("sandbox", "create", "nosecret", "--broker", "openai=openai", timeout=120)
        assert p.returncode != 0 and "'openai'" in p.stderr and "secret set" in p.stderr, \
            p.stderr
    finally:
        p = h("secret", "set", "openai", "--stdin", "--json", input=KEY)
        assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["brokers"] == 1, p.stdout
    out = req(h, agent, "OPENAI_BASE_URL", "/chat/completions", "Authorization: Bearer PH")
    assert out.startswith("200 "), out
    hdr = {k.lower(): v for k, v in up.records()[n0]["headers"]}
    assert hdr["authorization"] == "Bearer " + KEY
    recs = h.json("audit", "ls", timeout=60)
    rms = [r for r in recs if r["action"] == "secret.rm"]
    assert rms and rms[-1]["details"]["brokers"] == 1, rms
    assert KEY not in json.dumps(recs)


def test_local_model_rule_needs_a_running_server(h, model):
    p = h("sandbox", "create", "nomodel", "--broker", "local-model=absent", timeout=120)
    assert p.returncode != 0, p.stdout
    assert "model 'absent' is not being served" in p.stderr, p.stderr
    assert h("sandbox", "inspect", "nomodel").returncode != 0


def test_local_model_follows_the_server(h, agent, model):
    # stopped: the running broker is told at once (503 no_model, not a connect error)
    assert h("model", "stop", "tiny", timeout=60).returncode == 0
    try:
        out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions",
                  "Authorization: Bearer PH")
        assert out.startswith("503 ") and "no_model" in out and "kosa8 model serve" in out, out
    finally:
        # served again on another port: the same sandbox, no restart, finds it
        port = free_port()
        h.json("model", "serve", "tiny", "--port", str(port), "--threads", "1", "--ctx", "512",
               timeout=200)
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "Authorization: Bearer PH")
    assert out.startswith("200 ") and "Hello from the local model" in out, out
    assert h.json("sandbox", "broker", agent)["stats"]["hosts"]["local-model"]["refused"][
        "no_model"] >= 1


def test_a_dead_model_server_is_not_followed_to_a_squatter(h, agent, model):
    # Issue 34, 3: a model server that dies (here kill -9, as a crash) is noticed by the
    # daemon at once, without any command: the running broker is told no server runs,
    # and only then is the port let go. A local user (uid nobody) who takes the port
    # afterwards gets nothing: the broker answers 503 no_model instead of forwarding the
    # sandbox's prompt to whoever listens there now.
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "Authorization: Bearer PH")
    assert out.startswith("200 "), out
    [srv] = h.json("model", "ps")
    os.kill(srv["pid"], signal.SIGKILL)
    sq = squatter.Squatter(srv["port"], wait=15)     # binds as soon as the port is free
    try:
        out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions",
                  "Authorization: Bearer PH", body=json.dumps(
                      {"model": "m", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "the secret plan"}]}))
        assert out.startswith("503 ") and "no_model" in out, out
        assert sq.records() == [], sq.records()
    finally:
        sq.close()
        h.json("model", "serve", "tiny", "--port", str(free_port()), "--threads", "1", "--ctx",
               "512", timeout=200)
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "Authorization: Bearer PH")
    assert out.startswith("200 ") and "Hello from the local model" in out, out


def test_adopted_broker_follows_the_model_after_a_daemon_restart(h, agent, model):
    # Last in the file: kills this module's daemon. Its model server is its child; a
    # daemon killed with kill -9 leaves it running, and the next daemon stops it (it knows
    # nothing of it). The adopted broker is told at adoption that no server runs (503
    # no_model, not a connect error), and `model serve` gives it the new address: requests
    # work again without restarting the sandbox or its broker.
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "Authorization: Bearer PH")
    assert out.startswith("200 "), out
    before = h.json("sandbox", "broker", agent)["stats"]["requests"]
    srv = [m["pid"] for m in h.json("model", "ps")]
    assert len(srv) == 1, srv
    pid = daemon_pid(h.path)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10), "kill -9 did not end it"
    assert os.path.exists("/proc/%d" % srv[0]), "the model server died with the daemon"
    h.start()
    assert wait_for(lambda: not os.path.exists("/proc/%d" % srv[0]), 15), \
        "the restarted daemon left the old daemon's model server running"
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "Authorization: Bearer PH")
    assert out.startswith("503 ") and "no_model" in out, out
    h.json("model", "serve", "tiny", "--port", str(free_port()), "--threads", "1", "--ctx",
           "512", timeout=200)
    out = req(h, agent, "KOSA8_LOCAL_MODEL_URL", "/chat/completions", "Authorization: Bearer PH")
    assert out.startswith("200 ") and "Hello from the local model" in out, out
    st = h.json("sandbox", "broker", agent)
    assert st["state"] == "up"
    # the same kosa8-broker process: its counts went on
    assert st["stats"]["requests"] >= before + 2, (before, st["stats"]["requests"])
