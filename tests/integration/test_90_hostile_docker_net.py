# SPDX-License-Identifier: Apache-2.0
# test_90_hostile_docker_net.py - engine containers each in a network namespace of their
# own (docs/docker.md "Networking", docs/network.md, docs/threat-model.md), from the
# position of root in one container (Docker's default capabilities, CAP_NET_RAW
# included) going for another container's sockets: its loopback, its address (TCP, UDP,
# hand-written frames), the VM's own address, broadcasts. Every attempt fails, the
# victim saw nothing, and what must keep working does: the victim's published port from
# the host (two containers publishing the same container port), DNS from kosa8-net,
# the engine's egress policy (deny), --network none.
import ast
import json
import socket
import time

import pytest

from conftest import wait_or_fail
from dockerkit import IMG, docker_cli, engine_home, needs_cli, ok

pytestmark = [pytest.mark.hostile, needs_cli]

# The victim: TCP on 127.0.0.1:7001 and 0.0.0.0:7002, UDP on 0.0.0.0:7003 logging every
# datagram (who sent what) to /tmp/udp.log.
VICTIM = r'''
import socket, threading
def tcp(addr, port, tag):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(16)
    while True:
        c, _ = s.accept()
        c.sendall(tag)
        c.close()
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("0.0.0.0", 7003))
    while True:
        d, a = u.recvfrom(4096)
        with open("/tmp/udp.log", "a") as f:
            f.write("%r from %r\n" % (d, a))
threading.Thread(target=tcp, args=("127.0.0.1", 7001, b"loop\n"), daemon=True).start()
threading.Thread(target=udp, daemon=True).start()
tcp("0.0.0.0", 7002, b"any\n")
'''

# The attacker: every way in it can think of; prints what each attempt got, a Python
# literal (the test image's python3-minimal has no json module).
ATTACKER = r'''
import socket, struct, sys
victim, vm = sys.argv[1], sys.argv[2]
out = {}
def tcp(host, port):
    s = socket.socket()
    s.settimeout(4)
    try:
        s.connect((host, port))
        return "connected:%r" % s.recv(64)
    except OSError as e:
        return "refused:%s" % type(e).__name__
    finally:
        s.close()
for host, port in (("127.0.0.1", 7001), (victim, 7001), (victim, 7002), (vm, 7002),
                   (vm, 7012)):
    out["tcp %s:%d" % (host, port)] = tcp(host, port)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
for dst in (victim, "255.255.255.255", "10.0.2.255"):
    try:
        u.sendto(b"udp-to-" + dst.encode(), (dst, 7003))
        out["udp " + dst] = "sent"
    except OSError as e:
        out["udp " + dst] = "error:%s" % type(e).__name__
# Hand-written frames on eth0 (CAP_NET_RAW): to the victim's address with our own MAC
# as destination (ipvlan's shortcut between its links) and with the broadcast MAC, from
# our address and from a spoofed one.
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    s += s >> 16
    return ~s & 0xffff
def frame(dmac, smac, src, dst, payload):
    udp = struct.pack("!HHHH", 40000, 7003, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return dmac + smac + b"\x08\x00" + ip + udp
me = socket.gethostbyname(socket.gethostname())
try:
    r = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    r.bind(("eth0", 0))
    mac = r.getsockname()[4]
    for name, dmac, src, dst in (("raw own-mac", mac, me, victim),
                                 ("raw own-mac vm", mac, me, vm),
                                 ("raw bcast", b"\xff" * 6, me, victim),
                                 ("raw bcast spoofed", b"\xff" * 6, "10.0.2.2", victim)):
        r.send(frame(dmac, mac, src, dst, name.encode()))
        out[name] = "sent"
except OSError as e:
    out["raw"] = "error:%s" % type(e).__name__
print(repr(out))
'''


@pytest.fixture(scope="module")
def dk(python_layout):
    for h in engine_home(python_layout, "k8hdn-"):
        yield h


def docker(dk, *args, timeout=300):
    return docker_cli(dk, *args, timeout=timeout)


def inspect(dk, name):
    return json.loads(ok(docker(dk, "inspect", name)))[0]


def links(dk, name):
    """The container's network links, but sit0 (the kernel's fallback IPv6-in-IPv4 tunnel
    of every namespace, down)."""
    devs = [ln.split(":")[0].strip() for ln in
            ok(docker(dk, "exec", name, "cat", "/proc/net/dev")).splitlines() if ":" in ln]
    return sorted(d for d in devs if d != "sit0")


