# SPDX-License-Identifier: Apache-2.0
# broker.py - what kosa8-broker costs (issue 14), measured side by side in one run against
# the same client talking to the same upstream directly (shared, noisy machine: compare
# the difference, not absolute numbers).
#
# The upstream is the tests' HTTPS server (tests/integration/broker_upstream.py, a test CA)
# in a network namespace of our own; the broker runs standalone with --resolve pointing
# at it. Client: Python's http.client, one kept-alive connection per client thread:
#   direct:  HTTPS to the upstream (TLS kept alive), the real key in the header
#   broker:  plain HTTP on the broker's unix socket, the placeholder in the header; the
#            broker keeps its own TLS connection to the upstream alive
# Figures:
#   added latency   median (and p90) of GET round trips, broker minus direct
#   first byte      time to the first streamed byte of an SSE answer, both ways
#   requests/s      32 concurrent clients (4 processes x 8 threads) for BENCH_BROKER_S s
#   intercepted     interception mode: the client does TLS (SNI api.example.com, the sandbox
#                   CA) to the broker's TLS listener, the broker does TLS upstream; against
#                   the same client doing TLS to the upstream directly (both sides pay the
#                   client's TLS: this is what interception adds)
#   local model     the local-model rule (plain HTTP upstream, no key): round trip and first
#                   streamed byte against the same client talking plain HTTP to the
#                   upstream's plain port (a stand-in for `kosa8 model serve`, whose own
#                   generation time would hide the broker's)
#
# Environment: BENCH_N (round trips per side, default 400), BENCH_BROKER_S (seconds of the
# throughput run, default 5), KOSA8_BIN (default build/bin). Needs root (netns).
import http.client
import json
import multiprocessing
import os
import shutil
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import brokerkit as bk  # noqa: E402

N = int(os.environ.get("BENCH_N", "400"))
SECS = float(os.environ.get("BENCH_BROKER_S", "5"))
KEY = "ex-bench-key-0123456789"


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("api.example.com")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)


class DirectHTTPS(http.client.HTTPConnection):
    """HTTPS to the upstream's address, SNI and certificate check against `name`."""

    def __init__(self, ip, cafile, name="api.example.com"):
        super().__init__(ip, 443)
        self.ctx = ssl.create_default_context(cafile=cafile)
        self.name = name

    def connect(self):
        sock = socket.create_connection((self.host, self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self.ctx.wrap_socket(sock, server_hostname=self.name)


def direct_conn(up, name="api.example.com"):
    return DirectHTTPS(up.ip, up.ca1[0], name)


def headers(key):
    return {"Host": "api.example.com", "X-Api-Key": key}


def round_trips(conn, key, n, path="/bench"):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", path, headers=headers(key))
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        out.append(time.perf_counter() - t)
    return out


def first_byte(conn, key, host, auth):
    body = json.dumps({"stream": True})
    t = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body,
                 headers={"Host": host, auth[0]: auth[1], "Content-Type": "application/json"})
    r = conn.getresponse()
    r.read1(1)
    dt = time.perf_counter() - t
    r.read()
    return dt


class PlainHTTP(http.client.HTTPConnection):
    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class InterceptHTTPS(http.client.HTTPConnection):
    """HTTPS over the broker's TLS listener (a unix socket), as a guest's client sees it."""

    def __init__(self, path, cafile, name="api.example.com"):
        super().__init__(name)
        self.path, self.ctx, self.name = path, ssl.create_default_context(cafile=cafile), name

    def connect(self):
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.path)
        self.sock = self.ctx.wrap_socket(s, server_hostname=self.name)


