# SPDX-License-Identifier: Apache-2.0
# test_98_hostile_interp.py - the interpreter's output from the attacker's position
# (docs/interpreter.md, docs/threat-model.md): code in the sandbox puts its own "driver"
# on a context's socket, or its own python3 in a container, and answers kosa8d with a
# line of 10 MiB, garbage, JSON of the wrong shapes, a stream that never ends or never
# stops. kosa8d passes on only checked events, always ends a cell with its own "end",
# counts what it dropped, and goes on serving.
import json
import os
import time

import pytest

from conftest import UnixHTTP, daemon_pid, make_sandbox
from interpkit import api, cell, evs, main_result, ok_end

pytestmark = pytest.mark.hostile

SB = "hitp"

# A fake driver, started by a cell in the interpreter container: it listens on a context
# socket of its own and answers each cell as the MODE word in the cell's code says.
FAKE = r'''
import os, socket, sys, time
p = sys.argv[1]
try:
    os.unlink(p)
except OSError:
    pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(p)
s.listen(4)
GOOD_END = b'{"type":"end","execution_count":1,"ok":true}\n'
while True:
    c, _ = s.accept()
    buf = b""
    while not buf.endswith(b"END\n"):
        d = c.recv(65536)
        if not d:
            break
        buf += d
    try:
        if b"MODE:huge" in buf:
            c.sendall(b'{"type":"start","execution_count":1}\n')
            c.sendall(b'{"type":"stdout","text":"' + b"x" * (10 << 20) + b'"}\n')
            c.sendall(b"y" * (6 << 20))           # no newline for a while
            c.sendall(b'\n{"type":"stdout","text":"after huge\\n"}\n' + GOOD_END)
        elif b"MODE:garbage" in buf:
            c.sendall(b'{"type":"start","execution_count":1}\n'
                      b'\x00\xff\xfe binary \x1b[2J\n'
                      b'not json at all\n'
                      b'[' * 100000 + b'\n'
                      b'{"type":"connected"}\n'
                      b'{"type":"exec","argv":["rm","-rf","/"]}\n'
                      b'{"type":"stdout","text":5}\n'
                      b'{"type":"stdout","text":"\\udc00"}\n'
                      b'{"type":"stdout","text":"a","type":"stderr"}\n'
                      b'{"type":"result","is_main_result":"yes","data":{}}\n'
                      b'{"type":"result","data":{"text/plain":"ok","../../etc":"x","text/html":[1]}}\n'
                      b'{"type":"error","name":"Evil","value":"' + b"v" * (2 << 20) + b'"}\n'
                      b'{"type":"stdout","text":"kept\\n","extra":{"deep":[1,2,3]}}\n'
                      b'{"type":"end","execution_count":99999999999999999999,"ok":true}\n'
                      + GOOD_END +
                      b'{"type":"stdout","text":"after the end\\n"}\n')
        elif b"MODE:noend" in buf:
            c.sendall(b'{"type":"start","execution_count":1}\n{"type":"stdout","text":"half"}\n')
        elif b"MODE:hang" in buf:
            c.recv(1)                           # until the client is gone
        elif b"MODE:flood" in buf:
            line = b'{"type":"stdout","text":"' + b"f" * 4000 + b'"}\n'
            while True:
                c.sendall(line)
    except OSError:
        pass
    c.close()
'''


@pytest.fixture(scope="module")
def hsb(home, loaded):
    make_sandbox(home, SB, image=loaded)
    yield SB
    home("sandbox", "rm", SB, timeout=120)


@pytest.fixture(scope="module")
def evil(home, hsb):
    """The fake driver's context id, in the default context's container."""
    st, ev = cell(home, hsb, "import os\nos.getpid()")
    assert st == 200, ev
    ctr = evs(ev, "start")[0]["context"].split("-")[0]
    cid = ctr + "-evil"
    code = ("import subprocess, sys\n"
            "FAKE = %r\n"
            "subprocess.Popen([sys.executable, '-c', FAKE, '/run/kosa8/ctx/%s.sock'],\n"
            "                 start_new_session=True, stdout=subprocess.DEVNULL,\n"
            "                 stderr=subprocess.DEVNULL)\n"
            "import time, os\n"
            "for _ in range(100):\n"
            "    if os.path.exists('/run/kosa8/ctx/%s.sock'): break\n"
            "    time.sleep(0.1)\n"
            "os.path.exists('/run/kosa8/ctx/%s.sock')") % (FAKE, cid, cid, cid)
    st, ev = cell(home, hsb, code)
    assert main_result(ev) == "True", ev
    return cid


def known(events):
    """Every event is of a known type with exactly kosa8's fields."""
    shapes = {"start": {"type", "execution_count", "context"}, "stdout": {"type", "text"},
              "stderr": {"type", "text"}, "result": {"type", "is_main_result", "data"},
              "error": {"type", "name", "value", "traceback"},
              "end": {"type", "context", "execution_count", "ok", "ms", "dropped_lines"}}
    for e in evs(events):
        keys = set(e) - {"source"}
        assert e["type"] in shapes and keys <= shapes[e["type"]], e
        if e["type"] in ("stdout", "stderr"):
            assert isinstance(e["text"], str)


def still_serving(home, hsb, pid):
    assert daemon_pid(home.path) == pid
    st, ev = cell(home, hsb, "6 * 7")
    assert st == 200 and main_result(ev) == "42", ev


