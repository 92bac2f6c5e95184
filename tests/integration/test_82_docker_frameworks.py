# SPDX-License-Identifier: Apache-2.0
# test_82_docker_frameworks.py - the call sequences agent frameworks make on the Docker
# API (issue 12; the pages docs/guides/smolagents.md and docs/guides/openai-agents-sdk.md,
# issue 26), with python3-docker and the docker CLI against a daemon of this module's own
# (test_89's fixture: one small engine sandbox shared by every test here). The frameworks
# themselves are not installed here; their Docker calls are replayed as their sources make
# them, each step named after the framework's method that makes it.
import concurrent.futures
import io
import json
import os
import secrets
import socket
import tarfile
import threading
import time
import urllib.request
import uuid

import pytest

from conftest import wait_or_fail
from test_50_registry import free_port
from test_89_docker_containers import IMG, SERVER, dk, docker, dockerpy, ok, sock  # noqa: F401

needs_py = pytest.mark.skipif(dockerpy is None,
                              reason="python3-docker is needed (scripts/deps.sh)")


def test_eight_runs_at_once(dk):
    """Eight `docker run --rm` at the same moment: every one prints its own answer and
    nothing is left behind."""
    def one(n):
        return n, docker(dk, "run", "--rm", IMG, "python", "-c", "print(%d * %d)" % (n, n),
                         timeout=600)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        done = list(pool.map(one, range(8)))
    print("eight docker run --rm at once: %.1f s" % (time.time() - t0))
    for n, p in done:
        assert (p.returncode, p.stdout) == (0, "%d\n" % (n * n)), (n, p.stdout, p.stderr)
    assert ok(docker(dk, "ps", "-aq")) == ""


# --- OpenAI Agents SDK (openai-agents 0.17, agents.sandbox.sandboxes.docker) ----------------

# The SDK's length-framed stdin: the command reads exactly N bytes through `head -c`, so its
# end never depends on the stdin half-close; a failed `head` fails the exec (98).
FRAMED = ('n=$1; shift; st="${TMPDIR:-/tmp}/.framed.$$"; '
          '{ head -c "$n"; echo "$?" >"$st"; } | "$@"; rc=$?; '
          'p="$(cat "$st" 2>/dev/null)"; rm -f "$st"; [ "$p" = 0 ] || exit 98; exit "$rc"')
# Its runtime helper, installed once per container through a here-document, then run.
HELPER = "/tmp/openai-agents/bin/resolve-workspace-path-test"
HELPER_INSTALL = ('set -eu; dest="$1"; tmp="$dest.tmp.$$"; mkdir -p -- "$(dirname -- "$dest")"; '
                  "cat > \"$tmp\" <<'EOF'\n"
                  "#!/bin/sh\n"
                  "set -eu\n"
                  "cd \"$1\" && cd \"$(dirname \"$2\")\" && "
                  "printf '%s/%s\\n' \"$(pwd -P)\" \"$(basename \"$2\")\"\n"
                  "EOF\n"
                  'chmod 0555 "$tmp"; rm -f -- "$dest"; mv -f -- "$tmp" "$dest"')
PTY_WRAP = 'mkdir -p "$1" && printf "%s" "$$" > "$2" && shift 2 && exec "$@"'
KILL_PID = ('if [ -f "$1" ]; then pid="$(cat "$1" 2>/dev/null || true)"; '
            'if [ -n "$pid" ]; then kill -KILL "$pid" >/dev/null 2>&1 || true; fi; fi')
STAGING = "/tmp/sandbox-docker-archive"


def close_exec_socket(resp, sk):
    """_DockerExecSocket.close: the socket, then the response, whose error (its file is
    closed with the socket) the SDK ignores."""
    sk.close()
    try:
        resp.close()
    except Exception:
        pass


