# SPDX-License-Identifier: Apache-2.0
# The sidecars dying: kosa8-net takes the sandbox's network down (not the VM, not the
# daemon) and says so; kosa8-fs is started again and the shared folder works again.
# Traffic only to 127.0.0.1 (the guest reaches it as 10.0.2.2 when 127.0.0.1 is listed).
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading

import pytest

from conftest import wait_for

CONNECT = ("import socket, sys\n"
           "try:\n"
           "    s = socket.create_connection(('10.0.2.2', %d), timeout=4)\n"
           "    s.sendall(b'ping'); print(s.recv(16).decode())\n"
           "except OSError as e:\n"
           "    print('error', type(e).__name__); sys.exit(3)\n")


class Server:
    """A TCP server on 127.0.0.1 serving each connection in turn with self.serve(conn)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.seen = 0
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.seen += 1
            try:
                self.serve(c)
            finally:
                c.close()


class Echo(Server):
    """Answers 'pong' to each connection."""

    def serve(self, c):
        c.recv(16)
        c.sendall(b"pong")


class Sink(Server):
    """Hashes everything it receives and answers the length and the hash."""

    def serve(self, c):
        h, n = hashlib.sha256(), 0
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            h.update(b)
            n += len(b)
        c.sendall(("%d %s" % (n, h.hexdigest())).encode())


UPLOAD = ("import hashlib, os, random, socket\n"
          "random.seed(7)\n"
          "s = socket.create_connection(('10.0.2.2', %d), timeout=30)\n"
          "h, n = hashlib.sha256(), 0\n"
          "sizes = [1, 3, 17, 1447, 1448, 1449, 4096, 65535, 100000]\n"
          "while n < %d:\n"
          "    b = os.urandom(random.choice(sizes))\n"
          "    s.sendall(b); h.update(b); n += len(b)\n"
          "s.shutdown(socket.SHUT_WR)\n"
          "print('%%d %%s' %% (n, h.hexdigest()))\n"
          "print(s.recv(200).decode())\n")


def sidecar_pid(home, name, which):
    with open(os.path.join(home.path, "sandboxes", name, "sandbox.json")) as f:
        return json.load(f)["sidecars"][which]["pid"]


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def audit_actions(home, name):
    return [r["action"] for r in home.json("audit", "ls", "--sandbox", name)]


@pytest.fixture(scope="module")
def echo():
    e = Echo()
    yield e
    e.sock.close()


def test_kosa8_net_dying_takes_only_the_network_down(home, loaded, echo):
    name = "netdown"
    home("sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2",
         "--egress-allow", "127.0.0.1:%d" % echo.port, check=True)
    try:
        home("sandbox", "pull", name, loaded, check=True)
        p = home("sandbox", "run", name, loaded, "python3", "-c", CONNECT % echo.port)
        assert p.returncode == 0 and "pong" in p.stdout, p.stdout + p.stderr
        home("checkpoint", name, "--label", "up", check=True)

        pid = sidecar_pid(home, name, "net")
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: home.json("sandbox", "egress", name)["network"] == "down")
        st = home.json("sandbox", "egress", name)
        assert st["why"], st
        assert "sandbox.net.down" in audit_actions(home, name)
        # The VM and the daemon carry on; only the network is gone.
        assert home("daemon", "status").returncode == 0
        p = home("sandbox", "run", name, loaded, "python3", "-c", "print(6*7)")
        assert p.returncode == 0 and p.stdout.strip() == "42"
        seen = echo.seen
        p = home("sandbox", "run", name, loaded, "python3", "-c", CONNECT % echo.port)
        assert p.returncode == 3 and echo.seen == seen, p.stdout + p.stderr

        # A rewind starts a new kosa8-net: the network is back.
        home("rewind", name, "--to", "up", "-y", check=True)
        assert home.json("sandbox", "egress", name)["network"] == "up"
        assert alive(sidecar_pid(home, name, "net"))
        p = home("sandbox", "run", name, loaded, "python3", "-c", CONNECT % echo.port)
        assert p.returncode == 0 and "pong" in p.stdout, p.stdout + p.stderr
    finally:
        home("sandbox", "rm", name)


def test_kosa8_fs_dying_is_restarted_and_the_folder_works_again(home, loaded):
    name = "fsdown"
    share = tempfile.mkdtemp(prefix="k8fsd-", dir="/tmp")
    home("sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2",
         "--mount", "%s:/data" % share, check=True)
    try:
        home("sandbox", "pull", name, loaded, check=True)
        home("sandbox", "run", name, loaded, "sh", "-c", "echo one > /data/one", check=True)
        assert open(os.path.join(share, "one")).read() == "one\n"

        pid = sidecar_pid(home, name, "fs")
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: "sandbox.fs.restart" in audit_actions(home, name))
        new = sidecar_pid(home, name, "fs")
        assert new != pid and alive(new)
        assert "sandbox.fs.down" in audit_actions(home, name)
        p = home("sandbox", "run", name, loaded, "sh", "-c",
                 "cat /data/one && echo two > /data/two", timeout=60)
        assert p.returncode == 0 and p.stdout == "one\n", p.stdout + p.stderr
        assert open(os.path.join(share, "two")).read() == "two\n"
    finally:
        home("sandbox", "rm", name)
        for f in os.listdir(share):
            os.unlink(os.path.join(share, f))
        os.rmdir(share)


def test_bulk_upload_arrives_whole(home, loaded):
    """kosa8-net merges consecutive guest segments before slirp sees them: the bytes that
    reach the host must be exactly the bytes the guest sent, in odd-sized writes."""
    sink = Sink()
    name = "bulk"
    home("sandbox", "create", name, "--cpus", "1", "--memory", "512", "--disk", "2",
         "--egress-allow", "127.0.0.1:%d" % sink.port, check=True)
    try:
        home("sandbox", "pull", name, loaded, check=True)
        p = home("sandbox", "run", name, loaded, "python3", "-c",
                 UPLOAD % (sink.port, 8 << 20), timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        sent, got = p.stdout.strip().splitlines()[-2:]
        assert sent == got, (sent, got)
        st = home.json("sandbox", "egress", name)
        assert st["destinations"] and st["tcp_merged"] > 0, st
    finally:
        home("sandbox", "rm", name)
        sink.sock.close()


def test_children_hold_no_descriptor_of_the_daemons_starter(tmp_path):
    """kosa8d started in the foreground (as systemd does) with a descriptor it was not
    meant to have, numbered high as a busy process's are: it is close-on-exec in kosa8d
    from the start, and no child (QEMU, kosa8-fs, kosa8-net) holds it. Before, kosa8d
    kept it open across exec, and the sidecars, which closed descriptors only up to
    1087, carried it into their jails."""
    from conftest import Home, KOSA8, new_home
    h = Home(new_home("k8fdl-"))
    share = tmp_path / "share"
    share.mkdir()
    r, w = os.pipe()
    os.dup2(w, 1500, inheritable=True)
    os.close(w)
    marker = os.fstat(1500).st_ino
    env = dict(os.environ, KOSA8_HOME=h.path)
    d = subprocess.Popen([KOSA8, "daemon", "start", "--foreground"], env=env, pass_fds=(1500,),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    os.close(1500)
    try:
        assert wait_for(lambda: h("daemon", "status").returncode == 0, timeout=60)
        h("sandbox", "create", "fdl", "--cpus", "1", "--memory", "256", "--disk", "1",
          "--mount", "%s:/data" % share, "--egress-allow", "127.0.0.1:9", check=True)
        kids = [sidecar_pid(h, "fdl", "fs"), sidecar_pid(h, "fdl", "net")]
        holders = []
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            if int(pid) in (os.getpid(), d.pid):
                continue
            try:
                fds = os.listdir("/proc/%s/fd" % pid)
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.stat("/proc/%s/fd/%s" % (pid, fd)).st_ino == marker:
                        holders.append((int(pid), int(fd)))
                except OSError:
                    pass
        assert all(k > 0 for k in kids), kids
        assert holders == [], holders
    finally:
        h("daemon", "stop")
        d.wait(timeout=60)
        os.close(r)
        shutil.rmtree(h.path, ignore_errors=True)
