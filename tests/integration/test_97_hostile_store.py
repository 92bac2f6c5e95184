# SPDX-License-Identifier: Apache-2.0
"""A snapshot store is never trusted more than a registry (issue 32).

Whoever can write the bucket of an unencrypted store can put any manifest and any chunk
there. Planted here through the official AWS client, as such a writer would: manifests
whose paths leave the snapshot (../, absolute), whose lengths do not add up, whose counts
pass every bound, whose settings ask for what `sandbox create` refuses, a manifest filed
under another snapshot's name, a manifest that decompresses to gigabytes, a chunk that
makes more bytes than it says. Each fork is refused with what was wrong, nothing is made
(no sandbox, no file outside the daemon's pull folder, which is gone after), and the
daemon goes on. The bytes are read by workers that are not root on the host, have no
capability, no_new_privs and a seccomp filter, shown from /proc while they work."""
import hashlib
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import KOSA8, Home, new_home
from storekit import S3Server, add_store, aws_put, manifest_key, seal_plain

pytestmark = pytest.mark.hostile

ESCAPE = "/tmp/k8-hostile-store-escape"
CS = 65536


@pytest.fixture(scope="module")
def s3():
    s = S3Server(bucket="evil")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def h(s3):
    d = Home(new_home("k8hs-"))
    d.start()
    add_store(d, s3, "evil").check_returncode()
    yield d
    d.stop()
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(d.path, ignore_errors=True)


def chunk(s3, data):
    """data as a chunk of the bucket; its id."""
    cid = hashlib.sha256(data).hexdigest()
    aws_put(s3, "chunks/" + cid, seal_plain(data))
    return cid


