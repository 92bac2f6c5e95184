# SPDX-License-Identifier: Apache-2.0
# test_99_hostile_build.py - docker build from the attacker's side (docs/docker.md "Build",
# docs/threat-model.md): a Dockerfile and context written by someone else, a RUN step
# that is root in its container. Each test asserts the attack fails and the host's files
# are as they were.
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import tarfile
import tempfile
import threading
import time
import uuid

import pytest

from conftest import daemon_pid
from dockerkit import daemon_home, docker_cli, engine_home, needs_cli

pytestmark = [pytest.mark.hostile, needs_cli]


@pytest.fixture(scope="module")
def dk(python_layout):
    yield from engine_home(python_layout, "k8hb-")


def docker(dk, *args, cwd=None, timeout=600):
    return docker_cli(dk, *args, cwd=cwd, timeout=timeout)


def digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return "unreadable: %s" % e.errno


def build_dir(dk):
    return os.path.join(dk.path, "docker", "build")


def test_run_symlink_to_shadow_then_copy_over_it(dk):
    """RUN plants /x -> /etc/shadow; a later COPY to /x replaces the link, never writes
    through it: the image's shadow and the host's are intact."""
    before = digest("/etc/shadow")
    d = tempfile.mkdtemp(prefix="k8hbctx-")
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write("FROM python:3.12-slim\n"
                "RUN ln -s /etc/shadow /x && sha256sum /etc/shadow > /shadow.sum\n"
                "COPY payload /x\n")
    with open(os.path.join(d, "payload"), "w") as f:
        f.write("root::0:0:99999:7:::\n")
    ok = docker(dk, "build", "-t", "planted", ".", cwd=d)
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    assert digest("/etc/shadow") == before
    r = docker(dk, "run", "--rm", "planted", "sh", "-c",
               "test -L /x && echo link || cat /x; sha256sum -c /shadow.sum", timeout=300)
    assert r.stdout == "root::0:0:99999:7:::\n/etc/shadow: OK\n", (r.stdout, r.stderr)
    assert digest("/etc/shadow") == before
    shutil.rmtree(d)


def test_run_symlink_to_root_then_copy_through_it(dk):
    """RUN plants /root-link -> /; COPY to /root-link/tmp/F follows the link inside the
    image's root, as Docker: the file is the image's /tmp/F, never the host's."""
    d = tempfile.mkdtemp(prefix="k8hbctx-")
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write("FROM python:3.12-slim\nRUN ln -s / /root-link\n"
                "COPY payload /root-link/tmp/k8hb-planted\n")
    with open(os.path.join(d, "payload"), "w") as f:
        f.write("x\n")
    p = docker(dk, "build", "-t", "through", ".", cwd=d)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert not os.path.exists("/tmp/k8hb-planted")
    r = docker(dk, "run", "--rm", "through", "sh", "-c",
               "cat /tmp/k8hb-planted; readlink /root-link", timeout=300)
    assert r.stdout == "x\n/\n", (r.stdout, r.stderr)
    assert not os.path.exists("/tmp/k8hb-planted")
    shutil.rmtree(d)


