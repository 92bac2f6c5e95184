# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the model engine tests: the kosa8-model binary, llama.cpp via node-llama-cpp
and generated GGUF files, both cached machine-wide (scripts/k8cache.py: the npm set "llama"
of scripts/npm-pins, installed once; each model file keyed by its generator's source and
arguments), never committed."""
import json
import os
import shutil
import subprocess
import sys

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(TOP, os.environ.get("B", "build"))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(TOP, "scripts"))

import gguf_writer  # noqa: E402
import k8cache  # noqa: E402


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
    """node ref.mjs, with node-llama-cpp (scripts/npm-pins, "llama") installed on first use."""
    node = shutil.which("node")
    if not node or not shutil.which("npm"):
        _missing("node and npm are needed for the llama.cpp reference (node-llama-cpp)")
    env = dict(os.environ, K8_NODE_REF=npm_set("llama"))

    def run(*args, stdin=None):
        p = subprocess.run([node, os.path.join(HERE, "ref.mjs"), *map(str, args)], input=stdin,
                           capture_output=True, text=True, timeout=900, env=env)
        if p.returncode:
            raise AssertionError("ref.mjs %s: %s" % (args[:2], p.stderr[-2000:]))
        return json.loads(p.stdout.strip().splitlines()[-1])
    return run


def npm_set(name):
    """The directory holding node_modules of the npm set NAME (scripts/npm-pins)."""
    try:
        return k8cache.npm(name)
    except RuntimeError as e:
        _missing(str(e))


def cached_gguf(name, sources, make, **kw):
    """A generated model file, made once per machine by make(path, **kw): the cache entry
    gguf-NAME-<key of the generator's SOURCES (files here) and kw>."""
    return k8cache.generated("gguf-" + name, [os.path.join(HERE, f) for f in sources], make, **kw)


@pytest.fixture(scope="session")
def model_file():
    def make(name, **kw):
        return cached_gguf(name, ["gguf_writer.py"], gguf_writer.make_model, **kw)
    return make
