# SPDX-License-Identifier: Apache-2.0
"""Sandboxes, their containers, checkpoints, network, files and Python contexts, through
kosa8d's API (docs/api.yaml). Every method is one or a few API calls; what kosa8d refuses
is raised as the error class of its answer, with its message."""
import io
import json
import os
import socket
import tarfile
import threading
import time

from . import _http, errors

SIGKILL = 9


class Result:
    """How a process ended: exit_code (128+N for a signal, 137 for an OOM kill), its output
    as bytes, and whether the time limit killed it."""

    def __init__(self, exit_code, stdout, stderr, container=None, signal=0, oom=False,
                 timed_out=False, output=b""):
        self.exit_code = exit_code
        self.stdout = bytes(stdout)
        self.stderr = bytes(stderr)
        self.output = bytes(output)     # stdout and stderr as they interleaved
        self.container = container
        self.signal = signal
        self.oom = oom
        self.timed_out = timed_out

    @property
    def ok(self):
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self):
        """stdout and stderr as they came, decoded (invalid UTF-8 replaced)."""
        return self.output.decode("utf-8", "replace")

    def __repr__(self):
        return "Result(exit_code=%r, stdout=%r, stderr=%r%s)" % (
            self.exit_code, self.stdout[:200], self.stderr[:200],
            ", timed_out=True" if self.timed_out else "")


class Execution:
    """A cell's outcome (docs/interpreter.md "Events"): its output, its results (the main
    one's text in .text), its error, and every event as it came."""

    def __init__(self, events):
        self.events = events
        self.stdout = "".join(e["text"] for e in events if e.get("type") == "stdout")
        self.stderr = "".join(e["text"] for e in events if e.get("type") == "stderr")
        self.results = [e for e in events if e.get("type") == "result"]
        errs = [e for e in events if e.get("type") == "error"]
        self.error = errs[0] if errs else None
        end = events[-1] if events and events[-1].get("type") == "end" else {}
        self.ok = bool(end.get("ok"))
        self.execution_count = end.get("execution_count")
        self.context = end.get("context")

    @property
    def text(self):
        """The main result's text/plain (the repr of the last expression), or None."""
        for r in self.results:
            if r.get("is_main_result"):
                return r["data"].get("text/plain")
        return None

    def __repr__(self):
        return "Execution(text=%r, stdout=%r, error=%r)" % (
            self.text, self.stdout[:200], self.error and self.error.get("name"))


class Client:
    """kosa8d at home (default: $KOSA8_HOME, else ~/.kosa8, else /var/lib/kosa8)."""

    def __init__(self, home=None, timeout=None):
        self.t = _http.Transport(home, timeout)

    def status(self):
        return self.t.call("GET", "/v1/status")

    def sandboxes(self):
        return [Sandbox(s["name"], self) for s in self.t.call("GET", "/v1/sandboxes")]

    def images(self):
        return self.t.call("GET", "/v1/images")

    def load_image(self, path, tag=None, progress=None):
        body = {"path": os.path.abspath(path)}
        if tag:
            body["tag"] = tag
        return self.t.call("POST", "/v1/images/load", body, progress=progress)

    def pull_image(self, image, progress=None):
        return self.t.call("POST", "/v1/images/pull", {"image": image}, progress=progress)

    def audit(self, sandbox=None, action=None, since_seq=None, limit=None):
        q = {k: v for k, v in (("sandbox", sandbox), ("action", action),
                               ("since_seq", since_seq), ("limit", limit)) if v is not None}
        path = "/v1/audit" + ("?" + "&".join("%s=%s" % (k, _http.quote(str(v)))
                                             for k, v in q.items()) if q else "")
        return self.t.call("GET", path)


_default = None


def _client(client):
    global _default
    if client is not None:
        return client
    if _default is None:
        _default = Client()
    return _default


