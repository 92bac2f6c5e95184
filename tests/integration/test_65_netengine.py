# SPDX-License-Identifier: Apache-2.0
# test_65_netengine.py - kosa8-net on its own, no VM: this file plays QEMU (crafted
# Ethernet frames on the frames socket), the daemon (JSON lines on the control socket)
# and the upstream DNS server (UDP on 127.0.0.1). Real traffic only ever goes to
# 127.0.0.0/8; the one test whose flow must reach slirp for a non-loopback address runs
# kosa8-net in an empty network namespace, where nothing can leave the host.
import json
import os
import queue
import random
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KOSA8_BIN", os.path.join(TOP, "build", "bin"))
NET = os.path.join(BIN, "kosa8-net")

GUEST_MAC = bytes.fromhex("525400123456")
GW_MAC = bytes.fromhex("52550a000202")
GUEST = "10.0.2.15"
GW = "10.0.2.2"
DNS = "10.0.2.3"

pytestmark = pytest.mark.skipif(not os.path.exists(NET), reason="kosa8-net not built at " + NET)


# ---- frames -------------------------------------------------------------------------

def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, payload, ttl=64, ident=0, flags_frag=0x4000):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, flags_frag, ttl,
                    proto, 0, socket.inet_aton(src), socket.inet_aton(dst))
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def l4_csum(src, dst, proto, seg):
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, proto, len(seg))
    return csum(ph + seg)


def udp(src, dst, sport, dport, data):
    seg = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    c = l4_csum(src, dst, 17, seg) or 0xFFFF
    return ipv4(src, dst, 17, seg[:6] + struct.pack("!H", c) + seg[8:])


GUEST6 = "fd00::15"


def ipv6(src, dst, nh, payload):
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), nh, 64,
                       socket.inet_pton(socket.AF_INET6, src),
                       socket.inet_pton(socket.AF_INET6, dst)) + payload


def l4_csum6(src, dst, nh, seg):
    ph = socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst) + \
        struct.pack("!IxxxB", len(seg), nh)
    return csum(ph + seg)


def udp6(src, dst, sport, dport, data):
    seg = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    c = l4_csum6(src, dst, 17, seg) or 0xFFFF
    return ipv6(src, dst, 17, seg[:6] + struct.pack("!H", c) + seg[8:])


def tcp6_syn(src, dst, sport, dport, seq):
    seg = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 2, 65535, 0, 0)
    c = l4_csum6(src, dst, 6, seg)
    return ipv6(src, dst, 6, seg[:16] + struct.pack("!H", c) + seg[18:])


TH_FIN, TH_SYN, TH_RST, TH_PSH, TH_ACK = 1, 2, 4, 8, 16


def tcp(src, dst, sport, dport, seq, ack, flags, data=b"", win=65535):
    seg = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, win, 0, 0) + data
    c = l4_csum(src, dst, 6, seg)
    return ipv4(src, dst, 6, seg[:16] + struct.pack("!H", c) + seg[18:])


def eth(payload, dst=GW_MAC, src=GUEST_MAC, etype=0x0800):
    return dst + src + struct.pack("!H", etype) + payload


def arp_request(target):
    body = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, GUEST_MAC,
                       socket.inet_aton(GUEST), b"\0" * 6, socket.inet_aton(target))
    return eth(body, dst=b"\xff" * 6, etype=0x0806)


