# SPDX-License-Identifier: Apache-2.0
# test_95_hostile_frames.py - frames root in the guest writes by hand (AF_PACKET, which
# a container's root has: CAP_NET_RAW): spoofed source addresses, a foreign source MAC,
# IP fragments and frames of no IP at all. kosa8-net must drop them, count them, and let
# nothing of them reach a listener, even one the policy allows.
#
# The listener is on the host's 127.0.0.1 (the guest's gateway 10.0.2.2), opened for
# this test only by a live rule on the shared sandbox; a genuine SYN to it is the
# positive control. Traffic goes nowhere else.
#
# The last test is the other way out of a guest: its console. A container's root cannot
# reach it, and what the guest kernel writes there lands in QEMU's bounded ring buffer.
import ast
import json
import os
import shutil
import socket
import struct
import tempfile

import pytest

import netkit
import test_65_netengine as ne
from conftest import wait_or_fail

pytestmark = pytest.mark.hostile

IMAGE = "python:3.12-slim"

# argv: port, then one kind per attempt. Prints one word per attempt: what came back to
# that attempt's source port (synack, rst, other, nothing).
RAW = r'''
import socket, struct, sys, time
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def ip4(src, dst, payload, ident, frag):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, frag, 64, 6, 0,
                    socket.inet_aton(src), socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload
def syn(src, dst, sport, dport):
    seg = struct.pack("!HHIIBBHHH", sport, dport, 1000, 0, 5 << 4, 2, 65535, 0, 0)
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(seg))
    return seg[:16] + struct.pack("!H", csum(ph + seg)) + seg[18:]
GUEST, GW = "10.0.2.15", "10.0.2.2"
ifc = [n for _, n in socket.if_nameindex() if n != "lo"][0]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))    # ETH_P_ALL
s.bind((ifc, 0))
mac = s.getsockname()[4]
gwmac = bytes.fromhex("52550a000202")
port = int(sys.argv[1])
out = []
for i, kind in enumerate(sys.argv[2:]):
    sport, src, smac = 42000 + i, GUEST, mac
    if kind == "spoof-net": src = "10.0.2.9"           # another address of the slirp net
                                                       # (not an engine container's 16-254)
    if kind == "spoof-far": src = "198.51.100.7"       # an address from elsewhere
    if kind == "foreign-mac": smac = bytes.fromhex("020000000001")
    seg = syn(src, GW, sport, port)
    eth = gwmac + smac + b"\x08\x00"
    if kind == "fragments":         # the SYN in two fragments: 8 bytes, then 12
        s.send(eth + ip4(src, GW, seg[:8], 300 + i, 0x2000))
        s.send(eth + ip4(src, GW, seg[8:], 300 + i, 1))
    elif kind == "not-ip":          # an EtherType for local experiments, with the SYN in it
        s.send(gwmac + smac + b"\x88\xb5" + ip4(src, GW, seg, 300 + i, 0x4000))
    else:
        s.send(eth + ip4(src, GW, seg, 300 + i, 0x4000))
    end, got = time.time() + (5 if kind == "genuine" else 2), "nothing"
    while time.time() < end:
        s.settimeout(max(0.01, end - time.time()))
        try:
            f = s.recv(2048)
        except socket.timeout:
            break
        if len(f) < 54 or f[12:14] != b"\x08\x00" or f[23] != 6 or f[6:12] == smac:
            continue
        ihl = (f[14] & 15) * 4
        sp, dp = struct.unpack("!HH", f[14 + ihl:18 + ihl])
        if sp != port or dp != sport:
            continue
        fl = f[14 + ihl + 13]
        got = "rst" if fl & 4 else "synack" if fl & 0x12 == 0x12 else "other"
        break
    out.append(got)
print(" ".join(out))
'''

@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="k8n95-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


HOSTILE = ["spoof-net", "spoof-far", "foreign-mac", "fragments", "not-ip"]
FRAMES = 6              # what HOSTILE puts on the wire: fragments are two frames


def dropped(home, sb):
    info = home.json("sandbox", "egress", sb)
    assert "dropped" in info and "malformed" in info, info
    return info["dropped"] + info["malformed"]


