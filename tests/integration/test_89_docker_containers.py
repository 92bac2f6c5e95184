# SPDX-License-Identifier: Apache-2.0
# test_89_docker_containers.py - containers and exec through the Docker-compatible API
# (issue 12, docs/docker.md), driven by the real docker CLI and python3-docker against a
# daemon of this module's own: one engine sandbox (512 MiB, 1 vCPU) shared by every test.
import json
import os
import shutil
import socket
import tempfile
import time

import pytest

from conftest import UnixHTTP, wait_or_fail
from dockerkit import (IMG, docker_cli, docker_sock, dockerpy, engine_home,  # noqa: F401
                       needs_cli, needs_py, ok, raw_http)

pytestmark = needs_cli


@pytest.fixture(scope="module")
def dk(python_layout):
    """(Home, the allowed bind root): a daemon with a small engine and one --allow-mount."""
    root = tempfile.mkdtemp(prefix="k8dcroot-", dir="/tmp")
    for h in engine_home(python_layout, "k8dc-", "--allow-mount", root):
        yield h, root
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(root, ignore_errors=True)


def sock(dk):
    return docker_sock(dk[0])


def docker(dk, *args, input=None, timeout=300):
    return docker_cli(dk[0], *args, input=input, timeout=timeout)


def raw(dk, method, path, body=b"", headers=()):
    return raw_http(dk[0], method, path, body, headers)


def audit(dk):
    with open(os.path.join(dk[0].path, "audit.log")) as f:
        return [json.loads(l) for l in f if l.strip()]


def test_run_prints_and_exit_codes(dk):
    t0 = time.time()
    p = docker(dk, "run", "--rm", IMG, "python", "-c", "print(6*7)")
    first = time.time() - t0
    assert p.returncode == 0 and p.stdout == "42\n", (p.stdout, p.stderr)
    t0 = time.time()
    assert docker(dk, "run", "--rm", IMG, "python", "-c", "print(6*7)").stdout == "42\n"
    warm = time.time() - t0
    print("docker run --rm (first, engine boot included): %.2f s; warm: %.2f s" % (first, warm))
    assert docker(dk, "run", "--rm", IMG, "sh", "-c", "exit 3").returncode == 3
    p = docker(dk, "run", "--rm", IMG, "sh", "-c", "echo out; echo err >&2")
    assert (p.stdout, p.stderr) == ("out\n", "err\n")
    # --rm: nothing left behind
    assert ok(docker(dk, "ps", "-aq")) == ""
    # the engine is an ordinary sandbox, sized from config.json
    sbs = dk[0].json("sandbox", "ls")
    eng = [s for s in (sbs if isinstance(sbs, list) else sbs["sandboxes"])
           if s["name"] == "docker-engine"]
    assert eng and eng[0]["memory_mib"] == 512, sbs
    acts = [(a["action"], (a.get("details") or {}).get("via")) for a in audit(dk)]
    for act in ("container.create", "container.start", "container.exit", "container.rm"):
        assert (act, "docker") in acts, acts


def test_stdin_pipe_and_half_close(dk):
    p = docker(dk, "run", "--rm", "-i", IMG, "python", "-", input="print(1)\n")
    assert (p.returncode, p.stdout) == (0, "1\n"), (p.stdout, p.stderr)
    big = "x" * 300000
    p = docker(dk, "run", "--rm", "-i", IMG, "python", "-c",
               "import sys; print(len(sys.stdin.read()))", input=big)
    assert p.stdout == "300000\n", (p.stdout, p.stderr)


