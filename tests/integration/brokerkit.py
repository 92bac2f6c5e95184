# SPDX-License-Identifier: Apache-2.0
# brokerkit.py - what the broker tests and bench share: a test CA made with the openssl
# CLI, an HTTPS upstream (broker_upstream.py) in a network namespace of the caller's own,
# and a kosa8-broker started standalone with its secrets on a pipe.
#
#   root ns  k8bh<pid> 198.18.7.1/30  <-- veth -->  k8bn<pid> 198.18.7.2/30 in netns k8b<pid>
#
# The address range is checked against `ip route` first; the next /30 is taken when in use.
# Nothing leaves the machine: the upstream answers on 198.18.7.2:443 (certificate from
# test CA 1 for api.openai.com, api.anthropic.com, api.example.com) and :8443 (from test
# CA 2, which the broker does not trust, for bad.example.com), and plain HTTP on :8080
# (PLAIN_PORT: a stand-in for the local model server).
import fcntl
import json
import os
import secrets as pysecrets
import shutil

import pytest
import socket
import subprocess
import tempfile

from conftest import wait_for as conftest_wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
BIN = os.environ.get("KOSA8_BIN", os.path.join(TOP, "build", "bin"))
BROKER = os.path.join(BIN, "kosa8-broker")
HOSTS = ["api.openai.com", "api.anthropic.com", "api.example.com"]
PLAIN_PORT = 8080

# Guest side, put before the scripts the broker tests run in a guest (the image's python
# is minimal: plain sockets): answer(s) reads an HTTP answer to EOF and returns its status
# and its body as text.
GUEST_ANSWER = r"""
def answer(s):
    out = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
    head, _, rest = out.partition(b"\r\n\r\n")
    return head.split(b" ")[1].decode(), rest.decode(errors="replace")
"""


def sh(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw)


def make_ca(d, name):
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".crt")
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
       "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=kosa8 test " + name,
       "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    return crt, key


def make_leaf(d, name, ca, names):
    key, csr, crt = (os.path.join(d, name + e) for e in (".key", ".csr", ".crt"))
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=" + ",".join("DNS:" + n for n in names) + "\n"
                "extendedKeyUsage=serverAuth\n")
    sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-keyout", key, "-out", csr, "-subj", "/CN=" + names[0])
    sh("openssl", "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
       "-out", crt, "-days", "2", "-extfile", ext)
    return crt, key


def free_net():
    routes = sh("ip", "route").stdout + sh("ip", "addr").stdout
    for last in range(0, 256, 4):
        pre = "198.18.7.%d" % last
        if "198.18.7.%d/" % last not in routes and "198.18.7.%d " % (last + 1) not in routes \
           and "198.18.7.%d " % (last + 2) not in routes and pre + "/30" not in routes:
            return "198.18.7.%d" % (last + 1), "198.18.7.%d" % (last + 2)
    raise RuntimeError("no free /30 in 198.18.7.0/24")