class Frame:
    """The parts of a frame to the guest that the tests look at."""

    def __init__(self, raw):
        self.raw = raw
        self.etype = struct.unpack("!H", raw[12:14])[0]
        self.proto = None
        if self.etype == 0x86DD:
            ip = raw[14:]
            self.proto = ip[6]
            self.src = socket.inet_ntop(socket.AF_INET6, ip[8:24])
            self.dst = socket.inet_ntop(socket.AF_INET6, ip[24:40])
            l4 = ip[40:40 + struct.unpack("!H", ip[4:6])[0]]
            self.l4 = l4
            if self.proto == 6:
                (self.sport, self.dport, self.seq, self.ack, off, self.flags) = \
                    struct.unpack("!HHIIBB", l4[:14])
                self.data = l4[(off >> 4) * 4:]
            elif self.proto == 17:
                self.sport, self.dport = struct.unpack("!HH", l4[:4])
                self.data = l4[8:]
            elif self.proto == 58:
                self.icmp_type, self.icmp_code = l4[0], l4[1]
                self.data = l4[8:]
            return
        if self.etype != 0x0800:
            return
        ip = raw[14:]
        ihl = (ip[0] & 15) * 4
        self.proto = ip[9]
        self.src = socket.inet_ntoa(ip[12:16])
        self.dst = socket.inet_ntoa(ip[16:20])
        l4 = ip[ihl:struct.unpack("!H", ip[2:4])[0]]
        self.l4 = l4
        if self.proto == 6:
            (self.sport, self.dport, self.seq, self.ack, off, self.flags) = \
                struct.unpack("!HHIIBB", l4[:14])
            self.data = l4[(off >> 4) * 4:]
        elif self.proto == 17:
            self.sport, self.dport = struct.unpack("!HH", l4[:4])
            self.data = l4[8:]
        elif self.proto == 1:
            self.icmp_type, self.icmp_code = l4[0], l4[1]
            self.data = l4[8:]


# ---- DNS ----------------------------------------------------------------------------

def dns_name(name):
    out = b""
    for label in name.split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def dns_query(name, qtype=1, qid=None):
    qid = random.randrange(65536) if qid is None else qid
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + dns_name(name) + \
        struct.pack("!HH", qtype, 1)


def dns_skip_name(msg, off):
    while True:
        n = msg[off]
        if n == 0:
            return off + 1
        if n & 0xC0 == 0xC0:
            return off + 2
        off += 1 + n


def dns_read_name(msg, off):
    labels = []
    while True:
        n = msg[off]
        if n == 0:
            return ".".join(labels)
        if n & 0xC0 == 0xC0:
            off = ((n & 0x3F) << 8) | msg[off + 1]
            continue
        labels.append(msg[off + 1:off + 1 + n].decode())
        off += 1 + n


def dns_parse(msg):
    """(rcode, [(type, ttl, value)]) of a response."""
    qid, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", msg[:12])
    off = 12
    for _ in range(qd):
        off = dns_skip_name(msg, off) + 4
    answers = []
    for _ in range(an):
        off = dns_skip_name(msg, off)
        rtype, rclass, ttl, rdlen = struct.unpack("!HHIH", msg[off:off + 10])
        off += 10
        rd = msg[off:off + rdlen]
        if rtype == 1:
            val = socket.inet_ntoa(rd)
        elif rtype == 28:
            val = socket.inet_ntop(socket.AF_INET6, rd)
        else:
            val = rd
        answers.append((rtype, ttl, val))
        off += rdlen
    return flags & 15, answers


class Upstream:
    """A tiny DNS server on 127.0.0.1 that records every name it is asked."""
    ZONE = {
        ("allowed.test", 1): [("A", "198.51.100.7")],
        ("alias.test", 1): [("CNAME", "allowed.test")],
        ("rebind.test", 1): [("A", "127.0.0.1")],
        ("local.test", 1): [("A", "127.0.0.1")],
    }
    EXISTS = {"allowed.test", "alias.test", "rebind.test", "local.test"}

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.asked = []
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                msg, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                self.sock.sendto(self.answer(msg), peer)
            except Exception:   # a malformed query: no answer
                pass

    def answer(self, msg):
        qid = struct.unpack("!H", msg[:2])[0]
        name = dns_read_name(msg, 12).lower()
        qend = dns_skip_name(msg, 12)
        qtype = struct.unpack("!H", msg[qend:qend + 2])[0]
        self.asked.append(name)
        question = msg[12:qend + 4]
        recs = self.ZONE.get((name, qtype), [])
        rcode = 0 if name in self.EXISTS else 3
        body = b""
        for kind, val in recs:
            if kind == "A":
                body += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 3600, 4) + socket.inet_aton(val)
            else:
                target = dns_name(val)
                body += b"\xc0\x0c" + struct.pack("!HHIH", 5, 1, 3600, len(target)) + target
        return struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1, len(recs), 0, 0) + question + body

    def close(self):
        self.stop = True
        self.sock.close()


