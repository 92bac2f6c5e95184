# SPDX-License-Identifier: Apache-2.0
"""A hostile mirror or network between a user and a release (issue 33).

The release's install.sh carries the key that signs SHA256SUMS, and kosa8d the digest of
the guest image it was released with. A tarball that is not the one SHA256SUMS names, a
SHA256SUMS that the key did not sign, a release without a signature, a guest image whose
kernel or manifest was changed: each is refused and nothing is installed. With
KOSA8_OFFLINE=1 nothing is fetched at all. The installs run on a fresh Debian machine
(installkit.FreshRoot), so a refusal that failed would change that machine only; the
guest's fetches go to daemons on this host, from a copy of the programs with no guest image
beside them. No VM is booted."""
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

import pytest

import installkit as ik
from conftest import BIN, Home, new_home

pytestmark = pytest.mark.hostile

BACKDOOR = b"#!/bin/sh\necho owned\n"
BACKDOOR_MEMBER = "%s/lib/kosa8/bin/backdoor" % ik.TARBALL[:-len(".tar.gz")]


@pytest.fixture(scope="module")
def release():
    r = ik.shared_release()
    return r.srv, r.dir, r.top


@pytest.fixture(scope="module")
def root(release):
    r = ik.FreshRoot(["openssl"] + ik.depends(release[1]))
    yield r
    r.close()


def mirror(release, name, tamper_tarball=False, resum=False, drop_sig=False):
    """A copy of the release at /NAME/ with the changes asked for."""
    srv, rel, top = release
    d = os.path.join(top, name)
    shutil.copytree(rel, d)
    tb = os.path.join(d, ik.TARBALL)
    if tamper_tarball:          # a well-formed tarball, with a program of the attacker's
        with tarfile.open(os.path.join(rel, ik.TARBALL)) as src, \
                tarfile.open(tb, "w:gz") as dst:
            for m in src.getmembers():
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
            evil = tarfile.TarInfo(BACKDOOR_MEMBER)
            evil.mode, evil.size = 0o755, len(BACKDOOR)
            dst.addfile(evil, io.BytesIO(BACKDOOR))
    if resum:                   # a SHA256SUMS that matches the changed tarball
        h = subprocess.run(["sha256sum", tb], capture_output=True, text=True).stdout.split()[0]
        lines = open(os.path.join(d, "SHA256SUMS")).read().splitlines()
        with open(os.path.join(d, "SHA256SUMS"), "w") as f:
            for line in lines:
                f.write(("%s  %s" % (h, ik.TARBALL) if line.endswith(ik.TARBALL) else line) + "\n")
    if drop_sig:
        os.unlink(os.path.join(d, "SHA256SUMS.sig"))
    return "%s/%s" % (srv.url, name)


def install_from(root, release, url, env=None):
    """The release's own install.sh (its key) pointed at url, as the guides run it."""
    srv = release[0]
    return root.sh("curl -fsSL %s/rel/install.sh | sh -s -- --url %s" % (srv.url, url),
                   env=env, timeout=600)


def assert_nothing_installed(root):
    assert not os.path.exists(root.path("/usr/local/lib/kosa8/bin/backdoor"))
    assert not os.path.exists(root.path("/usr/local/lib/kosa8"))
    assert not os.path.exists(root.path("/usr/local/bin/kosa8"))
    assert root.run(["getent", "group", "kosa8"]).returncode != 0
    p = root.run(["dpkg-query", "-W", "-f", "${Status}", "qemu-system-x86"])
    assert p.stdout != "install ok installed", "packages were installed for a refused release"


def test_tampered_tarball_is_refused(root, release):
    url = mirror(release, "bad-tar", tamper_tarball=True)
    p = install_from(root, release, url)
    assert p.returncode != 0, p.stderr
    assert "SHA256SUMS says" in p.stderr and "nothing was installed" in p.stderr, p.stderr
    assert_nothing_installed(root)


def test_checksums_not_signed_by_the_key_are_refused(root, release):
    url = mirror(release, "bad-sums", tamper_tarball=True, resum=True)
    n = len(release[0].log)
    p = install_from(root, release, url)
    assert p.returncode != 0, p.stderr
    assert "not signed by this release's key" in p.stderr, p.stderr
    # refused on the signature, before the tarball was asked for
    assert "/bad-sums/%s" % ik.TARBALL not in release[0].log[n:], release[0].log[n:]
    assert_nothing_installed(root)


def test_unsigned_release_is_refused(root, release):
    url = mirror(release, "no-sig", drop_sig=True)
    p = install_from(root, release, url)
    assert p.returncode != 0 and "has no SHA256SUMS.sig" in p.stderr, p.stderr
    assert_nothing_installed(root)


def test_offline_install_fetches_nothing(root, release):
    srv = release[0]
    n = len(srv.log)
    script = open(os.path.join(release[1], "install.sh")).read()
    p = root.run(["sh", "-s", "--", "--url", srv.url + "/rel"], input=script,
                 env={"KOSA8_OFFLINE": "1"})
    assert p.returncode != 0 and "KOSA8_OFFLINE is set" in p.stderr, p.stderr
    assert srv.log[n:] == [], srv.log[n:]
    assert_nothing_installed(root)


