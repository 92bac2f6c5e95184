# SPDX-License-Identifier: Apache-2.0
# kernel_gateway.py - a stand-in for the Jupyter kernel gateway that smolagents' DockerExecutor
# starts in its container (the real one is `pip install jupyter_kernel_gateway`, which needs
# the network): the same endpoints on port 8888, the same token check (KG_AUTH_TOKEN), and the
# kernel's messages over a WebSocket, enough for DockerExecutor's client side.
# test_82_docker_frameworks.py builds it into an image with a RUN step, as smolagents' own
# Dockerfile installs the gateway. The test image is python3-minimal: no http, json, base64
# or uuid modules, so HTTP, JSON and the WebSocket frames are written out here.
import ast
import contextlib
import hashlib
import io
import os
import socket
import threading
import traceback

TOKEN = os.environ.get("KG_AUTH_TOKEN", "")
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
KERNELS = {}


def dumps(v):
    """JSON of None, bools, numbers, strings, lists and dicts."""
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + "".join(c if c >= " " and c not in '"\\' else "\\u%04x" % ord(c)
                             for c in v) + '"'
    if isinstance(v, dict):
        return "{" + ",".join(dumps(str(k)) + ":" + dumps(x) for k, x in v.items()) + "}"
    return "[" + ",".join(dumps(x) for x in v) + "]"


def loads(text):
    """JSON from DockerExecutor's client (Python's json.dumps: ASCII, so a valid Python
    expression once true, false and null are named). A kernel runs its client's code
    anyway: evaluating its message gives it nothing more."""
    return eval(text, {"__builtins__": {}}, {"true": True, "false": False, "null": None})


def b64(data):
    abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    bits = "".join("{:08b}".format(b) for b in data)
    bits += "0" * (-len(bits) % 6)
    out = "".join(abc[int(bits[i:i + 6], 2)] for i in range(0, len(bits), 6))
    return out + "=" * (-len(out) % 4)


class Client:
    def __init__(self, conn):
        self.conn, self.f = conn, conn.makefile("rb")

    def answer(self, code, obj, reason="OK"):
        body = dumps(obj).encode()
        self.conn.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (code, reason.encode(), len(body),
                                                               body))

    def serve(self):
        while True:
            line = self.f.readline()
            if not line.strip():
                return
            method, target = line.decode("latin-1").split(" ")[:2]
            headers = {}
            for h in iter(self.f.readline, b"\r\n"):
                if not h:
                    return
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            self.f.read(int(headers.get("content-length") or 0))
            path, _, query = target.partition("?")
            parts = path.split("/")
            if TOKEN and "token=" + TOKEN not in query.split("&"):
                self.answer(403, {"message": "Forbidden"}, "Forbidden")
            elif (method, path) == ("GET", "/api/kernelspecs"):
                self.answer(200, {"default": "python3", "kernelspecs": {"python3": {}}})
            elif (method, path) == ("POST", "/api/kernels"):
                kid = os.urandom(16).hex()
                KERNELS[kid] = {"__name__": "__main__"}
                self.answer(201, {"id": kid, "name": "python3"}, "Created")
            elif method == "GET" and len(parts) == 5 and parts[1:3] == ["api", "kernels"] \
                    and parts[4] == "channels" and parts[3] in KERNELS:
                return self.channels(KERNELS[parts[3]], headers.get("sec-websocket-key", ""))
            else:
                self.answer(404, {"message": "Not Found"}, "Not Found")

    # The WebSocket (RFC 6455): the handshake, then text frames both ways.
    def channels(self, namespace, key):
        accept = b64(hashlib.sha1(key.encode() + WS_GUID).digest())
        self.conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                          b"Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n"
                          % accept.encode())
        while True:
            op, data = self.frame_in()
            if op is None or op == 8:
                self.frame_out(8, b"")
                return
            if op == 1:
                self.execute(namespace, loads(data.decode()))

    def frame_in(self):
        head = self.f.read(2)
        if len(head) < 2:
            return None, b""
        n = head[1] & 127
        if n >= 126:
            n = int.from_bytes(self.f.read(2 if n == 126 else 8), "big")
        mask = self.f.read(4) if head[1] & 128 else b"\0\0\0\0"
        return head[0] & 15, bytes(b ^ mask[i % 4] for i, b in enumerate(self.f.read(n)))

    def frame_out(self, op, data):
        n = len(data)
        size = bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big") \
            if n < 65536 else bytes([127]) + n.to_bytes(8, "big")
        self.conn.sendall(bytes([128 | op]) + size + data)

    def message(self, parent, kind, content):
        self.frame_out(1, dumps({"parent_header": {"msg_id": parent}, "msg_type": kind,
                                 "content": content}).encode())

    # A cell: its statements run in the kernel's namespace, a last expression's value is the
    # result, stdout is streamed, an exception (BaseException too: smolagents' final answer
    # is one) is an `error` message; `idle` ends it.
    def execute(self, namespace, request):
        parent = request["header"]["msg_id"]
        self.message(parent, "status", {"execution_state": "busy"})
        out, result, error = io.StringIO(), None, None
        try:
            tree = ast.parse(request["content"]["code"])
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            with contextlib.redirect_stdout(out):
                exec(compile(tree, "<cell>", "exec"), namespace)
                if last is not None:
                    value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
                    result = None if value is None else repr(value)
        except BaseException as e:  # noqa: B036 - the kernel reports every exception
            error = {"ename": type(e).__name__, "evalue": str(e),
                     "traceback": traceback.format_exc().splitlines()}
        if out.getvalue():
            self.message(parent, "stream", {"name": "stdout", "text": out.getvalue()})
        if result is not None:
            self.message(parent, "execute_result", {"data": {"text/plain": result}})
        if error:
            self.message(parent, "error", error)
        self.message(parent, "status", {"execution_state": "idle"})


def one(conn):
    try:
        Client(conn).serve()
    except OSError:
        pass
    finally:
        conn.close()


if __name__ == "__main__":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 8888))
    s.listen()
    while True:
        threading.Thread(target=one, args=(s.accept()[0],), daemon=True).start()
