# SPDX-License-Identifier: Apache-2.0
# kosa8 sandbox cp and the archive endpoints (docs/reference/cli.md "sandbox cp",
# docs/reference/api.md "Copying files"): files and folders out of and into a running
# container and a stopped one, modes, times and symlinks kept, `-` for a tar on
# stdout/stdin, a missing path's error, the Path-Stat header, and the size cap on what goes
# in.
import base64
import io
import json
import os
import stat
import subprocess
import tarfile

import pytest

from conftest import KOSA8, sock_api as api, wait_for

IMAGE = "python:3.12-slim"

SETUP = ("mkdir -p /d/sub && echo hello > /d/sub/f && chmod 640 /d/sub/f && "
         "touch -d 2020-01-02T03:04:05 /d/sub/f && ln -s sub/f /d/rel && ln -s / /d/root && "
         "touch /ready && exec sleep 100000")


@pytest.fixture(scope="module")
def ctr(home, sandbox):
    p = home("sandbox", "start", sandbox, IMAGE, "sh", "-c", SETUP, timeout=300)
    assert p.returncode == 0, p.stderr
    cid = p.stdout.strip()
    assert wait_for(lambda: home("sandbox", "exec", sandbox, cid, "test", "-e", "/ready",
                                 timeout=120).returncode == 0, 60), "the setup did not run"
    yield cid
    home("sandbox", "stop", sandbox, cid, "-t", "0", timeout=120)


def sh(home, sandbox, cid, cmd):
    p = home("sandbox", "exec", sandbox, cid, "sh", "-c", cmd, timeout=300)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout


def test_file_out_keeps_mode_and_mtime(home, sandbox, ctr, tmp_path):
    dst = tmp_path / "got"
    p = home("sandbox", "cp", "%s:%s:/d/sub/f" % (sandbox, ctr), str(dst))
    assert p.returncode == 0, p.stderr
    assert dst.read_text() == "hello\n"
    st = dst.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert int(st.st_mtime) == 1577934245   # 2020-01-02T03:04:05Z


def test_folder_out_with_symlinks(home, sandbox, ctr, tmp_path):
    p = home("sandbox", "cp", "%s:%s:/d" % (sandbox, ctr), str(tmp_path))
    assert p.returncode == 0, p.stderr
    d = tmp_path / "d"
    assert (d / "sub" / "f").read_text() == "hello\n"
    assert os.readlink(d / "rel") == "sub/f"
    # a symlink to / is stored as a link: nothing of the container's root came with it
    assert os.readlink(d / "root") == "/"
    assert sorted(os.listdir(d)) == ["rel", "root", "sub"]


