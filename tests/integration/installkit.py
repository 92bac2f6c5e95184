# SPDX-License-Identifier: Apache-2.0
"""installkit.py - what the install tests (test_36_install.py, test_97_hostile_release.py)
and the install bench (bench/install.py) share: a release built by `make dist` with a
throwaway signing key, an HTTP server that serves it (and logs what was asked), and a fresh
Debian machine to install it on.

The fresh machine is scripts/fresh-root.sh's cached root (Debian minbase, curl, systemd,
man-db, the release's packages in apt's cache but not installed) under an overlay whose
upper layer is the test's, in a mount namespace of its own whose root it is (pivot_root,
not chroot: kosa8d's workers make user namespaces, which the kernel refuses inside a
chroot). /dev, /proc and /sys are the host's, and so is /run/kosa8 (the jail uids' claims
are host-wide). /var/lib/kosa8, the service's home, is an empty folder of the host's file
system bound in, as a real machine's /var/lib is: the image store's workers use it through
an idmapped mount, which an overlay cannot give (Linux 6.1). One process holds the namespace; every command enters it with nsenter. The
network is the host's, so the server at 127.0.0.1 is reachable from inside."""
import atexit
import functools
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from conftest import TOP

sys.path.insert(0, os.path.join(TOP, "scripts"))

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VERSION = open(os.path.join(TOP, "src/common/version.h")).read().split(
    '#define KOSA8_VERSION "', 1)[1].split('"', 1)[0]
TARBALL = "kosa8-%s-linux-x86_64.tar.gz" % VERSION


class Server:
    """Files below `top` over HTTP on 127.0.0.1, every request path logged."""

    def __init__(self, top):
        self.top = top
        self.log = []
        log = self.log

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, fmt, *args):
                pass

            def do_GET(self):
                log.append(self.path)
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=top))
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def build_release(out, url, key):
    """`make dist` of this checkout's build into out, for RELEASE_URL url, signed with the
    ed25519 key in the file `key`."""
    env = dict(os.environ, B=os.path.join(TOP, "build"), DIST_OUT=out, SIGN_KEY=key,
               RELEASE_URL=url)
    p = subprocess.run([os.path.join(TOP, "scripts", "dist.sh")], env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, "dist.sh failed: %s%s" % (p.stdout, p.stderr)
    return out


def new_key(path):
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", path], check=True,
                   capture_output=True)
    return path


class Release:
    """This build's release at URL/rel/ (self.dir), signed with a throwaway key whose
    private half is deleted once it signed (install.sh keeps the public half), served with
    what else a test puts in self.top."""

    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="k8rel-")
        self.srv = Server(self.top)
        key = new_key(os.path.join(self.top, "release.pem"))
        try:
            self.dir = build_release(os.path.join(self.top, "rel"), self.srv.url + "/rel", key)
        finally:
            os.unlink(key)

    def close(self):
        self.srv.close()
        shutil.rmtree(self.top, ignore_errors=True)


_shared = []


def shared_release():
    """One Release for every test file of a pytest process (the lane group `release` runs
    its files in one): made on first use, closed when the process exits. Tests compare the
    server's log from the length it had before they acted."""
    if not _shared:
        _shared.append(Release())
        atexit.register(_shared[0].close)
    return _shared[0]


def depends(release):
    """The release's DEPENDS (the packages fresh-root.sh puts in apt's cache)."""
    p = subprocess.run(["tar", "-xzOf", os.path.join(release, TARBALL),
                        "%s/DEPENDS" % TARBALL[:-len(".tar.gz")]], capture_output=True,
                       text=True, check=True)
    return p.stdout.split()


