# SPDX-License-Identifier: Apache-2.0
"""Install in a minute (issue 33): a release made by `make dist`, served by a local HTTP
server, installed with the guides' one line (`curl -fsSL URL/install.sh | sh`) on a fresh
Debian machine (installkit.FreshRoot: apt has the packages cached, nothing is installed),
its systemd unit checked by systemd-analyze, the unit's ExecStart run by hand as systemd
runs it, the guest image fetched at its first start, a sandbox run by a member of the group
kosa8, and someone outside the group refused. One sandbox boot."""
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time

import pytest

import installkit as ik
from conftest import TOP, new_home


@pytest.fixture(scope="module")
def release():
    r = ik.shared_release()
    return r.srv, r.dir


@pytest.fixture(scope="module")
def root(release, python_layout):
    r = ik.FreshRoot(["openssl"] + ik.depends(release[1]), layout=python_layout)
    yield r
    r.close()


@pytest.fixture(scope="module")
def installed(release, root):
    """The guides' one line, as root (no sudo on this machine), leaving the guest image out
    so that the service's first start fetches it. (seconds, stderr)"""
    srv = release[0]
    n = len(srv.log)
    t = time.time()
    p = root.sh("curl -fsSL %s/rel/install.sh | sh -s -- --no-guest" % srv.url, timeout=900)
    took = time.time() - t
    assert p.returncode == 0, "install.sh failed:\n%s%s" % (p.stdout, p.stderr)
    for u, groups in (("alice", ["-G", "kosa8"]), ("bob", [])):
        root.run(["useradd", "-m"] + groups + [u], check=True)
    return took, p.stderr, srv.log[n:]


@pytest.fixture(scope="module")
def service(release, root, installed):
    """(the Service, whether it said READY=1, its log, the server log's length before)"""
    d = new_home("k8svc-")
    log = os.path.join(d, "kosa8d.log")
    n = len(release[0].log)
    svc = ik.Service(root, log)
    ready = svc.wait_ready(timeout=300)
    yield svc, ready, log, n
    if svc.proc.poll() is None:
        svc.stop()
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(d, ignore_errors=True)


def test_one_line_installs_the_release(release, root, installed):
    took, err, asked = installed
    assert "SHA256SUMS: signature verified" in err, err
    assert "SHA-256 matches SHA256SUMS" in err, err
    # the tarball was fetched once, after its checksum file and signature
    assert asked.count("/rel/%s" % ik.TARBALL) == 1, asked
    assert asked.index("/rel/SHA256SUMS.sig") < asked.index("/rel/%s" % ik.TARBALL), asked
    assert os.readlink(root.path("/usr/local/bin/kosa8")) == "../lib/kosa8/bin/kosa8"
    for prog in ("kosa8", "kosa8d", "kosa8-net", "kosa8-fs", "kosa8-broker", "kosa8-model"):
        assert os.access(root.path("/usr/local/lib/kosa8/bin/" + prog), os.X_OK), prog
    assert not os.path.exists(root.path("/usr/local/lib/kosa8/guest"))   # --no-guest
    for f in ("/usr/local/share/man/man1/kosa8.1", "/usr/local/share/man/man8/kosa8d.8",
              "/usr/local/share/bash-completion/completions/kosa8",
              "/usr/local/share/zsh/site-functions/_kosa8",
              "/usr/local/lib/sysusers.d/kosa8.conf", "/usr/local/lib/tmpfiles.d/kosa8.conf",
              "/usr/local/share/doc/kosa8/docs/install.md",
              # what a restore from a memory file preloads into QEMU, beside kosa8d
              "/usr/local/lib/kosa8/bin/kosa8-qemu-ram.so"):
        assert os.path.isfile(root.path(f)), f
    # the man pages and the completion work there
    p = root.sh("readlink -f $(man -w kosa8d)")
    assert p.stdout.strip() == "/usr/local/share/man/man8/kosa8d.8", p.stdout + p.stderr
    p = root.run(["bash", "-c", ". /usr/local/share/bash-completion/completions/kosa8; "
                  "COMP_WORDS=(kosa8 guest f); COMP_CWORD=2; _kosa8; echo ${COMPREPLY[*]}; "
                  "COMP_WORDS=(kosa8 daemon start --socket); COMP_CWORD=3; _kosa8; "
                  "echo ${COMPREPLY[*]}"])
    assert p.stdout.split("\n")[:2] == ["fetch", "--socket-group"], p.stdout + p.stderr
    # the Debian packages it runs with, from apt's cache
    for pkg in ik.depends(release[1]):
        p = root.run(["dpkg-query", "-W", "-f", "${Status}", pkg])
        assert p.stdout == "install ok installed", (pkg, p.stdout, p.stderr)
    # the group, the home, the service enabled (systemd does not run this machine)
    assert root.run(["getent", "group", "kosa8"]).returncode == 0
    st = os.stat(root.path("/var/lib/kosa8"))
    assert stat.S_IMODE(st.st_mode) == 0o710 and st.st_uid == 0, oct(st.st_mode)
    assert os.path.islink(root.path("/etc/systemd/system/multi-user.target.wants/kosa8.service"))
    assert "systemd does not run this machine" in err
    print("install: %.1f s" % took)


