# SPDX-License-Identifier: Apache-2.0
# Published ports (issue 12's -p, as kosa8's own capability) through the real CLI, daemon,
# kosa8-net and VM (TCG): a host listener on loopback forwards into the guest's port, and
# nothing else from the host reaches the guest.
#
# Every connection here goes to the host's 127.0.0.1; no traffic leaves the machine.
import json
import os
import signal
import socket
import subprocess
import urllib.request

import pytest

from conftest import daemon_pid, make_sandbox, own_home, wait_for, wait_or_fail

IMAGE = "python:3.12-slim"
# A small HTTP server in a container of the sandbox (containers share the VM's network
# namespace, so it listens on the guest's 10.0.2.15). The image has python3-minimal, so no
# http.server: sockets and threads. /hello.txt, /big.bin (8 MiB), anything else 404;
# with close=1 it closes every connection at once without reading.
SERVE = r"""
import os, socket, sys, threading
port, close = int(sys.argv[1]), len(sys.argv) > 2
files = {"/hello.txt": b"hello from the guest\n", "/big.bin": os.urandom(1 << 20) * 8}
def serve(c):
    try:
        req = b""
        while b"\r\n\r\n" not in req and len(req) < 65536:
            d = c.recv(4096)
            if not d: return
            req += d
        parts = req.split(b" ")
        body = files.get(parts[1].decode() if len(parts) > 1 else "")
        if body is None:
            c.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        else:
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", port)); s.listen(128)
while True:
    c, _ = s.accept()
    if close: c.close()
    else: threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def start_server(home, name, port, *extra):
    return home("sandbox", "start", name, IMAGE, "python3", "-c", SERVE, str(port), *extra,
                check=True).stdout.strip()


def get(port, path="/hello.txt", timeout=10, host="127.0.0.1"):
    url = "http://%s:%d%s" % ("[%s]" % host if ":" in host else host, port, path)
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def try_get(port, path="/hello.txt", timeout=10):
    try:
        return get(port, path, timeout)
    except OSError:
        return None


def refused(port, host="127.0.0.1"):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return False
    except ConnectionRefusedError:
        return True


def ports_of(home, name):
    return home.json("sandbox", "port", name)["ports"]


def net_pid(home, name):
    with open(os.path.join(home.path, "sandboxes", name, "sandbox.json")) as f:
        return json.load(f)["sidecars"]["net"]["pid"]


def listeners(pid):
    """The TCP sockets a process listens on: (address, port)."""
    out = subprocess.run(["ss", "-tlnpH"], capture_output=True, text=True, check=True).stdout
    res = set()
    for line in out.splitlines():
        if "pid=%d," % pid not in line:
            continue
        local = line.split()[3]
        addr, _, port = local.rpartition(":")
        res.add((addr.strip("[]"), int(port)))
    return res


@pytest.fixture(scope="module")
def web(home, loaded):
    name = make_sandbox(home, "p89", "--publish", "127.0.0.1:0:8000")
    start_server(home, name, 8000)
    port = home.json("sandbox", "inspect", name)["ports"][0]["host_port"]
    wait_or_fail(lambda: try_get(port), "the guest's server through the published port",
                 timeout=120, step=1)
    yield name
    home("sandbox", "rm", name)


def test_published_port_serves_and_is_shown(home, web):
    info = home.json("sandbox", "inspect", web)
    assert len(info["ports"]) == 1
    p = info["ports"][0]
    assert p["host_ip"] == "127.0.0.1" and p["guest_port"] == 8000
    assert 0 < p["host_port"] < 65536, "a random port is read back, never 0"
    assert get(p["host_port"]) == (200, b"hello from the guest\n")
    ls = {s["name"]: s for s in home.json("sandbox", "ls")}
    assert ls[web]["ports"] == info["ports"]
    # kept on disk, so a daemon restart finds it
    with open(os.path.join(home.path, "sandboxes", web, "sandbox.json")) as f:
        assert json.load(f)["ports"] == info["ports"]
    # counted: connections and bytes both ways
    st = ports_of(home, web)[0]
    assert st["state"] == "up" and st["accepted"] >= 1
    assert st["bytes_in"] > 0 and st["bytes_out"] > len(b"hello from the guest\n")
    eg = home.json("sandbox", "egress", web)
    assert eg["ports"][0]["host_port"] == p["host_port"]


def test_only_published_ports_listen(home, web):
    """Nothing else from the host reaches the guest: kosa8-net listens on the published
    socket alone (no other slirp forward, no wildcard address)."""
    port = home.json("sandbox", "inspect", web)["ports"][0]["host_port"]
    assert listeners(net_pid(home, web)) == {("127.0.0.1", port)}
    # the egress policy is untouched by a published port
    eg = home.json("sandbox", "egress", web)
    assert eg["mode"] == "deny" and eg["rules"] == []


def test_published_port_reaches_only_its_guest_port(home, web):
    """A port published to a guest port where nothing listens fails at once; it never
    falls through to the guest's other server (8000)."""
    r = home.json("sandbox", "port", web, "-p", "0:8009")
    try:
        assert r["guest_port"] == 8009
        with socket.create_connection(("127.0.0.1", r["host_port"]), timeout=10) as s:
            s.sendall(b"GET /hello.txt HTTP/1.0\r\n\r\n")
            s.settimeout(20)
            try:
                data = s.recv(100)
            except ConnectionResetError:
                data = b""
        assert data == b"", "the guest's closed port 8009 answered: %r" % data
    finally:
        home("sandbox", "port", web, "--rm", str(r["host_port"]), check=True)


