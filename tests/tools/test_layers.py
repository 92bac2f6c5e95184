# SPDX-License-Identifier: Apache-2.0
"""The daemon's module rules (docs/design.md "The daemon's modules", issue 26) hold on the
tree, and their checks fail when a rule is broken: scripts/check-layers.sh on an upward
include and on any cycle of includes, two modules of one layer included; scripts/funclen.py
on a daemon function over 120 lines. Each broken case runs the real script on a copy of
src/daemon with one file changed."""
import os
import re
import shutil
import subprocess

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FUNCLEN = os.path.join(TOP, "scripts", "funclen.py")


def allowed():
    """The --allow names of the Makefile's FUNCLEN_ALLOW (each with its reason there)."""
    with open(os.path.join(TOP, "Makefile")) as f:
        m = re.search(r"^FUNCLEN_ALLOW :=(.*)$", f.read(), re.M)
    return m.group(1).split() if m else []


@pytest.fixture
def tree(tmp_path):
    """A copy of scripts/check-layers.sh and src/daemon/ laid out as in the checkout."""
    os.makedirs(tmp_path / "scripts")
    shutil.copy(os.path.join(TOP, "scripts", "check-layers.sh"), tmp_path / "scripts")
    shutil.copytree(os.path.join(TOP, "src", "daemon"), tmp_path / "src" / "daemon",
                    ignore=shutil.ignore_patterns("*.o", "*.d"))
    return tmp_path


def check_layers(root):
    return subprocess.run(["sh", os.path.join(root, "scripts", "check-layers.sh")],
                          capture_output=True, text=True)


def include(root, module, header):
    """Add `#include "daemon/header.h"` to src/daemon/module.c after its own include."""
    p = os.path.join(root, "src", "daemon", module + ".c")
    with open(p) as f:
        text = f.read()
    own = '#include "daemon/%s.h"\n' % module
    assert own in text, p
    with open(p, "w") as f:
        f.write(text.replace(own, own + '#include "daemon/%s.h"\n' % header, 1))


def test_the_tree_keeps_the_rules():
    p = subprocess.run(["sh", os.path.join(TOP, "scripts", "check-layers.sh")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "known cycle" not in p.stdout, p.stdout       # none is allowed any more
    daemon = [os.path.join(TOP, "src", "daemon", f)
              for f in sorted(os.listdir(os.path.join(TOP, "src", "daemon")))
              if f.endswith(".c")]
    p = subprocess.run([FUNCLEN, "--max", "120"] + allowed() + daemon,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_an_upward_include_is_refused(tree):
    include(tree, "vm", "sandbox")              # layer 1 reaching up to layer 6
    p = check_layers(tree)
    assert p.returncode != 0
    assert "vm.c (layer 1) includes daemon/sandbox.h (layer 6)" in p.stderr, p.stderr


def test_a_cycle_on_one_layer_is_refused(tree):
    """docker_logs and docker_exec share layer 7: neither points up, yet together they are
    a cycle (the old check let those through)."""
    include(tree, "docker_logs", "docker_exec")
    include(tree, "docker_exec", "docker_logs")
    p = check_layers(tree)
    assert p.returncode != 0, p.stdout + p.stderr
    cyc = re.findall(r"check-layers: (\w+) is in a cycle", p.stderr)
    assert set(cyc) & {"docker_logs", "docker_exec"}, p.stderr
    assert "includes daemon/" not in p.stderr, p.stderr    # no upward edge was named


def test_a_module_without_a_layer_is_refused(tree):
    with open(tree / "src" / "daemon" / "newthing.c", "w") as f:
        f.write('#include "daemon/log.h"\n')
    p = check_layers(tree)
    assert p.returncode != 0
    assert "module 'newthing' has no layer" in p.stderr, p.stderr


def test_a_long_daemon_function_is_refused(tmp_path):
    src = tmp_path / "long.c"
    body = "".join("\tx += %d;\n" % i for i in range(116))
    src.write_text("/* a function of 121 lines, one of 120 */\n"
                   "static int too_long(int x)\n{\n%s\treturn x;\n}\n\n"
                   "static int just_right(int x)\n{\n%s\treturn x;\n}\n"
                   % (body + "\tx++;\n", body))
    p = subprocess.run([FUNCLEN, "--max", "120", str(src)], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert "too_long is 121 lines" in p.stderr, p.stderr
    assert "just_right" not in p.stderr, p.stderr
    p = subprocess.run([FUNCLEN, "--max", "120", "--allow", "too_long", str(src)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