# ---- kosa8-net ----------------------------------------------------------------------

class NetProc:
    def __init__(self, tmp, upstream=None, policy=None, extra=(), netns=False, hosts=None):
        self.tmp = tmp
        self.frames_path = os.path.join(tmp, "frames.sock")
        self.control_path = os.path.join(tmp, "control.sock")
        args = [NET, "--id", "t65", "--frames", self.frames_path, "--control",
                self.control_path]
        if policy is not None:
            pf = os.path.join(tmp, "policy.json")
            with open(pf, "w") as f:
                json.dump(policy, f)
            args += ["--policy", pf]
        if upstream:
            args += ["--dns-server", "127.0.0.1:%d" % upstream.port]
        hf = os.path.join(tmp, "hosts")
        with open(hf, "w") as f:
            f.write(hosts or "")
        args += ["--hosts", hf]
        if os.geteuid() == 0:
            args += ["--user", "65534:65534"]
        args += list(extra)
        if netns:
            args = ["unshare", "--net"] + args
        self.stderr = open(os.path.join(tmp, "net.log"), "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.stderr)
        line = self.proc.stdout.readline().decode()
        assert line == "ready\n", "kosa8-net did not start: %r %s" % (line, self.log())
        assert self.proc.stdout.read() == b""      # stdout closed after ready
        self.frames = queue.Queue()
        self.replies = {}
        self.events = []
        self.cond = threading.Condition()
        self.next_id = 1
        self.fsock = None
        self.csock = None
        self.connect_frames()
        self.connect_control()

    def log(self):
        try:
            with open(os.path.join(self.tmp, "net.log")) as f:
                return f.read()
        except OSError:
            return ""

    # frames
    def connect_frames(self):
        if self.fsock:
            self.fsock.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.frames_path)
        self.fsock = s
        self.frames = queue.Queue()
        self.frames_closed = threading.Event()      # kosa8-net closed this connection
        threading.Thread(target=self._read_frames, args=(s, self.frames, self.frames_closed),
                         daemon=True).start()
        # slirp learns the guest's MAC from its ARP request.
        self.send(arp_request(GW))
        self.expect(lambda f: f.etype == 0x0806, what="ARP reply from slirp")

    def _read_frames(self, s, q, closed):
        buf = b""
        while True:
            try:
                d = s.recv(65536)
            except OSError:
                return
            if not d:
                closed.set()
                return
            buf += d
            while len(buf) >= 4:
                n = struct.unpack("!I", buf[:4])[0]
                if len(buf) < 4 + n:
                    break
                q.put(Frame(buf[4:4 + n]))
                buf = buf[4 + n:]

    def send(self, frame):
        self.fsock.sendall(struct.pack("!I", len(frame)) + frame)

    def expect(self, pred, timeout=5.0, what="a frame"):
        end = time.time() + timeout
        while True:
            left = end - time.time()
            if left <= 0:
                raise AssertionError("no %s within %.1fs; log:\n%s" % (what, timeout, self.log()))
            try:
                f = self.frames.get(timeout=left)
            except queue.Empty:
                continue
            if pred(f):
                return f

    def quiet(self, pred, timeout=1.0):
        """True when no frame matching pred arrives within timeout."""
        try:
            self.expect(pred, timeout=timeout)
            return False
        except AssertionError:
            return True

    def dns(self, name, qtype=1, sport=None):
        sport = sport or random.randrange(20000, 60000)
        q = dns_query(name, qtype)
        self.send(eth(udp(GUEST, DNS, sport, 53, q)))
        f = self.expect(lambda f: f.proto == 17 and f.sport == 53 and f.dport == sport and
                        f.data[:2] == q[:2], what="DNS answer for " + name)
        return dns_parse(f.data)

    # control
    def connect_control(self):
        if self.csock:
            self.csock.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.control_path)
        self.csock = s
        threading.Thread(target=self._read_control, args=(s,), daemon=True).start()

    def _read_control(self, s):
        buf = b""
        while True:
            try:
                d = s.recv(65536)
            except OSError:
                return
            if not d:
                return
            buf += d
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                obj = json.loads(line)
                with self.cond:
                    if "id" in obj:
                        self.replies[obj["id"]] = obj
                    else:
                        self.events.append(obj)
                    self.cond.notify_all()

    def ctl(self, op, **kw):
        rid = self.next_id
        self.next_id += 1
        req = dict(kw, id=rid, op=op)
        self.csock.sendall(json.dumps(req).encode() + b"\n")
        with self.cond:
            assert self.cond.wait_for(lambda: rid in self.replies, timeout=5), \
                "no reply to %r; log:\n%s" % (req, self.log())
            return self.replies.pop(rid)

    def stats(self):
        r = self.ctl("stats")
        assert r["ok"], r
        return r

    def dest(self, name):
        for d in self.stats()["destinations"]:
            if d["dest"] == name:
                return d
        return None

    def close(self):
        for s in (self.fsock, self.csock):
            if s:
                s.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.stderr.close()


