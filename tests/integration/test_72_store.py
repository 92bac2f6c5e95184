# SPDX-License-Identifier: Apache-2.0
"""test_72_store.py - snapshot stores between two hosts: two daemons with two homes on one
machine stand in for them (A and B), sharing one S3 bucket (s3rver on loopback, every
signature checked by the AWS SDK's signer; storekit.py).

A checkpoint pushed from A is forked on B, which has never seen the sandbox nor loaded its
image: the fork has A's files and A's running process. A second push of a sandbox that
changed little sends a small part of it (printed). A push cut short by the server is
taken up by the next, which sends only what is missing. A chunk the bucket changed is
refused with its id and file named, and nothing is made of it. An encrypted store holds
only ciphertext (the AWS client reads every object), and a host without its key cannot
add it. A sandbox paused on A to the store resumes on B; A's copy then refuses to run.
gc removes only what no snapshot names. Each of these is audited where it happened."""
import hashlib
import json
import os
import shutil

import pytest

from conftest import Home, new_home, own_home, make_sandbox
from storekit import (S3Server, add_store, aws_get, aws_keys, aws_put, open_plain,
                      seal_plain, wait_for)

IMAGE = "python:3.12-slim"
# A process that holds a value only in its memory, and a file on the disk.
PROC = ["python3", "-c", "import time; secret = 6 * 7; time.sleep(10**6)"]


@pytest.fixture(scope="module")
def s3():
    s = S3Server()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def a(python_layout):
    yield from own_home("k8A-", python_layout)


@pytest.fixture(scope="module")
def b():
    h = Home(new_home("k8B-"))
    h.start()
    yield h
    h.stop()
    if os.environ.get("KOSA8_KEEP_HOME") is None:
        shutil.rmtree(h.path, ignore_errors=True)


@pytest.fixture(scope="module")
def src(a, b, s3):
    """Sandbox `src` on A with a process and a file, checkpoint c1; the store on both."""
    add_store(a, s3, "mine").check_returncode()
    add_store(b, s3, "mine").check_returncode()
    make_sandbox(a, "src")
    cid = a("sandbox", "start", "src", IMAGE, *PROC, check=True).stdout.strip()
    a("sandbox", "exec", "src", cid, "sh", "-c", "echo written-on-A > /root/a.txt",
      check=True)
    a("checkpoint", "src", "--label", "c1", check=True, timeout=300)
    return cid


def result(h, *args, timeout=600):
    """The last JSON line of a command with progress (--json: progress lines, then it)."""
    p = h(*args, "--json", check=True, timeout=timeout)
    return json.loads(p.stdout.strip().splitlines()[-1])


def exec_out(h, name, cid, *cmd):
    return h("sandbox", "exec", name, cid, *cmd, check=True, timeout=300).stdout


def procs(h, name, cid):
    """The command lines of the processes in container cid."""
    return exec_out(h, name, cid, "python3", "-c",
                    "import os\nfor p in os.listdir('/proc'):\n if p.isdigit():\n"
                    "  print(open('/proc/%s/cmdline' % p).read().replace(chr(0), ' '))")


def actions(h):
    return [r["action"] for r in h.json("audit", "ls")]


def manifest_of(s3, sandbox, label):
    """The JSON of a snapshot's manifest in the (unencrypted) bucket, and its key."""
    key = "manifests/" + hashlib.sha256(
        b"manifest\0checkpoint\0" + ("%s/%s" % (sandbox, label)).encode()).hexdigest()
    return key, json.loads(open_plain(aws_get(s3, key)))


def test_push_then_fork_on_other_host(a, b, s3, src):
    res = result(a, "checkpoint", "push", "src", "c1", "--to", "mine", timeout=600)
    print("first push: %(data)d bytes of data, %(chunks_sent)d of %(chunks)d chunks, "
          "%(sent)d bytes sent, %(ms)d ms" % res)
    # an empty store: every distinct chunk goes (two chunks of the same bytes go once)
    assert 0 < res["chunks_sent"] <= res["chunks"] and res["sent"] > 0
    snaps = b.json("store", "ls", "mine")["snapshots"]
    assert [(s["sandbox"], s["label"]) for s in snaps] == [("src", "c1")]
    # B has neither the sandbox nor its image: everything comes from the store
    assert "python" not in b("image", "ls", "--json", check=True).stdout
    out = result(b, "sandbox", "fork", "--from", "mine:src/c1", "--name", "forked", timeout=600)
    assert out["forked_from"] == {"store": "mine", "sandbox": "src", "checkpoint": "c1"}
    assert out["pulled"]["chunks"] == res["chunks"]
    assert exec_out(b, "forked", src, "cat", "/root/a.txt").strip() == "written-on-A"
    assert "secret = 6 * 7" in procs(b, "forked", src)
    assert "store.push" in actions(a)
    assert {"store.pull", "sandbox.fork"} <= set(actions(b))
    # nothing of the pull is left beside the fork
    assert not [d for d in os.listdir(os.path.join(b.path, "stores")) if d.startswith(".pull")]


