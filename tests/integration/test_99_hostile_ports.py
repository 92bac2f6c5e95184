# SPDX-License-Identifier: Apache-2.0
# Published ports under abuse: a flood of host connections, clients that vanish in the
# middle of a transfer, a guest that closes every connection at once, an unpublish in
# the middle of a transfer. kosa8-net and the daemon keep running and serving, nothing
# else opens, and the published port keeps working. All traffic is on 127.0.0.1.
import array
import json
import os
import shutil
import socket
import struct
import tempfile
import time

import pytest

import test_65_netengine as ne
from conftest import daemon_pid, make_sandbox, wait_for, wait_or_fail
from test_84_ports import IMAGE, get, listeners, net_pid, ports_of, start_server, try_get

pytestmark = pytest.mark.hostile


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.fixture(scope="module")
def hsb(home, loaded):
    name = make_sandbox(home, "h99", "--publish", "0:8000")
    start_server(home, name, 8000)
    start_server(home, name, 8001, "close")
    port = home.json("sandbox", "inspect", name)["ports"][0]["host_port"]
    wait_or_fail(lambda: try_get(port), "the guest's server", timeout=120, step=1)
    yield name, port
    home("sandbox", "rm", name)


@pytest.fixture
def unchanged(home, hsb):
    """The host side before the attack; checked after it."""
    name, port = hsb
    before = (daemon_pid(home.path), net_pid(home, name), listeners(net_pid(home, name)))
    yield
    npid = net_pid(home, name)
    assert alive(before[1]) and npid == before[1], "kosa8-net was replaced or died"
    assert daemon_pid(home.path) == before[0] and alive(before[0]), "the daemon died"
    assert listeners(npid) == before[2], "kosa8-net's listeners changed"
    assert wait_for(lambda: try_get(port), timeout=60, step=1) == \
        (200, b"hello from the guest\n"), "the published port stopped serving"
    assert home("sandbox", "inspect", name).returncode == 0


def test_connection_flood_is_capped(home, hsb, unchanged):
    name, port = hsb
    socks = []
    for _ in range(200):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            pass
    try:
        def settled():
            st = ports_of(home, name)[0]
            return st if st["accepted"] + st["refused"] >= 150 else None
        st = wait_or_fail(settled, "kosa8-net to take or refuse the flood", timeout=120, step=2)
        assert st["conns"] <= st["max_conns"] == 64
        assert st["refused"] > 0, "more connections than the cap were let into the guest"
    finally:
        for s in socks:
            s.close()


def test_client_vanishes_mid_transfer(home, hsb, unchanged):
    name, port = hsb
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.sendall(b"GET /big.bin HTTP/1.0\r\n\r\n")
        got = 0
        while got < 65536:
            d = s.recv(65536)
            if not d:
                break
            got += len(d)
        assert got >= 65536, "the transfer did not start"
        # vanish: a RST instead of a FIN, with the guest still sending
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    # the guest's server goes on with the next client
    assert len(get(port, "/big.bin", timeout=300)[1]) == 8 << 20


def test_guest_closes_every_connection(home, hsb, unchanged):
    name, port = hsb
    r = home.json("sandbox", "port", name, "-p", "0:8001")
    try:
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", r["host_port"]), timeout=10) as s:
                s.settimeout(30)
                try:
                    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    assert s.recv(100) == b""
                except (ConnectionResetError, BrokenPipeError):
                    pass
    finally:
        home("sandbox", "port", name, "--rm", str(r["host_port"]), check=True)


def test_unpublish_mid_transfer_cuts_it(home, hsb, unchanged):
    name, _ = hsb
    r = home.json("sandbox", "port", name, "-p", "0:8000")
    s = socket.create_connection(("127.0.0.1", r["host_port"]), timeout=20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"GET /big.bin HTTP/1.0\r\n\r\n")
    assert len(s.recv(4096)) > 0
    home("sandbox", "port", name, "--rm", str(r["host_port"]), check=True)
    # the connection ends (RST or EOF) instead of finishing the 8 MiB
    got, t0 = 0, time.time()
    s.settimeout(30)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += len(d)
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    assert got < 8 << 20, "the transfer went on after the port was unpublished"
    # Not asserted: how soon the host's side sees the end. Under load it has taken 45-75 s
    # (the recv timeout included), so slirp does not always close its socket at once on
    # the cut (docs/network.md, "Published ports", not done).
    print("unpublish mid-transfer: %d bytes after the cut, %.1f s to the end" %
          (got, time.time() - t0))
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", r["host_port"]), timeout=5)


# ---- kosa8-net alone: the daemon's and the guest's side played by hand --------------------

