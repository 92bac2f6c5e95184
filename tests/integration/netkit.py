# SPDX-License-Identifier: Apache-2.0
# netkit.py - a small private network for the egress tests, and the servers they talk to.
#
# Tests send traffic only to 127.0.0.0/8 or into a network namespace they create here:
#
#   host  k8h<pid> 198.51.100.1/24  <-- veth -->  k8n<pid> in netns k8e<pid>:
#                                                 198.51.100.2/24, 198.51.100.3/24,
#                                                 203.0.113.2/24, 10.1.2.3/32
#   host routes: 203.0.113.0/24 and 10.1.2.3/32 via 198.51.100.2
#
# In the namespace one python process serves HTTP on 8080 and 8443 (the body names the
# address and port it was reached on), TCP echo on 9000 and UDP echo on 9000, and logs
# every connection and datagram. In the host namespace, on 127.0.0.1: a DNS server (UDP
# and TCP) that records every name it is asked, and a TCP server that records who
# connects (the "host loopback" the sandbox must not reach unless 127.0.0.1 is listed).
import os
import random
import socket
import struct
import subprocess
import threading
import time

IP_HOST = "198.51.100.1"
IP_NS = "198.51.100.2"          # allowed.test, secret.test
IP_WILD = "198.51.100.3"        # a.wild.test, b.wild.test, wild.test
IP_CIDR = "203.0.113.2"         # only reachable through the 203.0.113.0/24 rule
IP_PRIVATE = "10.1.2.3"         # private.test: an internal address a listed name returns

# name -> ("A", ip) or ("CNAME", target); anything else is NXDOMAIN.
ZONE = {
    "allowed.test": ("A", IP_NS),
    "secret.test": ("A", IP_NS),
    "alias.test": ("CNAME", "allowed.test"),
    "a.wild.test": ("A", IP_WILD),
    "b.wild.test": ("A", IP_WILD),
    "wild.test": ("A", IP_WILD),
    "rebind.test": ("A", "127.0.0.1"),
    "private.test": ("A", IP_PRIVATE),
}

SERVER = r'''
import socket, sys, threading, time
log = open(sys.argv[1], "a", buffering=1)
lock = threading.Lock()
def note(s):
    with lock:
        log.write("%.3f %s\n" % (time.time(), s))
def http(port):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port)); ls.listen(64)
    while True:
        c, peer = ls.accept()
        def serve(c=c, peer=peer):
            me = c.getsockname()
            note("tcp %s:%d %s:%d" % (me[0], me[1], peer[0], peer[1]))
            c.settimeout(10)
            try:
                buf = b""
                while b"\r\n\r\n" not in buf:
                    d = c.recv(4096)
                    if not d: break
                    buf += d
                body = ("hello from %s:%d\n" % me).encode()
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            except OSError:
                pass
            c.close()
        threading.Thread(target=serve, daemon=True).start()
def echo(port):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port)); ls.listen(64)
    while True:
        c, peer = ls.accept()
        def serve(c=c, peer=peer):
            me = c.getsockname()
            note("tcp %s:%d %s:%d" % (me[0], me[1], peer[0], peer[1]))
            try:
                while True:
                    d = c.recv(4096)
                    if not d: break
                    c.sendall(d)
            except OSError:
                pass
            note("tcp-closed %s:%d %s:%d" % (me[0], me[1], peer[0], peer[1]))
            c.close()
        threading.Thread(target=serve, daemon=True).start()
def uecho(addr, port):
    # One socket per address, so that replies come from the address that was asked.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    while True:
        d, peer = s.recvfrom(65535)
        note("udp %s:%d %s:%d" % (addr, port, peer[0], peer[1]))
        s.sendto(d, peer)
for f, p in ((http, 8080), (http, 8443), (echo, 9000)):
    threading.Thread(target=f, args=(p,), daemon=True).start()
for a in sys.argv[2:]:
    threading.Thread(target=uecho, args=(a, 9000), daemon=True).start()
note("ready")
while True:
    time.sleep(3600)
'''


