# SPDX-License-Identifier: Apache-2.0
# dockerkit.py - what the Docker API's test files share: a daemon of a module's own with a
# small engine and the test image loaded, and the real docker CLI pointed at its socket.
import json
import os
import shutil
import socket
import subprocess
import tempfile

import pytest

from conftest import Home, new_home, recv_all, run

try:
    import docker as dockerpy
except ImportError:
    dockerpy = None

IMG = "python:3.12-slim"
needs_cli = pytest.mark.skipif(not shutil.which("docker"),
                               reason="a docker CLI is needed (scripts/deps.sh: docker.io)")
needs_py = pytest.mark.skipif(dockerpy is None,
                              reason="python3-docker is needed (scripts/deps.sh)")


def daemon_home(prefix, config, start_args=(), env_extra=None, layout=None):
    """A module fixture's body: a daemon of its own (config.json `config`, started with
    start_args and env_extra in its environment), with IMG loaded from `layout` when
    given; yields its Home, then stops it and removes its home (kept with
    KOSA8_KEEP_HOME)."""
    h = Home(new_home(prefix))
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump(config, f)
    run(["daemon", "start"] + list(start_args), h.path, check=True, timeout=200,
        env_extra=env_extra)
    if layout:
        h("image", "load", layout, "--tag", IMG, check=True, timeout=600)
    try:
        yield h
    finally:
        h.stop()
        if os.environ.get("KOSA8_KEEP_HOME") is None:
            shutil.rmtree(h.path, ignore_errors=True)


def engine_home(python_layout, prefix, *start_args):
    """daemon_home with an engine of 512 MiB / 1 vCPU / 2 GB and IMG loaded."""
    yield from daemon_home(prefix, {"docker_engine_memory_mib": 512, "docker_engine_cpus": 1,
                                    "docker_engine_disk_gb": 2}, start_args,
                           layout=python_layout)


def docker_sock(home):
    return os.path.join(home.path, "docker.sock")


def raw_http(home, method, path, body=b"", headers=(), timeout=60):
    """One HTTP/1.1 request on home's docker.sock, the connection closed after it:
    (status, head text, body bytes)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(docker_sock(home))
    head = "%s %s HTTP/1.1\r\nHost: docker\r\nContent-Length: %d\r\nConnection: close\r\n" % (
        method, path, len(body))
    for k, v in headers:
        head += "%s: %s\r\n" % (k, v)
    s.sendall(head.encode() + b"\r\n" + body)
    data = recv_all(s)
    s.close()
    hdr, _, rest = data.partition(b"\r\n\r\n")
    return int(hdr.split(b" ")[1]), hdr.decode(errors="replace"), rest


def docker_cli(home, *args, cwd=None, input=None, timeout=300):
    """The docker CLI against home's docker.sock, with a config of its own (no login, no
    context) and the classic builder: a CompletedProcess with its output decoded as it
    came."""
    cfg = tempfile.mkdtemp(prefix="k8dcfg-")
    env = dict(os.environ, DOCKER_HOST="unix://" + docker_sock(home), DOCKER_CONFIG=cfg,
               DOCKER_BUILDKIT="0")
    env.pop("DOCKER_CONTEXT", None)
    if isinstance(input, str):
        input = input.encode()
    try:
        # decoded without newline translation: a terminal's \r\n is part of what is tested
        with subprocess.Popen(["docker"] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.PIPE, env=env,
                              cwd=cwd) as proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                hang_report(proc.pid, os.fstat(proc.stdout.fileno()).st_ino)
                proc.kill()
                proc.communicate()
                raise
        p = subprocess.CompletedProcess(proc.args, proc.returncode,
                                        out.decode(errors="replace"), err.decode(errors="replace"))
        return p
    finally:
        shutil.rmtree(cfg, ignore_errors=True)


def hang_report(pid, out_ino=None):
    """Where a docker CLI that outlived its timeout waits: alive or not (its pipes may be
    held by another process), what it blocks in, and each socket it holds with its peer
    (`ss -xp`), printed for the test's report (test_81's hang, stop 37)."""
    def read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as e:
            return "(%s)" % e.strerror
    print("== docker CLI %d after its timeout: %s; wchan %s" % (
        pid, read("/proc/%d/status" % pid).split("\n")[2:3], read("/proc/%d/wchan" % pid)))
    inodes = []
    try:
        for fd in sorted(os.listdir("/proc/%d/fd" % pid), key=int):
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            print("   fd %s -> %s" % (fd, target))
            if target.startswith("socket:["):
                inodes.append(target[8:-1])
    except OSError as e:
        print("   its descriptors: %s" % e.strerror)
    if out_ino:     # who else holds the CLI's stdout (its EOF is what the test waits for)
        tag = "pipe:[%d]" % out_ino
        for other in [d for d in os.listdir("/proc") if d.isdigit()]:
            try:
                for fd in os.listdir("/proc/%s/fd" % other):
                    if os.readlink("/proc/%s/fd/%s" % (other, fd)) == tag:
                        print("   its stdout is held by pid %s (%s) as fd %s" % (
                            other, read("/proc/%s/comm" % other), fd))
            except OSError:
                pass
    ss = subprocess.run(["ss", "-xpn"], capture_output=True, text=True).stdout.splitlines()
    for ino in inodes:
        for line in ss:
            if " %s " % ino in line:
                print("   ss: " + " ".join(line.split()))


def ok(p):
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p.stdout
