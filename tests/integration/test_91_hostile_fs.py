# SPDX-License-Identifier: Apache-2.0
# Attacks on shared folders (issue 10) from root in the guest: swapping a host folder for
# a symlink so that the next boot serves something else, and kosa8-fs / kosa8-net
# checked to run jailed. Each test asserts the attack fails and the host is unchanged.
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import own_home, make_sandbox, wait_for

pytestmark = pytest.mark.hostile

IMAGE = "python:3.12-slim"


def tree_digest(path):
    """Names, modes and contents of everything under path (what 'unchanged' means)."""
    h = hashlib.sha256()
    for top, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for n in sorted(files) + dirs:
            p = os.path.join(top, n)
            st = os.lstat(p)
            h.update(("%s %o %d\n" % (os.path.relpath(p, path), st.st_mode, st.st_size)).encode())
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


@pytest.fixture(scope="module")
def base():
    b = tempfile.mkdtemp(prefix="k8hf-", dir="/tmp")
    os.chmod(b, 0o755)
    yield b
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(b, ignore_errors=True)


@pytest.fixture(scope="module")
def fhome(python_layout):
    yield from own_home("k8hf-", python_layout)


def secret_dir(base, name):
    other = os.path.join(base, name)
    os.makedirs(other)
    with open(os.path.join(other, "key.txt"), "w") as f:
        f.write("SECRET-%s\n" % name)
    return other


def audit(h, name, action):
    return [r for r in h.json("audit", "ls", "--sandbox", name) if r["action"] == action]


def test_symlink_swapped_root_is_refused_at_the_next_boot(fhome, base):
    """The issue's escape: root in the guest renames a shared sub-folder away and puts a
    symlink to a host folder in its place; the next boot must not serve the target."""
    p = os.path.join(base, "p")
    os.makedirs(os.path.join(p, "data"))
    other = secret_dir(base, "other")
    before = tree_digest(other)
    name = make_sandbox(fhome, "swap", "--mount", p + ":/p", "--mount",
                        os.path.join(p, "data") + ":/data:ro")
    try:
        r = fhome("sandbox", "run", name, IMAGE, "sh", "-c",
                  "mv /p/data /p/data.old && ln -s %s /p/data" % other, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert os.path.islink(os.path.join(p, "data"))
        fhome.stop()
        fhome.start()
        r = fhome("sandbox", "run", name, IMAGE, "cat", "/data/key.txt", timeout=300)
        assert "SECRET" not in r.stdout + r.stderr
        assert r.returncode != 0
        assert os.path.join(p, "data") in r.stderr, r.stderr
        assert "recreate" in r.stderr, r.stderr
        assert audit(fhome, name, "sandbox.mount.changed"), fhome.json("audit", "ls")
        assert tree_digest(other) == before
    finally:
        fhome("sandbox", "rm", name)
