# SPDX-License-Identifier: Apache-2.0
# test_94_broker_node.py - the official `openai` and `@anthropic-ai/sdk` npm clients,
# unmodified, inside a sandbox with a broker (issue 14's client tests, brief broker4).
#
# The image is scripts/node-image.sh's (Debian's nodejs, the two packages installed with
# `npm i -E` on the host, tests/integration/broker_clients.mjs as /app/broker_clients.mjs),
# built once and cached under $KOSA8_CACHE. The stage-1 HTTPS upstream (brokerkit.Upstream,
# a netns of our own, test CA 1) stands in for api.openai.com and api.anthropic.com. One
# sandbox with `--broker openai=openai --broker anthropic=anthropic --egress deny` runs
# the clients with nothing but its environment (the placeholder, the broker's base URLs):
# the upstream gets the real keys, never the placeholder; a streamed answer arrives token
# by token. A second sandbox with `--broker-intercept` runs the OpenAI client with its
# default base URL (https://api.openai.com/v1), trusting the sandbox CA through
# NODE_EXTRA_CA_CERTS from its environment.
import json
import os
import subprocess

import pytest

import brokerkit as bk
from conftest import TOP, own_home, make_sandbox

KEY = "sk-REAL-node-openai-key-6a1f"
AKEY = "sk-ant-REAL-node-key-90c3"
IMG = "k8-node-sdk:test"

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root (debootstrap, netns)")]


@pytest.fixture(scope="module")
def node_layout():
    """scripts/node-image.sh's layout (built once, cached; needs npm and a Debian mirror)."""
    p = subprocess.run([os.path.join(TOP, "scripts", "node-image.sh")], capture_output=True,
                       text=True, timeout=1800)
    if p.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("node-image.sh failed: " + p.stderr[-2000:])
        pytest.skip("node-image.sh failed (npm or the Debian mirror unreachable?): " +
                    p.stderr[-300:])
    return p.stdout.strip().splitlines()[-1]


tmp, up = bk.upstream_fixtures("k8bn")


@pytest.fixture(scope="module")
def h(up, python_layout, node_layout):
    for hh in own_home("k8bn-", python_layout, config=bk.upstream_config(up)):
        hh("image", "load", node_layout, "--tag", IMG, check=True, timeout=600)
        for name, val in (("openai", KEY), ("anthropic", AKEY)):
            p = hh("secret", "set", name, "--stdin", input=val)
            assert p.returncode == 0, p.stderr
        yield hh


@pytest.fixture(scope="module")
def agent(h):
    return make_sandbox(h, "nodeagent", "--broker", "openai=openai", "--broker",
                        "anthropic=anthropic", "--egress", "deny", image=IMG)


@pytest.fixture(scope="module")
def icpt(h):
    return make_sandbox(h, "nodeicpt", "--broker", "openai=openai", "--broker-intercept",
                        "--egress", "deny", image=IMG)


def node(h, name, mode, *env):
    """broker_clients.mjs MODE in the sandbox: a streaming mode makes one call to warm node
    up first (its first parse on one small vCPU can take most of a second, which would
    bunch the measured tokens), and reports the second."""
    e = []
    for kv in env:
        e += ["-e", kv]
    calls = "2" if mode.endswith("stream") else "1"
    p = h("sandbox", "run", *e, name, IMG, "node", "/app/broker_clients.mjs", mode, calls,
          timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["openai", "openai-stream", "anthropic", "anthropic-stream"])
def test_official_sdk_in_a_sandbox(h, agent, up, mode):
    n0 = len(up.records())
    out = node(h, agent, mode)
    assert out["text"] == "Hello from the upstream", out
    recs = up.records()[n0:]
    assert len(recs) == (2 if mode.endswith("stream") else 1), recs
    recs = recs[-1:]
    hdr = {k.lower(): v for k, v in recs[0]["headers"]}
    if mode.startswith("openai"):
        assert hdr["authorization"] == "Bearer " + KEY
        assert recs[0]["path"] == "/v1/chat/completions"
    else:
        assert hdr["x-api-key"] == AKEY and "anthropic-version" in hdr
        assert recs[0]["path"] == "/v1/messages"
    assert "k8-ph-" not in json.dumps(recs[0])
    if mode.endswith("stream"):
        # five tokens, sent 0.3 s apart by the upstream: they arrive one by one, not at
        # the end (the guest's own clock: no host/guest clock comparison; it can run a
        # few per cent slow against the host's)
        ts = [c[0] for c in out["chunks"]]
        assert len(ts) == 5, out
        assert ts[-1] - ts[0] >= 600, ("not streamed", ts)


def test_official_sdk_default_base_url_intercepted(h, icpt, up):
    # OPENAI_BASE_URL unset (an empty value: the SDK's default, https://api.openai.com/v1);
    # Node trusts the sandbox CA only through NODE_EXTRA_CA_CERTS from the environment
    p = h("sandbox", "run", icpt, IMG, "node", "-e",
          "console.log(process.env.NODE_EXTRA_CA_CERTS)", timeout=300)
    assert p.stdout.strip().splitlines()[-1] == "/etc/kosa8/broker-ca.crt", p.stdout + p.stderr
    n0 = len(up.records())
    out = node(h, icpt, "openai-stream", "OPENAI_BASE_URL=")
    assert out["text"] == "Hello from the upstream", out
    recs = up.records()[n0:]
    assert len(recs) == 2, recs
    recs = recs[-1:]
    hdr = {k.lower(): v for k, v in recs[0]["headers"]}
    assert hdr["authorization"] == "Bearer " + KEY and hdr["host"] == "api.openai.com"
    ts = [c[0] for c in out["chunks"]]
    assert len(ts) == 5 and ts[-1] - ts[0] >= 600, ts
