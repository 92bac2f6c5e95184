# SPDX-License-Identifier: Apache-2.0
# test_90_hostile_docker.py - the Docker-compatible API from an attacker's position
# (docs/docker.md, docs/threat-model.md): a client of docker.sock asking for binds
# outside --allow-mount (directly, through `..`, through a symlink a container planted),
# for HostConfig that would lift the isolation, sending a 100 MB body, names with path
# bytes, an Env too large for the guest protocol and garbage on hijacked streams; and
# root in a Tty container looking for another container's terminal. Each attack is
# refused (or has no effect), the daemon keeps answering, and nothing on the host
# outside the allowed root changed.
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time

import pytest

from conftest import recv_all
from dockerkit import IMG, docker_cli, docker_sock, engine_home, needs_cli

pytestmark = [pytest.mark.hostile, needs_cli]


@pytest.fixture(scope="module")
def dk(python_layout):
    """(Home, the allowed root, a directory outside it holding a secret file)."""
    root = tempfile.mkdtemp(prefix="k8hdroot-", dir="/tmp")
    outside = tempfile.mkdtemp(prefix="k8hdout-", dir="/tmp")
    with open(os.path.join(outside, "secret"), "w") as f:
        f.write("host secret\n")
    os.mkdir(os.path.join(root, "work"))
    for h in engine_home(python_layout, "k8hd-", "--allow-mount", root):
        yield h, root, outside
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)


def sock(dk):
    return docker_sock(dk[0])


def docker(dk, *args, input=None, timeout=300):
    return docker_cli(dk[0], *args, input=input, timeout=timeout)


