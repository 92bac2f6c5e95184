# SPDX-License-Identifier: Apache-2.0
# test_83_docker_build.py - `docker build` (the classic builder, DOCKER_BUILDKIT=0) and
# docker-py's images.build through kosa8's docker.sock (issue 12, docs/docker.md "Build"),
# against a daemon of this module's own (engine 512 MiB, 1 vCPU).
import io
import json
import os
import shutil
import tarfile
import tempfile
import time

import pytest

from conftest import recv_all
from dockerkit import (docker_cli, docker_sock, dockerpy, engine_home, needs_cli,  # noqa: F401
                       needs_py, ok)

pytestmark = needs_cli


@pytest.fixture(scope="module")
def dk(python_layout):
    yield from engine_home(python_layout, "k8db-")


def sock(dk):
    return docker_sock(dk)


def docker(dk, *args, cwd=None, input=None, timeout=600):
    return docker_cli(dk, *args, cwd=cwd, input=input, timeout=timeout)


def context(files):
    """A directory with files {relpath: text}."""
    d = tempfile.mkdtemp(prefix="k8dbctx-")
    for rel, text in files.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    return d


HELLO = """import os
print(os.environ["GREETING"], os.getcwd(), open("data/d.txt").read().strip(),
      os.path.exists("secret.txt"), open("/built.txt").read().strip() if os.path.exists("/built.txt") else "-")
"""


def test_metadata_and_copy_then_run(dk):
    d = context({"Dockerfile": "FROM python:3.12-slim\nENV GREETING=hello\nWORKDIR /app\n"
                               "COPY hello.py .\nCOPY data/ ./data/\nCOPY . /all/\n"
                               "RUN echo built > /built.txt && echo said-$GREETING && "
                               "rm -r /etc/debian_version /all/data && mkdir -p /all/data\n"
                               "LABEL purpose=test\nCMD [\"python\", \"hello.py\"]\n",
                 "hello.py": HELLO, "data/d.txt": "datum\n", "secret.txt": "no\n",
                 ".dockerignore": "secret.txt\n"})
    t0 = time.time()
    out = ok(docker(dk, "build", "-t", "mine", ".", cwd=d))
    took = time.time() - t0
    print("docker build (9 steps, one RUN, build sandbox boot included): %.2f s" % took)
    assert "Step 1/9 : FROM python:3.12-slim" in out, out
    assert "said-hello" in out, out
    assert "Successfully built " in out and "Successfully tagged mine:latest" in out, out
    p = docker(dk, "run", "--rm", "mine")
    assert p.returncode == 0 and p.stdout == "hello /app datum False built\n", (p.stdout, p.stderr)
    # the ignored file is not in the image either way (COPY . /all/)
    p = docker(dk, "run", "--rm", "mine", "sh", "-c",
               "ls /all; ls -A /all/data | wc -l; test -e /etc/debian_version || echo gone")
    assert p.returncode == 0 and "secret.txt" not in p.stdout and "hello.py" in p.stdout, p
    assert p.stdout.endswith("\n0\ngone\n"), p.stdout
    insp = json.loads(ok(docker(dk, "image", "inspect", "mine")))[0]
    assert insp["Config"]["WorkingDir"] == "/app"
    assert insp["Config"]["Labels"]["purpose"] == "test"
    assert "mine:latest" in ok(docker(dk, "images", "--format", "{{.Repository}}:{{.Tag}}"))
    lst = dk.json("image", "ls")
    refs = [i["ref"] for i in (lst if isinstance(lst, list) else lst["images"])]
    assert "docker.io/library/mine:latest" in refs, refs
    assert not [r for r in refs if "kosa8-build-cache" in r], refs
    # a second identical build takes every step from the cache, same image
    t0 = time.time()
    out2 = ok(docker(dk, "build", "-t", "mine", ".", cwd=d))
    print("the same build again, every step cached: %.2f s" % (time.time() - t0))
    assert out2.count("Using cache") == 8 and "Running in" not in out2, out2
    assert out2.split("Successfully built ")[1][:12] == out.split("Successfully built ")[1][:12]
    shutil.rmtree(d)


def test_failing_run_ends_the_build(dk):
    d = context({"Dockerfile": "FROM python:3.12-slim\nRUN echo before; false\nCMD true\n"})
    p = docker(dk, "build", "-t", "fails", ".", cwd=d)
    assert p.returncode == 1, p
    assert "The command '/bin/sh -c echo before; false' returned a non-zero code: 1" in \
        p.stderr, (p.stdout, p.stderr)
    assert "before" in p.stdout
    assert "fails" not in ok(docker(dk, "images"))
    # the build's sandbox is gone with the build
    sbs = dk.json("sandbox", "ls")
    names = [s["name"] for s in (sbs if isinstance(sbs, list) else sbs["sandboxes"])]
    assert not [n for n in names if n.startswith("dkb-")], names
    shutil.rmtree(d)