def raw_build(dk, body, query="t=x"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(300)
    s.connect(os.path.join(dk.path, "docker.sock"))
    s.sendall(("POST /build?%s HTTP/1.1\r\nHost: d\r\nContent-Type: application/x-tar\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n" % (query, len(body))).encode())
    try:
        s.sendall(body)
    except OSError:
        pass
    data = b""
    while True:
        try:
            c = s.recv(65536)
        except OSError:
            break
        if not c:
            break
        data += c
    s.close()
    return data.decode(errors="replace")


def dockerfile_member(df):
    """A tar member "Dockerfile" with no end-of-archive blocks after it."""
    ti = tarfile.TarInfo("Dockerfile")
    ti.size = len(df)
    return ti.tobuf(format=tarfile.GNU_FORMAT) + df + b"\0" * (-len(df) % 512)


def test_context_declaring_huge_files_refused_before_writing(dk):
    """A 1 KB context whose tar headers declare 3 GiB: refused, nothing written."""
    hdr = tarfile.TarInfo("big")
    hdr.size = 3 << 30
    raw = dockerfile_member(b"FROM python:3.12-slim\nCOPY big /big\n") + \
        hdr.tobuf(format=tarfile.GNU_FORMAT) + b"\0" * 4096
    free_before = shutil.disk_usage(dk.path).free
    out = raw_build(dk, raw)
    assert "errorDetail" in out and "Successfully built" not in out, out
    assert "context was refused" in out, out
    assert shutil.disk_usage(dk.path).free > free_before - (64 << 20)
    # the build's directory is gone and the daemon still answers
    assert not os.listdir(build_dir(dk)), os.listdir(build_dir(dk))
    assert docker(dk, "version").returncode == 0


def test_gzip_bomb_context_refused(dk):
    """A gzip context that inflates to more than the 2 GiB unpack cap."""
    import zlib
    head = dockerfile_member(b"FROM python:3.12-slim\n")
    big = tarfile.TarInfo("zeros")
    big.size = (2 << 30) + (1 << 20)
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [co.compress(head + big.tobuf(format=tarfile.GNU_FORMAT))]
    chunk = b"\0" * (1 << 20)
    for _ in range(big.size >> 20):
        parts.append(co.compress(chunk))
    parts.append(co.flush())
    body = b"".join(parts)
    assert len(body) < (16 << 20)
    out = raw_build(dk, body)
    assert "errorDetail" in out and "Successfully built" not in out, out
    assert "context was refused" in out, out
    assert not os.listdir(build_dir(dk))
    assert docker(dk, "version").returncode == 0


def test_dockerfile_outside_context_and_copy_dotdot_refused(dk):
    d = tempfile.mkdtemp(prefix="k8hbctx-")
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write("FROM python:3.12-slim\nCOPY ../../../../etc/passwd /p\n")
    p = docker(dk, "build", ".", cwd=d)
    assert p.returncode == 1 and "outside the build context" in p.stderr, (p.stdout, p.stderr)
    # a dockerfile= pointing out of the context resolves inside it (missing there)
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w") as t:
        ti = tarfile.TarInfo("Dockerfile")
        df = b"FROM python:3.12-slim\n"
        ti.size = len(df)
        t.addfile(ti, io.BytesIO(df))
    out = raw_build(dk, body.getvalue(), query="dockerfile=../../../../etc/hostname")
    assert "errorDetail" in out and "Successfully built" not in out, out
    shutil.rmtree(d)


# ---- libarchive starts no program (lrzip, lzop, grzip...) on hostile bytes ----

# lrzip's magic (version 0.6): a reader with every libarchive filter hands such bytes to
# the `lrzip` found on PATH, as whoever reads them.
LRZ = b"LRZI\0\6" + b"\0" * 18 + b"hostile bytes"


@pytest.fixture(scope="module")
def lrz(tmp_path_factory):
    """A daemon whose PATH starts with a stand-in `lrzip` that leaves a marker (its uid)
    and fails. No engine: ADD and COPY run no VM."""
    d = str(tmp_path_factory.mktemp("lrzbin"))
    marker = os.path.join(d, "lrzip-ran")
    with open(os.path.join(d, "lrzip"), "w") as f:
        f.write("#!/bin/sh\nid -u > %s\nexit 1\n" % marker)
    os.chmod(os.path.join(d, "lrzip"), 0o755)
    for h in daemon_home("k8lz-", {}, env_extra={
            "PATH": d + ":" + os.environ.get("PATH", "/usr/bin:/bin")}):
        h.marker = marker
        yield h


def no_program_ran(h):
    if os.path.exists(h.marker):
        with open(h.marker) as f:
            return "the stand-in lrzip ran as uid %s" % f.read().strip()
    return None


def test_add_of_lrzip_bytes_runs_no_program(lrz):
    """ADD of a local file that starts with lrzip's magic: kosa8d (root) never starts
    `lrzip`; the file is not an archive kosa8 unpacks, so it is copied as it is (as Docker
    copies a compression it does not know)."""
    d = tempfile.mkdtemp(prefix="k8hbctx-")
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write("FROM scratch\nADD x.lrz /x.lrz\n")
    with open(os.path.join(d, "x.lrz"), "wb") as f:
        f.write(LRZ)
    p = docker(lrz, "build", "-t", "lrz-add", ".", cwd=d)
    assert no_program_ran(lrz) is None, no_program_ran(lrz)
    assert p.returncode == 0, (p.stdout, p.stderr)
    blobs = os.path.join(lrz.path, "images", "blobs", "sha256")
    mdg = json.loads(docker(lrz, "image", "inspect", "-f", "{{json .RepoDigests}}",
                            "lrz-add").stdout)[0].split("@sha256:")[1]
    with open(os.path.join(blobs, mdg)) as f:
        layer = json.load(f)["layers"][-1]["digest"].split(":")[1]
    with tarfile.open(os.path.join(blobs, layer)) as t:
        assert t.extractfile("x.lrz").read() == LRZ
    shutil.rmtree(d)


def lrz_layout(dst):
    """An OCI layout (tag "lrz") whose one layer is lrzip bytes labelled tar+gzip: the
    store checks a layer's digest, not its contents, until something reads it."""
    blobs = os.path.join(dst, "blobs", "sha256")
    os.makedirs(blobs)

    def put(data):
        dg = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, dg), "wb") as f:
            f.write(data)
        return "sha256:" + dg, len(data)

    ldg, lsize = put(LRZ)
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                      "rootfs": {"type": "layers", "diff_ids": [ldg]}}).encode()
    cdg, csize = put(cfg)
    man = json.dumps({"schemaVersion": 2,
                      "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": cdg, "size": csize},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                  "digest": ldg, "size": lsize}]}).encode()
    mdg, msize = put(man)
    with open(os.path.join(dst, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(dst, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdg,
            "size": msize, "annotations": {"org.opencontainers.image.ref.name": "lrz"}}]}, f)