def test_live_publish_and_unpublish(home, web):
    r = home.json("sandbox", "port", web, "-p", "127.0.0.1:0:8000")
    port = r["host_port"]
    assert r["host_ip"] == "127.0.0.1" and port > 0
    assert wait_for(lambda: try_get(port), timeout=30) == (200, b"hello from the guest\n")
    # the same host port cannot be published twice
    p = home("sandbox", "port", web, "-p", "127.0.0.1:%d:8000" % port)
    assert p.returncode != 0 and ("in use" in p.stderr or "already" in p.stderr), p.stderr
    home("sandbox", "port", web, "--rm", "127.0.0.1:%d" % port, check=True)
    assert refused(port), "the host port is still open after unpublish"
    assert port not in [x["host_port"] for x in ports_of(home, web)]
    p = home("sandbox", "port", web, "--rm", str(port))
    assert p.returncode != 0 and "no published port" in p.stderr
    recs = home.json("audit", "ls", "--sandbox", web)
    acts = [(x["action"], x.get("details", {}).get("host_port")) for x in recs]
    assert ("sandbox.port.publish", port) in acts and ("sandbox.port.unpublish", port) in acts


def test_public_address_needs_the_daemons_consent(home, web):
    p = home("sandbox", "port", web, "-p", "0.0.0.0:0:8000")
    assert p.returncode != 0 and "--allow-public-ports" in p.stderr, p.stderr
    p = home("sandbox", "port", web, "-p", "999.1.1.1:0:8000")
    assert p.returncode != 0
    assert len(ports_of(home, web)) == 1