class AgentsSdkSession:
    """DockerSandboxSession's Docker calls: exec_run with demux for commands, exec create
    plus a hijacked start (the SDK posts it itself, asking to upgrade) for stdin and
    terminals, exec inspect for exit codes, the archive GET for the workspace."""

    def __init__(self, client, container, root="/workspace"):
        self.client, self.ct, self.api, self.root = client, container, client.api, root
        self.ready = False

    def exec(self, *cmd, workdir=None):  # _exec_run
        r = self.ct.exec_run(cmd=list(cmd), demux=True,
                             workdir=workdir or (self.root if self.ready else None), user="")
        out, err = r.output
        return r.exit_code, out or b"", err or b""

    def exec_ok(self, *cmd):  # _exec_checked
        rc, out, err = self.exec(*cmd)
        assert rc == 0, (cmd, rc, out, err)
        return out

    def start_socket(self, exec_id, tty=False):  # _start_exec_socket
        resp = self.api._post_json(self.api._url("/exec/{0}/start", exec_id),
                                   headers={"Connection": "Upgrade", "Upgrade": "tcp"},
                                   data={"Tty": tty, "Detach": False}, stream=True)
        sk = self.api._get_raw_response_socket(resp)
        return resp, sk, getattr(sk, "_sock", sk)

    def stream_into(self, cmd, payload):  # _stream_into_exec
        ex = self.api.exec_create(self.ct.id, ["sh", "-c", FRAMED, "sh", str(len(payload))]
                                  + cmd, stdin=True, stdout=True, stderr=True, workdir=None,
                                  user="")
        resp, sk, raw = self.start_socket(ex["Id"])
        try:
            raw.sendall(payload)
            raw.shutdown(socket.SHUT_WR)
            while raw.recv(1 << 20):
                pass
        finally:
            close_exec_socket(resp, sk)
        return self.api.exec_inspect(ex["Id"]).get("ExitCode")

    def write(self, path, data):  # write: staged in the container, then copied into place
        self.exec_ok("mkdir", "-p", os.path.dirname(path))
        self.exec_ok("mkdir", "-p", STAGING)
        stage = "%s/%s_%s" % (STAGING, uuid.uuid4().hex, os.path.basename(path))
        assert self.stream_into(["sh", "-lc", 'cat > "$1"', "sh", stage], data) == 0
        self.exec_ok("cp", "--", stage, path)
        self.exec("rm", "-rf", "--", stage)

    def read(self, path):  # read: cat inside the container
        return self.exec_ok("cat", "--", path)

    def pty_start(self, cmd, tty):  # pty_exec_start: (exec id, pid file, reader)
        pid_path = "%s/%s_pty.pid" % (STAGING, uuid.uuid4().hex)
        ex = self.api.exec_create(self.ct.id, ["sh", "-lc", PTY_WRAP, "sh", STAGING, pid_path]
                                  + cmd, stdin=True, stdout=True, stderr=True, tty=tty,
                                  workdir=self.root, user="")
        resp, sk, raw = self.start_socket(ex["Id"], tty=tty)
        if not tty:
            raw.shutdown(socket.SHUT_WR)
        out = bytearray()

        def pump():  # _pump_pty_socket
            try:
                for _, chunk in dockerpy.utils.socket.frames_iter(raw, tty=tty):
                    out.extend(chunk)
            except OSError:
                pass
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        return ex["Id"], pid_path, raw, out, (resp, sk, t)

    def running(self):  # running: a reload, then the status
        self.ct.reload()
        return self.ct.status == "running"

    def exposed_port(self, port):  # _resolve_exposed_port
        self.ct.reload()
        b = self.ct.attrs["NetworkSettings"]["Ports"]["%d/tcp" % port][0]
        return b.get("HostIp") or "127.0.0.1", int(b["HostPort"])

    def persist_workspace(self):  # persist_workspace: a staged copy, then the archive GET
        parent = "%s/%s_workspace" % (STAGING, uuid.uuid4().hex)
        self.exec_ok("mkdir", "-p", parent)
        self.exec_ok("cp", "-R", "--", self.root, parent + "/workspace")
        resp = self.api._get(self.api._url("/containers/{0}/archive", self.ct.id),
                             params={"path": parent + "/workspace"}, stream=True,
                             headers={"Accept-Encoding": "identity"})
        self.api._raise_for_status(resp)
        data = b"".join(self.api._stream_raw_result(resp, chunk_size=2 * 1024 * 1024,
                                                    decode=False))
        resp.close()
        self.exec("rm", "-rf", "--", parent)
        return data

    def hydrate_workspace(self, tar_bytes):  # hydrate_workspace: tar -x through stdin
        self.exec_ok("mkdir", "-p", self.root)
        assert self.stream_into(["tar", "-x", "-C", self.root], tar_bytes) == 0