def test_detached_lifecycle(dk):
    ok(docker(dk, "run", "-d", "--name", "w1", "--label", "k=v", IMG, "sh", "-c",
              "echo started; exec sleep infinity"))
    ps = ok(docker(dk, "ps", "--format", "{{.Names}} {{.Status}}"))
    assert ps.startswith("w1 Up"), ps
    assert ok(docker(dk, "ps", "-q", "--filter", "label=k=v")).strip()
    assert ok(docker(dk, "ps", "-q", "--filter", "name=^/w1$")).strip()
    assert ok(docker(dk, "ps", "-q", "--filter", "name=nope")) == ""
    out = ok(docker(dk, "exec", "w1", "python", "-c", "import os; print(os.getcwd())"))
    assert out == "/\n"
    assert ok(docker(dk, "exec", "-w", "/tmp", "w1", "pwd")) == "/tmp\n"
    assert docker(dk, "exec", "w1", "sh", "-c", "exit 4").returncode == 4
    p = docker(dk, "exec", "-i", "w1", "cat", input="via stdin\n")
    assert p.stdout == "via stdin\n", (p.stdout, p.stderr)
    assert ok(docker(dk, "logs", "w1")) == "started\n"
    assert ok(docker(dk, "logs", "-t", "w1")).split(" ", 1)[1] == "started\n"
    ins = json.loads(ok(docker(dk, "inspect", "w1")))[0]
    assert ins["Name"] == "/w1" and ins["State"]["Running"] and ins["State"]["Status"] == "running"
    assert ins["Config"]["Labels"] == {"k": "v"} and ins["Image"].startswith("sha256:")
    assert ins["HostConfig"]["LogConfig"]["Type"] == "json-file"
    # names are unique
    p = docker(dk, "run", "-d", "--name", "w1", IMG, "true")
    assert p.returncode != 0 and "already in use" in p.stderr, p.stderr
    # rm without force refuses a running container
    p = docker(dk, "rm", "w1")
    assert p.returncode != 0 and "cannot remove a running container" in p.stderr
    ok(docker(dk, "stop", "-t", "1", "w1"))
    ins = json.loads(ok(docker(dk, "inspect", "w1")))[0]
    assert ins["State"]["Status"] == "exited" and ins["State"]["ExitCode"] == 137
    ok(docker(dk, "restart", "w1"))
    assert json.loads(ok(docker(dk, "inspect", "w1")))[0]["State"]["Running"]
    ok(docker(dk, "kill", "w1"))
    wait_or_fail(lambda: json.loads(ok(docker(dk, "inspect", "w1")))[0]["State"]["ExitCode"]
                 == 137, "docker kill")
    p = docker(dk, "kill", "-s", "NOPE", "w1")
    assert p.returncode != 0
    ok(docker(dk, "rm", "-f", "w1"))
    p = docker(dk, "inspect", "w1")
    assert p.returncode != 0 and "No such" in p.stderr


def test_logs_follow_ends_with_the_container(dk):
    ok(docker(dk, "run", "-d", "--name", "lf1", IMG, "sh", "-c",
              "for i in 1 2 3; do echo $i; sleep 0.3; done; echo e >&2"))
    p = docker(dk, "logs", "-f", "lf1", timeout=120)
    assert (p.stdout, p.stderr) == ("1\n2\n3\n", "e\n"), (p.stdout, p.stderr)
    assert ok(docker(dk, "logs", "--tail", "2", "lf1")) == "3\n"
    assert ok(docker(dk, "wait", "lf1")).strip() == "0"
    ok(docker(dk, "rm", "lf1"))


def test_bind_mounts(dk):
    h, root = dk
    proj = os.path.join(root, "proj")
    os.makedirs(proj, exist_ok=True)
    with open(os.path.join(proj, "in.txt"), "w") as f:
        f.write("from host\n")
    p = docker(dk, "run", "--rm", "-v", proj + ":/work:ro", IMG, "sh", "-c",
               "cat /work/in.txt; echo x > /work/new.txt; echo rc=$?")
    assert "from host" in p.stdout and "rc=2" in p.stdout, (p.stdout, p.stderr)
    assert not os.path.exists(os.path.join(proj, "new.txt"))
    p = docker(dk, "run", "--rm", "-v", proj + ":/work", IMG, "sh", "-c",
               "echo x > /work/new.txt && ls / | grep -c kosa8; true")
    assert p.returncode == 0 and p.stdout.strip() == "0", (p.stdout, p.stderr)
    assert open(os.path.join(proj, "new.txt")).read() == "x\n"
    # outside the allowed root: refused, the roots named
    out = tempfile.mkdtemp(prefix="k8dcout-", dir="/tmp")
    try:
        p = docker(dk, "run", "--rm", "-v", out + ":/o", IMG, "true")
        assert p.returncode == 125 and root in p.stderr, p.stderr
        # a symlink inside the root that points out of it is resolved on the host: refused
        os.symlink(out, os.path.join(root, "escape"))
        p = docker(dk, "run", "--rm", "-v", os.path.join(root, "escape") + ":/o", IMG, "true")
        assert p.returncode == 125 and "not below" in p.stderr, p.stderr
    finally:
        shutil.rmtree(out, ignore_errors=True)
    acts = [a for a in audit(dk) if a["action"] == "container.mount"]
    assert acts and acts[-1]["details"]["via"] == "docker"


