# SPDX-License-Identifier: Apache-2.0
# test_88_dockerode.py - the Docker-compatible API (docs/docker.md) with dockerode 5.0.1,
# the npm client most Node tools are built on (testcontainers-node, TypeScript agent
# frameworks), unmodified (tests/integration/dockerode_client.js), against a daemon of this
# module's own; and the answers every hijacked endpoint gives, byte for byte.
import concurrent.futures
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import TOP, recv_all
from dockerkit import IMG, docker_sock, engine_home, raw_http
from test_88_docker_api import reg  # noqa: F401 - the local registry fixture

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dockerode_client.js")

pytestmark = pytest.mark.skipif(not shutil.which("node"),
                                reason="node is needed (scripts/deps.sh: nodejs)")


@pytest.fixture(scope="module")
def node_modules():
    """The pinned dockerode set (scripts/npm-pins), installed once per machine."""
    import sys
    sys.path.insert(0, os.path.join(TOP, "scripts"))
    import k8cache
    return os.path.join(k8cache.npm("dockerode"), "node_modules")


@pytest.fixture(scope="module")
def h(python_layout):
    for hh in engine_home(python_layout, "k8dn-"):
        yield hh


def node(h, node_modules, scenario, timeout_s=180, **args):
    """One scenario of dockerode_client.js: its JSON answer, asserted to have succeeded."""
    args.setdefault("timeout_ms", (timeout_s - 10) * 1000)
    p = subprocess.run(["node", CLIENT, docker_sock(h), scenario, json.dumps(args)],
                       capture_output=True, text=True, timeout=timeout_s,
                       env=dict(os.environ, NODE_PATH=node_modules))
    lines = p.stdout.strip().splitlines()
    assert lines, (scenario, p.returncode, p.stderr[-2000:])
    out = json.loads(lines[-1])
    assert p.returncode == 0 and "failed" not in out, (scenario, out, p.stderr[-2000:])
    return out