def test_unit_verifies(root, installed):
    p = root.run(["systemd-analyze", "verify", "/usr/local/lib/systemd/system/kosa8.service"])
    assert p.returncode == 0 and not p.stderr.strip(), (p.stdout, p.stderr)
    unit = open(root.path("/usr/local/lib/systemd/system/kosa8.service")).read()
    for line in ("Type=notify", "ExecStart=/usr/local/lib/kosa8/bin/kosa8d --home /var/lib/kosa8 "
                 "--socket-group kosa8", "NoNewPrivileges=yes", "ProtectSystem=full"):
        assert line in unit.splitlines(), line


def test_service_starts_as_systemd_runs_it_and_fetches_the_guest(release, root, service):
    srv, rel = release
    svc, ready, log, asked = service
    assert ready, "no READY=1 from kosa8d: %s\n%s" % (svc.messages, open(log).read()[-3000:])
    # it had no guest image: the first start fetched the release's, before it said ready
    for f in ("manifest.json", "vmlinux", "initramfs.cpio"):
        assert "/rel/guest/" + f in srv.log[asked:], srv.log[asked:]
    gid = int(root.run(["getent", "group", "kosa8"]).stdout.split(":")[2])
    for sock in ("kosa8d.sock", "docker.sock"):
        st = os.stat(root.path("/var/lib/kosa8/" + sock))
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660, oct(st.st_mode)
        assert (st.st_uid, st.st_gid) == (0, gid), (sock, st.st_uid, st.st_gid)
    st = os.stat(root.path("/var/lib/kosa8"))
    assert stat.S_IMODE(st.st_mode) == 0o710 and st.st_gid == gid
    # nothing in the home but the sockets is open to the group
    for n in os.listdir(root.path("/var/lib/kosa8")):
        m = os.lstat(root.path("/var/lib/kosa8/" + n)).st_mode
        assert stat.S_ISSOCK(m) or not m & 0o077, (n, oct(m))
    p = root.run(["kosa8", "guest", "verify"], user="alice")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "/var/lib/kosa8/guest" in p.stdout and "the release's guest image" in p.stdout
    p = root.run(["kosa8", "daemon", "status"], user="alice")
    assert "fetched from %s/rel/guest/" % srv.url in p.stdout, p.stdout


def test_member_runs_a_sandbox(root, service):
    assert service[1]
    p = root.run(["kosa8", "daemon", "start"], user="alice")
    assert p.returncode == 0 and "already running" in p.stdout, p.stdout + p.stderr
    root.run(["kosa8", "image", "load", "/srv/python-oci", "--tag", "python:3.12-slim"],
             user="alice", check=True, timeout=600)
    root.run(["kosa8", "sandbox", "create", "first", "--cpus", "1", "--memory", "512",
              "--disk", "2"], user="alice", check=True, timeout=600)
    root.run(["kosa8", "sandbox", "pull", "first", "python:3.12-slim"], user="alice",
             check=True, timeout=600)
    p = root.run(["kosa8", "sandbox", "run", "first", "python:3.12-slim", "python3", "-c",
                  "print(6*7)"], user="alice", timeout=600)
    assert p.returncode == 0 and p.stdout.strip() == "42", p.stdout + p.stderr
    # its state is the service's, not alice's
    assert not os.path.exists(root.path("/home/alice/.kosa8"))


def test_outsider_is_refused(root, service):
    assert service[1]
    p = root.run(["kosa8", "sandbox", "ls"], user="bob")
    assert p.returncode == 1 and "permission denied" in p.stderr, p.stdout + p.stderr
    assert "usermod -aG kosa8" in p.stderr
    before = set(root.pids())
    p = root.run(["kosa8", "daemon", "start"], user="bob")
    assert p.returncode != 0 and "permission denied" in p.stderr, p.stdout + p.stderr
    # no kosa8d of bob's own, and no state of his
    assert not os.path.exists(root.path("/home/bob/.kosa8"))
    bob = int(root.run(["id", "-u", "bob"], check=True).stdout)
    for pid in set(root.pids()) - before:
        try:
            assert os.stat("/proc/%d" % pid).st_uid != bob, "a process of bob's: %d" % pid
        except FileNotFoundError:
            pass


