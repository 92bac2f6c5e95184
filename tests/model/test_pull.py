# SPDX-License-Identifier: Apache-2.0
"""kosa8 model pull | ls | rm | import | serve | ps | stop, through the real CLI and kosa8d,
against a Hugging Face-compatible hub fixture on 127.0.0.1 (file list with LFS digests,
ranged downloads, a corrupted file, a gated repo, a connection cut mid-file)."""
import hashlib
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

import scripted
from conftest import BUILD, cached_gguf

BIN = os.environ.get("KOSA8_BIN", os.path.join(BUILD, "bin"))
TOKEN = "hf_s3cr3t_t0k3n_never_logged"


def _gguf(name, script):
    path = cached_gguf("pull-" + name, ["scripted.py", "gguf_writer.py"], scripted.make_scripted,
                       script=script)
    with open(path, "rb") as f:
        return f.read()


class Hub:
    """repo -> {path: bytes}; `served` overrides the bytes sent (a corrupted file); `cut`
    holds paths whose next full download is cut after half; `gated` repos want TOKEN."""

    def __init__(self):
        self.repos, self.served, self.cut, self.gated, self.log = {}, {}, set(), set(), []
        hub = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send(self, code, body, ctype="application/json", extra=()):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                hub.log.append((self.path, self.headers.get("Range"), self.headers.get("Authorization")))
                m = re.match(r"^/api/models/([^/]+/[^/?]+)/tree/main$", self.path)
                r = re.match(r"^/([^/]+/[^/]+)/resolve/main/(.+)$", self.path)
                repo = (m or r).group(1) if (m or r) else None
                if repo not in hub.repos:
                    return self.send(404, b'{"error":"Repository not found"}')
                if repo in hub.gated and self.headers.get("Authorization") != "Bearer " + TOKEN:
                    return self.send(401, b'{"error":"Access to this repo is restricted"}')
                files = hub.repos[repo]
                if m:
                    tree = [{"type": "file", "path": "README.md", "size": 5, "oid": "0" * 40}]
                    for p, data in files.items():
                        tree.append({"type": "file", "path": p, "size": len(data), "oid": "1" * 40,
                                     "lfs": {"oid": hashlib.sha256(data).hexdigest(),
                                             "size": len(data), "pointerSize": 134}})
                    return self.send(200, json.dumps(tree).encode())
                path = r.group(2)
                if path not in files:
                    return self.send(404, b"Entry not found", "text/plain")
                data = hub.served.get((repo, path), files[path])
                rng = self.headers.get("Range")
                start = int(re.match(r"bytes=(\d+)-", rng).group(1)) if rng else 0
                body = data[start:]
                code = 206 if rng else 200
                extra = [("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))] if rng else []
                if (repo, path) in hub.cut and not rng:
                    hub.cut.discard((repo, path))
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.send(code, body, "application/octet-stream", extra)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture(scope="module")
def hub():
    h = Hub()
    chat = _gguf("chat", ["Hello", " world", "!"])
    other = _gguf("other", ["Bye", "!"])
    h.repos["kosa8/Tiny-GGUF"] = {"tiny-chat-Q4_K_M.gguf": chat, "tiny-chat-Q8_0.gguf": other,
                                  "tiny-chat-Q2_K.gguf": other + b"x", "tiny-chat-Q6_K.gguf": chat + b"6"}
    h.served[("kosa8/Tiny-GGUF", "tiny-chat-Q2_K.gguf")] = other + b"y"   # corrupted on the way
    h.repos["kosa8/Gated-GGUF"] = {"gated-Q4_0.gguf": chat + b"gated"}
    h.gated.add("kosa8/Gated-GGUF")
    yield h
    h.close()


@pytest.fixture(scope="module")
def k8(hub):
    home = tempfile.mkdtemp(prefix="k8m-", dir="/tmp")
    env = dict(os.environ, KOSA8_HOME=home, KOSA8_HF_ENDPOINT=hub.url)
    env.pop("HF_TOKEN", None)
    env.pop("KOSA8_OFFLINE", None)

    def run(*args, extra_env=None, timeout=120):
        return subprocess.run([os.path.join(BIN, "kosa8"), *args], capture_output=True, text=True,
                              timeout=timeout, env=dict(env, **(extra_env or {})))
    p = run("daemon", "start", timeout=200)
    assert p.returncode == 0, p.stdout + p.stderr
    run.home = home
    yield run
    run("daemon", "stop")
    shutil.rmtree(home, ignore_errors=True)


def test_pull_quant_case_insensitive_and_ls(k8, hub):
    p = k8("model", "pull", "kosa8/Tiny-GGUF:q4_k_m")
    assert p.returncode == 0, p.stderr
    assert "pulled tiny-chat-q4_k_m" in p.stdout
    data = hub.repos["kosa8/Tiny-GGUF"]["tiny-chat-Q4_K_M.gguf"]
    sha = hashlib.sha256(data).hexdigest()
    with open(os.path.join(k8.home, "models", "blobs", "sha256-" + sha), "rb") as f:
        assert f.read() == data
    ls = json.loads(k8("model", "ls", "--json").stdout)
    assert [(m["name"], m["sha256"], m["size"]) for m in ls] == [("tiny-chat-q4_k_m", sha, len(data))]
    # a second pull finds it in the store and downloads nothing
    n = len(hub.log)
    p = k8("model", "pull", "kosa8/Tiny-GGUF:Q4_K_M", "--json")
    last = json.loads(p.stdout.splitlines()[-1])
    assert p.returncode == 0 and last.get("result", last)["cached"] is True
    assert not any("/resolve/" in path for path, _, _ in hub.log[n:])


def test_missing_quant_lists_choices(k8):
    p = k8("model", "pull", "kosa8/Tiny-GGUF:q3_k_s")
    assert p.returncode == 4, p.stderr
    assert "no 'q3_k_s' file" in p.stderr
    for q in ("Q4_K_M", "Q8_0", "Q2_K", "Q6_K"):
        assert q in p.stderr
    p = k8("model", "pull", "kosa8/Tiny-GGUF")
    assert p.returncode == 2 and "several models" in p.stderr
    p = k8("model", "pull", "kosa8/Nothing-Here:q4_0")
    assert p.returncode == 4 and "404" in p.stderr
    p = k8("model", "pull", "../../etc:q4")
    assert p.returncode == 2


def test_corrupted_download_is_refused_and_removed(k8):
    p = k8("model", "pull", "kosa8/Tiny-GGUF:Q2_K")
    assert p.returncode != 0 and "SHA-256" in p.stderr and "removed" in p.stderr
    names = [m["name"] for m in json.loads(k8("model", "ls", "--json").stdout)]
    assert "tiny-chat-q2_k" not in names
    assert os.listdir(os.path.join(k8.home, "models", "partial")) == []


def test_interrupted_download_resumes_with_a_range(k8, hub):
    data = hub.repos["kosa8/Tiny-GGUF"]["tiny-chat-Q6_K.gguf"]
    sha = hashlib.sha256(data).hexdigest()
    hub.cut.add(("kosa8/Tiny-GGUF", "tiny-chat-Q6_K.gguf"))
    p = k8("model", "pull", "kosa8/Tiny-GGUF:q6_k")
    assert p.returncode != 0 and "resume" in p.stderr, p.stderr
    part = os.path.join(k8.home, "models", "partial", "sha256-%s.part" % sha)
    have = os.path.getsize(part)
    assert 0 < have < len(data)
    n = len(hub.log)
    p = k8("model", "pull", "kosa8/Tiny-GGUF:q6_k")
    assert p.returncode == 0, p.stderr
    ranges = [rng for path, rng, _ in hub.log[n:] if "/resolve/" in path]
    assert ranges == ["bytes=%d-" % have]
    with open(os.path.join(k8.home, "models", "blobs", "sha256-" + sha), "rb") as f:
        assert f.read() == data
    assert not os.path.exists(part)


def test_gated_repo_takes_hf_token_and_never_logs_it(k8, hub):
    p = k8("model", "pull", "kosa8/Gated-GGUF:q4_0")
    assert p.returncode != 0 and "401" in p.stderr and "HF_TOKEN" in p.stderr
    p = k8("model", "pull", "kosa8/Gated-GGUF:q4_0", extra_env={"HF_TOKEN": TOKEN})
    assert p.returncode == 0, p.stderr
    assert TOKEN not in p.stdout + p.stderr
    for root, _, files in os.walk(k8.home):
        for f in files:
            path = os.path.join(root, f)
            if os.path.isfile(path) and not f.startswith("sha256-") and not path.endswith(".sock"):
                with open(path, "rb") as fh:
                    assert TOKEN.encode() not in fh.read(), path


def _port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def test_import_serve_ps_stop_rm(k8, tmp_path):
    src = str(tmp_path / "import-me.gguf")
    with open(src, "wb") as f:
        f.write(_gguf("chat", ["Hello", " world", "!"]))
    p = k8("model", "import", src, "--name", "hello")
    assert p.returncode == 0, p.stderr
    assert k8("model", "import", "/etc/hostname").returncode != 0     # not GGUF
    port = _port()
    t0 = time.monotonic()
    p = k8("model", "serve", "hello", "--port", str(port), "--threads", "1", "--ctx", "512")
    assert p.returncode == 0, p.stderr
    assert "OPENAI_BASE_URL=http://127.0.0.1:%d/v1" % port in p.stdout
    # it answers as soon as serve returned
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, data=json.dumps(
        {"messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read())["choices"][0]["message"]["content"] == "Hello world!"
    assert time.monotonic() - t0 < 30
    ps = json.loads(k8("model", "ps", "--json").stdout)
    assert [(s["name"], s["port"]) for s in ps] == [("hello", port)]
    assert k8("model", "serve", "hello", "--port", str(_port())).returncode == 5   # already served
    assert k8("model", "rm", "hello").returncode == 5                               # in use
    p = k8("model", "stop", "hello")
    assert p.returncode == 0, p.stderr
    assert json.loads(k8("model", "ps", "--json").stdout) == []
    with pytest.raises(OSError):
        urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2)
    assert k8("model", "rm", "hello").returncode == 0
    assert "hello" not in [m["name"] for m in json.loads(k8("model", "ls", "--json").stdout)]
    assert k8("model", "serve", "nope").returncode == 4


def test_offline_daemon_opens_no_connection(hub):
    home = tempfile.mkdtemp(prefix="k8o-", dir="/tmp")
    env = dict(os.environ, KOSA8_HOME=home, KOSA8_HF_ENDPOINT=hub.url)
    env.pop("KOSA8_OFFLINE", None)
    k = lambda *a: subprocess.run([os.path.join(BIN, "kosa8"), *a], capture_output=True,  # noqa: E731
                                  text=True, timeout=200, env=env)
    try:
        assert k("daemon", "start", "--offline").returncode == 0
        n = len(hub.log)
        p = k("model", "pull", "kosa8/Tiny-GGUF:q4_k_m")
        assert p.returncode != 0 and "KOSA8_OFFLINE" in p.stderr and "model import" in p.stderr
        assert len(hub.log) == n
    finally:
        k("daemon", "stop")
        shutil.rmtree(home, ignore_errors=True)
