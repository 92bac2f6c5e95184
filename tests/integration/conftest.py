# SPDX-License-Identifier: Apache-2.0
# conftest.py - end-to-end fixtures: the real kosa8 CLI, a real kosa8d, real QEMU VMs.
#
# One daemon and one booted sandbox are shared by the whole session (booting under TCG
# costs seconds); tests that must break things (kill -9, tampering) use their own home.
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The machine-wide build cache (test images, npm sets): `import k8cache` in a test file.
sys.path.insert(0, os.path.join(TOP, "scripts"))
BIN = os.environ.get("KOSA8_BIN", os.path.join(TOP, "build", "bin"))
KOSA8 = os.path.join(BIN, "kosa8")


def run(args, home, input=None, timeout=300, check=False, env_extra=None):
    """Run the CLI; returns CompletedProcess with text stdout/stderr."""
    env = dict(os.environ, KOSA8_HOME=home)
    if env_extra:
        env.update(env_extra)
    p = subprocess.run([KOSA8] + list(args), input=input, capture_output=True, text=True,
                       timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError("kosa8 %s failed (%d): %s%s" % (" ".join(args), p.returncode,
                                                             p.stdout, p.stderr))
    return p


def run_json(args, home, **kw):
    p = run(list(args) + ["--json"], home, check=True, **kw)
    return json.loads(p.stdout)


def daemon_pid(home):
    with open(os.path.join(home, "kosa8d.lock")) as f:
        return int(f.read().strip() or 0)


class Home:
    def __init__(self, path):
        self.path = path

    def __call__(self, *args, **kw):
        return run(args, self.path, **kw)

    def json(self, *args, **kw):
        return run_json(args, self.path, **kw)

    def start(self, *extra):
        return run(["daemon", "start"] + list(extra), self.path, check=True, timeout=200)

    def stop(self):
        return run(["daemon", "stop"], self.path, timeout=120)


def new_home(prefix):
    # Short paths: unix socket names are limited to 108 bytes.
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


@pytest.fixture(scope="session")
def python_layout():
    """The python test image (debootstrap minbase + python3), built once and cached."""
    out = subprocess.run([os.path.join(TOP, "scripts", "test-image.sh")], capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def own_home(prefix, python_layout, config=None, start_args=()):
    """A daemon of a module's own (its config.json, its start flags), with the python
    image loaded; a generator for a module fixture: yields the Home, then stops it."""
    h = Home(new_home(prefix))
    if config is not None:
        with open(os.path.join(h.path, "config.json"), "w") as f:
            json.dump(config, f)
    h.start(*start_args)
    h("image", "load", python_layout, "--tag", "python:3.12-slim", check=True, timeout=600)
    yield h
    h.stop()
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(h.path, ignore_errors=True)


def make_sandbox(h, name, *flags, image="python:3.12-slim"):
    """A small sandbox (1 vCPU, 512 MiB) with the python image pulled; returns its name."""
    p = h("sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2", *flags,
          timeout=300)
    assert p.returncode == 0, "create %s %s: %s%s" % (name, flags, p.stdout, p.stderr)
    h("sandbox", "pull", name, image, check=True, timeout=600)
    return name


@pytest.fixture(scope="session")
def home():
    h = Home(new_home("k8t-"))
    h.start()
    yield h
    h.stop()
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(h.path, ignore_errors=True)


@pytest.fixture(scope="session")
def loaded(home, python_layout):
    home("image", "load", python_layout, "--tag", "python:3.12-slim", check=True, timeout=600)
    return "python:3.12-slim"


@pytest.fixture(scope="session")
def sandbox(home, loaded):
    """One warm sandbox for every test that does not break it."""
    home("sandbox", "create", "shared", "--cpus", "1", "--memory", "512", "--disk", "2",
         check=True, timeout=300)
    home("sandbox", "pull", "shared", loaded, check=True, timeout=600)
    return "shared"


def _cgroup_limits(pid):
    """memory (bytes), cpu (CPUs of quota) and pids limits of the cgroups holding pid,
    read from the host's cgroup files (v1 or v2); a limit whose file is absent (a root
    cgroup has none) is left out."""
    out = {}
    with open("/proc/%d/cgroup" % pid) as f:
        lines = [l.rstrip("\n").split(":", 2) for l in f]
    root = "/sys/fs/cgroup"

    def val(path):
        with open(path) as f:
            return f.read().split()
    for _, ctl, path in lines:
        ctls = ctl.split(",")
        try:
            if ctl == "":                               # v2
                d = root + path if not os.path.isdir(root + "/unified") else None
                if d and os.path.exists(d + "/memory.max"):
                    out["memory"] = int(val(d + "/memory.max")[0])
                    q, per = val(d + "/cpu.max")
                    out["cpu"] = int(q) / int(per)
                    out["pids"] = int(val(d + "/pids.max")[0])
            if "memory" in ctls:
                out["memory"] = int(val(root + "/memory" + path + "/memory.limit_in_bytes")[0])
            if "cpu" in ctls:
                d = root + "/cpu" + path
                out["cpu"] = int(val(d + "/cpu.cfs_quota_us")[0]) / \
                    int(val(d + "/cpu.cfs_period_us")[0])
            if "pids" in ctls:
                out["pids"] = int(val(root + "/pids" + path + "/pids.max")[0])
        except FileNotFoundError:
            continue
    return out


def host_cgroup_limits(home, pid, skip=True):
    """The host limits on QEMU's pid (_cgroup_limits: memory, cpu and pids, each
    asserted present). A daemon that says it has no usable cgroups (a property of the
    host) skips the calling test, saying so, or with skip=False gives None (a test that
    checks more than the limits goes on); one that says it has them must have put QEMU in
    them."""
    cg = home.json("daemon", "status")["cgroup"]
    if not cg["usable"]:
        if skip:
            pytest.skip("host: kosa8d has no usable cgroups here: %s" % cg.get("note"))
        return None
    lim = _cgroup_limits(pid)
    assert set(lim) == {"memory", "cpu", "pids"}, ("QEMU %d is not in kosa8's cgroups" % pid,
                                                   lim)
    return lim


def recv_all(s):
    """Everything a socket sends until its peer closes (or shuts down) its side."""
    out = b""
    while True:
        d = s.recv(65536)
        if not d:
            return out
        out += d


def wait_for(pred, timeout=30, step=0.2):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


# Under CI=true a skipped test is a failure: a missing binary or tool must fail the run,
# not skip a module silently. A skip that CI cannot act on (a property of the host, such as
# no KVM) says so by starting its reason with "host:"; those stay skips.
def _ci():
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _skip_fails_under_ci(rep):
    if not _ci() or not rep.skipped or hasattr(rep, "wasxfail"):
        return
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    if reason.startswith("Skipped: "):
        reason = reason[len("Skipped: "):]
    if reason.startswith("host:"):
        return
    rep.outcome = "failed"
    rep.longrepr = "skipped under CI=true, which fails instead: %s" % reason


def _daemon_stacks():
    """Every kosa8d's threads as gdb prints them, with its KOSA8_HOME: what a hang left
    behind, so that an intermittent one is diagnosed from the run that saw it."""
    out = []
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open("/proc/%d/comm" % pid) as f:
                if f.read().strip() != "kosa8d":
                    continue
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        home = env.get(b"KOSA8_HOME", b"?").decode(errors="replace")
        try:
            bt = subprocess.run(["gdb", "-q", "-batch", "-p", str(pid), "-ex",
                                 "thread apply all bt 25"], capture_output=True, text=True,
                                timeout=90).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            bt = "(gdb: %s)" % e
        out.append("== kosa8d %d (KOSA8_HOME=%s)\n%s" % (pid, home, bt))
    return "\n".join(out) or "(no kosa8d running)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    _skip_fails_under_ci(rep)
    if rep.when == "call" and rep.failed and call.excinfo is not None and (
            call.excinfo.errisinstance(subprocess.TimeoutExpired) or
            "timed out" in str(call.excinfo.value)):
        rep.sections.append(("kosa8d threads after the timeout", _daemon_stacks()))


def wait_or_fail(pred, what, timeout=30, step=0.2):
    """wait_for that asserts: the event a test waits for must happen."""
    v = wait_for(pred, timeout, step)
    assert v, "timed out after %ss waiting for %s" % (timeout, what)
    return v


class UnixHTTP(http.client.HTTPConnection):
    """HTTP/1.1 over a daemon's unix socket."""

    def __init__(self, path, timeout=120):
        super().__init__("kosa8", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def sock_api(home, method, url, body=None, sock="kosa8d.sock"):
    """One request on a socket of home's daemon: (status, headers, body bytes). A body is
    sent at once (an empty Expect header: no wait for 100 Continue)."""
    c = UnixHTTP(os.path.join(home.path, sock))
    c.request(method, url, body=body, headers={"Expect": ""} if body is not None else {})
    r = c.getresponse()
    data = r.read()
    hdrs = dict(r.getheaders())
    c.close()
    return r.status, hdrs, data