class Guestless(Home):
    """A daemon of its own from a copy of the programs with no guest image beside them
    (KOSA8_GUEST_DIR empty), fetching from guest_url; `env` for kosa8d (KOSA8_OFFLINE)."""

    def __init__(self, prefix, guest_url, env=None):
        super().__init__(new_home(prefix))
        self.bin = tempfile.mkdtemp(prefix="k8bin-")
        os.mkdir(os.path.join(self.bin, "bin"))
        for prog in ("kosa8", "kosa8d", "kosa8-net", "kosa8-fs", "kosa8-broker", "kosa8-model"):
            shutil.copy2(os.path.join(BIN, prog), os.path.join(self.bin, "bin", prog))
        with open(os.path.join(self.path, "config.json"), "w") as f:
            json.dump({"guest_url": guest_url}, f)
        self.env = dict(env or {}, KOSA8_GUEST_DIR="", KOSA8D=os.path.join(self.bin, "bin", "kosa8d"))
        if "KOSA8_OFFLINE" not in self.env:
            self.env["KOSA8_OFFLINE"] = ""

    def __call__(self, *args, **kw):
        return super().__call__(*args, env_extra=self.env, **kw)

    def json(self, *args, **kw):
        return super().json(*args, env_extra=self.env, **kw)

    def start(self, *extra):
        return self("daemon", "start", *extra, check=True, timeout=200)

    def audit(self, action):
        return [r for r in self.json("audit", "ls") if r["action"] == action]

    def close(self):
        self.stop()
        shutil.rmtree(self.path, ignore_errors=True)
        shutil.rmtree(self.bin, ignore_errors=True)


def guest_mirror(release, name, tamper=None, rewrite_manifest=False):
    """/NAME/guest/: the release's guest image, one file's byte changed, and optionally its
    manifest rewritten to name the changed file (as an attacker who controls the mirror
    would)."""
    srv, rel, top = release
    d = os.path.join(top, name, "guest")
    shutil.copytree(os.path.join(rel, "guest"), d)
    if tamper:
        with open(os.path.join(d, tamper), "r+b") as f:
            f.seek(1000)
            b = f.read(1)
            f.seek(1000)
            f.write(bytes([b[0] ^ 0x01]))
    if rewrite_manifest:
        mp = os.path.join(d, "manifest.json")
        m = json.load(open(mp))
        h = subprocess.run(["sha256sum", os.path.join(d, tamper)], capture_output=True,
                           text=True).stdout.split()[0]
        m["kernel" if tamper == "vmlinux" else "initramfs"]["sha256"] = h
        with open(mp, "w") as f:
            json.dump(m, f, indent=2)
    return "%s/%s/guest/" % (srv.url, name)


def test_tampered_guest_is_refused(release):
    srv = release[0]
    h = Guestless("k8gf-", guest_mirror(release, "bad-kernel", tamper="vmlinux"))
    try:
        h.start()
        # the start's fetch found a changed kernel: refused, nothing installed
        st = h.json("daemon", "status")
        assert not st["guest"]["dir"], st["guest"]
        refused = h.audit("guest.fetch.refused")
        assert refused and refused[0]["details"]["file"] == "vmlinux", refused
        assert not os.path.exists(os.path.join(h.path, "guest"))
        p = h("guest", "verify")
        assert p.returncode == 4, p.stdout + p.stderr
        # a manifest rewritten to match the changed kernel: its digest is not the release's
        url = guest_mirror(release, "bad-manifest", tamper="vmlinux", rewrite_manifest=True)
        n = len(srv.log)
        p = h("guest", "fetch", "--url", url)
        assert p.returncode != 0 and "not the one this kosa8 was released with" in p.stderr, \
            p.stderr
        assert h.audit("guest.fetch.refused")[-1]["details"]["file"] == "manifest.json"
        # judged by the manifest's digest alone: the kernel it names was never asked for
        assert [u for u in srv.log[n:] if "/bad-manifest/" in u] == \
            ["/bad-manifest/guest/manifest.json"], srv.log[n:]
        assert not os.path.exists(os.path.join(h.path, "guest"))
        # a changed initramfs under the release's manifest
        p = h("guest", "fetch", "--url", guest_mirror(release, "bad-initrd",
                                                       tamper="initramfs.cpio"))
        assert p.returncode != 0 and "initramfs.cpio" in p.stderr, p.stderr
        assert not os.path.exists(os.path.join(h.path, "guest"))
        # the release's own is taken
        p = h("guest", "fetch", "--url", srv.url + "/rel/guest/")
        assert p.returncode == 0, p.stderr
        assert h("guest", "verify").returncode == 0
        assert h.audit("guest.fetch")
    finally:
        h.close()


def test_offline_daemon_fetches_nothing(release):
    srv = release[0]
    n = len(srv.log)
    h = Guestless("k8go-", srv.url + "/rel/guest/", env={"KOSA8_OFFLINE": "1"})
    try:
        h.start()
        p = h("guest", "fetch")
        assert p.returncode != 0 and "KOSA8_OFFLINE is set" in p.stderr, p.stderr
        assert srv.log[n:] == [], srv.log[n:]
        assert not h.json("daemon", "status")["guest"]["dir"]
        assert "KOSA8_OFFLINE is set: nothing fetched" in open(
            os.path.join(h.path, "kosa8d.log")).read()
        assert not h.audit("guest.fetch") and not h.audit("guest.fetch.refused")
    finally:
        h.close()
