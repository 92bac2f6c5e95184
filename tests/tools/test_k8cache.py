# SPDX-License-Identifier: Apache-2.0
"""The machine-wide build cache (scripts/k8cache.py): an entry is used only when it matches
its sums, a build that fails or is killed leaves nothing that a later use trusts, and two
builders of one entry build it once."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K8C = os.path.join(TOP, "scripts", "k8cache.py")


@pytest.fixture()
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("KOSA8_CACHE", str(tmp_path))
    return tmp_path


def k8c(*args, **kw):
    return subprocess.run([sys.executable, K8C, *args], capture_output=True, text=True, **kw)


FILL = 'echo one > "$K8CACHE_OUT/a"; mkdir "$K8CACHE_OUT/d"; ln -s ../a "$K8CACHE_OUT/d/l"'


def test_built_once_then_reused(root):
    p = k8c("build", "demo", "k1", "--", "sh", "-c", FILL + '; echo built >> "$0"',
            str(root / "log"))
    assert p.returncode == 0, p.stderr
    entry = p.stdout.strip()
    assert entry == str(root / "demo-k1") and open(os.path.join(entry, "a")).read() == "one\n"
    assert os.readlink(os.path.join(entry, "d", "l")) == "../a"
    p = k8c("build", "demo", "k1", "--", "sh", "-c", 'echo built >> "$0"', str(root / "log"))
    assert p.returncode == 0 and p.stdout.strip() == entry
    assert open(root / "log").read() == "built\n"            # the second call built nothing
    assert k8c("get", "demo", "k1").stdout.strip() == entry


@pytest.mark.parametrize("tamper", ["change", "add", "remove", "relink"])
def test_tampered_entry_is_never_used(root, tamper):
    entry = k8c("build", "demo", "k2", "--", "sh", "-c", FILL).stdout.strip()
    if tamper == "change":
        with open(os.path.join(entry, "a"), "a") as f:
            f.write("x")
    elif tamper == "add":
        open(os.path.join(entry, "d", "new"), "w").close()
    elif tamper == "remove":
        os.unlink(os.path.join(entry, "a"))
    else:
        os.unlink(os.path.join(entry, "d", "l"))
        os.symlink("/etc/passwd", os.path.join(entry, "d", "l"))
    p = k8c("get", "demo", "k2")
    assert p.returncode == 1 and p.stdout == "", p.stdout
    assert "failed its check" in p.stderr
    assert not os.path.exists(entry)                          # set aside, then removed
    # the next build makes it again, whole
    assert k8c("build", "demo", "k2", "--", "sh", "-c", FILL).returncode == 0
    assert open(os.path.join(entry, "a")).read() == "one\n"


def test_failed_or_killed_build_leaves_nothing_trusted(root):
    p = k8c("build", "demo", "k3", "--", "sh", "-c", 'echo half > "$K8CACHE_OUT/a"; exit 3')
    assert p.returncode == 1 and "nothing was cached" in p.stderr
    assert not os.path.exists(root / "demo-k3")
    assert k8c("get", "demo", "k3").returncode == 1
    # killed in the middle: only a .build-* directory, which no use reads
    proc = subprocess.Popen([sys.executable, K8C, "build", "demo", "k3", "--", "sh", "-c",
                             'echo half > "$K8CACHE_OUT/a"; touch "$0"; sleep 60',
                             str(root / "started")])
    for _ in range(100):
        if os.path.exists(root / "started"):
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not os.path.exists(root / "demo-k3")
    assert [n for n in os.listdir(root) if n.startswith(".build-demo-k3")]
    assert k8c("get", "demo", "k3").returncode == 1
    # the next build clears the leftover and builds
    assert k8c("build", "demo", "k3", "--", "sh", "-c", FILL).returncode == 0
    assert not [n for n in os.listdir(root) if n.startswith(".build-demo-k3")]


def test_two_builders_build_once(root):
    out = []

    def one():
        out.append(k8c("build", "demo", "k4", "--", "sh", "-c",
                       'sleep 1; echo b >> "$0"; ' + FILL, str(root / "log")))
    ts = [threading.Thread(target=one) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [p.returncode for p in out] == [0, 0], [p.stderr for p in out]
    assert open(root / "log").read() == "b\n"


def test_key_follows_contents(tmp_path):
    f = tmp_path / "recipe"
    f.write_text("v1")
    k1 = k8c("key", "-f", str(f), "-s", "bookworm").stdout
    assert k1 == k8c("key", "-f", str(f), "-s", "bookworm").stdout
    f.write_text("v2")
    assert k8c("key", "-f", str(f), "-s", "bookworm").stdout != k1
    f.write_text("v1")
    assert k8c("key", "-f", str(f), "-s", "trixie").stdout != k1