def test_spoofed_fragmented_and_foreign_frames_never_reach_a_listener(home, sandbox):
    with netkit.LoopServer() as srv:
        rule = "127.0.0.1:%d" % srv.port
        home("sandbox", "egress", sandbox, "--allow", rule, check=True)
        try:
            d0 = dropped(home, sandbox)
            p = home("sandbox", "run", sandbox, IMAGE, "python3", "-c", RAW, str(srv.port),
                     *HOSTILE, timeout=300)
            assert p.returncode == 0, p.stdout + p.stderr
            res = p.stdout.strip().splitlines()[-1].split(" ")
            d1 = dropped(home, sandbox)
            # None got an answer from the host side, and the listener saw nothing ...
            assert res == ["nothing"] * len(HOSTILE), dict(zip(HOSTILE, res))
            assert srv.conns == [], "a hostile frame reached the listener: %r" % srv.conns
            # ... because kosa8-net dropped every one of them and counted it.
            assert d1 - d0 >= FRAMES, (d0, d1)
            # The control, after them on the same wire: the same SYN from the guest's own
            # address and MAC passes, and the listener sees exactly that one connection.
            p = home("sandbox", "run", sandbox, IMAGE, "python3", "-c", RAW, str(srv.port),
                     "genuine", timeout=300)
            assert p.returncode == 0, p.stdout + p.stderr
            assert p.stdout.strip().splitlines()[-1] == "synack", p.stdout + p.stderr
            wait_or_fail(lambda: srv.conns, "the listener to see the genuine SYN", timeout=10)
            assert len(srv.conns) == 1, srv.conns
        finally:
            home("sandbox", "egress", sandbox, "--remove", rule, check=True)


def test_kosa8_net_alone_drops_foreign_sources(tmp):
    """The same frames straight into kosa8-net (test_65's harness plays QEMU), IPv6
    included: each is dropped and counted before the policy, which would pass it."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    port = lst.getsockname()[1]
    lst6 = socket.socket(socket.AF_INET6)
    lst6.bind(("::1", port))
    lst6.listen(8)
    n = ne.start(tmp, None, {"mode": "allow-list", "rules": ["127.0.0.1:%d" % port,
                                                             "[::1]:%d" % port]})
    try:
        d0 = n.stats()["dropped"]
        foreign = bytes.fromhex("020000000001")
        hostile = [
            ne.eth(ne.tcp("10.0.2.9", ne.GW, 41001, port, 1, 0, ne.TH_SYN)),
            ne.eth(ne.tcp("192.0.2.7", ne.GW, 41002, port, 1, 0, ne.TH_SYN)),
            ne.eth(ne.tcp(ne.GUEST, ne.GW, 41003, port, 1, 0, ne.TH_SYN), src=foreign),
            ne.eth(ne.tcp6_syn("fd00::99", "fd00::2", 41004, port, 1), etype=0x86DD),
            ne.eth(ne.tcp6_syn(ne.GUEST6, "fd00::2", 41005, port, 1), src=foreign,
                   etype=0x86DD),
        ]
        for f in hostile:
            n.send(f)
        assert n.quiet(lambda f: f.proto == 6 and 41001 <= f.dport <= 41005), "answered"
        assert n.stats()["dropped"] - d0 == len(hostile), n.stats()
        lst.settimeout(0.2)
        lst6.settimeout(0.2)
        for s in (lst, lst6):
            with pytest.raises(socket.timeout):
                s.accept()
        # the control: the guest's own SYN, v4 and v6, passes
        n.send(ne.eth(ne.tcp(ne.GUEST, ne.GW, 41006, port, 1, 0, ne.TH_SYN)))
        f = n.expect(lambda f: f.proto == 6 and f.dport == 41006, what="SYN-ACK")
        assert f.flags & (ne.TH_SYN | ne.TH_ACK) == ne.TH_SYN | ne.TH_ACK, "flags %x" % f.flags
        lst.settimeout(5)
        lst.accept()[0].close()
    finally:
        n.close()
        lst.close()
        lst6.close()


def test_kosa8_net_never_forwards_one_guest_address_to_another(tmp):
    """Engine containers' own addresses (10.0.2.16-254, ipvlan links: the guest's MAC)
    are the guest's: a SYN from one passes the policy like the guest's own. But nothing
    from one guest address reaches another, either way: a container to 10.0.2.15, the
    VM to a container, a container to another: each gets a RST, nothing reaches slirp."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    port = lst.getsockname()[1]
    n = ne.start(tmp, None, {"mode": "allow-list", "rules": ["127.0.0.1:%d" % port]})
    try:
        # as a container's stack does first: ARP for the gateway (kosa8-net answers and
        # teaches slirp the address' MAC, the guest's)
        n.send(ne.eth(struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, ne.GUEST_MAC,
                                  socket.inet_aton("10.0.2.99"), b"\0" * 6,
                                  socket.inet_aton(ne.GW)), dst=b"\xff" * 6, etype=0x0806))
        n.expect(lambda f: f.etype == 0x0806, what="ARP reply for 10.0.2.99")
        n.send(ne.eth(ne.tcp("10.0.2.99", ne.GW, 41101, port, 1, 0, ne.TH_SYN)))
        f = n.expect(lambda f: f.proto == 6 and f.dport == 41101, what="SYN-ACK")
        assert f.flags & (ne.TH_SYN | ne.TH_ACK) == ne.TH_SYN | ne.TH_ACK, "flags %x" % f.flags
        assert f.dst == "10.0.2.99", f.dst
        lst.settimeout(5)
        lst.accept()[0].close()
        for i, (src, dst) in enumerate((("10.0.2.99", ne.GUEST), (ne.GUEST, "10.0.2.99"),
                                        ("10.0.2.99", "10.0.2.16"), ("10.0.2.16", "10.0.2.254"))):
            n.send(ne.eth(ne.tcp(src, dst, 41110 + i, 7002, 1, 0, ne.TH_SYN)))
            f = n.expect(lambda f, i=i: f.proto == 6 and f.dport == 41110 + i,
                         what="RST for %s -> %s" % (src, dst))
            assert f.flags & ne.TH_RST, "flags %x" % f.flags
        assert n.dest("10.0.2.15:7002")["reason"] == "internal address", n.dest("10.0.2.15:7002")
    finally:
        n.close()
        lst.close()


