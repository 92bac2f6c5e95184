# SPDX-License-Identifier: Apache-2.0
# test_48_sdk.py - the Python SDK (sdk/python, docs/sdk.md) against the real daemon:
# `pip install ./sdk/python` with no index into a fresh venv, and the guide's run_code as
# docs/sdk.md writes it, run from there; streaming output and exit codes, files in and out
# of a container, checkpoint, rewind, fork, pause, resume, egress read and changed live,
# contexts and cells, errors as typed exceptions with the daemon's message, and context
# managers that clean up. One sandbox for the module, made and removed by the SDK.
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import TOP

sys.path.insert(0, os.path.join(TOP, "sdk", "python"))
import kosa8  # noqa: E402

SB = "interp"


@pytest.fixture(scope="module")
def fake_home():
    """A $HOME with the guide's ~/interp/in."""
    d = tempfile.mkdtemp(prefix="k8sdk-")
    os.makedirs(os.path.join(d, "interp", "in"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def client(home):
    return kosa8.Client(home=home.path)


@pytest.fixture(scope="module")
def sb(home, loaded, client, fake_home):
    progress = []
    with kosa8.Sandbox.create(SB, image=loaded, cpus=1, memory_mib=512, disk_gb=2,
                              mounts=[(os.path.join(fake_home, "interp", "in"), "/in", True)],
                              client=client, progress=progress.append) as s:
        assert progress, "no progress line reached the callback"
        s.checkpoint("clean")
        yield s
    # the with block removed it
    with pytest.raises(kosa8.NotFound):
        kosa8.Sandbox(SB, client).info()


def test_pip_install_without_index_and_the_guides_run_code(home, sb, fake_home):
    venv = os.path.join(fake_home, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    p = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-index",
                        "--disable-pip-version-check", os.path.join(TOP, "sdk", "python")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "Successfully installed kosa8-0.1.0" in p.stdout, \
        p.stdout + p.stderr
    with open(os.path.join(TOP, "docs", "sdk.md")) as f:
        doc = f.read()
    block = re.search(r"<!-- run_code: begin -->\n```python\n(.*?)```\n<!-- run_code: end -->",
                      doc, re.S).group(1)
    script = block + (
        "print(repr(run_code('print(6 * 7)')))\n"
        "print(repr(run_code('import sys; print(\"to stderr\", file=sys.stderr); 1/0')))\n"
        "print(kosa8.__file__)\n")
    env = dict(os.environ, HOME=fake_home, KOSA8_HOME=home.path, PYTHONPATH="")
    n0 = len(kosa8.Client(home.path).audit(sandbox=SB, action="checkpoint.rewind"))
    p = subprocess.run([os.path.join(venv, "bin", "python"), "-c", script], cwd=fake_home,
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == repr("42\n")
    assert "to stderr" in lines[1] and "ZeroDivisionError" in lines[1]
    assert lines[2].startswith(venv), "kosa8 was not imported from the venv"
    rewinds = kosa8.Client(home.path).audit(sandbox=SB, action="checkpoint.rewind")
    assert len(rewinds) == n0 + 2, "run_code did not rewind after each call"


def test_run_streams_and_gives_exit_codes(sb):
    seen = []
    t0 = time.monotonic()
    r = sb.run("echo one; sleep 3; echo two >&2; exit 7",
               on_stdout=lambda b: seen.append((time.monotonic() - t0, "out", b)),
               on_stderr=lambda b: seen.append((time.monotonic() - t0, "err", b)))
    assert r.exit_code == 7 and not r.ok and r.stdout == b"one\n" and r.stderr == b"two\n"
    assert r.text == "one\ntwo\n" and r.container and len(r.container) == 12
    assert [s[1:] for s in seen] == [("out", b"one\n"), ("err", b"two\n")]
    assert seen[1][0] - seen[0][0] >= 2.0, "output was not streamed as it came"
    assert sb.run(["python3", "-"], stdin="print(6*7)").stdout == b"42\n"
    with pytest.raises(kosa8.ProcessError) as e:
        sb.run(["false"], check=True)
    assert e.value.exit_code == 1
    r = sb.run(["sleep", "60"], timeout=2)
    assert r.timed_out and r.exit_code == 137 and r.signal == 9


def test_containers_and_files(sb):
    c = sb.start(["sleep", "3600"])
    try:
        assert any(x.id == c.id for x in sb.containers())
        c.put_file("/tmp/data.csv", "a,b\n1,2\n")
        assert sb.exec(c, ["wc", "-l", "/tmp/data.csv"]).stdout == b"2 /tmp/data.csv\n"
        sb.exec(c, ["sh", "-c", "head -c 300000 /dev/urandom > /tmp/blob"], check=True)
        blob = c.get_file("/tmp/blob")
        assert len(blob) == 300000
        assert sb.exec(c, ["sha256sum", "/tmp/blob"]).stdout.split()[0].decode() == \
            __import__("hashlib").sha256(blob).hexdigest()
        with pytest.raises(kosa8.NotFound):
            c.get_file("/tmp/nope")
        with pytest.raises(kosa8.BadRequest):
            c.get_file("/tmp/blob", max_bytes=1000)
    finally:
        c.rm()


def test_checkpoint_rewind_fork(client, sb):
    sb.run_cell("x = 1")
    sb.checkpoint("x1")
    sb.run_cell("x = 2")
    assert sb.rewind("x1")["label"] == "x1"
    assert sb.run_cell("x").text == "1"
    assert any(c["label"] == "x1" for c in sb.checkpoints())
    with sb.fork("x1", "interp-fork") as f:
        assert f.run_cell("x + 10").text == "11"
        assert f.run(["true"]).ok
    with pytest.raises(kosa8.NotFound):
        kosa8.Sandbox("interp-fork", client).info()
    assert sb.run_cell("x").text == "1"


def test_pause_and_resume(sb):
    assert sb.pause(in_memory=True)["to"] == "memory"
    assert sb.info().get("paused_to") == "memory"
    with pytest.raises(kosa8.Conflict) as e:
        sb.run(["true"])
    assert "paused" in e.value.message and e.value.status == 409
    assert sb.resume()["from"] == "memory"
    assert sb.run(["true"]).ok


def test_egress_read_and_changed_live(sb):
    assert sb.egress()["mode"] == "deny"
    e = sb.egress(allow=["example.org:443"])
    assert e["mode"] == "allow-list" and "example.org:443" in e["rules"] and e["applied"] == "live"
    e = sb.egress(remove=["example.org:443"], mode="deny")
    assert e["mode"] == "deny" and e["rules"] == []
    with pytest.raises(kosa8.BadRequest):
        sb.egress(mode="everything")


def test_contexts_and_cells(sb):
    ex = sb.run_cell("import sys\nprint('hi')\nprint('e', file=sys.stderr)\n6 * 7")
    assert ex.ok and ex.text == "42" and ex.stdout == "hi\n" and ex.stderr == "e\n"
    ex = sb.run_cell("1/0")
    assert not ex.ok and ex.error["name"] == "ZeroDivisionError"
    events = []
    sb.run_cell("print(1)", on_event=events.append)
    assert [e["type"] for e in events] == ["start", "stdout", "end"]
    with sb.create_context(cwd="/tmp", env={"K": "v"}) as ctx:
        assert ctx.run("import os\n(os.getcwd(), os.environ['K'])").text == "('/tmp', 'v')"
        ctx.run("y = 3")
        ctx.restart()
        assert ctx.run("y").error["name"] == "NameError"
        cid = ctx.id
    assert cid not in [c.id for c in sb.contexts()]


def test_errors_are_typed(client, sb, loaded):
    with pytest.raises(kosa8.NotFound) as e:
        kosa8.Sandbox("no-such-sandbox", client).info()
    assert "no-such-sandbox" in e.value.message and e.value.code == "not_found"
    with pytest.raises(kosa8.Conflict):
        kosa8.Sandbox.create(SB, client=client)
    with pytest.raises(kosa8.BadRequest):
        kosa8.Sandbox.create("Bad Name!", client=client)
    with pytest.raises(kosa8.Kosa8Error) as e:
        sb.run(["no-such-command"])
    assert e.value.exit_code == 127
    with pytest.raises(kosa8.NotFound):
        sb.run_cell("1", context="0123456789ab-nope")
    with pytest.raises(kosa8.DaemonNotRunning):
        kosa8.Client(home="/tmp/no-kosa8-here").status()
    assert isinstance(kosa8.NotFound("x"), kosa8.Kosa8Error)