class Upstream:
    """The netns, the veth pair and the HTTPS upstream in it."""

    def __init__(self, d):
        self.dir = d
        tag = "%d" % (os.getpid() % 100000)
        self.ns, self.veth_h, self.veth_n = "k8b" + tag, "k8bh" + tag, "k8bn" + tag
        self.log = os.path.join(d, "upstream.jsonl")
        self.ca1 = make_ca(d, "ca1")
        self.ca2 = make_ca(d, "ca2")
        self.good = make_leaf(d, "good", self.ca1, HOSTS)
        self.bad = make_leaf(d, "bad", self.ca2, ["bad.example.com"])
        # The /30 is picked and taken under a host-wide lock: the suite's lanes (and other
        # runs) pick at the same time.
        lock = open("/run/lock/k8-brokerkit-net.lock", "w")
        fcntl.flock(lock, fcntl.LOCK_EX)
        self.host_ip, self.ip = free_net()
        sh("ip", "netns", "add", self.ns)
        try:
            sh("ip", "link", "add", self.veth_h, "type", "veth", "peer", "name", self.veth_n)
            sh("ip", "link", "set", self.veth_n, "netns", self.ns)
            sh("ip", "addr", "add", self.host_ip + "/30", "dev", self.veth_h)
            lock.close()
            sh("ip", "link", "set", self.veth_h, "up")
            ns = ["ip", "netns", "exec", self.ns]
            sh(*ns, "ip", "addr", "add", self.ip + "/30", "dev", self.veth_n)
            sh(*ns, "ip", "link", "set", self.veth_n, "up")
            sh(*ns, "ip", "link", "set", "lo", "up")
            open(self.log, "w").close()
            self.proc = subprocess.Popen(
                ns + ["python3", os.path.join(HERE, "broker_upstream.py"), "--port", "443",
                      "--cert", self.good[0], "--key", self.good[1], "--port2", "8443",
                      "--cert2", self.bad[0], "--key2", self.bad[1], "--log", self.log,
                      "--plain-port", str(PLAIN_PORT)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            line = self.proc.stdout.readline()
            assert line.strip() == "ready", "upstream did not start: %r" % line
        except BaseException:
            lock.close()
            self.close()
            raise

    def records(self):
        with open(self.log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def close(self):
        p = getattr(self, "proc", None)
        if p:
            p.stdin.close()
            p.terminate()
            p.wait(timeout=10)
        subprocess.run(["ip", "link", "del", self.veth_h], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


def placeholder():
    return "k8-ph-" + pysecrets.token_hex(16)


class Broker:
    """A kosa8-broker started standalone. `secrets` go in on a pipe, never argv/env."""

    def __init__(self, d, name, rules, secrets, upstream=None, ca=None, extra=(),
                 tcp_port=None, user=None, intercept_ca=None):
        self.dir = d
        self.placeholder = placeholder()
        self.sock = os.path.join(d, name + ".sock")
        self.ctl = os.path.join(d, name + ".ctl")
        self.log = os.path.join(d, name + ".log")
        rules_file = os.path.join(d, name + ".rules.json")
        with open(rules_file, "w") as f:
            json.dump({"placeholder": self.placeholder, "rules": rules}, f)
        args = [BROKER, "--rules", rules_file, "--listen", self.sock, "--control", self.ctl,
                "--ca-file", ca or upstream.ca1[0], "--verbose"]
        if upstream:
            for h in HOSTS:
                args += ["--resolve", "%s:%s" % (h, upstream.ip)]
            args += ["--resolve", "bad.example.com:%s:8443" % upstream.ip]
        self.tcp_port = tcp_port
        if tcp_port:
            args += ["--listen-tcp", "127.0.0.1:%d" % tcp_port]
        if user:
            args += ["--user", user]
        args += list(extra)
        r, w = os.pipe()
        args += ["--secrets-fd", str(r)]
        fds = [r]
        self.tls = None
        if intercept_ca:        # (cert, key) files: interception's listener and CA pipe
            self.tls = os.path.join(d, name + ".tls")
            cr, cw = os.pipe()
            args += ["--listen-tls", self.tls, "--intercept-ca-fd", str(cr)]
            fds.append(cr)
            with open(intercept_ca[0], "rb") as f1, open(intercept_ca[1], "rb") as f2:
                os.write(cw, f1.read() + f2.read())
            os.close(cw)
        self.args = args
        with open(self.log, "w") as logf:
            self.proc = subprocess.Popen(args, pass_fds=tuple(fds), stdout=subprocess.PIPE,
                                         stderr=logf, text=True)
        for fd in fds:
            os.close(fd)
        os.write(w, json.dumps(secrets).encode())
        os.close(w)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", "broker did not start: %r %s" % (line, self.read_log())
        self._ctl = None

    def read_log(self):
        with open(self.log) as f:
            return f.read()

    def control(self, req):
        if self._ctl is None:
            self._ctl = socket.socket(socket.AF_UNIX)
            self._ctl.connect(self.ctl)
            self._ctlf = self._ctl.makefile("r")
        self._ctl.sendall((json.dumps(req) + "\n").encode())
        return json.loads(self._ctlf.readline())

    def stats(self):
        r = self.control({"op": "stats"})
        assert r["ok"], r
        return r["stats"]

    def set_secret(self, name, value):
        return self.control({"op": "secret", "name": name, "value": value})

    def close(self):
        if self._ctl:
            self._ctl.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for p in (self.sock, self.ctl):
            try:
                os.unlink(p)
            except OSError:
                pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(pred, timeout=10, step=0.05):
    """conftest's wait_for with the broker tests' shorter defaults."""
    return conftest_wait_for(pred, timeout, step)


def scratch(prefix):
    """A module fixture's body: a directory under /tmp, removed afterwards."""
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def upstream_fixtures(prefix):
    """The module fixtures `tmp` (a scratch directory named prefix...) and `up` (the tests'
    HTTPS upstream, Upstream, in it) every broker test file starts from:
    `tmp, up = bk.upstream_fixtures("k8bx")` at module level."""
    @pytest.fixture(scope="module", name="tmp")
    def tmp_fixture():
        yield from scratch(prefix)

    @pytest.fixture(scope="module", name="up")
    def up_fixture(tmp):
        u = Upstream(tmp)
        yield u
        u.close()
    return tmp_fixture, up_fixture


def upstream_config(up):
    """config.json for a daemon whose brokers reach `up`: its CA, and every test host
    resolved to it."""
    return {"broker_ca_file": [up.ca1[0]],
            "broker_resolve": ["%s:%s" % (n, up.ip) for n in HOSTS]}