class Sandbox:
    """One sandbox by name. Sandbox.create() makes one (and, used as a context manager,
    removes it at the end of the with block); Sandbox(name) names an existing one."""

    def __init__(self, name, client=None):
        self.name = name
        self.client = _client(client)
        self._t = self.client.t
        self._owned = False
        self.image = None

    # ---- life ----

    @classmethod
    def create(cls, name, image=None, cpus=1, memory_mib=1024, disk_gb=4, egress=None,
               egress_allow=None, mounts=None, idle_pause_s=None, client=None,
               progress=None):
        """Create and boot a sandbox, and pull `image` into it. mounts: [(host, guest)] or
        [(host, guest, ro)] or dicts. The sandbox is removed on leaving a with block."""
        sb = cls(name, client)
        body = {"name": name, "cpus": cpus, "memory_mib": memory_mib, "disk_gb": disk_gb}
        if egress:
            body["egress"] = egress
        if egress_allow:
            body["egress_allow"] = list(egress_allow)
        if idle_pause_s is not None:
            body["idle_pause_s"] = idle_pause_s
        if mounts:
            body["mounts"] = [m if isinstance(m, dict) else
                              {"host": os.path.abspath(m[0]), "guest": m[1],
                               "ro": bool(m[2]) if len(m) > 2 else False} for m in mounts]
        sb._t.call("POST", "/v1/sandboxes", body, progress=progress)
        sb._owned = True
        if image:
            try:
                sb.pull(image, progress=progress)
            except errors.Kosa8Error:
                sb.rm()
                raise
        return sb

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._owned:
            try:
                self.rm()
            except errors.NotFound:
                pass
        return False

    def _p(self, sub=""):
        return "/v1/sandboxes/%s%s" % (_http.quote(self.name), sub)

    def info(self):
        """Everything about it (GET /v1/sandboxes/NAME: containers and stat too)."""
        return self._t.call("GET", self._p())

    def pull(self, image, progress=None):
        r = self._t.call("POST", self._p("/pull"), {"image": image}, progress=progress)
        self.image = self.image or image
        return r

    def rm(self, wipe=False):
        self._t.call("DELETE", self._p("?wipe=1" if wipe else ""))
        self._owned = False

    # ---- processes ----

    @staticmethod
    def _argv(cmd):
        if isinstance(cmd, str):
            return ["sh", "-c", cmd]
        return [str(a) for a in cmd]

    @staticmethod
    def _spec(env, cwd, user, stdin):
        body = {"stdin": stdin is not None}
        if env:
            body["env"] = ["%s=%s" % kv for kv in env.items()] if isinstance(env, dict) \
                else list(env)
        if cwd:
            body["cwd"] = cwd
        if user:
            body["user"] = user
        return body

    def run(self, cmd, image=None, stdin=None, env=None, cwd=None, user=None, timeout=None,
            check=False, on_stdout=None, on_stderr=None):
        """Run cmd (a list, or a string for sh -c) in a new container of image (default: the
        image this object pulled), streaming: on_stdout/on_stderr get each piece as it
        comes. stdin: bytes or str fed to the process. timeout: seconds, then SIGKILL
        (Result.timed_out). check: raise ProcessError on a non-zero exit."""
        image = image or self.image or self._only_image()
        body = dict(self._spec(env, cwd, user, stdin), image=image, argv=self._argv(cmd))
        r = self._pump(self._t.upgrade(self._p("/run"), body), stdin, timeout, on_stdout,
                       on_stderr)
        if check and not r.ok:
            raise errors.ProcessError(r)
        return r

    def start(self, cmd, image=None, env=None, cwd=None, user=None):
        """Start cmd in a new container in the background: its Container."""
        image = image or self.image or self._only_image()
        body = dict(self._spec(env, cwd, user, None), image=image, argv=self._argv(cmd),
                    detach=True)
        r = self._t.call("POST", self._p("/run"), body)
        return Container(self, r["id"])

    def exec(self, container, cmd, stdin=None, env=None, cwd=None, user=None, timeout=None,
             check=False, on_stdout=None, on_stderr=None):
        """Run cmd in a running container (a Container or its id), as run() does."""
        cid = container.id if isinstance(container, Container) else container
        body = dict(self._spec(env, cwd, user, stdin), argv=self._argv(cmd))
        r = self._pump(self._t.upgrade(self._p("/containers/%s/exec" % _http.quote(cid)), body),
                       stdin, timeout, on_stdout, on_stderr)
        if check and not r.ok:
            raise errors.ProcessError(r)
        return r

    def containers(self):
        return [Container(self, c["id"], c) for c in self._t.call("GET", self._p("/containers"))]

    def _only_image(self):
        imgs = self._t.call("GET", "/v1/sandboxes").__iter__()
        for s in imgs:
            if s.get("name") == self.name:
                refs = [i["ref"] for i in s.get("images", [])]
                if len(refs) == 1:
                    return refs[0]
                raise errors.BadRequest("sandbox %s has %d images: say which one" %
                                        (self.name, len(refs)), "bad_request", 400)
        raise errors.NotFound("sandbox '%s' does not exist" % self.name, "not_found", 404)

    @staticmethod
    def _pump(st, stdin, timeout, on_stdout, on_stderr):
        out, err, both = bytearray(), bytearray(), bytearray()
        exit_info, cid, timed_out = None, None, False
        deadline = time.monotonic() + timeout if timeout else None

        def feed():
            data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
            try:
                for i in range(0, len(data), 32768):
                    st.send(_http.STDIN, data[i:i + 32768])
                st.send(_http.STDIN, b"", _http.F_EOF)
            except OSError:
                pass
        if stdin is not None:
            threading.Thread(target=feed, daemon=True).start()
        st.sock.settimeout(0.5)
        frames = st.frames()
        try:
            while True:
                try:
                    t, _, p = next(frames)
                except StopIteration:
                    break
                except socket.timeout:
                    frames = st.frames()        # the generator ended with the timeout
                    if deadline and time.monotonic() > deadline and not timed_out:
                        st.send(_http.SIGNAL, SIGKILL.to_bytes(4, "little"))
                        timed_out = True
                    continue
                if t == _http.STDOUT:
                    out += p
                    both += p
                    if on_stdout and p:
                        on_stdout(bytes(p))
                elif t == _http.STDERR:
                    err += p
                    both += p
                    if on_stderr and p:
                        on_stderr(bytes(p))
                elif t == _http.EVENT:
                    try:
                        ev = json.loads(p)
                        cid = ev.get("id") if isinstance(ev, dict) else None
                    except ValueError:
                        pass
                elif t == _http.EXIT:
                    exit_info = json.loads(p)
                    break
                if deadline and time.monotonic() > deadline and not timed_out:
                    st.send(_http.SIGNAL, SIGKILL.to_bytes(4, "little"))
                    timed_out = True
        finally:
            st.close()
        if not isinstance(exit_info, dict):
            raise errors.Unavailable("the run's stream ended without its exit status",
                                     "unavailable", 0)
        if exit_info.get("error"):
            raise errors.Unavailable(str(exit_info["error"]), "unavailable", 0,
                                     exit_info.get("code"))
        return Result(int(exit_info.get("code", -1)), out, err, cid,
                      int(exit_info.get("signal") or 0), bool(exit_info.get("oom")),
                      timed_out, both)

    # ---- checkpoints ----

    def checkpoint(self, label):
        return self._t.call("POST", self._p("/checkpoints"), {"label": label})

    def checkpoints(self):
        return self._t.call("GET", self._p("/checkpoints"))

    def rewind(self, label):
        """Put the whole machine back to checkpoint `label`."""
        return self._t.call("POST", self._p("/rewind"), {"to": label})

    def fork(self, label, name):
        """A new sandbox from checkpoint `label` of this one (removed with a with block)."""
        self._t.call("POST", self._p("/fork"), {"from": label, "name": name})
        sb = Sandbox(name, self.client)
        sb._owned = True
        sb.image = self.image
        return sb

    def pause(self, in_memory=False):
        return self._t.call("POST", self._p("/pause"), {"in_memory": in_memory})

    def resume(self):
        return self._t.call("POST", self._p("/resume"))

    # ---- network ----

    def egress(self, allow=None, remove=None, mode=None):
        """The network policy and its counts; with allow/remove/mode, changed live first."""
        if allow is None and remove is None and mode is None:
            return self._t.call("GET", self._p("/egress"))
        body = {}
        if allow:
            body["allow"] = list(allow)
        if remove:
            body["remove"] = list(remove)
        if mode:
            body["mode"] = mode
        return self._t.call("POST", self._p("/egress"), body)

    # ---- files (a container's, through the archive API) ----

    def put_file(self, container, path, data, mode=0o644):
        """Write data (bytes or str) at path in a container (its folder must exist)."""
        cid = container.id if isinstance(container, Container) else container
        data = data.encode() if isinstance(data, str) else bytes(data)
        folder, name = os.path.split(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = mode
            ti.mtime = int(time.time())
            t.addfile(ti, io.BytesIO(data))
        self._t.raw("PUT", self._p("/containers/%s/archive?path=%s" % (
            _http.quote(cid), _http.quote(folder or "/"))), buf.getvalue(),
            {"Content-Type": "application/x-tar", "Expect": ""})

    def get_file(self, container, path, max_bytes=64 << 20):
        """The bytes of the regular file at path in a container (at most max_bytes)."""
        cid = container.id if isinstance(container, Container) else container
        raw = self._t.raw("GET", self._p("/containers/%s/archive?path=%s" % (
            _http.quote(cid), _http.quote(path))))
        if len(raw) > max_bytes + 65536:
            raise errors.BadRequest("%s is larger than %d bytes" % (path, max_bytes),
                                    "bad_request", 400)
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as t:
            for m in t:
                if m.isfile():
                    if m.size > max_bytes:
                        raise errors.BadRequest("%s is larger than %d bytes" % (path, max_bytes),
                                                "bad_request", 400)
                    return t.extractfile(m).read()
        raise errors.BadRequest("%s is not a regular file" % path, "bad_request", 400)

    # ---- the interpreter (docs/interpreter.md) ----

    def contexts(self, container=None):
        q = "?container=%s" % _http.quote(container) if container else ""
        return [Context(self, c["id"], c) for c in self._t.call("GET", self._p("/contexts" + q))]

    def create_context(self, image=None, container=None, cwd=None, env=None):
        body = {}
        if container:
            body["container"] = container.id if isinstance(container, Container) else container
        elif image:
            body["image"] = image
        if cwd:
            body["cwd"] = cwd
        if env:
            body["env"] = dict(env)
        c = self._t.call("POST", self._p("/contexts"), body)
        return Context(self, c["id"], c)

    def run_cell(self, code, context="default", env=None, timeout=None, image=None,
                 on_event=None):
        """Run code as a cell of context (an id, a Context, or "default": the sandbox's
        default context, made on first use): an Execution. on_event gets each event as it
        comes (stdout, stderr, result, error, end)."""
        cid = context.id if isinstance(context, Context) else context
        body = {"code": code}
        if env:
            body["env"] = dict(env)
        if timeout:
            body["timeout_s"] = int(timeout)
        if image and cid == "default":
            body["image"] = image
        events = []
        for ev in self._t.stream("POST", self._p("/contexts/%s/run" % _http.quote(cid)), body):
            events.append(ev)
            if on_event:
                on_event(ev)
        return Execution(events)

    def __repr__(self):
        return "Sandbox(%r)" % self.name


class Container:
    def __init__(self, sandbox, id, info=None):
        self.sandbox = sandbox
        self.id = id
        self.info = info or {}

    def exec(self, cmd, **kw):
        return self.sandbox.exec(self, cmd, **kw)

    def stop(self, timeout_s=10):
        self.sandbox._t.call("POST", self.sandbox._p("/containers/%s/stop" % self.id),
                             {"timeout_s": timeout_s})

    def rm(self, timeout_s=10):
        self.sandbox._t.call("DELETE", self.sandbox._p("/containers/%s" % self.id),
                             {"timeout_s": timeout_s})

    def put_file(self, path, data, mode=0o644):
        self.sandbox.put_file(self, path, data, mode)

    def get_file(self, path, max_bytes=64 << 20):
        return self.sandbox.get_file(self, path, max_bytes)

    def __repr__(self):
        return "Container(%r)" % self.id


class Context:
    """A Python context (docs/interpreter.md): variables persist between its cells."""

    def __init__(self, sandbox, id, info=None):
        self.sandbox = sandbox
        self.id = id
        self.info = info or {}

    def run(self, code, env=None, timeout=None, on_event=None):
        return self.sandbox.run_cell(code, self, env, timeout, on_event=on_event)

    def restart(self):
        self.info = self.sandbox._t.call("POST", self.sandbox._p("/contexts/%s/restart" % self.id))
        return self

    def rm(self):
        self.sandbox._t.call("DELETE", self.sandbox._p("/contexts/%s" % self.id))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.rm()
        except errors.NotFound:
            pass
        return False

    def __repr__(self):
        return "Context(%r)" % self.id