def test_other_sandbox_cannot_reach_the_published_port(home, web):
    """The published port is on the host's loopback, which sandboxes never reach: not
    from an allow-all sandbox through the gateway, nor through a host address."""
    port = home.json("sandbox", "inspect", web)["ports"][0]["host_port"]
    other = make_sandbox(home, "p89b", "--egress", "allow-all")
    try:
        probe = ("import socket\n"
                 "for h in ('10.0.2.2', %r):\n"
                 "    try:\n"
                 "        socket.create_connection((h, %d), timeout=5).close(); print(h, 'open')\n"
                 "    except OSError as e: print(h, 'refused', e)\n") % (
                     host_address(), port)
        p = home("sandbox", "run", other, IMAGE, "python3", "-c", probe, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "open" not in p.stdout, p.stdout
        assert [l.split()[1] for l in p.stdout.splitlines()] == ["refused"] * 2, p.stdout
    finally:
        home("sandbox", "rm", other)
    assert get(port)[0] == 200


def host_address():
    """One of the host's own non-loopback addresses (the policy refuses them)."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        a = line.split()[3].split("/")[0]
        if not a.startswith("127."):
            return a
    return "192.0.2.1"


def test_port_survives_rewind(home, web):
    port = home.json("sandbox", "inspect", web)["ports"][0]["host_port"]
    home("checkpoint", web, "--label", "served", check=True, timeout=300)
    home("rewind", web, "--to", "served", "-y", check=True, timeout=300)
    assert home.json("sandbox", "inspect", web)["ports"][0]["host_port"] == port
    assert wait_for(lambda: try_get(port), timeout=60, step=1) == \
        (200, b"hello from the guest\n"), "the published port does not serve after a rewind"


def test_port_survives_pause_and_resume(home, web):
    port = home.json("sandbox", "inspect", web)["ports"][0]["host_port"]
    home("sandbox", "pause", web, check=True, timeout=300)
    assert home.json("sandbox", "inspect", web)["ports"][0]["host_port"] == port
    home("sandbox", "resume", web, check=True, timeout=300)
    assert wait_for(lambda: try_get(port), timeout=60, step=1) == \
        (200, b"hello from the guest\n"), "the published port does not serve after a resume"


def test_port_published_while_stopped_binds_at_boot(home, loaded):
    """A port given at create is bound before the boot; a fork of a sandbox with ports
    gets none of them (decided: a host port belongs to one sandbox)."""
    name = make_sandbox(home, "p89c", "--publish", "0:8000", "--publish", "[::1]:0:8000")
    try:
        ports = home.json("sandbox", "inspect", name)["ports"]
        assert [p["host_ip"] for p in ports] == ["127.0.0.1", "::1"]
        assert listeners(net_pid(home, name)) == {(p["host_ip"], p["host_port"]) for p in ports}
        home("checkpoint", name, "--label", "c", check=True, timeout=300)
        home("sandbox", "fork", name, "--from", "c", "--name", "p89d", check=True, timeout=300)
        try:
            assert home.json("sandbox", "inspect", "p89d")["ports"] == []
        finally:
            home("sandbox", "rm", "p89d")
    finally:
        home("sandbox", "rm", name)
    for p in ports:
        assert refused(p["host_port"], p["host_ip"]), "a removed sandbox's port is open"


@pytest.fixture(scope="module")
def rhome(python_layout):
    yield from own_home("k8pr-", python_layout, start_args=("--allow-public-ports",))


def test_ports_across_daemon_restarts(rhome):
    """kill -9 of the daemon: kosa8-net keeps serving, and the next daemon knows the port.
    A daemon stop ends the VM and closes the port; the next boot binds the same number."""
    h = rhome
    name = make_sandbox(h, "pr1", "--publish", "0.0.0.0:0:8000")
    start_server(h, name, 8000)
    port = h.json("sandbox", "inspect", name)["ports"][0]["host_port"]
    assert h.json("sandbox", "inspect", name)["ports"][0]["host_ip"] == "0.0.0.0"
    wait_or_fail(lambda: try_get(port), "the guest's server", timeout=120, step=1)
    pid = daemon_pid(h.path)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10)
    assert get(port)[0] == 200, "kosa8-net stopped serving without the daemon"
    h.start("--allow-public-ports")
    st = ports_of(h, name)
    assert [(p["host_port"], p["state"]) for p in st] == [(port, "up")]
    # the new daemon holds no copy of the listener, and still closes it
    h("sandbox", "port", name, "--rm", str(port), check=True)
    assert refused(port)
    r = h.json("sandbox", "port", name, "-p", "127.0.0.1:%d:8000" % port)
    assert r["host_port"] == port
    assert wait_for(lambda: try_get(port), timeout=30) == (200, b"hello from the guest\n")
    h.stop()
    assert refused(port), "a stopped sandbox's port is open"
    h.start("--allow-public-ports")
    h("sandbox", "run", name, IMAGE, "true", check=True, timeout=300)    # boots it
    assert listeners(net_pid(h, name)) == {("127.0.0.1", port)}