@needs_py
def test_dockerpy(dk):
    c = dockerpy.DockerClient(base_url="unix://" + sock(dk), version="auto")
    assert c.containers.run(IMG, ["python", "-c", "print(6*7)"], remove=True) == b"42\n"
    with pytest.raises(dockerpy.errors.ContainerError):
        c.containers.run(IMG, ["sh", "-c", "exit 2"], remove=True)
    ct = c.containers.run(IMG, "sleep infinity", detach=True)
    try:
        r = ct.exec_run(["python", "-c", "import sys; print('o'); sys.exit(2)"])
        assert (r.exit_code, r.output) == (2, b"o\n")
        r = ct.exec_run(["sh", "-c", "echo a; echo b >&2"], demux=True)
        assert r.output == (b"a\n", b"b\n")
        r = ct.exec_run(["sh", "-c", "echo a; echo b"], stream=True)
        assert b"".join(r.output) == b"a\nb\n"
    finally:
        ct.remove(force=True)
    ct2 = c.containers.run(IMG, ["sh", "-c", "echo x; exit 5"], detach=True)
    assert ct2.wait()["StatusCode"] == 5
    assert ct2.logs() == b"x\n"
    ct2.remove()
    # attach socket with stdin, then a half-close: output keeps flowing until exit
    ct3 = c.containers.create(IMG, ["python", "-c",
                                    "import sys; print(len(sys.stdin.read()))"],
                              stdin_open=True)
    s = ct3.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    ct3.start()
    s._sock.sendall(b"y" * 100000)
    s._sock.shutdown(socket.SHUT_WR)
    buf = b""
    while True:
        d = s._sock.recv(65536)
        if not d:
            break
        buf += d
    assert buf == b"\x01\x00\x00\x00\x00\x00\x00\x07100000\n", buf
    assert ct3.wait()["StatusCode"] == 0
    ct3.remove()


# A container that holds ~24 MiB and keeps a CPU busy part of the time.
BUSY = ["python3", "-c", "import time\nx = bytearray(24 << 20)\n"
        "while True: sum(range(20000)); time.sleep(0.05)"]


def test_stats_and_top_cli(dk):
    """`docker stats --no-stream` (named and all) and `docker top` (its -ef, and aux): the
    numbers come from the container's cgroup in the guest (issue 26)."""
    name = "k8stats"
    ok(docker(dk, "run", "-d", "--name", name, "-m", "256m", IMG, *BUSY))
    try:
        time.sleep(2)
        fmt = "{{.Name}} {{.CPUPerc}} {{.MemUsage}} {{.PIDs}}"
        for args in (("--no-stream", "--format", fmt, name), ("--no-stream", "--format", fmt)):
            out = ok(docker(dk, "stats", *args, timeout=120)).split()
            assert out[0] == name, out
            cpu = float(out[1].rstrip("%"))
            assert 0 < cpu <= 100, out                   # busy part of the time, one vCPU
            used = out[2]                                 # e.g. 26.1MiB
            assert used.endswith("MiB") and 20 <= float(used[:-3]) <= 200, out
            assert out[4] == "256MiB", out               # / 256MiB: -m is the limit
            assert out[5] == "1", out
        top = ok(docker(dk, "top", name)).splitlines()
        assert top[0].split() == ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"], top
        assert len(top) == 2 and top[1].split()[0] == "root", top
        assert "python3 -c import time" in top[1], top
        aux = ok(docker(dk, "top", name, "aux")).splitlines()
        assert aux[0].split()[:4] == ["USER", "PID", "%CPU", "%MEM"], aux
        assert int(aux[1].split()[5]) > 20000, aux       # RSS in KiB: the 24 MiB are touched
        p = docker(dk, "top", name, "-o", "pid")
        assert p.returncode != 0 and "not supported by kosa8" in p.stderr, p.stderr
    finally:
        ok(docker(dk, "rm", "-f", name))
    # a container that does not run: top is moby's 409, stats one object of zeros
    cid = ok(docker(dk, "create", IMG, "true")).strip()
    p = docker(dk, "top", cid)
    assert p.returncode != 0 and "is not running" in p.stderr, p.stderr
    hc = UnixHTTP(sock(dk))
    hc.request("GET", "/containers/%s/stats?stream=0" % cid)
    r = hc.getresponse()
    body = r.read()
    hc.close()
    v = json.loads(body)
    assert r.status == 200 and v["read"] == "0001-01-01T00:00:00Z", (r.status, body)
    assert v["memory_stats"]["usage"] == 0 and v["cpu_stats"]["cpu_usage"]["total_usage"] == 0
    ok(docker(dk, "rm", cid))


