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
import socket
import struct
import subprocess
import threading
import time

import pytest

import e2bkit
from conftest import Home, new_home, wait_for
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


def listed(e, hu, marker):
    """The pids envd's List shows whose arguments hold marker."""
    st, body, _ = e.http("POST", "/process.Process/List", {}, headers=hu)
    assert st == 200, (st, body)
    return [p["pid"] for p in body.get("processes", []) if marker in " ".join(p["config"].get("args", []))]


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


def test_stalled_client_and_bad_process_calls(e, two):
    """A client that starts a command printing without end and reads nothing holds back
    that command only (other calls and commands go on); once it hangs up, the command is
    still there, and a kill ends it. Calls on a process that is not there, or without
    stdin, get Connect's errors (docs/e2b.md "One stream loop per process")."""
    (a, ta, _), _ = two
    hs = envd(a, ta, extra={"Content-Type": "application/connect+json"})
    hu = envd(a, ta, extra={"Content-Type": "application/json"})

    def pids(marker):
        return listed(e, hu, marker)

    body = envelope({"process": {"cmd": "/bin/sh", "args": ["-c", "exec yes stalled-client"]},
                     "stdin": False})
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", e.port))
    head = "POST /process.Process/Start HTTP/1.1\r\nHost: k\r\nContent-Length: %d\r\n" % len(body)
    head += "".join("%s: %s\r\n" % kv for kv in hs.items()) + "\r\n"
    s.sendall(head.encode() + body)        # and never read the answer
    try:
        stalled = wait_for(lambda: pids("stalled-client"), timeout=60)
        assert len(stalled) == 1, stalled
        time.sleep(5)                       # its output fills every buffer on the way
        t0 = time.time()
        assert pids("stalled-client") == stalled
        st, data, _ = e.http("POST", "/process.Process/Start", envelope(
            {"process": {"cmd": "/bin/sh", "args": ["-c", "echo other"]}}), headers=hs)
        msgs = [m for _, m in frames(data)]
        assert st == 200 and {"event": {"data": {"stdout": "b3RoZXIK"}}} in msgs, msgs
        assert msgs[-1] == {} and time.time() - t0 < 60, msgs
        # no stdin, no such process, no such tag
        st, r, _ = e.http("POST", "/process.Process/SendInput", {
            "process": {"pid": stalled[0]}, "input": {"stdin": "eA=="}}, headers=hu)
        assert st == 400 and r["code"] == "failed_precondition", (st, r)
        for sel in ({"pid": 4000000000}, {"tag": "nope"}):
            st, r, _ = e.http("POST", "/process.Process/SendInput", {
                "process": sel, "input": {"stdin": "eA=="}}, headers=hu)
            assert st == 404 and r["code"] == "not_found", (sel, st, r)
            st, data, _ = e.http("POST", "/process.Process/Connect", envelope({"process": sel}),
                                 headers=hs)
            assert st == 200 and frames(data) == [(2, {"error": {
                "code": "not_found", "message": frames(data)[0][1]["error"]["message"]}})]
        # the client hangs up: the command goes on (envd's model) until it is killed
        s.close()
        time.sleep(2)
        assert pids("stalled-client") == stalled
        st, r, _ = e.http("POST", "/process.Process/SendSignal", {
            "process": {"pid": stalled[0]}, "signal": "SIGNAL_SIGKILL"}, headers=hu)
        assert st == 200, (st, r)
        assert wait_for(lambda: not pids("stalled-client"), timeout=60, step=1)
        st, data, _ = e.http("POST", "/process.Process/Start", envelope(
            {"process": {"cmd": "/bin/echo", "args": ["after"]}}), headers=hs)
        assert {"event": {"data": {"stdout": "YWZ0ZXIK"}}} in [m for _, m in frames(data)]
        # no cwd: the user's home, as envd (the image sets no working directory)
        st, data, _ = e.http("POST", "/process.Process/Start", envelope(
            {"process": {"cmd": "/bin/pwd"}}), headers=hs)
        assert {"event": {"data": {"stdout": "L3Jvb3QK"}}} in [m for _, m in frames(data)], data
    finally:
        s.close()
    alive(e)


