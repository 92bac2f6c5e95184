# SPDX-License-Identifier: Apache-2.0
"""The model server's boundary (issue 13): `kosa8-model serve`, started by a real kosa8d,
reads a hostile model file and hostile API clients, so it runs jailed (src/model/jail.h).

The attacker holds a model file and the API port. The tests read what the kernel says of
the served process (/proc/PID/status, its root, its fds), send it hostile requests, and
check it still answers and that the model in the store is unchanged. No VM is booted."""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import pytest

from conftest import BIN, TOP, Home, new_home

sys.path.insert(0, os.path.join(TOP, "tests", "model"))
import gguf_writer  # noqa: E402
import scripted  # noqa: E402
import squatter  # noqa: E402  (tests/integration)

pytestmark = pytest.mark.hostile

TOOL = ["<tool_call>", '\n{"name": "run_code", "arguments": {"code": "print(6*7)"}}\n',
        "</tool_call>"]
TOOLS = [{"type": "function", "function": {
    "name": "run_code", "description": "Run Python code in a sealed sandbox",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                   "required": ["code"]}}}]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, path, body, timeout=60):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def proc_status(pid):
    st = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            st[k] = v.split()
    return st


@pytest.fixture(scope="module")
def served():
    if os.geteuid() != 0:
        pytest.skip("host: only root can give kosa8-model a uid of its own")
    h = Home(new_home("k8m-"))
    h.start()
    model = os.path.join(h.path, "tool.gguf")
    scripted.make_scripted(model, script=TOOL, vocab="bpe-qwen2")
    h("model", "import", model, "--name", "tool", check=True, timeout=120)
    port = free_port()
    out = h.json("model", "serve", "tool", "--port", str(port), "--threads", "1", "--ctx", "1024",
                 timeout=200)
    yield h, out["pid"], port, model
    h("model", "stop", "tool", timeout=60)
    h.stop()
    shutil.rmtree(h.path, ignore_errors=True)