def victim_up(dk, name, *flags):
    """A detached victim, serving; its address from inspect."""
    ok(docker(dk, "run", "-d", "--name", name, *flags, IMG, "python", "-c", VICTIM))
    ins = inspect(dk, name)
    ip = ins["NetworkSettings"]["IPAddress"]
    a = ip.split(".")
    assert a[:3] == ["10", "0", "2"] and 16 <= int(a[3]) <= 254, ip
    assert ins["NetworkSettings"]["Networks"]["bridge"]["IPAddress"] == ip, ins
    assert ins["NetworkSettings"]["Gateway"] == "10.0.2.2", ins["NetworkSettings"]

    def serving():
        p = docker(dk, "exec", name, "python", "-c",
                   "import socket; s = socket.create_connection(('%s', 7002), 3); "
                   "print(s.recv(9).decode(), end='')" % ip, timeout=60)
        return p.returncode == 0 and p.stdout == "any\n"
    wait_or_fail(serving, "the victim to serve on its own address", timeout=90, step=1)
    return ip


def test_a_container_reaches_no_other_container_nor_the_vm(dk):
    """Root in container B (Docker's default capabilities) against container A: A's
    loopback, A's address over TCP, UDP unicast and broadcast, hand-written frames
    (ipvlan's own-MAC shortcut, the broadcast MAC, a spoofed gateway source as unicast),
    and a listener in the VM's own network namespace (10.0.2.15). Nothing connects, A
    logs no datagram from B, A's own view of itself works, and the daemon answers."""
    vip = victim_up(dk, "netv")
    # a listener in the VM's own namespace ("netns":"vm", kosa8 sandbox run)
    vm = dk("sandbox", "run", "-d", "docker-engine", IMG, "python", "-c",
            "import socket\ns = socket.socket()\ns.bind(('0.0.0.0', 7012))\ns.listen(4)\n"
            "while True:\n c, _ = s.accept(); c.sendall(b'vm\\n'); c.close()\n",
            timeout=120)
    assert vm.returncode == 0, (vm.stdout, vm.stderr)
    try:
        t0 = time.time()
        p = docker(dk, "run", "--rm", "--name", "neta", IMG, "python", "-c", ATTACKER, vip,
                   "10.0.2.15", timeout=180)
        took = time.time() - t0
        assert p.returncode == 0, (p.stdout, p.stderr)
        got = ast.literal_eval(p.stdout.strip().splitlines()[-1])
        print("attacker (%.1f s): %s" % (took, json.dumps(got, indent=1)))
        for k, v in got.items():
            if k.startswith("tcp"):
                assert v.startswith("refused:"), (k, v)
        assert "raw" not in got, got        # CAP_NET_RAW is Docker's default: it ran
        # A itself: its loopback and address work, its UDP socket works; B's did not arrive
        ok(docker(dk, "exec", "netv", "python", "-c",
                  "import socket\nu = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                  "u.sendto(b'self', ('%s', 7003))\n"
                  "assert socket.create_connection(('127.0.0.1', 7001), 3).recv(9) == b'loop\\n'"
                  % vip))

        def logged():
            p = docker(dk, "exec", "netv", "cat", "/tmp/udp.log", timeout=60)
            return p.stdout if "self" in p.stdout else None
        log = wait_or_fail(logged, "A's own datagram in its log", timeout=30, step=1)
        assert log.strip().splitlines() == [l for l in log.strip().splitlines() if "self" in l], log
        hosts = ok(docker(dk, "exec", "netv", "cat", "/etc/hosts"))
        assert vip in hosts, hosts
        assert links(dk, "netv") == ["eth0", "lo"]
    finally:
        docker(dk, "rm", "-f", "netv")
        dk("sandbox", "exec", "docker-engine", "true", timeout=30)      # still answers
    assert ok(docker(dk, "version", "--format", "{{.Server.Version}}")).strip()


def test_published_ports_reach_each_container_own_address(dk):
    """Two containers publish the same container port: each host port reaches its own
    container (the forward targets the container's address), and closes when it stops."""
    import urllib.request
    srv = ("import os, socket\n"
           "b = os.environ['WHO'].encode()\n"
           "s = socket.socket()\n"
           "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
           "s.bind(('0.0.0.0', 8000))\n"
           "s.listen()\n"
           "while True:\n"
           "    c, _ = s.accept()\n"
           "    c.recv(4096)\n"
           "    c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n' % len(b) + b)\n"
           "    c.close()\n")
    ports, ips = {}, {}
    try:
        for n in ("netp1", "netp2"):
            ok(docker(dk, "run", "-d", "--name", n, "-e", "WHO=" + n, "-p", "127.0.0.1::8000",
                      IMG, "python", "-c", srv))
            ins = inspect(dk, n)
            ports[n] = int(ins["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"])
            ips[n] = ins["NetworkSettings"]["IPAddress"]
        assert ips["netp1"] != ips["netp2"], ips
        for n, port in ports.items():
            def fetch(port=port):
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=5) as r:
                        return r.read().decode()
                except OSError:
                    return None
            got = wait_or_fail(fetch, "%s's published port" % n, timeout=90, step=1)
            assert got == n, (n, got)
    finally:
        for n in ("netp1", "netp2"):
            docker(dk, "rm", "-f", n)
    for port in ports.values():
        s = socket.socket()
        s.settimeout(5)
        assert s.connect_ex(("127.0.0.1", port)) != 0, "port %d open after rm" % port
        s.close()