def test_a_killed_command_ends_though_its_children_hold_its_output(e, two):
    """A command killed by SendSignal ends its stream at its exit, as envd's does, even
    when a child it left behind still holds its stdout: `sh -c 'yes marker; true'` keeps
    `yes` writing into the pipe after the shell is gone. Before, the stream waited for a
    pipe that never emptied, and `yes` ran on. Now the pipes are cut at the exit and the
    child dies of SIGPIPE."""
    (a, ta, _), _ = two
    hs = envd(a, ta, extra={"Content-Type": "application/connect+json"})
    hu = envd(a, ta, extra={"Content-Type": "application/json"})

    def pids(marker):
        return listed(e, hu, marker)

    out = {}

    def start():
        out["reply"] = e.http("POST", "/process.Process/Start", envelope(
            {"process": {"cmd": "/bin/sh", "args": ["-c", "yes killed-group; true"]},
             "stdin": False}), headers=hs, timeout=90)

    t = threading.Thread(target=start, daemon=True)
    t.start()
    shell = wait_for(lambda: pids("killed-group"), timeout=60)
    st, r, _ = e.http("POST", "/process.Process/SendSignal", {
        "process": {"pid": shell[0]}, "signal": "SIGNAL_SIGKILL"}, headers=hu)
    assert st == 200, (st, r)
    t.join(30)
    assert not t.is_alive(), "the killed command's stream did not end"
    st, data, _ = out["reply"]
    msgs = [m for _, m in frames(data)]
    ends = [m["event"]["end"] for m in msgs if "end" in m.get("event", {})]
    assert st == 200 and ends and ends[0].get("status") == "signal: killed", msgs[-3:]
    # the child that held the pipe is gone too (SIGPIPE), not left writing
    code = ("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | "
            "grep -q 'yes killed-grou[p]' && echo left || echo gone")
    st, data, _ = e.http("POST", "/process.Process/Start", envelope(
        {"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 1; " + code]}}), headers=hs)
    got = [m for _, m in frames(data)]
    assert {"event": {"data": {"stdout": "Z29uZQo="}}} in got, got
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