# ---- the console ----------------------------------------------------------------------

# Root in a container tries every way to the guest's console: the nodes by name, and
# nodes it makes itself (CAP_MKNOD) for the serial port, the console and the kernel log,
# on each writable file system. Prints {path: "ok" or errno name}.
CONSOLE = r'''
import errno, os
res = {}
def tryw(p):
    try:
        fd = os.open(p, os.O_WRONLY | os.O_NOCTTY)
        os.write(fd, b"kosa8 console flood\n" * 64)
        os.close(fd)
        res[p] = "ok"
    except OSError as e:
        res[p] = errno.errorcode.get(e.errno, str(e.errno))
for p in ("/dev/console", "/dev/ttyS0", "/dev/kmsg", "/dev/tty0"):
    tryw(p)
for d in ("/tmp", "/dev/shm", "/root"):
    for name, major, minor in (("ttyS0", 4, 64), ("console", 5, 1), ("kmsg", 1, 11)):
        p = os.path.join(d, "k8-" + name)
        try:
            os.mknod(p, 0o600 | 0o020000, os.makedev(major, minor))
        except OSError as e:
            res[p] = "mknod " + errno.errorcode.get(e.errno, str(e.errno))
            continue
        tryw(p)
print(repr(res))
'''


def qemu_cmdline(home, sb):
    with open("%s/sandboxes/%s/sandbox.json" % (home.path, sb)) as f:
        pid = json.load(f)["pid"]
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().decode().split("\0")


def test_console_is_out_of_reach_and_a_bounded_ring(home, sandbox):
    p = home("sandbox", "run", sandbox, IMAGE, "python3", "-c", CONSOLE, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    res = ast.literal_eval(p.stdout.strip().splitlines()[-1])
    # Nothing a container can open writes to the console: the nodes are not in its /dev,
    # and the ones it makes sit on nodev file systems.
    assert "ok" not in res.values(), res
    for path, r in res.items():
        assert r in ("ENOENT", "EACCES", "EPERM", "EROFS") or r.startswith("mknod "), (path, r)
    assert res["/dev/console"] == "ENOENT" and res["/dev/kmsg"] == "ENOENT", res
    # mknod works (CAP_MKNOD, as in Docker), so the nodev mount is what refuses the open.
    assert any(r == "EACCES" for p, r in res.items() if "/k8-" in p), res
    # What does reach the console (the guest kernel, a compromised one included) goes to
    # QEMU's ring buffer of 64 KiB (src/daemon/vm.c), and nowhere else: no serial port,
    # chardev or log of QEMU's writes to a file.
    argv = qemu_cmdline(home, sandbox)
    pairs = list(zip(argv, argv[1:]))
    serials = [v for k, v in pairs if k == "-serial"]
    assert serials == ["chardev:console"], serials
    chardevs = [v for k, v in pairs if k == "-chardev"]
    consoles = [c for c in chardevs if "id=console" in c.split(",")]
    assert len(consoles) == 1 and consoles[0].split(",")[0] == "ringbuf", chardevs
    assert "size=65536" in consoles[0].split(","), consoles
    for c in chardevs:
        assert c.split(",")[0] not in ("file", "pipe", "stdio", "tty", "serial"), c
        assert "logfile=" not in c, c
    assert "-D" not in argv and not any(a.startswith("-debugcon") for a in argv), argv
