# SPDX-License-Identifier: Apache-2.0
# test_94_broker_sandbox.py - the egress broker inside a sandbox (issue 14, stage 2).
#
# The stage-1 test's HTTPS upstream (brokerkit.Upstream: a network namespace of our own,
# a test CA) stands in for api.openai.com; the daemon is told to trust that CA and to
# connect there for the rule hosts (config broker_ca_file, broker_resolve). A sandbox made
# with `--broker openai=openai --egress deny` calls $OPENAI_BASE_URL with $OPENAI_API_KEY
# from inside: the upstream gets the real key, never the placeholder; a wrong placeholder
# is refused and counted in `sandbox broker`; `secret set` rotates at once; the key is not
# in the guest's memory (a checkpoint's memory file); a sandbox without a broker has no
# such variables and cannot reach the broker's address.
import json
import os

import pytest

import brokerkit as bk
from conftest import own_home, make_sandbox, wait_for
from memkit import found_in, saved_memory

KEY = "sk-REAL-sandbox-key-4f1c9e2a7b"
KEY2 = "sk-ROTATED-sandbox-key-77d0"

pytestmark = [pytest.mark.hostile,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")]

# Inside the guest: one request with the environment's key and base URL over a plain
# socket (the image's python is minimal: no urllib, no json); prints the status line and
# the body.
CLIENT = bk.GUEST_ANSWER + r"""
import os, socket, sys
key = sys.argv[1] if len(sys.argv) > 1 else os.environ["OPENAI_API_KEY"]
base = os.environ["OPENAI_BASE_URL"]
assert base.startswith("http://")
host, _, path = base[7:].partition("/")
body = b'{"model":"m"}'
s = socket.create_connection((host, 80), timeout=60)
s.sendall(("POST /%s/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
           "Content-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
           % (path, host, key, len(body))).encode() + body)
print(*answer(s))
"""

tmp, up = bk.upstream_fixtures("k8bs")


@pytest.fixture(scope="module")
def h(up, python_layout):
    yield from own_home("k8bs-", python_layout, config=bk.upstream_config(up))


@pytest.fixture(scope="module")
def agent(h):
    p = h("secret", "set", "openai", "--stdin", input=KEY)
    assert p.returncode == 0, p.stderr
    return make_sandbox(h, "agent", "--broker", "openai=openai", "--egress", "deny")


def py(h, name, code, *args, env=()):
    e = []
    for kv in env:
        e += ["-e", kv]
    return h("sandbox", "run", *e, name, "python:3.12-slim", "python3", "-c", code, *args,
             timeout=300)


def test_key_reaches_upstream_placeholder_never(h, agent, up):
    p = py(h, agent, "import os; print(os.environ['OPENAI_API_KEY']); "
           "print(os.environ['OPENAI_BASE_URL'])")
    assert p.returncode == 0, p.stderr
    ph, base = p.stdout.split()
    assert ph.startswith("k8-ph-") and len(ph) == 38 and KEY not in p.stdout
    assert base == "http://openai.broker.kosa8.internal/v1"
    n0 = len(up.records())
    p = py(h, agent, CLIENT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("200 "), p.stdout
    assert "Hello from the upstream" in p.stdout
    recs = up.records()[n0:]
    assert len(recs) == 1
    hdr = {k.lower(): v for k, v in recs[0]["headers"]}
    assert hdr["authorization"] == "Bearer " + KEY
    assert hdr["host"] == "api.openai.com"
    assert ph not in json.dumps(recs[0])
    # inspect shows the rules, never the key
    ins = h("sandbox", "inspect", agent, "--json")
    assert ins.returncode == 0 and KEY not in ins.stdout
    assert json.loads(ins.stdout)["broker"]["rules"] == ["openai=openai"]


def test_wrong_placeholder_refused_and_counted(h, agent, up):
    n0 = len(up.records())
    p = py(h, agent, CLIENT, "k8-ph-" + "0" * 32)
    assert p.stdout.startswith("403 "), p.stdout
    assert "placeholder_wrong" in p.stdout
    # another key the guest learned elsewhere (never this sandbox's real key: the guest
    # must not hold it, test_key_not_in_guest_memory): refused too
    p = py(h, agent, CLIENT, "sk-proj-learned-elsewhere-0042")
    assert p.stdout.startswith("403 "), p.stdout
    assert len(up.records()) == n0, "a refused request reached the upstream"
    st = h.json("sandbox", "broker", agent)
    assert st["state"] == "up"
    assert st["stats"]["hosts"]["api.openai.com"]["refused"]["placeholder_wrong"] >= 2
    assert KEY not in json.dumps(st)
    txt = h("sandbox", "broker", agent)
    assert txt.returncode == 0 and "api.openai.com" in txt.stdout and "placeholder_wrong" in txt.stdout


def test_rotation_at_once(h, agent, up):
    p = h("secret", "set", "openai", "--stdin", input=KEY2)
    assert p.returncode == 0, p.stderr
    try:
        n0 = len(up.records())
        p = py(h, agent, CLIENT)
        assert p.stdout.startswith("200 "), p.stdout
        hdr = {k.lower(): v for k, v in up.records()[n0]["headers"]}
        assert hdr["authorization"] == "Bearer " + KEY2
    finally:
        assert h("secret", "set", "openai", "--stdin", input=KEY).returncode == 0


def test_key_not_in_guest_memory(h, agent):
    # the guest used the broker (tests above); its memory holds the placeholder, not the key
    p = h("checkpoint", agent, "--label", "mem", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    # the guest's memory: a memory file and the devices' state, or one migration stream
    states = saved_memory(h.path, "mem")
    assert any(os.path.basename(p) in ("memory", "state") for p in states), \
        "no checkpoint memory file under %s" % h.path
    for path in states:
        assert os.path.getsize(path) > 0, path
        assert not found_in(path, [KEY.encode(), KEY2.encode()]), path
    # the broker kept running across the checkpoint: it still answers
    assert py(h, agent, CLIENT).stdout.startswith("200 ")


def test_no_broker_no_variables_no_address(h, agent):
    other = make_sandbox(h, "plain", "--egress", "allow-all")
    p = py(h, other, "import os; print(sorted(k for k in os.environ if 'OPENAI' in k or "
           "'ANTHROPIC' in k or 'KOSA8' in k))")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
    probe = (r"""
import socket
for host in ("10.0.2.4", "broker.kosa8.internal"):
    try:
        s = socket.create_connection((host, 80), timeout=5)
        s.sendall(b"GET / HTTP/1.0\r\nHost: api.openai.com\r\n\r\n")
        print(host, "open", s.recv(100))
    except OSError as e:
        print(host, "refused", type(e).__name__)
""")
    p = py(h, other, probe)
    assert p.returncode == 0, p.stderr
    assert "open" not in p.stdout, p.stdout
    assert "refused" in p.stdout
    st = h("sandbox", "broker", other)
    assert st.returncode != 0 and "no broker" in st.stderr


def test_fork_has_its_own_placeholder(h, agent, up):
    src_ph = py(h, agent, "import os; print(os.environ['OPENAI_API_KEY'])").stdout.strip()
    p = h("sandbox", "fork", agent, "--from", "mem", "--name", "agentfork", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        ph = py(h, "agentfork", "import os; print(os.environ['OPENAI_API_KEY'])").stdout.strip()
        assert ph.startswith("k8-ph-") and ph != src_ph
        n0 = len(up.records())
        p = py(h, "agentfork", CLIENT)
        assert p.stdout.startswith("200 "), p.stdout
        hdr = {k.lower(): v for k, v in up.records()[n0]["headers"]}
        assert hdr["authorization"] == "Bearer " + KEY
        p = py(h, "agentfork", CLIENT, src_ph)   # the source's placeholder: refused
        assert p.stdout.startswith("403 ") and "placeholder_wrong" in p.stdout, p.stdout
        # and the source still works with its own
        assert py(h, agent, CLIENT).stdout.startswith("200 ")
    finally:
        h("sandbox", "rm", "-f", "agentfork", timeout=300)
    # its broker's counts went to the audit log when it stopped; no value anywhere
    audit = h("audit", "ls", "--action", "sandbox.broker.counts", "--json", timeout=60)
    assert "agentfork" in audit.stdout and "api.openai.com" in audit.stdout, audit.stdout[-2000:]
    assert KEY not in audit.stdout and KEY2 not in audit.stdout
