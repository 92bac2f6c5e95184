# SPDX-License-Identifier: Apache-2.0
# test_96_hostile_e2b.py - kosa8d's E2B-compatible API (docs/e2b.md) against hostile
# clients and a hostile sandbox: no key or a wrong one, one sandbox's token aimed at
# another, unknown ids, malformed Connect frames, bodies past every cap, a guest whose
# `find` prints garbage and whose file names are not text, the code interpreter's port
# given bad bodies and other sandboxes' contexts. Each answer is E2B's error
# shape (control plane, /files: {"code": status, "message"}; envd's Connect calls:
# Connect's {"code": "...", "message"}), and the daemon goes on serving.
import http.client
import json
import os
import struct
import subprocess
import time

import pytest

import e2bkit
from conftest import Home, new_home
from e2bkit import js

pytestmark = pytest.mark.hostile


@pytest.fixture(scope="module")
def e(python_layout):
    yield from e2bkit.e2b_home("k8e2bh-", python_layout, config={"e2b": {"upload_max_mib": 1}})


@pytest.fixture(scope="module")
def two(e):
    return [e2bkit.create(e, "{ timeoutMs: 900000 }") for _ in range(2)]


def envd(sid, token, port=49983, extra=None):
    h = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(port), "Connect-Protocol-Version": "1"}
    if token:
        h["X-Access-Token"] = token
    h.update(extra or {})
    return h


def frames(data):
    """The Connect messages of a streamed reply: [(flags, JSON)]."""
    out, off = [], 0
    while off + 5 <= len(data):
        flags, n = data[off], struct.unpack(">I", data[off + 1:off + 5])[0]
        out.append((flags, json.loads(data[off + 5:off + 5 + n])))
        off += 5 + n
    assert off == len(data), data[:200]
    return out


def envelope(obj, flags=0):
    b = json.dumps(obj).encode()
    return bytes([flags]) + struct.pack(">I", len(b)) + b


def alive(e):
    assert e.h("daemon", "status").returncode == 0
    st, body, _ = e.http("GET", "/v2/sandboxes", headers={"X-API-Key": e.key})
    assert st == 200 and isinstance(body, list), (st, body)


def test_control_plane_needs_a_key(e):
    for hdr in ({}, {"X-API-Key": "e2b_" + "0" * 40}, {"X-API-Key": "sk-not-ours"},
                {"X-API-Key": e.key + "0"}):
        st, body, _ = e.http("GET", "/v2/sandboxes", headers=hdr)
        assert st == 401 and body["code"] == 401 and "key" in body["message"], (hdr, body)
    # a removed key is refused from the next request on
    k2 = e.h("e2b", "key", "create", "--json", check=True)
    k2 = json.loads(k2.stdout)
    assert e.http("GET", "/v2/sandboxes", headers={"X-API-Key": k2["key"]})[0] == 200
    e.h("e2b", "key", "rm", k2["id"], check=True)
    assert e.http("GET", "/v2/sandboxes", headers={"X-API-Key": k2["key"]})[0] == 401
    # the key itself is nowhere but in the answer that made it
    with open(os.path.join(e.h.path, "e2b", "keys.json")) as f:
        stored = f.read()
    assert e.key not in stored and k2["key"] not in stored
    assert os.stat(os.path.join(e.h.path, "e2b", "keys.json")).st_mode & 0o777 == 0o600
    audit = e.h("audit", "ls", "--json", check=True).stdout
    assert e.key not in audit and k2["key"] not in audit
    assert "e2b.key.rm" in audit


def test_unknown_ids_and_unsupported_fields(e):
    k = {"X-API-Key": e.key}
    for m, p in (("GET", "/sandboxes/nosuchsandbox000000"), ("DELETE", "/sandboxes/x"),
                 ("POST", "/sandboxes/../../etc/passwd/pause"), ("GET", "/sandboxes/%00")):
        st, body, _ = e.http(m, p, headers=k)
        assert st in (400, 404) and body["code"] == st, (p, st, body)
    st, body, _ = e.http("POST", "/v2/sandboxes", {"templateID": "base",
                                                   "volumeMounts": [{"name": "v", "path": "/d"}]},
                         headers=k)
    assert st == 400 and "volumeMounts" in body["message"]
    st, body, _ = e.http("POST", "/v2/sandboxes", {"templateID": "no-such-image:1"}, headers=k)
    assert st == 400 and ("names no image" in body["message"] or "not loaded" in body["message"])
    st, body, _ = e.http("GET", "/no/such/path", headers=k)
    assert st == 404 and body["code"] == 404
    # data plane: a sandbox that is not here is E2B's 502
    st, body, _ = e.http("GET", "/health", headers=envd("nosuchsandbox0000000", "t"))
    assert st == 502 and body["code"] == 502
    alive(e)