def test_copy_chown_and_add_archive(dk):
    d = context({"Dockerfile": "FROM python:3.12-slim\nCOPY --chown=1000:1001 f.txt /o/f.txt\n"
                               "ADD a.tar.gz /x/\n",
                 "f.txt": "f\n"})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        data = b"inside\n"
        ti = tarfile.TarInfo("sub/in.txt")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    with open(os.path.join(d, "a.tar.gz"), "wb") as f:
        f.write(buf.getvalue())
    ok(docker(dk, "build", "-t", "chowned", ".", cwd=d))
    p = docker(dk, "run", "--rm", "chowned", "sh", "-c", "stat -c '%u:%g' /o/f.txt; cat /x/sub/in.txt")
    assert p.stdout == "1000:1001\ninside\n", (p.stdout, p.stderr)
    shutil.rmtree(d)


def test_bad_dockerfile_and_missing_source_fail(dk):
    d = context({"Dockerfile": "FROM python:3.12-slim\nCOPY nothere /x\n"})
    p = docker(dk, "build", "-t", "bad", ".", cwd=d)
    assert p.returncode != 0 and "nothere" in (p.stdout + p.stderr), p
    with open(os.path.join(d, "Dockerfile"), "w") as f:
        f.write("FROM python:3.12-slim\nHEALTHCHECK CMD true\n")
    p = docker(dk, "build", ".", cwd=d)
    assert p.returncode != 0 and "HEALTHCHECK" in (p.stdout + p.stderr), p
    shutil.rmtree(d)


def raw_build(dk, tarbytes, query="t=evil"):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(sock(dk))
    s.sendall(("POST /v1.47/build?%s HTTP/1.1\r\nHost: d\r\nContent-Type: application/x-tar\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n" % (query, len(tarbytes))).encode()
              + tarbytes)
    data = recv_all(s)
    s.close()
    return data.decode(errors="replace")


def tar_of(entries):
    """entries: (name, type, data-or-linktarget)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, typ, data in entries:
            ti = tarfile.TarInfo(name)
            if typ == "link":
                ti.type = tarfile.SYMTYPE
                ti.linkname = data
                t.addfile(ti)
            else:
                b = data.encode()
                ti.size = len(b)
                t.addfile(ti, io.BytesIO(b))
    return buf.getvalue()


def test_context_escapes_refused_or_contained(dk):
    host = tempfile.mkdtemp(prefix="k8dbhost-")
    victim = os.path.join(host, "victim.txt")
    with open(victim, "w") as f:
        f.write("host secret\n")
    # a `../` member: the whole context is refused, nothing written outside
    out = raw_build(dk, tar_of([("Dockerfile", "f", "FROM python:3.12-slim\n"),
                                ("../../../../../tmp/k8db-escape", "f", "x")]))
    assert "errorDetail" in out and not os.path.exists("/tmp/k8db-escape"), out
    # a symlink out of the context: COPY through it stays inside the context
    out = raw_build(dk, tar_of([("Dockerfile", "f", "FROM python:3.12-slim\n"
                                 "COPY link/victim.txt /v.txt\n"),
                                ("link", "link", host)]))
    assert "errorDetail" in out and "Successfully built" not in out, out
    # a symlink file copied as a file keeps being a link (never the host's bytes)
    out = raw_build(dk, tar_of([("Dockerfile", "f", "FROM python:3.12-slim\nCOPY d /d\n"),
                                ("d/l", "link", victim)]), query="t=linked")
    assert "Successfully built" in out, out
    p = docker(dk, "run", "--rm", "linked", "sh", "-c", "readlink /d/l; cat /d/l || true")
    assert p.stdout.startswith(victim + "\n") and "host secret" not in p.stdout, p
    with open(victim) as f:
        assert f.read() == "host secret\n"
    shutil.rmtree(host)


@needs_py
def test_docker_py_build(dk):
    d = context({"Dockerfile": "FROM python:3.12-slim\nARG V=1\nENV V=$V\n"
                               "CMD [\"sh\", \"-c\", \"echo v=$V\"]\n"})
    c = dockerpy.DockerClient(base_url="unix://" + sock(dk), version="1.47")
    img, logs = c.images.build(path=d, tag="pybuilt:1", buildargs={"V": "7"})
    assert "pybuilt:1" in img.tags, img.tags
    out = c.containers.run("pybuilt:1", remove=True)
    assert out == b"v=7\n", out
    c.close()
    shutil.rmtree(d)
