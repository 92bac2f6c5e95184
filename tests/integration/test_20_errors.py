# SPDX-License-Identifier: Apache-2.0
# Errors say what happened and what to do; exit codes are the documented ones.
import os
import tempfile

from conftest import run


def test_daemon_not_running():
    h = tempfile.mkdtemp(prefix="k8n-", dir="/tmp")
    p = run(["sandbox", "ls"], h)
    assert p.returncode == 3
    assert "kosa8 daemon start" in p.stderr


def test_unknown_sandbox(home, loaded):
    p = home("sandbox", "run", "nosuch", loaded, "true")
    assert p.returncode in (4, 125)
    assert "nosuch" in p.stderr and "sandbox ls" in p.stderr
    p = home("sandbox", "inspect", "nosuch")
    assert p.returncode == 4


def test_bad_names_and_ranges(home):
    p = home("sandbox", "create", "Bad Name")
    assert p.returncode == 2 and "name" in p.stderr
    p = home("sandbox", "create", "okname", "--memory", "5")
    assert p.returncode == 2 and "memory" in p.stderr
    p = home("sandbox", "create", "okname", "--cpus", "0")
    assert p.returncode == 2


def test_name_taken(home, sandbox):
    p = home("sandbox", "create", sandbox, "--memory", "256")
    assert p.returncode == 5
    assert "already exists" in p.stderr


def test_image_not_loaded(home, sandbox):
    p = home("sandbox", "run", sandbox, "nosuchimage:1.0", "true")
    assert p.returncode in (4, 125)
    assert "not loaded" in p.stderr or "image load" in p.stderr


def test_command_not_found(home, sandbox, loaded):
    p = home("sandbox", "run", sandbox, loaded, "no-such-command")
    assert p.returncode == 127
    assert "no-such-command" in p.stderr


def test_unsupported_flags_are_refused_clearly(home):
    p = home("sandbox", "create", "netbox", "--egress-allow", "example.org")
    assert p.returncode != 0
    assert "egress" in p.stderr


def test_image_in_use_cannot_be_removed(home, sandbox, loaded):
    p = home("image", "rm", loaded)
    assert p.returncode == 5, (p.returncode, p.stderr)
    assert "attached to sandbox" in p.stderr and sandbox in p.stderr
    assert any(i["ref"].endswith("python:3.12-slim") for i in home.json("image", "ls"))