def sh(*args, check=True):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), p.stderr.strip()))
    return p


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class NetNS:
    """The namespace, its veth pair, routes and servers. Use as a context manager."""

    def __init__(self, workdir):
        tag = "%d" % os.getpid()
        self.ns = "k8e" + tag
        self.host_if = "k8h" + tag
        self.ns_if = "k8n" + tag
        self.log = os.path.join(workdir, "netns-servers.log")
        self.proc = None

    def __enter__(self):
        self.setup()
        return self

    def __exit__(self, *exc):
        self.teardown()

    def nsx(self, *args, check=True):
        return sh("ip", "netns", "exec", self.ns, *args, check=check)

    def setup(self):
        for net in ("198.51.100.0/24", "203.0.113.0/24"):
            r = sh("ip", "route", "show", "to", "match", net.split("/")[0], check=False).stdout
            if " dev " in r and "default" not in r:
                raise RuntimeError("%s is already routed on this host (%s); another test run "
                                   "may be using it" % (net, r.strip()))
        self.teardown()          # leftovers of a crashed run with the same pid
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        sh("ip", "link", "set", self.ns_if, "netns", self.ns)
        sh("ip", "addr", "add", IP_HOST + "/24", "dev", self.host_if)
        sh("ip", "link", "set", self.host_if, "up")
        self.nsx("ip", "link", "set", "lo", "up")
        for a in (IP_NS + "/24", IP_WILD + "/24", IP_CIDR + "/24", IP_PRIVATE + "/32"):
            self.nsx("ip", "addr", "add", a, "dev", self.ns_if)
        self.nsx("ip", "link", "set", self.ns_if, "up")
        self.nsx("ip", "route", "add", "default", "via", IP_HOST)
        sh("ip", "route", "add", "203.0.113.0/24", "via", IP_NS)
        sh("ip", "route", "add", IP_PRIVATE + "/32", "via", IP_NS)
        open(self.log, "w").close()
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, "/usr/bin/python3", "-c",
                                      SERVER, self.log, IP_NS, IP_WILD, IP_CIDR, IP_PRIVATE],
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        end = time.time() + 20
        while time.time() < end and "ready" not in open(self.log).read():
            time.sleep(0.05)
        # The servers answer from the host, where the daemon's kosa8-net runs.
        for port in (8080, 8443, 9000):
            c = socket.create_connection((IP_NS, port), timeout=5)
            c.close()
        end = time.time() + 10
        while time.time() < end and not self.seen(proto="tcp-closed"):
            time.sleep(0.05)
        time.sleep(0.2)
        self.clear()

    def teardown(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        sh("ip", "route", "del", "203.0.113.0/24", "via", IP_NS, check=False)
        sh("ip", "route", "del", IP_PRIVATE + "/32", check=False)
        sh("ip", "link", "del", self.host_if, check=False)
        sh("ip", "netns", "del", self.ns, check=False)

    def entries(self):
        """Lines the servers logged since the last clear(): 'tcp IP:PORT PEER:PORT' ..."""
        with open(self.log) as f:
            return [l.split(" ", 1)[1].strip() for l in f if " " in l and "ready" not in l]

    def seen(self, ip=None, port=None, proto=None):
        out = []
        for e in self.entries():
            kind, local = e.split()[:2]
            lip, lport = local.rsplit(":", 1)
            if proto and kind != proto:
                continue
            if ip and lip != ip:
                continue
            if port and int(lport) != port:
                continue
            out.append(e)
        return out

    def clear(self):
        open(self.log, "w").close()

    def icmp_echo_requests(self):
        """How many ICMP echo requests reached the namespace's kernel so far."""
        lines = self.nsx("cat", "/proc/net/snmp").stdout.splitlines()
        icmp = [l.split() for l in lines if l.startswith("Icmp:")]
        return int(icmp[1][icmp[0].index("InEchos")])


def _qname(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def _parse_question(msg):
    i, labels = 12, []
    while msg[i]:
        n = msg[i]
        labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, qclass = struct.unpack("!HH", msg[i + 1:i + 5])
    return ".".join(labels), qtype, qclass, i + 5


class DNSServer:
    """A UDP+TCP DNS server on 127.0.0.1:port answering ZONE; records every question."""

    def __init__(self, zone=ZONE):
        self.zone = zone
        self.asked = []           # (name lower-cased, qtype)
        self.lock = threading.Lock()
        self.port = None
        self.stop = False

    def __enter__(self):
        for _ in range(20):
            port = free_port()
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            t = socket.socket()
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                u.bind(("127.0.0.1", port))
                t.bind(("127.0.0.1", port))
            except OSError:
                u.close()
                t.close()
                continue
            break
        t.listen(16)
        self.port, self.udp, self.tcp = port, u, t
        threading.Thread(target=self._udp_loop, daemon=True).start()
        threading.Thread(target=self._tcp_loop, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.udp.close()
        self.tcp.close()

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def names(self):
        with self.lock:
            return [n for n, _ in self.asked]

    def clear(self):
        with self.lock:
            self.asked = []

    def answer(self, msg):
        if len(msg) < 17:
            return None
        qid, flags = struct.unpack("!HH", msg[:4])
        name, qtype, qclass, end = _parse_question(msg)
        with self.lock:
            self.asked.append((name.lower(), qtype))
        answers = []
        cur, rcode = name.lower().rstrip("."), 3
        for _ in range(8):
            rec = self.zone.get(cur)
            if not rec:
                break
            rcode = 0
            if rec[0] == "CNAME":
                answers.append(_qname(cur) + struct.pack("!HHIH", 5, 1, 60, len(_qname(rec[1])))
                               + _qname(rec[1]))
                cur = rec[1]
                continue
            if qtype in (1, 255):
                answers.append(_qname(cur) + struct.pack("!HHIH", 1, 1, 60, 4)
                               + socket.inet_aton(rec[1]))
            break
        hdr = struct.pack("!HHHHHH", qid, 0x8000 | (flags & 0x0100) | 0x0080 | rcode, 1,
                          len(answers), 0, 0)
        return hdr + msg[12:end] + b"".join(answers)

    def _udp_loop(self):
        while not self.stop:
            try:
                msg, peer = self.udp.recvfrom(4096)
            except OSError:
                return
            try:
                r = self.answer(msg)
            except Exception:
                r = None
            if r:
                self.udp.sendto(r, peer)

    def _tcp_loop(self):
        while not self.stop:
            try:
                c, _ = self.tcp.accept()
            except OSError:
                return
            threading.Thread(target=self._tcp_conn, args=(c,), daemon=True).start()

    def _tcp_conn(self, c):
        c.settimeout(10)
        try:
            while True:
                hdr = c.recv(2, socket.MSG_WAITALL)
                if len(hdr) < 2:
                    break
                n = struct.unpack("!H", hdr)[0]
                msg = c.recv(n, socket.MSG_WAITALL)
                r = self.answer(msg)
                if r:
                    c.sendall(struct.pack("!H", len(r)) + r)
        except (OSError, ValueError, IndexError):
            pass
        c.close()


class LoopServer:
    """A TCP server on the host's 127.0.0.1 (the sandbox's 10.0.2.2) recording connections."""

    def __init__(self):
        self.conns = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.token = "host-loopback-%08x" % random.getrandbits(32)
        self.sock.listen(16)

    def __enter__(self):
        threading.Thread(target=self._loop, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.sock.close()

    def _loop(self):
        while True:
            try:
                c, peer = self.sock.accept()
            except OSError:
                return
            self.conns.append(peer)
            try:
                c.sendall((self.token + "\n").encode())
            except OSError:
                pass
            c.close()

    def clear(self):
        self.conns = []
