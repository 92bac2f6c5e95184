# SPDX-License-Identifier: Apache-2.0
# driver.py - kosa8's Python interpreter driver: one long-lived process per context
# (docs/interpreter.md). It needs only python3's standard library, and not all of it
# (Debian's python3-minimal has no json module: the JSON here is written by hand).
#
# kosa8d runs `python3 -c <this> kosa8-ctx MODE ...` in a container of the sandbox:
#   create ID CWD   bind /run/kosa8/ctx/ID.sock (0600, in a 0700 folder), fork the
#                   driver into the background (its own session, stdio to /dev/null),
#                   print the context as one JSON line, exit 0 (5: the id is taken)
#   restart ID      end the driver (SIGKILL), start it again with the same id, folder
#                   and environment; print the context (3: no such context)
#   rm ID           end the driver, remove its files (3: no such context)
#   ls              one JSON line per context
#
# The driver accepts one connection at a time (cell.py's), reads one request and runs
# it as a cell: statements run, the value of a last expression is the main result,
# output goes back as JSON lines as it is written:
#   {"type":"start","execution_count":N}
#   {"type":"stdout"|"stderr","text":"..."}
#   {"type":"result","is_main_result":bool,"data":{"text/plain":"...","image/png":"..."}}
#   {"type":"error","name":"...","value":"...","traceback":"..."}
#   {"type":"end","execution_count":N,"ok":bool}
# The connection closing before the cell ends interrupts it (KeyboardInterrupt). Every
# byte of this is hostile to kosa8d, which checks it all again.
import ast
import base64
import builtins
import codecs
import io
import linecache
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
import types

DIR = os.environ.get("KOSA8_CTX_DIR") or "/run/kosa8/ctx"
MARK = "kosa8-ctx"
REQ_MAX = 16 << 20          # a request: the cell and its environment
CHUNK = 32768               # text per stdout/stderr event
FLUSH_S = 0.05              # output is sent at least this often while a cell runs
PARTIAL_S = 0.25            # ... but a line still being written waits up to this long
DATA_MAX = 3 << 20          # one rich result's value (kosa8d takes lines of 4 MiB)

