# SPDX-License-Identifier: Apache-2.0
# Published ports under abuse: a flood of host connections, clients that vanish in the
# middle of a transfer, a guest that closes every connection at once, an unpublish in
# the middle of a transfer. kosa8-net and the daemon keep running and serving, nothing
# else opens, and the published port keeps working. All traffic is on 127.0.0.1.
import os
import socket
import struct
import time

import pytest

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
    assert time.time() - t0 < 60
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", r["host_port"]), timeout=5)