def test_one_sandboxs_token_never_drives_another(e, two):
    (a, ta, fa), (b, tb, fb) = two
    list_ = lambda sid, tok, **kw: e.http("POST", "/process.Process/List", {},
                                          headers=envd(sid, tok, **kw))
    assert list_(a, ta)[0] == 200
    for sid, tok in ((b, ta), (a, tb), (b, None), (b, fb), (b, ta + "0"), (b, "")):
        st, body, _ = list_(sid, tok)
        assert st == 401 and body == {"code": "unauthenticated", "message": body["message"]}, \
            (sid, tok, st, body)
    # files and health the same
    st, _, _ = e.http("GET", "/files?path=/etc/hostname", headers=envd(b, ta))
    assert st == 401
    st, _, _ = e.http("POST", "/files?path=/tmp/x", b"x", headers=envd(b, ta, extra={
        "Content-Type": "application/octet-stream"}))
    assert st == 401
    # the interpreter's port takes its own traffic token too, never another sandbox's
    st, _, _ = e.http("GET", "/contexts", headers={"E2b-Sandbox-Id": b, "E2b-Sandbox-Port": "49999",
                                                   "E2B-Traffic-Access-Token": fa})
    assert st == 401
    # a port kosa8 does not serve: unavailable, as for a sandbox that is not there
    st, body, _ = e.http("POST", "/process.Process/List", {}, headers=envd(a, ta, port=8080))
    assert st == 503 and body["code"] == "unavailable", (st, body)
    st, body, _ = e.http("GET", "/health", headers=envd(a, ta, port=8080))
    assert st == 502 and body["code"] == 502, (st, body)
    # through the SDK: a's token with b's id is refused, b's file is not written
    out = js(e, """
const s = new Sandbox({ sandboxId: V.b, envdAccessToken: V.ta, envdVersion: '0.5.7' })
try { await s.files.write('/tmp/owned-by-a', 'x'); return 'written' } catch (err) { return err.constructor.name }
""", b=b, ta=ta)
    assert out != "written"
    r = js(e, "const s = await Sandbox.connect(V.b); return await s.files.exists('/tmp/owned-by-a')", b=b)
    assert r is False


def test_bad_connect_frames(e, two):
    (a, ta, _), _ = two
    h = envd(a, ta, extra={"Content-Type": "application/connect+json"})
    good = envelope({"process": {"cmd": "/bin/true"}})
    bad = {
        "empty": b"",
        "short header": b"\x00\x00\x00",
        "compressed": b"\x01" + good[1:],
        "end flag": b"\x02" + good[1:],
        "length past the body": good[:1] + struct.pack(">I", len(good)) + good[5:],
        "length short of the body": good + b"garbage",
        "two messages": good + good,
        "not JSON": b"\x00" + struct.pack(">I", 5) + b"}{}{}",
        "JSON array": envelope([1, 2]),
        "4 GiB announced": b"\x00\xff\xff\xff\xff{}",
        "no command": envelope({"process": {"cmd": ""}}),
        "huge argv": envelope({"process": {"cmd": "x", "args": ["a" * 30000] * 3}}),
        "NUL in env": envelope({"process": {"cmd": "x", "envs": {"A": "b\u0000c"}}}),
    }
    for what, body in bad.items():
        st, data, hdr = e.http("POST", "/process.Process/Start", body, headers=h)
        assert st == 200 and hdr["Content-Type"] == "application/connect+json", (what, st, data)
        msgs = frames(data)
        assert len(msgs) == 1 and msgs[0][0] == 2, (what, msgs)
        assert msgs[0][1]["error"]["code"] in ("invalid_argument", "resource_exhausted"), \
            (what, msgs)
    # binary protobuf is not spoken: said, not guessed at
    st, data, _ = e.http("POST", "/process.Process/Start", good,
                         headers=envd(a, ta, extra={"Content-Type": "application/connect+proto"}))
    assert "application/connect+json" in frames(data)[0][1]["error"]["message"]
    # unary calls with bodies that are not what they should be
    for body in (b"[]", b"{", json.dumps({"process": {"pid": -1}}).encode(),
                 json.dumps({"process": {"pid": 4294967296}}).encode(),
                 json.dumps({"process": {"pid": 1}, "signal": "SIGNAL_SIGSTOP"}).encode()):
        st, data, _ = e.http("POST", "/process.Process/SendSignal", body,
                             headers=envd(a, ta, extra={"Content-Type": "application/json"}))
        assert st in (400, 404) and ("code" in data), (body, st, data)
    alive(e)


