# SPDX-License-Identifier: Apache-2.0
# test_47_mcp.py - kosa8 mcp (docs/mcp.md) with the official MCP client, unmodified
# (@modelcontextprotocol/sdk, exact version in scripts/npm-pins), over stdio and over
# streamable HTTP: the tools listed, code run, cell state kept, a cancelled long run
# killed, a file round trip through a shared folder (and no way out of it), malformed
# JSON-RPC and unknown tools answered with errors, --tools, --rewind-to, a sandbox the
# server makes and removes, and every call in the audit log. One sandbox for the module.
import http.client
import json
import os
import shutil
import tempfile
import time

import pytest

from conftest import make_sandbox, wait_or_fail
from mcpkit import Http, Raw, Sdk, stdio_args, text

SB = "mcpt"
TOOLS = ["run_code", "run_cell", "read_file", "write_file", "list_files", "checkpoint",
         "rewind", "egress_status"]


@pytest.fixture(scope="module")
def folders():
    d = tempfile.mkdtemp(prefix="k8mcpd-")
    os.makedirs(d + "/data")
    os.makedirs(d + "/ro")
    with open(d + "/ro/given.txt", "w") as f:
        f.write("read only\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def msb(home, loaded, folders):
    make_sandbox(home, SB, "--mount", folders + "/data:/data", "--mount",
                 folders + "/ro:/ro:ro", image=loaded)
    yield SB
    home("sandbox", "rm", SB, timeout=120)


@pytest.fixture(scope="module")
def stdio(home, msb):
    c = Sdk()
    r = c.cmd(op="connect", transport="stdio", **stdio_args(home, "--sandbox", msb))
    assert r["ok"], r
    assert r["server"]["name"] == "kosa8" and "tools" in r["capabilities"]
    yield c
    c.close()


def audit(home, action):
    p = home("audit", "ls", "--sandbox", SB, "--action", action, "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_tools_are_listed_with_schemas(stdio):
    r = stdio.cmd(op="list")
    assert [t["name"] for t in r["tools"]] == TOOLS
    for t in r["tools"]:
        assert len(t["description"]) > 40 and t["inputSchema"]["type"] == "object"
    code = next(t for t in r["tools"] if t["name"] == "run_code")["inputSchema"]
    assert code["required"] == ["code"] and "sandbox" not in code["properties"]


def test_run_code_python_and_shell(stdio):
    r = stdio.call("run_code", args={"code": "print(6 * 7)"})
    assert text(r) == "42\n[exit code 0]" and r["result"]["isError"] is False
    r = stdio.call("run_code", args={"code": "echo $((6*7)); exit 3", "language": "shell"})
    assert text(r) == "42\n[exit code 3]" and r["result"]["isError"] is True
    r = stdio.call("run_code", args={"code": "1/0"})
    assert "ZeroDivisionError" in text(r) and r["result"]["isError"] is True
    # long output: trimmed in the middle, and it says so
    r = stdio.call("run_code", args={"code": "for i in range(20000): print(i)"})
    t = text(r)
    assert t.startswith("0\n1\n") and "19999\n[exit code 0]" in t
    assert "bytes of output left out here" in t and len(t) < 11000
    # the time limit kills
    r = stdio.call("run_code", args={"code": "import time; time.sleep(60)", "timeout_s": 3})
    assert "timed out after 3 s" in text(r) and r["result"]["isError"] is True


def test_cells_keep_state(stdio):
    assert text(stdio.call("run_cell", args={"code": "x = 41\nimport math"})) == "(no output)"
    r = stdio.call("run_cell", args={"code": "print('hi'); math.floor(x + 1.5)"})
    assert text(r) == "hi\n42" and r["result"]["isError"] is False
    r = stdio.call("run_cell", args={"code": "undefined_name"})
    assert "NameError" in text(r) and r["result"]["isError"] is True


def test_a_cancelled_long_run_is_killed(home, stdio):
    r = stdio.call("run_code", args={"code": "import time\nprint('started', flush=True)\n"
                                              "time.sleep(300)", "timeout_s": 600},
                   progress=True, abort_after_ms=6000)
    assert r["ok"] is False and r["ms"] < 60000, r
    assert r["progress"], "no progress notification arrived during the run"
    assert all(p["progress"] > 0 for p in r["progress"])

    def killed():
        calls = [a for a in audit(home, "mcp.tool") if a["details"]["cancelled"]]
        exits = [a for a in audit(home, "sandbox.exit")
                 if "killed" in a["details"].get("note", "")]
        return calls and exits
    wait_or_fail(killed, "the cancelled call recorded and its process killed", timeout=60)
    # a cancelled cell is interrupted and the context goes on with its variables
    r = stdio.call("run_cell", args={"code": "import time\ny = 7\ntime.sleep(300)"},
                   abort_after_ms=6000)
    assert r["ok"] is False
    assert text(stdio.call("run_cell", args={"code": "y"})) == "7"


def test_file_round_trip_and_no_way_out(folders, stdio):
    r = stdio.call("write_file", args={"path": "/data/hello.txt", "content": "héllo\n"})
    assert "wrote 7 bytes" in text(r)
    with open(folders + "/data/hello.txt", encoding="utf-8") as f:
        assert f.read() == "héllo\n"
    assert text(stdio.call("read_file", args={"path": "/data/hello.txt"})) == "héllo\n"
    assert "hello.txt  7 bytes" in text(stdio.call("list_files", args={"path": "/data"}))
    # the code in the sandbox sees it, and what it writes comes back
    r = stdio.call("run_code", args={"code": "print(open('/data/hello.txt').read().upper(), end='')\n"
                                              "open('/data/out.bin', 'wb').write(bytes(range(5)))"})
    assert text(r).startswith("HÉLLO\n")
    r = stdio.call("read_file", args={"path": "/data/out.bin"})
    assert "not text" in text(r) and "AAECAwQ=" in text(r)
    # read-only folder, paths outside, links out
    r = stdio.call("write_file", args={"path": "/ro/x.txt", "content": "no"})
    assert r["result"]["isError"] and "read-only" in text(r)
    assert text(stdio.call("read_file", args={"path": "/ro/given.txt"})) == "read only\n"
    r = stdio.call("read_file", args={"path": "/etc/passwd"})
    assert r["result"]["isError"] and "not in a shared folder" in text(r)
    r = stdio.call("read_file", args={"path": "/data/../etc/passwd"})
    assert r["ok"] is False and r["error"]["code"] == -32602, r
    os.symlink("/etc/passwd", folders + "/data/hostlink")
    stdio.call("run_code", args={"code": "import os; os.symlink('/etc/shadow', '/data/guestlink')"})
    for name in ("hostlink", "guestlink"):
        r = stdio.call("read_file", args={"path": "/data/" + name})
        assert r["result"]["isError"] and "root:" not in text(r), (name, r)
        r = stdio.call("write_file", args={"path": "/data/" + name, "content": "x"})
        assert r["result"]["isError"], (name, r)
    assert open("/etc/passwd").read().startswith("root:")


def test_files_in_the_interpreters_container(home, msb):
    c = Sdk()
    try:
        assert c.cmd(op="connect", transport="stdio",
                     **stdio_args(home, "--sandbox", msb, "--files", "/work"))["ok"]
        text(c.call("run_cell", args={"code": "import os; os.makedirs('/work', exist_ok=True)"}))
        r = c.call("write_file", args={"path": "/work/notes.txt", "content": "from the agent\n"})
        assert "wrote 15 bytes" in text(r), r
        r = c.call("run_cell", args={"code": "open('/work/notes.txt').read()"})
        assert text(r) == "'from the agent\\n'"
        text(c.call("run_cell", args={"code": "open('/work/made.bin', 'wb').write(b'\\xff\\x00')\n"
                                               "import os; os.symlink('/etc/hostname', '/work/out')"}))
        assert "notes.txt  15 bytes" in text(c.call("list_files", args={"path": "/work"}))
        assert "/wA=" in text(c.call("read_file", args={"path": "/work/made.bin"}))
        r = c.call("read_file", args={"path": "/work/out"})
        assert r["result"]["isError"] and "leads out" in text(r), r
        r = c.call("read_file", args={"path": "/etc/hostname"})
        assert r["result"]["isError"] and "/work" in text(r), r
    finally:
        c.close()


def test_unknown_tools_and_bad_arguments(stdio):
    r = stdio.call("no_such_tool")
    assert r["ok"] is False and r["error"]["code"] == -32602 and "no_such_tool" in r["error"]["message"]
    r = stdio.call("run_code", args={})
    assert r["ok"] is False and r["error"]["code"] == -32602 and "'code'" in r["error"]["message"]
    r = stdio.call("run_code", args={"code": "1", "sandbox": "other"})
    assert r["ok"] is False and "unknown argument 'sandbox'" in r["error"]["message"]
    r = stdio.call("run_code", args={"code": "1", "timeout_s": 10 ** 9})
    assert r["ok"] is False and r["error"]["code"] == -32602


def test_malformed_json_rpc_over_stdio(home, msb):
    s = Raw(home, "--sandbox", msb)
    cases = [
        (b"{bad json\n", -32700),
        (b"[]\n", -32600),
        (b"5\n", -32600),
        (b'{"jsonrpc":"1.0","id":1,"method":"ping"}\n', -32600),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}\n', -32600),
        (b'{"jsonrpc":"2.0","id":2,"method":5}\n', -32600),
        (b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[1]}\n', -32600),
        (b'{"jsonrpc":"2.0","id":4,"id":5,"method":"ping"}\n', -32700),
        (b'{"jsonrpc":"2.0","id":6,"method":"no/such/method"}\n', -32601),
        (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5}}\n', -32602),
        (b'\xff\xfe{"jsonrpc":"2.0"}\n', -32700),
        (b'{"jsonrpc":"2.0","id":8,"method":"' + b"m" * 5000 + b'"}\n', -32600),
        (b"x" * (5 << 20) + b"\n", -32700),
    ]
    for data, code in cases:
        s.send(data)
        r = s.recv()
        assert r.get("error", {}).get("code") == code, (data[:80], r)
    s.send(b'{"jsonrpc":"2.0","method":"notifications/whatever"}\n')      # ignored
    s.send(b'{"jsonrpc":"2.0","id":9,"method":"ping"}\n')
    assert s.recv() == {"jsonrpc": "2.0", "id": 9, "result": {}}
    assert s.close() == 0


