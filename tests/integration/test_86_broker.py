# SPDX-License-Identifier: Apache-2.0
# test_86_broker.py - kosa8-broker standalone on the host (issue 14, first stage; no VM).
#
# A local HTTPS upstream in a network namespace of our own stands in for api.openai.com,
# api.anthropic.com and api.example.com (test CA 1) and bad.example.com (test CA 2, not
# trusted by the broker); brokerkit.py sets it up. Clients: curl, raw sockets, and the
# official openai and @anthropic-ai/sdk npm packages (installed once under
# build/broker-npm, never committed). Asserts: the upstream gets the real key and never
# the placeholder; every refusal is clear and counted and reaches no upstream; streams
# arrive event by event; rotation is immediate; secret values appear in no log, stats or
# audit record.
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import brokerkit as bk
import k8cache
from conftest import Home, new_home, wait_for

SECRETS = {"openai": "sk-REAL-openai-0123456789", "anthropic": "sk-ant-REAL-abcdef",
           "ex": "ex-REAL-generic-42"}
RULES = ["openai=openai", "anthropic=anthropic", "header:api.example.com:X-Api-Key=ex",
         "header:bad.example.com:X-Key=ex"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


@pytest.fixture(scope="module")
def tmp():
    d = tempfile.mkdtemp(prefix="k8b", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def up(tmp):
    assert os.path.exists(bk.BROKER), "build kosa8-broker first (make)"
    u = bk.Upstream(tmp)
    yield u
    u.close()


@pytest.fixture(scope="module")
def broker(tmp, up):
    b = bk.Broker(tmp, "a", RULES, dict(SECRETS), upstream=up, tcp_port=bk.free_port(),
                  extra=["--max-body", "100000"])
    yield b
    b.close()


@pytest.fixture(scope="module")
def other(tmp, up):
    """A second sandbox's broker: same rules, its own placeholder."""
    b = bk.Broker(tmp, "b", RULES, dict(SECRETS), upstream=up)
    yield b
    b.close()


def curl(b, url, *args, timeout=30):
    p = subprocess.run(["curl", "-sS", "--unix-socket", b.sock, "-w", "\n%{http_code}",
                        url] + list(args), capture_output=True, text=True, timeout=timeout)
    body, _, code = p.stdout.rpartition("\n")
    return int(code or 0), body


def refused(b, reason, host=None):
    st = b.stats()
    if host:
        return st["hosts"][host]["refused"].get(reason, 0)
    return st["refused"].get(reason, 0)


def raw(b, data, read_timeout=5):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(read_timeout)
    s.connect(b.sock)
    s.sendall(data)
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return out


def test_real_key_reaches_upstream_placeholder_never(broker, up):
    ph = broker.placeholder
    n0 = len(up.records())
    code, body = curl(broker, "http://api.openai.com/v1/chat/completions",
                      "-H", "Authorization: Bearer " + ph, "-H", "Content-Type: application/json",
                      "-H", "Proxy-Authorization: Basic Zm9vOmJhcg==", "-H", "api-key: guest-value",
                      "-H", "x-api-key: guest-value2", "-H", "Cookie: c=1",
                      "-H", "OpenAI-Organization: org-1", "-d", '{"model":"m"}')
    assert code == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"] == "Hello from the upstream"
    code, body = curl(broker, "http://api.anthropic.com/v1/messages", "-H", "x-api-key: " + ph,
                      "-H", "anthropic-version: 2023-06-01", "-H", "Authorization: Bearer x",
                      "-d", '{"model":"m"}')
    assert code == 200, body
    code, body = curl(broker, "http://api.example.com/anything?x=1", "-H", "X-Api-Key: " + ph)
    assert code == 200, body
    recs = up.records()[n0:]
    assert len(recs) == 3
    hdr = [{k.lower(): v for k, v in r["headers"]} for r in recs]
    assert hdr[0]["authorization"] == "Bearer " + SECRETS["openai"]
    assert hdr[0]["host"] == "api.openai.com"
    assert hdr[0]["openai-organization"] == "org-1"     # not a credential: passed on
    for stripped in ("proxy-authorization", "api-key", "x-api-key", "cookie"):
        assert stripped not in hdr[0], stripped
    assert hdr[1]["x-api-key"] == SECRETS["anthropic"]
    assert hdr[1]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in hdr[1]
    assert hdr[2]["x-api-key"] == SECRETS["ex"] and recs[2]["path"] == "/anything?x=1"
    assert recs[0]["body"] == '{"model":"m"}'          # bodies untouched
    for r in recs:
        assert ph not in json.dumps(r)
    st = broker.stats()
    assert st["hosts"]["api.openai.com"]["requests"] >= 1
    assert st["hosts"]["api.openai.com"]["bytes_down"] > 0


def test_refusals_are_clear_counted_and_reach_no_upstream(broker, other, up):
    ph = broker.placeholder
    n0 = len(up.records())
    url = "http://api.openai.com/v1/chat/completions"
    cases = [
        # (curl args, expected status, reason)
        ([url, "-H", "Authorization: Bearer k8-ph-" + "0" * 32, "-d", "{}"], 403,
         "placeholder_wrong"),
        ([url, "-H", "Authorization: Bearer " + other.placeholder, "-d", "{}"], 403,
         "placeholder_wrong"),
        ([url, "-H", "Authorization: Bearer " + SECRETS["openai"], "-d", "{}"], 403,
         "placeholder_wrong"),
        ([url, "-d", "{}"], 403, "placeholder_missing"),
        ([url, "-H", "Authorization: " + ph, "-d", "{}"], 403, "placeholder_missing"),
        (["http://evil.example.net/v1/x", "-H", "Authorization: Bearer " + ph], 421, "no_rule"),
        (["http://bad.example.com/x", "-H", "X-Key: " + ph], 502, "upstream_tls"),
        ([url, "-H", "Authorization: Bearer " + ph, "--data-binary", "@-"], 413, "too_large"),
    ]
    for args, status, reason in cases:
        before = refused(broker, reason)
        p = subprocess.run(["curl", "-sS", "--unix-socket", broker.sock, "-w", "\n%{http_code}"]
                           + args, input="x" * 200000, capture_output=True, text=True, timeout=30)
        body, _, code = p.stdout.rpartition("\n")
        assert int(code) == status, (args, p.stdout, p.stderr)
        err = json.loads(body)["error"]
        assert err["code"] == reason and err["message"], err
        assert refused(broker, reason) == before + 1, reason
    bad = json.loads(curl(broker, "http://bad.example.com/x", "-H", "X-Key: " + ph)[1])
    assert "certificate" in bad["error"]["message"] and "not trusted" in bad["error"]["message"]
    # a head over 64 KiB, and request smuggling shapes: refused before any upstream
    before = refused(broker, "too_large")
    out = raw(broker, b"GET / HTTP/1.1\r\nHost: api.openai.com\r\nX: " + b"a" * 70000 + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431"), out[:100]
    assert refused(broker, "too_large") == before + 1
    for smuggle in (
            b"POST /v1/x HTTP/1.1\r\nHost: api.openai.com\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"POST /v1/x HTTP/1.1\r\nHost: api.openai.com\r\nX: a\r\n b\r\n\r\n",
            b"POST /v1/x HTTP/1.1\r\nHost: api.openai.com\r\nTransfer-Encoding: chunked\r\n"
            b"Authorization: Bearer " + ph.encode() + b"\r\n\r\nzz\r\n"):
        before = refused(broker, "bad_request")
        out = raw(broker, smuggle)
        assert out.startswith(b"HTTP/1.1 400"), out[:200]
        assert refused(broker, "bad_request") == before + 1
    assert len(up.records()) == n0, "a refused request reached the upstream"


def test_keep_alive_and_chunked_request_body(broker, up):
    ph = broker.placeholder.encode()
    n0 = len(up.records())
    conns = broker.stats()["connections"]
    body = b'{"model":"m"}'
    req = (b"POST /v1/echo HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
           b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    chunked = (b"POST /v1/echo HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
               b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    out = raw(broker, req + req + chunked)
    assert out.count(b"HTTP/1.1 200") == 3, out
    assert broker.stats()["connections"] == conns + 1
    recs = up.records()[n0:]
    assert [r["body"] for r in recs] == ['{"model":"m"}', '{"model":"m"}', "hello world"]


def test_stream_arrives_event_by_event(broker, up):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(broker.sock)
    body = b'{"stream": true, "note": "slow"}'
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: "
              b"Bearer " + broker.placeholder.encode() + b"\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    arrivals, data = [], b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
        arrivals.append((time.time(), data.count(b"data: ")))
    s.close()
    assert b"data: [DONE]" in data
    # The fake upstream writes its record once the stream has ended: wait for it.
    def streamed():
        return [r for r in up.records() if r["path"] == "/v1/chat/completions" and r["sent"]]
    assert wait_for(streamed, 10), "the upstream never recorded the stream"
    rec = streamed()[-1]
    first = next(t for t, n in arrivals if n >= 1)
    # the first event reached us before the upstream sent its last one (300 ms apart)
    assert first < rec["sent"][-1] - 0.5, (first, rec["sent"])
    assert len({n for _, n in arrivals}) >= 4, "events arrived in one lump"


def test_rotation_takes_effect_at_once(broker, up):
    ph = broker.placeholder
    assert broker.set_secret("ex", "ex-ROTATED-7")["ok"]
    try:
        n0 = len(up.records())
        code, _ = curl(broker, "http://api.example.com/r", "-H", "X-Api-Key: " + ph)
        assert code == 200
        hdr = dict((k.lower(), v) for k, v in up.records()[n0]["headers"])
        assert hdr["x-api-key"] == "ex-ROTATED-7"
        bad = broker.set_secret("ex", "has space")
        assert not bad["ok"] and "has space" not in json.dumps(bad)
    finally:
        assert broker.set_secret("ex", SECRETS["ex"])["ok"]


def test_process_is_confined(tmp, up, broker):
    # started as root without --user: it serves as nobody all the same
    with open("/proc/%d/status" % broker.proc.pid) as f:
        assert [l.split()[1] for l in f if l.startswith("Uid:")] == ["65534"]
    b = bk.Broker(tmp, "c", RULES, dict(SECRETS), upstream=up, user="65534:65534")
    try:
        with open("/proc/%d/status" % b.proc.pid) as f:
            st = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
        assert st["Uid"].split()[:2] == ["65534", "65534"]
        assert st["Seccomp"].strip() == "2" and st["NoNewPrivs"].strip() == "1"
        for line in open("/proc/%d/cmdline" % b.proc.pid).read().split("\0"):
            for v in SECRETS.values():
                assert v not in line
        environ = open("/proc/%d/environ" % b.proc.pid, "rb").read()
        assert not any(v.encode() in environ for v in SECRETS.values())
        # still works after the drop and under the filter (resolver, TLS, workers)
        code, body = curl(b, "http://api.example.com/c", "-H", "X-Api-Key: " + b.placeholder)
        assert code == 200, body
        assert b.proc.poll() is None
    finally:
        b.close()


def _npm_clients():
    """The official clients (scripts/npm-pins, set "clients"), installed once per machine:
    the directory holding their node_modules, or None."""
    if not shutil.which("node") or not shutil.which("npm"):
        return None
    try:
        return k8cache.npm("clients")
    except RuntimeError:
        return None


@pytest.mark.parametrize("mode", ["openai", "openai-stream", "anthropic", "anthropic-stream"])
def test_official_sdk_clients(broker, up, tmp, mode):
    clients = _npm_clients()
    if clients is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node/npm or the openai/@anthropic-ai/sdk packages are missing")
        pytest.skip("node/npm or the npm packages are missing (CI=true makes this a failure)")
    # The client script beside a link to the cached packages (the entry itself stays sealed).
    script = os.path.join(tmp, "broker_clients.mjs")
    shutil.copy(os.path.join(bk.HERE, "broker_clients.mjs"), script)
    if not os.path.lexists(os.path.join(tmp, "node_modules")):
        os.symlink(os.path.join(clients, "node_modules"), os.path.join(tmp, "node_modules"))
    hosts = os.path.join(tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 localhost api.openai.com api.anthropic.com\n")
    port = broker.tcp_port
    env = dict(os.environ, OPENAI_API_KEY=broker.placeholder,
               ANTHROPIC_API_KEY=broker.placeholder,
               OPENAI_BASE_URL="http://api.openai.com:%d/v1" % port,
               ANTHROPIC_BASE_URL="http://api.anthropic.com:%d" % port)
    n0 = len(up.records())
    # The names resolve to the broker only for this client: its own mount namespace with
    # its own /etc/hosts, the way a sandbox's names will lead to its broker.
    p = subprocess.run(["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && '
                        'exec node "$1" "$2"', hosts, script, mode], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["text"] == "Hello from the upstream", out
    rec = up.records()[n0]
    hdr = {k.lower(): v for k, v in rec["headers"]}
    if mode.startswith("openai"):
        assert hdr["authorization"] == "Bearer " + SECRETS["openai"]
    else:
        assert hdr["x-api-key"] == SECRETS["anthropic"]
        assert "anthropic-version" in hdr
    assert broker.placeholder not in json.dumps(rec)
    if mode.endswith("stream"):
        assert len(out["chunks"]) == 5
        assert out["chunks"][0][0] / 1000.0 < rec["sent"][-1] - 0.5, "not streamed"


def test_secret_values_appear_nowhere(broker, other):
    text = broker.read_log() + other.read_log() + json.dumps(broker.stats()) + \
        json.dumps(other.stats())
    for v in list(SECRETS.values()) + ["ex-ROTATED-7"]:
        assert v not in text, v
    assert set(broker.stats()["secrets"]) == set(SECRETS)


def test_daemon_secret_store(tmp):
    h = Home(new_home("k8bs"))
    try:
        h.start("--accel", "tcg")
        value = "sk-DAEMON-secret-%d" % os.getpid()
        assert h("secret", "set", "openai", "--stdin", input=value + "\n").returncode == 0
        p = h("secret", "set", "anthropic", "--from-env", "K8_TEST_KEY",
              env_extra={"K8_TEST_KEY": value + "-2"})
        assert p.returncode == 0, p.stderr
        p = h("secret", "set", "openai", "--stdin", input=value + "-3")
        assert "replaced" in p.stdout
        ls = h.json("secret", "ls")
        assert [s["name"] for s in ls["secrets"]] == ["anthropic", "openai"]
        assert all(set(s) == {"name", "updated"} for s in ls["secrets"])
        d = os.path.join(h.path, "secrets")
        assert os.stat(d).st_mode & 0o777 == 0o700
        assert os.stat(os.path.join(d, "openai")).st_mode & 0o777 == 0o600
        assert open(os.path.join(d, "openai")).read() == value + "-3"
        assert h("secret", "set", "x", "--stdin", input="two words").returncode == 2
        assert h("secret", "set", "../x", "--stdin", input="v").returncode == 2
        assert h("secret", "set", "x", value).returncode == 2      # never on the command line
        assert h("secret", "rm", "anthropic").returncode == 0
        assert h("secret", "rm", "anthropic").returncode == 4
        acts = [(r["action"], r.get("details", {}).get("name"))
                for r in h.json("audit", "ls")]
        assert ("secret.set", "openai") in acts and ("secret.rm", "anthropic") in acts
        h.stop()
        for f in ("audit.log", "kosa8d.log"):
            path = os.path.join(h.path, f)
            if os.path.exists(path):
                assert value not in open(path, errors="replace").read(), f
    finally:
        h.stop()
        shutil.rmtree(h.path, ignore_errors=True)