def test_run(h, node_modules):
    """docker.run = create, attach (no Upgrade header), start, wait: the attach must get a
    200 at once (an unasked-for 101 leaves Node waiting for the real answer forever)."""
    r = node(h, node_modules, "run", cmd=["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r["status"], r["error"], r["stdout"], r["stderr"]) == (3, None, "out\n", "err\n"), r
    # and with run's own defaults (Tty: true): one raw stream
    r = node(h, node_modules, "run_tty", cmd=["python3", "-c", "print(6*7)"])
    assert (r["status"], r["output"]) == (0, "42\r\n"), r


def test_attach_before_and_after_start(h, node_modules):
    cmd = ["sh", "-c", "sleep 1; echo one; echo two >&2"]
    for hijack in (False, True):
        r = node(h, node_modules, "attach", cmd=cmd, hijack=hijack)
        assert (r["status"], r["stdout"], r["stderr"]) == (0, "one\n", "two\n"), (hijack, r)
    r = node(h, node_modules, "attach_after_start",
             cmd=["sh", "-c", "sleep 2; echo late"])
    assert (r["status"], r["stdout"]) == (0, "late\n"), r
    # stdin through a hijacked attach, ended by the client's half-close
    r = node(h, node_modules, "attach_stdin", cmd=["sh", "-c", "cat | tr a-z A-Z"],
             input="hello dockerode\n")
    assert (r["status"], r["stdout"]) == (0, "HELLO DOCKERODE\n"), r


def _head(data):
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode(errors="replace").split("\r\n"), rest


def _ask(h, path, body, upgrade):
    """A hijacked endpoint asked over a raw socket, with or without `Upgrade: tcp`:
    (status line, header lines, the bytes after the head until the server closes)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(docker_sock(h))
    req = "POST %s HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n" \
          "Content-Length: %d\r\n" % (path, len(body))
    if upgrade:
        req += "Connection: Upgrade\r\nUpgrade: tcp\r\n"
    s.sendall(req.encode() + b"\r\n" + body)
    if upgrade:
        s.shutdown(socket.SHUT_WR)     # no stdin: the CLI half-closes at once
    lines, rest = _head(recv_all(s))
    s.close()
    return lines[0], lines[1:], rest


def test_hijacked_answers_like_moby(h):
    """attach and exec start: 101 with one `Connection: Upgrade` only when the request
    asked to upgrade; 200 with the raw stream (no chunks) otherwise (moby's
    postContainersAttach and postContainerExecStart)."""
    def create(cmd):
        st, _, body = raw_http(h, "POST", "/containers/create",
                               json.dumps({"Image": IMG, "Cmd": cmd}).encode(),
                               headers=(("Content-Type", "application/json"),))
        assert st == 201, body
        return json.loads(body)["Id"]

    frame = b"\x01\x00\x00\x00\x00\x00\x00\x03hi\n"
    for upgrade in (True, False):
        cid = create(["sleep", "600"])
        st, _, body = raw_http(h, "POST", "/containers/%s/start" % cid)
        assert st == 204, body
        st, _, body = raw_http(h, "POST", "/containers/%s/exec" % cid,
                               json.dumps({"Cmd": ["echo", "hi"], "AttachStdout": True}).encode(),
                               headers=(("Content-Type", "application/json"),))
        assert st == 201, body
        xid = json.loads(body)["Id"]
        status, headers, rest = _ask(h, "/exec/%s/start" % xid, b'{"Detach":false,"Tty":false}',
                                     upgrade)
        conn = [l for l in headers if l.lower().startswith("connection:")]
        te = [l for l in headers if l.lower().startswith(("transfer-encoding:",
                                                          "content-length:"))]
        if upgrade:
            assert status == "HTTP/1.1 101 Switching Protocols", (status, headers)
            assert conn == ["Connection: Upgrade"], headers
            assert "Upgrade: tcp" in headers, headers
        else:
            assert status == "HTTP/1.1 200 OK", (status, headers)
            assert not any("upgrade" in l.lower() for l in headers), headers
            assert te == [], headers        # the raw stream, as moby writes it
        assert "Content-Type: application/vnd.docker.multiplexed-stream" in headers, headers
        assert rest == frame, rest
        # attach to it while it runs, and kill it: the head, then the close
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            att = pool.submit(_ask, h, "/containers/%s/attach?stream=1&stdout=1" % cid, b"",
                              upgrade)
            time.sleep(1)
            st, _, body = raw_http(h, "POST", "/containers/%s/kill" % cid)
            assert st == 204, body
            status, headers, rest = att.result(timeout=120)
        assert status == ("HTTP/1.1 101 Switching Protocols" if upgrade else "HTTP/1.1 200 OK")
        assert len([l for l in headers if l.lower().startswith("connection:")]) == 1, headers
        assert rest == b"", rest
        st, _, body = raw_http(h, "DELETE", "/containers/%s?force=1" % cid)
        assert st == 204, body


def test_stats_and_top(h, node_modules):
    """stats (one object, one-shot, the stream) and top as dockerode reads them."""
    r = node(h, node_modules, "stats")
    one, shot, (s1, s2) = r["one"], r["shot"], r["samples"]
    for s in (one, shot, s1, s2):
        for k in ("read", "cpu_stats", "precpu_stats", "memory_stats", "pids_stats",
                  "networks", "name", "id"):
            assert k in s, (k, s)
        assert s["cpu_stats"]["cpu_usage"]["total_usage"] > 0, s
        assert s["memory_stats"]["usage"] > 20 << 20, s      # the 24 MiB it holds
    # stream=false: the second of two samples a second apart; one-shot: the first alone
    assert one["precpu_stats"]["system_cpu_usage"] > 0, one
    assert one["preread"] != "0001-01-01T00:00:00Z", one
    assert shot["precpu_stats"]["system_cpu_usage"] == 0, shot
    assert s1["precpu_stats"]["system_cpu_usage"] == 0, s1
    assert s2["precpu_stats"] == s1["cpu_stats"], (s1, s2)
    r = node(h, node_modules, "top")
    assert r["def"]["Titles"] == ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"], r
    cmds = sorted(p[-1] for p in r["def"]["Processes"])
    assert cmds == ["sleep 600", "sleep 601"], r
    assert r["aux"]["Titles"][:3] == ["USER", "PID", "%CPU"], r
    assert len(r["aux"]["Processes"]) == 2, r
    assert r["bad"]["status"] == 400 and "not supported by kosa8" in r["bad"]["message"], r


def test_lifecycle_and_list(h, node_modules):
    """createContainer + start + wait + logs + inspect; listContainers with filters."""
    r = node(h, node_modules, "lifecycle", cmd=["sh", "-c", "echo a; echo b >&2; exit 4"],
             labels={"k8t": "dockerode"}, keep=True)
    assert (r["status"], r["state"], r["exit"]) == (4, "exited", 4), r
    # logs is the multiplexed stream (no Tty): frame headers, then the bytes
    assert r["logs"] == "\x01\x00\x00\x00\x00\x00\x00\x02a\n\x02\x00\x00\x00\x00\x00\x00\x02b\n", r
    kept = r["id"]
    lst = node(h, node_modules, "list", filters={"label": ["k8t=dockerode"]})
    assert len(lst["names"]) == 1 and lst["states"] == ["exited"], lst
    lst = node(h, node_modules, "list", filters={"label": ["k8t=dockerode"],
                                                  "status": ["running"]})
    assert lst["names"] == [], lst
    lst = node(h, node_modules, "list", filters={"id": [kept[:12]]})
    assert len(lst["names"]) == 1, lst
    st, _, body = raw_http(h, "DELETE", "/containers/" + kept)
    assert st == 204, body


def test_exec_with_and_without_stdin(h, node_modules):
    r = node(h, node_modules, "exec", cmd=["sh", "-c", "echo o; echo e >&2; exit 6"],
             input="from dockerode\n")
    assert (r["stdout"], r["stderr"], r["code"]) == ("o\n", "e\n", 6), r
    assert (r["stdin_out"], r["stdin_err"], r["stdin_code"]) == ("from dockerode\n",
                                                                 "done\n", 0), r


def test_archive(h, node_modules):
    r = node(h, node_modules, "archive", files={"hello.txt": "hi from node\n"},
             path="/tmp", get="/tmp/hello.txt")
    assert r["files"] == {"hello.txt": "hi from node\n"}, r
    assert r["cat"] == "hi from node\n", r


def test_build_from_a_tar(h, node_modules):
    """buildImage with a tar context (the classic builder), its progress followed, then
    the image run."""
    df = ("FROM %s\nCOPY app.py /app/app.py\nRUN python3 -c \"open('/app/built','w')"
          ".write('yes')\"\nCMD [\"python3\", \"/app/app.py\"]\n" % IMG)
    r = node(h, node_modules, "build", timeout_s=600, tag="k8t-dockerode:1",
             files={"Dockerfile": df, "app.py": "print(open('/app/built').read())\n"},
             cmd=None)
    assert r["id"].startswith("sha256:"), r
    assert any("Successfully built" in (e.get("stream") or "") for e in r["events"]), r
    assert (r["status"], r["stdout"]) == (0, "yes\n"), r


def test_pull_progress(h, node_modules, reg):
    r = node(h, node_modules, "pull", timeout_s=600, ref=reg.image)
    statuses = [e.get("status", "") for e in r["events"]]
    # moby's familiar name keeps a registry host: "Pulling from 127.0.0.1:N/library/python"
    assert statuses[0] == "Pulling from %s/library/python" % reg.host, statuses
    blobs = [e for e in r["events"] if e.get("id") and e.get("status") != statuses[0]]
    assert blobs and all(e["status"] in ("Downloading", "Download complete") for e in blobs), r
    assert any(e["status"] == "Download complete" for e in blobs), r
    assert any(s.startswith("Digest: sha256:") for s in statuses), statuses
    assert statuses[-1].startswith("Status: Downloaded newer image for"), statuses
    assert r["id"].startswith("sha256:"), r