def test_bodies_past_every_cap(e, two):
    (a, ta, _), _ = two
    st, body, _ = e.http("POST", "/v2/sandboxes", b"{" + b" " * (2 << 20) + b"}",
                         headers={"X-API-Key": e.key, "Content-Type": "application/json"})
    assert st == 413 and body["code"] == 413
    st, body, _ = e.http("POST", "/process.Process/Start", b"\x00" + struct.pack(">I", 3 << 20) +
                         b"x" * (3 << 20), headers=envd(a, ta, extra={
                             "Content-Type": "application/connect+json"}))
    assert st == 413 and body["code"] == 413
    # an upload past config.json e2b.upload_max_mib (1 MiB here)
    st, body, _ = e.http("POST", "/files?path=/tmp/big", b"y" * (3 << 20), headers=envd(
        a, ta, extra={"Content-Type": "application/octet-stream"}))
    assert st == 413 and "upload_max_mib" in body["message"], (st, body)
    # a multipart body that never closes, one without a boundary
    st, body, _ = e.http("POST", "/files?path=/tmp/m", b"--X\r\nContent-Disposition: form-data; "
                         b"name=\"file\"\r\n\r\nabc", headers=envd(a, ta, extra={
                             "Content-Type": "multipart/form-data; boundary=X"}))
    assert st == 400 and body["code"] == 400
    st, body, _ = e.http("POST", "/files", b"x", headers=envd(a, ta, extra={
        "Content-Type": "multipart/form-data"}))
    assert st == 400 and "boundary" in body["message"]
    st, body, _ = e.http("POST", "/files?path=/tmp/g", b"x", headers=envd(a, ta, extra={
        "Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}))
    assert st == 400 and "gzip" in body["message"]
    alive(e)


def test_hostile_guest_listing(e, two):
    """The sandbox's own tools print what the daemon reads back: names that are not text,
    a listing past the cap, and a `find` that prints garbage."""
    _, (b, _, _) = two
    out = js(e, r"""
const s = await Sandbox.connect(V.b)
await s.commands.run(`mkdir -p /h && cd /h && touch "$(printf 'new\nline')" "$(printf 'tab\there')" "$(printf 'bad\xff\xfe')" ok.txt && ln -s loop1 loop2 && ln -s loop2 loop1`)
const names = (await s.files.list('/h')).map((x) => x.name).sort()
await s.commands.run("python3 -c \"import os; os.makedirs('/many'); [open('/many/%d' % i, 'w').close() for i in range(20050)]\"", { timeoutMs: 300000 })
let many
try { await s.files.list('/many') ; many = 'listed' } catch (err) { many = err.constructor.name + ': ' + err.message }
await s.commands.run("cp /usr/bin/find /usr/bin/find.real && printf '#!/bin/sh\\nhead -c 100000 /dev/urandom\\n' > /usr/bin/find && chmod +x /usr/bin/find")
let garbage
try { await s.files.list('/h'); garbage = 'listed' } catch (err) { garbage = err.constructor.name }
await s.commands.run('mv /usr/bin/find.real /usr/bin/find')
return { names, many, garbage, after: (await s.files.list('/h')).length }
""", b=b, timeout=600)
    assert "ok.txt" in out["names"] and "new\nline" in out["names"] and "tab\there" in out["names"]
    assert "loop1" in out["names"]
    assert "more than 20000" in out["many"] or "larger than" in out["many"], out["many"]
    assert out["garbage"] != "listed"
    assert out["after"] >= 5
    alive(e)


def code(sid, traffic=None, token=None):
    """The code interpreter's headers (its port 49999), as @e2b/code-interpreter sends them."""
    h = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999", "Content-Type": "application/json"}
    if traffic:
        h["E2B-Traffic-Access-Token"] = traffic
    if token:
        h["X-Access-Token"] = token
    return h


def ndjson(data):
    return [json.loads(ln) for ln in data.decode().splitlines() if ln.strip()] \
        if isinstance(data, bytes) else data


def test_code_interpreter_refuses_and_keeps_serving(e, two):
    """The code interpreter's port: another sandbox's tokens, bodies that are not what
    they should be, context ids of nothing or of another sandbox, a client that leaves in
    the middle of a cell. E2B's error shape each time; a cell whose client left is
    interrupted, so the context serves the next one at once."""
    (a, ta, fa), (b, tb, fb) = two
    st, body, _ = e.http("POST", "/execute", {"code": "1"}, headers=code(a, fa))
    assert st == 200 and ndjson(body)[-1] == {"type": "end_of_execution"}, (st, body)
    st, body, _ = e.http("POST", "/contexts", {}, headers=code(a, fa))
    assert st == 200 and body["language"] == "python", (st, body)
    ctx_a = body["id"]
    # a's tokens on b, no token, a wrong one
    for hdr in (code(b, fa), code(b, None, ta), code(b), code(b, fb + "0")):
        st, body, _ = e.http("POST", "/execute", {"code": "1"}, headers=hdr)
        assert st == 401 and body["code"] == 401, (hdr, st, body)
    # bodies
    for raw, want in ((b"[]", 400), (b"{", 400), (b'{"code": 1}', 400),
                      (b'{"code": "1", "language": "r"}', 400),
                      (b'{"code": "1", "env_vars": ["A=1"]}', 400),
                      (b'{"code": "1", "env_vars": {"A B": "x"}}', 400),
                      (b'{"code": "1", "env_vars": {"A": "x\\u0000y"}}', 400),
                      (b'{"code": "1", "context_id": "../../etc/passwd"}', 404),
                      (b'{"code": "1", "context_id": "0123456789ab-default"}', 404),
                      (json.dumps({"code": "1", "context_id": ctx_a}).encode(), 404),
                      (json.dumps({"code": "x" * (2 << 20)}).encode(), 413)):
        st, body, _ = e.http("POST", "/execute", raw, headers=code(b, fb))
        assert st == want and body["code"] == want, (raw[:60], st, body)
    # a's context is not b's to restart or remove, and stays a's
    for method, path in (("POST", "/contexts/%s/restart" % ctx_a), ("DELETE", "/contexts/" + ctx_a)):
        st, body, _ = e.http(method, path, headers=code(b, fb))
        assert st == 404 and body["code"] == 404, (path, st, body)
    st, body, _ = e.http("GET", "/contexts", headers=code(a, fa))
    assert ctx_a in [c["id"] for c in body]
    st, body, _ = e.http("POST", "/contexts", {"language": "javascript"}, headers=code(b, fb))
    assert st == 400 and "Python only" in body["message"], (st, body)
    # a client that leaves in the middle of a cell: the cell is interrupted
    c = http.client.HTTPConnection("127.0.0.1", e.port, timeout=120)
    c.request("POST", "/execute", json.dumps({"code": "import time\nprint('go', flush=True)\n"
                                              "time.sleep(90)\nleft = 'no'"}).encode(),
              headers=code(a, fa))
    r = c.getresponse()
    while b'"go' not in r.fp.readline():
        pass
    r.close()       # the socket too (the response holds it)
    c.close()
    t0 = time.time()
    st, body, _ = e.http("POST", "/execute", {"code": "'left' in dir()"}, headers=code(a, fa))
    results = [x for x in ndjson(body) if x["type"] == "result"]
    assert st == 200 and results[0]["text"] == "False", body
    assert time.time() - t0 < 60, time.time() - t0     # not after the 90 s sleep
    alive(e)


def test_listener_stays_on_loopback(e, python_layout):
    assert e.url.startswith("http://127.0.0.1:")
    h = Home(new_home("k8e2bp-"))
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump({"e2b": {"listen": "0.0.0.0:0"}}, f)
    try:
        h.start()
        st = h.json("daemon", "status")
        assert "e2b_api" not in st
        with open(os.path.join(h.path, "kosa8d.log")) as f:
            assert "not a loopback address" in f.read()
    finally:
        h.stop()
