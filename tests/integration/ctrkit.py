# SPDX-License-Identifier: Apache-2.0
# ctrkit.py - a containerd of the test's own for containerd-shim-kosa8-v2 (docs/containerd.md):
# Debian's containerd 1.6 with its own root, state directory, config and sockets under a
# temporary folder (never the machine's /run/containerd or /var/lib/containerd), the shim
# on its PATH, and the python test image imported through `ctr image import`.
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import BIN, wait_for

IMAGE = "docker.io/library/python:3.12-slim"
RUNTIME = "io.containerd.kosa8.v2"

# The CRI part of the config is the one docs/containerd.md documents: containerd must load
# it (the test checks the plugin is there); no kubelet or crictl drives it here.
CONFIG = """version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/c.sock"
[ttrpc]
  address = "{d}/c.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/python:3.12-slim"
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kosa8]
    runtime_type = "io.containerd.kosa8.v2"
    pod_annotations = ["io.kosa8.*"]
    container_annotations = ["io.kosa8.*"]
"""


class Containerd:
    """One containerd process and ctr against it."""

    def __init__(self, kosa8_home, shim_config=None):
        # Short: the shim's socket lives under its state_dir (108-byte unix paths).
        self.dir = tempfile.mkdtemp(prefix="k8c-", dir="/tmp")
        self.sock = os.path.join(self.dir, "c.sock")
        self.shim_config = os.path.join(self.dir, "shim.json")
        self.kosa8_home = kosa8_home
        self.write_shim_config(shim_config or {})
        with open(os.path.join(self.dir, "config.toml"), "w") as f:
            f.write(CONFIG.format(d=self.dir))
        self.proc = None
        self.start()

    def write_shim_config(self, cfg):
        cfg = dict(cfg)
        cfg.setdefault("state_dir", os.path.join(self.dir, "shim"))
        cfg.setdefault("home", self.kosa8_home)
        with open(self.shim_config, "w") as f:
            json.dump(cfg, f)

    def start(self):
        env = dict(os.environ, PATH=BIN + ":" + os.environ.get("PATH", ""),
                   KOSA8_SHIM_CONFIG=self.shim_config)
        env.pop("KOSA8_HOME", None)     # the shim's config names the home
        self.log = open(os.path.join(self.dir, "containerd.log"), "ab")
        self.proc = subprocess.Popen(["containerd", "--config",
                                      os.path.join(self.dir, "config.toml")],
                                     stdout=self.log, stderr=self.log, env=env,
                                     start_new_session=True)
        ok = wait_for(lambda: self.ctr("version").returncode == 0, 30)
        assert ok, "containerd did not start: " + self.log_text()[-3000:]

    def restart(self):
        """containerd stopped (SIGTERM) and started again; the shims go on."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.start()

    def log_text(self):
        with open(os.path.join(self.dir, "containerd.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def ctr(self, *args, timeout=300, input=None):
        args = list(args)
        # ctr's own FIFOs in the test's folder too, not /run/containerd/fifo
        fifo = ["--fifo-dir", os.path.join(self.dir, "fifo")]
        if args[:1] == ["run"]:
            args[1:1] = fifo
        elif args[:2] == ["task", "exec"]:
            args[2:2] = fifo
        return subprocess.run(["ctr", "-a", self.sock] + args, capture_output=True,
                              text=True, timeout=timeout, input=input)

    def check(self, *args, **kw):
        p = self.ctr(*args, **kw)
        assert p.returncode == 0, "ctr %s: %d %s%s" % (" ".join(args), p.returncode, p.stdout,
                                                       p.stderr)
        return p

    def run(self, name, *cmd, flags=(), **kw):
        """ctr run --rm with the kosa8 runtime: the CompletedProcess."""
        return self.ctr("run", "--rm", "--runtime", RUNTIME, *flags, IMAGE, name, *cmd, **kw)

    def tasks(self):
        """{task id: status} from ctr task ls."""
        out = {}
        for line in self.check("task", "ls").stdout.splitlines()[1:]:
            f = line.split()
            if len(f) >= 3:
                out[f[0]] = f[2]
        return out

    def shim_pids(self):
        """pids of containerd-shim-kosa8-v2 processes started by this containerd."""
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv = f.read().split(b"\0")
                with open("/proc/%s/environ" % p, "rb") as f:
                    env = f.read()
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-kosa8-v2") and \
                    self.shim_config.encode() in env:
                pids.append(int(p))
        return pids

    def import_image(self, layout):
        """The python test image: an OCI layout made a docker archive, imported by ctr."""
        tar = os.path.join(self.dir, "python.tar")
        p = subprocess.run(["skopeo", "copy", "-q", "oci:%s:3.12-slim" % layout,
                            "docker-archive:%s:%s" % (tar, IMAGE)], capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        self.check("image", "import", tar, timeout=600)
        # CRI's namespace too (test_88_cri: pods, and the sandbox image above)
        self.check("-n", "k8s.io", "image", "import", tar, timeout=600)
        os.unlink(tar)

    def stop(self):
        # Tasks first (their shims and sandboxes), then containerd.
        for t in list(self.tasks()):
            self.ctr("task", "kill", "-s", "SIGKILL", t)
        wait_for(lambda: all(s == "STOPPED" for s in self.tasks().values()), 30)
        for t in list(self.tasks()):
            self.ctr("task", "rm", "-f", t)
        for line in self.ctr("container", "ls", "-q").stdout.split():
            self.ctr("container", "rm", line)
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.shim_pids():
            os.kill(pid, signal.SIGKILL)
        # containerd's snapshots may still be mounted by tasks the test broke
        subprocess.run(["sh", "-c", "grep -o ' %s[^ ]*' /proc/mounts | sort -r | "
                        "xargs -r -n1 umount -l" % self.dir], capture_output=True)
        if os.environ.get("KOSA8_KEEP_HOME") is None:
            shutil.rmtree(self.dir, ignore_errors=True)


def wait_task(c, name, status, timeout=60):
    ok = wait_for(lambda: c.tasks().get(name) == status, timeout)
    assert ok, "task %s is %s, not %s" % (name, c.tasks().get(name), status)
    return time.time()


@pytest.fixture(scope="session")
def ctrd(home, python_layout):
    """One containerd for the session's containerd files (their lanes.txt group keeps them
    in one pytest), with the python image imported."""
    c = Containerd(home.path)
    c.import_image(python_layout)
    yield c
    c.stop()
    # the rootfs images the shim converted into the shared home (docs/containerd.md)
    for i in home.json("image", "ls"):
        if i["ref"].startswith("localhost/kosa8-shim-rootfs:"):
            home("image", "rm", i["ref"])


def owned(home, task):
    """The kosa8 sandboxes made for containerd task (or pod) `task`."""
    return [s for s in home.json("sandbox", "ls")
            if (s.get("owner") or {}).get("id") == task]
