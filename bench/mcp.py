# SPDX-License-Identifier: Apache-2.0
# mcp.py - kosa8 mcp's run_code and run_cell (issue 29, docs/mcp.md) against the CLI doing
# the same in the same run, alternating, median and p90 of BENCH_N rounds:
#   run_code over stdio, over streamable HTTP  vs  kosa8 sandbox run SB IMG python3 -c CODE
#   run_cell over stdio                        vs  kosa8 sandbox cell SB CODE
# The MCP side is a plain JSON-RPC client in this process (the server's cost, not a
# client library's); the server is started once per transport, as an agent keeps it.
# One sandbox, 512 MiB / 1 vCPU; each timed call starts BENCH_SETTLE s after the last.
import http.client
import json
import os
import statistics
import subprocess
import tempfile
import time

from k8cli import KOSA8, end_home, k, test_image

N = int(os.environ.get("BENCH_N", "8"))
SETTLE = float(os.environ.get("BENCH_SETTLE", "0.3"))
IMG = "python:3.12-slim"
SB = "bmcp"
CODE = "print(sum(range(1000)))"


class Stdio:
    def __init__(self, home):
        self.p = subprocess.Popen([KOSA8, "mcp", "--sandbox", SB], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  env=dict(os.environ, KOSA8_HOME=home))
        self.id = 0
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "0"}})

    def rpc(self, method, params):
        self.id += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method,
                                       "params": params}) + "\n")
        self.p.stdin.flush()
        while True:
            r = json.loads(self.p.stdout.readline())
            if r.get("id") == self.id:
                return r

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=120)


class Http:
    def __init__(self, home):
        self.p = subprocess.Popen([KOSA8, "mcp", "--sandbox", SB, "--listen", "127.0.0.1:0",
                                   "--no-token"], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, KOSA8_HOME=home))
        line = self.p.stderr.readline()
        while "/mcp" not in line:
            line = self.p.stderr.readline()
        self.port = int(line.rsplit(":", 1)[1].split("/")[0])
        self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        self.sid = None
        self.id = 0
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "0"}})

    def rpc(self, method, params):
        self.id += 1
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.sid:
            h["Mcp-Session-Id"] = self.sid
        self.c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": self.id,
                                                   "method": method, "params": params}), h)
        r = self.c.getresponse()
        self.sid = r.getheader("Mcp-Session-Id") or self.sid
        body = r.read().decode()
        if r.getheader("Content-Type") == "text/event-stream":
            body = [l[6:] for l in body.splitlines() if l.startswith("data: ")][-1]
        return json.loads(body)

    def close(self):
        self.c.close()
        self.p.terminate()
        self.p.wait(timeout=120)


def timed(fn):
    time.sleep(SETTLE)
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.9 * len(xs) + 0.5) - 1)]


def show(what, xs, base=None):
    m = statistics.median(xs)
    rel = "" if base is None else "   %+6.0f ms against the CLI" % ((m - statistics.median(base)) * 1000)
    print("  %-44s median %7.3f s   p90 %7.3f s%s" % (what, m, p90(xs), rel))


def main():
    home = tempfile.mkdtemp(prefix="k8bm-", dir="/tmp")
    try:
        k(home, "daemon", "start")
        k(home, "image", "load", test_image(), "--tag", IMG)
        k(home, "sandbox", "create", SB, "--cpus", "1", "--memory", "512", "--disk", "2")
        k(home, "sandbox", "pull", SB, IMG)
        st, ht = Stdio(home), Http(home)
        want = "499500\n[exit code 0]"

        def cli_run():
            assert k(home, "sandbox", "run", SB, IMG, "python3", "-c", CODE).stdout == "499500\n"

        def mcp_run(srv):
            r = srv.rpc("tools/call", {"name": "run_code", "arguments": {"code": CODE}})
            assert r["result"]["content"][0]["text"] == want, r

        def cli_cell():
            assert k(home, "sandbox", "cell", SB, "sum(range(1000))").stdout == "499500\n"

        def mcp_cell():
            r = st.rpc("tools/call", {"name": "run_cell", "arguments": {"code": "sum(range(1000))"}})
            assert r["result"]["content"][0]["text"] == "499500", r

        cli_cell()      # the default context made once, outside the figures
        runs = {"cli": [], "stdio": [], "http": [], "cli_cell": [], "mcp_cell": []}
        for _ in range(N):
            runs["cli"].append(timed(cli_run))
            runs["stdio"].append(timed(lambda: mcp_run(st)))
            runs["http"].append(timed(lambda: mcp_run(ht)))
            runs["cli_cell"].append(timed(cli_cell))
            runs["mcp_cell"].append(timed(mcp_cell))
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        print("  %d rounds, alternating; load %s (TCG, 1 vCPU, 512 MiB)" % (N, load))
        show("kosa8 sandbox run (python3 -c)", runs["cli"])
        show("MCP run_code, stdio (python3 -, stdin)", runs["stdio"], runs["cli"])
        show("MCP run_code, streamable HTTP", runs["http"], runs["cli"])
        show("kosa8 sandbox cell", runs["cli_cell"])
        show("MCP run_cell, stdio", runs["mcp_cell"], runs["cli_cell"])
        st.close()
        ht.close()
    finally:
        end_home(home)


main()