@needs_py
def test_stats_dockerpy(dk):
    """docker-py's stats(stream=False): one object whose precpu is a second older, and the
    stream: objects a second apart, each carrying the one before as precpu."""
    c = dockerpy.DockerClient(base_url="unix://" + sock(dk), version="auto")
    ct = c.containers.run(IMG, BUSY, detach=True)
    try:
        time.sleep(1)
        s = ct.stats(stream=False)
        cur, pre = s["cpu_stats"], s["precpu_stats"]
        assert cur["cpu_usage"]["total_usage"] > pre["cpu_usage"]["total_usage"] > 0, s
        assert cur["system_cpu_usage"] > pre["system_cpu_usage"] > 0, s
        assert cur["online_cpus"] == 1, s
        assert s["memory_stats"]["usage"] > 20 << 20 and s["memory_stats"]["limit"] > 0, s
        assert s["pids_stats"]["current"] == 1, s
        assert list(s["networks"]) == ["eth0"], s["networks"]    # its own namespace's
        it = ct.stats(decode=True)
        a, b = next(it), next(it)
        assert a["precpu_stats"]["cpu_usage"]["total_usage"] == 0, a
        assert b["precpu_stats"] == a["cpu_stats"] and b["preread"] == a["read"], (a, b)
        it.close()
        assert ct.top()["Processes"][0][-1].startswith("python3 -c"), ct.top()
    finally:
        ct.remove(force=True)


def test_cp_in_and_out(dk):
    """docker cp both ways (HEAD for the stat, PUT and GET of a tar) and docker-py's
    put_archive/get_archive, on a running container of the engine."""
    import io
    import tarfile
    ok(docker(dk, "run", "-d", "--name", "cp1", IMG, "sleep", "infinity"))
    tmp = tempfile.mkdtemp(prefix="k8dcp-")
    try:
        src = os.path.join(tmp, "in.txt")
        with open(src, "w") as f:
            f.write("from the host\n")
        ok(docker(dk, "cp", src, "cp1:/tmp/"))
        assert ok(docker(dk, "exec", "cp1", "cat", "/tmp/in.txt")) == "from the host\n"
        ok(docker(dk, "exec", "cp1", "sh", "-c", "mkdir -p /o/d && echo made > /o/d/f"))
        ok(docker(dk, "cp", "cp1:/o", os.path.join(tmp, "out")))
        with open(os.path.join(tmp, "out", "d", "f")) as f:
            assert f.read() == "made\n"
        p = docker(dk, "cp", "cp1:/no/such", tmp)
        assert p.returncode != 0 and "no/such" in p.stderr, p.stderr
        st, hdr, body = raw(dk, "HEAD", "/v1.47/containers/cp1/archive?path=/tmp/in.txt")
        assert st == 200 and "X-Docker-Container-Path-Stat" in hdr, hdr
        # nothing after the head: stray bytes make Go's client close its idle connection
        # under the next request ("use of closed network connection" in docker cp)
        assert body == b"", body
        if dockerpy is not None:
            c = dockerpy.DockerClient(base_url="unix://" + sock(dk), version="auto")
            ct = c.containers.get("cp1")
            b = io.BytesIO()
            with tarfile.open(fileobj=b, mode="w") as t:
                data = b"print(6*7)\n"
                info = tarfile.TarInfo("code.py")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            assert ct.put_archive("/tmp", b.getvalue())
            assert ct.exec_run(["python", "/tmp/code.py"]).output == b"42\n"
            chunks, stat = ct.get_archive("/tmp/code.py")
            assert stat["name"] == "code.py" and stat["size"] == 11, stat
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as t:
                assert t.extractfile("code.py").read() == b"print(6*7)\n"
        # a container never started is prepared at its first copy (test_81 has more)
        ok(docker(dk, "create", "--name", "cp2", IMG, "true"))
        st, _, body = raw(dk, "GET", "/v1.47/containers/cp2/archive?path=/etc/debian_version")
        assert st == 200, (st, body)
        assert any(r["action"] == "sandbox.container.cp" for r in audit(dk))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        docker(dk, "rm", "-f", "cp1", "cp2")