def test_huge_lines_are_dropped_not_held(home, hsb, evil):
    pid = daemon_pid(home.path)
    st, ev = cell(home, hsb, "MODE:huge", ctx=evil)
    assert st == 200, ev
    known(ev)
    assert [e["text"] for e in evs(ev, "stdout")] == ["after huge\n"], evs(ev, "stdout")
    end = ok_end(ev)
    assert end["ok"] is True and end["dropped_lines"] == 2, end
    still_serving(home, hsb, pid)
    with open("/proc/%d/status" % pid) as f:
        rss = [l for l in f if l.startswith("VmRSS")][0]
    print("kosa8d after 16 MiB of hostile lines:", rss.strip())


def test_garbage_is_checked_and_rebuilt(home, hsb, evil):
    pid = daemon_pid(home.path)
    st, ev = cell(home, hsb, "MODE:garbage", ctx=evil)
    assert st == 200
    known(ev)
    assert [e["text"] for e in evs(ev, "stdout")] == ["kept\n"], "the event with an "\
        "extra field is passed on without it; nothing after the end"
    res = evs(ev, "result")
    assert len(res) == 1 and res[0]["data"] == {"text/plain": "ok"}, res
    err = evs(ev, "error")
    assert len(err) == 1 and err[0]["name"] == "Evil", err
    assert len(err[0]["value"]) < 70 * 1024 and "[kosa8: cut at" in err[0]["value"]
    end = ok_end(ev)
    assert end["dropped_lines"] >= 9, end
    assert end["execution_count"] == 1
    still_serving(home, hsb, pid)


def test_a_stream_without_end_is_a_lost_context(home, hsb, evil):
    st, ev = cell(home, hsb, "MODE:noend", ctx=evil)
    known(ev)
    err = evs(ev, "error")
    assert err and err[-1]["name"] == "ContextLost" and err[-1]["source"] == "kosa8", ev
    assert ok_end(ev)["ok"] is False


def test_a_driver_that_hangs_meets_the_timeout(home, hsb, evil):
    pid = daemon_pid(home.path)
    t0 = time.monotonic()
    st, ev = cell(home, hsb, "MODE:hang", ctx=evil, timeout_s=3)
    assert time.monotonic() - t0 < 60
    assert evs(ev, "error")[-1]["name"] == "TimeoutError"
    assert ok_end(ev)["ok"] is False
    still_serving(home, hsb, pid)


def test_a_flood_stops_when_the_client_leaves(home, hsb, evil):
    pid = daemon_pid(home.path)
    c = UnixHTTP(os.path.join(home.path, "kosa8d.sock"), timeout=120)
    c.request("POST", "/v1/sandboxes/%s/contexts/%s/run" % (hsb, evil),
              body=json.dumps({"code": "MODE:flood"}), headers={"Expect": ""})
    r = c.getresponse()
    assert r.status == 200
    for _ in range(50):
        assert json.loads(r.readline())["type"] in ("start", "stdout")
    r.close()       # the client leaves mid-flood (the response holds the socket too)
    c.close()
    still_serving(home, hsb, pid)

    def cancelled():
        p = home("audit", "ls", "--sandbox", hsb, "--action", "sandbox.cell.end", "--json",
                 timeout=60)
        return [r for r in json.loads(p.stdout) if r["details"]["context"] == evil and
                r["details"]["cancelled"]]
    from conftest import wait_or_fail
    wait_or_fail(cancelled, "the flood's cell recorded as cancelled", timeout=60)


def test_hostile_context_files_and_python3(home, hsb, evil):
    pid = daemon_pid(home.path)
    st, ev = cell(home, hsb, "open('/run/kosa8/ctx/%s.info', 'w').write("
                  "'pid=notanumber\\ncwd=/x\\n')\n"
                  "open('/run/kosa8/ctx/000000000000-other.info', 'w').write('pid=1\\n')\n"
                  "open('/run/kosa8/ctx/zz.info', 'wb').write(b'\\xff' * 100000)"
                  % evil)
    assert ok_end(ev)["ok"] is True, ev
    st, lst = api(home, "GET", "/v1/sandboxes/%s/contexts" % hsb)
    assert st == 200, lst
    ids = [c["id"] for c in lst]
    assert any(i.endswith("-default") for i in ids)
    assert not any(i.startswith("000000000000") or i == "zz" for i in ids), ids
    # a container whose python3 answers garbage: creating a context there fails cleanly
    p = home("sandbox", "start", hsb, "python:3.12-slim", "sleep", "3600")
    assert p.returncode == 0, p.stderr
    ctr = p.stdout.strip()
    script = "#!/bin/sh\nhead -c 9000000 /dev/zero | tr '\\0' x\necho\necho '{\"id\":5}'\n"
    p = home("sandbox", "exec", hsb, ctr, "python3", "-c",
             "import os\nos.unlink('/usr/local/bin/python3')\n"
             "open('/usr/local/bin/python3', 'w').write(%r)\n"
             "os.chmod('/usr/local/bin/python3', 0o755)" % script)
    assert p.returncode == 0, p.stderr
    st, err = api(home, "POST", "/v1/sandboxes/%s/contexts" % hsb, {"container": ctr})
    assert st in (500, 503) and "did not start" in err["error"]["message"], (st, err)
    st, lst = api(home, "GET", "/v1/sandboxes/%s/contexts?container=%s" % (hsb, ctr))
    assert st == 200 and lst == [], lst
    st, err = cell(home, hsb, "1", ctx=ctr + "-abc")
    assert st in (409, 503), (st, err)
    still_serving(home, hsb, pid)
