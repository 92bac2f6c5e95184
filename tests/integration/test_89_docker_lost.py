# SPDX-License-Identifier: Apache-2.0
# test_89_docker_lost.py - the one exit code of a process whose VM or agent went away
# (agentlink.h LINK_LOST_EXIT, 125; docs/errors.md): a running Docker container, a Docker
# exec and kosa8's own exec in the same sandbox all record it when the engine's QEMU is
# killed under them (before issue 26 the three read 255, 137 and 125). A daemon of this
# module's own: its engine is killed.
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import KOSA8, wait_for
from dockerkit import IMG, docker_cli, dockerpy, engine_home, needs_cli, needs_py, ok

pytestmark = [needs_cli, needs_py]


@pytest.fixture(scope="module")
def h(python_layout):
    for hh in engine_home(python_layout, "k8dl-"):
        yield hh


def test_lost_link_is_125_everywhere(h):
    c = dockerpy.DockerClient(base_url="unix://" + os.path.join(h.path, "docker.sock"),
                              version="auto")
    ctr = c.containers.run(IMG, ["sleep", "600"], detach=True)
    # a Docker exec that runs until the VM goes (its stream held by a client thread)
    ex = c.api.exec_create(ctr.id, ["sleep", "600"], stdout=True, stderr=True)
    sock = c.api.exec_start(ex["Id"], socket=True)
    # kosa8's own exec in the same VM, in the same container
    own = subprocess.Popen([KOSA8, "sandbox", "exec", "docker-engine", ctr.id[:12], "sleep",
                            "600"], env=dict(os.environ, KOSA8_HOME=h.path),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: c.api.exec_inspect(ex["Id"])["Running"], 60)
    time.sleep(2)       # kosa8's exec started too
    pid = h.json("sandbox", "inspect", "docker-engine")["pid"]
    assert pid > 0
    os.kill(pid, signal.SIGKILL)

    out, err = own.communicate(timeout=120)
    assert own.returncode == 125, (own.returncode, out, err)
    assert "went away" in err, err
    assert wait_for(lambda: c.api.exec_inspect(ex["Id"])["ExitCode"] is not None, 60)
    assert c.api.exec_inspect(ex["Id"])["ExitCode"] == 125, c.api.exec_inspect(ex["Id"])
    sock.close()
    assert wait_for(lambda: c.api.inspect_container(ctr.id)["State"]["Status"] == "exited", 60)
    st = c.api.inspect_container(ctr.id)["State"]
    assert st["ExitCode"] == 125, st
    assert st["Error"] == "the sandbox's VM or agent went away", st
    # docker ps says the same, and the engine comes back for the next container
    ps = ok(docker_cli(h, "ps", "-a", "--format", "{{.Status}}")).strip()
    assert ps.startswith("Exited (125)"), ps
    assert ok(docker_cli(h, "run", "--rm", IMG, "echo", "back")) == "back\n"
    ctr.remove(force=True)
