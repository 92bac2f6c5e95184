# SPDX-License-Identifier: Apache-2.0
# test_82_docker_frameworks.py - the call sequences agent frameworks make on the Docker
# API (issue 12, docs/docker.md "Pointing frameworks at kosa8"), with python3-docker and
# the docker CLI against a daemon of this module's own (test_89's fixture: one small
# engine sandbox shared by every test here).
import concurrent.futures
import io
import socket
import tarfile
import time
import urllib.request

import pytest

from conftest import recv_all, wait_or_fail
from test_89_docker_containers import IMG, SERVER, dk, docker, dockerpy, ok, sock  # noqa: F401

needs_py = pytest.mark.skipif(dockerpy is None,
                              reason="python3-docker is needed (scripts/deps.sh)")


def test_eight_runs_at_once(dk):
    """Eight `docker run --rm` at the same moment: every one prints its own answer and
    nothing is left behind."""
    def one(n):
        return n, docker(dk, "run", "--rm", IMG, "python", "-c", "print(%d * %d)" % (n, n),
                         timeout=600)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        done = list(pool.map(one, range(8)))
    print("eight docker run --rm at once: %.1f s" % (time.time() - t0))
    for n, p in done:
        assert (p.returncode, p.stdout) == (0, "%d\n" % (n * n)), (n, p.stdout, p.stderr)
    assert ok(docker(dk, "ps", "-aq")) == ""


def exec_with_stdin(client, ctr, cmd, data):
    """exec create with stdin, a hijacked exec start, the data written, the write side
    shut (half-close), then the framed output read to its end: (stdout, stderr)."""
    ex = client.api.exec_create(ctr.id, cmd, stdin=True, stdout=True, stderr=True)
    s = client.api.exec_start(ex["Id"], socket=True)
    raw = s._sock
    raw.sendall(data)
    raw.shutdown(socket.SHUT_WR)
    buf = recv_all(raw)
    raw.close()
    out = {1: b"", 2: b""}
    while buf:
        assert len(buf) >= 8, buf
        n = int.from_bytes(buf[4:8], "big")
        out[buf[0]] += buf[8:8 + n]
        buf = buf[8 + n:]
    return out[1], out[2], client.api.exec_inspect(ex["Id"])["ExitCode"]


@needs_py
def test_openai_agents_sdk_sequence(dk):
    """The OpenAI Agents SDK's Docker sandbox: a container kept alive by its entrypoint
    (tail -f /dev/null) with a random published port, files written through an exec's
    stdin closed by a half-close, commands run by exec, results read with get_archive,
    then the container removed."""
    c = dockerpy.DockerClient(base_url="unix://" + sock(dk), version="auto")
    ct = c.containers.run(IMG, entrypoint=["tail", "-f", "/dev/null"], detach=True,
                          ports={"8000/tcp": ("127.0.0.1", None)}, working_dir="/work")
    try:
        ct.reload()
        assert ct.status == "running"
        port = int(ct.ports["8000/tcp"][0]["HostPort"])
        assert port > 0 and ct.ports["8000/tcp"][0]["HostIp"] == "127.0.0.1"
        code = b"print({'sum': sum(range(10))})\n"
        out, err, rc = exec_with_stdin(c, ct, ["sh", "-c", "mkdir -p /work && "
                                               "cat > /work/main.py && echo saved"], code)
        assert (out, err, rc) == (b"saved\n", b"", 0), (out, err, rc)
        r = ct.exec_run(["python", "main.py"], workdir="/work")
        assert (r.exit_code, r.output) == (0, b"{'sum': 45}\n"), r
        r = ct.exec_run(["sh", "-c", "python main.py > result.json"], workdir="/work")
        assert r.exit_code == 0, r.output
        chunks, stat = ct.get_archive("/work/result.json")
        assert stat["name"] == "result.json", stat
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as t:
            assert t.extractfile("result.json").read() == b"{'sum': 45}\n"
        # a server started by exec answers on the published port
        ct.exec_run(["python", "-c", SERVER], detach=True)

        def fetch():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=5) as r:
                    return r.read() == b"hi\n"
            except OSError:
                return False
        wait_or_fail(fetch, "the server started by exec to answer", timeout=60)
    finally:
        ct.remove(force=True)
        c.close()
    s = socket.socket()
    s.settimeout(5)
    assert s.connect_ex(("127.0.0.1", port)) != 0, "port still open after the remove"
    s.close()


def test_run_of_a_missing_command(dk):
    """A start that fails: `docker run --rm` reports it and returns at once (it waits for
    the removal, and waited forever when the container stayed), nothing is left; without
    --rm the container stays, created, with moby's exit code and the error."""
    import json
    t0 = time.time()
    p = docker(dk, "run", "--rm", IMG, "/no/such/cmd", timeout=120)
    assert p.returncode == 127 and "/no/such/cmd" in p.stderr, (p.returncode, p.stderr)
    assert time.time() - t0 < 60
    assert ok(docker(dk, "ps", "-aq")) == ""
    p = docker(dk, "run", "--name", "nocmd", IMG, "/no/such/cmd", timeout=120)
    assert p.returncode == 127, (p.returncode, p.stderr)
    st = json.loads(ok(docker(dk, "inspect", "nocmd")))[0]["State"]
    assert st["ExitCode"] == 127 and "/no/such/cmd" in st["Error"], st
    ok(docker(dk, "rm", "nocmd"))