# A tiny HTTP server (the test image has no http.server module).
SERVER = """
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000))
s.listen()
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 3\\r\\n\\r\\nhi\\n")
    c.close()
"""


def test_published_port(dk):
    """`docker run -d -p 127.0.0.1::8000` (a random host port, read back from inspect and
    `docker port`), HTTP from the host to the server in the container; the port closes
    when the container stops."""
    import urllib.request
    ok(docker(dk, "run", "-d", "--name", "web1", "-p", "127.0.0.1::8000", IMG,
              "python", "-c", SERVER))
    try:
        ins = json.loads(ok(docker(dk, "inspect", "web1")))[0]
        b = ins["NetworkSettings"]["Ports"]["8000/tcp"][0]
        assert b["HostIp"] == "127.0.0.1" and int(b["HostPort"]) > 0, b
        port = int(b["HostPort"])
        assert ok(docker(dk, "port", "web1")).strip().endswith("127.0.0.1:%d" % port)
        ps = ok(docker(dk, "ps", "--format", "{{.Ports}}", "--filter", "name=web1"))
        assert "127.0.0.1:%d->8000/tcp" % port in ps, ps

        def fetch():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=5) as r:
                    return r.read() == b"hi\n"
            except OSError:
                return False
        wait_or_fail(fetch, "the published port to answer", timeout=60)
        ok(docker(dk, "stop", "-t", "1", "web1"))
        s = socket.socket()
        s.settimeout(5)
        assert s.connect_ex(("127.0.0.1", port)) != 0, "port still open after stop"
        s.close()
        p = docker(dk, "run", "--rm", "-p", "127.0.0.1::53/udp", IMG, "true", timeout=60)
        assert p.returncode != 0 and "TCP ports only" in p.stderr, p.stderr
    finally:
        docker(dk, "rm", "-f", "web1")


@needs_py
def test_autogen_sequence(dk):
    """AutoGen's DockerCommandLineCodeExecutor: a tty container with the work folder bound,
    code files written on the host, exec_run(["timeout", N, "python", file])."""
    h, root = dk
    work = os.path.join(root, "autogen")
    os.makedirs(work, exist_ok=True)
    c = dockerpy.DockerClient(base_url="unix://" + sock(dk), version="auto")
    ct = c.containers.create(IMG, entrypoint="/bin/sh", tty=True, auto_remove=True,
                             volumes={work: {"bind": "/workspace", "mode": "rw"}},
                             working_dir="/workspace")
    ct.start()
    try:
        ct.reload()
        assert ct.status == "running"
        with open(os.path.join(work, "tmp_code.py"), "w") as f:
            f.write("print('hello from autogen')\n")
        r = ct.exec_run(["timeout", "60", "python", "tmp_code.py"], workdir="/workspace")
        assert (r.exit_code, r.output) == (0, b"hello from autogen\n"), r
        r = ct.exec_run(["timeout", "1", "sleep", "5"])
        assert r.exit_code == 124
    finally:
        ct.stop(timeout=1)
    # the low-level list: containers.list() inspects each entry and races the removal
    wait_or_fail(lambda: not c.api.containers(all=True, filters={"id": ct.id}), "auto remove")