def test_dns_and_egress_policy_apply_to_a_container(dk):
    """From a container's own namespace: kosa8-net's resolver answers (10.0.2.3), the
    engine's egress policy (deny by default) refuses a connection out at once (a RST or
    an ICMP refusal, not a timeout), a name outside resolves to nothing."""
    prog = r'''
import os, socket, time
out = {}
q = os.urandom(2) + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + \
    b"\x07example\x03com\x00\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.sendto(q, ("10.0.2.3", 53))
try:
    a = u.recv(512)
    out["dns"] = "answer rcode %d ancount %d" % (a[3] & 15, int.from_bytes(a[6:8], "big"))
except OSError as e:
    out["dns"] = "error:%s" % type(e).__name__
try:
    socket.getaddrinfo("example.com", 80)
    out["resolve"] = "resolved"
except OSError as e:
    out["resolve"] = "error:%s" % type(e).__name__
t = time.time()
s = socket.socket()
s.settimeout(10)
try:
    s.connect(("1.1.1.1", 80))
    out["egress"] = "connected"
except OSError as e:
    out["egress"] = "error:%s" % type(e).__name__
out["egress_s"] = round(time.time() - t, 2)
out["resolv"] = open("/etc/resolv.conf").read()
print(repr(out))
'''
    p = docker(dk, "run", "--rm", IMG, "python", "-c", prog, timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr)
    got = ast.literal_eval(p.stdout.strip().splitlines()[-1])
    print(got)
    assert got["dns"].startswith("answer"), got
    assert got["resolve"].startswith("error"), got
    assert got["egress"].startswith("error") and got["egress_s"] < 8, got
    assert "nameserver 10.0.2.3" in got["resolv"], got


def test_network_none_is_unchanged(dk):
    """--network none: only lo, no address in inspect, the image's resolv.conf."""
    ok(docker(dk, "run", "-d", "--name", "netn", "--network", "none", IMG, "sleep", "300"))
    try:
        ins = inspect(dk, "netn")
        assert ins["NetworkSettings"]["IPAddress"] == "", ins["NetworkSettings"]
        assert ins["NetworkSettings"]["Networks"] == {}, ins["NetworkSettings"]
        assert links(dk, "netn") == ["lo"]
    finally:
        docker(dk, "rm", "-f", "netn")


# A loopback connection its client closed first: TIME_WAIT in the namespace for a minute,
# and the listener still open.
TIME_WAIT = r'''
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", %d))
s.listen(1)
c = socket.create_connection(("127.0.0.1", %d), 3)
a, _ = s.accept()
c.close()
a.close()
'''
# What a container leaves in its namespace; it prints which namespace and stays.
LEAVE = TIME_WAIT % (7021, 7021) + r'''
import os, time
print(os.readlink("/proc/self/ns/net"), flush=True)
time.sleep(600)
'''
# What a container finds, then the same left behind for the next one.
LOOK = r'''
import os
tcp = [l.split()[1:4] for l in open("/proc/net/tcp").read().splitlines()[1:]]
udp = [l.split()[1:4] for l in open("/proc/net/udp").read().splitlines()[1:]]
routes = [l.split()[:3] for l in open("/proc/net/route").read().splitlines()[1:]]
print(repr((os.readlink("/proc/self/ns/net"), tcp, udp, routes)))
''' + TIME_WAIT % (7022, 7022)


def test_each_container_gets_a_namespace_nobody_was_in(dk):
    """The engine makes the next container's network namespace ahead, while the VM idles
    (docs/agent.md), and ends the last one's late: each container still gets one of its
    own. One container leaves a listener and a TIME_WAIT connection in its namespace and
    stays; each of the next three (`run --rm`, one after another, so from spares) finds
    no socket at all (neither the first's nor the last one's TIME_WAIT, which it leaves
    in turn), a namespace other than the first's, and its routes (default via the
    gateway)."""
    ok(docker(dk, "run", "-d", "--name", "nsa", IMG, "python", "-c", LEAVE))
    try:
        wait_or_fail(lambda: "net:[" in ok(docker(dk, "logs", "nsa")),
                     "the first container's namespace", timeout=60, step=0.5)
        first = ok(docker(dk, "logs", "nsa")).strip()
        for _ in range(3):
            ns, tcp, udp, routes = ast.literal_eval(
                ok(docker(dk, "run", "--rm", IMG, "python", "-c", LOOK)).strip())
            assert ns != first, (ns, first)
            assert tcp == [] and udp == [], (tcp, udp)
            assert ["eth0", "00000000", "0202000A"] in routes, routes
    finally:
        docker(dk, "rm", "-f", "nsa")