def intercepted(b, up, sbca):
    b_conn, d_conn = InterceptHTTPS(b.tls, sbca[0]), direct_conn(up)
    round_trips(b_conn, b.placeholder, 20)
    round_trips(d_conn, KEY, 20)
    bro, dir_ = [], []
    for _ in range(4):
        bro += round_trips(b_conn, b.placeholder, N // 4)
        dir_ += round_trips(d_conn, KEY, N // 4)
    mb, md = statistics.median(bro), statistics.median(dir_)
    print("intercepted, round trip: direct median %s, broker median %s (+%s)" % (
        ms(md), ms(mb), ms(mb - md)))
    # a new connection each time: the extra TLS handshake interception costs
    hs_b, hs_d = [], []
    for _ in range(30):
        for conns, out in ((lambda: InterceptHTTPS(b.tls, sbca[0]), hs_b),
                           (lambda: direct_conn(up), hs_d)):
            c = conns()
            t = time.perf_counter()
            round_trips(c, b.placeholder if out is hs_b else KEY, 1)
            out.append(time.perf_counter() - t)
            c.close()
    print("intercepted, new connection each time: direct median %s, broker median %s (+%s)" % (
        ms(statistics.median(hs_d)), ms(statistics.median(hs_b)),
        ms(statistics.median(hs_b) - statistics.median(hs_d))))


def local_round_trips(conn, auth, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", "/v1/models", headers={"Host": "local-model", "Authorization": auth})
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        out.append(time.perf_counter() - t)
    return out


def local_model(b, up):
    """The local-model rule, side by side with plain HTTP straight to the same server."""
    b_conn, d_conn = UnixHTTP(b.sock), PlainHTTP(up.ip, bk.PLAIN_PORT)
    auth = "Bearer " + b.placeholder
    local_round_trips(b_conn, auth, 20)
    local_round_trips(d_conn, "Bearer none", 20)
    bro, dir_ = [], []
    for _ in range(4):
        bro += local_round_trips(b_conn, auth, N // 4)
        dir_ += local_round_trips(d_conn, "Bearer none", N // 4)
    mb, md = statistics.median(bro), statistics.median(dir_)
    print("local model, round trip: direct median %s, broker median %s (+%s)" % (
        ms(md), ms(mb), ms(mb - md)))
    fb_b = [first_byte(b_conn, None, "local-model", ("Authorization", auth)) for _ in range(30)]
    fb_d = [first_byte(d_conn, None, "local-model", ("Authorization", "Bearer none"))
            for _ in range(30)]
    print("local model, first streamed byte: direct median %s, broker median %s (+%s)" % (
        ms(statistics.median(fb_d)), ms(statistics.median(fb_b)),
        ms(statistics.median(fb_b) - statistics.median(fb_d))))


def _worker(args):
    kind, target, key, deadline, nthreads = args
    counts = [0] * nthreads

    def loop(i):
        c = UnixHTTP(target) if kind == "broker" else DirectHTTPS(target[0], target[1])
        while time.time() < deadline:
            c.request("GET", "/rps", headers=headers(key))
            r = c.getresponse()
            r.read()
            if r.status == 200:
                counts[i] += 1
    ts = [threading.Thread(target=loop, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def rps(kind, target, key):
    deadline = time.time() + SECS
    with multiprocessing.Pool(4) as p:
        total = sum(p.map(_worker, [(kind, target, key, deadline, 8)] * 4))
    return total / SECS


def ms(v):
    return "%.3f ms" % (v * 1000)


def main():
    if os.geteuid() != 0:
        print("broker bench: needs root (network namespace); skipped")
        return
    d = tempfile.mkdtemp(prefix="k8bb", dir="/tmp")
    up = b = None
    try:
        up = bk.Upstream(d)
        sbca = bk.make_ca(d, "sandboxca")
        b = bk.Broker(d, "bench", ["header:api.example.com:X-Api-Key=ex",
                                   "openai=openai", "local-model"], {"ex": KEY, "openai": KEY},
                      upstream=up, extra=["--local-model", "%s:%d" % (up.ip, bk.PLAIN_PORT)],
                      intercept_ca=sbca)
        b_conn, d_conn = UnixHTTP(b.sock), direct_conn(up)
        round_trips(b_conn, b.placeholder, 20)          # warm both paths
        round_trips(d_conn, KEY, 20)
        bro, dir_ = [], []
        for _ in range(4):                              # alternate, in slices
            bro += round_trips(b_conn, b.placeholder, N // 4)
            dir_ += round_trips(d_conn, KEY, N // 4)
        mb, md = statistics.median(bro), statistics.median(dir_)
        q = lambda v: statistics.quantiles(v, n=10)[-1]  # noqa: E731
        print("round trip, direct:  median %s  p90 %s  (%d requests)" % (ms(md), ms(q(dir_)), len(dir_)))
        print("round trip, broker:  median %s  p90 %s" % (ms(mb), ms(q(bro))))
        print("added by the broker: median %s (goal < 2 ms)" % ms(mb - md))

        fb_b = [first_byte(b_conn, b.placeholder, "api.openai.com",
                           ("Authorization", "Bearer " + b.placeholder)) for _ in range(30)]
        dd = direct_conn(up, "api.openai.com")
        fb_d = [first_byte(dd, KEY, "api.openai.com", ("Authorization", "Bearer " + KEY))
                for _ in range(30)]
        print("first streamed byte: direct median %s, broker median %s (+%s)" % (
            ms(statistics.median(fb_d)), ms(statistics.median(fb_b)),
            ms(statistics.median(fb_b) - statistics.median(fb_d))))

        r_d = rps("direct", (up.ip, up.ca1[0]), KEY)
        r_b = rps("broker", b.sock, b.placeholder)
        print("32 concurrent clients: direct %.0f req/s, broker %.0f req/s (%.0f%%)" % (
            r_d, r_b, 100.0 * r_b / r_d if r_d else 0))
        intercepted(b, up, sbca)
        local_model(b, up)
        st = b.stats()
        print("broker stats: %d requests, %d refusals, %d connections" % (
            st["requests"], st["refusals"], st["connections"]))
    finally:
        if b:
            b.close()
        if up:
            up.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
