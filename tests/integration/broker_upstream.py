# SPDX-License-Identifier: Apache-2.0
# broker_upstream.py - the HTTPS server standing in for api.openai.com, api.anthropic.com
# and a generic API in the broker tests and bench. Run as a program (in the test's network
# namespace):
#
#   python3 broker_upstream.py --cert C --key K --port 443 --log FILE.jsonl [--port2 P --cert2 ...]
#                              [--plain-port P]
#
# Prints "ready" once listening. Every request is appended to the log as one JSON line:
# path, method, headers (as received), body length, and for streams the wall-clock time
# each event was sent. Paths:
#   /v1/chat/completions      OpenAI chat (JSON, or SSE when the body says "stream": true)
#   /v1/messages              Anthropic messages (JSON, or SSE)
#   /reflect, /reflect-head   echo the request's headers in the body (and X-Echo)
#   /reflect-gzip             the same body, gzip-compressed when Accept-Encoding offers gzip
#   /reflect-gzip-always      the same body, gzip-compressed whatever the request asked
#   /reflect-split            the body in two writes 300 ms apart, cut inside the credential
#   /reflect-chunked          the body chunked, a chunk boundary inside the credential
#   anything else             {"ok": true, "path": ...} (or the number of bytes received)
# A request body containing "slow" makes a stream pause 300 ms between events.
# --plain-port: the same answers over plain HTTP (a stand-in for `kosa8 model serve`, the
# broker's local-model rule, in the bench).
import argparse
import gzip
import json
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG_LOCK = threading.Lock()
TOKENS = ["Hel", "lo", " from", " the", " upstream"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = None

    def setup(self):
        # head and body are separate writes: without this, Nagle and delayed ACKs add 40 ms
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def log_message(self, fmt, *args):
        pass

    def record(self, body, sent=None):
        rec = {"method": self.command, "path": self.path,
               "headers": [[k, v] for k, v in self.headers.items()],
               "body_len": len(body), "body": body[:2000].decode("utf-8", "replace"),
               "sent": sent or [], "t": time.time()}
        with LOG_LOCK, open(self.log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream(self, events, slow):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        sent = []
        for ev in events:
            data = ev.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            sent.append(time.time())
            if slow:
                time.sleep(0.3)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        return sent

    def do_GET(self):
        self.record(b"")
        if self.path in ("/reflect-gzip", "/reflect-gzip-always", "/reflect-split",
                         "/reflect-chunked"):
            self.reflect_more(json.dumps(dict(self.headers.items())).encode())
            return
        if self.path.startswith("/reflect"):
            # a hostile or careless server that echoes the request's headers
            seen = json.dumps(dict(self.headers.items())).encode()
            self.send_response(200)
            if self.path == "/reflect-head":
                self.send_header("X-Echo", self.headers.get("X-Api-Key", ""))
            self.send_header("Content-Length", str(len(seen) + 16))
            self.end_headers()
            self.wfile.write(b"x" * 16)
            self.wfile.flush()
            time.sleep(0.2)             # the body's start arrives in a read of its own
            self.wfile.write(seen)
            return
        self.send_json(200, {"ok": True, "path": self.path})

    def reflect_more(self, seen):
        # Echoes that a guard looking for the key's literal bytes in each read would miss:
        # compressed, or cut inside the credential across two reads or two chunks.
        cred = self.headers.get("X-Api-Key") or self.headers.get("Authorization") or "?"
        cut = seen.find(cred.encode()) + len(cred) // 2
        if self.path.startswith("/reflect-gzip"):
            self.send_response(200)
            if self.path == "/reflect-gzip-always" or \
               "gzip" in self.headers.get("Accept-Encoding", ""):
                seen = gzip.compress(seen)
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(seen)))
            self.end_headers()
            self.wfile.write(seen)
            return
        self.send_response(200)
        if self.path == "/reflect-split":
            self.send_header("Content-Length", str(len(seen)))
            parts = [seen[:cut], seen[cut:]]
        else:
            self.send_header("Transfer-Encoding", "chunked")
            parts = [b"%x\r\n%s\r\n" % (len(p), p) for p in (seen[:cut], seen[cut:])]
            parts[-1] += b"0\r\n\r\n"
        self.end_headers()
        self.wfile.write(parts[0])
        self.wfile.flush()
        time.sleep(0.3)                 # the rest arrives in a read of its own
        self.wfile.write(parts[1])
        self.wfile.flush()

    def do_POST(self):
        body = self.read_body()
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            req = {}
        slow = b"slow" in body
        if not isinstance(req, dict):
            req = {}
        if self.path.startswith("/v1/chat/completions"):
            if req.get("stream"):
                evs = []
                for t in TOKENS:
                    evs.append("data: " + json.dumps({
                        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                        "model": "test", "choices": [{"index": 0, "delta": {"content": t},
                                                      "finish_reason": None}]}) + "\n\n")
                evs.append("data: [DONE]\n\n")
                sent = self.stream(evs, slow)
                self.record(body, sent)
                return
            self.record(body)
            self.send_json(200, {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test",
                "choices": [{"index": 0, "message": {"role": "assistant",
                                                     "content": "".join(TOKENS)},
                             "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6}})
            return
        if self.path.startswith("/v1/messages"):
            msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": "test",
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 1, "output_tokens": 0}}
            if req.get("stream"):
                evs = ["event: message_start\ndata: " + json.dumps(
                    {"type": "message_start", "message": msg}) + "\n\n",
                    "event: content_block_start\ndata: " + json.dumps(
                    {"type": "content_block_start", "index": 0,
                     "content_block": {"type": "text", "text": ""}}) + "\n\n"]
                for t in TOKENS:
                    evs.append("event: content_block_delta\ndata: " + json.dumps(
                        {"type": "content_block_delta", "index": 0,
                         "delta": {"type": "text_delta", "text": t}}) + "\n\n")
                evs.append("event: content_block_stop\ndata: " + json.dumps(
                    {"type": "content_block_stop", "index": 0}) + "\n\n")
                evs.append("event: message_delta\ndata: " + json.dumps(
                    {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                        "stop_sequence": None},
                     "usage": {"output_tokens": 5}}) + "\n\n")
                evs.append("event: message_stop\ndata: " + json.dumps(
                    {"type": "message_stop"}) + "\n\n")
                sent = self.stream(evs, slow)
                self.record(body, sent)
                return
            self.record(body)
            msg.update(content=[{"type": "text", "text": "".join(TOKENS)}],
                       stop_reason="end_turn", usage={"input_tokens": 1, "output_tokens": 5})
            self.send_json(200, msg)
            return
        self.record(body)
        self.send_json(200, {"ok": True, "path": self.path, "received": len(body)})


def serve(port, cert, key, log):
    h = type("H%d" % port, (Handler,), {"log_path": log})
    srv = ThreadingHTTPServer(("0.0.0.0", port), h)
    srv.daemon_threads = True
    if cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--port2", type=int)
    ap.add_argument("--cert2")
    ap.add_argument("--key2")
    ap.add_argument("--plain-port", type=int)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    serve(a.port, a.cert, a.key, a.log)
    if a.port2:
        serve(a.port2, a.cert2, a.key2, a.log)
    if a.plain_port:
        serve(a.plain_port, None, None, a.log)
    print("ready", flush=True)
    try:
        sys.stdin.read()        # until the test closes our stdin
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
