# SPDX-License-Identifier: Apache-2.0
# k8proto.py - a minimal client of the agent protocol (docs/protocol.md) for benchmarks.
import json
import socket
import struct
import time

HDR = struct.Struct("<IHHI")
HELLO, REQ, RESP, STDIN, STDOUT, STDERR, CREDIT, EXIT = 1, 2, 3, 4, 5, 6, 7, 8
EOF_FLAG = 1


class Agent:
    def __init__(self, path, timeout=120):
        end = time.time() + timeout
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX)
                self.s.connect(path)
                break
            except OSError:
                if time.time() > end:
                    raise
                time.sleep(0.005)
        self.buf = b""
        self.next_id = 100

    def frame(self, timeout=120):
        self.s.settimeout(timeout)
        while True:
            if len(self.buf) >= HDR.size:
                n, t, f, i = HDR.unpack_from(self.buf)
                if len(self.buf) >= HDR.size + n:
                    p = self.buf[HDR.size:HDR.size + n]
                    self.buf = self.buf[HDR.size + n:]
                    return t, f, i, p
            d = self.s.recv(65536)
            if not d:
                raise EOFError("agent channel closed")
            self.buf += d

    def send(self, t, f, i, p=b""):
        self.s.sendall(HDR.pack(len(p), t, f, i) + p)

    def hello(self, timeout=120):
        """Greet the agent as kosa8d does (a HELLO now and every second until one comes
        back: what the guest wrote before a host was there is lost) and wait for its."""
        end = time.time() + timeout
        while True:
            self.send(HELLO, 0, 0, b'{"proto":1}')
            try:
                t, f, i, p = self.frame(timeout=1)
            except socket.timeout:
                if time.time() > end:
                    raise
                continue
            if t == HELLO:
                self.s.settimeout(None)
                return json.loads(p)

    def request(self, obj):
        rid = self.next_id
        self.next_id += 1
        self.send(REQ, 0, rid, json.dumps(obj).encode())
        while True:
            t, f, i, p = self.frame()
            if t == RESP and i == rid:
                r = json.loads(p)
                if not r.get("ok"):
                    raise RuntimeError(r)
                return rid, r

    def run(self, obj):
        """Start a process and wait for its EXIT; returns (stdout bytes, exit info)."""
        rid, _ = self.request(obj)
        self.send(STDIN, EOF_FLAG, rid)
        out = b""
        while True:
            t, f, i, p = self.frame()
            if i != rid:
                continue
            if t == STDOUT:
                out += p
                if p:
                    self.send(CREDIT, 0, rid, struct.pack("<I", len(p)))
            elif t == EXIT:
                return out, json.loads(p)