def base(s3, label):
    """A manifest that reads back well: a small machine, two layers."""
    dev = chunk(s3, b"devices of nobody" * 10)
    lay = chunk(s3, b"qcow2? no" * 100)
    return {
        "kosa8_manifest": 1, "kind": "checkpoint", "sandbox": "victim", "label": label,
        "created": "2026-12-06T00:00:00Z", "kosa8_version": "0", "guest_digest": "",
        "chunk_size": CS, "encrypted": False,
        "config": {"cpus": 1, "memory_mib": 256, "disk_gb": 1, "memory": "file",
                   "layer": "layer-1.qcow2", "chain": ["layer-1.qcow2", "scratch.qcow2"],
                   "egress": "deny"},
        "images": [],
        "files": [
            {"path": "state/devices", "size": 170, "mode": 384, "chunks": [dev]},
            {"path": "state/memory", "size": 256 << 20, "mode": 384,
             "chunks": [None] * ((256 << 20) // CS)},
            {"path": "disk/layer-1.qcow2", "size": 900, "mode": 384, "chunks": [lay]},
            {"path": "disk/scratch.qcow2", "size": 900, "mode": 384, "chunks": [lay]},
        ],
    }


def plant(s3, m, key_name=None, raw=None):
    name = key_name or "%s/%s" % (m["sandbox"], m["label"])
    aws_put(s3, manifest_key("checkpoint", name), raw or seal_plain(json.dumps(m).encode()))


def refused(h, label, want):
    """Fork victim/label: refused saying `want`, nothing left behind, the daemon fine."""
    name = "h-" + label.lower()
    p = h("sandbox", "fork", "--from", "evil:victim/" + label, "--name", name, timeout=300)
    assert p.returncode != 0, p.stdout
    assert want in p.stderr, p.stderr
    assert name not in [s["name"] for s in h.json("sandbox", "ls")]
    assert not os.path.exists(os.path.join(h.path, "sandboxes", name))
    assert not os.path.exists(ESCAPE)
    assert not [d for d in os.listdir(os.path.join(h.path, "stores")) if d.startswith(".")]
    assert h.json("daemon", "status")["accel"]
    return p.stderr


@pytest.mark.parametrize("label,edit,want", [
    ("dotdot", lambda m: m["files"][0].update(path="../../../../tmp/k8-hostile-store-escape"),
     "kosa8 never writes"),
    ("absolute", lambda m: m["files"][0].update(path=ESCAPE), "kosa8 never writes"),
    ("inner", lambda m: m["files"][0].update(path="state/../../x"), "kosa8 never writes"),
    ("unknown", lambda m: m["files"][2].update(path="disk/evil"), "no snapshot has"),
    ("twice", lambda m: m["files"][3].update(path="disk/layer-1.qcow2"), "twice"),
    ("length", lambda m: m["files"][0].update(size=CS * 5), "one chunk per chunk"),
    ("negative", lambda m: m["files"][0].update(size=-1), "not a number in range"),
    ("setuid", lambda m: m["files"][0].update(mode=0o4755), "not a number in range"),
    ("nfiles", lambda m: m.update(files=m["files"] * 17), "at most 64"),
    ("nchunks", lambda m: m["files"][1].update(size=((1 << 20) + 1) * CS,
                                                chunks=[None] * ((1 << 20) + 1)),
     "more chunks than kosa8 reads"),
    ("cpus", lambda m: m["config"].update(cpus=100000), "'cpus'"),
    ("chain", lambda m: m["config"].update(chain=["layer-1.qcow2", "../../etc/shadow"]),
     "'chain'"),
    ("egress", lambda m: m["config"].update(egress="open-everything"), "egress"),
    ("image", lambda m: m.update(images=[{"ref": "x", "digest": "sha256:" + "a" * 64,
                                          "file": "disk/layer-1.qcow2", "slot": 0}]),
     "not in the file its digest names"),
    ("version", lambda m: m.update(kosa8_manifest=99), "version 99"),
])
def test_hostile_manifest_refused(h, s3, label, edit, want):
    m = base(s3, label)
    edit(m)
    plant(s3, m)
    refused(h, label, want)


def test_manifest_filed_under_another_name(h, s3):
    m = base(s3, "real")
    plant(s3, m, key_name="victim/Stolen")
    refused(h, "Stolen", "another snapshot")


def test_manifest_bomb(h, s3):
    # 200 MB of white space in a few hundred KB: the worker stops at 96 MiB
    z = subprocess.run("head -c 200000000 /dev/zero | tr '\\0' ' ' | zstd -q -3 -c",
                       shell=True, capture_output=True, check=True).stdout
    assert len(z) < 1 << 20
    plant(s3, {"sandbox": "victim", "label": "bomb"}, raw=b"K8C1\0" + z)
    refused(h, "bomb", "decompresses to more than")


def test_chunk_longer_than_it_says(h, s3):
    m = base(s3, "long")
    big = os.urandom(CS + 100)          # an object that makes more than its 170 bytes
    cid = hashlib.sha256(big).hexdigest()
    aws_put(s3, "chunks/" + cid, seal_plain(big))
    m["files"][0]["chunks"] = [cid]
    plant(s3, m)
    err = refused(h, "long", cid)
    assert "state/devices" in err


def test_workers_are_jailed(h, s3):
    """The chunk decoders of a pull, seen from /proc while they wait for chunks."""
    m = base(s3, "slow")
    m["files"][1]["chunks"][7] = chunk(s3, os.urandom(CS))
    plant(s3, m)
    s3.fault("delay", "GET", after=0, count=40, ms=1500)
    p = subprocess.Popen([KOSA8, "sandbox", "fork", "--from", "evil:victim/slow", "--name",
                          "h-slow"], env=dict(os.environ, KOSA8_HOME=h.path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = {}
    try:
        end = time.time() + 60
        while time.time() < end and len(seen) < 2:
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    st = open("/proc/%s/status" % pid).read()
                except OSError:
                    continue
                if "\nName:\tkosa8d-chunks\n" not in "\n" + st:
                    continue
                f = dict(l.split(":\t", 1) for l in st.splitlines() if ":\t" in l)
                seen[pid] = f
            time.sleep(0.1)
    finally:
        s3.fault("none")
        p.communicate(timeout=300)
    assert seen, "no chunk decoder seen"
    for f in seen.values():
        assert f["Uid"].split()[0] != "0" and f["Gid"].split()[0] != "0", f["Uid"]
        assert int(f["CapEff"], 16) == 0 and int(f["CapPrm"], 16) == 0
        assert f["NoNewPrivs"].strip() == "1" and f["Seccomp"].strip() == "2"


def test_offline_reaches_no_store(h, s3):
    """An offline daemon (config.json "offline") opens no connection, to a store neither."""
    cfg = os.path.join(h.path, "config.json")
    with open(cfg, "w") as f:
        json.dump({"offline": True}, f)
    try:
        before = s3.stats()["requests"]
        for args in (("store", "ls", "evil"), ("sandbox", "fork", "--from", "evil:victim/x",
                                               "--name", "h-off"), ("store", "gc", "evil")):
            p = h(*args, timeout=120)
            assert p.returncode != 0 and "offline" in p.stderr, (args, p.stderr)
        assert s3.stats()["requests"] == before
    finally:
        os.unlink(cfg)