def strip_prefix(tar_bytes, prefix):
    """The SDK's strip_tar_member_prefix: the archive's `workspace/` top folder taken off."""
    src, dst = tarfile.open(fileobj=io.BytesIO(tar_bytes)), io.BytesIO()
    with tarfile.open(fileobj=dst, mode="w") as out:
        for m in src.getmembers():
            if m.name == prefix:
                continue
            m.name = m.name[len(prefix) + 1:]
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
    return dst.getvalue()


@needs_py
def test_openai_agents_sdk_docker_sandbox(dk, monkeypatch):
    """docs/guides/openai-agents-sdk.md: DockerSandboxClient.create (the image looked up, a
    container kept alive by `tail -f /dev/null` with a published port on 127.0.0.1, started),
    the session's start (workspace root, runtime helper, manifest files through framed
    stdin), the shell tool's commands, a file read, an interactive terminal, a server
    reached through the exposed port and killed through its pid file, the workspace
    persisted with the archive GET and hydrated back, then DockerSandboxClient.delete."""
    monkeypatch.setenv("DOCKER_HOST", "unix://" + sock(dk))
    c = dockerpy.from_env()  # the page's docker.from_env()
    # DockerSandboxClient._create_container
    c.images.get(IMG)
    ct = c.containers.create(entrypoint=["tail"], image=IMG, detach=True,
                             command=["-f", "/dev/null"], environment={"PROJECT": "demo"},
                             ports={"8000/tcp": ("127.0.0.1", None)})
    ct.start()
    s = AgentsSdkSession(c, ct)
    port = None
    try:
        # start: _ensure_backend_started, then the manifest
        assert s.running()
        s.exec_ok("mkdir", "-p", "/workspace")
        s.ready = True
        s.exec_ok("sh", "-c", HELPER_INSTALL, "sh", HELPER)
        s.exec_ok("test", "-x", HELPER)
        assert s.exec_ok(HELPER, "/workspace", "/workspace/src") == b"/workspace/src\n"
        files = {"/workspace/README.md": b"# Demo\n",
                 "/workspace/src/app.py": b"import os\nprint('hello', os.environ['PROJECT'])\n"}
        for path, data in files.items():
            s.write(path, data)
        # the shell tool, a file read, a failure with its stderr and code
        assert s.exec("sh", "-lc", "python3 src/app.py > out.txt && cat out.txt") == \
            (0, b"hello demo\n", b"")
        assert s.read("/workspace/out.txt") == b"hello demo\n"
        assert s.exec("sh", "-lc", "echo oops >&2; exit 3") == (3, b"", b"oops\n")
        big = os.urandom(300000)
        s.write("/workspace/blob.bin", big)
        assert s.read("/workspace/blob.bin") == big
        # an interactive terminal: written to, read from, its exit seen through exec inspect
        eid, _, raw, out, keep = s.pty_start(["python3", "-q", "-i"], tty=True)
        raw.sendall(b"print(6 * 7)\n")
        wait_or_fail(lambda: b"42" in out, "the terminal's answer", timeout=60)
        raw.sendall(b"exit()\n")
        wait_or_fail(lambda: not c.api.exec_inspect(eid)["Running"], "the terminal's exit",
                     timeout=60)
        assert c.api.exec_inspect(eid)["ExitCode"] == 0
        # a server on the exposed port, then killed through its pid file
        eid, pid_path, raw, out, keep = s.pty_start(
            ["python3", "-c", SERVER], tty=False)
        host, port = s.exposed_port(8000)
        assert host == "127.0.0.1" and port > 0

        def fetch():
            try:
                with urllib.request.urlopen("http://%s:%d/" % (host, port), timeout=5) as r:
                    return r.read() == b"hi\n"
            except OSError:
                return False
        wait_or_fail(fetch, "the server on the exposed port", timeout=60)
        s.exec("sh", "-lc", KILL_PID, "sh", pid_path)
        wait_or_fail(lambda: not c.api.exec_inspect(eid)["Running"], "the killed server",
                     timeout=60)
        s.exec("rm", "-rf", "--", pid_path)
        # the workspace out and back in
        snap = strip_prefix(s.persist_workspace(), "workspace")
        names = tarfile.open(fileobj=io.BytesIO(snap)).getnames()
        assert "README.md" in names and "src/app.py" in names, names
        s.exec_ok("rm", "-rf", "/workspace/src", "/workspace/README.md")
        s.hydrate_workspace(snap)
        assert s.read("/workspace/src/app.py") == files["/workspace/src/app.py"]
        assert s.read("/workspace/README.md") == b"# Demo\n"
    finally:
        # DockerSandboxClient.delete: found, shut down (stopped while running), removed
        ct = c.containers.get(ct.id)
        ct.reload()
        if ct.status == "running":
            ct.stop()
        ct.remove()
        c.close()
    assert ok(docker(dk, "ps", "-aq")) == ""
    if port:
        t = socket.socket()
        t.settimeout(5)
        assert t.connect_ex(("127.0.0.1", port)) != 0, "port still open after the remove"
        t.close()