def test_filesystem_requests_that_are_not_what_they_say(e, two):
    """envd's filesystem calls and /files with bad paths, users, fields and frames: each
    refused in its shape (Connect's for the RPCs, E2B's for /files), nothing run for
    them, and the daemon goes on serving."""
    (a, ta, _), _ = two
    rpc = lambda m, body, **kw: e.http("POST", "/filesystem.Filesystem/" + m, body,
                                       headers=envd(a, ta, **kw))
    for body in ({}, {"path": 5}, {"path": ""}, {"path": "/x" * 3000},
                 {"path": "/", "depth": -1}, {"path": "/", "depth": "deep"}):
        st, data, _ = rpc("ListDir", body)
        assert st == 400 and data["code"] == "invalid_argument", (body, st, data)
    for auth in ("Basic !!!!", "Bearer x", "Basic LXJmOg=="):      # "-rf:"
        st, data, _ = rpc("Stat", {"path": "/"}, extra={"Authorization": auth})
        assert st == 400 and data["code"] == "invalid_argument", (auth, st, data)
    st, data, _ = rpc("Stat", {"path": "/no/such/thing"})
    assert st == 404 and data["code"] == "not_found", (st, data)
    st, data, _ = rpc("ListDir", {"path": "/etc/hostname"})
    assert st == 400 and "not a directory" in data["message"], (st, data)
    st, data, _ = rpc("MakeDir", {"path": "/etc/hostname"})
    assert st == 400 and "not a directory" in data["message"], (st, data)
    st, data, _ = rpc("MakeDir", {"path": "/etc"})
    assert st == 409 and data["code"] == "already_exists", (st, data)
    st, data, _ = rpc("CreateWatcher", {"path": "/"})
    assert st == 501 and data["code"] == "unimplemented" and "WatchDir" in data["message"]
    # a user is a name the agent takes: never an option, a path or a list
    for q in ("path=/etc/hostname&username=-rf", "path=/etc/hostname&username=a%3Bb",
              "path=/etc/hostname&username=..%2Froot", "path=%00", "username=root", "path="):
        st, data, _ = e.http("GET", "/files?" + q, headers=envd(a, ta))
        assert st == 400 and data["code"] == 400, (q, st, data)
    st, data, _ = e.http("GET", "/files?path=/no/such/file", headers=envd(a, ta))
    assert st == 404 and data["code"] == 404, (st, data)
    st, data, _ = e.http("GET", "/files?path=/etc", headers=envd(a, ta))
    assert st == 400 and "directory" in data["message"], (st, data)
    # uploads: no path for octet-stream, two parts for one file, a type that is neither
    st, data, _ = e.http("POST", "/files", b"x", headers=envd(a, ta, extra={
        "Content-Type": "application/octet-stream"}))
    assert st == 400 and "path" in data["message"], (st, data)
    part = lambda name: (b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\""
                         b"\r\n\r\nx\r\n" % name)
    st, data, _ = e.http("POST", "/files", part(b"/tmp/twice") + part(b"/tmp/../tmp/twice") +
                         b"--B--\r\n", headers=envd(a, ta, extra={
                             "Content-Type": "multipart/form-data; boundary=B"}))
    assert st == 400 and "two files" in data["message"], (st, data)
    st, data, _ = e.http("POST", "/files?path=/tmp/t", b"x", headers=envd(a, ta, extra={
        "Content-Type": "text/plain"}))
    assert st == 400, (st, data)
    # WatchDir: a body that is no envelope, a folder that is not there
    h = envd(a, ta, extra={"Content-Type": "application/connect+json"})
    for body, code in ((b"{}", "invalid_argument"),
                       (b"\x00\xff\xff\xff\xff{}", "resource_exhausted"),      # 4 GiB announced
                       (envelope({"path": "/no/such/dir"}), "not_found"),
                       (envelope({"path": "/etc/hostname"}), "invalid_argument")):
        st, data, hdr = e.http("POST", "/filesystem.Filesystem/WatchDir", body, headers=h)
        assert st == 200 and hdr["Content-Type"] == "application/connect+json", (body, st, data)
        msgs = frames(data)
        assert len(msgs) == 1 and msgs[0][0] == 2 and msgs[0][1]["error"]["code"] == code, \
            (body, msgs)
    alive(e)


def test_transfers_the_client_leaves(e, two):
    """A download of an endless file and an upload whose client goes half way: each
    helper is ended (its record says it was cut), nothing waits for the client, and the
    daemon goes on serving."""
    (a, ta, _), _ = two

    def head(method, path, extra):
        h = dict(envd(a, ta), Host="127.0.0.1", **extra)
        return ("%s %s HTTP/1.1\r\n" % (method, path) +
                "".join("%s: %s\r\n" % kv for kv in h.items()) + "\r\n").encode()

    s = socket.create_connection(("127.0.0.1", e.port), timeout=60)
    s.sendall(head("GET", "/files?path=/dev/zero", {}))
    got = b""
    while len(got) < (1 << 20):
        got += s.recv(65536)
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    s.close()
    s = socket.create_connection(("127.0.0.1", e.port), timeout=60)
    s.sendall(head("POST", "/files?path=/tmp/cut", {"Content-Type": "application/octet-stream",
                                                    "Transfer-Encoding": "chunked"}))
    s.sendall(b"%x\r\n%s\r\n" % (100000, b"c" * 100000))
    time.sleep(2)
    s.close()

    def cut(path, direction):
        rec = e.h.json("audit", "ls", "--sandbox", "e2b-" + a)
        return [r for r in rec if r["action"] == "sandbox.container.cp" and
                r["details"]["path"] == path and r["details"]["direction"] == direction]
    zero = wait_for(lambda: cut("/dev/zero", "out"), timeout=60)
    assert zero and zero[-1]["details"]["ok"] is False and zero[-1]["details"]["bytes"] >= 1 << 19
    up = wait_for(lambda: cut("/tmp/cut", "in"), timeout=60)
    assert up and up[-1]["details"]["ok"] is False and up[-1]["details"]["via"] == "e2b"
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
