# SPDX-License-Identifier: Apache-2.0
"""kosa8d's socket (docs/reference/api.md, docs/api.yaml): HTTP/1.1 over a unix socket, JSON
answers, NDJSON progress and event streams, and the upgrade to an exec stream whose
frames are docs/protocol.md's (little-endian: u32 length, u16 type, u16 flags, u32 id)."""
import http.client
import json
import os
import socket
import struct
import urllib.parse

from . import errors

SYSTEM_HOME = "/var/lib/kosa8"

# frame types (src/common/proto.h)
STDIN, STDOUT, STDERR, EXIT, EVENT, SIGNAL = 4, 5, 6, 8, 9, 12
F_EOF = 1
HDR = struct.Struct("<IHHI")
FRAME_MAX = 256 * 1024
LINE_MAX = 8 << 20


def default_home():
    """$KOSA8_HOME, else ~/.kosa8 when it exists, else the service's /var/lib/kosa8 when it
    exists, else ~/.kosa8 (the CLI's rule)."""
    if os.environ.get("KOSA8_HOME"):
        return os.environ["KOSA8_HOME"]
    user = os.path.join(os.path.expanduser("~"), ".kosa8")
    if os.path.isdir(user) or not os.path.isdir(SYSTEM_HOME):
        return user
    return SYSTEM_HOME


def quote(s):
    return urllib.parse.quote(s, safe="")


class _Conn(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("kosa8", timeout=timeout)
        self.sock_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.sock_path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            s.close()
            raise errors.DaemonNotRunning(
                "the daemon is not running (no socket at %s); start it with: kosa8 daemon "
                "start" % self.sock_path, "unavailable", 0) from e
        self.sock = s


class Transport:
    def __init__(self, home=None, timeout=None):
        self.home = home or default_home()
        self.sock = os.path.join(self.home, "kosa8d.sock")
        self.timeout = timeout

    def _send(self, method, path, body, timeout):
        c = _Conn(self.sock, timeout if timeout is not None else self.timeout)
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json, application/x-ndjson"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            c.request(method, path, body=data, headers=headers)
            return c, c.getresponse()
        except errors.Kosa8Error:
            c.close()
            raise
        except OSError as e:
            c.close()
            raise errors.Unavailable("lost the connection to kosa8d: %s" % e, "unavailable",
                                     0) from e

    @staticmethod
    def _error(r):
        raw = r.read(1 << 20)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        return errors.from_answer(r.status, body)

    def call(self, method, path, body=None, timeout=None, progress=None):
        """One request: the JSON answer, or a progress stream's result (its progress lines
        go to progress(obj)); an error answer raises its class."""
        c, r = self._send(method, path, body, timeout)
        try:
            if r.status // 100 != 2:
                raise self._error(r)
            if (r.getheader("Content-Type") or "").startswith("application/x-ndjson"):
                for obj in self._lines(r):
                    if "progress" in obj:
                        if progress:
                            progress(obj["progress"])
                    elif "result" in obj:
                        return obj["result"]
                    elif "error" in obj:
                        raise errors.from_answer(500, obj)
                raise errors.Unavailable("kosa8d's stream ended without its result",
                                         "unavailable", 0)
            raw = r.read()
            return json.loads(raw) if raw.strip() else {}
        finally:
            c.close()

    def stream(self, method, path, body=None, timeout=None):
        """An event stream (a cell): yields each line's object as it arrives."""
        c, r = self._send(method, path, body, timeout)
        try:
            if r.status // 100 != 2:
                raise self._error(r)
            yield from self._lines(r)
        finally:
            c.close()

    def raw(self, method, path, data=None, headers=None, timeout=None):
        """A request with a raw body and a raw answer (archives): (status, bytes)."""
        c = _Conn(self.sock, timeout if timeout is not None else self.timeout)
        try:
            c.request(method, path, body=data, headers=headers or {})
            r = c.getresponse()
            if r.status // 100 != 2:
                raise self._error(r)
            return r.read()
        finally:
            c.close()

    @staticmethod
    def _lines(r):
        while True:
            line = r.readline(LINE_MAX + 1)
            if not line:
                return
            if len(line) > LINE_MAX:
                raise errors.ProtocolError("a line longer than %d bytes" % LINE_MAX)
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as e:
                    raise errors.ProtocolError("kosa8d sent a line that is not JSON") from e

    def upgrade(self, path, body, timeout=None):
        """POST path asking for an exec stream: an ExecStream, or the error raised."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout if timeout is not None else self.timeout)
        try:
            s.connect(self.sock)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            s.close()
            raise errors.DaemonNotRunning("the daemon is not running (no socket at %s)" %
                                          self.sock, "unavailable", 0) from e
        data = json.dumps(body).encode()
        s.sendall(("POST %s HTTP/1.1\r\nHost: kosa8\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\nConnection: Upgrade\r\nUpgrade: kosa8-stream\r\n"
                   "\r\n" % (path, len(data))).encode() + data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            got = s.recv(65536)
            if not got or len(buf) > 65536:
                s.close()
                raise errors.ProtocolError("kosa8d's answer ended in its head")
            buf += got
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        if status == 101:
            return ExecStream(s, rest)
        hdrs = {k.strip().lower(): v.strip() for k, v in
                (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        body = rest
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            body = _read_chunked(s, rest)
        else:
            n = int(hdrs.get("content-length", "0"))
            while len(body) < n:
                got = s.recv(65536)
                if not got:
                    break
                body += got
        s.close()
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        raise errors.from_answer(status, obj)


def _read_chunked(s, have):
    out = b""
    while True:
        while b"\r\n" not in have:
            got = s.recv(65536)
            if not got:
                return out
            have += got
        size_line, have = have.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        while len(have) < size + 2:
            got = s.recv(65536)
            if not got:
                return out + have
            have += got
        out += have[:size]
        have = have[size + 2:]


class ExecStream:
    """The frames of a run or exec after the upgrade (stream id 1)."""

    def __init__(self, sock, extra):
        self.sock = sock
        self.buf = extra

    def send(self, type_, data=b"", flags=0):
        self.sock.sendall(HDR.pack(len(data), type_, flags, 1) + data)

    def frames(self):
        """Yields (type, flags, payload) until the daemon closes."""
        while True:
            while len(self.buf) < HDR.size:
                got = self.sock.recv(65536)
                if not got:
                    return
                self.buf += got
            n, t, fl, _ = HDR.unpack(self.buf[:HDR.size])
            if n > FRAME_MAX:
                raise errors.ProtocolError("a frame of %d bytes" % n)
            while len(self.buf) < HDR.size + n:
                got = self.sock.recv(65536)
                if not got:
                    return
                self.buf += got
            payload = self.buf[HDR.size:HDR.size + n]
            self.buf = self.buf[HDR.size + n:]
            yield t, fl, payload

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