def test_bad_input_keeps_serving(dk):
    st, hdr, body = raw(dk, "POST", "/containers/create", b"{not json")
    assert st == 400 and json.loads(body)["message"], body
    assert "application/json" in hdr
    st, _, body = raw(dk, "GET", "/containers/nosuch/json")
    assert st == 404 and json.loads(body)["message"] == "No such container: nosuch"
    for hc, field in (({"Privileged": True}, "Privileged"), ({"CapAdd": ["SYS_ADMIN"]}, "CapAdd"),
                      ({"PidMode": "host"}, "PidMode"), ({"NetworkMode": "host"}, "NetworkMode"),
                      ({"SecurityOpt": ["seccomp=unconfined"]}, "SecurityOpt"),
                      ({"UsernsMode": "host"}, "UsernsMode")):
        st, _, body = raw(dk, "POST", "/containers/create",
                          json.dumps({"Image": IMG, "Cmd": ["true"], "HostConfig": hc}).encode())
        assert st == 400 and field in json.loads(body)["message"], (hc, body)
    st, _, body = raw(dk, "POST", "/containers/create",
                      json.dumps({"Image": "nosuch:1", "Cmd": ["true"]}).encode())
    assert st == 404 and "No such image" in json.loads(body)["message"]
    # a hijack client that vanishes mid-stream: the daemon keeps serving
    cid = ok(docker(dk, "run", "-d", IMG, "sh", "-c", "while :; do echo y; sleep 0.1; done")).strip()
    for _ in range(3):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock(dk))
        s.sendall(("POST /containers/%s/attach?stream=1&stdout=1 HTTP/1.1\r\nHost: d\r\n"
                   "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n" % cid).encode())
        assert b"101" in s.recv(4096)
        s.close()
    st, _, body = raw(dk, "GET", "/_ping")
    assert (st, body) == (200, b"OK")
    ok(docker(dk, "rm", "-f", cid))
    assert ok(docker(dk, "run", "--rm", IMG, "echo", "still")) == "still\n"


def test_state_survives_daemon_restart(dk):
    h, _ = dk
    ok(docker(dk, "create", "--name", "keep1", IMG, "echo", "kept"))
    h.stop()
    h.start("--allow-mount", dk[1])
    ins = json.loads(ok(docker(dk, "inspect", "keep1")))[0]
    assert ins["State"]["Status"] == "created"
    assert ok(docker(dk, "start", "-a", "keep1")) == "kept\n"
    ok(docker(dk, "rm", "keep1"))


def test_require_sandbox(dk):
    """config.json require_sandbox (read at each create): the container gets a sandbox of
    its own, dk-<id12>, removed with it."""
    h, _ = dk
    cfgp = os.path.join(h.path, "config.json")
    with open(cfgp) as f:
        cfg = json.load(f)
    with open(cfgp, "w") as f:
        json.dump(dict(cfg, require_sandbox=True), f)
    try:
        t0 = time.time()
        p = docker(dk, "run", "--rm", IMG, "python", "-c", "print(6*7)")
        print("docker run --rm with require_sandbox: %.2f s" % (time.time() - t0))
        assert (p.returncode, p.stdout) == (0, "42\n"), (p.stdout, p.stderr)
    finally:
        with open(cfgp, "w") as f:
            json.dump(cfg, f)
    made = [a["sandbox"] for a in audit(dk) if a["action"] == "sandbox.create"
            and (a.get("sandbox") or "").startswith("dk-")]
    assert made, "no dk- sandbox was created"
    # its VM went before the answer (docs/docker.md): neither list shows it any more
    names = [s["name"] for s in h.json("sandbox", "ls")]
    assert made[-1] not in names, names
    ids = ok(docker(dk, "ps", "-a", "-q", "--no-trunc")).split()
    assert not [i for i in ids if i.startswith(made[-1][3:])], ids
