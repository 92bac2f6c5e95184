# SPDX-License-Identifier: Apache-2.0
# The guest agent spoken to directly, with no daemon in between: tests/agent/smoke.py
# (the agent protocol: hello, run, streams, credit, signals, limits, image slots) and
# tests/agent/netfs_smoke.py (eth0 and the FUSE shuttle against kosa8-fs). They boot the
# guest image under QEMU themselves and print PASS/FAIL/SKIP per check; here a FAIL or a
# SKIP fails the test, so they run in CI and cannot pass by not running.
import os
import subprocess

import pytest

from conftest import TOP


@pytest.mark.parametrize("script", ["smoke.py", "netfs_smoke.py"])
def test_agent_smoke(script):
    p = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "tests", "agent", script)],
                       capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    lines = out.splitlines()
    fails = [l for l in lines if l.startswith("FAIL")]
    skips = [l for l in lines if l.startswith("SKIP")]
    passes = [l for l in lines if l.startswith("PASS")]
    assert p.returncode == 0 and not fails, "\n".join(fails)[:6000] + "\n...\n" + out[-1500:]
    assert not skips, "checks did not run:\n" + "\n".join(skips)
    assert passes, "no check ran:\n" + out[-2000:]