def test_base_image_layer_of_lrzip_bytes_refused(lrz, tmp_path):
    """A base image whose layer is lrzip bytes: a COPY reads the image's layers for its
    symlinks, and that read refuses the layer with a clear error instead of starting
    `lrzip` as root."""
    lrz_layout(str(tmp_path / "layout"))
    lrz("image", "load", str(tmp_path / "layout"), "--tag", "lrzbase:1", check=True,
        timeout=120)
    d = tempfile.mkdtemp(prefix="k8hbctx-")
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write("FROM lrzbase:1\nCOPY f /d/f\n")
    with open(os.path.join(d, "f"), "w") as f:
        f.write("x\n")
    p = docker(lrz, "build", "-t", "lrz-base", ".", cwd=d)
    assert no_program_ran(lrz) is None, no_program_ran(lrz)
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert "is not a tar archive (plain, gzip, zstd, xz or bzip2)" in p.stderr, p.stderr
    assert docker(lrz, "version").returncode == 0
    shutil.rmtree(d)


# ---- the guest's RUN layers are parsed by jailed workers, never by kosa8d itself ----

# docs/images.md "The unpacker's jail": the workers are root of a user namespace whose
# ids 0-65535 are the host's 851072-916607 (the unpack_uids default).
UNPACK_FIRST = 851072
CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID = 0, 1, 3, 4


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict((k, v.strip()) for k, _, v in
                    (l.partition(":") for l in f.read().splitlines()))


class Workers(threading.Thread):
    """Watches kosa8d's children named kosa8d-* while a build runs: for each name, the
    /proc status and uid_map of each one seen at work (jailed: Seccomp 2); `kill` sends
    that signal to the first one of that name seen at work."""

    def __init__(self, dpid, kill=None):
        super().__init__(daemon=True)
        self.dpid, self.kill, self.seen, self.killed = dpid, kill, {}, None
        self.stop = threading.Event()

    def children(self):
        kids = []
        for t in os.listdir("/proc/%d/task" % self.dpid):
            try:
                with open("/proc/%d/task/%s/children" % (self.dpid, t)) as f:
                    kids += [int(k) for k in f.read().split()]
            except OSError:
                pass
        return kids

    def run(self):
        while not self.stop.is_set():
            for k in self.children():
                try:
                    st = proc_status(k)
                    if not st.get("Name", "").startswith("kosa8d-") or st["Seccomp"] != "2":
                        continue
                    with open("/proc/%d/uid_map" % k) as f:
                        st["uid_map"] = f.read().split()
                except (OSError, KeyError):
                    continue
                self.seen.setdefault(st["Name"], {}).setdefault(k, st)
                if self.kill and st["Name"] == self.kill[0] and self.killed is None:
                    os.kill(k, self.kill[1])
                    self.killed = k
            time.sleep(0.005)