def test_contents_and_stdout_tar(home, sandbox, ctr, tmp_path):
    p = home("sandbox", "cp", "%s:%s:/d/sub/." % (sandbox, ctr), str(tmp_path / "c"))
    assert p.returncode == 0, p.stderr
    assert os.listdir(tmp_path / "c") == ["f"]
    env = dict(os.environ, KOSA8_HOME=home.path)
    out = subprocess.run([KOSA8, "sandbox", "cp", "%s:%s:/d/sub" % (sandbox, ctr), "-"],
                         capture_output=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    names = tarfile.open(fileobj=io.BytesIO(out.stdout)).getnames()
    assert names == ["sub", "sub/f"]


def test_copy_in_file_and_folder(home, sandbox, ctr, tmp_path):
    src = tmp_path / "tree"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x").write_text("one\n")
    os.chmod(src / "a" / "x", 0o751)
    os.utime(src / "a" / "x", (1500000000, 1500000000))
    os.symlink("a/x", src / "s")
    (tmp_path / "single").write_text("single\n")
    for args in ([str(src), "%s:%s:/d" % (sandbox, ctr)],
                 [str(tmp_path / "single"), "%s:%s:/d/renamed" % (sandbox, ctr)],
                 [str(src) + "/.", "%s:%s:/d/sub" % (sandbox, ctr)]):
        p = home("sandbox", "cp", *args)
        assert p.returncode == 0, (args, p.stderr)
    out = sh(home, sandbox, ctr, "stat -c '%a %Y %s' /d/tree/a/x; readlink /d/tree/s; "
             "cat /d/renamed; ls /d/sub")
    assert out.split("\n")[:5] == ["751 1500000000 4", "a/x", "single", "a", "f"], out


def test_stdin_tar_in(home, sandbox, ctr):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        ti = tarfile.TarInfo("fromstdin/n.txt")
        ti.size = 3
        ti.mode = 0o600
        t.addfile(ti, io.BytesIO(b"abc"))
    env = dict(os.environ, KOSA8_HOME=home.path)
    out = subprocess.run([KOSA8, "sandbox", "cp", "-", "%s:%s:/d" % (sandbox, ctr)],
                         input=buf.getvalue(), capture_output=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert sh(home, sandbox, ctr, "stat -c %a /d/fromstdin/n.txt; cat /d/fromstdin/n.txt") \
        == "600\nabc"


def test_missing_path(home, sandbox, ctr, tmp_path):
    p = home("sandbox", "cp", "%s:%s:/no/such" % (sandbox, ctr), str(tmp_path / "x"))
    assert p.returncode == 4, (p.returncode, p.stderr)
    assert "no such file or directory" in p.stderr and "/no/such" in p.stderr
    p = home("sandbox", "cp", str(tmp_path), "%s:%s:/no/such/dir" % (sandbox, ctr))
    assert p.returncode == 4, (p.returncode, p.stderr)
    p = home("sandbox", "cp", "%s:%s:/d" % (sandbox, "0123456789ab"), str(tmp_path / "x"))
    assert p.returncode == 4 and "no container" in p.stderr, p.stderr
    # a PUT refused before its body (the folder is missing): the body is read and dropped,
    # then the 404 (a client still writing would miss an early answer)
    body = b"\0" * (4 << 20)
    for _ in range(3):
        s, _, data = api(home, "PUT", "/v1/sandboxes/%s/containers/%s/archive?path=/no/such"
                         % (sandbox, ctr), body=body)
        assert s == 404 and b"/no/such" in data, (s, data)


def test_stat_and_path_stat_header(home, sandbox, ctr):
    base = "/v1/sandboxes/%s/containers/%s/archive" % (sandbox, ctr)
    s, _, body = api(home, "GET", base + "/stat?path=/d/root")
    assert s == 200, body
    st = json.loads(body)
    assert st["name"] == "root" and st["link"] == "/" and stat.S_ISLNK(st["mode"])
    s, hdrs, body = api(home, "GET", base + "?path=/d/sub/f")
    assert s == 200 and hdrs["Content-Type"] == "application/x-tar"
    ps = json.loads(base64.b64decode(hdrs["X-Docker-Container-Path-Stat"]))
    assert ps["name"] == "f" and ps["size"] == 6 and ps["mode"] == 0o640
    assert ps["mtime"].startswith("2020-01-02T03:04:05")
    assert tarfile.open(fileobj=io.BytesIO(body)).getnames() == ["f"]
    s, _, body = api(home, "GET", base + "?path=relative")
    assert s == 400, body


def test_size_cap(home, sandbox, ctr):
    cfg = os.path.join(home.path, "config.json")
    old = open(cfg).read() if os.path.exists(cfg) else None
    conf = json.loads(old) if old else {}
    conf["cp_max_mib"] = 1
    with open(cfg, "w") as f:
        json.dump(conf, f)
    try:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            ti = tarfile.TarInfo("big")
            ti.size = 3 << 20
            t.addfile(ti, io.BytesIO(b"\0" * ti.size))
        s, _, body = api(home, "PUT", "/v1/sandboxes/%s/containers/%s/archive?path=/tmp"
                         % (sandbox, ctr), body=buf.getvalue())
        assert s == 400 and b"cp_max_mib" in body, (s, body)
    finally:
        if old is None:
            os.unlink(cfg)
        else:
            with open(cfg, "w") as f:
                f.write(old)
    assert sh(home, sandbox, ctr, "echo alive") == "alive\n"


def test_stopped_container(home, sandbox, tmp_path):
    p = home("sandbox", "start", sandbox, IMAGE, "sh", "-c", "echo kept > /kept; exit 3",
             timeout=300)
    assert p.returncode == 0, p.stderr
    cid = p.stdout.strip()
    assert wait_for(lambda: any(l.startswith(cid) and "exited" in l
                                for l in home("sandbox", "ps", sandbox).stdout.splitlines()), 60)
    (tmp_path / "in").write_text("into a stopped one\n")
    p = home("sandbox", "cp", str(tmp_path / "in"), "%s:%s:/in" % (sandbox, cid))
    assert p.returncode == 0, p.stderr
    for name in ("kept", "in"):
        p = home("sandbox", "cp", "%s:%s:/%s" % (sandbox, cid, name), str(tmp_path / "o"))
        assert p.returncode == 0, p.stderr
        assert (tmp_path / "o").read_text() in ("kept\n", "into a stopped one\n")
        os.unlink(tmp_path / "o")
    home("sandbox", "stop", sandbox, cid, timeout=120)


def test_audited(home, sandbox, ctr):
    recs = home.json("audit", "ls", "--sandbox", sandbox, "--action", "sandbox.container.cp")
    assert any(r.get("details", {}).get("direction") == "in" for r in recs), recs[-3:]
    assert any(r.get("details", {}).get("direction") == "out" and
               r["details"].get("bytes", 0) > 0 for r in recs), recs[-3:]