def test_second_push_sends_little(a, s3, src):
    first = manifest_of(s3, "src", "c1")[1]
    a("sandbox", "exec", "src", src, "sh", "-c", "echo small change > /root/b.txt", check=True)
    a("checkpoint", "src", "--label", "c2", check=True, timeout=300)
    res = result(a, "checkpoint", "push", "src", "c2", "--to", "mine", timeout=600)
    frac = res["chunks_sent"] / res["chunks"]
    print("second push of a barely changed sandbox: %d of %d chunks (%.1f%%), %d of %d "
          "bytes of data" % (res["chunks_sent"], res["chunks"], 100 * frac,
                             res["chunks_sent"] * (1 << 20), res["data"]))
    assert first["chunk_size"] == 1 << 20 and frac < 0.25, res


def test_push_every_checkpoint(a, s3, src):
    """config.json "push_checkpoints": a checkpoint is pushed by itself, in the background."""
    cfg = os.path.join(a.path, "config.json")
    with open(cfg, "w") as f:
        json.dump({"push_checkpoints": "mine"}, f)
    try:
        out = a.json("checkpoint", "src", "--label", "auto1", timeout=300)
        assert out["pushing_to"] == "mine"
        labels = lambda: [s["label"] for s in a.json("store", "ls", "mine")["snapshots"]]  # noqa
        assert wait_for(lambda: "auto1" in labels(), timeout=300), labels()
        recs = [r for r in a.json("audit", "ls") if r["action"] == "store.push"]
        assert any(r["details"].get("by") == "auto" and r["details"].get("label") == "auto1"
                   for r in recs), recs
    finally:
        os.unlink(cfg)
    a("store", "rm", "mine:src/auto1", check=True)


def test_push_cut_short_is_resumed(a, s3, src):
    a("sandbox", "exec", "src", src, "sh", "-c",
      "head -c 24000000 /dev/urandom > /root/noise.bin", check=True, timeout=300)
    a("checkpoint", "src", "--label", "c3", check=True, timeout=300)
    had = len(aws_keys(s3, "chunks/"))
    s3.fault("drop", "PUT", after=6)
    p = a("checkpoint", "push", "src", "c3", "--to", "mine", "--json", timeout=600)
    s3.fault("none")
    assert p.returncode != 0, p.stdout
    assert "c3" not in [s["label"] for s in a.json("store", "ls", "mine")["snapshots"]]
    mid = len(aws_keys(s3, "chunks/"))
    assert mid == had + 6
    res = result(a, "checkpoint", "push", "src", "c3", "--to", "mine", timeout=600)
    print("interrupted push resumed: %d chunks were in, %d sent now, %d in all" %
          (mid - had, res["chunks_sent"], res["chunks"]))
    assert res["chunks_sent"] == len(aws_keys(s3, "chunks/")) - mid
    assert "store.push.failed" in actions(a)


def test_changed_chunk_refused_naming_it(b, s3, src):
    key, m = manifest_of(s3, "src", "c1")
    mem = [f for f in m["files"] if f["path"] == "state/memory"][0]
    victim = [c for c in mem["chunks"] if c][3]
    obj = aws_get(s3, "chunks/" + victim)
    aws_put(s3, "chunks/" + victim, seal_plain(b"not what was pushed" * 1000))
    try:
        p = b("sandbox", "fork", "--from", "mine:src/c1", "--name", "tampered", timeout=600)
        assert p.returncode != 0
        assert victim in p.stderr and "state/memory" in p.stderr, p.stderr
        assert "tampered" not in [s["name"] for s in b.json("sandbox", "ls")]
        assert not os.path.exists(os.path.join(b.path, "sandboxes", "tampered"))
        assert "store.pull.failed" in actions(b)
        assert b.json("daemon", "status")
    finally:
        aws_put(s3, "chunks/" + victim, obj)