class Guest:
    """A guest TCP connection, driven by hand."""

    def __init__(self, net, dst, dport, src=GUEST):
        self.net, self.dst, self.dport, self.src = net, dst, dport, src
        self.sport = random.randrange(20000, 60000)
        self.seq = random.randrange(1 << 32)
        self.ack = 0

    def seg(self, flags, data=b"", seq=None):
        s = self.seq if seq is None else seq
        return eth(tcp(self.src, self.dst, self.sport, self.dport, s, self.ack, flags, data))

    def mine(self, f):
        return f.proto == 6 and f.sport == self.dport and f.dport == self.sport and \
            f.src == self.dst

    def syn(self):
        self.net.send(self.seg(TH_SYN))
        self.seq = (self.seq + 1) & 0xFFFFFFFF

    def connect(self, timeout=5.0):
        self.syn()
        f = self.net.expect(self.mine, timeout=timeout, what="SYN-ACK")
        assert f.flags & (TH_SYN | TH_ACK) == TH_SYN | TH_ACK, "flags %x" % f.flags
        self.ack = (f.seq + 1) & 0xFFFFFFFF
        self.net.send(self.seg(TH_ACK))
        return f

    def send(self, data):
        self.net.send(self.seg(TH_ACK | TH_PSH, data))
        self.seq = (self.seq + len(data)) & 0xFFFFFFFF


def is_policy_rst(g, syn_seq_next):
    return lambda f: g.mine(f) and f.flags & TH_RST


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="k8n-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def upstream():
    u = Upstream()
    yield u
    u.close()


