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
    started: refused or kept inside the container; nothing on the host changes."""
    marker = "/tmp/k8dg-escape-%d" % os.getpid()
    assert not os.path.exists(marker)
    ok(docker(h, "create", "--name", "hc", IMG, "sh", "-c", "ls /tmp; cat /tmp/out/x"))
    try:
        st, body = raw(h, "PUT", "/v1.47/containers/hc/archive?path=/tmp",
                       tar_of([("../../../../.." + marker, b"pwned")]))
        assert st >= 400, (st, body)
        st, body = raw(h, "PUT", "/v1.47/containers/hc/archive?path=/tmp",
                       tar_of([("out", None, "/tmp"), ("out/x", b"inside")]))
        # either refused, or written below the container's own /tmp
        assert not os.path.exists(marker)
        assert not os.path.exists("/tmp/x") or open("/tmp/x", "rb").read() != b"inside"
        p = docker(h, "start", "-a", "hc")
        assert "k8dg-escape" not in p.stdout
        # the daemon keeps serving
        assert ok(docker(h, "version", "--format", "{{.Server.Version}}")).strip()
    finally:
        docker(h, "rm", "-f", "hc")
        assert not os.path.exists(marker)
