# SPDX-License-Identifier: Apache-2.0
# mcpkit.py - kosa8 mcp for the end-to-end tests (docs/mcp.md): the official MCP client
# (@modelcontextprotocol/sdk, driven through mcp_client.mjs), a raw stdio server for what
# that client would never send, and an HTTP server's address and token.
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading

import pytest

import k8cache
from conftest import KOSA8

HERE = os.path.dirname(os.path.abspath(__file__))


def sdk_dir():
    """The set "mcp" of scripts/npm-pins (installed once per machine), or a skip/fail."""
    if not shutil.which("node") or not shutil.which("npm"):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("node/npm are missing")
        pytest.skip("node/npm are missing (CI=true makes this a failure)")
    return k8cache.npm("mcp")


class Sdk:
    """The official client in a node process; cmd() sends one command, returns its answer."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="k8mcp-")
        shutil.copy(os.path.join(HERE, "mcp_client.mjs"), self.tmp)
        os.symlink(os.path.join(sdk_dir(), "node_modules"), os.path.join(self.tmp, "node_modules"))
        self.p = subprocess.Popen(["node", os.path.join(self.tmp, "mcp_client.mjs")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def cmd(self, **c):
        self.p.stdin.write(json.dumps(c) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, "the node client ended"
        return json.loads(line)

    def call(self, name, **kw):
        args = kw.pop("args", {})
        return self.cmd(op="call", name=name, arguments=args, **kw)

    def close(self):
        try:
            self.cmd(op="close")
        except (AssertionError, BrokenPipeError):
            pass
        self.p.stdin.close()
        self.p.wait(timeout=120)
        shutil.rmtree(self.tmp, ignore_errors=True)


def text(res):
    """The text of a tool call's answer (it must have succeeded as a call)."""
    assert res["ok"], res
    return "".join(c.get("text", "") for c in res["result"]["content"] if c["type"] == "text")


def stdio_args(home, *flags):
    return dict(command=KOSA8, args=["mcp"] + list(flags), env={"KOSA8_HOME": home.path})


class Raw:
    """kosa8 mcp over stdio, spoken to line by line (for malformed input)."""

    def __init__(self, home, *flags):
        self.p = subprocess.Popen([KOSA8, "mcp"] + list(flags), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  env=dict(os.environ, KOSA8_HOME=home.path))

    def send(self, data):
        self.p.stdin.write(data if isinstance(data, bytes) else data.encode())
        self.p.stdin.flush()

    def recv(self):
        line = self.p.stdout.readline()
        assert line, "kosa8 mcp closed its output"
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        return self.p.wait(timeout=120)


class Http:
    """kosa8 mcp --listen 127.0.0.1:0: its URL and token, read from its stderr."""

    def __init__(self, home, *flags):
        self.p = subprocess.Popen([KOSA8, "mcp", "--listen", "127.0.0.1:0"] + list(flags),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, KOSA8_HOME=home.path))
        self.token = None
        self.url = None
        while not self.url:
            line = self.p.stderr.readline()
            assert line, "kosa8 mcp --listen ended"
            m = re.search(r"token (\w+)", line)
            if m:
                self.token = m.group(1)
            m = re.search(r"at (http://\S+/mcp)", line)
            if m:
                self.url = m.group(1)
        self.port = int(self.url.split(":")[2].split("/")[0])
        self.log = []
        threading.Thread(target=lambda: self.log.extend(self.p.stderr), daemon=True).start()

    def close(self):
        self.p.terminate()
        return self.p.wait(timeout=120)