def test_service_stops_on_sigterm(root, service):
    svc, ready, log, _ = service
    assert ready
    assert svc.stop() == 0, open(log).read()[-3000:]
    assert any("STOPPING=1" in m.split("\n") for m in svc.messages), svc.messages
    for sock in ("kosa8d.sock", "docker.sock"):
        assert not os.path.exists(root.path("/var/lib/kosa8/" + sock))
    assert not [p for p in root.pids() if open("/proc/%d/comm" % p).read().strip()
                .startswith("qemu")], "a VM outlived the service"
    # a member does not start a kosa8d of their own in the service's home
    p = root.run(["kosa8", "daemon", "start"], user="alice")
    assert p.returncode == 3 and "sudo systemctl start kosa8" in p.stderr, p.stdout + p.stderr
    assert not os.path.exists(root.path("/var/lib/kosa8/kosa8d.sock"))


def test_root_starts_it_by_hand_for_the_group(root, service):
    """Without systemd: `sudo kosa8 daemon start` (root has no ~/.kosa8) serves the
    service's home, to the group kosa8, as the unit does."""
    assert service[0].proc.poll() is not None, "the service still runs"
    p = root.run(["kosa8", "daemon", "start"], timeout=300)
    try:
        assert p.returncode == 0 and "kosa8d running" in p.stdout, p.stdout + p.stderr
        gid = int(root.run(["getent", "group", "kosa8"]).stdout.split(":")[2])
        st = os.stat(root.path("/var/lib/kosa8/kosa8d.sock"))
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == gid, oct(st.st_mode)
        p = root.run(["kosa8", "sandbox", "ls"], user="alice")
        assert p.returncode == 0 and "first" in p.stdout, p.stdout + p.stderr
    finally:
        assert root.run(["kosa8", "daemon", "stop"], timeout=300).returncode == 0


def test_uninstall_keeps_the_state(root, service):
    assert service[0].proc.poll() is not None, "the service still runs"
    p = root.run(["sh", "/usr/local/lib/kosa8/install.sh", "--uninstall"])
    assert p.returncode == 0, p.stderr
    for f in ("/usr/local/lib/kosa8", "/usr/local/bin/kosa8", "/usr/local/share/man/man1/kosa8.1",
              "/usr/local/lib/systemd/system/kosa8.service", "/usr/local/share/doc/kosa8"):
        assert not os.path.lexists(root.path(f)), f
    assert os.path.exists(root.path("/var/lib/kosa8/audit.log"))
    assert root.run(["getent", "group", "kosa8"]).returncode == 0


def test_make_install_and_uninstall_into_destdir(release):
    """`make install DESTDIR` writes the tree the release's tarball holds, and `make
    uninstall` takes it away again."""
    d = tempfile.mkdtemp(prefix="k8dest-")
    try:
        subprocess.run(["make", "-s", "-C", TOP, "install", "DESTDIR=" + d, "PREFIX=/opt/k8"],
                       check=True, capture_output=True, timeout=600)
        got = set()
        for dirpath, dirs, files in os.walk(d):
            for n in files + [x for x in dirs if os.path.islink(os.path.join(dirpath, x))]:
                got.add(os.path.relpath(os.path.join(dirpath, n), d + "/opt/k8"))
        with tarfile.open(os.path.join(release[1], ik.TARBALL)) as t:
            want = {m.name.split("/", 1)[1] for m in t.getmembers() if not m.isdir() and
                    "/" in m.name} - {"DEPENDS", "install.sh"}
        assert got == want, (got ^ want)
        unit = open(d + "/opt/k8/lib/systemd/system/kosa8.service").read()
        assert "ExecStart=/opt/k8/lib/kosa8/bin/kosa8d " in unit
        assert os.readlink(d + "/opt/k8/bin/kosa8") == "../lib/kosa8/bin/kosa8"
        subprocess.run(["make", "-s", "-C", TOP, "uninstall", "DESTDIR=" + d, "PREFIX=/opt/k8"],
                       check=True, capture_output=True, timeout=600)
        left = [os.path.join(p, f) for p, _, fs in os.walk(d) for f in fs]
        assert left == [], left
    finally:
        shutil.rmtree(d, ignore_errors=True)
