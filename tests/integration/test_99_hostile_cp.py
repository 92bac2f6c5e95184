# SPDX-License-Identifier: Apache-2.0
# Copying files in and out of containers, from the attacker's position (docs/threat-model.md
# "archives"): an API client sending hostile tars (.. and absolute names, a symlink and then
# a file through it, a hard link out, a huge size field, garbage), and root in a container
# planting symlinks to / and .. and magic links for the copy-out to follow. Each is refused
# or contained in the container's root: nothing lands outside the destination, the VM's own
# files (/scratch, /images) never show, and the daemon keeps serving.
import io
import os
import socket
import subprocess
import tarfile
import time

import pytest

from conftest import KOSA8, daemon_pid, sock_api as api, wait_for

pytestmark = pytest.mark.hostile

IMAGE = "python:3.12-slim"


def tar_of(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, arg in entries:
            ti = tarfile.TarInfo(name)
            if kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, arg
                t.addfile(ti)
            elif kind == "hard":
                ti.type, ti.linkname = tarfile.LNKTYPE, arg
                t.addfile(ti)
            else:
                ti.size = len(arg)
                t.addfile(ti, io.BytesIO(arg))
    return buf.getvalue()


def huge_size_tar():
    ti = tarfile.TarInfo("huge")
    ti.size = 8 << 30
    return ti.tobuf(format=tarfile.GNU_FORMAT) + b"A" * 4096


@pytest.fixture(scope="module")
def ctr(home, sandbox):
    p = home("sandbox", "start", sandbox, IMAGE, "sh", "-c",
             "mkdir -p /dst && ln -s / /dst/root && ln -s ../../../.. /dst/up && "
             "ln -s /proc/1/root /dst/magic && echo container > /marker && exec sleep 100000",
             timeout=300)
    assert p.returncode == 0, p.stderr
    cid = p.stdout.strip()
    assert wait_for(lambda: home("sandbox", "exec", sandbox, cid, "test", "-e", "/marker",
                                 timeout=120).returncode == 0, 60), "the setup did not run"
    yield cid
    home("sandbox", "stop", sandbox, p.stdout.strip(), "-t", "0", timeout=120)


def ls_root(home, sandbox, cid):
    p = home("sandbox", "exec", sandbox, cid, "sh", "-c",
             "ls -a / /dst; ls /etc | wc -l; cat /etc/hostname", timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


HOSTILE_TARS = [
    ("dotdot", tar_of([("../../evil", "file", b"x")])),
    ("absolute", tar_of([("/evil", "file", b"x")])),
    ("symlink then through it", tar_of([("l", "sym", "/"), ("l/evil", "file", b"x")])),
    ("relative symlink then through it", tar_of([("u", "sym", "../../.."), ("u/evil", "file", b"x")])),
    ("existing symlink to /", tar_of([("root/evil", "file", b"x")])),
    ("existing symlink up", tar_of([("up/evil", "file", b"x")])),
    ("hard link out", tar_of([("h", "hard", "../etc/shadow")])),
    ("huge size field", huge_size_tar()),
    ("garbage", b"\x01" * 4096),
]


@pytest.mark.parametrize("what,body", HOSTILE_TARS, ids=[t[0] for t in HOSTILE_TARS])
def test_hostile_tar_refused(home, sandbox, ctr, what, body):
    pid = daemon_pid(home.path)
    before = ls_root(home, sandbox, ctr)
    s, _, data = api(home, "PUT", "/v1/sandboxes/%s/containers/%s/archive?path=/dst"
                  % (sandbox, ctr), body=body)
    assert s == 400, (what, s, data)
    after = ls_root(home, sandbox, ctr)
    assert "evil" not in after, (what, after)
    # the container's root and /etc are as they were (the new entries, if any, are in /dst)
    assert before.split("/dst:")[0] == after.split("/dst:")[0], (what, before, after)
    assert before.split("\n")[-3:] == after.split("\n")[-3:], (what, before, after)
    assert daemon_pid(home.path) == pid
    s, _, _ = api(home, "GET", "/v1/status")
    assert s == 200


def test_symlinks_to_root_stay_in_the_container(home, sandbox, ctr):
    base = "/v1/sandboxes/%s/containers/%s/archive" % (sandbox, ctr)
    # Through a link to / or up past the root, by name and followed (trailing slash):
    # always the container's root (its /marker), never the VM's (/scratch, /images).
    for link in ("/dst/root", "/dst/up", "/dst/up/../.."):
        s, _, data = api(home, "GET", base + "/stat?path=%s/marker" % link)
        assert s == 200, (link, s, data)
        for vm_only in ("scratch", "images", "run/kosa8"):
            s, _, data = api(home, "GET", base + "/stat?path=%s/%s" % (link, vm_only))
            assert s == 404, (link, vm_only, s, data)
        s, _, data = api(home, "GET", base + "?path=%s/marker" % link)
        assert s == 200
        assert tarfile.open(fileobj=io.BytesIO(data)).extractfile("marker").read() == \
            b"container\n"
    # a followed link to / is the container's root folder
    s, _, data = api(home, "GET", base + "/stat?path=/dst/root/")
    assert s == 200 and data.startswith(b'{"name":"root"'), data
    # a magic link (/proc/1/root) is not followed at all
    s, _, data = api(home, "GET", base + "?path=/dst/magic/etc/hostname")
    assert s in (400, 404), (s, data)


def test_copy_out_extracts_nothing_outside(home, sandbox, ctr, tmp_path):
    target = tmp_path / "outside"
    p = home("sandbox", "exec", sandbox, ctr, "sh", "-c",
             "mkdir -p /t && ln -s %s /t/esc && echo x > /t/plain" % target, timeout=300)
    assert p.returncode == 0, p.stderr
    dst = tmp_path / "dst"
    dst.mkdir()
    p = home("sandbox", "cp", "%s:%s:/t" % (sandbox, ctr), str(dst))
    assert p.returncode == 0, p.stderr
    assert os.readlink(dst / "t" / "esc") == str(target)
    assert not target.exists()
    assert sorted(os.listdir(tmp_path)) == ["dst"]


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)


def test_copy_out_extraction_is_jailed(home, sandbox, ctr, tmp_path):
    """The tar comes from inside the container, so the CLI extracts it in a process of
    its own, jailed before it reads a byte (src/cli/cp.c): no capabilities even as root,
    no_new_privs, a seccomp filter, its working directory the destination. Seen from
    /proc while a big file streams."""
    p = home("sandbox", "exec", sandbox, ctr, "sh", "-c",
             "head -c 100000000 /dev/zero > /big", timeout=300)
    assert p.returncode == 0, p.stderr
    dst = tmp_path / "dst"
    dst.mkdir()
    cli = subprocess.Popen([KOSA8, "sandbox", "cp", "%s:%s:/big" % (sandbox, ctr), str(dst)],
                           env=dict(os.environ, KOSA8_HOME=home.path),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = None
    try:
        while cli.poll() is None and seen is None:
            try:
                with open("/proc/%d/task/%d/children" % (cli.pid, cli.pid)) as f:
                    kids = [int(k) for k in f.read().split()]
                for k in kids:
                    st = proc_status(k)
                    if st.get("Seccomp", "").strip() == "2":
                        seen = (st, os.readlink("/proc/%d/cwd" % k))
            except (FileNotFoundError, ProcessLookupError):
                pass
            time.sleep(0.01)
        out, errs = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, errs
    assert (dst / "big").stat().st_size == 100000000
    assert seen, "no jailed extraction process was seen while the copy ran"
    st, cwd = seen
    for cap in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
        assert int(st[cap].strip(), 16) == 0, (cap, st[cap])
    assert st["NoNewPrivs"].strip() == "1", st
    assert cwd == str(dst), cwd
    home("sandbox", "exec", sandbox, ctr, "rm", "-f", "/big", timeout=120)


def cp_records(home, sandbox):
    return home.json("audit", "ls", "--sandbox", sandbox, "--action", "sandbox.container.cp")


def test_clients_that_vanish_mid_copy(home, sandbox, ctr):
    """A client that leaves in the middle of a GET or a PUT: the copy in the guest is
    ended, audited as failed, and the daemon and the container go on."""
    pid = daemon_pid(home.path)
    p = home("sandbox", "exec", sandbox, ctr, "sh", "-c",
             "head -c 33554432 /dev/zero > /big && echo ok", timeout=300)
    assert p.stdout == "ok\n", p.stderr
    n0 = len(cp_records(home, sandbox))
    sock_path = os.path.join(home.path, "kosa8d.sock")
    # GET: read a little, then hang up
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(b"GET /v1/sandboxes/%s/containers/%s/archive?path=/big HTTP/1.1\r\n"
              b"Host: kosa8\r\n\r\n" % (sandbox.encode(), ctr.encode()))
    got = b""
    while len(got) < 65536:
        chunk = s.recv(65536)
        assert chunk, got[:200]
        got += chunk
    s.close()
    # PUT: announce 16 MiB, send 1 MiB of a tar, hang up
    body = tar_of([("part", "file", b"\0" * (16 << 20))])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(b"PUT /v1/sandboxes/%s/containers/%s/archive?path=/dst HTTP/1.1\r\n"
              b"Host: kosa8\r\nContent-Length: %d\r\n\r\n" % (sandbox.encode(), ctr.encode(),
                                                             len(body)))
    s.sendall(body[:1 << 20])
    s.close()

    def both_failed():
        recs = cp_records(home, sandbox)[n0:]
        dirs = {r["details"]["direction"] for r in recs if not r["details"]["ok"]}
        return dirs == {"in", "out"} and recs
    recs = wait_for(both_failed, 60)
    assert recs, cp_records(home, sandbox)[n0:]
    assert daemon_pid(home.path) == pid
    st, _, data = api(home, "GET", "/v1/sandboxes/%s/containers/%s/archive/stat?path=/big"
                   % (sandbox, ctr))
    assert st == 200 and b'"size":33554432' in data, data
    p = home("sandbox", "exec", sandbox, ctr, "echo", "alive", timeout=120)
    assert p.stdout == "alive\n"