_ESC = {i: "\\u%04x" % i for i in range(32)}
_ESC.update({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"})
_ESC.update({34: '\\"', 92: "\\\\", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def js(v):
    """JSON for str, int, float, bool, None, list, dict (str keys)."""
    if isinstance(v, str):
        return '"' + v.translate(_ESC) + '"'
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return repr(v) if v == v and v not in (float("inf"), float("-inf")) else "null"
    if isinstance(v, dict):
        return "{" + ",".join(js(str(k)) + ":" + js(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(js(x) for x in v) + "]"
    return js(str(v))


def line(obj):
    return (js(obj) + "\n").encode("utf-8", "replace")


def check_id(cid):
    return 0 < len(cid) <= 64 and not cid.strip("abcdefghijklmnopqrstuvwxyz0123456789-_")


def paths(cid):
    base = os.path.join(DIR, cid)
    return base + ".sock", base + ".info", base + ".env"


# ---- the running driver ----

class Conn:
    """The connection of the cell in progress: events go out under one lock; a client
    that left makes every later send a no-op and interrupts the cell."""

    def __init__(self, sock, drv):
        self.sock = sock
        self.drv = drv
        self.lock = threading.Lock()
        self.gone = False

    def send(self, obj):
        data = line(obj)
        with self.lock:
            if self.gone:
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self.gone = True
        if self.gone:
            self.drv.interrupt()


class Output:
    """sys.stdout / sys.stderr while the driver runs: text is kept in one buffer for
    both streams (so their order holds) and sent when a stream switches, past CHUNK,
    on flush, at the end of the cell, and every FLUSH_S by the flusher thread."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, name, drv):
        self.name = name
        self.drv = drv

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        self.drv.emit(self.name, s)
        return len(s)

    def writelines(self, lines):
        for s in lines:
            self.write(s)

    def flush(self):
        self.drv.flush()

    def isatty(self):
        return False

    def fileno(self):
        return 1 if self.name == "stdout" else 2

    def readable(self):
        return False

    def writable(self):
        return True

    @property
    def closed(self):
        return False


class Driver:
    def __init__(self, lsock, cid):
        self.lsock = lsock
        self.cid = cid
        self.count = 0
        self.conn = None
        self.in_cell = False
        self.olock = threading.RLock()
        self.obuf = []           # [name, text] pieces not yet sent
        self.olen = 0
        self.olast = 0.0
        self.main_ident = threading.get_ident()
        self.mod = types.ModuleType("__main__")
        self.ns = self.mod.__dict__
        self.ns["__builtins__"] = builtins
        self.ns["display"] = self.display

    # -- output --
    def emit(self, name, text):
        with self.olock:
            if self.obuf and self.obuf[-1][0] != name:
                self._flush()
            if self.obuf:
                self.obuf[-1][1] += text
            else:
                self.obuf.append([name, text])
            self.olen += len(text)
            self.olast = time.monotonic()
            if self.olen >= CHUNK:
                self._flush()

    def _flush(self):
        conn = self.conn
        for name, text in self.obuf:
            for i in range(0, len(text), CHUNK):
                if conn:
                    conn.send({"type": name, "text": text[i:i + CHUNK]})
        self.obuf = []
        self.olen = 0

    def flush(self):
        with self.olock:
            self._flush()

    def flusher(self):
        """Send what waits every FLUSH_S, but for a line still being written: print()
        writes its text and its newline apart, and one print is one event, unless the
        line stays unfinished for PARTIAL_S (a progress bar), when it goes as it is."""
        while True:
            time.sleep(FLUSH_S)
            with self.olock:
                if not self.obuf:
                    continue
                if not self.obuf[-1][1].endswith("\n") and \
                        time.monotonic() - self.olast < PARTIAL_S:
                    continue
                self._flush()

    def fd_pump(self, fds):
        """Bytes written to fds 1 and 2 directly (subprocesses, C code) as events."""
        dec = {fd: codecs.getincrementaldecoder("utf-8")("replace") for fd in fds}
        names = {fds[0]: "stdout", fds[1]: "stderr"}
        self.pipes = (fds, dec, names)
        while True:
            r, _, _ = select.select(fds, [], [])
            self.drain(r)

    def drain(self, ready=None):
        fds, dec, names = self.pipes
        with self.olock:
            for fd in ready if ready is not None else fds:
                while True:
                    try:
                        b = os.read(fd, 65536)
                    except BlockingIOError:
                        break
                    if not b:
                        break
                    text = dec[fd].decode(b)
                    if text and self.conn is not None:
                        self.emit(names[fd], text)
                    if ready is not None:
                        break

    # -- interrupts --
    def interrupt(self):
        if self.in_cell:
            signal.pthread_kill(self.main_ident, signal.SIGINT)

    def on_sigint(self, signum, frame):
        if self.in_cell:
            raise KeyboardInterrupt

    def watch(self, conn):
        """The client's side closing before the cell ends interrupts it."""
        try:
            while conn.sock.recv(4096):
                pass
        except OSError:
            pass
        with conn.lock:
            conn.gone = True
        if self.conn is conn:
            self.interrupt()

    # -- results --
    def bundle(self, v):
        data = {}
        try:
            data["text/plain"] = repr(v)
        except BaseException as e:  # a broken __repr__ is the cell's problem
            data["text/plain"] = "<repr failed: %s>" % type(e).__name__
        methods = (("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"),
                   ("image/svg+xml", "_repr_svg_"), ("image/png", "_repr_png_"),
                   ("image/jpeg", "_repr_jpeg_"), ("text/latex", "_repr_latex_"),
                   ("application/json", "_repr_json_"),
                   ("application/javascript", "_repr_javascript_"),
                   ("application/pdf", "_repr_pdf_"))
        if isinstance(v, type):
            return data
        for mime, meth in methods:
            try:
                f = getattr(v, meth, None)
                r = f() if callable(f) else None
                if isinstance(r, tuple) and r:
                    r = r[0]
                if isinstance(r, (bytes, bytearray)):
                    r = base64.b64encode(bytes(r)).decode("ascii")
                elif mime == "application/json" and isinstance(r, (dict, list)):
                    r = js(r)
                if isinstance(r, str) and len(r) <= DATA_MAX:
                    data[mime] = r
            except Exception:
                pass
        return data

    def display(self, *objs):
        """display(obj): a rich result that is not the cell's main result."""
        for o in objs:
            self.flush()
            if self.conn:
                self.conn.send({"type": "result", "is_main_result": False,
                                "data": self.bundle(o)})

    def patch_show(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None and getattr(plt, "show", None) is not self.figures:
            try:
                plt.show = self.figures
            except Exception:
                pass

    def figures(self, *args, **kwargs):
        """Open matplotlib figures are shown at the end of a cell and closed, as
        Jupyter's inline backend does."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            nums = plt.get_fignums()
        except Exception:
            return
        for n in nums:
            try:
                fig = plt.figure(n)
                buf = io.BytesIO()
                fig.savefig(buf, format="png", bbox_inches="tight")
                png = base64.b64encode(buf.getvalue()).decode("ascii")
                if len(png) <= DATA_MAX and self.conn:
                    self.conn.send({"type": "result", "is_main_result": False,
                                    "data": {"text/plain": repr(fig), "image/png": png}})
            except Exception:
                pass
        try:
            plt.close("all")
        except Exception:
            pass

    def error(self, e, skip):
        tb = e.__traceback__
        for _ in range(skip):
            if tb is not None:
                tb = tb.tb_next
        if isinstance(e, SyntaxError):
            text = "".join(traceback.format_exception_only(type(e), e))
        else:
            text = "".join(traceback.format_exception(type(e), e, tb))
        try:
            value = str(e)
        except BaseException:
            value = "<str failed>"
        if self.conn:
            self.conn.send({"type": "error", "name": type(e).__name__, "value": value,
                            "traceback": text})

    # -- a cell --
    def run(self, code, env):
        self.count += 1
        n = self.count
        self.conn.send({"type": "start", "execution_count": n})
        fname = "<cell-%d>" % n
        lines = code.splitlines(True)
        linecache.cache[fname] = (len(code), None, lines, fname)
        saved = {}
        for k, v in env:
            saved[k] = os.environ.get(k)
            os.environ[k] = v
        ok = True
        try:
            try:
                tree = ast.parse(code, fname, "exec")
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
                body = compile(tree, fname, "exec", flags)
                expr = compile(last, fname, "eval", flags) if last else None
            except SyntaxError as e:
                ok = False
                self.error(e, 0)
                return
            try:
                self.patch_show()
                self.in_cell = True
                self.call(body)
                value = self.call(expr) if expr else None
                self.in_cell = False
                self.flush()
                self.drain()
                if value is not None:
                    builtins._ = value
                    self.conn.send({"type": "result", "is_main_result": True,
                                    "data": self.bundle(value)})
            except BaseException as e:
                self.in_cell = False
                ok = False
                self.flush()
                self.error(e, 2)
        finally:
            self.in_cell = False
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            self.figures()
            self.patch_show()
            self.flush()
            self.drain()
            self.flush()
            self.conn.send({"type": "end", "execution_count": n, "ok": ok})

    def call(self, code):
        r = eval(code, self.ns)
        if code.co_flags & 0x80:   # CO_COROUTINE: a cell with a top-level await
            import asyncio
            r = asyncio.new_event_loop().run_until_complete(r)
        return r

    def handle(self, sock):
        sock.settimeout(30)
        try:
            req = read_request(sock)
        except (OSError, ValueError) as e:
            try:
                sock.sendall(line({"type": "error", "name": "RequestError", "value": str(e),
                                   "traceback": ""}))
            except OSError:
                pass
            return
        sock.settimeout(None)
        conn = Conn(sock, self)
        self.conn = conn
        threading.Thread(target=self.watch, args=(conn,), daemon=True).start()
        try:
            self.run(req["code"], req["env"])
        finally:
            self.conn = None

    def serve(self):
        signal.signal(signal.SIGINT, self.on_sigint)
        threading.Thread(target=self.flusher, daemon=True).start()
        while True:
            try:
                sock, _ = self.lsock.accept()
            except KeyboardInterrupt:
                continue
            except OSError:
                time.sleep(0.1)
                continue
            try:
                self.handle(sock)
            except KeyboardInterrupt:
                pass            # an interrupt that came as the cell ended
            finally:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


def read_request(sock):
    """K8CELL1\\n, then fields "NAME LEN\\n" + LEN bytes, then END\\n. Fields: code (once),
    env (K=V, any number)."""
    buf = b""

    def need(n):
        nonlocal buf
        while len(buf) < n:
            b = sock.recv(min(1 << 20, REQ_MAX))
            if not b:
                raise ValueError("the request ended early")
            buf += b
            if len(buf) > REQ_MAX + 4096:
                raise ValueError("the request is too large")

    def get_line():
        nonlocal buf
        while b"\n" not in buf[:256]:
            if len(buf) >= 256:
                raise ValueError("a bad request line")
            need(len(buf) + 1)
        i = buf.index(b"\n")
        ln, buf = buf[:i], buf[i + 1:]
        return ln.decode("ascii", "replace")

    if get_line() != "K8CELL1":
        raise ValueError("not a kosa8 cell request")
    req = {"code": "", "env": []}
    while True:
        ln = get_line()
        if ln == "END":
            return req
        name, _, n = ln.partition(" ")
        if not n.isdigit() or int(n) > REQ_MAX:
            raise ValueError("a bad field length")
        need(int(n))
        val, buf = buf[:int(n)].decode("utf-8", "replace"), buf[int(n):]
        if name == "code":
            req["code"] = val
        elif name == "env":
            k, eq, v = val.partition("=")
            if eq and k:
                req["env"].append((k, v))


def start_driver(cid, cwd, env):
    """Bind the socket, fork the driver; return its pid once it runs in the background."""
    sock_path, info_path, env_path = paths(cid)
    os.makedirs(DIR, 0o700, exist_ok=True)
    os.chmod(DIR, 0o700)
    old = os.umask(0o077)
    try:
        ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ls.bind(sock_path)
    finally:
        os.umask(old)
    ls.listen(16)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setsid()
            os.chdir(cwd)
            null = os.open("/dev/null", os.O_RDWR)
            os.dup2(null, 0)
            outs = []
            for fd in (1, 2):
                pr, pw = os.pipe()
                os.dup2(pw, fd)
                os.close(pw)
                os.set_blocking(pr, False)
                outs.append(pr)
            os.close(null)
            os.environ.clear()
            os.environ.update(env)
            os.environ.setdefault("MPLBACKEND", "Agg")
            import warnings
            warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown")
            if "" not in sys.path:
                sys.path.insert(0, "")
            drv = Driver(ls, cid)
            sys.stdout = Output("stdout", drv)
            sys.stderr = Output("stderr", drv)
            sys.stdin = io.StringIO("")
            sys.modules["__main__"] = drv.mod
            threading.Thread(target=drv.fd_pump, args=(outs,), daemon=True).start()
            while not hasattr(drv, "pipes"):
                time.sleep(0.001)
            os.write(w, b"1")
            os.close(w)
            drv.serve()
        finally:
            os._exit(1)
    os.close(w)
    ok = os.read(r, 1)
    os.close(r)
    ls.close()
    if ok != b"1":
        os.waitpid(pid, 0)
        try:
            os.unlink(sock_path)
        except OSError:
            pass
        raise OSError("the driver did not start")
    with open(info_path, "w") as f:
        f.write("pid=%d\nstart=%s\ncwd=%s\ncreated=%f\n" % (pid, proc_start(pid), cwd,
                                                          time.time()))
    fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(b"\0".join((k + "=" + v).encode("utf-8", "surrogateescape")
                           for k, v in env.items()))
    return pid


# ---- the control modes ----

def proc_start(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            st = f.read()
        fields = st[st.rindex(b")") + 2:].split()
        return "%s:%s" % (fields[19].decode(), fields[0].decode())   # starttime, state
    except (OSError, ValueError, IndexError):
        return ""


def read_info(cid):
    info = {}
    try:
        with open(paths(cid)[1]) as f:
            for ln in f:
                k, _, v = ln.rstrip("\n").partition("=")
                info[k] = v
    except OSError:
        return None
    return info


def alive(info):
    """The driver of info runs: same pid, same start time, not a zombie."""
    try:
        pid = int(info.get("pid", ""))
    except ValueError:
        return False
    cur = proc_start(pid)
    want = info.get("start", "").split(":")[0]
    return bool(cur) and cur.split(":")[0] == want and cur.split(":")[1] != "Z"


def stop(cid, info):
    if info and alive(info):
        pid = int(info["pid"])
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        end = time.time() + 10
        while alive(info) and time.time() < end:
            try:
                os.waitpid(pid, os.WNOHANG)     # ours only when we started it
            except OSError:
                pass
            time.sleep(0.01)
    try:
        os.unlink(paths(cid)[0])
    except OSError:
        pass


def context_json(cid, info):
    return {"id": cid, "pid": int(info.get("pid", "0") or 0), "alive": alive(info),
            "cwd": info.get("cwd", ""), "created": float(info.get("created", "0") or 0),
            "language": "python"}


def base_env():
    """The container's environment (its init's), under what kosa8d passed."""
    env = {}
    try:
        with open("/proc/1/environ", "rb") as f:
            for kv in f.read().split(b"\0"):
                k, eq, v = kv.partition(b"=")
                if eq and k:
                    env[k.decode("utf-8", "surrogateescape")] = v.decode("utf-8",
                                                                         "surrogateescape")
    except OSError:
        pass
    env.update(os.environ)
    return env


def read_env(cid):
    try:
        with open(paths(cid)[2], "rb") as f:
            data = f.read()
    except OSError:
        return None
    env = {}
    for kv in data.split(b"\0"):
        k, eq, v = kv.partition(b"=")
        if eq and k:
            env[k.decode("utf-8", "surrogateescape")] = v.decode("utf-8", "surrogateescape")
    return env


def fail(code, msg):
    os.write(2, (msg + "\n").encode("utf-8", "replace"))
    return code


def main(argv):
    if len(argv) < 2 or argv[0] != MARK:
        return fail(2, "usage: driver.py kosa8-ctx create|restart|rm|ls ...")
    mode, args = argv[1], argv[2:]
    if mode == "ls":
        try:
            names = sorted(os.listdir(DIR))
        except OSError:
            names = []
        for n in names:
            if n.endswith(".info") and check_id(n[:-5]):
                info = read_info(n[:-5])
                if info is not None:
                    os.write(1, line(context_json(n[:-5], info)))
        return 0
    if not args or not check_id(args[0]):
        return fail(2, "a bad context id")
    cid = args[0]
    info = read_info(cid)
    if mode == "create":
        if len(args) != 2 or not args[1].startswith("/") or "\n" in args[1]:
            return fail(2, "usage: create ID /CWD")
        if info is not None and alive(info):
            return fail(5, "context %s exists" % cid)
        if not os.path.isdir(args[1]):
            return fail(2, "no folder %s in the container" % args[1])
        stop(cid, info)
        start_driver(cid, args[1], base_env())
    elif mode == "restart":
        if info is None:
            return fail(3, "no such context")
        env = read_env(cid) or base_env()
        stop(cid, info)
        cwd = info.get("cwd") or "/"
        start_driver(cid, cwd if os.path.isdir(cwd) else "/", env)
    elif mode == "rm":
        if info is None:
            return fail(3, "no such context")
        stop(cid, info)
        for p in paths(cid)[1:]:
            try:
                os.unlink(p)
            except OSError:
                pass
        return 0
    else:
        return fail(2, "unknown mode %s" % mode)
    os.write(1, line(context_json(cid, read_info(cid))))
    return 0


sys.exit(main(sys.argv[1:]))