def build_watched(dk, dockerfile, kill=None):
    d = tempfile.mkdtemp(prefix="k8hbctx-")
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write(dockerfile)
    w = Workers(daemon_pid(dk.path), kill)
    w.start()
    try:
        p = docker(dk, "build", "-t", "watched", ".", cwd=d, timeout=1200)
    finally:
        w.stop.set()
        w.join()
        shutil.rmtree(d)
    return p, w


def caps(st, field):
    return int(st[field], 16)


def test_run_layer_checked_and_unpacked_by_jailed_workers(dk):
    """A RUN's layer (the guest's bytes) is checked as it streams in by a worker, read
    for a later COPY's symlinks by another, and unpacked for the next RUN's disk by a
    third: seen from /proc while they work, each is root of the unpacker's user
    namespace (host uid 851072), no_new_privs, seccomp; the check and the reader hold no
    capability, the unpacker only CHOWN, DAC_OVERRIDE, FOWNER, FSETID (in that
    namespace). kosa8d itself never parses them."""
    tok = uuid.uuid4().hex
    p, w = build_watched(dk, "FROM python:3.12-slim\n"
                         "RUN echo %s > /tok && head -c 24000000 /dev/zero > /big && "
                         "mkdir /m && cd /m && seq 1 10000 | xargs touch\n"
                         "COPY Dockerfile /m/df\n"
                         "RUN test -s /big && test -f /m/10000 && cat /tok\n" % tok)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert tok in p.stdout, p.stdout
    assert set(w.seen) >= {"kosa8d-runlayer", "kosa8d-links", "kosa8d-unpack"}, \
        sorted(w.seen)
    # the check and the reader: nothing; a layer's unpack (owners kept): these four;
    # the context's (owners are COPY's business): DAC_OVERRIDE alone
    layer = 1 << CAP_CHOWN | 1 << CAP_DAC_OVERRIDE | 1 << CAP_FOWNER | 1 << CAP_FSETID
    want = {"kosa8d-runlayer": {0}, "kosa8d-links": {0},
            "kosa8d-unpack": {layer, 1 << CAP_DAC_OVERRIDE}}
    assert any(caps(st, "CapEff") == layer for st in w.seen["kosa8d-unpack"].values())
    for name, st in ((n, st) for n in want for st in w.seen[n].values()):
        for f in ("CapEff", "CapPrm", "CapBnd"):
            assert caps(st, f) in want[name] and caps(st, f) == caps(st, "CapEff"), \
                (name, f, st[f])
        for f in ("CapInh", "CapAmb"):
            assert caps(st, f) == 0, (name, f, st[f])
        assert st["NoNewPrivs"] == "1", (name, st)
        assert st["Seccomp"] == "2", (name, st)
        assert st["Uid"].split() == [str(UNPACK_FIRST)] * 4, (name, st["Uid"])
        assert st["Gid"].split() == [str(UNPACK_FIRST)] * 4, (name, st["Gid"])
        assert st["Groups"] == "", (name, st["Groups"])
        assert st["uid_map"] == ["0", str(UNPACK_FIRST), "65536"], (name, st["uid_map"])


def test_run_layer_worker_that_dies_is_a_build_error(dk):
    """The worker checking a RUN's layer dies mid-layer (SIGSEGV, as a parser bug would
    crash it): the build fails with a message saying so, kosa8d keeps serving (same
    pid; a next build works) and no build directory is left."""
    dpid = daemon_pid(dk.path)
    tok = uuid.uuid4().hex
    p, w = build_watched(dk, "FROM python:3.12-slim\n"
                         "RUN echo %s > /tok && head -c 24000000 /dev/zero > /big\n" % tok,
                         kill=("kosa8d-runlayer", signal.SIGSEGV))
    assert w.killed, "no RUN layer check was seen at work"
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert "the check of the RUN's layer was stopped by signal 11" in p.stderr, p.stderr
    assert daemon_pid(dk.path) == dpid
    os.kill(dpid, 0)
    assert docker(dk, "version").returncode == 0
    d = tempfile.mkdtemp(prefix="k8hbctx-")
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write("FROM python:3.12-slim\nENV K8HB=%s\n" % tok)
    ok = docker(dk, "build", "-t", "after-crash", ".", cwd=d)
    shutil.rmtree(d)
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    assert not os.listdir(build_dir(dk)), os.listdir(build_dir(dk))
