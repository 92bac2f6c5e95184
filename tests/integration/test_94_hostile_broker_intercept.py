# SPDX-License-Identifier: Apache-2.0
# test_94_hostile_broker_intercept.py - the broker's interception mode (--broker-intercept,
# issue 14, brief broker3).
#
# The stage-1 HTTPS upstream (brokerkit.Upstream, a netns of our own, test CA 1) stands in
# for api.openai.com. A sandbox made with `--broker openai=openai --broker-intercept
# --egress deny` is the attacker (root in its guest) and the user's tool at once: a client
# that hard-codes https://api.openai.com (no base URL) and trusts only what the container's
# trust store says reaches the upstream through the broker, which puts the real key in; a
# name without a rule is not intercepted (not resolved to the broker, and the broker's TLS
# listener refuses its SNI); a Host that differs from the SNI is refused; the sandbox CA's
# private key is on the host (0600) and in no checkpoint memory file.
import glob
import json
import os
import stat

import pytest

import brokerkit as bk
from conftest import own_home, make_sandbox, recv_all
from memkit import found_in, saved_memory

KEY = "sk-REAL-intercept-key-5e0d21f7"

pytestmark = [pytest.mark.hostile,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")]

# Inside the guest: HTTPS to HOST:443 verified by the default trust (SSL_CERT_FILE), with
# SNI SNI (default HOST) and Host header HOSTHDR (default HOST); prints the address the
# name resolved to, the status and the body, or the TLS error.
CLIENT = bk.GUEST_ANSWER + r"""
import os, socket, ssl, sys
host = sys.argv[1]
sni = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else host
hosthdr = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else host
try:
    addr = socket.gethostbyname(host)
except OSError as e:
    print("resolve-failed", type(e).__name__)
    sys.exit(0)
print("addr", addr)
ctx = ssl.create_default_context()
s = socket.create_connection((addr, 443), timeout=60)
try:
    t = ctx.wrap_socket(s, server_hostname=sni)
except (ssl.SSLError, OSError) as e:
    print("tls-failed", e)
    sys.exit(0)
t.sendall(("GET /v1/models HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
           "Connection: close\r\n\r\n" % (hosthdr, os.environ["OPENAI_API_KEY"])).encode())
print("status", *answer(t))
"""


tmp, up = bk.upstream_fixtures("k8bi")


@pytest.fixture(scope="module")
def h(up, python_layout):
    yield from own_home("k8bi-", python_layout, config=bk.upstream_config(up))


@pytest.fixture(scope="module")
def agent(h):
    p = h("secret", "set", "openai", "--stdin", input=KEY)
    assert p.returncode == 0, p.stderr
    return make_sandbox(h, "agenti", "--broker", "openai=openai", "--broker-intercept",
                        "--egress", "deny")


def test_broker_tls_listener_standalone(tmp, up):
    """kosa8-broker alone: the leaf for a rule host verifies against the sandbox CA, the
    real key goes upstream; no SNI or a name without a rule ends the handshake; a Host
    that is not the SNI's is refused."""
    import socket
    import ssl
    import subprocess
    ca = bk.make_ca(tmp, "sbca")
    ph = bk.placeholder()
    rules = os.path.join(tmp, "ic.rules.json")
    with open(rules, "w") as f:
        json.dump({"placeholder": ph, "rules": ["openai=openai", "local-model"]}, f)
    tls = os.path.join(tmp, "ic.tls")
    sr, sw = os.pipe()
    cr, cw = os.pipe()
    log = open(os.path.join(tmp, "ic.log"), "w")
    p = subprocess.Popen([bk.BROKER, "--rules", rules, "--listen", os.path.join(tmp, "ic.sock"),
                          "--listen-tls", tls, "--intercept-ca-fd", str(cr), "--secrets-fd",
                          str(sr), "--ca-file", up.ca1[0], "--resolve",
                          "api.openai.com:" + up.ip],
                         pass_fds=(sr, cr), stdout=subprocess.PIPE, stderr=log, text=True)
    os.close(sr)
    os.close(cr)
    os.write(sw, json.dumps({"openai": KEY}).encode())
    os.close(sw)
    with open(ca[0], "rb") as f1, open(ca[1], "rb") as f2:
        os.write(cw, f1.read() + f2.read())
    os.close(cw)
    try:
        assert p.stdout.readline().strip() == "ready"

        def go(sni, host):
            ctx = ssl.create_default_context(cafile=ca[0])
            s = socket.socket(socket.AF_UNIX)
            s.connect(tls)
            try:
                t = ctx.wrap_socket(s, server_hostname=sni)
            except ssl.SSLError as e:
                return "tls-failed %s" % e
            t.sendall(("GET /v1/models HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                       "Connection: close\r\n\r\n" % (host, ph)).encode())
            out = recv_all(t)
            return out.decode(errors="replace")

        n0 = len(up.records())
        out = go("api.openai.com", "api.openai.com")
        assert out.startswith("HTTP/1.1 200"), out
        hdr = {k.lower(): v for k, v in up.records()[n0]["headers"]}
        assert hdr["authorization"] == "Bearer " + KEY
        assert "UNRECOGNIZED_NAME" in go("api.example.com", "api.example.com").upper()
        assert "UNRECOGNIZED_NAME" in go("local-model", "local-model").upper()
        out = go("api.openai.com", "openai.broker.kosa8.internal")
        assert out.startswith("HTTP/1.1 421") and "TLS server name" in out, out
        assert len(up.records()) == n0 + 1
    finally:
        p.terminate()
        p.wait(timeout=10)
        log.close()


def run(h, name, *args):
    p = h("sandbox", "run", name, "python:3.12-slim", "python3", "-c", CLIENT, *args,
          timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_hard_coded_https_reaches_upstream_with_the_real_key(h, agent, up):
    p = h("sandbox", "run", agent, "python:3.12-slim", "sh", "-c",
          "echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $GIT_SSL_CAINFO "
          "$NODE_EXTRA_CA_CERTS; head -1 /etc/kosa8/broker-ca.crt", timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["/etc/kosa8/ca-bundle.crt"] * 4 + [
        "/etc/kosa8/broker-ca.crt", "-----BEGIN", "CERTIFICATE-----"], p.stdout
    n0 = len(up.records())
    out = run(h, agent, "api.openai.com")
    assert "addr 10.0.2.4" in out and "status 200" in out, out
    recs = up.records()[n0:]
    assert len(recs) == 1, recs
    hdr = {k.lower(): v for k, v in recs[0]["headers"]}
    assert hdr["authorization"] == "Bearer " + KEY and hdr["host"] == "api.openai.com"
    assert "k8-ph-" not in json.dumps(recs[0])
    st = h.json("sandbox", "broker", agent)
    assert st["intercept"] is True
    assert "intercepting HTTPS" in h("sandbox", "broker", agent).stdout
    recs = [r for r in h.json("audit", "ls", timeout=60) if r["action"] == "sandbox.broker"]
    assert recs and recs[-1]["details"] == {"rules": ["openai=openai"], "intercept": True}
    assert st["stats"]["hosts"]["api.openai.com"]["requests"] >= 1


def test_no_rule_not_intercepted_and_host_must_match_sni(h, agent, up):
    n0 = len(up.records())
    # a name without a rule: not the broker's (egress deny: not resolved at all)
    out = run(h, agent, "api.example.com")
    assert "10.0.2.4" not in out and "resolve-failed" in out, out
    # the broker's TLS listener will not answer for a name without a rule
    out = run(h, agent, "api.openai.com", "api.example.com")
    assert "tls-failed" in out, out
    # the SNI names the rule host, the Host header another: refused
    out = run(h, agent, "api.openai.com", "", "api.anthropic.com")
    assert "status 421" in out and "no_rule" in out, out
    assert len(up.records()) == n0, "a refused request reached the upstream"


def test_garbage_on_the_tls_port_leaves_the_broker_serving(h, agent, up):
    probe = (r"""
import socket
for data in (b"GET / HTTP/1.1\r\nHost: api.openai.com\r\n\r\n", b"\x16\x03\x01\xff\xff" + b"A" * 70000,
             b"\x00" * 10):
    s = socket.create_connection(("10.0.2.4", 443), timeout=30)
    try:
        s.sendall(data)
        print("answer", repr(s.recv(100)[:20]))
    except OSError as e:
        print("closed", type(e).__name__)
""")
    p = h("sandbox", "run", agent, "python:3.12-slim", "python3", "-c", probe, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "HTTP/1.1 200" not in p.stdout, p.stdout
    st = h.json("sandbox", "broker", agent)
    assert st["state"] == "up", st
    assert "status 200" in run(h, agent, "api.openai.com")


def test_ca_key_stays_on_the_host(h, agent):
    sbdirs = glob.glob(os.path.join(h.path, "**", "broker-ca.key"), recursive=True)
    assert len(sbdirs) == 1, sbdirs
    st = os.stat(sbdirs[0])
    assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    with open(sbdirs[0], "rb") as f:
        pem = f.read()
    body = b"".join(l for l in pem.splitlines() if not l.startswith(b"-----"))
    assert len(body) > 40
    p = h("checkpoint", agent, "--label", "ic", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    states = saved_memory(h.path, "ic")
    assert any(os.path.basename(p) in ("memory", "state") for p in states), \
        "no checkpoint memory file"
    needles = [l for l in pem.splitlines() if not l.startswith(b"-----")] + [KEY.encode()]
    for path in states:
        assert os.path.getsize(path) > 0, path
        assert not found_in(path, needles), "a line of the CA key or the key is in %s" % path
    # still working after the checkpoint
    assert "status 200" in run(h, agent, "api.openai.com")


def test_fork_keeps_the_ca_with_a_placeholder_of_its_own(h, agent, up):
    # test_ca_key_stays_on_the_host made checkpoint "ic"
    p = h("sandbox", "fork", agent, "--from", "ic", "--name", "agentifork", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        n0 = len(up.records())
        out = run(h, "agentifork", "api.openai.com")
        assert "addr 10.0.2.4" in out and "status 200" in out, out
        hdr = {k.lower(): v for k, v in up.records()[n0]["headers"]}
        assert hdr["authorization"] == "Bearer " + KEY
        keys = glob.glob(os.path.join(h.path, "**", "broker-ca.key"), recursive=True)
        assert len(keys) == 2 and all(stat.S_IMODE(os.stat(k).st_mode) == 0o600 for k in keys)
        ph = h("sandbox", "run", "agentifork", "python:3.12-slim", "sh", "-c",
               "echo $OPENAI_API_KEY", timeout=300).stdout.strip()
        src = h("sandbox", "run", agent, "python:3.12-slim", "sh", "-c",
                "echo $OPENAI_API_KEY", timeout=300).stdout.strip()
        assert ph.startswith("k8-ph-") and ph != src
    finally:
        h("sandbox", "rm", "-f", "agentifork", timeout=300)


def test_intercept_needs_hosted_rules(h):
    p = h("sandbox", "create", "icnorules", "--broker-intercept", timeout=120)
    assert p.returncode != 0 and "needs --broker rules" in p.stderr, p.stderr
    assert h("sandbox", "inspect", "icnorules").returncode != 0
