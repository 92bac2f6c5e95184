# SPDX-License-Identifier: Apache-2.0
"""storekit.py - an S3 server for the snapshot stores' tests (tests/integration/
s3server.mjs: s3rver 3.7.1 on loopback, each request's SigV4 signature checked by the AWS
SDK's own signer), the official AWS client to read the bucket on its own (s3client.mjs),
kosa8's S3 client from the command line (build/tools/k8s3), and the ids kosa8 gives
objects (docs/stores.md), for tests that plant objects as a hostile bucket would."""
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "scripts"))
import k8cache  # noqa: E402

K8S3 = os.path.join(os.environ.get("KOSA8_BIN", os.path.join(TOP, "build", "bin")), "..",
                    "tools", "k8s3")
ACCESS = "AKIAK8TESTSTORE"
SECRET = "k8/test+secret=key"


class S3Server:
    """s3rver with one bucket, on 127.0.0.1 (https with tls=(key, cert))."""

    def __init__(self, bucket="snaps", tls=None, vhost_suffix="localhost"):
        self.bucket = bucket
        self.dir = tempfile.mkdtemp(prefix="k8s3-", dir="/tmp")
        self.npm = k8cache.npm("s3")
        args = ["node", os.path.join(HERE, "s3server.mjs"), "--dir", self.dir, "--bucket",
                bucket, "--access", ACCESS, "--secret", SECRET, "--vhost-suffix",
                vhost_suffix]
        if tls:
            args += ["--tls-key", tls[0], "--tls-cert", tls[1]]
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                  env=dict(os.environ, K8_NPM_S3=self.npm))
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("s3server did not start: %s" % open(self.log.name).read())
        self.port = json.loads(line)["port"]
        self.scheme = "https" if tls else "http"
        self.endpoint = "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def _ctl(self, path, method="GET"):
        req = urllib.request.Request("%s%s" % (self.endpoint, path), method=method,
                                     data=b"" if method == "POST" else None)
        ctx = ssl._create_unverified_context() if self.scheme == "https" else None
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            return json.loads(r.read() or b"{}")

    def stats(self):
        return self._ctl("/__k8/stats")

    def reset(self):
        return self._ctl("/__k8/reset", "POST")

    def fault(self, mode="none", method="PUT", after=0, count=None, ms=None):
        q = "/__k8/fault?mode=%s&method=%s&after=%d" % (mode, method, after)
        q += "&count=%d" % count if count is not None else ""
        q += "&ms=%d" % ms if ms is not None else ""
        return self._ctl(q, "POST")

    def object_path(self, key):
        """Where s3rver keeps the bytes of key (to corrupt one as a bucket could)."""
        return os.path.join(self.dir, self.bucket, key + "._S3rver_object")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.log.close()
        if os.environ.get("KOSA8_KEEP_HOME") is None:
            shutil.rmtree(self.dir, ignore_errors=True)


def aws(server, *args, check=True):
    """The official AWS client on server's bucket: CompletedProcess."""
    p = subprocess.run(["node", os.path.join(HERE, "s3client.mjs"), server.endpoint,
                        server.bucket, ACCESS, SECRET] + list(args), capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, K8_NPM_S3=server.npm))
    if check and p.returncode:
        raise AssertionError("s3client %s: %s" % (" ".join(args), p.stderr))
    return p


def aws_keys(server, prefix=""):
    return {k["key"]: k["size"] for k in json.loads(aws(server, "ls", prefix).stdout)["keys"]}


def aws_get(server, key):
    with tempfile.NamedTemporaryFile(dir="/tmp") as f:
        aws(server, "get", key, f.name)
        return open(f.name, "rb").read()


def aws_put(server, key, data):
    with tempfile.NamedTemporaryFile(dir="/tmp") as f:
        f.write(data)
        f.flush()
        aws(server, "put", key, f.name)


def k8s3(server, *args, env=None, check=True, timeout=300):
    e = dict(os.environ, K8S3_ENDPOINT=server.endpoint, K8S3_BUCKET=server.bucket,
             K8S3_ACCESS=ACCESS, K8S3_SECRET=SECRET)
    e.update(env or {})
    p = subprocess.run([K8S3] + list(args), capture_output=True, text=True, timeout=timeout,
                       env=e)
    if check and p.returncode:
        raise AssertionError("k8s3 %s: %s" % (" ".join(args), p.stderr))
    return p


def add_store(home, server, name="mine", *extra):
    """kosa8 store add s3 NAME for server, the keys on stdin."""
    return home("store", "add", "s3", name, "--endpoint", server.endpoint, "--bucket",
                server.bucket, "--access-key-stdin", *extra,
                input="%s\n%s\n" % (ACCESS, SECRET), timeout=120)


def manifest_key(kind, name):
    """The key of an unencrypted store's manifest (chunk.c's chunk_name_id)."""
    return "manifests/" + hashlib.sha256(b"manifest\0" + kind.encode() + b"\0" +
                                         name.encode()).hexdigest()


def seal_plain(data):
    """An unencrypted store's object of data: "K8C1", flags 0, a zstd frame."""
    z = subprocess.run(["zstd", "-q", "-c", "-3"], input=data, capture_output=True,
                       check=True).stdout
    return b"K8C1\0" + z


def open_plain(obj):
    assert obj[:5] == b"K8C1\0", obj[:5]
    return subprocess.run(["zstd", "-q", "-d", "-c"], input=obj[5:], capture_output=True,
                          check=True).stdout


def wait_for(fn, timeout=60, step=0.2):
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()
