# SPDX-License-Identifier: Apache-2.0
"""kosa8 bundle export / import through the real CLI and two daemons: the guest image, an
image and a model move in one file; an altered or truncated bundle is refused and leaves
nothing installed; the importing daemon runs --offline."""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

import pytest

import scripted
from conftest import BUILD

BIN = os.environ.get("KOSA8_BIN", os.path.join(BUILD, "bin"))


def _blob(d, data):
    h = hashlib.sha256(data).hexdigest()
    with open(os.path.join(d, "blobs", "sha256", h), "wb") as f:
        f.write(data)
    return "sha256:" + h, len(data)


def tiny_layout(d):
    """An OCI layout with one small layer, named tiny:1."""
    os.makedirs(os.path.join(d, "blobs", "sha256"))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        data = b"hello from a bundled image\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    raw = raw.getvalue()
    layer, lsize = _blob(d, gzip.compress(raw, mtime=0))
    cfg, csize = _blob(d, json.dumps({
        "architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}}).encode())
    man, msize = _blob(d, json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": csize},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer,
                    "size": lsize}]}).encode())
    with open(os.path.join(d, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion": "1.0.0"}')
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": man, "size": msize,
            "annotations": {"org.opencontainers.image.ref.name": "tiny:1"}}]}, f)
    return man


class Home:
    def __init__(self, prefix, *start):
        self.path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        self.env = dict(os.environ, KOSA8_HOME=self.path)
        for k in ("KOSA8_OFFLINE", "KOSA8_GUEST_DIR"):
            self.env.pop(k, None)
        p = self("daemon", "start", *start, timeout=200)
        assert p.returncode == 0, p.stdout + p.stderr

    def __call__(self, *args, timeout=300):
        return subprocess.run([os.path.join(BIN, "kosa8"), *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env)

    def json(self, *args):
        p = self(*args, "--json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def close(self):
        self("daemon", "stop")
        shutil.rmtree(self.path, ignore_errors=True)


@pytest.fixture(scope="module")
def bundle():
    src = Home("k8b-")
    work = tempfile.mkdtemp(prefix="k8bw-", dir="/tmp")
    try:
        lay = os.path.join(work, "layout")
        man = tiny_layout(lay)
        assert src("image", "load", lay).returncode == 0
        gguf = os.path.join(work, "hello.gguf")
        scripted.make_scripted(gguf, script=["Hello", "!"])
        assert src("model", "import", gguf, "--name", "hello").returncode == 0
        out = os.path.join(work, "offline.k8b")
        p = src("bundle", "export", out, "--image", "tiny:1", "--model", "hello")
        assert p.returncode == 0, p.stderr
        assert "wrote " + out in p.stdout
        yield out, man, hashlib.sha256(open(gguf, "rb").read()).hexdigest(), work
    finally:
        src.close()
        shutil.rmtree(work, ignore_errors=True)


def _nothing_installed(h):
    assert h.json("model", "ls") == []
    assert [i for i in h.json("image", "ls") if "tiny" in i["ref"]] == []
    assert not os.path.exists(os.path.join(h.path, "guest"))
    assert os.listdir(os.path.join(h.path, "tmp")) == [] if os.path.isdir(os.path.join(h.path, "tmp")) else True


def test_bundle_layout(bundle):
    out, man, model_sha, _ = bundle
    with tarfile.open(out) as t:
        names = t.getnames()
        m = json.load(t.extractfile("manifest.json"))
        assert names[0] == "manifest.json"
        for p in m["parts"]:
            assert hashlib.sha256(t.extractfile(p["path"]).read()).hexdigest() == p["sha256"]
    kinds = {p["kind"] for p in m["parts"]}
    assert kinds == {"guest", "image", "model"}
    assert "images/blobs/sha256/" + man[7:] in names and "models/sha256-" + model_sha in names
    assert sorted(names[1:]) == sorted(p["path"] for p in m["parts"])


def test_altered_and_truncated_bundles_install_nothing(bundle):
    out, man, model_sha, work = bundle
    h = Home("k8c-", "--offline")
    try:
        data = bytearray(open(out, "rb").read())
        with tarfile.open(out) as t:
            member = t.getmember("models/sha256-" + model_sha)
        altered = os.path.join(work, "altered.k8b")
        data[member.offset_data + member.size // 2] ^= 0x01
        open(altered, "wb").write(bytes(data))
        p = h("bundle", "import", altered)
        assert p.returncode != 0 and "SHA-256" in p.stderr and "Nothing was installed" in p.stderr
        _nothing_installed(h)
        cut = os.path.join(work, "cut.k8b")
        open(cut, "wb").write(open(out, "rb").read()[: member.offset_data + 100])
        p = h("bundle", "import", cut)
        assert p.returncode != 0, p.stdout
        _nothing_installed(h)
        p = h("bundle", "import", "/etc/hostname")
        assert p.returncode != 0
        _nothing_installed(h)
        # and the good one, on the same offline daemon
        p = h("bundle", "import", out)
        assert p.returncode == 0, p.stderr
        assert [m["name"] for m in h.json("model", "ls")] == ["hello"]
        assert any(i["digest"] == man for i in h.json("image", "ls"))
        st = h.json("daemon", "status")
        assert st["guest"]["dir"] == os.path.join(h.path, "guest") and st["guest"]["verified"]
        # readable by the jailed QEMU's uid, which reopens them through /proc/self/fd
        for f in ("vmlinux", "initramfs.cpio"):
            assert os.stat(os.path.join(h.path, "guest", f)).st_mode & 0o777 == 0o644, f
    finally:
        h.close()
