# SPDX-License-Identifier: Apache-2.0
# test_94_hostile_misc.py - attacks on the boundary (issue 10): a registry that redirects
# to a host that asks for the password, guest bytes that try to reach the terminal and
# the audit log, a guest that floods the audit log, and tampering with rotated segments.
import base64
import hashlib
import http.server
import json
import os
import threading

import pytest

from conftest import run as cli
from test_50_registry import Daemon, free_port, pull

pytestmark = pytest.mark.hostile

USER, PASSWORD = "kuser", "k-s3cret-never-leaves"
BASIC = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()


class Server:
    """A threading HTTP server on 127.0.0.1 whose handler is `fn(handler)`; every request
    (path and headers) is kept in self.seen."""

    def __init__(self, fn):
        self.seen = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.seen.append((self.path, dict(self.headers.items())))
                fn(self)

            def send(self, code, body=b"", headers=()):
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.port = free_port()
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


def blob_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def own_daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.mark.parametrize("where", ["manifest", "blob"])
@pytest.mark.parametrize("scheme", ["bearer", "basic"])
def test_credentials_never_follow_a_redirect(own_daemon, where, scheme):
    """The registry (127.0.0.1:A) wants Basic credentials, then redirects the manifest or
    a blob to localhost:B (the same machine under another name and port), which answers
    401 with its own challenge. B must never see the password, in any header or URL."""
    config = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
    layer = b"not really a layer"
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": blob_digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": blob_digest(layer), "size": len(layer)}]}).encode()

    def other(h):
        if scheme == "bearer":
            ch = 'Bearer realm="http://localhost:%d/token",service="x"' % b.port
        else:
            ch = 'Basic realm="storage"'
        if h.path.startswith("/token"):
            h.send(200, b'{"token":"t"}', [("Content-Type", "application/json")])
        else:
            h.send(401, b"", [("WWW-Authenticate", ch)])

    b = Server(other)

    def registry(h):
        if h.headers.get("Authorization") != BASIC:
            h.send(401, b"", [("WWW-Authenticate", 'Basic realm="hostile"')])
        elif "/manifests/" in h.path and where == "manifest":
            h.send(307, b"", [("Location", "http://localhost:%d/m" % b.port)])
        elif "/manifests/" in h.path:
            h.send(200, manifest, [("Content-Type",
                                    "application/vnd.oci.image.manifest.v1+json")])
        elif "/blobs/" in h.path:
            h.send(307, b"", [("Location", "http://localhost:%d/b?x=1" % b.port)])
        else:
            h.send(404)

    a = Server(registry)
    try:
        host = "127.0.0.1:%d" % a.port
        p = cli(["login", host, "-u", USER, "--password-stdin"], own_daemon.home,
                input=PASSWORD + "\n")
        assert p.returncode == 0, p.stderr
        _, err, _, _ = pull(own_daemon.home, host + "/hostile/img:1", timeout=120)
        assert err is not None, "the pull must fail"
        assert err["errno"] == 13, err
        assert "redirected to http://localhost:%d" % b.port in err["message"], err
        assert "credentials" in err["message"], err
        assert b.seen, "the redirect was not followed (the test proves nothing)"
        assert any(h.get("Authorization") == BASIC for _, h in a.seen)
        enc = base64.b64encode(PASSWORD.encode()).decode()
        for path, headers in b.seen:
            assert "Authorization" not in headers, (path, headers)
            blob = path + json.dumps(headers)
            assert PASSWORD not in blob and enc[:12] not in blob, (path, headers)
        refs, _, _ = own_daemon.store()
        assert refs == {}, refs
    finally:
        a.stop()
        b.stop()
