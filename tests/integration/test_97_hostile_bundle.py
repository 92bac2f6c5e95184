# SPDX-License-Identifier: Apache-2.0
"""A bundle is never its own judge of the guest image (issue 34, finding 5).

`kosa8 bundle import` installs the bundle's guest kernel and initramfs for every later
sandbox, so a crafted bundle whose initramfs was changed and whose manifests were
rewritten to match must be refused: the guest's manifest.json must have the digest this
kosa8 build carries (the one it was released with), or the one the user names with
--trust-guest, which the audit log records. No VM is booted here: import only."""
import hashlib
import io
import json
import os
import shutil
import tarfile

import pytest

from conftest import Home, new_home

pytestmark = pytest.mark.hostile


class Daemon(Home):
    """A daemon of its own whose guest can only come from its home or next to kosa8d
    (KOSA8_GUEST_DIR, empty here, would override a bundle's)."""
    CLEAN = {"KOSA8_GUEST_DIR": "", "KOSA8_OFFLINE": ""}

    def __init__(self, prefix, *start):
        super().__init__(new_home(prefix))
        self.start(*start)

    def __call__(self, *args, **kw):
        return super().__call__(*args, env_extra=self.CLEAN, **kw)

    def json(self, *args, **kw):
        return super().json(*args, env_extra=self.CLEAN, **kw)

    def start(self, *extra):
        return self("daemon", "start", *extra, check=True, timeout=200)

    def close(self):
        self.stop()
        shutil.rmtree(self.path, ignore_errors=True)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def members(path):
    with tarfile.open(path) as t:
        return [(m.name, t.extractfile(m).read()) for m in t.getmembers()]


def write_bundle(path, parts):
    """A bundle as export writes it (manifest.json first) from (name, bytes) pairs."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        for name, data in parts:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))


def tampered(src, out, rewrite_guest_manifest):
    """`src` with its initramfs changed (one byte more: an agent of someone else's) and
    the bundle's manifest rewritten to match; the guest's manifest.json too if asked."""
    parts = dict(members(src))
    order = [n for n, _ in members(src)]
    gm = json.loads(parts["guest/manifest.json"])
    iname = "guest/" + gm["initramfs"]["file"]
    parts[iname] = parts[iname] + b"\0" * 512
    if rewrite_guest_manifest:
        gm["initramfs"]["sha256"] = sha(parts[iname])
        parts["guest/manifest.json"] = (json.dumps(gm, indent=2) + "\n").encode()
    bm = json.loads(parts["manifest.json"])
    for p in bm["parts"]:
        p["sha256"], p["size"] = sha(parts[p["path"]]), len(parts[p["path"]])
    parts["manifest.json"] = json.dumps(bm, indent=1).encode()
    write_bundle(out, [(n, parts[n]) for n in order])
    return "sha256:" + sha(parts["guest/manifest.json"])


@pytest.fixture(scope="module")
def bundles():
    """The guest image of this build, bundled by a daemon, and two crafted copies."""
    src = Daemon("k8bg-")
    work = new_home("k8bgw-")
    try:
        out = os.path.join(work, "good.k8b")
        p = src("bundle", "export", out)
        assert p.returncode == 0, p.stderr
        release = src.json("daemon", "status")["guest"]["release_digest"]
        both = os.path.join(work, "both.k8b")
        forged = tampered(out, both, rewrite_guest_manifest=True)
        own = os.path.join(work, "own.k8b")
        tampered(out, own, rewrite_guest_manifest=False)
        yield {"good": out, "both": both, "forged": forged, "own": own, "release": release}
    finally:
        src.close()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def offline():
    h = Daemon("k8bo-", "--offline")
    yield h
    h.close()


def no_guest_installed(h):
    assert not os.path.exists(os.path.join(h.path, "guest"))
    tmp = os.path.join(h.path, "tmp")
    assert not os.path.isdir(tmp) or os.listdir(tmp) == []


def test_the_build_carries_its_guest_digest(bundles, offline):
    g = offline.json("daemon", "status")["guest"]
    rel = g["release_digest"]
    assert rel.startswith("sha256:") and len(rel) == 71, g
    # the daemon's own guest (built with it) is the released one: the SHA-256 of its
    # manifest.json
    with open(os.path.join(g["dir"], "manifest.json"), "rb") as f:
        assert rel == "sha256:" + sha(f.read()) == g["digest"], g
    assert "the one this kosa8 was released with" in offline("daemon", "status").stdout


def test_guest_with_rewritten_manifests_is_refused(bundles, offline):
    h = offline
    p = h("bundle", "import", bundles["both"])
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "not the one this kosa8 was released with" in p.stderr, p.stderr
    assert bundles["forged"] in p.stderr and bundles["release"] in p.stderr, p.stderr
    assert "Nothing was installed" in p.stderr
    no_guest_installed(h)
    assert h.json("daemon", "status")["guest"]["digest"] == bundles["release"]
    refused = [r for r in h.json("audit", "ls") if r["action"] == "bundle.guest.refused"]
    assert refused, h.json("audit", "ls")
    assert bundles["forged"] in json.dumps(refused[-1])
    assert not [r for r in h.json("audit", "ls") if r["action"] == "bundle.import"]


def test_guest_that_does_not_match_its_own_manifest_is_refused(bundles, offline):
    h = offline
    p = h("bundle", "import", bundles["own"])
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "does not match its manifest" in p.stderr, p.stderr
    no_guest_installed(h)


def test_trust_guest_takes_only_the_digest_named_and_is_audited(bundles, offline):
    h = offline
    p = h("bundle", "import", bundles["both"], "--trust-guest", bundles["release"])
    assert p.returncode == 2 and "not the " + bundles["release"] in p.stderr, p.stderr
    no_guest_installed(h)
    p = h("bundle", "import", bundles["both"], "--trust-guest", "sha256:1234")
    assert p.returncode == 2 and "trust_guest must be" in p.stderr, p.stderr
    no_guest_installed(h)
    p = h("bundle", "import", bundles["both"], "--trust-guest", bundles["forged"])
    assert p.returncode == 0, p.stderr
    assert "trusted by --trust-guest" in p.stdout, p.stdout
    g = h.json("daemon", "status")["guest"]
    assert g["dir"] == os.path.join(h.path, "guest") and g["digest"] == bundles["forged"], g
    assert "NOT the one this kosa8 was released with" in h("daemon", "status").stdout
    rec = [r for r in h.json("audit", "ls") if r["action"] == "bundle.import"][-1]
    assert bundles["forged"] in json.dumps(rec) and '"trusted_guest": true' in json.dumps(rec), rec


def test_matching_bundle_is_accepted_offline(bundles, offline):
    h = offline
    assert h.json("daemon", "status")["offline"] is True
    p = h("bundle", "import", bundles["good"], "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])     # after the progress lines
    assert r["guest"] is True and r["trusted_guest"] is False, r
    assert r["guest_digest"] == bundles["release"], r
    g = h.json("daemon", "status")["guest"]
    assert g["dir"] == os.path.join(h.path, "guest") and g["verified"], g
    assert g["digest"] == bundles["release"], g
    rec = [x for x in h.json("audit", "ls") if x["action"] == "bundle.import"][-1]
    assert '"trusted_guest": false' in json.dumps(rec), rec