# --- smolagents (DockerExecutor, smolagents.remote_executors) -------------------------------

GATEWAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_gateway.py")


def gateway_dockerfile():
    """smolagents' Dockerfile with the kernel gateway's `pip install` replaced by the
    stand-in (tests/integration/kernel_gateway.py), written by a RUN step as pip would."""
    with open(GATEWAY, "rb") as f:
        blob = f.read().hex()
    return ("FROM %s\n"
            "RUN python3 -c \"open('/kernel_gateway.py', 'wb').write(bytes.fromhex('%s'))\"\n"
            "EXPOSE 8888\n"
            "CMD [\"python3\", \"/kernel_gateway.py\"]\n" % (IMG, blob))


def run_cell(ws_url, code):
    """DockerExecutor.run_code_raise_errors: a WebSocket per cell, one execute_request, the
    kernel's messages for it read until `idle`: (stdout, result, is_final_answer); an error
    raises RuntimeError with its traceback."""
    import websocket
    ws = websocket.create_connection(ws_url, timeout=60)
    try:
        msg_id = str(uuid.uuid4())
        ws.send(json.dumps({
            "header": {"msg_id": msg_id, "username": "anonymous", "session": str(uuid.uuid4()),
                       "msg_type": "execute_request", "version": "5.0"},
            "parent_header": {}, "metadata": {},
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False}}))
        outputs, result, final = [], None, False
        while True:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg.get("msg_type", ""), msg.get("content", {})
            if kind == "stream":
                outputs.append(content["text"])
            elif kind == "execute_result":
                result = content["data"].get("text/plain")
            elif kind == "error":
                if content.get("ename") != "FinalAnswerException":
                    raise RuntimeError("\n".join(content.get("traceback", [])))
                result, final = json.loads(content["evalue"][len("safe:"):]), True
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(outputs), result, final
    finally:
        ws.close()


