# SPDX-License-Identifier: Apache-2.0
# test_83_docker_tty.py - Tty containers and execs get a real pty in the guest, resize
# sets its window size, and HostConfig.Memory/NanoCpus are the container's own cgroup
# limits (docs/docker.md "Tty", "Limits"). One daemon, one small engine for the module.
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from dockerkit import IMG, docker_cli, docker_sock, dockerpy, engine_home, needs_cli, needs_py

pytestmark = [needs_cli, needs_py]


@pytest.fixture(scope="module")
def dk(python_layout):
    yield from engine_home(python_layout, "k8tty-")


def sock(dk):
    return docker_sock(dk)


def docker(dk, *args, input=None, timeout=300):
    return docker_cli(dk, *args, input=input, timeout=timeout)


def client(dk):
    return dockerpy.DockerClient(base_url="unix://" + sock(dk), version="auto")


def test_run_t_gets_a_terminal(dk):
    # the docker CLI without a terminal of its own sends no ConsoleSize: 0 0
    p = docker(dk, "run", "--rm", "-t", IMG, "sh", "-c",
               "tty; stty size; python -c 'import sys; print(sys.stdin.isatty(), "
               "sys.stdout.isatty(), sys.stderr.isatty())'; echo err >&2")
    assert p.returncode == 0, (p.stdout, p.stderr)
    # one terminal: stderr comes on it too, lines end in \r\n (onlcr), as in Docker
    assert p.stdout == "/dev/pts/0\r\n0 0\r\nTrue True True\r\nerr\r\n", repr(p.stdout)
    # without -t: pipes, as before
    p = docker(dk, "run", "--rm", IMG, "python", "-c",
               "import sys; print(sys.stdin.isatty(), sys.stdout.isatty())")
    assert p.stdout == "False False\n", (p.stdout, p.stderr)


def test_console_size_resize_and_exec_t(dk):
    c = client(dk)
    api = c.api
    ct = api.create_container(IMG, ["sleep", "infinity"], tty=True,
                              host_config=api.create_host_config())
    cid = ct["Id"]
    try:
        api.start(cid)
        # the init's terminal: resize it, read it back from an exec (root may open it)
        api.resize(cid, height=33, width=101)
        x = api.exec_create(cid, ["stty", "-F", "/dev/pts/0", "size"])
        assert api.exec_start(x) == b"33 101\n"
        # an exec with Tty: its own pty; a resize before start gives its first size
        x = api.exec_create(cid, ["sh", "-c", "tty; stty size"], tty=True)
        api.exec_resize(x["Id"], height=40, width=120)
        out = api.exec_start(x, tty=True)
        assert out.startswith(b"/dev/pts/") and out.endswith(b"\r\n40 120\r\n"), out
        assert out != b"/dev/pts/0\r\n40 120\r\n"   # not the init's terminal
        assert api.exec_inspect(x["Id"])["ExitCode"] == 0
        # a resize while the exec runs reaches it (SIGWINCH, then stty size)
        x = api.exec_create(cid, ["sh", "-c", "trap 'stty size; exit 0' WINCH; "
                                  "echo ready; while :; do sleep 0.1; done"], tty=True)
        s = api.exec_start(x, socket=True, tty=True)
        buf = b""
        t0 = time.time()
        while b"ready" not in buf and time.time() - t0 < 30:
            buf += s._sock.recv(4096)
        api.exec_resize(x["Id"], height=12, width=34)
        while b"12 34" not in buf and time.time() - t0 < 30:
            d = s._sock.recv(4096)
            if not d:
                break
            buf += d
        assert b"12 34" in buf, buf
        s.close()
        # the docker CLI's exec -t (under script, which gives it a terminal of 50x132)
        if shutil.which("script"):
            cfg = tempfile.mkdtemp(prefix="k8dcfg-")
            env = dict(os.environ, DOCKER_HOST="unix://" + sock(dk), DOCKER_CONFIG=cfg)
            p = subprocess.run(["script", "-q", "-e", "-c",
                                "stty rows 50 cols 132; docker exec -t %s sh -c 'tty; stty size'"
                                % cid, "/dev/null"], capture_output=True, text=True,
                               errors="replace", timeout=120, env=env, stdin=subprocess.DEVNULL)
            shutil.rmtree(cfg, ignore_errors=True)
            assert p.returncode == 0, (p.stdout, p.stderr)
            assert "/dev/pts/" in p.stdout and "50 132" in p.stdout, repr(p.stdout)
    finally:
        api.remove_container(cid, force=True)


