# SPDX-License-Identifier: Apache-2.0
# test_99_hostile_build.py - docker build from the attacker's side (docs/docker.md "Build",
# docs/threat-model.md): a Dockerfile and context written by someone else, a RUN step
# that is root in its container. Each test asserts the attack fails and the host's files
# are as they were.
import hashlib
import io
import os
import shutil
import socket
import tarfile
import tempfile

import pytest

from dockerkit import docker_cli, engine_home, needs_cli

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