@needs_py
def test_smolagents_docker_executor(dk, monkeypatch):
    """docs/guides/smolagents.md: DockerExecutor's __init__ (the image looked up, not found,
    built from a Dockerfile given as a file object, run detached with 8888 published on
    127.0.0.1 and the gateway's token in its environment, its status polled), the kernel
    gateway reached through the published port (kernelspecs, a kernel created), cells run
    over the kernel's WebSocket (output, state kept between cells, an error, the final
    answer), then cleanup (stop, remove)."""
    import requests
    monkeypatch.setenv("DOCKER_HOST", "unix://" + sock(dk))
    client = dockerpy.from_env()
    host, port, image_name = "127.0.0.1", free_port(), "jupyter-kernel"
    with pytest.raises(dockerpy.errors.ImageNotFound):  # build_new_image=False's lookup
        client.images.get(image_name)
    t0 = time.time()
    _, build_logs = client.images.build(fileobj=io.BytesIO(gateway_dockerfile().encode()),
                                        tag=image_name)
    assert [l for l in build_logs if l.get("stream", "").rstrip()], "no build log"
    print("smolagents' image build: %.1f s" % (time.time() - t0))
    token = secrets.token_urlsafe(16)
    container = client.containers.run(image_name, ports={"8888/tcp": (host, port)},
                                      detach=True, environment={"KG_AUTH_TOKEN": token})
    try:
        retries = 0
        while container.status != "running" and retries < 5:
            time.sleep(1)
            container.reload()
            retries += 1
        assert container.status == "running"
        base_url = "http://%s:%d" % (host, port)

        def ready():  # _wait_for_server
            try:
                return requests.get(base_url + "/api/kernelspecs?token=" + token,
                                    timeout=2).status_code == 200
            except requests.RequestException:
                return False
        wait_or_fail(ready, "the kernel gateway on the published port", timeout=60)
        assert requests.get(base_url + "/api/kernelspecs", timeout=5).status_code == 403
        r = requests.post(base_url + "/api/kernels?token=" + token, timeout=10)
        assert r.status_code == 201, (r.status_code, r.text)  # _create_kernel_http
        ws_url = "ws://%s:%d/api/kernels/%s/channels?token=%s" % (host, port, r.json()["id"],
                                                                   token)
        assert run_cell(ws_url, "x = 6 * 7\nprint('x is', x)") == ("x is 42\n", None, False)
        assert run_cell(ws_url, "import platform\nx + 1") == ("", "43", False)
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            run_cell(ws_url, "1 / 0")
        final = ("class FinalAnswerException(BaseException):\n    pass\n"
                 "raise FinalAnswerException('safe:{\"answer\": %d}' % x)")
        assert run_cell(ws_url, final) == ("", {"answer": 42}, True)
    finally:
        container.stop()  # cleanup
        container.remove()
        client.close()
    assert ok(docker(dk, "ps", "-aq")) == ""
    s = socket.socket()
    s.settimeout(5)
    assert s.connect_ex((host, port)) != 0, "port still open after the remove"
    s.close()


def test_run_of_a_missing_command(dk):
    """A start that fails: `docker run --rm` reports it and returns at once (it waits for
    the removal, and waited forever when the container stayed), nothing is left; without
    --rm the container stays, created, with moby's exit code and the error."""
    import json
    t0 = time.time()
    p = docker(dk, "run", "--rm", IMG, "/no/such/cmd", timeout=120)
    assert p.returncode == 127 and "/no/such/cmd" in p.stderr, (p.returncode, p.stderr)
    assert time.time() - t0 < 60
    assert ok(docker(dk, "ps", "-aq")) == ""
    p = docker(dk, "run", "--name", "nocmd", IMG, "/no/such/cmd", timeout=120)
    assert p.returncode == 127, (p.returncode, p.stderr)
    st = json.loads(ok(docker(dk, "inspect", "nocmd")))[0]["State"]
    assert st["ExitCode"] == 127 and "/no/such/cmd" in st["Error"], st
    ok(docker(dk, "rm", "nocmd"))