class FreshRoot:
    """A fresh Debian machine's root (see the module's doc); `layout`, when given, is bound
    read-only at /srv/python-oci inside."""

    def __init__(self, packages, layout=None):
        p = subprocess.run([os.path.join(TOP, "scripts", "fresh-root.sh")] + list(packages),
                           capture_output=True, text=True, timeout=1800)
        assert p.returncode == 0, "fresh-root.sh failed: %s" % p.stderr[-3000:]
        self.lower = p.stdout.strip().splitlines()[-1]
        self.tmp = tempfile.mkdtemp(prefix="k8root-", dir="/var/tmp")
        for d in ("upper", "work", "merged", "home"):
            os.mkdir(os.path.join(self.tmp, d))
        m = os.path.join(self.tmp, "merged")
        script = r"""set -e
mount -t overlay overlay -o lowerdir=%(lower)s,upperdir=%(tmp)s/upper,workdir=%(tmp)s/work %(m)s
mount --rbind /dev %(m)s/dev
mount -t proc proc %(m)s/proc
mount --rbind /sys %(m)s/sys
mkdir -p /run/kosa8 %(m)s/run/kosa8
mount --bind /run/kosa8 %(m)s/run/kosa8
mount -t tmpfs -o mode=1777 tmpfs %(m)s/tmp
mkdir -p %(m)s/var/lib/kosa8
mount --bind %(tmp)s/home %(m)s/var/lib/kosa8
if [ -n "%(layout)s" ]; then
	mkdir -p %(m)s/srv/python-oci
	mount --bind "%(layout)s" %(m)s/srv/python-oci
	mount -o remount,bind,ro %(m)s/srv/python-oci
fi
cd %(m)s
mkdir -p .oldroot
pivot_root . .oldroot
exec /usr/sbin/chroot . /bin/sh -c 'umount -l /.oldroot && rmdir /.oldroot && echo ready && exec sleep infinity'
""" % {"lower": self.lower, "tmp": self.tmp, "m": m, "layout": layout or ""}
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                                        "/bin/sh", "-c", script],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.proc = "/proc/%d/root" % self.holder.pid
        # Only once it says so: a command that entered before the pivot_root would have
        # the host's root, and be moved under the new one midway.
        line = self.holder.stdout.readline()
        if line != b"ready\n":
            self.holder.kill()
            raise AssertionError("the fresh root's holder failed: %s" %
                                 self.holder.stderr.read().decode())
        assert os.stat(self.proc).st_dev != os.stat("/").st_dev

    def path(self, p):
        """A path inside the root, as the host reaches it."""
        return self.proc + p

    def cmd(self, args, user=None, env=None):
        """The argv that runs args inside the root (as `user`, with that user's groups)."""
        e = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb"}
        pre = []
        if user:
            e.update(HOME="/home/%s" % user, USER=user, LOGNAME=user)
            pre = ["setpriv", "--reuid", user, "--regid", user, "--init-groups", "--"]
        e.update(env or {})
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-r", "-w", "--"] + pre + \
            ["env", "-i"] + ["%s=%s" % kv for kv in e.items()] + list(args)

    def run(self, args, user=None, env=None, timeout=600, input=None, check=False):
        p = subprocess.run(self.cmd(args, user, env), capture_output=True, text=True,
                           timeout=timeout, input=input)
        if check:
            assert p.returncode == 0, "%s failed (%d): %s%s" % (" ".join(args), p.returncode,
                                                               p.stdout, p.stderr)
        return p

    def sh(self, script, **kw):
        return self.run(["/bin/sh", "-c", script], **kw)

    def pids(self):
        """Every process of the root but the holder: whose root, or whose program, is on
        the root's overlay (a jailed QEMU has a root of its own, but its program is the
        root's qemu-system-x86_64)."""
        dev = os.stat(self.proc).st_dev
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == self.holder.pid:
                continue
            for link in ("root", "exe"):
                try:
                    if os.stat("/proc/%s/%s" % (pid, link)).st_dev == dev:
                        out.append(int(pid))
                        break
                except OSError:
                    pass
        return out

    def close(self):
        """Every process of the root killed, then the holder: the namespace, its mounts and
        the overlay go with it."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.holder.kill()
        self.holder.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def unit_command(root):
    """The installed unit's ExecStart (split on spaces: it has no quoting) and its UMask."""
    exec_start, umask = None, "0022"
    with open(root.path("/usr/local/lib/systemd/system/kosa8.service")) as f:
        for line in f:
            if line.startswith("ExecStart="):
                exec_start = line.split("=", 1)[1].split()
            elif line.startswith("UMask="):
                umask = line.split("=", 1)[1].strip()
    assert exec_start, "the unit has no ExecStart"
    return exec_start, umask


class Service:
    """The unit's ExecStart run by hand as systemd runs it: root, its own session, an empty
    environment but PATH, NOTIFY_SOCKET and INVOCATION_ID, the unit's umask, stdin
    /dev/null, output to a log; stopped with SIGTERM to the main process (KillMode=mixed).
    `env` adds variables (a drop-in's Environment=)."""

    def __init__(self, root, log, env=None):
        self.root = root
        argv, umask = unit_command(root)
        self.notify_path = "/run/k8-notify-%d.sock" % os.getpid()
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(root.path(self.notify_path))
        e = {"NOTIFY_SOCKET": self.notify_path, "INVOCATION_ID": "0" * 32}
        e.update(env or {})
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(
            root.cmd(["/bin/sh", "-c", 'umask %s && exec "$@"' % umask, "sh"] + argv, env=e),
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.messages = []

    def wait_ready(self, timeout=300):
        """Notification datagrams until READY=1: True, or False when it exited first."""
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                return False
            self.notify.settimeout(0.5)
            try:
                msg = self.notify.recv(4096).decode()
            except socket.timeout:
                continue
            self.messages.append(msg)
            if "READY=1" in msg.split("\n"):
                return True
        return False

    def stop(self, timeout=120):
        """SIGTERM, as systemd stops it; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.notify.setblocking(False)
            while True:          # what it said while stopping
                try:
                    self.messages.append(self.notify.recv(4096).decode())
                except OSError:
                    break
            self.notify.close()
            self.log.close()
            try:
                os.unlink(self.root.path(self.notify_path))
            except OSError:
                pass