def test_http_transport(home, msb):
    srv = Http(home, "--sandbox", msb)
    c = Sdk()
    try:
        r = c.cmd(op="connect", transport="http", url=srv.url, token=srv.token)
        assert r["ok"], r
        assert r["session"] and len(r["session"]) == 32 and r["protocol"] == "2025-06-18"
        assert [t["name"] for t in c.cmd(op="list")["tools"]] == TOOLS
        r = c.call("run_code", args={"code": "print('over http')"}, progress=True)
        assert text(r) == "over http\n[exit code 0]"
        assert text(c.call("run_cell", args={"code": "x * 2"})) == "82"   # the stdio test's x
        r = c.call("no_such_tool")
        assert r["ok"] is False and r["error"]["code"] == -32602
        r = c.call("run_code", args={"code": "import time; time.sleep(300)", "timeout_s": 600},
                   progress=True, abort_after_ms=5000)
        assert r["ok"] is False and r["progress"] and r["ms"] < 60000, r
        raw_http_checks(srv, r)
    finally:
        c.close()
        assert srv.close() in (0, -15)


def raw_http_checks(srv, _):
    def req(method, body=None, headers=None, token=True):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if token:
            h["Authorization"] = "Bearer " + srv.token
        h.update(headers or {})
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        c.request(method, "/mcp", body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                                  "clientInfo": {"name": "raw", "version": "0"}}})
    assert req("POST", init, token=False)[0] == 401
    assert req("POST", init, headers={"Authorization": "Bearer wrong"}, token=False)[0] == 401
    assert req("POST", init, headers={"Origin": "http://evil.example"})[0] == 403
    assert req("GET")[0] == 405
    st, h, data = req("POST", init)
    assert st == 200 and json.loads(data)["result"]["protocolVersion"] == "2025-03-26"
    sid = h["Mcp-Session-Id"]
    ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert req("POST", ping)[0] == 400                                  # no session
    assert req("POST", ping, headers={"Mcp-Session-Id": "0" * 32})[0] == 404
    st, _, data = req("POST", "{nope", headers={"Mcp-Session-Id": sid})
    assert st == 400 and json.loads(data)["error"]["code"] == -32700
    st, _, data = req("POST", ping, headers={"Mcp-Session-Id": sid,
                                             "MCP-Protocol-Version": "1999-01-01"})
    assert st == 400
    st, _, data = req("POST", ping, headers={"Mcp-Session-Id": sid})
    assert st == 200 and json.loads(data)["result"] == {}
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert req("POST", note, headers={"Mcp-Session-Id": sid})[0] == 202
    assert req("DELETE", headers={"Mcp-Session-Id": sid})[0] == 200
    assert req("POST", ping, headers={"Mcp-Session-Id": sid})[0] == 404


