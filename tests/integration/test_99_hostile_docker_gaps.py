# SPDX-License-Identifier: Apache-2.0
# test_99_hostile_docker_gaps.py - the Docker API's copy into a container before its first
# start (docs/docker.md), from the attacker's side: an API client's archive with `..`
# entries and links out, into a root the agent prepared. Each test asserts the attack
# fails and the host's files are as they were.
import os

import pytest

from dockerkit import IMG, docker_cli, engine_home, needs_cli, ok
from test_81_docker_gaps import raw, tar_of

pytestmark = [pytest.mark.hostile, needs_cli]


@pytest.fixture(scope="module")
def h(python_layout):
    yield from engine_home(python_layout, "k8hg-")


def docker(h, *args, **kw):
    return docker_cli(h, *args, **kw)


def test_hostile_archive_into_created_container(h):
    """An archive with `..` entries or a link that points out, into a container never
    started: both are refused (the first before anything is written, the second before
    its file goes through the link); the container then finds no escaped file anywhere in
    its root, and nothing on the host changed."""
    marker = "k8dg-escape-%d" % os.getpid()
    assert not os.path.exists("/tmp/" + marker)
    ok(docker(h, "create", "--name", "hc", IMG, "sh", "-c",
              "ls /tmp; cat /tmp/out/x; echo; find / -xdev -name 'k8dg-escape*'; echo end"))
    try:
        st, body = raw(h, "PUT", "/v1.47/containers/hc/archive?path=/tmp",
                       tar_of([("../../../../../tmp/" + marker, b"pwned")]))
        assert st == 400, (st, body)
        assert b".." in body, body
        # a link to /tmp, then a file through it: refused (a link in the archive is never
        # followed by its own later entries)
        st, body = raw(h, "PUT", "/v1.47/containers/hc/archive?path=/tmp",
                       tar_of([("out", None, "/tmp"), ("out/x", b"inside")]))
        assert st == 400 and b"through a symlink" in body, (st, body)
        p = docker(h, "start", "-a", "hc")
        assert p.returncode == 0, (p.stdout, p.stderr)
        out = p.stdout.split()
        # nothing written through the link, no escaped file anywhere in the container
        assert out[-1:] == ["end"] and set(out[:-1]) <= {"out"}, p.stdout
        assert not os.path.exists("/tmp/" + marker)
        assert not os.path.exists("/tmp/x") or open("/tmp/x", "rb").read() != b"inside"
        # the daemon keeps serving
        assert ok(docker(h, "version", "--format", "{{.Server.Version}}")).strip()
    finally:
        docker(h, "rm", "-f", "hc")
        assert not os.path.exists("/tmp/" + marker)