def test_tty_user_and_stdin(dk):
    c = client(dk)
    # the terminal belongs to the container's user
    out = c.containers.run(IMG, ["sh", "-c", "stat -c '%u %g' $(tty)"], tty=True, user="1000",
                           remove=True)
    assert out == b"1000 5\r\n", out
    # stdin on the terminal: the client's bytes arrive, echoed; a half-close is ^D
    api = c.api
    ct = api.create_container(IMG, ["python", "-c", "import sys; d = sys.stdin.read(); "
                                    "print('got', len(d))"], tty=True, stdin_open=True)
    s = api.attach_socket(ct["Id"], params={"stdin": 1, "stdout": 1, "stream": 1})
    api.start(ct["Id"])
    time.sleep(1)
    s._sock.sendall(b"abc\n")
    s._sock.shutdown(1)
    buf = b""
    t0 = time.time()
    while time.time() - t0 < 60:
        d = s._sock.recv(4096)
        if not d:
            break
        buf += d
    assert b"got 4" in buf, buf
    assert api.wait(ct["Id"])["StatusCode"] == 0
    api.remove_container(ct["Id"])


def test_memory_limit_oom(dk):
    p = docker(dk, "run", "--name", "oom1", "-m", "64m", IMG, "python", "-c",
               "b = b'x' * (200 << 20); print('survived')")
    try:
        assert p.returncode == 137 and "survived" not in p.stdout, (p.returncode, p.stdout,
                                                                    p.stderr)
        st = json.loads(docker(dk, "inspect", "oom1").stdout)[0]
        assert st["State"]["OOMKilled"] is True and st["State"]["ExitCode"] == 137, st["State"]
        assert st["HostConfig"]["Memory"] == 64 << 20
    finally:
        docker(dk, "rm", "-f", "oom1")
    # below the limit it runs; the container's memory.max is what was asked
    p = docker(dk, "run", "--rm", "-m", "128m", IMG, "python", "-c",
               "b = b'x' * (40 << 20); print('ok')")
    assert (p.returncode, p.stdout) == (0, "ok\n"), (p.stdout, p.stderr)
    # Docker's floor
    p = docker(dk, "run", "--rm", "-m", "1m", IMG, "true")
    assert p.returncode != 0 and "Minimum memory limit" in p.stderr, p.stderr


def test_nano_cpus(dk):
    prog = ("import os, time\n"
            "t = time.time(); c0 = sum(os.times()[:2])\n"
            "while time.time() - t < 3: pass\n"
            "print('%.2f' % ((sum(os.times()[:2]) - c0) / (time.time() - t)))\n")
    p = docker(dk, "run", "--rm", "--cpus", "0.2", IMG, "python", "-c", prog)
    assert p.returncode == 0, p.stderr
    share = float(p.stdout)
    print("CPU share with --cpus 0.2: %.2f" % share)
    # cpu.max 20000 100000: at most a fifth of a CPU (some slack for the period's edges)
    assert share < 0.3, share
    st = docker(dk, "run", "-d", "--name", "cpu1", "--cpus", "1.5", IMG, "sleep", "60")
    try:
        assert st.returncode == 0, st.stderr
        hc = json.loads(docker(dk, "inspect", "cpu1").stdout)[0]["HostConfig"]
        assert hc["NanoCpus"] == 1500000000
    finally:
        docker(dk, "rm", "-f", "cpu1")