@pytest.fixture
def server():
    """A TCP server on 127.0.0.1 that records connections and whether they closed."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    st = {"port": ls.getsockname()[1], "conns": [], "data": b"", "closed": 0}

    def serve():
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            st["conns"].append(c)
            threading.Thread(target=reader, args=(c,), daemon=True).start()

    def reader(c):
        while True:
            try:
                d = c.recv(4096)
            except OSError:
                d = b""
            if not d:
                st["closed"] += 1
                return
            st["data"] += d

    threading.Thread(target=serve, daemon=True).start()
    yield st
    ls.close()
    for c in st["conns"]:
        c.close()


def start(tmp, upstream=None, policy=None, **kw):
    return NetProc(tmp, upstream, policy, **kw)


def wait_for(pred, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


# ---- tests --------------------------------------------------------------------------

def test_deny_mode_refuses_everything_fast(tmp, upstream):
    n = start(tmp, upstream)
    try:
        g = Guest(n, "198.51.100.7", 80)
        g.syn()
        f = n.expect(g.mine, timeout=2, what="RST to a refused SYN")
        assert f.flags & TH_RST and f.ack == g.seq, (f.flags, f.ack, g.seq)

        n.send(eth(udp(GUEST, "198.51.100.7", 40000, 9999, b"x")))
        f = n.expect(lambda f: f.proto == 1, timeout=2, what="ICMP unreachable")
        assert (f.icmp_type, f.icmp_code) == (3, 13)

        for name in ("allowed.test", "example.org"):
            rcode, answers = n.dns(name)
            assert rcode == 5 and answers == []
        assert upstream.asked == []
        st = n.stats()
        assert st["mode"] == "deny" and st["dns"]["refused"] == 2
        d = n.dest("198.51.100.7:80")
        assert d and d["refused"] == 1 and d["passed"] == 0 and d["reason"] == "egress deny"
        assert n.dest("dns:example.org")["refused"] == 1

        # confined: not root, seccomp filter in force
        with open("/proc/%d/status" % n.proc.pid) as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        assert status["Seccomp"].strip() == "2"
        if os.geteuid() == 0:
            assert status["Uid"].split()[:2] == ["65534", "65534"]
            assert status["Groups"].strip() == ""
        st = os.stat(n.frames_path)
        assert st.st_mode & 0o777 == 0o600
        assert os.stat(n.control_path).st_mode & 0o777 == 0o600
    finally:
        n.close()


def test_ipv6(tmp, upstream):
    n = start(tmp, upstream, {"mode": "allow-list", "rules": ["allowed.test"]})
    try:
        q = dns_query("allowed.test")
        n.send(eth(udp6(GUEST6, "fd00::3", 4444, 53, q), etype=0x86DD))
        f = n.expect(lambda f: f.proto == 17 and f.dport == 4444, what="DNS answer over IPv6")
        assert f.src == "fd00::3" and dns_parse(f.data) == (0, [(1, 300, "198.51.100.7")])
        n.send(eth(tcp6_syn(GUEST6, "2001:db8::1", 4445, 443, 1000), etype=0x86DD))
        f = n.expect(lambda f: f.proto == 6 and f.dport == 4445, what="IPv6 RST")
        assert f.flags & TH_RST and f.ack == 1001
        n.send(eth(udp6(GUEST6, "2001:db8::1", 4446, 443, b"x"), etype=0x86DD))
        f = n.expect(lambda f: f.proto == 58, what="ICMPv6 unreachable")
        assert (f.icmp_type, f.icmp_code) == (1, 1)
        # the gateway is the host's ::1, not listed
        n.send(eth(tcp6_syn(GUEST6, "fd00::2", 4447, 22, 7), etype=0x86DD))
        f = n.expect(lambda f: f.proto == 6 and f.dport == 4447, what="RST for fd00::2")
        assert f.flags & TH_RST
        assert n.dest("[::1]:22")["reason"] == "host loopback"
        assert n.dest("[2001:db8::1]:443")["refused"] == 2
    finally:
        n.close()


def test_dns_allow_list(tmp, upstream):
    n = start(tmp, upstream, {"mode": "allow-list",
                              "rules": ["allowed.test", "alias.test", "rebind.test"]})
    try:
        rcode, answers = n.dns("allowed.test")
        assert rcode == 0 and answers == [(1, 300, "198.51.100.7")]   # TTL 3600 capped
        rcode, answers = n.dns("Allowed.TEST", qtype=28)               # AAAA: none
        assert rcode == 0 and answers == []
        rcode, answers = n.dns("allowed.test", qtype=15)               # MX: empty, not asked
        assert rcode == 0 and answers == []

        rcode, answers = n.dns("alias.test")                           # CNAME chased here
        assert rcode == 0 and [a[2] for a in answers] == ["198.51.100.7"]

        rcode, answers = n.dns("rebind.test")                          # loopback answer
        assert all(a[2] != "127.0.0.1" for a in answers)
        assert rcode == 5

        rcode, answers = n.dns("unlisted.test")
        assert rcode == 5 and answers == []
        rcode, _ = n.dns("sub.allowed.test")                           # no wildcard rule
        assert rcode == 5
        assert "unlisted.test" not in upstream.asked
        assert "sub.allowed.test" not in upstream.asked
        assert upstream.asked.count("allowed.test") >= 1 and "alias.test" in upstream.asked
        assert ("allowed.test" in upstream.asked[upstream.asked.index("alias.test"):])

        st = n.stats()
        assert st["dns"]["refused"] == 3 and st["dns"]["answered"] >= 4
        assert n.dest("dns:unlisted.test")["refused"] == 1
        assert n.dest("dns:rebind.test")["reason"] == "internal address"

        # an address nobody looked up stays refused
        g = Guest(n, "198.51.100.8", 80)
        g.syn()
        f = n.expect(g.mine, timeout=2, what="RST")
        assert f.flags & TH_RST
    finally:
        n.close()


def test_dns_wildcard_and_hosts_file(tmp, upstream):
    n = start(tmp, upstream, {"mode": "allow-list", "rules": ["*.corp.test", "db.test"]},
              hosts="198.51.100.20 db.test\n127.0.0.1 localhost\n")
    try:
        rcode, answers = n.dns("db.test")
        assert rcode == 0 and answers == [(1, 60, "198.51.100.20")]
        assert "db.test" not in upstream.asked
        rcode, _ = n.dns("x.corp.test")                                # asked: NXDOMAIN
        assert rcode == 3 and "x.corp.test" in upstream.asked
        rcode, _ = n.dns("corp.test")                                  # wildcard only below
        assert rcode == 5 and "corp.test" not in upstream.asked
        rcode, _ = n.dns("localhost")
        assert rcode == 5
    finally:
        n.close()


def test_dns_over_tcp(tmp, upstream):
    n = start(tmp, upstream, {"mode": "allow-list", "rules": ["allowed.test"]})
    try:
        g = Guest(n, DNS, 53)
        g.connect()
        q = dns_query("allowed.test")
        g.send(struct.pack("!H", len(q)) + q)
        data = b""
        end = time.time() + 5
        while len(data) < 2 or len(data) < 2 + struct.unpack("!H", data[:2])[0]:
            f = n.expect(g.mine, timeout=max(0.1, end - time.time()), what="TCP DNS data")
            if f.data:
                data += f.data
        rcode, answers = dns_parse(data[2:])
        assert rcode == 0 and answers == [(1, 300, "198.51.100.7")]
        # a refused name over the same connection
        g.ack = (g.ack + len(data)) & 0xFFFFFFFF
        q = dns_query("other.test")
        g.send(struct.pack("!H", len(q)) + q)
        f = n.expect(lambda f: g.mine(f) and len(f.data) > 2, what="second TCP answer")
        assert dns_parse(f.data[2:])[0] == 5
        g.ack = (g.ack + len(f.data)) & 0xFFFFFFFF
        n.send(g.seg(TH_FIN | TH_ACK))
        f = n.expect(lambda f: g.mine(f) and f.flags & TH_FIN, what="FIN")
        assert "other.test" not in upstream.asked
        # anything else to the resolver address is refused
        g2 = Guest(n, DNS, 80)
        g2.syn()
        assert n.expect(g2.mine, timeout=2).flags & TH_RST
    finally:
        n.close()


def test_gateway_is_host_loopback_only_when_listed(tmp, server):
    n = start(tmp, None, {"mode": "allow-list", "rules": ["198.51.100.0/24"]})
    try:
        g = Guest(n, GW, server["port"])
        g.syn()
        f = n.expect(g.mine, timeout=2, what="RST for the gateway")
        assert f.flags & TH_RST
        assert n.dest("127.0.0.1:%d" % server["port"])["reason"] == "host loopback"
        # other addresses of slirp's network would also be the host's loopback
        g = Guest(n, "10.0.2.5", server["port"])
        g.syn()
        assert n.expect(g.mine, timeout=2).flags & TH_RST
        assert server["conns"] == []

        r = n.ctl("policy", mode="allow-list", rules=["127.0.0.1"])
        assert r["ok"], r
        g = Guest(n, GW, server["port"])
        g.connect()
        g.send(b"hello")
        assert wait_for(lambda: server["data"] == b"hello"), server
        assert len(server["conns"]) == 1
        assert n.dest("127.0.0.1:%d" % server["port"])["passed"] == 1
        assert n.stats()["flows"] == 1

        # live policy change: the established flow is cut both ways
        r = n.ctl("policy", mode="allow-list", rules=["example.org"])
        assert r["ok"], r
        f = n.expect(lambda f: g.mine(f) and f.flags & TH_RST, what="RST on cut")
        assert f.seq == g.ack, (f.seq, g.ack)
        assert wait_for(lambda: server["closed"] == 1), "server did not see the close"
        assert n.stats()["flows"] == 0
        # and the guest's further segments are refused
        g.send(b"more")
        assert n.expect(g.mine, timeout=2).flags & TH_RST
    finally:
        n.close()


def test_bad_policy_keeps_the_old_one(tmp):
    n = start(tmp, None, {"mode": "allow-list", "rules": ["example.org"]})
    try:
        r = n.ctl("policy", mode="allow-list", rules=["example.org", "bad rule!"])
        assert r["ok"] is False and r["error"]
        r = n.ctl("policy", mode="sometimes", rules=[])
        assert r["ok"] is False and "mode" in r["error"]
        st = n.stats()
        assert st["mode"] == "allow-list" and st["rules"] == ["example.org"]
        assert n.ctl("ping")["ok"] is True
        assert n.ctl("frobnicate")["ok"] is False
    finally:
        n.close()


def test_deny_events_aggregated_per_second(tmp):
    n = start(tmp, None)
    try:
        # start early in a second so that the 50 attempts fall into one
        while time.time() % 1 > 0.3:
            time.sleep(0.01)
        for i in range(50):
            g = Guest(n, "198.51.100.9", 22)
            g.sport = 30000 + i
            g.syn()
        with n.cond:
            n.cond.wait_for(lambda: any(e["dest"] == "198.51.100.9:22" for e in n.events),
                            timeout=4)
        # A later refusal, in a later second, is the barrier: events leave in order of
        # their second, so once its event is here, a second event for :22 would be too.
        g = Guest(n, "198.51.100.9", 23)
        g.syn()
        with n.cond:
            assert n.cond.wait_for(lambda: any(e["dest"] == "198.51.100.9:23"
                                               for e in n.events), timeout=4)
        evs = [e for e in n.events if e["dest"] == "198.51.100.9:22"]
        assert len(evs) == 1, evs
        e = evs[0]
        assert e["event"] == "deny" and e["count"] == 50 and e["proto"] == "tcp"
        assert e["reason"] == "egress deny" and e["time"].endswith("Z")
        assert n.dest("198.51.100.9:22")["refused"] == 50
        # DNS refusals are events too
        n.dns("nope.test")
        with n.cond:
            assert n.cond.wait_for(lambda: any(e["dest"] == "dns:nope.test" for e in n.events),
                                   timeout=4)
        assert [e["proto"] for e in n.events if e["dest"] == "dns:nope.test"] == ["dns"]
    finally:
        n.close()


def test_flow_cap(tmp, server):
    n = start(tmp, None, {"mode": "allow-list", "rules": ["127.0.0.1"]},
              extra=["--max-flows", "3"])
    try:
        gs = [Guest(n, GW, server["port"]) for _ in range(3)]
        for g in gs:
            g.connect()
        assert wait_for(lambda: len(server["conns"]) == 3)
        extra = Guest(n, GW, server["port"])
        extra.syn()
        f = n.expect(extra.mine, timeout=2, what="RST at the cap")
        assert f.flags & TH_RST
        st = n.stats()
        assert st["flows"] == 3 and st["max_flows"] == 3
        assert n.dest("127.0.0.1:%d" % server["port"])["reason"] == "flow limit"
        assert len(server["conns"]) == 3
    finally:
        n.close()


def test_malformed_frames_and_reconnects(tmp, upstream):
    n = start(tmp, upstream, {"mode": "allow-list", "rules": ["allowed.test"]})
    try:
        rnd = random.Random(65)
        good = eth(udp(GUEST, DNS, 5353, 53, dns_query("allowed.test")))
        for i in range(400):
            if i % 2:
                frame = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 200)))
            else:   # a valid frame with some bytes flipped or cut short
                b = bytearray(good)
                for _ in range(rnd.randrange(1, 4)):
                    b[rnd.randrange(len(b))] = rnd.randrange(256)
                frame = bytes(b[:rnd.randrange(1, len(b) + 1)])
            n.send(frame)
        bad_ip = eth(ipv4(GUEST, DNS, 17, b"\0" * 4)[:20] + b"\0" * 2)
        n.send(bad_ip)
        assert n.proc.poll() is None
        assert n.dns("allowed.test")[0] == 0
        assert n.stats()["malformed"] > 0

        # a broken length prefix drops the connection; a new one works
        n.fsock.sendall(struct.pack("!I", 10 << 20))
        assert n.frames_closed.wait(5), "kosa8-net kept a connection whose length was 10 MiB"
        n.connect_frames()
        assert n.dns("allowed.test")[0] == 0
        # a second connection replaces the first
        old = n.fsock
        n.fsock = None
        n.connect_frames()
        old.close()
        assert n.dns("allowed.test")[0] == 0
        # and the daemon may reconnect to the control socket
        n.connect_control()
        assert n.ctl("ping")["ok"]
        assert n.proc.poll() is None
    finally:
        n.close()


def test_startup_errors(tmp):
    bad = os.path.join(tmp, "p.json")
    with open(bad, "w") as f:
        json.dump({"mode": "allow-list", "rules": ["exa mple.org"]}, f)
    p = subprocess.run([NET, "--id", "x", "--frames", os.path.join(tmp, "f"), "--control",
                        os.path.join(tmp, "c"), "--policy", bad], capture_output=True,
                       timeout=10)
    assert p.returncode == 1 and p.stdout.startswith(b"error: "), p
    p = subprocess.run([NET, "--id", "x"], capture_output=True, timeout=10)
    assert p.returncode == 1 and p.stdout.startswith(b"error: usage"), p


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root for an empty network namespace")
def test_pinned_flow_reaches_slirp(tmp):
    """A flow to an address the sandbox's own lookup returned is handed to slirp. Run in
    an empty network namespace: slirp's connect() to 198.51.100.7 fails there and no
    packet leaves the host. The name comes from the hosts file."""
    n = start(tmp, None, {"mode": "allow-list", "rules": ["allowed.test:80"]},
              netns=True, hosts="198.51.100.7 allowed.test\n")
    try:
        g = Guest(n, "198.51.100.7", 80)
        g.syn()
        f = n.expect(g.mine, timeout=2, what="RST before the lookup")
        assert f.flags & TH_RST
        assert n.dest("198.51.100.7:80")["refused"] == 1

        rcode, answers = n.dns("allowed.test")
        assert rcode == 0 and answers == [(1, 60, "198.51.100.7")]
        g = Guest(n, "198.51.100.7", 80)
        g.syn()
        assert wait_for(lambda: (n.dest("allowed.test:80") or {}).get("passed") == 1)
        assert n.dest("allowed.test:80")["refused"] == 0
        # the rule names port 80: another port stays refused
        g = Guest(n, "198.51.100.7", 443)
        g.syn()
        f = n.expect(lambda f: g.mine(f) and f.flags & TH_RST, timeout=2)
        assert n.dest("198.51.100.7:443")["reason"] == "port not listed"
    finally:
        n.close()


def test_sigterm_exits(tmp):
    n = start(tmp, None)
    n.proc.terminate()
    assert n.proc.wait(timeout=5) == 0
    n.close()