def test_encrypted_store_is_ciphertext(a, b, src):
    vault = S3Server(bucket="vault")
    try:
        add_store(a, vault, "vault", "--encrypt").check_returncode()
        key = a("store", "key", "vault", check=True).stdout.strip()
        assert len(key) == 64
        # without the key another host cannot use it
        p = add_store(b, vault, "vault")
        assert p.returncode != 0 and "encrypted" in p.stderr, p.stderr
        kf = os.path.join(b.path, "vault.key")
        with open(os.open(kf, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(key + "\n")
        add_store(b, vault, "vault", "--key-file", kf).check_returncode()
        marker = "KOSA8-SECRET-MARKER-" * 50
        a("sandbox", "exec", "src", src, "sh", "-c",
          "for i in 1 2 3 4 5 6 7 8; do echo %s; done > /root/marker.txt" % marker,
          check=True)
        a("checkpoint", "src", "--label", "enc", check=True, timeout=300)
        result(a, "checkpoint", "push", "src", "enc", "--to", "vault", timeout=600)
        keys = aws_keys(vault)
        assert any(k.startswith("chunks/") for k in keys)
        for k in keys:
            obj = aws_get(vault, k)
            if k == "kosa8-store":
                assert b"key_check" in obj
                continue
            assert obj[:5] == b"K8C1\x01", k
            assert b"KOSA8-SECRET" not in obj and b"python" not in obj and b"src" not in obj[:64]
        assert "manifests/" + hashlib.sha256(b"manifest\0checkpoint\0src/enc").hexdigest() \
            not in keys
        result(b, "sandbox", "fork", "--from", "vault:src/enc", "--name", "from-vault",
               timeout=600)
        assert marker in exec_out(b, "from-vault", src, "cat", "/root/marker.txt")
        assert "store.key" in actions(a)
    finally:
        vault.stop()


def test_pause_to_store_resume_on_other_host(a, b, s3, src):
    a("sandbox", "exec", "src", src, "sh", "-c", "echo before-the-move > /root/move.txt",
      check=True)
    res = result(a, "sandbox", "pause", "src", "--to", "mine", timeout=600)
    assert res["kind"] == "paused" and res["chunks_sent"] < res["chunks"], res
    assert [s["state"] for s in a.json("sandbox", "ls") if s["name"] == "src"] == ["paused"]
    # the store's copy counts now: A's does not resume by use
    p = a("sandbox", "exec", "src", src, "true")
    assert p.returncode != 0 and "paused to a store" in p.stderr, p.stderr
    out = result(b, "sandbox", "resume", "src", timeout=600)
    assert out["from"] == "store" and out["pulled"]["chunks"] > 0
    assert exec_out(b, "src", src, "cat", "/root/move.txt").strip() == "before-the-move"
    assert "secret = 6 * 7" in procs(b, "src", src)
    assert "paused" not in [s["kind"] for s in b.json("store", "ls", "mine")["snapshots"]]
    # A's copy is out of date: refused, left as it is
    p = a("sandbox", "resume", "src")
    assert p.returncode != 0 and "no longer there" in p.stderr, p.stderr
    assert [s["state"] for s in a.json("sandbox", "ls") if s["name"] == "src"] == ["paused"]


def test_gc_removes_only_unnamed(a, b, s3, src):
    before = aws_keys(s3, "chunks/")
    a("store", "rm", "mine:src/c3", check=True)
    assert "c3" not in [s["label"] for s in a.json("store", "ls", "mine")["snapshots"]]
    res = result(a, "store", "gc", "mine", "--grace", "0", timeout=600)
    print("gc: %(removed)d chunks removed (%(removed_bytes)d bytes), %(live_chunks)d named "
          "by %(manifests)d snapshots" % res)
    assert res["removed"] > 0 and len(aws_keys(s3, "chunks/")) == len(before) - res["removed"]
    assert "store.gc" in actions(a)
    # what remains still forks
    result(b, "sandbox", "fork", "--from", "mine:src/c2", "--name", "after-gc", timeout=600)
    assert exec_out(b, "after-gc", src, "cat", "/root/b.txt").strip() == "small change"