def raw(dk, method, path, body=b"", headers=(), timeout=120):
    """One HTTP/1.1 request on docker.sock: (status, body). The body is sent while the
    answer is read, so a server that answers early does not deadlock a big upload."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock(dk))
    head = "%s %s HTTP/1.1\r\nHost: docker\r\nContent-Length: %d\r\nConnection: close\r\n" % (
        method, path, len(body))
    for k, v in headers:
        head += "%s: %s\r\n" % (k, v)
    try:
        s.sendall(head.encode() + b"\r\n" + body)
    except (BrokenPipeError, ConnectionResetError):
        pass                    # it answered and closed before taking it all
    data = b""
    while True:
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            break
        if not d:
            break
        data += d
    s.close()
    hdr, _, rest = data.partition(b"\r\n\r\n")
    return int(hdr.split(b" ")[1]), rest


def alive(dk):
    st, body = raw(dk, "GET", "/_ping")
    assert (st, body) == (200, b"OK"), (st, body)


def msg(body):
    return json.loads(body)["message"]


def create(dk, cfg, name=None):
    q = "?name=" + name if name is not None else ""
    return raw(dk, "POST", "/containers/create" + q, json.dumps(cfg).encode())


def tree(path):
    """Every path, mode, size and content hash under path (what "unchanged" means)."""
    out = {}
    for d, dirs, files in os.walk(path):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            h = ""
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, path)] = (st.st_mode, st.st_size, h,
                                             os.readlink(p) if os.path.islink(p) else "")
    return out


def n_containers(dk):
    st, body = raw(dk, "GET", "/containers/json?all=1")
    assert st == 200
    return len(json.loads(body))


def test_binds_outside_the_allowed_root(dk):
    h, root, outside = dk
    before = tree(outside)
    n0 = n_containers(dk)
    for bind in (outside + ":/x",                               # plainly outside
                 root + "/../" + os.path.basename(outside) + ":/x",   # climbing with ..
                 root + "/work/../../" + os.path.basename(outside) + ":/x",
                 "/:/host", "/etc:/x:ro", h.path + ":/k8home"):  # the daemon's own home
        st, body = create(dk, {"Image": IMG, "Cmd": ["true"], "HostConfig": {"Binds": [bind]}})
        assert st == 400 and root in msg(body), (bind, st, body)
    for m in ({"Type": "bind", "Source": outside, "Target": "/x"},
              {"Type": "volume", "Source": "v1", "Target": "/x"},
              {"Type": "tmpfs", "Target": "/x"}):
        st, body = create(dk, {"Image": IMG, "Cmd": ["true"], "HostConfig": {"Mounts": [m]}})
        assert st == 400, (m, st, body)
    # root in a container plants a symlink in its bind that points out of the root ...
    p = docker(dk, "run", "--rm", "-v", root + "/work:/w", IMG, "sh", "-c",
               "ln -s %s /w/evil && ln -s / /w/slash && ln -s .. /w/up && echo planted"
               % outside)
    assert p.stdout == "planted\n", (p.stdout, p.stderr)
    assert os.path.islink(os.path.join(root, "work", "evil"))
    # ... and a later bind through it is refused: realpath leaves the root
    for src in ("/work/evil", "/work/slash", "/work/up/../" + os.path.basename(outside)):
        st, body = create(dk, {"Image": IMG, "Cmd": ["true"],
                               "HostConfig": {"Binds": [root + src + ":/x"]}})
        assert st == 400 and root in msg(body), (src, st, body)
    # following the planted links inside a bind reaches the container's own /, never the
    # host's: the secret is not there and nothing is written outside
    p = docker(dk, "run", "--rm", "-v", root + "/work:/w", IMG, "sh", "-c",
               "cat /w/evil/secret 2>&1; echo x > /w/slash/tmp/planted; ls /w/up")
    assert "host secret" not in p.stdout, p.stdout
    assert not os.path.exists("/tmp/planted")
    assert n_containers(dk) == n0
    assert tree(outside) == before
    alive(dk)


ISOLATION = [
    ({"Privileged": True}, "Privileged"),
    ({"CapAdd": ["ALL"]}, "CapAdd"),
    ({"CapAdd": ["SYS_ADMIN"]}, "CapAdd"),
    ({"NetworkMode": "host"}, "NetworkMode"),
    ({"NetworkMode": "container:abc"}, "NetworkMode"),
    ({"PidMode": "host"}, "PidMode"),
    ({"IpcMode": "host"}, "IpcMode"),
    ({"UTSMode": "host"}, "UTSMode"),
    ({"UsernsMode": "host"}, "UsernsMode"),
    ({"CgroupnsMode": "host"}, "CgroupnsMode"),
    ({"Devices": [{"PathOnHost": "/dev/kvm", "PathInContainer": "/dev/kvm",
                   "CgroupPermissions": "rwm"}]}, "Devices"),
    ({"DeviceRequests": [{"Count": -1, "Capabilities": [["gpu"]]}]}, "Devices"),
    ({"DeviceCgroupRules": ["c 1:* rwm"]}, "DeviceCgroupRules"),
    ({"SecurityOpt": ["seccomp=unconfined"]}, "SecurityOpt"),
    ({"SecurityOpt": ["apparmor=unconfined"]}, "SecurityOpt"),
    ({"SecurityOpt": ["systempaths=unconfined"]}, "SecurityOpt"),
    ({"MaskedPaths": []}, "MaskedPaths"),
    ({"ReadonlyPaths": []}, "ReadonlyPaths"),
    ({"CapDrop": ["CAP_NOPE"]}, "unknown capability"),
    ({"CapDrop": "ALL"}, "CapDrop"),
    ({"ReadonlyRootfs": True}, "ReadonlyRootfs"),
    ({"Memory": 1024}, "Minimum memory"),
    ({"Memory": -5}, "Memory"),
    ({"NanoCpus": "lots"}, "NanoCpus"),
]


@pytest.mark.parametrize("hc,field", ISOLATION, ids=[f for _, f in ISOLATION])
def test_isolation_lifting_host_config_is_refused(dk, hc, field):
    n0 = n_containers(dk)
    st, body = create(dk, {"Image": IMG, "Cmd": ["true"], "HostConfig": hc})
    assert st == 400 and field in msg(body), (hc, st, body)
    assert n_containers(dk) == n0
    alive(dk)


def test_privileged_exec_and_docker_cli_flags(dk):
    for flags in (["--privileged"], ["--cap-add", "ALL"], ["--pid", "host"],
                  ["--network", "host"], ["--security-opt", "seccomp=unconfined"],
                  ["--device", "/dev/kvm"], ["--read-only"]):
        p = docker(dk, "run", "--rm", *flags, IMG, "true")
        assert p.returncode != 0 and "not supported by kosa8" in p.stderr, (flags, p.stderr)
    cid = docker(dk, "run", "-d", IMG, "sleep", "300").stdout.strip()
    try:
        st, body = raw(dk, "POST", "/containers/%s/exec" % cid,
                       json.dumps({"Cmd": ["id"], "Privileged": True}).encode())
        assert st == 400 and "Privileged" in msg(body), (st, body)
        # what root in the container has: Docker's default set, no CAP_SYS_ADMIN
        p = docker(dk, "exec", cid, "sh", "-c", "grep CapEff /proc/self/status")
        assert p.stdout.split()[1] == "00000000a80425fb", p.stdout
    finally:
        docker(dk, "rm", "-f", cid)
    # CapDrop is applied (not ignored): to the init and to every exec
    p = docker(dk, "run", "--rm", "--cap-drop", "ALL", IMG, "grep", "-e", "CapPrm", "-e",
               "CapEff", "-e", "CapBnd",
               "/proc/self/status")
    assert [l.split()[1] for l in p.stdout.splitlines()] == ["0" * 16] * 3, (p.stdout, p.stderr)
    cid = docker(dk, "run", "-d", "--cap-drop", "net_raw", "--cap-drop", "CAP_CHOWN", IMG,
                 "sleep", "300").stdout.strip()
    try:
        p = docker(dk, "exec", cid, "sh", "-c", "grep CapEff /proc/self/status; "
                   "chown 1 /tmp 2>&1 || echo refused")
        assert p.stdout.split()[1] == "%016x" % (0xa80425fb & ~(1 << 13) & ~1), p.stdout
        assert "refused" in p.stdout, p.stdout
    finally:
        docker(dk, "rm", "-f", cid)
    alive(dk)


def test_huge_bodies_names_and_env(dk):
    h, root, outside = dk
    n0 = n_containers(dk)
    # a 100 MB JSON body: refused at the 1 MiB cap, the daemon stays small and answers
    big = b'{"Image":"' + IMG.encode() + b'","Env":["A=' + b"x" * (100 << 20) + b'"]}'
    t0 = time.time()
    st, body = raw(dk, "POST", "/containers/create", big, timeout=300)
    assert st in (400, 413) and "larger than" in msg(body), (st, body[:200])
    print("100 MB body refused in %.1f s" % (time.time() - t0))
    alive(dk)
    # names with path bytes: refused by moby's rule, nothing made outside the store
    for name in ("..", "../../etc", "a/b", "a%2Fb", "%2E%2E", "x%00y", "/../x", "a\\b",
                 "n" * 200, "%0Ad"):
        st, body = create(dk, {"Image": IMG, "Cmd": ["true"]}, name=name)
        assert st == 400, (name, st, body)
    for path in ("/containers/..%2F..%2Fetc/json", "/containers/%2E%2E/json",
                 "/containers/..%2Fstate.json/json"):
        st, body = raw(dk, "GET", path)
        assert st in (400, 404), (path, st, body)
    # an Env that fits the HTTP cap but not a guest request: refused at create, clearly
    env = ["V%d=%s" % (i, "y" * 1000) for i in range(200)]
    st, body = create(dk, {"Image": IMG, "Cmd": ["true"], "Env": env})
    assert st == 400 and "KiB" in msg(body), (st, body)
    st, body = create(dk, {"Image": IMG, "Cmd": ["true"], "Env": ["X" * 70000 + "=1"]})
    assert st == 400, (st, body)
    # 2000 small entries that fit: they arrive intact
    env = ["E%d=%d" % (i, i) for i in range(2000)]
    st, body = create(dk, {"Image": IMG, "Cmd": ["sh", "-c", "env | grep -c '^E'"], "Env": env})
    assert st == 201, body
    cid = json.loads(body)["Id"]
    assert raw(dk, "POST", "/containers/%s/start" % cid)[0] == 204
    assert docker(dk, "wait", cid).stdout == "0\n"
    assert docker(dk, "logs", cid).stdout == "2000\n"
    docker(dk, "rm", "-f", cid)
    assert n_containers(dk) == n0
    # the store holds only 64-hex directories: no name became a path
    for n in os.listdir(os.path.join(h.path, "docker", "containers")):
        assert len(n) == 64 and all(c in "0123456789abcdef" for c in n), n
    alive(dk)


def hijack(dk, path, body=b""):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(sock(dk))
    s.sendall(("POST %s HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
               % (path, len(body))).encode() + body)
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(1)
        if not d:
            break
        head += d
    return s, head


def test_garbage_on_hijacked_streams(dk):
    # attach stdin is raw bytes: frame-like headers with absurd lengths, NULs, a
    # pipelined HTTP request, 1 MiB of noise: the container gets exactly these bytes
    prog = ("import sys, hashlib; d = sys.stdin.buffer.read(); "
            "print(len(d), hashlib.sha256(d).hexdigest())")
    st, body = create(dk, {"Image": IMG, "Cmd": ["python", "-c", prog], "OpenStdin": True,
                           "StdinOnce": True, "AttachStdin": True})
    cid = json.loads(body)["Id"]
    s, head = hijack(dk, "/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1" % cid)
    assert b" 101 " in head, head
    assert raw(dk, "POST", "/containers/%s/start" % cid)[0] == 204
    junk = (b"\x01\x00\x00\x00\xff\xff\xff\xff" + b"\x02\x00\x00\x00\x00\x00\x00\x00" +
            b"\x00" * 100 + b"GET /_ping HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(1 << 20))
    s.sendall(junk)
    s.shutdown(socket.SHUT_WR)
    out = recv_all(s)
    s.close()
    want = ("%d %s\n" % (len(junk), hashlib.sha256(junk).hexdigest())).encode()
    assert out[8:] == want and out[:8] == b"\x01\x00\x00\x00\x00\x00\x00" + bytes([len(want)]), out
    docker(dk, "rm", "-f", cid)
    # clients that upgrade and vanish, send garbage instead of HTTP, or hijack what
    # does not exist
    cid = docker(dk, "run", "-d", "-i", IMG, "sh", "-c", "cat >/dev/null; sleep 300").stdout.strip()
    for _ in range(10):
        s, head = hijack(dk, "/containers/%s/attach?stream=1&stdin=1&stdout=1" % cid)
        s.sendall(os.urandom(4096))
        s.close()
    x = json.loads(raw(dk, "POST", "/containers/%s/exec" % cid,
                       json.dumps({"Cmd": ["cat"], "AttachStdin": True,
                                   "AttachStdout": True}).encode())[1])["Id"]
    s, head = hijack(dk, "/exec/%s/start" % x, b'{"Detach":false,"Tty":false}')
    assert b" 101 " in head, head
    s.sendall(os.urandom(1 << 16))
    s.close()                   # gone mid-stream: the exec is killed, nothing waits
    s, head = hijack(dk, "/exec/%s/start" % ("0" * 64), b"{}")
    assert b" 404 " in head, head
    s.close()
    for junk in (b"\x16\x03\x01\x02\x00" + os.urandom(512), b"POST /" + b"a" * 100000 +
                 b" HTTP/1.1\r\n\r\n", b"POST /containers/create HTTP/1.1\r\nContent-Length: "
                 b"-1\r\n\r\n", b"GET /_ping HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"fffffffffffffff\r\n"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(sock(dk))
        try:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
    alive(dk)
    assert docker(dk, "exec", cid, "echo", "still").stdout == "still\n"
    docker(dk, "rm", "-f", cid)
    assert docker(dk, "run", "--rm", IMG, "echo", "fine").stdout == "fine\n"


def test_tty_of_another_container_is_out_of_reach(dk):
    # A's terminal holds a secret it typed; B, root in its own container, sees only its
    # own devpts instance: no /dev/pts/N of A, and its own ptys start from 0 again
    a = docker(dk, "run", "-d", "-t", IMG, "sh", "-c", "echo tty-secret; sleep 300").stdout.strip()
    try:
        p = docker(dk, "run", "--rm", "-t", IMG, "sh", "-c",
                   "ls /dev/pts; tty; cat /dev/pts/1 2>&1 | head -c 200; "
                   "python -c \"import os; fds=[os.open('/dev/ptmx', os.O_RDWR) for _ in range(8)];"
                   " print(sorted(os.listdir('/dev/pts')))\"")
        assert "tty-secret" not in p.stdout, p.stdout
        lines = p.stdout.replace("\r", "").split("\n")
        assert lines[0].split() == ["0", "ptmx"], p.stdout
        assert lines[1] == "/dev/pts/0", p.stdout
        assert "['0', '1', '2', '3', '4', '5', '6', '7', '8', 'ptmx']" in p.stdout, p.stdout
        # A's own terminal is untouched: its output is still what it wrote
        assert "tty-secret" in docker(dk, "logs", a).stdout
        # resizing a container without a tty, or someone else's exec, does nothing harmful
        assert raw(dk, "POST", "/containers/%s/resize?h=-1&w=5" % a)[0] == 400
        assert raw(dk, "POST", "/containers/%s/resize?h=70000&w=5" % a)[0] == 400
        assert raw(dk, "POST", "/exec/%s/resize?h=1&w=1" % ("f" * 64))[0] == 404
    finally:
        docker(dk, "rm", "-f", a)
    alive(dk)
