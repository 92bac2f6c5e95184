# SPDX-License-Identifier: Apache-2.0
# Errors say what happened and what to do; exit codes are the documented ones.
import os
import re
import shutil
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


def _not_created(home, *names):
    have = [s["name"] for s in home.json("sandbox", "ls")]
    for n in names:
        if n in have:
            home("sandbox", "rm", n)
    return not any(n in have for n in names)


def test_bad_egress_rules_are_refused_clearly(home):
    try:
        p = home("sandbox", "create", "netbox", "--memory", "256", "--egress-allow", "bad rule!!")
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert "bad rule!!" in p.stderr, p.stderr
        # It names the accepted forms: names, wildcards, ports, IPs and CIDRs.
        assert "accepted forms" in p.stderr and "*." in p.stderr, p.stderr
        assert re.search(r"\d+\.\d+\.\d+\.\d+/\d+", p.stderr), p.stderr
        for bad in ("", "example.org:0", "example.org:99999", "10.0.0.0/33", "*", "a..b"):
            p = home("sandbox", "create", "netbox", "--memory", "256", "--egress-allow", bad)
            assert p.returncode == 2, (bad, p.returncode, p.stderr)
            assert "egress" in p.stderr, (bad, p.stderr)
        p = home("sandbox", "create", "netbox", "--memory", "256", "--egress", "sometimes")
        assert p.returncode == 2 and "deny" in p.stderr and "allow-all" in p.stderr, p.stderr
        p = home("sandbox", "create", "netbox", "--memory", "256", "--egress", "deny",
                 "--egress-allow", "x.org")
        assert p.returncode == 2 and "contradict" in p.stderr, p.stderr
    finally:
        assert _not_created(home, "netbox"), "a refused create left a sandbox behind"


def test_bad_egress_rule_message_says_it_once(home):
    p = home("sandbox", "create", "netbox", "--memory", "256", "--egress-allow", "bad rule!!")
    assert p.returncode == 2
    assert p.stderr.count("bad rule!!") == 1, "the rule is named twice: " + p.stderr


def test_bad_mounts_are_refused_clearly(home):
    d = tempfile.mkdtemp(prefix="k8x-", dir="/tmp")
    f = os.path.join(d, "file")
    open(f, "w").close()
    try:
        p = home("sandbox", "create", "mntbox", "--memory", "256",
                 "--mount", "/nonexistent-k8:/x")
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert "/nonexistent-k8" in p.stderr, p.stderr
        assert "does not exist" in p.stderr or "No such file" in p.stderr, p.stderr
        p = home("sandbox", "create", "mntbox", "--memory", "256", "--mount", d + ":relative")
        assert p.returncode == 2 and "absolute" in p.stderr, p.stderr
        p = home("sandbox", "create", "mntbox", "--memory", "256", "--mount", d)
        assert p.returncode == 2 and "HOST:GUEST" in p.stderr, p.stderr
        p = home("sandbox", "create", "mntbox", "--memory", "256", "--mount", d + ":/x:rx")
        assert p.returncode == 2 and "ro" in p.stderr, p.stderr
        for guest in ("/", "/a/../etc"):
            p = home("sandbox", "create", "mntbox", "--memory", "256", "--mount", d + ":" + guest)
            assert p.returncode == 2, (guest, p.stderr)
        p = home("sandbox", "create", "mntbox", "--memory", "256", "--mount", f + ":/x")
        assert p.returncode == 2 and ("director" in p.stderr or "folder" in p.stderr), p.stderr
        p = home("sandbox", "create", "mntbox", "--memory", "256", "--mount", d + ":/proc")
        assert p.returncode == 2 and "reserved" in p.stderr, p.stderr
        p = home("sandbox", "create", "mntbox", "--memory", "256", "--mount", d + ":/x",
                 "--mount", d + ":/x/y")
        assert p.returncode == 2 and "overlap" in p.stderr, p.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)
        assert _not_created(home, "mntbox"), "a refused create left a sandbox behind"


def test_image_in_use_cannot_be_removed(home, sandbox, loaded):
    p = home("image", "rm", loaded)
    assert p.returncode == 5, (p.returncode, p.stderr)
    assert "attached to sandbox" in p.stderr and sandbox in p.stderr
    assert any(i["ref"].endswith("python:3.12-slim") for i in home.json("image", "ls"))


def _commands():
    """Every (group, verb) the CLI lists in its groups' help."""
    h = tempfile.mkdtemp(prefix="k8h-", dir="/tmp")
    top = run(["--help"], h).stdout
    groups = sorted(set(re.findall(r"^  ([a-z]+) [a-z|]+", top, re.M)) -
                    {"rewind", "login", "version"})
    out = []
    for g in groups:
        text = run([g, "--help"], h).stdout
        body = text.split("Commands:", 1)[1] if "Commands:" in text else ""
        out += [(g, v) for v in re.findall(r"^  ([a-z]+) ", body.split("\n\n")[0] + "\n", re.M)]
    return h, out


def test_every_command_has_help():
    """docs/reference/cli.md: every command's --help prints its usage and an example, exit 0;
    a flag after the command never crashes the CLI (no option table is not an excuse)."""
    h, cmds = _commands()
    assert len(cmds) >= 35, cmds
    for g in ("daemon", "sandbox", "checkpoint", "image", "model", "bundle", "secret", "audit"):
        assert any(c[0] == g for c in cmds), "group %s missing from kosa8 --help" % g
    for g, v in cmds + [("rewind", None), ("login", None)]:
        args = [g, v, "--help"] if v else [g, "--help"]
        p = run(args, h)
        assert p.returncode == 0, (args, p.returncode, p.stderr)
        assert p.stdout.startswith("Usage: kosa8 "), (args, p.stdout[:200])
        assert re.search(r"\nExamples?:\n", p.stdout), "no example in: kosa8 %s" % " ".join(args)
        if v:
            p = run([g, v, "--no-such-flag"], h)
            assert p.returncode == 2, (args, p.returncode, p.stderr)
    shutil.rmtree(h, ignore_errors=True)