def test_model_server_runs_jailed(served):
    h, pid, port, _ = served
    st = proc_status(pid)
    assert st["Uid"][0] != "0" and len(set(st["Uid"])) == 1, st["Uid"]
    assert st["Gid"][0] != "0" and len(set(st["Gid"])) == 1, st["Gid"]
    assert st["Groups"] == [], st["Groups"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[cap][0], 16) == 0, (cap, st[cap])
    assert st["Seccomp"] == ["2"] and st["NoNewPrivs"] == ["1"], (st["Seccomp"], st["NoNewPrivs"])
    # Its root is the empty tmpfs: nothing of the host's tree by path.
    assert os.listdir("/proc/%d/root/" % pid) == []
    # No fd on anything of $KOSA8_HOME but its log (the model is a mapping, not an fd).
    for fd in os.listdir("/proc/%d/fd" % pid):
        t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        assert not t.startswith(h.path) or t.endswith("/logs/model-tool.log"), t
    # ...and it still does its work: the scripted model calls run_code.
    code, r = post(port, "/v1/chat/completions", json.dumps({
        "messages": [{"role": "user", "content": "six times seven?"}], "tools": TOOLS}).encode())
    assert code == 200, r
    call = r["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "run_code" and json.loads(call["arguments"]) == {"code": "print(6*7)"}


def test_hostile_requests_leave_the_server_and_the_store_intact(served):
    h, pid, port, model = served
    before = hashlib.sha256(open(model, "rb").read()).hexdigest()
    # Bad JSON, a body over the cap, deep nesting, a prompt over the context.
    code, r = post(port, "/v1/chat/completions", b"{\"messages\": [")
    assert code == 400 and r["error"]["type"] == "invalid_request_error", r
    code, r = post(port, "/v1/chat/completions", b"[" * 5_000_000)
    assert code == 413, r
    code, r = post(port, "/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000)
    assert code == 400, r
    code, r = post(port, "/v1/chat/completions", json.dumps({
        "messages": [{"role": "user", "content": "word " * 5000}]}).encode())
    assert code == 400 and r["error"]["code"] == "context_length_exceeded", r
    # Still the same process, still jailed, still answering.
    assert proc_status(pid)["Seccomp"] == ["2"]
    code, r = post(port, "/v1/chat/completions", json.dumps({
        "messages": [{"role": "user", "content": "again"}], "tools": TOOLS}).encode())
    assert code == 200 and r["choices"][0]["finish_reason"] == "tool_calls", r
    ps = h.json("model", "ps")
    assert [s["pid"] for s in ps if s["name"] == "tool"] == [pid], ps
    # The stored model is the file that was imported, byte for byte.
    ls = h.json("model", "ls")
    assert [m["sha256"] for m in ls if m["name"] == "tool"] == [before], ls
    blob = os.path.join(h.path, "models", "blobs", "sha256-" + before)
    assert hashlib.sha256(open(blob, "rb").read()).hexdigest() == before


def model_rss(pid, ino):
    """Resident bytes of the process's mapping of the file with inode `ino` (0: not yet
    touched, or not mapped), from /proc/PID/smaps."""
    rss, ours = 0, False
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                ours = head[4] == str(ino)
            elif ours and head[0] == "Rss:":
                rss += int(head[1])
    return rss


def test_model_file_is_parsed_inside_the_jail():
    """Issue 34, 4: the GGUF header, the tokenizer and the chat template are hostile bytes,
    so kosa8-model maps the file, enters its jail, and only then reads a byte of it. Seen
    from the host while it loads: as soon as any page of the model's mapping is resident
    (the parser has touched the file) and while it still has one thread (before the
    engine's threads and the HTTP server: the load), it is already jailed. A model with a
    large vocabulary makes the load long enough to watch (about 0.1 s here)."""
    if os.geteuid() != 0:
        pytest.skip("host: only root can give kosa8-model a uid of its own")
    d = tempfile.mkdtemp(prefix="k8mj", dir="/tmp")
    try:
        model = os.path.join(d, "big.gguf")
        gguf_writer.make_model(model, n_embd=64, n_layer=1, n_head=2, n_head_kv=1, n_ff=64,
                               n_vocab_pad=400000)
        ino = os.stat(model).st_ino
        p = subprocess.Popen([os.path.join(BIN, "kosa8-model"), "serve", model, "--port",
                              str(free_port()), "--threads", "1", "--ctx", "256"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        loading = []            # (status) of each sample taken while it parsed
        try:
            while p.poll() is None:
                try:
                    touched = model_rss(p.pid, ino) > 0     # first: then the status
                    st = proc_status(p.pid)
                except (FileNotFoundError, ProcessLookupError):
                    break
                if touched and st["Threads"] == ["1"]:
                    loading.append(st)
                elif touched:
                    break       # threads: the load is over
        finally:
            p.terminate()
            err = p.communicate(timeout=30)[1]
        assert loading, "never saw the load (file touched, one thread): " + err
        for st in loading:
            assert st["Uid"][0] != "0", ("parsed as root", st["Uid"], len(loading))
            assert int(st["CapEff"][0], 16) == 0, st["CapEff"]
            assert st["NoNewPrivs"] == ["1"] and st["Seccomp"] == ["2"], st
        assert "jailed" in err and "not jailed" not in err, err
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_squatted_port_is_an_error_naming_its_holder(served):
    """Issue 34, 3: any local user can listen on the model port first. `kosa8 model
    serve` must not then report success (nor let a broker be pointed at that port): the
    daemon binds the port itself, and a port held by someone else is an error naming the
    holder. Nothing is sent to the squatter, not even a health check."""
    h, _, _, model = served
    h("model", "import", model, "--name", "squat", check=True, timeout=120)
    port = free_port()
    sq = squatter.Squatter(port)
    try:
        p = h("model", "serve", "squat", "--port", str(port), "--threads", "1", "--ctx",
              "256", timeout=200)
        assert p.returncode == 5, (p.returncode, p.stdout, p.stderr)
        assert "in use" in p.stderr and "pid %d" % sq.pid in p.stderr, p.stderr
        assert "uid 65534" in p.stderr and "python" in p.stderr, p.stderr
        assert "squat" not in [s["name"] for s in h.json("model", "ps")]
        assert sq.records() == [], sq.records()
    finally:
        sq.close()
        h("model", "stop", "squat", timeout=60)
    # the port free again, the same command serves
    out = h.json("model", "serve", "squat", "--port", str(port), "--threads", "1", "--ctx",
                 "256", timeout=200)
    assert out["port"] == port
    assert h("model", "stop", "squat", timeout=60).returncode == 0
