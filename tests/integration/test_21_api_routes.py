# SPDX-License-Identifier: Apache-2.0
# test_21_api_routes.py - the API's route table and field checks (issue 11, docs/reference/api.md
# "Paths, fields and the route table"): unknown paths are 404, a known path with another
# method is 405 with Allow, a NUL in a path or garbage in a field is a 400 naming it, and
# none of these reach a sandbox or stop the daemon.
import http.client
import json
import os
import socket

import pytest


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("kosa8", timeout=120)
        self.sock_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.sock_path)
        self.sock = s


def call(home, method, path, body=None, raw=None):
    """(status, headers, parsed JSON body) of one request."""
    c = UnixConn(os.path.join(home.path, "kosa8d.sock"))
    try:
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode()
        return r.status, dict(r.getheaders()), json.loads(text) if text else None
    finally:
        c.close()


def error(home, method, path, status, code, fragment, body=None, raw=None):
    st, _, out = call(home, method, path, body, raw)
    assert st == status, (method, path, st, out)
    assert out["error"]["code"] == code, out
    assert fragment in out["error"]["message"], out
    return out


def alive(home):
    st, _, out = call(home, "GET", "/v1/status")
    assert st == 200 and out["pid"] > 0


def test_unknown_paths_and_methods(home):
    error(home, "GET", "/v1/nope", 404, "not_found", "no such endpoint: GET /v1/nope")
    error(home, "GET", "/v2/status", 404, "not_found", "no such endpoint")
    error(home, "GET", "/v1/a/b/c/d/e/f/g/h/i/j/k", 404, "not_found", "no such endpoint")
    st, hdrs, out = call(home, "POST", "/v1/status")
    assert st == 405 and hdrs.get("Allow") == "GET", (st, hdrs, out)
    assert out["error"]["code"] == "method_not_allowed"
    st, hdrs, out = call(home, "GET", "/v1/images/pull")
    assert st == 405 and hdrs.get("Allow") == "POST, DELETE", (st, hdrs, out)
    # a trailing slash and repeated slashes name the same route
    assert call(home, "GET", "//v1//status/")[0] == 200
    alive(home)


def test_path_segments_are_bounded(home):
    error(home, "GET", "/v1/sandboxes/" + "a" * 600, 400, "bad_request", "longer than 511")
    error(home, "DELETE", "/v1/images/" + "%41" * 512, 400, "bad_request", "longer than 511")
    error(home, "POST", "/v1/sandboxes", 400, "bad_request", "not a JSON object", raw="[1]")
    alive(home)


def test_nul_in_a_name_does_not_reach_the_sandbox(home, sandbox):
    """"shared%00x" used to be cut at the NUL: it read and removed sandbox 'shared'."""
    error(home, "GET", "/v1/sandboxes/%s%%00x" % sandbox, 400, "bad_request", "NUL")
    error(home, "DELETE", "/v1/sandboxes/%s%%00x?wipe=1" % sandbox, 400, "bad_request", "NUL")
    st, _, out = call(home, "GET", "/v1/sandboxes/" + sandbox)
    assert st == 200 and out["name"] == sandbox and out["state"] == "running", out


def test_fields_are_checked(home, sandbox):
    error(home, "DELETE", "/v1/sandboxes/no-such?wipe=maybe", 400, "bad_request",
          "query argument 'wipe' must be 1, 0, true or false")
    for q in ("limit=abc", "limit=-1", "limit=1000001", "since_seq=99999999999999999999"):
        error(home, "GET", "/v1/audit?" + q, 400, "bad_request", "must be an integer")
    st, _, out = call(home, "GET", "/v1/audit?limit=1&action=daemon.%2A")
    assert st == 200 and len(out) == 1 and out[0]["action"].startswith("daemon."), out
    base = "/v1/sandboxes/%s/containers/0123456789ab" % sandbox
    for t in ("10", -1, 3601, 1.5):
        error(home, "POST", base + "/stop", 400, "bad_request",
              "field 'timeout_s' must be an integer 0..3600", body={"timeout_s": t})
    st, _, before = call(home, "GET", "/v1/sandboxes/%s/checkpoints" % sandbox)
    error(home, "POST", "/v1/sandboxes/%s/checkpoints" % sandbox, 400, "bad_request",
          "field 'label'", body={"label": 5})
    st, _, after = call(home, "GET", "/v1/sandboxes/%s/checkpoints" % sandbox)
    assert st == 200 and after == before
    # "no" used to read as "stop the VMs" and stopped the daemon
    error(home, "POST", "/v1/shutdown", 400, "bad_request", "field 'stop_vms' must be true "
          "or false", body={"stop_vms": "no"})
    alive(home)
    st, _, out = call(home, "GET", "/v1/sandboxes/" + sandbox)
    assert st == 200 and out["state"] == "running"
