# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the model engine tests: the kosa8-model binary, llama.cpp via node-llama-cpp
(installed once into build/node-ref, never committed) and generated GGUF files (cached in
build/model-test, keyed by the writer's source)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(TOP, os.environ.get("B", "build"))
NODE_REF = os.path.join(TOP, "build", "node-ref")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gguf_writer  # noqa: E402


def _missing(why):
    if os.environ.get("CI") == "true":
        pytest.fail(why + " (CI=true: the reference comparison must run)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def engine():
    b = os.path.join(os.environ.get("KOSA8_BIN", os.path.join(BUILD, "bin")), "kosa8-model")
    if not os.access(b, os.X_OK):
        pytest.fail("%s is missing: run make first" % b)

    def run(*args, check=True):
        p = subprocess.run([b, *map(str, args)], capture_output=True, text=True, timeout=600)
        if check and p.returncode:
            raise AssertionError("kosa8-model %s: %s" % (args[:2], p.stderr))
        return json.loads(p.stdout) if p.returncode == 0 else p
    return run


@pytest.fixture(scope="session")
def ref():
    """node ref.mjs, with node-llama-cpp 3.21.1 installed into build/node-ref on first use."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        _missing("node and npm are needed for the llama.cpp reference (node-llama-cpp)")
    mod = os.path.join(NODE_REF, "node_modules", "node-llama-cpp")
    if not os.path.isdir(mod):
        os.makedirs(NODE_REF, exist_ok=True)
        pkg = os.path.join(NODE_REF, "package.json")
        if not os.path.exists(pkg):
            with open(pkg, "w") as f:
                f.write('{"name": "kosa8-node-ref", "private": true}\n')
        p = subprocess.run([npm, "i", "-E", "node-llama-cpp@3.21.1"], cwd=NODE_REF,
                           capture_output=True, text=True, timeout=900)
        if p.returncode:
            _missing("npm i node-llama-cpp@3.21.1 failed: " + p.stderr[-500:])
    env = dict(os.environ, K8_NODE_REF=NODE_REF)

    def run(*args, stdin=None):
        p = subprocess.run([node, os.path.join(HERE, "ref.mjs"), *map(str, args)], input=stdin,
                           capture_output=True, text=True, timeout=900, env=env)
        if p.returncode:
            raise AssertionError("ref.mjs %s: %s" % (args[:2], p.stderr[-2000:]))
        return json.loads(p.stdout.strip().splitlines()[-1])
    return run


_WRITER_HASH = hashlib.sha256(open(os.path.join(HERE, "gguf_writer.py"), "rb").read()).hexdigest()[:12]


@pytest.fixture(scope="session")
def model_file():
    d = os.path.join(BUILD, "model-test")
    os.makedirs(d, exist_ok=True)

    def make(name, **kw):
        path = os.path.join(d, "%s-%s.gguf" % (name, _WRITER_HASH))
        if not os.path.exists(path):
            gguf_writer.make_model(path + ".tmp", **kw)
            os.rename(path + ".tmp", path)
        return path
    return make
