# SPDX-License-Identifier: Apache-2.0
# e2bkit.py - what the E2B API's test files share: a daemon of their own with the E2B
# listener on a free loopback port, a key, and js() to run a piece of JavaScript against
# E2B's official SDKs (scripts/npm-pins set "e2b", installed once per machine) pointed at
# it with the two variables a user sets (docs/e2b.md).
import http.client
import json
import os
import shutil
import subprocess
import tempfile

import pytest

import k8cache
from conftest import own_home

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = {"base": "python:3.12-slim", "code-interpreter-v1": "python:3.12-slim"}


class E2B:
    def __init__(self, h, url, key, tmp):
        self.h = h
        self.url = url
        self.key = key
        self.tmp = tmp
        self.port = int(url.rsplit(":", 1)[1])

    def env(self):
        return dict(os.environ, E2B_API_URL=self.url, E2B_SANDBOX_URL=self.url,
                    E2B_API_KEY=self.key)

    def http(self, method, path, body=None, headers=None, timeout=120):
        """A raw request to the listener: (status, parsed JSON or the raw bytes, headers)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdr = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdr.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=hdr)
        r = c.getresponse()
        data = r.read()
        c.close()
        try:
            return r.status, json.loads(data), r.headers
        except ValueError:
            return r.status, data, r.headers


def npm_set():
    """The directory of the e2b npm set, or a skip/fail when node or npm is missing."""
    if not shutil.which("node") or not shutil.which("npm"):
        if os.environ.get("CI") == "true":
            pytest.fail("node and npm are needed for E2B's SDKs")
        pytest.skip("host: node/npm missing (CI=true makes this a failure)")
    return k8cache.npm("e2b")


def e2b_home(prefix, python_layout, config=None):
    """A daemon of the module's own with the python image loaded and served as the
    templates "base" and "code-interpreter-v1", its E2B API on a free loopback port and a
    key: a generator for a module fixture, yielding an E2B."""
    pkgs = npm_set()
    cfg = {"e2b": {"listen": "127.0.0.1:0", "templates": TEMPLATES}}
    for k, v in (config or {}).items():
        if k == "e2b":
            cfg["e2b"].update(v)
        else:
            cfg[k] = v
    tmp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    shutil.copy(os.path.join(HERE, "e2b_run.mjs"), os.path.join(tmp, "e2b_run.mjs"))
    os.symlink(os.path.join(pkgs, "node_modules"), os.path.join(tmp, "node_modules"))
    for h in own_home(prefix, python_layout, config=cfg):
        url = h.json("daemon", "status")["e2b_api"]
        key = h("e2b", "key", "create", "--name", "tests", check=True).stdout.strip()
        yield E2B(h, url, key, tmp)
    shutil.rmtree(tmp, ignore_errors=True)


def js(e, code, timeout=300, env=None, **values):
    """Run `code` (the body of an async function; Sandbox, CodeSandbox, V, sleep in scope)
    with the SDKs pointed at e; its return value, parsed. An exception it throws comes back
    as {"thrown": {...}}."""
    ev = e.env()
    ev["K8_VARS"] = json.dumps(values)
    if env:
        ev.update(env)
    p = subprocess.run(["node", os.path.join(e.tmp, "e2b_run.mjs")], input=code, env=ev,
                       capture_output=True, text=True, timeout=timeout, cwd=e.tmp)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert lines, p.stderr[-3000:]
    return json.loads(lines[-1])


def create(e, opts="{}", timeout=300):
    """A sandbox of its own: (id, envdAccessToken, trafficAccessToken)."""
    out = js(e, """
const s = await Sandbox.create(%s)
return { id: s.sandboxId, token: s.envdAccessToken, traffic: s.trafficAccessToken }
""" % opts, timeout=timeout)
    assert "id" in out, out
    return out["id"], out["token"], out["traffic"]
