# SPDX-License-Identifier: Apache-2.0
# test_94_hostile_broker_docker.py - the egress broker in Docker API containers (issue 14,
# brief broker4): config.json's docker_engine_broker gives the engine sandbox a broker.
#
# The stage-1 HTTPS upstream (brokerkit.Upstream, a netns of our own, test CA 1) stands in
# for api.openai.com. One daemon of our own, with `docker_engine_broker: ["openai=openai",
# "anthropic=anthropic"]`, is driven with the real docker CLI: a container (root in the
# guest, the attacker) calls $OPENAI_BASE_URL with $OPENAI_API_KEY from its environment and
# the upstream gets the real key, never the placeholder; the request's -e wins over the
# broker's variables; `docker inspect` shows Env as the client gave it; `docker exec` gets
# the variables. With require_sandbox each container's own sandbox has a placeholder of its
# own (the engine's is refused there); with interception a container that hard-codes
# https://api.openai.com is brokered; without the setting a container has none of them.
import json
import os

import pytest

import brokerkit as bk
import dockerkit as dk
from conftest import Home, new_home

KEY = "sk-REAL-docker-key-0c7e5a91"
AKEY = "sk-ant-REAL-docker-key-33b2"

pytestmark = [pytest.mark.hostile, dk.needs_cli,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")]

# Inside the container: the broker's variables as seen, then one request to
# $OPENAI_BASE_URL with $OPENAI_API_KEY (or argv[1]) over a plain socket (the image's
# python is minimal); prints "env ..." lines, then the status and the body.
CLIENT = bk.GUEST_ANSWER + r"""
import os, socket, sys
for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
          "KOSA8_BROKER_URL", "NODE_EXTRA_CA_CERTS", "X"):
    print("env", k, os.environ.get(k, "-"))
key = sys.argv[1] if len(sys.argv) > 1 else os.environ["OPENAI_API_KEY"]
base = os.environ["OPENAI_BASE_URL"]
host, _, path = base[7:].partition("/")
body = b'{"model":"m"}'
s = socket.create_connection((host, 80), timeout=60)
s.sendall(("POST /%s/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
           "Content-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
           % (path, host, key, len(body))).encode() + body)
print("status", *answer(s))
"""

# Interception: https://api.openai.com with the default trust store (SSL_CERT_FILE).
TLS_CLIENT = bk.GUEST_ANSWER + r"""
import os, socket, ssl
print("env NODE_EXTRA_CA_CERTS", os.environ.get("NODE_EXTRA_CA_CERTS", "-"))
ctx = ssl.create_default_context()
t = ctx.wrap_socket(socket.create_connection(("api.openai.com", 443), timeout=60),
                    server_hostname="api.openai.com")
t.sendall(("GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer %s\r\n"
           "Connection: close\r\n\r\n" % os.environ["OPENAI_API_KEY"]).encode())
print("status", answer(t)[0])
"""

ENGINE = {"docker_engine_memory_mib": 512, "docker_engine_cpus": 1, "docker_engine_disk_gb": 2}
RULES = ["openai=openai", "anthropic=anthropic"]


def envs(out):
    return {l.split()[1]: l.split(" ", 2)[2] for l in out.splitlines() if l.startswith("env ")}


def status(out):
    return [l for l in out.splitlines() if l.startswith("status ")][-1].split(" ", 2)[1]


tmp, up = bk.upstream_fixtures("k8bd")


@pytest.fixture(scope="module")
def h(up, python_layout):
    cfg = dict(ENGINE, docker_engine_broker=RULES, **bk.upstream_config(up))
    h = Home(new_home("k8bd-"))
    h.config = lambda **kw: write_config(h, dict(cfg, **kw))
    h.config()
    h.start()
    try:
        h("image", "load", python_layout, "--tag", dk.IMG, check=True, timeout=600)
        for name, val in (("openai", KEY), ("anthropic", AKEY)):
            p = h("secret", "set", name, "--stdin", input=val)
            assert p.returncode == 0, p.stderr
        yield h
    finally:
        h.stop()
        if os.environ.get("KOSA8_KEEP_HOME") is None:
            import shutil
            shutil.rmtree(h.path, ignore_errors=True)


def write_config(h, cfg):
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with open(os.path.join(h.path, "config.json"), "w") as f:
        json.dump(cfg, f)


def docker(h, *args, **kw):
    return dk.docker_cli(h, *args, **kw)


def test_docker_run_reaches_upstream_with_real_key(h, up):
    n0 = len(up.records())
    out = dk.ok(docker(h, "run", "--rm", "-e", "X=given", dk.IMG, "python3", "-c", CLIENT))
    e = envs(out)
    ph = e["OPENAI_API_KEY"]
    assert ph.startswith("k8-ph-") and len(ph) == 38, out
    assert e["ANTHROPIC_API_KEY"] == ph and e["X"] == "given"
    assert e["OPENAI_BASE_URL"] == "http://openai.broker.kosa8.internal/v1"
    assert e["ANTHROPIC_BASE_URL"] == "http://anthropic.broker.kosa8.internal"
    assert e["NODE_EXTRA_CA_CERTS"] == "-"      # no interception asked
    assert KEY not in out and AKEY not in out
    assert status(out) == "200", out
    recs = up.records()[n0:]
    assert len(recs) == 1, recs
    hdr = {k.lower(): v for k, v in recs[0]["headers"]}
    assert hdr["authorization"] == "Bearer " + KEY
    assert ph not in json.dumps(recs[0])
    # the engine is an ordinary sandbox with a broker: its rules, never a value
    st = h.json("sandbox", "broker", "docker-engine")
    assert st["rules"] == RULES and st["state"] == "up"
    assert st["stats"]["hosts"]["api.openai.com"]["requests"] >= 1
    assert KEY not in json.dumps(st)


def test_request_env_wins_inspect_shows_the_clients(h):
    cid = dk.ok(docker(h, "create", "-e", "OPENAI_BASE_URL=http://mine.invalid/v1", dk.IMG,
                       "python3", "-c", "import os,time; print('env OPENAI_API_KEY', "
                       "os.environ['OPENAI_API_KEY']); print('env OPENAI_BASE_URL', "
                       "os.environ['OPENAI_BASE_URL'], flush=True); time.sleep(120)")).strip()
    try:
        ins = json.loads(dk.ok(docker(h, "inspect", cid)))[0]
        # Config.Env is the client's (and the image's): the broker's are added in the guest
        assert "OPENAI_BASE_URL=http://mine.invalid/v1" in ins["Config"]["Env"]
        assert not any("k8-ph-" in v or v.startswith("OPENAI_API_KEY=")
                       for v in ins["Config"]["Env"]), ins["Config"]["Env"]
        dk.ok(docker(h, "start", cid))
        ex = dk.ok(docker(h, "exec", "-e", "Y=1", cid, "python3", "-c",
                          "import os; print(os.environ['OPENAI_API_KEY'], "
                          "os.environ['OPENAI_BASE_URL'], os.environ['Y'])")).split()
        assert ex[0].startswith("k8-ph-") and len(ex[0]) == 38
        assert ex[1:] == ["http://mine.invalid/v1", "1"], ex      # the container's Env wins
        logs = bk.wait_for(lambda: "OPENAI_BASE_URL" in (o := docker(h, "logs", cid).stdout)
                           and o, timeout=60)
        e = envs(logs)
        assert e["OPENAI_BASE_URL"] == "http://mine.invalid/v1"
        assert e["OPENAI_API_KEY"] == ex[0]
    finally:
        docker(h, "rm", "-f", cid)


def test_require_sandbox_placeholder_of_its_own(h, up):
    engine = envs(dk.ok(docker(h, "run", "--rm", dk.IMG, "python3", "-c", CLIENT)))
    h.config(require_sandbox=True)
    try:
        n0 = len(up.records())
        # the engine's placeholder is another sandbox's: refused by this one's broker
        out = dk.ok(docker(h, "run", "--rm", dk.IMG, "python3", "-c", CLIENT,
                           engine["OPENAI_API_KEY"]))
        own = envs(out)["OPENAI_API_KEY"]
        assert own.startswith("k8-ph-") and own != engine["OPENAI_API_KEY"]
        assert status(out) == "403" and "placeholder_wrong" in out, out
        assert len(up.records()) == n0, "a refused request reached the upstream"
        out = dk.ok(docker(h, "run", "--rm", dk.IMG, "python3", "-c", CLIENT))
        assert status(out) == "200", out
        hdr = {k.lower(): v for k, v in up.records()[-1]["headers"]}
        assert hdr["authorization"] == "Bearer " + KEY
        # each container's own sandbox went with it
        left = [s["name"] for s in h.json("sandbox", "ls") if s["name"].startswith("dk-")]
        assert left == [], left
    finally:
        h.config()


def test_interception_in_a_container(h, up):
    h.config(require_sandbox=True, docker_engine_broker=["openai=openai"],
             docker_engine_broker_intercept=True)
    try:
        n0 = len(up.records())
        out = dk.ok(docker(h, "run", "--rm", dk.IMG, "python3", "-c", TLS_CLIENT))
        assert "env NODE_EXTRA_CA_CERTS /etc/kosa8/broker-ca.crt" in out, out
        assert status(out) == "200", out
        recs = up.records()[n0:]
        assert len(recs) == 1 and recs[0]["path"] == "/v1/models", recs
        hdr = {k.lower(): v for k, v in recs[0]["headers"]}
        assert hdr["authorization"] == "Bearer " + KEY
    finally:
        h.config()


def test_without_the_setting_no_variables(h):
    h.config(require_sandbox=True, docker_engine_broker=None)
    try:
        out = dk.ok(docker(h, "run", "--rm", dk.IMG, "python3", "-c",
                           "import os; print(sorted(k for k in os.environ if 'OPENAI' in k or "
                           "'ANTHROPIC' in k or 'KOSA8' in k or k.endswith('CA_CERTS')))"))
        assert out.strip() == "[]", out
    finally:
        h.config()


def test_missing_secret_is_a_clear_docker_error(h):
    # a rule whose secret is not on the host: no sandbox is made, and the Docker client
    # shows why and what to do
    h.config(require_sandbox=True, docker_engine_broker=["openai=nosuch"])
    try:
        p = docker(h, "run", "--rm", dk.IMG, "true")
        assert p.returncode != 0, p.stdout
        assert "secret 'nosuch' is not set" in p.stderr and "kosa8 secret set nosuch" in \
            p.stderr, p.stderr
        assert not [s for s in h.json("sandbox", "ls") if s["name"].startswith("dk-")]
    finally:
        h.config()