def ctl_fd(n, fd, op, **kw):
    """A control request with a descriptor passed along (SCM_RIGHTS)."""
    rid = n.next_id
    n.next_id += 1
    line = json.dumps(dict(kw, id=rid, op=op)).encode() + b"\n"
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))] if fd >= 0 else []
    n.csock.sendmsg([line], anc)
    with n.cond:
        assert n.cond.wait_for(lambda: rid in n.replies, timeout=5), n.log()
        return n.replies.pop(rid)


@pytest.fixture
def net():
    d = tempfile.mkdtemp(prefix="k8n99-", dir="/tmp")
    os.chmod(d, 0o755)
    n = ne.NetProc(d)           # jailed as nobody when run as root, with its seccomp filter
    yield n
    n.close()
    shutil.rmtree(d, ignore_errors=True)


def test_publish_refuses_what_is_not_a_listener(net):
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(4)
    u1, u2 = socket.socketpair()
    c = socket.create_connection(l.getsockname())
    bad = [(-1, 8000, "needs a listening socket"), (u1.fileno(), 8000, "not"),
           (c.fileno(), 8000, "not a listening"), (l.fileno(), 0, "guest_port"),
           (l.fileno(), 70000, "guest_port")]
    for fd, gp, msg in bad:
        r = ctl_fd(net, fd, "publish", guest_port=gp)
        assert r["ok"] is False and msg in r["error"], r
    r = ctl_fd(net, l.fileno(), "publish", guest_port=8000, max_conns=0)
    assert r["ok"] is False, r
    assert net.ctl("ports")["ports"] == []
    r = ctl_fd(net, l.fileno(), "publish", guest_port=8000)
    assert r["ok"] and r["host_port"] == l.getsockname()[1], r
    r = ctl_fd(net, l.fileno(), "publish", guest_port=8001)
    assert r["ok"] is False and "already" in r["error"], r
    assert net.ctl("unpublish", host_ip="127.0.0.1", host_port=1)["ok"] is False
    assert net.proc.poll() is None
    for x in (l, u1, u2, c):
        x.close()


def test_inbound_flow_only_for_the_published_port(net):
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(4)
    r = ctl_fd(net, l.fileno(), "publish", guest_port=8000)
    assert r["ok"], r
    port = r["host_port"]
    l.close()                   # kosa8-net holds it now
    host = socket.create_connection(("127.0.0.1", port), timeout=5)
    syn = net.expect(lambda f: f.proto == 6 and f.dport == 8000 and f.flags & ne.TH_SYN,
                     timeout=10, what="slirp's SYN to the guest's port 8000")
    assert syn.dst == ne.GUEST and syn.src == ne.GW
    # root in the guest answers from another port: no flow, a RST, nothing reaches slirp
    net.send(ne.eth(ne.tcp(ne.GUEST, ne.GW, 8001, syn.sport, 5000, syn.seq + 1,
                           ne.TH_SYN | ne.TH_ACK)))
    net.expect(lambda f: f.proto == 6 and f.sport == syn.sport and f.dport == 8001 and
               f.flags & ne.TH_RST, what="RST for the unpublished port")
    # the real answer opens the connection
    net.send(ne.eth(ne.tcp(ne.GUEST, ne.GW, 8000, syn.sport, 7000, syn.seq + 1,
                           ne.TH_SYN | ne.TH_ACK)))
    net.expect(lambda f: f.proto == 6 and f.dport == 8000 and f.flags & ne.TH_ACK and
               f.ack == 7001, what="slirp's ACK")
    # a policy change does not cut it; the host's bytes reach the guest
    assert net.ctl("policy", mode="deny", rules=[])["ok"]
    host.sendall(b"ping")
    f = net.expect(lambda f: f.proto == 6 and f.dport == 8000 and f.data == b"ping",
                   what="the host's bytes in the guest")
    net.send(ne.eth(ne.tcp(ne.GUEST, ne.GW, 8000, syn.sport, 7001, f.seq + 4, ne.TH_ACK,
                           b"pong")))
    host.settimeout(5)
    assert host.recv(10) == b"pong"
    st = [p for p in net.stats()["ports"] if p["host_port"] == port][0]
    assert st["accepted"] == 1 and st["conns"] == 1
    assert st["bytes_in"] == 4 and st["bytes_out"] == 4
    assert net.stats()["destinations"] == [], "an inbound flow is not an egress destination"
    # unpublish cuts it: the guest gets a RST, the host sees the end
    assert net.ctl("unpublish", host_ip="127.0.0.1", host_port=port)["ok"]
    net.expect(lambda f: f.proto == 6 and f.dport == 8000 and f.flags & ne.TH_RST,
               what="RST to the guest")
    try:
        assert host.recv(10) == b"", "the host's side stayed open after unpublish"
    except ConnectionResetError:
        pass
    host.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    assert net.proc.poll() is None