def test_operator_picks_the_tools(home, msb):
    c = Sdk()
    try:
        assert c.cmd(op="connect", transport="stdio",
                     **stdio_args(home, "--sandbox", msb, "--tools", "run_cell,read_file"))["ok"]
        assert [t["name"] for t in c.cmd(op="list")["tools"]] == ["run_cell", "read_file"]
        r = c.call("run_code", args={"code": "print(1)"})
        assert r["ok"] is False and r["error"]["code"] == -32602
    finally:
        c.close()
    p = home("mcp", "--sandbox", msb, "--tools", "run_code,format_disk")
    assert p.returncode == 2 and "format_disk" in p.stderr


def test_rewind_after_every_call(home, msb):
    home("checkpoint", msb, "--label", "mcpclean", check=True, timeout=300)
    c = Sdk()
    try:
        assert c.cmd(op="connect", transport="stdio",
                     **stdio_args(home, "--sandbox", msb, "--rewind-to", "mcpclean"))["ok"]
        assert text(c.call("run_cell", args={"code": "z = 1\nz"})) == "1"
        r = c.call("run_cell", args={"code": "z"})
        assert "NameError" in text(r), "--rewind-to did not rewind after the call"
    finally:
        c.close()


def test_a_sandbox_of_its_own(home, loaded):
    c = Sdk()
    try:
        r = c.cmd(op="connect", transport="stdio",
                  **stdio_args(home, "--sandbox", "mcp-own", "--image", loaded, "--memory", "512",
                               "--disk", "2"))
        assert r["ok"], r
        assert text(c.call("run_code", args={"code": "print('own')"}, timeout_ms=600000)) == \
            "own\n[exit code 0]"
        assert home("sandbox", "inspect", "mcp-own").returncode == 0
    finally:
        c.close()
    wait_or_fail(lambda: home("sandbox", "inspect", "mcp-own").returncode == 4,
                 "the server's own sandbox removed at its end", timeout=120)


def test_every_call_is_audited(home, msb):
    recs = audit(home, "mcp.tool")
    tools = {r["details"]["tool"] for r in recs}
    assert {"run_code", "run_cell", "read_file", "write_file", "list_files"} <= tools, tools
    assert {r["details"]["transport"] for r in recs} == {"stdio", "http"}
    assert all(r["details"]["by"] == "client" and len(r["details"]["args_sha256"]) == 64
               for r in recs)
    # refused calls too, and no client can write a record that is not mcp.*
    assert any(r["details"]["tool"] == "no_such_tool" for r in recs)
    from interpkit import api
    st, err = api(home, "POST", "/v1/audit", {"action": "sandbox.rm", "sandbox": SB})
    assert st == 400 and "mcp." in err["error"]["message"]
